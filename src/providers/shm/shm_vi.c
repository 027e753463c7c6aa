/* shm_vi.c - VI creation and teardown, the RDMA-write export table. */
#include <stdlib.h>
#include <string.h>

#include "shm.h"

#define DEFAULT_DEPTH 256u

static uint32_t pow2_at_least(uint64_t n)
{
    uint32_t p = 1;
    while (p < n && p < (1u << 31))
        p <<= 1;
    return p;
}

static uint32_t default_staging(VIP_ULONG max_transfer)
{
    uint64_t s = 2 * (uint64_t)max_transfer;
    if (s < 64 * 1024)
        s = 64 * 1024;
    if (s > 8 * 1024 * 1024)
        s = 8 * 1024 * 1024;
    return (uint32_t)s;
}

VIP_RETURN shm_create_vi(struct vipl_vi *cvi, const VIPX_VI_CONFIG *cfg)
{
    struct shm_vi *vi = shm_vi(cvi);
    uint64_t depth = cfg->QueueDepth ? cfg->QueueDepth : DEFAULT_DEPTH;
    uint64_t staging = cfg->StagingBytes ? cfg->StagingBytes
                                         : default_staging(cvi->attrs.MaxTransferSize);
    if (depth > SHM_MAX_DEPTH || staging > 64u * 1024 * 1024 ||
        cfg->ArenaBytes > SHM_MAX_SEGMENT / 2)
        return VIP_INVALID_PARAMETER;
    vi->depth = pow2_at_least(depth);
    vi->mask = vi->depth - 1;
    vi->staging_len = (uint32_t)((staging + SHM_LINE - 1) & ~(uint64_t)(SHM_LINE - 1));
    vi->arena_len = (uint32_t)cfg->ArenaBytes;
    vi->inheritable = cfg->Flags & VIPX_VI_INHERITABLE;
    vi->ctl_fd = vi->rx_fd = -1;
    vi->rq = calloc(vi->depth, sizeof(*vi->rq));
    vi->sq = calloc(vi->depth, sizeof(*vi->sq));
    if (!vi->rq || !vi->sq || shm_vi_segments_create(vi) != 0)
        goto fail;
    if (cvi->recv_cq && shm_cq_attach(shm_cq(cvi->recv_cq), vi) != 0)
        goto fail;
    return VIP_SUCCESS;
fail:
    shm_vi_segments_destroy(vi);
    free(vi->rq);
    free(vi->sq);
    return VIP_ERROR_RESOURCE;
}

void shm_destroy_vi(struct vipl_vi *cvi)
{
    struct shm_vi *vi = shm_vi(cvi);
    shm_connect_abandon(cvi); /* a request still unanswered */
    if (cvi->recv_cq)
        shm_cq_detach(shm_cq(cvi->recv_cq), vi);
    if (cvi->send_cq && cvi->send_cq != cvi->recv_cq)
        shm_cq_detach(shm_cq(cvi->send_cq), vi);
    shm_vi_segments_destroy(vi);
    free(vi->rq);
    free(vi->sq);
}

VIP_RETURN shm_vi_arena(struct vipl_vi *cvi, void **base, size_t *len)
{
    struct shm_vi *vi = shm_vi(cvi);
    *base = vi->arena;
    *len = vi->arena ? vi->arena_len : 0;
    return VIP_SUCCESS;
}

bool shm_queue_empty(struct vipl_vi *cvi, enum vipl_queue q)
{
    struct shm_vi *vi = shm_vi(cvi);
    if (q == VIPL_SENDQ) {
        shm_lock(&vi->sq_lock);
        bool empty = vi->sq_head == vi->sq_tail;
        shm_unlock(&vi->sq_lock);
        return empty;
    }
    return __atomic_load_n(&vi->rq_head, __ATOMIC_RELAXED) == atomic_load(&vi->rq_tail);
}

void shm_vi_stats(struct vipl_vi *cvi, VIPX_VI_STATS *stats)
{
    struct shm_vi *vi = shm_vi(cvi);
    shm_lock(&vi->sq_lock);
    shm_lock(&vi->rq_lock);
    *stats = vi->stats;
    shm_unlock(&vi->rq_lock);
    shm_unlock(&vi->sq_lock);
}

/* True when receive index `idx` has completed (or was already dequeued). */
bool shm_vi_recv_ready(struct shm_vi *vi, uint32_t idx)
{
    shm_lock(&vi->rq_lock);
    uint32_t head = vi->rq_head, tail = atomic_load_explicit(&vi->rq_tail, memory_order_relaxed);
    bool ready;
    if ((int32_t)(idx - head) < 0) {
        ready = true;
    } else if ((int32_t)(idx - tail) >= 0) {
        ready = false;
    } else {
        const struct shm_rq_entry *e = &vi->rq[idx & vi->mask];
        ready = e->local_status ||
                (int32_t)(idx - atomic_load_explicit(&vi->flush_upto, memory_order_relaxed)) < 0 ||
                vipl_vi_state(&vi->core) == VIP_STATE_ERROR ||
                atomic_load_explicit(&vi->rx->cmpl[e->sidx & vi->mask].seq,
                                     memory_order_acquire) == e->sidx + 1;
    }
    shm_unlock(&vi->rq_lock);
    return ready;
}

/*
 * Rewrites the table of our regions the peer may RDMA-write: regions with
 * EnableRdmaWrite and the VI's ptag that lie inside the VI's arena (the only
 * memory the peer has mapped). Caller holds the NIC lock.
 */
void shm_vi_export_regs(struct shm_vi *vi)
{
    struct vipl_nic *nic = vi->core.nic;
    struct shm_reg_export *regs = shm_ctl_regs(vi->ctl, vi->depth);
    uint32_t n = 0;
    uintptr_t arena = (uintptr_t)vi->arena;
    for (uint32_t idx = 1; vi->arena && vi->core.attrs.EnableRdmaWrite && idx <= nic->mr_next &&
                           n < SHM_REG_SLOTS;
         idx++) {
        struct vipl_mr *mr = &nic->mrs[idx];
        uint32_t h = atomic_load(&mr->handle);
        if (!h || !mr->rdma_write || mr->ptag != vi->core.ptag || mr->base < arena ||
            mr->len > vi->arena_len || mr->base - arena > vi->arena_len - mr->len)
            continue;
        atomic_store_explicit(&regs[n].handle, 0, memory_order_release);
        regs[n].len = (uint32_t)mr->len;
        regs[n].base = mr->base;
        regs[n].rx_off = vi->arena_off + (uint32_t)(mr->base - arena);
        atomic_store_explicit(&regs[n].handle, h, memory_order_release);
        n++;
    }
    for (; n < SHM_REG_SLOTS; n++)
        atomic_store_explicit(&regs[n].handle, 0, memory_order_release);
}

void shm_mem_changed(struct vipl_nic *nic)
{
    pthread_mutex_lock(&nic->lock);
    for (struct vipl_vi *v = nic->vis; v; v = v->next)
        shm_vi_export_regs(shm_vi(v));
    pthread_mutex_unlock(&nic->lock);
}

void shm_vi_break(struct shm_vi *vi, VIP_ERROR_CODE code, VIP_DESCRIPTOR *desc)
{
    shm_lock(&vi->sq_lock);
    if (vi->peer)
        shm_conn_notify(vi->peer, SHM_MSG_BROKEN);
    shm_unlock(&vi->sq_lock);
    vipl_vi_fail(&vi->core, code, desc);
}
