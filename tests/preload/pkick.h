/*
 * pkick.h - for the preload tests of waits interrupted by a signal
 * (poll.c, epoll.c): a thread that sends a signal to another after a
 * while, and the calling thread's CPU time (to tell a spinning wait).
 */
#ifndef SOVIA_TESTS_PRELOAD_PKICK_H
#define SOVIA_TESTS_PRELOAD_PKICK_H

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "pharness.h"

struct kicker {
    pthread_t target, t;
    int sig, after_ms;
};

static inline void *kicker_run(void *arg)
{
    struct kicker *k = arg;
    p_sleep_ms(k->after_ms);
    pthread_kill(k->target, k->sig);
    return NULL;
}

/* Sends `sig` to the calling thread `after_ms` from now; kick_join() after. */
static inline void kick_me(struct kicker *k, int sig, int after_ms)
{
    *k = (struct kicker){.target = pthread_self(), .sig = sig, .after_ms = after_ms};
    CHECK_EQ(pthread_create(&k->t, NULL, kicker_run, k), 0);
}

static inline void kick_join(struct kicker *k)
{
    CHECK_EQ(pthread_join(k->t, NULL), 0);
}

static inline double thread_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

#endif /* SOVIA_TESTS_PRELOAD_PKICK_H */
