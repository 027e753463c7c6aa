/*
 * shm_recv.c - the receive queue.
 *
 * Posting publishes where the peer may put the next message: straight into
 * the consumer's buffer when it lies in the VI's arena (zero copy), else
 * into a reservation in the staging area, copied out on completion. Reaping
 * reads the peer-written completion slot, validates it against what we
 * posted, and completes the descriptor.
 */
#include <string.h>
#include <sys/mman.h>

#include "shm.h"
#include <vipl_trace.h>

/* A staging area this large (a deep queue of long receives in the
 * consumer's memory) gives the pages it has copied out of back to the
 * kernel, a chunk at a time, so that memory follows what is in flight
 * rather than the ring's size. Smaller ones keep theirs: a page given back
 * is faulted in again by the sender on the ring's next lap. */
#define STAGING_RELEASE_MIN (64u << 20)
#define STAGING_RELEASE_CHUNK (8u << 20)

static void release_pages(struct shm_vi *vi, uint64_t from, uint64_t to)
{
    size_t page = shm_nic(vi->core.nic)->page;
    uint8_t *base = (uint8_t *)vi->rx + vi->staging_off;
    while (from < to) {
        uint64_t pos = from % vi->staging_len, n = to - from;
        if (n > vi->staging_len - pos)
            n = vi->staging_len - pos; /* up to the ring's wrap */
        uintptr_t a = ((uintptr_t)(base + pos) + page - 1) & ~(uintptr_t)(page - 1);
        uintptr_t b = (uintptr_t)(base + pos + n) & ~(uintptr_t)(page - 1);
        if (a < b)
            (void)madvise((void *)a, b - a, MADV_REMOVE); /* a hint: failure costs memory only */
        from += n;
    }
}

/* Caller holds rq_lock. Only bytes no reservation holds: behind
 * staging_free, and not yet handed out again on the ring's next lap. */
static void staging_release(struct shm_vi *vi)
{
    if (vi->staging_len < STAGING_RELEASE_MIN ||
        vi->staging_free - vi->staging_released < STAGING_RELEASE_CHUNK)
        return;
    uint64_t from = vi->staging_released, lap = vi->staging_alloc - vi->staging_len;
    if (vi->staging_alloc > vi->staging_len && from < lap)
        from = lap;
    release_pages(vi, from, vi->staging_free);
    vi->staging_released = vi->staging_free;
}

/* FIFO byte ring: receives complete in order, so reservations free in order. */
static bool staging_reserve(struct shm_vi *vi, uint32_t len, uint32_t *off, uint32_t *bytes)
{
    uint32_t need = (len + SHM_LINE - 1) & ~(uint32_t)(SHM_LINE - 1);
    if (need > vi->staging_len)
        return false;
    uint32_t pos = (uint32_t)(vi->staging_alloc % (vi->staging_len ? vi->staging_len : 1));
    uint32_t waste = pos + need > vi->staging_len ? vi->staging_len - pos : 0;
    if (vi->staging_alloc + waste + need - vi->staging_free > vi->staging_len)
        return false;
    *off = vi->staging_off + (waste ? 0 : pos);
    *bytes = waste + need;
    vi->staging_alloc += waste + need;
    return true;
}

static VIP_RETURN publish(struct shm_vi *vi, struct shm_rq_entry *e, const struct vipl_wr *wr)
{
    struct shm_post *p = &vi->ctl->post[vi->rq_published & vi->mask];
    uint32_t offs[SHM_POST_SEGS];
    bool direct = wr->nsge <= SHM_POST_SEGS && vi->arena;
    for (uint32_t i = 0; direct && i < wr->nsge; i++)
        direct = shm_arena_offset(vi, wr->sge[i].addr, wr->sge[i].len, &offs[i]);

    if (direct) {
        p->nseg = (uint16_t)wr->nsge;
        p->flags = 0;
        for (uint32_t i = 0; i < wr->nsge; i++) {
            p->seg[i].off = offs[i];
            p->seg[i].len = wr->sge[i].len;
        }
    } else {
        e->staged = true;
        uint32_t off, bytes;
        if (!staging_reserve(vi, (uint32_t)wr->total, &off, &bytes))
            return VIP_ERROR_RESOURCE;
        p->nseg = 1;
        p->flags = SHM_POST_STAGED;
        p->seg[0].off = off;
        p->seg[0].len = (uint32_t)wr->total;
        e->staging_off = off;
        e->staging_bytes = bytes;
    }
    /* Staged and inline data are copied into these on completion. */
    e->nsge = wr->nsge;
    memcpy(e->sge, wr->sge, wr->nsge * sizeof(wr->sge[0]));
    p->total = (uint32_t)wr->total;
    e->sidx = vi->rq_published;
    e->published = true;
    vi->rq_published++;
    atomic_store_explicit(&p->seq, vi->rq_published, memory_order_release);
    atomic_store_explicit(&vi->ctl->live.posted, vi->rq_published, memory_order_release);
    return VIP_SUCCESS;
}

VIP_RETURN shm_post_recv(struct vipl_vi *cvi, struct vipl_wr *wr)
{
    struct shm_vi *vi = shm_vi(cvi);
    bool fail = false; /* a bad descriptor on a reliable VI */
    wr->desc->CS.Status = 0;
    shm_lock(&vi->rq_lock);
    uint32_t tail = atomic_load_explicit(&vi->rq_tail, memory_order_relaxed);
    if (tail - vi->rq_head >= vi->depth) {
        shm_unlock(&vi->rq_lock);
        return VIP_ERROR_RESOURCE;
    }
    struct shm_rq_entry *e = &vi->rq[tail & vi->mask];
    *e = (struct shm_rq_entry){.desc = wr->desc, .total = (uint32_t)wr->total};
    if (vipl_vi_state(cvi) == VIP_STATE_ERROR) {
        e->local_status = VIP_STATUS_DESC_FLUSHED_ERROR;
    } else if (wr->error) {
        e->local_status = wr->error;
        fail = vipl_vi_reliable(cvi);
    } else {
        VIP_RETURN r = publish(vi, e, wr);
        if (r != VIP_SUCCESS) {
            shm_unlock(&vi->rq_lock);
            return r;
        }
    }
    vi->stats.RecvsPosted++;
    atomic_store_explicit(&vi->rq_tail, tail + 1, memory_order_release);
    shm_unlock(&vi->rq_lock);
    if (fail)
        shm_vi_break(vi, VIP_ERROR_POST_DESC, wr->desc);
    return VIP_SUCCESS;
}

static void scatter(const struct vipl_sge *sge, uint32_t nsge, const uint8_t *src, uint32_t len)
{
    for (uint32_t i = 0; i < nsge && len; i++) {
        uint32_t n = sge[i].len < len ? sge[i].len : len;
        memcpy(sge[i].addr, src, n);
        src += n;
        len -= n;
    }
}

/*
 * Validates a completion the peer wrote for entry `e` and delivers it.
 * Returns the descriptor status; on a value that cannot be right, counts a
 * protocol error and asks the caller to break the connection.
 */
static uint32_t take_completion(struct shm_vi *vi, struct shm_rq_entry *e,
                                const struct shm_cmpl *c, uint32_t *length, uint32_t *imm,
                                int *fail)
{
    uint32_t status = c->status, len = c->length, ilen = c->inline_len;
    uint32_t op = status & VIP_STATUS_OP_MASK;
    const uint32_t allowed = VIP_STATUS_OP_MASK | VIP_STATUS_IMMEDIATE | VIP_STATUS_LENGTH_ERROR;
    bool ok = !(status & ~allowed) &&
              (op == VIP_STATUS_OP_RECEIVE || op == VIP_STATUS_OP_REMOTE_RDMA_WRITE);
    *length = 0;
    *imm = 0;
    if (ok && (status & VIP_STATUS_LENGTH_ERROR)) {
        if (vipl_vi_reliable(&vi->core))
            *fail = VIP_ERROR_POST_DESC;
        return VIP_STATUS_LENGTH_ERROR | VIP_STATUS_OP_RECEIVE;
    }
    if (op == VIP_STATUS_OP_RECEIVE)
        ok = ok && len <= e->total && (ilen == 0 || (ilen == len && len <= SHM_INLINE_MAX));
    else /* an RDMA write's data is already in place (in our arena, or in a
          * region of ours the peer's cross-memory attach wrote), and only if
          * this VI allows it */
        ok = ok && ilen == 0 && vi->core.attrs.EnableRdmaWrite &&
             len <= vi->core.attrs.MaxTransferSize;
    if (!ok) {
        vi->stats.PeerProtocolErrors++;
        *fail = VIP_ERROR_CONN_LOST;
        return VIP_STATUS_TRANSPORT_ERROR | VIP_STATUS_OP_RECEIVE;
    }
    if (op == VIP_STATUS_OP_RECEIVE && (e->staged || ilen)) {
        const uint8_t *src = ilen ? c->inline_data : (const uint8_t *)vi->rx + e->staging_off;
        scatter(e->sge, e->nsge, src, len);
    }
    if (e->staged)
        vi->stats.StagedRecvs++;
    *length = len;
    if (status & VIP_STATUS_IMMEDIATE)
        *imm = c->imm;
    vi->stats.RecvsCompleted++;
    vi->stats.BytesReceived += len;
    return status;
}

/* A lock-free look: can the head possibly be complete? Polling loops spin
 * here without taking the lock (or writing any line) until it can. */
bool shm_recv_may_be_ready(struct shm_vi *vi)
{
    uint32_t head = __atomic_load_n(&vi->rq_head, __ATOMIC_RELAXED);
    if (head == atomic_load_explicit(&vi->rq_tail, memory_order_acquire))
        return false;
    const struct shm_rq_entry *e = &vi->rq[head & vi->mask];
    if (!e->published ||
        (int32_t)(head - atomic_load_explicit(&vi->flush_upto, memory_order_relaxed)) < 0)
        return true;
    return atomic_load_explicit(&vi->rx->cmpl[e->sidx & vi->mask].seq, memory_order_acquire) ==
               e->sidx + 1 ||
           vipl_vi_state(&vi->core) == VIP_STATE_ERROR;
}

VIP_RETURN shm_recv_done(struct vipl_vi *cvi, VIP_DESCRIPTOR **out)
{
    struct shm_vi *vi = shm_vi(cvi);
    if (!shm_recv_may_be_ready(vi))
        return VIP_NOT_DONE;
    int fail = SHM_NO_FAILURE;
    uint32_t status, length = 0, imm = 0;
    shm_lock(&vi->rq_lock);
    uint32_t head = vi->rq_head;
    if (head == atomic_load_explicit(&vi->rq_tail, memory_order_relaxed)) {
        shm_unlock(&vi->rq_lock);
        return VIP_NOT_DONE;
    }
    struct shm_rq_entry *e = &vi->rq[head & vi->mask];
    if (e->local_status) {
        status = e->local_status;
    } else if ((int32_t)(head - atomic_load_explicit(&vi->flush_upto, memory_order_relaxed)) < 0) {
        status = VIP_STATUS_DESC_FLUSHED_ERROR;
    } else {
        const struct shm_cmpl *c = &vi->rx->cmpl[e->sidx & vi->mask];
        if (atomic_load_explicit(&c->seq, memory_order_acquire) == e->sidx + 1) {
            VIPX_TRACE(VIPX_TP_DETECT, c->length); /* the peer's word: a mark's argument only */
            status = take_completion(vi, e, c, &length, &imm, &fail);
        } else if (vipl_vi_state(cvi) == VIP_STATE_ERROR) {
            status = VIP_STATUS_DESC_FLUSHED_ERROR;
        } else {
            shm_unlock(&vi->rq_lock);
            return VIP_NOT_DONE;
        }
    }
    VIP_DESCRIPTOR *desc = e->desc;
    vi->staging_free += e->staging_bytes;
    staging_release(vi);
    __atomic_store_n(&vi->rq_head, head + 1, __ATOMIC_RELAXED);
    shm_unlock(&vi->rq_lock);

    if (!(status & VIP_STATUS_OP_MASK))
        status |= VIP_STATUS_OP_RECEIVE;
    vipl_complete_desc(desc, status, length, imm);
    if (fail != SHM_NO_FAILURE)
        shm_vi_break(vi, (VIP_ERROR_CODE)fail, desc);
    VIPX_TRACE(VIPX_TP_REAP, length);
    *out = desc;
    return VIP_SUCCESS;
}

/* Every receive posted so far completes as flushed; the staging area and the
 * shared slots start over (the segments are about to be replaced). */
void shm_rq_flush_all(struct shm_vi *vi)
{
    shm_lock(&vi->rq_lock);
    uint32_t tail = atomic_load_explicit(&vi->rq_tail, memory_order_relaxed);
    atomic_store_explicit(&vi->flush_upto, tail, memory_order_relaxed);
    for (uint32_t i = vi->rq_head; i != tail; i++)
        vi->rq[i & vi->mask].staging_bytes = 0;
    vi->staging_alloc = vi->staging_free = vi->staging_released = 0;
    vi->rq_published = 0;
    shm_unlock(&vi->rq_lock);
}
