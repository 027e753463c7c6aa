/*
 * pharness.h - shared helpers for the preload tests (tests/preload/).
 *
 * Each test runs with libsovia-preload.so in LD_PRELOAD and calls only the
 * ordinary libc functions. A case forks two roles from the test's main
 * process: the server (given a listening socket on 127.0.0.1 with a kernel
 * ephemeral port) and the client (given that port). Both roles therefore
 * run with the preload, so their connection should be carried by sovia;
 * each role exits through exit(), which writes its SOVIA_STAT_LOG record,
 * and the main process checks the records by pid once both are reaped.
 *
 * Roles talk out of band over two pipes (ints and barriers). A failed check
 * prints "[test/case role] FAIL file:line: ..." and exits 1; the main
 * process then kills the other role, reports the case as failed and goes
 * on with the next case. Every process has an alarm(30) watchdog.
 *
 * Known bugs: a case registered with p_case_known_bug() is skipped with its
 * bug text unless PRELOAD_TEST_KNOWN_BUGS=1 (then it runs and must pass).
 * PRELOAD_TEST_CASES=a,b runs only the named cases. PRELOAD_TEST_KERNEL=1
 * (run without LD_PRELOAD) checks the tests' own expectations against
 * kernel TCP: every case runs, known bugs included, and no stat record is
 * asked for.
 */
#ifndef SOVIA_TESTS_PRELOAD_PHARNESS_H
#define SOVIA_TESTS_PRELOAD_PHARNESS_H

#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#define P_WATCHDOG_S 30

/* ---- Checks (in roles; in main they end the whole test) ------------------ */

__attribute__((noreturn, format(printf, 3, 4))) void p_fail(const char *file, int line,
                                                             const char *fmt, ...);
__attribute__((format(printf, 1, 2))) void p_log(const char *fmt, ...);
const char *p_errname(int e);

#define FAILF(...) p_fail(__FILE__, __LINE__, __VA_ARGS__)
#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond))                                                                  \
            p_fail(__FILE__, __LINE__, "CHECK(%s) failed (errno %s)", #cond,          \
                   p_errname(errno));                                                 \
    } while (0)
#define CHECK_EQ(a, b)                                                                \
    do {                                                                              \
        long long p_a_ = (long long)(a), p_b_ = (long long)(b);                       \
        if (p_a_ != p_b_)                                                             \
            p_fail(__FILE__, __LINE__, "%s == %s failed: %lld != %lld (errno %s)", #a, #b, \
                   p_a_, p_b_, p_errname(errno));                                     \
    } while (0)
/* A call that must not fail (result >= 0); evaluates to its result. */
long long p_sys(long long r, const char *what, const char *file, int line);
#define SYS(expr) (errno = 0, p_sys((long long)(expr), #expr, __FILE__, __LINE__))
/* A call that must fail with -1 and exactly this errno. */
#define CHECK_ERR(expr, want)                                                         \
    do {                                                                              \
        errno = 0;                                                                    \
        long long p_r_ = (long long)(expr);                                           \
        int p_e_ = errno;                                                             \
        if (p_r_ != -1 || p_e_ != (want))                                             \
            p_fail(__FILE__, __LINE__, "%s: want -1/%s, got %lld/%s", #expr,          \
                   p_errname(want), p_r_, p_errname(p_e_));                           \
    } while (0)

/* ---- Cases ------------------------------------------------------------------ */

struct p_role {
    const char *role; /* "server" or "client" */
    int lfd;          /* server: listening socket (127.0.0.1, kernel port) */
    int port;         /* the listening port (both roles) */
    int to_peer;      /* pipe to the other role */
    int from_peer;    /* pipe from the other role */
};
typedef void (*p_role_fn)(struct p_role *r);

/* What the case expects (flags): which stat records, and who listens. */
enum {
    P_CARRIED = 1,        /* both roles: a record with carried >= 1 */
    P_SERVER_KERNEL = 2,  /* server: a record with carried == 0, kernel >= 1 */
    P_CLIENT_KERNEL = 4,  /* client: a record with carried == 0, kernel >= 1 */
    P_CLIENT_FELLBACK = 8, /* client: a record with carried == 0, fell_back >= 1 */
    P_SERVER_PLAIN = 16,  /* server runs without the preload (no record); the
                             harness makes no listener: the role sends the port
                             with p_put_int itself */
    P_CLIENT_PLAIN = 32,  /* client runs without the preload (no record) */
    P_NO_STATS = 64,      /* nothing asserted about the records */
    P_CLIENT_REDIRECTED = 128, /* client: a record with carried >= 1, every one
                                  redirected to the accepting process */
    P_MIGRATED = 512,     /* with P_CARRIED: both records have migrated >= 1 */
    P_SERVER_OWN_PORT = 256, /* the harness makes no listener: a process the
                                server role starts listens, and the role sends
                                the port with p_put_int; the role's own record
                                is not checked (it checks its process's) */
};

/* Names the test, checks the preload is loaded, makes the stat log. */
void p_init(const char *test);
/* Runs one case: forks server and client, reaps them, checks the records. */
void p_case(const char *name, p_role_fn server, p_role_fn client, int expect);
/* As p_case, but skipped (with the bug text) unless PRELOAD_TEST_KNOWN_BUGS=1. */
void p_case_known_bug(const char *name, p_role_fn server, p_role_fn client,
                      int expect, const char *bug);
/* Logs why a case does not run here, and counts it as skipped. */
void p_case_skip(const char *name, const char *why);
/* A case whose roles fork children that start threads (p_fork_holder):
 * skipped under AddressSanitizer (see p_asan). */
void p_case_forking(const char *name, p_role_fn server, p_role_fn client, int expect);
/* For the next case only: P_CARRIED wants carried >= n (default 1). */
void p_expect_carried(unsigned n);
/* For the next case only: the server's record moved exactly these bytes. */
void p_expect_server_bytes(unsigned long long sent, unsigned long long received);
/* Is this case selected (PRELOAD_TEST_CASES)? */
bool p_selected(const char *name);
/* PRELOAD_TEST_KERNEL=1: the reference run on kernel TCP. */
bool p_kernel_mode(void);
/* Removes the stat log; returns the exit status for main. */
int p_done(void);

/* ---- Processes ------------------------------------------------------------------ */

/* Forks a role process (watchdog, parent-death signal); fn runs in the
 * child, which then exits 0. Returns the pid (in the parent). */
pid_t p_fork(const char *role, void (*fn)(void *), void *arg);
/* For a process a role forks itself: watchdog and parent-death signal. */
void p_child_safety(void);
/* fork() for a process that keeps the role's connections: the child (0
 * returned) gets the watchdog and says it runs threads of its own (see
 * P_THREADED_FORK_CHILDREN). */
pid_t p_fork_holder(void);
/* Reaps pid; true if it exited 0 (else logs how it ended). */
bool p_reap(pid_t pid, const char *role);
/* Replaces this process by this test's executable without LD_PRELOAD, with
 * argv[1...] = "--plain", what, and the role's pipes and port, so the new
 * image can rebuild the role with p_plain_role(). Call it before the role
 * made any socket. */
__attribute__((noreturn)) void p_exec_plain(struct p_role *r, const char *what);
/* p_exec_plain passing `extra` (p_exec_role gives it back). */
__attribute__((noreturn)) void p_exec_plain_extra(struct p_role *r, const char *what,
                                                  const char *extra);
/* In main: if argv is such a re-exec, fills *r and returns `what`; else NULL. */
const char *p_plain_role(int argc, char **argv, struct p_role *r);
/* Re-executes the role as `what` with the preload kept (exec inheritance),
 * passing `extra`; p_exec_role is p_plain_role for both kinds and gives it. */
__attribute__((noreturn)) void p_exec_again(struct p_role *r, const char *what,
                                            const char *extra);
const char *p_exec_role(int argc, char **argv, struct p_role *r, const char **extra);
/* Built with AddressSanitizer? Its allocator is not fork-safe with
 * threads (GCC 12): cases whose forked children start threads skip. */
bool p_asan(void);
/* Built with ThreadSanitizer? */
bool p_tsan(void);
/* Is the preload loaded in this process? */
bool p_preloaded(void);

/* ---- ThreadSanitizer ------------------------------------------------------ */

/* The options every preload test starts ThreadSanitizer with (TSAN_OPTIONS
 * still wins; pharness.c gives them). atexit_sleep_ms: a process with
 * threads left sleeps that long at exit (default 1000), and every role
 * exits so (the sockets layer's threads): the default made the whole
 * preload label 5x slower under TSan; 50 ms still lets those threads run
 * into the exit. */
#define P_TSAN_OPTIONS "atexit_sleep_ms=50"

/* A test whose role forks a child that starts threads while the role has
 * threads of its own (the sockets layer's: the child serves an inherited
 * connection) puts P_THREADED_FORK_CHILDREN at file scope. ThreadSanitizer
 * kills such a child by default ("starting new threads after multi-threaded
 * fork is not supported", die_after_fork); this lets it run (TSAN_OPTIONS
 * still wins). The cost: in that child TSan checks nothing the forking
 * thread does, only the threads started there; the child calls
 * p_threaded_fork_child() to say so in the log. */
#if defined(__SANITIZE_THREAD__)
#define P_THREADED_FORK_CHILDREN                                                      \
    const char *__tsan_default_options(void);                                         \
    const char *__tsan_default_options(void) { return P_TSAN_OPTIONS ":die_after_fork=0"; }
#else
#define P_THREADED_FORK_CHILDREN
#endif
void p_threaded_fork_child(void);

/* ---- Stat log --------------------------------------------------------------- */

struct p_stat {
    int pid;
    unsigned carried, fell_back, kernel, redirected;
    unsigned long long bytes_sent, bytes_received;
    int signal; /* that ended it (0: exit), -1 if the record does not say */
    unsigned migrated; /* connections moved back to the kernel in mid-stream */
    unsigned short_;   /* of kernel: left to it as too short to carry */
};
/* The record of pid in SOVIA_STAT_LOG; false if it wrote none. */
bool p_stat_of(pid_t pid, struct p_stat *st);
/* Runs fn(arg) in a forked child (watchdog) that then exits through exit(),
 * which writes its record; checks it exited 0 and, unless in kernel mode,
 * gives its record (false in kernel mode: none). */
bool p_child_record(void (*fn)(void *), void *arg, struct p_stat *st);

/* ---- Sockets and helpers ------------------------------------------------- */

/* A listening IPv4 TCP socket on 127.0.0.1 with a kernel-chosen port. */
int p_listener(int *port);
/* A port on 127.0.0.1 that nobody listens on (bound, read back, released). */
int p_free_port(void);
/* A blocking connect to 127.0.0.1:port; the socket. */
int p_connect(int port);
struct sockaddr_in p_loopback(int port);

void p_write_all(int fd, const void *buf, size_t len);
void p_read_all(int fd, void *buf, size_t len); /* fails on EOF */
/* Out-of-band channel between the roles. */
void p_put_int(struct p_role *r, long long v);
long long p_get_int(struct p_role *r);
/* Both roles call it: neither returns before the other arrived. */
void p_barrier(struct p_role *r);

/* An echo: the server writes back what it reads until end of stream, then
 * closes; the client sends `bytes` of p_fill(seed) in 64 KiB chunks, reads
 * each chunk back (byte-exact), half-closes, expects end of stream, closes. */
void p_echo_serve(int fd);
void p_echo_check(int fd, size_t bytes, uint64_t seed);
/* One request of `len` bytes of p_fill(seed) and its echo, byte-exact. */
void p_exchange(int fd, size_t len, uint64_t seed);

/* What this process holds: descriptors (of which memfds), memfd mappings,
 * threads. A leak check compares two of these. */
struct p_held {
    int fds, memfds, maps, threads;
};
struct p_held p_held_now(void);
bool p_held_equal(const struct p_held *a, const struct p_held *b);

/* Deterministic pseudo-random bytes and a 64-bit hash (FNV-1a). */
void p_fill(void *buf, size_t len, uint64_t seed);
uint64_t p_hash(uint64_t h, const void *buf, size_t len);
#define P_HASH_INIT 0xcbf29ce484222325ull

void p_sleep_ms(int ms);
double p_now_ms(void);
/* A temporary file of `len` pattern bytes (unlinked already); its fd. */
int p_temp_file(size_t len, uint64_t seed);

#endif /* SOVIA_TESTS_PRELOAD_PHARNESS_H */
