/*
 * conformance_errors: states, error completions and flush order.
 *
 * VIA 1.0: VipPostSend on a VI that is not connected is VIP_INVALID_STATE
 * (VipPostRecv is allowed: pre-posting); VipDisconnect completes the VI's
 * posted receives with DESC_FLUSHED_ERROR, in posting order; the peer's VI
 * of a reliable connection moves to the Error state and its posted
 * receives are flushed likewise; descriptors posted to a VI in the Error
 * state complete with DESC_FLUSHED_ERROR; on a reliable VI a descriptor
 * error (a memory handle that does not cover the buffer) completes that
 * descriptor with PROTECTION_ERROR, moves the VI to Error, and the
 * descriptors after it are flushed, in order. VipDestroyVi of a connected
 * VI is VIP_INVALID_STATE.
 */
#include "conformance.h"

#define N 8
#define SIZE 4096

static char srv[3][80], cli[3][80];

static void post_ring(VIP_VI_HANDLE vi, cf_descs *d, cf_mem *b, unsigned from, unsigned n)
{
    for (unsigned i = from; i < from + n; i++) {
        cf_fill(cf_desc(d, i), VIP_CONTROL_OP_SENDRECV, b->ptr + i * SIZE, b->mh, SIZE, 0);
        CHECK_OK(VipPostRecv(vi, cf_desc(d, i), d->m.mh));
    }
}

static void receiver(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE tag = h_ptag(nic);
    cf_descs d = cf_descs_get(nic, tag, 2 * N);
    cf_mem b = cf_mem_get(nic, tag, 2 * N * SIZE, CF_MALLOC, 0);
    VIP_DESCRIPTOR *want[2 * N];
    for (unsigned i = 0; i < 2 * N; i++)
        want[i] = cf_desc(&d, i);

    /* 1: our own disconnect flushes our receives, in order; the VI is IDLE. */
    VIP_VI_HANDLE vi = cf_vi(nic, tag, VIP_SERVICE_RELIABLE_DELIVERY, SIZE, VIP_FALSE, NULL, NULL);
    post_ring(vi, &d, &b, 0, N);
    h_accept(nic, vi, srv[0], NULL);
    CHECK_RET(VipDestroyVi(vi), VIP_INVALID_STATE);
    CHECK_OK(VipDisconnect(vi));
    cf_expect_flushed(vi, want, N);
    CHECK_EQ(h_vi_state(vi), VIP_STATE_IDLE);
    CHECK_OK(VipDestroyVi(vi));
    h_signal(fd, '1');

    /* 2: the peer's disconnect: ERROR, receives flushed in order, and a
     * receive posted in ERROR completes flushed. */
    vi = cf_vi(nic, tag, VIP_SERVICE_RELIABLE_DELIVERY, SIZE, VIP_FALSE, NULL, NULL);
    post_ring(vi, &d, &b, 0, N);
    h_accept(nic, vi, srv[1], NULL);
    h_expect(fd, 'd');
    CHECK_EQ(h_wait_state(vi, VIP_STATE_ERROR, 2000), VIP_STATE_ERROR);
    cf_expect_flushed(vi, want, N);
    post_ring(vi, &d, &b, N, 1);
    cf_expect_flushed(vi, want + N, 1);
    (void)VipDisconnect(vi);
    CHECK_OK(VipDestroyVi(vi));
    h_signal(fd, '2');

    /* 3: a descriptor error on a reliable VI after three good receives. */
    vi = cf_vi(nic, tag, VIP_SERVICE_RELIABLE_DELIVERY, SIZE, VIP_FALSE, NULL, NULL);
    post_ring(vi, &d, &b, 0, 3);
    h_accept(nic, vi, srv[2], NULL);
    for (unsigned i = 0; i < 3; i++) {
        VIP_DESCRIPTOR *x = NULL;
        CHECK_OK(VipRecvWait(vi, 5000, &x));
        CHECK(x == want[i]);
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
        CHECK_EQ(x->CS.Length, 100 + i);
    }
    VIP_DESCRIPTOR *bad = want[3];
    cf_fill(bad, VIP_CONTROL_OP_SENDRECV, b.ptr + (2 * N - 1) * SIZE + 1, b.mh, SIZE, 0);
    CHECK_OK(VipPostRecv(vi, bad, d.m.mh)); /* the region ends SIZE - 1 bytes in */
    post_ring(vi, &d, &b, 4, 2);
    h_signal(fd, 'b'); /* the sender now sends into the bad one */
    VIP_DESCRIPTOR *x = NULL;
    CHECK_OK(VipRecvWait(vi, 5000, &x));
    CHECK(x == bad);
    CHECK_MSG((x->CS.Status & VIP_STATUS_DONE) && (x->CS.Status & VIP_STATUS_PROTECTION_ERROR),
              "the bad receive completed 0x%x, expected DONE | PROTECTION_ERROR", x->CS.Status);
    CHECK_EQ(h_wait_state(vi, VIP_STATE_ERROR, 2000), VIP_STATE_ERROR);
    cf_expect_flushed(vi, want + 4, 2);
    (void)VipDisconnect(vi);
    CHECK_OK(VipDestroyVi(vi));
    h_signal(fd, '3');
    cf_mem_put(&b);
    cf_mem_put(&d.m);
    CHECK_OK(VipDestroyPtag(nic, tag));
    CHECK_OK(VipCloseNic(nic));
}

int main(void)
{
    h_init("conformance_errors", 60);
    for (int i = 0; i < 3; i++) {
        h_disc(srv[i], sizeof srv[i]);
        h_disc(cli[i], sizeof cli[i]);
    }
    h_peer p = h_fork(receiver, NULL);
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE tag = h_ptag(nic);
    cf_descs d = cf_descs_get(nic, tag, 4);
    cf_mem b = cf_mem_get(nic, tag, SIZE, CF_MEMALIGN, 0);
    VIP_DESCRIPTOR *x = cf_desc(&d, 0);

    VIP_VI_HANDLE vi = cf_vi(nic, tag, VIP_SERVICE_RELIABLE_DELIVERY, SIZE, VIP_FALSE, NULL, NULL);
    cf_fill(x, VIP_CONTROL_OP_SENDRECV, b.ptr, b.mh, 16, 0);
    CHECK_RET(VipPostSend(vi, x, d.m.mh), VIP_INVALID_STATE); /* IDLE */
    h_connect(vi, cli[0], srv[0], NULL);
    h_expect(p.fd, '1');
    (void)VipDisconnect(vi);
    CHECK_OK(VipDestroyVi(vi));

    vi = cf_vi(nic, tag, VIP_SERVICE_RELIABLE_DELIVERY, SIZE, VIP_FALSE, NULL, NULL);
    h_connect(vi, cli[1], srv[1], NULL);
    CHECK_OK(VipDisconnect(vi));
    h_signal(p.fd, 'd');
    h_expect(p.fd, '2');
    CHECK_OK(VipDestroyVi(vi));

    vi = cf_vi(nic, tag, VIP_SERVICE_RELIABLE_DELIVERY, SIZE, VIP_FALSE, NULL, NULL);
    h_connect(vi, cli[2], srv[2], NULL);
    for (unsigned i = 0; i < 3; i++) {
        cf_fill(x, VIP_CONTROL_OP_SENDRECV, b.ptr, b.mh, 100 + i, 0);
        CHECK_OK(VipPostSend(vi, x, d.m.mh));
        cf_send_wait(vi, x);
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
    }
    h_expect(p.fd, 'b');
    cf_fill(x, VIP_CONTROL_OP_SENDRECV, b.ptr, b.mh, 100, 0);
    CHECK_OK(VipPostSend(vi, x, d.m.mh)); /* its outcome depends on when the error is seen */
    h_expect(p.fd, '3');
    (void)VipDisconnect(vi);
    VIP_DESCRIPTOR *y;
    while (VipSendDone(vi, &y) == VIP_SUCCESS)
        ;
    CHECK_OK(VipDestroyVi(vi));
    cf_mem_put(&b);
    cf_mem_put(&d.m);
    CHECK_OK(VipDestroyPtag(nic, tag));
    h_peer_finish(&p);
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
