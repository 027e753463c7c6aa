/*
 * bench_loops.c - the measurement loops. The driver (parent) times; the
 * peer (child) runs bench_peer_serve(), a generic echo/sink server.
 */
#include "bench_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <vipl_trace.h>

/* Round trips per timed batch: enough that two clock reads per batch are
 * noise next to sub-microsecond round trips, few enough for a median. */
#define BATCH_MAX 100
#define BATCH_MIN_COUNT 20

/* Sweep: time each size for about this long (Ong & Farrell aim at a
 * fixed time per point so small sizes get many repetitions). */
#define SWEEP_TARGET_S 0.075
#define SWEEP_CALIBRATE_S 0.005
#define SWEEP_STOP_US 1e6 /* stop after a size whose one-way time exceeds 1 s */

static int send_ctrl(const struct bench_transport *t, void *ep, uint32_t op, size_t size,
                     uint64_t count)
{
    struct bench_cmd c = {.op = op, .size = (uint32_t)size, .count = count};

    memcpy(t->send_buf(ep), &c, sizeof c);
    return t->send_msg(ep, BENCH_CTRL_LEN);
}

static int recv_ctrl(const struct bench_transport *t, void *ep, struct bench_cmd *c)
{
    const void *d;

    if (t->recv_msg(ep, BENCH_CTRL_LEN, &d) != 0)
        return -1;
    memcpy(c, d, sizeof *c);
    return 0;
}

int bench_peer_serve(const struct bench_transport *t, void *ep)
{
    for (;;) {
        struct bench_cmd c;
        const void *d;
        uint64_t n = 0;

        if (recv_ctrl(t, ep, &c) != 0)
            return -1;
        switch (c.op) {
        case BENCH_OP_PINGPONG:
            for (uint64_t i = 0; i < c.count; i++) {
                if (t->recv_msg(ep, c.size, &d) != 0)
                    return -1;
                VIPX_TRACE(VIPX_TP_RETURN, c.size);
                if (t->send_msg(ep, c.size) != 0)
                    return -1;
            }
            break;
        case BENCH_OP_TRACE:
            bench_anatomy_peer_start();
            break;
        case BENCH_OP_STREAM:
            do {
                if (t->recv_msg(ep, c.size, &d) != 0)
                    return -1;
                n++;
            } while (*(const unsigned char *)d != BENCH_STREAM_LAST);
            /* The ack carries the count so the driver can check nothing was lost. */
            if (send_ctrl(t, ep, BENCH_OP_STREAM, c.size, n) != 0)
                return -1;
            break;
        case BENCH_OP_IDLE: {
            struct timespec ts = {(time_t)(c.count / 1000000), (long)(c.count % 1000000) * 1000};
            while (nanosleep(&ts, &ts) != 0)
                ;
            if (send_ctrl(t, ep, BENCH_OP_IDLE, 0, 0) != 0)
                return -1;
            break;
        }
        case BENCH_OP_QUIT:
            return send_ctrl(t, ep, BENCH_OP_QUIT, 0, 0);
        default:
            fprintf(stderr, "%s: peer got unknown command %u\n", t->name, c.op);
            return -1;
        }
    }
}

int bench_send_quit(const struct bench_transport *t, void *ep)
{
    struct bench_cmd c;

    if (send_ctrl(t, ep, BENCH_OP_QUIT, 0, 0) != 0 || recv_ctrl(t, ep, &c) != 0)
        return -1;
    if (c.op != BENCH_OP_QUIT) {
        fprintf(stderr, "%s: bad reply to quit (op %u)\n", t->name, c.op);
        return -1;
    }
    return 0;
}

static uint64_t batch_for(uint64_t iters)
{
    uint64_t batch = iters / BATCH_MIN_COUNT;

    if (batch > BATCH_MAX)
        batch = BATCH_MAX;
    return batch < 1 ? 1 : batch;
}

/* iters round trips; per-batch one-way seconds into samples (may be NULL). */
static int pingpong(const struct bench_transport *t, void *ep, size_t size, uint64_t iters,
                    double *samples, size_t *nsamples, double *total)
{
    uint64_t batch = batch_for(iters), done = 0;
    size_t k = 0;
    double sum = 0.0;
    const void *d;

    if (send_ctrl(t, ep, BENCH_OP_PINGPONG, size, iters) != 0)
        return -1;
    while (done < iters) {
        uint64_t n = iters - done < batch ? iters - done : batch;
        double t0 = bench_now(), dt;

        for (uint64_t i = 0; i < n; i++) {
            VIPX_TRACE(VIPX_TP_CALL, size); /* anatomy: the message's start */
            if (t->send_msg(ep, size) != 0 || t->recv_msg(ep, size, &d) != 0)
                return -1;
        }
        dt = bench_now() - t0;
        if (samples)
            samples[k++] = dt / (double)n / 2.0;
        sum += dt;
        done += n;
    }
    if (nsamples)
        *nsamples = k;
    *total = sum;
    return 0;
}

int bench_measure_lat(const struct bench_transport *t, void *ep, size_t size, uint64_t iters,
                      uint64_t warmup, struct bench_lat_sample *out)
{
    size_t cap = (size_t)(iters / batch_for(iters) + 1), n = 0;
    double *samples, total;

    if (warmup && pingpong(t, ep, size, warmup, NULL, NULL, &total) != 0)
        return -1;
    samples = malloc(cap * sizeof *samples);
    if (!samples) {
        fprintf(stderr, "%s: out of memory\n", t->name);
        return -1;
    }
    if (pingpong(t, ep, size, iters, samples, &n, &total) != 0) {
        free(samples);
        return -1;
    }
    out->size = size;
    out->iters = iters;
    out->p50_us = bench_median(samples, n) * 1e6;
    out->mean_us = total / (double)iters / 2.0 * 1e6;
    free(samples);
    return 0;
}

int bench_measure_bw(const struct bench_transport *t, void *ep, size_t size, double seconds,
                     struct bench_bw_sample *out)
{
    /* Reading the clock after every tiny message would cost as much as the
     * message; large messages are slow enough to check each time. */
    uint64_t every = size >= 4096 ? 1 : 64, n = 0;
    /* Warm-up moves about 16 MiB each way (10 to 1000 round trips). */
    uint64_t warm = ((size_t)16 << 20) / size;
    unsigned char *buf;
    double t0, t1, total;
    struct bench_cmd ack;

    warm = warm < 10 ? 10 : warm > 1000 ? 1000 : warm;
    /* Warm-up: touch the buffers and connection at this size. */
    if (pingpong(t, ep, size, warm, NULL, NULL, &total) != 0)
        return -1;
    if (send_ctrl(t, ep, BENCH_OP_STREAM, size, 0) != 0)
        return -1;
    buf = t->send_buf(ep);
    buf[0] = BENCH_STREAM_MORE;
    t0 = bench_now();
    for (;;) {
        if (t->send_msg(ep, size) != 0)
            return -1;
        n++;
        if (n % every == 0 && bench_now() - t0 >= seconds)
            break;
    }
    buf[0] = BENCH_STREAM_LAST;
    if (t->send_msg(ep, size) != 0 || recv_ctrl(t, ep, &ack) != 0)
        return -1;
    t1 = bench_now();
    n++;
    if (ack.op != BENCH_OP_STREAM || ack.count != n) {
        fprintf(stderr, "%s: peer acknowledged %llu messages, %llu were sent\n", t->name,
                (unsigned long long)ack.count, (unsigned long long)n);
        return -1;
    }
    out->size = size;
    out->msgs = n;
    out->seconds = t1 - t0;
    out->gbps = (double)size * (double)n * 8.0 / out->seconds / 1e9;
    return 0;
}

uint64_t bench_iters_for(double round_trip_s, double target_s, uint64_t lo, uint64_t hi)
{
    double n = round_trip_s > 0 ? target_s / round_trip_s : (double)hi;

    if (n < (double)lo)
        return lo;
    if (n > (double)hi)
        return hi;
    return (uint64_t)n;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

size_t bench_sweep_sizes(size_t max_size, size_t **sizes)
{
    size_t cap = 3 * 64, n = 0, out = 0;
    size_t *v = malloc(cap * sizeof *v);

    if (!v)
        return 0;
    for (size_t c = 1; c <= max_size && c <= BENCH_SIZE_LIMIT; c *= 2) {
        size_t cand[3] = {c >= 4 ? c - 3 : 0, c, c + 3};
        for (int i = 0; i < 3; i++)
            if (cand[i] >= 1 && cand[i] <= max_size)
                v[n++] = cand[i];
    }
    qsort(v, n, sizeof *v, cmp_size);
    for (size_t i = 0; i < n; i++)
        if (out == 0 || v[out - 1] != v[i])
            v[out++] = v[i];
    *sizes = v;
    return out;
}

int bench_measure_sweep(const struct bench_transport *t, void *ep, size_t max_size, bool json,
                        const char *config)
{
    size_t *sizes, n = bench_sweep_sizes(max_size, &sizes);
    int rc = 0;

    if (n == 0)
        return -1;
    for (size_t i = 0; i < n && rc == 0; i++) {
        struct bench_lat_sample s;
        uint64_t it = 1, iters;
        double total = 0.0;

        /* Calibrate (and warm up): grow the count until it is measurable. */
        for (;;) {
            if (pingpong(t, ep, sizes[i], it, NULL, NULL, &total) != 0) {
                rc = -1;
                break;
            }
            if (total >= SWEEP_CALIBRATE_S || it >= (1u << 20))
                break;
            it *= 4;
        }
        if (rc != 0)
            break;
        iters = bench_iters_for(total / (double)it, SWEEP_TARGET_S, 1, 10000000);
        if (bench_measure_lat(t, ep, sizes[i], iters, 0, &s) != 0) {
            rc = -1;
            break;
        }
        bench_out_lat(t->name, config, &s, json, true);
        if (s.mean_us > SWEEP_STOP_US)
            break;
    }
    free(sizes);
    return rc;
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

int bench_measure_idle(const struct bench_transport *t, void *ep, double seconds,
                       struct bench_idle_sample *out)
{
    struct bench_cmd c;

    /* The clock starts before the request: the peer may begin its idle
     * period before this process runs again (a loaded machine). */
    double t0 = bench_now(), c0 = cpu_seconds();
    if (send_ctrl(t, ep, BENCH_OP_IDLE, 0, (uint64_t)(seconds * 1e6)) != 0)
        return -1;
    if (recv_ctrl(t, ep, &c) != 0)
        return -1;
    double t1 = bench_now(), c1 = cpu_seconds();
    if (c.op != BENCH_OP_IDLE) {
        fprintf(stderr, "%s: bad reply to idle (op %u)\n", t->name, c.op);
        return -1;
    }
    out->seconds = t1 - t0;
    out->cpu_percent = out->seconds > 0 ? 100.0 * (c1 - c0) / out->seconds : 0.0;
    return 0;
}
