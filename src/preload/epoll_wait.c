/*
 * epoll_wait.c - waiting on an epoll set with carried entries (epoll.c
 * keeps the sets and scans them; the top of that file says how a wait
 * goes).
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>

#include <sovia.h>

#include "epset.h"
#include "pollwait.h"
#include "preload.h"
#include "sock.h"
#include "waits.h"

#define KERNEL_EVERY 64  /* spinning: rounds between looks at the kernel set */
#define KERNEL_QUIET_NS 10000 /* a kernel set found empty is left alone as long */

/* A kernel report for a nested entry: merged with ours if we reported it in
 * this call; a one-shot one is spent on our side too. */
static bool nested_fired(struct epset *s, struct epoll_event ev, struct epoll_event *out, int n0)
{
    bool nested = false;
    pthread_mutex_lock(&s->lock);
    for (unsigned i = 0; i < s->n; i++) {
        struct item *it = &s->v[i];
        if (it->kind == NESTED && it->data.u64 == ev.data.u64) {
            nested = true;
            if (it->events & EPOLLONESHOT)
                it->disabled = true;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return nested && eps_merge(out, n0, ev.data, ev.events);
}

/* The kernel set's ready entries (zero timeout) into out[n..max), without
 * our placeholders; returns the new count, or -1. */
static int kernel_events(int epfd, struct epset *s, struct epoll_event *out, int n, int max)
{
    int k = real.epoll_wait(epfd, out + n, max - n, 0);
    if (k < 0)
        return -1;
    bool nested = atomic_load(&s->nnested) != 0;
    int n0 = n, end = n + k;
    for (int i = n0; i < end; i++) {
        struct epoll_event ev = out[i];
        if (eps_placeholder(ev.data) || (nested && nested_fired(s, ev, out, n0)))
            continue;
        out[n++] = ev;
    }
    atomic_store_explicit(&s->kernel_quiet, n == n0 && end < max, memory_order_relaxed);
    atomic_store_explicit(&s->kernel_owed, false, memory_order_relaxed);
    atomic_store_explicit(&s->kernel_seen_ns, sov_now_ns(), memory_order_relaxed);
    return n;
}

enum ask { ASK_NOT, ASK_IF_ANY, ASK_ALWAYS };

/* One look at everything: carried and nested entries, and the kernel set
 * if asked (ASK_IF_ANY: if it holds anything but placeholders). */
static int harvest(int epfd, struct epset *s, struct epoll_event *out, int max, enum ask ask,
                   bool kernel_first, bool *pending)
{
    bool kernel = ask == ASK_ALWAYS || (ask == ASK_IF_ANY && (atomic_load(&s->nkernel) > 0 ||
                                                              atomic_load(&s->kernel_unknown)));
    int n = 0;
    if (kernel && kernel_first && (n = kernel_events(epfd, s, out, 0, max)) < 0)
        return -1;
    n = eps_scan(epfd, s, out, n, max, pending);
    if (kernel && !kernel_first && n < max)
        n = kernel_events(epfd, s, out, n, max);
    return n;
}

/* May a sleeper on the set be woken by its kernel set? Not when it holds
 * only placeholders of carried sockets (polling it cost a tenth of a
 * sleeping round trip's system time): then the doorbells alone wake it. */
static bool kernel_may(struct epset *s)
{
    return atomic_load(&s->nkernel) > 0 || atomic_load(&s->kernel_unknown) ||
           atomic_load(&s->nnested) > 0;
}

/* ---- A futex sleep --------------------------------------------------------
 *
 * A set of carried connections alone (no kernel entry, no nested set, each
 * paired and handled in the caller's thread), at most FUTEX_VIS of them:
 * the thread sleeps on their VIs' own words and its own (VipxSleepWords),
 * which their peers wake with one FUTEX_WAKE instead of a datagram to the
 * CQ's descriptor that the sleeper then drains (a sleeping round trip's
 * largest cost). The process's ringers (an entry that joins, a close) and
 * signal handlers ring the thread's own word. */
#define FUTEX_VIS SOV_FUTEX_CONNS
#define FUTEX_RETRY_NS 10000000 /* a set that did not fit is tried again after */

/* Counts the thread into each entry's connection, whose VI then stays
 * (sov_conn_destroy waits), and arms its word. false: some entry does not
 * qualify, or a lock is busy (a closer may hold it and wait for another
 * sleeper): nothing is held then. The caller is counted asleep already. */
static bool futex_hold(struct epset *s, struct sov_futex_sleep *f)
{
    f->nc = 0;
    f->bound = -1;
    bool busy = false;
    if (atomic_load(&s->nnested) > 0 || !eps_look_lock(s, &busy))
        return false;
    bool ok = s->n <= FUTEX_VIS, unfit = !ok;
    for (unsigned i = 0; ok && i < s->n; i++) {
        struct item *it = &s->v[i];
        if (it->disabled)
            continue;
        struct sov_sock *k = it->kind == CARRIED ? sov_lookup(it->fd) : NULL;
        if (!k || !sov_sock_trylock(k)) {
            unfit = !k;
            ok = false;
            break;
        }
        struct sov_conn *c = k->conn;
        ok = !k->dead && sov_lookup(it->fd) == k && c && c->vi &&
             c->cfg.handling == SOV_SINGLE && !k->tp_waiting;
        unfit = !ok;
        ok = ok && sov_futex_hold(f, c);
        sov_sock_unlock(k);
    }
    eps_look_unlock(s);
    if (!ok || f->nc == 0) {
        sov_futex_let_go(f);
        if (unfit || f->nc == 0) /* a listener, a fallen-back socket: not every sleep */
            atomic_store(&s->futex_after_ns, sov_now_ns() + FUTEX_RETRY_NS);
        return false;
    }
    return true;
}

/* One sleep of wait_active's up to `ms` on a set that may qualify
 * (futex_hold): counted asleep first, it looks at everything (an entry
 * that joined, a ring, before the count), then holds and arms the VIs
 * without waiting for a lock (their arming looks at their queues). 1 if it
 * slept or found entries (*n, *pending), 0 if the caller must sleep its
 * usual way, -1 with EINTR. */
static int futex_doze(int epfd, struct epset *s, struct epoll_event *out, int max, int ms,
                      bool kernel_first, bool *pending, const struct sov_sigwatch *sig, int *n)
{
    struct sov_futex_sleep f;
    if (!SOV_FUTEX_SLEEPS || VipxSleepArm(&f.w[0]) != VIP_SUCCESS)
        return 0;
    *n = harvest(epfd, s, out, max, ASK_IF_ANY, kernel_first, pending);
    if (*n || *pending) {
        VipxSleepDisarm();
        return 1;
    }
    if (!futex_hold(s, &f)) {
        VipxSleepDisarm();
        return 0;
    }
    return sov_futex_sleep(&f, ms, sig);
}

/* epoll_wait on a set with carried entries. The kernel set is asked in the
 * first look, so that one call reports every entry ready when it began,
 * unless the last look found it empty less than KERNEL_QUIET_NS ago (a
 * system call costs about as much as a sovia round trip, and a program
 * waiting for its next message calls again and again). A call that returns
 * at once without asking (carried entries ready, or a zero timeout) makes
 * the next one ask: a busy carried socket delays a ready kernel descriptor
 * by one call at most. While spinning, the kernel set is asked every KERNEL_EVERY
 * rounds. */
static int wait_active(int epfd, struct epset *s, struct epoll_event *out, int max, int timeout,
                       const sigset_t *mask)
{
    if (max <= 0 || max > (int)(INT_MAX / sizeof(struct epoll_event))) {
        errno = EINVAL;
        return -1;
    }
    if (!out) {
        errno = EFAULT;
        return -1;
    }
    struct sov_sigwatch sig = sov_sigwatch_start();
    unsigned turn = atomic_load_explicit(&s->turn, memory_order_relaxed);
    atomic_store_explicit(&s->turn, turn + 1, memory_order_relaxed); /* a lost turn is no harm */
    bool kernel_first = turn & 1, pending = false;
    uint64_t start = sov_now_ns();
    bool ask = !atomic_load_explicit(&s->kernel_quiet, memory_order_relaxed) ||
               atomic_load_explicit(&s->kernel_owed, memory_order_relaxed) ||
               start - atomic_load_explicit(&s->kernel_seen_ns, memory_order_relaxed) >=
                   KERNEL_QUIET_NS;
    int n = harvest(epfd, s, out, max, ask ? ASK_IF_ANY : ASK_NOT, kernel_first, &pending);
    if ((n > 0 || timeout == 0) && !ask)
        atomic_store_explicit(&s->kernel_owed, true, memory_order_relaxed);
    if (n != 0 || timeout == 0) /* the kernel's epoll does not fail a call that did not wait */
        return n;
    sigset_t old;
    if (mask) /* nothing ready: the call's mask from now on, as the kernel's */
        pthread_sigmask(SIG_SETMASK, mask, &old);
    uint64_t spin_ns = sov_poll_spin_ns();
    for (unsigned round = 1;; round++) {
        if (sov_sigwatch_fired(&sig)) { /* a handler ran: EINTR, as the kernel */
            n = -1;
            errno = EINTR;
            break;
        }
        /* The clock every round, also while spinning: a tighter loop (or a
         * pause instruction) made the round trip slower. */
        uint64_t now = sov_now_ns();
        long left_ms = timeout < 0 ? -1 : timeout - (long)((now - start) / 1000000);
        if (timeout > 0 && left_ms <= 0)
            break;
        if (now - start < spin_ns && (spin_ns == UINT64_MAX || sov_spin_pays(now))) {
            n = harvest(epfd, s, out, max, round % KERNEL_EVERY ? ASK_NOT : ASK_IF_ANY,
                        kernel_first, &pending);
            if (n)
                break;
            continue;
        }
        /* Sleep: count in (an entry added from now on wakes us), arm, look
         * once more (a packet may have raced the arming), then poll the
         * doorbells, and the set if it may hold kernel entries (an entry
         * added meanwhile rings them: count_kernel, ctl_carried). */
        atomic_fetch_add(&s->sleepers, 1);
        int slept = 0;
        if (!kernel_may(s) && !pending && atomic_load(&s->ncarried) <= FUTEX_VIS &&
            now >= atomic_load_explicit(&s->futex_after_ns, memory_order_relaxed))
            slept = futex_doze(epfd, s, out, max, (int)left_ms, kernel_first, &pending, &sig, &n);
        if (slept) {
            atomic_fetch_sub(&s->sleepers, 1);
            if (slept < 0) {
                n = -1;
                break;
            }
            if (n)
                break;
            pending = false;
            n = harvest(epfd, s, out, max, ASK_IF_ANY, kernel_first, &pending);
            if (n)
                break;
            continue;
        }
        sov_cq_arm();
        n = harvest(epfd, s, out, max, ASK_IF_ANY, kernel_first, &pending);
        if (n) {
            sov_cq_disarm(false); /* did not sleep */
            atomic_fetch_sub(&s->sleepers, 1);
            break;
        }
        int slice = pending && (left_ms < 0 || left_ms > 2) ? 2 : (int)left_ms;
        struct pollfd p[3] = {{.fd = epfd, .events = POLLIN}};
        nfds_t nk = kernel_may(s) ? 1 : 0;
        int rc = sov_poll_doze(p + 1 - nk, nk, slice, &sig);
        atomic_fetch_sub(&s->sleepers, 1);
        sov_doze_disarm(&p[1], rc);
        if (rc < 0 && errno == EINTR) {
            n = -1;
            break;
        }
        /* Woken: look before arming again (a wake-up usually means a
         * packet). The set readable: harvest it, even if it should hold
         * only placeholders (one reporting a hang-up would wake us
         * forever). */
        pending = false;
        n = harvest(epfd, s, out, max, nk && rc > 0 && p[0].revents ? ASK_ALWAYS : ASK_IF_ANY,
                    kernel_first, &pending);
        if (n)
            break;
    }
    if (mask) {
        int err = errno;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        errno = err;
    }
    return n;
}

/* The kernel's own wait, for a set without carried entries, minus our
 * placeholders; one of those alone means a carried socket joined the set
 * meanwhile (its placeholder woke us): wait our way. */
static int wait_kernel(int epfd, struct epset *s, struct epoll_event *out, int max, int timeout,
                       const sigset_t *mask, bool pwait)
{
    if (timeout != 0) {
        atomic_fetch_add(&s->sleepers, 1);
        if (eps_active(s)) { /* joined just now: see ctl_carried */
            atomic_fetch_sub(&s->sleepers, 1);
            return wait_active(epfd, s, out, max, timeout, mask);
        }
    }
    uint64_t start = sov_now_ns();
    int k = pwait ? real.epoll_pwait(epfd, out, max, timeout, mask)
                  : real.epoll_wait(epfd, out, max, timeout);
    if (timeout != 0)
        atomic_fetch_sub(&s->sleepers, 1);
    if (k <= 0)
        return k;
    int n = 0;
    for (int i = 0; i < k; i++)
        if (!eps_placeholder(out[i].data))
            out[n++] = out[i];
    if (n || timeout == 0)
        return n;
    if (timeout > 0) {
        uint64_t waited_ms = (sov_now_ns() - start) / 1000000u;
        if (waited_ms >= (uint64_t)timeout)
            return 0;
        timeout -= (int)waited_ms;
    }
    return wait_active(epfd, s, out, max, timeout, mask);
}

PRELOAD_EXPORT int epoll_wait(int epfd, struct epoll_event *out, int max, int timeout)
{
    preload_ready();
    struct epset *s = eps_of(epfd);
    if (!s)
        return real.epoll_wait(epfd, out, max, timeout);
    if (eps_active(s))
        return wait_active(epfd, s, out, max, timeout, NULL);
    return wait_kernel(epfd, s, out, max, timeout, NULL, false);
}

PRELOAD_EXPORT int epoll_pwait(int epfd, struct epoll_event *out, int max, int timeout,
                               const sigset_t *mask)
{
    preload_ready();
    struct epset *s = eps_of(epfd);
    if (!s)
        return real.epoll_pwait(epfd, out, max, timeout, mask);
    if (eps_active(s))
        return wait_active(epfd, s, out, max, timeout, mask);
    return wait_kernel(epfd, s, out, max, timeout, mask, true);
}

/* The timeout rounds up to whole milliseconds, as epoll_pwait's does. */
PRELOAD_EXPORT int epoll_pwait2(int epfd, struct epoll_event *out, int max,
                                const struct timespec *t, const sigset_t *mask)
{
    preload_ready();
    struct epset *s = eps_of(epfd);
    if (!s) {
        if (!real.epoll_pwait2) {
            errno = ENOSYS;
            return -1;
        }
        return real.epoll_pwait2(epfd, out, max, t, mask);
    }
    if (!timespec_valid(t)) {
        errno = EINVAL;
        return -1;
    }
    return epoll_pwait(epfd, out, max, timespec_ms(t), mask);
}

