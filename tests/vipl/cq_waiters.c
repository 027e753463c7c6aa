/*
 * cq_waiters: no sleeper on a CQ loses its wake-up to another (src/vipl/
 * waiters.c, the fork part of src/providers/shm/shm_cq.c). One receive CQ
 * serves two VIs connected to one peer, which sends on command. Each case
 * makes the order that lost wake-ups before, with tokens, not timing:
 *   - threads: thread A armed and sleeps (its poll set from VipxCQPollFds);
 *     the peer sends on VI 0; thread B arms and disarms (it drains the CQ's
 *     descriptor). A's poll set must still be readable, and A finds the
 *     completion. (Before: B's arm drained the byte and A slept on.)
 *   - VipxWakeWaiters rings a sleeping thread's doorbell;
 *   - fork: the child arms and disarms its copy of the CQ after the peer
 *     sent to the parent, which is armed: the parent's poll set must still
 *     be readable (the child has a wake-up socket of its own);
 *   - a VI held since a fork: the child sleeps on its own CQ, the peer sends
 *     on VI 1, the parent arms and disarms meanwhile; the child's poll set
 *     is readable and its copy of the CQ reports VI 1's completion (the
 *     peer woke it through the VI's holder slot).
 */
#include "harness.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define NVI 2
#define NRECV 8
#define MSG 100

static char srv[NVI][80], cli[NVI][80];

/* Commands: {'s', vi}: send message n on VI vi, answer 'k' once sent. 'Q' ends. */
static void peer(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    h_mem buf = h_mem_alloc(nic, t, 4096, 0);
    h_descs d = h_descs_alloc(nic, t, 4);
    VIP_VI_HANDLE vi[NVI];
    for (int i = 0; i < NVI; i++) {
        VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
        vi[i] = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
        h_accept(nic, vi[i], srv[i], NULL);
    }
    unsigned n = 0;
    for (;;) {
        char cmd[2];
        h_xrecv(fd, cmd, 2);
        if (cmd[0] == 'Q')
            break;
        int i = cmd[1];
        CHECK(cmd[0] == 's' && i >= 0 && i < NVI);
        h_fill_random(buf.ptr, MSG, n);
        h_post_send1(vi[i], &d, (unsigned)i, buf.ptr, buf.mh, MSG, VIP_CONTROL_IMMEDIATE, n);
        CHECK_STATUS(h_send_done(vi[i]), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
        n++;
        h_signal(fd, 'k');
    }
    for (int i = 0; i < NVI; i++)
        h_vi_teardown(vi[i]);
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
}

static h_peer p;
static VIP_CQ_HANDLE rcq;
static VIP_VI_HANDLE vis[NVI];
static h_descs rd;
static h_mem rbuf;
static unsigned next_seq, taken[NVI];

static void peer_sends(int vi)
{
    char cmd[2] = {'s', (char)vi};
    h_xsend(p.fd, cmd, 2);
    h_expect(p.fd, 'k');
}

/* The CQ reports exactly one completion, VI `want`'s next, message `seq`. */
static void cq_take(int want, unsigned seq)
{
    VIP_VI_HANDLE v = NULL;
    VIP_BOOLEAN rq = 7;
    CHECK_OK(VipCQDone(rcq, &v, &rq));
    CHECK_MSG(v == vis[want] && rq == VIP_TRUE, "VipCQDone reported VI %p, expected VI %d", v,
              want);
    VIP_DESCRIPTOR *x = NULL;
    CHECK_OK(VipRecvDone(vis[want], &x));
    unsigned k = (unsigned)want * NRECV + taken[want]++;
    CHECK(x == h_desc(&rd, k));
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE | VIP_STATUS_IMMEDIATE);
    CHECK_EQ(x->CS.Length, MSG);
    CHECK_EQ(x->CS.ImmediateData, seq);
    CHECK_RANDOM(rbuf.ptr + 256 * k, MSG, seq);
}

/* Polls the sleeper's set; 1 if readable within `ms`. */
static int poll_set(const int fds[2], int ms)
{
    struct pollfd pf[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    int r;
    do
        r = poll(pf, 2, ms);
    while (r < 0 && errno == EINTR);
    CHECK_MSG(r >= 0, "poll: %s", strerror(errno));
    return r > 0;
}

/* ---- threads of one process ------------------------------------------------------ */

struct sleeper {
    int ctl[2]; /* main <-> sleeper tokens */
    int woke;
};

static void *sleeper_thread(void *arg)
{
    struct sleeper *s = arg;
    int fds[2], bound;
    CHECK_OK(VipxCQArm(rcq, VIP_TRUE));
    CHECK_OK(VipxCQPollFds(rcq, fds, &bound));
    /* not inheritable, a doorbell: no wake-up can be lost; fabric bounds its
     * sleeps (a peer's end is not on the CQ's descriptor: docs/VIPL.md) */
    CHECK_EQ(bound, h_fabric() ? 10 : -1);
    CHECK_MSG(fds[1] >= 0, "a sleeping thread has no doorbell");
    h_signal(s->ctl[1], 'a'); /* armed, about to sleep */
    h_expect(s->ctl[1], 'g'); /* the other thread has drained meanwhile */
    /* As a waiter must: within the bound (fabric: 10 ms, its descriptor
     * may go quiet once progress takes the completion inside), asking
     * again after each slice (0: something is in the provider already). */
    double end = h_now_ms() + 3000;
    s->woke = 0;
    while (!s->woke && h_now_ms() < end) {
        int left = (int)(end - h_now_ms()) + 1;
        s->woke = poll_set(fds, bound < 0 || bound > left ? left : bound);
        if (!s->woke && bound >= 0) {
            CHECK_OK(VipxCQPollFds(rcq, fds, &bound));
            s->woke = bound == 0;
        }
    }
    CHECK_OK(VipxCQArm(rcq, VIP_FALSE));
    h_signal(s->ctl[1], 'w');
    return NULL;
}

static void *arm_disarm_thread(void *arg)
{
    (void)arg;
    CHECK_OK(VipxCQArm(rcq, VIP_TRUE));
    CHECK_OK(VipxCQArm(rcq, VIP_FALSE));
    return NULL;
}

static void test_threads(void)
{
    struct sleeper s = {.woke = -1};
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, s.ctl) == 0);
    pthread_t a, b;
    CHECK(pthread_create(&a, NULL, sleeper_thread, &s) == 0);
    h_expect(s.ctl[0], 'a');
    peer_sends(0); /* A is armed: the CQ's descriptor gets a byte */
    CHECK(pthread_create(&b, NULL, arm_disarm_thread, NULL) == 0);
    CHECK(pthread_join(b, NULL) == 0);
    h_signal(s.ctl[0], 'g');
    h_expect(s.ctl[0], 'w');
    CHECK(pthread_join(a, NULL) == 0);
    CHECK_MSG(s.woke == 1, "the sleeping thread was not woken: another thread's disarm took "
                           "its wake-up");
    cq_take(0, next_seq++);
    h_log("threads: a wake-up drained by another thread reached the sleeper");

    /* VipxWakeWaiters rings a sleeper with nothing to report. */
    struct sleeper s2 = {.woke = -1};
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, s2.ctl) == 0);
    CHECK(pthread_create(&a, NULL, sleeper_thread, &s2) == 0);
    h_expect(s2.ctl[0], 'a');
    CHECK_OK(VipxWakeWaiters());
    h_signal(s2.ctl[0], 'g');
    h_expect(s2.ctl[0], 'w');
    CHECK(pthread_join(a, NULL) == 0);
    CHECK_MSG(s2.woke == 1, "VipxWakeWaiters did not wake a sleeping thread");
    VIP_VI_HANDLE v;
    VIP_BOOLEAN rq;
    CHECK_RET(VipCQDone(rcq, &v, &rq), VIP_NOT_DONE);
    for (int i = 0; i < 2; i++) {
        close(s.ctl[i]);
        close(s2.ctl[i]);
    }
}

/* ---- processes ---------------------------------------------------------------------- */

/* The child of a fork: runs fn with a token channel to the parent, exits 0. */
static pid_t fork_child(void (*fn)(int), int *chan)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        fn(sv[1]);
        _exit(0);
    }
    close(sv[1]);
    *chan = sv[0];
    return pid;
}

static void reap(pid_t pid, const char *what)
{
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: child ended with status 0x%x",
              what, status);
}

static void child_drains(int chan)
{
    h_expect(chan, 'd');
    CHECK_OK(VipxCQArm(rcq, VIP_TRUE));
    CHECK_OK(VipxCQArm(rcq, VIP_FALSE));
    h_signal(chan, 'D');
}

static void test_fork_parent_sleeps(void)
{
    int chan;
    pid_t child = fork_child(child_drains, &chan);
    int fds[2], bound;
    CHECK_OK(VipxCQArm(rcq, VIP_TRUE));
    CHECK_OK(VipxCQPollFds(rcq, fds, &bound));
    /* not inheritable, a doorbell: no wake-up can be lost; fabric bounds its
     * sleeps (a peer's end is not on the CQ's descriptor: docs/VIPL.md) */
    CHECK_EQ(bound, h_fabric() ? 10 : -1);
    peer_sends(0);
    h_signal(chan, 'd');
    h_expect(chan, 'D');
    reap(child, "fork, parent sleeps");
    CHECK_MSG(poll_set(fds, 3000), "the parent was not woken: the forked child's disarm took "
                                   "its wake-up");
    CHECK_OK(VipxCQArm(rcq, VIP_FALSE));
    cq_take(0, next_seq++);
    close(chan);
    h_log("fork: the child's drain left the parent's wake-up alone");
}

static unsigned child_seq; /* the message the child waits for */

static void child_sleeps(int chan)
{
    int fds[2], bound;
    CHECK_OK(VipxCQArm(rcq, VIP_TRUE));
    CHECK_OK(VipxCQPollFds(rcq, fds, &bound));
    /* not inheritable, a doorbell: no wake-up can be lost; fabric bounds its
     * sleeps (a peer's end is not on the CQ's descriptor: docs/VIPL.md) */
    CHECK_EQ(bound, h_fabric() ? 10 : -1);
    h_signal(chan, 'a');
    h_expect(chan, 'g');
    CHECK_MSG(poll_set(fds, 3000), "the child holding VI 1 since the fork was not woken by "
                                   "the peer's send");
    CHECK_OK(VipxCQArm(rcq, VIP_FALSE));
    cq_take(1, child_seq);
    h_signal(chan, 'w');
}

static void test_fork_child_sleeps(void)
{
    child_seq = next_seq;
    int chan;
    pid_t child = fork_child(child_sleeps, &chan);
    h_expect(chan, 'a');
    peer_sends(1);
    /* The parent's own sleep, which used to drain the shared descriptor. */
    CHECK_OK(VipxCQArm(rcq, VIP_TRUE));
    CHECK_OK(VipxCQArm(rcq, VIP_FALSE));
    h_signal(chan, 'g');
    h_expect(chan, 'w');
    reap(child, "fork, child sleeps");
    /* The completion is in the VI's memory, which the parent maps too. */
    cq_take(1, next_seq++);
    close(chan);
    h_log("fork: the peer woke the child holding the VI through its holder slot");
}

int main(void)
{
    h_init("cq_waiters", 60);
    for (int i = 0; i < NVI; i++) {
        h_disc(srv[i], sizeof srv[i]);
        h_disc(cli[i], sizeof cli[i]);
    }
    p = h_fork(peer, NULL);
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    CHECK_OK(VipCreateCQ(nic, 64, &rcq));
    rbuf = h_mem_alloc(nic, t, 256 * NVI * NRECV, 0);
    rd = h_descs_alloc(nic, t, NVI * NRECV);
    for (int i = 0; i < NVI; i++) {
        VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
        vis[i] = h_vi(nic, &va, NULL, rcq, 0, 0, 0);
        for (unsigned s = 0; s < NRECV; s++) {
            unsigned k = (unsigned)i * NRECV + s;
            h_post_recv1(vis[i], &rd, k, rbuf.ptr + 256 * k, rbuf.mh, 256);
        }
        h_connect(vis[i], cli[i], srv[i], NULL);
    }
    int fds[2], bound;
    CHECK_RET(VipxCQPollFds(NULL, fds, &bound), VIP_INVALID_PARAMETER);
    CHECK_RET(VipxCQPollFds(rcq, NULL, &bound), VIP_INVALID_PARAMETER);
    CHECK_RET(VipxCQPollFds(rcq, fds, NULL), VIP_INVALID_PARAMETER);

    test_threads();
    if (h_fabric()) { /* libfabric's objects do not survive a fork (docs/VIPL.md, fabric) */
        h_log("fabric: the fork cases are shm's only");
    } else {
        test_fork_parent_sleeps();
        test_fork_child_sleeps();
    }

    h_xsend(p.fd, "Q", 2);
    h_peer_finish(&p);
    for (int i = 0; i < NVI; i++)
        h_vi_teardown(vis[i]);
    CHECK_OK(VipDestroyCQ(rcq));
    h_mem_free(&rbuf);
    h_descs_free(&rd);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    h_log("ok");
    return 0;
}
