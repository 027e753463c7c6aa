/* hpeer.c - see hpeer.h. */
#include "hpeer.h"

#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sovia/sharness.h"

/* ---- Endpoint ---------------------------------------------------------------------- */

#define HP_PAGE 4096u

static VIP_MEM_HANDLE reg(struct hp *h, void *p, size_t len, bool rdma)
{
    VIP_MEM_ATTRIBUTES ma = {.Ptag = h->ptag, .EnableRdmaWrite = rdma};
    VIP_MEM_HANDLE mh = 0;
    VIP_RETURN r = VipRegisterMem(h->nic, p, len, &ma, &mh);
    CHECK_MSG(r == VIP_SUCCESS, "VipRegisterMem(%zu bytes): %s", len, VipxReturnString(r));
    return mh;
}

void hp_open(struct hp *h, const struct hp_opts *o)
{
    memset(h, 0, sizeof *h);
    CHECK(VipOpenNic(NULL, &h->nic) == VIP_SUCCESS);
    CHECK(VipCreatePtag(h->nic, &h->ptag) == VIP_SUCCESS);
    h->nbufs = o->nbufs;
    h->bufsz = o->bufsz;
    h->rdma_len = o->rdma_len;
    h->rdma_enabled = o->rdma;
    h->arena_len = (o->nbufs * o->bufsz + o->rdma_len + HP_PAGE - 1) & ~(size_t)(HP_PAGE - 1);
    VIP_VI_ATTRIBUTES va = {.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY,
                            .MaxTransferSize = o->mtu,
                            .Ptag = h->ptag,
                            .EnableRdmaWrite = o->rdma};
    VIPX_VI_CONFIG vc = {.QueueDepth = o->depth ? o->depth : o->nbufs + 16,
                         .ArenaBytes = h->arena_len};
    if (o->cq)
        CHECK(VipCreateCQ(h->nic, 64, &h->cq) == VIP_SUCCESS);
    VIP_RETURN r = VipxCreateVi(h->nic, &va, NULL, h->cq, &vc, &h->vi);
    CHECK_MSG(r == VIP_SUCCESS, "VipxCreateVi: %s", VipxReturnString(r));
    h->svi = (struct shm_vi *)h->vi;
    VIP_PVOID base;
    VIP_ULONG alen;
    CHECK(VipxViArena(h->vi, &base, &alen) == VIP_SUCCESS && alen >= h->arena_len);
    h->arena = base;
    if (o->nbufs)
        h->bufs_mh = reg(h, h->arena, o->nbufs * o->bufsz, false);
    if (o->rdma_len) {
        h->rdma = h->arena + o->nbufs * o->bufsz;
        h->rdma_mh = reg(h, h->rdma, o->rdma_len, true);
    }
    h->sbuf_len = (o->mtu + 63) & ~(size_t)63;
    h->sbuf = aligned_alloc(64, h->sbuf_len);
    CHECK(h->sbuf != NULL);
    h->sbuf_mh = reg(h, h->sbuf, h->sbuf_len, false);
    h->nsend = 4;
    size_t dlen = (size_t)(o->nbufs + h->nsend) * sizeof(VIP_DESCRIPTOR);
    h->rdesc = aligned_alloc(VIP_DESCRIPTOR_ALIGNMENT, dlen);
    CHECK(h->rdesc != NULL);
    memset(h->rdesc, 0, dlen);
    h->sdesc = h->rdesc + o->nbufs;
    h->desc_mh = reg(h, h->rdesc, dlen, false);
    for (unsigned i = 0; i < o->nbufs; i++)
        hp_post_recv(h, i);
}

VIP_VI_STATE hp_state(const struct hp *h)
{
    VIP_VI_STATE st = VIP_STATE_IDLE;
    CHECK(VipQueryVi(h->vi, &st, NULL, NULL, NULL) == VIP_SUCCESS);
    return st;
}

void hp_close(struct hp *h)
{
    if (!h->nic)
        return;
    /* Best effort: this is the hostile peer's own state, and a VI left IDLE
     * with receives posted (a refused connect) cannot be destroyed. */
    VIP_VI_STATE st = hp_state(h);
    if (st == VIP_STATE_CONNECTED || st == VIP_STATE_ERROR)
        VipDisconnect(h->vi);
    VIP_DESCRIPTOR *d;
    while (VipRecvDone(h->vi, &d) == VIP_SUCCESS || VipSendDone(h->vi, &d) == VIP_SUCCESS)
        ;
    if (VipDestroyVi(h->vi) != VIP_SUCCESS) {
        memset(h, 0, sizeof *h); /* leaked with its NIC until this process exits */
        return;
    }
    VipDeregisterMem(h->nic, h->sbuf, h->sbuf_mh);
    VipDeregisterMem(h->nic, h->rdesc, h->desc_mh);
    if (h->nbufs)
        VipDeregisterMem(h->nic, h->arena, h->bufs_mh);
    if (h->rdma)
        VipDeregisterMem(h->nic, h->rdma, h->rdma_mh);
    free(h->sbuf);
    free(h->rdesc);
    if (h->cq)
        VipDestroyCQ(h->cq);
    VipDestroyPtag(h->nic, h->ptag);
    VipCloseNic(h->nic);
    memset(h, 0, sizeof *h);
}

VIP_RETURN hp_connect(struct hp *h, const VIP_NET_ADDRESS *local, const VIP_NET_ADDRESS *remote,
                      unsigned timeout_ms)
{
    double end = s_now_ms() + timeout_ms;
    for (;;) {
        VIP_VI_ATTRIBUTES ra;
        VIP_RETURN r = VipConnectRequest(h->vi, (VIP_NET_ADDRESS *)local,
                                         (VIP_NET_ADDRESS *)remote, timeout_ms, &ra);
        if (r != VIP_NO_MATCH || s_now_ms() > end)
            return r;
        s_sleep_ms(2);
    }
}

uint8_t *hp_rbuf(const struct hp *h, unsigned i)
{
    return h->arena + (size_t)i * h->bufsz;
}

unsigned hp_rindex(const struct hp *h, const VIP_DESCRIPTOR *d)
{
    size_t i = (size_t)(d - h->rdesc);
    CHECK_MSG(i < h->nbufs, "a completed receive that is not ours");
    return (unsigned)i;
}

void hp_post_recv(struct hp *h, unsigned i)
{
    VIP_DESCRIPTOR *d = &h->rdesc[i];
    memset(d, 0, sizeof *d);
    d->CS.SegCount = 1;
    d->DS[0].Local.Data.Address = hp_rbuf(h, i);
    d->DS[0].Local.Handle = h->bufs_mh;
    d->DS[0].Local.Length = (VIP_UINT32)h->bufsz;
    VIP_RETURN r = VipPostRecv(h->vi, d, h->desc_mh);
    CHECK_MSG(r == VIP_SUCCESS, "VipPostRecv: %s", VipxReturnString(r));
}

VIP_DESCRIPTOR *hp_recv(struct hp *h, unsigned timeout_ms)
{
    VIP_DESCRIPTOR *d = NULL;
    return VipRecvWait(h->vi, timeout_ms, &d) == VIP_SUCCESS ? d : NULL;
}

static VIP_DESCRIPTOR *next_sdesc(struct hp *h)
{
    VIP_DESCRIPTOR *done;
    while (VipSendDone(h->vi, &done) == VIP_SUCCESS)
        ;
    VIP_DESCRIPTOR *d = &h->sdesc[h->s_next++ % h->nsend];
    memset(d, 0, sizeof *d);
    return d;
}

static uint32_t post_send(struct hp *h, VIP_DESCRIPTOR *d)
{
    VIP_RETURN r = VipPostSend(h->vi, d, h->desc_mh);
    CHECK_MSG(r == VIP_SUCCESS, "VipPostSend: %s", VipxReturnString(r));
    /* The shm provider completes a send inside VipPostSend. */
    CHECK(d->CS.Status & VIP_STATUS_DONE);
    return d->CS.Status;
}

uint32_t hp_send(struct hp *h, const void *data, uint32_t len, bool with_imm, uint32_t imm)
{
    CHECK(len <= h->sbuf_len);
    VIP_DESCRIPTOR *d = next_sdesc(h);
    if (len)
        memcpy(h->sbuf, data, len);
    d->CS.Control = VIP_CONTROL_OP_SENDRECV | (with_imm ? VIP_CONTROL_IMMEDIATE : 0);
    d->CS.ImmediateData = imm;
    d->CS.SegCount = len ? 1 : 0;
    d->CS.Length = len;
    if (len) {
        d->DS[0].Local.Data.Address = h->sbuf;
        d->DS[0].Local.Handle = h->sbuf_mh;
        d->DS[0].Local.Length = len;
    }
    return post_send(h, d);
}

uint32_t hp_rdma_write(struct hp *h, const void *data, uint32_t len, uint64_t raddr,
                       VIP_MEM_HANDLE rh, bool with_imm, uint32_t imm)
{
    CHECK(len <= h->sbuf_len);
    VIP_DESCRIPTOR *d = next_sdesc(h);
    memcpy(h->sbuf, data, len);
    d->CS.Control = VIP_CONTROL_OP_RDMAWRITE | (with_imm ? VIP_CONTROL_IMMEDIATE : 0);
    d->CS.ImmediateData = imm;
    d->CS.SegCount = 2;
    d->CS.Length = len;
    d->DS[0].Remote.Data.AddressBits = raddr;
    d->DS[0].Remote.Handle = rh;
    d->DS[1].Local.Data.Address = h->sbuf;
    d->DS[1].Local.Handle = h->sbuf_mh;
    d->DS[1].Local.Length = len;
    return post_send(h, d);
}

struct shm_reg_export *hp_own_export(const struct hp *h)
{
    struct shm_reg_export *regs = hp_own_regs(h);
    for (unsigned i = 0; h->rdma_mh && i < SHM_REG_SLOTS; i++)
        if (atomic_load(&regs[i].handle) == h->rdma_mh)
            return &regs[i];
    return NULL;
}

/* ---- Raw writes -------------------------------------------------------------------- */

uint32_t hp_next_seq(const struct hp *h)
{
    return hp_peer(h)->consumed + 1;
}

#ifdef __SANITIZE_THREAD__
/* ThreadSanitizer's dynamic annotations (its runtime defines them). */
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
void AnnotateIgnoreWritesBegin(const char *file, int line);
void AnnotateIgnoreWritesEnd(const char *file, int line);

void hp_foreign_begin(void)
{
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
}

void hp_foreign_end(void)
{
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
}
#else
void hp_foreign_begin(void) {}
void hp_foreign_end(void) {}
#endif

void hp_ring(struct hp *h)
{
    struct shm_peer *p = hp_peer(h);
    if (p->wake_sock >= 0) {
        char one = 1;
        ssize_t n = send(p->wake_sock, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)n;
    } else {
        atomic_fetch_add(p->wake_word, 1);
        syscall(SYS_futex, p->wake_word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    }
}

void hp_raw_complete(struct hp *h, uint32_t seq, uint32_t status, uint32_t length, uint32_t imm,
                     uint32_t inline_len, const void *inline_data)
{
    struct shm_peer *p = hp_peer(h);
    struct shm_cmpl *c = &p->rx->cmpl[p->consumed & p->mask];
    c->status = status;
    c->length = length;
    c->imm = imm;
    c->inline_len = inline_len;
    if (inline_data)
        memcpy(c->inline_data, inline_data,
               inline_len < SHM_INLINE_MAX ? inline_len : SHM_INLINE_MAX);
    if (seq == p->consumed + 1)
        p->consumed++;
    atomic_store_explicit(&c->seq, seq, memory_order_release);
    hp_ring(h);
}

/* ---- Under sovia run ------------------------------------------------------------------- */

void *hp_victim_ctl_writable(const struct hp *h, size_t *len)
{
    struct shm_peer *p = hp_peer(h);
    if (mprotect((void *)p->ctl, p->ctl_len, PROT_READ | PROT_WRITE) != 0)
        return NULL;
    *len = p->ctl_len;
    return (void *)p->ctl;
}

_Atomic uint32_t *hp_victim_armed_writable(const struct hp *h)
{
    struct shm_peer *p = hp_peer(h);
    if (mprotect(p->armed_map, p->armed_len, PROT_READ | PROT_WRITE) != 0)
        return NULL;
    return (_Atomic uint32_t *)p->wake_armed;
}

/* ---- The catalogue -------------------------------------------------------------------- */

uint32_t hp_interesting(uint64_t *rng, uint32_t near)
{
    static const uint32_t fixed[] = {0u,          1u,          2u,         31u,        32u,
                                     33u,         63u,         64u,        0x7fu,      0x80u,
                                     0xffu,       0x100u,      0xfffu,     0x1000u,    0xffffu,
                                     0x10000u,    0x7fffffffu, 0x80000000u, 0xfffffffeu,
                                     0xffffffffu};
    switch (hc_below(rng, 5)) {
    case 0:
        return fixed[hc_below(rng, sizeof fixed / sizeof fixed[0])];
    case 1:
        return near + hc_below(rng, 5) - 2; /* off by one or two either way */
    case 2:
        return near ^ (1u << hc_below(rng, 32));
    case 3:
        return near + (hc_below(rng, 2) ? 0x10000u : 0u - 0x10000u);
    default:
        return hc_rand32(rng);
    }
}

/* A completion slot value the victim will take as the next one, most of the time. */
static uint32_t believable_seq(struct hp *h, uint64_t *rng, uint32_t slot_seq)
{
    return hc_below(rng, 4) ? hp_next_seq(h) : hp_interesting(rng, slot_seq);
}

void hp_random_write(struct hp *h, uint64_t *rng, char *what, size_t what_len)
{
    struct shm_peer *p = hp_peer(h);
    struct shm_ctl *ctl = hp_own_ctl(h);
    uint32_t depth = h->svi->depth;
    uint32_t s = hc_below(rng, depth);
    switch (hc_below(rng, 14)) {
    case 0: {
        uint32_t v = hp_interesting(rng, atomic_load(&ctl->live.posted));
        atomic_store(&ctl->live.posted, v);
        snprintf(what, what_len, "own posted = %#x", v);
        return;
    }
    case 1: {
        uint32_t v = hp_interesting(rng, atomic_load(&ctl->post[s].seq));
        atomic_store(&ctl->post[s].seq, v);
        snprintf(what, what_len, "own post[%u].seq = %#x", s, v);
        return;
    }
    case 2: {
        uint16_t v = (uint16_t)hp_interesting(rng, ctl->post[s].nseg);
        ctl->post[s].nseg = v;
        snprintf(what, what_len, "own post[%u].nseg = %u", s, v);
        return;
    }
    case 3: {
        uint32_t v = hp_interesting(rng, ctl->post[s].total);
        ctl->post[s].total = v;
        snprintf(what, what_len, "own post[%u].total = %#x", s, v);
        return;
    }
    case 4: {
        unsigned k = hc_below(rng, SHM_POST_SEGS);
        bool off = hc_below(rng, 2);
        uint32_t *f = off ? &ctl->post[s].seg[k].off : &ctl->post[s].seg[k].len;
        uint32_t v = hp_interesting(rng, *f);
        *f = v;
        snprintf(what, what_len, "own post[%u].seg[%u].%s = %#x", s, k, off ? "off" : "len", v);
        return;
    }
    case 5: {
        struct shm_reg_export *x = &hp_own_regs(h)[hc_below(rng, 2)];
        unsigned f = hc_below(rng, 4);
        uint32_t v;
        if (f == 0) {
            v = hp_interesting(rng, atomic_load(&x->handle));
            atomic_store(&x->handle, v);
        } else if (f == 1) {
            v = hp_interesting(rng, x->len);
            x->len = v;
        } else if (f == 2) {
            v = hp_interesting(rng, (uint32_t)x->base);
            x->base = (x->base & ~(uint64_t)0xffffffffu) | v;
        } else {
            v = hp_interesting(rng, x->rx_off);
            x->rx_off = v;
        }
        snprintf(what, what_len, "own export.%s = %#x",
                 (const char *[]){"handle", "len", "base(low)", "rx_off"}[f], v);
        return;
    }
    case 6: {
        uint32_t v = hp_interesting(rng, 1);
        atomic_store(&ctl->live.recv_armed, v);
        snprintf(what, what_len, "own recv_armed = %#x", v);
        return;
    }
    case 7:
    case 8:
    case 9: { /* a whole bogus completion in the victim's next slot */
        uint32_t cur = p->consumed & p->mask;
        uint32_t seq = believable_seq(h, rng, atomic_load(&p->rx->cmpl[cur].seq));
        uint32_t status = hc_below(rng, 3) ? VIP_STATUS_OP_RECEIVE | VIP_STATUS_IMMEDIATE
                                            : hp_interesting(rng, VIP_STATUS_OP_RECEIVE);
        uint32_t length = hp_interesting(rng, (uint32_t)h->bufsz);
        uint32_t ilen = hc_below(rng, 2) ? 0 : hp_interesting(rng, length);
        uint32_t imm = hc_rand32(rng);
        uint8_t junk[SHM_INLINE_MAX];
        for (unsigned i = 0; i < sizeof junk; i++)
            junk[i] = (uint8_t)hc_rand32(rng);
        hp_raw_complete(h, seq, status, length, imm, ilen, junk);
        snprintf(what, what_len,
                 "victim cmpl[%u] = {seq %#x, status %#x, length %#x, imm %#x, inline %#x}", cur,
                 seq, status, length, imm, ilen);
        return;
    }
    case 10: { /* one field of a random completion slot */
        struct shm_cmpl *c = &p->rx->cmpl[hc_below(rng, p->depth)];
        unsigned f = hc_below(rng, 5);
        uint32_t *fields[5] = {(uint32_t *)&c->seq, &c->status, &c->length, &c->imm,
                               &c->inline_len};
        uint32_t v = hp_interesting(rng, *fields[f]);
        if (f == 0)
            atomic_store(&c->seq, v);
        else
            *fields[f] = v;
        snprintf(what, what_len, "victim cmpl[%ld].%s = %#x", (long)(c - p->rx->cmpl),
                 (const char *[]){"seq", "status", "length", "imm", "inline_len"}[f], v);
        return;
    }
    case 11: {
        uint32_t n = 1 + hc_below(rng, 1000);
        for (uint32_t i = 0; i < n; i++)
            hp_ring(h);
        snprintf(what, what_len, "victim wake-up rung %u times", n);
        return;
    }
    default: { /* bytes anywhere in the victim's data area (staging, arena) */
        uint32_t lo = p->data_off, span = p->rx_size - lo;
        uint32_t off = lo + hc_below(rng, span);
        uint32_t n = 1 + hc_below(rng, 4096);
        if (n > p->rx_size - off)
            n = p->rx_size - off;
        uint8_t *dst = (uint8_t *)p->rx + off;
        for (uint32_t i = 0; i < n; i++)
            dst[i] = (uint8_t)hc_rand32(rng);
        snprintf(what, what_len, "victim rx bytes [%#x, +%u) scribbled", off, n);
        return;
    }
    }
}
