/* rr_pollset.c - an event loop of `sovia bench rr` over a pollfd array,
 * waiting with poll(2) (the libc transports' poll loop: SOVIA_BENCH_RR_LOOP)
 * or sov_poll (the sovia transports). */
#include "rr.h"

#include <errno.h>
#include <stdlib.h>

/* A pollfd array; a descriptor's slot holds its token beside it. */
struct pollset {
    int (*wait)(struct pollfd *fds, nfds_t n, int timeout_ms);
    int n, cap;
    struct pollfd *p;
    uint32_t *token;
};

void *rr_pollset_new(int cap, int (*wait)(struct pollfd *fds, nfds_t n, int timeout_ms))
{
    struct pollset *l = calloc(1, sizeof *l);

    if (!l)
        return NULL;
    l->wait = wait;
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

static int slot_of(const struct pollset *l, int fd)
{
    for (int i = 0; i < l->n; i++)
        if (l->p[i].fd == fd)
            return i;
    errno = ENOENT;
    return -1;
}

int rr_pollset_add(void *lp, int fd, uint32_t token)
{
    struct pollset *l = lp;

    if (l->n == l->cap) {
        errno = ENOSPC;
        return -1;
    }
    l->p[l->n] = (struct pollfd){.fd = fd, .events = POLLIN};
    l->token[l->n++] = token;
    return 0;
}

int rr_pollset_want_out(void *lp, int fd, uint32_t token, bool out)
{
    struct pollset *l = lp;
    int i = slot_of(l, fd);

    (void)token;
    if (i < 0)
        return -1;
    l->p[i].events = (short)(POLLIN | (out ? POLLOUT : 0));
    return 0;
}

int rr_pollset_del(void *lp, int fd)
{
    struct pollset *l = lp;
    int i = slot_of(l, fd);

    if (i < 0)
        return -1;
    l->n--;
    l->p[i] = l->p[l->n];
    l->token[i] = l->token[l->n];
    return 0;
}

int rr_pollset_wait(void *lp, struct rr_event *ev, int max, int timeout_ms)
{
    struct pollset *l = lp;
    int r = l->wait(l->p, (nfds_t)l->n, timeout_ms), k = 0;

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

void rr_pollset_free(void *lp)
{
    struct pollset *l = lp;

    if (l) {
        free(l->p);
        free(l->token);
        free(l);
    }
}
