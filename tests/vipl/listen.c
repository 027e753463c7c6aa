/*
 * listen: explicit listening (include/vipl_ext.h VipxListen / VipxUnlisten).
 *   - VipxListen makes the discriminator accept at once: a VipConnectRequest
 *     issued before any VipConnectWait is queued (no VIP_NO_MATCH) and taken
 *     by a later VipConnectWait;
 *   - another process listening (VipxListen or VipConnectWait) on it gets
 *     VIP_ERROR_RESOURCE; once the first process unlistens, or exits without
 *     closing anything, the second one can listen;
 *   - VipxUnlisten: a later request gets VIP_NO_MATCH at once; a request
 *     queued but not taken is refused (VIP_REJECT or VIP_NO_MATCH) well
 *     before its timeout and is not delivered afterwards; threads blocked in
 *     VipConnectWait(VIP_INFINITE) return VIP_INVALID_STATE within 1 s (for
 *     an explicit and an implicit listener); a request already taken by
 *     VipConnectWait (not queued any more) can still be accepted after
 *     VipxUnlisten; unlistening a discriminator not listened to:
 *     VIP_INVALID_STATE; listen / unlisten / listen works; two threads
 *     unlistening at once: one VIP_SUCCESS, the other VIP_INVALID_STATE
 *     (the listener is released once: ASan sees no use after free);
 *   - bad arguments: VIP_INVALID_PARAMETER.
 * Peer 1 requests and competes for discriminators; peer 2 listens and exits.
 */
#include "harness.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

enum {
    D_QUEUE, D_EXCL, D_EXIT, D_LATER, D_QUEUED_REFUSED, D_BLOCKED, D_IMPLICIT, D_TAKEN, D_AGAIN, D_RACE,
    ND
};
static char disc[ND][80];
static char cli[ND][80];

#define MSG 64
#define PROMPT_MS 1000.0

/* ---- peer 1: requests, competing listens ------------------------------------------ */

static VIP_RETURN request(VIP_VI_HANDLE vi, int d, VIP_ULONG timeout, double *elapsed)
{
    VIP_NET_ADDRESS *local = h_addr(cli[d]), *remote = h_addr(disc[d]);
    VIP_VI_ATTRIBUTES ra;
    double t0 = h_now_ms();
    VIP_RETURN r = VipConnectRequest(vi, local, remote, timeout, &ra);
    *elapsed = h_now_ms() - t0;
    free(local);
    free(remote);
    return r;
}

static void peer_requester(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    h_mem buf = h_mem_alloc(nic, t, 4096, 0);
    h_descs d = h_descs_alloc(nic, t, 2);
    double el;
    VIP_RETURN r;

    /* A request before any VipConnectWait: queued, then taken. */
    h_expect(fd, 'q');
    h_signal(fd, 'R');
    r = request(vi, D_QUEUE, 10000, &el);
    CHECK_MSG(r == VIP_SUCCESS,
              "request to a discriminator listened with VipxListen but not yet waited on: %s "
              "after %.0f ms, expected VIP_SUCCESS",
              VipxReturnString(r), el);
    h_log("request queued on an explicit listener accepted after %.0f ms", el);
    CHECK_EQ(h_vi_state(vi), VIP_STATE_CONNECTED);
    h_fill_random(buf.ptr, MSG, 11);
    h_post_send1(vi, &d, 0, buf.ptr, buf.mh, MSG, 0, 0);
    CHECK_STATUS(h_send_done(vi), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
    h_expect(fd, 'd'); /* the parent has the message */
    CHECK_OK(VipDisconnect(vi));
    CHECK_EQ(h_vi_state(vi), VIP_STATE_IDLE);

    /* Another process listens: VIP_ERROR_RESOURCE for both ways of listening. */
    h_expect(fd, 'x');
    VIP_NET_ADDRESS *ex = h_addr(disc[D_EXCL]), *room = h_addr_room();
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn = NULL;
    CHECK_RET(VipxListen(nic, ex), VIP_ERROR_RESOURCE);
    CHECK_RET(VipConnectWait(nic, ex, 100, room, &ra, &conn), VIP_ERROR_RESOURCE);
    h_signal(fd, 'y');
    h_expect(fd, 'u'); /* the parent unlistened */
    CHECK_OK(VipxListen(nic, ex));
    h_signal(fd, 'l');
    h_expect(fd, 'v'); /* the parent was refused */
    CHECK_OK(VipxUnlisten(nic, ex));
    h_signal(fd, 'w');
    free(ex);
    free(room);

    /* After VipxUnlisten: VIP_NO_MATCH at once. */
    h_expect(fd, 'n');
    r = request(vi, D_LATER, 5000, &el);
    CHECK_MSG(r == VIP_NO_MATCH, "request after VipxUnlisten: %s, expected VIP_NO_MATCH",
              VipxReturnString(r));
    CHECK_MSG(el < PROMPT_MS, "VIP_NO_MATCH after VipxUnlisten took %.0f ms (timeout 5000)", el);
    CHECK_EQ(h_vi_state(vi), VIP_STATE_IDLE);
    h_signal(fd, 'N');

    /* Queued, then the listener goes away: refused well before the timeout. */
    h_expect(fd, 'r');
    h_signal(fd, 'R');
    r = request(vi, D_QUEUED_REFUSED, 10000, &el);
    h_log("queued request after VipxUnlisten: %s after %.0f ms (timeout 10000, the parent "
          "unlistens after ~300 ms)",
          VipxReturnString(r), el);
    CHECK_MSG(r == VIP_REJECT || r == VIP_NO_MATCH,
              "queued request after VipxUnlisten: %s, expected VIP_REJECT or VIP_NO_MATCH",
              VipxReturnString(r));
    CHECK_MSG(el < 3000, "queued request refused only after %.0f ms (timeout 10000)", el);
    CHECK_MSG(el >= 200, "queued request refused after %.0f ms, before the parent unlistened", el);
    CHECK_EQ(h_vi_state(vi), VIP_STATE_IDLE);
    h_signal(fd, 'S');

    /* Taken by VipConnectWait, then the parent unlistens before accepting. */
    h_expect(fd, 't');
    r = request(vi, D_TAKEN, 10000, &el);
    CHECK_MSG(r == VIP_SUCCESS,
              "request taken by VipConnectWait and accepted after VipxUnlisten: %s after %.0f ms",
              VipxReturnString(r), el);
    CHECK_EQ(h_vi_state(vi), VIP_STATE_CONNECTED);
    h_expect(fd, 'T'); /* the parent saw its VI connected */
    CHECK_OK(VipDisconnect(vi));

    /* Listen, unlisten, listen again: requests are queued again. */
    h_expect(fd, 'g');
    h_signal(fd, 'R');
    r = request(vi, D_AGAIN, 10000, &el);
    CHECK_MSG(r == VIP_SUCCESS, "request after listen/unlisten/listen: %s after %.0f ms",
              VipxReturnString(r), el);
    CHECK_EQ(h_vi_state(vi), VIP_STATE_CONNECTED);

    h_expect(fd, 'Q');
    h_vi_teardown(vi);
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
}

/* ---- peer 2: listens, then exits without closing anything -------------------------- */

static void peer_exiter(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_NET_ADDRESS *a = h_addr(disc[D_EXIT]);
    CHECK_OK(VipxListen(nic, a));
    free(a);
    h_signal(fd, 'L');
    h_expect(fd, 'E');
    _exit(0);
}

/* ---- parent ----------------------------------------------------------------------- */

static void check_bad_args(VIP_NIC_HANDLE nic)
{
    char d[80];
    h_disc(d, sizeof d);
    VIP_NET_ADDRESS *ok = h_addr(d);
    /* A handle that is not a NIC (zeroed, suitably aligned memory). */
    static _Alignas(64) unsigned char fake[4096];
    VIP_NIC_HANDLE bogus = (VIP_NIC_HANDLE)fake;

    CHECK_RET(VipxListen(NULL, ok), VIP_INVALID_PARAMETER);
    CHECK_RET(VipxListen(bogus, ok), VIP_INVALID_PARAMETER);
    CHECK_RET(VipxListen(nic, NULL), VIP_INVALID_PARAMETER);
    CHECK_RET(VipxUnlisten(NULL, ok), VIP_INVALID_PARAMETER);
    CHECK_RET(VipxUnlisten(bogus, ok), VIP_INVALID_PARAMETER);
    CHECK_RET(VipxUnlisten(nic, NULL), VIP_INVALID_PARAMETER);

    /* Discriminator lengths 0 and 65 (1..64 allowed); host length 17. */
    VIP_NET_ADDRESS *a = calloc(1, sizeof(VIP_NET_ADDRESS) + 4 + 80);
    CHECK(a != NULL);
    memcpy(a->HostAddress, h_loopback, 4);
    memset(a->HostAddress + 4, 'z', 80);
    a->HostAddressLen = 4;
    a->DiscriminatorLen = 0;
    CHECK_RET(VipxListen(nic, a), VIP_INVALID_PARAMETER);
    CHECK_RET(VipxUnlisten(nic, a), VIP_INVALID_PARAMETER);
    a->DiscriminatorLen = 65;
    CHECK_RET(VipxListen(nic, a), VIP_INVALID_PARAMETER);
    CHECK_RET(VipxUnlisten(nic, a), VIP_INVALID_PARAMETER);
    a->DiscriminatorLen = 8;
    a->HostAddressLen = 17;
    CHECK_RET(VipxListen(nic, a), VIP_INVALID_PARAMETER);
    CHECK_RET(VipxUnlisten(nic, a), VIP_INVALID_PARAMETER);
    a->HostAddressLen = 4;
    /* 64 is the maximum: accepted, and unlistened. */
    a->DiscriminatorLen = 64;
    CHECK_OK(VipxListen(nic, a));
    CHECK_OK(VipxUnlisten(nic, a));
    free(a);

    /* A host part that is not an address of this host: refused, not listening. */
    static const VIP_UINT8 far[4] = {192, 0, 2, 1};
    VIP_NET_ADDRESS *fa = VipxAllocNetAddress(far, 4, d, (VIP_UINT16)strlen(d));
    CHECK(fa != NULL);
    VIP_RETURN r = VipxListen(nic, fa);
    h_log("VipxListen with host 192.0.2.1: %s", VipxReturnString(r));
    CHECK_MSG(r != VIP_SUCCESS, "VipxListen with a host that is not this one succeeded");
    CHECK_RET(VipxUnlisten(nic, ok), VIP_INVALID_STATE);
    free(fa);

    /* Unlistening what was never listened to. */
    CHECK_RET(VipxUnlisten(nic, ok), VIP_INVALID_STATE);
    free(ok);
}

struct waiter {
    VIP_NIC_HANDLE nic;
    int d;
    atomic_int done;
    VIP_RETURN r;
    double at;
};

static void *waiter_thread(void *arg)
{
    struct waiter *w = arg;
    VIP_NET_ADDRESS *local = h_addr(disc[w->d]), *remote = h_addr_room();
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn = NULL;
    w->r = VipConnectWait(w->nic, local, VIP_INFINITE, remote, &ra, &conn);
    w->at = h_now_ms();
    atomic_store(&w->done, 1);
    free(local);
    free(remote);
    return NULL;
}

/* n threads block in VipConnectWait(VIP_INFINITE) on disc d; another
 * unlistens; all return VIP_INVALID_STATE within PROMPT_MS. */
static void check_blocked_waiters(VIP_NIC_HANDLE nic, int d, int n, int explicit_listen)
{
    struct waiter w[2];
    pthread_t th[2];
    CHECK(n <= 2);
    VIP_NET_ADDRESS *a = h_addr(disc[d]);
    if (explicit_listen)
        CHECK_OK(VipxListen(nic, a));
    for (int i = 0; i < n; i++) {
        w[i].nic = nic;
        w[i].d = d;
        atomic_init(&w[i].done, 0);
        w[i].r = VIP_SUCCESS;
        CHECK(pthread_create(&th[i], NULL, waiter_thread, &w[i]) == 0);
    }
    h_sleep_ms(300);
    for (int i = 0; i < n; i++)
        CHECK_MSG(!atomic_load(&w[i].done), "VipConnectWait(VIP_INFINITE) returned %s early",
                  VipxReturnString(w[i].r));
    double t0 = h_now_ms();
    CHECK_OK(VipxUnlisten(nic, a));
    for (int i = 0; i < n; i++) {
        while (!atomic_load(&w[i].done) && h_now_ms() - t0 < PROMPT_MS)
            h_sleep_ms(2);
        CHECK_MSG(atomic_load(&w[i].done),
                  "%s listener: VipConnectWait(VIP_INFINITE) thread %d still blocked %.0f ms "
                  "after VipxUnlisten",
                  explicit_listen ? "explicit" : "implicit", i, h_now_ms() - t0);
        CHECK(pthread_join(th[i], NULL) == 0);
        CHECK_MSG(w[i].r == VIP_INVALID_STATE,
                  "%s listener: blocked VipConnectWait returned %s after VipxUnlisten, "
                  "expected VIP_INVALID_STATE",
                  explicit_listen ? "explicit" : "implicit", VipxReturnString(w[i].r));
        h_log("%s listener: blocked VipConnectWait %d returned %.0f ms after VipxUnlisten",
              explicit_listen ? "explicit" : "implicit", i, w[i].at - t0);
    }
    /* It is no longer listened to. */
    CHECK_RET(VipxUnlisten(nic, a), VIP_INVALID_STATE);
    free(a);
}

struct unlistener {
    VIP_NIC_HANDLE nic;
    VIP_NET_ADDRESS *a;
    atomic_int *go;
    VIP_RETURN r;
};

static void *unlisten_thread(void *arg)
{
    struct unlistener *u = arg;
    while (!atomic_load(u->go))
        ;
    u->r = VipxUnlisten(u->nic, u->a);
    return NULL;
}

/* A listener's close and its connection thread may unlisten at once. */
static void check_racing_unlisten(VIP_NIC_HANDLE nic, int d)
{
    VIP_NET_ADDRESS *a = h_addr(disc[d]);
    int both_ok = 0;
    for (int round = 0; round < 500; round++) {
        CHECK_OK(VipxListen(nic, a));
        atomic_int go = 0;
        struct unlistener u[2] = {{nic, a, &go, VIP_ERROR_RESOURCE}, {nic, a, &go, VIP_ERROR_RESOURCE}};
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            CHECK(pthread_create(&th[i], NULL, unlisten_thread, &u[i]) == 0);
        atomic_store(&go, 1);
        for (int i = 0; i < 2; i++)
            CHECK(pthread_join(th[i], NULL) == 0);
        both_ok += u[0].r == VIP_SUCCESS && u[1].r == VIP_SUCCESS;
        CHECK_MSG((u[0].r == VIP_SUCCESS) + (u[1].r == VIP_SUCCESS) >= 1,
                  "racing VipxUnlisten: %s and %s, expected one VIP_SUCCESS",
                  VipxReturnString(u[0].r), VipxReturnString(u[1].r));
        for (int i = 0; i < 2; i++)
            CHECK_MSG(u[i].r == VIP_SUCCESS || u[i].r == VIP_INVALID_STATE,
                      "racing VipxUnlisten returned %s", VipxReturnString(u[i].r));
        CHECK_RET(VipxUnlisten(nic, a), VIP_INVALID_STATE);
    }
    CHECK_MSG(both_ok == 0, "racing VipxUnlisten: both threads succeeded in %d of 500 rounds",
              both_ok);
    free(a);
}

int main(void)
{
    h_init("listen", 60);
    for (int i = 0; i < ND; i++) {
        h_disc(disc[i], sizeof disc[i]);
        h_disc(cli[i], sizeof cli[i]);
    }
    h_peer p = h_fork(peer_requester, NULL);
    h_peer p2 = h_fork(peer_exiter, NULL);
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    h_mem buf = h_mem_alloc(nic, t, 4096, 0);
    h_descs d = h_descs_alloc(nic, t, 2);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_NET_ADDRESS *a;

    check_bad_args(nic);

    /* 1. A request issued before any VipConnectWait is queued. */
    VIP_VI_HANDLE v1 = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    h_post_recv1(v1, &d, 0, buf.ptr, buf.mh, 4096);
    a = h_addr(disc[D_QUEUE]);
    CHECK_OK(VipxListen(nic, a));
    h_signal(p.fd, 'q');
    h_expect(p.fd, 'R');
    h_sleep_ms(300); /* the request is issued and waits meanwhile */
    VIP_NET_ADDRESS *remote = h_addr_room();
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn = NULL;
    double t0 = h_now_ms();
    CHECK_OK(VipConnectWait(nic, a, 5000, remote, &ra, &conn));
    double el = h_now_ms() - t0;
    CHECK_MSG(el < PROMPT_MS, "VipConnectWait took %.0f ms to see the queued request", el);
    CHECK_EQ(remote->HostAddressLen, 4);
    CHECK(memcmp(remote->HostAddress, h_loopback, 4) == 0);
    CHECK_EQ(remote->DiscriminatorLen, strlen(cli[D_QUEUE]));
    CHECK(memcmp(remote->HostAddress + 4, cli[D_QUEUE], strlen(cli[D_QUEUE])) == 0);
    CHECK_EQ(ra.ReliabilityLevel, VIP_SERVICE_RELIABLE_DELIVERY);
    CHECK_OK(VipConnectAccept(conn, v1));
    CHECK_EQ(h_vi_state(v1), VIP_STATE_CONNECTED);
    VIP_DESCRIPTOR *x = h_recv_wait(v1, 5000);
    CHECK(x == h_desc(&d, 0));
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
    CHECK_EQ(x->CS.Length, MSG);
    CHECK_RANDOM(buf.ptr, MSG, 11);
    h_signal(p.fd, 'd');
    CHECK_OK(VipxUnlisten(nic, a));
    free(a);
    free(remote);

    /* 2. Exclusive between processes; free again once unlistened. */
    a = h_addr(disc[D_EXCL]);
    CHECK_OK(VipxListen(nic, a));
    h_signal(p.fd, 'x');
    h_expect(p.fd, 'y');
    CHECK_OK(VipxUnlisten(nic, a));
    h_signal(p.fd, 'u');
    h_expect(p.fd, 'l'); /* now the peer listens */
    CHECK_RET(VipxListen(nic, a), VIP_ERROR_RESOURCE);
    remote = h_addr_room();
    CHECK_RET(VipConnectWait(nic, a, 100, remote, &ra, &conn), VIP_ERROR_RESOURCE);
    free(remote);
    h_signal(p.fd, 'v');
    h_expect(p.fd, 'w'); /* the peer unlistened */
    CHECK_OK(VipxListen(nic, a));
    CHECK_OK(VipxUnlisten(nic, a));
    free(a);

    /* 3. ... and free again once the listening process exited. */
    a = h_addr(disc[D_EXIT]);
    h_expect(p2.fd, 'L');
    CHECK_RET(VipxListen(nic, a), VIP_ERROR_RESOURCE);
    h_signal(p2.fd, 'E');
    h_peer_finish(&p2);
    CHECK_OK(VipxListen(nic, a));
    CHECK_OK(VipxUnlisten(nic, a));
    free(a);

    /* 4. After VipxUnlisten a new request gets VIP_NO_MATCH. */
    a = h_addr(disc[D_LATER]);
    CHECK_OK(VipxListen(nic, a));
    CHECK_OK(VipxUnlisten(nic, a));
    CHECK_RET(VipxUnlisten(nic, a), VIP_INVALID_STATE);
    h_signal(p.fd, 'n');
    h_expect(p.fd, 'N');
    free(a);

    /* 5. A queued request is refused when the listener goes away, and is not
     * delivered to a later listener. */
    a = h_addr(disc[D_QUEUED_REFUSED]);
    CHECK_OK(VipxListen(nic, a));
    h_signal(p.fd, 'r');
    h_expect(p.fd, 'R');
    h_sleep_ms(300);
    CHECK_OK(VipxUnlisten(nic, a));
    h_expect(p.fd, 'S');
    remote = h_addr_room();
    CHECK_RET(VipConnectWait(nic, a, 200, remote, &ra, &conn), VIP_TIMEOUT);
    CHECK_OK(VipxUnlisten(nic, a)); /* the VipConnectWait listened implicitly */
    free(remote);
    free(a);

    /* 6. Threads blocked in VipConnectWait(VIP_INFINITE) wake on VipxUnlisten. */
    check_blocked_waiters(nic, D_BLOCKED, 2, 1);
    check_blocked_waiters(nic, D_IMPLICIT, 1, 0);

    /* 7. A request taken by VipConnectWait survives VipxUnlisten. */
    VIP_VI_HANDLE v3 = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    a = h_addr(disc[D_TAKEN]);
    CHECK_OK(VipxListen(nic, a));
    h_signal(p.fd, 't');
    remote = h_addr_room();
    CHECK_OK(VipConnectWait(nic, a, 5000, remote, &ra, &conn));
    CHECK_OK(VipxUnlisten(nic, a));
    CHECK_OK(VipConnectAccept(conn, v3));
    CHECK_EQ(h_vi_state(v3), VIP_STATE_CONNECTED);
    h_signal(p.fd, 'T');
    free(remote);
    free(a);

    /* 8. Listen, unlisten, listen again. */
    VIP_VI_HANDLE v2 = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    a = h_addr(disc[D_AGAIN]);
    CHECK_OK(VipxListen(nic, a));
    CHECK_OK(VipxUnlisten(nic, a));
    CHECK_OK(VipxListen(nic, a));
    h_signal(p.fd, 'g');
    h_expect(p.fd, 'R');
    h_sleep_ms(200);
    remote = h_addr_room();
    t0 = h_now_ms();
    CHECK_OK(VipConnectWait(nic, a, 5000, remote, &ra, &conn));
    el = h_now_ms() - t0;
    CHECK_MSG(el < PROMPT_MS, "VipConnectWait took %.0f ms to see the queued request", el);
    CHECK_OK(VipConnectAccept(conn, v2));
    CHECK_EQ(h_vi_state(v2), VIP_STATE_CONNECTED);
    CHECK_OK(VipxUnlisten(nic, a));
    free(remote);
    free(a);

    /* 9. Two threads unlisten at once. */
    check_racing_unlisten(nic, D_RACE);

    h_signal(p.fd, 'Q');
    h_peer_finish(&p);
    h_vi_teardown(v1);
    h_vi_teardown(v2);
    h_vi_teardown(v3);
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
