/*
 * sleep.c - a thread's futex sleep on a few VIs' own words.
 *
 * A thread that waits for a few VIs only, with no kernel descriptor to
 * poll (a blocked receive, an epoll set of carried sockets alone), need
 * not sleep on the CQ's descriptor, which a peer wakes with a datagram
 * that the sleeper then drains: it sleeps on each VI's futex word and on
 * its own (futex_waitv), and the peer wakes a word with one FUTEX_WAKE.
 * The thread's own word stands for its doorbell: the process's ringers
 * (VipxWakeWaiters, a waiter that drained the CQ) bump and wake it, and so
 * does a signal handler (VipxWakeSelf), as it writes the doorbell of a
 * sleep in poll. Wake-ups go to every sleeper of a word: none is taken by
 * another.
 *
 * Order: VipxSleepArm, VipxViSleepArm for each VI, look for work, then
 * VipxSleepWords unless there was some, then disarm the VIs and
 * VipxSleepDisarm. A value taken at an arm that changed since makes the
 * sleep return at once.
 */
#include <errno.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "vipl_ext.h"

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif
#ifndef FUTEX2_SIZE_U32
#define FUTEX2_SIZE_U32 0x02
#endif
#ifndef FUTEX2_PRIVATE
#define FUTEX2_PRIVATE FUTEX_PRIVATE_FLAG
#endif

struct waitv { /* the kernel's struct futex_waitv */
    uint64_t val;
    uint64_t uaddr;
    uint32_t flags;
    uint32_t reserved;
};

static atomic_bool no_waitv; /* the kernel has none (before 5.16) */

VIPL_EXPORT VIP_RETURN VipxSleepArm(VIPX_SLEEP_WORD *Self)
{
    if (!Self)
        return VIP_INVALID_PARAMETER;
    struct vipl_waiter *w = atomic_load_explicit(&no_waitv, memory_order_relaxed)
                                ? NULL
                                : vipl_waiter_self();
    if (!w)
        return VIP_ERROR_NOT_SUPPORTED;
    Self->Token = vipl_waiter_sleep_arm(w);
    Self->Word = vipl_waiter_word(w);
    Self->Shared = 0;
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipxSleepDisarm(void)
{
    struct vipl_waiter *w = vipl_waiter_self();
    if (w)
        vipl_waiter_sleep_disarm(w);
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipxViSleepArm(VIP_VI_HANDLE ViHandle, VIP_BOOLEAN Arm,
                                      VIPX_SLEEP_WORD *Word, int *MaxSleepMs)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi || (Arm && (!Word || !MaxSleepMs)))
        return VIP_INVALID_PARAMETER;
    const struct vipl_provider *p = vi->nic->prov;
    if (!p->vi_sleep_arm || !vi->recv_cq)
        return VIP_ERROR_NOT_SUPPORTED;
    if (!Arm) {
        p->vi_sleep_arm(vi, false, NULL, NULL);
        return VIP_SUCCESS;
    }
    _Atomic uint32_t *word = NULL;
    uint32_t token = 0;
    *MaxSleepMs = p->vi_sleep_arm(vi, true, &word, &token);
    Word->Word = word;
    Word->Token = token;
    Word->Shared = 1;
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipxSleepWords(const VIPX_SLEEP_WORD *Words, int Count, int TimeoutMs)
{
    enum { MAX = 128 }; /* the kernel's FUTEX_WAITV_MAX */
    if (!Words || Count <= 0 || Count > MAX)
        return VIP_INVALID_PARAMETER;
    struct waitv v[MAX];
    for (int i = 0; i < Count; i++)
        v[i] = (struct waitv){.val = Words[i].Token,
                              .uaddr = (uint64_t)(uintptr_t)Words[i].Word,
                              .flags = FUTEX2_SIZE_U32 | (Words[i].Shared ? 0 : FUTEX2_PRIVATE)};
    /* Always a deadline: a sleep without one is restarted after a handler
     * (SA_RESTART); the caller's loop sleeps again if it wants longer. */
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    long ms = TimeoutMs < 0 ? 3600 * 1000L : TimeoutMs;
    dl.tv_sec += ms / 1000;
    dl.tv_nsec += (ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    long rc = syscall(SYS_futex_waitv, v, (unsigned)Count, 0u, &dl, CLOCK_MONOTONIC);
    if (rc >= 0)
        return VIP_SUCCESS;
    if (errno == ETIMEDOUT)
        return VIP_TIMEOUT;
    if (errno == ENOSYS) {
        atomic_store_explicit(&no_waitv, true, memory_order_relaxed);
        return VIP_ERROR_NOT_SUPPORTED;
    }
    return VIP_SUCCESS; /* EAGAIN (a word moved), EINTR, EFAULT: look again */
}

VIPL_EXPORT VIP_RETURN VipxWakeSelf(void)
{
    vipl_waiter_ring_self();
    return VIP_SUCCESS;
}
