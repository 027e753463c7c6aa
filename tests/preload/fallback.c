/*
 * fallback.c - connections that sovia must leave on kernel TCP: a plain
 * server (no preload) with a preloaded client and the reverse, both moving
 * byte-exact data and recording carried == 0 on the preloaded side; the
 * added cost of connect() to a plain server (printed, not asserted); and
 * the tentative client falling back when the server accepts too late. A
 * server that accepts in a forked child (speaking first, or the client
 * speaking first) used to be the other fallback case: its client is now
 * redirected to the child and carried (prefork.c has the rest).
 *
 * A role "without the preload" re-executes this test with LD_PRELOAD
 * removed (p_exec_plain), and main() dispatches it by its argv.
 */
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pharness.h"

P_THREADED_FORK_CHILDREN /* child_accepts_*: the child's accept() claims the client's VI (threads) */

#define ECHO_BYTES (1u << 20)
#define NCONNECT 50

/* ---- what the plain (no preload) image runs -------------------------------- */

static long long connect_ns(int port)
{
    struct timespec a, b;
    int fd = (int)SYS(socket(AF_INET, SOCK_STREAM, 0));
    struct sockaddr_in to = p_loopback(port);
    clock_gettime(CLOCK_MONOTONIC, &a);
    SYS(connect(fd, (struct sockaddr *)&to, sizeof to));
    clock_gettime(CLOCK_MONOTONIC, &b);
    SYS(close(fd));
    return (b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
}

static long long median_connect_ns(int port)
{
    long long t[NCONNECT];
    for (int i = 0; i < NCONNECT; i++)
        t[i] = connect_ns(port);
    for (int i = 1; i < NCONNECT; i++) /* insertion sort */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            long long x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    return t[NCONNECT / 2];
}

static int run_plain(const char *what, struct p_role *r)
{
    if (strcmp(what, "echo-server") == 0) {
        int lfd = p_listener(&r->port);
        p_put_int(r, r->port);
        p_echo_serve((int)SYS(accept(lfd, NULL, NULL)));
        SYS(close(lfd));
    } else if (strcmp(what, "echo-client") == 0) {
        p_echo_check(p_connect(r->port), ECHO_BYTES, 4242);
    } else if (strcmp(what, "accept-n") == 0) {
        int lfd = p_listener(&r->port);
        p_put_int(r, r->port);
        for (int i = 0; i < 2 * NCONNECT; i++)
            SYS(close((int)SYS(accept(lfd, NULL, NULL))));
        SYS(close(lfd));
    } else if (strcmp(what, "time-connects") == 0) {
        p_put_int(r, median_connect_ns(r->port));
    } else {
        FAILF("unknown plain role %s", what);
    }
    return 0;
}

/* ---- plain server, preloaded client ------------------------------------------- */

static void plain_echo_server(struct p_role *r)
{
    p_exec_plain(r, "echo-server");
}

static void preloaded_echo_client(struct p_role *r)
{
    p_echo_check(p_connect(r->port), ECHO_BYTES, 4242);
}

/* ---- preloaded server, plain client ----------------------------------------------- */

static void preloaded_echo_server(struct p_role *r)
{
    p_echo_serve((int)SYS(accept(r->lfd, NULL, NULL)));
}

static void plain_echo_client(struct p_role *r)
{
    p_exec_plain(r, "echo-client");
}

/* ---- what connect() to a plain server costs under the preload ---------------- */

static void plain_accept_server(struct p_role *r)
{
    p_exec_plain(r, "accept-n");
}

static void timing_client(struct p_role *r)
{
    long long with = median_connect_ns(r->port);
    int pp[2];
    SYS(pipe(pp));
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        p_child_safety();
        struct p_role t = {.role = "timer", .to_peer = pp[1], .from_peer = pp[0], .port = r->port};
        p_exec_plain(&t, "time-connects");
    }
    SYS(close(pp[1]));
    long long without;
    char *p = (char *)&without;
    size_t got = 0;
    while (got < sizeof without) {
        ssize_t n = read(pp[0], p + got, sizeof without - got);
        if (n <= 0)
            FAILF("the plain timer gave no result");
        got += (size_t)n;
    }
    CHECK(p_reap(pid, "timer"));
    SYS(close(pp[0]));
    p_log("connect() to a plain server, median of %d: %.1f us with the preload, %.1f us "
          "without, %+.1f us added (printed only; the goal is < 1000 us)",
          NCONNECT, with / 1e3, without / 1e3, (with - without) / 1e3);
}

/* ---- the server accepts after the pairing timeout --------------------------------- */

static void late_accept_server(struct p_role *r)
{
    CHECK_EQ(p_get_int(r), 1); /* the client connected */
    p_sleep_ms(1500);          /* > SOVIA_PAIR_TIMEOUT_MS (1000) */
    p_echo_serve((int)SYS(accept(r->lfd, NULL, NULL)));
}

static void late_accept_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    p_put_int(r, 1);
    p_echo_check(fd, ECHO_BYTES, 4242); /* the first write waits for pairing, then takes the kernel */
}

/* ---- a forked child accepts on the inherited listener ------------------------ */

static bool child_speaks_first;

static void forked_accept_server(struct p_role *r)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        p_child_safety();
        int fd = (int)SYS(accept(r->lfd, NULL, NULL));
        if (child_speaks_first)
            p_write_all(fd, "hello from the child", 20);
        p_echo_serve(fd);
        exit(0);
    }
    CHECK(p_reap(pid, "server's child"));
}

static void forked_accept_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    if (child_speaks_first) {
        char buf[20];
        p_read_all(fd, buf, 20);
        CHECK(memcmp(buf, "hello from the child", 20) == 0);
    }
    p_echo_check(fd, ECHO_BYTES, 4242);
}

static void child_first_server(struct p_role *r)
{
    child_speaks_first = true;
    forked_accept_server(r);
}

static void child_first_client(struct p_role *r)
{
    child_speaks_first = true;
    forked_accept_client(r);
}

int main(int argc, char **argv)
{
    struct p_role plain;
    const char *what = p_plain_role(argc, argv, &plain);
    if (what)
        return run_plain(what, &plain);

    p_init("fallback");
    p_case("plain_server_preloaded_client", plain_echo_server, preloaded_echo_client,
           P_SERVER_PLAIN | P_CLIENT_KERNEL);
    p_case("preloaded_server_plain_client", preloaded_echo_server, plain_echo_client,
           P_CLIENT_PLAIN | P_SERVER_KERNEL);
    p_case("connect_time_to_plain_server", plain_accept_server, timing_client,
           P_SERVER_PLAIN | P_CLIENT_KERNEL);
    p_case("accept_after_pair_timeout", late_accept_server, late_accept_client,
           P_CLIENT_FELLBACK | P_SERVER_KERNEL);
    /* A child forked by a threaded parent: see tests/sovia/fork.c on
     * AddressSanitizer's allocator and fork (the plain build runs these). */
    if (p_asan()) {
        p_log("SKIP child_accepts_*: AddressSanitizer's allocator is not fork-safe with threads");
    } else {
        p_case("child_accepts_and_speaks_first", child_first_server, child_first_client,
               P_CLIENT_REDIRECTED);
        p_case("child_accepts_client_speaks_first", forked_accept_server, forked_accept_client,
               P_CLIENT_REDIRECTED);
    }
    return p_done();
}
