/*
 * length_error: VIP_STATUS_LENGTH_ERROR (docs/VIPL.md "Posting and
 * completion"):
 *   1. unreliable receiver, message longer than the posted buffer (arena and
 *      staged): the receive completes LENGTH_ERROR, no byte is written, the
 *      VI stays CONNECTED and the next receives work (including an exact fit);
 *   2. the same on a reliable VI: the receiver's VI moves to ERROR and its
 *      error handler is called;
 *   3. unreliable sender above its MaxTransferSize (one segment, and a gather
 *      whose total is too long): the send completes DONE|LENGTH_ERROR, nothing
 *      reaches the peer, the VI stays usable;
 *   4. the same on a reliable VI: ERROR and VIP_ERROR_POST_DESC on the
 *      posting thread;
 *   5. a receive descriptor longer than its (unreliable) VI's MaxTransferSize:
 *      it completes LENGTH_ERROR with nothing written (whether at post time
 *      or when a message meets it is not stated; both are accepted).
 */
#include "harness.h"

#include <string.h>

#define CANARY 0xCD

struct cfg {
    int scenario;
    char srv[80], cli[80];
};

static VIP_RELIABILITY_LEVEL level(int scenario)
{
    return scenario % 2 ? VIP_SERVICE_UNRELIABLE : VIP_SERVICE_RELIABLE_DELIVERY;
}

/* ---- peers: always the receiver ---------------------------------------------- */

static void peer(int fd, void *arg)
{
    struct cfg *c = arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    h_errlog log;
    h_errlog_install(nic, &log);
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, level(c->scenario));
    if (c->scenario == 5)
        va.MaxTransferSize = 1000;
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 64 * 1024);
    VIP_PVOID abase;
    VIP_ULONG alen;
    CHECK_OK(VipxViArena(vi, &abase, &alen));
    h_mem ar = h_mem_reg(nic, t, abase, 16384, 0);
    h_mem st = h_mem_alloc(nic, t, 4096, 0);
    h_descs d = h_descs_alloc(nic, t, 4);
    memset(ar.ptr, CANARY, 16384);
    memset(st.ptr, CANARY, 4096);
    VIP_DESCRIPTOR *x;

    switch (c->scenario) {
    case 1:
        h_post_recv1(vi, &d, 0, ar.ptr, ar.mh, 100);
        h_post_recv1(vi, &d, 1, st.ptr, st.mh, 100);
        h_post_recv1(vi, &d, 2, ar.ptr + 4096, ar.mh, 100);
        h_post_recv1(vi, &d, 3, ar.ptr + 8192, ar.mh, 4096);
        h_accept(nic, vi, c->srv, NULL);
        x = h_recv_wait(vi, 5000);
        CHECK(x == h_desc(&d, 0));
        CHECK_ERR_STATUS(x, VIP_STATUS_LENGTH_ERROR, VIP_STATUS_OP_RECEIVE);
        CHECK_BYTES(ar.ptr, 4096, CANARY);
        x = h_recv_wait(vi, 5000);
        CHECK(x == h_desc(&d, 1));
        CHECK_ERR_STATUS(x, VIP_STATUS_LENGTH_ERROR, VIP_STATUS_OP_RECEIVE);
        CHECK_BYTES(st.ptr, 4096, CANARY);
        x = h_recv_wait(vi, 5000);
        CHECK(x == h_desc(&d, 2));
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
        CHECK_EQ(x->CS.Length, 100);
        CHECK_RANDOM(ar.ptr + 4096, 100, 3);
        CHECK_BYTES(ar.ptr + 4096 + 100, 4096 - 100, CANARY);
        x = h_recv_wait(vi, 5000);
        CHECK(x == h_desc(&d, 3));
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
        CHECK_EQ(x->CS.Length, 150);
        CHECK_RANDOM(ar.ptr + 8192, 150, 4);
        CHECK_EQ(h_vi_state(vi), VIP_STATE_CONNECTED);
        CHECK_EQ(h_errlog_count(&log), 0);
        break;
    case 2:
        h_post_recv1(vi, &d, 0, ar.ptr, ar.mh, 100);
        h_accept(nic, vi, c->srv, NULL);
        x = h_recv_wait(vi, 5000);
        CHECK(x == h_desc(&d, 0));
        CHECK_ERR_STATUS(x, VIP_STATUS_LENGTH_ERROR, VIP_STATUS_OP_RECEIVE);
        CHECK_BYTES(ar.ptr, 16384, CANARY);
        {
            VIP_VI_STATE s = h_wait_state(vi, VIP_STATE_ERROR, 2000);
            CHECK_MSG(s == VIP_STATE_ERROR, "reliable receiver after LENGTH_ERROR is %s",
                      h_state_str(s));
        }
        CHECK_MSG(h_errlog_wait(&log, 1, 2000) >= 1, "error handler not called");
        CHECK_MSG(log.vi[0] == vi, "error handler reported another VI");
        CHECK_MSG(log.code[0] == VIP_ERROR_POST_DESC || log.code[0] == VIP_ERROR_CONN_LOST,
                  "error handler got %s", h_errcode_str(log.code[0]));
        h_log("receiver's error handler: %s", h_errcode_str(log.code[0]));
        break;
    case 3:
    case 4:
        h_post_recv1(vi, &d, 0, ar.ptr, ar.mh, 4096);
        h_accept(nic, vi, c->srv, NULL);
        h_expect(fd, 'S');
        /* Nothing arrived: no completion (a flushed one if the VI broke), no byte. */
        if (VipRecvDone(vi, &x) == VIP_SUCCESS) {
            CHECK_MSG(c->scenario == 4, "a too-long send completed a receive");
            CHECK_ERR_STATUS(x, VIP_STATUS_DESC_FLUSHED_ERROR, VIP_STATUS_OP_RECEIVE);
        }
        CHECK_BYTES(ar.ptr, 16384, CANARY);
        if (c->scenario == 3) {
            CHECK_EQ(h_vi_state(vi), VIP_STATE_CONNECTED);
            h_signal(fd, 'C');
            x = h_recv_wait(vi, 5000);
            CHECK(x == h_desc(&d, 0));
            CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
            CHECK_EQ(x->CS.Length, 1000);
            CHECK_RANDOM(ar.ptr, 1000, 9);
            CHECK_BYTES(ar.ptr + 1000, 16384 - 1000, CANARY);
        }
        break;
    case 5:
        h_post_recv1(vi, &d, 0, ar.ptr, ar.mh, 2000);
        h_accept(nic, vi, c->srv, NULL);
        h_expect(fd, 'S'); /* the first message has met R0, or found nothing posted */
        x = h_recv_wait(vi, 5000);
        CHECK(x == h_desc(&d, 0));
        CHECK_ERR_STATUS(x, VIP_STATUS_LENGTH_ERROR, VIP_STATUS_OP_RECEIVE);
        CHECK_BYTES(ar.ptr, 16384, CANARY);
        CHECK_EQ(h_vi_state(vi), VIP_STATE_CONNECTED);
        h_post_recv1(vi, &d, 1, ar.ptr + 4096, ar.mh, 1000);
        h_signal(fd, 'C');
        x = h_recv_wait(vi, 5000);
        CHECK(x == h_desc(&d, 1));
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
        CHECK_EQ(x->CS.Length, 10);
        CHECK_RANDOM(ar.ptr + 4096, 10, 51);
        break;
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

/* ---- parent: the sender -------------------------------------------------------- */

static void log_status(const char *what, VIP_DESCRIPTOR *x, VIP_VI_HANDLE vi)
{
    char b[160];
    h_log("%s: sender status %s, sender VI %s", what, h_status_str(x->CS.Status, b, sizeof b),
          h_state_str(h_vi_state(vi)));
    CHECK(x->CS.Status & VIP_STATUS_DONE);
}

static void run(struct cfg *c, h_peer *p, VIP_NIC_HANDLE nic, h_errlog *log)
{
    h_log("scenario %d", c->scenario);
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, level(c->scenario));
    if (c->scenario >= 3)
        va.MaxTransferSize = 1000;
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    h_mem src = h_mem_alloc(nic, t, 4096, 0);
    h_descs d = h_descs_alloc(nic, t, 4);
    VIP_DESCRIPTOR *x;
    h_connect(vi, c->cli, c->srv, NULL);
    int errs = h_errlog_count(log);

    switch (c->scenario) {
    case 1: {
        static const VIP_UINT32 len[4] = {101, 200, 100, 150};
        for (unsigned i = 0; i < 4; i++) {
            h_fill_random(src.ptr, len[i], 1 + i);
            h_post_send1(vi, &d, 0, src.ptr, src.mh, len[i], 0, 0);
            x = h_send_done(vi);
            if (i < 2)
                log_status("message longer than the receive buffer", x, vi);
            else
                CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
        }
        break;
    }
    case 2:
        h_fill_random(src.ptr, 101, 1);
        h_post_send1(vi, &d, 0, src.ptr, src.mh, 101, 0, 0);
        log_status("message longer than a reliable receiver's buffer", h_send_done(vi), vi);
        break;
    case 3:
    case 4:
        h_fill_random(src.ptr, 1001, 8);
        h_post_send1(vi, &d, 0, src.ptr, src.mh, 1001, 0, 0);
        x = h_send_done(vi);
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_LENGTH_ERROR);
        if (c->scenario == 3) {
            /* The total counts, not each segment. */
            x = h_desc(&d, 1);
            h_desc_prep(x, 0, 0);
            for (int j = 0; j < 3; j++)
                h_desc_add(x, src.ptr + 1024 * j, src.mh, 400);
            CHECK_OK(VipPostSend(vi, x, d.m.mh));
            x = h_send_done(vi);
            CHECK(x == h_desc(&d, 1));
            CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_LENGTH_ERROR);
            CHECK_EQ(h_vi_state(vi), VIP_STATE_CONNECTED);
            CHECK_EQ(h_errlog_since(log, errs, vi, NULL, NULL), 0);
            h_signal(p->fd, 'S');
            h_expect(p->fd, 'C');
            h_fill_random(src.ptr, 1000, 9);
            h_post_send1(vi, &d, 2, src.ptr, src.mh, 1000, 0, 0);
            x = h_send_done(vi);
            CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
            CHECK_EQ(x->CS.Length, 1000);
        } else {
            CHECK_EQ(h_vi_state(vi), VIP_STATE_ERROR);
            VIP_ERROR_CODE code = VIP_ERROR_CATASTROPHIC;
            pthread_t thr;
            int n = h_errlog_since(log, errs, vi, &code, &thr);
            CHECK_MSG(n == 1, "%d error handler calls, expected 1", n);
            CHECK_MSG(code == VIP_ERROR_POST_DESC, "error handler got %s", h_errcode_str(code));
            CHECK_MSG(pthread_equal(thr, pthread_self()),
                      "error handler did not run on the posting thread");
            h_signal(p->fd, 'S');
        }
        break;
    case 5:
        h_fill_random(src.ptr, 10, 50);
        h_post_send1(vi, &d, 0, src.ptr, src.mh, 10, 0, 0);
        CHECK_STATUS(h_send_done(vi), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
        h_signal(p->fd, 'S');
        h_expect(p->fd, 'C');
        h_fill_random(src.ptr, 10, 51);
        h_post_send1(vi, &d, 1, src.ptr, src.mh, 10, 0, 0);
        CHECK_STATUS(h_send_done(vi), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
        break;
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
    h_init("length_error", 30);
    static struct cfg cfgs[5];
    h_peer peers[5];
    for (int i = 0; i < 5; i++) {
        cfgs[i].scenario = i + 1;
        h_disc(cfgs[i].srv, sizeof cfgs[i].srv);
        h_disc(cfgs[i].cli, sizeof cfgs[i].cli);
        peers[i] = h_fork(peer, &cfgs[i]);
    }
    VIP_NIC_HANDLE nic = h_open_nic();
    static h_errlog log;
    h_errlog_install(nic, &log);
    for (int i = 0; i < 5; i++)
        run(&cfgs[i], &peers[i], nic, &log);
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
