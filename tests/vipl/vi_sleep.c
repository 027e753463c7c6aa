/*
 * vi_sleep: a thread's futex sleep on VIs' own words (VipxSleepArm,
 * VipxViSleepArm, VipxSleepWords; src/vipl/sleep.c, shm_wake.c). One VI on
 * a receive CQ, connected to a peer process that sends on command:
 *   - the peer's send wakes a thread asleep on the VI's word within
 *     milliseconds (the sleep's limit is 5 s), and sends no datagram to the
 *     CQ's descriptor (the CQ is not armed for such a sleep);
 *   - a completion that came before the arm: the sleep returns at once;
 *   - VipxWakeWaiters, and VipxWakeSelf from a signal handler installed
 *     with SA_RESTART, end a sleep at once;
 *   - a hostile peer: its word (which the peer can write) scribbled ends
 *     the sleep at once, and a peer that never wakes us leaves us asleep no
 *     longer than asked; bad arguments are refused.
 * Fails without the peer's futex wake (the sleep lasts its 5 s).
 */
#include "harness.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NRECV 8
#define MSG 100
#define LONG_MS 5000

static char srv[80], cli[80];

/* Commands: 's': send message n, answer 'k' once sent. 'Q' ends. */
static void peer(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    h_mem buf = h_mem_alloc(nic, t, 4096, 0);
    h_descs d = h_descs_alloc(nic, t, 4);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    h_accept(nic, vi, srv, NULL);
    unsigned n = 0;
    for (;;) {
        char cmd;
        h_xrecv(fd, &cmd, 1);
        if (cmd == 'Q')
            break;
        CHECK(cmd == 's');
        h_fill_random(buf.ptr, MSG, n);
        h_post_send1(vi, &d, 0, buf.ptr, buf.mh, MSG, VIP_CONTROL_IMMEDIATE, n);
        CHECK_STATUS(h_send_done(vi), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
        n++;
        h_signal(fd, 'k');
    }
    h_vi_teardown(vi);
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
}

static h_peer p;
static VIP_CQ_HANDLE rcq;
static VIP_VI_HANDLE vi;
static h_descs rd;
static h_mem rbuf;
static unsigned next_seq, taken;

static void peer_sends(void)
{
    h_xsend(p.fd, "s", 1);
    h_expect(p.fd, 'k');
}

/* The VI's next receive: message `seq`, reposted. */
static void take(unsigned seq)
{
    VIP_DESCRIPTOR *x = NULL;
    CHECK_OK(VipRecvDone(vi, &x));
    unsigned k = taken++ % NRECV;
    CHECK(x == h_desc(&rd, k));
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE | VIP_STATUS_IMMEDIATE);
    CHECK_EQ(x->CS.ImmediateData, seq);
    CHECK_RANDOM(rbuf.ptr + 256 * k, MSG, seq);
    h_post_recv1(vi, &rd, k, rbuf.ptr + 256 * k, rbuf.mh, 256);
    VIP_VI_HANDLE v;
    VIP_BOOLEAN rq;
    while (VipCQDone(rcq, &v, &rq) == VIP_SUCCESS) /* its CQ entry, if any */
        CHECK(v == vi);
}

/* The CQ's descriptor has a byte waiting (a peer's datagram)? */
static int cq_fd_readable(void)
{
    int fd;
    CHECK_OK(VipxCQWaitFd(rcq, &fd));
    struct pollfd pf = {fd, POLLIN, 0};
    return poll(&pf, 1, 0) > 0;
}

/* Arms this thread and the VI: w[0] the thread's, w[1] the VI's. */
static void arm(VIPX_SLEEP_WORD w[2])
{
    int bound = 7;
    CHECK_OK(VipxSleepArm(&w[0]));
    CHECK_OK(VipxViSleepArm(vi, VIP_TRUE, &w[1], &bound));
    CHECK_EQ(bound, -1); /* not inheritable: the peer cannot clear our count */
}

static void disarm(void)
{
    CHECK_OK(VipxViSleepArm(vi, VIP_FALSE, NULL, NULL));
    CHECK_OK(VipxSleepDisarm());
}

struct sleeper {
    int ctl[2];
    VIP_RETURN rc;
    double slept_ms;
};

static void *sleeper_thread(void *arg)
{
    struct sleeper *s = arg;
    VIPX_SLEEP_WORD w[2];
    arm(w);
    h_signal(s->ctl[1], 'a'); /* armed, about to sleep */
    double t0 = h_now_ms();
    s->rc = VipxSleepWords(w, 2, LONG_MS);
    s->slept_ms = h_now_ms() - t0;
    disarm();
    h_signal(s->ctl[1], 'w');
    return NULL;
}

/* Starts a sleeper, runs `wake` once it is armed, returns how long it slept. */
static double sleep_until(void (*wake)(pthread_t), const char *what)
{
    struct sleeper s = {.rc = VIP_ERROR_RESOURCE};
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, s.ctl) == 0);
    pthread_t a;
    CHECK(pthread_create(&a, NULL, sleeper_thread, &s) == 0);
    h_expect(s.ctl[0], 'a');
    h_sleep_ms(20); /* usually asleep by now; the token covers it if not */
    wake(a);
    h_expect(s.ctl[0], 'w');
    CHECK(pthread_join(a, NULL) == 0);
    close(s.ctl[0]);
    close(s.ctl[1]);
    CHECK_MSG(s.rc == VIP_SUCCESS && s.slept_ms < LONG_MS / 2,
              "%s: the sleep was not ended (%s after %.0f ms)", what, VipxReturnString(s.rc),
              s.slept_ms);
    h_log("%s: woken after %.1f ms", what, s.slept_ms);
    return s.slept_ms;
}

static void wake_by_peer(pthread_t t)
{
    (void)t;
    peer_sends();
}

static void wake_by_waiters(pthread_t t)
{
    (void)t;
    CHECK_OK(VipxWakeWaiters());
}

static void on_usr1(int sig)
{
    (void)sig;
    VipxWakeSelf();
}

static void wake_by_signal(pthread_t t)
{
    CHECK(pthread_kill(t, SIGUSR1) == 0);
}

static void test_wakes(void)
{
    sleep_until(wake_by_peer, "peer's send");
    CHECK_MSG(!cq_fd_readable(), "the peer sent a datagram to the CQ's descriptor");
    take(next_seq++);

    /* A completion before the arm: no sleep at all. */
    peer_sends();
    VIPX_SLEEP_WORD w[2];
    arm(w);
    double t0 = h_now_ms();
    CHECK_OK(VipxSleepWords(w, 2, LONG_MS));
    CHECK_MSG(h_now_ms() - t0 < LONG_MS / 2, "slept with a completion waiting");
    disarm();
    take(next_seq++);

    sleep_until(wake_by_waiters, "VipxWakeWaiters");
#ifdef __SANITIZE_THREAD__
    /* ThreadSanitizer runs a handler when the thread leaves the system
     * call (its own blocking interceptors excepted): after the sleep. */
    h_log("ThreadSanitizer: no handler case");
    if (0)
#endif
    {
        struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = SA_RESTART};
        sigemptyset(&sa.sa_mask);
        CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
        sleep_until(wake_by_signal, "VipxWakeSelf in a handler (SA_RESTART)");
    }
    VIP_DESCRIPTOR *x;
    CHECK_RET(VipRecvDone(vi, &x), VIP_NOT_DONE);
}

static void test_hostile(void)
{
    /* The VI's word is the peer's to write: a scribble ends the sleep. */
    VIPX_SLEEP_WORD w[2];
    arm(w);
    CHECK(w[1].Word && w[1].Shared);
    __atomic_store_n((VIP_UINT32 *)w[1].Word, w[1].Token + 12345, __ATOMIC_SEQ_CST);
    double t0 = h_now_ms();
    CHECK_OK(VipxSleepWords(w, 2, LONG_MS));
    CHECK_MSG(h_now_ms() - t0 < LONG_MS / 2, "slept on a word the peer changed");
    disarm();
    /* A peer that never wakes us: asleep no longer than asked. */
    arm(w);
    t0 = h_now_ms();
    CHECK_RET(VipxSleepWords(w, 2, 100), VIP_TIMEOUT);
    double ms = h_now_ms() - t0;
    CHECK_MSG(ms >= 90 && ms < 2000, "a 100 ms sleep lasted %.0f ms", ms);
    disarm();
    /* Bad arguments. */
    CHECK_RET(VipxSleepWords(NULL, 1, 0), VIP_INVALID_PARAMETER);
    CHECK_RET(VipxSleepWords(w, 0, 0), VIP_INVALID_PARAMETER);
    CHECK_RET(VipxSleepWords(w, 129, 0), VIP_INVALID_PARAMETER);
    CHECK_RET(VipxSleepArm(NULL), VIP_INVALID_PARAMETER);
    int bound;
    CHECK_RET(VipxViSleepArm(NULL, VIP_TRUE, &w[1], &bound), VIP_INVALID_PARAMETER);
    CHECK_RET(VipxViSleepArm(vi, VIP_TRUE, NULL, &bound), VIP_INVALID_PARAMETER);
    /* Disarms with nothing armed do nothing (a count never wraps). */
    CHECK_OK(VipxViSleepArm(vi, VIP_FALSE, NULL, NULL));
    CHECK_OK(VipxSleepDisarm());
    h_log("hostile: a scribbled word ends the sleep; a silent peer leaves it bounded");
}

int main(void)
{
    h_init("vi_sleep", 60);
    h_disc(srv, sizeof srv);
    h_disc(cli, sizeof cli);
    p = h_fork(peer, NULL);
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    CHECK_OK(VipCreateCQ(nic, 64, &rcq));
    rbuf = h_mem_alloc(nic, t, 256 * NRECV, 0);
    rd = h_descs_alloc(nic, t, NRECV);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    vi = h_vi(nic, &va, NULL, rcq, 0, 0, 0);
    for (unsigned s = 0; s < NRECV; s++)
        h_post_recv1(vi, &rd, s, rbuf.ptr + 256 * s, rbuf.mh, 256);
    h_connect(vi, cli, srv, NULL);

    test_wakes();
    test_hostile();

    h_xsend(p.fd, "Q", 1);
    h_peer_finish(&p);
    h_vi_teardown(vi);
    CHECK_OK(VipDestroyCQ(rcq));
    h_mem_free(&rbuf);
    h_descs_free(&rd);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    h_log("ok");
    return 0;
}
