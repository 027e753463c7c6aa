/*
 * bench_internal.h - pieces shared inside the bench library: the transport
 * ops table, the driver/peer protocol, statistics, output and processes.
 */
#ifndef SOVIA_BENCH_INTERNAL_H
#define SOVIA_BENCH_INTERNAL_H

#include "bench.h"

#include <netinet/in.h>
#include <stdio.h>
#include <sys/types.h>

/* ---- Transports ---------------------------------------------------------- */

/* The parent process drives and measures; the forked child answers. */
enum bench_role { BENCH_DRIVER, BENCH_PEER };

/*
 * A transport moves whole messages between the two processes. Buffers are
 * owned by the transport so zero-copy transports (vi) are not charged for a
 * copy the application would not make: the caller fills send_buf() and
 * reads the pointer recv_msg() returns, valid until the next recv_msg().
 * Both sides always know the length of the next message (the protocol
 * below is lock-step), so recv_msg() gets the expected length.
 */
struct bench_transport {
    const char *name;
    const char *summary;
    bool polling;   /* spins (always or first): pin driver and peer to different CPUs */
    size_t max_msg; /* largest message it can carry, 0 = no own limit */
    bool ring;      /* takes --ring/--frag (NetPIPE-VIA's descriptor ring: vi_internal.h) */

    /* Transports that take --config (sovia): whether the label is known;
     * prints why not and returns -1 (bad usage). NULL: --config is refused. */
    int (*check_config)(const char *label);
    /* Parent before fork: resources both processes inherit. May be NULL.
     * BENCH_PREPARE_UNAVAILABLE: this machine cannot run it (said why). */
    int (*prepare)(const struct bench_params *p, size_t max_msg, void **shared);
    /* Each process after fork: connect and return an endpoint. */
    int (*setup)(void *shared, enum bench_role role, size_t max_msg, void **ep);
    void *(*send_buf)(void *ep);
    int (*send_msg)(void *ep, size_t len);
    int (*recv_msg)(void *ep, size_t len, const void **data);
    /* Returns nonzero if releasing resources failed (results stand). */
    int (*teardown)(void *ep);
    /* Parent after the peer exited. May be NULL. */
    void (*release)(void *shared);

    /* Transports that wrap an external program set only this (and the name). */
    int (*run_external)(const struct bench_params *p);
};

#define BENCH_PREPARE_UNAVAILABLE (-2)

const struct bench_transport *bench_find_transport(const char *name);

extern const struct bench_transport bench_transport_limit;
extern const struct bench_transport bench_transport_limit_shared;
extern const struct bench_transport bench_transport_tcp;
extern const struct bench_transport bench_transport_tcp_nagle;
extern const struct bench_transport bench_transport_tcp_poll;
extern const struct bench_transport bench_transport_uds;
extern const struct bench_transport bench_transport_ksovia;
extern const struct bench_transport bench_transport_lane;
extern const struct bench_transport bench_transport_preload;
extern const struct bench_transport bench_transport_vi;
extern const struct bench_transport bench_transport_vi_copy;
extern const struct bench_transport bench_transport_vi_user;
extern const struct bench_transport bench_transport_vi_block;
extern const struct bench_transport bench_transport_vi_notify;
extern const struct bench_transport bench_transport_ucx;
extern const struct bench_transport bench_transport_sovia;
extern const struct bench_transport bench_transport_sovia_block;
extern const struct bench_transport bench_transport_sovia_adaptive;

/* ---- Driver/peer protocol ------------------------------------------------ */

/*
 * The driver sends a command, then the exchange it announces; the peer is a
 * generic server, so every mode (and sweep's changing sizes and iteration
 * counts) works over every transport without the peer knowing the plan.
 */
enum bench_op {
    BENCH_OP_PINGPONG = 1,
    BENCH_OP_STREAM = 2,
    BENCH_OP_QUIT = 3,
    BENCH_OP_IDLE = 4, /* the peer stays silent `count` microseconds, then replies */
    BENCH_OP_TRACE = 5, /* anatomy: the peer's probes go to its ring (no reply) */
};

struct bench_cmd {
    uint32_t op;
    uint32_t size;
    uint64_t count; /* PINGPONG: round trips; ack: messages received */
};

/* Commands and acks are this long; every transport must carry it. */
#define BENCH_CTRL_LEN ((size_t)sizeof(struct bench_cmd))

/* In STREAM, the first payload byte marks the last message. */
#define BENCH_STREAM_MORE 0
#define BENCH_STREAM_LAST 1

/* anatomy (bench_anatomy.c): whether a transport has probes; the shared
 * rings, made before the fork; the peer's start; the driver's run. */
bool bench_anatomy_traced(const char *transport);
uint64_t bench_anatomy_iters(const struct bench_params *p);
int bench_anatomy_prepare(uint64_t iters);
void bench_anatomy_release(void);
void bench_anatomy_peer_start(void);
int bench_anatomy_drive(const struct bench_transport *t, void *ep, const struct bench_params *p);

/* The peer side: serve commands until QUIT. Returns 0 or -1. */
int bench_peer_serve(const struct bench_transport *t, void *ep);

/* ---- Measurement loops (driver side) ------------------------------------- */

struct bench_lat_sample {
    size_t size;
    uint64_t iters;
    double p50_us;  /* median over batches of per-iteration one-way time */
    double mean_us; /* total time / iters / 2 */
};

struct bench_bw_sample {
    size_t size;
    uint64_t msgs;
    double seconds;
    double gbps;
};

int bench_measure_lat(const struct bench_transport *t, void *ep, size_t size, uint64_t iters,
                      uint64_t warmup, struct bench_lat_sample *out);
int bench_measure_bw(const struct bench_transport *t, void *ep, size_t size, double seconds,
                     struct bench_bw_sample *out);
/* Calibrates iterations per size and emits one row per size as it goes
 * (config: as for the bench_out_* functions). */
int bench_measure_sweep(const struct bench_transport *t, void *ep, size_t max_size, bool json,
                        const char *config);
int bench_send_quit(const struct bench_transport *t, void *ep);

struct bench_idle_sample {
    double seconds;     /* wall time the driver waited */
    double cpu_percent; /* its CPU time (all threads, user + system) / wall time */
};

/* The driver blocks in recv_msg while the peer is silent for `seconds`. */
int bench_measure_idle(const struct bench_transport *t, void *ep, double seconds,
                       struct bench_idle_sample *out);

/* `wake`: two threads of this process, no transport (bench_wake.c). */
int bench_run_wake(const struct bench_params *p);

/* `conns`, `connrate`: what connections cost to hold and to make
 * (conn_run.c, conn.h). */
int bench_run_conns(const struct bench_params *p);

/* `rr`: client and server processes under load (rr_run.c, rr.h). */
int bench_run_rr(const struct bench_params *p);
struct rr_result;
/* The results of every worker, clients and servers (rr_output.c). */
struct rr_run_info {
    const char *transport;
    unsigned pairs, conns, procs_per_side, threads_per_proc;
    size_t size;
    bool threads;
    double seconds, warmup;
    int cpus;          /* CPUs this process may run on */
    double load_1m;    /* load average at the start */
    double cpu_total_s; /* every worker's whole life (getrusage of children) */
};
void bench_out_rr(const struct rr_run_info *info, const struct rr_result *res, size_t nres,
                  bool json);

/* Sweep sizes (NetPIPE: c-3, c, c+3 for c = 1, 2, 4, ...), sorted, deduped,
 * none above max_size. Returns the count; *sizes is malloc'd. */
size_t bench_sweep_sizes(size_t max_size, size_t **sizes);
/* Pick iterations so one size takes about target_s given a round-trip time. */
uint64_t bench_iters_for(double round_trip_s, double target_s, uint64_t lo, uint64_t hi);

/* ---- Statistics and time ------------------------------------------------- */

double bench_now(void); /* CLOCK_MONOTONIC seconds */
double bench_median(double *v, size_t n); /* sorts v in place */
double bench_mean(const double *v, size_t n);

/* ---- Output -------------------------------------------------------------- */

/* config: the configuration label of transports that take --config ("default"
 * without one), printed as a field / column; NULL for the others. */
void bench_out_lat(const char *transport, const char *config, const struct bench_lat_sample *s,
                   bool json, bool with_mbps);
void bench_out_bw(const char *transport, const char *config, const struct bench_bw_sample *s,
                  bool json);
void bench_out_idle(const char *transport, const char *config,
                    const struct bench_idle_sample *s, bool json);
void bench_out_unavailable(const char *transport, const char *why, bool json);

/* ---- Processes and CPUs --------------------------------------------------- */

/* The two CPUs to pin to (first two allowed); returns how many exist (0-2). */
int bench_pick_cpus(int cpus[2]);
int bench_pin_self(int cpu);
/* Fork the peer. In the child the peer dies with its parent. */
pid_t bench_fork_peer(void);
/* bench_netns.c: the peer's network namespace (SOVIA_BENCH_PEER_NETNS),
 * entered by the forked peer, 0 or -1; the IPv4 address a role listens at
 * and the other dials (SOVIA_BENCH_PEER_ADDR / SOVIA_BENCH_DRIVER_ADDR,
 * default 127.0.0.1). */
int bench_peer_netns_enter(void);
struct in_addr bench_addr(enum bench_role role);

/* bench_lane.c: the lane transport's namespaces and LANE link. open: 0 and
 * the driver's address, BENCH_PREPARE_UNAVAILABLE (said why) or -1. enter:
 * the calling thread into the role's namespace; leave: back. */
struct bench_lane;
int bench_lane_open(struct bench_lane **out, struct in_addr *driver_addr);
int bench_lane_enter(struct bench_lane *l, enum bench_role role);
int bench_lane_leave(struct bench_lane *l);
void bench_lane_close(struct bench_lane *l);
/* Whether the other process is still there (cheap; for spin loops). */
bool bench_peer_alive(void);
/* Wait for a child; after timeout_s seconds kill it. Returns its exit code,
 * 128+signal if killed, -1 on error. */
int bench_wait_child(pid_t pid, double timeout_s);
void bench_kill_child(pid_t pid);

/* Run argv (searched in PATH) pinned to cpu (-1: not pinned). out: if
 * non-NULL receives stdout+stderr (malloc'd, NUL-terminated); otherwise the
 * output goes to /dev/null. Returns the pid, or -1. *out_fd is the pipe. */
pid_t bench_spawn(char *const argv[], int cpu, int *out_fd);
/* Read a pipe to EOF into a malloc'd string. */
char *bench_slurp(int fd);
bool bench_in_path(const char *prog);

#endif /* SOVIA_BENCH_INTERNAL_H */
