/*
 * transport_socket.c - kernel sockets: tcp (blocking, 127.0.0.1),
 * tcp-nagle (tcp with Nagle's algorithm on, as the papers' TCP), tcp-poll
 * (nonblocking, receiver busy-polls), uds (socketpair) and ksovia (tcp with
 * KSOVIA's BPF redirect in force: src/ksock/), and lane (tcp between two
 * network namespaces of the run's own over a LANE link: bench_lane.c).
 * Streams carry no boundaries; the lock-step protocol means each side
 * always knows how many bytes the next message has.
 */
#include "bench_internal.h"
#include "ksock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define ACCEPT_TIMEOUT_S 10.0
#define SPIN_CHECK (1u << 16)

enum sock_kind { SOCK_TCP, SOCK_TCP_NAGLE, SOCK_TCP_POLL, SOCK_UDS, SOCK_KSOVIA, SOCK_LANE };

struct sock_shared {
    enum sock_kind kind;
    int listen_fd;          /* tcp: bound before fork so the port is known */
    struct sockaddr_in addr;
    int pair[2];            /* uds */
    struct ksock *ks;       /* ksovia: the programs, our cgroup */
    struct bench_lane *lane; /* lane: the namespaces and the link */
};

struct sock_ep {
    const char *name;
    int fd;
    bool poll;
    unsigned char *sbuf, *rbuf;
};

static const char *kind_name(enum sock_kind k)
{
    return k == SOCK_TCP ? "tcp" : k == SOCK_TCP_NAGLE ? "tcp-nagle"
         : k == SOCK_TCP_POLL ? "tcp-poll" : k == SOCK_KSOVIA ? "ksovia"
         : k == SOCK_LANE ? "lane" : "uds";
}

static void sock_release(void *shared);

static int sock_prepare(enum sock_kind kind, void **shared)
{
    struct sock_shared *s = calloc(1, sizeof *s);
    socklen_t alen = sizeof s->addr;

    if (!s)
        return -1;
    s->kind = kind;
    s->listen_fd = s->pair[0] = s->pair[1] = -1;
    if (kind == SOCK_UDS) {
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s->pair) != 0) {
            perror("uds: socketpair");
            free(s);
            return -1;
        }
        *shared = s;
        return 0;
    }
    if (kind == SOCK_KSOVIA) {
        char why[600];
        int rc = ksock_open(&s->ks, why, sizeof why);
        /* Before the listener and the peer exist: both are made in the
         * cgroup, so both ends of the connection are collected. */
        if (rc == 0 && (rc = ksock_enter(s->ks, 0)) != 0)
            snprintf(why, sizeof why, "cannot move into %s: %s", ksock_cgroup(s->ks),
                     strerror(-rc));
        if (rc != 0) {
            fprintf(stderr, "ksovia: unavailable (%s)\n", why);
            ksock_close(s->ks);
            free(s);
            return BENCH_PREPARE_UNAVAILABLE;
        }
    }
    s->addr.sin_family = AF_INET;
    s->addr.sin_addr = bench_addr(BENCH_DRIVER); /* the driver listens */
    if (kind == SOCK_LANE) {
        int rc = bench_lane_open(&s->lane, &s->addr.sin_addr);
        /* The listener is made in the driver's namespace, so what it
         * accepts is too; this thread goes back at once. */
        if (rc == 0 && (rc = bench_lane_enter(s->lane, BENCH_DRIVER)) != 0)
            bench_lane_close(s->lane);
        if (rc != 0) {
            free(s);
            return rc;
        }
    }
    s->addr.sin_port = 0; /* ephemeral: no clash with other runs */
    s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->listen_fd < 0 || bind(s->listen_fd, (struct sockaddr *)&s->addr, sizeof s->addr) ||
        listen(s->listen_fd, 1) ||
        getsockname(s->listen_fd, (struct sockaddr *)&s->addr, &alen)) {
        fprintf(stderr, "%s: listen on %s: %s\n", kind_name(kind), inet_ntoa(s->addr.sin_addr),
                strerror(errno));
        if (s->listen_fd >= 0)
            close(s->listen_fd);
        s->listen_fd = -1;
        if (s->lane)
            (void)bench_lane_leave(s->lane);
        sock_release(s);
        return -1;
    }
    if (s->lane && bench_lane_leave(s->lane) != 0) {
        sock_release(s);
        return -1;
    }
    *shared = s;
    return 0;
}

static int prepare_tcp(const struct bench_params *p, size_t m, void **sh)
{
    (void)p;
    (void)m;
    return sock_prepare(SOCK_TCP, sh);
}

static int prepare_tcp_nagle(const struct bench_params *p, size_t m, void **sh)
{
    (void)p;
    (void)m;
    return sock_prepare(SOCK_TCP_NAGLE, sh);
}

static int prepare_tcp_poll(const struct bench_params *p, size_t m, void **sh)
{
    (void)p;
    (void)m;
    return sock_prepare(SOCK_TCP_POLL, sh);
}

static int prepare_ksovia(const struct bench_params *p, size_t m, void **sh)
{
    (void)p;
    (void)m;
    return sock_prepare(SOCK_KSOVIA, sh);
}

static int prepare_lane(const struct bench_params *p, size_t m, void **sh)
{
    (void)p;
    (void)m;
    return sock_prepare(SOCK_LANE, sh);
}

static int prepare_uds(const struct bench_params *p, size_t m, void **sh)
{
    (void)p;
    (void)m;
    return sock_prepare(SOCK_UDS, sh);
}

/* Driver side of tcp: accept, but give up if the peer died or never came. */
static int accept_peer(struct sock_shared *s)
{
    double deadline = bench_now() + ACCEPT_TIMEOUT_S;
    struct pollfd pfd = {.fd = s->listen_fd, .events = POLLIN};

    while (bench_now() < deadline && bench_peer_alive()) {
        int r = poll(&pfd, 1, 100);
        if (r > 0)
            return accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (r < 0 && errno != EINTR)
            break;
    }
    errno = ETIMEDOUT;
    return -1;
}

static int sock_setup(void *shared, enum bench_role role, size_t max_msg, void **out)
{
    struct sock_shared *s = shared;
    struct sock_ep *ep = calloc(1, sizeof *ep);
    int one = 1;

    if (!ep)
        return -1;
    ep->name = kind_name(s->kind);
    ep->poll = s->kind == SOCK_TCP_POLL;
    ep->fd = -1;
    if (s->kind == SOCK_UDS) {
        ep->fd = s->pair[role == BENCH_DRIVER ? 0 : 1];
        close(s->pair[role == BENCH_DRIVER ? 1 : 0]);
    } else if (role == BENCH_DRIVER) {
        ep->fd = accept_peer(s);
    } else {
        close(s->listen_fd);
        /* The peer's socket is made in the peer's namespace. */
        if (s->lane && bench_lane_enter(s->lane, BENCH_PEER) != 0) {
            free(ep);
            return -1;
        }
        ep->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (ep->fd >= 0 && connect(ep->fd, (struct sockaddr *)&s->addr, sizeof s->addr) != 0) {
            close(ep->fd);
            ep->fd = -1;
        }
    }
    if (ep->fd < 0) {
        fprintf(stderr, "%s: connect: %s\n", ep->name, strerror(errno));
        free(ep);
        return -1;
    }
    /* ksovia numbers must be the redirect's: both ends in the sockhash. */
    if (s->ks && ksock_holds(s->ks, ep->fd) != 1) {
        fprintf(stderr, "ksovia: the connection is not in the sockhash: the redirect is "
                        "not in force\n");
        close(ep->fd);
        free(ep);
        return -1;
    }
    if (s->kind != SOCK_UDS && s->kind != SOCK_TCP_NAGLE &&
        setsockopt(ep->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
        fprintf(stderr, "%s: TCP_NODELAY: %s\n", ep->name, strerror(errno));
        close(ep->fd);
        free(ep);
        return -1;
    }
    /* Page-aligned and touched now so no page fault lands in a timed loop. */
    ep->sbuf = aligned_alloc(4096, (max_msg + 4095) & ~(size_t)4095);
    ep->rbuf = aligned_alloc(4096, (max_msg + 4095) & ~(size_t)4095);
    if (!ep->sbuf || !ep->rbuf) {
        fprintf(stderr, "%s: out of memory\n", ep->name);
        free(ep->sbuf);
        free(ep->rbuf);
        close(ep->fd);
        free(ep);
        return -1;
    }
    memset(ep->sbuf, 0, max_msg);
    memset(ep->rbuf, 0, max_msg);
    *out = ep;
    return 0;
}

static void *sock_send_buf(void *p)
{
    return ((struct sock_ep *)p)->sbuf;
}

/* Polling mode spins on EAGAIN; the peer's death shows as an error or EOF,
 * but a check now and then also catches a peer that hangs without dying. */
static int sock_spin_ok(struct sock_ep *ep, unsigned *spins)
{
    if (++*spins < SPIN_CHECK)
        return 1;
    *spins = 0;
    if (bench_peer_alive())
        return 1;
    fprintf(stderr, "%s: peer process exited\n", ep->name);
    return 0;
}

static int sock_send(void *p, size_t len)
{
    struct sock_ep *ep = p;
    int flags = MSG_NOSIGNAL | (ep->poll ? MSG_DONTWAIT : 0);
    size_t off = 0;
    unsigned spins = 0;

    while (off < len) {
        ssize_t n = send(ep->fd, ep->sbuf + off, len - off, flags);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EINTR || ((errno == EAGAIN || errno == EWOULDBLOCK) && ep->poll))) {
            if (!sock_spin_ok(ep, &spins))
                return -1;
            continue;
        }
        fprintf(stderr, "%s: send: %s\n", ep->name, strerror(errno));
        return -1;
    }
    return 0;
}

static int sock_recv(void *p, size_t len, const void **data)
{
    struct sock_ep *ep = p;
    int flags = ep->poll ? MSG_DONTWAIT : 0;
    size_t off = 0;
    unsigned spins = 0;

    while (off < len) {
        ssize_t n = recv(ep->fd, ep->rbuf + off, len - off, flags);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n == 0) {
            fprintf(stderr, "%s: peer closed the connection\n", ep->name);
            return -1;
        }
        if (errno == EINTR || ((errno == EAGAIN || errno == EWOULDBLOCK) && ep->poll)) {
            if (!sock_spin_ok(ep, &spins))
                return -1;
            continue;
        }
        fprintf(stderr, "%s: recv: %s\n", ep->name, strerror(errno));
        return -1;
    }
    *data = ep->rbuf;
    return 0;
}

static int sock_teardown(void *p)
{
    struct sock_ep *ep = p;

    close(ep->fd);
    free(ep->sbuf);
    free(ep->rbuf);
    free(ep);
    return 0;
}

static void sock_release(void *shared)
{
    struct sock_shared *s = shared;

    if (s->listen_fd >= 0)
        close(s->listen_fd);
    /* uds: the driver's end was closed in teardown, the peer's in setup. */
    if (s->ks) {
        uint64_t st[KSOCK_NSTATS];
        if (ksock_stats(s->ks, st) == 0 && (st[KSOCK_STAT_PASSED] || !st[KSOCK_STAT_REDIRECTED]))
            fprintf(stderr, "ksovia: note: %llu sends went by TCP, %llu were redirected\n",
                    (unsigned long long)st[KSOCK_STAT_PASSED],
                    (unsigned long long)st[KSOCK_STAT_REDIRECTED]);
        ksock_close(s->ks);
    }
    bench_lane_close(s->lane);
    free(s);
}

#define SOCK_OPS                                                                              \
    .setup = sock_setup, .send_buf = sock_send_buf, .send_msg = sock_send,                   \
    .recv_msg = sock_recv, .teardown = sock_teardown, .release = sock_release

const struct bench_transport bench_transport_tcp = {
    .name = "tcp",
    .summary = "kernel TCP over 127.0.0.1, blocking, TCP_NODELAY",
    .polling = false,
    .prepare = prepare_tcp,
    SOCK_OPS,
};

/* The papers' TCP (seed 004 Fig. 7-8): Nagle's algorithm combines small
 * writes, which is what SOVIA_COMBINE is measured against. */
const struct bench_transport bench_transport_tcp_nagle = {
    .name = "tcp-nagle",
    .summary = "kernel TCP over 127.0.0.1, blocking, Nagle's algorithm on (the papers' TCP)",
    .polling = false,
    .prepare = prepare_tcp_nagle,
    SOCK_OPS,
};

const struct bench_transport bench_transport_tcp_poll = {
    .name = "tcp-poll",
    .summary = "kernel TCP over 127.0.0.1, nonblocking, receiver busy-polls (pinned)",
    .polling = true,
    .prepare = prepare_tcp_poll,
    SOCK_OPS,
};

const struct bench_transport bench_transport_uds = {
    .name = "uds",
    .summary = "AF_UNIX stream socketpair, blocking",
    .polling = false,
    .prepare = prepare_uds,
    SOCK_OPS,
};

/* KSOVIA (seed 003) on today's kernel: the tcp code, both processes in a
 * cgroup whose established loopback connections BPF carries socket to
 * socket (src/ksock/ksock.bpf.c), past TCP/IP. */
const struct bench_transport bench_transport_ksovia = {
    .name = "ksovia",
    .summary = "kernel TCP over 127.0.0.1, BPF hands each send to the peer socket (KSOVIA)",
    .polling = false,
    .prepare = prepare_ksovia,
    SOCK_OPS,
};

/* The tcp code through the libc calls, in processes that run under the
 * preload library (sovia bench re-executes itself with it): what an
 * unmodified program gets from `sovia run`. */
static int prepare_preload(const struct bench_params *p, size_t m, void **sh)
{
    (void)p;
    (void)m;
    if (!getenv("SOVIA_BENCH_PRELOADED")) {
        fprintf(stderr, "preload: run through 'sovia bench' (it loads the preload library)\n");
        return -1;
    }
    return sock_prepare(SOCK_TCP, sh);
}

const struct bench_transport bench_transport_preload = {
    .name = "preload",
    .summary = "the tcp code under sovia run's preload library, polling (pinned)",
    .polling = true,
    .prepare = prepare_preload,
    SOCK_OPS,
};

/* LANE (seed 003's LAN emulation): the tcp code between two namespaces of
 * the run's own, over TUN devices joined by a VI (src/lane/): kernel TCP/IP
 * on an emulated NIC. */
const struct bench_transport bench_transport_lane = {
    .name = "lane",
    .summary = "kernel TCP between two namespaces over TUN devices joined by a VI (LANE)",
    .polling = false,
    .prepare = prepare_lane,
    SOCK_OPS,
};
