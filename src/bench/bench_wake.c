/*
 * bench_wake.c - `sovia bench wake`: what waking a blocked thread costs,
 * the papers' Tsync (seed 000 §5.2: 17 us on a uniprocessor, 31 us on a
 * dual, Linux 2.2), which bounds any design that hands messages from a
 * handler or notify thread to the application thread. Two threads of this
 * process pass a token back and forth through one mutex and two condition
 * variables, each sleeping until the other signals; one-way = half the
 * round trip. The threads run on two CPUs (a cross-CPU wake-up) or, with
 * --same-cpu, on one (a switch between threads).
 */
#include "bench_internal.h"

#include <pthread.h>
#include <stdlib.h>

#define WAKE_BATCH 100
#define WAKE_WARMUP 1000

struct wake {
    pthread_mutex_t mu;
    pthread_cond_t cv[2]; /* [0] the driver sleeps on it, [1] the partner */
    uint64_t turn;        /* even: the driver's turn, odd: the partner's */
    uint64_t total;       /* round trips the partner answers */
    int cpu;
};

static void *partner(void *arg)
{
    struct wake *w = arg;

    if (w->cpu >= 0)
        bench_pin_self(w->cpu); /* the calling thread only */
    pthread_mutex_lock(&w->mu);
    for (uint64_t i = 0; i < w->total; i++) {
        while (!(w->turn & 1))
            pthread_cond_wait(&w->cv[1], &w->mu);
        w->turn++;
        pthread_cond_signal(&w->cv[0]);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* n round trips from the driver's side; returns the seconds they took. */
static double round_trips(struct wake *w, uint64_t n)
{
    double t0 = bench_now();

    pthread_mutex_lock(&w->mu);
    for (uint64_t i = 0; i < n; i++) {
        w->turn++;
        pthread_cond_signal(&w->cv[1]);
        while (w->turn & 1)
            pthread_cond_wait(&w->cv[0], &w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return bench_now() - t0;
}

int bench_run_wake(const struct bench_params *p)
{
    uint64_t iters = p->iters ? p->iters : 20000, nb = (iters + WAKE_BATCH - 1) / WAKE_BATCH;
    struct wake w = {.mu = PTHREAD_MUTEX_INITIALIZER,
                     .cv = {PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER}};
    struct bench_lat_sample s = {.size = 0, .iters = nb * WAKE_BATCH};
    int cpus[2] = {-1, -1};
    double *samples = calloc(nb, sizeof *samples), total = 0;
    pthread_t th;

    if (!samples)
        return BENCH_EXIT_FAIL;
    if (bench_pick_cpus(cpus) < 2 && !p->same_cpu)
        fprintf(stderr, "sovia bench: note: fewer than 2 CPUs available, wake runs unpinned\n");
    if (cpus[0] >= 0 && bench_pin_self(cpus[0]) != 0) {
        free(samples);
        return BENCH_EXIT_FAIL;
    }
    w.cpu = p->same_cpu ? cpus[0] : cpus[1];
    w.total = WAKE_WARMUP + nb * WAKE_BATCH;
    if (pthread_create(&th, NULL, partner, &w) != 0) {
        perror("sovia bench: wake: pthread_create");
        free(samples);
        return BENCH_EXIT_FAIL;
    }
    round_trips(&w, WAKE_WARMUP);
    for (uint64_t b = 0; b < nb; b++) {
        double t = round_trips(&w, WAKE_BATCH);
        samples[b] = t / WAKE_BATCH / 2 * 1e6;
        total += t;
    }
    pthread_join(th, NULL);
    s.mean_us = total / (double)s.iters / 2 * 1e6;
    s.p50_us = bench_median(samples, nb);
    bench_out_lat(p->same_cpu ? "wake-same-cpu" : "wake", NULL, &s, p->json, false);
    free(samples);
    return BENCH_EXIT_OK;
}
