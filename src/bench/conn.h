/*
 * conn.h - `sovia bench conns` and `sovia bench connrate`: what connections
 * cost to hold and to set up. The workers are the rr worker program
 * (sovia-rr, plain libc: tcp, and preload under the preload library), with
 * the roles of conn_worker.c; conn_run.c is the bench's side.
 *
 * conns: one server process, one client process opening --count
 * connections to it and keeping them all open.
 *   server "conns-server --count N": "ready pPORT\n"; accepts N, echoes
 *     every CONN_PING bytes; on "sample\n" (fd 0) writes its conn_result;
 *     exits when the client has closed them all.
 *   client "conns-client --count N pPORT": connects N (each timed), one
 *     exchange of CONN_PING bytes on every one (checked), writes its
 *     conn_result; on "close\n" closes them all and writes the time it took
 *     (uint64 ns).
 * connrate: one server process, C client processes, each connecting,
 *   exchanging CONN_PING bytes and closing, one connection after another
 *   (the server closes first, as an HTTP/1.0 server does: the client reads
 *   the answer, then the end of stream, then closes).
 *   server "rate-server": "ready pPORT\n", serves until END + CONN_RATE_DRAIN_S
 *     after "go START WARM END", writes an rr_result (tx_total: echoes);
 *   client "rate-client pPORT": "ready\n", then "go ...", cycles from
 *     START to END and writes an rr_result (tx_window: cycles that started
 *     between WARM and END; lat: their times).
 */
#ifndef SOVIA_CONN_H
#define SOVIA_CONN_H

#include "rr.h"

#include <pthread.h>

#define CONN_PING 16 /* bytes each way per exchange */
#define CONN_MAX_COUNT BENCH_CONNS_MAX_COUNT
#define CONN_RATE_DRAIN_S 1.0
#define EP_SIZE 64 /* epoll: bytes each way per transaction */
#define CONN_RESULT_MAGIC 0x636f6e6e2d726531ull /* "conn-re1" */

/* This process's resources (/proc/self): descriptors, mappings, shared
 * memory mapped (every shared file mapping: memfds, /dev/shm) and resident
 * (RssShmem), and the resident set. */
struct conn_usage {
    uint64_t fds, maps, shm_mapped, shm_resident, rss;
};

/* Every field 64 bits, native order. */
struct conn_result {
    uint64_t magic;
    uint64_t role;  /* RR_ROLE_CLIENT or RR_ROLE_SERVER */
    uint64_t count; /* connections held */
    struct conn_usage before, after; /* before the first, with all of them */
    uint64_t setup_ns; /* client: all the connects */
    uint64_t ping_ns;  /* client: one exchange on every connection */
    struct rr_hist connect; /* client: each connect() */
};

int conn_usage_read(struct conn_usage *u);

/* conn_worker.c, for the workers: "ready pPORT\n" for a listener at
 * 127.0.0.1 (its fd, or -1); the bytes of exchange i; a whole send and an
 * exact, checked receive (len <= CONN_MAX_MSG) that wait up to 30 s for
 * room or data; 0 or -1 with errno. */
#define CONN_MAX_MSG 256
int conn_listen_ready(int backlog, struct rr_addr *a);
void conn_pattern(unsigned char *b, size_t len, uint64_t i);
int conn_send_all(int fd, const unsigned char *b, size_t len);
int conn_recv_check(int fd, const unsigned char *want, size_t len);

/* A server's start: "ready pPORT\n", accepts count connections, and serves
 * them (echoes of `size` bytes) in one epoll loop on a thread of its own
 * (tid) until the client has closed them all. 0, or -1 (said on stderr). */
struct conn_echo {
    struct rr_thread t;
    pthread_t tid;
    int rc;
};
int conn_echo_start(struct conn_echo *e, long count, size_t size, const char *who);

/* ep_worker.c: the workers of `sovia bench epoll` (argv[1] ep-server,
 * ep-client; the protocol is there). */
int ep_worker_main(int argc, char **argv);

#endif /* SOVIA_CONN_H */
