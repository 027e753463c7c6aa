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

/* A pollfd array; a descriptor's slot holds its token beside it. */
struct sov_loop {
    int n, cap;
    struct pollfd *p;
    uint32_t *token;
};

static void *sovia_loop_new(int cap)
{
    struct sov_loop *l = calloc(1, sizeof *l);

    if (!l)
        return NULL;
    l->cap = cap;
    l->p = calloc((size_t)cap, sizeof *l->p);
    l->token = calloc((size_t)cap, sizeof *l->token);
    if (!l->p || !l->token) {
        free(l->p);
        free(l->token);
        free(l);
        return NULL;
    }
    return l;
}

static int slot_of(const struct sov_loop *l, int fd)
{
    for (int i = 0; i < l->n; i++)
        if (l->p[i].fd == fd)
            return i;
    errno = ENOENT;
    return -1;
}

static int sovia_loop_add(void *lp, int fd, uint32_t token)
{
    struct sov_loop *l = lp;

    if (l->n == l->cap) {
        errno = ENOSPC;
        return -1;
    }
    l->p[l->n] = (struct pollfd){.fd = fd, .events = POLLIN};
    l->token[l->n++] = token;
    return 0;
}

static int sovia_loop_want_out(void *lp, int fd, uint32_t token, bool out)
{
    struct sov_loop *l = lp;
    int i = slot_of(l, fd);

    (void)token;
    if (i < 0)
        return -1;
    l->p[i].events = (short)(POLLIN | (out ? POLLOUT : 0));
    return 0;
}

static int sovia_loop_del(void *lp, int fd)
{
    struct sov_loop *l = lp;
    int i = slot_of(l, fd);

    if (i < 0)
        return -1;
    l->n--;
    l->p[i] = l->p[l->n];
    l->token[i] = l->token[l->n];
    return 0;
}

static int sovia_loop_wait(void *lp, struct rr_event *ev, int max, int timeout_ms)
{
    struct sov_loop *l = lp;
    int r = sov_poll(l->p, (nfds_t)l->n, timeout_ms), k = 0;

    for (int i = 0; r > 0 && i < l->n && k < max; i++) {
        short re = l->p[i].revents;
        if (!re)
            continue;
        ev[k].token = l->token[i];
        ev[k].in = re & POLLIN;
        ev[k].out = re & POLLOUT;
        ev[k].err = re & (POLLERR | POLLHUP | POLLNVAL);
        k++;
    }
    return r < 0 ? -1 : k;
}

static void sovia_loop_free(void *lp)
{
    struct sov_loop *l = lp;

    if (l) {
        free(l->p);
        free(l->token);
        free(l);
    }
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
    .loop_add = sovia_loop_add,
    .loop_want_out = sovia_loop_want_out,
    .loop_del = sovia_loop_del,
    .loop_wait = sovia_loop_wait,
    .loop_free = sovia_loop_free,
};
