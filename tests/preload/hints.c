/*
 * hints.c - epoll over many carried connections whose peer withholds or
 * floods the readiness hints (docs/ARCHITECTURE.md, "Readiness hints").
 *
 * The server holds NCONN connections (more than a set looked at whole) in
 * one epoll set, and answers a request on whichever is readable; the
 * client, made the hostile peer by SOVIA_VIPL_HINTS (read at its first
 * connection), sends ROUNDS requests, each on another connection, and
 * waits for every answer. Withheld ("off"): no hint ever comes, so the
 * server sees each request only through its periodic look at every entry:
 * without it, its epoll_wait would time out (the case fails). Flooded
 * ("all"): every completion sets every bit of the page, so each scan looks
 * at every connection, and epoll must still report the one readable
 * connection alone, the others idle. "on": the ordinary peer, the same
 * checks.
 */
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "pharness.h"

#define NCONN 100
#define ROUNDS 60
#define WAIT_MS 5000 /* per request: the backstop is 20 ms; a lost request waits it out */

static const char *mode;
static bool edge;

static void server(struct p_role *r)
{
    int fds[NCONN], ep = (int)SYS(epoll_create1(EPOLL_CLOEXEC));
    for (int i = 0; i < NCONN; i++) {
        fds[i] = (int)SYS(accept(r->lfd, NULL, NULL));
        struct epoll_event ev = {.events = EPOLLIN | (edge ? EPOLLET : 0u), .data.u32 = (uint32_t)i};
        SYS(epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev));
    }
    p_barrier(r);
    for (int round = 0; round < ROUNDS; round++) {
        struct epoll_event got[8];
        int n = (int)SYS(epoll_wait(ep, got, 8, WAIT_MS));
        if (n == 0)
            FAILF("round %d: no connection reported readable in %d ms", round, WAIT_MS);
        /* Exactly the connection the request came on: a hint for nothing
         * (flooded) must not make another look readable. */
        CHECK_EQ(n, 1);
        int want = (round * 37) % NCONN;
        CHECK_EQ(got[0].data.u32, want);
        CHECK(got[0].events & EPOLLIN);
        uint64_t v;
        p_read_all(fds[want], &v, sizeof v);
        CHECK_EQ(v, (uint64_t)round);
        v = ~v;
        p_write_all(fds[want], &v, sizeof v);
    }
    struct epoll_event got[8];
    CHECK_EQ(epoll_wait(ep, got, 8, 0), 0); /* nothing left over */
    p_barrier(r);
    for (int i = 0; i < NCONN; i++)
        SYS(close(fds[i]));
    SYS(close(ep));
}

static void client(struct p_role *r)
{
    setenv("SOVIA_VIPL_HINTS", mode, 1);
    int fds[NCONN];
    for (int i = 0; i < NCONN; i++) {
        fds[i] = p_connect(r->port);
        if (i % 32 == 31) /* the listener's backlog */
            usleep(1000);
    }
    p_barrier(r);
    for (int round = 0; round < ROUNDS; round++) {
        int fd = fds[(round * 37) % NCONN];
        uint64_t v = (uint64_t)round;
        p_write_all(fd, &v, sizeof v);
        p_read_all(fd, &v, sizeof v);
        CHECK_EQ(v, ~(uint64_t)round);
    }
    p_barrier(r);
    for (int i = 0; i < NCONN; i++)
        SYS(close(fds[i]));
}

static void run(const char *name, const char *m, bool et)
{
    if (!p_selected(name))
        return;
    mode = m;
    edge = et;
    p_expect_carried(NCONN);
    p_case(name, server, client, P_CARRIED);
}

int main(void)
{
    setenv("SOVIA_PAIR_TIMEOUT_MS", "30000", 0); /* as preload/many: no fallback when slow */
    p_init("hints");
    run("on", "on", false);
    run("withheld", "off", false);
    run("withheld_edge", "off", true);
    run("flooded", "all", false);
    run("flooded_edge", "all", true);
    return p_done();
}
