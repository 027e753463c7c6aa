/*
 * fabric_cq.c - VIPL completion queues and blocking waits.
 *
 * A VIPL CQ is an fi_cq that the queues reporting to it are bound to, plus
 * the (VI, queue) notices its reader leaves in completion order. Sleeping
 * is poll() on the fi_cq's wait object (FI_WAIT_FD) after fi_trywait says
 * nothing is pending inside the provider; sleeps are bounded (FAB_SLEEP_MS)
 * because a peer's shutdown arrives on the endpoint's event queue, which
 * no fi_cq descriptor reports: the agent reads it (fabric_agent.c).
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/epoll.h>

#include "fabric.h"

#define FAB_SLEEP_MS 10

VIP_RETURN fab_create_cq(struct vipl_cq *ccq)
{
    struct fab_cq *cq = fab_cq(ccq);
    if (fab_cqx_init(fab_nic(ccq->nic), &cq->x, (uint32_t)ccq->entries) != 0)
        return VIP_ERROR_RESOURCE;
    cq->x.outer = cq->x.fd = vipl_fd_epoll(EPOLL_CLOEXEC);
    if (cq->x.outer < 0) {
        fab_cqx_close(&cq->x);
        return VIP_ERROR_RESOURCE;
    }
    return VIP_SUCCESS;
}

void fab_destroy_cq(struct vipl_cq *ccq)
{
    fab_cqx_close(&fab_cq(ccq)->x);
}

VIP_RETURN fab_resize_cq(struct vipl_cq *ccq, VIP_ULONG entries)
{
    struct fab_cqx *x = &fab_cq(ccq)->x;
    fab_cqx_progress(x); /* what the provider holds counts as pending too */
    pthread_mutex_lock(&x->nlock);
    VIP_RETURN r = VIP_SUCCESS;
    if (entries < x->ntail - x->nhead) {
        r = VIP_INVALID_PARAMETER;
    } else {
        struct fab_notice *n = calloc(entries, sizeof(*n));
        if (!n) {
            r = VIP_ERROR_RESOURCE;
        } else {
            uint32_t k = 0;
            for (uint32_t i = x->nhead; i != x->ntail; i++)
                n[k++] = x->notices[i % x->ncap];
            free(x->notices);
            x->notices = n;
            x->nhead = 0;
            x->ntail = k;
            x->ncap = (uint32_t)entries;
            ccq->entries = entries;
        }
    }
    pthread_mutex_unlock(&x->nlock);
    return r;
}

VIP_RETURN fab_cq_done(struct vipl_cq *ccq, struct vipl_vi **vi, VIP_BOOLEAN *recvq)
{
    struct fab_cq *cq = fab_cq(ccq);
    bool rq;
    if (!fab_cqx_take(&cq->x, vi, &rq)) {
        fab_cqx_progress(&cq->x);
        if (!fab_cqx_take(&cq->x, vi, &rq))
            return VIP_NOT_DONE;
    }
    *recvq = rq;
    return VIP_SUCCESS;
}

static struct fab_cqx *cqx_of(void *obj, enum vipl_queue q)
{
    if (q == VIPL_CQ)
        return &fab_cq(obj)->x;
    struct fab_vi *vi = fab_vi(obj);
    return q == VIPL_RECVQ ? vi->rq.cqx : vi->sq.cqx;
}

uint32_t fab_wait_prepare(void *obj, enum vipl_queue q)
{
    if (q == VIPL_CQ)
        atomic_fetch_add(&fab_cq(obj)->x.armed, 1);
    return 0;
}

int fab_wait_sleep(void *obj, enum vipl_queue q, uint32_t token, const struct timespec *deadline)
{
    (void)token;
    if (q != VIPL_CQ && atomic_exchange(&fab_vi(obj)->wake, false))
        return 0;
    return fab_cqx_sleep(cqx_of(obj, q), deadline, FAB_SLEEP_MS);
}

void fab_wait_finish(void *obj, enum vipl_queue q)
{
    if (q != VIPL_CQ)
        return;
    atomic_uint *a = &fab_cq(obj)->x.armed;
    unsigned v = atomic_load(a);
    while (v && !atomic_compare_exchange_weak(a, &v, v - 1))
        ;
}

void fab_wait_wake(void *obj, enum vipl_queue q)
{
    if (q != VIPL_CQ)
        atomic_store(&fab_vi(obj)->wake, true); /* seen within FAB_SLEEP_MS */
}

int fab_cq_wait_fd(struct vipl_cq *ccq)
{
    return fab_cq(ccq)->x.fd;
}

bool fab_cq_wait_drain(struct vipl_cq *ccq)
{
    (void)ccq;
    return false; /* the provider's wait object: it resets itself */
}

int fab_cq_sleep_bound(struct vipl_cq *ccq)
{
    struct fab_cqx *x = &fab_cq(ccq)->x;
    /* Bound by a connection thread's first VI while we may sleep on it. */
    struct fid_cq *cq = __atomic_load_n(&x->cq, __ATOMIC_ACQUIRE);
    if (!cq)
        return FAB_SLEEP_MS;
    struct fid *f = &cq->fid;
    /* Something already inside the provider: the next poll must not sleep. */
    return fi_trywait(x->fabric, &f, 1) == 0 ? FAB_SLEEP_MS : 0;
}
