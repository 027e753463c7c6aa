/*
 * epoll.c - epoll over a carried socket (and a pipe in the same set):
 * epoll_create/epoll_create1, epoll_ctl ADD/MOD/DEL and their errors,
 * epoll_wait/epoll_pwait level- and edge-triggered, EPOLLRDHUP,
 * EPOLLONESHOT, many carried entries changed out of order, fairness
 * between carried and kernel entries, and signals (a pending
 * one unblocked by epoll_pwait's mask, one arriving during a wait, while
 * sleeping and while spinning).
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pharness.h"
#include "pkick.h"

#include "epharness.h"

/* ---- creation and epoll_ctl errors ---------------------------------------------- */

/* Accepts two connections and waits until they are writable (paired,
 * under the preload), without moving a byte. */
static void quiet_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    int fd2 = (int)SYS(accept(r->lfd, NULL, NULL));
    struct pollfd w[2] = {{.fd = fd, .events = POLLOUT}, {.fd = fd2, .events = POLLOUT}};
    for (int i = 0; i < 10000 && !(w[0].revents && w[1].revents); i++) {
        CHECK(poll(w, 2, 10000) >= 1);
        if (!(w[0].revents && w[1].revents))
            p_sleep_ms(1);
    }
    CHECK_EQ(w[0].revents, POLLOUT);
    CHECK_EQ(w[1].revents, POLLOUT);
    p_barrier(r);
    SYS(close(fd2));
    SYS(close(fd));
}

static void ctl_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    int other = p_connect(r->port);
    int ep = (int)SYS(epoll_create(1));
    CHECK((SYS(fcntl(ep, F_GETFD)) & FD_CLOEXEC) == 0);
    int ep2 = (int)SYS(epoll_create1(EPOLL_CLOEXEC));
    CHECK((SYS(fcntl(ep2, F_GETFD)) & FD_CLOEXEC) != 0);
    CHECK_ERR(epoll_create(0), EINVAL);
    CHECK_ERR(epoll_create1(0x12345), EINVAL);

    SYS(add(ep, fd, EPOLLIN, TAG_SOCK));
    CHECK_ERR(add(ep, fd, EPOLLIN, TAG_SOCK), EEXIST);
    CHECK_ERR(mod(ep, other, EPOLLIN, TAG_SOCK), ENOENT);
    CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_DEL, other, NULL), ENOENT);
    SYS(mod(ep, fd, EPOLLIN | EPOLLOUT, TAG_SOCK));
    CHECK_EQ(wait_tag(ep, 10000, TAG_SOCK, NULL, false), EPOLLOUT);
    SYS(epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL));
    CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL), ENOENT);
    CHECK_ERR(mod(ep, fd, EPOLLIN, TAG_SOCK), ENOENT);
    int n = epoll_wait(ep, (struct epoll_event[1]){{0}}, 1, 0);
    CHECK_EQ(n, 0);
    /* the same socket in two sets */
    SYS(add(ep, fd, EPOLLOUT, TAG_SOCK));
    SYS(add(ep2, fd, EPOLLOUT, TAG_SOCK));
    CHECK_EQ(wait_tag(ep, 10000, TAG_SOCK, NULL, false), EPOLLOUT);
    CHECK_EQ(wait_tag(ep2, 10000, TAG_SOCK, NULL, false), EPOLLOUT);
    /* bad arguments */
    CHECK_ERR(add(ep, ep, EPOLLIN, 1), EINVAL);
    int pp[2];
    SYS(pipe(pp));
    CHECK_ERR(add(-1, fd, EPOLLIN, 1), EBADF);
    CHECK_ERR(epoll_ctl(ep, 99, other, &(struct epoll_event){.events = EPOLLIN}), EINVAL);
    struct epoll_event evs[2];
    CHECK_ERR(epoll_wait(ep, evs, 0, 0), EINVAL);
    CHECK_ERR(epoll_wait(pp[0], evs, 2, 0), EINVAL);
    SYS(close(pp[0]));
    SYS(close(pp[1]));
    SYS(close(ep2));
    SYS(close(ep));
    p_barrier(r);
    SYS(close(other));
    SYS(close(fd));
}

/* epoll_ctl with a carried socket: every error as the kernel gives it. */
static void not_epoll_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    int other = p_connect(r->port);
    int pp[2];
    SYS(pipe(pp));
    /* not an epoll set: a pipe, a carried socket, a regular file */
    CHECK_ERR(add(pp[0], fd, EPOLLIN, 1), EINVAL);
    CHECK_ERR(add(other, fd, EPOLLIN, 1), EINVAL);
    CHECK_ERR(mod(other, fd, EPOLLIN, 1), EINVAL);
    CHECK_ERR(epoll_ctl(other, EPOLL_CTL_DEL, fd, NULL), EINVAL);
    int file = p_temp_file(16, 1);
    CHECK_ERR(add(file, fd, EPOLLIN, 1), EINVAL);
    /* a closed descriptor as the set */
    int ep = (int)SYS(epoll_create1(0));
    int closed = (int)SYS(dup(ep));
    SYS(close(closed));
    CHECK_ERR(add(closed, fd, EPOLLIN, 1), EBADF);
    CHECK_ERR(epoll_ctl(closed, EPOLL_CTL_DEL, fd, NULL), EBADF);
    /* no event where one is needed (the kernel checks that first) */
    CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_ADD, fd, NULL), EFAULT);
    CHECK_ERR(epoll_ctl(closed, EPOLL_CTL_ADD, fd, NULL), EFAULT);
    /* a regular file cannot be polled: EPERM, in a set holding a carried socket */
    SYS(add(ep, fd, EPOLLIN, TAG_SOCK));
    CHECK_ERR(add(ep, file, EPOLLIN, TAG_PIPE), EPERM);
    /* EEXIST and ENOENT per set; the set itself */
    CHECK_ERR(add(ep, fd, EPOLLOUT, TAG_SOCK), EEXIST);
    CHECK_ERR(mod(ep, other, EPOLLIN, TAG_SOCK), ENOENT);
    CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_DEL, other, NULL), ENOENT);
    CHECK_ERR(add(ep, ep, EPOLLIN, 1), EINVAL);
    /* EPOLLEXCLUSIVE: not with EPOLLONESHOT, never in MOD */
    CHECK_ERR(add(ep, other, EPOLLIN | EPOLLEXCLUSIVE | EPOLLONESHOT, TAG_PIPE), EINVAL);
    CHECK_ERR(mod(ep, fd, EPOLLIN | EPOLLEXCLUSIVE, TAG_SOCK), EINVAL);
    SYS(add(ep, other, EPOLLOUT | EPOLLEXCLUSIVE, TAG_PIPE));
    CHECK_ERR(mod(ep, other, EPOLLOUT, TAG_PIPE), EINVAL);
    CHECK_ERR(epoll_ctl(ep, 99, fd, &(struct epoll_event){.events = EPOLLIN}), EINVAL);
    /* cycles of nested sets, each holding a carried socket: ELOOP */
    int ep2 = (int)SYS(epoll_create1(0));
    SYS(add(ep2, fd, EPOLLIN, TAG_SOCK));
    SYS(add(ep, ep2, EPOLLIN, TAG_INNER));
    CHECK_ERR(add(ep2, ep, EPOLLIN, TAG_INNER), ELOOP);
    int ep3 = (int)SYS(epoll_create1(0));
    SYS(add(ep3, ep, EPOLLIN, TAG_INNER));
    CHECK_ERR(add(ep2, ep3, EPOLLIN, TAG_INNER), ELOOP);
    /* after all that, the set still reports its entries, each once */
    SYS(epoll_ctl(ep, EPOLL_CTL_DEL, ep2, NULL));
    SYS(mod(ep, fd, EPOLLOUT, TAG_SOCK));
    struct seen w = wait_all(ep, 10000, false);
    CHECK_EQ(w.sock, EPOLLOUT);
    SYS(close(ep3));
    SYS(close(ep2));
    SYS(close(ep));
    SYS(close(file));
    SYS(close(pp[0]));
    SYS(close(pp[1]));
    p_barrier(r);
    SYS(close(other));
    SYS(close(fd));
}

/* ---- level-triggered, with a pipe in the set ----------------------------------- */

static bool use_pwait;

static void level_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    int ep = (int)SYS(epoll_create1(0));
    SYS(add(ep, fd, EPOLLIN, TAG_SOCK));
    SYS(add(ep, r->from_peer, EPOLLIN, TAG_PIPE));
    int n;
    CHECK_EQ(wait_tag(ep, 0, TAG_SOCK, &n, use_pwait), 0);
    CHECK_EQ(n, 0);
    CHECK_EQ(wait_tag(ep, 50, TAG_SOCK, &n, use_pwait), 0);
    CHECK_EQ(n, 0);
    p_put_int(r, 1);
    CHECK_EQ(wait_tag(ep, 10000, TAG_SOCK, &n, use_pwait), EPOLLIN);
    CHECK_EQ(n, 1);
    /* unread: reported again and again */
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(wait_tag(ep, 0, TAG_SOCK, &n, use_pwait), EPOLLIN);
        CHECK_EQ(n, 1);
    }
    char buf[16];
    CHECK_EQ(recv(fd, buf, 4, 0), 4);
    CHECK_EQ(wait_tag(ep, 0, TAG_SOCK, NULL, use_pwait), EPOLLIN); /* 6 left */
    p_read_all(fd, buf, 6);
    CHECK_EQ(wait_tag(ep, 0, TAG_SOCK, &n, use_pwait), 0);
    CHECK_EQ(n, 0);
    /* the pipe */
    p_put_int(r, 2);
    CHECK_EQ(wait_tag(ep, 10000, TAG_PIPE, &n, use_pwait), EPOLLIN);
    CHECK_EQ(n, 1);
    CHECK_EQ(p_get_int(r), 77);
    CHECK_EQ(wait_tag(ep, 50, TAG_PIPE, &n, use_pwait), 0);
    CHECK_EQ(n, 0);
    /* both */
    p_put_int(r, 1);
    p_put_int(r, 2);
    uint32_t s = 0, p = 0;
    double end = p_now_ms() + 20000;
    while (!(s && p) && p_now_ms() < end) {
        struct seen w = wait_all(ep, 10000, use_pwait);
        s |= w.sock;
        p |= w.pipe;
        if (!(s && p))
            p_sleep_ms(1);
    }
    CHECK_EQ(s, EPOLLIN);
    CHECK_EQ(p, EPOLLIN);
    p_read_all(fd, buf, 10);
    CHECK_EQ(p_get_int(r), 77);
    /* EPOLLOUT too, level: every time */
    SYS(mod(ep, fd, EPOLLIN | EPOLLOUT, TAG_SOCK));
    CHECK_EQ(wait_tag(ep, 10000, TAG_SOCK, NULL, use_pwait), EPOLLOUT);
    CHECK_EQ(wait_tag(ep, 0, TAG_SOCK, NULL, use_pwait), EPOLLOUT);
    p_put_int(r, 0);
    SYS(close(ep));
    SYS(close(fd));
}

static void level_wait(struct p_role *r)
{
    use_pwait = false;
    level_client(r);
}

static void level_pwait(struct p_role *r)
{
    use_pwait = true;
    level_client(r);
}

/* A set with the carried socket and the pipe, both made ready (once poll
 * says so). */
static void both_ready(struct p_role *r, int *fd, int *ep)
{
    *fd = p_connect(r->port);
    *ep = (int)SYS(epoll_create1(0));
    SYS(add(*ep, *fd, EPOLLIN, TAG_SOCK));
    SYS(add(*ep, r->from_peer, EPOLLIN, TAG_PIPE));
    p_put_int(r, 1);
    p_put_int(r, 2);
    struct pollfd pf[2] = {{.fd = *fd, .events = POLLIN}, {.fd = r->from_peer, .events = POLLIN}};
    for (int i = 0; i < 20000; i++) {
        CHECK(poll(pf, 2, 10000) >= 1);
        if ((pf[0].revents & POLLIN) && (pf[1].revents & POLLIN))
            break;
        p_sleep_ms(1);
    }
    CHECK((pf[0].revents & POLLIN) && (pf[1].revents & POLLIN));
}

/* Reads both, ends the case. */
static void both_done(struct p_role *r, int fd, int ep)
{
    char buf[10];
    p_read_all(fd, buf, 10);
    CHECK_EQ(p_get_int(r), 77);
    p_put_int(r, 0);
    SYS(close(ep));
    SYS(close(fd));
}

/* Level-triggered: one epoll_wait reports every ready entry, the carried
 * socket and the pipe together. */
static void all_ready_client(struct p_role *r)
{
    int fd, ep;
    both_ready(r, &fd, &ep);
    for (int i = 0; i < 5; i++) {
        struct seen w = wait_all(ep, 0, false);
        if (w.n != 2 || w.sock != EPOLLIN || w.pipe != EPOLLIN)
            FAILF("call %d: epoll_wait with a ready carried socket and a ready pipe: %d events "
                  "(socket 0x%x, pipe 0x%x), want both", i, w.n, w.sock, w.pipe);
    }
    both_done(r, fd, ep);
}

/* Level-triggered, one event per call: the carried socket and the pipe,
 * both ready, take turns (the kernel moves a reported entry to the back). */
static void turns_client(struct p_role *r)
{
    int fd, ep;
    both_ready(r, &fd, &ep);
    uint64_t prev = 0;
    for (int i = 0; i < 8; i++) {
        struct epoll_event ev;
        CHECK_EQ(epoll_wait(ep, &ev, 1, 0), 1);
        CHECK_EQ(ev.events, EPOLLIN);
        CHECK(ev.data.u64 == TAG_SOCK || ev.data.u64 == TAG_PIPE);
        if (ev.data.u64 == prev)
            FAILF("call %d: epoll_wait(max 1) reported tag 0x%llx twice in a row while the "
                  "other entry was ready too", i, (unsigned long long)prev);
        prev = ev.data.u64;
    }
    both_done(r, fd, ep);
}

struct waiter {
    int ep;
    int rc;
    struct epoll_event ev;
    pthread_t t;
};

static void *wait_thread(void *arg)
{
    struct waiter *w = arg;
    w->rc = epoll_wait(w->ep, &w->ev, 1, 10000);
    return NULL;
}

/* A thread asleep in epoll_wait on `ep` (after sleep_ms) while the ready
 * `fd` joins the set: it must wake with that entry, within bound_ms of the
 * join (bound_ms < 0: no bound). */
static void joins_asleep(int ep, int fd, uint64_t tag, const char *what, int sleep_ms,
                         int bound_ms)
{
    struct waiter w = {.ep = ep};
    CHECK_EQ(pthread_create(&w.t, NULL, wait_thread, &w), 0);
    p_sleep_ms(sleep_ms); /* asleep by now */
    double t0 = p_now_ms();
    SYS(add(ep, fd, EPOLLIN, tag));
    CHECK_EQ(pthread_join(w.t, NULL), 0);
    double took = p_now_ms() - t0;
    p_log("woke %.2f ms after a readable %s joined", took, what);
    if (w.rc != 1 || w.ev.data.u64 != tag || w.ev.events != EPOLLIN ||
        (bound_ms >= 0 && took > bound_ms))
        FAILF("epoll_wait asleep while a readable %s joined the set: %d, tag 0x%llx events "
              "0x%x after %.0f ms; want 1, the %s, EPOLLIN%s",
              what, w.rc, (unsigned long long)w.ev.data.u64, w.ev.events, took, what,
              bound_ms >= 0 ? ", at once" : "");
}

/* Another thread asleep in epoll_wait on a set without a carried socket
 * wakes when one that has data joins the set (as for a kernel socket). */
static void added_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    int pp[2];
    SYS(pipe(pp));
    int ep = (int)SYS(epoll_create1(0));
    SYS(add(ep, pp[0], EPOLLIN, TAG_PIPE));
    p_put_int(r, 1);
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    CHECK_EQ(poll(&pf, 1, 10000), 1); /* the data is there */
    joins_asleep(ep, fd, TAG_SOCK, "carried socket", 100, -1);
    char buf[10];
    p_read_all(fd, buf, 10);
    p_put_int(r, 0);
    SYS(close(ep));
    SYS(close(pp[0]));
    SYS(close(pp[1]));
    SYS(close(fd));
}

/* A thread asleep in epoll_wait on a set of carried sockets alone (it
 * sleeps on sovia's doorbells, not on the kernel set) wakes when a ready
 * entry joins the set: a pipe, or a second carried socket. Both are ready
 * before they join, so nothing else wakes the sleeper; without the ring at
 * the join it would sleep on until its 100 ms bound (the doorbell's; the
 * futex sleep's is the call's 10 s). The bound here is 90 ms: a woken
 * thread waits for a CPU, and at a load of 16 on 2 cores under ASan the
 * wake-up took 0.2-25 ms in steps of the 4 ms scheduler tick, as did the
 * same join's wake-up of a sleep in the kernel's epoll (added_while_waiting). */
static void two_server(struct p_role *r)
{
    int fd[2] = {(int)SYS(accept(r->lfd, NULL, NULL)), (int)SYS(accept(r->lfd, NULL, NULL))};
    struct pollfd pf[2] = {{.fd = fd[0], .events = POLLIN}, {.fd = fd[1], .events = POLLIN}};
    CHECK_EQ(poll(pf, 2, 10000), 1); /* the client's byte on the one to answer */
    int i = pf[0].revents ? 0 : 1;
    char c;
    p_read_all(fd[i], &c, 1);
    p_write_all(fd[i], "0123456789", 10);
    CHECK_EQ(p_get_int(r), 0);
    SYS(close(fd[0]));
    SYS(close(fd[1]));
}

static void joins_asleep_client(struct p_role *r)
{
    int quiet = p_connect(r->port), fd = p_connect(r->port);
    int ep = (int)SYS(epoll_create1(0));
    SYS(add(ep, quiet, EPOLLIN, TAG_INNER));
    int pp[2];
    SYS(pipe(pp));
    p_write_all(pp[1], "x", 1);
    joins_asleep(ep, pp[0], TAG_PIPE, "pipe", 30, 90);
    SYS(epoll_ctl(ep, EPOLL_CTL_DEL, pp[0], NULL));
    p_write_all(fd, "x", 1);
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    CHECK_EQ(poll(&pf, 1, 10000), 1); /* the answer is there */
    joins_asleep(ep, fd, TAG_SOCK, "carried socket", 30, 90);
    char buf[10];
    p_read_all(fd, buf, 10);
    p_put_int(r, 0);
    SYS(close(ep));
    SYS(close(pp[0]));
    SYS(close(pp[1]));
    SYS(close(quiet));
    SYS(close(fd));
}

/* Answers the first byte that comes on either of two connections with 10
 * bytes; a connection that ends first is passed over. */
static void answer_server(struct p_role *r)
{
    int fd[2] = {(int)SYS(accept(r->lfd, NULL, NULL)), (int)SYS(accept(r->lfd, NULL, NULL))};
    bool open_[2] = {true, true}, answered = false;
    while (!answered && (open_[0] || open_[1])) {
        struct pollfd pf[2] = {{.fd = open_[0] ? fd[0] : -1, .events = POLLIN},
                               {.fd = open_[1] ? fd[1] : -1, .events = POLLIN}};
        CHECK(poll(pf, 2, 10000) >= 1);
        for (int i = 0; i < 2 && !answered; i++) {
            if (!pf[i].revents)
                continue;
            char c;
            if (SYS(read(fd[i], &c, 1)) == 0) {
                open_[i] = false;
                continue;
            }
            p_write_all(fd[i], "0123456789", 10);
            answered = true;
        }
    }
    CHECK(answered);
    CHECK_EQ(p_get_int(r), 0);
    SYS(close(fd[0]));
    SYS(close(fd[1]));
}

/* A thread asleep in epoll_wait on carried sockets alone (a futex sleep on
 * their connections' words) while another closes one of them: the close
 * returns at once (it waits for the sleeper to let go of the connection,
 * and wakes it), and the sleeper sleeps on and wakes for the other. */
static void close_asleep_client(struct p_role *r)
{
    int quiet = p_connect(r->port), fd = p_connect(r->port);
    int ep = (int)SYS(epoll_create1(0));
    SYS(add(ep, quiet, EPOLLIN, TAG_INNER));
    SYS(add(ep, fd, EPOLLIN, TAG_SOCK));
    struct waiter w = {.ep = ep};
    CHECK_EQ(pthread_create(&w.t, NULL, wait_thread, &w), 0);
    p_sleep_ms(30); /* asleep by now */
    double t0 = p_now_ms();
    SYS(close(quiet));
    double took = p_now_ms() - t0;
    if (took >= 2000)
        FAILF("close of a socket another thread sleeps on took %.0f ms", took);
    p_write_all(fd, "x", 1);
    CHECK_EQ(pthread_join(w.t, NULL), 0);
    if (w.rc != 1 || w.ev.data.u64 != TAG_SOCK || !(w.ev.events & EPOLLIN))
        FAILF("epoll_wait after a close meanwhile: %d, tag 0x%llx events 0x%x; want 1, the "
              "other socket, EPOLLIN",
              w.rc, (unsigned long long)w.ev.data.u64, w.ev.events);
    char buf[10];
    p_read_all(fd, buf, 10);
    CHECK(memcmp(buf, "0123456789", 10) == 0);
    p_put_int(r, 0);
    SYS(close(ep));
    SYS(close(fd));
}

/* ---- edge-triggered --------------------------------------------------------- */

static void edge_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    int ep = (int)SYS(epoll_create1(0));
    SYS(add(ep, fd, EPOLLIN | EPOLLET, TAG_SOCK));
    CHECK_EQ(wait_tag(ep, 0, TAG_SOCK, NULL, false), 0);
    p_put_int(r, 1);
    CHECK_EQ(wait_tag(ep, 10000, TAG_SOCK, NULL, false), EPOLLIN);
    /* not read, but no new data: not again */
    CHECK_EQ(wait_tag(ep, 0, TAG_SOCK, NULL, false), 0);
    CHECK_EQ(wait_tag(ep, 50, TAG_SOCK, NULL, false), 0);
    /* new data: once more */
    p_put_int(r, 1);
    CHECK_EQ(wait_tag(ep, 10000, TAG_SOCK, NULL, false), EPOLLIN);
    CHECK_EQ(wait_tag(ep, 50, TAG_SOCK, NULL, false), 0);
    char buf[20];
    p_read_all(fd, buf, 20);
    CHECK(memcmp(buf, "01234567890123456789", 20) == 0);
    CHECK_EQ(wait_tag(ep, 50, TAG_SOCK, NULL, false), 0);
    /* after draining, new data is an edge again */
    p_put_int(r, 1);
    CHECK_EQ(wait_tag(ep, 10000, TAG_SOCK, NULL, false), EPOLLIN);
    p_read_all(fd, buf, 10);
    CHECK_EQ(wait_tag(ep, 50, TAG_SOCK, NULL, false), 0);
    p_put_int(r, 0);
    SYS(close(ep));
    SYS(close(fd));
}

/* ---- EPOLLRDHUP ------------------------------------------------------------------- */

static void rdhup_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    int ep = (int)SYS(epoll_create1(0));
    SYS(add(ep, fd, EPOLLIN | EPOLLRDHUP, TAG_SOCK));
    CHECK_EQ(wait_tag(ep, 50, TAG_SOCK, NULL, false), 0);
    p_put_int(r, 1);
    CHECK_EQ(wait_tag(ep, 10000, TAG_SOCK, NULL, false), EPOLLIN);
    char buf[10];
    p_read_all(fd, buf, 10);
    p_put_int(r, 3); /* the server shuts its side */
    uint32_t ev = 0;
    for (int i = 0; i < 1000 && (ev & (EPOLLIN | EPOLLRDHUP)) != (EPOLLIN | EPOLLRDHUP); i++)
        ev = wait_tag(ep, 10000, TAG_SOCK, NULL, false);
    CHECK_EQ(ev & ~(uint32_t)EPOLLOUT, EPOLLIN | EPOLLRDHUP);
    CHECK_EQ(read(fd, buf, sizeof buf), 0);
    /* level: still reported (end of stream stays readable) */
    CHECK_EQ(wait_tag(ep, 0, TAG_SOCK, NULL, false), EPOLLIN | EPOLLRDHUP);
    /* the other direction still works */
    p_write_all(fd, "x", 1);
    p_put_int(r, 0);
    SYS(close(ep));
    SYS(close(fd));
}

/* ---- EPOLLONESHOT ------------------------------------------------------------- */

static void oneshot_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    int ep = (int)SYS(epoll_create1(0));
    SYS(add(ep, fd, EPOLLIN | EPOLLONESHOT, TAG_SOCK));
    p_put_int(r, 1);
    CHECK_EQ(wait_tag(ep, 10000, TAG_SOCK, NULL, false), EPOLLIN);
    CHECK_EQ(wait_tag(ep, 50, TAG_SOCK, NULL, false), 0); /* disabled */
    p_put_int(r, 1);
    CHECK_EQ(wait_tag(ep, 50, TAG_SOCK, NULL, false), 0); /* new data: still disabled */
    /* disabled, not removed */
    CHECK_ERR(add(ep, fd, EPOLLIN, TAG_SOCK), EEXIST);
    SYS(mod(ep, fd, EPOLLIN | EPOLLONESHOT, TAG_SOCK));
    CHECK_EQ(wait_tag(ep, 10000, TAG_SOCK, NULL, false), EPOLLIN);
    CHECK_EQ(wait_tag(ep, 50, TAG_SOCK, NULL, false), 0);
    char buf[20];
    p_read_all(fd, buf, 20);
    SYS(mod(ep, fd, EPOLLIN | EPOLLONESHOT, TAG_SOCK));
    CHECK_EQ(wait_tag(ep, 50, TAG_SOCK, NULL, false), 0); /* nothing to read */
    p_put_int(r, 1);
    CHECK_EQ(wait_tag(ep, 10000, TAG_SOCK, NULL, false), EPOLLIN);
    p_read_all(fd, buf, 10);
    p_put_int(r, 0);
    SYS(close(ep));
    SYS(close(fd));
}

/* ---- signals ------------------------------------------------------------------------ */

static volatile sig_atomic_t usr1;

static void on_usr1(int sig)
{
    (void)sig;
    usr1++;
}

static void handle_usr1(int flags)
{
    struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = flags};
    sigemptyset(&sa.sa_mask);
    SYS(sigaction(SIGUSR1, &sa, NULL));
    struct sigaction back;
    SYS(sigaction(SIGUSR1, NULL, &back)); /* reported as set */
    CHECK(back.sa_handler == on_usr1);
    CHECK_EQ(back.sa_flags & (SA_RESTART | SA_SIGINFO), flags & (SA_RESTART | SA_SIGINFO));
}

/* The socket still carries data after the waits (and gets paired for the
 * stat record). */
static void still_works(struct p_role *r, int fd, int ep)
{
    p_put_int(r, 1);
    CHECK_EQ(wait_tag(ep, 10000, TAG_SOCK, NULL, false), EPOLLIN);
    char buf[10];
    p_read_all(fd, buf, 10);
    CHECK(memcmp(buf, "0123456789", 10) == 0);
    p_put_int(r, 0);
}

static void pwait_signal_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    int ep = (int)SYS(epoll_create1(0));
    SYS(add(ep, fd, EPOLLIN, TAG_SOCK));
    handle_usr1(0);
    sigset_t block, empty;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    sigemptyset(&empty);
    SYS(sigprocmask(SIG_BLOCK, &block, NULL));
    raise(SIGUSR1);
    struct epoll_event ev;
    double t0 = p_now_ms();
    int rc = epoll_pwait(ep, &ev, 1, 5000, &empty);
    int e = errno;
    if (rc != -1 || e != EINTR)
        FAILF("epoll_pwait with a pending unblocked signal: %d (errno %s) after %.0f ms, "
              "want EINTR", rc, p_errname(e), p_now_ms() - t0);
    CHECK_EQ(usr1, 1);
    /* the mask is back: SIGUSR1 blocked again, and stays pending when raised */
    sigset_t now;
    SYS(sigprocmask(SIG_BLOCK, NULL, &now));
    CHECK(sigismember(&now, SIGUSR1));
    raise(SIGUSR1);
    CHECK_EQ(epoll_pwait(ep, &ev, 1, 50, &block), 0); /* the mask keeps it blocked */
    CHECK_EQ(usr1, 1);
    /* a call that does not wait is not interrupted (poll's would be) */
    CHECK_EQ(epoll_pwait(ep, &ev, 1, 0, &empty), 0);
    CHECK_EQ(usr1, 1);
    sigset_t pending;
    SYS(sigpending(&pending));
    CHECK(sigismember(&pending, SIGUSR1));
    CHECK_ERR(epoll_pwait(ep, &ev, 1, 5000, &empty), EINTR);
    CHECK_EQ(usr1, 2);
    SYS(sigprocmask(SIG_UNBLOCK, &block, NULL));
    still_works(r, fd, ep);
    SYS(close(ep));
    SYS(close(fd));
}

/* A handler that runs while epoll_wait / epoll_pwait wait on a carried
 * socket and a pipe ends them with EINTR, SA_RESTART or not (the kernel
 * never restarts them). */
static void signal_wait_run(struct p_role *r, bool spin)
{
    if (spin) /* the wait mode that never sleeps: the signal meets a spinning wait */
        setenv("SOVIA_WAIT", "poll", 1);
    int fd = p_connect(r->port);
    int ep = (int)SYS(epoll_create1(0));
    SYS(add(ep, fd, EPOLLIN, TAG_SOCK));
    SYS(add(ep, r->from_peer, EPOLLIN, TAG_PIPE));
    CHECK_EQ(wait_tag(ep, 0, TAG_SOCK, NULL, false), 0);
    for (int i = 0; i < 4; i++) {
        bool pwait = i & 1;
        handle_usr1(i & 2 ? SA_RESTART : 0);
        usr1 = 0;
        struct kicker k;
        kick_me(&k, SIGUSR1, 100);
        struct epoll_event evs[4];
        double t0 = p_now_ms(), c0 = thread_cpu_ms();
        int rc = pwait ? epoll_pwait(ep, evs, 4, 10000, NULL) : epoll_wait(ep, evs, 4, 10000);
        int e = errno;
        double took = p_now_ms() - t0, cpu = thread_cpu_ms() - c0;
        kick_join(&k);
        if (rc != -1 || e != EINTR || usr1 != 1)
            FAILF("%s%s: a signal after 100 ms: %d (errno %s) after %.0f ms, handler ran %d "
                  "times; want EINTR, once", pwait ? "epoll_pwait" : "epoll_wait",
                  i & 2 ? " (SA_RESTART)" : "", rc, p_errname(e), took, (int)usr1);
        p_log("%s: EINTR after %.0f ms (%.0f ms of CPU)", pwait ? "epoll_pwait" : "epoll_wait",
              took, cpu);
    }
    still_works(r, fd, ep);
    SYS(close(ep));
    SYS(close(fd));
}

static void signal_wait_client(struct p_role *r)
{
    signal_wait_run(r, false);
}

static void signal_spin_client(struct p_role *r)
{
    signal_wait_run(r, true);
}

/* Many carried entries in one set, changed out of order: entries deleted
 * from the middle and the ends, modified (new tags), re-added, added twice,
 * each wait must report exactly the entries in the set with their latest
 * tags (the set finds an entry by its descriptor without a scan). */
#define MANY 24

static void many_server(struct p_role *r)
{
    int fd[MANY];
    for (int i = 0; i < MANY; i++)
        fd[i] = (int)SYS(accept(r->lfd, NULL, NULL));
    for (int i = 0; i < MANY; i++) /* every one readable at the client */
        p_write_all(fd[i], "x", 1);
    CHECK_EQ(p_get_int(r), 0);
    for (int i = 0; i < MANY; i++)
        SYS(close(fd[i]));
}

/* One level-triggered wait: the tags reported must be exactly want[] (0:
 * not in the set). */
static void many_check(int ep, const uint64_t *want, const char *when)
{
    struct epoll_event ev[2 * MANY];
    int n = (int)SYS(epoll_wait(ep, ev, 2 * MANY, 5000)), expect = 0;
    bool seen[MANY] = {false};
    for (int i = 0; i < MANY; i++)
        expect += want[i] != 0;
    for (int k = 0; k < n; k++) {
        int i = 0;
        while (i < MANY && (want[i] == 0 || want[i] != ev[k].data.u64))
            i++;
        if (i == MANY || seen[i] || ev[k].events != EPOLLIN)
            FAILF("%s: reported tag 0x%llx (events 0x%x): not in the set, stale or twice", when,
                  (unsigned long long)ev[k].data.u64, ev[k].events);
        seen[i] = true;
    }
    if (n != expect)
        FAILF("%s: %d events, want %d", when, n, expect);
}

static void many_client(struct p_role *r)
{
    int fd[MANY], ep = (int)SYS(epoll_create1(0));
    uint64_t want[MANY];
    for (int i = 0; i < MANY; i++) {
        fd[i] = p_connect(r->port);
        want[i] = 0x1000 + (uint64_t)i;
        SYS(add(ep, fd[i], EPOLLIN, want[i]));
    }
    for (int i = 0; i < MANY; i++) { /* each readable */
        struct pollfd pf = {.fd = fd[i], .events = POLLIN};
        CHECK_EQ(poll(&pf, 1, 10000), 1);
    }
    many_check(ep, want, "all added");
    const int gone[] = {0, MANY - 1, 7, 8, 15};
    for (unsigned k = 0; k < sizeof gone / sizeof *gone; k++) {
        SYS(epoll_ctl(ep, EPOLL_CTL_DEL, fd[gone[k]], NULL));
        CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_DEL, fd[gone[k]], NULL), ENOENT);
        CHECK_ERR(mod(ep, fd[gone[k]], EPOLLIN, 1), ENOENT);
        want[gone[k]] = 0;
    }
    for (int i = 1; i < MANY; i += 3)
        if (want[i]) {
            want[i] = 0x2000 + (uint64_t)i;
            SYS(mod(ep, fd[i], EPOLLIN, want[i]));
        }
    CHECK_ERR(add(ep, fd[MANY / 2], EPOLLIN, 9), EEXIST);
    many_check(ep, want, "after deletes and changes");
    SYS(add(ep, fd[8], EPOLLIN, want[8] = 0x3008));
    SYS(add(ep, fd[0], EPOLLIN, want[0] = 0x3000));
    SYS(mod(ep, fd[MANY - 2], EPOLLIN, want[MANY - 2] = 0x3000 + MANY - 2));
    many_check(ep, want, "after re-adding");
    SYS(close(fd[3])); /* a closed socket leaves the set */
    want[3] = 0;
    many_check(ep, want, "after a close");
    p_put_int(r, 0);
    SYS(close(ep));
    for (int i = 0; i < MANY; i++)
        if (i != 3)
            SYS(close(fd[i]));
}

int main(void)
{
    p_init("epoll");
    p_case("ctl_errors", quiet_server, ctl_client, P_CARRIED);
    p_case("ctl_not_an_epoll_fd", quiet_server, not_epoll_client, P_CARRIED);
    p_case("level_epoll_wait", feeder_server, level_wait, P_CARRIED);
    p_case("level_epoll_pwait", feeder_server, level_pwait, P_CARRIED);
    p_case("level_all_ready_in_one_wait", feeder_server, all_ready_client, P_CARRIED);
    p_case("level_one_event_turns", feeder_server, turns_client, P_CARRIED);
    p_case("added_while_waiting", feeder_server, added_client, P_CARRIED);
    p_case("joins_set_asleep_on_doorbells", two_server, joins_asleep_client, P_CARRIED);
    p_case("close_while_asleep", answer_server, close_asleep_client, P_CARRIED);
    p_case("edge", feeder_server, edge_client, P_CARRIED);
    p_case("rdhup", feeder_server, rdhup_client, P_CARRIED);
    p_case("oneshot", feeder_server, oneshot_client, P_CARRIED);
    p_expect_carried(MANY);
    p_case("many_entries_changed_out_of_order", many_server, many_client, P_CARRIED);
    p_case("pwait_pending_signal", feeder_server, pwait_signal_client, P_CARRIED);
    p_case("signal_during_wait", feeder_server, signal_wait_client, P_CARRIED);
    p_case("signal_during_spinning_wait", feeder_server, signal_spin_client, P_CARRIED);
    return p_done();
}
