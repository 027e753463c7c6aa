/*
 * ksock_abi.h - what the BPF programs (ksock.bpf.c) and their loader
 * (ksock_load.c) share: the sockhash key and the statistics slots.
 */
#ifndef SOVIA_KSOCK_ABI_H
#define SOVIA_KSOCK_ABI_H

#include <linux/types.h>

#define KSOCK_MAX_SOCKETS 65536

/* One socket's own view of its connection; its peer's key is the same
 * with local and remote swapped. The network namespace is part of it: two
 * namespaces' loopback connections may have the same four addresses.
 * Addresses in network order (IPv4 in [3]), ports in host order. No
 * padding: the whole key is hashed. */
struct ksock_key {
    __u64 netns;   /* the namespace's cookie (SO_NETNS_COOKIE) */
    __u32 family;
    __u32 local[4];
    __u32 remote[4];
    __u32 local_port;
    __u32 remote_port;
    __u32 zero;
};

enum ksock_stat {
    KSOCK_STAT_COLLECTED,       /* sockets put into the sockhash */
    KSOCK_STAT_COLLECT_FAILED,  /* ... refused (full, duplicate key) */
    KSOCK_STAT_REDIRECTED,      /* sends queued on the peer's ingress */
    KSOCK_STAT_REDIRECTED_BYTES,
    KSOCK_STAT_PASSED,          /* sends left to kernel TCP */
    KSOCK_NSTATS
};

#endif /* SOVIA_KSOCK_ABI_H */
