/*
 * wait.c - how a call of the sockets layer waits for its connection: polling,
 * sleeping on the CQ or on futex words, waiting for the handler thread, per
 * the wait mode (docs/SOCKETS.md, "Waiting"). Callers hold the socket's lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pollwait.h"
#include "sock.h"

/* ---- Signals while a wait spins ------------------------------------------ */

void sov_sighold_on(struct sov_sighold *h)
{
    if (h->on || sov_poll_hooks.signal_count)
        return;
    sigset_t all;
    sigfillset(&all);
    static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT};
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++)
        sigdelset(&all, faults[i]);
    if (pthread_sigmask(SIG_BLOCK, &all, &h->saved) == 0) {
        h->on = true;
        h->looks = 0;
    }
}

void sov_sighold_off(struct sov_sighold *h)
{
    if (!h->on)
        return;
    h->on = false;
    pthread_sigmask(SIG_SETMASK, &h->saved, NULL); /* what is pending goes now */
}

bool sov_sighold_look(struct sov_sighold *h, bool now)
{
    if (!h->on || (!now && ++h->looks % 16))
        return false;
    sigset_t p;
    if (sigpending(&p) != 0)
        return false;
    bool through = false, handler = false;
    for (int sig = 1; sig < NSIG; sig++) {
        if (sigismember(&p, sig) != 1 || sigismember(&h->saved, sig) == 1)
            continue;
        through = true;
        struct sigaction a;
        if (sigaction(sig, NULL, &a) == 0 && a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN)
            handler = true;
    }
    if (through)
        sov_sighold_off(h);
    return handler;
}

/* The wait of sov_wait_turn's caller (one call of the sockets API) */
static __thread struct sov_sighold wait_hold;
static __thread bool wait_in_turn;  /* its own unlock inside a turn */
static __thread unsigned wait_sigs; /* the handler count at its first turn */
__thread volatile bool sov_signals_held;

void sov_signals_let_go(void)
{
    if (wait_in_turn)
        return;
    sov_signals_held = false;
    sov_sighold_off(&wait_hold);
}

/* A turn that spins (a POLL turn, a wait for the handler thread) may not
 * notice a handler run: true if one did since the wait's first turn. */
static bool spin_interrupted(bool now)
{
    if (sov_poll_hooks.signal_count)
        return atomic_load_explicit(sov_poll_hooks.signal_count(), memory_order_relaxed) !=
               wait_sigs;
    bool ran = sov_sighold_look(&wait_hold, now);
    sov_signals_held = wait_hold.on;
    return ran;
}

/* since: the wait's first turn, or 0 to hold at once (a wait that sleeps
 * on a condition variable, which no handler interrupts). */
static void spin_turn_begins(uint64_t since)
{
    if (!wait_hold.on && !sov_poll_hooks.signal_count &&
        (!since || sov_now_ns() - since >= SOV_SIGHOLD_AFTER_NS)) {
        sov_sighold_on(&wait_hold);
        sov_signals_held = wait_hold.on;
    }
    wait_in_turn = true;
}

/* ---- Waiting ------------------------------------------------------------- */

bool sov_conn_sleep_hold(struct sov_conn *c, VIPX_SLEEP_WORD *w, int *bound)
{
    atomic_fetch_add(&c->sleepers, 1);
    if (VipxViSleepArm(c->vi, VIP_TRUE, w, bound) == VIP_SUCCESS)
        return true;
    atomic_fetch_sub(&c->sleepers, 1);
    return false;
}

void sov_conn_sleep_release(struct sov_conn *c)
{
    VipxViSleepArm(c->vi, VIP_FALSE, NULL, NULL);
    atomic_fetch_sub(&c->sleepers, 1); /* last: the closer waits for it */
}

bool sov_futex_hold(struct sov_futex_sleep *f, struct sov_conn *c)
{
    int bound = -1;
    if (f->nc >= SOV_FUTEX_CONNS || !sov_conn_sleep_hold(c, &f->w[f->nc + 1], &bound))
        return false;
    f->c[f->nc++] = c;
    if (bound >= 0 && (f->bound < 0 || bound < f->bound))
        f->bound = bound;
    return true;
}

void sov_futex_let_go(struct sov_futex_sleep *f)
{
    for (unsigned i = 0; i < f->nc; i++)
        sov_conn_sleep_release(f->c[i]);
    f->nc = 0;
}

int sov_futex_sleep(struct sov_futex_sleep *f, int ms, const struct sov_sigwatch *sig)
{
    int rc = 1;
    if (sov_sigwatch_fired(sig)) {
        errno = EINTR;
        rc = -1;
    } else {
        VipxSleepWords(f->w, (int)f->nc + 1,
                       f->bound >= 0 && (ms < 0 || ms > f->bound) ? f->bound : ms);
    }
    sov_futex_let_go(f);
    VipxSleepDisarm();
    return rc;
}

/*
 * A SINGLE connection's caller sleeps on its VI's own word and its thread's
 * (VipxSleepWords), which the peer wakes with one FUTEX_WAKE after writing a
 * completion, instead of a datagram to the CQ's descriptor that the sleeper
 * then drains. The thread's word is rung by sov_signal_event (a close, a
 * shutdown, a nudge) and by the preload's signal trampoline. Counted in
 * c->sleepers, the VI stays while the socket is unlocked (sov_conn_destroy
 * waits); disarmed before the lock is taken again, as a closer may hold it
 * while it waits. The VI's arming looks at its receive queue after counting,
 * so a completion that came after sov_progress's look ends the sleep at
 * once. The peer can write the word: a wake-up for nothing only makes the
 * caller look again; an inheritable VI's sleep is bounded (its MaxSleepMs).
 * 1: slept (or need not), with *err 0 or -EINTR; 0: sleep the CQ's way.
 * (The preload's recv/send restart after SA_RESTART handlers alone.)
 */
static int futex_block(struct sov_sock *s, int *err)
{
    struct sov_conn *c = s->conn;
    VIPX_SLEEP_WORD w[2];
    int bound = -1;
    /* Only where handlers are counted (the preload): a futex_waitv is
     * restarted after an SA_RESTART handler, where sov_recv must fail with
     * EINTR whatever SA_RESTART says (docs/SOCKETS.md); and with no other
     * lock held, as a handler is deferred to the last lock's release.
     * Not while a migration waits for a deadline. */
    struct sov_sigwatch sig = sov_sigwatch_start();
    if (!SOV_FUTEX_SLEEPS || !sig.count || sov_locks_held != 1 || !c || !c->vi ||
        s->tp_waiting || c->peer_mig || sov_mig_ours_moving(c) ||
        VipxSleepArm(&w[0]) != VIP_SUCCESS)
        return 0;
    *err = 0;
    if (sov_progress(s) > 0 || s->dead) {
        VipxSleepDisarm();
        return 1;
    }
    c = s->conn; /* a packet may have moved it */
    if (!c || !c->vi || c->peer_mig || sov_mig_ours_moving(c)) {
        VipxSleepDisarm();
        return 1;
    }
    if (!sov_conn_sleep_hold(c, &w[1], &bound)) {
        VipxSleepDisarm();
        return 0;
    }
    sov_sock_unlock(s);
    /* futex_waitv ends with EINTR on a handler without SA_RESTART, is
     * restarted after one with it (the preload's rings the thread's word,
     * which ends the restarted sleep): the count tells either. poll() in
     * the CQ's sleep failed with EINTR on any handler. */
    errno = 0;
    if (!sov_sigwatch_fired(&sig))
        VipxSleepWords(w, 2, bound);
    if (errno == EINTR || sov_sigwatch_fired(&sig))
        *err = -EINTR;
    sov_conn_sleep_release(c);
    VipxSleepDisarm();
    sov_sock_lock(s);
    return 1;
}

/* Sleeps until the CQ may have news for us, or another thread of ours
 * tells its sleepers to look (sov_signal_event). -EINTR on a signal. */
static int block_on_cq(struct sov_sock *s)
{
    int err;
    if (futex_block(s, &err))
        return err;
    sov_cq_arm();
    int n = sov_progress(s);
    if (n == 0) {
        sov_sock_unlock(s);
        struct pollfd p[2];
        int rc = poll(p, 2, sov_doze_fds(p, -1));
        int err = rc < 0 ? errno : 0;
        sov_sock_lock(s);
        sov_doze_disarm(&p[0], rc);
        return err == EINTR ? -EINTR : 0;
    }
    sov_cq_disarm(true);
    return 0;
}

/* HANDLER / NOTIFY: another thread handles packets and bumps s->events. */
static int wait_for_handler(struct sov_sock *s)
{
    unsigned seen = atomic_load(&s->events);
    sov_sock_unlock(s);
    pthread_mutex_lock(&s->wait_lock);
    if (atomic_load(&s->events) == seen) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->cond, &s->wait_lock, &ts);
    }
    pthread_mutex_unlock(&s->wait_lock);
    sov_sock_lock(s);
    return 0;
}

/*
 * A receive's POLL wait (SOVIA_WAIT=poll) on a connection of its own: turns
 * of receive polling alone, each dropping the lock for a moment as
 * sov_wait's turn does, until a packet comes (handled here: true) or
 * SPIN_TURNS went by, the socket closed, or the connection changed (false:
 * the caller looks at everything again). A turn of the caller's loop
 * (sov_progress, the checks of sov_do_recv, sov_wait) was 170 instructions
 * where this is the poll alone (~75); and the caller need not poll again for
 * the packet handled here (issue 16). Not where the connection migrates or
 * is shared (sov_progress's other work, the record's entering on each lock).
 */
#define SPIN_TURNS 64
static bool spin_for_packet(struct sov_sock *s, struct sov_conn *c)
{
    if (c->mig_auto || c->rec || c->cfg.wait_mode != SOV_WAIT_POLL)
        return false;
    for (unsigned k = 0; k < SPIN_TURNS; k++) {
        sov_sock_unlock(s);
        sov_sock_lock(s);
        if (s->dead || s->conn != c || c->mig_auto)
            return false;
        VIP_DESCRIPTOR *d;
        if (VipRecvDone(c->vi, &d) == VIP_SUCCESS) {
            sov_handle_packet(s, d);
            if (s->conn && s->conn->mig_auto) /* as sov_progress would, after it */
                sov_mig_step(s);
            return true;
        }
    }
    return false;
}

/*
 * Waits a little for something to happen on the socket, per the wait mode:
 * POLL spins, BLOCK sleeps, ADAPTIVE spins for spin_us (counted from
 * *spun_since, 0 on the first call) and then sleeps. Returns 0 to re-check,
 * -EINTR, or -EBADF when the socket was closed meanwhile. With `handled`
 * (a receive's wait), a POLL wait may handle the next packet itself
 * (spin_for_packet) and says so there.
 */
int sov_wait_turn(struct sov_sock *s, uint64_t *spun_since, bool *handled)
{
    struct sov_conn *c = s->conn;
    int rc = 0;
    if (!*spun_since) { /* the wait's first turn */
        *spun_since = sov_now_ns();
        if (sov_poll_hooks.signal_count)
            wait_sigs = atomic_load_explicit(sov_poll_hooks.signal_count(), memory_order_relaxed);
    }
    if (c) {
        sov_repost_deferred(c); /* waiting is free time for it */
        /* Nothing moves a send in flight while we sleep (manual progress),
         * and the peer's reply may wait for it. (On shm: at once.) */
        sov_sends_out(c);
    }
    /* A turn that spins or waits for the handler thread has no system call
     * that a handler would fail with EINTR: spin_interrupted looks. */
    if (c && sov_handled_elsewhere(s, c)) {
        spin_turn_begins(0);
        rc = wait_for_handler(s);
        wait_in_turn = false;
        if (spin_interrupted(true))
            rc = -EINTR;
    } else {
        enum sov_wait_mode mode = c ? c->cfg.wait_mode : s->cfg.wait_mode;
        if (mode == SOV_WAIT_ADAPTIVE) {
            uint64_t now = sov_now_ns();
            mode = now - *spun_since < (uint64_t)s->cfg.spin_us * 1000 && sov_spin_pays(now)
                       ? SOV_WAIT_POLL
                       : SOV_WAIT_BLOCK;
        }
        if (mode == SOV_WAIT_POLL) {
            /* No pause instruction: it costs ~140 cycles on recent cores and
             * would delay noticing the packet; dropping the lock for a
             * moment is enough to let another thread of this socket in. */
            spin_turn_begins(*spun_since);
            if (!handled || !c || !(*handled = spin_for_packet(s, c))) {
                sov_sock_unlock(s);
                sov_sock_lock(s);
            }
            wait_in_turn = false;
            if (spin_interrupted(false))
                rc = -EINTR;
        } else if (spin_interrupted(true)) { /* while it spun (ADAPTIVE) */
            rc = -EINTR;
        } else {
            sov_signals_let_go(); /* the sleep's poll fails with EINTR itself */
            rc = block_on_cq(s);
        }
    }
    if (s->dead)
        return -EBADF;
    return rc;
}

int sov_wait(struct sov_sock *s, uint64_t *spun_since)
{
    return sov_wait_turn(s, spun_since, NULL);
}
