/*
 * transport_ucx.c - UCX numbers from Debian's ucx_perftest (ucx-utils):
 * a server and a client process, pinned to different CPUs, and the
 * client's "Final:" line parsed. UCX is only a reference point, so it
 * runs the tool rather than linking the library.
 */
#include "bench_internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define UCX_PROG "ucx_perftest"
#define CLIENT_RETRY_S 5.0     /* the server needs a moment to listen */
#define SERVER_EXIT_TIMEOUT_S 10.0
#define SWEEP_TARGET_S 0.075

/* The Final: line (MB = 1048576 bytes; latencies are one-way already). */
struct ucx_final {
    double iters, lat_p50, lat_avg, lat_overall, bw_avg, bw_overall, rate_avg, rate_overall;
};

/* An unused TCP port for ucx_perftest's own connection setup (-p), so
 * runs in parallel do not meet on the default port. */
static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static int parse_final(const char *out, struct ucx_final *f)
{
    const char *line = strstr(out, "Final:");

    if (!line)
        return -1;
    return sscanf(line, "Final: %lf %lf %lf %lf %lf %lf %lf %lf", &f->iters, &f->lat_p50,
                  &f->lat_avg, &f->lat_overall, &f->bw_avg, &f->bw_overall, &f->rate_avg,
                  &f->rate_overall) == 8
               ? 0
               : -1;
}

/* One server/client pair running test with size and iters. */
static int ucx_run(const char *test, size_t size, uint64_t iters, uint64_t warmup,
                   struct ucx_final *f)
{
    char port[16], s_size[32], s_iters[32], s_warm[32];
    int cpus[2] = {-1, -1}, p = free_port(), rc = -1;
    double deadline;
    char *out = NULL;
    pid_t server;

    if (p < 0) {
        fprintf(stderr, "ucx: no free TCP port\n");
        return -1;
    }
    if (bench_pick_cpus(cpus) < 2) {
        static bool noted;
        if (!noted)
            fprintf(stderr, "sovia bench: note: fewer than 2 CPUs available, ucx runs unpinned\n");
        noted = true;
        cpus[0] = cpus[1] = -1;
    }
    snprintf(port, sizeof port, "%d", p);
    snprintf(s_size, sizeof s_size, "%zu", size);
    snprintf(s_iters, sizeof s_iters, "%llu", (unsigned long long)iters);
    snprintf(s_warm, sizeof s_warm, "%llu", (unsigned long long)warmup);

    char *sargv[] = {UCX_PROG, "-p", port, NULL};
    char *cargv[] = {UCX_PROG, "localhost", "-p", port, "-t", (char *)test, "-s", s_size,
                     "-n", s_iters, "-w", s_warm, NULL};

    server = bench_spawn(sargv, cpus[0], NULL);
    if (server < 0)
        return -1;
    deadline = bench_now() + CLIENT_RETRY_S;
    for (;;) {
        int fd, status;
        pid_t client = bench_spawn(cargv, cpus[1], &fd);
        if (client < 0)
            break;
        free(out);
        out = bench_slurp(fd);
        close(fd);
        status = bench_wait_child(client, 600.0);
        if (status == 0) {
            rc = 0;
            break;
        }
        /* Only "nobody listening yet" is worth another try. */
        if (!out || !strstr(out, "Connection refused") || bench_now() > deadline) {
            fprintf(stderr, "ucx: %s failed (status %d)%s%s", UCX_PROG, status,
                    out ? ":\n" : "\n", out ? out : "");
            break;
        }
        nanosleep(&(struct timespec){.tv_nsec = 20000000}, NULL);
    }
    if (rc == 0 && parse_final(out, f) != 0) {
        fprintf(stderr, "ucx: no Final: line in %s output:\n%s", UCX_PROG, out);
        rc = -1;
    }
    free(out);
    if (rc != 0)
        bench_kill_child(server);
    else if (bench_wait_child(server, SERVER_EXIT_TIMEOUT_S) != 0)
        fprintf(stderr, "ucx: note: %s server did not exit cleanly\n", UCX_PROG);
    return rc;
}

static uint64_t warmup_for(uint64_t iters)
{
    uint64_t w = iters / 10;
    return w < 1 ? 1 : w > 10000 ? 10000 : w;
}

static int ucx_lat(const struct bench_params *p)
{
    uint64_t iters = p->iters ? p->iters : bench_default_lat_iters(p->size);
    struct bench_lat_sample s;
    struct ucx_final f;

    if (ucx_run("stream_lat", p->size, iters, warmup_for(iters), &f) != 0)
        return BENCH_EXIT_FAIL;
    s.size = p->size;
    s.iters = (uint64_t)f.iters;
    s.p50_us = f.lat_p50;
    s.mean_us = f.lat_overall;
    bench_out_lat("ucx", NULL, &s, p->json, false);
    return BENCH_EXIT_OK;
}

static int ucx_bw(const struct bench_params *p)
{
    struct bench_bw_sample s;
    struct ucx_final f;
    uint64_t iters = ((size_t)32 << 20) / p->size;
    double bytes_per_s;

    /* ucx_perftest takes a message count, not a time: calibrate first. */
    iters = iters < 100 ? 100 : iters > 1000000 ? 1000000 : iters;
    if (ucx_run("stream_bw", p->size, iters, warmup_for(iters), &f) != 0)
        return BENCH_EXIT_FAIL;
    bytes_per_s = f.bw_overall * 1048576.0;
    if (bytes_per_s > 0)
        iters = (uint64_t)(p->seconds * bytes_per_s / (double)p->size);
    iters = iters < 10 ? 10 : iters;
    if (ucx_run("stream_bw", p->size, iters, warmup_for(iters), &f) != 0)
        return BENCH_EXIT_FAIL;
    s.size = p->size;
    s.msgs = (uint64_t)f.iters;
    s.gbps = f.bw_overall * 1048576.0 * 8.0 / 1e9;
    s.seconds = s.gbps > 0 ? (double)s.size * (double)s.msgs * 8.0 / (s.gbps * 1e9) : 0.0;
    bench_out_bw("ucx", NULL, &s, p->json);
    return BENCH_EXIT_OK;
}

static int ucx_sweep(const struct bench_params *p)
{
    size_t *sizes, n = bench_sweep_sizes(p->max_size, &sizes);
    uint64_t iters = 1000;
    int rc = BENCH_EXIT_OK;

    for (size_t i = 0; i < n; i++) {
        struct bench_lat_sample s;
        struct ucx_final f;

        if (ucx_run("stream_lat", sizes[i], iters, warmup_for(iters), &f) != 0) {
            rc = BENCH_EXIT_FAIL;
            break;
        }
        s.size = sizes[i];
        s.iters = (uint64_t)f.iters;
        s.p50_us = f.lat_p50;
        s.mean_us = f.lat_overall;
        bench_out_lat("ucx", NULL, &s, p->json, true);
        if (s.mean_us > 1e6)
            break;
        /* The next size is a little larger: size its count from this one. */
        iters = bench_iters_for(2.0 * s.mean_us * 1e-6, SWEEP_TARGET_S, 3, 1000000);
    }
    free(sizes);
    return rc;
}

static int ucx_run_external(const struct bench_params *p)
{
    if (!bench_in_path(UCX_PROG)) {
        bench_out_unavailable("ucx", "install ucx-utils", p->json);
        return BENCH_EXIT_UNAVAILABLE;
    }
    switch (p->mode) {
    case BENCH_LAT:
        return ucx_lat(p);
    case BENCH_BW:
        return ucx_bw(p);
    case BENCH_SWEEP:
        return ucx_sweep(p);
    case BENCH_IDLE:
        fprintf(stderr, "ucx: idle is not measured (ucx_perftest has no such test)\n");
        return BENCH_EXIT_UNAVAILABLE;
    case BENCH_WAKE:
    case BENCH_RR:
    case BENCH_CONNS:
    case BENCH_CONNRATE:
    case BENCH_EPOLL:
    case BENCH_ANATOMY: /* refused by bench_run: no probes in ucx */
        break; /* bench_run_wake / bench_run_rr, before any transport */
    }
    return BENCH_EXIT_USAGE;
}

const struct bench_transport bench_transport_ucx = {
    .name = "ucx",
    .summary = "UCX via ucx_perftest stream_lat/stream_bw (ucx-utils), pinned",
    .polling = true,
    .run_external = ucx_run_external,
};
