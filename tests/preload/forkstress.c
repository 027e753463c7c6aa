/*
 * forkstress: fork while sovia's own threads are busy. Programs under
 * `sovia run` fork all the time (prefork servers, shells), while the
 * library's threads (connection threads, the shm agent, the watcher, the
 * close and service threads) run on in the parent: a lock one of them held
 * at the fork stays held in the child, and the child's first use of it
 * hangs (commit 402fa1e: fdguard's chunk_lock, a child's connection thread
 * stuck at its first descriptor above 4095, its client fell back after 1 s).
 *
 * Each round a fresh process (fresh: its fdguard tables grow while it forks)
 * starts a listener with an echo thread per connection, two threads that
 * connect, exchange and close again and again (to this process and to the
 * server role, another process), and forks CHILDREN children back to back,
 * INFLIGHT at a time, with its descriptors above 4096 (RLIMIT_NOFILE
 * raised) so that fdguard's chunk tables are grown while it forks. Each
 * child does one piece of sovia work, by kind:
 *  - connect_server: connects to the server role and exchanges bytes;
 *  - connect_parent: connects to its parent's listener (served by the
 *    parent's threads) and exchanges bytes;
 *  - accept_claim: accepts on the inherited listener (the claim and
 *    redirect: the parent's listener thread holds the client's VI) and
 *    echoes a request the parent's thread sends.
 * A child must end within CHILD_BOUND_MS (else it is killed and the case
 * fails naming the child's kind: it hung), and its exit record must say
 * that no connection fell back (after the 1 s pairing timeout: a hang in
 * disguise) and, for the connecting kinds, that it was carried.
 * FORKSTRESS_GDB=DIR writes a hung child's stacks to DIR before it is
 * killed.
 */
#include "pharness.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

P_THREADED_FORK_CHILDREN /* every child is forked by a process running sovia's threads */

#define ROUNDS 4
#define CHILDREN 12
#define INFLIGHT 4
#define CHILD_BOUND_MS 4000.0
#define XCHG_BYTES 2048
#define NOFILE 16384 /* fdguard puts its descriptors from 4096 on */

enum kind { CONNECT_SERVER, CONNECT_PARENT, ACCEPT_CLAIM, KINDS };
static const char *const kind_name[KINDS] = {"connect_server", "connect_parent", "accept_claim"};

static int server_port, parent_port, claim_lfd, claim_port;
static unsigned kinds = KINDS; /* the case's: the first `kinds` of enum kind */
static atomic_bool stopping;
static atomic_int churn_failures, churn_errno; /* the last failure's errno */

/* ---- Bounded I/O (a hang must fail the case, not the watchdog) ------------- */

static bool wait_io(int fd, short ev, double deadline)
{
    for (;;) {
        int left = (int)(deadline - p_now_ms());
        if (left <= 0)
            return false;
        struct pollfd p = {fd, ev, 0};
        int n = poll(&p, 1, left);
        if (n > 0)
            return true;
        if (n < 0 && errno != EINTR)
            return false;
    }
}

static bool io_all(int fd, void *buf, size_t len, bool out, double deadline)
{
    for (size_t done = 0; done < len;) {
        if (!wait_io(fd, out ? POLLOUT : POLLIN, deadline))
            return false;
        ssize_t n = out ? send(fd, (char *)buf + done, len - done, MSG_DONTWAIT | MSG_NOSIGNAL)
                        : recv(fd, (char *)buf + done, len - done, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return false;
        if (n > 0)
            done += (size_t)n;
    }
    return true;
}

/* One request and its echo, byte-exact; "" or what went wrong. */
static const char *exchange(int fd, uint64_t seed, double deadline)
{
    char out[XCHG_BYTES], in[XCHG_BYTES];
    p_fill(out, sizeof out, seed);
    if (!io_all(fd, out, sizeof out, true, deadline))
        return "send";
    if (!io_all(fd, in, sizeof in, false, deadline))
        return "echo";
    return memcmp(in, out, sizeof in) ? "echo differs" : "";
}

/* Echoes until end of stream (or the deadline); *echoed: how many bytes. */
static bool echo(int fd, double deadline, size_t *echoed)
{
    char buf[4096];
    ssize_t n = 0;
    for (*echoed = 0;; *echoed += (size_t)(n > 0 ? n : 0)) {
        if (!wait_io(fd, POLLIN, deadline))
            return false;
        n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0)
            return true;
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n < 0 || !io_all(fd, buf, (size_t)n, true, deadline))
            return false;
    }
}

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in to = p_loopback(port);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&to, sizeof to) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- The server role: echoes every connection, a thread each --------------- */

static void *echo_thread(void *arg)
{
    int fd = (int)(intptr_t)arg;
    size_t echoed;
    echo(fd, p_now_ms() + 30000, &echoed);
    close(fd);
    return NULL;
}

static void spawn_echo(int fd)
{
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, echo_thread, (void *)(intptr_t)fd) != 0)
        close(fd);
    pthread_attr_destroy(&a);
}

static void echo_server(struct p_role *r)
{
    struct pollfd p[2] = {{r->lfd, POLLIN, 0}, {r->from_peer, POLLIN, 0}};
    for (;;) {
        SYS(poll(p, 2, -1));
        if (p[1].revents)
            return; /* the client role is done */
        if (p[0].revents) {
            int fd = accept(r->lfd, NULL, NULL);
            if (fd >= 0)
                spawn_echo(fd);
        }
    }
}

/* ---- The forking process's busy threads ------------------------------------ */

static void *acceptor(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd >= 0)
            spawn_echo(fd);
    }
    return NULL;
}

/* Connections made and closed all the time, to this process and to the
 * server, while the fork happens. */
static void *churn(void *arg)
{
    uint64_t seed = (uintptr_t)arg;
    for (unsigned i = 0; !atomic_load(&stopping); i++) {
        int fd = connect_to(i % 2 ? parent_port : server_port);
        double start = p_now_ms();
        const char *why = fd < 0 ? "connect" : exchange(fd, seed + i, start + 5000);
        if (*why) {
            atomic_store(&churn_errno, errno);
            atomic_fetch_add(&churn_failures, 1);
            p_log("note: churn exchange to the %s: %s (%s) after %.0f ms",
                  i % 2 ? "parent" : "server", why, p_errname(errno), p_now_ms() - start);
        }
        if (fd >= 0)
            close(fd);
    }
    return NULL;
}

/* The client of an accept_claim child: connects to the inherited listener
 * (the listening process, this one, holds the VI; the child claims it). */
static void *claim_client(void *arg)
{
    uint64_t seed = (uintptr_t)arg;
    int fd = connect_to(claim_port);
    const char *why = fd < 0 ? "connect" : exchange(fd, seed, p_now_ms() + CHILD_BOUND_MS);
    if (*why) /* the child judges; this says what its client saw */
        p_log("note: claim client %u: %s (%s)", (unsigned)seed, why, p_errname(errno));
    /* The end of stream the child waits for: children forked since the
     * connect hold this descriptor too, and a close ends the stream only
     * with the last of them, over kernel TCP as under sovia (a child
     * waited out its bound after echoing all 2048 bytes). */
    if (fd >= 0) {
        shutdown(fd, SHUT_WR);
        close(fd);
    }
    return NULL;
}

static void detached(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    CHECK(pthread_create(&t, &a, fn, arg) == 0);
    pthread_attr_destroy(&a);
}

/* ---- The children ------------------------------------------------------------ */

__attribute__((noreturn)) static void child(enum kind k, unsigned n)
{
    p_child_safety();
    p_threaded_fork_child();
    double deadline = p_now_ms() + CHILD_BOUND_MS;
    const char *why = "";
    int fd;
    if (k == ACCEPT_CLAIM) {
        fd = accept(claim_lfd, NULL, NULL);
        size_t echoed = 0;
        why = fd < 0 ? "accept" : echo(fd, deadline, &echoed) ? "" : "echo";
        if (*why)
            p_log("note: child %u echoed %zu bytes before that", n, echoed);
    } else {
        fd = connect_to(k == CONNECT_SERVER ? server_port : parent_port);
        why = fd < 0 ? "connect" : exchange(fd, n, deadline);
    }
    if (*why) {
        p_log("FAIL: child %u (%s): %s (%s)", n, kind_name[k], why, p_errname(errno));
        _exit(2);
    }
    close(fd);
    exit(0); /* through exit(): the record says whether it was carried */
}

struct kid {
    pid_t pid;
    enum kind kind;
    unsigned n;
    double deadline;
};

/* Reaps kid (killed past its bound); true if it did its work, carried. */
static bool settle(struct kid *c)
{
    int status;
    pid_t got;
    while ((got = waitpid(c->pid, &status, WNOHANG)) == 0 && p_now_ms() < c->deadline)
        p_sleep_ms(2);
    if (got == 0) {
        const char *dir = getenv("FORKSTRESS_GDB"); /* a folder: the hung child's stacks */
        if (dir) {
            char cmd[512];
            snprintf(cmd, sizeof cmd,
                     "env -u LD_PRELOAD gdb -p %d -batch -ex 'thread apply all bt' > %s/gdb.%d.txt 2>&1",
                     (int)c->pid, dir, (int)c->pid);
            if (system(cmd) != 0)
                p_log("note: gdb failed on %d", (int)c->pid);
        }
        kill(c->pid, SIGKILL);
        waitpid(c->pid, &status, 0);
        p_log("FAIL: child %u (%s) hung: not done after %.0f ms", c->n, kind_name[c->kind],
              CHILD_BOUND_MS);
        return false;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        p_log("FAIL: child %u (%s) ended with status 0x%x", c->n, kind_name[c->kind], status);
        return false;
    }
    struct p_stat st;
    /* The counts include the connections the child inherited. An accepted
     * claim may end on kernel TCP (the claim gives up on a crowded host,
     * tests/preload/prefork.c), but a connection that fell back waited
     * out the pairing timeout. */
    bool ok = p_stat_of(c->pid, &st) && !st.fell_back &&
              (c->kind == ACCEPT_CLAIM ? st.carried + st.kernel >= 1 : st.carried >= 1);
    if (!ok) {
        p_log("FAIL: child %u (%s, pid %d): not carried (carried %u fell_back %u kernel %u)", c->n,
              kind_name[c->kind], (int)c->pid, st.carried, st.fell_back, st.kernel);
        return false;
    }
    return true;
}

static void forking_parent(void *arg)
{
    unsigned round = (unsigned)(uintptr_t)arg;
    int lfd = p_listener(&parent_port);
    claim_lfd = p_listener(&claim_port);
    detached(acceptor, (void *)(intptr_t)lfd);
    pthread_t churners[2];
    for (uintptr_t i = 0; i < 2; i++)
        CHECK(pthread_create(&churners[i], NULL, churn, (void *)(1000 * (i + 1))) == 0);
    struct kid kids[INFLIGHT];
    unsigned live = 0, failed = 0;
    for (unsigned n = 0; n < CHILDREN || live; ) {
        if (n < CHILDREN && live < INFLIGHT) {
            enum kind k = (enum kind)((n + round) % kinds);
            pid_t pid = fork();
            CHECK(pid >= 0);
            if (pid == 0)
                child(k, n);
            kids[live++] = (struct kid){pid, k, n, p_now_ms() + CHILD_BOUND_MS};
            if (k == ACCEPT_CLAIM)
                detached(claim_client, (void *)(uintptr_t)(round * 100 + n));
            n++;
            continue;
        }
        failed += !settle(&kids[0]);
        memmove(kids, kids + 1, --live * sizeof(kids[0]));
    }
    atomic_store(&stopping, true);
    for (int i = 0; i < 2; i++)
        pthread_join(churners[i], NULL);
    if (atomic_load(&churn_failures))
        p_log("FAIL: %d of the parent's own exchanges failed (the last: %s)",
              atomic_load(&churn_failures), p_errname(atomic_load(&churn_errno)));
    if (failed || atomic_load(&churn_failures))
        _exit(1);
    exit(0);
}

static void forking_client(struct p_role *r)
{
    server_port = r->port;
    struct rlimit rl;
    SYS(getrlimit(RLIMIT_NOFILE, &rl));
    if (rl.rlim_max < NOFILE)
        p_log("note: hard RLIMIT_NOFILE %llu: sovia's descriptors stay below 4096",
              (unsigned long long)rl.rlim_max);
    rl.rlim_cur = rl.rlim_max < NOFILE ? rl.rlim_max : NOFILE;
    SYS(setrlimit(RLIMIT_NOFILE, &rl));
    for (unsigned round = 0; round < ROUNDS; round++)
        CHECK(p_reap(p_fork("forking parent", forking_parent, (void *)(uintptr_t)round),
                     "forking parent"));
    p_put_int(r, 0); /* the server may go */
}

int main(void)
{
    p_init("forkstress");
    if (p_asan()) {
        p_case_skip("fork_while_busy", "ASan: forked children start threads");
        p_case_skip("fork_while_busy_claim", "ASan: forked children start threads");
        return p_done();
    }
    if (p_tsan()) {
        /* A connect_server child hung past its bound in 5 of 10 runs:
         * gdb shows it in ThreadSanitizer's own allocator lock
         * (SizeClassAllocator64 Refill <- aligned_alloc <- conn_buffers),
         * copied held at the fork: the sanitizer's, not sovia's. */
        p_case_skip("fork_while_busy", "TSan: its allocator lock is copied held at fork");
        p_case_skip("fork_while_busy_claim", "TSan: its allocator lock is copied held at fork");
        return p_done();
    }
    kinds = ACCEPT_CLAIM; /* the connecting children */
    p_case("fork_while_busy", echo_server, forking_client, P_NO_STATS);
    kinds = KINDS;
    /* Gated as a known bug until a65dfa0: some runs' children fell back or
     * met EADDRNOTAVAIL on this host (tens of thousands of connections in
     * TIME_WAIT), as sovia run's connect bound its port first and so never
     * reused a TIME_WAIT port the way the kernel's connect does. */
    p_case("fork_while_busy_claim", echo_server, forking_client, P_NO_STATS);
    return p_done();
}
