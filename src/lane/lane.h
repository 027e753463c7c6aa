/*
 * lane.h - LANE: IP over VI (seed 003's LAN emulation). Two forwarding
 * processes, one per network namespace, each holding a TUN device there,
 * joined by an unreliable VI of the shm provider: every IP frame the kernel
 * routes to the TUN device crosses as one VI message and is written to the
 * peer's TUN device. An unreliable VI drops a message that finds no receive
 * posted, as a NIC drops a frame with a full ring, so no flow control is
 * needed: TCP recovers. docs/LANE.md.
 */
#ifndef SOVIA_LANE_H
#define SOVIA_LANE_H

#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define LANE_DEFAULT_DEV "lane0"
#define LANE_DEFAULT_MTU 65535 /* a 64 KB TCP segment crosses as one message */
#define LANE_MAX_MTU 65535     /* an IPv4 packet's Total Length bound */
#define LANE_MIN_MTU 576       /* IPv4's minimum datagram */

struct lane_side {
    const char *ns;      /* a name under /run/netns, or a path */
    struct in_addr addr; /* this side's address */
    unsigned prefix;     /* its prefix length */
};

struct lane_config {
    const char *dev; /* the TUN device's name, in both namespaces */
    unsigned mtu;
    bool offload;    /* IFF_VNET_HDR with checksum and TSO offloads */
    char disc[48];   /* the VI connection's discriminator (both sides) */
};

/* One forwarding side: connects the VI (role 0 listens, 1 dials) in the
 * caller's namespace (the shm provider's rendezvous sockets are abstract,
 * hence per namespace), then enters side->ns, brings the TUN device up and
 * forwards until *stop is set, the device is deleted or the peer goes.
 * ready_fd (-1: none) gets one byte once the device is up. *stop is atomic:
 * a signal handler sets it and both forwarding threads read it. 0, or -1
 * after a message on stderr. */
int lane_forward(const struct lane_config *cfg, const struct lane_side *side, int role,
                 int ready_fd, atomic_int *stop);

/* lane_pair.c: the two forwarders as child processes of the caller, which
 * stay in its namespace until connected. start: fills cfg->disc, returns 0
 * once both devices are up, or -1 (both stopped). wait: until both ended
 * (one ending stops the other; *stop set by a signal stops both); 0 if
 * both ended cleanly. stop: SIGTERM both and reap them. */
struct lane_pair {
    pid_t pids[2];
};
int lane_pair_start(struct lane_pair *lp, struct lane_config *cfg, const struct lane_side sides[2]);
int lane_pair_wait(struct lane_pair *lp, volatile sig_atomic_t *stop);
int lane_pair_stop(struct lane_pair *lp);

/* lane_frame.c: whether `len` bytes from the peer are one whole IPv4 or
 * IPv6 packet by its own header (with vnet: behind a struct virtio_net_hdr
 * asking only for TCP segmentation and partial checksums). */
bool lane_frame_ok(const unsigned char *f, size_t len, bool vnet);

/* lane_tun.c: opens the TUN device `name` in the calling thread's namespace
 * and gives it the MTU and address, up; with offload, frames carry a
 * struct virtio_net_hdr and may be TCP segments of up to 64 KB (TSO) with
 * partial checksums. The fd, or -1 after a message. */
int lane_tun_open(const char *name, unsigned mtu, struct in_addr addr, unsigned prefix,
                  bool offload);
/* Enters the network namespace `ns` (a /run/netns name or a path), calling
 * thread only. 0, or -1 after a message. */
int lane_enter_netns(const char *ns);

#endif /* SOVIA_LANE_H */
