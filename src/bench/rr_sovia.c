/* rr_sovia.c - the socket calls of `sovia bench rr` through the sov_* API
 * (libsovia), in each wait mode: sovia (SOV_WAIT_POLL), sovia-block and
 * sovia-adaptive. sovia has no epoll: the event loop is sov_poll over the
 * thread's connections. Used in processes the sovia tool forks (rr_run.c);
 * nothing touches the library before the fork. */
#include "rr.h"

#include <errno.h>
#include <poll.h>
#include <sovia.h>
#include <stdlib.h>
#include <string.h>

/* The wait mode of a sovia transport name; -1 for other names. */
int rr_sovia_wait_mode(const char *transport)
{
    if (strcmp(transport, "sovia") == 0)
        return SOV_WAIT_POLL;
    if (strcmp(transport, "sovia-block") == 0)
        return SOV_WAIT_BLOCK;
    if (strcmp(transport, "sovia-adaptive") == 0)
        return SOV_WAIT_ADAPTIVE;
    return -1;
}

/* The library's configuration (defaults, then the environment) with the
 * transport's wait mode, before the first socket. */
static int sovia_init(const char *transport)
{
    struct sov_config c;
    int mode = rr_sovia_wait_mode(transport);

    if (mode < 0) {
        errno = EINVAL;
        return -1;
    }
    if (sov_get_config(&c) != 0)
        return -1;
    c.wait_mode = (enum sov_wait_mode)mode;
    return sov_set_config(&c);
}

static int sovia_socket(int family)
{
    return sov_socket(family, SOCK_VIA | SOCK_CLOEXEC, 0);
}

static int sovia_accept(int lfd)
{
    return sov_accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
}

static ssize_t sovia_send(int fd, const void *buf, size_t len)
{
    return sov_send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
}

static ssize_t sovia_recv(int fd, void *buf, size_t len)
{
    return sov_recv(fd, buf, len, MSG_DONTWAIT);
}

static void *sovia_loop_new(int cap)
{
    return rr_pollset_new(cap, sov_poll);
}

const struct rr_ops rr_sovia_ops = {
    .name = "sovia",
    .proc_init = sovia_init,
    .socket = sovia_socket,
    .bind = sov_bind,
    .listen = sov_listen,
    .getsockname = sov_getsockname,
    .accept = sovia_accept,
    .connect = sov_connect,
    .setsockopt = sov_setsockopt,
    .send = sovia_send,
    .recv = sovia_recv,
    .close = sov_close,
    .loop_new = sovia_loop_new,
    .loop_add = rr_pollset_add,
    .loop_want_out = rr_pollset_want_out,
    .loop_del = rr_pollset_del,
    .loop_wait = rr_pollset_wait,
    .loop_free = rr_pollset_free,
};
