/*
 * shm_send.c - the send queue: the sender acts as the NIC.
 *
 * VipPostSend reads the peer's next posted receive slot (read-only memory
 * the peer owns, so every field is copied once and validated), copies the
 * data into the peer's rx segment, writes the completion slot with its
 * sequence number last, and wakes the peer only if it sleeps. No system
 * call is made on this path unless the peer is asleep.
 */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include "shm.h"
#include <vipl_trace.h>

/* A validated copy of one posted receive slot of the peer. */
struct slot_view {
    uint32_t nseg, flags, total;
    struct {
        uint32_t off, len;
    } seg[SHM_POST_SEGS];
};

/* The peer's next receive slot: 0, -ENOENT if none is posted, -EPROTO if
 * what the peer published cannot be right. */
static int next_slot(struct shm_peer *p, struct slot_view *v)
{
    if (p->posted_seen == p->consumed) {
        uint32_t posted = atomic_load_explicit(&p->ctl->live.posted, memory_order_acquire);
        if (posted - p->consumed > p->depth)
            return -EPROTO;
        p->posted_seen = posted;
        if (posted == p->consumed)
            return -ENOENT;
    }
    const struct shm_post *post = &p->ctl->post[p->consumed & p->mask];
    if (atomic_load_explicit(&post->seq, memory_order_acquire) != p->consumed + 1)
        return -EPROTO;
    v->nseg = post->nseg;
    v->flags = post->flags;
    v->total = post->total;
    if (v->nseg > SHM_POST_SEGS)
        return -EPROTO;
    uint64_t sum = 0;
    for (uint32_t i = 0; i < v->nseg; i++) {
        uint32_t off = post->seg[i].off, len = post->seg[i].len;
        if (off < p->data_off || len > p->rx_size || off > p->rx_size - len)
            return -EPROTO;
        v->seg[i].off = off;
        v->seg[i].len = len;
        sum += len;
    }
    return sum == v->total ? 0 : -EPROTO;
}

/* Gathers the local segments into the slot's segments (validated, and at
 * least wr->total long). */
static void copy_to_slot(uint8_t *rx, const struct slot_view *v, const struct vipl_wr *wr)
{
    uint32_t di = 0, doff = 0;
    for (uint32_t si = 0; si < wr->nsge; si++) {
        const uint8_t *src = wr->sge[si].addr;
        uint32_t left = wr->sge[si].len;
        while (left && di < v->nseg) {
            uint32_t room = v->seg[di].len - doff;
            if (room == 0) {
                di++;
                doff = 0;
                continue;
            }
            uint32_t n = room < left ? room : left;
            memcpy(rx + v->seg[di].off + doff, src, n);
            src += n;
            left -= n;
            doff += n;
        }
    }
}

static void gather(uint8_t *dst, const struct vipl_wr *wr)
{
    for (uint32_t i = 0; i < wr->nsge; i++) {
        memcpy(dst, wr->sge[i].addr, wr->sge[i].len);
        dst += wr->sge[i].len;
    }
}

static void complete_slot(struct shm_peer *p, uint32_t status, uint32_t length, uint32_t imm,
                          uint32_t inline_len)
{
    struct shm_cmpl *c = &p->rx->cmpl[p->consumed & p->mask];
    VIPX_TRACE(VIPX_TP_CMPL, length);
    c->status = status;
    c->length = length;
    c->imm = imm;
    c->inline_len = inline_len;
    p->consumed++;
    atomic_store_explicit(&c->seq, p->consumed, memory_order_release);
    shm_hint_set(p); /* after the completion: a taker that sees the bit sees it */
    shm_wake_peer(p);
    /* The next send reads this line; fetch it while the peer works. */
    __builtin_prefetch(&p->ctl->post[p->consumed & p->mask]);
}

/* No receive posted at the peer: dropped on an unreliable VI, fatal on a
 * reliable one. Returns the send's error status. */
static uint32_t no_receive(struct shm_vi *vi, int *fail)
{
    if (!vipl_vi_reliable(&vi->core)) {
        vi->stats.DroppedNoRecv++;
        return 0;
    }
    *fail = VIP_ERROR_RECVQ_EMPTY;
    return VIP_STATUS_TRANSPORT_ERROR;
}

static uint32_t protocol_error(struct shm_vi *vi, int *fail)
{
    vi->stats.PeerProtocolErrors++;
    *fail = VIP_ERROR_CONN_LOST;
    return VIP_STATUS_TRANSPORT_ERROR;
}

static uint32_t send_message(struct shm_vi *vi, const struct vipl_wr *wr, int *fail)
{
    struct shm_peer *p = vi->peer;
    struct slot_view v;
    int rc = next_slot(p, &v);
    if (rc == -ENOENT)
        return no_receive(vi, fail);
    if (rc)
        return protocol_error(vi, fail);

    uint32_t imm_flag = wr->immediate ? VIP_STATUS_IMMEDIATE : 0;
    if (wr->total > v.total) {
        complete_slot(p, VIP_STATUS_LENGTH_ERROR | VIP_STATUS_OP_RECEIVE, 0, 0, 0);
        if (!vipl_vi_reliable(&vi->core))
            return 0;
        *fail = VIP_ERROR_CONN_LOST;
        return VIP_STATUS_TRANSPORT_ERROR;
    }
    uint32_t len = (uint32_t)wr->total, inline_len = 0;
    if (len && len <= SHM_INLINE_MAX) {
        /* Small data rides in the completion line itself: the receiver reads
         * that line anyway, and its buffer's line never has to move here. */
        gather(p->rx->cmpl[p->consumed & p->mask].inline_data, wr);
        inline_len = len;
    } else {
        copy_to_slot((uint8_t *)p->rx, &v, wr);
    }
    VIPX_TRACE(VIPX_TP_DATA, len);
    complete_slot(p, VIP_STATUS_OP_RECEIVE | imm_flag, len, wr->imm, inline_len);
    return 0;
}

/* The RDMA-write target the peer exported under `h`, copied once. */
static bool find_export(const struct shm_peer *p, VIP_MEM_HANDLE h, struct shm_reg_export *out)
{
    const struct shm_reg_export *regs = (const struct shm_reg_export *)&p->ctl->post[p->depth];
    for (uint32_t i = 0; h && i < p->reg_slots; i++) {
        if (atomic_load_explicit(&regs[i].handle, memory_order_acquire) != h)
            continue;
        out->len = regs[i].len;
        out->base = regs[i].base;
        out->rx_off = regs[i].rx_off;
        out->flags = regs[i].flags;
        /* Seqlock-style re-check: a change while copying means "not found". */
        return atomic_load_explicit(&regs[i].handle, memory_order_acquire) == h;
    }
    return false;
}

/*
 * Writes into a region of the peer process's own memory (SHM_EXPORT_XMEM)
 * with one process_vm_writev: the kernel allows it where we could ptrace
 * the peer (same user, dumpable, Yama's ptrace_scope 0 or 1 with the peer
 * our descendant), and refuses it otherwise (EPERM) before any byte moves.
 * Only the range the peer exported, checked by the caller, is written.
 * The peer is named by pid: its pidfd must say it still runs, so that a
 * pid the kernel gave to another process after the peer died (possible
 * once it was reaped, before our agent saw the death) is never written.
 */
static bool xmem_write(struct shm_vi *vi, const struct shm_peer *p, uint64_t addr,
                       const struct vipl_wr *wr)
{
    struct iovec local[VIPL_MAX_SEGS];
    struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = wr->total};
    for (uint32_t i = 0; i < wr->nsge; i++)
        local[i] = (struct iovec){.iov_base = wr->sge[i].addr, .iov_len = wr->sge[i].len};
    if (wr->total == 0)
        return true;
    if (!shm_agent_peer_runs(shm_nic(vi->core.nic)->agent, p))
        return false;
    return process_vm_writev(p->pid, local, wr->nsge, &remote, 1, 0) == (ssize_t)wr->total;
}

static uint32_t rdma_write(struct shm_vi *vi, const struct vipl_wr *wr, int *fail)
{
    struct shm_peer *p = vi->peer;
    struct shm_reg_export x;
    uint64_t a = wr->remote_addr, off = 0;
    bool ok = p->attrs.EnableRdmaWrite && find_export(p, wr->remote_handle, &x) &&
              a >= x.base && wr->total <= x.len && a - x.base <= x.len - wr->total;
    bool xmem = ok && x.flags == SHM_EXPORT_XMEM;
    if (ok && !xmem) {
        off = (uint64_t)x.rx_off + (a - x.base);
        ok = x.flags == 0 && x.rx_off >= p->data_off && off <= p->rx_size &&
             wr->total <= p->rx_size - off;
    }
    if (!ok) {
        if (vipl_vi_reliable(&vi->core))
            *fail = VIP_ERROR_RDMAW_PROT;
        return VIP_STATUS_RDMA_PROT_ERROR;
    }
    struct slot_view v;
    if (wr->immediate) { /* consumes a receive: check it exists before writing */
        int rc = next_slot(p, &v);
        if (rc == -ENOENT)
            return no_receive(vi, fail);
        if (rc)
            return protocol_error(vi, fail);
    }
    if (xmem) {
        if (!xmem_write(vi, p, a, wr)) { /* refused: nothing written (or the peer unmapped it) */
            if (vipl_vi_reliable(&vi->core))
                *fail = VIP_ERROR_RDMAW_PROT;
            return VIP_STATUS_RDMA_PROT_ERROR;
        }
    } else {
        gather((uint8_t *)p->rx + off, wr);
    }
    if (wr->immediate)
        complete_slot(p, VIP_STATUS_OP_REMOTE_RDMA_WRITE | VIP_STATUS_IMMEDIATE,
                      (uint32_t)wr->total, wr->imm, 0);
    vi->stats.RdmaWrites++;
    return 0;
}

VIP_RETURN shm_post_send(struct vipl_vi *cvi, struct vipl_wr *wr)
{
    struct shm_vi *vi = shm_vi(cvi);
    int fail = SHM_NO_FAILURE;
    shm_lock(&vi->sq_lock);
    if (vi->sq_tail - vi->sq_head >= vi->depth) {
        shm_unlock(&vi->sq_lock);
        return VIP_ERROR_RESOURCE;
    }
    uint32_t status;
    if (vipl_vi_state(cvi) == VIP_STATE_ERROR || !vi->peer) {
        status = VIP_STATUS_DESC_FLUSHED_ERROR;
    } else if (wr->error) {
        status = wr->error;
        if (vipl_vi_reliable(cvi))
            fail = VIP_ERROR_POST_DESC;
    } else if (wr->op == VIP_CONTROL_OP_RDMAWRITE) {
        status = rdma_write(vi, wr, &fail);
    } else {
        status = send_message(vi, wr, &fail);
    }
    vi->stats.SendsPosted++;
    if (!(status & VIP_STATUS_ERROR_MASK)) {
        vi->stats.SendsCompleted++;
        vi->stats.BytesSent += wr->total;
    }
    VIP_DESCRIPTOR *desc = wr->desc;
    vi->sq[vi->sq_tail & vi->mask] = desc;
    vi->sq_tail++;
    uint32_t op = wr->op == VIP_CONTROL_OP_RDMAWRITE ? VIP_STATUS_OP_RDMA_WRITE : VIP_STATUS_OP_SEND;
    vipl_complete_desc(desc, status | op, status ? 0 : (uint32_t)wr->total, wr->imm);
    bool cq_ok = true;
    if (cvi->send_cq)
        cq_ok = shm_cq_push_send(shm_cq(cvi->send_cq), vi);
    else
        shm_wake_local(shm_wake_of(vi, VIPL_SENDQ));
    shm_unlock(&vi->sq_lock);

    if (!cq_ok)
        vipl_report_error(cvi->nic, cvi, cvi->send_cq, desc, VIP_RESOURCE_CQ,
                          VIP_ERROR_CATASTROPHIC);
    if (fail != SHM_NO_FAILURE)
        shm_vi_break(vi, (VIP_ERROR_CODE)fail, desc);
    return VIP_SUCCESS;
}

VIP_RETURN shm_send_done(struct vipl_vi *cvi, VIP_DESCRIPTOR **out)
{
    struct shm_vi *vi = shm_vi(cvi);
    shm_lock(&vi->sq_lock);
    if (vi->sq_head == vi->sq_tail) {
        shm_unlock(&vi->sq_lock);
        return VIP_NOT_DONE;
    }
    *out = vi->sq[vi->sq_head & vi->mask];
    vi->sq_head++;
    shm_unlock(&vi->sq_lock);
    return VIP_SUCCESS;
}
