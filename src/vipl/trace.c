/*
 * trace.c - the probes' ring (vipl_trace.h): off by default, one thread's
 * ring per thread, written only by that thread.
 */
#include <time.h>

#include "core.h"
#include <vipl_trace.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define HAVE_TSC 1
#else
#define HAVE_TSC 0
#endif

/* Two flags, set together: a program (or libsovia) reads the exported
 * one, libvipl its own without a GOT load. */
VIPL_EXPORT int VipxTraceOn;
int vipl_trace_on;
static __thread VIPX_TRACE_RING *ring;

VIPL_EXPORT uint64_t VipxTraceClock(void)
{
#if HAVE_TSC
    /* lfence: the read waits for what came before it (a store about to be
     * published is not yet visible when its mark is taken). */
    _mm_lfence();
    return __rdtsc();
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}

VIPL_EXPORT int VipxTraceClockIsTsc(void)
{
    return HAVE_TSC;
}

VIPL_EXPORT void VipxTraceStart(VIPX_TRACE_RING *Ring)
{
    ring = Ring;
    __atomic_store_n(&VipxTraceOn, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&vipl_trace_on, 1, __ATOMIC_RELAXED);
}

void vipl_trace_mark_at(uint32_t point, uint64_t arg, uint64_t tsc)
{
    VIPX_TRACE_RING *r = ring;
    if (!r || !r->Capacity)
        return;
    VIPX_TRACE_EVENT *e = &r->Events[r->Count % r->Capacity];
    e->Tsc = tsc;
    e->Point = point;
    e->Arg = (uint32_t)arg;
    __atomic_store_n(&r->Count, r->Count + 1, __ATOMIC_RELEASE);
}

VIPL_EXPORT void VipxTraceMark(uint32_t Point, uint32_t Arg)
{
    vipl_trace_mark_at(Point, Arg, VipxTraceClock());
}
