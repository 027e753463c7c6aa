/* cq.c - completion queues. */
#include <errno.h>
#include <stdlib.h>

#include "core.h"

#define CQ_MAX_ENTRIES 65536

VIPL_EXPORT VIP_RETURN VipCreateCQ(VIP_NIC_HANDLE NicHandle, VIP_ULONG EntryCount,
                                   VIP_CQ_HANDLE *CQHandle)
{
    return vipl_cq_make(NicHandle, EntryCount, 0, NULL, CQHandle);
}

VIPL_EXPORT VIP_RETURN VipxCreateCQ(VIP_NIC_HANDLE NicHandle, VIP_ULONG EntryCount,
                                    VIP_ULONG Flags, VIP_CQ_HANDLE *CQHandle)
{
    if (Flags & ~(VIP_ULONG)VIPX_CQ_INHERITABLE)
        return VIP_INVALID_PARAMETER;
    return vipl_cq_make(NicHandle, EntryCount, Flags, NULL, CQHandle);
}

/* A new CQ: created by the provider, or rebuilt from an exported state. */
VIP_RETURN vipl_cq_make(VIP_NIC_HANDLE NicHandle, VIP_ULONG EntryCount, VIP_ULONG flags,
                        const VIPX_STATE *import, VIP_CQ_HANDLE *CQHandle)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic || !CQHandle || EntryCount == 0 || EntryCount > CQ_MAX_ENTRIES)
        return VIP_INVALID_PARAMETER;
    struct vipl_cq *cq = vipl_pool_get(&nic->cqs);
    if (!cq)
        return VIP_ERROR_RESOURCE;
    cq->nic = nic;
    cq->entries = EntryCount;
    cq->flags = import ? VIPX_CQ_INHERITABLE : flags;
    VIP_RETURN r;
    if (import)
        r = nic->prov->cq_import ? nic->prov->cq_import(cq, import) : VIP_ERROR_NOT_SUPPORTED;
    else
        r = nic->prov->create_cq(cq);
    if (r != VIP_SUCCESS) {
        vipl_pool_put(&nic->cqs, cq);
        return r;
    }
    cq->magic = VIPL_CQ_MAGIC;
    /* The thread that makes a CQ is the likeliest to sleep on it: its
     * doorbell is made now rather than at its first sleep. */
    vipl_waiter_self();
    pthread_mutex_lock(&nic->lock);
    nic->n_cqs++;
    pthread_mutex_unlock(&nic->lock);
    *CQHandle = cq;
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipDestroyCQ(VIP_CQ_HANDLE CQHandle)
{
    struct vipl_cq *cq = cq_of(CQHandle);
    if (!cq)
        return VIP_INVALID_PARAMETER;
    if (atomic_load(&cq->attached) != 0)
        return VIP_INVALID_STATE;
    vipl_notify_destroy(&cq->notify, cq, VIPL_CQ);
    struct vipl_nic *nic = cq->nic;
    nic->prov->destroy_cq(cq);
    pthread_mutex_lock(&nic->lock);
    nic->n_cqs--;
    pthread_mutex_unlock(&nic->lock);
    vipl_pool_put(&nic->cqs, cq);
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipResizeCQ(VIP_CQ_HANDLE CQHandle, VIP_ULONG EntryCount)
{
    struct vipl_cq *cq = cq_of(CQHandle);
    if (!cq || EntryCount == 0 || EntryCount > CQ_MAX_ENTRIES)
        return VIP_INVALID_PARAMETER;
    return cq->nic->prov->resize_cq(cq, EntryCount);
}

VIPL_EXPORT VIP_RETURN VipCQDone(VIP_CQ_HANDLE CQHandle, VIP_VI_HANDLE *ViHandle,
                                 VIP_BOOLEAN *RecvQueue)
{
    struct vipl_cq *cq = cq_of(CQHandle);
    if (!cq || !ViHandle || !RecvQueue)
        return VIP_INVALID_PARAMETER;
    return vipl_poll_cq(cq, ViHandle, RecvQueue);
}

VIPL_EXPORT VIP_RETURN VipCQWait(VIP_CQ_HANDLE CQHandle, VIP_ULONG Timeout,
                                 VIP_VI_HANDLE *ViHandle, VIP_BOOLEAN *RecvQueue)
{
    struct vipl_cq *cq = cq_of(CQHandle);
    if (!cq || !ViHandle || !RecvQueue)
        return VIP_INVALID_PARAMETER;
    return vipl_wait(cq, VIPL_CQ, Timeout, vipl_poll_cq, ViHandle, RecvQueue);
}

VIPL_EXPORT VIP_RETURN VipCQNotify(VIP_CQ_HANDLE CQHandle, VIP_PVOID Context,
                                   VIP_CQ_NOTIFY_HANDLER Handler)
{
    struct vipl_cq *cq = cq_of(CQHandle);
    if (!cq || !Handler)
        return VIP_INVALID_PARAMETER;
    return vipl_notify_arm(&cq->notify, cq, VIPL_CQ, Context, (void *)Handler);
}

VIPL_EXPORT VIP_RETURN VipxCQWaitFd(VIP_CQ_HANDLE CQHandle, int *Fd)
{
    struct vipl_cq *cq = cq_of(CQHandle);
    if (!cq || !Fd)
        return VIP_INVALID_PARAMETER;
    int fd = cq->nic->prov->cq_wait_fd(cq);
    if (fd < 0)
        return VIP_ERROR_NOT_SUPPORTED;
    *Fd = fd;
    return VIP_SUCCESS;
}

void vipl_cq_arm(struct vipl_cq *cq)
{
    vipl_waiter_arm(vipl_waiter_self());
    cq->nic->prov->wait_prepare(cq, VIPL_CQ);
}

/* errno is kept: callers look at their poll's after disarming. `drain`:
 * take what the CQ's descriptor holds (VipxCQDisarmQuiet: not). */
static void cq_disarm(struct vipl_cq *cq, bool drain)
{
    int err = errno;
    const struct vipl_provider *p = cq->nic->prov;
    p->wait_finish(cq, VIPL_CQ);
    struct vipl_waiter *w = vipl_waiter_self();
    /* What woke us may have been meant for another sleeper as well. */
    if (drain && p->cq_wait_drain && p->cq_wait_drain(cq))
        vipl_waiters_ring(w);
    vipl_waiter_disarm(w);
    errno = err;
}

void vipl_cq_disarm(struct vipl_cq *cq)
{
    cq_disarm(cq, true);
}

VIPL_EXPORT VIP_RETURN VipxCQDisarmQuiet(VIP_CQ_HANDLE CQHandle)
{
    struct vipl_cq *cq = cq_of(CQHandle);
    if (!cq)
        return VIP_INVALID_PARAMETER;
    cq_disarm(cq, false);
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipxCQArm(VIP_CQ_HANDLE CQHandle, VIP_BOOLEAN Arm)
{
    struct vipl_cq *cq = cq_of(CQHandle);
    if (!cq)
        return VIP_INVALID_PARAMETER;
    if (Arm)
        vipl_cq_arm(cq);
    else
        vipl_cq_disarm(cq);
    return VIP_SUCCESS;
}

int vipl_cq_sleep_bound(struct vipl_cq *cq, int doorbell)
{
    const struct vipl_provider *p = cq->nic->prov;
    if (doorbell < 0)
        return 1; /* another sleeper may take our wake-up */
    return p->cq_sleep_bound ? p->cq_sleep_bound(cq) : -1;
}

VIPL_EXPORT VIP_RETURN VipxCQPollFds(VIP_CQ_HANDLE CQHandle, int Fds[2], int *MaxSleepMs)
{
    struct vipl_cq *cq = cq_of(CQHandle);
    if (!cq || !Fds || !MaxSleepMs)
        return VIP_INVALID_PARAMETER;
    int fd = cq->nic->prov->cq_wait_fd(cq);
    if (fd < 0)
        return VIP_ERROR_NOT_SUPPORTED;
    Fds[0] = fd;
    Fds[1] = vipl_waiter_fd(vipl_waiter_self()); /* -1: poll() passes over it */
    *MaxSleepMs = vipl_cq_sleep_bound(cq, Fds[1]);
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipxWakeWaiters(void)
{
    vipl_waiters_ring(NULL);
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipxCQHints(VIP_CQ_HANDLE CQHandle, VIP_PVOID *Cookies, VIP_ULONG Max,
                                   VIP_ULONG *Count)
{
    struct vipl_cq *cq = cq_of(CQHandle);
    if (!cq || !Count || (Max && !Cookies))
        return VIP_INVALID_PARAMETER;
    *Count = 0;
    if (!cq->nic->prov->cq_hints)
        return VIP_ERROR_NOT_SUPPORTED;
    return cq->nic->prov->cq_hints(cq, Cookies, Max, Count);
}
