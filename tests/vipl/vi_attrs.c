/*
 * vi_attrs: VipCreateVi error codes, VipQueryVi / VipSetViAttributes,
 * posting rules per state, descriptor pointer checks, queue and staging
 * limits, VipDestroyVi rules (docs/VIPL.md "VIs", "Posting and completion").
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static char srv_disc[80], cli_disc[80];

static const VIP_UINT32 msg_len[4] = {2048, 2048, 8192, 64};

/* ---- peer: server; sends four messages, receives one, disconnects ---------- */

static void peer(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_UNRELIABLE);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    h_descs d = h_descs_alloc(nic, t, 8);
    h_mem out = h_mem_alloc(nic, t, 8192, 0);
    h_mem in = h_mem_alloc(nic, t, 4096, 0);

    h_post_recv1(vi, &d, 0, in.ptr, in.mh, 4096);
    h_accept(nic, vi, srv_disc, NULL);

    for (unsigned i = 0; i < 4; i++) {
        h_fill_random(out.ptr, msg_len[i], 100 + i);
        h_post_send1(vi, &d, 1 + i, out.ptr, out.mh, msg_len[i], 0, 0);
        VIP_DESCRIPTOR *x = h_send_done(vi);
        CHECK(x == h_desc(&d, 1 + i));
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
        CHECK_EQ(x->CS.Length, msg_len[i]);
    }
    h_signal(fd, 'D');

    h_expect(fd, 'M');
    VIP_DESCRIPTOR *x = h_recv_wait(vi, 5000);
    CHECK(x == h_desc(&d, 0));
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
    CHECK_EQ(x->CS.Length, 100);
    CHECK_RANDOM(in.ptr, 100, 200);

    CHECK_OK(VipDisconnect(vi));
    CHECK_EQ(h_vi_state(vi), VIP_STATE_IDLE);
    h_signal(fd, 'X');

    CHECK_OK(VipDestroyVi(vi));
    h_mem_free(&in);
    h_mem_free(&out);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    h_expect(fd, 'Q');
}

/* ---- parent ---------------------------------------------------------------- */

static void check_query(VIP_VI_HANDLE vi, VIP_VI_STATE state, const VIP_VI_ATTRIBUTES *want,
                        VIP_BOOLEAN send_empty, VIP_BOOLEAN recv_empty)
{
    VIP_VI_STATE st;
    VIP_VI_ATTRIBUTES a;
    VIP_BOOLEAN se = 7, re = 7;
    memset(&a, 0xEE, sizeof a);
    CHECK_OK(VipQueryVi(vi, &st, &a, &se, &re));
    CHECK_MSG(st == state, "state %s, expected %s", h_state_str(st), h_state_str(state));
    CHECK_EQ(a.ReliabilityLevel, want->ReliabilityLevel);
    CHECK_EQ(a.MaxTransferSize, want->MaxTransferSize);
    CHECK_MSG(a.Ptag == want->Ptag, "Ptag %p, expected %p", a.Ptag, want->Ptag);
    CHECK_EQ(a.EnableRdmaWrite, want->EnableRdmaWrite);
    CHECK_EQ(a.EnableRdmaRead, VIP_FALSE);
    CHECK_EQ(se, send_empty);
    CHECK_EQ(re, recv_empty);
}

static void test_create_errors(VIP_NIC_HANDLE nic, VIP_NIC_HANDLE other)
{
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_HANDLE vi;
    VIP_VI_ATTRIBUTES a;

    static const VIP_RELIABILITY_LEVEL badrel[] = {0, 0x03, 0x05, 0x06, 0x07, 0x08, 0x10, 0xFF00};
    for (size_t i = 0; i < sizeof badrel / sizeof badrel[0]; i++) {
        a = h_vi_attrs(t, badrel[i]);
        VIP_RETURN r = VipCreateVi(nic, &a, NULL, NULL, &vi);
        CHECK_MSG(r == VIP_INVALID_RELIABILITY_LEVEL,
                  "ReliabilityLevel 0x%x: %s, expected VIP_INVALID_RELIABILITY_LEVEL",
                  badrel[i], VipxReturnString(r));
    }
    static const VIP_RELIABILITY_LEVEL goodrel[] = {
        VIP_SERVICE_UNRELIABLE, VIP_SERVICE_RELIABLE_DELIVERY, VIP_SERVICE_RELIABLE_RECEPTION};
    for (size_t i = 0; i < 3; i++) {
        a = h_vi_attrs(t, goodrel[i]);
        CHECK_OK(VipCreateVi(nic, &a, NULL, NULL, &vi));
        check_query(vi, VIP_STATE_IDLE, &a, VIP_TRUE, VIP_TRUE);
        CHECK_OK(VipDestroyVi(vi));
    }

    a = h_vi_attrs(t, VIP_SERVICE_UNRELIABLE);
    a.MaxTransferSize = 0;
    CHECK_RET(VipCreateVi(nic, &a, NULL, NULL, &vi), VIP_INVALID_MTU);
    a.MaxTransferSize = H_NIC_MTU + 1;
    CHECK_RET(VipCreateVi(nic, &a, NULL, NULL, &vi), VIP_INVALID_MTU);
    a.MaxTransferSize = 2 * H_NIC_MTU;
    CHECK_RET(VipCreateVi(nic, &a, NULL, NULL, &vi), VIP_INVALID_MTU);
    a.MaxTransferSize = 1;
    CHECK_OK(VipCreateVi(nic, &a, NULL, NULL, &vi));
    check_query(vi, VIP_STATE_IDLE, &a, VIP_TRUE, VIP_TRUE);
    CHECK_OK(VipDestroyVi(vi));

    VIP_PROTECTION_HANDLE foreign = h_ptag(other);
    VIP_PROTECTION_HANDLE dead = h_ptag(nic);
    CHECK_OK(VipDestroyPtag(nic, dead));
    a = h_vi_attrs(NULL, VIP_SERVICE_UNRELIABLE);
    CHECK_RET(VipCreateVi(nic, &a, NULL, NULL, &vi), VIP_INVALID_PTAG);
    a.Ptag = foreign;
    CHECK_RET(VipCreateVi(nic, &a, NULL, NULL, &vi), VIP_INVALID_PTAG);
    a.Ptag = dead;
    CHECK_RET(VipCreateVi(nic, &a, NULL, NULL, &vi), VIP_INVALID_PTAG);

    a = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    a.EnableRdmaRead = VIP_TRUE;
    CHECK_RET(VipCreateVi(nic, &a, NULL, NULL, &vi), VIP_INVALID_RDMAREAD);

    /* The deepest queue the NIC advertises. */
    a = h_vi_attrs(t, VIP_SERVICE_UNRELIABLE);
    VIPX_VI_CONFIG cfg = {.QueueDepth = 4096};
    CHECK_OK(VipxCreateVi(nic, &a, NULL, NULL, &cfg, &vi));
    CHECK_OK(VipDestroyVi(vi));

    /* QoS is ignored, whatever it points at. */
    a = h_vi_attrs(t, VIP_SERVICE_UNRELIABLE);
    static char qos_blob[16];
    a.QoS = qos_blob;
    CHECK_OK(VipCreateVi(nic, &a, NULL, NULL, &vi));
    CHECK_OK(VipDestroyVi(vi));

    /* The failed creates took no reference on the tags. */
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipDestroyPtag(other, foreign));
}

static void test_query_set(VIP_NIC_HANDLE nic)
{
    VIP_PROTECTION_HANDLE t1 = h_ptag(nic), t2 = h_ptag(nic);
    VIP_VI_ATTRIBUTES a = h_vi_attrs(t1, VIP_SERVICE_RELIABLE_RECEPTION);
    a.MaxTransferSize = 12345;
    a.EnableRdmaWrite = VIP_TRUE;
    VIP_VI_HANDLE vi = NULL;
    CHECK_OK(VipCreateVi(nic, &a, NULL, NULL, &vi));
    check_query(vi, VIP_STATE_IDLE, &a, VIP_TRUE, VIP_TRUE);

    VIP_VI_ATTRIBUTES b = h_vi_attrs(t2, VIP_SERVICE_UNRELIABLE);
    b.MaxTransferSize = 2000;
    b.EnableRdmaWrite = VIP_FALSE;
    CHECK_OK(VipSetViAttributes(vi, &b));
    check_query(vi, VIP_STATE_IDLE, &b, VIP_TRUE, VIP_TRUE);
    b.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
    b.MaxTransferSize = H_NIC_MTU;
    b.EnableRdmaWrite = VIP_TRUE;
    CHECK_OK(VipSetViAttributes(vi, &b));
    check_query(vi, VIP_STATE_IDLE, &b, VIP_TRUE, VIP_TRUE);

    CHECK_OK(VipDestroyVi(vi));
    CHECK_OK(VipDestroyPtag(nic, t1));
    CHECK_OK(VipDestroyPtag(nic, t2));
}

/* The default staging area (a full queue of MaxTransferSize receives,
 * about 1 GiB here) is a sparse file: a process that may not write files
 * that large (RLIMIT_FSIZE) still gets its VI, with a smaller area. */
static void test_small_fsize(void)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        struct rlimit rl = {16 << 20, 16 << 20};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
            _exit(3);
        VIP_NIC_HANDLE nic;
        VIP_PROTECTION_HANDLE t;
        VIP_VI_HANDLE vi;
        if (VipOpenNic(NULL, &nic) != VIP_SUCCESS || VipCreatePtag(nic, &t) != VIP_SUCCESS)
            _exit(4);
        VIP_VI_ATTRIBUTES a = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
        VIP_RETURN r = VipCreateVi(nic, &a, NULL, NULL, &vi);
        _exit(r == VIP_SUCCESS && VipDestroyVi(vi) == VIP_SUCCESS ? 0 : 5);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "VipCreateVi under RLIMIT_FSIZE 16 MiB: child status %d", st);
}

int main(void)
{
    h_init("vi_attrs", 30);
    test_small_fsize();
    h_disc(srv_disc, sizeof srv_disc);
    h_disc(cli_disc, sizeof cli_disc);
    h_peer p = h_fork(peer, NULL);

    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_NIC_HANDLE other = h_open_nic();
    /* A handler, then NULL: the default handler (which only counts) is back. */
    static h_errlog log;
    h_errlog_install(nic, &log);
    CHECK_OK(VipErrorCallback(nic, NULL, NULL));
    test_create_errors(nic, other);
    test_query_set(nic);

    /* The VI under test: queue depth 3 (rounded up to 4), 4 KiB staging, an arena. */
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES a = h_vi_attrs(t, VIP_SERVICE_UNRELIABLE);
    VIP_VI_HANDLE vi = h_vi(nic, &a, NULL, NULL, 3, 4096, 65536);
    VIP_PVOID arena = NULL;
    VIP_ULONG arena_len = 0;
    CHECK_OK(VipxViArena(vi, &arena, &arena_len));
    CHECK(arena != NULL);
    CHECK_MSG(arena_len >= 65536, "arena of %lu bytes, asked for 65536", arena_len);
    h_mem ar = h_mem_reg(nic, t, arena, 65536, 0);
    h_mem buf = h_mem_alloc(nic, t, 3 * 4096, 0);
    h_descs d = h_descs_alloc(nic, t, 16);

    /* IDLE: no sends; receives may be pre-posted. */
    h_desc_prep(h_desc(&d, 15), 0, 0);
    h_desc_add(h_desc(&d, 15), buf.ptr, buf.mh, 64);
    CHECK_RET(VipPostSend(vi, h_desc(&d, 15), d.m.mh), VIP_INVALID_STATE);
    check_query(vi, VIP_STATE_IDLE, &a, VIP_TRUE, VIP_TRUE);

    /* Descriptor pointer checks. */
    CHECK_RET(VipPostRecv(vi, NULL, d.m.mh), VIP_INVALID_PARAMETER);
    VIP_DESCRIPTOR *mis = (VIP_DESCRIPTOR *)(void *)((unsigned char *)h_desc(&d, 14) + 32);
    h_desc_prep(mis, 0, 0); /* clears the slot's tail; harmless */
    h_desc_add(mis, buf.ptr, buf.mh, 64);
    CHECK_RET(VipPostRecv(vi, mis, d.m.mh), VIP_INVALID_PARAMETER);
    mis = (VIP_DESCRIPTOR *)(void *)((unsigned char *)h_desc(&d, 13) + 8);
    h_desc_prep(mis, 0, 0);
    h_desc_add(mis, buf.ptr, buf.mh, 64);
    CHECK_RET(VipPostRecv(vi, mis, d.m.mh), VIP_INVALID_PARAMETER);
    check_query(vi, VIP_STATE_IDLE, &a, VIP_TRUE, VIP_TRUE);

    /* Staging: 4096 bytes for receives outside the arena. */
    h_post_recv1(vi, &d, 0, buf.ptr, buf.mh, 2048);
    h_desc_prep(h_desc(&d, 1), 0, 0);
    h_desc_add(h_desc(&d, 1), buf.ptr + 4096, buf.mh, 4096);
    CHECK_RET(VipPostRecv(vi, h_desc(&d, 1), d.m.mh), VIP_ERROR_RESOURCE);
    h_post_recv1(vi, &d, 1, buf.ptr + 4096, buf.mh, 2048);
    h_desc_prep(h_desc(&d, 2), 0, 0);
    h_desc_add(h_desc(&d, 2), buf.ptr + 8192, buf.mh, 64);
    CHECK_RET(VipPostRecv(vi, h_desc(&d, 2), d.m.mh), VIP_ERROR_RESOURCE);

    /* Arena receives need no staging; the queue holds 4. */
    h_post_recv1(vi, &d, 2, ar.ptr, ar.mh, 8192);
    h_post_recv1(vi, &d, 3, ar.ptr + 8192, ar.mh, 64);
    h_desc_prep(h_desc(&d, 4), 0, 0);
    h_desc_add(h_desc(&d, 4), ar.ptr + 16384, ar.mh, 64);
    CHECK_RET(VipPostRecv(vi, h_desc(&d, 4), d.m.mh), VIP_ERROR_RESOURCE);

    check_query(vi, VIP_STATE_IDLE, &a, VIP_TRUE, VIP_FALSE);
    VIP_DESCRIPTOR *x = NULL;
    CHECK_RET(VipRecvDone(vi, &x), VIP_NOT_DONE);
    CHECK_RET(VipSendDone(vi, &x), VIP_NOT_DONE);
    CHECK_RET(VipDestroyVi(vi), VIP_INVALID_STATE);
    VIP_VI_ATTRIBUTES same = a;
    CHECK_OK(VipSetViAttributes(vi, &same)); /* still IDLE */

    /* CONNECTED. */
    h_connect(vi, cli_disc, srv_disc, NULL);
    check_query(vi, VIP_STATE_CONNECTED, &a, VIP_TRUE, VIP_FALSE);
    h_expect(p.fd, 'D');
    for (unsigned i = 0; i < 4; i++) {
        x = NULL;
        CHECK_OK(VipRecvDone(vi, &x));
        CHECK(x == h_desc(&d, i));
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
        CHECK_EQ(x->CS.Length, msg_len[i]);
    }
    CHECK_RANDOM(buf.ptr, 2048, 100);
    CHECK_RANDOM(buf.ptr + 4096, 2048, 101);
    CHECK_RANDOM(ar.ptr, 8192, 102);
    CHECK_RANDOM(ar.ptr + 8192, 64, 103);
    CHECK_RET(VipRecvDone(vi, &x), VIP_NOT_DONE);
    check_query(vi, VIP_STATE_CONNECTED, &a, VIP_TRUE, VIP_TRUE);

    VIPX_VI_STATS st;
    memset(&st, 0xEE, sizeof st);
    CHECK_OK(VipxQueryViStats(vi, &st));
    CHECK_EQ(st.RecvsCompleted, 4);
    CHECK_EQ(st.BytesReceived, 2048 + 2048 + 8192 + 64);
    CHECK_EQ(st.StagedRecvs, 2);
    CHECK_EQ(st.DroppedNoRecv, 0);

    /* The completed receives gave their staging back. */
    h_post_recv1(vi, &d, 5, buf.ptr, buf.mh, 4096);

    VIP_VI_ATTRIBUTES changed = a;
    changed.MaxTransferSize = 1000;
    CHECK_RET(VipSetViAttributes(vi, &changed), VIP_INVALID_STATE);
    CHECK_RET(VipDestroyVi(vi), VIP_INVALID_STATE);
    CHECK_RET(VipPostSend(vi, NULL, d.m.mh), VIP_INVALID_PARAMETER);
    mis = (VIP_DESCRIPTOR *)(void *)((unsigned char *)h_desc(&d, 12) + 16);
    h_desc_prep(mis, 0, 0);
    h_desc_add(mis, buf.ptr, buf.mh, 64);
    CHECK_RET(VipPostSend(vi, mis, d.m.mh), VIP_INVALID_PARAMETER);
    check_query(vi, VIP_STATE_CONNECTED, &a, VIP_TRUE, VIP_FALSE);

    /* A send is complete when VipPostSend returns; the queue holds it until SendDone. */
    h_fill_random(buf.ptr + 8192, 100, 200);
    h_post_send1(vi, &d, 6, buf.ptr + 8192, buf.mh, 100, 0, 0);
    check_query(vi, VIP_STATE_CONNECTED, &a, VIP_FALSE, VIP_FALSE);
    /* Completed sends hold their queue slots until dequeued: 4 fit, the 5th does not.
     * (The peer has no more receives: this unreliable VI drops the three.) */
    for (unsigned i = 10; i < 13; i++)
        h_post_send1(vi, &d, i, buf.ptr + 8192, buf.mh, 64, 0, 0);
    h_desc_prep(h_desc(&d, 13), 0, 0);
    h_desc_add(h_desc(&d, 13), buf.ptr + 8192, buf.mh, 64);
    CHECK_RET(VipPostSend(vi, h_desc(&d, 13), d.m.mh), VIP_ERROR_RESOURCE);
    x = h_send_done(vi);
    CHECK(x == h_desc(&d, 6));
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
    CHECK_EQ(x->CS.Length, 100);
    for (unsigned i = 10; i < 13; i++) {
        x = h_send_done(vi);
        CHECK(x == h_desc(&d, i));
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
    }
    CHECK_OK(VipxQueryViStats(vi, &st));
    CHECK_EQ(st.DroppedNoRecv, h_fabric() ? 0 : 3); /* fabric drops nothing: docs/VIPL.md */
    check_query(vi, VIP_STATE_CONNECTED, &a, VIP_TRUE, VIP_FALSE);
    h_signal(p.fd, 'M');

    /* The peer disconnects: ERROR, the posted receive is flushed. */
    h_expect(p.fd, 'X');
    VIP_VI_STATE s = h_wait_state(vi, VIP_STATE_ERROR, 2000);
    CHECK_MSG(s == VIP_STATE_ERROR, "after the peer's VipDisconnect the VI is %s, expected ERROR",
              h_state_str(s));
    h_sleep_ms(50);
    CHECK_MSG(h_errlog_count(&log) == 0, "the handler removed with VipErrorCallback(NULL) was called");
    x = h_recv_wait(vi, 2000);
    CHECK(x == h_desc(&d, 5));
    CHECK_ERR_STATUS(x, VIP_STATUS_DESC_FLUSHED_ERROR, VIP_STATUS_OP_RECEIVE);
    CHECK_RET(VipRecvDone(vi, &x), VIP_NOT_DONE);

    /* ERROR: posts are accepted and flushed at once. */
    h_post_recv1(vi, &d, 7, buf.ptr, buf.mh, 64);
    x = NULL;
    CHECK_OK(VipRecvDone(vi, &x));
    CHECK(x == h_desc(&d, 7));
    CHECK_ERR_STATUS(x, VIP_STATUS_DESC_FLUSHED_ERROR, VIP_STATUS_OP_RECEIVE);
    h_post_send1(vi, &d, 8, buf.ptr, buf.mh, 64, 0, 0);
    h_post_send1(vi, &d, 9, buf.ptr, buf.mh, 64, 0, 0);
    CHECK_RET(VipSetViAttributes(vi, &changed), VIP_INVALID_STATE);
    /* Completed but not dequeued descriptors keep the VI alive. */
    check_query(vi, VIP_STATE_ERROR, &a, VIP_FALSE, VIP_TRUE);
    CHECK_RET(VipDestroyVi(vi), VIP_INVALID_STATE);
    x = h_send_done(vi);
    CHECK(x == h_desc(&d, 8));
    CHECK_ERR_STATUS(x, VIP_STATUS_DESC_FLUSHED_ERROR, VIP_STATUS_OP_SEND);
    CHECK_RET(VipDestroyVi(vi), VIP_INVALID_STATE);
    x = h_send_done(vi);
    CHECK(x == h_desc(&d, 9));
    CHECK_ERR_STATUS(x, VIP_STATUS_DESC_FLUSHED_ERROR, VIP_STATUS_OP_SEND);
    check_query(vi, VIP_STATE_ERROR, &a, VIP_TRUE, VIP_TRUE);
    h_mem_free(&ar); /* the arena lives until VipDestroyVi */
    CHECK_OK(VipDestroyVi(vi));

    h_signal(p.fd, 'Q');
    h_peer_finish(&p);
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(other));
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
