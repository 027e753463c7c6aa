/*
 * bench_anatomy.c - `sovia bench anatomy`: the stages of one small message
 * (seed 002 Tables 1-3) through vipl/shm (transport vi) and sovia, from the
 * probe points of vipl_trace.h.
 *
 * Both processes write their probes into rings in memory they share (made
 * before the fork). The driver first measures the plain one-way latency
 * with tracing off, then tells the peer to trace (BENCH_OP_TRACE), traces
 * itself and runs the same ping-pong again. A message's stages are found in
 * its window, from the driver's call to its next call: each stage is the
 * first mark of its point, from its side, with the message's length, after
 * the stage before it (credits and acknowledgements have other lengths;
 * the reply's marks come from the other side). A window missing a mark is
 * left out. The times are per stage medians over the windows.
 */
#include "bench_anatomy.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <vipl_trace.h>

/* Events per round trip and side, with room for credits and acks. */
#define EVENTS_PER_TRIP 24u
#define DEFAULT_ITERS 20000u

static const struct anatomy_stage vipl_stages[] = {
    {VIPX_TP_CALL, DRIVER, NULL},
    {VIPX_TP_POST, DRIVER, "user: send credit checked, descriptor filled"},
    {VIPX_TP_DOORBELL, DRIVER, "post: descriptor decoded and checked"},
    {VIPX_TP_DATA, DRIVER, "provider: peer's receive slot read, data written"},
    {VIPX_TP_CMPL, DRIVER, "provider: completion prepared"},
    {VIPX_TP_DETECT, PEER, "completion written, peer detects it"},
    {VIPX_TP_REAP, PEER, "reap: completion validated, descriptor completed"},
    {VIPX_TP_RETURN, PEER, "returned to the caller"},
};

static const struct anatomy_stage sovia_stages[] = {
    {VIPX_TP_CALL, DRIVER, NULL},
    {VIPX_TP_SOV_SEND, DRIVER, "sovia: socket looked up"},
    {VIPX_TP_POST, DRIVER, "sovia: credit, copy into the send slot, descriptor"},
    {VIPX_TP_DOORBELL, DRIVER, "post: descriptor decoded and checked"},
    {VIPX_TP_DATA, DRIVER, "provider: peer's receive slot read, data written"},
    {VIPX_TP_CMPL, DRIVER, "provider: completion prepared"},
    {VIPX_TP_DETECT, PEER, "completion written, peer detects it"},
    {VIPX_TP_REAP, PEER, "reap: completion validated, descriptor completed"},
    {VIPX_TP_SOV_HANDLED, PEER, "sovia: packet checked, bytes queued"},
    {VIPX_TP_RETURN, PEER, "sovia: bytes copied out, returned to the caller"},
};


static const struct anatomy_path paths[] = {
    {"vi", "vipl", vipl_stages, sizeof vipl_stages / sizeof vipl_stages[0]},
    {"sovia", "sovia", sovia_stages, sizeof sovia_stages / sizeof sovia_stages[0]},
};

VIPX_TRACE_RING *bench_anatomy_rings[2];
#define rings bench_anatomy_rings
static size_t ring_bytes;

bool bench_anatomy_traced(const char *transport)
{
    if (bench_anatomy_kernel_path(transport))
        return true;
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (strcmp(paths[i].transport, transport) == 0)
            return true;
    return false;
}

uint64_t bench_anatomy_iters(const struct bench_params *p)
{
    return p->iters ? p->iters : DEFAULT_ITERS;
}

int bench_anatomy_prepare(uint64_t iters)
{
    uint64_t cap = iters * EVENTS_PER_TRIP + 1024;
    size_t one = sizeof(VIPX_TRACE_RING) + cap * sizeof(VIPX_TRACE_EVENT);
    void *m = mmap(NULL, 2 * one, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    if (m == MAP_FAILED) {
        perror("sovia bench anatomy: mmap");
        return -1;
    }
    ring_bytes = 2 * one;
    memset(m, 0, ring_bytes); /* faulted in now, not by the probes */
    for (int i = 0; i < 2; i++) {
        rings[i] = (VIPX_TRACE_RING *)((char *)m + (size_t)i * one);
        rings[i]->Capacity = cap;
    }
    return 0;
}

void bench_anatomy_release(void)
{
    if (rings[0])
        munmap(rings[0], ring_bytes);
    rings[0] = rings[1] = NULL;
}

void bench_anatomy_peer_start(void)
{
    VipxTraceStart(rings[PEER]);
}

/* The events of a side's ring, oldest first; none if it wrapped (it is
 * sized for the run: then the messages are not complete, and said so). */
static const VIPX_TRACE_EVENT *events(enum side s, size_t *n)
{
    const VIPX_TRACE_RING *r = rings[s];
    uint64_t count = __atomic_load_n(&r->Count, __ATOMIC_ACQUIRE);

    *n = count <= r->Capacity ? (size_t)count : 0;
    return r->Events;
}

/* First mark of `point` with `arg` in [*i, n) at or after `from` and before
 * `to`; advances *i past it. */
static bool find(const VIPX_TRACE_EVENT *ev, size_t n, size_t *i, uint32_t point, uint32_t arg,
                 uint64_t from, uint64_t to)
{
    for (size_t k = *i; k < n && ev[k].Tsc < to; k++)
        if (ev[k].Point == point && ev[k].Arg == arg && ev[k].Tsc >= from) {
            *i = k + 1;
            return true;
        }
    return false;
}

struct anatomy_windows {
    double *us[NSTAGES_MAX]; /* per stage, per complete window */
    double *total;           /* call to return, per complete window */
    size_t complete, seen;
};

static void analyse(const struct anatomy_path *pa, uint32_t arg, double ticks_per_us, double mark,
                    struct anatomy_windows *w)
{
    size_t n[2], cur[2] = {0, 0};
    const VIPX_TRACE_EVENT *ev[2] = {events(DRIVER, &n[0]), events(PEER, &n[1])};
    size_t ci = 0;

    w->complete = w->seen = 0;
    while (find(ev[DRIVER], n[DRIVER], &ci, VIPX_TP_CALL, arg, 0, UINT64_MAX)) {
        uint64_t start = ev[DRIVER][ci - 1].Tsc, end = UINT64_MAX, prev = start;
        size_t next = ci;
        uint64_t t[NSTAGES_MAX];
        bool ok = true;

        if (find(ev[DRIVER], n[DRIVER], &next, VIPX_TP_CALL, arg, 0, UINT64_MAX))
            end = ev[DRIVER][next - 1].Tsc;
        cur[DRIVER] = ci;
        while (cur[PEER] < n[PEER] && ev[PEER][cur[PEER]].Tsc < start)
            cur[PEER]++;
        t[0] = start;
        for (size_t s = 1; s < pa->n && ok; s++) {
            enum side sd = pa->stages[s].side;
            ok = find(ev[sd], n[sd], &cur[sd], pa->stages[s].point, arg, prev, end);
            if (ok)
                prev = t[s] = ev[sd][cur[sd] - 1].Tsc;
        }
        w->seen++;
        if (!ok)
            continue;
        /* Each stage carries the cost of the mark that ends it. */
        double sum = 0;
        for (size_t s = 1; s < pa->n; s++) {
            double d = (double)(t[s] - t[s - 1]) - mark;
            sum += w->us[s][w->complete] = (d > 0 ? d : 0) / ticks_per_us;
        }
        w->total[w->complete++] = sum;
    }
}

/* What one probe adds to the stage it ends: the median spacing of marks
 * written back to back (seed 002 subtracted its 43 cycles the same way).
 * Uses the driver's ring, then empties it. */
double bench_anatomy_mark_cost(void)
{
    enum { N = 2001 };
    double d[N - 1];
    const VIPX_TRACE_EVENT *ev = rings[DRIVER]->Events;

    VipxTraceStart(rings[DRIVER]);
    for (int i = 0; i < N; i++)
        VIPX_TRACE(VIPX_TP_COUNT, 0);
    VipxTraceStart(NULL);
    for (int i = 1; i < N; i++)
        d[i - 1] = (double)(ev[i].Tsc - ev[i - 1].Tsc);
    rings[DRIVER]->Count = 0;
    return bench_median(d, N - 1);
}

double bench_anatomy_clock_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void out_rows(const struct anatomy_path *pa, const struct anatomy_windows *w,
                     double plain_us,
                     double traced_us, double ticks_per_us, double mark_us, bool json)
{
    double sum = 0, med[NSTAGES_MAX];

    for (size_t s = 1; s < pa->n; s++)
        sum += med[s] = bench_median(w->us[s], w->complete);
    double total = bench_median(w->total, w->complete);
    if (!json)
        printf("%-6s %-55s %10s\n", "path", "stage", "us");
    for (size_t s = 1; s < pa->n; s++) {
        if (json)
            printf("{\"path\":\"%s\",\"stage\":\"%s\",\"us\":%.4f}\n", pa->path,
                   pa->stages[s].name, med[s]);
        else
            printf("%-6s %-55s %10.3f\n", pa->path, pa->stages[s].name, med[s]);
    }
    if (json)
        printf("{\"path\":\"%s\",\"summary\":true,\"stages_sum_us\":%.4f,"
               "\"traced_total_us\":%.4f,\"traced_one_way_us\":%.4f,\"one_way_us\":%.4f,"
               "\"windows\":%zu,\"complete\":%zu,\"clock\":\"%s\",\"ticks_per_us\":%.3f,"
               "\"mark_us\":%.4f}\n",
               pa->path, sum, total, traced_us, plain_us, w->seen, w->complete,
               VipxTraceClockIsTsc() ? "tsc" : "monotonic_raw", ticks_per_us, mark_us);
    else
        printf("%-6s %-55s %10.3f\n%-6s %-55s %10.3f\n%-6s %-55s %10.3f\n"
               "(%zu of %zu messages had every mark; clock %s, %.1f ticks/us; each\n"
               "stage less one mark's cost, %.4f us)\n",
               pa->path, "sum of the stages' medians", sum, pa->path,
               "one-way latency, tracing on (ping-pong)", traced_us, pa->path,
               "one-way latency, tracing off (ping-pong)", plain_us, w->complete, w->seen,
               VipxTraceClockIsTsc() ? "tsc" : "CLOCK_MONOTONIC_RAW", ticks_per_us, mark_us);
}

int bench_anatomy_finish(const struct anatomy_path *pa, uint32_t arg, uint64_t iters,
                         double ticks_per_us, double mark, double plain_us, double traced_us,
                         bool json)
{
    struct anatomy_windows w = {0};
    int rc = -1;

    for (size_t s = 1; s < pa->n; s++)
        if (!(w.us[s] = malloc(iters * sizeof(double))))
            goto out;
    if (!(w.total = malloc(iters * sizeof(double))))
        goto out;
    analyse(pa, arg, ticks_per_us, mark, &w);
    /* tcp loses some to a softirq run elsewhere (ksoftirqd) on a busy host:
     * the share is printed; too few messages to speak of is a failure. */
    if (w.complete < iters / 10 || w.complete == 0) {
        fprintf(stderr, "sovia bench anatomy: only %zu of %zu messages had every mark\n",
                w.complete, w.seen);
        goto out;
    }
    out_rows(pa, &w, plain_us, traced_us, ticks_per_us, mark / ticks_per_us, json);
    rc = 0;
out:
    for (size_t s = 1; s < pa->n; s++)
        free(w.us[s]);
    free(w.total);
    return rc;
}

int bench_anatomy_drive(const struct bench_transport *t, void *ep, const struct bench_params *p)
{
    const struct anatomy_path *pa = NULL;
    uint64_t iters = bench_anatomy_iters(p);
    struct bench_lat_sample plain, traced;

    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (strcmp(paths[i].transport, t->name) == 0)
            pa = &paths[i];
    if (!pa)
        return -1;
    /* Off: the latency the stages should add up to (and a warm-up). */
    if (bench_measure_lat(t, ep, p->size, iters, iters / 10 < 100 ? 100 : iters / 10,
                          &plain) != 0)
        return -1;
    struct bench_cmd c = {.op = BENCH_OP_TRACE};
    memcpy(t->send_buf(ep), &c, sizeof c);
    if (t->send_msg(ep, BENCH_CTRL_LEN) != 0)
        return -1;
    double mark = bench_anatomy_mark_cost();
    VipxTraceStart(rings[DRIVER]);
    uint64_t k0 = VipxTraceClock();
    double s0 = bench_anatomy_clock_s();
    if (bench_measure_lat(t, ep, p->size, iters, 0, &traced) != 0)
        return -1;
    double ticks_per_us = (double)(VipxTraceClock() - k0) / ((bench_anatomy_clock_s() - s0) * 1e6);
    VipxTraceStart(NULL); /* the quit that follows is not a message of the run */
    return bench_anatomy_finish(pa, (uint32_t)p->size, iters, ticks_per_us, mark, plain.p50_us,
                                traced.p50_us, p->json);
}
