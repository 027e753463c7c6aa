/*
 * connect_async: VipConnectRequest in two steps (docs/VIPL.md,
 * "Connections"; vipl_ext.h), which a non-blocking connect() under sovia
 * run uses, and VipxListenWaiting, which its server's accept() asks:
 *   - VipxConnectStart returns at once, the VI CONNECT_PENDING, before any
 *     listener answered: VipxConnectDone(0) says VIP_TIMEOUT; the listener
 *     sees the request waiting (VipxListenWaiting), also once VipConnectWait
 *     took it and until it is accepted; then not;
 *   - accepted: VipxConnectDone says VIP_SUCCESS, the VI CONNECTED, the
 *     remote attributes given, and a message goes through;
 *   - refused: VIP_REJECT, the VI IDLE again;
 *   - abandoned: the VI IDLE again (VipxConnectDone: VIP_INVALID_STATE) and
 *     destroyable; a pending one is not (VIP_INVALID_STATE).
 * shm only (fabric: VIP_ERROR_NOT_SUPPORTED from the start).
 */
#include "harness.h"

#include <stdlib.h>

static VIP_RETURN start(VIP_VI_HANDLE vi, const char *ldisc, const char *rdisc)
{
    VIP_NET_ADDRESS *l = h_addr(ldisc), *r = h_addr(rdisc);
    VIP_RETURN ret = VipxConnectStart(vi, l, r);
    free(l);
    free(r);
    return ret;
}

static VIP_CONN_HANDLE wait_request(VIP_NIC_HANDLE nic, VIP_NET_ADDRESS *local)
{
    VIP_NET_ADDRESS *remote = h_addr_room();
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn = NULL;
    CHECK_OK(VipConnectWait(nic, local, 5000, remote, &ra, &conn));
    free(remote);
    return conn;
}

int main(void)
{
    h_init("connect_async", 60);
    char srv[80], cli[80];
    h_disc(srv, sizeof srv);
    h_disc(cli, sizeof cli);
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_NET_ADDRESS *local = h_addr(srv);
    CHECK_OK(VipxListen(nic, local));
    CHECK_RET(VipxListenWaiting(nic, local), VIP_NOT_DONE);

    /* 1. Started, answered later. */
    VIP_VI_HANDLE vs = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    VIP_VI_HANDLE vc = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    CHECK_OK(start(vc, cli, srv));
    CHECK_EQ(h_vi_state(vc), VIP_STATE_CONNECT_PENDING);
    VIP_VI_ATTRIBUTES ra;
    CHECK_RET(VipxConnectDone(vc, 0, &ra), VIP_TIMEOUT);
    CHECK_RET(VipDestroyVi(vc), VIP_INVALID_STATE);
    CHECK_OK(VipxListenWaiting(nic, local));
    VIP_CONN_HANDLE conn = wait_request(nic, local);
    CHECK_OK(VipxListenWaiting(nic, local)); /* taken, not answered */
    CHECK_OK(VipConnectAccept(conn, vs));
    CHECK_RET(VipxListenWaiting(nic, local), VIP_NOT_DONE);
    memset(&ra, 0, sizeof ra);
    CHECK_OK(VipxConnectDone(vc, 5000, &ra));
    CHECK_EQ(h_vi_state(vc), VIP_STATE_CONNECTED);
    CHECK_EQ(ra.MaxTransferSize, va.MaxTransferSize);
    h_mem buf = h_mem_alloc(nic, t, 4096, 0);
    h_descs d = h_descs_alloc(nic, t, 2);
    h_post_recv1(vs, &d, 0, buf.ptr, buf.mh, 64);
    memcpy(buf.ptr + 1024, "async", 5);
    h_post_send1(vc, &d, 1, buf.ptr + 1024, buf.mh, 5, 0, 0);
    VIP_DESCRIPTOR *got;
    CHECK_OK(VipRecvWait(vs, 5000, &got));
    CHECK_EQ(got->CS.Length, 5);
    CHECK(memcmp(buf.ptr, "async", 5) == 0);
    h_vi_teardown(vc);
    h_vi_teardown(vs);

    /* 2. Refused. */
    vc = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    CHECK_OK(start(vc, cli, srv));
    CHECK_OK(VipConnectReject(wait_request(nic, local)));
    CHECK_RET(VipxConnectDone(vc, 5000, &ra), VIP_REJECT);
    CHECK_EQ(h_vi_state(vc), VIP_STATE_IDLE);

    /* 3. Abandoned: IDLE, destroyable; the listener refuses what came. */
    CHECK_OK(start(vc, cli, srv));
    CHECK_OK(VipxConnectAbandon(vc));
    CHECK_EQ(h_vi_state(vc), VIP_STATE_IDLE);
    CHECK_RET(VipxConnectDone(vc, 0, &ra), VIP_INVALID_STATE);
    CHECK_RET(VipxConnectAbandon(vc), VIP_INVALID_STATE);
    VIP_NET_ADDRESS *remote = h_addr_room();
    VIP_CONN_HANDLE c2 = NULL;
    if (VipConnectWait(nic, local, 200, remote, &ra, &c2) == VIP_SUCCESS)
        CHECK_OK(VipConnectReject(c2));
    free(remote);
    CHECK_RET(VipxListenWaiting(nic, local), VIP_NOT_DONE);
    CHECK_OK(VipDestroyVi(vc));

    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipxUnlisten(nic, local));
    free(local);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
