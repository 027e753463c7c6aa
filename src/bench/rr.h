/*
 * rr.h - `sovia bench rr`, the load benchmark: N client and N server
 * processes (or one of each with N threads), each client thread holding K
 * connections in one event loop and keeping one request of S bytes
 * outstanding on each; the server echoes it back and the client checks
 * every byte.
 *
 * The worker side (this header; rr_worker.c, rr_client.c, rr_server.c,
 * rr_sock.c over the calls of a struct rr_ops) is the same code over libc
 * (rr_libc.c: tcp, uds, and preload, in the program sovia-rr, which the
 * bench execs) and over the sov_* API (rr_sovia.c, in processes the sovia
 * tool forks). rr_run.c and rr_output.c are the bench's side.
 *
 * A worker process talks to `sovia bench` over two descriptors:
 *   fd 1 (to the bench): "ready ADDR...\n" (a server: one listening address
 *        per thread; a client: "ready\n" once every connection is up), then
 *        at the end one struct rr_result;
 *   fd 0 (from the bench): "go START WARM END\n", CLOCK_MONOTONIC
 *        nanoseconds: clients send from START, count from WARM to END.
 * Addresses: "pPORT" (127.0.0.1) or "uHEX" (an abstract AF_UNIX name).
 */
#ifndef SOVIA_RR_H
#define SOVIA_RR_H

#include "bench.h" /* the limits and defaults only */

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

/* ---- Limits and defaults ----------------------------------------------- */

#define RR_MAX_PAIRS BENCH_RR_MAX_PAIRS
#define RR_MAX_CONNS BENCH_RR_MAX_CONNS
#define RR_MAX_SIZE BENCH_RR_MAX_SIZE
#define RR_MAX_THREAD_BYTES ((size_t)64 << 20) /* conns x size per client thread */
#define RR_DEFAULT_SIZE BENCH_RR_DEFAULT_SIZE
#define RR_DEFAULT_WARMUP 0.5 /* at most half of --seconds */
/* After END, a client waits this long for the answers still outstanding;
 * those that never come are counted (unanswered), never dropped. */
#define RR_DEFAULT_DRAIN_S 5.0

/* ---- Histogram: log-linear buckets of nanoseconds ---------------------- */

/* 2^RR_SUB_BITS linear buckets per power of two: within 1/64 (1.6 %) of the
 * value; exact below 64 ns; values above 2^RR_TOP_BITS ns (~69 s) are
 * counted in the last bucket. */
#define RR_SUB_BITS 6
#define RR_TOP_BITS 36
#define RR_HIST_N ((RR_TOP_BITS - RR_SUB_BITS + 1 + 1) << RR_SUB_BITS)

struct rr_hist {
    uint64_t count, sum_ns, max_ns;
    uint64_t b[RR_HIST_N];
};

void rr_hist_add(struct rr_hist *h, uint64_t ns);
void rr_hist_merge(struct rr_hist *into, const struct rr_hist *from);
/* The q-quantile (0..1) in nanoseconds: the middle of its bucket, never
 * above the largest value seen. 0 when empty. */
double rr_hist_quantile(const struct rr_hist *h, double q);

/* ---- Addresses ---------------------------------------------------------- */

struct rr_addr {
    int family; /* AF_INET (127.0.0.1) or AF_UNIX (abstract) */
    struct sockaddr_storage sa;
    socklen_t len;
};

/* "pPORT" / "uHEX" <-> address. 0 or -1. */
int rr_addr_format(const struct rr_addr *a, char *out, size_t outlen);
int rr_addr_parse(const char *text, struct rr_addr *a);
struct rr_addr rr_addr_loopback(int family);

/* ---- The socket calls the loops use ----------------------------------- */

struct rr_event {
    uint32_t token;
    bool in, out, err; /* err: hang-up or error */
};

struct rr_ops {
    const char *name;
    /* Once per process, before any socket (sovia: the wait mode). */
    int (*proc_init)(const char *transport);
    /* The calls, as their libc namesakes; sockets are close-on-exec streams. */
    int (*socket)(int family);
    int (*bind)(int fd, const struct sockaddr *a, socklen_t len);
    int (*listen)(int fd, int backlog);
    int (*getsockname)(int fd, struct sockaddr *a, socklen_t *len);
    int (*accept)(int lfd);
    int (*connect)(int fd, const struct sockaddr *a, socklen_t len);
    int (*setsockopt)(int fd, int level, int name, const void *v, socklen_t len);
    /* Never block (MSG_DONTWAIT); -1 with errno as send(2)/recv(2). */
    ssize_t (*send)(int fd, const void *buf, size_t len);
    ssize_t (*recv)(int fd, void *buf, size_t len);
    int (*close)(int fd);
    /* Event loop over up to `cap` descriptors; tokens are the caller's. */
    void *(*loop_new)(int cap);
    int (*loop_add)(void *l, int fd, uint32_t token);
    int (*loop_want_out)(void *l, int fd, uint32_t token, bool out); /* and in, always */
    int (*loop_del)(void *l, int fd);
    /* Events into ev (at most max); timeout in ms (-1: none). Count or -1. */
    int (*loop_wait)(void *l, struct rr_event *ev, int max, int timeout_ms);
    void (*loop_free)(void *l);
};

/* rr_sock.c, over any ops: -1 with errno on failure. A listening socket at
 * *a (port 0 / autobind; *a becomes the address), returns its fd. */
int rr_listen(const struct rr_ops *ops, struct rr_addr *a, int backlog);
/* Connections, TCP_NODELAY on TCP (family: the listener's). */
int rr_accept(const struct rr_ops *ops, int lfd, int family);
int rr_connect(const struct rr_ops *ops, const struct rr_addr *a);
/* Sends buf[*off..size) without blocking, asking the loop for POLLOUT while
 * the socket is full: 1 all sent (POLLOUT off again), 0 not yet, -1 error. */
int rr_push(const struct rr_ops *ops, void *loop, int fd, uint32_t token,
            const unsigned char *buf, size_t size, size_t *off, bool *want_out);

extern const struct rr_ops rr_libc_ops;      /* rr_libc.c: epoll */
extern const struct rr_ops rr_libc_poll_ops; /* rr_libc.c: poll (SOVIA_BENCH_RR_LOOP=poll) */
/* rr_libc.c: epoll, one-shot entries re-armed per event (SOVIA_BENCH_RR_LOOP=oneshot) */
extern const struct rr_ops rr_libc_oneshot_ops;
/* rr_libc.c: the libc ops SOVIA_BENCH_RR_LOOP names (epoll by default) */
const struct rr_ops *rr_libc_ops_chosen(void);
/* rr_pollset.c: the loop functions over a pollfd array, waiting with `wait`. */
void *rr_pollset_new(int cap, int (*wait)(struct pollfd *fds, nfds_t n, int timeout_ms));
int rr_pollset_add(void *l, int fd, uint32_t token);
int rr_pollset_want_out(void *l, int fd, uint32_t token, bool out);
int rr_pollset_del(void *l, int fd);
int rr_pollset_wait(void *l, struct rr_event *ev, int max, int timeout_ms);
void rr_pollset_free(void *l);
/* rr_sovia.c, in the sovia tool only: sov_* and sov_poll. */
extern const struct rr_ops rr_sovia_ops;
/* The SOV_WAIT_* mode of "sovia", "sovia-block", "sovia-adaptive"; else -1. */
int rr_sovia_wait_mode(const char *transport);

/* ---- What a worker reports ---------------------------------------------- */

enum { RR_ROLE_CLIENT = 1, RR_ROLE_SERVER = 2 };
#define RR_RESULT_MAGIC 0x72722d7265737531ull /* "rr-resu1" */

/* Every field 64 bits, native order (tests/tools/test_bench_rr.py reads it). */
struct rr_result {
    uint64_t magic;
    uint64_t role;
    uint64_t threads;
    uint64_t tx_window;  /* clients: answers that arrived between WARM and END */
    uint64_t tx_total;   /* clients: all answers; servers: all echoes */
    uint64_t unanswered; /* clients: requests sent in the window, never answered */
    uint64_t cpu_user_ns[2], cpu_sys_ns[2]; /* this process at WARM and at END */
    uint64_t mark_late_ns; /* how late the later of the two samples was taken */
    struct rr_hist lat;    /* clients: requests sent between WARM and END */
};

/* ---- Worker processes ---------------------------------------------------- */

/* The worker's whole life: argv (below), fd 0/1 as above, the loops over
 * ops. Returns the exit status.
 *   server --threads T --conns K --size S --family tcp|uds
 *   client --threads T --conns K --size S [--drain SECONDS] ADDR... (T of them)
 */
int rr_worker_main(int argc, char **argv, const struct rr_ops *ops);

/* rr_worker.c, for every worker: the soft RLIMIT_NOFILE up to the hard one;
 * a whole write (0 or -1); a line; "go START WARM END" from fd 0 (0 or -1); this
 * process's CPU time at WARM and at END into r (sleeps until each). */
void rr_raise_nofile(void);
int rr_write_all(int fd, const void *buf, size_t len);
/* A line from fd 0 without its '\n' (one read per byte: nothing is read
 * beyond it); -1 at its end. */
int rr_read_line(char *line, size_t size);
struct rr_marks;
int rr_read_go(struct rr_marks *m, double drain_s);
struct rr_result;
void rr_sample_marks(const struct rr_marks *m, struct rr_result *r);

/* conn_worker.c: the workers of `sovia bench conns` and `connrate` (argv[1]
 * conns-server, conns-client, rate-server, rate-client; conn.h). */
int conn_worker_main(int argc, char **argv, const struct rr_ops *ops);

/* Inside the worker: one thread's loop. The connections are set up; the
 * client starts at start_ns. Fatal errors print and return -1. */
struct rr_marks {
    int64_t start_ns, warm_ns, end_ns, drain_ns;
};

struct rr_thread {
    const struct rr_ops *ops;
    int index, nconns;
    int *fds;            /* nconns connected sockets; closed by the loop */
    size_t size;
    uint64_t conn_base;  /* this thread's first connection number (patterns) */
    struct rr_marks m;
    /* out */
    uint64_t tx_window, tx_total, unanswered;
    struct rr_hist lat;
};

int rr_client_loop(struct rr_thread *t);
int rr_server_loop(struct rr_thread *t);

/* CLOCK_MONOTONIC nanoseconds (the same clock as bench_now). */
int64_t rr_now_ns(void);
void rr_sleep_until(int64_t ns);

#endif /* SOVIA_RR_H */
