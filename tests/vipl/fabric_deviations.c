/*
 * fabric_deviations: where the fabric provider (libfabric, here tcp on
 * 127.0.0.1) differs from shm, each as docs/VIPL.md "fabric" states it.
 * Runs only over fabric (SOVIA_PROVIDER=fabric:tcp, label fabric).
 *   1. no pre-posting constraint: a send into an empty receive queue
 *      completes, the VI stays CONNECTED on both sides, and the message
 *      lands in the next receive the peer posts (shm: TRANSPORT_ERROR and
 *      RECVQ_EMPTY, or a drop on an unreliable VI); unreliable VIs drop
 *      nothing either (DroppedNoRecv stays 0);
 *   2. a message longer than the receive ends the connection: the
 *      receiver's descriptor completes with an error, both VIs turn ERROR
 *      within 1.25 s, and both processes live on;
 *   3. an RDMA write to a memory handle the target never exported, or to
 *      a region exported under another protection tag than the target
 *      VI's, moves nothing (the target's bytes are checked), completes
 *      with an error, and ends the connection (shm: RDMA_PROT_ERROR, an
 *      unreliable VI stays usable); a CQ serves the VIs of one tag;
 *   4. VIs cannot be shared between processes or handed to the next
 *      program image: VipxViShare and VipxViExport are not supported.
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

#define CANARY 0xCD
#define BUF 4096

enum { C_PREPOST, C_UNREL, C_LONG, C_WRITE, C_PTAG, NCASES };
static char srv[NCASES][80], cli[NCASES][80];

struct export {
    uint64_t addr;
    VIP_MEM_HANDLE handle;
};

static VIP_RELIABILITY_LEVEL level(int c)
{
    return c == C_UNREL ? VIP_SERVICE_UNRELIABLE : VIP_SERVICE_RELIABLE_DELIVERY;
}

static void peer(int fd, void *arg)
{
    int c = (int)(intptr_t)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, level(c));
    va.EnableRdmaWrite = VIP_TRUE;
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    VIP_PROTECTION_HANDLE t2 = h_ptag(nic);
    h_mem buf = h_mem_alloc(nic, c == C_PTAG ? t2 : t, BUF, 1);
    h_descs d = h_descs_alloc(nic, t, 2);
    memset(buf.ptr, CANARY, BUF);
    if (c == C_LONG)
        h_post_recv1(vi, &d, 0, buf.ptr, buf.mh, 100);
    h_accept(nic, vi, srv[c], NULL);
    if (c == C_WRITE || c == C_PTAG) {
        /* C_WRITE: a handle next to ours that names nothing, never exported;
         * C_PTAG: a real RDMA-write region, of the other tag. */
        struct export e = {(uint64_t)(uintptr_t)buf.ptr, buf.mh ^ (c == C_WRITE ? 0x00100000u : 0)};
        h_xsend(fd, &e, sizeof e);
    }
    h_signal(fd, 'R');
    h_expect(fd, 'S'); /* the parent's send or write is done */
    VIP_DESCRIPTOR *x;
    switch (c) {
    case C_PREPOST:
    case C_UNREL:
        h_sleep_ms(200); /* the message waits for a receive, it is not lost */
        h_post_recv1(vi, &d, 0, buf.ptr, buf.mh, BUF);
        x = h_recv_wait(vi, 5000);
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
        CHECK_EQ(x->CS.Length, 300);
        CHECK_RANDOM(buf.ptr, 300, 7);
        CHECK_EQ(h_vi_state(vi), VIP_STATE_CONNECTED);
        break;
    case C_LONG:
        x = h_recv_wait(vi, 5000);
        CHECK_MSG(x->CS.Status & VIP_STATUS_ERROR_MASK, "an over-long message completed 0x%x",
                  x->CS.Status);
        CHECK_EQ(h_wait_state(vi, VIP_STATE_ERROR, 1250), VIP_STATE_ERROR);
        CHECK_BYTES(buf.ptr + 100, BUF - 100, CANARY);
        break;
    case C_WRITE:
    case C_PTAG:
        CHECK_BYTES(buf.ptr, BUF, CANARY);
        CHECK_EQ(h_wait_state(vi, VIP_STATE_ERROR, 1250), VIP_STATE_ERROR);
        break;
    }
    h_signal(fd, 'D');
    h_expect(fd, 'Q');
    h_vi_teardown(vi);
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipDestroyPtag(nic, t2));
    CHECK_OK(VipCloseNic(nic));
}

static void run(VIP_NIC_HANDLE nic, int c, h_peer *p)
{
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, level(c));
    va.EnableRdmaWrite = VIP_TRUE; /* the writes below are the target's to refuse */
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    h_mem src = h_mem_alloc(nic, t, BUF, 0);
    h_descs d = h_descs_alloc(nic, t, 1);
    h_connect(vi, cli[c], srv[c], NULL);
    struct export e = {0, 0};
    if (c == C_WRITE || c == C_PTAG)
        h_xrecv(p->fd, &e, sizeof e);
    h_expect(p->fd, 'R');
    VIP_DESCRIPTOR *x;
    if (c == C_WRITE || c == C_PTAG) {
        x = h_desc(&d, 0);
        h_desc_prep(x, VIP_CONTROL_OP_RDMAWRITE, 0);
        h_desc_remote(x, (void *)(uintptr_t)e.addr, e.handle);
        h_desc_add(x, src.ptr, src.mh, 100);
        memset(src.ptr, 0x11, 100);
        CHECK_OK(VipPostSend(vi, x, d.m.mh));
        VIP_DESCRIPTOR *y = NULL;
        CHECK_OK(VipSendWait(vi, 5000, &y));
        CHECK(y == x);
        CHECK_MSG(x->CS.Status & VIP_STATUS_ERROR_MASK, "a write to %s completed 0x%x",
                  c == C_WRITE ? "an unknown handle" : "another tag's region", x->CS.Status);
        /* refused by the target, not by our own checks */
        CHECK(!(x->CS.Status & (VIP_STATUS_RDMA_PROT_ERROR | VIP_STATUS_PROTECTION_ERROR)));
        CHECK_EQ(h_wait_state(vi, VIP_STATE_ERROR, 1250), VIP_STATE_ERROR);
    } else {
        h_fill_random(src.ptr, c == C_LONG ? 200 : 300, 7);
        h_post_send1(vi, &d, 0, src.ptr, src.mh, c == C_LONG ? 200 : 300, 0, 0);
        x = h_send_done(vi);
        if (c != C_LONG) {
            CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
            CHECK_EQ(h_vi_state(vi), VIP_STATE_CONNECTED);
            VIPX_VI_STATS st;
            CHECK_OK(VipxQueryViStats(vi, &st));
            CHECK_EQ(st.DroppedNoRecv, 0);
        }
    }
    h_signal(p->fd, 'S');
    h_expect(p->fd, 'D');
    if (c == C_LONG) /* the receiver's end reached us */
        CHECK_EQ(h_wait_state(vi, VIP_STATE_ERROR, 1250), VIP_STATE_ERROR);
    if (c == C_PREPOST) {
        /* A CQ serves one tag's VIs: a VI of another tag cannot join it. */
        VIP_CQ_HANDLE cq;
        CHECK_OK(VipCreateCQ(nic, 16, &cq));
        VIP_PROTECTION_HANDLE t2 = h_ptag(nic);
        VIP_VI_ATTRIBUTES a1 = h_vi_attrs(t, level(c)), a2 = h_vi_attrs(t2, level(c));
        VIP_VI_HANDLE v1, v2;
        CHECK_OK(VipCreateVi(nic, &a1, NULL, cq, &v1));
        CHECK_RET(VipCreateVi(nic, &a2, NULL, cq, &v2), VIP_INVALID_PARAMETER);
        CHECK_OK(VipDestroyVi(v1));
        CHECK_OK(VipDestroyCQ(cq));
        CHECK_OK(VipDestroyPtag(nic, t2));
        CHECK_RET(VipxViShare(vi), VIP_ERROR_NOT_SUPPORTED);
        static VIPX_STATE st;
        VIP_ULONG n = 0;
        CHECK_RET(VipxViExport(vi, &st, NULL, &n), VIP_ERROR_NOT_SUPPORTED);
    }
    h_signal(p->fd, 'Q');
    h_peer_finish(p);
    h_vi_teardown(vi);
    h_mem_free(&src);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
}

int main(void)
{
    h_init("fabric_deviations", 60);
    CHECK_MSG(h_fabric(), "runs over the fabric provider only (SOVIA_PROVIDER=fabric:tcp)");
    h_peer peers[NCASES];
    for (int c = 0; c < NCASES; c++) {
        h_disc(srv[c], sizeof srv[c]);
        h_disc(cli[c], sizeof cli[c]);
        peers[c] = h_fork(peer, (void *)(intptr_t)c);
    }
    VIP_NIC_HANDLE nic = h_open_nic();
    for (int c = 0; c < NCASES; c++)
        run(nic, c, &peers[c]);
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
