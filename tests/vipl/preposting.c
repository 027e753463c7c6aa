/*
 * preposting: a send that finds no receive posted at the peer
 * (docs/VIPL.md "The pre-posting constraint").
 *   unreliable: dropped, DONE|OP_SEND, DroppedNoRecv counts it, the peer is
 *               untouched and still usable;
 *   reliable:   DONE|TRANSPORT_ERROR, local VI ERROR, error handler
 *               VIP_ERROR_RECVQ_EMPTY on the posting thread, the peer VI
 *               ERROR with VIP_ERROR_CONN_LOST, no byte written at the peer.
 */
#include "harness.h"

#include <string.h>

#define CANARY 0xCD
#define BUF 4096

struct cfg {
    VIP_RELIABILITY_LEVEL rel;
    char srv[80], cli[80];
};

/* ---- peers ---------------------------------------------------------------- */

static void peer(int fd, void *arg)
{
    struct cfg *c = arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    h_errlog log;
    h_errlog_install(nic, &log);
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, c->rel);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 64 * 1024);
    VIP_PVOID abase;
    VIP_ULONG alen;
    CHECK_OK(VipxViArena(vi, &abase, &alen));
    h_mem ar = h_mem_reg(nic, t, abase, alen, 0);
    h_mem st = h_mem_alloc(nic, t, BUF, 0);
    h_descs d = h_descs_alloc(nic, t, 4);
    memset(ar.ptr, CANARY, alen);
    memset(st.ptr, CANARY, BUF);

    h_accept(nic, vi, c->srv, NULL);
    h_signal(fd, 'R');
    h_expect(fd, 'S');
    VIP_DESCRIPTOR *x;

    if (c->rel == VIP_SERVICE_UNRELIABLE) {
        /* Dropped: nothing completed, nothing written, still connected. */
        CHECK_RET(VipRecvDone(vi, &x), VIP_NOT_DONE);
        CHECK_EQ(h_vi_state(vi), VIP_STATE_CONNECTED);
        CHECK_BYTES(ar.ptr, alen, CANARY);
        CHECK_BYTES(st.ptr, BUF, CANARY);
        CHECK_EQ(h_errlog_count(&log), 0);

        /* Usable: one receive, two sends; the first lands, the second is dropped. */
        h_post_recv1(vi, &d, 0, ar.ptr, ar.mh, BUF);
        h_signal(fd, 'P');
        x = h_recv_wait(vi, 5000);
        CHECK(x == h_desc(&d, 0));
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
        CHECK_EQ(x->CS.Length, 200);
        h_expect(fd, 'T');
        CHECK_RANDOM(ar.ptr, 200, 2); /* not overwritten by the dropped third message */
        CHECK_BYTES(ar.ptr + 200, alen - 200, CANARY);
        CHECK_RET(VipRecvDone(vi, &x), VIP_NOT_DONE);
        CHECK_EQ(h_vi_state(vi), VIP_STATE_CONNECTED);
        CHECK_EQ(h_errlog_count(&log), 0);
    } else {
        /* The peer's failed send breaks the connection on this side too. */
        VIP_VI_STATE s = h_wait_state(vi, VIP_STATE_ERROR, 2000);
        CHECK_MSG(s == VIP_STATE_ERROR, "receiver VI is %s after the sender hit an empty queue",
                  h_state_str(s));
        CHECK_MSG(h_errlog_wait(&log, 1, 2000) >= 1, "receiver's error handler not called");
        CHECK_MSG(h_errlog_find(&log, VIP_ERROR_CONN_LOST, vi) >= 1,
                  "receiver's error handler got %s, expected CONN_LOST",
                  h_errcode_str(log.code[0]));
        CHECK_RET(VipRecvDone(vi, &x), VIP_NOT_DONE);
        CHECK_BYTES(ar.ptr, alen, CANARY);
        CHECK_BYTES(st.ptr, BUF, CANARY);
    }
    h_signal(fd, 'V');

    h_expect(fd, 'Q');
    h_mem_free(&ar);
    h_vi_teardown(vi);
    h_mem_free(&st);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    pthread_mutex_destroy(&log.mu);
}

/* ---- parent ------------------------------------------------------------------- */

static void run(struct cfg *c, h_peer *p, VIP_NIC_HANDLE nic, h_errlog *log)
{
    h_log("reliability level 0x%x", c->rel);
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, c->rel);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    h_mem src = h_mem_alloc(nic, t, BUF, 0);
    h_descs d = h_descs_alloc(nic, t, 4);
    VIPX_VI_STATS st;

    h_connect(vi, c->cli, c->srv, NULL);
    h_expect(p->fd, 'R');
    int errs = h_errlog_count(log);

    h_fill_random(src.ptr, 300, 1);
    double t0 = h_now_ms();
    h_post_send1(vi, &d, 0, src.ptr, src.mh, 300, 0, 0);
    double took = h_now_ms() - t0;
    VIP_DESCRIPTOR *x = h_send_done(vi);
    CHECK(x == h_desc(&d, 0));
    h_log("send into an empty receive queue returned after %.1f ms", took);

    if (c->rel == VIP_SERVICE_UNRELIABLE) {
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
        CHECK_OK(VipxQueryViStats(vi, &st));
        CHECK_EQ(st.DroppedNoRecv, 1);
        CHECK_EQ(h_vi_state(vi), VIP_STATE_CONNECTED);
        CHECK_EQ(h_errlog_since(log, errs, vi, NULL, NULL), 0);
        h_signal(p->fd, 'S');

        h_expect(p->fd, 'P');
        h_fill_random(src.ptr, 200, 2);
        h_post_send1(vi, &d, 1, src.ptr, src.mh, 200, 0, 0);
        x = h_send_done(vi);
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
        CHECK_EQ(x->CS.Length, 200);
        CHECK_OK(VipxQueryViStats(vi, &st));
        CHECK_EQ(st.DroppedNoRecv, 1);
        h_fill_random(src.ptr, 250, 3);
        h_post_send1(vi, &d, 2, src.ptr, src.mh, 250, 0, 0);
        x = h_send_done(vi);
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
        CHECK_OK(VipxQueryViStats(vi, &st));
        CHECK_EQ(st.DroppedNoRecv, 2);
        CHECK_EQ(h_vi_state(vi), VIP_STATE_CONNECTED);
        CHECK_EQ(h_errlog_since(log, errs, vi, NULL, NULL), 0);
        h_signal(p->fd, 'T');
    } else {
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_TRANSPORT_ERROR);
        CHECK_EQ(h_vi_state(vi), VIP_STATE_ERROR);
        /* Found while posting: reported on the posting thread, before the return. */
        VIP_ERROR_CODE code = VIP_ERROR_CATASTROPHIC;
        pthread_t thr;
        int n = h_errlog_since(log, errs, vi, &code, &thr);
        CHECK_MSG(n == 1, "%d error handler calls for the VI after the failed post, expected 1",
                  n);
        CHECK_MSG(code == VIP_ERROR_RECVQ_EMPTY, "error handler got %s, expected RECVQ_EMPTY",
                  h_errcode_str(code));
        CHECK_MSG(pthread_equal(thr, pthread_self()),
                  "error handler did not run on the posting thread");
        CHECK_OK(VipxQueryViStats(vi, &st));
        CHECK_EQ(st.DroppedNoRecv, 0);
        h_signal(p->fd, 'S');
    }
    h_expect(p->fd, 'V');
    h_signal(p->fd, 'Q');
    h_peer_finish(p);
    h_vi_teardown(vi);
    h_mem_free(&src);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
}

int main(void)
{
    h_init("preposting", 30);
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
    static h_errlog log;
    h_errlog_install(nic, &log);
    for (int i = 0; i < 3; i++)
        run(&cfgs[i], &peers[i], nic, &log);
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
