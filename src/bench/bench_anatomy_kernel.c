/*
 * bench_anatomy_kernel.c - `sovia bench anatomy --transport udp|tcp`: the
 * stages of one small message through the kernel over loopback (seed 002
 * Table 1), from tracepoints.
 *
 * A tracefs instance of our own (instances/sovia-anatomy-PID, removed
 * however the run ends but SIGKILL) records, on the x86-tsc trace clock
 * (the TSC user code reads), the events of the two processes only
 * (set_event_pid): the sender's sendto entry, its socket's send (TCP),
 * net_dev_queue, net_dev_start_xmit, the loopback's netif_rx, the backlog
 * softirq's netif_receive_skb (run in the sender's context on loopback,
 * when its bottom half is enabled again), sk_data_ready (the receive
 * processing done), the receiver's sock_recv_length (bytes copied) and its
 * recvfrom's exit. skb_copy_datagram_iovec does not fire here (UDP copies
 * a linear skb with copy_to_iter), and the polling recvfrom that found the
 * message cannot be told at its entry from the tens that did not (a filter
 * sees only the entry's arguments): finding and copying are one stage. The driver marks its call
 * with rdtsc, the peer its return. The receiver polls (recvfrom with
 * MSG_DONTWAIT, as seed 002's receiver); only calls that got bytes are
 * recorded (filters ret > 0).
 */
#include "bench_anatomy.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_ITERS 2000u
#define BATCH 20u

/* Points of kernel events: above the library's. */
enum {
    K_SENDTO = VIPX_TP_COUNT + 1, K_SEND_LOCKED, K_DEV_QUEUE, K_START_XMIT, K_NETIF_RX,
    K_RECEIVE_SKB, K_DATA_READY, K_RECV_LENGTH, K_RECV_EXIT,
};

/* The event, the name its lines show (system calls show theirs), filter. */
static const struct { const char *event, *shown, *filter; uint32_t point; } events_of[] = {
    {"syscalls/sys_enter_sendto", "sys_sendto", NULL, K_SENDTO},
    {"tcp/tcp_sendmsg_locked", "tcp_sendmsg_locked", NULL, K_SEND_LOCKED},
    {"net/net_dev_queue", "net_dev_queue", NULL, K_DEV_QUEUE},
    {"net/net_dev_start_xmit", "net_dev_start_xmit", NULL, K_START_XMIT},
    {"net/netif_rx", "netif_rx", NULL, K_NETIF_RX},
    {"net/netif_receive_skb", "netif_receive_skb", NULL, K_RECEIVE_SKB},
    {"sock/sk_data_ready", "sk_data_ready", NULL, K_DATA_READY},
    {"sock/sock_recv_length", "sock_recv_length", "ret > 0", K_RECV_LENGTH},
    {"syscalls/sys_exit_recvfrom", "sys_recvfrom", "ret > 0", K_RECV_EXIT},
};
#define NEVENTS (sizeof events_of / sizeof events_of[0])

#define STAGES_COMMON_SEND                                                                    \
    {K_DEV_QUEUE, DRIVER, "socket, transport and IP send processing"},                       \
    {K_START_XMIT, DRIVER, "device queue (loopback: no qdisc)"},                              \
    {K_NETIF_RX, DRIVER, "loopback transmit"},                                                \
    {K_RECEIVE_SKB, DRIVER, "softirq raised and run (backlog)"},                              \
    {K_DATA_READY, DRIVER, "IP and transport receive processing, queued"},                    \
    {K_RECV_LENGTH, PEER, "peer's polling recvfrom finds it, copies to user"},                \
    {K_RECV_EXIT, PEER, "socket receive post-processing"},                                    \
    {VIPX_TP_RETURN, PEER, "system call return"}

static const struct anatomy_stage udp_stages[] = {
    {VIPX_TP_CALL, DRIVER, NULL},
    {K_SENDTO, DRIVER, "system call entry"},
    STAGES_COMMON_SEND,
};
static const struct anatomy_stage tcp_stages[] = {
    {VIPX_TP_CALL, DRIVER, NULL},
    {K_SENDTO, DRIVER, "system call entry"},
    {K_SEND_LOCKED, DRIVER, "socket send processing (socket locked)"},
    STAGES_COMMON_SEND,
};
static const struct anatomy_path kpaths[] = {
    {"udp", "udp", udp_stages, sizeof udp_stages / sizeof udp_stages[0]},
    {"tcp", "tcp", tcp_stages, sizeof tcp_stages / sizeof tcp_stages[0]},
};

const struct anatomy_path *bench_anatomy_kernel_path(const char *transport)
{
    for (size_t i = 0; i < sizeof kpaths / sizeof kpaths[0]; i++)
        if (strcmp(kpaths[i].transport, transport) == 0)
            return &kpaths[i];
    return NULL;
}

static char inst[128]; /* our tracefs instance, "" when none */

static int put(const char *rel, const char *val)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", inst, rel);
    int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = write(fd, val, strlen(val));
    int err = n < 0 ? -errno : 0;
    close(fd);
    return err;
}

static void remove_instance(void)
{
    if (!inst[0])
        return;
    (void)put("tracing_on", "0");
    for (size_t i = 0; i < NEVENTS; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "events/%s/enable", events_of[i].event);
        (void)put(rel, "0");
    }
    (void)rmdir(inst);
    inst[0] = 0;
}

static void on_signal(int sig)
{
    remove_instance();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Our own instance with its clock, events and filters; -1 (said why). */
static bool path_uses(const struct anatomy_path *pa, uint32_t point)
{
    for (size_t s = 0; s < pa->n; s++)
        if (pa->stages[s].point == point)
            return true;
    return false;
}

static int make_instance(const struct anatomy_path *pa, pid_t a, pid_t b, uint64_t iters)
{
    static const char *roots[] = {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"};
    const char *why = "no tracefs";
    int err = 0;

    for (size_t i = 0; i < 2 && !inst[0]; i++) {
        snprintf(inst, sizeof inst, "%s/instances/sovia-anatomy-%d", roots[i], (int)getpid());
        if (mkdir(inst, 0700) != 0) {
            err = errno;
            inst[0] = 0;
        }
    }
    if (!inst[0]) {
        fprintf(stderr, "sovia bench anatomy: cannot make a tracefs instance: %s (%s; "
                        "root and a mounted tracefs are needed)\n", strerror(err), why);
        return -1;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    char pids[64], kb[32];
    snprintf(pids, sizeof pids, "%d %d", (int)a, (int)b);
    if ((err = put("trace_clock", "x86-tsc")) != 0) {
        fprintf(stderr, "sovia bench anatomy: no x86-tsc trace clock (%s)\n", strerror(-err));
        return -1;
    }
    /* About 1 KB of events per round trip on each CPU: twice that. */
    snprintf(kb, sizeof kb, "%llu", (unsigned long long)(iters < 512 ? 1024 : 2 * iters));
    if ((err = put("buffer_size_kb", kb)) != 0 || (err = put("set_event_pid", pids)) != 0) {
        fprintf(stderr, "sovia bench anatomy: tracefs: %s\n", strerror(-err));
        return -1;
    }
    for (size_t i = 0; i < NEVENTS; i++) {
        char rel[128];
        if (!path_uses(pa, events_of[i].point))
            continue;
        if (events_of[i].filter) {
            snprintf(rel, sizeof rel, "events/%s/filter", events_of[i].event);
            err = put(rel, events_of[i].filter);
        }
        snprintf(rel, sizeof rel, "events/%s/enable", events_of[i].event);
        if (err == 0)
            err = put(rel, "1");
        if (err != 0) {
            fprintf(stderr, "sovia bench anatomy: tracepoint %s: %s\n", events_of[i].event,
                    strerror(-err));
            return -1;
        }
    }
    return 0;
}

/* A connected pair over loopback: fds[0] the driver's, fds[1] the peer's. */
static int socket_pair(bool tcp, int fds[2])
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    int one = 1;

    if (!tcp) {
        struct sockaddr_in b = a;
        socklen_t bl = sizeof b;
        fds[0] = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        fds[1] = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fds[0] < 0 || fds[1] < 0 || bind(fds[0], (struct sockaddr *)&a, al) != 0 ||
            bind(fds[1], (struct sockaddr *)&b, bl) != 0 ||
            getsockname(fds[0], (struct sockaddr *)&a, &al) != 0 ||
            getsockname(fds[1], (struct sockaddr *)&b, &bl) != 0 ||
            connect(fds[0], (struct sockaddr *)&b, bl) != 0 ||
            connect(fds[1], (struct sockaddr *)&a, al) != 0)
            return -1;
        return 0;
    }
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&a, al) != 0 || listen(l, 1) != 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) != 0)
        return -1;
    fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fds[0] < 0 || connect(fds[0], (struct sockaddr *)&a, al) != 0)
        return -1;
    fds[1] = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    close(l);
    if (fds[1] < 0)
        return -1;
    setsockopt(fds[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fds[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return 0;
}

/* Polls until `len` bytes came (one datagram, or the stream's next len). */
static int poll_recv(int fd, char *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = recvfrom(fd, buf + got, len - got, MSG_DONTWAIT, NULL, NULL);
        if (n > 0)
            got += (size_t)n;
        else if (n == 0 || (errno != EAGAIN && errno != EINTR))
            return -1;
    }
    return 0;
}

static int send_all(int fd, const char *buf, size_t len)
{
    return sendto(fd, buf, len, 0, NULL, 0) == (ssize_t)len ? 0 : -1;
}

/* The peer: echoes `trips` messages, marking each return from the
 * `traced`-th on (the driver's traced run). */
static void peer(int fd, size_t size, uint64_t trips, uint64_t traced, int cpu)
{
    char buf[256];
    if (cpu >= 0)
        (void)bench_pin_self(cpu);
    for (uint64_t i = 0; i < trips; i++) {
        if (i == traced)
            VipxTraceStart(bench_anatomy_rings[PEER]);
        if (poll_recv(fd, buf, size) != 0)
            _exit(1);
        VIPX_TRACE(VIPX_TP_RETURN, size);
        if (send_all(fd, buf, size) != 0)
            _exit(1);
    }
    _exit(0);
}

/* `iters` round trips in batches; the median batch's one-way us. */
static int pingpong(int fd, size_t size, uint64_t iters, double *one_way_us)
{
    char buf[256] = {0};
    double *v = malloc((iters / BATCH + 1) * sizeof(double));
    size_t k = 0;
    if (!v)
        return -1;
    for (uint64_t done = 0; done < iters;) {
        uint64_t n = iters - done < BATCH ? iters - done : BATCH;
        double t0 = bench_now();
        for (uint64_t i = 0; i < n; i++) {
            VIPX_TRACE(VIPX_TP_CALL, size);
            if (send_all(fd, buf, size) != 0 || poll_recv(fd, buf, size) != 0) {
                free(v);
                return -1;
            }
        }
        v[k++] = (bench_now() - t0) / (double)n / 2.0 * 1e6;
        done += n;
    }
    *one_way_us = bench_median(v, k);
    free(v);
    return 0;
}

static int cmp_tsc(const void *a, const void *b)
{
    uint64_t x = ((const VIPX_TRACE_EVENT *)a)->Tsc, y = ((const VIPX_TRACE_EVENT *)b)->Tsc;
    return (x > y) - (x < y);
}

/* Appends the trace's events to the rings of their side (by pid). Lines:
 * "  task-PID  [CPU] flags  TSC: event: ...". */
static int read_trace(pid_t driver, pid_t peerpid, size_t size)
{
    char path[200], line[1024];
    snprintf(path, sizeof path, "%s/trace", inst);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f)) {
        char *br = strstr(line, " [");
        char *colon = br ? strstr(br, ": ") : NULL;
        if (!br || !colon || line[0] == '#')
            continue;
        char *dash = br;
        while (dash > line && dash[-1] == ' ')
            dash--;
        while (dash > line && dash[-1] != '-')
            dash--;
        long pid = strtol(dash, NULL, 10);
        char *ts = colon;
        while (ts > br && ts[-1] != ' ')
            ts--;
        uint64_t tsc = strtoull(ts, NULL, 10);
        char *name = colon + 2;
        name[strcspn(name, ":( ")] = 0;
        enum side sd = pid == driver ? DRIVER : pid == peerpid ? PEER : 2;
        for (size_t i = 0; i < NEVENTS && sd != 2; i++) {
            VIPX_TRACE_RING *r = bench_anatomy_rings[sd];
            if (strcmp(events_of[i].shown, name) != 0 || r->Count >= r->Capacity)
                continue;
            r->Events[r->Count++] = (VIPX_TRACE_EVENT){tsc, events_of[i].point, (uint32_t)size};
        }
    }
    fclose(f);
    for (int s = 0; s < 2; s++)
        qsort(bench_anatomy_rings[s]->Events, bench_anatomy_rings[s]->Count,
              sizeof(VIPX_TRACE_EVENT), cmp_tsc);
    return 0;
}

int bench_anatomy_kernel(const struct anatomy_path *pa, const struct bench_params *p)
{
    uint64_t iters = p->iters ? p->iters : DEFAULT_ITERS;
    bool tcp = strcmp(pa->transport, "tcp") == 0;
    int fds[2] = {-1, -1}, cpus[2] = {-1, -1}, rc = BENCH_EXIT_FAIL;
    double plain_us, traced_us;

    if (p->size > 256) {
        fprintf(stderr, "sovia bench anatomy: %s: --size at most 256\n", pa->transport);
        return BENCH_EXIT_USAGE;
    }
    if (bench_pick_cpus(cpus) < 2)
        cpus[0] = cpus[1] = -1;
    if (socket_pair(tcp, fds) != 0) {
        perror("sovia bench anatomy: sockets");
        return BENCH_EXIT_FAIL;
    }
    if (bench_anatomy_prepare(iters) != 0)
        return BENCH_EXIT_FAIL;
    /* Warm-up and the plain run, then the traced run: one peer for all. */
    uint64_t warm = iters / 10 < 100 ? 100 : iters / 10;
    pid_t pid = bench_fork_peer();
    if (pid < 0)
        goto out;
    if (pid == 0) {
        close(fds[0]);
        peer(fds[1], p->size, warm + 2 * iters, warm + iters, cpus[1]);
    }
    close(fds[1]);
    fds[1] = -1;
    if (cpus[0] >= 0)
        (void)bench_pin_self(cpus[0]);
    if (pingpong(fds[0], p->size, warm, &plain_us) != 0 ||
        pingpong(fds[0], p->size, iters, &plain_us) != 0)
        goto kill;
    if (make_instance(pa, getpid(), pid, iters) != 0 || put("tracing_on", "1") != 0) {
        rc = BENCH_EXIT_UNAVAILABLE;
        goto kill;
    }
    double mark = bench_anatomy_mark_cost();
    VipxTraceStart(bench_anatomy_rings[DRIVER]);
    uint64_t k0 = VipxTraceClock();
    double s0 = bench_anatomy_clock_s();
    if (pingpong(fds[0], p->size, iters, &traced_us) != 0)
        goto kill;
    double ticks_per_us = (double)(VipxTraceClock() - k0) / ((bench_anatomy_clock_s() - s0) * 1e6);
    VipxTraceStart(NULL);
    (void)put("tracing_on", "0");
    if (bench_wait_child(pid, 10.0) != 0) { /* reaped: its pid stays only a number */
        fprintf(stderr, "sovia bench anatomy: %s: peer failed\n", pa->transport);
        goto out;
    }
    if (read_trace(getpid(), pid, p->size) != 0)
        goto out;
    rc = bench_anatomy_finish(pa, (uint32_t)p->size, iters, ticks_per_us, mark, plain_us,
                              traced_us, p->json) == 0 ? BENCH_EXIT_OK : BENCH_EXIT_FAIL;
    goto out;
kill:
    bench_kill_child(pid);
out:
    remove_instance();
    if (fds[0] >= 0)
        close(fds[0]);
    bench_anatomy_release();
    return rc;
}
