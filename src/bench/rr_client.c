/*
 * rr_client.c - one client thread of `sovia bench rr`: K connections in one
 * event loop, one request outstanding on each.
 *
 * What is counted, so that a stall can never hide:
 *  - latency is taken per request, from just before its first byte is sent
 *    to the moment its last answer byte is read (one clock read serves as
 *    the end of one request and the start of the next);
 *  - every request in flight at any moment between WARM and END goes into
 *    the histogram, including those still outstanding at END: the client
 *    stops sending at END and waits up to the drain time for them; any that
 *    never come are counted as unanswered, with the time waited;
 *  - transactions per second count the answers that arrived between WARM
 *    and END;
 *  - every answer is compared byte for byte with its request, which carries
 *    a per-request stamp and a per-connection pattern, so a stale, foreign
 *    or corrupted answer fails the run.
 */
#include "rr.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EVENTS 64

enum cstate { C_IDLE, C_SENDING, C_RECEIVING };

struct cconn {
    int fd;
    enum cstate state;
    bool want_out;
    size_t off;
    uint64_t id, seq;
    int64_t sent_ns;
    unsigned char *req, *resp;
};

/* A stamp that differs from request to request and connection to
 * connection, written over the first bytes of the request. */
static void stamp(struct cconn *c, size_t size)
{
    uint64_t v = (c->seq * 0x9e3779b97f4a7c15ull) ^ (c->id * 0xbf58476d1ce4e5b9ull);
    memcpy(c->req, &v, size < sizeof v ? size : sizeof v);
}

static void fill_pattern(struct cconn *c, size_t size)
{
    for (size_t i = 0; i < size; i++)
        c->req[i] = (unsigned char)(c->id * 131u + i * 7u + 1u);
}

static int fail(const struct rr_thread *t, const struct cconn *c, const char *what)
{
    fprintf(stderr, "sovia-rr client thread %d, connection %llu: %s\n", t->index,
            (unsigned long long)c->id, what);
    return -1;
}

/* Sends what is left of the request; then its answer is awaited. */
static int push(struct rr_thread *t, void *loop, struct cconn *c, uint32_t token)
{
    int r = rr_push(t->ops, loop, c->fd, token, c->req, t->size, &c->off, &c->want_out);

    if (r < 0)
        return fail(t, c, strerror(errno));
    if (r == 1) {
        c->state = C_RECEIVING;
        c->off = 0;
    }
    return 0;
}

static int start(struct rr_thread *t, void *loop, struct cconn *c, uint32_t token, int64_t now)
{
    c->seq++;
    stamp(c, t->size);
    c->sent_ns = now;
    c->state = C_SENDING;
    c->off = 0;
    return push(t, loop, c, token);
}

/* The answer is complete: check it, count it, send the next request. */
static int answered(struct rr_thread *t, void *loop, struct cconn *c, uint32_t token,
                    int *active)
{
    int64_t now = rr_now_ns();

    if (memcmp(c->resp, c->req, t->size) != 0) {
        size_t i = 0;
        char msg[128];
        while (c->resp[i] == c->req[i])
            i++;
        snprintf(msg, sizeof msg, "answer %llu differs from its request at byte %zu of %zu",
                 (unsigned long long)c->seq, i, t->size);
        return fail(t, c, msg);
    }
    if (now >= t->m.warm_ns) {
        rr_hist_add(&t->lat, (uint64_t)(now - c->sent_ns));
        if (now < t->m.end_ns)
            t->tx_window++;
    }
    t->tx_total++;
    if (now < t->m.end_ns)
        return start(t, loop, c, token, now);
    c->state = C_IDLE;
    (*active)--;
    return 0;
}

static int pull(struct rr_thread *t, void *loop, struct cconn *c, uint32_t token, int *active)
{
    for (;;) {
        ssize_t n;
        if (c->state != C_RECEIVING) {
            /* Nothing may come before the whole request went out. */
            unsigned char b;
            n = t->ops->recv(c->fd, &b, 1);
            if (n > 0)
                return fail(t, c, "the server answered before the request was complete");
        } else {
            n = t->ops->recv(c->fd, c->resp + c->off, t->size - c->off);
            if (n > 0) {
                c->off += (size_t)n;
                if (c->off == t->size && answered(t, loop, c, token, active) != 0)
                    return -1;
                if (c->state == C_RECEIVING && c->off == 0)
                    return 0; /* the next request's answer cannot be there yet */
                continue;
            }
        }
        if (n == 0)
            return fail(t, c, "the server closed the connection");
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        return fail(t, c, strerror(errno));
    }
}

static int timeout_ms(int64_t now, int64_t until)
{
    int64_t ms = (until - now + 999999) / 1000000;
    return ms < 0 ? 0 : ms > 1000 ? 1000 : (int)ms;
}

static int run(struct rr_thread *t, struct cconn *cs, void *loop)
{
    struct rr_event ev[MAX_EVENTS];
    int active = t->nconns;
    int64_t now;

    for (int i = 0; i < t->nconns; i++)
        if (t->ops->loop_add(loop, cs[i].fd, (uint32_t)i) != 0)
            return fail(t, &cs[i], strerror(errno));
    rr_sleep_until(t->m.start_ns);
    now = rr_now_ns();
    for (int i = 0; i < t->nconns; i++)
        if (start(t, loop, &cs[i], (uint32_t)i, now) != 0)
            return -1;
    for (;;) {
        int n;
        now = rr_now_ns();
        if (now >= t->m.end_ns && active == 0)
            return 0;
        if (now >= t->m.drain_ns)
            break;
        n = t->ops->loop_wait(loop, ev, MAX_EVENTS,
                              timeout_ms(now, now < t->m.end_ns ? t->m.end_ns : t->m.drain_ns));
        if (n < 0 && errno != EINTR) {
            perror("sovia-rr client: wait");
            return -1;
        }
        for (int k = 0; k < n; k++) {
            uint32_t i = ev[k].token;
            struct cconn *c;
            if (i >= (uint32_t)t->nconns)
                continue;
            c = &cs[i];
            if (c->state == C_SENDING && (ev[k].out || ev[k].err) &&
                push(t, loop, c, i) != 0)
                return -1;
            if ((ev[k].in || ev[k].err) && pull(t, loop, c, i, &active) != 0)
                return -1;
        }
    }
    /* Drain time is over: what is still out was never answered. */
    for (int i = 0; i < t->nconns; i++)
        if (cs[i].state != C_IDLE) {
            rr_hist_add(&t->lat, (uint64_t)(now - cs[i].sent_ns));
            t->unanswered++;
        }
    fprintf(stderr, "sovia-rr client thread %d: %llu request(s) unanswered %.1f s after the end\n",
            t->index, (unsigned long long)t->unanswered,
            (double)(t->m.drain_ns - t->m.end_ns) / 1e9);
    return 0;
}

int rr_client_loop(struct rr_thread *t)
{
    struct cconn *cs = calloc((size_t)t->nconns, sizeof *cs);
    void *loop = t->ops->loop_new(t->nconns);
    int rc = -1;

    if (!cs || !loop) {
        fprintf(stderr, "sovia-rr client: out of memory\n");
        goto out;
    }
    for (int i = 0; i < t->nconns; i++) {
        cs[i].fd = t->fds[i];
        cs[i].id = t->conn_base + (uint64_t)i;
        cs[i].req = malloc(t->size);
        cs[i].resp = malloc(t->size);
        if (!cs[i].req || !cs[i].resp) {
            fprintf(stderr, "sovia-rr client: out of memory\n");
            goto out;
        }
        fill_pattern(&cs[i], t->size);
        memset(cs[i].resp, 0, t->size); /* no page fault in the timed loop */
    }
    rc = run(t, cs, loop);
out:
    for (int i = 0; i < t->nconns; i++) {
        if (loop)
            t->ops->loop_del(loop, t->fds[i]);
        t->ops->close(t->fds[i]);
        if (cs) {
            free(cs[i].req);
            free(cs[i].resp);
        }
    }
    if (loop)
        t->ops->loop_free(loop);
    free(cs);
    return rc;
}
