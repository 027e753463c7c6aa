/*
 * share: a connection held by several processes (docs/VIPL.md, extensions;
 * VipxViShare, VipxViRelease, VipxNicAfterFork, PeerClosed).
 *  - the holder shares its VI and forks; it releases its copy at once: the
 *    peer's VI stays CONNECTED, and the child (which inherited the posted
 *    receive) gets the peer's message byte-exactly;
 *  - when the creator of the shared connection has exited, the peer still
 *    does not see the connection end (its pid is no longer watched);
 *  - when the child, the last holder, exits, the peer's VI is ERROR within
 *    1 s with PeerClosed = 1;
 *  - VipDisconnect (a notice, not an end of every holder) gives PeerClosed 0;
 *  - VipxViShare of a VI that is not connected: VIP_INVALID_STATE;
 *  - a holder hands a VI that failed (the peer sent, then went) to the
 *    next with VipxViSyncSave/Load: the peer's last message is still
 *    delivered, the rest flushed; a receive posted after the failure is
 *    left out (it can only flush). Before, both calls refused a failed
 *    VI, and the holders of a shared connection reset it at its end.
 */
#include "harness.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEADLINE_MS 1250.0
#define MSG 3000

static char srv[80], cli[80], srv2[80], cli2[80], srv3[80], cli3[80];

static VIPX_VI_STATS stats_of(VIP_VI_HANDLE vi)
{
    VIPX_VI_STATS st;
    CHECK_OK(VipxQueryViStats(vi, &st));
    return st;
}

/* A peer's VI, accepted at `disc` (then 'C' on fd), with a send buffer
 * of MSG bytes and two descriptors. */
static VIP_VI_HANDLE peer_accept(int fd, const char *disc, h_mem *buf, h_descs *d)
{
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    *buf = h_mem_alloc(nic, t, MSG, 0);
    *d = h_descs_alloc(nic, t, 2);
    h_accept(nic, vi, disc, NULL);
    h_signal(fd, 'C');
    return vi;
}

/* The peer: sends one message when told, then waits for the end. */
static void peer(int fd, void *arg)
{
    (void)arg;
    h_mem buf;
    h_descs d;
    VIP_VI_HANDLE vi = peer_accept(fd, srv, &buf, &d);
    h_expect(fd, 'S'); /* the holder shared, forked and released its copy */
    h_sleep_ms(300);   /* long enough for the creator's exit to be seen, if watched */
    CHECK_EQ(h_vi_state(vi), VIP_STATE_CONNECTED);
    h_fill_random(buf.ptr, MSG, 77);
    h_post_send1(vi, &d, 0, buf.ptr, buf.mh, MSG, 0, 0);
    CHECK_STATUS(h_send_done(vi), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
    h_signal(fd, 'M');
    h_expect(fd, 'X'); /* the child, the last holder, is exiting */
    double t0 = h_now_ms();
    CHECK_EQ(h_wait_state(vi, VIP_STATE_ERROR, 3000), VIP_STATE_ERROR);
    double dt = h_now_ms() - t0;
    h_log("the last holder's exit seen after %.1f ms", dt);
    CHECK_MSG(dt < DEADLINE_MS, "the end came %.0f ms after the last holder's exit", dt);
    CHECK_EQ(stats_of(vi).PeerClosed, 1);
    h_vi_teardown(vi);
    h_signal(fd, 'D');
}

/* The holder's child: the posted receive came with the fork. */
static void child_receives(VIP_NIC_HANDLE nic, VIP_VI_HANDLE vi, unsigned char *rbuf, int fd,
                           int done_fd)
{
    CHECK_OK(VipxNicAfterFork(nic));
    h_expect(fd, 'M');
    VIP_DESCRIPTOR *x = h_recv_wait(vi, 5000);
    CHECK_EQ(x->CS.Length, MSG);
    CHECK_RANDOM(rbuf, MSG, 77);
    h_signal(done_fd, 'G'); /* the test's process may read the peer's channel now */
    h_signal(fd, 'X');
    _exit(0); /* without releasing: the end of the last holder */
}

static VIP_NIC_HANDLE nic;

static void test_shared_holders(h_peer p)
{
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    h_mem rb = h_mem_alloc(nic, t, MSG, 0);
    h_descs d = h_descs_alloc(nic, t, 1);
    CHECK_RET(VipxViShare(vi), VIP_INVALID_STATE); /* not connected yet */
    h_post_recv1(vi, &d, 0, rb.ptr, rb.mh, MSG);
    h_connect(vi, cli, srv, NULL);
    h_expect(p.fd, 'C');
    CHECK_OK(VipxViShare(vi));
    CHECK_OK(VipxViShare(vi)); /* twice is once */
    int done[2]; /* the holder tells us when it is through with the peer's channel */
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, done) == 0);
    /* The creator forks the holder and exits at once: the peer must not
     * take the creator's death for the end. */
    pid_t creator = fork();
    CHECK(creator >= 0);
    if (creator == 0) {
        pid_t holder = fork();
        CHECK(holder >= 0);
        if (holder == 0)
            child_receives(nic, vi, rb.ptr, p.fd, done[1]);
        CHECK_OK(VipxViRelease(vi));
        _exit(0);
    }
    int status;
    CHECK_EQ(waitpid(creator, &status, 0), creator);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* This process holds a copy too (it forked the creator): it lets go,
     * and the holder's child is the last. */
    CHECK_OK(VipxViRelease(vi));
    h_signal(p.fd, 'S');
    h_expect(done[0], 'G');
    h_expect(p.fd, 'D');
    CHECK_EQ(h_peer_reap(&p), 0);
}

/* VipDisconnect is a notice: the peer's VI ends, PeerClosed stays 0. */
static void disconnect_peer(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    h_accept(nic, vi, srv2, NULL);
    h_signal(fd, 'C');
    h_expect(fd, 'G');
    CHECK_EQ(h_wait_state(vi, VIP_STATE_ERROR, 3000), VIP_STATE_ERROR);
    CHECK_EQ(stats_of(vi).PeerClosed, 0);
    h_vi_teardown(vi);
    h_signal(fd, 'D');
}

static void test_disconnect_is_not_closed(h_peer p)
{
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    h_connect(vi, cli2, srv2, NULL);
    h_expect(p.fd, 'C');
    CHECK_OK(VipDisconnect(vi));
    h_signal(p.fd, 'G');
    h_expect(p.fd, 'D');
    CHECK_EQ(h_peer_reap(&p), 0);
    h_vi_teardown(vi);
}

/* Sends one message when told, then goes without a word. */
static void last_words_peer(int fd, void *arg)
{
    (void)arg;
    h_mem buf;
    h_descs d;
    VIP_VI_HANDLE vi = peer_accept(fd, srv3, &buf, &d);
    h_expect(fd, 'G');
    h_fill_random(buf.ptr, MSG, 78);
    h_post_send1(vi, &d, 0, buf.ptr, buf.mh, MSG, 0, 0);
    CHECK_STATUS(h_send_done(vi), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
    h_signal(fd, 'M');
    _exit(0);
}

#define SYNC_RECVS 4
#define SYNC_BUF 4096

static void test_sync_after_failure(h_peer p)
{
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, (SYNC_RECVS + 1) * SYNC_BUF);
    VIP_PVOID base;
    VIP_ULONG len;
    CHECK_OK(VipxViArena(vi, &base, &len));
    h_mem ar = h_mem_reg(nic, t, base, len, 0);
    h_descs d = h_descs_alloc(nic, t, SYNC_RECVS + 1);
    for (unsigned i = 0; i < SYNC_RECVS; i++)
        h_post_recv1(vi, &d, i, ar.ptr + i * SYNC_BUF, ar.mh, SYNC_BUF);
    h_connect(vi, cli3, srv3, NULL);
    h_expect(p.fd, 'C');
    h_signal(p.fd, 'G');
    h_expect(p.fd, 'M');
    CHECK_EQ(h_peer_reap(&p), 0);
    CHECK_EQ(h_wait_state(vi, VIP_STATE_ERROR, 3000), VIP_STATE_ERROR);
    /* Posted after the failure: completes flushed, never published. */
    h_post_recv1(vi, &d, SYNC_RECVS, ar.ptr + SYNC_RECVS * SYNC_BUF, ar.mh, SYNC_BUF);
    VIPX_STATE st;
    VIP_ULONG offs[SYNC_RECVS + 1], n = SYNC_RECVS + 1;
    CHECK_OK(VipxViSyncSave(vi, &st, offs, &n));
    CHECK_EQ(n, SYNC_RECVS);
    for (unsigned i = 0; i < SYNC_RECVS; i++)
        CHECK_EQ(offs[i], i * SYNC_BUF);
    /* The next holder's copy (here the same VI) takes the saved view. */
    CHECK_OK(VipxViSyncLoad(vi, &st));
    for (unsigned i = 0; i < SYNC_RECVS; i++)
        CHECK_OK(VipxViImportRecv(vi, h_desc(&d, i), d.m.mh));
    VIP_DESCRIPTOR *x = NULL;
    CHECK_OK(VipRecvDone(vi, &x));
    CHECK(x == h_desc(&d, 0));
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
    CHECK_EQ(x->CS.Length, MSG);
    CHECK_RANDOM(ar.ptr, MSG, 78);
    for (unsigned i = 1; i < SYNC_RECVS; i++) {
        CHECK_OK(VipRecvDone(vi, &x));
        CHECK(x == h_desc(&d, i));
        CHECK_ERR_STATUS(x, VIP_STATUS_DESC_FLUSHED_ERROR, VIP_STATUS_OP_RECEIVE);
    }
    CHECK_RET(VipRecvDone(vi, &x), VIP_NOT_DONE);
    h_vi_teardown(vi);
    h_mem_free(&ar);
    h_descs_free(&d);
}

int main(void)
{
    h_init("share", 60);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* As tests/sovia/fork.c: the holder's child starts the agent thread in
     * a child of a threaded parent, which the sanitizers cannot follow. */
    h_log("SKIP: sanitizer builds (threads started in a child of a threaded parent)");
    h_pass();
#endif
    h_disc(srv, sizeof srv);
    h_disc(cli, sizeof cli);
    h_disc(srv2, sizeof srv2);
    h_disc(cli2, sizeof cli2);
    h_disc(srv3, sizeof srv3);
    h_disc(cli3, sizeof cli3);
    /* Peers first: the harness forks them before this process opens a NIC. */
    h_peer sharing = h_fork(peer, NULL), disconnecting = h_fork(disconnect_peer, NULL),
           leaving = h_fork(last_words_peer, NULL);
    nic = h_open_nic();
    test_shared_holders(sharing);
    test_disconnect_is_not_closed(disconnecting);
    test_sync_after_failure(leaving);
    h_pass();
}
