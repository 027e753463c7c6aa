/* bench_output.c - results as JSON lines or an aligned table on stdout. */
#include "bench_internal.h"

#include <inttypes.h>
#include <stdio.h>

/* The table header is printed once per process, before the first row. */
static bool header_done;

/* Wide enough for the longest transport name (sovia-adaptive). */
#define TW "-14"

/* JSON: the config field of configurable transports. */
static void json_config(const char *config)
{
    if (config)
        printf(",\"config\":\"%s\"", config);
}

/* Table: a last column for it, in the header and in each row. */
static void table_config(const char *text)
{
    if (text)
        printf(" %s", text);
}

void bench_out_lat(const char *transport, const char *config, const struct bench_lat_sample *s,
                   bool json, bool with_mbps)
{
    /* The median resists the preemption a shared machine adds to the mean. */
    double mbps = s->p50_us > 0 ? (double)s->size * 8.0 / s->p50_us : 0.0;

    if (json) {
        printf("{\"transport\":\"%s\"", transport);
        json_config(config);
        printf(",\"size\":%zu,\"iters\":%" PRIu64
               ",\"one_way_p50_us\":%.6g,\"one_way_mean_us\":%.6g",
               s->size, s->iters, s->p50_us, s->mean_us);
        if (with_mbps)
            printf(",\"mbps\":%.6g", mbps);
        printf("}\n");
    } else {
        if (!header_done) {
            printf("%" TW "s %10s %10s %16s %16s", "transport", "size", "iters",
                   "one-way p50 us", "one-way mean us");
            if (with_mbps)
                printf(" %12s", "Mbps");
            table_config(config ? "config" : NULL);
            printf("\n");
            header_done = true;
        }
        printf("%" TW "s %10zu %10" PRIu64 " %16.3f %16.3f", transport, s->size, s->iters,
               s->p50_us, s->mean_us);
        if (with_mbps)
            printf(" %12.2f", mbps);
        table_config(config);
        printf("\n");
    }
    /* Sweeps run for a while; show each row as soon as it exists. */
    fflush(stdout);
}

void bench_out_bw(const char *transport, const char *config, const struct bench_bw_sample *s,
                  bool json)
{
    if (json) {
        printf("{\"transport\":\"%s\"", transport);
        json_config(config);
        printf(",\"size\":%zu,\"iters\":%" PRIu64 ",\"seconds\":%.6g,\"gbps\":%.6g}\n",
               s->size, s->msgs, s->seconds, s->gbps);
    } else {
        if (!header_done) {
            printf("%" TW "s %10s %12s %10s %10s", "transport", "size", "messages", "seconds",
                   "Gbps");
            table_config(config ? "config" : NULL);
            printf("\n");
            header_done = true;
        }
        printf("%" TW "s %10zu %12" PRIu64 " %10.3f %10.3f", transport, s->size, s->msgs,
               s->seconds, s->gbps);
        table_config(config);
        printf("\n");
    }
    fflush(stdout);
}

void bench_out_idle(const char *transport, const char *config,
                    const struct bench_idle_sample *s, bool json)
{
    if (json) {
        printf("{\"transport\":\"%s\"", transport);
        json_config(config);
        printf(",\"seconds\":%.6g,\"cpu_percent\":%.6g}\n", s->seconds, s->cpu_percent);
    } else {
        printf("%" TW "s %10s %12s", "transport", "seconds", "cpu %");
        table_config(config ? "config" : NULL);
        printf("\n%" TW "s %10.3f %12.3f", transport, s->seconds, s->cpu_percent);
        table_config(config);
        printf("\n");
    }
    fflush(stdout);
}

void bench_out_unavailable(const char *transport, const char *why, bool json)
{
    if (json) {
        printf("{\"transport\":\"%s\",\"unavailable\":true}\n", transport);
        fflush(stdout);
    } else {
        fprintf(stderr, "%s: unavailable (%s)\n", transport, why);
    }
}
