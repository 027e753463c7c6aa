/* rr_libc.c - the socket calls of `sovia bench rr` through plain libc, one
 * epoll instance per thread (or, rr_libc_poll_ops, a poll(2) loop;
 * rr_libc_oneshot_ops, one-shot entries re-armed per event): kernel
 * TCP and AF_UNIX, and under the preload library exactly what an
 * unmodified epoll (or poll) server gets from `sovia run`. */
#include "rr.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

static int libc_init(const char *transport)
{
    (void)transport;
    return 0;
}

/* glibc's socket calls take a transparent union under _GNU_SOURCE: the
 * plain pointer types of struct rr_ops need these. */
static int libc_socket(int family)
{
    return socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
}

static int libc_bind(int fd, const struct sockaddr *a, socklen_t len)
{
    return bind(fd, a, len);
}

static int libc_getsockname(int fd, struct sockaddr *a, socklen_t *len)
{
    return getsockname(fd, a, len);
}

static int libc_accept(int lfd)
{
    return accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
}

static int libc_connect(int fd, const struct sockaddr *a, socklen_t len)
{
    return connect(fd, a, len);
}

static ssize_t libc_send(int fd, const void *buf, size_t len)
{
    return send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
}

static ssize_t libc_recv(int fd, void *buf, size_t len)
{
    return recv(fd, buf, len, MSG_DONTWAIT);
}

static void *libc_loop_new(int cap)
{
    int *ep = malloc(sizeof *ep);

    (void)cap;
    if (!ep)
        return NULL;
    *ep = epoll_create1(EPOLL_CLOEXEC);
    if (*ep < 0) {
        free(ep);
        return NULL;
    }
    return ep;
}

static int libc_ctl(void *l, int op, int fd, uint32_t token, bool out)
{
    struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.u64 = token};
    return epoll_ctl(*(int *)l, op, fd, &ev);
}

static int libc_loop_add(void *l, int fd, uint32_t token)
{
    return libc_ctl(l, EPOLL_CTL_ADD, fd, token, false);
}

static int libc_loop_want_out(void *l, int fd, uint32_t token, bool out)
{
    return libc_ctl(l, EPOLL_CTL_MOD, fd, token, out);
}

static int libc_loop_del(void *l, int fd)
{
    return epoll_ctl(*(int *)l, EPOLL_CTL_DEL, fd, NULL);
}

#define BATCH 64

/* One epoll_wait into ev[] and out[] (the token: the data's low 32 bits). */
static int wait_events(void *l, struct epoll_event *ev, struct rr_event *out, int max,
                       int timeout_ms)
{
    int n = epoll_wait(*(int *)l, ev, max < BATCH ? max : BATCH, timeout_ms);

    for (int i = 0; i < n; i++) {
        out[i].token = (uint32_t)ev[i].data.u64;
        out[i].in = ev[i].events & EPOLLIN;
        out[i].out = ev[i].events & EPOLLOUT;
        out[i].err = ev[i].events & (EPOLLERR | EPOLLHUP);
    }
    return n;
}

static int libc_loop_wait(void *l, struct rr_event *out, int max, int timeout_ms)
{
    struct epoll_event ev[BATCH];
    return wait_events(l, ev, out, max, timeout_ms);
}

static void libc_loop_free(void *l)
{
    if (l) {
        close(*(int *)l);
        free(l);
    }
}

/* The socket calls of both loops' ops. */
#define LIBC_SOCKET_CALLS                                                                \
    .proc_init = libc_init, .socket = libc_socket, .bind = libc_bind, .listen = listen,   \
    .getsockname = libc_getsockname, .accept = libc_accept, .connect = libc_connect,      \
    .setsockopt = setsockopt, .send = libc_send, .recv = libc_recv, .close = close

const struct rr_ops rr_libc_ops = {
    .name = "libc",
    LIBC_SOCKET_CALLS,
    .loop_new = libc_loop_new,
    .loop_add = libc_loop_add,
    .loop_want_out = libc_loop_want_out,
    .loop_del = libc_loop_del,
    .loop_wait = libc_loop_wait,
    .loop_free = libc_loop_free,
};

/* One-shot epoll: each entry fires once and is re-armed (EPOLL_CTL_MOD)
 * after its event, as thread-pool servers do, so every event costs an
 * epoll_ctl. The entry's data keeps what re-arming needs: token (low 32
 * bits), descriptor, and whether it asked for EPOLLOUT (bit 63). */
#define ONESHOT_OUT (1ull << 63)

static int oneshot_ctl(void *l, int op, int fd, uint32_t token, bool out)
{
    struct epoll_event ev = {
        .events = EPOLLIN | EPOLLONESHOT | (out ? EPOLLOUT : 0),
        .data.u64 = token | (uint64_t)(uint32_t)fd << 32 | (out ? ONESHOT_OUT : 0)};
    return epoll_ctl(*(int *)l, op, fd, &ev);
}

static int oneshot_add(void *l, int fd, uint32_t token)
{
    return oneshot_ctl(l, EPOLL_CTL_ADD, fd, token, false);
}

static int oneshot_want_out(void *l, int fd, uint32_t token, bool out)
{
    return oneshot_ctl(l, EPOLL_CTL_MOD, fd, token, out);
}

static int oneshot_wait(void *l, struct rr_event *out, int max, int timeout_ms)
{
    struct epoll_event ev[BATCH];
    int n = wait_events(l, ev, out, max, timeout_ms);

    for (int i = 0; i < n; i++) {
        uint64_t d = ev[i].data.u64;
        int fd = (int)(uint32_t)(d >> 32 & 0x7fffffffu);
        /* Re-armed before the caller handles it: an event that comes
         * meanwhile is reported by the next wait, none is lost. */
        if (!out[i].err && oneshot_ctl(l, EPOLL_CTL_MOD, fd, out[i].token, d & ONESHOT_OUT) != 0)
            out[i].err = true;
    }
    return n;
}

const struct rr_ops rr_libc_oneshot_ops = {
    .name = "libc-oneshot",
    LIBC_SOCKET_CALLS,
    .loop_new = libc_loop_new,
    .loop_add = oneshot_add,
    .loop_want_out = oneshot_want_out,
    .loop_del = libc_loop_del,
    .loop_wait = oneshot_wait,
    .loop_free = libc_loop_free,
};

static int libc_poll(struct pollfd *fds, nfds_t n, int timeout_ms)
{
    return poll(fds, n, timeout_ms);
}

static void *libc_poll_loop_new(int cap)
{
    return rr_pollset_new(cap, libc_poll);
}

const struct rr_ops rr_libc_poll_ops = {
    .name = "libc-poll",
    LIBC_SOCKET_CALLS,
    .loop_new = libc_poll_loop_new,
    .loop_add = rr_pollset_add,
    .loop_want_out = rr_pollset_want_out,
    .loop_del = rr_pollset_del,
    .loop_wait = rr_pollset_wait,
    .loop_free = rr_pollset_free,
};

const struct rr_ops *rr_libc_ops_chosen(void)
{
    const char *loop = getenv("SOVIA_BENCH_RR_LOOP");
    if (loop && strcmp(loop, "poll") == 0)
        return &rr_libc_poll_ops;
    if (loop && strcmp(loop, "oneshot") == 0)
        return &rr_libc_oneshot_ops;
    return &rr_libc_ops;
}
