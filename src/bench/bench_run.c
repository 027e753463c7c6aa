/*
 * bench_run.c - one benchmark run: pick the transport, start the peer
 * process, pin CPUs, run the mode's loop, shut both sides down cleanly.
 */
#include "bench_anatomy.h"

#include <string.h>
#include <unistd.h>

/* How long the driver waits for the peer to exit after QUIT. */
#define PEER_EXIT_TIMEOUT_S 10.0

uint64_t bench_default_lat_iters(size_t size)
{
    /* Cap the bytes moved each way at 1 GiB so large sizes stay short. */
    uint64_t cap = ((uint64_t)1 << 30) / (size ? size : 1);

    if (cap < 100)
        cap = 100;
    return cap < BENCH_DEFAULT_LAT_ITERS ? cap : BENCH_DEFAULT_LAT_ITERS;
}

static int drive(const struct bench_transport *t, void *ep, const struct bench_params *p,
                 size_t max_msg)
{
    /* Configurable transports say which configuration the numbers are for. */
    const char *cfg = t->check_config ? (p->config ? p->config : "default") : NULL;

    switch (p->mode) {
    case BENCH_LAT: {
        struct bench_lat_sample s;
        uint64_t iters = p->iters ? p->iters : bench_default_lat_iters(p->size);
        uint64_t warmup = iters / 10;

        /* At least 100: transports that cycle through receive buffers
         * (vi: 66 per side) get each one used before timing starts. */
        warmup = warmup < 100 ? 100 : warmup > 10000 ? 10000 : warmup;
        if (bench_measure_lat(t, ep, p->size, iters, warmup, &s) != 0)
            return -1;
        bench_out_lat(t->name, cfg, &s, p->json, false);
        return 0;
    }
    case BENCH_BW: {
        struct bench_bw_sample s;
        if (bench_measure_bw(t, ep, p->size, p->seconds, &s) != 0)
            return -1;
        bench_out_bw(t->name, cfg, &s, p->json);
        return 0;
    }
    case BENCH_SWEEP:
        return bench_measure_sweep(t, ep, max_msg, p->json, cfg);
    case BENCH_ANATOMY:
        return bench_anatomy_drive(t, ep, p);
    case BENCH_WAKE:
    case BENCH_RR:
    case BENCH_CONNS:
    case BENCH_CONNRATE:
    case BENCH_EPOLL:
        break; /* bench_run_wake / _rr / _conns, before any transport */
    case BENCH_IDLE: {
        struct bench_idle_sample s;
        if (bench_measure_idle(t, ep, p->seconds, &s) != 0)
            return -1;
        bench_out_idle(t->name, cfg, &s, p->json);
        return 0;
    }
    }
    return -1;
}

/* The child: connect, serve until QUIT, release. Never returns. */
static void run_peer(const struct bench_transport *t, void *shared, size_t carry, int cpu)
{
    void *ep = NULL;
    int rc;

    if (cpu >= 0 && bench_pin_self(cpu) != 0)
        _exit(1);
    if (t->setup(shared, BENCH_PEER, carry, &ep) != 0)
        _exit(1);
    rc = bench_peer_serve(t, ep);
    if (t->teardown(ep) != 0)
        rc = -1;
    _exit(rc == 0 ? 0 : 1);
}

int bench_run(const struct bench_params *p)
{
    const struct bench_transport *t = bench_find_transport(p->transport);
    size_t max_msg = p->mode == BENCH_SWEEP ? p->max_size : p->size;
    size_t carry;
    void *shared = NULL, *ep = NULL;
    int cpus[2] = {-1, -1};
    int rc, status;
    pid_t pid;

    if (p->mode == BENCH_WAKE)
        return bench_run_wake(p);
    if (p->mode == BENCH_ANATOMY && p->iters > BENCH_ANATOMY_MAX_ITERS) {
        fprintf(stderr, "sovia bench anatomy: --iters at most %u (the rings hold every mark)\n",
                BENCH_ANATOMY_MAX_ITERS);
        return BENCH_EXIT_USAGE;
    }
    if (p->mode == BENCH_ANATOMY && bench_anatomy_kernel_path(p->transport))
        return bench_anatomy_kernel(bench_anatomy_kernel_path(p->transport), p);
    if (p->mode == BENCH_RR)
        return bench_run_rr(p);
    if (p->mode == BENCH_CONNS || p->mode == BENCH_CONNRATE || p->mode == BENCH_EPOLL)
        return bench_run_conns(p);
    if (!t) {
        fprintf(stderr, "sovia bench: unknown transport '%s' (see sovia bench --help)\n",
                p->transport);
        return BENCH_EXIT_USAGE;
    }
    if (p->config) {
        if (!t->check_config) {
            fprintf(stderr, "sovia bench: --config applies only to the sovia transports "
                            "(sovia, sovia-block, sovia-adaptive), not %s\n", t->name);
            return BENCH_EXIT_USAGE;
        }
        if (t->check_config(p->config) != 0)
            return BENCH_EXIT_USAGE;
    }
    if ((p->ring || p->frag) && !t->ring) {
        fprintf(stderr, "sovia bench: --ring and --frag apply only to the vi transports "
                        "(vi, vi-copy, vi-user, vi-block, vi-notify), not %s\n", t->name);
        return BENCH_EXIT_USAGE;
    }
    if (p->mode == BENCH_ANATOMY && !bench_anatomy_traced(t->name)) {
        fprintf(stderr, "sovia bench anatomy: no probes in %s (vi, sovia, udp, tcp)\n", t->name);
        return BENCH_EXIT_USAGE;
    }
    if (t->run_external)
        return t->run_external(p);

    if (t->max_msg && max_msg > t->max_msg) {
        if (p->mode != BENCH_SWEEP) {
            fprintf(stderr, "sovia bench: %s carries at most %zu bytes per message\n", t->name,
                    t->max_msg);
            return BENCH_EXIT_USAGE;
        }
        fprintf(stderr, "sovia bench: note: %s carries at most %zu bytes per message; "
                        "the sweep stops there\n", t->name, t->max_msg);
        max_msg = t->max_msg;
    }
    carry = max_msg > BENCH_CTRL_LEN ? max_msg : BENCH_CTRL_LEN;
    if (p->ring) {
        size_t piece = p->frag && p->frag < carry ? p->frag : carry;
        if (piece > BENCH_RING_BYTES_MAX / p->ring) {
            fprintf(stderr, "sovia bench: a ring of %u receives of %zu bytes needs more than "
                            "%zu MiB; use a smaller --ring or --frag\n", p->ring, piece,
                    BENCH_RING_BYTES_MAX >> 20);
            return BENCH_EXIT_USAGE;
        }
    }

    if (t->polling) {
        if (bench_pick_cpus(cpus) < 2) {
            fprintf(stderr, "sovia bench: note: fewer than 2 CPUs available, "
                            "%s runs unpinned\n", t->name);
            cpus[0] = cpus[1] = -1;
        }
    }

    if (t->prepare && (rc = t->prepare(p, carry, &shared)) != 0) {
        if (rc != BENCH_PREPARE_UNAVAILABLE)
            return BENCH_EXIT_FAIL;
        if (p->json) /* the reason is on stderr */
            bench_out_unavailable(t->name, "", true);
        return BENCH_EXIT_UNAVAILABLE;
    }
    if (p->mode == BENCH_ANATOMY && bench_anatomy_prepare(bench_anatomy_iters(p)) != 0) {
        if (t->release)
            t->release(shared);
        return BENCH_EXIT_FAIL;
    }
    pid = bench_fork_peer();
    if (pid < 0) {
        bench_anatomy_release();
        if (t->release)
            t->release(shared);
        return BENCH_EXIT_FAIL;
    }
    if (pid == 0)
        run_peer(t, shared, carry, cpus[1]);

    rc = cpus[0] >= 0 ? bench_pin_self(cpus[0]) : 0;
    if (rc == 0)
        rc = t->setup(shared, BENCH_DRIVER, carry, &ep);
    if (rc == 0) {
        rc = drive(t, ep, p, max_msg);
        if (rc == 0)
            rc = bench_send_quit(t, ep);
        if (rc != 0) {
            /* Kill the peer first: it may be blocked on us forever. */
            bench_kill_child(pid);
            pid = -1;
        }
        if (t->teardown(ep) != 0 && rc == 0) {
            fprintf(stderr, "sovia bench: %s: releasing resources failed\n", t->name);
            rc = -1;
        }
    } else {
        bench_kill_child(pid);
        pid = -1;
    }
    if (pid > 0) {
        status = bench_wait_child(pid, PEER_EXIT_TIMEOUT_S);
        if (status != 0) {
            fprintf(stderr, "sovia bench: %s: peer process failed (status %d)\n", t->name,
                    status);
            rc = -1;
        }
    }
    if (t->release)
        t->release(shared);
    bench_anatomy_release();
    if (rc != 0)
        fprintf(stderr, "sovia bench: %s: run failed\n", t->name);
    return rc == 0 ? BENCH_EXIT_OK : BENCH_EXIT_FAIL;
}
