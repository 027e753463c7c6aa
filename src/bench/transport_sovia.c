/*
 * transport_sovia.c - the sovia sockets layer (sov_* API, libsovia) over
 * AF_INET 127.0.0.1, in its three wait modes: sovia (SOV_WAIT_POLL,
 * pinned like the other polling transports), sovia-block (SOV_WAIT_BLOCK)
 * and sovia-adaptive (SOV_WAIT_ADAPTIVE).
 *
 * Nothing touches the library before fork. Each process, after fork, reads
 * the configuration, applies the --config label and the wait mode, and
 * sets it before creating its first socket (the handling strategy can only
 * change then). The peer listens on port 0 and tells the driver the port
 * through a pipe made before fork; the driver connects, retrying while the
 * port refuses for a few seconds.
 *
 * Like the kernel socket transports the connection is a byte stream; the
 * lock-step protocol means each side always knows the next message's
 * length, and sends and receives loop until all of it moved.
 */
#include "bench_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sovia.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PORT_TIMEOUT_S 10.0   /* the peer set up the library and a listener */
#define CONNECT_RETRY_S 5.0   /* connect retries while the port refuses */
#define CONNECT_RETRY_NS 10000000L
#define DRAIN_TIMEOUT_MS 2000 /* teardown: wait this long for the other FIN */
#define LINGER_S 2

/* The papers' labels (ICS 2001, Table 4), as docs/SOCKETS.md lists them. */
static const char *const sovia_labels[] = {
    "SOVIA_NOTIFY", "SOVIA_HANDLER", "SOVIA_SINGLE",   "SOVIA_REG",   "SOVIA_COPY",
    "SOVIA_HYBRID", "SOVIA_BASE",    "SOVIA_FLOWCNTL", "SOVIA_DACKS", "SOVIA_COMBINE",
    NULL,
};

const char *const *bench_config_labels(void)
{
    return sovia_labels;
}

struct sovia_shared {
    const char *name;
    enum sov_wait_mode wait;
    const char *label; /* --config; NULL: the library's configuration as it is */
    int port_pipe[2];  /* peer -> driver: the listening port (network order) */
};

struct sovia_ep {
    const char *name;
    int fd;
    unsigned char *sbuf, *rbuf;
};

/* The library is the judge of what a label is; only the list in the
 * message comes from here. sov_config_defaults and sov_config_label work on
 * the caller's struct only, so this is safe before fork. */
static int sovia_check_config(const char *label)
{
    struct sov_config c;

    sov_config_defaults(&c);
    if (sov_config_label(&c, label) == 0)
        return 0;
    fprintf(stderr, "sovia bench: unknown --config label '%s'; the labels are", label);
    for (size_t i = 0; sovia_labels[i]; i++)
        fprintf(stderr, "%s %s", i ? "," : "", sovia_labels[i]);
    fprintf(stderr, "\n");
    return -1;
}

static int sovia_prepare(const struct bench_params *p, enum sov_wait_mode wait,
                         const char *name, void **shared)
{
    struct sovia_shared *sh = calloc(1, sizeof *sh);

    if (!sh)
        return -1;
    sh->name = name;
    sh->wait = wait;
    sh->label = p->config;
    if (pipe2(sh->port_pipe, O_CLOEXEC) != 0) {
        fprintf(stderr, "%s: pipe: %s\n", name, strerror(errno));
        free(sh);
        return -1;
    }
    *shared = sh;
    return 0;
}

static int prepare_poll(const struct bench_params *p, size_t m, void **sh)
{
    (void)m;
    return sovia_prepare(p, SOV_WAIT_POLL, "sovia", sh);
}

static int prepare_block(const struct bench_params *p, size_t m, void **sh)
{
    (void)m;
    return sovia_prepare(p, SOV_WAIT_BLOCK, "sovia-block", sh);
}

static int prepare_adaptive(const struct bench_params *p, size_t m, void **sh)
{
    (void)m;
    return sovia_prepare(p, SOV_WAIT_ADAPTIVE, "sovia-adaptive", sh);
}

static void sovia_release(void *shared)
{
    struct sovia_shared *sh = shared;

    /* The driver closed its ends in setup; close whatever is left. */
    for (int i = 0; i < 2; i++)
        if (sh->port_pipe[i] >= 0)
            close(sh->port_pipe[i]);
    free(sh);
}

/* This process's configuration: what the library read (defaults, then the
 * environment), the label, then the transport's wait mode. *nodelay: set
 * TCP_NODELAY, as the tcp transport does, unless a label turned combining
 * on (then combining is what is being measured). */
static int apply_config(const struct sovia_shared *sh, bool *nodelay)
{
    struct sov_config c;

    if (sov_get_config(&c) != 0) {
        fprintf(stderr, "%s: sov_get_config: %s\n", sh->name, strerror(errno));
        return -1;
    }
    if (sh->label && sov_config_label(&c, sh->label) != 0) {
        fprintf(stderr, "%s: sov_config_label %s: %s\n", sh->name, sh->label, strerror(errno));
        return -1;
    }
    c.wait_mode = sh->wait;
    if (sov_set_config(&c) != 0) {
        fprintf(stderr, "%s: sov_set_config: %s\n", sh->name, strerror(errno));
        return -1;
    }
    *nodelay = !(sh->label && c.combine);
    return 0;
}

static int set_nodelay(const char *name, int fd)
{
    int one = 1;

    if (sov_setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
        fprintf(stderr, "%s: TCP_NODELAY: %s\n", name, strerror(errno));
        return -1;
    }
    return 0;
}

/* The peer's address (127.0.0.1 unless SOVIA_BENCH_PEER_ADDR). */
static struct sockaddr_in peer_addr(in_port_t port)
{
    struct sockaddr_in a;

    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr = bench_addr(BENCH_PEER);
    a.sin_port = port;
    return a;
}

/* Peer: listen on an ephemeral port, publish it, take one connection. */
static int peer_accept(struct sovia_shared *sh)
{
    struct sockaddr_in a = peer_addr(0);
    socklen_t alen = sizeof a;
    int lfd, fd;
    const char *what;

    close(sh->port_pipe[0]);
    sh->port_pipe[0] = -1;
    lfd = sov_socket(AF_INET, SOCK_VIA | SOCK_CLOEXEC, 0);
    if (lfd < 0) {
        what = "sov_socket";
        goto fail;
    }
    if (sov_bind(lfd, (struct sockaddr *)&a, sizeof a) != 0) {
        what = "sov_bind (the peer's address, port 0)";
        goto fail;
    }
    if (sov_listen(lfd, 1) != 0) {
        what = "sov_listen";
        goto fail;
    }
    if (sov_getsockname(lfd, (struct sockaddr *)&a, &alen) != 0) {
        what = "sov_getsockname";
        goto fail;
    }
    if (a.sin_family != AF_INET || a.sin_port == 0) {
        fprintf(stderr, "%s: sov_getsockname gave family %d port 0 on a listening socket\n",
                sh->name, (int)a.sin_family);
        sov_close(lfd);
        return -1;
    }
    if (write(sh->port_pipe[1], &a.sin_port, sizeof a.sin_port) != sizeof a.sin_port) {
        what = "write port";
        goto fail;
    }
    close(sh->port_pipe[1]);
    sh->port_pipe[1] = -1;
    do
        fd = sov_accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    while (fd < 0 && errno == EINTR && bench_peer_alive());
    if (fd < 0) {
        what = "sov_accept4";
        goto fail;
    }
    if (sov_close(lfd) != 0)
        fprintf(stderr, "%s: note: closing the listening socket: %s\n", sh->name,
                strerror(errno));
    return fd;
fail:
    fprintf(stderr, "%s: %s: %s\n", sh->name, what, strerror(errno));
    if (lfd >= 0)
        sov_close(lfd);
    return -1;
}

/* Driver: learn the peer's port, with a deadline and a watch on the peer. */
static int read_port(struct sovia_shared *sh, in_port_t *port)
{
    double deadline = bench_now() + PORT_TIMEOUT_S;
    struct pollfd pfd = {.fd = sh->port_pipe[0], .events = POLLIN};

    close(sh->port_pipe[1]); /* so a peer that dies first reads as EOF */
    sh->port_pipe[1] = -1;
    while (bench_now() < deadline) {
        int r = poll(&pfd, 1, 100);
        if (r > 0) {
            ssize_t n = read(sh->port_pipe[0], port, sizeof *port);
            if (n == (ssize_t)sizeof *port)
                return 0;
            if (n < 0 && errno == EINTR)
                continue;
            fprintf(stderr, "%s: the peer failed before listening\n", sh->name);
            return -1;
        }
        if (r < 0 && errno != EINTR)
            break;
        if (!bench_peer_alive()) {
            fprintf(stderr, "%s: the peer exited before listening\n", sh->name);
            return -1;
        }
    }
    fprintf(stderr, "%s: the peer did not listen within %.0f s\n", sh->name, PORT_TIMEOUT_S);
    return -1;
}

static int driver_connect(struct sovia_shared *sh)
{
    struct sockaddr_in a;
    double deadline;
    in_port_t port;

    if (read_port(sh, &port) != 0)
        return -1;
    a = peer_addr(port);
    deadline = bench_now() + CONNECT_RETRY_S;
    for (;;) {
        int fd = sov_socket(AF_INET, SOCK_VIA | SOCK_CLOEXEC, 0), err;

        if (fd < 0) {
            fprintf(stderr, "%s: sov_socket: %s\n", sh->name, strerror(errno));
            return -1;
        }
        if (sov_connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
            return fd;
        err = errno;
        sov_close(fd);
        if ((err == ECONNREFUSED || err == EINTR) && bench_now() < deadline &&
            bench_peer_alive()) {
            nanosleep(&(struct timespec){.tv_nsec = CONNECT_RETRY_NS}, NULL);
            continue;
        }
        fprintf(stderr, "%s: sov_connect %s:%u: %s\n", sh->name, inet_ntoa(a.sin_addr),
                (unsigned)ntohs(port), strerror(err));
        return -1;
    }
}

static int sovia_setup(void *shared, enum bench_role role, size_t max_msg, void **out)
{
    struct sovia_shared *sh = shared;
    size_t buflen = (max_msg + 4095) & ~(size_t)4095;
    struct sovia_ep *ep;
    bool nodelay;
    int fd;

    if (apply_config(sh, &nodelay) != 0)
        return -1;
    fd = role == BENCH_DRIVER ? driver_connect(sh) : peer_accept(sh);
    if (fd < 0)
        return -1;
    if (nodelay && set_nodelay(sh->name, fd) != 0) {
        sov_close(fd);
        return -1;
    }
    ep = calloc(1, sizeof *ep);
    if (ep) {
        /* Page-aligned and touched now so no page fault lands in a timed loop. */
        ep->sbuf = aligned_alloc(4096, buflen);
        ep->rbuf = aligned_alloc(4096, buflen);
    }
    if (!ep || !ep->sbuf || !ep->rbuf) {
        fprintf(stderr, "%s: out of memory\n", sh->name);
        if (ep) {
            free(ep->sbuf);
            free(ep->rbuf);
        }
        free(ep);
        sov_close(fd);
        return -1;
    }
    memset(ep->sbuf, 0, buflen);
    memset(ep->rbuf, 0, buflen);
    ep->name = sh->name;
    ep->fd = fd;
    *out = ep;
    return 0;
}

static void *sovia_send_buf(void *p)
{
    return ((struct sovia_ep *)p)->sbuf;
}

/* A signal (the driver's SIGCHLD) interrupts sovia calls that moved
 * nothing: go on while the other process is there. 1: retry; 0: not
 * EINTR; -1: the peer is gone (reported). */
static int retry_eintr(const struct sovia_ep *ep)
{
    if (errno != EINTR)
        return 0;
    if (bench_peer_alive())
        return 1;
    fprintf(stderr, "%s: peer process exited\n", ep->name);
    return -1;
}

static int sovia_send(void *p, size_t len)
{
    struct sovia_ep *ep = p;
    size_t off = 0;

    while (off < len) {
        ssize_t n = sov_send(ep->fd, ep->sbuf + off, len - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n == 0) {
            fprintf(stderr, "%s: sov_send of %zu bytes returned 0\n", ep->name, len - off);
            return -1;
        }
        switch (retry_eintr(ep)) {
        case 1:
            continue;
        case 0:
            fprintf(stderr, "%s: sov_send: %s\n", ep->name, strerror(errno));
        }
        return -1;
    }
    return 0;
}

static int sovia_recv(void *p, size_t len, const void **data)
{
    struct sovia_ep *ep = p;
    size_t off = 0;

    while (off < len) {
        ssize_t n = sov_recv(ep->fd, ep->rbuf + off, len - off, MSG_WAITALL);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n == 0) {
            fprintf(stderr, "%s: peer closed the connection\n", ep->name);
            return -1;
        }
        switch (retry_eintr(ep)) {
        case 1:
            continue;
        case 0:
            fprintf(stderr, "%s: sov_recv: %s\n", ep->name, strerror(errno));
        }
        return -1;
    }
    *data = ep->rbuf;
    return 0;
}

/* After our FIN, read (and drop) until the other side's FIN, a reset or the
 * timeout: then both directions are known to be delivered. */
static void drain(struct sovia_ep *ep)
{
    double deadline = bench_now() + DRAIN_TIMEOUT_MS / 1000.0;

    for (;;) {
        struct pollfd pfd = {.fd = ep->fd, .events = POLLIN};
        int left = (int)((deadline - bench_now()) * 1000.0), r;
        ssize_t n;

        if (left <= 0)
            return;
        r = sov_poll(&pfd, 1, left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return;
        n = sov_recv(ep->fd, ep->rbuf, 4096, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return;
    }
}

/*
 * The peer process ends in _exit (no atexit handlers, so none of sovia's
 * at-exit closing): close for real first. Shutting down and waiting for
 * the other side's FIN makes sure the last reply was delivered; the linger
 * makes sov_close wait for the FIN/FINACK exchange instead of leaving it
 * to a background thread the exit would cut short.
 */
static int sovia_teardown(void *p)
{
    struct sovia_ep *ep = p;
    struct linger lg = {.l_onoff = 1, .l_linger = LINGER_S};
    int rc = 0;

    if (sov_shutdown(ep->fd, SHUT_WR) == 0)
        drain(ep);
    else if (errno != ENOTCONN)
        fprintf(stderr, "%s: note: sov_shutdown: %s\n", ep->name, strerror(errno));
    if (sov_setsockopt(ep->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) != 0)
        fprintf(stderr, "%s: note: SO_LINGER: %s\n", ep->name, strerror(errno));
    if (sov_close(ep->fd) != 0) {
        fprintf(stderr, "%s: sov_close: %s\n", ep->name, strerror(errno));
        rc = -1;
    }
    free(ep->sbuf);
    free(ep->rbuf);
    free(ep);
    return rc;
}

#define SOVIA_OPS                                                                             \
    .check_config = sovia_check_config, .setup = sovia_setup, .send_buf = sovia_send_buf,    \
    .send_msg = sovia_send, .recv_msg = sovia_recv, .teardown = sovia_teardown,              \
    .release = sovia_release

const struct bench_transport bench_transport_sovia = {
    .name = "sovia",
    .summary = "sovia sockets (sov_*) over 127.0.0.1, SOV_WAIT_POLL (pinned)",
    .polling = true,
    .prepare = prepare_poll,
    SOVIA_OPS,
};

const struct bench_transport bench_transport_sovia_block = {
    .name = "sovia-block",
    .summary = "sovia sockets (sov_*) over 127.0.0.1, SOV_WAIT_BLOCK",
    .polling = false,
    .prepare = prepare_block,
    SOVIA_OPS,
};

const struct bench_transport bench_transport_sovia_adaptive = {
    .name = "sovia-adaptive",
    .summary = "sovia sockets (sov_*) over 127.0.0.1, SOV_WAIT_ADAPTIVE (spin, then sleep; pinned)",
    .polling = true, /* it spins first: pinned for the same reason as vi-block */
    .prepare = prepare_adaptive,
    SOVIA_OPS,
};
