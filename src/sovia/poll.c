/*
 * poll.c - sov_poll over sovia sockets and kernel descriptors together.
 *
 * Readiness of sovia sockets is computed from their state after handling
 * their completed packets. To sleep, sov_poll arms the completion queue and
 * poll(2)s the kernel descriptors together with the CQ's wake-up descriptor
 * and sovia's event descriptor (connection and close threads signal it).
 * The preload library extends it through hooks (pollwait.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pollwait.h"
#include "sock.h"
#include "transparent.h"

struct sov_poll_hooks sov_poll_hooks;

short sov_sock_revents(struct sov_sock *s, short events)
{
    short r = 0;
    switch (s->kind) {
    case SK_LISTENING:
        if (sov_accept_ready(s))
            r |= POLLIN;
        break;
    case SK_CONNECTING:
        break;
    case SK_NEW:
        /* Unconnected (or a failed non-blocking connect): as TCP. */
        r |= POLLOUT | POLLHUP;
        if (s->so_error)
            r |= POLLERR;
        break;
    case SK_CONNECTED: {
        sov_progress(s);
        struct sov_conn *c = s->conn;
        sov_repost_deferred(c); /* a poller may sleep: give the buffer back */
        if (c->clen) /* nor hold combined bytes back while the program waits */
            sov_flush(s, false);
        /* An urgent byte passed over in band is not something to read. */
        if (sov_readable(s) || c->peer_fin || c->reset || s->rd_shut)
            r |= POLLIN | POLLRDNORM;
        if (c->urg_valid)
            r |= POLLPRI; /* urgent data not taken yet (in band too, as TCP's) */
        /* Writable: the window is open, or a small send could still be
         * combined (only when combining is on). */
        bool combining = c->cfg.combine && !s->nodelay && c->clen < c->send_mtu;
        /* A gone peer: writable, as TCP after a FIN; the write says EPIPE. */
        if ((c->credits || combining || c->peer_gone) && !c->wr_shut && !c->reset)
            r |= POLLOUT | POLLWRNORM;
        if (c->peer_fin)
            r |= POLLRDHUP;
        if (c->reset || c->peer_gone || (c->peer_fin && c->wr_shut))
            r |= POLLHUP;
        if ((c->reset && !c->reset_told) || s->so_error)
            r |= POLLERR;
        if (c->peer_mig) /* the peer went back to the kernel connection */
            r = sov_mig_revents(s, r);
        break;
    }
    }
    return r & (events | POLLERR | POLLHUP | POLLNVAL);
}

static int kernel_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t,
                        const sigset_t *mask)
{
    return sov_poll_hooks.kernel_ppoll ? sov_poll_hooks.kernel_ppoll(fds, n, t, mask)
                                       : ppoll(fds, n, t, mask);
}

/* The kernel descriptors' readiness now. */
static int kernel_now(struct pollfd *fds, nfds_t n)
{
    static const struct timespec zero = {0, 0};
    return kernel_ppoll(fds, n, &zero, NULL);
}

/* One pass over every entry; returns the number ready. Kernel descriptors
 * are polled with a zero timeout only when `kernel` is set. */
static int scan(struct pollfd *fds, nfds_t n, bool kernel, struct pollfd *kfds, nfds_t *nk,
                nfds_t *kmap, bool *tentative)
{
    short (*user)(int, short) = __atomic_load_n(&sov_poll_hooks.user_revents, __ATOMIC_ACQUIRE);
    *nk = 0;
    *tentative = false; /* as this pass finds them: a pairing ends */
    for (nfds_t i = 0; i < n; i++) {
        fds[i].revents = 0;
        if (fds[i].fd < 0)
            continue;
        struct sov_sock *s = sov_lookup(fds[i].fd);
        if (s) {
            sov_sock_lock(s);
            if (!s->dead && sov_lookup(fds[i].fd) == s) {
                switch (sov_tp_settle(s)) {
                case SOV_TP_PENDING: {
                    /* not ready: the peer has not paired yet; writable
                     * while the bytes held for the pairing have room (a
                     * client may wait for POLLOUT before it tells the
                     * server to accept: tnftp's passive mode sends RETR
                     * only then, and ftpd accepts after RETR) */
                    bool room = sov_tp_early_room(s);
                    *tentative = true;
                    sov_sock_unlock(s);
                    if (room)
                        fds[i].revents = fds[i].events & POLLOUT;
                    continue;
                }
                case SOV_TP_FELL_BACK: /* unlocked: a kernel socket from now on */
                    goto kernel;
                case SOV_TP_PAIRED:
                    break;
                }
                fds[i].revents = sov_sock_revents(s, fds[i].events);
                sov_sock_unlock(s);
                continue;
            }
            sov_sock_unlock(s);
        }
    kernel:
        if (user) /* e.g. an epoll set's carried entries; its kernel ones below */
            fds[i].revents = user(fds[i].fd, fds[i].events);
        kfds[*nk] = (struct pollfd){.fd = fds[i].fd, .events = fds[i].events};
        kmap[(*nk)++] = i;
    }
    if (kernel && *nk && kernel_now(kfds, *nk) > 0)
        for (nfds_t k = 0; k < *nk; k++)
            fds[kmap[k]].revents |= kfds[k].revents;
    int ready = 0;
    for (nfds_t i = 0; i < n; i++)
        ready += fds[i].revents != 0;
    return ready;
}

/* Without sov_g.lock: every wait asks, and a signal handler that longjmps
 * out of a wait (iperf3 on Ctrl-C) must not leave that lock held (the
 * program's exit then needs it). The two fields are read atomically; one
 * from before a concurrent sov_set_config is as good as a locked read. */
uint64_t sov_poll_spin_ns(void)
{
    enum sov_wait_mode mode = __atomic_load_n(&sov_g.cfg.wait_mode, __ATOMIC_RELAXED);
    unsigned spin_us = __atomic_load_n(&sov_g.cfg.spin_us, __ATOMIC_RELAXED);
    return mode == SOV_WAIT_BLOCK ? 0 : mode == SOV_WAIT_POLL ? UINT64_MAX : (uint64_t)spin_us * 1000;
}

int sov_doze_fds(struct pollfd out[2], int ms)
{
    int fds[2] = {-1, -1}, bound = 1;
    VipxCQPollFds(sov_g.cq, fds, &bound);
    fds[0] = sov_far_doze_fd(fds[0], &bound); /* both CQs once the far NIC is open */
    out[0] = (struct pollfd){.fd = fds[0], .events = POLLIN};
    out[1] = (struct pollfd){.fd = fds[1], .events = POLLIN};
    return bound >= 0 && (ms < 0 || ms > bound) ? bound : ms;
}

int sov_poll_doze(struct pollfd *kfds, nfds_t nk, int ms, const struct sov_sigwatch *w)
{
    ms = sov_doze_fds(&kfds[nk], ms);
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    const struct timespec *t = ms < 0 ? NULL : &ts;
    int rc;
    int bell = kfds[nk + 1].fd;
    if (w->count && bell >= 0 && sov_poll_hooks.dozing) {
        /* A handler that runs between the caller's last look and the sleep
         * would leave it asleep: from now on a handler rings the thread's
         * doorbell, which the sleep polls (two system calls less per sleep
         * than blocking signals around it). */
        uint64_t v;
        if (sov_poll_hooks.dozing(bell)) {
            /* A handler's write for a sleep it left with siglongjmp: taken,
             * with any ring that came with it, so no sleep now: the caller
             * looks again before it sleeps. */
            sov_poll_hooks.dozing(-1);
            if (read(bell, &v, sizeof(v)) < 0) {
                /* taken by a ringer's disarm meanwhile */
            }
            return 0;
        }
        if (sov_sigwatch_fired(w)) {
            rc = -1;
            errno = EINTR;
        } else {
            rc = kernel_ppoll(kfds, nk + 2, t, NULL);
        }
        int err = errno;
        if (sov_poll_hooks.dozing(-1) && read(bell, &v, sizeof(v)) < 0) {
            /* taken by a ringer's disarm meanwhile */
        }
        errno = err;
    } else if (w->count) {
        /* No doorbell: signals stay blocked until ppoll restores the mask
         * atomically. */
        sigset_t all, mask;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &mask);
        if (sov_sigwatch_fired(w)) {
            rc = -1;
            errno = EINTR;
        } else {
            rc = kernel_ppoll(kfds, nk + 2, t, &mask);
        }
        int err = errno;
        pthread_sigmask(SIG_SETMASK, &mask, NULL);
        errno = err;
    } else {
        rc = kernel_ppoll(kfds, nk + 2, t, NULL);
    }
    return rc;
}

void sov_doze_disarm(const struct pollfd *cq, int rc)
{
    if (rc > 0 && cq->revents)
        sov_cq_disarm(true);
    else
        sov_cq_disarm(false);
}

/* ---- A futex sleep ----------------------------------------------------------
 *
 * A set of carried connections alone (every entry a connected socket whose
 * packets the caller's thread handles, at most SOV_FUTEX_CONNS of them) sleeps
 * as epoll's does (the preload's epoll.c): on their VIs' own words and the
 * thread's (VipxSleepWords), which the peers wake with one FUTEX_WAKE,
 * instead of the CQ's datagram that the sleeper then drains (at most
 * SOV_FUTEX_CONNS). The thread's
 * word is rung by the process's ringers (a close, a connection's news) and
 * by the preload's signal trampoline; so only where handlers are counted
 * (sovia run): a futex_waitv is restarted after an SA_RESTART handler,
 * where poll must fail with EINTR. Not under ThreadSanitizer
 * (SOV_FUTEX_SLEEPS). */

/* Counts the thread into each entry's connection, whose VI then stays
 * (sov_conn_destroy waits), and arms its word; the arming looks at the
 * receive queue, so a packet that came after the caller's look ends the
 * sleep at once. false, nothing held: an entry that is not such a
 * connection, or a lock that is busy (a closer may hold it while it waits
 * for a sleeper to let go). The caller is counted asleep already. */
static bool futex_hold(const struct pollfd *fds, nfds_t n, struct sov_futex_sleep *f)
{
    f->nc = 0;
    f->bound = -1;
    for (nfds_t i = 0; i < n; i++) {
        if (fds[i].fd < 0)
            continue;
        struct sov_sock *s = sov_lookup(fds[i].fd);
        if (!s || !sov_sock_trylock(s))
            goto unfit;
        struct sov_conn *c = s->conn;
        bool ok = !s->dead && sov_lookup(fds[i].fd) == s && s->kind == SK_CONNECTED && c &&
                  c->vi && c->cfg.handling == SOV_SINGLE && !s->tp_waiting && !c->peer_mig &&
                  !sov_mig_ours_moving(c) && sov_futex_hold(f, c);
        sov_sock_unlock(s);
        if (!ok)
            goto unfit;
    }
    if (f->nc)
        return true;
unfit:
    sov_futex_let_go(f);
    return false;
}

/* One sleep of sov_poll_masked up to `ms` on a set that may qualify.
 * Counted asleep first, it looks at the set (*ready, with scan's outputs)
 * before it holds the connections: a ring after the count (a close, a
 * handler) ends the sleep. 1 if it slept or found entries ready, 0 if the
 * caller must sleep the CQ's way, -1 with EINTR. */
static int futex_doze(struct pollfd *fds, nfds_t n, int ms, const struct sov_sigwatch *sig,
                      struct pollfd *kfds, nfds_t *nk, nfds_t *kmap, bool *tentative, int *ready)
{
    struct sov_futex_sleep f;
    if (!SOV_FUTEX_SLEEPS || !sig->count || VipxSleepArm(&f.w[0]) != VIP_SUCCESS)
        return 0;
    *ready = scan(fds, n, false, kfds, nk, kmap, tentative);
    if (*ready || *nk || *tentative || !futex_hold(fds, n, &f)) {
        VipxSleepDisarm();
        return *ready ? 1 : 0;
    }
    return sov_futex_sleep(&f, ms, sig);
}

SOV_EXPORT int sov_poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
    return sov_poll_masked(fds, nfds, timeout, NULL);
}

int sov_poll_masked(struct pollfd *fds, nfds_t nfds, int timeout, const sigset_t *mask)
{
    int err = sov_init();
    if (err) {
        errno = -err;
        return -1;
    }
    /* Small sets live on the stack: no malloc on the way to sleeping, since
     * programs longjmp out of poll from signal handlers (iperf3 on Ctrl-C),
     * which would leave malloc's lock held. */
    enum { STACK_FDS = 256 };
    struct pollfd kfds_stack[STACK_FDS + 2];
    nfds_t kmap_stack[STACK_FDS + 1];
    bool heap = nfds > STACK_FDS;
    struct pollfd *kfds = heap ? calloc(nfds + 2, sizeof(*kfds)) : kfds_stack;
    nfds_t *kmap = heap ? calloc(nfds + 1, sizeof(*kmap)) : kmap_stack;
    if (!kfds || !kmap) {
        if (heap) {
            free(kfds);
            free(kmap);
        }
        errno = ENOMEM;
        return -1;
    }
    struct sov_sigwatch sig = sov_sigwatch_start();
    uint64_t start = sov_now_ns(), spin_ns = sov_poll_spin_ns();
    nfds_t nk;
    int ready;
    bool tentative = false; /* a sovia run client awaits pairing (the last scan): sleep briefly */
    bool masked = false;
    sigset_t old;
    struct sov_sighold hold = {0}; /* while it spins, libsovia alone */
    for (unsigned round = 0;; round++) {
        /* The kernel is asked in the first round, so one call reports all
         * that was ready when it began; while spinning, only every 16th
         * round (a system call). */
        ready = scan(fds, nfds, round % 16 == 0, kfds, &nk, kmap, &tentative);
        if (ready)
            break;
        if (mask && !masked) { /* nothing ready: from now on the call's mask */
            pthread_sigmask(SIG_SETMASK, mask, &old);
            masked = true;
        }
        /* A handler ran: as the kernel. */
        if (sov_sigwatch_fired(&sig) || sov_sighold_look(&hold, false)) {
            ready = -1;
            errno = EINTR;
            break;
        }
        if (timeout == 0)
            break;
        uint64_t now = sov_now_ns();
        long left_ms = timeout < 0 ? -1 : timeout - (long)((now - start) / 1000000);
        if (timeout > 0 && left_ms <= 0)
            break;
        if (now - start < spin_ns && (spin_ns == UINT64_MAX || sov_spin_pays(now))) {
            if (now - start >= SOV_SIGHOLD_AFTER_NS)
                sov_sighold_on(&hold);
            __builtin_ia32_pause();
            continue;
        }
        /* The sleeps fail with EINTR themselves. */
        if (sov_sighold_look(&hold, true)) {
            ready = -1;
            errno = EINTR;
            break;
        }
        sov_sighold_off(&hold);
        /* Carried connections alone (no kernel descriptor to ask, none
         * awaiting its pairing): the futex sleep, armed after the look. */
        if (nk == 0 && !tentative) {
            int slept = futex_doze(fds, nfds, (int)left_ms, &sig, kfds, &nk, kmap, &tentative,
                                   &ready);
            if (slept < 0)
                ready = -1;
            if (slept < 0 || ready)
                break;
            if (slept) {
                ready = scan(fds, nfds, false, kfds, &nk, kmap, &tentative);
                if (ready)
                    break;
                continue;
            }
        }
        /* Sleep: arm, look once more (a packet may have raced the arming),
         * then poll the kernel with the CQ's and sovia's event descriptors. */
        sov_cq_arm();
        ready = scan(fds, nfds, true, kfds, &nk, kmap, &tentative);
        if (ready) {
            sov_cq_disarm(false); /* did not sleep */
            break;
        }
        /* A client awaiting its pairing looks at its timeout every 2 ms;
         * everything else that can make a socket ready wakes us. */
        int slice = tentative && (left_ms < 0 || left_ms > 2) ? 2 : (int)left_ms;
        int rc = sov_poll_doze(kfds, nk, slice, &sig);
        sov_doze_disarm(&kfds[nk], rc);
        if (rc < 0 && errno == EINTR) {
            ready = -1;
            break;
        }
        /* Woken: look before arming again (a wake-up usually means a
         * packet or a kernel descriptor ready). */
        ready = scan(fds, nfds, true, kfds, &nk, kmap, &tentative);
        if (ready)
            break;
    }
    int saved = errno;
    sov_sighold_off(&hold);
    if (masked) {
        /* A handler ran under the call's mask: the kernel would have failed
         * the call rather than report what became ready after. */
        if (ready > 0 && sov_sigwatch_fired(&sig)) {
            ready = -1;
            saved = EINTR;
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (heap) {
        free(kfds);
        free(kmap);
    }
    errno = saved;
    return ready;
}
