/*
 * notify: one-shot completion handlers (docs/VIPL.md "Waiting"):
 * VipRecvNotify / VipSendNotify / VipCQNotify run their handler once, on a
 * provider thread (not the caller's), for the next completion, with the
 * descriptor already dequeued (for a CQ: the entry consumed); a second
 * notify on the same queue while one is pending answers VIP_INVALID_STATE;
 * VipxViNotifyHold holds a receive notify back and lets it go.
 */
#include "harness.h"

static char srv[2][80], cli[2][80];

/* ---- peer: sends on request, receives the parent's one message ---------------- */

static void peer(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_HANDLE vi[2];
    h_mem buf = h_mem_alloc(nic, t, 8192, 0);
    h_descs d = h_descs_alloc(nic, t, 4);
    for (int i = 0; i < 2; i++) {
        VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
        vi[i] = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    }
    h_post_recv1(vi[0], &d, 0, buf.ptr + 4096, buf.mh, 4096);
    h_accept(nic, vi[0], srv[0], NULL);
    h_accept(nic, vi[1], srv[1], NULL);
    for (;;) {
        unsigned char cmd[2];
        h_xrecv(fd, cmd, 2);
        if (cmd[0] == 'Q')
            break;
        int i = cmd[0] == 'b';
        h_fill_random(buf.ptr, 64, cmd[1]);
        h_post_send1(vi[i], &d, 1, buf.ptr, buf.mh, 64, 0, 0);
        CHECK_STATUS(h_send_done(vi[i]), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
    }
    VIP_DESCRIPTOR *x = NULL;
    CHECK_OK(VipRecvDone(vi[0], &x));
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
    CHECK_EQ(x->CS.Length, 64);
    CHECK_RANDOM(buf.ptr + 4096, 64, 55);
    for (int i = 0; i < 2; i++)
        h_vi_teardown(vi[i]);
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
}

/* ---- parent --------------------------------------------------------------------- */

struct seen {
    pthread_mutex_t mu;
    int calls;
    void *ctx;
    VIP_NIC_HANDLE nic;
    VIP_VI_HANDLE vi;
    VIP_DESCRIPTOR *desc;
    VIP_UINT32 status, length;
    VIP_BOOLEAN recvq;
    pthread_t thread;
};

static struct seen S = {.mu = PTHREAD_MUTEX_INITIALIZER};
static int ctx_token;

static void wq_handler(VIP_PVOID ctx, VIP_NIC_HANDLE nic, VIP_VI_HANDLE vi, VIP_DESCRIPTOR *d)
{
    pthread_mutex_lock(&S.mu);
    S.calls++;
    S.ctx = ctx;
    S.nic = nic;
    S.vi = vi;
    S.desc = d;
    S.status = d ? d->CS.Status : 0;
    S.length = d ? d->CS.Length : 0;
    S.thread = pthread_self();
    pthread_mutex_unlock(&S.mu);
}

static void cq_handler(VIP_PVOID ctx, VIP_NIC_HANDLE nic, VIP_VI_HANDLE vi, VIP_BOOLEAN recvq)
{
    pthread_mutex_lock(&S.mu);
    S.calls++;
    S.ctx = ctx;
    S.nic = nic;
    S.vi = vi;
    S.recvq = recvq;
    S.thread = pthread_self();
    pthread_mutex_unlock(&S.mu);
}

static void reset(void)
{
    pthread_mutex_lock(&S.mu);
    S.calls = 0;
    S.ctx = NULL;
    S.nic = NULL;
    S.vi = NULL;
    S.desc = NULL;
    S.status = S.length = 0;
    S.recvq = 7;
    pthread_mutex_unlock(&S.mu);
}

static int calls(void)
{
    pthread_mutex_lock(&S.mu);
    int n = S.calls;
    pthread_mutex_unlock(&S.mu);
    return n;
}

static void wait_call(const char *what)
{
    double t0 = h_now_ms();
    while (calls() == 0 && h_now_ms() - t0 < 2000)
        h_sleep_ms(2);
    CHECK_MSG(calls() == 1, "%s: handler called %d times within 2 s, expected once", what,
              calls());
    CHECK_MSG(!pthread_equal(S.thread, pthread_self()),
              "%s: handler ran on the caller's thread, expected a provider thread", what);
    CHECK_MSG(S.ctx == &ctx_token, "%s: handler got context %p, expected %p", what, S.ctx,
              (void *)&ctx_token);
}

static void peer_send(h_peer *p, char which, unsigned char seed)
{
    unsigned char cmd[2] = {(unsigned char)which, seed};
    h_xsend(p->fd, cmd, 2);
}

int main(void)
{
    h_init("notify", 30);
    for (int i = 0; i < 2; i++) {
        h_disc(srv[i], sizeof srv[i]);
        h_disc(cli[i], sizeof cli[i]);
    }
    h_peer p = h_fork(peer, NULL);
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_CQ_HANDLE cq = NULL;
    CHECK_OK(VipCreateCQ(nic, 16, &cq));
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    VIP_VI_HANDLE vc = h_vi(nic, &va, NULL, cq, 0, 0, 0);
    h_mem buf = h_mem_alloc(nic, t, 8 * 4096, 0);
    h_descs d = h_descs_alloc(nic, t, 8);
    h_connect(vi, cli[0], srv[0], NULL);
    h_connect(vc, cli[1], srv[1], NULL);
    VIP_DESCRIPTOR *x;

    /* VipRecvNotify. */
    h_post_recv1(vi, &d, 0, buf.ptr, buf.mh, 4096);
    reset();
    CHECK_OK(VipRecvNotify(vi, &ctx_token, wq_handler));
    CHECK_RET(VipRecvNotify(vi, &ctx_token, wq_handler), VIP_INVALID_STATE);
    h_sleep_ms(100);
    CHECK_EQ(calls(), 0); /* nothing completed yet */
    peer_send(&p, 'a', 1);
    wait_call("VipRecvNotify");
    CHECK(S.nic == nic);
    CHECK(S.vi == vi);
    CHECK(S.desc == h_desc(&d, 0));
    CHECK_EQ(S.status, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
    CHECK_EQ(S.length, 64);
    CHECK_RANDOM(buf.ptr, 64, 1);
    CHECK_RET(VipRecvDone(vi, &x), VIP_NOT_DONE); /* already dequeued */

    /* One shot: the next completion is left in the queue. */
    h_post_recv1(vi, &d, 1, buf.ptr + 4096, buf.mh, 4096);
    peer_send(&p, 'a', 2);
    x = h_recv_wait(vi, 2000);
    CHECK(x == h_desc(&d, 1));
    CHECK_RANDOM(buf.ptr + 4096, 64, 2);
    h_sleep_ms(100);
    CHECK_EQ(calls(), 1);

    /* Re-armed after it fired. */
    reset();
    h_post_recv1(vi, &d, 2, buf.ptr + 8192, buf.mh, 4096);
    CHECK_OK(VipRecvNotify(vi, &ctx_token, wq_handler));
    peer_send(&p, 'a', 3);
    wait_call("VipRecvNotify, second time");
    CHECK(S.desc == h_desc(&d, 2));
    CHECK_RANDOM(buf.ptr + 8192, 64, 3);
    CHECK_RET(VipRecvDone(vi, &x), VIP_NOT_DONE);

    /* VipxViNotifyHold: once held and idle, the notify takes nothing (the
     * completion stays queued, the handler does not run); let go, it fires. */
    reset();
    h_post_recv1(vi, &d, 6, buf.ptr + 24576, buf.mh, 4096);
    CHECK_OK(VipRecvNotify(vi, &ctx_token, wq_handler));
    CHECK_OK(VipxViNotifyHold(vi, VIP_TRUE));
    double t0 = h_now_ms();
    while (!VipxViNotifyIdle(vi) && h_now_ms() - t0 < 1000)
        h_sleep_ms(1);
    CHECK_MSG(VipxViNotifyIdle(vi), "a held notify with nothing to take stayed busy 1 s");
    peer_send(&p, 'a', 6);
    h_sleep_ms(200);
    CHECK_EQ(calls(), 0);
    CHECK(VipxViNotifyIdle(vi));
    CHECK_OK(VipxViNotifyHold(vi, VIP_FALSE));
    wait_call("VipRecvNotify after VipxViNotifyHold let it go");
    CHECK(S.desc == h_desc(&d, 6));
    CHECK_RANDOM(buf.ptr + 24576, 64, 6);
    CHECK_RET(VipxViNotifyHold(NULL, VIP_TRUE), VIP_INVALID_PARAMETER);

    /* VipSendNotify: the send completes inside VipPostSend, the handler runs elsewhere. */
    reset();
    CHECK_OK(VipSendNotify(vi, &ctx_token, wq_handler));
    CHECK_RET(VipSendNotify(vi, &ctx_token, wq_handler), VIP_INVALID_STATE);
    h_fill_random(buf.ptr + 12288, 64, 55);
    h_post_send1(vi, &d, 3, buf.ptr + 12288, buf.mh, 64, 0, 0);
    wait_call("VipSendNotify");
    CHECK(S.nic == nic);
    CHECK(S.vi == vi);
    CHECK(S.desc == h_desc(&d, 3));
    CHECK_EQ(S.status, VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
    CHECK_EQ(S.length, 64);
    CHECK_RET(VipSendDone(vi, &x), VIP_NOT_DONE);

    /* VipCQNotify: the CQ entry is consumed, the descriptor stays for VipRecvDone. */
    h_post_recv1(vc, &d, 4, buf.ptr + 16384, buf.mh, 4096);
    reset();
    CHECK_OK(VipCQNotify(cq, &ctx_token, cq_handler));
    CHECK_RET(VipCQNotify(cq, &ctx_token, cq_handler), VIP_INVALID_STATE);
    peer_send(&p, 'b', 4);
    wait_call("VipCQNotify");
    CHECK(S.nic == nic);
    CHECK(S.vi == vc);
    CHECK_EQ(S.recvq, VIP_TRUE);
    VIP_VI_HANDLE v;
    VIP_BOOLEAN rq;
    CHECK_RET(VipCQDone(cq, &v, &rq), VIP_NOT_DONE);
    x = NULL;
    CHECK_OK(VipRecvDone(vc, &x));
    CHECK(x == h_desc(&d, 4));
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
    CHECK_RANDOM(buf.ptr + 16384, 64, 4);

    /* One shot for the CQ too. */
    h_post_recv1(vc, &d, 5, buf.ptr + 20480, buf.mh, 4096);
    peer_send(&p, 'b', 5);
    v = NULL;
    CHECK_OK(VipCQWait(cq, 2000, &v, &rq));
    CHECK(v == vc);
    CHECK_OK(VipRecvDone(vc, &x));
    CHECK(x == h_desc(&d, 5));
    h_sleep_ms(100);
    CHECK_EQ(calls(), 1);

    peer_send(&p, 'Q', 0);
    h_peer_finish(&p);
    h_vi_teardown(vi);
    h_vi_teardown(vc);
    while (VipCQDone(cq, &v, &rq) == VIP_SUCCESS) {
    }
    CHECK_OK(VipDestroyCQ(cq));
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
