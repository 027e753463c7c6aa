/*
 * cq: completion queues (docs/VIPL.md "Completion queues", "Waiting").
 * One receive CQ and one send CQ serve three VIs connected to two peers
 * (two connections to peer 1, one to peer 2). The peers send concurrently;
 * VipCQDone must report each completion exactly once, with the right VI and
 * RecvQueue flag, in posting order per queue, then VIP_NOT_DONE. Also:
 * VipCreateCQ limits, VipCQWait timeout and wake-up, VipResizeCQ against the
 * pending entries, VipDestroyCQ while VIs are attached.
 */
#include "harness.h"

#include <stdlib.h>

#define NVI 3
#define PER_VI 20
#define MSG 48

struct cfg {
    int first, count; /* global VI indices first .. first+count-1 */
    char srv[NVI][80];
};

static char cli_disc[NVI][80];

static uint64_t seed_of(int gvi, int seq)
{
    return 1000u * (unsigned)gvi + (unsigned)seq;
}

/* ---- peers ------------------------------------------------------------------- */

static void peer(int fd, void *arg)
{
    struct cfg *c = arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_HANDLE vi[NVI];
    h_mem buf = h_mem_alloc(nic, t, 64 * 1024, 0);
    h_descs d = h_descs_alloc(nic, t, NVI * 8);
    for (int i = 0; i < c->count; i++) {
        VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
        vi[i] = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
        for (int j = 0; j < 2; j++)
            h_post_recv1(vi[i], &d, (unsigned)(i * 8 + j), buf.ptr + 4096 * (i * 2 + j), buf.mh,
                         4096);
        h_accept(nic, vi[i], c->srv[i], NULL);
    }

    /* Phase 1: PER_VI messages per VI, interleaved in an uneven pattern. */
    h_expect(fd, 'G');
    int seq[NVI] = {0};
    unsigned char *src = buf.ptr + 32768;
    for (int n = 0; n < PER_VI * c->count; n++) {
        int i = (n * 7 + n / 3) % c->count;
        if (seq[i] == PER_VI)
            for (i = 0; seq[i] == PER_VI; i++) {
            }
        h_fill_random(src, MSG, seed_of(c->first + i, seq[i]));
        h_post_send1(vi[i], &d, (unsigned)(i * 8 + 2), src, buf.mh, MSG, VIP_CONTROL_IMMEDIATE,
                     (VIP_UINT32)seq[i]);
        CHECK_STATUS(h_send_done(vi[i]), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
        seq[i]++;
    }
    h_signal(fd, 'D');

    /* Phase 2: the parent sends two messages per VI (its send CQ). */
    h_expect(fd, 'S');
    for (int i = 0; i < c->count; i++)
        for (int j = 0; j < 2; j++) {
            VIP_DESCRIPTOR *x = h_recv_wait(vi[i], 5000);
            CHECK(x == h_desc(&d, (unsigned)(i * 8 + j)));
            CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
            CHECK_EQ(x->CS.Length, MSG);
            CHECK_RANDOM(buf.ptr + 4096 * (i * 2 + j), MSG, seed_of(c->first + i, 100 + j));
        }
    h_signal(fd, 'V');

    /* Phase 3 (last peer only): one late message while the parent sits in VipCQWait. */
    if (c->first + c->count == NVI) {
        h_expect(fd, 'W');
        h_sleep_ms(200);
        int i = c->count - 1;
        h_fill_random(src, MSG, 4242);
        h_post_send1(vi[i], &d, (unsigned)(i * 8 + 3), src, buf.mh, MSG, 0, 0);
        CHECK_STATUS(h_send_done(vi[i]), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
    }

    h_expect(fd, 'Q');
    for (int i = 0; i < c->count; i++)
        h_vi_teardown(vi[i]);
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
}

/* ---- parent ---------------------------------------------------------------------- */

static int vi_index(VIP_VI_HANDLE *vis, VIP_VI_HANDLE v)
{
    for (int i = 0; i < NVI; i++)
        if (vis[i] == v)
            return i;
    FAILF("VipCQDone reported VI %p, which is not attached to this CQ", v);
}

static void test_create_limits(VIP_NIC_HANDLE nic)
{
    VIP_CQ_HANDLE cq = NULL;
    CHECK_RET(VipCreateCQ(nic, 0, &cq), VIP_INVALID_PARAMETER);
    CHECK_RET(VipCreateCQ(nic, 65537, &cq), VIP_INVALID_PARAMETER);
    CHECK_OK(VipCreateCQ(nic, 65536, &cq));
    CHECK_OK(VipDestroyCQ(cq));
    CHECK_OK(VipCreateCQ(nic, 1, &cq));

    /* Empty: NOT_DONE, and VipCQWait times out after about its timeout. */
    VIP_VI_HANDLE v = NULL;
    VIP_BOOLEAN rq = 7;
    CHECK_RET(VipCQDone(cq, &v, &rq), VIP_NOT_DONE);
    double t0 = h_now_ms();
    CHECK_RET(VipCQWait(cq, 300, &v, &rq), VIP_TIMEOUT);
    double el = h_now_ms() - t0;
    CHECK_MSG(el >= 250 && el < 5000, "VipCQWait(300 ms) timed out after %.0f ms", el);
    CHECK_OK(VipResizeCQ(cq, 100));
    CHECK_OK(VipResizeCQ(cq, 1));
    CHECK_OK(VipDestroyCQ(cq));
}

int main(void)
{
    h_init("cq", 30);
    static struct cfg cfgs[2] = {{0, 2, {"", "", ""}}, {2, 1, {"", "", ""}}};
    for (int i = 0; i < NVI; i++) {
        struct cfg *c = i < 2 ? &cfgs[0] : &cfgs[1];
        h_disc(c->srv[i - c->first], sizeof c->srv[0]);
        h_disc(cli_disc[i], sizeof cli_disc[i]);
    }
    h_peer peers[2] = {h_fork(peer, &cfgs[0]), h_fork(peer, &cfgs[1])};
    h_peer *peer_of[NVI] = {&peers[0], &peers[0], &peers[1]};

    VIP_NIC_HANDLE nic = h_open_nic();
    test_create_limits(nic);

    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_CQ_HANDLE rcq = NULL, scq = NULL;
    CHECK_OK(VipCreateCQ(nic, 64, &rcq));
    CHECK_OK(VipCreateCQ(nic, 64, &scq));
    VIP_VI_HANDLE vi[NVI];
    h_mem buf = h_mem_alloc(nic, t, NVI * (PER_VI + 1) * 64 + 4096, 0);
    h_descs d = h_descs_alloc(nic, t, NVI * (PER_VI + 1) + 2 * NVI);
    for (int i = 0; i < NVI; i++) {
        VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
        vi[i] = h_vi(nic, &va, scq, rcq, 0, 0, 0);
        for (int s = 0; s < PER_VI; s++) {
            unsigned k = (unsigned)(i * PER_VI + s);
            h_post_recv1(vi[i], &d, k, buf.ptr + 64 * k, buf.mh, 64);
        }
    }
    CHECK_RET(VipDestroyCQ(rcq), VIP_INVALID_STATE);
    CHECK_RET(VipDestroyCQ(scq), VIP_INVALID_STATE);
    VIP_VI_HANDLE v;
    VIP_BOOLEAN rq;
    CHECK_RET(VipCQDone(rcq, &v, &rq), VIP_NOT_DONE);

    for (int i = 0; i < NVI; i++)
        h_connect(vi[i], cli_disc[i], (i < 2 ? cfgs[0].srv[i] : cfgs[1].srv[0]), NULL);

    /* Phase 1: both peers send at once. */
    h_signal(peers[0].fd, 'G');
    h_signal(peers[1].fd, 'G');
    h_expect(peers[0].fd, 'D');
    h_expect(peers[1].fd, 'D');

    /* All NVI*PER_VI entries are pending: the CQ cannot shrink below that. */
    CHECK_RET(VipResizeCQ(rcq, NVI * PER_VI - 1), VIP_INVALID_PARAMETER);
    CHECK_OK(VipResizeCQ(rcq, NVI * PER_VI));
    CHECK_OK(VipResizeCQ(rcq, 256));

    int seen[NVI] = {0};
    for (int n = 0; n < NVI * PER_VI; n++) {
        v = NULL;
        rq = 7;
        VIP_RETURN r = VipCQDone(rcq, &v, &rq);
        CHECK_MSG(r == VIP_SUCCESS, "VipCQDone returned %s after %d of %d completions",
                  VipxReturnString(r), n, NVI * PER_VI);
        CHECK_EQ(rq, VIP_TRUE);
        int i = vi_index(vi, v);
        CHECK_MSG(seen[i] < PER_VI, "VI %d reported more than %d times", i, PER_VI);
        VIP_DESCRIPTOR *x = NULL;
        CHECK_OK(VipRecvDone(v, &x));
        unsigned k = (unsigned)(i * PER_VI + seen[i]);
        CHECK_MSG(x == h_desc(&d, k), "VI %d: completion %d is not the %d-th posted receive", i,
                  seen[i], seen[i]);
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE | VIP_STATUS_IMMEDIATE);
        CHECK_EQ(x->CS.Length, MSG);
        CHECK_EQ(x->CS.ImmediateData, seen[i]);
        CHECK_RANDOM(buf.ptr + 64 * k, MSG, seed_of(i, seen[i]));
        seen[i]++;
    }
    CHECK_RET(VipCQDone(rcq, &v, &rq), VIP_NOT_DONE);
    for (int i = 0; i < NVI; i++) {
        VIP_DESCRIPTOR *x;
        CHECK_RET(VipRecvDone(vi[i], &x), VIP_NOT_DONE);
    }
    CHECK_OK(VipResizeCQ(rcq, 64));

    /* Phase 2: the send CQ. Sends complete inside VipPostSend. */
    unsigned char *src = buf.ptr + NVI * (PER_VI + 1) * 64;
    for (int j = 0; j < 2; j++)
        for (int i = 0; i < NVI; i++) {
            h_fill_random(src, MSG, seed_of(i, 100 + j));
            unsigned k = (unsigned)(NVI * (PER_VI + 1) + i * 2 + j);
            VIP_DESCRIPTOR *x = h_desc(&d, k);
            h_desc_prep(x, 0, 0);
            h_desc_add(x, src, buf.mh, MSG);
            CHECK_OK(VipPostSend(vi[i], x, d.m.mh));
        }
    CHECK_RET(VipCQDone(rcq, &v, &rq), VIP_NOT_DONE);
    int sseen[NVI] = {0};
    for (int n = 0; n < 2 * NVI; n++) {
        v = NULL;
        rq = 7;
        CHECK_OK(VipCQDone(scq, &v, &rq));
        CHECK_EQ(rq, VIP_FALSE);
        int i = vi_index(vi, v);
        CHECK(sseen[i] < 2);
        VIP_DESCRIPTOR *x = NULL;
        CHECK_OK(VipSendDone(v, &x));
        CHECK(x == h_desc(&d, (unsigned)(NVI * (PER_VI + 1) + i * 2 + sseen[i])));
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
        CHECK_EQ(x->CS.Length, MSG);
        sseen[i]++;
    }
    CHECK_RET(VipCQDone(scq, &v, &rq), VIP_NOT_DONE);
    h_signal(peers[0].fd, 'S');
    h_signal(peers[1].fd, 'S');
    h_expect(peers[0].fd, 'V');
    h_expect(peers[1].fd, 'V');

    /* Phase 3: VipCQWait wakes for a completion that arrives while it waits. */
    unsigned k = (unsigned)(NVI * PER_VI);
    h_post_recv1(vi[2], &d, k, buf.ptr + 64 * k, buf.mh, 64);
    h_signal(peer_of[2]->fd, 'W');
    v = NULL;
    rq = 7;
    double t0 = h_now_ms();
    CHECK_OK(VipCQWait(rcq, 10000, &v, &rq));
    h_log("VipCQWait woke after %.0f ms (the peer sends after 200 ms)", h_now_ms() - t0);
    CHECK(v == vi[2]);
    CHECK_EQ(rq, VIP_TRUE);
    VIP_DESCRIPTOR *x = NULL;
    CHECK_OK(VipRecvDone(vi[2], &x));
    CHECK(x == h_desc(&d, k));
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
    CHECK_RANDOM(buf.ptr + 64 * k, MSG, 4242);
    CHECK_RET(VipCQWait(rcq, 100, &v, &rq), VIP_TIMEOUT);

    /* Teardown: the CQs stay busy while any VI is attached. */
    h_signal(peers[0].fd, 'Q');
    h_signal(peers[1].fd, 'Q');
    h_peer_finish(&peers[0]);
    h_peer_finish(&peers[1]);
    for (int i = 0; i < NVI; i++) {
        CHECK_RET(VipDestroyCQ(rcq), VIP_INVALID_STATE);
        h_vi_teardown(vi[i]);
        /* Flushes and disconnect completions may have queued CQ entries. */
        while (VipCQDone(rcq, &v, &rq) == VIP_SUCCESS) {
        }
        while (VipCQDone(scq, &v, &rq) == VIP_SUCCESS) {
        }
    }
    CHECK_OK(VipDestroyCQ(rcq));
    CHECK_OK(VipDestroyCQ(scq));
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
