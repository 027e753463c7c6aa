/*
 * cq_waitfd: waiting on a CQ together with other descriptors
 * (include/vipl_ext.h VipxCQWaitFd / VipxCQArm). One receive CQ serves two
 * VIs connected to one peer; the peer sends on command.
 *   - VipxCQWaitFd gives a descriptor; bad arguments: VIP_INVALID_PARAMETER;
 *   - armed with nothing pending, poll() on it and a pipe times out;
 *   - the peer sends while poll() waits: the fd is readable within the poll
 *     timeout (and not before the send), the pipe is not, and VipCQDone then
 *     reports the completion (right VI, RecvQueue TRUE), byte-exact;
 *   - the pipe becoming readable is reported by the same poll() with no
 *     event on the CQ fd, and the CQ fd stays quiet for a short window;
 *   - the race order: the completion arrives between VipxCQArm and poll():
 *     poll() returns at once;
 *   - a completion that arrived while disarmed is found by the check that
 *     follows arming (the documented pattern);
 *   - completions on both VIs behind one wake-up; epoll works the same way;
 *   - a send CQ's fd fires for a local send completion;
 *   - a thread blocked in VipCQWait wakes on the peer's send;
 *   - the peer disconnecting one VI makes the armed fd readable, and VipCQDone
 *     reports that VI's posted receives, flushed, in order.
 */
#include "harness.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#define NVI 2
#define NRECV 16
#define MSG 200

static char srv[NVI][80], cli[NVI][80];

/* ---- peer: sends on command ------------------------------------------------------ */

/* Commands: {op, vi}. op 's': send now, then answer 'k'; op 'd': answer 'k',
 * sleep 300 ms, then send. Message n (counted over both VIs) carries the
 * pattern seed n and immediate data n. 'Q' (vi 0) ends. */
static void peer(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    h_mem buf = h_mem_alloc(nic, t, 4096, 0);
    h_descs d = h_descs_alloc(nic, t, 8);
    VIP_VI_HANDLE vi[NVI];
    for (int i = 0; i < NVI; i++) {
        VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
        vi[i] = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
        h_post_recv1(vi[i], &d, (unsigned)(4 + i), buf.ptr + 1024 * (2 + i), buf.mh, 1024);
        h_accept(nic, vi[i], srv[i], NULL);
    }
    unsigned n = 0;
    for (;;) {
        char cmd[2];
        h_xrecv(fd, cmd, 2);
        if (cmd[0] == 'Q')
            break;
        if (cmd[0] == 'x') { /* disconnect VI cmd[1] */
            CHECK_OK(VipDisconnect(vi[(int)cmd[1]]));
            h_signal(fd, 'k');
            continue;
        }
        if (cmd[0] == 'r') { /* the parent sent one message on VI cmd[1] */
            int i = cmd[1];
            VIP_DESCRIPTOR *x = h_recv_wait(vi[i], 5000);
            CHECK(x == h_desc(&d, (unsigned)(4 + i)));
            CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
            CHECK_EQ(x->CS.Length, 99);
            CHECK_RANDOM(buf.ptr + 1024 * (2 + i), 99, 999);
            h_signal(fd, 'k');
            continue;
        }
        int i = cmd[1];
        CHECK(i >= 0 && i < NVI);
        if (cmd[0] == 'd') {
            h_signal(fd, 'k');
            h_sleep_ms(300);
        }
        h_fill_random(buf.ptr, MSG, n);
        h_post_send1(vi[i], &d, (unsigned)i, buf.ptr, buf.mh, MSG, VIP_CONTROL_IMMEDIATE, n);
        CHECK_STATUS(h_send_done(vi[i]), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
        n++;
        if (cmd[0] == 's')
            h_signal(fd, 'k');
    }
    for (int i = 0; i < NVI; i++)
        h_vi_teardown(vi[i]);
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
}

/* ---- parent ------------------------------------------------------------------------ */

static h_peer p;
static VIP_VI_HANDLE vis[NVI];
static h_descs rd; /* NRECV receive descriptors per VI */
static h_mem rbuf;
static unsigned next_seq;            /* the peer's message counter */
static unsigned taken[NVI];          /* receives dequeued per VI */

static void command(char op, int vi)
{
    char cmd[2] = {op, (char)vi};
    h_xsend(p.fd, cmd, 2);
}

static int vi_index(VIP_VI_HANDLE v)
{
    for (int i = 0; i < NVI; i++)
        if (vis[i] == v)
            return i;
    FAILF("VipCQDone reported VI %p, which is not attached to the CQ", v);
}

/* Dequeues the next receive of VI i and checks it is message `seq`. */
static void take_recv(int i, unsigned seq)
{
    VIP_DESCRIPTOR *x = NULL;
    CHECK_OK(VipRecvDone(vis[i], &x));
    unsigned k = (unsigned)i * NRECV + taken[i];
    CHECK_MSG(x == h_desc(&rd, k), "VI %d: completion is not the next posted receive", i);
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE | VIP_STATUS_IMMEDIATE);
    CHECK_EQ(x->CS.Length, MSG);
    CHECK_EQ(x->CS.ImmediateData, seq);
    CHECK_RANDOM(rbuf.ptr + 256 * k, MSG, seq);
    taken[i]++;
}

/* VipCQDone must report exactly one completion, on VI `want`. */
static void cq_take(VIP_CQ_HANDLE cq, int want)
{
    VIP_VI_HANDLE v = NULL;
    VIP_BOOLEAN rq = 7;
    CHECK_OK(VipCQDone(cq, &v, &rq));
    CHECK_EQ(rq, VIP_TRUE);
    int i = vi_index(v);
    CHECK_MSG(i == want, "VipCQDone reported VI %d, expected VI %d", i, want);
    take_recv(i, next_seq++);
}

static void cq_empty(VIP_CQ_HANDLE cq)
{
    VIP_VI_HANDLE v = NULL;
    VIP_BOOLEAN rq;
    CHECK_RET(VipCQDone(cq, &v, &rq), VIP_NOT_DONE);
}

/* poll() on {cq fd, pipe}: returns poll's result, revents in ev[]. */
static int poll2(int cqfd, int pipefd, int timeout_ms, short ev[2], double *elapsed)
{
    struct pollfd pf[2] = {{cqfd, POLLIN, 0}, {pipefd, POLLIN, 0}};
    double t0 = h_now_ms();
    int r;
    do
        r = poll(pf, 2, timeout_ms);
    while (r < 0 && errno == EINTR);
    *elapsed = h_now_ms() - t0;
    CHECK_MSG(r >= 0, "poll: %s", strerror(errno));
    ev[0] = pf[0].revents;
    ev[1] = pf[1].revents;
    return r;
}

struct pipe_writer {
    int fd;
    unsigned delay_ms;
};

static void *pipe_writer_thread(void *arg)
{
    struct pipe_writer *w = arg;
    h_sleep_ms(w->delay_ms);
    char c = 'p';
    CHECK(write(w->fd, &c, 1) == 1);
    return NULL;
}

struct cq_waiter {
    VIP_CQ_HANDLE cq;
    VIP_RETURN r;
    VIP_VI_HANDLE vi;
    VIP_BOOLEAN rq;
    double at;
    atomic_int done;
};

static void *cq_waiter_thread(void *arg)
{
    struct cq_waiter *w = arg;
    w->r = VipCQWait(w->cq, 10000, &w->vi, &w->rq);
    w->at = h_now_ms();
    atomic_store(&w->done, 1);
    return NULL;
}

int main(void)
{
    h_init("cq_waitfd", 60);
    for (int i = 0; i < NVI; i++) {
        h_disc(srv[i], sizeof srv[i]);
        h_disc(cli[i], sizeof cli[i]);
    }
    p = h_fork(peer, NULL);
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_CQ_HANDLE rcq = NULL, scq = NULL;
    CHECK_OK(VipCreateCQ(nic, 64, &rcq));
    CHECK_OK(VipCreateCQ(nic, 8, &scq));
    rbuf = h_mem_alloc(nic, t, 256 * NVI * NRECV + 4096, 0);
    rd = h_descs_alloc(nic, t, NVI * NRECV + 2);
    for (int i = 0; i < NVI; i++) {
        VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
        /* VI 1 also reports its sends to the send CQ. */
        vis[i] = h_vi(nic, &va, i == 1 ? scq : NULL, rcq, 0, 0, 0);
        for (unsigned s = 0; s < NRECV; s++) {
            unsigned k = (unsigned)i * NRECV + s;
            h_post_recv1(vis[i], &rd, k, rbuf.ptr + 256 * k, rbuf.mh, 256);
        }
        h_connect(vis[i], cli[i], srv[i], NULL);
    }

    /* The descriptor, and bad arguments. */
    int fd = -1, sfd = -1;
    CHECK_RET(VipxCQWaitFd(NULL, &fd), VIP_INVALID_PARAMETER);
    CHECK_RET(VipxCQWaitFd(rcq, NULL), VIP_INVALID_PARAMETER);
    CHECK_RET(VipxCQArm(NULL, VIP_TRUE), VIP_INVALID_PARAMETER);
    CHECK_RET(VipxCQArm(NULL, VIP_FALSE), VIP_INVALID_PARAMETER);
    CHECK_OK(VipxCQWaitFd(rcq, &fd));
    CHECK_MSG(fd >= 0, "VipxCQWaitFd returned fd %d", fd);
    CHECK_OK(VipxCQWaitFd(scq, &sfd));
    CHECK_MSG(sfd >= 0 && sfd != fd, "send CQ fd %d (receive CQ fd %d)", sfd, fd);
    int pfd[2];
    CHECK(pipe(pfd) == 0);
    short ev[2];
    double el;
    int r;

    /* 1. Armed, nothing pending: poll() times out. */
    CHECK_OK(VipxCQArm(rcq, VIP_TRUE));
    cq_empty(rcq);
    r = poll2(fd, pfd[0], 300, ev, &el);
    CHECK_MSG(r == 0, "armed idle CQ: poll returned %d (cq revents 0x%x, pipe 0x%x)", r, ev[0],
              ev[1]);
    CHECK_MSG(el >= 250, "poll(300 ms) returned after %.0f ms", el);
    CHECK_OK(VipxCQArm(rcq, VIP_FALSE));

    /* 2. The peer sends while poll() waits. */
    CHECK_OK(VipxCQArm(rcq, VIP_TRUE));
    cq_empty(rcq);
    command('d', 0); /* sends 300 ms after its 'k' */
    h_expect(p.fd, 'k');
    r = poll2(fd, pfd[0], 5000, ev, &el);
    h_log("poll woke after %.0f ms (the peer sends after 300 ms)", el);
    CHECK_MSG(r == 1 && (ev[0] & POLLIN) && ev[1] == 0,
              "poll returned %d, cq revents 0x%x, pipe revents 0x%x; expected the CQ fd "
              "readable", r, ev[0], ev[1]);
    CHECK_MSG(el >= 200, "the CQ fd was readable after %.0f ms, before the peer sent", el);
    cq_take(rcq, 0);
    cq_empty(rcq);
    CHECK_OK(VipxCQArm(rcq, VIP_FALSE));

    /* 3. The pipe wakes the same poll(); the CQ fd does not fire. */
    CHECK_OK(VipxCQArm(rcq, VIP_TRUE));
    cq_empty(rcq);
    struct pipe_writer pw = {pfd[1], 200};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, pipe_writer_thread, &pw) == 0);
    r = poll2(fd, pfd[0], 5000, ev, &el);
    CHECK(pthread_join(th, NULL) == 0);
    CHECK_MSG(r == 1 && ev[0] == 0 && (ev[1] & POLLIN),
              "poll returned %d, cq revents 0x%x, pipe revents 0x%x; expected only the pipe",
              r, ev[0], ev[1]);
    CHECK_MSG(el >= 150 && el < 5000, "pipe readable after %.0f ms (written after 200 ms)", el);
    char c;
    CHECK(read(pfd[0], &c, 1) == 1 && c == 'p');
    r = poll2(fd, pfd[0], 300, ev, &el);
    CHECK_MSG(r == 0, "nobody sent, yet poll returned %d (cq revents 0x%x, pipe 0x%x)", r,
              ev[0], ev[1]);
    cq_empty(rcq);
    CHECK_OK(VipxCQArm(rcq, VIP_FALSE));

    /* 4. The completion arrives between VipxCQArm and poll(). */
    CHECK_OK(VipxCQArm(rcq, VIP_TRUE));
    cq_empty(rcq);
    command('s', 1);
    h_expect(p.fd, 'k'); /* sent */
    r = poll2(fd, pfd[0], 5000, ev, &el);
    CHECK_MSG(r == 1 && (ev[0] & POLLIN) && ev[1] == 0,
              "completion before poll: poll returned %d, cq revents 0x%x, pipe revents 0x%x",
              r, ev[0], ev[1]);
    CHECK_MSG(el < 200, "completion before poll: poll took %.0f ms, expected at once", el);
    cq_take(rcq, 1);
    cq_empty(rcq);
    CHECK_OK(VipxCQArm(rcq, VIP_FALSE));

    /* 5. A completion that arrives while disarmed: the check after arming finds it. */
    command('s', 0);
    h_expect(p.fd, 'k');
    CHECK_OK(VipxCQArm(rcq, VIP_TRUE));
    cq_take(rcq, 0);
    cq_empty(rcq);
    /* ... and with it taken, the armed fd is quiet again. */
    r = poll2(fd, pfd[0], 200, ev, &el);
    CHECK_MSG(r == 0, "after arming and taking the completion poll returned %d (cq 0x%x)", r,
              ev[0]);
    CHECK_OK(VipxCQArm(rcq, VIP_FALSE));

    /* 6. Completions on both VIs, waited for with epoll. */
    int ep = epoll_create1(EPOLL_CLOEXEC);
    CHECK(ep >= 0);
    struct epoll_event eev = {.events = EPOLLIN, .data.u32 = 1};
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &eev) == 0);
    eev.data.u32 = 2;
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, pfd[0], &eev) == 0);
    CHECK_OK(VipxCQArm(rcq, VIP_TRUE));
    cq_empty(rcq);
    struct epoll_event got[2];
    CHECK_EQ(epoll_wait(ep, got, 2, 200), 0);
    command('d', 1);
    h_expect(p.fd, 'k');
    double t0 = h_now_ms();
    int ne;
    do
        ne = epoll_wait(ep, got, 2, 5000);
    while (ne < 0 && errno == EINTR);
    el = h_now_ms() - t0;
    CHECK_MSG(ne == 1 && got[0].data.u32 == 1 && (got[0].events & EPOLLIN),
              "epoll_wait returned %d (first: tag %u events 0x%x), expected the CQ fd", ne,
              ne > 0 ? got[0].data.u32 : 0, ne > 0 ? got[0].events : 0);
    CHECK_MSG(el >= 200, "epoll reported the CQ after %.0f ms, before the peer sent", el);
    command('s', 0);
    h_expect(p.fd, 'k');
    /* Both completions pending: order across VIs is unspecified. */
    unsigned seq1 = next_seq, seq0 = next_seq + 1;
    for (int n = 0; n < 2; n++) {
        VIP_VI_HANDLE v = NULL;
        VIP_BOOLEAN rq = 7;
        CHECK_OK(VipCQDone(rcq, &v, &rq));
        CHECK_EQ(rq, VIP_TRUE);
        int i = vi_index(v);
        take_recv(i, i == 1 ? seq1 : seq0);
    }
    next_seq += 2;
    CHECK_EQ(taken[0], 3);
    CHECK_EQ(taken[1], 2);
    cq_empty(rcq);
    CHECK_OK(VipxCQArm(rcq, VIP_FALSE));
    close(ep);

    /* 7. A send CQ: a local send completion makes its fd readable. */
    CHECK_OK(VipxCQArm(scq, VIP_TRUE));
    {
        VIP_VI_HANDLE v;
        VIP_BOOLEAN rq;
        CHECK_RET(VipCQDone(scq, &v, &rq), VIP_NOT_DONE);
        struct pollfd spf = {sfd, POLLIN, 0};
        CHECK_EQ(poll(&spf, 1, 100), 0);
        unsigned char *src = rbuf.ptr + 256 * NVI * NRECV;
        h_fill_random(src, 99, 999);
        h_post_send1(vis[1], &rd, NVI * NRECV, src, rbuf.mh, 99, 0, 0);
        CHECK_EQ(poll(&spf, 1, 2000), 1);
        CHECK(spf.revents & POLLIN);
        v = NULL;
        rq = 7;
        CHECK_OK(VipCQDone(scq, &v, &rq));
        CHECK(v == vis[1]);
        CHECK_EQ(rq, VIP_FALSE);
        VIP_DESCRIPTOR *x = NULL;
        CHECK_OK(VipSendDone(vis[1], &x));
        CHECK(x == h_desc(&rd, NVI * NRECV));
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
        CHECK_RET(VipCQDone(scq, &v, &rq), VIP_NOT_DONE);
        command('r', 1); /* the peer checks the message */
        h_expect(p.fd, 'k');
    }
    CHECK_OK(VipxCQArm(scq, VIP_FALSE));

    /* 8. A thread blocked in VipCQWait wakes on the peer's send. */
    struct cq_waiter w = {.cq = rcq, .r = VIP_SUCCESS};
    atomic_init(&w.done, 0);
    t0 = h_now_ms();
    CHECK(pthread_create(&th, NULL, cq_waiter_thread, &w) == 0);
    h_sleep_ms(100);
    CHECK_MSG(!atomic_load(&w.done), "VipCQWait returned %s with nothing sent",
              VipxReturnString(w.r));
    command('d', 1);
    h_expect(p.fd, 'k');
    CHECK(pthread_join(th, NULL) == 0);
    el = w.at - t0;
    h_log("VipCQWait woke after %.0f ms (the peer sends ~400 ms after it started)", el);
    CHECK_OK(w.r);
    CHECK_MSG(el >= 300, "VipCQWait returned after %.0f ms, before the peer sent", el);
    CHECK(w.vi == vis[1]);
    CHECK_EQ(w.rq, VIP_TRUE);
    take_recv(1, next_seq++);
    cq_empty(rcq);
    {
        VIP_VI_HANDLE v;
        VIP_BOOLEAN rq;
        CHECK_RET(VipCQWait(rcq, 100, &v, &rq), VIP_TIMEOUT);
    }

    /* 9. After all that, arming still works (VipCQWait shares the wake-up). */
    CHECK_OK(VipxCQArm(rcq, VIP_TRUE));
    cq_empty(rcq);
    r = poll2(fd, pfd[0], 200, ev, &el);
    CHECK_MSG(r == 0, "armed idle CQ after VipCQWait: poll returned %d (cq 0x%x)", r, ev[0]);
    command('d', 0);
    h_expect(p.fd, 'k');
    r = poll2(fd, pfd[0], 5000, ev, &el);
    CHECK_MSG(r == 1 && (ev[0] & POLLIN), "poll returned %d, cq revents 0x%x", r, ev[0]);
    cq_take(rcq, 0);
    cq_empty(rcq);
    CHECK_OK(VipxCQArm(rcq, VIP_FALSE));

    /* 10. The peer disconnects VI 0: the armed fd fires, the receives flush. */
    CHECK_OK(VipxCQArm(rcq, VIP_TRUE));
    cq_empty(rcq);
    command('x', 0);
    h_expect(p.fd, 'k');
    r = poll2(fd, pfd[0], 5000, ev, &el);
    h_log("the peer's VipDisconnect made the armed CQ fd readable after %.0f ms", el);
    CHECK_MSG(r == 1 && (ev[0] & POLLIN) && ev[1] == 0,
              "after the peer's VipDisconnect poll returned %d, cq revents 0x%x, pipe 0x%x", r,
              ev[0], ev[1]);
    CHECK_MSG(el < 1000, "the peer's VipDisconnect was seen after %.0f ms", el);
    CHECK_EQ(h_wait_state(vis[0], VIP_STATE_ERROR, 1000), VIP_STATE_ERROR);
    for (unsigned n = taken[0]; n < NRECV; n++) {
        VIP_VI_HANDLE v = NULL;
        VIP_BOOLEAN rq = 7;
        VIP_RETURN rr = VipCQDone(rcq, &v, &rq);
        CHECK_MSG(rr == VIP_SUCCESS, "flushed receive %u of VI 0: VipCQDone returned %s", n,
                  VipxReturnString(rr));
        CHECK(v == vis[0]);
        CHECK_EQ(rq, VIP_TRUE);
        VIP_DESCRIPTOR *x = NULL;
        CHECK_OK(VipRecvDone(vis[0], &x));
        CHECK(x == h_desc(&rd, n));
        CHECK_ERR_STATUS(x, VIP_STATUS_DESC_FLUSHED_ERROR, VIP_STATUS_OP_RECEIVE);
    }
    taken[0] = NRECV;
    cq_empty(rcq);
    CHECK_OK(VipxCQArm(rcq, VIP_FALSE));

    command('Q', 0);
    h_peer_finish(&p);
    close(pfd[0]);
    close(pfd[1]);
    for (int i = 0; i < NVI; i++) {
        h_vi_teardown(vis[i]);
        VIP_VI_HANDLE v;
        VIP_BOOLEAN rq;
        while (VipCQDone(rcq, &v, &rq) == VIP_SUCCESS) {
        }
        while (VipCQDone(scq, &v, &rq) == VIP_SUCCESS) {
        }
    }
    CHECK_OK(VipDestroyCQ(rcq));
    CHECK_OK(VipDestroyCQ(scq));
    h_mem_free(&rbuf);
    h_descs_free(&rd);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
