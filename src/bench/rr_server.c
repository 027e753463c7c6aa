/*
 * rr_server.c - one server thread of `sovia bench rr`: its K connections in
 * one event loop; each request of S bytes is read whole and sent back as
 * it came. The thread ends when every client has closed its connection.
 */
#include "rr.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EVENTS 64

struct sconn {
    int fd;
    bool writing, want_out, open;
    size_t off;
    unsigned char *buf;
};

static int fail(const struct rr_thread *t, int i, const char *what)
{
    fprintf(stderr, "sovia-rr server thread %d, connection %d: %s\n", t->index, i, what);
    return -1;
}

/* Sends what is left of the answer; then the connection reads again. */
static int push(struct rr_thread *t, void *loop, struct sconn *c, uint32_t i)
{
    int r = rr_push(t->ops, loop, c->fd, i, c->buf, t->size, &c->off, &c->want_out);

    if (r < 0)
        return fail(t, (int)i, strerror(errno));
    if (r == 1) {
        c->writing = false;
        c->off = 0;
        t->tx_total++;
    }
    return 0;
}

/* 1: the client closed (cleanly, between requests); 0: go on; -1: error. */
static int pull(struct rr_thread *t, void *loop, struct sconn *c, uint32_t i)
{
    while (!c->writing) {
        ssize_t n = t->ops->recv(c->fd, c->buf + c->off, t->size - c->off);
        if (n > 0) {
            c->off += (size_t)n;
            if (c->off == t->size) {
                c->writing = true;
                c->off = 0;
                if (push(t, loop, c, i) != 0)
                    return -1;
            }
            continue;
        }
        if (n == 0) {
            if (c->off != 0)
                return fail(t, (int)i, "the client closed in the middle of a request");
            return 1;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        return fail(t, (int)i, strerror(errno));
    }
    /* An answer is still going out: the client sends nothing meanwhile. */
    return 0;
}

static int serve(struct rr_thread *t, struct sconn *cs, void *loop)
{
    struct rr_event ev[MAX_EVENTS];
    int live = t->nconns;

    for (int i = 0; i < t->nconns; i++)
        if (t->ops->loop_add(loop, cs[i].fd, (uint32_t)i) != 0)
            return fail(t, i, strerror(errno));
    while (live > 0) {
        int n = t->ops->loop_wait(loop, ev, MAX_EVENTS, -1);
        if (n < 0 && errno != EINTR) {
            perror("sovia-rr server: wait");
            return -1;
        }
        for (int k = 0; k < n; k++) {
            uint32_t i = ev[k].token;
            struct sconn *c;
            int r = 0;
            if (i >= (uint32_t)t->nconns || !cs[i].open)
                continue;
            c = &cs[i];
            if (c->writing && (ev[k].out || ev[k].err) && push(t, loop, c, i) != 0)
                return -1;
            if ((ev[k].in || ev[k].err) && (r = pull(t, loop, c, i)) < 0)
                return -1;
            if (r == 1) {
                t->ops->loop_del(loop, c->fd);
                t->ops->close(c->fd);
                c->open = false;
                live--;
            }
        }
    }
    return 0;
}

int rr_server_loop(struct rr_thread *t)
{
    struct sconn *cs = calloc((size_t)t->nconns, sizeof *cs);
    void *loop = t->ops->loop_new(t->nconns);
    int rc = -1;

    if (cs)
        for (int i = 0; i < t->nconns; i++) {
            cs[i].fd = t->fds[i];
            cs[i].open = true;
        }
    if (!cs || !loop) {
        fprintf(stderr, "sovia-rr server: out of memory\n");
        goto out;
    }
    for (int i = 0; i < t->nconns; i++) {
        cs[i].buf = calloc(1, t->size);
        if (!cs[i].buf) {
            fprintf(stderr, "sovia-rr server: out of memory\n");
            goto out;
        }
    }
    rc = serve(t, cs, loop);
out:
    for (int i = 0; i < t->nconns; i++) {
        if (cs && !cs[i].open)
            continue;
        if (loop)
            t->ops->loop_del(loop, t->fds[i]);
        t->ops->close(t->fds[i]);
    }
    if (cs)
        for (int i = 0; i < t->nconns; i++)
            free(cs[i].buf);
    if (loop)
        t->ops->loop_free(loop);
    free(cs);
    return rc;
}
