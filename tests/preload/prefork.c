/*
 * prefork: accept() in a process other than the one that called listen()
 * (docs/TRANSPARENT.md, "Transparent mode", step 6). The client queues its
 * VI with the listening process's shadow listener, which cannot pair a
 * connection another process accepted: the accepting process claims it,
 * and the listening process redirects the client there (REDIRECT). Before
 * the claim every such connection waited out the client's pairing timeout
 * (1 s), then fell back to TCP; before the redirect it fell back at once.
 * Cases:
 *  - workers_accept: the listening process forks two workers that accept
 *    (a prefork server) and never accepts itself; every connection is
 *    carried, redirected;
 *  - workers_late_accept: the client writes before the worker accepts:
 *    the bytes it holds move to the redirected connection;
 *  - worker_gave_up: the client is stopped while it is redirected, so the
 *    worker's accept() gives up on it (kernel TCP); resumed, the client is
 *    refused at the worker's ticket address and falls back at once (it
 *    waited out its 1 s pairing timeout there). On a crowded host the
 *    worker waits longer than the stop (up to the pairing timeout) and
 *    pairs the resumed client instead: either way the echo comes;
 *  - workers_plain_client: a client without sovia (nothing queued, nothing
 *    to redirect): kernel TCP, as fast;
 *  - daemon_takes_over: the listening process forks and exits, the child
 *    serves (a daemon that listens before it detaches). The child used to
 *    keep the parent's shadow listener bound with nobody serving it: each
 *    client waited 1 s, and a client's close() never reached the server
 *    (its socket stayed in flight in that listener's backlog). Now the
 *    child's first accept() starts its own shadow listener, and the
 *    connections after it are carried;
 *  - exec_inherits_listener: a child execs a program that accepts on the
 *    inherited listening socket while the listening process lives on
 *    (inetd's "wait" services): redirected;
 *  - reuseport: a second process listens on the same port (SO_REUSEPORT)
 *    and accepts some of the connections.
 * Every connection is an exchange the client ends with close() alone (no
 * shutdown): byte-exact, within CONN_BOUND_MS (a behaviour bound, against
 * the 1 s pairing timeout: below it, with room for a crowded host, where a
 * worker's accept() may wait for a slow redirected client and 600 ms was
 * seen at load 25), and the server sees the end of stream within
 * EOF_BOUND_MS.
 */
#include "pharness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

P_THREADED_FORK_CHILDREN /* workers, the daemon: their accept() claims or listens (threads) */

#define CONNS 6
#define BYTES (32u << 10)
#define CONN_BOUND_MS 900
#define EARLY_BYTES 1000
#define EOF_BOUND_MS 2000

/* Echoes one connection until the client's end of stream, which must come
 * within EOF_BOUND_MS of the last byte. */
static void serve_one(int fd)
{
    static char buf[65536];
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (SYS(poll(&p, 1, EOF_BOUND_MS)) == 0)
            FAILF("no end of stream %d ms after the client's last byte", EOF_BOUND_MS);
        ssize_t n = SYS(read(fd, buf, sizeof buf));
        if (n == 0)
            break;
        p_write_all(fd, buf, (size_t)n);
    }
    SYS(close(fd));
}

static void serve(int lfd, int conns)
{
    for (int i = 0; i < conns; i++)
        serve_one((int)SYS(accept(lfd, NULL, NULL)));
}

/* A connection over its bound. Under ThreadSanitizer only logged: there a
 * crowded host stretches the first connection to a fresh worker or image
 * (its first claim, ticket listener and pairing) to 0.93-5.3 s, every one
 * redirected all the same where the records were read (see main). Plain
 * and ASan builds hold the bound. */
static void over_bound(const char *what, double ms, int bound)
{
    if (p_tsan()) {
        p_log("%s took %.0f ms (bound %d, not held under ThreadSanitizer)", what, ms, bound);
        return;
    }
    FAILF("%s took %.0f ms (bound %d)", what, ms, bound);
}

/* CONNS exchanges; each ends with close() alone. */
static void exchanges(int port, int conns)
{
    static char out[BYTES], in[BYTES];
    for (int i = 0; i < conns; i++) {
        double t0 = p_now_ms();
        int fd = p_connect(port);
        p_fill(out, sizeof out, 0x9e3779b9u + (uint64_t)i);
        p_write_all(fd, out, sizeof out);
        p_read_all(fd, in, sizeof in);
        if (memcmp(in, out, sizeof in) != 0)
            FAILF("connection %d: echo differs", i);
        SYS(close(fd));
        double ms = p_now_ms() - t0;
        if (ms > CONN_BOUND_MS) {
            char what[32];
            snprintf(what, sizeof what, "connection %d", i);
            over_bound(what, ms, CONN_BOUND_MS);
        }
    }
}

static void reap_ok(pid_t pid, const char *what)
{
    if (!p_reap(pid, what))
        FAILF("%s failed", what);
}

/* ---- workers accept, the listening process does not -------------------- */

static void workers_server(struct p_role *r)
{
    pid_t w[2];
    for (int k = 0; k < 2; k++) {
        if ((w[k] = SYS(fork())) == 0) {
            p_child_safety();
            for (;;)
                serve(r->lfd, 1);
        }
    }
    CHECK_EQ(p_get_int(r), CONNS); /* the client is done */
    for (int k = 0; k < 2; k++) {
        int st;
        SYS(kill(w[k], SIGTERM));
        SYS(waitpid(w[k], &st, 0));
        if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGTERM)
            FAILF("worker %d ended with status %#x", k, st);
    }
}

static void workers_client(struct p_role *r)
{
    exchanges(r->port, CONNS);
    p_put_int(r, CONNS);
}

static void plain_workers_client(struct p_role *r)
{
    p_exec_plain(r, "workers-client"); /* this program again, without sovia */
}

/* A worker that accepts and serves one connection once a byte comes on
 * *go; its pid. */
static pid_t held_worker(struct p_role *r, int *go)
{
    int p[2];
    SYS(pipe(p));
    pid_t w = SYS(fork());
    if (w == 0) {
        p_child_safety();
        char x;
        CHECK_EQ(read(p[0], &x, 1), 1);
        serve(r->lfd, 1);
        exit(0);
    }
    *go = p[1];
    return w;
}

/* ---- the client is stopped while it is redirected ----------------------- */

#define STOP_MS 150

/* The listening process stops the client after its connect, lets the
 * worker accept (the worker waits 50 ms for the redirected client, then
 * serves the kernel connection; crowded, see worker_gave_up above) and
 * resumes the client STOP_MS later. */
static void stopped_server(struct p_role *r)
{
    int go;
    pid_t w = held_worker(r, &go);
    pid_t client = (pid_t)p_get_int(r); /* it has connected and written */
    SYS(kill(client, SIGSTOP));
    SYS(write(go, "x", 1));
    struct timespec pause = {0, STOP_MS * 1000000L};
    nanosleep(&pause, NULL);
    SYS(kill(client, SIGCONT));
    reap_ok(w, "worker");
}

/* Resumed, the client follows the REDIRECT to a worker that gave up on
 * it: refused there, it falls back at once (it waited out its pairing
 * timeout, 1 s). */
static void stopped_client(struct p_role *r)
{
    char out[EARLY_BYTES], in[EARLY_BYTES];
    double t0 = p_now_ms();
    int fd = p_connect(r->port);
    p_fill(out, sizeof out, 78);
    p_write_all(fd, out, sizeof out); /* held: nobody accepted yet */
    p_put_int(r, getpid());
    p_read_all(fd, in, sizeof in);
    CHECK(memcmp(in, out, sizeof in) == 0);
    SYS(close(fd));
    double ms = p_now_ms() - t0;
    p_log("stopped %d ms while redirected: echo after %.0f ms", STOP_MS, ms);
    if (ms > STOP_MS + CONN_BOUND_MS)
        over_bound("the echo after the connect", ms, STOP_MS + CONN_BOUND_MS);
}

/* ---- the client writes before the worker accepts ------------------------ */

static void late_server(struct p_role *r)
{
    int go;
    pid_t w = held_worker(r, &go);
    CHECK_EQ(p_get_int(r), EARLY_BYTES);
    SYS(write(go, "x", 1));
    reap_ok(w, "worker");
}

static void late_client(struct p_role *r)
{
    char out[EARLY_BYTES], in[EARLY_BYTES];
    int fd = p_connect(r->port);
    p_fill(out, sizeof out, 77);
    p_write_all(fd, out, sizeof out); /* held: nobody accepted yet */
    p_put_int(r, EARLY_BYTES);
    p_read_all(fd, in, sizeof in);
    if (memcmp(in, out, sizeof in) != 0)
        FAILF("echo differs");
    SYS(close(fd));
}

/* ---- a daemon that listened before it detached -------------------------- */

static void daemon_server(struct p_role *r)
{
    pid_t parent = getpid();
    if (SYS(fork()) != 0)
        return; /* the listening process exits: its shadow listener goes */
    p_child_safety();
    prctl(PR_SET_PDEATHSIG, 0); /* outlives its parent: the watchdog stays */
    double t0 = p_now_ms();
    while (getppid() == parent) {
        if (p_now_ms() - t0 > 5000)
            FAILF("the listening process did not exit");
        p_sleep_ms(1);
    }
    p_put_int(r, getpid());
    serve(r->lfd, CONNS);
    exit(0); /* writes this process's stat record */
}

static void daemon_client(struct p_role *r)
{
    pid_t daemon = (pid_t)p_get_int(r);
    exchanges(r->port, CONNS);
    if (p_kernel_mode())
        return;
    /* The first connection came while nobody shadowed the port; the
     * daemon's first accept() started its shadow listener. */
    struct p_stat st;
    double t0 = p_now_ms();
    while (!p_stat_of(daemon, &st)) {
        if (p_now_ms() - t0 > 5000)
            FAILF("the daemon (pid %d) wrote no stat record", (int)daemon);
        p_sleep_ms(5);
    }
    p_log("daemon record: carried %u fell_back %u kernel %u", st.carried, st.fell_back,
          st.kernel);
    CHECK_EQ(st.carried, CONNS - 1);
}

/* ---- a program exec'd with the listening socket ------------------------ */

static void exec_server(struct p_role *r)
{
    pid_t c = SYS(fork());
    if (c == 0) {
        p_child_safety();
        SYS(fcntl(r->lfd, F_SETFD, 0));
        char arg[16];
        snprintf(arg, sizeof arg, "%d", r->lfd);
        p_exec_again(r, "accept-loop", arg);
    }
    reap_ok(c, "exec'd server");
}

static void exec_client(struct p_role *r)
{
    exchanges(r->port, CONNS);
}

static int accept_loop(const char *lfd)
{
    serve(atoi(lfd), CONNS);
    return 0;
}

/* ---- a second listener on the port (SO_REUSEPORT) ------------------------ */

static int reuseport_listener(int port)
{
    int fd = (int)SYS(socket(AF_INET, SOCK_STREAM, 0));
    int on = 1;
    SYS(setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on));
    struct sockaddr_in a = p_loopback(port);
    SYS(bind(fd, (struct sockaddr *)&a, sizeof a));
    SYS(listen(fd, 64));
    return fd;
}

static void reuseport_server(struct p_role *r)
{
    SYS(close(r->lfd));
    int port = p_free_port();
    int first = reuseport_listener(port);
    int ready[2];
    SYS(pipe(ready));
    pid_t w = SYS(fork());
    if (w == 0) {
        p_child_safety();
        SYS(close(first));
        int second = reuseport_listener(port);
        SYS(write(ready[1], "x", 1));
        for (;;)
            serve(second, 1);
    }
    char x;
    CHECK_EQ(read(ready[0], &x, 1), 1);
    p_put_int(r, port);
    /* Both processes accept until the client is done. */
    for (;;) {
        struct pollfd p[2] = {{.fd = first, .events = POLLIN}, {.fd = r->from_peer, .events = POLLIN}};
        SYS(poll(p, 2, -1));
        if (p[1].revents)
            break;
        serve(first, 1);
    }
    CHECK_EQ(p_get_int(r), 2 * CONNS);
    int st;
    SYS(kill(w, SIGTERM));
    SYS(waitpid(w, &st, 0));
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGTERM)
        FAILF("second listener ended with status %#x", st);
}

static void reuseport_client(struct p_role *r)
{
    exchanges((int)p_get_int(r), 2 * CONNS);
    p_put_int(r, 2 * CONNS);
}

int main(int argc, char **argv)
{
    struct p_role again;
    const char *extra = NULL;
    const char *what = p_exec_role(argc, argv, &again, &extra);
    if (what && strcmp(what, "accept-loop") == 0)
        return accept_loop(extra);
    if (what && strcmp(what, "workers-client") == 0) {
        workers_client(&again);
        return 0;
    }
    if (what)
        FAILF("unknown re-executed role %s", what);

    /* Under ThreadSanitizer on a crowded host (2 busy loops and other
     * tests, load 14-23 on 2 cores) the first connection to a fresh
     * worker or image took 0.93-5.3 s against CONN_BOUND_MS (over_bound),
     * and exec_inherits_listener's client fell back once its 1 s pairing
     * timeout ran out (fell_back 1, 2 of 9 runs): slowness, by design on
     * kernel TCP then (preload/fallback), not what these cases check. So
     * the timeout is longer there, as preload/many's; no case waits for
     * it (the plain run takes 0.3 s with 10 s as with 1 s). Read at the
     * first connection, in every role. */
    if (p_tsan())
        setenv("SOVIA_PAIR_TIMEOUT_MS", "10000", 0);
    p_init("prefork");
    /* The listening process's record has nothing; the client's says why. */
    /* Forked children that start threads (the claim's, a new shadow
     * listener's): see tests/sovia/fork.c on AddressSanitizer's allocator
     * and fork (seen here: daemon_takes_over hung 1 run in 3, the child's
     * new threads blocked on an allocator lock). The plain build runs them. */
    if (p_asan()) {
        p_log("SKIP workers_accept, daemon_takes_over, reuseport: AddressSanitizer's allocator "
              "is not fork-safe with threads");
    } else {
        p_expect_carried(CONNS);
        p_case("workers_accept", workers_server, workers_client, P_CLIENT_REDIRECTED);
        p_case("workers_late_accept", late_server, late_client, P_CLIENT_REDIRECTED);
        p_case("worker_gave_up", stopped_server, stopped_client, P_NO_STATS);
        p_case("workers_plain_client", workers_server, plain_workers_client, P_CLIENT_PLAIN);
        p_case("daemon_takes_over", daemon_server, daemon_client, P_NO_STATS);
        p_case("reuseport", reuseport_server, reuseport_client, P_NO_STATS);
    }
    p_expect_carried(CONNS);
    p_case("exec_inherits_listener", exec_server, exec_client, P_CLIENT_REDIRECTED);
    return p_done();
}
