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
 * receive queue attached to a CQ sleeps on the CQ instead, so one wake-up
 * serves a CQ waiter and VipRecvWait alike. A CQ sleeps in poll() on a
 * datagram socketpair rather than a futex, so its waiters can wait on other
 * descriptors at the same time (VipxCQWaitFd); wakers send one byte with
 * MSG_DONTWAIT, which cannot block whatever a hostile peer does.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/socket.h>
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
        return (struct shm_wake){cq->armed, NULL, true, cq->wake_rx, cq->wake_tx};
    }
    struct shm_vi *vi = obj;
    if (q == VIPL_SENDQ) {
        if (vi->core.send_cq)
            return shm_wake_of(vi->core.send_cq, VIPL_CQ);
        return (struct shm_wake){&vi->sq_armed, &vi->sq_word, false, -1, -1};
    }
    if (vi->core.recv_cq)
        return shm_wake_of(vi->core.recv_cq, VIPL_CQ);
    return (struct shm_wake){&vi->ctl->live.recv_armed, &vi->rx->live.wake_seq, true, -1, -1};
}

static void ring(_Atomic uint32_t *word, bool shared, int sock)
{
    if (sock >= 0) {
        char one = 1; /* a full socket buffer already means "wake up" */
        send(sock, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    } else {
        atomic_fetch_add_explicit(word, 1, memory_order_release);
        futex_wake(word, shared);
    }
}

void shm_wake_local(struct shm_wake w)
{
    shm_full_barrier();
    if (atomic_load_explicit(w.armed, memory_order_relaxed))
        ring(w.word, w.shared, w.sock_tx);
}

void shm_wake_peer(struct shm_peer *peer)
{
    shm_full_barrier();
    if (atomic_load_explicit(peer->wake_armed, memory_order_relaxed))
        ring(peer->wake_word, true, peer->wake_sock);
}

static void drain(int sock)
{
    char buf[64];
    while (recv(sock, buf, sizeof(buf), MSG_DONTWAIT) > 0)
        ;
}

uint32_t shm_wait_prepare(void *obj, enum vipl_queue q)
{
    struct shm_wake w = shm_wake_of(obj, q);
    atomic_fetch_add_explicit(w.armed, 1, memory_order_seq_cst);
    if (w.sock >= 0) {
        drain(w.sock); /* wake-ups from before we armed; later ones stay */
        return 0;
    }
    return atomic_load_explicit(w.word, memory_order_seq_cst);
}

int shm_wait_sleep(void *obj, enum vipl_queue q, uint32_t token, const struct timespec *dl)
{
    struct shm_wake w = shm_wake_of(obj, q);
    if (w.sock >= 0) {
        /* Several threads may wait on one CQ, and the one that drains the
         * wake-up socket can leave another asleep: sleep in slices so such
         * a loss costs at most one slice. (Per-waiter wake-ups would remove
         * it; see the notes in ARCHITECTURE.md.) */
        int left = vipl_ms_left(dl);
        struct pollfd pfd = {.fd = w.sock, .events = POLLIN};
        int rc = poll(&pfd, 1, left < 0 || left > 10 ? 10 : left);
        return rc == 0 && left >= 0 && left <= 10 ? -ETIMEDOUT : 0;
    }
    int rc = futex_wait(w.word, token, dl, w.shared);
    return rc == -ETIMEDOUT ? -ETIMEDOUT : 0;
}

void shm_wait_finish(void *obj, enum vipl_queue q)
{
    struct shm_wake w = shm_wake_of(obj, q);
    /* Never below zero: a stray disarm must not leave the flag "armed"
     * (wrapped) forever, which would stop every later wake-up. */
    uint32_t a = atomic_load_explicit(w.armed, memory_order_relaxed);
    while (a && !atomic_compare_exchange_weak_explicit(w.armed, &a, a - 1, memory_order_relaxed,
                                                       memory_order_relaxed))
        ;
}

void shm_wait_wake(void *obj, enum vipl_queue q)
{
    struct shm_wake w = shm_wake_of(obj, q);
    ring(w.word, w.shared, w.sock_tx);
}
