/*
 * rr_run.c - `sovia bench rr`: starts the server processes, then the client
 * processes connected to them, tells them all when to start and when the
 * counted window begins and ends, and collects what each measured.
 *
 * Workers of the libc transports (tcp, uds, preload) are the executable
 * sovia-rr, exec'd, so that `preload` is the very program `tcp` runs with
 * the preload library in LD_PRELOAD from its first instruction; those of the
 * sovia transports are forked from this process (the sov_* API, linked
 * here) and run the same loops. Nothing is pinned: the point is the default
 * behaviour of processes that outnumber the CPUs.
 */
#include "bench_internal.h"
#include "rr.h"
#include "rr_proc.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SETUP_TIMEOUT_S 30.0  /* a worker's listeners or connections are up */
#define RESULT_MARGIN_S 15.0  /* past the drain: a worker reports or is failed */
#define START_DELAY_NS 2000000 /* from "go" to START: every worker has read it */
#define ADDRS_LEN (RR_MAX_PAIRS * 24 + 16) /* a server's "ready" line */

static const char *const rr_transports[] = {"tcp", "uds", "preload", "sovia", "sovia-block",
                                            "sovia-adaptive", NULL};

struct run {
    const struct bench_params *p;
    bool forked; /* sovia transports: fork, no exec */
    int nprocs;  /* per side */
    int threads; /* per process */
    double warmup;
    struct rr_proc *srv, *cli;
    struct rr_result *res; /* clients, then servers */
};

static bool known(const char *t)
{
    for (size_t i = 0; rr_transports[i]; i++)
        if (strcmp(rr_transports[i], t) == 0)
            return true;
    return false;
}

/* In a forked worker (sovia transports): the other workers' pipes are not
 * its business; then the loops over the sov_* calls. */
struct forked_ctx {
    const struct run *r;
    char **argv;
    int argc;
};

static int forked_main(void *ctx, const struct rr_proc *self)
{
    const struct forked_ctx *f = ctx;
    const struct run *r = f->r;

    for (int i = 0; i < r->nprocs; i++)
        for (int side = 0; side < 2; side++) {
            const struct rr_proc *o = side ? &r->cli[i] : &r->srv[i];
            if (o == self)
                continue;
            if (o->ctl >= 0)
                close(o->ctl);
            if (o->res >= 0)
                close(o->res);
        }
    return rr_worker_main(f->argc, f->argv, &rr_sovia_ops);
}

static int spawn(struct run *r, struct rr_proc *pr, char **argv, int argc)
{
    struct forked_ctx f = {r, argv, argc};
    return rr_proc_spawn(pr, r->p->rr_worker, argv, r->forked ? forked_main : NULL, &f);
}

static void fmt_uint(char *buf, size_t len, unsigned long v)
{
    snprintf(buf, len, "%lu", v);
}

/* The worker's command line (argv[0] is the worker itself). */
struct wargs {
    char *argv[16 + RR_MAX_PAIRS];
    char threads[16], conns[16], size[24], id[16], drain[32];
    int argc;
};

static void build_args(const struct run *r, struct wargs *a, const char *role, int id)
{
    a->argc = 0;
    fmt_uint(a->threads, sizeof a->threads, (unsigned long)r->threads);
    fmt_uint(a->conns, sizeof a->conns, r->p->conns);
    fmt_uint(a->size, sizeof a->size, (unsigned long)r->p->size);
    fmt_uint(a->id, sizeof a->id, (unsigned long)id);
    snprintf(a->drain, sizeof a->drain, "%g", RR_DEFAULT_DRAIN_S);
    char *fixed[] = {(char *)(r->p->rr_worker ? r->p->rr_worker : "sovia-rr"), (char *)role,
                     "--threads", a->threads, "--conns", a->conns, "--size", a->size,
                     "--transport", (char *)r->p->transport, "--id", a->id, "--drain", a->drain};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        a->argv[a->argc++] = fixed[i];
    a->argv[a->argc] = NULL;
}

/* Servers first; each says where its threads listen. */
static int start_servers(struct run *r, char (*addrs)[ADDRS_LEN])
{
    for (int i = 0; i < r->nprocs; i++) {
        struct wargs a;
        char line[ADDRS_LEN];
        build_args(r, &a, "server", i);
        if (spawn(r, &r->srv[i], a.argv, a.argc) != 0)
            return rr_report_error("rr", "server", i, "start");
        if (rr_read_by(r->srv[i].res, line, sizeof line, true, bench_now() + SETUP_TIMEOUT_S) < 0)
            return rr_report_error("rr", "server", i, "listening");
        if (strncmp(line, "ready ", 6) != 0) {
            errno = EPROTO;
            return rr_report_error("rr", "server", i, "listening");
        }
        memcpy(addrs[i], line + 6, strlen(line + 6) + 1);
    }
    return 0;
}

/* Client i connects its thread t to server thread t of server i (or, with
 * --threads, of the one server process). */
static int start_clients(struct run *r, char (*addrs)[ADDRS_LEN])
{
    for (int i = 0; i < r->nprocs; i++) {
        struct wargs a;
        char *save = NULL, *tok;
        int n = 0;
        build_args(r, &a, "client", i);
        for (tok = strtok_r(addrs[i], " ", &save); tok && n < r->threads;
             tok = strtok_r(NULL, " ", &save), n++)
            a.argv[a.argc++] = tok;
        a.argv[a.argc] = NULL;
        if (n != r->threads || tok) {
            errno = EPROTO;
            return rr_report_error("rr", "server", i, "listening addresses");
        }
        if (spawn(r, &r->cli[i], a.argv, a.argc) != 0)
            return rr_report_error("rr", "client", i, "start");
    }
    for (int i = 0; i < r->nprocs; i++) {
        char line[32];
        if (rr_read_by(r->cli[i].res, line, sizeof line, true, bench_now() + SETUP_TIMEOUT_S) < 0)
            return rr_report_error("rr", "client", i, "connecting");
        if (strcmp(line, "ready") != 0) {
            errno = EPROTO;
            return rr_report_error("rr", "client", i, "connecting");
        }
    }
    return 0;
}

static int send_go(struct run *r, int64_t *end_ns)
{
    int64_t start = rr_now_ns() + START_DELAY_NS;
    int64_t warm = start + (int64_t)(r->warmup * 1e9);
    char go[96];
    int len;

    *end_ns = warm + (int64_t)(r->p->seconds * 1e9);
    len = snprintf(go, sizeof go, "go %lld %lld %lld\n", (long long)start, (long long)warm,
                   (long long)*end_ns);
    for (int side = 0; side < 2; side++)
        for (int i = 0; i < r->nprocs; i++) {
            struct rr_proc *pr = side ? &r->srv[i] : &r->cli[i];
            if (write(pr->ctl, go, (size_t)len) != len)
                return rr_report_error("rr", side ? "server" : "client", i, "start");
        }
    return 0;
}

static int collect(struct run *r, int64_t end_ns)
{
    /* bench_now() reads the same clock, in seconds. */
    double deadline = (double)end_ns / 1e9 + RR_DEFAULT_DRAIN_S + RESULT_MARGIN_S;

    for (int side = 0; side < 2; side++)
        for (int i = 0; i < r->nprocs; i++) {
            struct rr_proc *pr = side ? &r->srv[i] : &r->cli[i];
            struct rr_result *res = &r->res[side * r->nprocs + i];
            const char *who = side ? "server" : "client";
            if (rr_read_by(pr->res, res, sizeof *res, false, deadline) < 0)
                return rr_report_error("rr", who, i, "result");
            if (res->magic != RR_RESULT_MAGIC ||
                res->role != (uint64_t)(side ? RR_ROLE_SERVER : RR_ROLE_CLIENT) ||
                res->threads != (uint64_t)r->threads) {
                errno = EPROTO;
                return rr_report_error("rr", who, i, "result");
            }
        }
    return 0;
}

/* Every worker reaped: killed first unless the run went well. */
static int reap(struct run *r, bool ok)
{
    int rc = 0;

    for (int side = 0; side < 2; side++)
        for (int i = 0; i < r->nprocs; i++)
            if (rr_proc_reap(side ? &r->srv[i] : &r->cli[i], "rr", side ? "server" : "client", i,
                             ok) != 0)
                rc = -1;
    return rc;
}

static int check(const struct bench_params *p, bool forked)
{
    if (!known(p->transport)) {
        fprintf(stderr, "sovia bench rr: unknown transport '%s' (", p->transport);
        for (size_t i = 0; rr_transports[i]; i++)
            fprintf(stderr, "%s%s", i ? ", " : "", rr_transports[i]);
        fprintf(stderr, ")\n");
        return BENCH_EXIT_USAGE;
    }
    if ((size_t)p->conns * p->size > RR_MAX_THREAD_BYTES) {
        fprintf(stderr, "sovia bench rr: --conns x --size is at most %zu M per client\n",
                RR_MAX_THREAD_BYTES >> 20);
        return BENCH_EXIT_USAGE;
    }
    if (!forked && !p->rr_worker) {
        fprintf(stderr, "sovia bench rr: cannot find the sovia-rr worker program\n");
        return BENCH_EXIT_UNAVAILABLE;
    }
    return BENCH_EXIT_OK;
}

int bench_run_rr(const struct bench_params *p)
{
    struct run r = {.p = p, .forked = rr_sovia_wait_mode(p->transport) >= 0};
    struct rr_run_info info;
    char (*addrs)[ADDRS_LEN];
    double cpu0 = rr_children_cpu_s(), load[1] = {0};
    void (*old_pipe)(int);
    int64_t end_ns;
    int rc = check(p, r.forked);

    if (rc != BENCH_EXIT_OK)
        return rc;
    r.nprocs = p->threads ? 1 : (int)p->pairs;
    r.threads = p->threads ? (int)p->pairs : 1;
    r.warmup = p->warmup >= 0 ? p->warmup
             : p->seconds / 2 < RR_DEFAULT_WARMUP ? p->seconds / 2 : RR_DEFAULT_WARMUP;
    r.srv = calloc((size_t)r.nprocs, sizeof *r.srv);
    r.cli = calloc((size_t)r.nprocs, sizeof *r.cli);
    r.res = calloc((size_t)r.nprocs * 2, sizeof *r.res);
    addrs = calloc((size_t)r.nprocs, sizeof *addrs);
    if (!r.srv || !r.cli || !r.res || !addrs) {
        fprintf(stderr, "sovia bench rr: out of memory\n");
        free(r.srv);
        free(r.cli);
        free(r.res);
        free(addrs);
        return BENCH_EXIT_FAIL;
    }
    for (int i = 0; i < r.nprocs; i++)
        r.srv[i] = r.cli[i] = (struct rr_proc){.pid = -1, .ctl = -1, .res = -1};
    getloadavg(load, 1);
    /* A worker that dies must not take this process with it. */
    old_pipe = signal(SIGPIPE, SIG_IGN);
    rc = start_servers(&r, addrs);
    if (rc == 0)
        rc = start_clients(&r, addrs);
    if (rc == 0)
        rc = send_go(&r, &end_ns);
    if (rc == 0)
        rc = collect(&r, end_ns);
    if (reap(&r, rc == 0) != 0)
        rc = -1;
    signal(SIGPIPE, old_pipe);
    if (rc == 0) {
        info = (struct rr_run_info){
            .transport = p->transport, .pairs = p->pairs, .conns = p->conns,
            .procs_per_side = (unsigned)r.nprocs, .threads_per_proc = (unsigned)r.threads,
            .size = p->size, .threads = p->threads, .seconds = p->seconds,
            .warmup = r.warmup, .cpus = rr_count_cpus(), .load_1m = load[0],
            .cpu_total_s = rr_children_cpu_s() - cpu0};
        bench_out_rr(&info, r.res, (size_t)r.nprocs * 2, p->json);
    } else {
        fprintf(stderr, "sovia bench rr: %s: run failed\n", p->transport);
    }
    free(r.srv);
    free(r.cli);
    free(r.res);
    free(addrs);
    return rc == 0 ? BENCH_EXIT_OK : BENCH_EXIT_FAIL;
}
