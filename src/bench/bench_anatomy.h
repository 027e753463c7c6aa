/*
 * bench_anatomy.h - what `sovia bench anatomy`'s probe paths (vi, sovia:
 * bench_anatomy.c) and kernel paths (udp, tcp: bench_anatomy_kernel.c)
 * share: a path's stages, the two sides' rings, the analysis and output.
 */
#ifndef SOVIA_BENCH_ANATOMY_H
#define SOVIA_BENCH_ANATOMY_H

#include "bench_internal.h"

#include <vipl_trace.h>

enum side { DRIVER, PEER };

/* A mark and the stage that ends there (the first mark starts the message). */
struct anatomy_stage {
    uint32_t point;
    enum side side;
    const char *name; /* what the time up to this mark was spent on */
};

struct anatomy_path {
    const char *transport, *path;
    const struct anatomy_stage *stages;
    size_t n;
};

#define NSTAGES_MAX 12

/* The sides' rings, shared by driver and peer (mapped before the fork),
 * each sized for `iters` round trips; sorted by time when analysed. */
extern VIPX_TRACE_RING *bench_anatomy_rings[2];

/* The median spacing of back-to-back marks (the driver's ring, emptied). */
double bench_anatomy_mark_cost(void);
double bench_anatomy_clock_s(void); /* CLOCK_MONOTONIC_RAW seconds */
/* Stages of every message with all its marks; prints them. 0 or -1. */
int bench_anatomy_finish(const struct anatomy_path *pa, uint32_t arg, uint64_t iters,
                         double ticks_per_us, double mark, double plain_us, double traced_us,
                         bool json);
/* bench_anatomy_kernel.c: udp and tcp, from tracepoints (runs its own
 * processes); NULL for other transports. */
const struct anatomy_path *bench_anatomy_kernel_path(const char *transport);
int bench_anatomy_kernel(const struct anatomy_path *pa, const struct bench_params *p);

#endif /* SOVIA_BENCH_ANATOMY_H */
