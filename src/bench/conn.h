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

#define CONN_PING 16 /* bytes each way per exchange */
#define CONN_MAX_COUNT BENCH_CONNS_MAX_COUNT
#define CONN_RATE_DRAIN_S 1.0
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

#endif /* SOVIA_CONN_H */
