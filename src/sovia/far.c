/*
 * far.c - the second NIC of a process under sovia run with a cluster key
 * (issue 17 item 4; docs/ARCHITECTURE.md "Transparent mode across hosts"):
 * shm carries connections to peers on this host, the fabric NIC those to
 * peers on other hosts, chosen per connection by where the peer is.
 *
 * libfabric is loaded only when this NIC opens: on the process's first
 * connect() to another host, or in the far connection thread of a listener
 * that other hosts can reach (conn.c), so a program that only talks to its
 * own host never loads it (Debian's libfabric costs about 370 ms to load).
 * Once it is open, every CQ sleep polls both CQs through one epoll
 * descriptor (joint_fd), bounded by the fabric CQ's progress slice.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "sock.h"

void (*sov_far_hook)(void);

static struct {
    pthread_once_t once;
    int err;
    bool forked; /* a fork child: the NIC and its threads are the parent's */
    int joint_fd;
    char name[64];
} fg = {.once = PTHREAD_ONCE_INIT, .err = -ENETUNREACH, .joint_fd = -1};

/* Which fabric provider (SOVIA_FAR_PROVIDER: "fabric:tcp", say); libfabric's
 * best by default. */
static const char *far_device(void)
{
    const char *v = getenv("SOVIA_FAR_PROVIDER");
    return v && strncmp(v, "fabric", 6) == 0 ? v : "fabric";
}

static int joint_add(int ep, VIP_CQ_HANDLE cq)
{
    int fds[2], bound;
    if (VipxCQPollFds(cq, fds, &bound) != VIP_SUCCESS)
        return -EIO;
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[0]};
    return epoll_ctl(ep, EPOLL_CTL_ADD, fds[0], &ev) == 0 ? 0 : -errno;
}

static void far_do_open(void)
{
    struct sov_nic *n = &sov_g.far;
    if (!sov_g.nic || VipOpenNic(far_device(), &n->nic) != VIP_SUCCESS)
        return;
    /* Before anything of the NIC's makes a kernel socket or connects:
     * the preload must pass libfabric's own calls through. */
    if (sov_far_hook)
        sov_far_hook();
    VipxSetWaitSpin(n->nic, 0);
    VIP_NIC_ATTRIBUTES na;
    if (VipQueryNic(n->nic, &na) == VIP_SUCCESS)
        memcpy(fg.name, na.Name, sizeof(fg.name) - 1);
    if (VipCreatePtag(n->nic, &n->ptag) != VIP_SUCCESS ||
        VipxCreateCQ(n->nic, 65536, 0, &n->cq) != VIP_SUCCESS)
        return;
    VipxFdCreateBegin(); /* ours: safe from the program's stale close() */
    int ep = VipxFdAdopt(epoll_create1(EPOLL_CLOEXEC));
    VipxFdCreateEnd();
    if (ep < 0 || joint_add(ep, sov_g.cq) != 0 || joint_add(ep, n->cq) != 0) {
        if (ep >= 0)
            VipxFdClose(ep);
        return;
    }
    fg.joint_fd = ep;
    fg.err = 0;
    atomic_store(&sov_g.far_open, true);
}

int sov_far_open(void)
{
    if (fg.forked)
        return -ENETUNREACH;
    pthread_once(&fg.once, far_do_open);
    return fg.forked ? -ENETUNREACH : fg.err;
}

void sov_far_forked(void)
{
    if (atomic_load(&sov_g.far_open)) {
        fg.forked = true;
        atomic_store(&sov_g.far_open, false);
    }
}

const char *sov_far_provider_name(void)
{
    return fg.name;
}

/* Whether this thread's sleep armed the far CQ (the NIC may open between
 * an arm and its disarm). */
static _Thread_local bool far_armed;

void sov_cq_arm(void)
{
    VipxCQArm(sov_g.cq, VIP_TRUE);
    far_armed = atomic_load_explicit(&sov_g.far_open, memory_order_acquire);
    if (far_armed)
        VipxCQArm(sov_g.far.cq, VIP_TRUE);
}

void sov_cq_disarm(bool drained)
{
    if (drained)
        VipxCQArm(sov_g.cq, VIP_FALSE);
    else
        VipxCQDisarmQuiet(sov_g.cq);
    if (far_armed) {
        far_armed = false;
        if (drained)
            VipxCQArm(sov_g.far.cq, VIP_FALSE);
        else
            VipxCQDisarmQuiet(sov_g.far.cq);
    }
}

/* poll.c's sov_doze_fds: the descriptor to poll for this thread's armed
 * CQs, and its bound (the shorter of both). */
int sov_far_doze_fd(int fd, int *bound)
{
    if (!far_armed)
        return fd;
    int fds[2], b = -1;
    if (VipxCQPollFds(sov_g.far.cq, fds, &b) == VIP_SUCCESS && b >= 0 && (*bound < 0 || b < *bound))
        *bound = b;
    return fg.joint_fd;
}
