/* shm_vi.c - VI creation and teardown, the RDMA-write export table. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shm.h"

/* VipCreateVi's VIs hold what VipQueryNic promises (MaxDescriptorsPerQueue):
 * a VIA program pre-posts rings of hundreds of receives. The queues' shared
 * slots are sparse memfd pages, touched only as far as the ring is used. */
#define DEFAULT_DEPTH SHM_MAX_DEPTH

static uint32_t pow2_at_least(uint64_t n)
{
    uint32_t p = 1;
    while (p < n && p < (1u << 31))
        p <<= 1;
    return p;
}

static uint64_t line_up(uint64_t n)
{
    return (n + SHM_LINE - 1) & ~(uint64_t)(SHM_LINE - 1);
}

/*
 * The default staging area holds a full queue of receives of the VI's
 * MaxTransferSize posted outside the arena (the consumer's own memory), plus
 * one more for the ring's wrap-around waste, so such a receive is never
 * refused for room: the memfd is sparse, and the receiver returns the pages
 * it has copied out of (shm_recv.c), so memory follows what is in flight.
 * Capped where the rx segment would pass SHM_MAX_SEGMENT (its offsets are 32
 * bits): docs/VIPL.md states that limit.
 */
static uint64_t default_staging(const struct shm_vi *vi, VIP_ULONG max_transfer, size_t page)
{
    uint64_t s = ((uint64_t)vi->depth + 1) * line_up(max_transfer);
    uint64_t fixed = shm_ctl_size(vi->depth, SHM_REG_SLOTS, page) + 2 * page +
                     sizeof(struct shm_rx) + (uint64_t)vi->depth * sizeof(struct shm_cmpl) +
                     ((vi->arena_len + page - 1) & ~(uint64_t)(page - 1));
    uint64_t cap = SHM_MAX_SEGMENT > fixed ? (SHM_MAX_SEGMENT - fixed) & ~(uint64_t)(page - 1) : 0;
    if (s < 64 * 1024)
        s = 64 * 1024;
    return s < cap ? s : cap;
}

VIP_RETURN shm_create_vi(struct vipl_vi *cvi, const VIPX_VI_CONFIG *cfg)
{
    struct shm_vi *vi = shm_vi(cvi);
    uint64_t depth = cfg->QueueDepth ? cfg->QueueDepth : DEFAULT_DEPTH;
    if (depth > SHM_MAX_DEPTH || (cfg->StagingBytes && cfg->StagingBytes > 64u * 1024 * 1024) ||
        cfg->ArenaBytes > SHM_MAX_SEGMENT / 2)
        return VIP_INVALID_PARAMETER;
    vi->depth = pow2_at_least(depth);
    vi->mask = vi->depth - 1;
    vi->arena_len = (uint32_t)cfg->ArenaBytes;
    uint64_t staging = cfg->StagingBytes ? cfg->StagingBytes
                                         : default_staging(vi, cvi->attrs.MaxTransferSize,
                                                           shm_nic(cvi->nic)->page);
    vi->staging_len = (uint32_t)line_up(staging);
    vi->inheritable = cfg->Flags & VIPX_VI_INHERITABLE;
    vi->no_export = false;
    vi->ctl_fd = vi->rx_fd = -1;
    vi->rq = calloc(vi->depth, sizeof(*vi->rq));
    vi->sq = calloc(vi->depth, sizeof(*vi->sq));
    int err = vi->rq && vi->sq ? shm_vi_segments_create(vi) : -ENOMEM;
    if (err && !cfg->StagingBytes) {
        /* A process whose RLIMIT_FSIZE or address space cannot take the
         * full area still gets a VI, with room for 2 x MaxTransferSize of
         * such receives (what every VI had before). */
        uint64_t small = 2 * line_up(cvi->attrs.MaxTransferSize);
        small = small < 64 * 1024 ? 64 * 1024 : small > 8u << 20 ? 8u << 20 : small;
        if (small < vi->staging_len) {
            vi->staging_len = (uint32_t)small;
            err = shm_vi_segments_create(vi);
        }
    }
    if (err)
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
 * EnableRdmaWrite and the VI's ptag. One inside the VI's arena (mapped by
 * the peer) is named by its rx offset; any other by its address, for the
 * writer's cross-memory attach (shm_send.c). Caller holds the NIC lock.
 */
void shm_vi_export_regs(struct shm_vi *vi)
{
    struct vipl_nic *nic = vi->core.nic;
    struct shm_reg_export *regs = shm_ctl_regs(vi->ctl, vi->depth);
    uint32_t n = 0;
    uint32_t off;
    for (uint32_t idx = 1; vi->core.attrs.EnableRdmaWrite && idx <= nic->mr_next &&
                           n < SHM_REG_SLOTS;
         idx++) {
        struct vipl_mr *mr = &nic->mrs[idx];
        uint32_t h = atomic_load(&mr->handle);
        if (!h || !mr->rdma_write || mr->ptag != vi->core.ptag || mr->len > UINT32_MAX)
            continue;
        bool in_arena = shm_arena_offset(vi, (const void *)mr->base, (uint32_t)mr->len, &off);
        atomic_store_explicit(&regs[n].handle, 0, memory_order_release);
        regs[n].len = (uint32_t)mr->len;
        regs[n].base = mr->base;
        regs[n].rx_off = in_arena ? off : 0;
        regs[n].flags = in_arena ? 0 : SHM_EXPORT_XMEM;
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
