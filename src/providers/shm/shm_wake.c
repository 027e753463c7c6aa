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
 * MSG_DONTWAIT, which cannot block whatever a hostile peer does. Several
 * threads asleep on one CQ share that socket: the core passes a wake-up on
 * among them (src/vipl/waiters.c).
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stddef.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
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

/* ---- Wake-up sockets by name --------------------------------------------- */

#define WAKE_PREFIX "sovia-w."

/* The abstract address of wake-up socket `id`: the prefix is ours, so a
 * peer that writes any id into its holder table can make us send a byte
 * only to some sovia process's wake-up socket, never to another program's. */
static socklen_t wake_name(uint64_t id, struct sockaddr_un *a)
{
    static const char hex[] = "0123456789abcdef";
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    char *p = a->sun_path + 1; /* sun_path[0] = 0: abstract */
    memcpy(p, WAKE_PREFIX, sizeof(WAKE_PREFIX) - 1);
    p += sizeof(WAKE_PREFIX) - 1;
    for (int i = 15; i >= 0; i--)
        *p++ = hex[(id >> (4 * i)) & 15];
    return (socklen_t)(p - (char *)a);
}

bool shm_wake_id_of(int rx, uint64_t *id)
{
    struct sockaddr_un a, want;
    socklen_t len = sizeof(a);
    size_t want_len = offsetof(struct sockaddr_un, sun_path) + sizeof(WAKE_PREFIX) + 16;
    if (getsockname(rx, (struct sockaddr *)&a, &len) != 0 || len != want_len)
        return false;
    uint64_t v = 0;
    const char *p = a.sun_path + sizeof(WAKE_PREFIX); /* past the 0 and the prefix */
    for (int i = 0; i < 16; i++) {
        char c = p[i];
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                                            : 16;
        if (d == 16)
            return false;
        v = v << 4 | d;
    }
    if (wake_name(v, &want) != len || memcmp(&want, &a, len) != 0)
        return false;
    *id = v;
    return true;
}

int shm_wake_sockets(int *rx, int *tx, uint64_t *id)
{
    *rx = vipl_fd_socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    *tx = vipl_fd_socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int err = *rx < 0 || *tx < 0 ? -errno : -EADDRINUSE;
    struct sockaddr_un a;
    for (int tries = 0; err == -EADDRINUSE && tries < 16; tries++) {
        uint64_t v = 0;
        if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != sizeof(v) || v == 0)
            continue;
        socklen_t len = wake_name(v, &a);
        if (bind(*rx, (struct sockaddr *)&a, len) == 0)
            err = connect(*tx, (struct sockaddr *)&a, len) == 0 ? 0 : -errno;
        else
            err = -errno;
        *id = v;
    }
    if (err) {
        if (*rx >= 0)
            VipxFdClose(*rx);
        if (*tx >= 0)
            VipxFdClose(*tx);
        *rx = *tx = -1;
    }
    return err;
}

/* One unbound datagram socket per process sends to holders by name. */
static atomic_int ring_sock = -1;

int shm_ring_socket(void)
{
    int s = atomic_load_explicit(&ring_sock, memory_order_acquire);
    if (s >= 0)
        return s;
    int fresh = vipl_fd_socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fresh < 0)
        return -1;
    if (atomic_compare_exchange_strong(&ring_sock, &s, fresh))
        return fresh;
    VipxFdClose(fresh); /* another thread made one first */
    return s;
}

static void ring_named(uint64_t id)
{
    int s = shm_ring_socket();
    if (s < 0)
        return;
    struct sockaddr_un a;
    socklen_t len = wake_name(id, &a);
    char one = 1;
    sendto(s, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&a, len);
}

/* A thread asleep on the VI's own word though the VI is on a CQ
 * (shm_vi_sleep_arm): woken with a futex, no datagram. The word is in the
 * rx segment, which the peer writes anyway; the count is in ctl. */
static void ring_vi_word(const struct shm_ctl *ctl, struct shm_rx *rx)
{
    if (atomic_load_explicit(&ctl->live.futex_armed, memory_order_relaxed))
        ring(&rx->live.wake_seq, true, -1);
}

void shm_wake_peer(struct shm_peer *peer)
{
    shm_full_barrier();
    ring_vi_word(peer->ctl, peer->rx);
    if (atomic_load_explicit(peer->wake_armed, memory_order_relaxed)) {
        if (peer->wake_named || peer->wake_sock >= 0) {
            /* One byte per arming: the sleeper drains and looks at every
             * completion once it wakes, and arms anew before it sleeps
             * again (each byte more was a system call here and a wasted
             * wake-up or read there). A peer of another user: its CQ by
             * name, the arming counted next to the VI's recv_armed. */
            uint64_t e = atomic_load_explicit(&peer->wake_armed[SHM_CQ_EPOCH],
                                              memory_order_relaxed) | 1ull << 32;
            if (atomic_exchange_explicit(&peer->rung_epoch, e, memory_order_relaxed) != e) {
                if (peer->wake_named)
                    ring_named(peer->wake_named);
                else
                    ring(NULL, true, peer->wake_sock);
            }
        } else {
            ring(peer->wake_word, true, -1);
        }
    }
    /* Processes that hold the other end since a fork sleep on CQs of their
     * own (one line, written only when they arm: it stays in our cache). */
    const struct shm_holder *h = peer->ctl->live.holder;
    for (int k = 0; k < SHM_HOLDERS; k++)
        if (atomic_load_explicit(&h[k].armed, memory_order_relaxed)) {
            uint64_t id = atomic_load_explicit(&h[k].id, memory_order_relaxed);
            if (id)
                ring_named(id);
        }
}

/* The CQ's wake-up socket is drained by the core when a sleeper disarms,
 * which then wakes the process's other sleepers (src/vipl/waiters.c): a
 * drain here, at arming, took wake-ups meant for threads already asleep. */
bool shm_cq_wait_drain(struct vipl_cq *ccq)
{
    /* One call takes every byte waiting (usually one: one per arming and
     * peer), where recv() needed a second call to learn there was no more. */
    enum { BATCH = 16 };
    char buf[BATCH];
    struct iovec iov[BATCH];
    struct mmsghdr msgs[BATCH];
    for (int i = 0; i < BATCH; i++) {
        iov[i] = (struct iovec){.iov_base = &buf[i], .iov_len = 1};
        msgs[i] = (struct mmsghdr){.msg_hdr = {.msg_iov = &iov[i], .msg_iovlen = 1}};
    }
    bool any = false;
    int n;
    /* The system call itself: under sovia run, libc's name is the preload
     * library's wrapper, which would look the descriptor up first. */
    while ((n = (int)syscall(SYS_recvmmsg, shm_cq(ccq)->wake_rx, msgs, BATCH, MSG_DONTWAIT,
                             NULL)) > 0) {
        any = true;
        if (n < BATCH)
            break;
    }
    return any;
}

uint32_t shm_wait_prepare(void *obj, enum vipl_queue q)
{
    struct shm_wake w = shm_wake_of(obj, q);
    if (w.sock >= 0) /* a CQ's; before the count: a peer that sees us asleep sees this arming */
        atomic_fetch_add_explicit(&w.armed[SHM_CQ_EPOCH], 1, memory_order_seq_cst);
    atomic_fetch_add_explicit(w.armed, 1, memory_order_seq_cst);
    if (q == VIPL_CQ)
        shm_cq_arm_holders(obj, 1);
    return w.sock >= 0 ? 0 : atomic_load_explicit(w.word, memory_order_seq_cst);
}

/* Futex mode only: a queue on a CQ sleeps in the core (wait.c). */
int shm_wait_sleep(void *obj, enum vipl_queue q, uint32_t token, const struct timespec *dl)
{
    struct shm_wake w = shm_wake_of(obj, q);
    int rc = futex_wait(w.word, token, dl, w.shared);
    return rc == -ETIMEDOUT ? -ETIMEDOUT : 0;
}

void shm_wait_finish(void *obj, enum vipl_queue q)
{
    if (q == VIPL_CQ)
        shm_cq_arm_holders(obj, -1);
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
    if (q == VIPL_RECVQ) {
        struct shm_vi *vi = obj;
        shm_full_barrier();
        ring_vi_word(vi->ctl, vi->rx);
    }
}

/* ---- A VI's own word for a sleeper of a CQ'd VI ------------------------------
 *
 * A thread that waits for a few VIs only (a blocked recv, an epoll set of
 * carried sockets alone) counts itself in each VI's ctl futex_armed, takes
 * rx.wake_seq as its token, looks at the receive queue's head (a completion
 * there makes the token one that cannot match), and sleeps on the words
 * (the core's futex_waitv). The peer, after writing a completion, reads the count and
 * bumps and wakes the word (ring_vi_word): one FUTEX_WAKE instead of the
 * CQ's datagram and its drain. The peer can write the word (rx is its to
 * write) and, for an inheritable VI, the count (ctl is not sealed): it can
 * wake us for nothing or not at all, so such a sleep is bounded (100 ms, as
 * an inheritable CQ's), and the caller looks at its real condition after
 * every wake-up. */
int shm_vi_sleep_arm(struct vipl_vi *cvi, bool arm, _Atomic uint32_t **word, uint32_t *token)
{
    struct shm_vi *vi = shm_vi(cvi);
    _Atomic uint32_t *n = &vi->ctl->live.futex_armed;
    if (!arm) {
        uint32_t a = atomic_load_explicit(n, memory_order_relaxed);
        while (a && !atomic_compare_exchange_weak_explicit(n, &a, a - 1, memory_order_relaxed,
                                                           memory_order_relaxed))
            ;
        return 0;
    }
    /* Counted before the token is taken: a peer that does not see us
     * counted has written its completion before our look after this. */
    atomic_fetch_add_explicit(n, 1, memory_order_seq_cst);
    *word = &vi->rx->live.wake_seq;
    *token = atomic_load_explicit(*word, memory_order_seq_cst);
    /* A completion that came before the count: a token that cannot match
     * (the caller's look may have been before it, and takes no lock now). */
    if (shm_recv_may_be_ready(vi))
        *token = ~*token;
    return vi->inheritable ? 100 : -1;
}

/* The VI's segments are about to be replaced (a disconnect): a sleeper on
 * the old word is woken now, as the new word's wake-up would miss it. */
void shm_vi_sleep_kick(struct shm_vi *vi)
{
    shm_full_barrier();
    ring_vi_word(vi->ctl, vi->rx);
}
