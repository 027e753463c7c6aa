/*
 * bench_lane.c - the lane transport's link: two network namespaces of its
 * own (unnamed: held by descriptors, so they vanish with the run however it
 * ends), a LANE link between them (src/lane/), the driver's sockets made in
 * the first and the peer's in the second. The tcp code does the rest
 * (transport_socket.c).
 */
#include "bench_internal.h"
#include "lane.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Private addresses: the namespaces are the run's own, so they clash with
 * nothing. */
#define LANE_BENCH_NET "10.251.22."

struct bench_lane {
    int orig, ns[2]; /* the caller's namespace; the driver's and the peer's */
    char path[2][40];
    struct lane_pair pair;
    bool up;
};

static int ns_fd(void)
{
    return open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
}

int bench_lane_open(struct bench_lane **out, struct in_addr *driver_addr)
{
    struct bench_lane *l = calloc(1, sizeof *l);
    struct lane_config cfg = {.dev = "lanebench", .mtu = LANE_DEFAULT_MTU};
    struct lane_side sides[2];

    if (!l)
        return -1;
    l->orig = l->ns[0] = l->ns[1] = -1;
    if (access("/dev/net/tun", R_OK | W_OK) != 0) {
        fprintf(stderr, "lane: unavailable (/dev/net/tun: %s)\n", strerror(errno));
        goto unavailable;
    }
    if ((l->orig = ns_fd()) < 0)
        goto unavailable;
    for (int i = 0; i < 2; i++) {
        if (unshare(CLONE_NEWNET) != 0 || (l->ns[i] = ns_fd()) < 0) {
            fprintf(stderr, "lane: unavailable (a network namespace: %s)\n", strerror(errno));
            (void)setns(l->orig, CLONE_NEWNET);
            goto unavailable;
        }
        snprintf(l->path[i], sizeof l->path[i], "/proc/self/fd/%d", l->ns[i]);
    }
    if (setns(l->orig, CLONE_NEWNET) != 0) {
        perror("lane: back to our namespace");
        bench_lane_close(l);
        return -1;
    }
    memset(sides, 0, sizeof sides);
    for (int i = 0; i < 2; i++) {
        char a[32];
        snprintf(a, sizeof a, LANE_BENCH_NET "%d", i + 1);
        inet_pton(AF_INET, a, &sides[i].addr);
        sides[i].prefix = 30;
        sides[i].ns = l->path[i];
    }
    if (lane_pair_start(&l->pair, &cfg, sides) != 0) {
        fprintf(stderr, "lane: unavailable (the link did not come up; see above)\n");
        goto unavailable;
    }
    l->up = true;
    *driver_addr = sides[0].addr;
    *out = l;
    return 0;
unavailable:
    bench_lane_close(l);
    return BENCH_PREPARE_UNAVAILABLE;
}

int bench_lane_enter(struct bench_lane *l, enum bench_role role)
{
    if (setns(l->ns[role == BENCH_DRIVER ? 0 : 1], CLONE_NEWNET) != 0) {
        perror("lane: entering the run's namespace");
        return -1;
    }
    return 0;
}

int bench_lane_leave(struct bench_lane *l)
{
    if (setns(l->orig, CLONE_NEWNET) != 0) {
        perror("lane: back to our namespace");
        return -1;
    }
    return 0;
}

void bench_lane_close(struct bench_lane *l)
{
    if (!l)
        return;
    if (l->up && lane_pair_stop(&l->pair) != 0)
        fprintf(stderr, "lane: note: a forwarder did not end cleanly\n");
    for (int i = 0; i < 2; i++)
        if (l->ns[i] >= 0)
            close(l->ns[i]);
    if (l->orig >= 0)
        close(l->orig);
    free(l);
}
