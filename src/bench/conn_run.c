/*
 * conn_run.c - `sovia bench conns`, `connrate` (conn.h) and `epoll`
 * (ep_worker.c): the worker processes started, told when to go, and their
 * results printed.
 * tcp runs the worker program as it is; preload runs it under the preload
 * library (the environment `sovia run` gives, set by the tool).
 */
#include "bench_internal.h"
#include "conn.h"
#include "rr_proc.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SETUP_TIMEOUT_S 30.0
#define RESULT_MARGIN_S 15.0
#define START_DELAY_NS 2000000

/* ---- Which connections sovia carried (preload) --------------------------
 *
 * The workers' exit records (SOVIA_STAT_LOG, docs/ARCHITECTURE.md), in a
 * private directory made for the run and removed after it. A run where
 * sovia left connections on kernel TCP (VipxFdRoom, a refused pairing)
 * measures a mixture: it says so. */

struct carried {
    char dir[PATH_MAX], log[PATH_MAX + 16];
    bool on;
};

static void carried_begin(struct carried *c, const struct bench_params *p)
{
    const char *tmp = getenv("TMPDIR");
    c->on = false;
    if (strcmp(p->transport, "preload") != 0 || getenv("SOVIA_STAT_LOG"))
        return;
    snprintf(c->dir, sizeof c->dir, "%s/sovia-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(c->dir))
        return;
    snprintf(c->log, sizeof c->log, "%s/stat.json", c->dir);
    c->on = setenv("SOVIA_STAT_LOG", c->log, 1) == 0;
}

/* Sums the records of the processes in pids (n of them, -1 for any):
 * carried, and made or accepted on kernel TCP. */
static void carried_sum(const struct carried *c, const pid_t *pids, int n, uint64_t *yes,
                        uint64_t *no)
{
    char line[1024];
    FILE *f = c->on ? fopen(c->log, "re") : NULL;

    *yes = *no = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *pp = strstr(line, "\"pid\": "), *cp = strstr(line, "\"carried\": "),
                   *fp = strstr(line, "\"fell_back\": "), *kp = strstr(line, "\"kernel\": ");
        bool mine = n < 0;
        if (!pp || !cp || !fp || !kp)
            continue;
        for (int i = 0; i < n && !mine; i++)
            mine = atol(pp + 7) == (long)pids[i];
        if (!mine)
            continue;
        *yes += strtoull(cp + 11, NULL, 10);
        *no += strtoull(fp + 13, NULL, 10) + strtoull(kp + 10, NULL, 10);
    }
    if (f)
        fclose(f);
}

static void carried_end(struct carried *c)
{
    if (!c->on)
        return;
    unsetenv("SOVIA_STAT_LOG");
    unlink(c->log);
    rmdir(c->dir);
    c->on = false;
}

static int check(const struct bench_params *p, const char *mode)
{
    if (strcmp(p->transport, "tcp") != 0 && strcmp(p->transport, "preload") != 0) {
        fprintf(stderr, "sovia bench %s: unknown transport '%s' (tcp, preload)\n", mode,
                p->transport);
        return BENCH_EXIT_USAGE;
    }
    if (!p->rr_worker) {
        fprintf(stderr, "sovia bench %s: cannot find the sovia-rr worker program\n", mode);
        return BENCH_EXIT_UNAVAILABLE;
    }
    return BENCH_EXIT_OK;
}

/* "ready pPORT" from a server: the address into addr. */
static int read_ready(struct rr_proc *srv, const char *mode, char *addr, size_t len)
{
    char line[64];

    if (rr_read_by(srv->res, line, sizeof line, true, bench_now() + SETUP_TIMEOUT_S) < 0)
        return rr_report_error(mode, "server", 0, "listening");
    if (strncmp(line, "ready p", 7) != 0 || strlen(line + 6) >= len) {
        errno = EPROTO;
        return rr_report_error(mode, "server", 0, "listening");
    }
    memcpy(addr, line + 6, strlen(line + 6) + 1);
    return 0;
}

static int64_t delta(uint64_t after, uint64_t before)
{
    return (int64_t)(after - before);
}

static double per(int64_t v, uint64_t n)
{
    return n ? (double)v / (double)n : 0.0;
}

/* ---- conns ------------------------------------------------------------- */

static void out_side(const char *side, const struct conn_result *r, bool json)
{
    const struct conn_usage *b = &r->before, *a = &r->after;
    double fds = per(delta(a->fds, b->fds), r->count),
           maps = per(delta(a->maps, b->maps), r->count),
           shm = per(delta(a->shm_mapped, b->shm_mapped), r->count) / 1024,
           shm_res = per(delta(a->shm_resident, b->shm_resident), r->count) / 1024,
           rss = per(delta(a->rss, b->rss), r->count) / 1024;

    if (json)
        printf("\"%s\":{\"fds\":%" PRIu64 ",\"maps\":%" PRIu64 ",\"shm_mapped_kib\":%.1f,"
               "\"shm_resident_kib\":%.1f,\"rss_kib\":%.1f,\"fds_per_conn\":%.3g,"
               "\"maps_per_conn\":%.3g,\"shm_mapped_kib_per_conn\":%.4g,"
               "\"shm_resident_kib_per_conn\":%.4g,\"rss_kib_per_conn\":%.4g}",
               side, a->fds, a->maps, (double)a->shm_mapped / 1024,
               (double)a->shm_resident / 1024, (double)a->rss / 1024, fds, maps, shm, shm_res,
               rss);
    else
        printf("%-7s %9" PRIu64 " %8.2f %8" PRIu64 " %8.2f %12.1f %12.1f %10.1f\n", side, a->fds,
               fds, a->maps, maps, shm, shm_res, rss);
}

/* Carried connections of the client and the server, and whether known. */
struct conns_carried {
    bool known;
    uint64_t cli, cli_not, srv, srv_not;
};

static void out_conns(const struct bench_params *p, const struct conn_result *cli,
                      const struct conn_result *srv, uint64_t close_ns,
                      const struct conns_carried *k, bool json)
{
    double setup_us = per((int64_t)cli->setup_ns, cli->count) / 1e3,
           ping_us = per((int64_t)cli->ping_ns, cli->count) / 1e3,
           close_us = per((int64_t)close_ns, cli->count) / 1e3,
           p50 = rr_hist_quantile(&cli->connect, 0.5) / 1e3,
           p99 = rr_hist_quantile(&cli->connect, 0.99) / 1e3;

    if (json) {
        printf("{\"mode\":\"conns\",\"transport\":\"%s\",\"count\":%" PRIu64
               ",\"setup_s\":%.6g,\"connect_us_per_conn\":%.6g,\"connect_p50_us\":%.6g,"
               "\"connect_p99_us\":%.6g,\"ping_us_per_conn\":%.6g,\"close_us_per_conn\":%.6g,",
               p->transport, cli->count, (double)cli->setup_ns / 1e9, setup_us, p50, p99,
               ping_us, close_us);
        if (k->known)
            printf("\"carried\":{\"client\":%" PRIu64 ",\"server\":%" PRIu64
                   ",\"client_kernel\":%" PRIu64 ",\"server_kernel\":%" PRIu64 "},",
                   k->cli, k->srv, k->cli_not, k->srv_not);
        out_side("client", cli, true);
        putchar(',');
        out_side("server", srv, true);
        printf("}\n");
    } else {
        printf("%s: %" PRIu64 " connections, each verified by an exchange of %d bytes\n",
               p->transport, cli->count, CONN_PING);
        if (k->known)
            printf("carried by sovia: client %" PRIu64 ", server %" PRIu64
                   " (on kernel TCP: %" PRIu64 ", %" PRIu64 ")\n",
                   k->cli, k->srv, k->cli_not, k->srv_not);
        printf("connect: %.1f us per connection (p50 %.1f, p99 %.1f; %.3f s in all); "
               "exchange %.1f us, close %.1f us per connection\n",
               setup_us, p50, p99, (double)cli->setup_ns / 1e9, ping_us, close_us);
        printf("%-7s %9s %8s %8s %8s %12s %12s %10s\n", "side", "fds", "/conn", "maps",
               "/conn", "shm KiB/conn", "resident", "RSS KiB/c");
        out_side("client", cli, false);
        out_side("server", srv, false);
    }
    fflush(stdout);
}

/* A worker's result (len bytes, its magic first) by the deadline. */
static int read_result(struct rr_proc *pr, const char *mode, const char *who, void *r,
                       size_t len, uint64_t magic, double deadline)
{
    uint64_t got;

    if (rr_read_by(pr->res, r, len, false, deadline) < 0)
        return rr_report_error(mode, who, 0, "result");
    memcpy(&got, r, sizeof got);
    if (got != magic) {
        errno = EPROTO;
        return rr_report_error(mode, who, 0, "result");
    }
    return 0;
}

/* The client and the server reaped, and what each carried (into *k). */
static int reap_pair(struct rr_proc *cli, struct rr_proc *srv, const char *mode, int rc,
                     struct carried *c, struct conns_carried *k)
{
    pid_t cpid = cli->pid, spid = srv->pid;

    if (rr_proc_reap(cli, mode, "client", 0, rc == 0) != 0)
        rc = -1;
    if (rr_proc_reap(srv, mode, "server", 0, rc == 0) != 0)
        rc = -1;
    if (c->on) {
        k->known = true;
        carried_sum(c, &cpid, 1, &k->cli, &k->cli_not);
        carried_sum(c, &spid, 1, &k->srv, &k->srv_not);
    }
    carried_end(c);
    return rc;
}

static int run_conns(const struct bench_params *p)
{
    struct rr_proc srv = {-1, -1, -1}, cli = {-1, -1, -1};
    struct conn_result *res = calloc(2, sizeof *res);
    char count[24], addr[32];
    char *sargv[] = {(char *)p->rr_worker, "conns-server", "--count", count, NULL};
    char *cargv[] = {(char *)p->rr_worker, "conns-client", "--count", count, addr, NULL};
    /* Connections come at a few thousand a second at worst. */
    double deadline = (double)p->count / 500.0 + 60.0;
    /* What carried connections cost: each is pinged once, too short for
     * sovia run's default to carry the next ones (shortconn.c). */
    setenv("SOVIA_SHORT_CONNS", "0", 0);
    uint64_t close_ns = 0;
    struct conns_carried k = {false, 0, 0, 0, 0};
    struct carried c;
    int rc = -1;

    if (!res)
        return BENCH_EXIT_FAIL;
    carried_begin(&c, p);
    snprintf(count, sizeof count, "%lu", p->count);
    if (rr_proc_spawn(&srv, p->rr_worker, sargv, NULL, NULL) != 0) {
        rr_report_error("conns", "server", 0, "start");
        goto out;
    }
    if (read_ready(&srv, "conns", addr, sizeof addr) != 0)
        goto out;
    if (rr_proc_spawn(&cli, p->rr_worker, cargv, NULL, NULL) != 0) {
        rr_report_error("conns", "client", 0, "start");
        goto out;
    }
    if (read_result(&cli, "conns", "client", &res[0], sizeof res[0], CONN_RESULT_MAGIC,
                    bench_now() + deadline) != 0)
        goto out;
    if (write(srv.ctl, "sample\n", 7) != 7) {
        rr_report_error("conns", "server", 0, "sample");
        goto out;
    }
    if (read_result(&srv, "conns", "server", &res[1], sizeof res[1], CONN_RESULT_MAGIC,
                    bench_now() + SETUP_TIMEOUT_S) != 0)
        goto out;
    if (write(cli.ctl, "close\n", 6) != 6 ||
        rr_read_by(cli.res, &close_ns, sizeof close_ns, false, bench_now() + deadline) < 0) {
        rr_report_error("conns", "client", 0, "close");
        goto out;
    }
    rc = 0;
out:
    rc = reap_pair(&cli, &srv, "conns", rc, &c, &k);
    if (rc == 0)
        out_conns(p, &res[0], &res[1], close_ns, &k, p->json);
    else
        fprintf(stderr, "sovia bench conns: %s: run failed\n", p->transport);
    free(res);
    return rc == 0 ? BENCH_EXIT_OK : BENCH_EXIT_FAIL;
}

/* ---- connrate ----------------------------------------------------------- */

static void out_rate(const struct bench_params *p, const struct rr_result *res, int nres,
                     double warmup, double load, const struct conns_carried *k, bool json)
{
    struct rr_hist *lat = calloc(1, sizeof *lat);
    uint64_t tx = 0, cpu = 0;

    if (!lat)
        return;
    for (int i = 0; i < nres; i++) {
        if (res[i].role == RR_ROLE_CLIENT) {
            tx += res[i].tx_window;
            rr_hist_merge(lat, &res[i].lat);
        }
        cpu += (res[i].cpu_user_ns[1] - res[i].cpu_user_ns[0]) +
               (res[i].cpu_sys_ns[1] - res[i].cpu_sys_ns[0]);
    }
    double rate = (double)tx / p->seconds, p50 = rr_hist_quantile(lat, 0.5) / 1e3,
           p99 = rr_hist_quantile(lat, 0.99) / 1e3, cpu_us = per((int64_t)cpu, tx) / 1e3;
    if (json)
        printf("{\"mode\":\"connrate\",\"transport\":\"%s\",\"clients\":%u,\"seconds\":%.6g,"
               "\"warmup\":%.6g,\"cpus\":%d,\"load_1m\":%.3g,\"conns\":%" PRIu64
               ",\"conns_per_s\":%.6g,\"p50_us\":%.6g,\"p99_us\":%.6g,\"max_us\":%.6g,"
               "\"cpu_us_per_conn\":%.6g",
               p->transport, p->clients, p->seconds, warmup, rr_count_cpus(), load, tx, rate, p50,
               p99, (double)lat->max_ns / 1e3, cpu_us);
    if (json && k->known)
        printf(",\"carried\":%" PRIu64 ",\"kernel\":%" PRIu64, k->cli, k->cli_not);
    if (json)
        printf("}\n");
    else {
        printf("%-10s %7s %11s %9s %9s %9s %12s\n", "transport", "clients", "conns/s", "p50 us",
               "p99 us", "max us", "cpu us/conn");
        printf("%-10s %7u %11.0f %9.1f %9.1f %9.1f %12.1f\n", p->transport, p->clients, rate,
               p50, p99, (double)lat->max_ns / 1e3, cpu_us);
        printf("each: connect, %d bytes each way, close; %.3g s counted after %.3g s of "
               "warm-up; %d CPUs, load average %.2f at the start\n",
               CONN_PING, p->seconds, warmup, rr_count_cpus(), load);
        if (k->known)
            printf("carried by sovia: %" PRIu64 " of the clients' connections (on kernel "
                   "TCP: %" PRIu64 ")\n", k->cli, k->cli_not);
    }
    fflush(stdout);
    free(lat);
}

static int run_connrate(const struct bench_params *p)
{
    int n = (int)p->clients;
    struct rr_proc *pr = calloc((size_t)n + 1, sizeof *pr); /* server, then clients */
    struct rr_result *res = calloc((size_t)n + 1, sizeof *res);
    double warmup = p->warmup >= 0 ? p->warmup : p->seconds / 2 < 0.5 ? p->seconds / 2 : 0.5;
    double load[1] = {0};
    char addr[32], go[96];
    char *sargv[] = {(char *)p->rr_worker, "rate-server", NULL};
    char *cargv[] = {(char *)p->rr_worker, "rate-client", addr, NULL};
    int64_t start, warm, end;
    struct conns_carried k = {false, 0, 0, 0, 0};
    struct carried c;
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    int rc = -1, len;

    if (!pr || !res || !pids) {
        free(pr);
        free(res);
        free(pids);
        return BENCH_EXIT_FAIL;
    }
    carried_begin(&c, p);
    getloadavg(load, 1);
    for (int i = 0; i <= n; i++)
        pr[i] = (struct rr_proc){-1, -1, -1};
    if (rr_proc_spawn(&pr[0], p->rr_worker, sargv, NULL, NULL) != 0 ||
        read_ready(&pr[0], "connrate", addr, sizeof addr) != 0)
        goto out;
    for (int i = 1; i <= n; i++) {
        char line[16];
        if (rr_proc_spawn(&pr[i], p->rr_worker, cargv, NULL, NULL) != 0 ||
            rr_read_by(pr[i].res, line, sizeof line, true, bench_now() + SETUP_TIMEOUT_S) < 0 ||
            strcmp(line, "ready") != 0) {
            rr_report_error("connrate", "client", i - 1, "start");
            goto out;
        }
    }
    start = rr_now_ns() + START_DELAY_NS;
    warm = start + (int64_t)(warmup * 1e9);
    end = warm + (int64_t)(p->seconds * 1e9);
    len = snprintf(go, sizeof go, "go %lld %lld %lld\n", (long long)start, (long long)warm,
                   (long long)end);
    for (int i = 0; i <= n; i++)
        if (write(pr[i].ctl, go, (size_t)len) != len) {
            rr_report_error("connrate", i ? "client" : "server", i - 1, "start");
            goto out;
        }
    for (int i = n; i >= 0; i--) {
        const char *who = i ? "client" : "server";
        if (rr_read_by(pr[i].res, &res[i], sizeof res[i], false,
                       (double)end / 1e9 + CONN_RATE_DRAIN_S + RESULT_MARGIN_S) < 0)
            goto fail_result;
        if (res[i].magic != RR_RESULT_MAGIC) {
            errno = EPROTO;
            goto fail_result;
        }
        continue;
fail_result:
        rr_report_error("connrate", who, i - 1, "result");
        goto out;
    }
    rc = 0;
out:
    for (int i = 1; i <= n; i++)
        pids[i - 1] = pr[i].pid;
    for (int i = n; i >= 0; i--)
        if (rr_proc_reap(&pr[i], "connrate", i ? "client" : "server", i - 1, rc == 0) != 0)
            rc = -1;
    if (c.on) {
        k.known = true;
        carried_sum(&c, pids, n, &k.cli, &k.cli_not);
    }
    carried_end(&c);
    free(pids);
    if (rc == 0)
        out_rate(p, res, n + 1, warmup, load[0], &k, p->json);
    else
        fprintf(stderr, "sovia bench connrate: %s: run failed\n", p->transport);
    free(pr);
    free(res);
    return rc == 0 ? BENCH_EXIT_OK : BENCH_EXIT_FAIL;
}

/* ---- epoll ---------------------------------------------------------------- */

static void out_epoll(const struct bench_params *p, const struct rr_result *cli,
                      const struct rr_result *srv, double warmup, double load,
                      const struct conns_carried *k, bool json)
{
    uint64_t tx = cli->tx_window;
    double tps = (double)tx / p->seconds, p50 = rr_hist_quantile(&cli->lat, 0.5) / 1e3,
           p99 = rr_hist_quantile(&cli->lat, 0.99) / 1e3,
           p999 = rr_hist_quantile(&cli->lat, 0.999) / 1e3, max = (double)cli->lat.max_ns / 1e3;
    int64_t scpu = (int64_t)((srv->cpu_user_ns[1] - srv->cpu_user_ns[0]) +
                             (srv->cpu_sys_ns[1] - srv->cpu_sys_ns[0])),
            ccpu = (int64_t)((cli->cpu_user_ns[1] - cli->cpu_user_ns[0]) +
                             (cli->cpu_sys_ns[1] - cli->cpu_sys_ns[0]));
    double s_us = per(scpu, tx) / 1e3, c_us = per(ccpu, tx) / 1e3;

    if (json) {
        printf("{\"mode\":\"epoll\",\"transport\":\"%s\",\"count\":%lu,\"active\":%lu,"
               "\"size\":%d,\"seconds\":%.6g,\"warmup\":%.6g,\"cpus\":%d,\"load_1m\":%.3g,"
               "\"tx\":%" PRIu64 ",\"tps\":%.1f,\"p50_us\":%.6g,\"p99_us\":%.6g,"
               "\"p999_us\":%.6g,\"max_us\":%.6g,\"unanswered\":%" PRIu64
               ",\"server_cpu_us_per_tx\":%.6g,\"client_cpu_us_per_tx\":%.6g",
               p->transport, p->count, p->active, EP_SIZE, p->seconds, warmup, rr_count_cpus(),
               load, tx, tps, p50, p99, p999, max, cli->unanswered, s_us, c_us);
        if (k->known)
            printf(",\"carried\":{\"client\":%" PRIu64 ",\"server\":%" PRIu64
                   ",\"client_kernel\":%" PRIu64 ",\"server_kernel\":%" PRIu64 "}",
                   k->cli, k->srv, k->cli_not, k->srv_not);
        printf("}\n");
    } else {
        printf("%-10s %7s %6s %10s %8s %8s %9s %9s %13s\n", "transport", "conns", "active",
               "tps", "p50 us", "p99 us", "max us", "srv us/tx", "client us/tx");
        printf("%-10s %7lu %6lu %10.0f %8.1f %8.1f %9.1f %9.2f %13.2f\n", p->transport,
               p->count, p->active, tps, p50, p99, max, s_us, c_us);
        printf("%d bytes each way; %.3g s counted after %.3g s of warm-up; %" PRIu64
               " unanswered; %d CPUs, load average %.2f at the start\n",
               EP_SIZE, p->seconds, warmup, cli->unanswered, rr_count_cpus(), load);
        if (k->known)
            printf("carried by sovia: client %" PRIu64 ", server %" PRIu64
                   " (on kernel TCP: %" PRIu64 ", %" PRIu64 ")\n",
                   k->cli, k->srv, k->cli_not, k->srv_not);
    }
    fflush(stdout);
}

static int run_epoll(const struct bench_params *p)
{
    struct rr_proc srv = {-1, -1, -1}, cli = {-1, -1, -1};
    struct rr_result *res = calloc(2, sizeof *res); /* client, server */
    double warmup = p->warmup >= 0 ? p->warmup : p->seconds / 2 < 0.5 ? p->seconds / 2 : 0.5;
    double setup = (double)p->count / 500.0 + 60.0, load[1] = {0};
    char count[24], active[24], addr[32], go[96], line[16];
    char *sargv[] = {(char *)p->rr_worker, "ep-server", "--count", count, NULL};
    char *cargv[] = {(char *)p->rr_worker, "ep-client", "--count", count, "--active", active,
                     addr, NULL};
    struct conns_carried k = {false, 0, 0, 0, 0};
    struct carried c;
    int64_t start, warm, end;
    setenv("SOVIA_SHORT_CONNS", "0", 0); /* as run_conns: what carried ones cost */
    int rc = -1, len;

    if (!res)
        return BENCH_EXIT_FAIL;
    carried_begin(&c, p);
    snprintf(count, sizeof count, "%lu", p->count);
    snprintf(active, sizeof active, "%lu", p->active);
    if (rr_proc_spawn(&srv, p->rr_worker, sargv, NULL, NULL) != 0) {
        rr_report_error("epoll", "server", 0, "start");
        goto out;
    }
    if (read_ready(&srv, "epoll", addr, sizeof addr) != 0)
        goto out;
    if (rr_proc_spawn(&cli, p->rr_worker, cargv, NULL, NULL) != 0 ||
        rr_read_by(cli.res, line, sizeof line, true, bench_now() + setup) < 0 ||
        strcmp(line, "ready") != 0) {
        rr_report_error("epoll", "client", 0, "connections");
        goto out;
    }
    getloadavg(load, 1);
    start = rr_now_ns() + START_DELAY_NS;
    warm = start + (int64_t)(warmup * 1e9);
    end = warm + (int64_t)(p->seconds * 1e9);
    len = snprintf(go, sizeof go, "go %lld %lld %lld\n", (long long)start, (long long)warm,
                   (long long)end);
    if (write(srv.ctl, go, (size_t)len) != len || write(cli.ctl, go, (size_t)len) != len) {
        rr_report_error("epoll", "worker", 0, "start");
        goto out;
    }
    if (read_result(&cli, "epoll", "client", &res[0], sizeof res[0], RR_RESULT_MAGIC,
                    (double)end / 1e9 + RESULT_MARGIN_S + setup) != 0 ||
        read_result(&srv, "epoll", "server", &res[1], sizeof res[1], RR_RESULT_MAGIC,
                    bench_now() + setup) != 0)
        goto out;
    rc = 0;
out:
    rc = reap_pair(&cli, &srv, "epoll", rc, &c, &k);
    if (rc == 0)
        out_epoll(p, &res[0], &res[1], warmup, load[0], &k, p->json);
    else
        fprintf(stderr, "sovia bench epoll: %s: run failed\n", p->transport);
    free(res);
    return rc == 0 ? BENCH_EXIT_OK : BENCH_EXIT_FAIL;
}

int bench_run_conns(const struct bench_params *p)
{
    const char *mode = p->mode == BENCH_CONNS ? "conns"
                       : p->mode == BENCH_EPOLL ? "epoll"
                                                : "connrate";
    void (*old_pipe)(int);
    int rc = check(p, mode);

    if (rc != BENCH_EXIT_OK)
        return rc;
    /* A worker that dies must not take this process with it. */
    old_pipe = signal(SIGPIPE, SIG_IGN);
    rc = p->mode == BENCH_CONNS   ? run_conns(p)
         : p->mode == BENCH_EPOLL ? run_epoll(p)
                                  : run_connrate(p);
    signal(SIGPIPE, old_pipe);
    return rc;
}
