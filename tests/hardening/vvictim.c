/* vvictim.c - the native vipl victim and its healthy peer; see vvictim.h. */
#include "vvictim.h"

#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <vipl.h>
#include <vipl_ext.h>

#include "hcommon.h"
#include "sovia/sharness.h"

#define CANARY 0xA5
#define GUARD 64u

static VIP_NIC_HANDLE nic;
static VIP_PROTECTION_HANDLE ptag;

static VIP_MEM_HANDLE reg(void *p, size_t len, bool rdma)
{
    VIP_MEM_ATTRIBUTES ma = {.Ptag = ptag, .EnableRdmaWrite = rdma};
    VIP_MEM_HANDLE mh = 0;
    CHECK(VipRegisterMem(nic, p, len, &ma, &mh) == VIP_SUCCESS);
    return mh;
}

static void quiet_handler(VIP_PVOID ctx, VIP_ERROR_DESCRIPTOR *ed)
{
    (void)ctx;
    (void)ed; /* errors are read from states and statuses */
}

static VIP_VI_STATE state_of(VIP_VI_HANDLE vi)
{
    VIP_VI_STATE st = VIP_STATE_IDLE;
    CHECK(VipQueryVi(vi, &st, NULL, NULL, NULL) == VIP_SUCCESS);
    return st;
}

/* A connection end: VI, receive buffers (even ones in the arena, odd ones
 * in private memory between canaries), descriptors and a send buffer. */
struct vend {
    VIP_VI_HANDLE vi;
    uint8_t *arena;
    VIP_MEM_HANDLE arena_mh;
    uint8_t *priv; /* VV_NRECV/2 buffers, each with GUARD bytes either side */
    VIP_MEM_HANDLE priv_mh;
    VIP_DESCRIPTOR *desc; /* VV_NRECV receive + 4 send */
    VIP_MEM_HANDLE desc_mh;
    uint8_t *sbuf;
    VIP_MEM_HANDLE sbuf_mh;
    unsigned s_next;
};

static uint8_t *rbuf(struct vend *e, unsigned i)
{
    if (i % 2 == 0)
        return e->arena + (size_t)(i / 2) * VV_BUF;
    return e->priv + (size_t)(i / 2) * (VV_BUF + 2 * GUARD) + GUARD;
}

static void post(struct vend *e, unsigned i)
{
    VIP_DESCRIPTOR *d = &e->desc[i];
    memset(d, 0, sizeof *d);
    d->CS.SegCount = 1;
    d->DS[0].Local.Data.Address = rbuf(e, i);
    d->DS[0].Local.Handle = i % 2 ? e->priv_mh : e->arena_mh;
    d->DS[0].Local.Length = VV_BUF;
    VIP_RETURN r = VipPostRecv(e->vi, d, e->desc_mh);
    CHECK_MSG(r == VIP_SUCCESS, "VipPostRecv: %s", VipxReturnString(r));
}

static void vend_open(struct vend *e, bool rdma)
{
    memset(e, 0, sizeof *e);
    VIP_VI_ATTRIBUTES va = {.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY,
                            .MaxTransferSize = VV_MTU,
                            .Ptag = ptag,
                            .EnableRdmaWrite = rdma};
    VIPX_VI_CONFIG vc = {.QueueDepth = 16, .ArenaBytes = VV_ARENA};
    CHECK(VipxCreateVi(nic, &va, NULL, NULL, &vc, &e->vi) == VIP_SUCCESS);
    VIP_PVOID base;
    VIP_ULONG len;
    CHECK(VipxViArena(e->vi, &base, &len) == VIP_SUCCESS && len >= VV_ARENA);
    e->arena = base;
    e->arena_mh = reg(e->arena, VV_ARENA, false);
    size_t plen = (VV_NRECV / 2) * (VV_BUF + 2 * GUARD);
    e->priv = aligned_alloc(64, plen);
    CHECK(e->priv != NULL);
    memset(e->priv, CANARY, plen);
    e->priv_mh = reg(e->priv, plen, false);
    size_t dlen = (VV_NRECV + 4) * sizeof(VIP_DESCRIPTOR);
    e->desc = aligned_alloc(VIP_DESCRIPTOR_ALIGNMENT, dlen);
    CHECK(e->desc != NULL);
    memset(e->desc, 0, dlen);
    e->desc_mh = reg(e->desc, dlen, false);
    e->sbuf = aligned_alloc(64, VV_MTU);
    CHECK(e->sbuf != NULL);
    e->sbuf_mh = reg(e->sbuf, VV_MTU, false);
}

static void post_all(struct vend *e)
{
    for (unsigned i = 0; i < VV_NRECV; i++)
        post(e, i);
}

/* 1 when the VI could be destroyed (its queues could be emptied). */
static int vend_close(struct vend *e)
{
    /* Also when IDLE with receives posted (a refused accept): only a
     * disconnect can flush them (docs/VIPL.md, VipDisconnect). */
    VipDisconnect(e->vi);
    int ok = 0;
    for (int tries = 0; tries < 100 && !ok; tries++) {
        VIP_DESCRIPTOR *d;
        while (VipRecvDone(e->vi, &d) == VIP_SUCCESS || VipSendDone(e->vi, &d) == VIP_SUCCESS)
            ;
        ok = VipDestroyVi(e->vi) == VIP_SUCCESS;
        if (!ok)
            s_sleep_ms(5);
    }
    if (!ok)
        return 0; /* leaked with its registrations: nothing else can be done */
    VipDeregisterMem(nic, e->arena, e->arena_mh);
    VipDeregisterMem(nic, e->priv, e->priv_mh);
    VipDeregisterMem(nic, e->desc, e->desc_mh);
    VipDeregisterMem(nic, e->sbuf, e->sbuf_mh);
    free(e->priv);
    free(e->desc);
    free(e->sbuf);
    return 1;
}

static int canaries_ok(struct vend *e)
{
    for (unsigned k = 0; k < VV_NRECV / 2; k++) {
        const uint8_t *b = e->priv + (size_t)k * (VV_BUF + 2 * GUARD);
        for (unsigned j = 0; j < GUARD; j++)
            if (b[j] != CANARY || b[GUARD + VV_BUF + j] != CANARY)
                return 0;
    }
    return 1;
}

static VIP_DESCRIPTOR *sdesc(struct vend *e)
{
    VIP_DESCRIPTOR *done;
    while (VipSendDone(e->vi, &done) == VIP_SUCCESS)
        ;
    VIP_DESCRIPTOR *d = &e->desc[VV_NRECV + e->s_next++ % 4];
    memset(d, 0, sizeof *d);
    return d;
}

/* Posts a send descriptor; the shm provider completes it at once. */
static uint32_t post_sdesc(struct vend *e, VIP_DESCRIPTOR *d)
{
    CHECK(VipPostSend(e->vi, d, e->desc_mh) == VIP_SUCCESS);
    CHECK(d->CS.Status & VIP_STATUS_DONE);
    return d->CS.Status;
}

/* Sends len bytes of sbuf with immediate data; returns the status. */
static uint32_t send_sbuf(struct vend *e, uint32_t len, uint32_t imm)
{
    VIP_DESCRIPTOR *d = sdesc(e);
    d->CS.Control = VIP_CONTROL_OP_SENDRECV | VIP_CONTROL_IMMEDIATE;
    d->CS.ImmediateData = imm;
    d->CS.SegCount = len ? 1 : 0;
    d->CS.Length = len;
    d->DS[0].Local.Data.Address = e->sbuf;
    d->DS[0].Local.Handle = e->sbuf_mh;
    d->DS[0].Local.Length = len;
    return post_sdesc(e, d);
}

static uint32_t rdma_sbuf(struct vend *e, const struct vv_rdma_cmd *c)
{
    VIP_DESCRIPTOR *d = sdesc(e);
    uint32_t len = c->len > VV_MTU ? VV_MTU : c->len;
    s_pattern_fill(e->sbuf, len, c->seed, 0);
    d->CS.Control = VIP_CONTROL_OP_RDMAWRITE;
    d->CS.SegCount = 2;
    d->CS.Length = len;
    d->DS[0].Remote.Data.AddressBits = c->raddr;
    d->DS[0].Remote.Handle = c->handle;
    d->DS[1].Local.Data.Address = e->sbuf;
    d->DS[1].Local.Handle = e->sbuf_mh;
    d->DS[1].Local.Length = len;
    return post_sdesc(e, d);
}

/* ---- The healthy connection's thread ------------------------------------------------ */

static struct vend healthy;

static void *healthy_thread(void *arg)
{
    (void)arg;
    for (;;) {
        VIP_DESCRIPTOR *d = NULL;
        VIP_RETURN r = VipRecvWait(healthy.vi, 100, &d);
        if (r == VIP_TIMEOUT)
            continue;
        CHECK_MSG(r == VIP_SUCCESS, "healthy connection: VipRecvWait %s", VipxReturnString(r));
        CHECK_MSG(!(d->CS.Status & VIP_STATUS_ERROR_MASK),
                  "healthy connection: receive status %#x", d->CS.Status);
        unsigned i = (unsigned)(d - healthy.desc);
        CHECK(i < VV_NRECV);
        uint32_t len = d->CS.Length, imm = d->CS.ImmediateData;
        if (imm == VC_END)
            return NULL;
        memcpy(healthy.sbuf, rbuf(&healthy, i), len);
        post(&healthy, i);
        uint32_t st = send_sbuf(&healthy, len, imm);
        CHECK_MSG(!(st & VIP_STATUS_ERROR_MASK), "healthy connection: echo status %#x", st);
    }
}

/* ---- The hostile connection --------------------------------------------------------------- */

static bool stop_requested(int chan)
{
    struct pollfd p = {chan, POLLIN, 0};
    return poll(&p, 1, 0) == 1;
}

static void note_err(struct vv_report *rep, uint32_t status)
{
    if (!rep->err_status)
        rep->err_status = status;
}

/* Handles one completed receive; returns 0 to go on, 1 to end the round. */
static int handle(struct vend *e, VIP_DESCRIPTOR *d, bool rdma_vi, struct vv_report *rep)
{
    if (!canaries_ok(e))
        rep->canary_bad++;
    uint32_t st = d->CS.Status;
    if (st & VIP_STATUS_ERROR_MASK) {
        rep->errs++;
        note_err(rep, st);
        return 1;
    }
    unsigned i = (unsigned)(d - e->desc);
    CHECK_MSG(i < VV_NRECV, "a completed receive that is not ours");
    uint32_t op = st & VIP_STATUS_OP_MASK, len = d->CS.Length;
    /* What can have landed: the posted buffer for a send, the arena (the
     * only memory a peer may RDMA-write) for a write with immediate data. */
    if ((op == VIP_STATUS_OP_RECEIVE && len > VV_BUF) ||
        (op == VIP_STATUS_OP_REMOTE_RDMA_WRITE && (!rdma_vi || len > VV_ARENA)) ||
        (op != VIP_STATUS_OP_RECEIVE && op != VIP_STATUS_OP_REMOTE_RDMA_WRITE)) {
        rep->bad_len++;
        post(e, i);
        return 0;
    }
    rep->msgs++;
    uint32_t imm = st & VIP_STATUS_IMMEDIATE ? d->CS.ImmediateData : 0;
    int end = 0;
    if (op == VIP_STATUS_OP_RECEIVE && imm == VC_ECHO) {
        memcpy(e->sbuf, rbuf(e, i), len);
        post(e, i);
        uint32_t s = send_sbuf(e, len, VC_ECHO);
        if (s & VIP_STATUS_ERROR_MASK) {
            rep->send_errs++;
            note_err(rep, s);
            end = 1;
        }
        return end;
    }
    if (op == VIP_STATUS_OP_RECEIVE && imm == VC_RDMA && len == sizeof(struct vv_rdma_cmd)) {
        struct vv_rdma_cmd c;
        memcpy(&c, rbuf(e, i), sizeof c);
        post(e, i);
        uint32_t s = rdma_sbuf(e, &c);
        if (s & VIP_STATUS_ERROR_MASK) {
            rep->rdma_errs++;
            note_err(rep, s);
        } else {
            rep->rdma_ok++;
        }
        memcpy(e->sbuf, &s, sizeof s);
        if (state_of(e->vi) == VIP_STATE_CONNECTED &&
            (send_sbuf(e, sizeof s, VC_RDMA_DONE) & VIP_STATUS_ERROR_MASK))
            rep->send_errs++;
        return state_of(e->vi) != VIP_STATE_CONNECTED;
    }
    if (op == VIP_STATUS_OP_RECEIVE && imm == VC_END)
        end = 1;
    post(e, i);
    return end;
}

static void serve_hostile(struct vend *e, bool rdma_vi, int chan, struct vv_report *rep)
{
    double deadline = s_now_ms() + 6000;
    bool stopping = false;
    while (s_now_ms() < deadline) {
        if (!stopping && stop_requested(chan))
            stopping = true; /* take what already completed, then end */
        VIP_DESCRIPTOR *d = NULL;
        double t0 = s_now_ms();
        VIP_RETURN r = stopping ? VipRecvDone(e->vi, &d) : VipRecvWait(e->vi, VV_WAIT_MS, &d);
        double over = s_now_ms() - t0 - (stopping ? 0 : VV_WAIT_MS);
        if (over > rep->max_over_ms)
            rep->max_over_ms = over;
        if (getenv("HARDENING_VERBOSE"))
            s_log("victim wait: %s state %d", VipxReturnString(r), state_of(e->vi));
        if (r != VIP_SUCCESS) {
            if (stopping || state_of(e->vi) != VIP_STATE_CONNECTED)
                break;
            if (r == VIP_TIMEOUT)
                rep->timeouts++;
            continue;
        }
        if (handle(e, d, rdma_vi, rep)) {
            if (d->CS.Status & VIP_STATUS_ERROR_MASK || state_of(e->vi) != VIP_STATE_CONNECTED)
                break;
            rep->ended = 1;
            break;
        }
    }
    if (!canaries_ok(e))
        rep->canary_bad++;
    VIPX_VI_STATS stats;
    CHECK(VipxQueryViStats(e->vi, &stats) == VIP_SUCCESS);
    rep->proto_errs = stats.PeerProtocolErrors;
    rep->final_state = state_of(e->vi);
}

/* ---- Roles ------------------------------------------------------------------------------- */

void vv_victim(int chan, void *arg)
{
    const struct vv_names *nm = arg;
    CHECK(VipOpenNic(NULL, &nic) == VIP_SUCCESS);
    CHECK(VipErrorCallback(nic, NULL, quiet_handler) == VIP_SUCCESS);
    CHECK(VipCreatePtag(nic, &ptag) == VIP_SUCCESS);

    vend_open(&healthy, false);
    post_all(&healthy);
    VIP_NET_ADDRESS *local = hc_addr(nm->victim_healthy);
    VIP_NET_ADDRESS *remote = hc_addr_room();
    VIP_CONN_HANDLE ch;
    VIP_VI_ATTRIBUTES ra;
    s_tok(chan, 'l');
    CHECK(VipConnectWait(nic, local, 10000, remote, &ra, &ch) == VIP_SUCCESS);
    CHECK(VipConnectAccept(ch, healthy.vi) == VIP_SUCCESS);
    struct hc_counts base = hc_counts_now(); /* the healthy thread is gone at the end */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, healthy_thread, NULL) == 0);

    for (unsigned round = 0;; round++) {
        uint64_t flags = s_get_u64(chan);
        if (flags == VV_QUIT)
            break;
        struct vend e;
        bool rdma = !(flags & VV_NO_RDMA);
        vend_open(&e, rdma);
        if (!(flags & VV_NO_PREPOST))
            post_all(&e);
        char disc[64];
        hc_round_disc(disc, sizeof disc, nm->victim_round, round);
        VIP_NET_ADDRESS *la = hc_addr(disc);
        struct vv_report rep = {0};
        s_tok(chan, 'r');
        VIP_RETURN r = VipConnectWait(nic, la, 5000, remote, &ra, &ch);
        if (r == VIP_SUCCESS)
            rep.accepted = VipConnectAccept(ch, e.vi) == VIP_SUCCESS;
        VipxUnlisten(nic, la);
        free(la);
        if (rep.accepted) {
            if (flags & VV_NO_PREPOST)
                post_all(&e);
            serve_hostile(&e, rdma, chan, &rep);
        } else {
            rep.final_state = state_of(e.vi);
        }
        s_want(chan, 's'); /* the test's stop comes in every round */
        rep.destroy_ok = vend_close(&e);
        s_put(chan, &rep, sizeof rep);
    }
    CHECK(pthread_join(t, NULL) == 0); /* the healthy peer sent VC_END */
    struct hc_counts now = hc_counts_settle(&base, 2000);
    hc_counts_check(&base, &now, "victim after all hostile rounds");
    CHECK(vend_close(&healthy));
    free(local);
    free(remote);
    CHECK(VipDestroyPtag(nic, ptag) == VIP_SUCCESS);
    CHECK(VipCloseNic(nic) == VIP_SUCCESS);
    s_tok(chan, 'x');
}

void vv_healthy(int chan, void *arg)
{
    const struct vv_names *nm = arg;
    CHECK(VipOpenNic(NULL, &nic) == VIP_SUCCESS);
    CHECK(VipCreatePtag(nic, &ptag) == VIP_SUCCESS);
    struct vend e;
    vend_open(&e, false);
    post_all(&e);
    VIP_NET_ADDRESS *local = hc_addr(nm->healthy);
    VIP_NET_ADDRESS *remote = hc_addr(nm->victim_healthy);
    VIP_VI_ATTRIBUTES ra;
    VIP_RETURN r;
    double end = s_now_ms() + 10000;
    while ((r = VipConnectRequest(e.vi, local, remote, 5000, &ra)) == VIP_NO_MATCH &&
           s_now_ms() < end)
        s_sleep_ms(2);
    CHECK_MSG(r == VIP_SUCCESS, "healthy connect: %s", VipxReturnString(r));
    for (;;) {
        uint64_t seed = s_get_u64(chan);
        if (seed == VV_QUIT)
            break;
        uint32_t len = 1 + (uint32_t)(s_mix64(seed) % VV_BUF);
        s_pattern_fill(e.sbuf, len, seed, 0);
        double t0 = s_now_ms();
        uint32_t st = send_sbuf(&e, len, 0x1000u + (uint32_t)(seed & 0xff));
        CHECK_MSG(!(st & VIP_STATUS_ERROR_MASK), "healthy send status %#x", st);
        VIP_DESCRIPTOR *d = NULL;
        r = VipRecvWait(e.vi, 2000, &d);
        CHECK_MSG(r == VIP_SUCCESS, "healthy echo: %s", VipxReturnString(r));
        CHECK_MSG(!(d->CS.Status & VIP_STATUS_ERROR_MASK), "healthy echo status %#x",
                  d->CS.Status);
        unsigned i = (unsigned)(d - e.desc);
        CHECK_EQ(d->CS.Length, len);
        long bad = s_pattern_check(rbuf(&e, i), len, seed, 0);
        CHECK_MSG(bad < 0, "healthy echo differs at byte %ld of %u", bad, len);
        CHECK_EQ(d->CS.ImmediateData, 0x1000u + (uint32_t)(seed & 0xff));
        CHECK_MSG(s_now_ms() - t0 < 1000, "healthy echo took %.0f ms", s_now_ms() - t0);
        post(&e, i);
        s_tok(chan, 'k');
    }
    uint32_t st = send_sbuf(&e, 0, VC_END);
    CHECK(!(st & VIP_STATUS_ERROR_MASK));
    s_tok(chan, 'h');
    s_want(chan, 'x'); /* the victim has joined its thread */
    CHECK(vend_close(&e));
    free(local);
    free(remote);
    CHECK(VipDestroyPtag(nic, ptag) == VIP_SUCCESS);
    CHECK(VipCloseNic(nic) == VIP_SUCCESS);
}
