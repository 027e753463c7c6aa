/* vi.c - creating, querying and destroying VIs. */
#include <stdlib.h>
#include <unistd.h>

#include "core.h"

static VIP_RETURN check_vi_attrs(struct vipl_nic *nic, const VIP_VI_ATTRIBUTES *a,
                                 struct vipl_ptag **tag)
{
    if (!a)
        return VIP_INVALID_PARAMETER;
    switch (a->ReliabilityLevel) {
    case VIP_SERVICE_UNRELIABLE:
    case VIP_SERVICE_RELIABLE_DELIVERY:
    case VIP_SERVICE_RELIABLE_RECEPTION:
        break;
    default:
        return VIP_INVALID_RELIABILITY_LEVEL;
    }
    VIP_NIC_ATTRIBUTES na;
    vipl_nic_query(nic, &na);
    if (a->MaxTransferSize == 0 || a->MaxTransferSize > na.MaxTransferSize)
        return VIP_INVALID_MTU;
    *tag = ptag_of(nic, a->Ptag);
    if (!*tag)
        return VIP_INVALID_PTAG;
    if (a->EnableRdmaRead)
        return VIP_INVALID_RDMAREAD;
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipxCreateVi(VIP_NIC_HANDLE NicHandle, VIP_VI_ATTRIBUTES *ViAttribs,
                                    VIP_CQ_HANDLE SendCQHandle, VIP_CQ_HANDLE RecvCQHandle,
                                    const VIPX_VI_CONFIG *Config, VIP_VI_HANDLE *ViHandle)
{
    return vipl_vi_make(NicHandle, ViAttribs, SendCQHandle, RecvCQHandle, Config, NULL, ViHandle);
}

/* A new VI: created by the provider, or rebuilt from an exported state. */
VIP_RETURN vipl_vi_make(VIP_NIC_HANDLE NicHandle, VIP_VI_ATTRIBUTES *ViAttribs,
                        VIP_CQ_HANDLE SendCQHandle, VIP_CQ_HANDLE RecvCQHandle,
                        const VIPX_VI_CONFIG *Config, const VIPX_STATE *import,
                        VIP_VI_HANDLE *ViHandle)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic || !ViHandle)
        return VIP_INVALID_PARAMETER;
    struct vipl_cq *scq = NULL, *rcq = NULL;
    if (SendCQHandle && !(scq = cq_of(SendCQHandle)))
        return VIP_INVALID_PARAMETER;
    if (RecvCQHandle && !(rcq = cq_of(RecvCQHandle)))
        return VIP_INVALID_PARAMETER;
    if ((scq && scq->nic != nic) || (rcq && rcq->nic != nic))
        return VIP_INVALID_PARAMETER;
    struct vipl_ptag *tag;
    VIP_RETURN r = check_vi_attrs(nic, ViAttribs, &tag);
    if (r != VIP_SUCCESS)
        return r;
    VIPX_VI_CONFIG cfg = {0};
    if (Config)
        cfg = *Config;

    struct vipl_vi *vi = vipl_pool_get(&nic->vi_pool);
    if (!vi)
        return VIP_ERROR_RESOURCE;
    vi->nic = nic;
    vi->attrs = *ViAttribs;
    vi->ptag = tag;
    vi->send_cq = scq;
    vi->recv_cq = rcq;
    vi->connect_token = -1;
    vi->connect_uid = (uid_t)-1;
    vi->last = false;
    atomic_store(&vi->state, VIP_STATE_IDLE);
    if (import)
        r = nic->prov->vi_import ? nic->prov->vi_import(vi, import) : VIP_ERROR_NOT_SUPPORTED;
    else
        r = nic->prov->create_vi(vi, &cfg);
    if (r != VIP_SUCCESS) {
        vipl_pool_put(&nic->vi_pool, vi);
        return r;
    }
    atomic_fetch_add(&tag->users, 1);
    if (scq)
        atomic_fetch_add(&scq->attached, 1);
    if (rcq)
        atomic_fetch_add(&rcq->attached, 1);
    vi->magic = VIPL_VI_MAGIC;
    pthread_mutex_lock(&nic->lock);
    vi->next = nic->vis;
    vi->prev = NULL;
    if (nic->vis)
        nic->vis->prev = vi;
    nic->vis = vi;
    nic->n_vis++;
    pthread_mutex_unlock(&nic->lock);
    *ViHandle = vi;
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipCreateVi(VIP_NIC_HANDLE NicHandle, VIP_VI_ATTRIBUTES *ViAttribs,
                                   VIP_CQ_HANDLE SendCQHandle, VIP_CQ_HANDLE RecvCQHandle,
                                   VIP_VI_HANDLE *ViHandle)
{
    return VipxCreateVi(NicHandle, ViAttribs, SendCQHandle, RecvCQHandle, NULL, ViHandle);
}

/* Unlinks and frees a VI whose connection is already let go of. */
static void free_vi(struct vipl_vi *vi)
{
    struct vipl_nic *nic = vi->nic;
    pthread_mutex_lock(&nic->lock);
    *(vi->prev ? &vi->prev->next : &nic->vis) = vi->next;
    if (vi->next)
        vi->next->prev = vi->prev;
    nic->n_vis--;
    pthread_mutex_unlock(&nic->lock);

    nic->prov->destroy_vi(vi);
    if (vi->connect_token >= 0)
        VipxFdClose(vi->connect_token);
    atomic_fetch_sub(&vi->ptag->users, 1);
    if (vi->send_cq)
        atomic_fetch_sub(&vi->send_cq->attached, 1);
    if (vi->recv_cq)
        atomic_fetch_sub(&vi->recv_cq->attached, 1);
    vipl_pool_put(&nic->vi_pool, vi);
}

VIPL_EXPORT VIP_RETURN VipDestroyVi(VIP_VI_HANDLE ViHandle)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi)
        return VIP_INVALID_PARAMETER;
    struct vipl_nic *nic = vi->nic;
    int state = vipl_vi_state(vi);
    if (state != VIP_STATE_IDLE && state != VIP_STATE_ERROR)
        return VIP_INVALID_STATE;
    if (!nic->prov->queue_empty(vi, VIPL_SENDQ) || !nic->prov->queue_empty(vi, VIPL_RECVQ))
        return VIP_INVALID_STATE;
    vipl_notify_destroy(&vi->send_notify, vi, VIPL_SENDQ);
    vipl_notify_destroy(&vi->recv_notify, vi, VIPL_RECVQ);
    if (state == VIP_STATE_ERROR)
        nic->prov->disconnect(vi); /* releases what the broken connection held */
    free_vi(vi);
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipxViShare(VIP_VI_HANDLE ViHandle)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi)
        return VIP_INVALID_PARAMETER;
    if (vipl_vi_state(vi) != VIP_STATE_CONNECTED)
        return VIP_INVALID_STATE;
    return vi->nic->prov->share_vi ? vi->nic->prov->share_vi(vi) : VIP_ERROR_NOT_SUPPORTED;
}

/* Like VipDestroyVi, but a connected VI keeps its connection for the other
 * processes holding it: posted descriptors are forgotten, nothing is sent. */
VIPL_EXPORT VIP_RETURN VipxViRelease(VIP_VI_HANDLE ViHandle)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi)
        return VIP_INVALID_PARAMETER;
    struct vipl_nic *nic = vi->nic;
    if (!nic->prov->release_vi)
        return VIP_ERROR_NOT_SUPPORTED;
    vipl_notify_destroy(&vi->send_notify, vi, VIPL_SENDQ);
    vipl_notify_destroy(&vi->recv_notify, vi, VIPL_RECVQ);
    nic->prov->release_vi(vi);
    free_vi(vi);
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipQueryVi(VIP_VI_HANDLE ViHandle, VIP_VI_STATE *State,
                                  VIP_VI_ATTRIBUTES *Attributes, VIP_BOOLEAN *SendQueueEmpty,
                                  VIP_BOOLEAN *RecvQueueEmpty)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi)
        return VIP_INVALID_PARAMETER;
    if (State)
        *State = vipl_vi_state(vi);
    if (Attributes)
        *Attributes = vi->attrs;
    if (SendQueueEmpty)
        *SendQueueEmpty = vi->nic->prov->queue_empty(vi, VIPL_SENDQ);
    if (RecvQueueEmpty)
        *RecvQueueEmpty = vi->nic->prov->queue_empty(vi, VIPL_RECVQ);
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipSetViAttributes(VIP_VI_HANDLE ViHandle, VIP_VI_ATTRIBUTES *Attributes)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi)
        return VIP_INVALID_PARAMETER;
    if (vipl_vi_state(vi) != VIP_STATE_IDLE)
        return VIP_INVALID_STATE;
    struct vipl_ptag *tag;
    VIP_RETURN r = check_vi_attrs(vi->nic, Attributes, &tag);
    if (r != VIP_SUCCESS)
        return r;
    atomic_fetch_add(&tag->users, 1);
    atomic_fetch_sub(&vi->ptag->users, 1);
    vi->ptag = tag;
    vi->attrs = *Attributes;
    if (vi->nic->prov->mem_changed)
        vi->nic->prov->mem_changed(vi->nic);
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipxViArena(VIP_VI_HANDLE ViHandle, VIP_PVOID *Base, VIP_ULONG *Length)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi || !Base || !Length)
        return VIP_INVALID_PARAMETER;
    void *base;
    size_t len;
    VIP_RETURN r = vi->nic->prov->vi_arena(vi, &base, &len);
    if (r == VIP_SUCCESS) {
        *Base = base;
        *Length = len;
    }
    return r;
}

VIPL_EXPORT VIP_RETURN VipxQueryViStats(VIP_VI_HANDLE ViHandle, VIPX_VI_STATS *Stats)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi || !Stats)
        return VIP_INVALID_PARAMETER;
    *Stats = (VIPX_VI_STATS){0};
    vi->nic->prov->vi_stats(vi, Stats);
    return VIP_SUCCESS;
}
