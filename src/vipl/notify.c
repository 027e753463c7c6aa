/*
 * notify.c - VipSendNotify, VipRecvNotify, VipCQNotify.
 *
 * Each queue with a notify gets one provider thread (created on first use,
 * as M-VIA did: one notify thread per work queue). It sleeps until a request
 * is armed, then blocks on the queue like VipRecvWait and calls the handler
 * with the dequeued completion. Requests are one-shot.
 */
#include <signal.h>
#include <stdlib.h>

#include "core.h"

struct vipl_notify {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    void *obj;
    enum vipl_queue q;
    bool pending;
    atomic_bool stopping;
    /* VipxViNotifyHold: the thread takes no completion while `held`;
     * `in_flight` from its look at the queue until its handler returned
     * (or the look found nothing), so a holder can wait one out. */
    atomic_bool held, in_flight;
    void *context;
    void *handler;
};

static const struct vipl_provider *prov_of(const struct vipl_notify *n)
{
    return n->q == VIPL_CQ ? ((struct vipl_cq *)n->obj)->nic->prov
                           : ((struct vipl_vi *)n->obj)->nic->prov;
}

static VIP_RETURN poll_once(struct vipl_notify *n, void *out1, void *out2)
{
    switch (n->q) {
    case VIPL_SENDQ:
        return vipl_poll_send(n->obj, out1, out2);
    case VIPL_RECVQ:
        return vipl_poll_recv(n->obj, out1, out2);
    default:
        return vipl_poll_cq(n->obj, out1, out2);
    }
}

/* poll_once, or a stop: looked at after arming, so the wake-up that
 * vipl_notify_destroy sends after setting `stopping` is never missed. */
static VIP_RETURN poll_or_stop(void *obj, void *out1, void *out2)
{
    struct vipl_notify *n = obj;
    if (atomic_load(&n->stopping))
        return VIP_INVALID_STATE;
    /* In flight before `held` is read (both sequentially consistent): a
     * holder that then finds in_flight false knows no look can take one. */
    atomic_store(&n->in_flight, true);
    if (atomic_load(&n->held)) {
        atomic_store(&n->in_flight, false);
        return VIP_NOT_DONE;
    }
    VIP_RETURN r = poll_once(n, out1, out2);
    if (r != VIP_SUCCESS)
        atomic_store(&n->in_flight, false);
    return r;
}

/* Blocks until a completion arrives (true) or the notify is being torn down. */
static bool wait_completion(struct vipl_notify *n, void *out1, void *out2)
{
    for (;;) {
        VIP_RETURN r = poll_or_stop(n, out1, out2);
        if (r == VIP_NOT_DONE)
            r = vipl_sleep_once(n->obj, n->q, poll_or_stop, n, out1, out2, NULL);
        if (r == VIP_INVALID_STATE && atomic_load(&n->stopping))
            return false;
        if (r != VIP_NOT_DONE && r != VIP_TIMEOUT)
            return true;
    }
}

static struct vipl_nic *owner_nic(void *obj, enum vipl_queue q)
{
    return q == VIPL_CQ ? ((struct vipl_cq *)obj)->nic : ((struct vipl_vi *)obj)->nic;
}

static void call_handler(struct vipl_notify *n, void *context, void *handler, void *out1,
                         VIP_BOOLEAN recvq)
{
    if (n->q == VIPL_CQ) {
        struct vipl_cq *cq = n->obj;
        ((VIP_CQ_NOTIFY_HANDLER)handler)(context, cq->nic, out1, recvq);
    } else {
        struct vipl_vi *vi = n->obj;
        ((VIP_WQ_NOTIFY_HANDLER)handler)(context, vi->nic, vi, out1);
    }
}

static void *notify_thread(void *arg)
{
    struct vipl_notify *n = arg;
    for (;;) {
        pthread_mutex_lock(&n->lock);
        while (!n->pending && !atomic_load(&n->stopping))
            pthread_cond_wait(&n->cond, &n->lock);
        pthread_mutex_unlock(&n->lock);
        if (atomic_load(&n->stopping))
            return NULL;

        void *out1 = NULL;
        VIP_BOOLEAN recvq = VIP_FALSE;
        if (!wait_completion(n, &out1, &recvq))
            return NULL;
        pthread_mutex_lock(&n->lock);
        void *context = n->context, *handler = n->handler;
        n->pending = false; /* cleared first: the handler may re-arm */
        pthread_mutex_unlock(&n->lock);
        call_handler(n, context, handler, out1, recvq);
        atomic_store(&n->in_flight, false);
    }
}

static struct vipl_notify *notify_create(void *obj, enum vipl_queue q)
{
    struct vipl_notify *n = calloc(1, sizeof(*n));
    if (!n)
        return NULL;
    n->obj = obj;
    n->q = q;
    pthread_mutex_init(&n->lock, NULL);
    pthread_cond_init(&n->cond, NULL);
    if (VipxThreadCreate(&n->thread, NULL, notify_thread, n) != 0) {
        pthread_mutex_destroy(&n->lock);
        pthread_cond_destroy(&n->cond);
        free(n);
        return NULL;
    }
    return n;
}

VIP_RETURN vipl_notify_arm(struct vipl_notify **slot, void *obj, enum vipl_queue q,
                           void *context, void *handler)
{
    /* The slot is the NIC lock's (creation, teardown); arming is the
     * notify's own lock's. */
    struct vipl_nic *nic = owner_nic(obj, q);
    pthread_mutex_lock(&nic->lock);
    if (!*slot)
        *slot = notify_create(obj, q);
    struct vipl_notify *n = *slot;
    pthread_mutex_unlock(&nic->lock);
    if (!n)
        return VIP_ERROR_RESOURCE;

    pthread_mutex_lock(&n->lock);
    /* Being torn down: a handler re-arming from its own callback must not
     * get a fresh notify thread on an object about to go. */
    if (n->pending || atomic_load(&n->stopping)) {
        pthread_mutex_unlock(&n->lock);
        return VIP_INVALID_STATE;
    }
    n->context = context;
    n->handler = handler;
    n->pending = true;
    pthread_cond_signal(&n->cond);
    pthread_mutex_unlock(&n->lock);
    return VIP_SUCCESS;
}

void vipl_notify_destroy(struct vipl_notify **slot, void *obj, enum vipl_queue q)
{
    struct vipl_nic *nic = owner_nic(obj, q);
    pthread_mutex_lock(&nic->lock);
    struct vipl_notify *n = *slot;
    pthread_mutex_unlock(&nic->lock);
    if (!n)
        return;
    pthread_mutex_lock(&n->lock);
    atomic_store(&n->stopping, true);
    pthread_cond_signal(&n->cond);
    pthread_mutex_unlock(&n->lock);
    prov_of(n)->wait_wake(obj, q);
    if (pthread_equal(pthread_self(), n->thread)) {
        /* Torn down from its own handler: the thread still needs `n` to
         * notice it must stop, so it is left to exit on its own. */
        pthread_mutex_lock(&nic->lock);
        *slot = NULL;
        pthread_mutex_unlock(&nic->lock);
        pthread_detach(n->thread);
        return;
    }
    /* The slot keeps `n` (stopping) until its thread is gone: a handler
     * running now that re-arms finds it and is refused. */
    pthread_join(n->thread, NULL);
    pthread_mutex_lock(&nic->lock);
    *slot = NULL;
    pthread_mutex_unlock(&nic->lock);
    pthread_mutex_destroy(&n->lock);
    pthread_cond_destroy(&n->cond);
    free(n);
}

VIPL_EXPORT VIP_RETURN VipSendNotify(VIP_VI_HANDLE ViHandle, VIP_PVOID Context,
                                     VIP_WQ_NOTIFY_HANDLER Handler)
{
    struct vipl_vi *vi = ViHandle;
    if (!vi || vi->magic != VIPL_VI_MAGIC || !Handler)
        return VIP_INVALID_PARAMETER;
    return vipl_notify_arm(&vi->send_notify, vi, VIPL_SENDQ, Context, (void *)Handler);
}

VIPL_EXPORT VIP_RETURN VipRecvNotify(VIP_VI_HANDLE ViHandle, VIP_PVOID Context,
                                     VIP_WQ_NOTIFY_HANDLER Handler)
{
    struct vipl_vi *vi = ViHandle;
    if (!vi || vi->magic != VIPL_VI_MAGIC || !Handler)
        return VIP_INVALID_PARAMETER;
    return vipl_notify_arm(&vi->recv_notify, vi, VIPL_RECVQ, Context, (void *)Handler);
}

VIPL_EXPORT VIP_RETURN VipxViNotifyHold(VIP_VI_HANDLE ViHandle, VIP_BOOLEAN Hold)
{
    struct vipl_vi *vi = ViHandle;
    if (!vi || vi->magic != VIPL_VI_MAGIC)
        return VIP_INVALID_PARAMETER;
    pthread_mutex_lock(&vi->nic->lock);
    struct vipl_notify *n = vi->recv_notify;
    pthread_mutex_unlock(&vi->nic->lock);
    if (!n)
        return VIP_SUCCESS;
    atomic_store(&n->held, Hold != VIP_FALSE);
    if (!Hold) /* it may sleep past a completion it was held from */
        prov_of(n)->wait_wake(vi, VIPL_RECVQ);
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_BOOLEAN VipxViNotifyIdle(VIP_VI_HANDLE ViHandle)
{
    struct vipl_vi *vi = ViHandle;
    if (!vi || vi->magic != VIPL_VI_MAGIC)
        return VIP_TRUE;
    pthread_mutex_lock(&vi->nic->lock);
    struct vipl_notify *n = vi->recv_notify;
    pthread_mutex_unlock(&vi->nic->lock);
    return !n || !atomic_load(&n->in_flight);
}
