/*
 * sendrecv: send/receive between two processes, for each reliability level
 * (docs/VIPL.md "Posting and completion"):
 *   1. messages of 0 B .. 1 MiB into receive buffers inside the VI arena,
 *   2. the same into ordinary (staged) buffers,
 *   3. scatter receives and gather sends (arena, staged and mixed),
 *   4. 300 posted receives completing strictly in posting order,
 *   4b. one message of exactly MaxTransferSize (4 MiB),
 *   5. the reverse direction, 1 MiB into the parent's arena and staging.
 * Every byte is checked, so are the bytes around each buffer (a canary),
 * Status / Length / ImmediateData of every completion and the VI statistics.
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

#define CANARY 0xCD
#define SLACK 64

static const VIP_UINT32 sizes[] = {0, 1, 4, 63, 64, 4095, 4096, 65536, 1024 * 1024};
#define NSIZES (sizeof sizes / sizeof sizes[0])
#define NMANY 300

struct cfg {
    VIP_RELIABILITY_LEVEL rel;
    char srv[80], cli[80];
};

static size_t bump(size_t *off, size_t len, size_t limit)
{
    size_t o = *off;
    *off += (len + 63) & ~(size_t)63;
    CHECK_MSG(*off <= limit, "test layout overflows its buffer");
    return o;
}

static VIP_UINT32 imm_for(unsigned k)
{
    return 0xA5000000u + k;
}

/* Phase 3 layouts, shared by both sides. */
static const VIP_UINT32 r0_len[4] = {100, 1, 4000, 5000};
#define M0_LEN 9101u
#define R1_SEGS 16
#define R2_SEG 1000u
#define M2_LEN 2500u
#define R3_CAP 70000u
#define M3_SEGS 16

static VIP_UINT32 r1_len(unsigned j)
{
    return 37 * j + 1;
}

static VIP_UINT32 m1_len(void)
{
    VIP_UINT32 t = 0;
    for (unsigned j = 0; j < R1_SEGS; j++)
        t += r1_len(j);
    return t;
}

static VIP_UINT32 m3_piece(unsigned j)
{
    return 4000 + 13 * j;
}

static VIP_UINT32 m3_len(void)
{
    VIP_UINT32 t = 0;
    for (unsigned j = 0; j < M3_SEGS; j++)
        t += m3_piece(j);
    return t;
}

/* A scatter list as posted: where each segment is and how much room it has. */
struct scatter {
    unsigned n;
    unsigned char *ptr[R1_SEGS];
    VIP_UINT32 len[R1_SEGS];
};

static void post_scatter(VIP_VI_HANDLE vi, h_descs *d, unsigned i, struct scatter *s,
                         h_mem **mem)
{
    VIP_DESCRIPTOR *x = h_desc(d, i);
    h_desc_prep(x, 0, 0);
    for (unsigned j = 0; j < s->n; j++)
        h_desc_add(x, s->ptr[j], mem[j]->mh, s->len[j]);
    CHECK_OK(VipPostRecv(vi, x, d->m.mh));
}

/* Checks a completed scatter receive of `total` bytes of pattern `seed`. */
static void check_scatter(const struct scatter *s, VIP_UINT32 total, uint64_t seed)
{
    unsigned char *want = malloc(total ? total : 1);
    CHECK(want != NULL);
    h_fill_random(want, total, seed);
    VIP_UINT32 pos = 0;
    for (unsigned j = 0; j < s->n; j++) {
        VIP_UINT32 n = total - pos < s->len[j] ? total - pos : s->len[j];
        CHECK_MSG(memcmp(s->ptr[j], want + pos, n) == 0,
                  "scatter segment %u (%u bytes at message offset %u) holds wrong data", j, n,
                  pos);
        long bad = h_check_byte(s->ptr[j] + n, s->len[j] - n + SLACK, CANARY);
        CHECK_MSG(bad < 0, "scatter segment %u: byte %ld past the data was written", j,
                  (long)n + bad);
        pos += n;
    }
    CHECK_EQ(pos, total);
    free(want);
}

static void check_recv(VIP_DESCRIPTOR *x, VIP_DESCRIPTOR *want, VIP_UINT32 len, int imm,
                       VIP_UINT32 immval)
{
    CHECK_MSG(x == want, "completion out of order: got descriptor %p, expected %p", (void *)x,
              (void *)want);
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE | (imm ? VIP_STATUS_IMMEDIATE : 0));
    CHECK_EQ(x->CS.Length, len);
    if (imm)
        CHECK_EQ(x->CS.ImmediateData, immval);
}

/* ---- peer: the receiver of phases 1-4, the sender of phase 5 ---------------- */

static void peer(int fd, void *arg)
{
    struct cfg *c = arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, c->rel);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 512, 4 * H_MIB, 9 * H_MIB);
    VIP_PVOID abase;
    VIP_ULONG alen;
    CHECK_OK(VipxViArena(vi, &abase, &alen));
    CHECK(abase != NULL && alen >= 9 * H_MIB);
    h_mem ar = h_mem_reg(nic, t, abase, alen, 0);
    h_mem st = h_mem_alloc(nic, t, 2 * H_MIB, 0);
    h_descs d = h_descs_alloc(nic, t, 18 + 4 + NMANY);
    size_t aoff = 0, soff = 0;
    VIP_UINT64 bytes = 0;

    /* Phases 1 and 2: pre-posted before the connection exists. */
    unsigned char *rbuf[2 * NSIZES];
    for (unsigned k = 0; k < 2 * NSIZES; k++) {
        VIP_UINT32 cap = sizes[k % NSIZES] + SLACK;
        h_mem *m = k < NSIZES ? &ar : &st;
        rbuf[k] = m->ptr + bump(k < NSIZES ? &aoff : &soff, cap, m->len);
        memset(rbuf[k], CANARY, cap);
        h_post_recv1(vi, &d, k, rbuf[k], m->mh, cap);
    }
    h_accept(nic, vi, c->srv, NULL);
    for (unsigned k = 0; k < 2 * NSIZES; k++) {
        VIP_UINT32 len = sizes[k % NSIZES];
        VIP_DESCRIPTOR *x = h_recv_wait(vi, 10000);
        check_recv(x, h_desc(&d, k), len, k % 2, imm_for(k));
        CHECK_RANDOM(rbuf[k], len, 1000 + k);
        CHECK_BYTES(rbuf[k] + len, SLACK, CANARY);
        bytes += len;
    }

    /* Phase 3: scatter lists. */
    struct scatter s0 = {4, {0}, {0}}, s1 = {R1_SEGS, {0}, {0}}, s2 = {4, {0}, {0}},
                   s3 = {1, {0}, {0}};
    h_mem *m0[R1_SEGS], *m1[R1_SEGS], *m2[R1_SEGS], *m3[R1_SEGS];
    for (unsigned j = 0; j < 4; j++) {
        s0.len[j] = r0_len[j];
        s0.ptr[j] = ar.ptr + bump(&aoff, r0_len[j] + SLACK, ar.len);
        m0[j] = &ar;
    }
    for (unsigned j = 0; j < R1_SEGS; j++) {
        s1.len[j] = r1_len(j);
        s1.ptr[j] = st.ptr + bump(&soff, r1_len(j) + SLACK, st.len);
        m1[j] = &st;
    }
    for (unsigned j = 0; j < 4; j++) {
        h_mem *m = j % 2 ? &st : &ar;
        s2.len[j] = R2_SEG;
        s2.ptr[j] = m->ptr + bump(j % 2 ? &soff : &aoff, R2_SEG + SLACK, m->len);
        m2[j] = m;
    }
    s3.len[0] = R3_CAP;
    s3.ptr[0] = ar.ptr + bump(&aoff, R3_CAP + SLACK, ar.len);
    m3[0] = &ar;
    struct scatter *sl[4] = {&s0, &s1, &s2, &s3};
    h_mem **ml[4] = {m0, m1, m2, m3};
    for (unsigned i = 0; i < 4; i++) {
        for (unsigned j = 0; j < sl[i]->n; j++)
            memset(sl[i]->ptr[j], CANARY, sl[i]->len[j] + SLACK);
        post_scatter(vi, &d, 18 + i, sl[i], ml[i]);
    }
    h_signal(fd, '3');
    VIP_UINT32 mlen[4] = {M0_LEN, m1_len(), M2_LEN, m3_len()};
    for (unsigned i = 0; i < 4; i++) {
        VIP_DESCRIPTOR *x = h_recv_wait(vi, 10000);
        check_recv(x, h_desc(&d, 18 + i), mlen[i], 0, 0);
        check_scatter(sl[i], mlen[i], 2000 + i);
        bytes += mlen[i];
    }

    /* Phase 4: many receives, alternately in the arena and staged. */
    unsigned char *mbuf[NMANY];
    for (unsigned i = 0; i < NMANY; i++) {
        h_mem *m = i % 2 ? &st : &ar;
        mbuf[i] = m->ptr + bump(i % 2 ? &soff : &aoff, 64, m->len);
        memset(mbuf[i], CANARY, 64);
        h_post_recv1(vi, &d, 22 + i, mbuf[i], m->mh, 64);
    }
    h_signal(fd, '4');
    for (unsigned i = 0; i < NMANY; i++) {
        VIP_DESCRIPTOR *x = h_recv_wait(vi, 10000);
        check_recv(x, h_desc(&d, 22 + i), 16, i % 3 == 0, i);
        CHECK_RANDOM(mbuf[i], 16, 5000 + i);
        CHECK_BYTES(mbuf[i] + 16, 48, CANARY);
        bytes += 16;
    }
    VIP_DESCRIPTOR *none;
    CHECK_RET(VipRecvDone(vi, &none), VIP_NOT_DONE);

    /* Phase 4b: one message of exactly MaxTransferSize (4 MiB). */
    unsigned char *big = ar.ptr + bump(&aoff, H_NIC_MTU + SLACK, ar.len);
    memset(big, CANARY, H_NIC_MTU + SLACK);
    /* (A receive longer than MaxTransferSize would itself be a LENGTH_ERROR.) */
    h_post_recv1(vi, &d, 0, big, ar.mh, H_NIC_MTU);
    h_signal(fd, '6');
    VIP_DESCRIPTOR *bx = h_recv_wait(vi, 10000);
    check_recv(bx, h_desc(&d, 0), H_NIC_MTU, 0, 0);
    CHECK_RANDOM(big, H_NIC_MTU, 6000);
    CHECK_BYTES(big + H_NIC_MTU, SLACK, CANARY);
    bytes += H_NIC_MTU;

    VIPX_VI_STATS stats;
    CHECK_OK(VipxQueryViStats(vi, &stats));
    CHECK_EQ(stats.RecvsCompleted, 2 * NSIZES + 4 + NMANY + 1);
    CHECK_EQ(stats.BytesReceived, bytes);
    /* Staged: phase 2, the staged and the mixed scatter, the odd phase-4 receives. */
    CHECK_EQ(stats.StagedRecvs, NSIZES + 2 + NMANY / 2);
    CHECK_EQ(stats.DroppedNoRecv, 0);

    /* Phase 5: the parent pre-posted two 1 MiB receives. */
    h_mem src = h_mem_alloc(nic, t, H_MIB, 0);
    for (unsigned i = 0; i < 2; i++) {
        h_fill_random(src.ptr, H_MIB, 7000 + i);
        VIP_UINT32 imm = i ? 0xFFFFFFFFu : 0;
        h_post_send1(vi, &d, i, src.ptr, src.mh, H_MIB, i ? VIP_CONTROL_IMMEDIATE : 0, imm);
        VIP_DESCRIPTOR *x = h_send_done(vi);
        CHECK(x == h_desc(&d, i));
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
        CHECK_EQ(x->CS.Length, H_MIB);
    }
    h_signal(fd, '5');

    h_expect(fd, 'Q');
    h_mem_free(&ar);
    h_vi_teardown(vi);
    h_mem_free(&src);
    h_mem_free(&st);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
}

/* ---- parent ------------------------------------------------------------------ */

static void send_and_check(VIP_VI_HANDLE vi, h_descs *d, unsigned i, VIP_UINT32 len)
{
    CHECK_OK(VipPostSend(vi, h_desc(d, i), d->m.mh));
    /* Sends complete inside VipPostSend: no waiting. */
    VIP_DESCRIPTOR *x = h_send_done(vi);
    CHECK(x == h_desc(d, i));
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
    CHECK_EQ(x->CS.Length, len);
    VIP_DESCRIPTOR *none;
    CHECK_RET(VipSendDone(vi, &none), VIP_NOT_DONE);
}

static void run(struct cfg *c, h_peer *p, VIP_NIC_HANDLE nic)
{
    h_log("reliability level 0x%x", c->rel);
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, c->rel);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 64, 2 * H_MIB, 2 * H_MIB);
    VIP_PVOID abase;
    VIP_ULONG alen;
    CHECK_OK(VipxViArena(vi, &abase, &alen));
    CHECK(abase != NULL && alen >= 2 * H_MIB);
    h_mem ar = h_mem_reg(nic, t, abase, alen, 0);
    h_mem src = h_mem_alloc(nic, t, H_NIC_MTU, 0);
    h_mem st = h_mem_alloc(nic, t, H_MIB + SLACK, 0);
    h_descs d = h_descs_alloc(nic, t, 4);
    h_descs sd = h_descs_alloc(nic, t, 1);
    VIP_UINT64 sent = 0;

    /* Phase 5's receives, pre-posted while IDLE. */
    memset(ar.ptr, CANARY, H_MIB + SLACK);
    memset(st.ptr, CANARY, H_MIB + SLACK);
    h_post_recv1(vi, &d, 0, ar.ptr, ar.mh, H_MIB + SLACK);
    h_post_recv1(vi, &d, 1, st.ptr, st.mh, H_MIB + SLACK);

    VIP_VI_ATTRIBUTES ra;
    h_connect(vi, c->cli, c->srv, &ra);
    CHECK_EQ(ra.ReliabilityLevel, c->rel);

    /* Phases 1 and 2. Size 0 is sent once with no segment, once with an empty one. */
    VIP_DESCRIPTOR *x = h_desc(&sd, 0);
    for (unsigned k = 0; k < 2 * NSIZES; k++) {
        VIP_UINT32 len = sizes[k % NSIZES];
        h_fill_random(src.ptr, len, 1000 + k);
        h_desc_prep(x, k % 2 ? VIP_CONTROL_IMMEDIATE : 0, imm_for(k));
        if (len || k >= NSIZES)
            h_desc_add(x, src.ptr, src.mh, len);
        send_and_check(vi, &sd, 0, len);
        if (k % 2)
            CHECK_EQ(x->CS.ImmediateData, imm_for(k));
        sent += len;
    }

    /* Phase 3: gathers from three regions. */
    h_expect(p->fd, '3');
    h_mem g[3];
    for (unsigned i = 0; i < 3; i++)
        g[i] = h_mem_alloc(nic, t, 64 * 1024, 0);
    unsigned char *msg = malloc(R3_CAP);
    CHECK(msg != NULL);
    /* M0: one segment. */
    h_fill_random(src.ptr, M0_LEN, 2000);
    h_desc_prep(x, 0, 0);
    h_desc_add(x, src.ptr, src.mh, M0_LEN);
    send_and_check(vi, &sd, 0, M0_LEN);
    /* M1: 16 segments whose boundaries differ from the receiver's. */
    VIP_UINT32 m1 = m1_len(), pos = 0;
    h_fill_random(msg, m1, 2001);
    h_desc_prep(x, 0, 0);
    size_t goff[3] = {0, 0, 0};
    for (unsigned j = 0; j < R1_SEGS; j++) {
        VIP_UINT32 n = r1_len(R1_SEGS - 1 - j);
        unsigned char *where = g[j % 3].ptr + bump(&goff[j % 3], n, g[j % 3].len);
        memcpy(where, msg + pos, n);
        h_desc_add(x, where, g[j % 3].mh, n);
        pos += n;
    }
    CHECK_EQ(pos, m1);
    send_and_check(vi, &sd, 0, m1);
    /* M2: shorter than the receiver's scatter list. */
    h_fill_random(src.ptr, M2_LEN, 2002);
    h_desc_prep(x, 0, 0);
    h_desc_add(x, src.ptr, src.mh, M2_LEN);
    send_and_check(vi, &sd, 0, M2_LEN);
    /* M3: 16 pieces into one receive segment. */
    VIP_UINT32 m3 = m3_len();
    h_fill_random(msg, m3, 2003);
    h_desc_prep(x, 0, 0);
    pos = 0;
    goff[0] = goff[1] = goff[2] = 0;
    for (unsigned j = 0; j < M3_SEGS; j++) {
        VIP_UINT32 n = m3_piece(j);
        unsigned char *where = g[j % 3].ptr + bump(&goff[j % 3], n, g[j % 3].len);
        memcpy(where, msg + pos, n);
        h_desc_add(x, where, g[j % 3].mh, n);
        pos += n;
    }
    send_and_check(vi, &sd, 0, m3);
    sent += M0_LEN + m1 + M2_LEN + m3;
    free(msg);
    for (unsigned i = 0; i < 3; i++)
        h_mem_free(&g[i]);

    /* Phase 4. */
    h_expect(p->fd, '4');
    for (unsigned i = 0; i < NMANY; i++) {
        h_fill_random(src.ptr, 16, 5000 + i);
        h_desc_prep(x, i % 3 == 0 ? VIP_CONTROL_IMMEDIATE : 0, i);
        h_desc_add(x, src.ptr, src.mh, 16);
        send_and_check(vi, &sd, 0, 16);
        sent += 16;
    }

    /* Phase 4b. */
    h_expect(p->fd, '6');
    h_fill_random(src.ptr, H_NIC_MTU, 6000);
    h_desc_prep(x, 0, 0);
    h_desc_add(x, src.ptr, src.mh, H_NIC_MTU);
    send_and_check(vi, &sd, 0, H_NIC_MTU);
    sent += H_NIC_MTU;

    /* Phase 5: the peer sends 1 MiB into our arena, then into staging. */
    h_expect(p->fd, '5');
    x = h_recv_wait(vi, 10000);
    check_recv(x, h_desc(&d, 0), H_MIB, 0, 0);
    CHECK_RANDOM(ar.ptr, H_MIB, 7000);
    CHECK_BYTES(ar.ptr + H_MIB, SLACK, CANARY);
    x = h_recv_wait(vi, 10000);
    check_recv(x, h_desc(&d, 1), H_MIB, 1, 0xFFFFFFFFu);
    CHECK_RANDOM(st.ptr, H_MIB, 7001);
    CHECK_BYTES(st.ptr + H_MIB, SLACK, CANARY);

    VIPX_VI_STATS stats;
    CHECK_OK(VipxQueryViStats(vi, &stats));
    CHECK_EQ(stats.SendsCompleted, 2 * NSIZES + 4 + NMANY + 1);
    CHECK_EQ(stats.BytesSent, sent);
    CHECK_EQ(stats.RecvsCompleted, 2);
    CHECK_EQ(stats.BytesReceived, 2 * H_MIB);
    CHECK_EQ(stats.StagedRecvs, 1);

    h_signal(p->fd, 'Q');
    h_peer_finish(p);
    h_mem_free(&ar);
    h_vi_teardown(vi);
    h_mem_free(&src);
    h_mem_free(&st);
    h_descs_free(&d);
    h_descs_free(&sd);
    CHECK_OK(VipDestroyPtag(nic, t));
}

int main(void)
{
    h_init("sendrecv", 60);
    static struct cfg cfgs[3] = {{VIP_SERVICE_UNRELIABLE, "", ""},
                                 {VIP_SERVICE_RELIABLE_DELIVERY, "", ""},
                                 {VIP_SERVICE_RELIABLE_RECEPTION, "", ""}};
    h_peer peers[3];
    for (int i = 0; i < 3; i++) {
        h_disc(cfgs[i].srv, sizeof cfgs[i].srv);
        h_disc(cfgs[i].cli, sizeof cfgs[i].cli);
        peers[i] = h_fork(peer, &cfgs[i]);
    }
    VIP_NIC_HANDLE nic = h_open_nic();
    for (int i = 0; i < 3; i++)
        run(&cfgs[i], &peers[i], nic);
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
