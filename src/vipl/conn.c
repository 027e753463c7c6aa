/* conn.c - the VIA client/server connection model. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"

static bool address_ok(const VIP_NET_ADDRESS *a)
{
    return a && a->HostAddressLen <= 16 && a->DiscriminatorLen >= 1 &&
           a->DiscriminatorLen <= VIPL_MAX_DISC;
}

VIPL_EXPORT VIP_RETURN VipConnectWait(VIP_NIC_HANDLE NicHandle, VIP_NET_ADDRESS *LocalAddr,
                                      VIP_ULONG Timeout, VIP_NET_ADDRESS *RemoteAddr,
                                      VIP_VI_ATTRIBUTES *RemoteViAttribs,
                                      VIP_CONN_HANDLE *ConnHandle)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic || !address_ok(LocalAddr) || !RemoteAddr || !ConnHandle)
        return VIP_INVALID_PARAMETER;
    struct vipl_conn *conn = vipl_pool_get(&nic->conns);
    if (!conn)
        return VIP_ERROR_RESOURCE;
    conn->nic = nic;
    conn->token = -1;
    conn->peer_uid = geteuid();
    conn->foreign = false;
    struct timespec buf;
    VIP_RETURN r = nic->prov->connect_wait(nic, LocalAddr, vipl_deadline(Timeout, &buf),
                                           RemoteAddr, conn);
    if (r != VIP_SUCCESS) {
        vipl_pool_put(&nic->conns, conn);
        return r;
    }
    conn->magic = VIPL_CONN_MAGIC;
    if (RemoteViAttribs)
        *RemoteViAttribs = conn->remote_attrs;
    *ConnHandle = conn;
    return VIP_SUCCESS;
}

static struct vipl_conn *conn_of(VIP_CONN_HANDLE h)
{
    struct vipl_conn *c = h;
    return c && c->magic == VIPL_CONN_MAGIC ? c : NULL;
}

static void conn_free(struct vipl_conn *conn)
{
    if (conn->token >= 0)
        VipxFdClose(conn->token);
    vipl_pool_put(&conn->nic->conns, conn);
}

VIPL_EXPORT VIP_RETURN VipxConnToken(VIP_CONN_HANDLE ConnHandle, int *Fd)
{
    struct vipl_conn *conn = conn_of(ConnHandle);
    if (!conn || !Fd)
        return VIP_INVALID_PARAMETER;
    *Fd = conn->token;
    conn->token = -1;
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipxViSetConnectToken(VIP_VI_HANDLE ViHandle, int Fd)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi || Fd < -1)
        return VIP_INVALID_PARAMETER;
    int copy = Fd >= 0 ? vipl_fd_dup(Fd) : -1;
    if (Fd >= 0 && copy < 0)
        return VIP_ERROR_RESOURCE;
    if (vi->connect_token >= 0)
        VipxFdClose(vi->connect_token);
    vi->connect_token = copy;
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipxConnPeerUser(VIP_CONN_HANDLE ConnHandle, uid_t *Uid,
                                        VIP_BOOLEAN *Foreign)
{
    struct vipl_conn *conn = conn_of(ConnHandle);
    if (!conn || !Uid || !Foreign)
        return VIP_INVALID_PARAMETER;
    *Uid = conn->peer_uid;
    *Foreign = conn->foreign;
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipxViSetConnectUser(VIP_VI_HANDLE ViHandle, uid_t Uid)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi)
        return VIP_INVALID_PARAMETER;
    vi->connect_uid = Uid;
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipConnectAccept(VIP_CONN_HANDLE ConnHandle, VIP_VI_HANDLE ViHandle)
{
    struct vipl_conn *conn = conn_of(ConnHandle);
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!conn || !vi || vi->nic != conn->nic)
        return VIP_INVALID_PARAMETER;
    if (vipl_vi_state(vi) != VIP_STATE_IDLE || vi->last)
        return VIP_INVALID_STATE;
    if (vi->attrs.ReliabilityLevel != conn->remote_attrs.ReliabilityLevel) {
        vi->nic->prov->connect_reject(conn);
        conn_free(conn);
        return VIP_INVALID_RELIABILITY_LEVEL;
    }
    VIP_RETURN r = vi->nic->prov->connect_accept(conn, vi);
    conn_free(conn); /* the handle is consumed whether or not the accept worked */
    return r;
}

VIPL_EXPORT VIP_RETURN VipConnectReject(VIP_CONN_HANDLE ConnHandle)
{
    struct vipl_conn *conn = conn_of(ConnHandle);
    if (!conn)
        return VIP_INVALID_PARAMETER;
    conn->nic->prov->connect_reject(conn);
    conn_free(conn);
    return VIP_SUCCESS;
}

/* A request's token goes with it (one request's). */
static void token_sent(struct vipl_vi *vi)
{
    if (vi->connect_token >= 0) {
        VipxFdClose(vi->connect_token);
        vi->connect_token = -1;
    }
}

VIPL_EXPORT VIP_RETURN VipConnectRequest(VIP_VI_HANDLE ViHandle, VIP_NET_ADDRESS *LocalAddr,
                                         VIP_NET_ADDRESS *RemoteAddr, VIP_ULONG Timeout,
                                         VIP_VI_ATTRIBUTES *RemoteViAttribs)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi || !address_ok(LocalAddr) || !address_ok(RemoteAddr))
        return VIP_INVALID_PARAMETER;
    int idle = VIP_STATE_IDLE;
    if (vi->last)
        return VIP_INVALID_STATE;
    if (!atomic_compare_exchange_strong(&vi->state, &idle, VIP_STATE_CONNECT_PENDING))
        return VIP_INVALID_STATE;
    VIP_VI_ATTRIBUTES rattrs;
    struct timespec buf;
    VIP_RETURN r = vi->nic->prov->connect_request(vi, LocalAddr, RemoteAddr,
                                                  vipl_deadline(Timeout, &buf), &rattrs);
    token_sent(vi);
    if (r != VIP_SUCCESS) {
        atomic_store(&vi->state, VIP_STATE_IDLE);
        return r;
    }
    if (RemoteViAttribs)
        *RemoteViAttribs = rattrs;
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipxConnectStart(VIP_VI_HANDLE ViHandle, VIP_NET_ADDRESS *LocalAddr,
                                        VIP_NET_ADDRESS *RemoteAddr)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi || !address_ok(LocalAddr) || !address_ok(RemoteAddr))
        return VIP_INVALID_PARAMETER;
    if (!vi->nic->prov->connect_start)
        return VIP_ERROR_NOT_SUPPORTED;
    int idle = VIP_STATE_IDLE;
    if (vi->last || !atomic_compare_exchange_strong(&vi->state, &idle, VIP_STATE_CONNECT_PENDING))
        return VIP_INVALID_STATE;
    VIP_RETURN r = vi->nic->prov->connect_start(vi, LocalAddr, RemoteAddr);
    token_sent(vi);
    if (r != VIP_SUCCESS)
        atomic_store(&vi->state, VIP_STATE_IDLE);
    return r;
}

VIPL_EXPORT VIP_RETURN VipxConnectDone(VIP_VI_HANDLE ViHandle, VIP_ULONG Timeout,
                                       VIP_VI_ATTRIBUTES *RemoteViAttribs)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi)
        return VIP_INVALID_PARAMETER;
    if (vipl_vi_state(vi) != VIP_STATE_CONNECT_PENDING || !vi->nic->prov->connect_finish)
        return VIP_INVALID_STATE;
    VIP_VI_ATTRIBUTES rattrs;
    struct timespec buf;
    VIP_RETURN r = vi->nic->prov->connect_finish(vi, vipl_deadline(Timeout, &buf), &rattrs);
    if (r == VIP_TIMEOUT)
        return r;
    if (r != VIP_SUCCESS) {
        atomic_store(&vi->state, VIP_STATE_IDLE);
        return r;
    }
    if (RemoteViAttribs)
        *RemoteViAttribs = rattrs;
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipxConnectAbandon(VIP_VI_HANDLE ViHandle)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi)
        return VIP_INVALID_PARAMETER;
    if (vipl_vi_state(vi) != VIP_STATE_CONNECT_PENDING || !vi->nic->prov->connect_abandon)
        return VIP_INVALID_STATE;
    vi->nic->prov->connect_abandon(vi);
    atomic_store(&vi->state, VIP_STATE_IDLE);
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipDisconnect(VIP_VI_HANDLE ViHandle)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi)
        return VIP_INVALID_PARAMETER;
    /* IDLE too: a VI whose connect failed or was refused still holds the
     * receives pre-posted for it, and only a flush lets it be destroyed. */
    int state = vipl_vi_state(vi);
    if (state != VIP_STATE_CONNECTED && state != VIP_STATE_ERROR && state != VIP_STATE_IDLE)
        return VIP_INVALID_STATE;
    return vi->nic->prov->disconnect(vi);
}

VIPL_EXPORT VIP_RETURN VipxDisconnectLast(VIP_VI_HANDLE ViHandle)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi)
        return VIP_INVALID_PARAMETER;
    bool was = vi->last;
    vi->last = true;
    VIP_RETURN r = VipDisconnect(ViHandle);
    if (r == VIP_INVALID_STATE)
        vi->last = was; /* connecting: it may still connect */
    return r;
}

VIPL_EXPORT VIP_RETURN VipxListen(VIP_NIC_HANDLE NicHandle, VIP_NET_ADDRESS *LocalAddr)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic || !address_ok(LocalAddr))
        return VIP_INVALID_PARAMETER;
    return nic->prov->listen(nic, LocalAddr, false);
}

VIPL_EXPORT VIP_RETURN VipxListenWaiting(VIP_NIC_HANDLE NicHandle, VIP_NET_ADDRESS *LocalAddr)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic || !address_ok(LocalAddr))
        return VIP_INVALID_PARAMETER;
    if (!nic->prov->listen_waiting)
        return VIP_ERROR_NOT_SUPPORTED;
    return nic->prov->listen_waiting(nic, LocalAddr) ? VIP_SUCCESS : VIP_NOT_DONE;
}

VIPL_EXPORT VIP_RETURN VipxListenAnyUser(VIP_NIC_HANDLE NicHandle, VIP_NET_ADDRESS *LocalAddr)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic || !address_ok(LocalAddr))
        return VIP_INVALID_PARAMETER;
    return nic->prov->listen(nic, LocalAddr, true);
}

VIPL_EXPORT VIP_RETURN VipxUnlisten(VIP_NIC_HANDLE NicHandle, VIP_NET_ADDRESS *LocalAddr)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic || !address_ok(LocalAddr))
        return VIP_INVALID_PARAMETER;
    return nic->prov->unlisten(nic, LocalAddr);
}
