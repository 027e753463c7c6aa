/*
 * datapath.c - fuzzes what the shm data path reads from a peer:
 *   as a sender (shm_send.c): the peer's posted count, its posted-receive
 *     slots post[s] and its RDMA-write export table;
 *   as a receiver (shm_recv.c): the completion slots cmpl[s] the peer
 *     writes into our rx segment, and the staged bytes.
 * The victim is a real connected VI (link.h); the harness is its peer and
 * writes those fields directly, between the victim's own calls.
 *
 * Input: a configuration (reliability, both sides' depths, the victim's
 * staging, arena and RDMA-write setting, the peer's RDMA-write flag), then
 * up to MAX_OPS operations, one byte each plus arguments (see the OP_*).
 *
 * Checks beyond "no crash, no sanitizer report": a send writes only bytes
 * the peer's slots or export entries allow (all completion lines, segments
 * inside the rx data area, export regions inside it), a send that succeeds
 * and completes a slot used a slot valid by docs/ARCHITECTURE.md and put
 * the bytes there in order; a receive that succeeds reports at most the
 * posted length and delivers the inline bytes exactly. Receive buffers
 * outside the arena are exact-size heap blocks, so any overflow while the
 * victim copies out is an ASan report.
 */
#include <stddef.h>
#include <stdlib.h>

#include "link.h"

#define MAX_OPS 64
#define MAX_RECVS 32
#define SEND_MAX 8192
#define DESC_SLOT 384 /* a control segment and room for 22 data segments */

enum {
    OP_POSTED,    /* posted = u32 */
    OP_SLOT,      /* post[u8 % depth] = raw fields */
    OP_SLOT_GOOD, /* the next slot, well formed: one segment at data_off + u16, u16 long */
    OP_EXPORT,    /* export entry u8 % 64 = raw fields */
    OP_SEND,      /* VipPostSend: u16 length in 1..3 segments, immediate or not */
    OP_RDMA,      /* VipPostSend RDMA write: handle, address, length, immediate */
    OP_RECV,      /* VipPostRecv: 1..3 segments, each in the arena or on the heap */
    OP_CMPL,      /* cmpl slot: the next one (seq right) or a raw one */
    OP_RECV_DONE, /* VipRecvDone */
    OP_POKE,      /* bytes into the victim's rx from its data offset on */
    OP_COUNT
};

static const VIP_RELIABILITY_LEVEL levels[] = {
    VIP_SERVICE_UNRELIABLE, VIP_SERVICE_RELIABLE_DELIVERY, VIP_SERVICE_RELIABLE_RECEPTION};

/* Registered once: the send source (a pattern) and the descriptors. */
static struct {
    bool ready;
    VIP_NIC_HANDLE nic;
    VIP_PROTECTION_HANDLE ptag;
    uint8_t *src;
    VIP_MEM_HANDLE src_mh;
    uint8_t *descs; /* 1 send slot, then MAX_RECVS receive slots */
    VIP_MEM_HANDLE desc_mh;
} g;

struct recv_rec {
    VIP_DESCRIPTOR *d;
    uint32_t total;
    uint32_t sidx; /* the shared index it was published at */
    bool done;
    uint8_t *heap[3];
    VIP_MEM_HANDLE heap_mh[3];
};

struct state {
    struct fz_link l;
    struct fz_link_cfg cfg;
    uint8_t *arena;
    VIP_ULONG arena_len;
    VIP_MEM_HANDLE arena_mh;
    uint32_t slot_next;  /* next slot OP_SLOT_GOOD fills */
    uint32_t consumed;   /* slots the victim completed, as seen in cmpl[] */
    uint32_t cmpl_next;  /* next completion OP_CMPL writes well formed */
    uint32_t published; /* receives the victim published so far */
    struct recv_rec recv[MAX_RECVS];
    unsigned nrecv;
    uint8_t *snap; /* the peer's rx before a send */
    uint8_t *allowed;
};

static void setup(void)
{
    if (g.ready)
        return;
    fz_link_init(&g.nic, &g.ptag);
    VIP_MEM_ATTRIBUTES ma = {.Ptag = g.ptag};
    g.src = aligned_alloc(64, SEND_MAX);
    g.descs = aligned_alloc(64, DESC_SLOT * (1 + MAX_RECVS));
    FZ_CHECK(g.src && g.descs);
    for (unsigned i = 0; i < SEND_MAX; i++)
        g.src[i] = (uint8_t)(i * 7 + 1);
    FZ_CHECK(VipRegisterMem(g.nic, g.src, SEND_MAX, &ma, &g.src_mh) == VIP_SUCCESS);
    FZ_CHECK(VipRegisterMem(g.nic, g.descs, DESC_SLOT * (1 + MAX_RECVS), &ma,
                            &g.desc_mh) == VIP_SUCCESS);
    g.ready = true;
}

static VIP_DESCRIPTOR *desc_slot(unsigned i)
{
    VIP_DESCRIPTOR *d = (VIP_DESCRIPTOR *)(g.descs + (size_t)i * DESC_SLOT);
    memset(d, 0, DESC_SLOT);
    return d;
}

/* Segment i, also past the two the structure declares. */
static VIP_DATA_SEGMENT *seg(VIP_DESCRIPTOR *d, unsigned i)
{
    VIP_DESCRIPTOR_SEGMENT *ds =
        (VIP_DESCRIPTOR_SEGMENT *)((uint8_t *)d + offsetof(VIP_DESCRIPTOR, DS));
    return &ds[i].Local;
}

/* ---- The sender side: what the victim may write into the peer's rx ------ */

static void allow(struct state *st, uint64_t off, uint64_t len)
{
    if (off >= st->l.rx_len)
        return;
    if (len > st->l.rx_len - off)
        len = st->l.rx_len - off;
    memset(st->allowed + off, 1, len);
}

/* The documented rule for one segment of a slot. */
static bool seg_ok(const struct state *st, uint32_t off, uint32_t len)
{
    return off >= st->l.data_off && (uint64_t)off + len <= st->l.rx_len;
}

/* Every byte a valid slot or export entry names, every completion line and
 * the wake-up word: a superset of what one send may touch. */
static void compute_allowed(struct state *st)
{
    memset(st->allowed, 0, st->l.rx_len);
    allow(st, 0, sizeof(struct shm_rx) + (size_t)st->l.depth * sizeof(struct shm_cmpl));
    for (uint32_t k = 0; k < st->l.depth; k++) {
        const struct shm_post *p = &st->l.ctl->post[k];
        for (uint32_t i = 0; i < p->nseg && i < SHM_POST_SEGS; i++)
            if (seg_ok(st, p->seg[i].off, p->seg[i].len))
                allow(st, p->seg[i].off, p->seg[i].len);
    }
    const struct shm_reg_export *regs = shm_ctl_regs(st->l.ctl, st->l.depth);
    for (uint32_t i = 0; i < SHM_REG_SLOTS; i++)
        if (regs[i].handle && regs[i].rx_off >= st->l.data_off)
            allow(st, regs[i].rx_off, regs[i].len); /* clipped to rx */
}

static void check_writes(struct state *st)
{
    const uint8_t *now = (const uint8_t *)st->l.rx;
    for (size_t i = 0; i < st->l.rx_len; i++)
        if (now[i] != st->snap[i] && !st->allowed[i])
            fz_fail(__FILE__, __LINE__, "send wrote outside what the peer allowed");
}

/* A slot the victim may have filled, by the rules of docs/ARCHITECTURE.md. */
static bool slot_valid(const struct state *st, const struct shm_post *p, uint32_t s)
{
    if (atomic_load(&p->seq) != s + 1 || p->nseg > SHM_POST_SEGS)
        return false;
    uint64_t sum = 0;
    for (uint32_t i = 0; i < p->nseg; i++) {
        if (!seg_ok(st, p->seg[i].off, p->seg[i].len))
            return false;
        sum += p->seg[i].len;
    }
    return sum == p->total;
}

/* After a send: did it complete the next slot? If so, was the slot valid
 * and is the data where the slot said, in order? */
static void check_completion(struct state *st, uint32_t len, uint32_t status, bool rdma)
{
    uint32_t s = st->consumed;
    struct shm_cmpl *c = &st->l.rx->cmpl[s & (st->l.depth - 1)];
    if (atomic_load(&c->seq) != s + 1)
        return; /* no completion written: dropped or failed before */
    st->consumed++;
    if (!(status & VIP_STATUS_ERROR_MASK) && !(c->status & VIP_STATUS_LENGTH_ERROR))
        FZ_CHECK(c->length == len);
    if (rdma || (c->status & VIP_STATUS_LENGTH_ERROR))
        return;
    const struct shm_post *p = &st->l.ctl->post[s & (st->l.depth - 1)];
    FZ_CHECK(slot_valid(st, p, s) && p->total >= len);
    if (c->inline_len) {
        FZ_CHECK(c->inline_len == len && len <= SHM_INLINE_MAX);
        FZ_CHECK(memcmp(c->inline_data, g.src, len) == 0);
        return;
    }
    uint32_t done = 0;
    for (uint32_t i = 0; i < p->nseg && done < len; i++) {
        uint32_t n = p->seg[i].len < len - done ? p->seg[i].len : len - done;
        FZ_CHECK(memcmp((uint8_t *)st->l.rx + p->seg[i].off, g.src + done, n) == 0);
        done += n;
    }
    FZ_CHECK(done == len);
}

static uint32_t post_send(struct state *st, VIP_DESCRIPTOR *d)
{
    compute_allowed(st);
    memcpy(st->snap, st->l.rx, st->l.rx_len);
    VIP_RETURN r = VipPostSend(st->l.vi, d, g.desc_mh);
    if (r != VIP_SUCCESS)
        return VIP_STATUS_ERROR_MASK; /* refused up front: nothing sent */
    VIP_DESCRIPTOR *done;
    FZ_CHECK(VipSendDone(st->l.vi, &done) == VIP_SUCCESS && done == d);
    FZ_CHECK(d->CS.Status & VIP_STATUS_DONE);
    check_writes(st);
    return d->CS.Status;
}

static void op_send(struct state *st, struct fz_in *in)
{
    uint32_t len = fz_u16(in) % SEND_MAX;
    unsigned nseg = 1 + fz_u8(in) % 3;
    uint8_t flags = fz_u8(in);
    uint32_t imm = fz_u32(in);
    VIP_DESCRIPTOR *d = desc_slot(0);
    d->CS.Control = VIP_CONTROL_OP_SENDRECV | (flags & 1 ? VIP_CONTROL_IMMEDIATE : 0);
    d->CS.ImmediateData = imm;
    d->CS.Length = len;
    uint32_t at = 0;
    for (unsigned i = 0; i < nseg; i++) {
        uint32_t n = i + 1 == nseg ? len - at : (len - at) / 2;
        seg(d, i)->Data.Address = g.src + at;
        seg(d, i)->Handle = g.src_mh;
        seg(d, i)->Length = n;
        at += n;
    }
    d->CS.SegCount = (VIP_UINT16)nseg;
    uint32_t status = post_send(st, d);
    fz_trace("send %u: status 0x%x", len, status);
    check_completion(st, len, status, false);
}

static void op_rdma(struct state *st, struct fz_in *in)
{
    uint32_t handle = fz_u32(in);
    uint64_t addr = fz_u64(in);
    uint32_t len = fz_u16(in) % SEND_MAX;
    uint8_t flags = fz_u8(in);
    VIP_DESCRIPTOR *d = desc_slot(0);
    d->CS.Control = VIP_CONTROL_OP_RDMAWRITE | (flags & 1 ? VIP_CONTROL_IMMEDIATE : 0);
    d->CS.ImmediateData = flags;
    d->CS.Length = len;
    d->DS[0].Remote.Data.AddressBits = addr;
    d->DS[0].Remote.Handle = handle;
    d->CS.SegCount = 1;
    if (len) {
        seg(d, 1)->Data.Address = g.src;
        seg(d, 1)->Handle = g.src_mh;
        seg(d, 1)->Length = len;
        d->CS.SegCount = 2;
    }
    uint32_t status = post_send(st, d);
    fz_trace("rdma %u to %#llx/%#x: status 0x%x", len, (unsigned long long)addr, handle, status);
    if (!(status & VIP_STATUS_ERROR_MASK) && len && !(flags & 1)) {
        /* It landed in an export entry that allows exactly this range. */
        const struct shm_reg_export *regs = shm_ctl_regs(st->l.ctl, st->l.depth);
        bool found = false;
        for (uint32_t i = 0; i < SHM_REG_SLOTS && !found; i++)
            found = regs[i].handle == handle && addr >= regs[i].base &&
                    addr - regs[i].base <= regs[i].len && len <= regs[i].len - (addr - regs[i].base) &&
                    seg_ok(st, regs[i].rx_off, (uint32_t)(addr - regs[i].base) + len) &&
                    memcmp((uint8_t *)st->l.rx + regs[i].rx_off + (addr - regs[i].base), g.src,
                           len) == 0;
        FZ_CHECK(found);
    }
    if (flags & 1)
        check_completion(st, len, status, true);
}

static void op_slot(struct state *st, struct fz_in *in)
{
    struct shm_post *p = &st->l.ctl->post[fz_u8(in) % st->l.depth];
    atomic_store(&p->seq, fz_u32(in));
    p->nseg = fz_u16(in);
    p->flags = fz_u16(in);
    p->total = fz_u32(in);
    for (int i = 0; i < SHM_POST_SEGS; i++) {
        p->seg[i].off = fz_u32(in);
        p->seg[i].len = fz_u32(in);
    }
}

static void op_slot_good(struct state *st, struct fz_in *in)
{
    uint32_t s = st->slot_next++;
    struct shm_post *p = &st->l.ctl->post[s & (st->l.depth - 1)];
    uint32_t off = st->l.data_off + fz_u16(in) % (uint32_t)(st->l.rx_len - st->l.data_off);
    uint32_t room = (uint32_t)st->l.rx_len - off;
    uint32_t len = fz_u16(in) % (room + 1);
    p->nseg = 1;
    p->flags = 0;
    p->total = len;
    p->seg[0].off = off;
    p->seg[0].len = len;
    atomic_store(&p->seq, s + 1);
    atomic_store(&st->l.ctl->live.posted, s + 1);
}

static void op_export(struct state *st, struct fz_in *in)
{
    struct shm_reg_export *x = &shm_ctl_regs(st->l.ctl, st->l.depth)[fz_u8(in) % SHM_REG_SLOTS];
    atomic_store(&x->handle, fz_u32(in));
    x->len = fz_u32(in);
    x->base = fz_u64(in);
    x->rx_off = fz_u32(in);
}

/* ---- The receiver side ------------------------------------------------------ */

static void op_recv(struct state *st, struct fz_in *in)
{
    unsigned nseg = 1 + fz_u8(in) % 3;
    uint8_t where = fz_u8(in);
    if (st->nrecv == MAX_RECVS)
        return;
    struct recv_rec *r = &st->recv[st->nrecv];
    VIP_DESCRIPTOR *d = desc_slot(1 + st->nrecv);
    VIP_MEM_ATTRIBUTES ma = {.Ptag = g.ptag};
    uint32_t total = 0;
    for (unsigned i = 0; i < nseg; i++) {
        uint32_t v = fz_u32(in);
        uint32_t len = 1 + v % 4096;
        void *p;
        VIP_MEM_HANDLE mh;
        if (st->arena && (where >> i & 1) && len <= st->arena_len) {
            p = st->arena + (v >> 12) % (st->arena_len - len + 1);
            mh = st->arena_mh;
        } else {
            r->heap[i] = malloc(len);
            FZ_CHECK(r->heap[i]);
            FZ_CHECK(VipRegisterMem(g.nic, r->heap[i], len, &ma, &r->heap_mh[i]) ==
                     VIP_SUCCESS);
            p = r->heap[i];
            mh = r->heap_mh[i];
        }
        seg(d, i)->Data.Address = p;
        seg(d, i)->Handle = mh;
        seg(d, i)->Length = len;
        total += len;
    }
    d->CS.SegCount = (VIP_UINT16)nseg;
    d->CS.Length = total;
    r->d = d;
    r->total = total;
    st->nrecv++;
    VIP_RETURN rc = VipPostRecv(st->l.vi, d, g.desc_mh);
    fz_trace("recv %u bytes in %u segments: %s", total, nseg, VipxReturnString(rc));
    if (rc != VIP_SUCCESS)
        r->done = true; /* never queued */
    else
        r->sidx = st->published++;
}

static void op_cmpl(struct state *st, struct fz_in *in)
{
    uint32_t vdepth = st->l.vctl->hdr.depth;
    uint8_t how = fz_u8(in);
    uint32_t k = fz_u8(in), seq = fz_u32(in);
    if (how & 1) { /* well-formed sequence number for the next completion */
        k = st->cmpl_next;
        seq = ++st->cmpl_next;
    }
    struct shm_cmpl *c = &st->l.vrx->cmpl[k & (vdepth - 1)];
    c->status = fz_u32(in);
    c->length = fz_u32(in);
    c->imm = fz_u32(in);
    c->inline_len = fz_u32(in);
    fz_bytes(in, c->inline_data, SHM_INLINE_MAX);
    atomic_store(&c->seq, seq);
}

static struct recv_rec *rec_of(struct state *st, VIP_DESCRIPTOR *d)
{
    for (unsigned i = 0; i < st->nrecv; i++)
        if (st->recv[i].d == d)
            return &st->recv[i];
    return NULL;
}

static void op_recv_done(struct state *st)
{
    VIP_DESCRIPTOR *d;
    if (VipRecvDone(st->l.vi, &d) != VIP_SUCCESS)
        return;
    struct recv_rec *r = rec_of(st, d);
    FZ_CHECK(r && !r->done); /* one of ours, completed once */
    r->done = true;
    uint32_t status = d->CS.Status;
    fz_trace("recv done: status 0x%x length %u", status, d->CS.Length);
    FZ_CHECK(status & VIP_STATUS_DONE);
    uint32_t op = status & VIP_STATUS_OP_MASK;
    FZ_CHECK(op == VIP_STATUS_OP_RECEIVE || op == VIP_STATUS_OP_REMOTE_RDMA_WRITE);
    if (status & VIP_STATUS_ERROR_MASK)
        return;
    if (op != VIP_STATUS_OP_RECEIVE)
        return;
    uint32_t len = d->CS.Length;
    FZ_CHECK(len <= r->total);
    /* The bytes delivered are the inline bytes, or the staged ones. */
    uint32_t mask = st->l.vctl->hdr.depth - 1;
    const struct shm_cmpl *c = &st->l.vrx->cmpl[r->sidx & mask];
    const struct shm_post *p = &st->l.vctl->post[r->sidx & mask];
    const uint8_t *want = NULL;
    if (c->inline_len)
        want = c->inline_data;
    else if (atomic_load(&p->seq) == r->sidx + 1 && (p->flags & SHM_POST_STAGED))
        want = (const uint8_t *)st->l.vrx + p->seg[0].off;
    if (!want)
        return; /* zero copy: the peer wrote the buffer itself */
    uint32_t at = 0;
    for (unsigned i = 0; i < d->CS.SegCount && at < len; i++) {
        uint32_t n = seg(d, i)->Length < len - at ? seg(d, i)->Length : len - at;
        FZ_CHECK(memcmp(seg(d, i)->Data.Address, want + at, n) == 0);
        at += n;
    }
}

static void op_poke(struct state *st, struct fz_in *in)
{
    uint32_t off = st->l.vctl->hdr.data_off + fz_u16(in);
    uint8_t buf[256];
    size_t n = fz_u8(in);
    fz_bytes(in, buf, n);
    if (off < st->l.vrx_len) {
        if (n > st->l.vrx_len - off)
            n = st->l.vrx_len - off;
        memcpy((uint8_t *)st->l.vrx + off, buf, n);
    }
}

/* ---- The run --------------------------------------------------------------- */

static void read_cfg(struct fz_in *in, struct fz_link_cfg *cfg)
{
    uint8_t a = fz_u8(in), b = fz_u8(in), c = fz_u8(in);
    *cfg = (struct fz_link_cfg){
        .reliability = levels[a % 3],
        .depth = 1u << (b % 5),
        .peer_depth = 1u << ((b >> 3) % 5),
        .staging = 256u * (1 + c % 16),
        .arena = (a & 8) ? 16384 : 0,
        .rdma_write = (a & 16) != 0,
        .peer_rdma_write = (a & 32) != 0,
    };
}

static void finish(struct state *st)
{
    fz_link_close(&st->l); /* flushes every receive still posted */
    for (unsigned i = 0; i < st->nrecv; i++)
        for (int k = 0; k < 3; k++)
            if (st->recv[i].heap[k]) {
                VipDeregisterMem(g.nic, st->recv[i].heap[k], st->recv[i].heap_mh[k]);
                free(st->recv[i].heap[k]);
            }
    if (st->arena_mh)
        VipDeregisterMem(g.nic, st->arena, st->arena_mh);
    free(st->snap);
    free(st->allowed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz_in in = {data, size};
    static struct state st;
    memset(&st, 0, sizeof(st));
    read_cfg(&in, &st.cfg);
    setup();
    int before = fz_count_fds();
    fz_link_open(&st.l, &st.cfg);
    st.snap = malloc(st.l.rx_len);
    st.allowed = malloc(st.l.rx_len);
    FZ_CHECK(st.snap && st.allowed);
    VIP_PVOID base;
    if (VipxViArena(st.l.vi, &base, &st.arena_len) == VIP_SUCCESS && base && st.arena_len) {
        VIP_MEM_ATTRIBUTES ma = {.Ptag = g.ptag, .EnableRdmaWrite = st.cfg.rdma_write};
        st.arena = base;
        FZ_CHECK(VipRegisterMem(g.nic, base, st.arena_len, &ma, &st.arena_mh) == VIP_SUCCESS);
    }
    for (int n = 0; n < MAX_OPS && in.n; n++) {
        switch (fz_u8(&in) % OP_COUNT) {
        case OP_POSTED:
            atomic_store(&st.l.ctl->live.posted, fz_u32(&in));
            break;
        case OP_SLOT:
            op_slot(&st, &in);
            break;
        case OP_SLOT_GOOD:
            op_slot_good(&st, &in);
            break;
        case OP_EXPORT:
            op_export(&st, &in);
            break;
        case OP_SEND:
            op_send(&st, &in);
            break;
        case OP_RDMA:
            op_rdma(&st, &in);
            break;
        case OP_RECV:
            op_recv(&st, &in);
            break;
        case OP_CMPL:
            op_cmpl(&st, &in);
            break;
        case OP_RECV_DONE:
            op_recv_done(&st);
            break;
        case OP_POKE:
            op_poke(&st, &in);
            break;
        }
    }
    finish(&st);
    FZ_CHECK(fz_count_fds() == before);
    return 0;
}
