/*
 * waiters.c - the threads of this process that sleep on a completion queue.
 *
 * A CQ wakes its process through one descriptor (the provider's wait fd,
 * which peers write a byte to). Every thread asleep on the CQ polls it, and
 * whoever drains it may take a wake-up meant for another: the kernel's poll
 * looks at readiness again after waking a sleeper, so a sleeper whose byte
 * was drained by someone else goes back to sleep (several workers of one
 * server lost wake-ups this way and slept out 10-20 ms slices). So each
 * sleeping thread also polls a doorbell of its own (an eventfd), and the
 * thread that drains the CQ's descriptor rings the doorbell of every other
 * thread asleep at that moment. A sleeper counts itself asleep before its
 * last look for work, so one the ringer does not see yet has already seen
 * the completions the drained byte stood for.
 *
 * A thread's doorbell is closed when it exits, once no ringer is using it
 * (ringers count themselves in); the structure stays in its slot for the
 * next thread. A forked child closes its copies of the parent's doorbells
 * (ringing them would wake the parent's threads) and makes its own when it
 * needs them.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core.h"

#define WAITERS_MAX 1024u
#define WORDS (WAITERS_MAX / 64u)

struct vipl_waiter {
    atomic_int efd;     /* -1 while no thread owns it */
    atomic_uint ringing; /* ringers using efd right now */
    unsigned index;
    unsigned gen; /* the fork generation of the owner */
    _Atomic bool rung;
    atomic_bool owned;  /* a thread uses it */
    unsigned depth;     /* the owner's arms in progress (owner only) */
    /* A futex sleep (sleep.c): the owner sleeps on `word` (with its VIs'
     * words) rather than polling efd; a ring bumps and wakes it. */
    _Atomic uint32_t word;
    atomic_bool futexing;
};

static _Atomic(struct vipl_waiter *) slots[WAITERS_MAX];
static _Atomic uint64_t asleep[WORDS];
static atomic_uint fork_gen;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_key_t key;
static bool init_done;
/* initial-exec: every sleep and wake-up asks (__tls_get_addr was 0.4 % of
 * a crowded host's CPU); libvipl is loaded with the program or the preload */
static _Thread_local struct vipl_waiter *mine __attribute__((tls_model("initial-exec")));

static void release(void *p)
{
    struct vipl_waiter *w = p;
    if (w->gen != atomic_load(&fork_gen))
        return; /* the parent's, gone with the fork */
    atomic_fetch_and(&asleep[w->index / 64], ~(1ull << (w->index % 64)));
    w->depth = 0;
    atomic_store(&w->futexing, false);
    int fd = atomic_exchange(&w->efd, -1);
    while (atomic_load(&w->ringing))
        sched_yield(); /* a ringer between its look at efd and its write */
    if (fd >= 0)
        VipxFdClose(fd);
    atomic_store(&w->rung, false);
    atomic_store(&w->owned, false);
}

/* The parent's doorbells are closed already: fdguard's fork handler, the
 * first, closes them (vipl_fd_fork_close). Closed here by number, after
 * the other handlers, one whose number was free in the child (the parent
 * held a stale one) was by then the CQ's new wake-up socket (shm_cq.c
 * rebirth): the exec'd child's export failed with EBADF, and the spawner's
 * close ended the connection (tests/preload/spawn.c under ASan). */
static void forked_child(void)
{
    atomic_fetch_add(&fork_gen, 1);
    for (unsigned i = 0; i < WORDS; i++)
        atomic_store(&asleep[i], 0);
    for (unsigned i = 0; i < WAITERS_MAX; i++)
        free(atomic_exchange(&slots[i], NULL));
    mine = NULL; /* this thread's was one of them */
    if (init_done)
        pthread_setspecific(key, NULL);
}

static void init(void)
{
    init_done = pthread_key_create(&key, release) == 0;
    pthread_atfork(NULL, NULL, forked_child);
}

/* A free slot's waiter, or a new one in an empty slot, with a doorbell. */
static struct vipl_waiter *claim(void)
{
    int fd = vipl_fd_eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0)
        return NULL;
    vipl_fd_fork_close(fd); /* a fork just before this leaves the child a copy */
    unsigned gen = atomic_load(&fork_gen);
    for (unsigned i = 0; i < WAITERS_MAX; i++) {
        struct vipl_waiter *w = atomic_load(&slots[i]);
        bool free_ = false;
        if (w && atomic_compare_exchange_strong(&w->owned, &free_, true)) {
            w->gen = gen;
            atomic_store(&w->efd, fd);
            return w;
        }
    }
    for (unsigned i = 0; i < WAITERS_MAX; i++) {
        if (atomic_load(&slots[i]))
            continue;
        struct vipl_waiter *w = calloc(1, sizeof(*w));
        if (!w)
            break;
        w->index = i;
        w->gen = gen;
        atomic_init(&w->efd, fd);
        atomic_init(&w->owned, true);
        struct vipl_waiter *none = NULL;
        if (atomic_compare_exchange_strong(&slots[i], &none, w))
            return w;
        free(w);
    }
    VipxFdClose(fd);
    return NULL; /* more sleepers than slots: that thread sleeps in slices */
}

struct vipl_waiter *vipl_waiter_self(void)
{
    struct vipl_waiter *w = mine;
    if (w && w->gen == atomic_load_explicit(&fork_gen, memory_order_relaxed))
        return w;
    pthread_once(&once, init);
    mine = w = claim();
    if (w)
        pthread_setspecific(key, w);
    return w;
}

int vipl_waiter_fd(const struct vipl_waiter *w)
{
    return w ? atomic_load_explicit(&w->efd, memory_order_relaxed) : -1;
}

/* Counted asleep from the first arm to the last disarm of the thread. */
void vipl_waiter_arm(struct vipl_waiter *w)
{
    if (w && w->depth++ == 0)
        atomic_fetch_or(&asleep[w->index / 64], 1ull << (w->index % 64));
}

void vipl_waiter_disarm(struct vipl_waiter *w)
{
    if (!w || w->depth == 0)
        return;
    if (--w->depth == 0)
        atomic_fetch_and(&asleep[w->index / 64], ~(1ull << (w->index % 64)));
    /* Cleared before the read: a ring after it leaves the doorbell
     * readable for the next sleep (one spurious wake-up), never lost. */
    if (atomic_exchange(&w->rung, false)) {
        uint64_t v;
        if (read(atomic_load_explicit(&w->efd, memory_order_relaxed), &v, sizeof(v)) < 0) {
            /* the ringer has not written yet: its write wakes the next sleep */
        }
    }
}

static void futex_wake_private(_Atomic uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, INT_MAX, NULL, NULL, 0);
}

/* The word bumped before the mode is read, the mode set before the token
 * is read (vipl_waiter_sleep_arm): a ringer that does not see a futex
 * sleeper has bumped the word before its token, so its sleep does not
 * begin. The doorbell is rung as well: a signal handler may poll in a
 * sleep nested in the futex sleep it interrupted. */
static void ring(struct vipl_waiter *w)
{
    atomic_fetch_add(&w->ringing, 1);
    atomic_fetch_add_explicit(&w->word, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&w->futexing, memory_order_seq_cst))
        futex_wake_private(&w->word);
    int fd = atomic_load(&w->efd);
    if (fd >= 0 && !atomic_exchange(&w->rung, true)) { /* not rung since it last looked */
        uint64_t one = 1;
        if (write(fd, &one, sizeof(one)) < 0) {
            /* the counter cannot overflow from ones; nothing else can fail */
        }
    }
    atomic_fetch_sub(&w->ringing, 1);
}

void vipl_waiters_ring(const struct vipl_waiter *except)
{
    for (unsigned i = 0; i < WORDS; i++) {
        uint64_t bits = atomic_load(&asleep[i]);
        while (bits) {
            unsigned b = (unsigned)__builtin_ctzll(bits);
            bits &= bits - 1;
            struct vipl_waiter *w = atomic_load(&slots[i * 64 + b]);
            if (w && w != except)
                ring(w);
        }
    }
}

/* A futex sleep: counted asleep (rings bump and wake `word`), and the
 * word's value before the caller's last look. */
uint32_t vipl_waiter_sleep_arm(struct vipl_waiter *w)
{
    atomic_store_explicit(&w->futexing, true, memory_order_seq_cst);
    vipl_waiter_arm(w);
    return atomic_load_explicit(&w->word, memory_order_seq_cst);
}

void vipl_waiter_sleep_disarm(struct vipl_waiter *w)
{
    vipl_waiter_disarm(w);
    atomic_store_explicit(&w->futexing, false, memory_order_seq_cst);
}

_Atomic uint32_t *vipl_waiter_word(struct vipl_waiter *w)
{
    return &w->word;
}

/* From a signal handler: only the thread's own waiter, atomics and a
 * system call. */
void vipl_waiter_ring_self(void)
{
    struct vipl_waiter *w = mine;
    if (!w || w->gen != atomic_load_explicit(&fork_gen, memory_order_relaxed))
        return;
    atomic_fetch_add_explicit(&w->word, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&w->futexing, memory_order_seq_cst)) {
        int err = errno;
        futex_wake_private(&w->word);
        errno = err;
    }
}
