/* rr_output.c - the result of `sovia bench rr`: the workers' counts, CPU
 * times and histograms summed into one JSON object or one table row. */
#include "bench_internal.h"
#include "rr.h"

#include <inttypes.h>
#include <stdlib.h>

struct side_cpu {
    uint64_t user_ns, sys_ns;
};

static void add_cpu(struct side_cpu *c, const struct rr_result *r)
{
    /* CPU times only grow; a worker whose samples say otherwise adds none. */
    if (r->cpu_user_ns[1] >= r->cpu_user_ns[0])
        c->user_ns += r->cpu_user_ns[1] - r->cpu_user_ns[0];
    if (r->cpu_sys_ns[1] >= r->cpu_sys_ns[0])
        c->sys_ns += r->cpu_sys_ns[1] - r->cpu_sys_ns[0];
}

static double per_tx_us(uint64_t ns, uint64_t tx)
{
    return tx ? (double)ns / 1e3 / (double)tx : 0.0;
}

void bench_out_rr(const struct rr_run_info *in, const struct rr_result *res, size_t nres,
                  bool json)
{
    struct rr_hist *lat = calloc(1, sizeof *lat);
    struct side_cpu cli = {0, 0}, srv = {0, 0};
    uint64_t tx = 0, tx_all = 0, echoes = 0, unanswered = 0, late = 0;
    double tps, p50, p99, p999, mean, cpu_all;
    unsigned procs = in->procs_per_side * 2;

    if (!lat) {
        fprintf(stderr, "sovia bench rr: out of memory\n");
        return;
    }
    for (size_t i = 0; i < nres; i++) {
        const struct rr_result *r = &res[i];
        if (r->role == RR_ROLE_CLIENT) {
            tx += r->tx_window;
            tx_all += r->tx_total;
            unanswered += r->unanswered;
            rr_hist_merge(lat, &r->lat);
            add_cpu(&cli, r);
        } else {
            echoes += r->tx_total;
            add_cpu(&srv, r);
        }
        if (r->mark_late_ns > late)
            late = r->mark_late_ns;
    }
    tps = in->seconds > 0 ? (double)tx / in->seconds : 0.0;
    p50 = rr_hist_quantile(lat, 0.50) / 1e3;
    p99 = rr_hist_quantile(lat, 0.99) / 1e3;
    p999 = rr_hist_quantile(lat, 0.999) / 1e3;
    mean = lat->count ? (double)lat->sum_ns / (double)lat->count / 1e3 : 0.0;
    cpu_all = (double)(cli.user_ns + cli.sys_ns + srv.user_ns + srv.sys_ns);
    if (json) {
        printf("{\"transport\":\"%s\",\"pairs\":%u,\"conns\":%u,\"size\":%zu,"
               "\"threads\":%s,\"processes\":%u,\"threads_per_process\":%u,\"cpus\":%d,"
               "\"load_1m\":%.3g,\"seconds\":%.6g,\"warmup\":%.6g,",
               in->transport, in->pairs, in->conns, in->size, in->threads ? "true" : "false",
               procs, in->threads_per_proc, in->cpus, in->load_1m, in->seconds, in->warmup);
        printf("\"tx\":%" PRIu64 ",\"tps\":%.1f,\"p50_us\":%.6g,\"p99_us\":%.6g,"
               "\"p999_us\":%.6g,\"max_us\":%.6g,\"mean_us\":%.6g,\"latency_samples\":%" PRIu64
               ",\"unanswered\":%" PRIu64 ",",
               tx, tps, p50, p99, p999, (double)lat->max_ns / 1e3, mean, lat->count,
               unanswered);
        printf("\"cpu_us_per_tx\":%.6g,\"cpu_user_us_per_tx\":%.6g,\"cpu_sys_us_per_tx\":%.6g,"
               "\"client_cpu_us_per_tx\":%.6g,\"server_cpu_us_per_tx\":%.6g,"
               "\"cpu_cores\":%.4g,\"cpu_total_s\":%.6g,\"answers_total\":%" PRIu64
               ",\"echoes_total\":%" PRIu64 ",\"mark_late_ms\":%.3g}\n",
               per_tx_us((uint64_t)cpu_all, tx), per_tx_us(cli.user_ns + srv.user_ns, tx),
               per_tx_us(cli.sys_ns + srv.sys_ns, tx), per_tx_us(cli.user_ns + cli.sys_ns, tx),
               per_tx_us(srv.user_ns + srv.sys_ns, tx), cpu_all / 1e9 / in->seconds,
               in->cpu_total_s, tx_all, echoes, (double)late / 1e6);
    } else {
        printf("%-14s %5s %5s %7s %11s %9s %9s %9s %9s %10s %10s\n", "transport", "pairs",
               "conns", "size", "tps", "p50 us", "p99 us", "p99.9 us", "max us", "cpu us/tx",
               "(user+sys)");
        printf("%-14s %5u %5u %7zu %11.0f %9.1f %9.1f %9.1f %9.1f %10.2f %4.2f+%.2f\n",
               in->transport, in->pairs, in->conns, in->size, tps, p50, p99, p999,
               (double)lat->max_ns / 1e3, per_tx_us((uint64_t)cpu_all, tx),
               per_tx_us(cli.user_ns + srv.user_ns, tx), per_tx_us(cli.sys_ns + srv.sys_ns, tx));
        printf("load: %u processes (%u client, %u server) x %u thread%s on %d CPU%s, load "
               "average %.2f at the start; %.3g s counted after %.3g s of warm-up; CPU %.2f "
               "cores busy\n",
               procs, in->procs_per_side, in->procs_per_side, in->threads_per_proc,
               in->threads_per_proc == 1 ? "" : "s", in->cpus, in->cpus == 1 ? "" : "s",
               in->load_1m, in->seconds, in->warmup, cpu_all / 1e9 / in->seconds);
        if (unanswered)
            printf("unanswered: %" PRIu64 " request(s) never answered (counted in the "
                   "latency with the time waited)\n", unanswered);
    }
    if (unanswered)
        fprintf(stderr, "sovia bench rr: %s: %" PRIu64 " request(s) never answered\n",
                in->transport, unanswered);
    fflush(stdout);
    free(lat);
}
