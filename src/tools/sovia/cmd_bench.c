/*
 * cmd_bench.c - `sovia bench lat|bw|sweep|idle|wake|rr|conns|connrate|epoll|anatomy`:
 * parse the command line into a bench_params and hand it to the bench library.
 */
#include "cli.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <bench.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

enum { OPT_TRANSPORT = 't', OPT_SIZE = 's', OPT_ITERS = 'n', OPT_SECONDS = 'S',
       OPT_MAX_SIZE = 'm', OPT_JSON = 'j', OPT_CONFIG = 'c', OPT_SAME_CPU = 'C',
       OPT_HELP = 'h', OPT_PAIRS = 'P', OPT_CONNS = 'K', OPT_THREADS = 'T', OPT_WARMUP = 'W',
       OPT_COUNT = 'N', OPT_CLIENTS = 'L', OPT_ACTIVE = 'A', OPT_RING = 'R', OPT_FRAG = 'F' };

#define O_TRANSPORT {"transport", required_argument, NULL, OPT_TRANSPORT}
#define O_SIZE {"size", required_argument, NULL, OPT_SIZE}
#define O_JSON {"json", no_argument, NULL, OPT_JSON}
#define O_CONFIG {"config", required_argument, NULL, OPT_CONFIG}
#define O_HELP {"help", no_argument, NULL, OPT_HELP}
#define O_RING {"ring", required_argument, NULL, OPT_RING}, {"frag", required_argument, NULL, OPT_FRAG}
#define O_END {NULL, 0, NULL, 0}

static const struct option lat_opts[] = {
    O_TRANSPORT, O_SIZE, {"iters", required_argument, NULL, OPT_ITERS}, O_CONFIG, O_RING,
    O_JSON, O_HELP, O_END};
static const struct option anatomy_opts[] = {
    O_TRANSPORT, O_SIZE, {"iters", required_argument, NULL, OPT_ITERS}, O_JSON, O_HELP, O_END};
static const struct option bw_opts[] = {
    O_TRANSPORT, O_SIZE, {"seconds", required_argument, NULL, OPT_SECONDS}, O_CONFIG, O_RING,
    O_JSON, O_HELP, O_END};
static const struct option idle_opts[] = {
    O_TRANSPORT, {"seconds", required_argument, NULL, OPT_SECONDS}, O_CONFIG, O_JSON, O_HELP,
    O_END};
static const struct option wake_opts[] = {
    {"iters", required_argument, NULL, OPT_ITERS}, {"same-cpu", no_argument, NULL, OPT_SAME_CPU},
    O_JSON, O_HELP, O_END};
static const struct option sweep_opts[] = {
    O_TRANSPORT, {"max-size", required_argument, NULL, OPT_MAX_SIZE}, O_CONFIG, O_RING, O_JSON,
    O_HELP, O_END};
static const struct option rr_opts[] = {
    O_TRANSPORT, {"pairs", required_argument, NULL, OPT_PAIRS},
    {"conns", required_argument, NULL, OPT_CONNS}, O_SIZE,
    {"seconds", required_argument, NULL, OPT_SECONDS},
    {"warmup", required_argument, NULL, OPT_WARMUP}, {"threads", no_argument, NULL, OPT_THREADS},
    O_JSON, O_HELP, O_END};

static const struct option conns_opts[] = {
    O_TRANSPORT, {"count", required_argument, NULL, OPT_COUNT}, O_JSON, O_HELP, O_END};
static const struct option connrate_opts[] = {
    O_TRANSPORT, {"seconds", required_argument, NULL, OPT_SECONDS},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"clients", required_argument, NULL, OPT_CLIENTS}, O_JSON, O_HELP, O_END};
static const struct option epoll_opts[] = {
    O_TRANSPORT, {"count", required_argument, NULL, OPT_COUNT},
    {"active", required_argument, NULL, OPT_ACTIVE},
    {"seconds", required_argument, NULL, OPT_SECONDS},
    {"warmup", required_argument, NULL, OPT_WARMUP}, O_JSON, O_HELP, O_END};

/* The --config lines of every mode's help. */
#define HELP_CONFIG                                                                           \
    "  --config LABEL sovia transports only: apply a configuration label (the\n"              \
    "                 papers' Table 4: SOVIA_BASE, SOVIA_DACKS, SOVIA_COMBINE, ...;\n"       \
    "                 'sovia bench --help' lists them) on top of the environment;\n"         \
    "                 the transport's wait mode still applies. Without a label that\n"      \
    "                 turns combining on, TCP_NODELAY is set (as for tcp).\n"
#define HELP_RING                                                                             \
    "  --ring N       vi transports only: NetPIPE-VIA's ring (seed 001): N receive\n"        \
    "                 descriptors with a buffer each; the sender stops after N\n"           \
    "                 unacknowledged pieces until the receiver, all N reposted,\n"          \
    "                 says \"continue\" (1 to 1024; N * piece <= 64M)\n"                    \
    "  --frag F       with --ring: bytes per descriptor (default: the largest\n"           \
    "                 message); a message goes as ceil(size / F) pieces\n"

struct bench_mode_desc {
    const char *name;
    enum bench_mode mode;
    const char *summary;
    const char *help; /* usage line and options */
    const struct option *opts;
};

static const struct bench_mode_desc modes[] = {
    {"lat", BENCH_LAT, "ping-pong latency (one-way = half the round trip)",
     "usage: sovia bench lat --transport T --size N [--iters K] [--config LABEL]\n"
     "                 [--ring N [--frag F]] [--json]\n"
     "\n"
     "Ping-pong between two processes: one-way latency is half the round trip.\n"
     "Round trips are timed in batches (CLOCK_MONOTONIC) so the clock does not\n"
     "dominate sub-microsecond results; a warm-up runs first.\n"
     "Reports the median over batches of the per-iteration one-way time (p50)\n"
     "and the mean (total time / iters / 2), in microseconds.\n"
     "\n"
     "  --transport T  see 'sovia bench --help' for the list\n"
     "  --size N       message size in bytes; K and M suffixes (1K = 1024)\n"
     "  --iters K      round trips (default 100000, fewer for large sizes so that\n"
     "                 at most 1 GiB moves each way)\n"
     HELP_CONFIG
     HELP_RING
     "  --json         one JSON object per line: transport, size, iters,\n"
     "                 one_way_p50_us, one_way_mean_us (sovia transports: also\n"
     "                 config, the label or \"default\")\n",
     lat_opts},
    {"anatomy", BENCH_ANATOMY, "the stages of one message, from probe points (seed 002)",
     "usage: sovia bench anatomy --transport vi|sovia|udp|tcp [--size N] [--iters K] [--json]\n"
     "\n"
     "Where the time of one small message goes, stage by stage (seed 002's\n"
     "Tables 1-3): post, hand-off to the provider, data written, completion\n"
     "written, peer detects, reaped, returned to the caller. First the plain\n"
     "ping-pong runs with tracing off (the one-way latency the stages should\n"
     "add up to), then again with the probes of vipl_trace.h on in both\n"
     "processes, each writing the TSC into a ring the two share. Prints each\n"
     "stage's median over the messages, their sum, and the one-way latency\n"
     "with tracing on and off. udp and tcp: the kernel's stages over loopback\n"
     "from tracepoints (a tracefs instance of its own, x86-tsc clock; root).\n"
     "\n"
     "  --transport T  vi (vipl over shm, polling), sovia (polling), or udp, tcp\n"
     "                 (kernel over loopback, polling recvfrom; tracepoints: root)\n"
     "  --size N       message size in bytes (default 4)\n"
     "  --iters K      round trips of each of the two runs (default 20000; udp\n"
     "                 and tcp 2000)\n"
     "  --json         one JSON object per stage: path, stage, us; then a\n"
     "                 summary: stages_sum_us, traced_total_us (call to return,\n"
     "                 median), traced_one_way_us, one_way_us (tracing off),\n"
     "                 windows, complete (messages with every mark), clock\n",
     anatomy_opts},
    {"bw", BENCH_BW, "unidirectional streaming bandwidth",
     "usage: sovia bench bw --transport T --size N [--seconds S] [--config LABEL]\n"
     "                 [--ring N [--frag F]] [--json]\n"
     "\n"
     "The sender streams messages of N bytes for S seconds, then the receiver\n"
     "acknowledges the last message with a small reply and the sender stops the\n"
     "clock. Reports payload Gbit/s (1e9 bits).\n"
     "\n"
     "  --transport T  see 'sovia bench --help' for the list\n"
     "  --size N       message size in bytes; K and M suffixes (1K = 1024)\n"
     "  --seconds S    streaming time (default 2; fractions allowed)\n"
     HELP_CONFIG
     HELP_RING
     "  --json         one JSON object per line: transport, size, iters (messages),\n"
     "                 seconds, gbps (sovia transports: also config)\n",
     bw_opts},
    {"sweep", BENCH_SWEEP, "NetPIPE-style latency/throughput sweep over sizes",
     "usage: sovia bench sweep --transport T [--max-size N] [--config LABEL]\n"
     "                 [--ring N [--frag F]] [--json]\n"
     "\n"
     "NetPIPE-style sweep (Ong & Farrell): sizes c-3, c, c+3 for c = 1, 2, 4, ...\n"
     "bytes. Each size is a ping-pong run whose iteration count is calibrated so\n"
     "it takes about 75 ms; it reports one-way latency and Mbps = size*8/latency\n"
     "(median one-way time). The sweep stops after the first size whose one-way\n"
     "transfer takes over 1 s, or when c exceeds --max-size.\n"
     "\n"
     "  --transport T  see 'sovia bench --help' for the list\n"
     "  --max-size N   largest size tried (default 8M; K and M suffixes). The cap\n"
     "                 exists because on shared memory the 1 s rule alone would\n"
     "                 need multi-GB messages. Transports with a smaller message\n"
     "                 limit (vi: 4M) stop there.\n"
     HELP_CONFIG
     HELP_RING
     "  --json         one JSON object per line and size: transport, size, iters,\n"
     "                 one_way_p50_us, one_way_mean_us, mbps (sovia transports:\n"
     "                 also config)\n",
     sweep_opts},
    {"idle", BENCH_IDLE, "CPU used by a receiver waiting on a silent peer",
     "usage: sovia bench idle --transport T [--seconds S] [--config LABEL] [--json]\n"
     "\n"
     "The peer stays silent for S seconds while the driver waits in its receive\n"
     "call, then answers. Reports the driver's CPU time over that wait (all its\n"
     "threads, user + system) as a percentage of one core: about 100 for polling\n"
     "transports, near 0 for blocking ones.\n"
     "\n"
     "  --transport T  see 'sovia bench --help' for the list\n"
     "  --seconds S    how long the peer stays silent (default 2)\n"
     HELP_CONFIG
     "  --json         one JSON object: transport, seconds, cpu_percent (sovia\n"
     "                 transports: also config)\n",
     idle_opts},
    {"wake", BENCH_WAKE, "cost of waking a blocked thread (the papers' Tsync)",
     "usage: sovia bench wake [--iters K] [--same-cpu] [--json]\n"
     "\n"
     "Two threads of one process pass a token back and forth through a mutex and\n"
     "condition variables, each sleeping until the other signals: one-way = half\n"
     "the round trip, the time to wake a blocked thread (Tsync in Kim et al.,\n"
     "2003, section 5.2). No transport is involved.\n"
     "\n"
     "  --iters K      round trips (default 20000)\n"
     "  --same-cpu     both threads on one CPU (default: two CPUs)\n"
     "  --json         one JSON object: transport (wake or wake-same-cpu), size\n"
     "                 (0), iters, one_way_p50_us, one_way_mean_us\n",
     wake_opts},
    {"rr", BENCH_RR, "request-response under load: many processes, many connections",
     "usage: sovia bench rr --transport T --pairs N [--conns K] [--size S]\n"
     "                      [--seconds D] [--warmup W] [--threads] [--json]\n"
     "\n"
     "N client processes and N server processes (with --threads: one client and\n"
     "one server process, N threads each). Each client thread holds K connections\n"
     "to its server in one event loop (epoll; sov_poll for the sovia transports)\n"
     "with one request of S bytes outstanding on each; the server sends each\n"
     "request back and the client checks every byte of every answer.\n"
     "Nothing is pinned, spinning transports included: this measures the default\n"
     "behaviour when busy processes outnumber the CPUs.\n"
     "\n"
     "Reports transactions/s (answers that arrived in the D counted seconds), the\n"
     "latency of each request from just before it is sent to its last answer\n"
     "byte (p50, p99, p99.9, max: log-linear histogram, within 1.6 %, merged over\n"
     "all clients; every request in flight during the counted seconds counts,\n"
     "those still outstanding at the end are waited for up to 5 s and any never\n"
     "answered are reported), and CPU microseconds per transaction, user and\n"
     "system, of every client and server process (getrusage of each, all its\n"
     "threads, read at the start and the end of the counted seconds), with the\n"
     "load: processes and threads against the CPUs this process may use.\n"
     "\n"
     "  --transport T  tcp (kernel, 127.0.0.1), uds (AF_UNIX stream), preload\n"
     "                 (the same libc program as tcp, both ends under the preload\n"
     "                 library with sovia run's default profile), sovia,\n"
     "                 sovia-block, sovia-adaptive (the sov_* API in each wait mode)\n"
     "  --pairs N      client/server pairs (1 to 256)\n"
     "  --conns K      connections per client (process or thread; default 1,\n"
     "                 at most 1024)\n"
     "  --size S       request and answer size in bytes (default 64, at most 1M;\n"
     "                 K and M suffixes)\n"
     "  --seconds D    counted time (default 3; fractions allowed)\n"
     "  --warmup W     uncounted time before it (default 0.5, or D/2 if less)\n"
     "  --threads      one client and one server process with N threads each\n"
     "  SOVIA_BENCH_RR_LOOP=poll  the libc transports' loops use poll(2), not epoll;\n"
     "                 =oneshot: epoll with one-shot entries re-armed per event\n"
     "  --json         one JSON object: transport, pairs, conns, size, threads,\n"
     "                 processes, threads_per_process, cpus, load_1m, seconds,\n"
     "                 warmup, tx, tps, p50_us, p99_us, p999_us, max_us, mean_us,\n"
     "                 latency_samples, unanswered, cpu_us_per_tx (and its\n"
     "                 cpu_user_/cpu_sys_/client_cpu_/server_cpu_us_per_tx),\n"
     "                 cpu_cores, cpu_total_s (the workers' whole lives),\n"
     "                 answers_total, echoes_total, mark_late_ms\n",
     rr_opts},
    {"conns", BENCH_CONNS, "many connections held at once: setup time and what each costs",
     "usage: sovia bench conns --transport T --count N [--json]\n"
     "\n"
     "A client process opens N connections to a server process (one at a time,\n"
     "each connect() timed) and keeps them all open; one exchange of 16 bytes\n"
     "then goes over every one (all requests out, then every answer checked).\n"
     "Both processes raise their soft RLIMIT_NOFILE to the hard limit, as any\n"
     "program that holds many connections must.\n"
     "\n"
     "Reports the connect time per connection (mean, p50, p99), the exchange\n"
     "and close time per connection, and for each side what holding them costs\n"
     "(from /proc/self, after minus before, divided by N): descriptors,\n"
     "mappings, shared memory mapped (every shared file mapping) and resident\n"
     "(RssShmem), and the resident set.\n"
     "\n"
     "  --transport T  tcp (kernel, 127.0.0.1), or preload (the same program,\n"
     "                 both ends under the preload library, sovia run's default\n"
     "                 profile)\n"
     "  --count N      connections (1 to 1000000)\n"
     "  --json         one JSON object: mode, transport, count, setup_s,\n"
     "                 connect_us_per_conn, connect_p50_us, connect_p99_us,\n"
     "                 ping_us_per_conn, close_us_per_conn, and client and server:\n"
     "                 fds, maps, shm_mapped_kib, shm_resident_kib, rss_kib (with\n"
     "                 them all open) and each _per_conn; preload: carried\n"
     "                 (client, server, client_kernel, server_kernel: connections\n"
     "                 sovia carried and left on kernel TCP, from the workers'\n"
     "                 exit records, unless SOVIA_STAT_LOG is set)\n",
     conns_opts},
    {"connrate", BENCH_CONNRATE, "connect + exchange + close, one after another, per second",
     "usage: sovia bench connrate --transport T [--clients C] [--seconds D]\n"
     "                            [--warmup W] [--json]\n"
     "\n"
     "C client processes against one server process (an epoll loop): each client\n"
     "connects, sends 16 bytes, reads them back (checked) and then the server's\n"
     "close (it closes first, as an HTTP/1.0 server does), closes, and starts\n"
     "again, for D seconds after W of warm-up.\n"
     "\n"
     "Reports connections per second (all clients), the time of one cycle\n"
     "(p50, p99, max) and the CPU microseconds per connection of every process.\n"
     "\n"
     "  --transport T  tcp, or preload (as for conns)\n"
     "  --clients C    client processes (default 1: sequential; 1 to 64)\n"
     "  --seconds D    counted time (default 3)\n"
     "  --warmup W     uncounted time before it (default 0.5, or D/2 if less)\n"
     "  --json         one JSON object: mode, transport, clients, seconds, warmup,\n"
     "                 cpus, load_1m, conns, conns_per_s, p50_us, p99_us, max_us,\n"
     "                 cpu_us_per_conn; preload: carried, kernel (the clients'\n"
     "                 connections, as for conns)\n",
     connrate_opts},
    {"epoll", BENCH_EPOLL, "many connections, few busy, through one epoll server",
     "usage: sovia bench epoll --transport T --count N [--active A] [--seconds D]\n"
     "                         [--warmup W] [--json]\n"
     "\n"
     "A client process opens N connections to a server process, which serves\n"
     "them all from one thread in one level-triggered epoll set, as a typical\n"
     "event loop does; one checked exchange goes over every connection first.\n"
     "Then A of them are busy at a time: the client keeps one request of 64\n"
     "bytes outstanding on each (one poll() loop), the server echoes it, and\n"
     "after each answer that slot moves on to another connection (slot j uses\n"
     "j, j+A, j+2A, ...), so which ones are busy keeps changing; the rest are\n"
     "idle. Both processes raise their soft RLIMIT_NOFILE to the hard limit.\n"
     "\n"
     "Reports transactions per second, their latency (p50, p99, max; from the\n"
     "request's send to the whole answer) and the CPU microseconds per\n"
     "transaction of the server and of the client.\n"
     "\n"
     "  --transport T  tcp, or preload (as for conns)\n"
     "  --count N      connections (1 to 1000000)\n"
     "  --active A     connections busy at once (default 1 % of N, at least 1)\n"
     "  --seconds D    counted time (default 3)\n"
     "  --warmup W     uncounted time before it (default 0.5, or D/2 if less)\n"
     "  --json         one JSON object: mode, transport, count, active, size,\n"
     "                 seconds, warmup, cpus, load_1m, tx, tps, p50_us, p99_us,\n"
     "                 p999_us, max_us, unanswered, server_cpu_us_per_tx,\n"
     "                 client_cpu_us_per_tx; preload: carried (as for conns)\n",
     epoll_opts},
};

#define NMODES (sizeof modes / sizeof modes[0])

static void bench_usage(FILE *f)
{
    const char *const *names = bench_transport_names();
    const char *const *labels = bench_config_labels();

    fprintf(f, "usage: sovia bench <lat|bw|sweep|idle|wake|rr|conns|connrate|epoll|anatomy> --transport T [options]\n"
               "\n"
               "Measures message latency and bandwidth between two processes on this host.\n"
               "Polling transports pin the two processes to different CPUs (rr pins\n"
               "nothing: it measures many processes under load, 'sovia bench rr --help').\n"
               "\n"
               "modes:\n");
    for (size_t i = 0; i < NMODES; i++)
        fprintf(f, "  %-14s %s\n", modes[i].name, modes[i].summary);
    fprintf(f, "\ntransports:\n");
    for (size_t i = 0; names[i]; i++)
        fprintf(f, "  %-14s %s\n", names[i], bench_transport_summary(names[i]));
    fprintf(f, "\n"
               "The sovia transports take --config LABEL, one of the papers' configurations\n"
               "(Kim et al., ICS 2001, Table 4; docs/SOCKETS.md):\n ");
    for (size_t i = 0; labels[i]; i++)
        fprintf(f, " %s%s", labels[i], i % 5 == 4 && labels[i + 1] ? "\n " : "");
    fprintf(f, "\n"
               "\n"
               "Across two hosts (lat, bw, sweep, idle; tcp, vi*, sovia*): SOVIA_BENCH_PEER_NETNS\n"
               "names the network namespace the peer enters (scripts/cluster.sh's\n"
               "<cluster>-2), SOVIA_BENCH_PEER_ADDR / SOVIA_BENCH_DRIVER_ADDR the IPv4\n"
               "addresses each listens at (default 127.0.0.1); SOVIA_PROVIDER=fabric:tcp\n"
               "carries vi and sovia between them (docs/CLUSTER.md).\n"
               "\n"
               "Run 'sovia bench <mode> --help' for a mode's options.\n"
               "Exit status: 0 ok, 1 the run failed, 2 bad usage, 3 transport unavailable.\n");
}

/* conns, connrate: the worker program, and for `preload` the environment
 * `sovia run` gives (the workers inherit it). */
static int run_conns(struct bench_params *p, const char *where)
{
    char worker[PATH_MAX];

    if (!p->transport)
        return cli_usage_error(where, "--transport is required (tcp or preload)");
    if ((p->mode == BENCH_CONNS || p->mode == BENCH_EPOLL) && p->count == 0)
        return cli_usage_error(where, "--count is required");
    if (p->active == 0)
        p->active = p->count / 100 ? p->count / 100 : 1;
    if (p->active > p->count && p->mode == BENCH_EPOLL)
        return cli_usage_error(where, "--active %lu is above --count %lu", p->active, p->count);
    if (p->clients == 0)
        p->clients = 1;
    if (cli_find_helper("sovia-rr", worker, sizeof worker) == 0)
        p->rr_worker = worker;
    if (strcmp(p->transport, "preload") == 0 && cli_run_environment("balanced", where) != 0)
        return BENCH_EXIT_UNAVAILABLE;
    return bench_run(p);
}

/* rr: the checks that need every option, the worker program, and for
 * `preload` the environment `sovia run` gives (the workers inherit it). */
static int run_rr(struct bench_params *p, bool have_size, const char *where)
{
    char worker[PATH_MAX];

    if (!p->transport)
        return cli_usage_error(where, "--transport is required (see sovia bench rr --help)");
    if (p->pairs == 0)
        return cli_usage_error(where, "--pairs is required");
    if (!have_size)
        p->size = BENCH_RR_DEFAULT_SIZE;
    if (p->size > BENCH_RR_MAX_SIZE)
        return cli_usage_error(where, "bad --size %zu (1 to 1M)", p->size);
    if (p->conns == 0)
        p->conns = 1;
    if (cli_find_helper("sovia-rr", worker, sizeof worker) == 0)
        p->rr_worker = worker;
    if (strcmp(p->transport, "preload") == 0 && cli_run_environment("balanced", where) != 0)
        return BENCH_EXIT_UNAVAILABLE;
    return bench_run(p);
}

static int parse_mode(const struct bench_mode_desc *m, int argc, char **argv)
{
    struct bench_params p = {.mode = m->mode, .seconds = BENCH_DEFAULT_BW_SECONDS,
                             .max_size = BENCH_DEFAULT_MAX_SIZE, .warmup = -1};
    char where[32];
    bool have_size = false;
    uint64_t n;
    int c;

    if (m->mode == BENCH_RR || m->mode == BENCH_CONNRATE || m->mode == BENCH_EPOLL)
        p.seconds = BENCH_RR_DEFAULT_SECONDS;

    snprintf(where, sizeof where, "bench %s", m->name);
    optind = 1;
    opterr = 0; /* our own messages, naming the subcommand */
    while ((c = getopt_long(argc, argv, ":h", m->opts, NULL)) != -1) {
        switch (c) {
        case OPT_HELP:
            fputs(m->help, stdout);
            return 0;
        case OPT_TRANSPORT:
            p.transport = optarg;
            break;
        case OPT_SIZE:
            if (!cli_parse_size(optarg, &p.size) || p.size < 1 || p.size > BENCH_SIZE_LIMIT)
                return cli_usage_error(where, "bad --size '%s' (1 to 1024M; K/M suffixes)",
                                       optarg);
            have_size = true;
            break;
        case OPT_ITERS:
            if (!cli_parse_u64(optarg, &p.iters) || p.iters < 1)
                return cli_usage_error(where, "bad --iters '%s' (a positive integer)", optarg);
            break;
        case OPT_SECONDS:
            if (!cli_parse_seconds(optarg, &p.seconds) || p.seconds > 3600)
                return cli_usage_error(where, "bad --seconds '%s' (above 0, at most 3600)",
                                       optarg);
            break;
        case OPT_MAX_SIZE:
            if (!cli_parse_size(optarg, &p.max_size) || p.max_size < 1 ||
                p.max_size > BENCH_SIZE_LIMIT)
                return cli_usage_error(where, "bad --max-size '%s' (1 to 1024M)", optarg);
            break;
        case OPT_CONFIG:
            /* Checked against the transport (and the library) by bench_run. */
            if (!*optarg)
                return cli_usage_error(where, "empty --config label");
            p.config = optarg;
            break;
        case OPT_JSON:
            p.json = true;
            break;
        case OPT_SAME_CPU:
            p.same_cpu = true;
            break;
        case OPT_PAIRS:
        case OPT_CONNS: {
            bool pairs = c == OPT_PAIRS;
            unsigned max = pairs ? BENCH_RR_MAX_PAIRS : BENCH_RR_MAX_CONNS;
            if (!cli_parse_u64(optarg, &n) || n < 1 || n > max)
                return cli_usage_error(where, "bad --%s '%s' (1 to %u)",
                                       pairs ? "pairs" : "conns", optarg, max);
            *(pairs ? &p.pairs : &p.conns) = (unsigned)n;
            break;
        }
        case OPT_THREADS:
            p.threads = true;
            break;
        case OPT_COUNT:
            if (!cli_parse_u64(optarg, &n) || n < 1 || n > BENCH_CONNS_MAX_COUNT)
                return cli_usage_error(where, "bad --count '%s' (1 to %lu)", optarg,
                                       BENCH_CONNS_MAX_COUNT);
            p.count = (unsigned long)n;
            break;
        case OPT_ACTIVE:
            if (!cli_parse_u64(optarg, &n) || n < 1 || n > BENCH_CONNS_MAX_COUNT)
                return cli_usage_error(where, "bad --active '%s' (1 to %lu)", optarg,
                                       BENCH_CONNS_MAX_COUNT);
            p.active = (unsigned long)n;
            break;
        case OPT_CLIENTS:
            if (!cli_parse_u64(optarg, &n) || n < 1 || n > BENCH_CONNRATE_MAX_CLIENTS)
                return cli_usage_error(where, "bad --clients '%s' (1 to %u)", optarg,
                                       BENCH_CONNRATE_MAX_CLIENTS);
            p.clients = (unsigned)n;
            break;
        case OPT_WARMUP:
            if (strcmp(optarg, "0") == 0) /* no warm-up */
                p.warmup = 0;
            else if (!cli_parse_seconds(optarg, &p.warmup) || p.warmup > 3600)
                return cli_usage_error(where, "bad --warmup '%s' (0 to 3600)", optarg);
            break;
        case OPT_RING:
            if (!cli_parse_u64(optarg, &n) || n < 1 || n > BENCH_RING_MAX)
                return cli_usage_error(where, "bad --ring '%s' (1 to %u)", optarg,
                                       BENCH_RING_MAX);
            p.ring = (unsigned)n;
            break;
        case OPT_FRAG:
            if (!cli_parse_size(optarg, &p.frag) || p.frag < BENCH_FRAG_MIN ||
                p.frag > BENCH_SIZE_LIMIT)
                return cli_usage_error(where, "bad --frag '%s' (%zu bytes to 1024M; K/M suffixes)",
                                       optarg, BENCH_FRAG_MIN);
            break;
        case ':':
            return cli_usage_error(where, "option '%s' needs a value", argv[optind - 1]);
        default:
            return cli_usage_error(where, "unknown option '%s' (see sovia bench %s --help)",
                                   argv[optind - 1], m->name);
        }
    }
    if (optind < argc)
        return cli_usage_error(where, "unexpected argument '%s'", argv[optind]);
    if (p.frag && !p.ring)
        return cli_usage_error(where, "--frag needs --ring");
    if (m->mode == BENCH_WAKE)
        return bench_run(&p);
    if (m->mode == BENCH_RR)
        return run_rr(&p, have_size, where);
    if (m->mode == BENCH_CONNS || m->mode == BENCH_CONNRATE || m->mode == BENCH_EPOLL)
        return run_conns(&p, where);
    if (!p.transport)
        return cli_usage_error(where, "--transport is required (see sovia bench --help)");
    if (strcmp(p.transport, "preload") == 0 && m->mode != BENCH_RR &&
        !getenv("SOVIA_BENCH_PRELOADED")) {
        /* The preload must be in the processes from the start: run again
         * with it, polling like the sovia transport. */
        char lib[PATH_MAX];
        if (cli_find_preload(lib, sizeof(lib)) != 0) {
            fprintf(stderr, "sovia bench: preload: cannot find libsovia-preload.so\n");
            return 3;
        }
        setenv("SOVIA_BENCH_PRELOADED", "1", 1);
        setenv("SOVIA_WAIT", "poll", 0);
        if (cli_add_preload(lib) != 0)
            return 1;
        execv("/proc/self/exe", cli_argv);
        perror("sovia bench: preload: re-exec");
        return 1;
    }
    if (m->mode == BENCH_IDLE)
        p.size = BENCH_CTRL_SIZE;
    else if (m->mode == BENCH_ANATOMY && !have_size)
        p.size = 4;
    else if (m->mode != BENCH_SWEEP && !have_size)
        return cli_usage_error(where, "--size is required");
    return bench_run(&p);
}

int cmd_bench(int argc, char **argv)
{
    if (argc < 2) {
        bench_usage(stderr);
        return SOVIA_EXIT_USAGE;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        bench_usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < NMODES; i++)
        if (strcmp(argv[1], modes[i].name) == 0)
            return parse_mode(&modes[i], argc - 1, argv + 1);
    return cli_usage_error("bench", "unknown mode '%s' (see sovia bench --help)", argv[1]);
}
