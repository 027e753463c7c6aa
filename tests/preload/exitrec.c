/*
 * exitrec.c - exit records (SOVIA_STAT_LOG) that can be trusted (issue 20,
 * item 4; docs/TRANSPARENT.md, "Exit records").
 *
 * Killed servers: the server role forks a server (before it has any socket
 * of its own, so the server is the child of a process without threads),
 * which listens, echoes ECHO_BYTES of the client's over a carried
 * connection, then waits in ppoll() on that connection and a command pipe
 * (the signal blocked outside the wait).
 * The role sends it a signal and checks how it ended (waitpid) and its
 * record: one connection carried, exactly the bytes it echoed, and the
 * signal. Cases:
 *   - term_default, int_default, hup_default: the signal at SIG_DFL (set
 *     with a mask and SA_RESTART, which sigaction must report back, with
 *     SIG_DFL): killed by it, with a record;
 *   - term_busy: SIGTERM while the server echoes a stream, in and out of
 *     sovia's locked sections (a signal inside one is delivered at its
 *     end): killed, with a record of what it moved;
 *   - term_handler_reraises: the program's handler runs, puts SIG_DFL back
 *     and raises the signal again (the usual clean-up pattern): killed by
 *     it, with a record;
 *   - term_resethand: an SA_RESETHAND handler runs once (ppoll ends with
 *     EINTR), sigaction then reports SIG_DFL, and a second SIGTERM kills it,
 *     with a record;
 *   - term_handler_exits: the program's handler, then exit(3): the record
 *     is written at exit (signal 0), as before;
 *   - term_ignored: SIG_IGN: the server lives on, exits when told.
 * Counts across fork: fork_child_counts_own: the server accepts and echoes
 * three connections, then forks a child for a fourth after a first
 * exchange on it; the child's record holds that one connection (inherited)
 * and only the bytes it moved, the parent's its four and only its bytes.
 * The environment: env_cleared (the client clears its environment, as
 * nginx's workers do, and still writes its record), env_cleared_exec (the
 * client unsets SOVIA_STAT_LOG and execs itself with the preload: the new
 * image still writes its record), env_empty_exec (SOVIA_STAT_LOG= set
 * empty: no record).
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pharness.h"

/* fork_child_counts_own's child serves a connection its parent's threads
 * carried. */
P_THREADED_FORK_CHILDREN

#define ECHO_BYTES (256 * 1024 + 17)
#define CHUNK 65536

static void echo_exactly(int fd, size_t bytes)
{
    static char buf[CHUNK];
    for (size_t done = 0; done < bytes;) {
        size_t n = bytes - done < CHUNK ? bytes - done : CHUNK;
        p_read_all(fd, buf, n);
        p_write_all(fd, buf, n);
        done += n;
    }
}

/* Sends `bytes` of a pattern and reads them back, byte-exact. */
static void send_and_check(int fd, size_t bytes, uint64_t seed)
{
    static char out[CHUNK], in[CHUNK];
    for (size_t done = 0; done < bytes;) {
        size_t n = bytes - done < CHUNK ? bytes - done : CHUNK;
        p_fill(out, n, seed + done);
        p_write_all(fd, out, n);
        p_read_all(fd, in, n);
        if (memcmp(in, out, n) != 0)
            FAILF("echoed bytes differ after %zu", done);
        done += n;
    }
}

static void expect_byte(int fd, char want)
{
    char c = 0;
    ssize_t n;
    while ((n = read(fd, &c, 1)) < 0 && errno == EINTR)
        ;
    if (n != 1 || c != want)
        FAILF("pipe: want '%c', got %zd '%c'", want, n, n == 1 ? c : '?');
}

/* ---- Servers that end by a signal ---------------------------------------- */

enum how { DEFAULT, BUSY, RERAISES, RESETHAND, EXITS, IGNORES };

struct victim {
    struct p_role *r;
    int sig;
    enum how how;
    int ready; /* to the role: 'r' echoed, 'h' the handler ran, 'q' queried */
    int cmd;   /* from the role: 'q' query the disposition, 'e' exit */
};

static int note_fd = -1;
static volatile sig_atomic_t noted;

static void note(int sig)
{
    (void)sig;
    noted = 1;
    if (write(note_fd, "h", 1) != 1) {
        /* the role will say what it missed */
    }
}

static void note_and_reraise(int sig)
{
    note(sig);
    signal(sig, SIG_DFL);
    raise(sig); /* blocked until this handler returns, then the default */
}

static void set_disposition(const struct victim *v)
{
    struct sigaction sa = {.sa_handler = SIG_DFL};
    sigemptyset(&sa.sa_mask);
    switch (v->how) {
    case BUSY:
        CHECK(signal(v->sig, SIG_DFL) != SIG_ERR);
        break;
    case DEFAULT: {
        sigaddset(&sa.sa_mask, SIGUSR1);
        sa.sa_flags = SA_RESTART;
        SYS(sigaction(v->sig, &sa, NULL));
        struct sigaction q;
        SYS(sigaction(v->sig, NULL, &q));
        CHECK(q.sa_handler == SIG_DFL);
        CHECK((q.sa_flags & SA_RESTART) && !(q.sa_flags & SA_SIGINFO));
        CHECK(sigismember(&q.sa_mask, SIGUSR1) == 1 && sigismember(&q.sa_mask, SIGUSR2) == 0);
        CHECK(signal(v->sig, SIG_DFL) == SIG_DFL);
        SYS(sigaction(v->sig, NULL, &q)); /* (signal's mask: glibc's, or TSan's) */
        CHECK(q.sa_handler == SIG_DFL);
        break;
    }
    case RERAISES:
        CHECK(signal(v->sig, note_and_reraise) != SIG_ERR);
        break;
    case RESETHAND:
    case EXITS:
        sa.sa_handler = note; /* no SA_RESTART: ppoll ends with EINTR */
        sa.sa_flags = v->how == RESETHAND ? SA_RESETHAND : 0;
        SYS(sigaction(v->sig, &sa, NULL));
        break;
    case IGNORES:
        CHECK(signal(v->sig, SIG_IGN) != SIG_ERR);
        break;
    }
}

static void victim_run(const struct victim *v)
{
    note_fd = v->ready;
    set_disposition(v);
    int port, lfd = p_listener(&port);
    p_put_int(v->r, port);
    int fd = (int)SYS(accept(lfd, NULL, NULL));
    SYS(close(lfd));
    echo_exactly(fd, ECHO_BYTES);
    if (v->how == BUSY) { /* echoes until the signal, in and out of sovia's sections */
        SYS(write(v->ready, "r", 1));
        static char buf[CHUNK];
        for (;;) {
            ssize_t n = read(fd, buf, sizeof buf);
            CHECK(n > 0);
            p_write_all(fd, buf, (size_t)n);
        }
    }
    /* The signal held outside the wait: it may come before the wait starts,
     * and `noted` is looked at between waits (ppoll's mask). */
    sigset_t held, waiting;
    sigemptyset(&held);
    sigaddset(&held, v->sig);
    SYS(sigprocmask(SIG_BLOCK, &held, &waiting));
    sigdelset(&waiting, v->sig);
    SYS(write(v->ready, "r", 1));
    for (;;) {
        if (noted && v->how == EXITS)
            exit(3);
        struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = v->cmd, .events = POLLIN}};
        if (ppoll(p, 2, NULL, &waiting) < 0) {
            CHECK(errno == EINTR);
            continue;
        }
        if (p[0].revents)
            FAILF("the client spoke or left (revents %#x)", p[0].revents);
        char c;
        CHECK_EQ(read(v->cmd, &c, 1), 1);
        if (c == 'e')
            exit(0); /* the connection still open: exit closes it */
        struct sigaction q;
        SYS(sigaction(v->sig, NULL, &q));
        CHECK(q.sa_handler == SIG_DFL); /* SA_RESETHAND's handler ran */
        SYS(write(v->ready, "q", 1));
    }
}

static void kill_server(struct p_role *r, int sig, enum how how)
{
    int ready[2], cmd[2];
    SYS(pipe2(ready, O_CLOEXEC));
    SYS(pipe2(cmd, O_CLOEXEC));
    pid_t pid = SYS(fork());
    if (pid == 0) {
        p_child_safety();
        SYS(close(ready[0]));
        SYS(close(cmd[1]));
        struct victim v = {r, sig, how, ready[1], cmd[0]};
        victim_run(&v);
        exit(0);
    }
    SYS(close(ready[1]));
    SYS(close(cmd[0]));
    expect_byte(ready[0], 'r');
    if (how == BUSY)
        p_sleep_ms(100); /* the client streams meanwhile */
    SYS(kill(pid, sig));
    if (how == RERAISES || how == RESETHAND || how == EXITS)
        expect_byte(ready[0], 'h');
    if (how == RESETHAND) {
        SYS(write(cmd[1], "q", 1));
        expect_byte(ready[0], 'q');
        SYS(kill(pid, sig));
    }
    int st;
    if (how == IGNORES) {
        p_sleep_ms(100);
        CHECK_EQ(waitpid(pid, &st, WNOHANG), 0); /* still there */
        SYS(write(cmd[1], "e", 1));
    }
    CHECK_EQ(SYS(waitpid(pid, &st, 0)), pid);
    bool killed = how == DEFAULT || how == BUSY || how == RERAISES || how == RESETHAND;
    if (killed && !(WIFSIGNALED(st) && WTERMSIG(st) == sig))
        FAILF("the server ended with status %#x, want killed by signal %d", st, sig);
    if (!killed && !(WIFEXITED(st) && WEXITSTATUS(st) == (how == EXITS ? 3 : 0)))
        FAILF("the server ended with status %#x, want exit %d", st, how == EXITS ? 3 : 0);
    if (!p_kernel_mode()) {
        struct p_stat s;
        if (!p_stat_of(pid, &s))
            FAILF("the server (pid %d) wrote no record", (int)pid);
        p_log("server's record: carried %u fell_back %u kernel %u sent %llu received %llu "
              "signal %d", s.carried, s.fell_back, s.kernel, s.bytes_sent, s.bytes_received,
              s.signal);
        CHECK_EQ(s.carried, 1);
        CHECK_EQ(s.fell_back + s.kernel, 0);
        if (how == BUSY) { /* echoed what it read, but the last read */
            CHECK(s.bytes_sent > ECHO_BYTES);
            CHECK(s.bytes_received >= s.bytes_sent && s.bytes_received - s.bytes_sent <= CHUNK);
        } else {
            CHECK_EQ(s.bytes_sent, ECHO_BYTES);
            CHECK_EQ(s.bytes_received, ECHO_BYTES);
        }
        CHECK_EQ(s.signal, killed ? sig : 0);
    }
    SYS(close(ready[0]));
    SYS(close(cmd[1]));
    p_put_int(r, 1); /* to the client: the server is gone */
}

static void victim_client(struct p_role *r)
{
    int fd = p_connect(r->port); /* the server's own port (P_SERVER_OWN_PORT) */
    send_and_check(fd, ECHO_BYTES, 1);
    CHECK_EQ(p_get_int(r), 1);
    char c;
    ssize_t n = read(fd, &c, 1);
    if (n != 0 && !(n < 0 && errno == ECONNRESET))
        FAILF("after the server's end: read %zd (errno %s)", n, p_errname(errno));
    SYS(close(fd));
}

/* Streams to the busy server until it is gone. */
static void busy_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    send_and_check(fd, ECHO_BYTES, 1);
    static char buf[CHUNK];
    ssize_t n = 1;
    while (n > 0) {
        p_fill(buf, sizeof buf, 3);
        n = send(fd, buf, sizeof buf, MSG_NOSIGNAL);
        for (size_t got = 0; n > 0 && got < sizeof buf; got += (size_t)n)
            n = read(fd, buf, sizeof buf - got);
    }
    if (n < 0 && errno != EPIPE && errno != ECONNRESET)
        FAILF("after the server's end: %s", p_errname(errno));
    CHECK_EQ(p_get_int(r), 1);
    SYS(close(fd));
}

#define KILLED(name, sig, how)                  \
    static void name(struct p_role *r)          \
    {                                           \
        kill_server(r, sig, how);               \
    }
KILLED(term_default, SIGTERM, DEFAULT)
KILLED(int_default, SIGINT, DEFAULT)
KILLED(hup_default, SIGHUP, DEFAULT)
KILLED(term_busy, SIGTERM, BUSY)
KILLED(term_reraises, SIGTERM, RERAISES)
KILLED(term_resethand, SIGTERM, RESETHAND)
KILLED(term_exits, SIGTERM, EXITS)
KILLED(term_ignored, SIGTERM, IGNORES)

/* ---- A forked child's record ------------------------------------------- */

#define EARLY 3
#define EARLY_BYTES 40000
#define REQUEST 100
#define HEADER 300
#define CHILD_BYTES (128 * 1024 + 5)

static void fork_server(struct p_role *r)
{
    for (int i = 0; i < EARLY; i++) {
        int fd = (int)SYS(accept(r->lfd, NULL, NULL));
        echo_exactly(fd, EARLY_BYTES);
        char c;
        CHECK_EQ(read(fd, &c, 1), 0);
        SYS(close(fd));
    }
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char req[REQUEST], hdr[HEADER];
    p_read_all(fd, req, sizeof req);
    memset(hdr, 'h', sizeof hdr);
    p_write_all(fd, hdr, sizeof hdr);
    pid_t pid = SYS(fork());
    if (pid == 0) {
        p_child_safety();
        p_threaded_fork_child();
        SYS(close(r->lfd));
        echo_exactly(fd, CHILD_BYTES);
        char c;
        CHECK_EQ(read(fd, &c, 1), 0);
        exit(0);
    }
    SYS(close(fd)); /* the child has it now */
    p_put_int(r, 1); /* before the client's next bytes: none reach our copy */
    int st;
    CHECK_EQ(SYS(waitpid(pid, &st, 0)), pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (p_kernel_mode())
        return;
    struct p_stat s;
    if (!p_stat_of(pid, &s))
        FAILF("the child (pid %d) wrote no record", (int)pid);
    p_log("child's record: carried %u sent %llu received %llu", s.carried, s.bytes_sent,
          s.bytes_received);
    CHECK_EQ(s.carried, 1); /* the one it inherited, not its parent's four */
    CHECK_EQ(s.bytes_sent, CHILD_BYTES);
    CHECK_EQ(s.bytes_received, CHILD_BYTES);
}

static void fork_client(struct p_role *r)
{
    for (int i = 0; i < EARLY; i++) {
        int fd = p_connect(r->port);
        send_and_check(fd, EARLY_BYTES, (uint64_t)i);
        SYS(close(fd));
    }
    int fd = p_connect(r->port);
    char req[REQUEST], hdr[HEADER];
    memset(req, 'r', sizeof req);
    p_write_all(fd, req, sizeof req);
    p_read_all(fd, hdr, sizeof hdr);
    CHECK_EQ(p_get_int(r), 1);
    send_and_check(fd, CHILD_BYTES, 9);
    SYS(shutdown(fd, SHUT_WR));
    char c;
    CHECK_EQ(read(fd, &c, 1), 0);
    SYS(close(fd));
}

/* ---- The environment --------------------------------------------------- */

static void echo_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    p_echo_serve(fd);
}

static void connect_and_echo(struct p_role *r)
{
    int fd = p_connect(r->port);
    p_echo_check(fd, ECHO_BYTES, 5);
}

static void cleared_client(struct p_role *r)
{
    CHECK_EQ(clearenv(), 0); /* as nginx does in its workers */
    connect_and_echo(r);
}

static void unset_exec_client(struct p_role *r)
{
    SYS(unsetenv("SOVIA_STAT_LOG"));
    p_exec_again(r, "connect", NULL);
}

static void empty_exec_client(struct p_role *r)
{
    SYS(setenv("SOVIA_STAT_LOG", "", 1));
    p_exec_again(r, "connect", NULL);
}

int main(int argc, char **argv)
{
    struct p_role again;
    const char *what = p_exec_role(argc, argv, &again, NULL);
    if (what && strcmp(what, "connect") == 0) {
        connect_and_echo(&again);
        return 0;
    }
    if (what)
        FAILF("unknown re-executed role %s", what);

    p_init("exitrec");
    int own = P_SERVER_OWN_PORT | P_CARRIED;
    p_case("term_default", term_default, victim_client, own);
    p_case("int_default", int_default, victim_client, own);
    p_case("hup_default", hup_default, victim_client, own);
    p_case("term_busy", term_busy, busy_client, own);
    p_case("term_handler_reraises", term_reraises, victim_client, own);
    p_case("term_resethand", term_resethand, victim_client, own);
    p_case("term_handler_exits", term_exits, victim_client, own);
    p_case("term_ignored", term_ignored, victim_client, own);
    if (p_asan()) {
        p_case_skip("fork_child_counts_own", "ASan: forked children start threads");
    } else {
        p_expect_carried(EARLY + 1);
        p_expect_server_bytes(EARLY * EARLY_BYTES + HEADER, EARLY * EARLY_BYTES + REQUEST);
        p_case("fork_child_counts_own", fork_server, fork_client, P_CARRIED);
    }
    p_case("env_cleared", echo_server, cleared_client, P_CARRIED);
    p_case("env_cleared_exec", echo_server, unset_exec_client, P_CARRIED);
    p_case("env_empty_exec", echo_server, empty_exec_client, P_CARRIED | P_CLIENT_PLAIN);
    return p_done();
}
