/*
 * fabric_cqx.c - reading an fi_cq: libfabric's completions become finished
 * slots, and what a peer put in them is checked first.
 *
 * A receive's remote CQ data says what its lower half is (fabric.h,
 * FAB_DATA_*); anything else, or an RDMA write's notice that carries bytes,
 * fails that VI's connection (VIP_ERROR_CONN_LOST, the descriptor with a
 * transport error), never the process. Reading the fi_cq is also what
 * moves data on providers with manual progress (tcp).
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "fabric.h"

int fab_cqx_init(struct fab_nic *fn, struct fab_cqx *x, uint32_t notices)
{
    memset(x, 0, sizeof(*x));
    x->fd = x->outer = -1;
    x->fabric = fn->fabric;
    if (notices) {
        x->notices = calloc(notices, sizeof(*x->notices));
        if (!x->notices)
            return -ENOMEM;
        x->ncap = notices;
    }
    pthread_mutex_init(&x->lock, NULL);
    pthread_mutex_init(&x->nlock, NULL);
    return 0;
}

int fab_cqx_bind(struct fab_cqx *x, struct fid_domain *domain)
{
    pthread_mutex_lock(&x->lock);
    int r = 0;
    if (x->cq) {
        r = x->domain == domain ? 0 : -EINVAL;
    } else {
        struct fi_cq_attr attr = {.format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_FD,
                                  .size = FAB_DEPTH_MAX * 2};
        struct fid_cq *cq = NULL;
        int wfd = -1;
        r = fi_cq_open(domain, &attr, &cq, NULL);
        if (r == -FI_ENOSYS || r == -FI_EINVAL) { /* no wait object: we poll it */
            attr.wait_obj = FI_WAIT_NONE;
            r = fi_cq_open(domain, &attr, &cq, NULL);
        } else if (r == 0 && fi_control(&cq->fid, FI_GETWAIT, &wfd) != 0) {
            wfd = -1;
        }
        if (r == 0 && x->outer >= 0 && wfd >= 0) {
            struct epoll_event ev = {.events = EPOLLIN};
            if (epoll_ctl(x->outer, EPOLL_CTL_ADD, wfd, &ev) != 0) {
                fi_close(&cq->fid); /* the CQ's descriptor would never wake */
                r = -EINVAL;
            }
        } else if (r == 0 && x->outer < 0) {
            x->fd = wfd;
        } /* else the outer set stays empty: sleeps end at their bound */
        if (r == 0) {
            x->domain = domain;
            __atomic_store_n(&x->cq, cq, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&x->lock);
    return r;
}

void fab_cqx_close(struct fab_cqx *x)
{
    if (x->cq)
        fi_close(&x->cq->fid);
    x->cq = NULL;
    x->domain = NULL;
    x->fd = -1;
    if (x->outer >= 0)
        VipxFdClose(x->outer);
    x->outer = -1;
    free(x->notices);
    x->notices = NULL;
    pthread_mutex_destroy(&x->lock);
    pthread_mutex_destroy(&x->nlock);
}

void fab_cqx_notice(struct fab_cqx *x, struct vipl_vi *vi, bool recvq)
{
    pthread_mutex_lock(&x->nlock);
    if (x->ntail - x->nhead >= x->ncap)
        x->overflowed = true; /* more than the CQ's entries: VIA's overrun */
    else
        x->notices[x->ntail++ % x->ncap] = (struct fab_notice){vi, recvq};
    pthread_mutex_unlock(&x->nlock);
}

bool fab_cqx_take(struct fab_cqx *x, struct vipl_vi **vi, bool *recvq)
{
    pthread_mutex_lock(&x->nlock);
    bool got = x->nhead != x->ntail;
    if (got) {
        struct fab_notice *n = &x->notices[x->nhead++ % x->ncap];
        *vi = n->vi;
        *recvq = n->recvq;
    }
    pthread_mutex_unlock(&x->nlock);
    return got;
}

/* A receive's remote CQ data, checked: false fails the connection. */
static bool recv_data(const struct fi_cq_data_entry *e, uint32_t *status, uint32_t *len,
                      uint32_t *imm)
{
    *len = (uint32_t)e->len;
    if (!(e->flags & FI_REMOTE_CQ_DATA))
        return true;
    uint32_t kind = (uint32_t)(e->data >> 56), wlen = (uint32_t)(e->data >> 32) & 0xffffff;
    *imm = (uint32_t)e->data;
    if (kind == FAB_DATA_SEND && wlen == 0) {
        *status |= VIP_STATUS_IMMEDIATE;
        return true;
    }
    if (kind == FAB_DATA_RDMA_IMM && e->len == 0 && wlen <= FAB_MAX_TRANSFER) {
        *status = (*status & ~VIP_STATUS_OP_MASK) | VIP_STATUS_OP_REMOTE_RDMA_WRITE |
                  VIP_STATUS_IMMEDIATE;
        *len = wlen; /* VIA: the receive shows the write's length */
        return true;
    }
    return false;
}

/* VIs to break once the reader's lock is let go (fab_vi_break takes the
 * endpoint's lock, which posters hold while they read the fi_cq). */
struct breaks {
    struct fab_vi *vi[16];
    VIP_DESCRIPTOR *desc[16];
    unsigned n;
};

static void fail_slot(struct fab_slot *s, uint32_t status, struct breaks *b)
{
    if (s->q->recv && (status & VIP_STATUS_TRANSPORT_ERROR))
        s->q->peer_errors++; /* (the reader's lock orders these) */
    fab_slot_finish(s, status, 0, s->q->recv ? 0 : s->imm);
    for (unsigned i = 0; i < b->n; i++)
        if (b->vi[i] == s->q->vi)
            return;
    if (b->n < 16) {
        b->vi[b->n] = s->q->vi;
        b->desc[b->n++] = s->desc;
    }
}

static void read_error(struct fab_cqx *x, struct breaks *b)
{
    struct fi_cq_err_entry err = {0};
    if (fi_cq_readerr(x->cq, &err, 0) != 1 || !err.op_context)
        return; /* a suppressed write's error: its notice fails too */
    struct fab_slot *s = err.op_context;
    uint32_t op = s->op;
    if (err.err == FI_ECANCELED) {
        fab_slot_finish(s, VIP_STATUS_DESC_FLUSHED_ERROR | op, 0, s->q->recv ? 0 : s->imm);
        return;
    }
    /* A message longer than the receive: the peer's fault, its connection's end. */
    uint32_t status = err.err == FI_ETRUNC ? VIP_STATUS_LENGTH_ERROR : VIP_STATUS_TRANSPORT_ERROR;
    fail_slot(s, status | op, b);
}

void fab_cqx_progress(struct fab_cqx *x)
{
    struct fi_cq_data_entry e[16];
    struct breaks b = {.n = 0};
    if (!__atomic_load_n(&x->cq, __ATOMIC_ACQUIRE))
        return; /* no VI bound to it yet */
    pthread_mutex_lock(&x->lock);
    for (;;) {
        ssize_t n = fi_cq_read(x->cq, e, 16);
        if (n == -FI_EAVAIL) {
            read_error(x, &b);
            continue;
        }
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++) {
            struct fab_slot *s = e[i].op_context;
            if (!s)
                continue;
            uint32_t status = s->op, imm = 0, len = 0;
            if (s->q->recv && (e[i].len > UINT32_MAX || !recv_data(&e[i], &status, &len, &imm))) {
                fail_slot(s, VIP_STATUS_TRANSPORT_ERROR | VIP_STATUS_OP_RECEIVE, &b);
                continue;
            }
            if (!s->q->recv)
                fab_slot_finish(s, status, s->total, s->imm);
            else
                fab_slot_finish(s, status, len, imm);
        }
    }
    pthread_mutex_unlock(&x->lock);
    for (unsigned i = 0; i < b.n; i++)
        fab_vi_break(b.vi[i], VIP_ERROR_CONN_LOST, b.desc[i]);
}

int fab_cqx_sleep(struct fab_cqx *x, const struct timespec *deadline, int bound_ms)
{
    int left = vipl_ms_left(deadline);
    int ms = bound_ms >= 0 && (left < 0 || left > bound_ms) ? bound_ms : left;
    if (!__atomic_load_n(&x->cq, __ATOMIC_ACQUIRE)) {
        poll(NULL, 0, ms); /* a CQ no VI reports to yet: nothing can come */
    } else if (x->fd >= 0) {
        struct fid *f = &x->cq->fid;
        if (fi_trywait(x->fabric, &f, 1) == 0) {
            struct pollfd p = {.fd = x->fd, .events = POLLIN};
            poll(&p, 1, ms);
        }
    } else {
        struct timespec t = {0, 50000}; /* no wait object: poll gently */
        nanosleep(&t, NULL);
    }
    return deadline && vipl_ms_left(deadline) == 0 ? -ETIMEDOUT : 0;
}
