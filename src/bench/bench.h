/*
 * bench.h - the measurement engine behind `sovia bench`.
 *
 * The CLI fills a bench_params and calls bench_run(); everything else
 * (transports, processes, timing, output) lives in this library so other
 * front ends (tests, a future `sovia report`) can drive it too.
 */
#ifndef SOVIA_BENCH_H
#define SOVIA_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Exit codes shared by the library and the tool. */
enum {
    BENCH_EXIT_OK = 0,
    BENCH_EXIT_FAIL = 1,        /* the run failed (transport error, peer died) */
    BENCH_EXIT_USAGE = 2,       /* bad arguments */
    BENCH_EXIT_UNAVAILABLE = 3, /* the transport cannot run on this machine */
};

enum bench_mode { BENCH_LAT, BENCH_BW, BENCH_SWEEP, BENCH_IDLE, BENCH_WAKE, BENCH_RR, BENCH_CONNS,
                  BENCH_CONNRATE, BENCH_EPOLL, BENCH_ANATOMY };

struct bench_params {
    enum bench_mode mode;
    const char *transport;
    size_t size;     /* lat, bw: message size in bytes */
    uint64_t iters;  /* lat: round trips; 0 picks the default */
    double seconds;  /* bw: streaming time; idle: silent time */
    size_t max_size; /* sweep: largest size tried */
    bool json;       /* one JSON object per line instead of a table */
    const char *config; /* --config: a sovia configuration label; NULL: none */
    bool same_cpu;      /* wake: both threads on one CPU */
    /* rr (rr_run.c): pairs of client and server processes (or threads),
     * connections per client, warm-up before `seconds` are counted. */
    unsigned pairs, conns;
    bool threads;
    double warmup; /* < 0: the default */
    const char *rr_worker; /* the sovia-rr executable (libc transports) */
    unsigned long count;   /* conns, epoll: connections held at once */
    unsigned long active;  /* epoll: connections busy at once (0: 1 % of count) */
    unsigned clients;      /* connrate: client processes */
    /* lat, bw, sweep over the vi transports: NetPIPE-VIA's ring of `ring`
     * receive descriptors of `frag` bytes each (0, 0: not used). */
    unsigned ring;
    size_t frag;
};

#define BENCH_DEFAULT_LAT_ITERS 100000u
/* idle moves only control messages: the size the transports are set up for. */
#define BENCH_CTRL_SIZE 64u
#define BENCH_DEFAULT_BW_SECONDS 2.0
#define BENCH_DEFAULT_MAX_SIZE ((size_t)8 << 20)
/* anatomy: round trips at most (its rings keep every mark of a run). */
#define BENCH_ANATOMY_MAX_ITERS 200000u
/* Largest --size / --max-size accepted at all (per-transport limits apply too). */
#define BENCH_SIZE_LIMIT ((size_t)1 << 30)
/* --ring / --frag (vi transports): descriptors, piece size, receive memory. */
#define BENCH_RING_MAX 1024u
#define BENCH_FRAG_MIN ((size_t)64)
#define BENCH_RING_BYTES_MAX ((size_t)64 << 20)

/* rr: limits and defaults (the worker program checks the same, rr.h). */
#define BENCH_RR_MAX_PAIRS 256
#define BENCH_RR_MAX_CONNS 1024
#define BENCH_RR_MAX_SIZE ((size_t)1 << 20)
#define BENCH_RR_DEFAULT_SIZE 64
#define BENCH_RR_DEFAULT_SECONDS 3.0
/* conns, connrate (conn.h has the same). */
#define BENCH_CONNS_MAX_COUNT 1000000ul
#define BENCH_CONNRATE_MAX_CLIENTS 64u

/* Runs one benchmark and prints its results; returns a BENCH_EXIT_* code. */
int bench_run(const struct bench_params *p);

/* NULL-terminated list of transport names, and a one-line summary of each. */
const char *const *bench_transport_names(void);
const char *bench_transport_summary(const char *name);

/* NULL-terminated list of the --config labels (the sovia transports'). */
const char *const *bench_config_labels(void);

/* The default --iters for `lat` at a given size (caps the bytes moved). */
uint64_t bench_default_lat_iters(size_t size);

#endif /* SOVIA_BENCH_H */
