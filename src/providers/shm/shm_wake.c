/*
 * shm_wake.c - sleeping and waking with futexes.
 *
 * A sleeper increments `armed`, takes the current `word` as its token,
 * re-checks for completions and sleeps while `word` still equals the token.
 * A waker publishes its completion, then (after a full fence) reads `armed`
 * and, only if someone sleeps, bumps `word` and calls FUTEX_WAKE. Either the
 * sleeper sees the completion or the waker sees the sleeper: no lost wake-up,
 * and no system call at all while nobody sleeps.
 *
 * For a receive queue the armed flag is in the owner's ctl segment (the peer
 * can read but not clear it) and the word in the owner's rx segment. A
 * receive queue attached to a CQ sleeps on the CQ's pages instead, so one
 * word wakes a CQ waiter and VipRecvWait alike.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shm.h"

static int futex_wait(_Atomic uint32_t *word, uint32_t val, const struct timespec *deadline,
                      bool shared)
{
    int op = FUTEX_WAIT_BITSET | (shared ? 0 : FUTEX_PRIVATE_FLAG);
    long rc = syscall(SYS_futex, word, op, val, deadline, NULL, FUTEX_BITSET_MATCH_ANY);
    return rc == 0 ? 0 : -errno;
}

static void futex_wake(_Atomic uint32_t *word, bool shared)
{
    int op = FUTEX_WAKE | (shared ? 0 : FUTEX_PRIVATE_FLAG);
    syscall(SYS_futex, word, op, INT_MAX, NULL, NULL, 0);
}

struct shm_wake shm_wake_of(void *obj, enum vipl_queue q)
{
    if (q == VIPL_CQ) {
        struct shm_cq *cq = obj;
        return (struct shm_wake){cq->armed, cq->word, true};
    }
    struct shm_vi *vi = obj;
    if (q == VIPL_SENDQ) {
        if (vi->core.send_cq)
            return shm_wake_of(vi->core.send_cq, VIPL_CQ);
        return (struct shm_wake){&vi->sq_armed, &vi->sq_word, false};
    }
    if (vi->core.recv_cq)
        return shm_wake_of(vi->core.recv_cq, VIPL_CQ);
    return (struct shm_wake){&vi->ctl->live.recv_armed, &vi->rx->live.wake_seq, true};
}

void shm_wake_local(struct shm_wake w)
{
    shm_full_barrier();
    if (atomic_load_explicit(w.armed, memory_order_relaxed)) {
        atomic_fetch_add_explicit(w.word, 1, memory_order_release);
        futex_wake(w.word, w.shared);
    }
}

void shm_wake_peer(struct shm_peer *peer)
{
    shm_full_barrier();
    if (atomic_load_explicit(peer->wake_armed, memory_order_relaxed)) {
        atomic_fetch_add_explicit(peer->wake_word, 1, memory_order_release);
        futex_wake(peer->wake_word, true);
    }
}

uint32_t shm_wait_prepare(void *obj, enum vipl_queue q)
{
    struct shm_wake w = shm_wake_of(obj, q);
    atomic_fetch_add_explicit(w.armed, 1, memory_order_seq_cst);
    return atomic_load_explicit(w.word, memory_order_seq_cst);
}

int shm_wait_sleep(void *obj, enum vipl_queue q, uint32_t token, const struct timespec *dl)
{
    struct shm_wake w = shm_wake_of(obj, q);
    int rc = futex_wait(w.word, token, dl, w.shared);
    return rc == -ETIMEDOUT ? -ETIMEDOUT : 0;
}

void shm_wait_finish(void *obj, enum vipl_queue q)
{
    struct shm_wake w = shm_wake_of(obj, q);
    atomic_fetch_sub_explicit(w.armed, 1, memory_order_relaxed);
}

void shm_wait_wake(void *obj, enum vipl_queue q)
{
    struct shm_wake w = shm_wake_of(obj, q);
    atomic_fetch_add_explicit(w.word, 1, memory_order_release);
    futex_wake(w.word, w.shared);
}
