/* rr_sock.c - what `sovia bench rr` builds from the socket calls of an
 * rr_ops: listening, accepting and connecting as the loops need them, and
 * a send that never blocks. One code for libc and for sov_*. */
#include "rr.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

/* Closes fd keeping errno; returns -1. */
static int drop(const struct rr_ops *ops, int fd)
{
    int e = errno;
    ops->close(fd);
    errno = e;
    return -1;
}

/* Every request leaves at once, as a latency-bound program sets it. */
static int nodelay(const struct rr_ops *ops, int fd)
{
    int one = 1;
    return ops->setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int rr_listen(const struct rr_ops *ops, struct rr_addr *a, int backlog)
{
    int fd = ops->socket(a->family);
    socklen_t len = sizeof a->sa;

    if (fd < 0)
        return -1;
    if (ops->bind(fd, (struct sockaddr *)&a->sa, a->len) != 0 || ops->listen(fd, backlog) != 0 ||
        ops->getsockname(fd, (struct sockaddr *)&a->sa, &len) != 0)
        return drop(ops, fd);
    a->len = len;
    return fd;
}

int rr_accept(const struct rr_ops *ops, int lfd, int family)
{
    int fd;

    do
        fd = ops->accept(lfd);
    while (fd < 0 && errno == EINTR);
    if (fd >= 0 && family == AF_INET && nodelay(ops, fd) != 0)
        return drop(ops, fd);
    return fd;
}

int rr_connect(const struct rr_ops *ops, const struct rr_addr *a)
{
    int fd = ops->socket(a->family), r;

    if (fd < 0)
        return -1;
    do
        r = ops->connect(fd, (const struct sockaddr *)&a->sa, a->len);
    while (r != 0 && errno == EINTR);
    if (r != 0 || (a->family == AF_INET && nodelay(ops, fd) != 0))
        return drop(ops, fd);
    return fd;
}

int rr_push(const struct rr_ops *ops, void *loop, int fd, uint32_t token,
            const unsigned char *buf, size_t size, size_t *off, bool *want_out)
{
    while (*off < size) {
        ssize_t n = ops->send(fd, buf + *off, size - *off);
        if (n > 0) {
            *off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!*want_out && ops->loop_want_out(loop, fd, token, true) != 0)
                return -1;
            *want_out = true;
            return 0;
        }
        if (n == 0)
            errno = EIO; /* a stream send of a nonzero length moves something */
        return -1;
    }
    if (*want_out && ops->loop_want_out(loop, fd, token, false) != 0)
        return -1;
    *want_out = false;
    return 1;
}
