/*
 * hosts: the sockets layer between two hosts over the fabric provider
 * (docs/SOCKETS.md "Between hosts"; issue 17 item 3). Run by
 * scripts/cluster.sh (test_fabric_hosts.py): the server role enters host 2's
 * network namespace, the client role host 1's, before their first sovia
 * call, and both run with SOVIA_PROVIDER=fabric:tcp; the roles' channel (a
 * socketpair made before the fork) is the only thing they share.
 *
 * Cases: a checksummed stream (SOVIA_TEST_STREAM_MIB, default 1024), a
 * quarter of it again in COPY mode (its packets in flight after send),
 * half-close both ways, sequential connections (up to 1,000, bounded in
 * time), IPv6, a SIGKILLed peer (ECONNRESET or EOF within 1 s), a port
 * nobody listens on (ECONNREFUSED within 100 ms). Addresses come from
 * SOVIA_CLUSTER_ADDRS / SOVIA_CLUSTER_ADDRS6 ("host1 host2").
 */
#include "sharness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vipl.h>

#define CONNS_MAX 1000
#define CONNS_BUDGET_MS 8000.0
#define REFUSED_MS 100.0

static char addr4[2][INET_ADDRSTRLEN], addr6[2][INET6_ADDRSTRLEN];

/* Enters host `h`'s namespace (1 or 2). */
static void enter_host(int h)
{
    char path[128];
    snprintf(path, sizeof path, "/run/netns/%s-%d", getenv("SOVIA_CLUSTER"), h);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK_MSG(fd >= 0, "open %s: %s", path, s_errname(errno));
    CHECK_MSG(setns(fd, CLONE_NEWNET) == 0, "setns %s: %s", path, s_errname(errno));
    close(fd);
}

static void sa4(struct sockaddr_in *a, int h, uint16_t port)
{
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    CHECK(inet_pton(AF_INET, addr4[h - 1], &a->sin_addr) == 1);
}

static void sa6(struct sockaddr_in6 *a, int h, uint16_t port)
{
    memset(a, 0, sizeof *a);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    CHECK(inet_pton(AF_INET6, addr6[h - 1], &a->sin6_addr) == 1);
}

/* A listener on host 2 at any address (0.0.0.0 or ::, port 0); its port
 * goes to the client. */
static int serve_listen(int chan, int family, int backlog)
{
    int lfd = s_socket(family, 0);
    struct sockaddr_storage any = {.ss_family = (sa_family_t)family};
    SYS(sov_bind(lfd, (struct sockaddr *)&any,
                 family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)));
    SYS(sov_listen(lfd, backlog));
    s_put_u64(chan, s_local_port(lfd));
    return lfd;
}

static int client_connect(int family, int h, uint16_t port)
{
    int fd = s_socket(family, 0);
    if (family == AF_INET) {
        struct sockaddr_in a;
        sa4(&a, h, port);
        SYS(sov_connect(fd, (struct sockaddr *)&a, sizeof a));
    } else {
        struct sockaddr_in6 a;
        sa6(&a, h, port);
        SYS(sov_connect(fd, (struct sockaddr *)&a, sizeof a));
    }
    return fd;
}

/* The socket's peer (or own) IPv4 address as text. */
static const char *name4(int fd, bool peer, char *buf)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    SYS(peer ? sov_getpeername(fd, (struct sockaddr *)&a, &len)
             : sov_getsockname(fd, (struct sockaddr *)&a, &len));
    CHECK_EQ(a.sin_family, AF_INET);
    return inet_ntop(AF_INET, &a.sin_addr, buf, INET_ADDRSTRLEN);
}

/* ---- stream: 1 GiB each way would double the time; one way, checked ------- */

static uint64_t stream_bytes(void)
{
    const char *v = getenv("SOVIA_TEST_STREAM_MIB");
    return (v && *v ? strtoull(v, NULL, 10) : 1024) << 20;
}

/* COPY mode (arg non-NULL): every packet leaves from the copy buffers and
 * stays in flight after sov_send returns; a buffer written again before
 * its send completed would show as a differing byte. A quarter of the
 * bytes: the stream above covers the rest. */
static uint64_t case_bytes(void *arg)
{
    return arg ? stream_bytes() / 4 : stream_bytes();
}

static void stream_server(int chan, void *arg)
{
    enter_host(2);
    int lfd = serve_listen(chan, AF_INET, 1);
    int fd = s_accept(lfd);
    char buf[INET_ADDRSTRLEN];
    /* The addresses are the hosts', as TCP's would be. */
    CHECK_MSG(strcmp(name4(fd, true, buf), addr4[0]) == 0, "peer %s, expected %s", buf, addr4[0]);
    CHECK_MSG(strcmp(name4(fd, false, buf), addr4[1]) == 0, "local %s, expected %s", buf,
              addr4[1]);
    uint64_t total = case_bytes(arg), got = 0;
    static unsigned char rb[1 << 20];
    s_hash h;
    s_hash_init(&h);
    double t0 = s_now_ms();
    while (got < total) {
        ssize_t n = sov_recv(fd, rb, sizeof rb, 0);
        CHECK_MSG(n > 0, "sov_recv at %llu of %llu: %zd (%s)", (unsigned long long)got,
                  (unsigned long long)total, n, s_errname(errno));
        long bad = s_pattern_check(rb, (size_t)n, 7, got);
        CHECK_MSG(bad < 0, "byte %llu differs", (unsigned long long)(got + (uint64_t)bad));
        s_hash_update(&h, rb, (size_t)n);
        got += (uint64_t)n;
    }
    double ms = s_now_ms() - t0;
    s_recv_eof(fd);
    CHECK_EQ(s_hash_final(&h), s_get_u64(chan));
    s_log("%llu MiB in %.0f ms (%.2f Gbit/s), hash matches", (unsigned long long)(total >> 20),
          ms, (double)total * 8 / ms / 1e6);
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
}

static void stream_client(int chan, void *arg)
{
    enter_host(1);
    if (arg) {
        struct sov_config cfg;
        SYS(sov_get_config(&cfg));
        cfg.copy_mode = SOV_COPY;
        SYS(sov_set_config(&cfg));
    }
    int fd = client_connect(AF_INET, 2, (uint16_t)s_get_u64(chan));
    char buf[INET_ADDRSTRLEN];
    CHECK_MSG(strcmp(name4(fd, false, buf), addr4[0]) == 0, "local %s, expected %s", buf,
              addr4[0]);
    uint64_t total = case_bytes(arg);
    static unsigned char sb[1 << 20];
    s_hash h;
    s_hash_init(&h);
    for (uint64_t pos = 0; pos < total;) {
        size_t n = total - pos < sizeof sb ? (size_t)(total - pos) : sizeof sb;
        s_pattern_fill(sb, n, 7, pos);
        s_hash_update(&h, sb, n);
        s_send_all(fd, sb, n, 0);
        pos += n;
    }
    SYS(sov_shutdown(fd, SHUT_WR));
    s_put_u64(chan, s_hash_final(&h));
    SYS(sov_close(fd));
}

/* ---- half-close: each side's write end closes, the other still writes ----- */

static void halfclose_server(int chan, void *arg)
{
    (void)arg;
    enter_host(2);
    int lfd = serve_listen(chan, AF_INET, 2);
    for (int round = 0; round < 2; round++) {
        int fd = s_accept(lfd);
        if (round == 0) { /* the client closes first: read to EOF, then answer */
            s_recv_pattern(fd, 11, 0, 300000);
            s_recv_eof(fd);
            s_send_pattern(fd, 12, 0, 200000, 0);
            SYS(sov_shutdown(fd, SHUT_WR));
        } else { /* the server closes first */
            s_send_pattern(fd, 13, 0, 200000, 0);
            SYS(sov_shutdown(fd, SHUT_WR));
            s_recv_pattern(fd, 14, 0, 300000);
            s_recv_eof(fd);
        }
        s_tok(chan, 'd');
        SYS(sov_close(fd));
    }
    SYS(sov_close(lfd));
}

static void halfclose_client(int chan, void *arg)
{
    (void)arg;
    enter_host(1);
    uint16_t port = (uint16_t)s_get_u64(chan);
    int fd = client_connect(AF_INET, 2, port);
    s_send_pattern(fd, 11, 0, 300000, 0);
    SYS(sov_shutdown(fd, SHUT_WR));
    s_recv_pattern(fd, 12, 0, 200000);
    s_recv_eof(fd);
    s_want(chan, 'd');
    SYS(sov_close(fd));

    fd = client_connect(AF_INET, 2, port);
    s_recv_pattern(fd, 13, 0, 200000);
    s_recv_eof(fd);
    s_send_pattern(fd, 14, 0, 300000, 0); /* our direction is still open */
    SYS(sov_shutdown(fd, SHUT_WR));
    s_want(chan, 'd');
    SYS(sov_close(fd));
}

/* ---- sequential connections ---------------------------------------------- */

static void conns_server(int chan, void *arg)
{
    (void)arg;
    enter_host(2);
    int lfd = serve_listen(chan, AF_INET, 16);
    uint64_t n = 0;
    for (;;) {
        int fd = s_accept(lfd);
        uint64_t v;
        s_recv_all(fd, &v, sizeof v);
        s_send_all(fd, &v, sizeof v, 0);
        s_recv_eof(fd);
        SYS(sov_close(fd));
        n++;
        if (v == UINT64_MAX) /* the last one */
            break;
    }
    s_put_u64(chan, n);
    SYS(sov_close(lfd));
}

static void conns_client(int chan, void *arg)
{
    (void)arg;
    enter_host(1);
    uint16_t port = (uint16_t)s_get_u64(chan);
    double t0 = s_now_ms();
    uint64_t i;
    for (i = 0; i < CONNS_MAX; i++) {
        bool last = i == CONNS_MAX - 1 || s_now_ms() - t0 > CONNS_BUDGET_MS;
        int fd = client_connect(AF_INET, 2, port);
        uint64_t v = last ? UINT64_MAX : i, back;
        s_send_all(fd, &v, sizeof v, 0);
        s_recv_all(fd, &back, sizeof back);
        CHECK_EQ(back, v);
        SYS(sov_close(fd));
        if (last)
            break;
    }
    double ms = s_now_ms() - t0;
    CHECK_EQ(s_get_u64(chan), i + 1);
    /* A bound, not a measurement: every connection must have worked, and
     * enough of them to mean something on a loaded machine. */
    CHECK_MSG(i + 1 >= 100, "only %llu connections in %.0f ms", (unsigned long long)(i + 1), ms);
    s_log("%llu sequential connections in %.0f ms (%.2f ms each)", (unsigned long long)(i + 1),
          ms, ms / (double)(i + 1));
}

/* ---- IPv6 ------------------------------------------------------------------ */

static void ipv6_server(int chan, void *arg)
{
    (void)arg;
    enter_host(2);
    int lfd = serve_listen(chan, AF_INET6, 1);
    int fd = s_accept(lfd);
    struct sockaddr_in6 a;
    socklen_t len = sizeof a;
    char buf[INET6_ADDRSTRLEN];
    SYS(sov_getpeername(fd, (struct sockaddr *)&a, &len));
    inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof buf);
    CHECK_MSG(strcmp(buf, addr6[0]) == 0, "peer %s, expected %s", buf, addr6[0]);
    s_recv_pattern(fd, 21, 0, 100000);
    s_send_pattern(fd, 22, 0, 100000, 0);
    s_recv_eof(fd);
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
}

static void ipv6_client(int chan, void *arg)
{
    (void)arg;
    enter_host(1);
    int fd = client_connect(AF_INET6, 2, (uint16_t)s_get_u64(chan));
    s_send_pattern(fd, 21, 0, 100000, 0);
    s_recv_pattern(fd, 22, 0, 100000);
    SYS(sov_shutdown(fd, SHUT_WR));
    SYS(sov_close(fd));
}

/* ---- peer SIGKILL: the survivor learns within 1 s -------------------------- */

static void victim(int chan, void *arg)
{
    (void)arg;
    enter_host(2);
    int lfd = serve_listen(chan, AF_INET, 1);
    int fd = s_accept(lfd);
    s_send_all(fd, "x", 1, 0);
    for (;;)
        pause(); /* until SIGKILL */
}

static void survivor(int chan, void *arg)
{
    int up = *(int *)arg; /* to the main process */
    (void)chan;
    enter_host(1);
    int fd = client_connect(AF_INET, 2, (uint16_t)s_get_u64(up));
    char c;
    s_recv_all(fd, &c, 1);
    s_tok(up, 'r'); /* connected and idle: kill it now */
    ssize_t n = sov_recv(fd, &c, 1, 0);
    int err = errno;
    double t1 = s_now_ms(), t0 = s_get_f64(up);
    CHECK_MSG(n == 0 || (n < 0 && err == ECONNRESET), "sov_recv after the peer's death: %zd (%s)",
              n, n < 0 ? s_errname(err) : "data");
    CHECK_MSG(t1 - t0 <= S_DEADLINE_MS, "learned of the peer's death after %.0f ms", t1 - t0);
    s_log("peer killed: %s after %.0f ms", n == 0 ? "EOF" : "ECONNRESET", t1 - t0);
    SYS(sov_close(fd));
}

static void run_peer_death(void)
{
    int vchan, schan;
    int v = s_spawn("victim", victim, NULL, &vchan);
    uint64_t port = s_get_u64(vchan);
    int up[2];
    SYS(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, up));
    /* survivor talks to us over `up`; s_spawn's own channel stays unused. */
    int arg = up[1];
    s_spawn("survivor", survivor, &arg, &schan);
    close(up[1]);
    s_put_u64(up[0], port);
    s_want(up[0], 'r');
    s_sleep_ms(50); /* the survivor is inside sov_recv */
    double t0 = s_now_ms();
    s_kill(v);
    s_put_f64(up[0], t0);
    s_wait_all();
    close(up[0]);
    close(vchan);
    close(schan);
}

/* ---- nobody listens: ECONNREFUSED at once ------------------------------------ */

static void refused_server(int chan, void *arg)
{
    (void)arg;
    enter_host(2);
    int lfd = serve_listen(chan, AF_INET, 1); /* so the host's NIC is up */
    s_want(chan, 'q');
    SYS(sov_close(lfd));
}

static void refused_client(int chan, void *arg)
{
    (void)arg;
    enter_host(1);
    uint16_t port = (uint16_t)s_get_u64(chan);
    /* A first connect opens the NIC (libfabric's start-up is not the
     * connect's time); refused as well: nobody listens on port+1 here... */
    uint16_t none = (uint16_t)(port == 65535 ? 49152 : port + 1);
    double worst = 0;
    for (int i = 0; i < 5; i++) {
        int fd = s_socket(AF_INET, 0);
        struct sockaddr_in a;
        sa4(&a, 2, none);
        double t0 = s_now_ms();
        CHECK_ERR(sov_connect(fd, (struct sockaddr *)&a, sizeof a), ECONNREFUSED);
        double ms = s_now_ms() - t0;
        if (i > 0 && ms > worst)
            worst = ms;
        SYS(sov_close(fd));
    }
    CHECK_MSG(worst <= REFUSED_MS, "ECONNREFUSED after %.1f ms", worst);
    s_log("ECONNREFUSED in at most %.1f ms (4 tries after the first)", worst);
    s_tok(chan, 'q');
}

/* Whether libfabric's tcp provider opens here (in a child: the main
 * process makes no vipl call). */
static bool fabric_tcp_available(void)
{
    pid_t p = fork();
    CHECK(p >= 0);
    if (p == 0) {
        VIP_NIC_HANDLE nic;
        _exit(VipOpenNic("fabric:tcp", &nic) == VIP_SUCCESS ? 0 : 1);
    }
    int st;
    CHECK(waitpid(p, &st, 0) == p);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(void)
{
    s_init("hosts", 280);
    const char *a4 = getenv("SOVIA_CLUSTER_ADDRS"), *a6 = getenv("SOVIA_CLUSTER_ADDRS6");
    if (!getenv("SOVIA_CLUSTER") || !a4 || !a6 ||
        sscanf(a4, "%15s %15s", addr4[0], addr4[1]) != 2 ||
        sscanf(a6, "%45s %45s", addr6[0], addr6[1]) != 2) {
        printf("hosts: skipped: run under scripts/cluster.sh run 2 (no SOVIA_CLUSTER_ADDRS)\n");
        return 77;
    }
    setenv("SOVIA_PROVIDER", "fabric:tcp", 1);
    if (!fabric_tcp_available()) {
        printf("hosts: skipped: libfabric's tcp provider does not open here\n");
        return 77;
    }
    s_ignore_sigpipe();
    if (s_case("stream"))
        s_run_pair("server", stream_server, "client", stream_client, NULL);
    if (s_case("stream_copy"))
        s_run_pair("server", stream_server, "client", stream_client, "copy");
    if (s_case("halfclose"))
        s_run_pair("server", halfclose_server, "client", halfclose_client, NULL);
    if (s_case("conns"))
        s_run_pair("server", conns_server, "client", conns_client, NULL);
    if (s_case("ipv6"))
        s_run_pair("server", ipv6_server, "client", ipv6_client, NULL);
    if (s_case("peer_death"))
        run_peer_death();
    if (s_case("refused"))
        s_run_pair("server", refused_server, "client", refused_client, NULL);
    s_pass();
}
