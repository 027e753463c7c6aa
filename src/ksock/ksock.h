/*
 * ksock.h - KSOVIA on today's kernel (src/ksock/): BPF programs that carry
 * the bytes of established loopback TCP connections between the two
 * sockets directly (sockhash + sk_msg redirect to the peer's ingress),
 * attached to a cgroup v2 of our own that the processes to speed up are
 * moved into. Used by `sovia ksock -- PROGRAM` and the bench's ksovia
 * transport. Errors: 0 or -errno, and a sentence in `why`.
 */
#ifndef SOVIA_KSOCK_H
#define SOVIA_KSOCK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ksock_abi.h"

struct ksock;

/* Whether this build has the BPF programs (clang and libbpf were there);
 * if not, *why says what was missing. */
int ksock_built(const char **why);

/* Loads and verifies the programs, makes the cgroup (under the caller's own
 * cgroup v2) and attaches them there. A watcher process, outside the
 * cgroup, removes it once the caller has gone, however it went. */
int ksock_open(struct ksock **out, char *why, size_t whylen);
/* Moves a process (0: the caller) into the cgroup: sockets it makes from
 * then on are collected once established. */
int ksock_enter(struct ksock *k, pid_t pid);
/* Moves the caller back to the cgroup it came from. */
int ksock_leave(struct ksock *k);
/* The statistics (enum ksock_stat), summed over CPUs. */
int ksock_stats(const struct ksock *k, uint64_t out[KSOCK_NSTATS]);
/* 1 if the TCP socket fd is in the sockhash, 0 if not, -errno. */
int ksock_holds(const struct ksock *k, int fd);
/* The kernel's ids of what ksock_open made (for checking that ksock_close
 * left none behind): the two programs and the sockhash. */
int ksock_ids(const struct ksock *k, uint32_t ids[3]);
/* The cgroup's directory. */
const char *ksock_cgroup(const struct ksock *k);
/* Detaches the programs, moves the caller back, removes the cgroup (once
 * the processes moved in have left it: a moment after they exit). */
void ksock_close(struct ksock *k);

/* ksock_cgroup.c, used by ksock_load.c. */
struct ksock_cg {
    char dir[640];    /* our cgroup */
    char home[520];   /* the caller's cgroup, to go back to */
    int dir_fd;       /* open on dir, for attaching */
    int watch_fd;     /* the watcher's pipe: its EOF means we are gone */
    pid_t watcher;
};
int ksock_cg_make(struct ksock_cg *cg, char *why, size_t whylen);
int ksock_cg_enter(struct ksock_cg *cg, pid_t pid);
int ksock_cg_leave(struct ksock_cg *cg);
void ksock_cg_remove(struct ksock_cg *cg);

#endif /* SOVIA_KSOCK_H */
