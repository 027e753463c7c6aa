/*
 * fabric_agent.c - the NIC's agent thread: progress nobody else drives.
 *
 * With manual progress (tcp) a provider moves data and notices a peer's
 * shutdown only inside fi_cq_read/fi_eq_read. A VI whose program is not
 * reading (an RDMA write's target, a connection whose peer died while
 * nobody waits) would never see either, so every FAB_AGENT_MS while the
 * NIC has VIs the agent reads each VI's fi_cqs and event queue: RDMA
 * writes land, and a peer's end turns its VI to ERROR with
 * VIP_ERROR_CONN_LOST reported from this thread, as the shm agent does.
 * A VI the agent is working on is marked (agent_busy) so VipDestroyVi
 * waits for it; the agent never holds the NIC's lock while it works, since
 * the error handler it calls may take it.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "fabric.h"

#define FAB_AGENT_MS 10
#define FAB_AGENT_BATCH 64

struct fab_agent {
    struct vipl_nic *nic;
    pthread_t thread;
    int stop_fd; /* eventfd: written to stop */
};

static __thread bool in_agent;

/* Takes up to `max` VIs of the NIC from the start-th on, marked busy. */
static unsigned collect(struct vipl_nic *nic, unsigned start, struct fab_vi **out, unsigned max)
{
    unsigned n = 0, i = 0;
    pthread_mutex_lock(&nic->lock);
    for (struct vipl_vi *v = nic->vis; v && n < max; v = v->next, i++) {
        if (i < start)
            continue;
        struct fab_vi *vi = fab_vi(v);
        atomic_store(&vi->agent_busy, true);
        out[n++] = vi;
    }
    pthread_mutex_unlock(&nic->lock);
    return n;
}

static void sweep(struct vipl_nic *nic)
{
    struct fab_vi *batch[FAB_AGENT_BATCH];
    unsigned start = 0, n;
    do {
        n = collect(nic, start, batch, FAB_AGENT_BATCH);
        for (unsigned i = 0; i < n; i++) {
            struct fab_vi *vi = batch[i];
            /* (a VI connecting reads its own event queue: not ours to touch) */
            if (vipl_vi_state(&vi->core) == VIP_STATE_CONNECTED &&
                __atomic_load_n(&vi->ep, __ATOMIC_ACQUIRE)) { /* (closed by others) */
                if (!atomic_load(&vi->sq.cqx->armed)) /* a waiter progresses it */
                    fab_cqx_progress(vi->sq.cqx);
                if (vi->rq.cqx != vi->sq.cqx && !atomic_load(&vi->rq.cqx->armed))
                    fab_cqx_progress(vi->rq.cqx);
                fab_ep_events(vi);
            }
            atomic_store(&vi->agent_busy, false);
        }
        start += n;
    } while (n == FAB_AGENT_BATCH);
}

static void *agent_main(void *arg)
{
    struct fab_agent *a = arg;
    in_agent = true;
    for (;;) {
        struct pollfd p = {.fd = a->stop_fd, .events = POLLIN};
        pthread_mutex_lock(&a->nic->lock);
        bool idle = a->nic->n_vis == 0;
        pthread_mutex_unlock(&a->nic->lock);
        if (poll(&p, 1, idle ? 100 : FAB_AGENT_MS) > 0)
            break;
        if (!idle)
            sweep(a->nic);
    }
    return NULL;
}

struct fab_agent *fab_agent_start(struct vipl_nic *nic)
{
    struct fab_agent *a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    a->nic = nic;
    a->stop_fd = vipl_fd_eventfd(0, EFD_CLOEXEC);
    if (a->stop_fd < 0) {
        free(a);
        return NULL;
    }
    if (VipxThreadCreate(&a->thread, NULL, agent_main, a) != 0) {
        VipxFdClose(a->stop_fd);
        free(a);
        return NULL;
    }
    return a;
}

void fab_agent_stop(struct fab_agent *a)
{
    uint64_t one = 1;
    if (write(a->stop_fd, &one, sizeof one) != sizeof one)
        abort(); /* an eventfd write of 1 cannot fail */
    pthread_join(a->thread, NULL);
    VipxFdClose(a->stop_fd);
    free(a);
}

void fab_agent_forget(struct fab_vi *vi)
{
    if (in_agent)
        return; /* the error handler, on the agent, destroys the VI it was given */
    while (atomic_load(&vi->agent_busy))
        sched_yield();
}
