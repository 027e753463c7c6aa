/*
 * bench_netns.c - the driver and the peer on two "hosts": network
 * namespaces of one machine (scripts/cluster.sh), or, with the same
 * variables, whatever namespace the peer is told to enter.
 *
 * SOVIA_BENCH_PEER_NETNS names the namespace the forked peer enters (a
 * name under /run/netns, as `ip netns` makes them, or a path);
 * SOVIA_BENCH_PEER_ADDR and SOVIA_BENCH_DRIVER_ADDR are the IPv4
 * addresses each side listens at and the other dials (default 127.0.0.1).
 * The tcp, sovia and vi transports use them; the provider vi and sovia
 * run over is SOVIA_PROVIDER's (fabric:tcp between namespaces).
 */
#include "bench_internal.h"
#include "lane.h"

#include <arpa/inet.h>
#include <stdlib.h>

int bench_peer_netns_enter(void)
{
    const char *ns = getenv("SOVIA_BENCH_PEER_NETNS");
    if (!ns || !*ns)
        return 0;
    return lane_enter_netns(ns);
}

struct in_addr bench_addr(enum bench_role role)
{
    const char *v = getenv(role == BENCH_PEER ? "SOVIA_BENCH_PEER_ADDR" : "SOVIA_BENCH_DRIVER_ADDR");
    struct in_addr a = {.s_addr = htonl(INADDR_LOOPBACK)};
    if (v && *v && inet_pton(AF_INET, v, &a) != 1) {
        fprintf(stderr, "sovia bench: ignoring %s address '%s' (not IPv4)\n",
                role == BENCH_PEER ? "the peer" : "the driver", v);
        a.s_addr = htonl(INADDR_LOOPBACK);
    }
    return a;
}
