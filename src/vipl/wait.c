/*
 * wait.c - blocking waits, built once for every provider on its
 * prepare/sleep/finish primitives: poll for a short spin budget, arm, poll
 * again (so a completion that raced with arming is not missed), then sleep.
 *
 * The spin is what users of socket accelerators expect from a blocking call
 * (rsockets, libvma and Onload all poll before sleeping): when the answer
 * comes within about what a sleep and wake-up would cost, nobody sleeps;
 * when it does not, the waiter sleeps and an idle waiter burns nothing.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>

#include "core.h"

const struct timespec *vipl_deadline(VIP_ULONG timeout_ms, struct timespec *buf)
{
    if (timeout_ms == VIP_INFINITE || timeout_ms == ULONG_MAX)
        return NULL;
    clock_gettime(CLOCK_MONOTONIC, buf);
    buf->tv_sec += (time_t)(timeout_ms / 1000);
    buf->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (buf->tv_nsec >= 1000000000L) {
        buf->tv_sec++;
        buf->tv_nsec -= 1000000000L;
    }
    return buf;
}

int vipl_ms_left(const struct timespec *deadline)
{
    if (!deadline)
        return -1;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long long ms = (long long)(deadline->tv_sec - now.tv_sec) * 1000 +
                   (deadline->tv_nsec - now.tv_nsec) / 1000000;
    if (ms < 0)
        return 0;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

VIP_RETURN vipl_poll_send(void *obj, void *out1, void *out2)
{
    (void)out2;
    struct vipl_vi *vi = obj;
    return vi->nic->prov->send_done(vi, out1);
}

VIP_RETURN vipl_poll_recv(void *obj, void *out1, void *out2)
{
    (void)out2;
    struct vipl_vi *vi = obj;
    return vi->nic->prov->recv_done(vi, out1);
}

VIP_RETURN vipl_poll_cq(void *obj, void *out1, void *out2)
{
    struct vipl_cq *cq = obj;
    struct vipl_vi *vi;
    VIP_RETURN r = cq->nic->prov->cq_done(cq, &vi, out2);
    if (r == VIP_SUCCESS)
        *(VIP_VI_HANDLE *)out1 = vi;
    return r;
}

static struct vipl_nic *nic_of_obj(void *obj, enum vipl_queue q)
{
    return q == VIPL_CQ ? ((struct vipl_cq *)obj)->nic : ((struct vipl_vi *)obj)->nic;
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Polls for up to the NIC's spin budget (never past the deadline). */
static VIP_RETURN spin(void *obj, struct vipl_nic *nic, vipl_poll_fn poll, void *out1,
                       void *out2, const struct timespec *deadline)
{
    uint64_t budget = atomic_load_explicit(&nic->wait_spin_ns, memory_order_relaxed);
    if (budget == 0)
        return VIP_NOT_DONE;
    uint64_t end = now_ns() + budget;
    if (deadline) {
        uint64_t dl = (uint64_t)deadline->tv_sec * 1000000000u + (uint64_t)deadline->tv_nsec;
        end = end < dl ? end : dl;
    }
    for (unsigned i = 0;; i++) {
        VIP_RETURN r = poll(obj, out1, out2);
        if (r != VIP_NOT_DONE)
            return r;
        if ((i & 63) == 63 && now_ns() >= end) /* the clock costs more than a poll */
            return VIP_NOT_DONE;
        __builtin_ia32_pause();
    }
}

/* poll(2), by a name the poll callbacks below do not shadow. */
static int poll_fds(struct pollfd *p, nfds_t n, int ms)
{
    return poll(p, n, ms);
}

/* The CQ a queue sleeps on, when it sleeps on a CQ's descriptor. */
static struct vipl_cq *wait_cq(void *obj, enum vipl_queue q)
{
    struct vipl_cq *cq = obj;
    if (q != VIPL_CQ) {
        struct vipl_vi *vi = obj;
        cq = q == VIPL_RECVQ ? vi->recv_cq : vi->send_cq;
    }
    return cq && cq->nic->prov->cq_wait_fd(cq) >= 0 ? cq : NULL;
}

/* Sleeps on the CQ with the process's other sleepers (waiters.c): no
 * thread takes another's wake-up, so no sleep needs a time slice. */
static VIP_RETURN cq_sleep(struct vipl_cq *cq, vipl_poll_fn poll, void *parg, void *out1,
                           void *out2, const struct timespec *deadline)
{
    vipl_cq_arm(cq);
    VIP_RETURN r = poll(parg, out1, out2);
    if (r != VIP_NOT_DONE) {
        vipl_cq_disarm(cq);
        return r;
    }
    struct pollfd p[2] = {{.fd = cq->nic->prov->cq_wait_fd(cq), .events = POLLIN},
                          {.fd = vipl_waiter_fd(vipl_waiter_self()), .events = POLLIN}};
    int left = vipl_ms_left(deadline), bound = vipl_cq_sleep_bound(cq, p[1].fd);
    if (bound >= 0 && (left < 0 || left > bound))
        left = bound;
    int rc = poll_fds(p, 2, left);
    vipl_cq_disarm(cq);
    return rc == 0 && vipl_ms_left(deadline) == 0 ? VIP_TIMEOUT : VIP_NOT_DONE;
}

VIP_RETURN vipl_sleep_once(void *obj, enum vipl_queue q, vipl_poll_fn poll, void *parg,
                           void *out1, void *out2, const struct timespec *deadline)
{
    struct vipl_cq *cq = wait_cq(obj, q);
    if (cq)
        return cq_sleep(cq, poll, parg, out1, out2, deadline);
    const struct vipl_provider *prov = nic_of_obj(obj, q)->prov;
    uint32_t token = prov->wait_prepare(obj, q);
    VIP_RETURN r = poll(parg, out1, out2);
    if (r != VIP_NOT_DONE) {
        prov->wait_finish(obj, q);
        return r;
    }
    int rc = prov->wait_sleep(obj, q, token, deadline);
    prov->wait_finish(obj, q);
    return rc == -ETIMEDOUT ? VIP_TIMEOUT : VIP_NOT_DONE;
}

VIP_RETURN vipl_wait(void *obj, enum vipl_queue q, VIP_ULONG timeout_ms, vipl_poll_fn poll,
                     void *out1, void *out2)
{
    VIP_RETURN r = poll(obj, out1, out2);
    if (r != VIP_NOT_DONE)
        return r;
    struct vipl_nic *nic = nic_of_obj(obj, q);
    struct timespec buf;
    const struct timespec *deadline = vipl_deadline(timeout_ms, &buf);
    r = spin(obj, nic, poll, out1, out2, deadline);
    while (r == VIP_NOT_DONE) {
        r = vipl_sleep_once(obj, q, poll, obj, out1, out2, deadline); /* may find it */
        if (r == VIP_NOT_DONE || r == VIP_TIMEOUT) {
            VIP_RETURN now = poll(obj, out1, out2);
            r = now != VIP_NOT_DONE ? now : r;
        }
    }
    return r == VIP_TIMEOUT ? VIP_TIMEOUT : r;
}

VIPL_EXPORT VIP_RETURN VipSendWait(VIP_VI_HANDLE ViHandle, VIP_ULONG Timeout,
                                   VIP_DESCRIPTOR **DescriptorPtr)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi || !DescriptorPtr)
        return VIP_INVALID_PARAMETER;
    return vipl_wait(vi, VIPL_SENDQ, Timeout, vipl_poll_send, DescriptorPtr, NULL);
}

VIPL_EXPORT VIP_RETURN VipRecvWait(VIP_VI_HANDLE ViHandle, VIP_ULONG Timeout,
                                   VIP_DESCRIPTOR **DescriptorPtr)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi || !DescriptorPtr)
        return VIP_INVALID_PARAMETER;
    return vipl_wait(vi, VIPL_RECVQ, Timeout, vipl_poll_recv, DescriptorPtr, NULL);
}
