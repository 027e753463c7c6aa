/*
 * epoll_nested.c - epoll sets inside other epoll sets over a carried socket
 * (readiness through the nesting, no spurious wake-up, a socket added late,
 * kernel and carried parts, stale cycles with one and two waiters), and
 * poll/select on an epoll set.
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "epharness.h"
#include "pkick.h"

static bool check_quiet_outer;

/* ---- an epoll set inside another ------------------------------------------------- */

static void nested_run(struct p_role *r, bool inner_first)
{
    int fd = p_connect(r->port);
    int inner = (int)SYS(epoll_create1(0));
    int outer = (int)SYS(epoll_create1(0));
    if (inner_first) { /* the socket joins the inner set before it is nested */
        SYS(add(inner, fd, EPOLLIN, TAG_SOCK));
        SYS(add(outer, inner, EPOLLIN, TAG_INNER));
    } else {
        SYS(add(outer, inner, EPOLLIN, TAG_INNER));
        SYS(add(inner, fd, EPOLLIN, TAG_SOCK));
    }
    SYS(add(outer, r->from_peer, EPOLLIN, TAG_PIPE));
    int n;
    CHECK_EQ(wait_tag(inner, 0, TAG_SOCK, &n, false), 0);
    CHECK_EQ(n, 0);
    if (check_quiet_outer) /* nothing there yet: the outer set is quiet */
        for (int i = 0; i < 10; i++) {
            CHECK_EQ(wait_tag(outer, i ? 20 : 0, TAG_INNER, &n, false), 0);
            CHECK_EQ(n, 0);
        }
    p_put_int(r, 1);
    /* the outer set reports the inner one (spurious reports aside, see
     * nested_no_spurious_wakeup) once the socket has data */
    for (int i = 0; i < 10000; i++) {
        CHECK_EQ(wait_tag(outer, 10000, TAG_INNER, &n, false), EPOLLIN);
        CHECK_EQ(n, 1);
        if (wait_tag(inner, 0, TAG_SOCK, &n, false) == EPOLLIN)
            break;
        p_sleep_ms(1);
    }
    CHECK_EQ(wait_tag(inner, 0, TAG_SOCK, &n, false), EPOLLIN);
    CHECK_EQ(n, 1);
    CHECK_EQ(wait_tag(outer, 0, TAG_INNER, &n, false), EPOLLIN); /* level: still */
    char buf[10];
    p_read_all(fd, buf, 10);
    CHECK_EQ(wait_tag(inner, 0, TAG_SOCK, &n, false), 0);
    CHECK_EQ(n, 0);
    if (check_quiet_outer) /* drained: the outer set stays quiet */
        for (int i = 0; i < 20; i++) {
            CHECK_EQ(wait_tag(outer, 20, TAG_INNER, &n, false), 0);
            CHECK_EQ(n, 0);
        }
    /* the pipe beside it */
    p_put_int(r, 2);
    CHECK_EQ(wait_tag(outer, 10000, TAG_PIPE, &n, false), EPOLLIN);
    CHECK_EQ(n, 1);
    CHECK_EQ(p_get_int(r), 77);
    p_put_int(r, 0);
    SYS(close(outer));
    SYS(close(inner));
    SYS(close(fd));
}

static void nested_client(struct p_role *r)
{
    nested_run(r, true);
}

static void nested_quiet_client(struct p_role *r)
{
    check_quiet_outer = true;
    nested_run(r, true);
}

static void nested_late_client(struct p_role *r)
{
    check_quiet_outer = true;
    nested_run(r, false);
}

/* An inner set with a carried socket and a pipe of its own: the outer set
 * reports it once per call, whichever part is ready, and not otherwise. */
static void nested_parts_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    int pp[2];
    SYS(pipe(pp));
    int inner = (int)SYS(epoll_create1(0));
    int outer = (int)SYS(epoll_create1(0));
    SYS(add(outer, inner, EPOLLIN, TAG_INNER));
    SYS(add(inner, fd, EPOLLIN, TAG_SOCK));
    SYS(add(inner, pp[0], EPOLLIN, TAG_PIPE));
    int n;
    CHECK_EQ(wait_tag(outer, 50, TAG_INNER, &n, false), 0);
    CHECK_EQ(n, 0);
    /* the pipe only (the kernel's part) */
    SYS(write(pp[1], "p", 1));
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(wait_tag(outer, 10000, TAG_INNER, &n, false), EPOLLIN);
        CHECK_EQ(n, 1);
    }
    /* both */
    p_put_int(r, 1);
    for (int i = 0; i < 10000 && wait_tag(inner, 0, TAG_SOCK, NULL, false) != EPOLLIN; i++)
        p_sleep_ms(1);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(wait_tag(outer, 10000, TAG_INNER, &n, false), EPOLLIN);
        CHECK_EQ(n, 1);
    }
    /* the socket only (ours) */
    char c;
    CHECK_EQ(read(pp[0], &c, 1), 1);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(wait_tag(outer, 10000, TAG_INNER, &n, false), EPOLLIN);
        CHECK_EQ(n, 1);
    }
    char buf[10];
    p_read_all(fd, buf, 10);
    CHECK_EQ(wait_tag(outer, 50, TAG_INNER, &n, false), 0);
    CHECK_EQ(n, 0);
    p_put_int(r, 0);
    SYS(close(outer));
    SYS(close(inner));
    SYS(close(pp[0]));
    SYS(close(pp[1]));
    SYS(close(fd));
}

/* A nested set closed behind the library's back (the raw system call) and
 * its number reused by a new set that nests the old outer one: what the
 * library remembers now forms a cycle; waits must neither hang nor fail. */
/* `outer` holds an epoll set and the pipe; that set is closed behind the
 * preload's back and its number reused by `again`, which holds the socket
 * and `outer`: a cycle for the preload's books, none for the kernel. */
static void make_stale_cycle(struct p_role *r, int fd, int *outer, int *again)
{
    for (int tries = 0;; tries++) {
        *outer = (int)SYS(epoll_create1(0));
        int inner = (int)SYS(epoll_create1(0));
        SYS(add(*outer, inner, EPOLLIN, TAG_INNER));
        SYS(add(*outer, r->from_peer, EPOLLIN, TAG_PIPE));
        SYS(syscall(SYS_close, inner));
        *again = (int)SYS(epoll_create1(0));
        /* Another thread (sovia's own, a sanitizer's) may have opened a
         * descriptor meanwhile and taken inner's number for good (seen
         * under TSan: 8 != 9): build it all again. */
        if (*again != inner && tries < 5) {
            SYS(close(*again));
            SYS(close(*outer));
            continue;
        }
        CHECK_EQ(*again, inner);
        break;
    }
    SYS(add(*again, fd, EPOLLIN, TAG_SOCK));
    SYS(add(*again, *outer, EPOLLIN, TAG_INNER));
}

static void stale_cycle_client(struct p_role *r)
{
    int fd = p_connect(r->port), outer, again;
    make_stale_cycle(r, fd, &outer, &again);
    int n;
    CHECK_EQ(wait_tag(again, 0, TAG_SOCK, &n, false), 0);
    CHECK(wait_all(outer, 20, false).pipe == 0);
    p_put_int(r, 1);
    CHECK_EQ(wait_tag(again, 10000, TAG_SOCK, NULL, false), EPOLLIN);
    CHECK(wait_all(outer, 20, false).pipe == 0); /* (the stale entry may say TAG_INNER) */
    struct pollfd p = {.fd = outer, .events = POLLIN};
    CHECK(poll(&p, 1, 0) >= 0);
    char buf[10];
    p_read_all(fd, buf, 10);
    p_put_int(r, 2);
    CHECK_EQ(wait_tag(outer, 10000, TAG_PIPE, NULL, false), EPOLLIN);
    CHECK_EQ(p_get_int(r), 77);
    p_put_int(r, 0);
    SYS(close(again));
    SYS(close(outer));
    SYS(close(fd));
}

/* The stale cycle again, with a thread waiting on each of its two sets: a
 * wait takes its own set's lock and then looks into the other, so the two
 * waits lock the sets in opposite orders. Both must come back (each call
 * has a zero timeout; a deadlock would hold them for ever). */
struct cycle_waiter {
    int ep;
    double until_ms;
    long calls;
    pthread_t t;
};

static void *cycle_wait_run(void *arg)
{
    struct cycle_waiter *w = arg;
    struct epoll_event evs[4];
    while (p_now_ms() < w->until_ms) {
        if (epoll_wait(w->ep, evs, 4, 0) < 0)
            FAILF("epoll_wait on a set of the cycle: %s", p_errname(errno));
        w->calls++;
    }
    return NULL;
}

static void stale_cycle_threads_client(struct p_role *r)
{
    int fd = p_connect(r->port), outer, again;
    make_stale_cycle(r, fd, &outer, &again);
    double until = p_now_ms() + 300;
    struct cycle_waiter w[2] = {{.ep = again, .until_ms = until}, {.ep = outer, .until_ms = until}};
    for (int i = 0; i < 2; i++)
        CHECK_EQ(pthread_create(&w[i].t, NULL, cycle_wait_run, &w[i]), 0);
    for (int i = 0; i < 2; i++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 10;
        int rc = pthread_timedjoin_np(w[i].t, NULL, &ts);
        if (rc != 0) { /* its locks are held for ever: exit() could hang on them */
            p_log("FAIL epoll.c:%d: the wait on %s still blocked 10 s after its last call "
                  "(pthread_timedjoin_np: %s): deadlocked", __LINE__,
                  i ? "the outer set" : "the reused set", p_errname(rc));
            _exit(1);
        }
    }
    CHECK(w[0].calls > 0 && w[1].calls > 0);
    p_log("%ld and %ld zero-timeout waits", w[0].calls, w[1].calls);
    p_put_int(r, 1); /* the set with the socket still works */
    CHECK_EQ(wait_tag(again, 10000, TAG_SOCK, NULL, false), EPOLLIN);
    char buf[10];
    p_read_all(fd, buf, 10);
    CHECK(memcmp(buf, "0123456789", 10) == 0);
    p_put_int(r, 0);
    SYS(close(again));
    SYS(close(outer));
    SYS(close(fd));
}

/* poll() on an epoll set holding a carried socket with data: POLLIN. */
static void poll_epfd_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    int ep = (int)SYS(epoll_create1(0));
    SYS(add(ep, fd, EPOLLIN, TAG_SOCK));
    struct pollfd p = {.fd = ep, .events = POLLIN};
    CHECK_EQ(poll(&p, 1, 0), 0);
    p_put_int(r, 1);
    CHECK_EQ(wait_tag(ep, 10000, TAG_SOCK, NULL, false), EPOLLIN); /* the data is there */
    int n = poll(&p, 1, 5000);
    if (n != 1 || p.revents != POLLIN)
        FAILF("poll on an epoll set with a ready carried socket: %d, revents 0x%x; want 1, POLLIN",
              n, p.revents);
    fd_set rs;
    FD_ZERO(&rs);
    FD_SET(ep, &rs);
    struct timeval tv = {5, 0};
    CHECK_EQ(select(ep + 1, &rs, NULL, NULL, &tv), 1);
    CHECK(FD_ISSET(ep, &rs));
    /* a set nesting it too */
    int outer = (int)SYS(epoll_create1(0));
    SYS(add(outer, ep, EPOLLIN, TAG_INNER));
    struct pollfd po = {.fd = outer, .events = POLLIN};
    CHECK_EQ(poll(&po, 1, 5000), 1);
    CHECK_EQ(po.revents, POLLIN);
    /* drained: quiet again */
    char buf[10];
    p_read_all(fd, buf, 10);
    CHECK_EQ(poll(&p, 1, 50), 0);
    CHECK_EQ(poll(&po, 1, 0), 0);
    FD_ZERO(&rs);
    FD_SET(ep, &rs);
    tv = (struct timeval){0, 0};
    CHECK_EQ(select(ep + 1, &rs, NULL, NULL, &tv), 0);
    p_put_int(r, 0);
    SYS(close(outer));
    SYS(close(ep));
    SYS(close(fd));
}

int main(void)
{
    p_init("epoll_nested");
    p_case("nested", feeder_server, nested_client, P_CARRIED);
    p_case("nested_no_spurious_wakeup", feeder_server, nested_quiet_client, P_CARRIED);
    p_case("nested_socket_added_late", feeder_server, nested_late_client, P_CARRIED);
    p_case("nested_kernel_and_carried_parts", feeder_server, nested_parts_client, P_CARRIED);
    p_case("nested_stale_cycle", feeder_server, stale_cycle_client, P_CARRIED);
    p_case("nested_stale_cycle_two_waiters", feeder_server, stale_cycle_threads_client,
           P_CARRIED);
    p_case("poll_on_epoll_fd", feeder_server, poll_epfd_client, P_CARRIED);
    return p_done();
}
