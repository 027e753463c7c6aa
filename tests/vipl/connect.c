/*
 * connect: the connection model (docs/VIPL.md "Connections").
 *   - VipConnectWait timeout, VipConnectRequest with nobody listening
 *     (VIP_NO_MATCH at once) and to another host (VIP_NOT_REACHABLE);
 *   - reject; a request not answered within its timeout (VIP_TIMEOUT, VI IDLE
 *     again and reusable); reliability mismatch; accept on a VI that is not
 *     IDLE;
 *   - CONNECT_PENDING while the request waits (no sends, no attribute change,
 *     no destroy); the remote address and attributes each side learns;
 *   - VipDisconnect: local IDLE with receives flushed, the peer VI ERROR with
 *     its receives flushed and VIP_ERROR_CONN_LOST; the VI reconnects;
 *   - VipxDisconnectLast: the same for a VI destroyed next, which keeps its
 *     segments (no fresh memfd: shm) and cannot connect again.
 */
#include "harness.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>

/* The shm segments this process maps (peers' included), by inode, sorted. */
static size_t vi_segments(unsigned long *ino, size_t max)
{
    FILE *f = fopen("/proc/self/maps", "re");
    char line[512];
    size_t n = 0;
    CHECK(f != NULL);
    while (fgets(line, sizeof line, f)) {
        unsigned long i;
        if (!strstr(line, "/memfd:sovia-vi-") ||
            sscanf(line, "%*s %*s %*s %*s %lu", &i) != 1)
            continue;
        size_t k = 0;
        while (k < n && ino[k] < i)
            k++;
        if ((k < n && ino[k] == i) || n == max)
            continue;
        memmove(ino + k + 1, ino + k, (n - k) * sizeof *ino);
        ino[k] = i;
        n++;
    }
    fclose(f);
    return n;
}

/* VipxDisconnectLast on a connected VI: IDLE, no fresh segments made (no
 * new one among those mapped), no new connection, then destroyed. */
static void disconnect_last(VIP_VI_HANDLE vi, const char *local, const char *remote)
{
    unsigned long before[64], after[64];
    size_t nb = vi_segments(before, 64);
    CHECK_OK(VipxDisconnectLast(vi));
    CHECK_EQ(h_vi_state(vi), VIP_STATE_IDLE);
    /* The peer's segments go; none of ours comes. */
    size_t na = vi_segments(after, 64);
    for (size_t i = 0, k = 0; i < na; i++, k++) {
        while (k < nb && before[k] < after[i])
            k++;
        CHECK_MSG(k < nb && before[k] == after[i],
                  "VipxDisconnectLast mapped a new segment (inode %lu)", after[i]);
    }
    VIP_VI_ATTRIBUTES ra;
    CHECK_RET(h_connect_ret(vi, local, remote, 100, &ra), VIP_INVALID_STATE);
    CHECK_OK(VipDestroyVi(vi));
    na = vi_segments(after, 64);
    CHECK_MSG(h_fabric() || na < nb, "VipDestroyVi left %zu of %zu segments mapped", na, nb);
}

enum { R_REJECT, R_TIMEOUT, R_MISMATCH, R_MAIN, R_BUSY, R_AGAIN, R_QUEUED, R_IFADDR, NROUNDS };
static char srv[NROUNDS][80], cli[NROUNDS][80];

#define MAIN_MTU 123456
#define CLIENT_MTU 65536

static void check_remote_addr(const VIP_NET_ADDRESS *a, const char *disc)
{
    CHECK_EQ(a->HostAddressLen, 4);
    CHECK_MSG(memcmp(a->HostAddress, h_loopback, 4) == 0, "remote host is not 127.0.0.1");
    CHECK_EQ(a->DiscriminatorLen, strlen(disc));
    CHECK_MSG(memcmp(a->HostAddress + 4, disc, strlen(disc)) == 0,
              "remote discriminator is not \"%s\"", disc);
}

/* VipConnectWait on srv[round]; checks the requester's address. */
static VIP_CONN_HANDLE wait_request(VIP_NIC_HANDLE nic, int round, VIP_VI_ATTRIBUTES *ra)
{
    VIP_NET_ADDRESS *local = h_addr(srv[round]);
    VIP_NET_ADDRESS *remote = h_addr_room();
    VIP_CONN_HANDLE conn = NULL;
    CHECK_OK(VipConnectWait(nic, local, 20000, remote, ra, &conn));
    CHECK(conn != NULL);
    check_remote_addr(remote, cli[round]);
    free(local);
    free(remote);
    return conn;
}

/* ---- peer: the server side of every round ------------------------------------------ */

static void peer(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    h_errlog log;
    h_errlog_install(nic, &log);
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    h_mem buf = h_mem_alloc(nic, t, 4 * 4096, 0);
    h_descs d = h_descs_alloc(nic, t, 4);
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn;

    /* Reject. */
    conn = wait_request(nic, R_REJECT, &ra);
    CHECK_OK(VipConnectReject(conn));

    /* Hold a request without answering until the requester has timed out. */
    conn = wait_request(nic, R_TIMEOUT, &ra);
    h_signal(fd, 'w');
    h_expect(fd, 'T');
    h_log("VipConnectReject after the requester timed out: %s",
          VipxReturnString(VipConnectReject(conn)));

    /* Reliability mismatch: an unreliable VI cannot take a reliable request. */
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_UNRELIABLE);
    VIP_VI_HANDLE vu = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    conn = wait_request(nic, R_MISMATCH, &ra);
    CHECK_EQ(ra.ReliabilityLevel, VIP_SERVICE_RELIABLE_DELIVERY);
    CHECK_RET(VipConnectAccept(conn, vu), VIP_INVALID_RELIABILITY_LEVEL);
    CHECK_EQ(h_vi_state(vu), VIP_STATE_IDLE);
    CHECK_OK(VipDestroyVi(vu));

    /* The main connection: accepted only when the parent has seen CONNECT_PENDING. */
    va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    va.MaxTransferSize = MAIN_MTU;
    va.EnableRdmaWrite = VIP_TRUE;
    VIP_VI_HANDLE vm = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    for (unsigned i = 0; i < 3; i++)
        h_post_recv1(vm, &d, i, buf.ptr + 4096 * i, buf.mh, 4096);
    conn = wait_request(nic, R_MAIN, &ra);
    CHECK_EQ(ra.ReliabilityLevel, VIP_SERVICE_RELIABLE_DELIVERY);
    CHECK_EQ(ra.MaxTransferSize, CLIENT_MTU);
    CHECK_EQ(ra.EnableRdmaWrite, VIP_FALSE);
    CHECK_EQ(ra.EnableRdmaRead, VIP_FALSE);
    h_signal(fd, 'W');
    h_expect(fd, 'A');
    CHECK_OK(VipConnectAccept(conn, vm));
    CHECK_EQ(h_vi_state(vm), VIP_STATE_CONNECTED);

    /* Accept on a VI that is not IDLE. */
    conn = wait_request(nic, R_BUSY, &ra);
    CHECK_RET(VipConnectAccept(conn, vm), VIP_INVALID_STATE);
    CHECK_EQ(h_vi_state(vm), VIP_STATE_CONNECTED);
    CHECK_OK(VipConnectReject(conn));

    /* The parent disconnects the main connection. */
    h_expect(fd, 'X');
    VIP_VI_STATE s = h_wait_state(vm, VIP_STATE_ERROR, 2000);
    CHECK_MSG(s == VIP_STATE_ERROR, "after the peer's VipDisconnect the VI is %s, expected ERROR",
              h_state_str(s));
    for (unsigned i = 0; i < 3; i++) {
        VIP_DESCRIPTOR *x = h_recv_wait(vm, 2000);
        CHECK(x == h_desc(&d, i));
        CHECK_ERR_STATUS(x, VIP_STATUS_DESC_FLUSHED_ERROR, VIP_STATUS_OP_RECEIVE);
    }
    VIP_DESCRIPTOR *x;
    CHECK_RET(VipRecvDone(vm, &x), VIP_NOT_DONE);
    CHECK_MSG(h_errlog_wait(&log, 1, 2000) >= 1, "error handler not called after the disconnect");
    CHECK_MSG(h_errlog_find(&log, VIP_ERROR_CONN_LOST, vm) >= 1,
              "error handler got %s, expected CONN_LOST for the VI", h_errcode_str(log.code[0]));
    CHECK_OK(VipDestroyVi(vm));
    h_signal(fd, 'x');

    /* The parent's VI, IDLE again, connects anew. */
    va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE va2 = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    h_post_recv1(va2, &d, 3, buf.ptr, buf.mh, 4096);
    conn = wait_request(nic, R_AGAIN, &ra);
    CHECK_OK(VipConnectAccept(conn, va2));
    x = h_recv_wait(va2, 5000);
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
    CHECK_EQ(x->CS.Length, 77);
    CHECK_RANDOM(buf.ptr, 77, 77);

    /* A request that arrives between two VipConnectWait calls is queued. */
    VIP_VI_HANDLE vq = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    VIP_NET_ADDRESS *lq = h_addr(srv[R_QUEUED]), *rq = h_addr_room();
    CHECK_RET(VipConnectWait(nic, lq, 100, rq, &ra, &conn), VIP_TIMEOUT);
    free(lq);
    free(rq);
    h_signal(fd, 'L');
    h_sleep_ms(300); /* the parent's request arrives meanwhile */
    double t0 = h_now_ms();
    conn = wait_request(nic, R_QUEUED, &ra);
    CHECK_MSG(h_now_ms() - t0 < 1000, "the queued request took %.0f ms to be seen",
              h_now_ms() - t0);
    CHECK_OK(VipConnectAccept(conn, vq));

    /* A request addressed to another address of this host. */
    VIP_VI_HANDLE vh = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    conn = wait_request(nic, R_IFADDR, &ra);
    CHECK_OK(VipConnectAccept(conn, vh));

    h_expect(fd, 'Q');
    h_vi_teardown(vq);
    h_vi_teardown(vh);
    h_vi_teardown(va2);
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    pthread_mutex_destroy(&log.mu);
}

/* ---- parent ------------------------------------------------------------------------ */

struct req {
    VIP_VI_HANDLE vi;
    int round;
    VIP_RETURN r;
    VIP_VI_ATTRIBUTES ra;
};

static void *request_thread(void *arg)
{
    struct req *q = arg;
    q->r = h_connect_ret(q->vi, cli[q->round], srv[q->round], 10000, &q->ra);
    return NULL;
}

static int is_local(const VIP_UINT8 *host)
{
    struct ifaddrs *ifs = NULL;
    int found = 0;
    CHECK(getifaddrs(&ifs) == 0);
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET)
            found = memcmp(&((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, host, 4) == 0;
    freeifaddrs(ifs);
    return found;
}

static void test_no_peer(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE t)
{
    char disc[80];
    h_disc(disc, sizeof disc);
    VIP_NET_ADDRESS *local = h_addr(disc);
    VIP_NET_ADDRESS *remote = h_addr_room();
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn;

    double t0 = h_now_ms();
    CHECK_RET(VipConnectWait(nic, local, 300, remote, &ra, &conn), VIP_TIMEOUT);
    double el = h_now_ms() - t0;
    CHECK_MSG(el >= 250 && el < 3000, "VipConnectWait(300 ms) returned after %.0f ms", el);

    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    char nobody[80], me[80];
    h_disc(nobody, sizeof nobody);
    h_disc(me, sizeof me);
    VIP_NET_ADDRESS *la = h_addr(me), *ra_addr = h_addr(nobody);
    t0 = h_now_ms();
    CHECK_RET(VipConnectRequest(vi, la, ra_addr, 5000, &ra), VIP_NO_MATCH);
    el = h_now_ms() - t0;
    CHECK_MSG(el < 1000, "VIP_NO_MATCH took %.0f ms (timeout 5000), expected at once", el);
    CHECK_EQ(h_vi_state(vi), VIP_STATE_IDLE);

    /* A documentation-range address that is not one of ours. */
    static const VIP_UINT8 candidates[3][4] = {{192, 0, 2, 1}, {198, 51, 100, 1}, {203, 0, 113, 1}};
    const VIP_UINT8 *elsewhere = NULL;
    for (int c = 0; c < 3 && !elsewhere; c++)
        if (!is_local(candidates[c]))
            elsewhere = candidates[c];
    CHECK(elsewhere != NULL);
    VIP_NET_ADDRESS *far = VipxAllocNetAddress(elsewhere, 4, nobody, (VIP_UINT16)strlen(nobody));
    CHECK(far != NULL);
    t0 = h_now_ms();
    /* fabric reaches other hosts: one that answers with a reset is there,
     * and nobody listens (docs/VIPL.md, fabric). */
    VIP_RETURN fr = VipConnectRequest(vi, la, far, 5000, &ra);
    CHECK_MSG(fr == VIP_NOT_REACHABLE || (h_fabric() && fr == VIP_NO_MATCH),
              "request to another host: %s", VipxReturnString(fr));
    el = h_now_ms() - t0;
    CHECK_MSG(el < 5000, "VIP_NOT_REACHABLE took %.0f ms", el);
    CHECK_EQ(h_vi_state(vi), VIP_STATE_IDLE);
    CHECK_OK(VipDestroyVi(vi));
    free(far);
    free(la);
    free(ra_addr);
    free(local);
    free(remote);
}

int main(void)
{
    h_init("connect", 30);
    for (int i = 0; i < NROUNDS; i++) {
        h_disc(srv[i], sizeof srv[i]);
        h_disc(cli[i], sizeof cli[i]);
    }
    h_peer p = h_fork(peer, NULL);
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    h_mem buf = h_mem_alloc(nic, t, 4 * 4096, 0);
    h_descs d = h_descs_alloc(nic, t, 4);
    test_no_peer(nic, t);

    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    va.MaxTransferSize = CLIENT_MTU;
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    VIP_VI_ATTRIBUTES ra;

    /* Rejected. */
    CHECK_RET(h_connect_ret(vi, cli[R_REJECT], srv[R_REJECT], 10000, &ra), VIP_REJECT);
    CHECK_EQ(h_vi_state(vi), VIP_STATE_IDLE);

    /* Not answered in time. */
    double t0 = h_now_ms();
    VIP_RETURN r = h_connect_ret(vi, cli[R_TIMEOUT], srv[R_TIMEOUT], 500, &ra);
    double el = h_now_ms() - t0;
    CHECK_MSG(r == VIP_TIMEOUT, "unanswered request: %s, expected VIP_TIMEOUT",
              VipxReturnString(r));
    CHECK_MSG(el >= 450, "request with a 500 ms timeout gave up after %.0f ms", el);
    CHECK_EQ(h_vi_state(vi), VIP_STATE_IDLE);
    h_expect(p.fd, 'w');
    h_signal(p.fd, 'T');

    /* Reliability mismatch: the requester is rejected. */
    CHECK_RET(h_connect_ret(vi, cli[R_MISMATCH], srv[R_MISMATCH], 10000, &ra), VIP_REJECT);
    CHECK_EQ(h_vi_state(vi), VIP_STATE_IDLE);

    /* The main connection, from the VI that timed out before. Receives pre-posted. */
    h_post_recv1(vi, &d, 0, buf.ptr, buf.mh, 4096);
    h_post_recv1(vi, &d, 1, buf.ptr + 4096, buf.mh, 4096);
    pthread_t th;
    struct req q = {vi, R_MAIN, VIP_SUCCESS, {0}};
    CHECK(pthread_create(&th, NULL, request_thread, &q) == 0);
    h_expect(p.fd, 'W');
    VIP_VI_STATE s = h_wait_state(vi, VIP_STATE_CONNECT_PENDING, 2000);
    CHECK_MSG(s == VIP_STATE_CONNECT_PENDING, "VI is %s while its request waits, expected CONNECT_PENDING",
              h_state_str(s));
    h_desc_prep(h_desc(&d, 2), 0, 0);
    h_desc_add(h_desc(&d, 2), buf.ptr + 8192, buf.mh, 64);
    CHECK_RET(VipPostSend(vi, h_desc(&d, 2), d.m.mh), VIP_INVALID_STATE);
    VIP_VI_ATTRIBUTES changed = va;
    changed.MaxTransferSize = 1000;
    CHECK_RET(VipSetViAttributes(vi, &changed), VIP_INVALID_STATE);
    CHECK_RET(VipDestroyVi(vi), VIP_INVALID_STATE);
    h_signal(p.fd, 'A');
    CHECK(pthread_join(th, NULL) == 0);
    CHECK_MSG(q.r == VIP_SUCCESS, "main connection request: %s", VipxReturnString(q.r));
    CHECK_EQ(q.ra.ReliabilityLevel, VIP_SERVICE_RELIABLE_DELIVERY);
    CHECK_EQ(q.ra.MaxTransferSize, MAIN_MTU);
    CHECK_EQ(q.ra.EnableRdmaWrite, VIP_TRUE);
    CHECK_EQ(q.ra.EnableRdmaRead, VIP_FALSE);
    CHECK_EQ(h_vi_state(vi), VIP_STATE_CONNECTED);

    /* Accept on a busy VI: refused there, then rejected. */
    VIP_VI_HANDLE vb = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    CHECK_RET(h_connect_ret(vb, cli[R_BUSY], srv[R_BUSY], 10000, &ra), VIP_REJECT);
    CHECK_OK(VipDestroyVi(vb));

    /* Disconnect: IDLE here with the receives flushed; the peer checks its side. */
    CHECK_OK(VipDisconnect(vi));
    CHECK_EQ(h_vi_state(vi), VIP_STATE_IDLE);
    for (unsigned i = 0; i < 2; i++) {
        VIP_DESCRIPTOR *x = NULL;
        CHECK_OK(VipRecvDone(vi, &x));
        CHECK(x == h_desc(&d, i));
        CHECK_ERR_STATUS(x, VIP_STATUS_DESC_FLUSHED_ERROR, VIP_STATUS_OP_RECEIVE);
    }
    VIP_DESCRIPTOR *x;
    CHECK_RET(VipRecvDone(vi, &x), VIP_NOT_DONE);
    h_signal(p.fd, 'X');
    h_expect(p.fd, 'x');

    /* The same VI connects again and carries data. */
    h_connect(vi, cli[R_AGAIN], srv[R_AGAIN], NULL);
    CHECK_EQ(h_vi_state(vi), VIP_STATE_CONNECTED);
    h_fill_random(buf.ptr + 8192, 77, 77);
    h_post_send1(vi, &d, 3, buf.ptr + 8192, buf.mh, 77, 0, 0);
    CHECK_STATUS(h_send_done(vi), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);

    /* Queued request: the peer is listening but not waiting when it arrives. */
    VIP_VI_HANDLE vq = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    h_expect(p.fd, 'L');
    VIP_NET_ADDRESS *lq = h_addr(cli[R_QUEUED]), *rq = h_addr(srv[R_QUEUED]);
    t0 = h_now_ms();
    r = VipConnectRequest(vq, lq, rq, 10000, &ra);
    el = h_now_ms() - t0;
    CHECK_MSG(r == VIP_SUCCESS, "request to a listening peer that was not waiting: %s",
              VipxReturnString(r));
    h_log("queued request accepted after %.0f ms (the peer waits again after 300 ms)", el);
    CHECK_EQ(h_vi_state(vq), VIP_STATE_CONNECTED);
    free(lq);
    free(rq);

    /* Any address of this host reaches the peer. */
    VIP_UINT8 host[4];
    memcpy(host, h_loopback, 4);
    struct ifaddrs *ifs = NULL, *i;
    if (getifaddrs(&ifs) == 0) {
        for (i = ifs; i; i = i->ifa_next)
            if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
                !(i->ifa_flags & IFF_LOOPBACK)) {
                memcpy(host, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, 4);
                break;
            }
        freeifaddrs(ifs);
    }
    h_log("requesting via host address %u.%u.%u.%u", host[0], host[1], host[2], host[3]);
    VIP_VI_HANDLE vh = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    VIP_NET_ADDRESS *lh = h_addr(cli[R_IFADDR]);
    VIP_NET_ADDRESS *rh = VipxAllocNetAddress(host, 4, srv[R_IFADDR], (VIP_UINT16)strlen(srv[R_IFADDR]));
    CHECK(rh != NULL);
    t0 = h_now_ms();
    while ((r = VipConnectRequest(vh, lh, rh, 10000, &ra)) == VIP_NO_MATCH &&
           h_now_ms() - t0 < (h_fabric() ? 300 : 5000))
        h_sleep_ms(10);
    /* fabric: a listener at 127.0.0.1 is bound there only (docs/VIPL.md, fabric) */
    CHECK_MSG(r == (h_fabric() ? VIP_NO_MATCH : VIP_SUCCESS), "request to %u.%u.%u.%u (this host): %s",
              host[0], host[1], host[2], host[3], VipxReturnString(r));
    if (h_fabric()) /* the peer still waits: through the address it listens at */
        h_connect(vh, cli[R_IFADDR], srv[R_IFADDR], &ra);
    free(lh);
    free(rh);

    disconnect_last(vq, cli[R_QUEUED], srv[R_QUEUED]);
    h_signal(p.fd, 'Q');
    h_peer_finish(&p);
    h_vi_teardown(vh);
    h_vi_teardown(vi);
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
