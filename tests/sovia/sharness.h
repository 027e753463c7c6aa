/*
 * sharness.h - shared helpers for the sovia sockets tests (tests/sovia/).
 *
 * Every test is one executable made of named cases. The test's main process
 * never makes a sovia call: each case forks its roles (server, client, ...)
 * as fresh processes that use sovia from scratch, and the main process only
 * reaps them. A failed check prints "[test role] FAIL file:line: ..." (errno
 * values by name), kills and reaps every process the failing process forked
 * and exits non-zero; the parent then kills the remaining roles of the case
 * and fails too. A watchdog (alarm) in every process kills a test that
 * hangs, and s_guard() bounds a single call that must not block.
 *
 * Roles talk over a socketpair ("chan": ports, pids, tokens, checksums).
 */
#ifndef SOVIA_TESTS_SOVIA_SHARNESS_H
#define SOVIA_TESTS_SOVIA_SHARNESS_H

#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include <sovia.h>

/* ---- Lifetime and reporting ---------------------------------------------- */

/* Names the test, arms the watchdog (seconds) and unbuffers stdout. */
void s_init(const char *name, unsigned watchdog_seconds);
/* Starts a named case (logged; included in failure messages). Returns 0
 * (skip it) when SOVIA_TEST_CASES lists cases (comma-separated) and not this
 * one: a debugging aid, e.g. SOVIA_TEST_CASES=backlog,ipv6. */
int s_case(const char *name);
__attribute__((format(printf, 1, 2))) void s_log(const char *fmt, ...);
__attribute__((noreturn, format(printf, 3, 4))) void s_fail(const char *file, int line,
                                                             const char *fmt, ...);
/* Reaps every process still running (they must succeed) and exits 0. */
__attribute__((noreturn)) void s_pass(void);
/* "ECONNRESET" etc. */
const char *s_errname(int e);
/* The role of this process ("main", "server", ...). */
const char *s_role(void);

#define FAILF(...) s_fail(__FILE__, __LINE__, __VA_ARGS__)

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond))                                                                  \
            s_fail(__FILE__, __LINE__, "CHECK(%s) failed", #cond);                    \
    } while (0)

#define CHECK_MSG(cond, ...)                                                          \
    do {                                                                              \
        if (!(cond))                                                                  \
            s_fail(__FILE__, __LINE__, __VA_ARGS__);                                  \
    } while (0)

#define CHECK_EQ(a, b)                                                                \
    do {                                                                              \
        long long s_a_ = (long long)(a);                                              \
        long long s_b_ = (long long)(b);                                              \
        if (s_a_ != s_b_)                                                             \
            s_fail(__FILE__, __LINE__, "%s == %s failed: %lld (0x%llx) != %lld (0x%llx)", \
                   #a, #b, s_a_, (unsigned long long)s_a_, s_b_,                      \
                   (unsigned long long)s_b_);                                         \
    } while (0)

/* A call that must succeed (result >= 0); evaluates to its result. */
extern _Thread_local long long s_rv;
long long s_sys_check(long long r, int err, const char *what, const char *file, int line);
#define SYS(expr)                                                                     \
    (errno = 0, s_rv = (long long)(expr), s_sys_check(s_rv, errno, #expr, __FILE__, __LINE__))

/* A call that must fail with -1 and exactly this errno. */
#define CHECK_ERR(expr, want)                                                         \
    do {                                                                              \
        errno = 0;                                                                    \
        long long s_r_ = (long long)(expr);                                           \
        int s_e_ = errno;                                                             \
        int s_w_ = (want);                                                            \
        if (s_r_ != -1 || s_e_ != s_w_)                                               \
            s_fail(__FILE__, __LINE__, "%s returned %lld (errno %s), expected -1 with %s", \
                   #expr, s_r_, s_r_ == -1 ? s_errname(s_e_) : "-", s_errname(s_w_));  \
    } while (0)

/* A call that must fail with -1 and one of two errno values. */
#define CHECK_ERR2(expr, want1, want2)                                                \
    do {                                                                              \
        errno = 0;                                                                    \
        long long s_r_ = (long long)(expr);                                           \
        int s_e_ = errno;                                                             \
        if (s_r_ != -1 || (s_e_ != (want1) && s_e_ != (want2)))                       \
            s_fail(__FILE__, __LINE__,                                                \
                   "%s returned %lld (errno %s), expected -1 with %s or %s", #expr,   \
                   s_r_, s_r_ == -1 ? s_errname(s_e_) : "-", s_errname(want1),        \
                   s_errname(want2));                                                 \
    } while (0)

/* ---- Time -------------------------------------------------------------- */

double s_now_ms(void); /* CLOCK_MONOTONIC (the same clock in every process) */
void s_sleep_ms(unsigned ms);

/*
 * A guard: if s_unguard() is not called within ms milliseconds, the process
 * prints "guard expired: <what>" and fails (the call under it hung). One
 * guard at a time per process; not for use across fork.
 */
void s_guard(unsigned ms, const char *what);
void s_unguard(void);

/* Deadline checks for "within 1 s" statements: 1 s plus 250 ms of
 * scheduling slack on a loaded 2-core machine. */
#define S_DEADLINE_MS 1250.0

/* ---- Processes ----------------------------------------------------------- */

typedef void (*s_fn)(int chan, void *arg);

/*
 * Forks a role running fn(chan, arg) and returns its id. The child exits 0
 * when fn returns (through exit(), so sovia's exit handling runs). If
 * parent_chan is not NULL it receives the parent's end of the channel,
 * otherwise that end is closed.
 */
int s_spawn(const char *role, s_fn fn, void *arg, int *parent_chan);
/* Forks two roles joined by a channel (the parent keeps no end). */
void s_spawn_pair(const char *role_a, s_fn fa, const char *role_b, s_fn fb, void *arg);
/* s_spawn_pair + s_wait_all. */
void s_run_pair(const char *role_a, s_fn fa, const char *role_b, s_fn fb, void *arg);
/* One role alone + s_wait_all. */
void s_run_solo(const char *role, s_fn fn, void *arg);
pid_t s_pid(int id);
/* The role will be SIGKILLed by someone: it must die of SIGKILL (or exit 0). */
void s_expect_kill(int id);
/* SIGKILLs a role now and marks it as expected to die. */
void s_kill(int id);
/* Reaps one role (up to 20 s); a failure fails the test. */
void s_reap(int id);
/* Reaps every role spawned by this process; any failure fails the test. */
void s_wait_all(void);
/* 1 in a forked role. */
int s_is_child(void);

/* Channel I/O (fails after 30 s or on EOF). */
void s_put(int chan, const void *buf, size_t len);
void s_get(int chan, void *buf, size_t len);
void s_put_u64(int chan, uint64_t v);
uint64_t s_get_u64(int chan);
void s_put_f64(int chan, double v);
double s_get_f64(int chan);
void s_tok(int chan, char token);
void s_want(int chan, char token);

/* ---- Sockets ------------------------------------------------------------- */

void s_addr4(struct sockaddr_in *a, uint16_t port);  /* 127.0.0.1:port */
void s_addr6(struct sockaddr_in6 *a, uint16_t port); /* [::1]:port */
/* sov_socket(family, SOCK_VIA | extra, 0), checked. */
int s_socket(int family, int extra_type);
/* A listening socket on loopback (port 0); *port gets its port. */
int s_listener(int family, uint16_t *port, int backlog);
/* A socket connected to loopback:port (blocking). */
int s_connect(int family, uint16_t port);
int s_accept(int lfd);
uint16_t s_local_port(int fd);
uint16_t s_peer_port(int fd);

/* sov_send until all is sent (each call must return > 0). */
void s_send_all(int fd, const void *buf, size_t len, int flags);
/* sov_recv until len bytes came; EOF or an error fails with the position. */
void s_recv_all(int fd, void *buf, size_t len);
/* The next sov_recv must return 0. */
void s_recv_eof(int fd);
/* Sends / receives-and-verifies len bytes of the pattern stream `seed`
 * starting at stream position pos. */
void s_send_pattern(int fd, uint64_t seed, uint64_t pos, size_t len, int flags);
void s_recv_pattern(int fd, uint64_t seed, uint64_t pos, size_t len);

/* Applies a configuration label with sov_set_config (before any socket). */
void s_use_label(const char *label);
/* Raises RLIMIT_NOFILE to at least want (fails if the hard limit is lower). */
void s_raise_nofile(unsigned long want);
/* Ignores SIGPIPE in this process. */
void s_ignore_sigpipe(void);

/* ---- Data ---------------------------------------------------------------- */

uint64_t s_mix64(uint64_t x); /* splitmix64 finaliser */
/* xorshift-style generator. */
uint64_t s_rand(uint64_t *state);
/* Uniform in [lo, hi]. */
uint64_t s_rand_range(uint64_t *state, uint64_t lo, uint64_t hi);
/* Log-uniform in [lo, hi] (as many small sizes as large ones). */
uint64_t s_rand_log(uint64_t *state, uint64_t lo, uint64_t hi);

/* The pattern stream: byte p of stream `seed`. */
unsigned char s_pattern_byte(uint64_t seed, uint64_t p);
void s_pattern_fill(void *buf, size_t len, uint64_t seed, uint64_t pos);
/* Index of the first byte differing from the stream, or -1. */
long s_pattern_check(const void *buf, size_t len, uint64_t seed, uint64_t pos);

/* A streaming 64-bit hash (FNV-1a over 8-byte words); the result does not
 * depend on how the data was split into updates. */
typedef struct {
    uint64_t h, total;
    unsigned char tail[8];
    unsigned ntail;
} s_hash;
void s_hash_init(s_hash *h);
void s_hash_update(s_hash *h, const void *buf, size_t len);
uint64_t s_hash_final(const s_hash *h);

#endif
