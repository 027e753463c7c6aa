/*
 * fabric_queue.c - a VI's two work queues over an FI_EP_MSG endpoint.
 *
 * Descriptors complete in post order (VIA): libfabric finishes slots, and
 * the oldest finished run is written back to its descriptors (status last)
 * and, for a queue with a VIPL CQ, noticed there. An invalid descriptor
 * takes a slot too and finishes with its error in its turn. Receives
 * posted before the VI has an endpoint wait in the ring and are handed
 * to the endpoint when it is made (VIA allows posting them while idle).
 *
 * The provider writes every receive in place, but receives outside the
 * VI's arena are held to the same staging budget as on shm (StagingBytes,
 * in 64-byte lines, freed as they complete), so a consumer sized for one
 * provider is refused at the same point on the other (VIP_ERROR_RESOURCE).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fabric.h"

static int queue_init(struct fab_vi *vi, struct fab_queue *q, bool recv, uint32_t depth,
                      struct vipl_cq *cq)
{
    q->vi = vi;
    q->recv = recv;
    q->depth = depth;
    q->slots = calloc(depth, sizeof(*q->slots));
    if (!q->slots)
        return -ENOMEM;
    for (uint32_t i = 0; i < depth; i++)
        q->slots[i].q = q;
    pthread_mutex_init(&q->lock, NULL);
    q->cqx = cq ? &fab_cq(cq)->x : &vi->own;
    return 0;
}

#define FAB_LINE 64

static uint64_t default_staging(VIP_ULONG max_transfer)
{
    uint64_t s = 2 * (uint64_t)max_transfer;
    return s < 64 * 1024 ? 64 * 1024 : s > 8 * 1024 * 1024 ? 8 * 1024 * 1024 : s;
}

VIP_RETURN fab_create_vi(struct vipl_vi *cvi, const VIPX_VI_CONFIG *cfg)
{
    struct fab_vi *vi = fab_vi(cvi);
    struct fab_nic *fn = fab_nic(cvi->nic);
    uint32_t depth = cfg->QueueDepth ? (uint32_t)cfg->QueueDepth : FAB_DEPTH_DEFAULT;
    uint64_t staging = cfg->StagingBytes ? cfg->StagingBytes
                                         : default_staging(cvi->attrs.MaxTransferSize);
    if (depth > FAB_DEPTH_MAX || staging > 64u * 1024 * 1024)
        return VIP_INVALID_PARAMETER;
    uint32_t pow2 = 1; /* the depth shm gives: a power of two */
    while (pow2 < depth)
        pow2 <<= 1;
    depth = pow2;
    memset((char *)vi + sizeof(vi->core), 0, sizeof(*vi) - sizeof(vi->core));
    vi->domain = fab_domain(fn, cvi->ptag);
    if (!vi->domain || fab_cqx_init(fn, &vi->own, 0) != 0)
        return VIP_ERROR_RESOURCE;
    int b = fab_cqx_bind(&vi->own, vi->domain);
    if (b == 0 && cvi->send_cq)
        b = fab_cqx_bind(&fab_cq(cvi->send_cq)->x, vi->domain);
    if (b == 0 && cvi->recv_cq)
        b = fab_cqx_bind(&fab_cq(cvi->recv_cq)->x, vi->domain);
    if (b != 0) {
        fab_cqx_close(&vi->own);
        /* a CQ serves the VIs of one protection tag (fabric_domain.c) */
        return b == -EINVAL ? VIP_INVALID_PARAMETER : VIP_ERROR_RESOURCE;
    }
    if (queue_init(vi, &vi->sq, false, depth, cvi->send_cq) != 0 ||
        queue_init(vi, &vi->rq, true, depth, cvi->recv_cq) != 0) {
        free(vi->sq.slots);
        fab_cqx_close(&vi->own);
        return VIP_ERROR_RESOURCE;
    }
    vi->rq.staging_len = (staging + FAB_LINE - 1) & ~(uint64_t)(FAB_LINE - 1);
    if (cfg->ArenaBytes) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        vi->arena_len = (cfg->ArenaBytes + page - 1) / page * page;
        vi->arena = mmap(NULL, vi->arena_len, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (vi->arena == MAP_FAILED) {
            vi->arena = NULL;
            free(vi->sq.slots);
            free(vi->rq.slots);
            fab_cqx_close(&vi->own);
            return VIP_ERROR_RESOURCE;
        }
    }
    pthread_mutex_init(&vi->ep_lock, NULL);
    return VIP_SUCCESS;
}

void fab_destroy_vi(struct vipl_vi *cvi)
{
    struct fab_vi *vi = fab_vi(cvi);
    fab_agent_forget(vi);
    fab_ep_close(vi);
    fab_cqx_close(&vi->own);
    free(vi->sq.slots);
    free(vi->rq.slots);
    if (vi->arena)
        munmap(vi->arena, vi->arena_len);
    pthread_mutex_destroy(&vi->sq.lock);
    pthread_mutex_destroy(&vi->rq.lock);
    pthread_mutex_destroy(&vi->ep_lock);
}

static struct fab_queue *queue_of(struct fab_vi *vi, enum vipl_queue q)
{
    return q == VIPL_RECVQ ? &vi->rq : &vi->sq;
}

bool fab_queue_empty(struct vipl_vi *cvi, enum vipl_queue which)
{
    struct fab_queue *q = queue_of(fab_vi(cvi), which);
    pthread_mutex_lock(&q->lock);
    bool empty = q->head == q->tail;
    pthread_mutex_unlock(&q->lock);
    return empty;
}

void fab_vi_stats(struct vipl_vi *cvi, VIPX_VI_STATS *st)
{
    struct fab_vi *vi = fab_vi(cvi);
    memset(st, 0, sizeof(*st));
    pthread_mutex_lock(&vi->sq.lock);
    st->SendsPosted = vi->sq.posted;
    st->SendsCompleted = vi->sq.completed;
    st->BytesSent = vi->sq.bytes;
    st->RdmaWrites = vi->sq.rdma_writes;
    pthread_mutex_unlock(&vi->sq.lock);
    pthread_mutex_lock(&vi->rq.lock);
    st->RecvsPosted = vi->rq.posted;
    st->RecvsCompleted = vi->rq.completed;
    st->BytesReceived = vi->rq.bytes;
    st->PeerProtocolErrors = vi->rq.peer_errors;
    st->StagedRecvs = vi->rq.staged_recvs;
    pthread_mutex_unlock(&vi->rq.lock);
}

/* Writes back the oldest finished slots, in order. Under q->lock. */
static void complete_in_order(struct fab_queue *q)
{
    while (q->done != q->tail) {
        struct fab_slot *s = &q->slots[q->done % q->depth];
        if (!s->finished)
            break;
        vipl_complete_desc(s->desc, s->status, s->len, s->imm);
        q->staging_used -= s->staged;
        if (s->staged && !(s->status & VIP_STATUS_ERROR_MASK))
            q->staged_recvs++;
        s->staged = 0;
        q->done++;
        q->completed++;
        if (!(s->status & VIP_STATUS_ERROR_MASK)) {
            q->bytes += s->len;
            if ((s->status & VIP_STATUS_OP_MASK) == VIP_STATUS_OP_RDMA_WRITE)
                q->rdma_writes++;
        }
        struct vipl_cq *cq = q->recv ? q->vi->core.recv_cq : q->vi->core.send_cq;
        if (cq)
            fab_cqx_notice(&fab_cq(cq)->x, &q->vi->core, q->recv);
    }
}

void fab_slot_finish(struct fab_slot *s, uint32_t status, uint32_t len, uint32_t imm)
{
    struct fab_queue *q = s->q;
    pthread_mutex_lock(&q->lock);
    s->status = status;
    s->len = len;
    s->imm = imm;
    s->finished = true;
    /* (a write's notice brings no bytes of its own to scatter) */
    fab_bounce_done(s, len, (status & (VIP_STATUS_OP_MASK | VIP_STATUS_ERROR_MASK)) ==
                                VIP_STATUS_OP_RECEIVE);
    if (s->on_wire)
        q->outstanding--;
    s->on_wire = false;
    complete_in_order(q);
    pthread_mutex_unlock(&q->lock);
}

/* Takes a slot for `wr` (NULL when the queue is full). Under q->lock. */
static struct fab_slot *slot_take(struct fab_queue *q, struct vipl_wr *wr)
{
    if (q->tail - q->head >= q->depth)
        return NULL;
    struct fab_slot *s = &q->slots[q->tail % q->depth];
    s->desc = wr->desc;
    s->finished = false;
    s->on_wire = false;
    s->status = s->len = s->staged = 0;
    s->imm = wr->imm; /* a send's completion shows its own immediate data */
    s->total = (uint32_t)wr->total;
    s->op = q->recv ? VIP_STATUS_OP_RECEIVE
            : wr->op == VIP_CONTROL_OP_RDMAWRITE ? VIP_STATUS_OP_RDMA_WRITE : VIP_STATUS_OP_SEND;
    s->nsge = wr->nsge;
    for (uint32_t i = 0; i < wr->nsge; i++) {
        s->iov[i] = (struct iovec){wr->sge[i].addr, wr->sge[i].len};
        s->mrdesc[i] = fab_mr_desc(q->vi->core.nic, wr->sge[i].mr);
    }
    s->bounce = NULL;
    struct fab_nic *fn = fab_nic(q->vi->core.nic);
    if (!wr->error && wr->nsge > (q->recv ? fn->rx_iov_limit : fn->tx_iov_limit) &&
        fab_bounce_take(fn, s, !q->recv) != 0)
        return NULL;
    q->tail++;
    q->posted++;
    return s;
}

/* Marks a slot finished at once (an invalid descriptor, a flushed one). */
static void slot_fail(struct fab_queue *q, struct fab_slot *s, uint32_t status)
{
    fab_bounce_done(s, 0, false);
    s->status = status;
    s->finished = true;
    complete_in_order(q);
}

/* Whether the receive lies in the VI's arena; if not, its staging share
 * (0: none; UINT32_MAX: over the budget). Under q->lock. */
static uint32_t staging_need(struct fab_vi *vi, const struct vipl_wr *wr)
{
    uintptr_t a = (uintptr_t)vi->arena;
    bool direct = vi->arena != NULL;
    for (uint32_t i = 0; i < wr->nsge && direct; i++) {
        uintptr_t p = (uintptr_t)wr->sge[i].addr;
        direct = p >= a && wr->sge[i].len <= vi->arena_len && p - a <= vi->arena_len - wr->sge[i].len;
    }
    if (direct)
        return 0;
    uint64_t need = (wr->total + FAB_LINE - 1) & ~(uint64_t)(FAB_LINE - 1);
    if (need == 0)
        need = FAB_LINE;
    return vi->rq.staging_used + need > vi->rq.staging_len ? UINT32_MAX : (uint32_t)need;
}

static int post_recv_slot(struct fab_vi *vi, struct fab_slot *s)
{
    struct fi_msg msg = {.context = &s->ctx};
    fab_slot_iov(s, (struct iovec **)&msg.msg_iov, &msg.desc, &msg.iov_count);
    /* The endpoint's receive context holds a whole queue (rx_size), so
     * FI_EAGAIN means a provider in trouble, not a full context. */
    ssize_t r = fi_recvmsg(vi->ep, &msg, 0);
    if (r == 0) {
        s->on_wire = true;
        vi->rq.outstanding++;
    }
    return (int)r;
}

int fab_rq_push(struct fab_vi *vi)
{
    struct fab_queue *q = &vi->rq;
    pthread_mutex_lock(&q->lock);
    int r = 0;
    for (; q->wire != q->tail && r == 0; q->wire++) {
        struct fab_slot *s = &q->slots[q->wire % q->depth];
        if (!s->finished)
            r = post_recv_slot(vi, s);
    }
    pthread_mutex_unlock(&q->lock);
    return r;
}

VIP_RETURN fab_post_recv(struct vipl_vi *cvi, struct vipl_wr *wr)
{
    struct fab_vi *vi = fab_vi(cvi);
    struct fab_queue *q = &vi->rq;
    pthread_mutex_lock(&vi->ep_lock);
    pthread_mutex_lock(&q->lock);
    uint32_t staged = wr->error ? 0 : staging_need(vi, wr);
    struct fab_slot *s = staged == UINT32_MAX ? NULL : slot_take(q, wr);
    if (s) {
        s->staged = staged;
        q->staging_used += staged;
    }
    VIP_RETURN ret = VIP_SUCCESS;
    bool in_turn = s && q->wire == q->tail - 1; /* no earlier one waits for an endpoint */
    if (!s)
        ret = VIP_ERROR_RESOURCE;
    else if (wr->error)
        slot_fail(q, s, wr->error | VIP_STATUS_OP_RECEIVE);
    else if (vipl_vi_state(cvi) == VIP_STATE_ERROR)
        slot_fail(q, s, VIP_STATUS_DESC_FLUSHED_ERROR | VIP_STATUS_OP_RECEIVE);
    else if (vi->ep && in_turn && post_recv_slot(vi, s) != 0)
        slot_fail(q, s, VIP_STATUS_TRANSPORT_ERROR | VIP_STATUS_OP_RECEIVE);
    else if (!vi->ep)
        in_turn = false; /* handed over when the VI connects (fab_rq_push) */
    if (in_turn)
        q->wire = q->tail;
    pthread_mutex_unlock(&q->lock);
    pthread_mutex_unlock(&vi->ep_lock);
    if (s && wr->error && vipl_vi_reliable(cvi) && vipl_vi_state(cvi) == VIP_STATE_CONNECTED)
        fab_vi_break(vi, VIP_ERROR_POST_DESC, wr->desc);
    return ret;
}

/* One send, write, or write's notice on the wire. */
static ssize_t send_op(struct fab_vi *vi, struct fab_slot *s, struct vipl_wr *wr)
{
    struct fab_nic *fn = fab_nic(vi->core.nic);
    if (wr->op == VIP_CONTROL_OP_RDMAWRITE) {
        struct fi_rma_iov rma = {.addr = wr->remote_addr, .len = wr->total,
                                 .key = fab_mr_key(vi->core.nic, wr->remote_handle)};
        struct fi_msg_rma m = {.rma_iov = &rma, .rma_iov_count = 1, .context = &s->ctx};
        fab_slot_iov(s, (struct iovec **)&m.msg_iov, &m.desc, &m.iov_count);
        /* Complete only once the bytes are in the target's memory, as VIA's
         * RDMA write (the peer may look at once, told by other means). */
        if (!wr->immediate)
            return fi_writemsg(vi->ep, &m, FI_COMPLETION | FI_DELIVERY_COMPLETE);
        /* With immediate data: the write, then an empty send carrying the
         * data that consumes the peer's receive (sends after writes keep
         * their order: FI_ORDER_SAW, checked at connect). The write's own
         * completion is suppressed; the notice's completes the slot. */
        m.context = NULL;
        ssize_t r = fi_writemsg(vi->ep, &m, 0);
        if (r != 0)
            return r;
        /* The transmit context holds two operations per slot (tx_size),
         * so the notice finds room: FI_EAGAIN here is a failure. */
        uint64_t data = FAB_DATA(FAB_DATA_RDMA_IMM, wr->total, wr->imm);
        struct fi_msg n = {.context = &s->ctx, .data = data};
        r = fi_sendmsg(vi->ep, &n, FI_REMOTE_CQ_DATA | FI_COMPLETION | FI_DELIVERY_COMPLETE);
        return r == -FI_EAGAIN ? -FI_EIO : r;
    }
    struct fi_msg m = {.context = &s->ctx};
    fab_slot_iov(s, (struct iovec **)&m.msg_iov, &m.desc, &m.iov_count);
    uint64_t flags = FI_COMPLETION;
    if (wr->immediate && fn->cq_data_size >= 8) {
        m.data = FAB_DATA(FAB_DATA_SEND, 0, wr->imm);
        flags |= FI_REMOTE_CQ_DATA;
    }
    return fi_sendmsg(vi->ep, &m, flags);
}

VIP_RETURN fab_post_send(struct vipl_vi *cvi, struct vipl_wr *wr)
{
    struct fab_vi *vi = fab_vi(cvi);
    struct fab_queue *q = &vi->sq;
    uint32_t op = wr->op == VIP_CONTROL_OP_RDMAWRITE ? VIP_STATUS_OP_RDMA_WRITE : VIP_STATUS_OP_SEND;
    pthread_mutex_lock(&vi->ep_lock);
    pthread_mutex_lock(&q->lock);
    struct fab_slot *s = slot_take(q, wr);
    VIP_RETURN ret = VIP_SUCCESS;
    if (!s) {
        ret = VIP_ERROR_RESOURCE;
    } else if (!vi->ep || vipl_vi_state(cvi) != VIP_STATE_CONNECTED) {
        slot_fail(q, s, VIP_STATUS_DESC_FLUSHED_ERROR | op);
    } else if (wr->error) {
        slot_fail(q, s, wr->error | op);
    } else {
        ssize_t r;
        while ((r = send_op(vi, s, wr)) == -FI_EAGAIN) {
            pthread_mutex_unlock(&q->lock); /* the reader finishes our slots */
            fab_cqx_progress(q->cqx);
            pthread_mutex_lock(&q->lock);
        }
        if (r == 0) {
            s->on_wire = true;
            q->outstanding++;
        } else {
            slot_fail(q, s, VIP_STATUS_TRANSPORT_ERROR | op);
        }
    }
    q->wire = q->tail;
    /* (read under the lock: once let go, the agent may complete and reuse the slot) */
    bool lost = s && s->finished && (s->status & VIP_STATUS_TRANSPORT_ERROR);
    pthread_mutex_unlock(&q->lock);
    pthread_mutex_unlock(&vi->ep_lock);
    if (s && wr->error && vipl_vi_reliable(cvi) && vipl_vi_state(cvi) == VIP_STATE_CONNECTED)
        fab_vi_break(vi, VIP_ERROR_POST_DESC, wr->desc);
    else if (lost)
        fab_vi_break(vi, VIP_ERROR_CONN_LOST, wr->desc);
    return ret;
}

static VIP_RETURN queue_done(struct fab_queue *q, VIP_DESCRIPTOR **desc)
{
    pthread_mutex_lock(&q->lock);
    bool ready = q->head != q->done;
    pthread_mutex_unlock(&q->lock);
    if (!ready)
        fab_cqx_progress(q->cqx);
    pthread_mutex_lock(&q->lock);
    VIP_RETURN r = VIP_NOT_DONE;
    if (q->head != q->done) {
        *desc = q->slots[q->head % q->depth].desc;
        q->head++;
        r = VIP_SUCCESS;
    }
    pthread_mutex_unlock(&q->lock);
    return r;
}

VIP_RETURN fab_send_done(struct vipl_vi *cvi, VIP_DESCRIPTOR **desc)
{
    struct fab_vi *vi = fab_vi(cvi);
    return queue_done(&vi->sq, desc);
}

VIP_RETURN fab_recv_done(struct vipl_vi *cvi, VIP_DESCRIPTOR **desc)
{
    struct fab_vi *vi = fab_vi(cvi);
    return queue_done(&vi->rq, desc);
}

void fab_queue_flush(struct fab_queue *q)
{
    uint32_t op = q->recv ? VIP_STATUS_OP_RECEIVE : VIP_STATUS_OP_SEND;
    pthread_mutex_lock(&q->lock);
    for (uint32_t i = q->done; i != q->tail; i++) {
        struct fab_slot *s = &q->slots[i % q->depth];
        if (!s->finished) {
            fab_bounce_done(s, 0, false);
            s->finished = true;
            s->on_wire = false;
            s->status = VIP_STATUS_DESC_FLUSHED_ERROR | op;
            s->len = 0;
        }
    }
    q->outstanding = 0;
    q->wire = q->tail;
    complete_in_order(q);
    pthread_mutex_unlock(&q->lock);
}
