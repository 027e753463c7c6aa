/*
 * fd_budget: file descriptors per connection (commit 151f69e: the provider
 * keeps the connection socket and a pidfd per connection, plus the peer CQ's
 * wake socket when the peer's receive queue reports to a CQ; its own segment
 * memfds are closed once connected).
 *   - 50 VI pairs between two processes (the server's VIs report receives
 *     to a CQ, so the client also holds a wake socket per connection):
 *     /proc/self/fd grows by at most 3 per connection in each process; every
 *     connection carries one message, byte-exact;
 *   - after disconnecting and destroying them all (and unlistening), each
 *     process is back to its count from before the VIs; after VipCloseNic,
 *     back to its count from before VipOpenNic (a NIC opened and closed
 *     first: the process's first library thread opens the watcher's one
 *     /proc/self/stat descriptor for good, src/vipl/watch.c), plus two kept
 *     for the process's life, made with its first CQ (the thread's
 *     doorbell, src/vipl/waiters.c, and the socket that wakes holders,
 *     shm_wake.c);
 *   - 100 connect/disconnect cycles of one VI on each side (the server's VI
 *     goes ERROR, VipDisconnect makes it IDLE again): the count after the
 *     last cycle equals the count after the first.
 */
#include "harness.h"

#include <dirent.h>
#include <stdlib.h>

#define NCONN 50
#define NCYCLES 100
#define MSG 40
#define PER_CONN 3

static char srv_disc[80], srv_cycle[80], cli_disc[NCONN][80], cli_cycle[80];

static int fd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    CHECK_MSG(d != NULL, "cannot open /proc/self/fd");
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

/* The count from before VipOpenNic, once the process has its watcher. */
static int base_count(void)
{
    CHECK_OK(VipCloseNic(h_open_nic()));
    return fd_count();
}

/* ---- peer: the server ---------------------------------------------------------------- */

static void peer(int fd, void *arg)
{
    (void)arg;
    int base0 = base_count();
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_CQ_HANDLE rcq = NULL;
    /* This thread's doorbell comes with its first CQ and stays for the
     * process's life (src/vipl/waiters.c): a constant, not per connection. */
    CHECK_OK(VipCreateCQ(nic, 2 * NCONN, &rcq));
    h_mem buf = h_mem_alloc(nic, t, 64 * (NCONN + 1), 0);
    h_descs d = h_descs_alloc(nic, t, NCONN + 1);
    VIP_NET_ADDRESS *la = h_addr(srv_disc);
    int base1 = fd_count();

    /* Phase 1: NCONN connections. */
    VIP_VI_HANDLE vi[NCONN];
    CHECK_OK(VipxListen(nic, la));
    for (int i = 0; i < NCONN; i++) {
        VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
        vi[i] = h_vi(nic, &va, NULL, rcq, 0, 0, 0);
        h_post_recv1(vi[i], &d, (unsigned)i, buf.ptr + 64 * i, buf.mh, 64);
    }
    for (int i = 0; i < NCONN; i++) {
        VIP_NET_ADDRESS *remote = h_addr_room();
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn = NULL;
        CHECK_OK(VipConnectWait(nic, la, 20000, remote, &ra, &conn));
        /* The requester says which client VI it is in its discriminator. */
        int k = -1;
        for (int j = 0; j < NCONN; j++)
            if (remote->DiscriminatorLen == strlen(cli_disc[j]) &&
                memcmp(remote->HostAddress + remote->HostAddressLen, cli_disc[j],
                       strlen(cli_disc[j])) == 0)
                k = j;
        CHECK_MSG(k >= 0, "request from an unknown discriminator");
        CHECK_OK(VipConnectAccept(conn, vi[k]));
        free(remote);
    }
    int conn_count = fd_count();
    h_log("%d connections: %d fds before the VIs, %d after (%.2f per connection)", NCONN, base1,
          conn_count, (double)(conn_count - base1) / NCONN);
    CHECK_MSG(conn_count - base1 <= PER_CONN * NCONN,
              "%d connections cost %d fds (%d before, %d after), more than %d each", NCONN,
              conn_count - base1, base1, conn_count, PER_CONN);
    h_signal(fd, 'C');

    /* One message per connection, found through the CQ. */
    int seen[NCONN] = {0};
    for (int n = 0; n < NCONN; n++) {
        VIP_VI_HANDLE v = NULL;
        VIP_BOOLEAN rq;
        CHECK_OK(VipCQWait(rcq, 5000, &v, &rq));
        CHECK_EQ(rq, VIP_TRUE);
        int i = -1;
        for (int j = 0; j < NCONN; j++)
            if (vi[j] == v)
                i = j;
        CHECK(i >= 0 && !seen[i]);
        seen[i] = 1;
        VIP_DESCRIPTOR *x = NULL;
        CHECK_OK(VipRecvDone(v, &x));
        CHECK(x == h_desc(&d, (unsigned)i));
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE | VIP_STATUS_IMMEDIATE);
        CHECK_EQ(x->CS.Length, MSG);
        CHECK_EQ(x->CS.ImmediateData, i);
        CHECK_RANDOM(buf.ptr + 64 * i, MSG, (uint64_t)i);
    }
    h_signal(fd, 'M');

    /* The client disconnects everything: each VI goes ERROR, then is destroyed. */
    h_expect(fd, 'X');
    for (int i = 0; i < NCONN; i++) {
        VIP_VI_STATE s = h_wait_state(vi[i], VIP_STATE_ERROR, 3000);
        CHECK_MSG(s == VIP_STATE_ERROR, "VI %d is %s after the peer disconnected", i,
                  h_state_str(s));
        h_vi_teardown(vi[i]);
        VIP_VI_HANDLE v;
        VIP_BOOLEAN rq;
        while (VipCQDone(rcq, &v, &rq) == VIP_SUCCESS) {
        }
    }
    CHECK_OK(VipxUnlisten(nic, la));
    int after = fd_count();
    h_log("after destroying them all: %d fds (%d before)", after, base1);
    CHECK_MSG(after == base1, "%d fds after destroying every VI, %d before creating them", after,
              base1);
    h_signal(fd, 'D');

    /* Phase 2: one VI, NCYCLES connections. */
    VIP_NET_ADDRESS *lc = h_addr(srv_cycle);
    CHECK_OK(VipxListen(nic, lc));
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE cv = h_vi(nic, &va, NULL, rcq, 0, 0, 0);
    int first = -1;
    for (int c = 0; c < NCYCLES; c++) {
        h_post_recv1(cv, &d, NCONN, buf.ptr + 64 * NCONN, buf.mh, 64);
        VIP_NET_ADDRESS *remote = h_addr_room();
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn = NULL;
        CHECK_OK(VipConnectWait(nic, lc, 20000, remote, &ra, &conn));
        CHECK_OK(VipConnectAccept(conn, cv));
        free(remote);
        VIP_VI_HANDLE v = NULL;
        VIP_BOOLEAN rq;
        CHECK_OK(VipCQWait(rcq, 5000, &v, &rq));
        CHECK(v == cv);
        VIP_DESCRIPTOR *x = h_recv_wait(cv, 0);
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE | VIP_STATUS_IMMEDIATE);
        CHECK_EQ(x->CS.ImmediateData, c);
        CHECK_RANDOM(buf.ptr + 64 * NCONN, MSG, 1000 + (uint64_t)c);
        h_signal(fd, 'm');
        VIP_VI_STATE s = h_wait_state(cv, VIP_STATE_ERROR, 3000);
        CHECK_MSG(s == VIP_STATE_ERROR, "cycle %d: the VI is %s after the peer disconnected", c,
                  h_state_str(s));
        CHECK_OK(VipDisconnect(cv));
        CHECK_EQ(h_vi_state(cv), VIP_STATE_IDLE);
        while (VipCQDone(rcq, &v, &rq) == VIP_SUCCESS) {
        }
        int now = fd_count();
        if (c == 0)
            first = now;
        CHECK_MSG(now == first, "cycle %d: %d fds, %d after the first cycle (leak)", c, now,
                  first);
    }
    h_log("%d connect/disconnect cycles: %d fds after the first and after the last", NCYCLES,
          first);
    h_vi_teardown(cv);
    CHECK_OK(VipxUnlisten(nic, lc));
    CHECK_EQ(fd_count(), base1);

    h_expect(fd, 'Q');
    CHECK_OK(VipDestroyCQ(rcq));
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    int end = fd_count();
    CHECK_MSG(end == base0 + 2,
              "%d fds after VipCloseNic, %d before VipOpenNic (+ doorbell and ring socket)", end,
              base0);
    free(la);
    free(lc);
}

/* ---- parent: the client ---------------------------------------------------------------- */

int main(void)
{
    h_init("fd_budget", 90);
    h_disc(srv_disc, sizeof srv_disc);
    h_disc(srv_cycle, sizeof srv_cycle);
    h_disc(cli_cycle, sizeof cli_cycle);
    for (int i = 0; i < NCONN; i++)
        h_disc(cli_disc[i], sizeof cli_disc[i]);
    h_peer p = h_fork(peer, NULL);
    int base0 = base_count();
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    h_mem buf = h_mem_alloc(nic, t, 64, 0);
    h_descs d = h_descs_alloc(nic, t, 1);
    int base1 = fd_count();

    /* Phase 1. */
    VIP_VI_HANDLE vi[NCONN];
    for (int i = 0; i < NCONN; i++) {
        VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
        vi[i] = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    }
    for (int i = 0; i < NCONN; i++)
        h_connect(vi[i], cli_disc[i], srv_disc, NULL);
    int conn_count = fd_count();
    h_log("%d connections: %d fds before the VIs, %d after (%.2f per connection)", NCONN, base1,
          conn_count, (double)(conn_count - base1) / NCONN);
    CHECK_MSG(conn_count - base1 <= PER_CONN * NCONN,
              "%d connections cost %d fds (%d before, %d after), more than %d each", NCONN,
              conn_count - base1, base1, conn_count, PER_CONN);
    h_expect(p.fd, 'C');
    for (int i = 0; i < NCONN; i++) {
        h_fill_random(buf.ptr, MSG, (uint64_t)i);
        h_post_send1(vi[i], &d, 0, buf.ptr, buf.mh, MSG, VIP_CONTROL_IMMEDIATE, (VIP_UINT32)i);
        CHECK_STATUS(h_send_done(vi[i]), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
    }
    CHECK_EQ(fd_count(), conn_count);
    h_expect(p.fd, 'M');
    for (int i = 0; i < NCONN; i++) {
        CHECK_OK(VipDisconnect(vi[i]));
        CHECK_EQ(h_vi_state(vi[i]), VIP_STATE_IDLE);
    }
    h_signal(p.fd, 'X');
    for (int i = 0; i < NCONN; i++)
        CHECK_OK(VipDestroyVi(vi[i]));
    int after = fd_count();
    h_log("after disconnecting and destroying them all: %d fds (%d before)", after, base1);
    CHECK_MSG(after == base1, "%d fds after destroying every VI, %d before creating them", after,
              base1);
    h_expect(p.fd, 'D');

    /* Phase 2. */
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE cv = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    int idle_count = fd_count();
    int first = -1;
    for (int c = 0; c < NCYCLES; c++) {
        h_connect(cv, cli_cycle, srv_cycle, NULL);
        h_fill_random(buf.ptr, MSG, 1000 + (uint64_t)c);
        h_post_send1(cv, &d, 0, buf.ptr, buf.mh, MSG, VIP_CONTROL_IMMEDIATE, (VIP_UINT32)c);
        CHECK_STATUS(h_send_done(cv), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
        h_expect(p.fd, 'm');
        if (c == 0)
            first = fd_count();
        CHECK_OK(VipDisconnect(cv));
        CHECK_EQ(h_vi_state(cv), VIP_STATE_IDLE);
        int now = fd_count();
        CHECK_MSG(now == idle_count, "cycle %d: %d fds with the VI IDLE again, %d before the "
                                     "first connection (leak)", c, now, idle_count);
    }
    h_log("%d connect/disconnect cycles: %d fds with the VI IDLE, %d while connected", NCYCLES,
          idle_count, first);
    CHECK_OK(VipDestroyVi(cv));
    CHECK_EQ(fd_count(), base1);

    h_signal(p.fd, 'Q');
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    int end = fd_count(); /* before h_peer_finish closes the socketpair */
    CHECK_MSG(end == base0, "%d fds after VipCloseNic, %d before VipOpenNic", end, base0);
    h_peer_finish(&p);
    h_pass();
}
