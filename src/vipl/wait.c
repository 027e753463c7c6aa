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

VIP_RETURN vipl_wait(void *obj, enum vipl_queue q, VIP_ULONG timeout_ms, vipl_poll_fn poll,
                     void *out1, void *out2)
{
    VIP_RETURN r = poll(obj, out1, out2);
    if (r != VIP_NOT_DONE)
        return r;
    struct vipl_nic *nic = nic_of_obj(obj, q);
    const struct vipl_provider *prov = nic->prov;
    struct timespec buf;
    const struct timespec *deadline = vipl_deadline(timeout_ms, &buf);
    r = spin(obj, nic, poll, out1, out2, deadline);
    if (r != VIP_NOT_DONE)
        return r;
    for (;;) {
        uint32_t token = prov->wait_prepare(obj, q);
        r = poll(obj, out1, out2);
        if (r != VIP_NOT_DONE) {
            prov->wait_finish(obj, q);
            return r;
        }
        int rc = prov->wait_sleep(obj, q, token, deadline);
        prov->wait_finish(obj, q);
        r = poll(obj, out1, out2);
        if (r != VIP_NOT_DONE)
            return r;
        if (rc == -ETIMEDOUT)
            return VIP_TIMEOUT;
    }
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
