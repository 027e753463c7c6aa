/*
 * threads.c - threads blocked on a carried socket: recv woken by data, by
 * the peer's close and by shutdown() from another thread; poll woken by
 * data; two threads blocked on two connections at once; one thread
 * sending while another receives on the same socket; signals (EINTR
 * without SA_RESTART, a restarted recv with it); a blocked recv and a send
 * waiting for the window sleep on their connection's futex word
 * (futex_waitv), not on the completion queue's descriptor; a close from
 * another thread ends a blocked recv with EBADF, the peer's death with
 * ECONNRESET or end of stream within a second.
 */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pharness.h"

P_THREADED_FORK_CHILDREN /* peer_dies_while_in_recv: the child accepts (threads) */

struct blocked {
    int fd;
    int op; /* 0 recv, 1 poll */
    char buf[64];
    ssize_t rc;
    int err;
    short revents;
    _Atomic pid_t tid;
    atomic_bool started, done;
    pthread_t t;
};

static void *block_thread(void *arg)
{
    struct blocked *b = arg;
    atomic_store(&b->tid, gettid());
    atomic_store(&b->started, true);
    if (b->op == 0) {
        b->rc = recv(b->fd, b->buf, sizeof b->buf, 0);
    } else {
        struct pollfd p = {.fd = b->fd, .events = POLLIN};
        b->rc = poll(&p, 1, -1);
        b->revents = p.revents;
    }
    b->err = errno;
    atomic_store(&b->done, true);
    return NULL;
}

/* Starts a thread blocking in recv/poll; returns once it is (very likely)
 * inside the call, and checks it did not return. */
static void start_blocked(struct blocked *b, int fd, int op)
{
    memset(b, 0, sizeof *b);
    b->fd = fd;
    b->op = op;
    CHECK_EQ(pthread_create(&b->t, NULL, block_thread, b), 0);
    while (!atomic_load(&b->started))
        p_sleep_ms(1);
    p_sleep_ms(100);
    if (atomic_load(&b->done))
        FAILF("%s returned %zd (errno %s) with nothing to read", op ? "poll" : "recv", b->rc,
              p_errname(b->err));
}

static void join(struct blocked *b)
{
    CHECK_EQ(pthread_join(b->t, NULL), 0);
}

/* ---- recv and poll woken by data, recv woken by the close ------------------- */

static void wake_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    CHECK_EQ(p_get_int(r), 1);
    p_write_all(fd, "wake up!", 8);
    CHECK_EQ(p_get_int(r), 2);
    p_write_all(fd, "polled", 6);
    CHECK_EQ(p_get_int(r), 3);
    SYS(close(fd));
}

static void wake_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    struct blocked b;
    /* recv, woken by data */
    start_blocked(&b, fd, 0);
    p_put_int(r, 1);
    join(&b);
    CHECK_EQ(b.rc, 8);
    CHECK(memcmp(b.buf, "wake up!", 8) == 0);
    /* poll, woken by data */
    start_blocked(&b, fd, 1);
    p_put_int(r, 2);
    join(&b);
    CHECK_EQ(b.rc, 1);
    CHECK(b.revents & POLLIN);
    char buf[6];
    p_read_all(fd, buf, 6);
    CHECK(memcmp(buf, "polled", 6) == 0);
    /* recv, woken by the peer's close */
    start_blocked(&b, fd, 0);
    p_put_int(r, 3);
    join(&b);
    CHECK_EQ(b.rc, 0);
    SYS(close(fd));
}

/* ---- two threads on two connections at once ----------------------------------- */

static void two_server(struct p_role *r)
{
    int a = (int)SYS(accept(r->lfd, NULL, NULL));
    int b = (int)SYS(accept(r->lfd, NULL, NULL));
    CHECK_EQ(p_get_int(r), 1); /* both clients' threads are blocked */
    p_write_all(b, "to b", 4);
    SYS(close(a));
    CHECK_EQ(p_get_int(r), 2);
    SYS(close(b));
}

static void two_client(struct p_role *r)
{
    int a = p_connect(r->port);
    int b = p_connect(r->port);
    struct blocked ta, tb;
    start_blocked(&ta, a, 0);
    start_blocked(&tb, b, 0);
    p_put_int(r, 1);
    join(&ta);
    join(&tb);
    CHECK_EQ(ta.rc, 0);
    CHECK_EQ(tb.rc, 4);
    CHECK(memcmp(tb.buf, "to b", 4) == 0);
    p_put_int(r, 2);
    SYS(close(a));
    SYS(close(b));
}

/* ---- shutdown from another thread wakes a blocked recv ----------------------- */

static void shut_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    struct pollfd w = {.fd = fd, .events = POLLOUT};
    CHECK_EQ(poll(&w, 1, 10000), 1);
    char c;
    CHECK_EQ(read(fd, &c, 1), 0); /* the client's SHUT_RDWR ends our input */
    SYS(close(fd));
}

static void shut_client(struct p_role *r)
{
    (void)r;
    int fd = p_connect(r->port);
    struct blocked b;
    start_blocked(&b, fd, 0);
    SYS(shutdown(fd, SHUT_RDWR));
    join(&b);
    CHECK_EQ(b.rc, 0);
    SYS(close(fd));
}

/* ---- full duplex: a sender thread and a receiver thread on one socket ------- */

#define DUPLEX_BYTES (8u << 20)

struct pump {
    int fd;
    uint64_t seed, hash;
};

static void *sender(void *arg)
{
    struct pump *p = arg;
    char *buf = malloc(DUPLEX_BYTES);
    CHECK(buf != NULL);
    p_fill(buf, DUPLEX_BYTES, p->seed);
    p->hash = p_hash(P_HASH_INIT, buf, DUPLEX_BYTES);
    for (size_t off = 0; off < DUPLEX_BYTES;) {
        size_t len = DUPLEX_BYTES - off < 100000 ? DUPLEX_BYTES - off : 100000;
        ssize_t n = send(p->fd, buf + off, len, MSG_NOSIGNAL);
        CHECK(n > 0);
        off += (size_t)n;
    }
    free(buf);
    return NULL;
}

static uint64_t receive_all(int fd)
{
    char *buf = malloc(1 << 16);
    CHECK(buf != NULL);
    uint64_t h = P_HASH_INIT;
    size_t got = 0;
    while (got < DUPLEX_BYTES) {
        ssize_t n = recv(fd, buf, 1 << 16, 0);
        CHECK(n > 0);
        h = p_hash(h, buf, (size_t)n);
        got += (size_t)n;
    }
    free(buf);
    return h;
}

static void duplex_run(int fd, uint64_t my_seed, uint64_t their_seed)
{
    struct pump p = {.fd = fd, .seed = my_seed};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, sender, &p), 0);
    uint64_t h = receive_all(fd);
    CHECK_EQ(pthread_join(t, NULL), 0);
    char *want = malloc(DUPLEX_BYTES);
    CHECK(want != NULL);
    p_fill(want, DUPLEX_BYTES, their_seed);
    CHECK(h == p_hash(P_HASH_INIT, want, DUPLEX_BYTES));
    free(want);
}

static void duplex_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    duplex_run(fd, 1, 2);
    p_barrier(r);
    SYS(close(fd));
}

static void duplex_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    duplex_run(fd, 2, 1);
    p_barrier(r);
    SYS(close(fd));
}

/* ---- signals ---------------------------------------------------------------------- */

static atomic_int signals;

static void on_usr1(int sig)
{
    (void)sig;
    atomic_fetch_add(&signals, 1);
}

static void late_data_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    CHECK_EQ(p_get_int(r), 1);
    p_write_all(fd, "after the signal", 16);
    CHECK_EQ(p_get_int(r), 2);
    SYS(close(fd));
}

/* Without SA_RESTART a blocked recv that moved nothing fails with EINTR. */
static void eintr_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = 0};
    sigemptyset(&sa.sa_mask);
    SYS(sigaction(SIGUSR1, &sa, NULL));
    struct blocked b;
    start_blocked(&b, fd, 0);
    CHECK_EQ(pthread_kill(b.t, SIGUSR1), 0);
    join(&b);
    CHECK_EQ(atomic_load(&signals), 1);
    CHECK_EQ(b.rc, -1);
    CHECK_EQ(b.err, EINTR);
    p_put_int(r, 1);
    char buf[16];
    p_read_all(fd, buf, 16); /* the connection is fine */
    CHECK(memcmp(buf, "after the signal", 16) == 0);
    p_put_int(r, 2);
    SYS(close(fd));
}

/* With SA_RESTART, recv on a socket (no SO_RCVTIMEO) is restarted: the
 * handler runs and the call keeps waiting for the data. */
static void restart_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    SYS(sigaction(SIGUSR1, &sa, NULL));
    struct blocked b;
    start_blocked(&b, fd, 0);
    CHECK_EQ(pthread_kill(b.t, SIGUSR1), 0);
    for (int i = 0; i < 10000 && atomic_load(&signals) == 0; i++)
        p_sleep_ms(1);
    CHECK_EQ(atomic_load(&signals), 1);
    p_sleep_ms(50);
    if (atomic_load(&b.done))
        FAILF("recv returned %zd (errno %s) after a SA_RESTART signal, want it restarted",
              b.rc, p_errname(b.err));
    p_put_int(r, 1);
    join(&b);
    CHECK_EQ(b.rc, 16);
    CHECK(memcmp(b.buf, "after the signal", 16) == 0);
    p_put_int(r, 2);
    SYS(close(fd));
}

/* ---- a futex sleep ------------------------------------------------------------ */

#if defined(__SANITIZE_THREAD__) /* no futex sleep there (src/sovia/data.c) */
#define FUTEX_SLEEP_EXPECTED 0
#else
#define FUTEX_SLEEP_EXPECTED 1
#endif

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif

/* The system call thread `tid` sleeps in (its /proc syscall file), -1 when
 * it runs; waits up to 2 s for it to be asleep. */
static long sleeping_in(pid_t tid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
    for (int i = 0; i < 200; i++) {
        FILE *f = fopen(path, "r");
        CHECK(f != NULL);
        long nr = -1;
        int got = fscanf(f, "%ld", &nr);
        fclose(f);
        if (got == 1)
            return nr;
        p_sleep_ms(10);
    }
    return -1;
}

static void futex_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    CHECK_EQ(p_get_int(r), 1);
    p_write_all(fd, "wake up!", 8);
    /* The client now fills the window: read nothing until it sleeps. */
    CHECK_EQ(p_get_int(r), 2);
    char buf[4096];
    ssize_t n, total = 0;
    while ((n = SYS(read(fd, buf, sizeof buf))) > 0)
        total += n;
    p_put_int(r, (int)(total & 0x7fffffff));
    SYS(close(fd));
}

struct filler {
    int fd;
    _Atomic pid_t tid;
    atomic_llong sent;
    atomic_bool done;
    pthread_t t;
};

static void *fill_thread(void *arg)
{
    struct filler *f = arg;
    atomic_store(&f->tid, gettid());
    static char chunk[65536];
    for (int i = 0; i < 64; i++) { /* 4 MiB, far past the window */
        ssize_t n = send(f->fd, chunk, sizeof chunk, 0);
        if (n <= 0)
            break;
        atomic_fetch_add(&f->sent, n);
    }
    atomic_store(&f->done, true);
    return NULL;
}

/* A recv with nothing to read, and a send that waits for the window, sleep
 * in futex_waitv on the connection's word (the CQ's sleep is a ppoll), and
 * wake for the peer's bytes and credits. */
static void futex_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    struct blocked b;
    start_blocked(&b, fd, 0);
    long nr = sleeping_in(atomic_load(&b.tid));
    if (FUTEX_SLEEP_EXPECTED && nr != SYS_futex_waitv)
        FAILF("a blocked recv sleeps in system call %ld, want futex_waitv (%d)", nr,
              SYS_futex_waitv);
    p_put_int(r, 1);
    join(&b);
    CHECK_EQ(b.rc, 8);
    CHECK(memcmp(b.buf, "wake up!", 8) == 0);

    struct filler f = {.fd = fd};
    CHECK_EQ(pthread_create(&f.t, NULL, fill_thread, &f), 0);
    while (!atomic_load(&f.tid))
        p_sleep_ms(1);
    long long before = -1;
    for (int i = 0; i < 500 && atomic_load(&f.sent) != before; i++) { /* until it stalls */
        before = atomic_load(&f.sent);
        p_sleep_ms(20);
    }
    CHECK(!atomic_load(&f.done));
    nr = sleeping_in(atomic_load(&f.tid));
    if (FUTEX_SLEEP_EXPECTED && nr != SYS_futex_waitv)
        FAILF("a send waiting for the window sleeps in system call %ld, want futex_waitv (%d)",
              nr, SYS_futex_waitv);
    p_put_int(r, 2);
    CHECK_EQ(pthread_join(f.t, NULL), 0);
    CHECK_EQ(atomic_load(&f.sent), 64 * 65536);
    SYS(shutdown(fd, SHUT_WR));
    CHECK_EQ(p_get_int(r), 64 * 65536);
    SYS(close(fd));
}

/* Another thread closes the socket a recv sleeps on (on the connection's
 * word): the close returns at once and the recv ends with EBADF. The recv
 * must not go on to the kernel socket (as after a fallback): it slept there
 * for ever, as the kernel's recv is not woken by the close (ASan: 1 run in
 * 15; both ends to the watchdog). */
static void close_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    CHECK_EQ(p_get_int(r), 1);
    SYS(close(fd));
}

static void close_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    struct blocked b;
    start_blocked(&b, fd, 0);
    double t0 = p_now_ms();
    SYS(close(fd));
    double took = p_now_ms() - t0;
    if (took >= 2000)
        FAILF("close of a socket another thread sleeps in recv on took %.0f ms", took);
    join(&b);
    if (b.rc != -1 || b.err != EBADF)
        FAILF("recv on a socket closed meanwhile: %zd (errno %s), want -1/EBADF", b.rc,
              p_errname(b.err));
    p_put_int(r, 1);
}

/* The peer's process dies (SIGKILL) while a recv sleeps on the connection's
 * word: the recv ends within a second, with ECONNRESET or end of stream. */
static void death_server(struct p_role *r)
{
    pid_t k = (pid_t)SYS(fork());
    if (k == 0) {
        p_child_safety();
        p_threaded_fork_child();
        int fd = (int)SYS(accept(r->lfd, NULL, NULL));
        char c;
        p_read_all(fd, &c, 1); /* paired both ways */
        p_write_all(fd, "k", 1);
        for (;;)
            pause();
    }
    CHECK_EQ(p_get_int(r), 1);
    SYS(kill(k, SIGKILL));
    int st;
    SYS(waitpid(k, &st, 0));
    p_put_int(r, 2);
}

static void death_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    p_write_all(fd, "c", 1);
    char c;
    p_read_all(fd, &c, 1);
    struct blocked b;
    start_blocked(&b, fd, 0);
    p_put_int(r, 1);
    CHECK_EQ(p_get_int(r), 2);
    double t0 = p_now_ms();
    while (!atomic_load(&b.done) && p_now_ms() - t0 < 1000)
        p_sleep_ms(1);
    if (!atomic_load(&b.done))
        FAILF("recv still asleep 1 s after the peer's process died");
    join(&b);
    if (!(b.rc == 0 || (b.rc == -1 && b.err == ECONNRESET)))
        FAILF("recv after the peer died: %zd (errno %s), want 0 or -1/ECONNRESET", b.rc,
              p_errname(b.err));
    SYS(close(fd));
}

int main(void)
{
    p_init("threads");
    p_case("recv_poll_wake", wake_server, wake_client, P_CARRIED);
    p_expect_carried(2);
    p_case("two_blocked_threads", two_server, two_client, P_CARRIED);
    p_case("shutdown_wakes_recv", shut_server, shut_client, P_CARRIED);
    p_case("full_duplex_threads", duplex_server, duplex_client, P_CARRIED);
    p_case("signal_eintr", late_data_server, eintr_client, P_CARRIED);
    p_case("signal_sa_restart", late_data_server, restart_client, P_CARRIED);
    p_case("futex_sleep", futex_server, futex_client, P_CARRIED);
    p_case("close_while_in_recv", close_server, close_client, P_CARRIED);
    p_case("peer_dies_while_in_recv", death_server, death_client, P_NO_STATS);
    return p_done();
}
