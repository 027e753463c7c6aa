/*
 * vipl_trace.h - probe points for the anatomy of one message (seed 002).
 *
 * Probes sit on the message path of libvipl (post, the hand-off to the
 * provider, data written, completion written, the receiver's detection and
 * reaping), of libsovia (send entered, packet handled) and of `sovia bench`
 * (the user's call and its return). Each is one predicted branch on
 * VipxTraceOn, 0 unless a program calls VipxTraceStart: tracing that is off
 * costs a load and a not-taken branch.
 *
 * When on, a probe appends {TSC, point, argument} to the calling thread's
 * ring, a buffer the program gave VipxTraceStart (shared memory, so that a
 * parent can read a child's ring). The TSC is read with rdtsc after an
 * lfence (CLOCK_MONOTONIC_RAW in nanoseconds where there is no TSC): the
 * clock the kernel's x86-tsc trace clock reads, comparable across CPUs on
 * a machine with an invariant TSC.
 */
#ifndef VIPL_TRACE_H
#define VIPL_TRACE_H

#include <stdint.h>

#include <vipl.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The points; the argument is the message's byte count where one exists. */
enum vipx_trace_point {
    VIPX_TP_CALL = 1,  /* the program calls send (bench) */
    VIPX_TP_SOV_SEND,  /* libsovia: sov_do_send entered */
    VIPX_TP_POST,      /* VipPostSend entered */
    VIPX_TP_DOORBELL,  /* descriptor checked, handed to the provider */
    VIPX_TP_DATA,      /* shm: payload written into the peer's memory */
    VIPX_TP_CMPL,      /* shm: completion written, before its sequence store */
    VIPX_TP_DETECT,    /* shm: the receiver sees the completion's sequence */
    VIPX_TP_REAP,      /* shm: the receive descriptor completed (VipRecvDone) */
    VIPX_TP_SOV_HANDLED, /* libsovia: a DATA packet's bytes are readable */
    VIPX_TP_RETURN,    /* the program's receive returned (bench) */
    VIPX_TP_COUNT
};

typedef struct {
    uint64_t Tsc;
    uint32_t Point;
    uint32_t Arg;
} VIPX_TRACE_EVENT;

/* A ring: Count events were written, the last Capacity are kept. */
typedef struct {
    uint64_t Count;
    uint64_t Capacity;
    VIPX_TRACE_EVENT Events[];
} VIPX_TRACE_RING;

extern int VipxTraceOn;

/* Probes of the calling thread go to Ring (Capacity set by the caller),
 * and tracing is turned on for the process. Ring NULL: this thread's
 * probes are dropped (tracing stays on for the others). */
void VipxTraceStart(VIPX_TRACE_RING *Ring);
void VipxTraceMark(uint32_t Point, uint32_t Arg);
/* The trace clock now (ticks), and whether it is the TSC. */
uint64_t VipxTraceClock(void);
int VipxTraceClockIsTsc(void);

/* libvipl reads a flag of its own (provider.h): no GOT load on its path. */
#ifndef VIPX_TRACE_FLAG
#define VIPX_TRACE_FLAG VipxTraceOn
#endif

#define VIPX_TRACE(point, arg)                                                                \
    do {                                                                                      \
        if (__builtin_expect(__atomic_load_n(&VIPX_TRACE_FLAG, __ATOMIC_RELAXED), 0))         \
            VipxTraceMark((point), (uint32_t)(arg));                                          \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif /* VIPL_TRACE_H */
