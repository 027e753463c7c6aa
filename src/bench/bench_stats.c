/* bench_stats.c - clock and summary statistics for the measurement loops. */
#include "bench_internal.h"

#include <stdlib.h>
#include <time.h>

double bench_now(void)
{
    struct timespec ts;
    /* MONOTONIC: immune to wall-clock steps during a run. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, size_t n)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof *v, cmp_double);
    if (n % 2)
        return v[n / 2];
    return (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

double bench_mean(const double *v, size_t n)
{
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    return n ? sum / (double)n : 0.0;
}
