/* rr_hist.c - the clock and the latency histogram of `sovia bench rr`:
 * log-linear buckets (HdrHistogram's layout), cheap to fill per request and
 * to merge. */
#include "rr.h"

#include <errno.h>
#include <time.h>

int64_t rr_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void rr_sleep_until(int64_t ns)
{
    struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};

    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

#define SUB ((uint64_t)1 << RR_SUB_BITS)

static unsigned index_of(uint64_t v)
{
    unsigned k;

    if (v < SUB)
        return (unsigned)v;
    k = 63u - (unsigned)__builtin_clzll(v); /* v in [2^k, 2^(k+1)), k >= SUB_BITS */
    if (k > RR_TOP_BITS)
        return RR_HIST_N - 1;
    /* The octave's SUB buckets, each 2^(k - SUB_BITS) wide. */
    return (unsigned)(SUB + (k - RR_SUB_BITS) * SUB + ((v >> (k - RR_SUB_BITS)) - SUB));
}

/* The bucket's smallest value and its width. */
static void bucket_range(unsigned i, uint64_t *lo, uint64_t *width)
{
    unsigned k;

    if (i < SUB) {
        *lo = i;
        *width = 1;
        return;
    }
    k = (unsigned)((i - SUB) / SUB) + RR_SUB_BITS;
    *width = (uint64_t)1 << (k - RR_SUB_BITS);
    *lo = ((uint64_t)1 << k) + (uint64_t)((i - SUB) % SUB) * *width;
}

void rr_hist_add(struct rr_hist *h, uint64_t ns)
{
    h->b[index_of(ns)]++;
    h->count++;
    h->sum_ns += ns;
    if (ns > h->max_ns)
        h->max_ns = ns;
}

void rr_hist_merge(struct rr_hist *into, const struct rr_hist *from)
{
    for (unsigned i = 0; i < RR_HIST_N; i++)
        into->b[i] += from->b[i];
    into->count += from->count;
    into->sum_ns += from->sum_ns;
    if (from->max_ns > into->max_ns)
        into->max_ns = from->max_ns;
}

double rr_hist_quantile(const struct rr_hist *h, double q)
{
    uint64_t rank, seen = 0;

    if (h->count == 0)
        return 0.0;
    /* The smallest value with at least q of the samples at or below it. */
    rank = (uint64_t)(q * (double)h->count + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > h->count)
        rank = h->count;
    for (unsigned i = 0; i < RR_HIST_N; i++) {
        seen += h->b[i];
        if (seen >= rank) {
            uint64_t lo, width;
            double mid;

            bucket_range(i, &lo, &width);
            mid = (double)lo + (double)(width - 1) / 2.0;
            return mid > (double)h->max_ns ? (double)h->max_ns : mid;
        }
    }
    return (double)h->max_ns;
}
