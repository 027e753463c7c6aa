/*
 * close.c - the service thread and finalization.
 *
 * sov_close returns at once; the FIN/FINACK exchange (docs/PROTOCOL.md) is
 * finished by the service thread, which plays the papers' close thread: it
 * polls only the connections being closed, backing off from 1 ms to 20 ms,
 * and sleeps when there are none, so it never touches an open connection's
 * data path. It also runs the combining timer: every combine_ms/2 it flushes
 * combining buffers older than combine_ms (the papers' condition (1)).
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>

#include "sock.h"
#include "transparent.h"

#define CLOSE_TIMEOUT_NS (60ull * 1000000000u) /* as TCP's FIN_WAIT_2 */

/* Done once both FINs are through, or the peer left the VI for the kernel
 * connection (its END came: no FIN or FINACK of its comes any more), and
 * what we owed the kernel socket went there (sov_mig_step: our copy of
 * it, sov_mig_keep_kernel). */
static bool close_done(struct sov_sock *s)
{
    struct sov_conn *c = s->conn;
    return c->reset || c->peer_gone ||
           (!sov_mig_ours_moving(c) && /* our END is still due (sov_mig_step) */
            ((c->wr_shut && c->fin_acked && c->peer_fin) || c->peer_mig == PMIG_ENDED));
}

/* Takes a closed socket's connection away from the handler thread (HANDLER
 * mode), which reads s->conn under the socket's lock; the caller destroys
 * it. */
static struct sov_conn *take_conn(struct sov_sock *s)
{
    sov_conn_detach_handling(s);
    sov_sock_lock(s);
    struct sov_conn *c = s->conn;
    s->conn = NULL;
    sov_sock_unlock(s);
    return c;
}

/* One pass over the closing sockets; true if any remain. */
static bool service_closing(uint64_t now)
{
    pthread_mutex_lock(&sov_g.lock);
    struct sov_sock **pp = &sov_g.closing, *done = NULL;
    while (*pp) {
        struct sov_sock *s = *pp;
        sov_sock_lock(s);
        struct sov_conn *c = s->conn;
        sov_progress(s); /* and our side of a migration the peer asked for */
        sov_mig_overdue(c);
        if (!c->reset && (c->clen || !c->wr_shut)) {
            if (sov_flush(s, false) == 0 && !c->wr_shut)
                sov_send_fin(s);
        }
        bool finished = close_done(s) || now > s->close_deadline_ns;
        sov_sock_unlock(s);
        if (finished) {
            *pp = s->next_closing;
            s->next_closing = done;
            done = s;
        } else {
            pp = &s->next_closing;
        }
    }
    bool more = sov_g.closing != NULL;
    pthread_mutex_unlock(&sov_g.lock);
    while (done) {
        struct sov_sock *s = done;
        done = s->next_closing;
        sov_conn_destroy(take_conn(s));
        atomic_fetch_sub(&sov_g.open_conns, 1);
        sov_wake_waiters(s); /* a SO_LINGER closer may wait */
        sov_sock_free(s);
    }
    return more;
}

/* How often the service thread looks at a socket with an owner. */
#define OWNED_POLL_MS 5

/* One pass over the timed sockets; true if one of them has an owner. */
static bool service_timers(uint64_t now)
{
    bool owned = false;
    pthread_mutex_lock(&sov_g.lock);
    for (struct sov_sock *s = sov_g.timed; s; s = s->next_timed) {
        owned |= s->owned;
        /* A busy socket waits for the next round: spinning on it here would
         * hold sov_g.lock as long, and a socket a signal handler longjmp'd
         * out of (iperf3 on Ctrl-C) stays locked for good, which left the
         * program's exit (sov_atexit -> sov_close -> sov_timer_remove)
         * waiting for sov_g.lock forever. */
        if (!sov_sock_trylock(s))
            continue;
        if (s->conn && s->conn->clen && now >= s->conn->cdeadline_ns) {
            sov_progress(s);
            sov_flush(s, false);
        } else if (s->conn && s->owned) {
            sov_progress(s); /* urgent data signals its owner */
        }
        if (s->conn && s->migrating) { /* the peer went back to the kernel connection */
            owned = true; /* the same short period */
            sov_progress(s);
            sov_mig_overdue(s->conn);
            sov_mig_push(s);
            if (sov_mig_over(s))
                sov_wake_waiters(s); /* its pollers see it leave: the kernel's now */
        }
        if (s->conn) /* an idle application must not hold a buffer back */
            sov_repost_deferred(s->conn);
        sov_sock_unlock(s);
    }
    pthread_mutex_unlock(&sov_g.lock);
    return owned;
}

/* Unpaired sovia run connections: answer the peer's WAKEUP (or fall back)
 * while the program is busy elsewhere. The list is taken whole, so sockets
 * are settled without sov_g.lock (settling may take it); the taken ones
 * stay marked in_pairing, and are taken one at a time under the lock,
 * until each is settled: a socket unmarked with the whole list was linked
 * again by another thread's sov_pairing_add while this walk still went
 * through it (ThreadSanitizer, forkstress: s->next_pairing written in
 * sov_pairing_add, read here), and the walk went on down the wrong list. */
static void service_pairing(void)
{
    pthread_mutex_lock(&sov_g.lock);
    sov_g.pairing_taken = sov_g.pairing;
    sov_g.pairing = NULL;
    for (;;) {
        struct sov_sock *s = sov_g.pairing_taken;
        if (!s)
            break;
        sov_g.pairing_taken = s->next_pairing;
        s->in_pairing = false;
        pthread_mutex_unlock(&sov_g.lock);
        sov_sock_lock(s);
        enum sov_tp_state st = SOV_TP_PAIRED;
        if (!s->dead && s->tp_waiting)
            st = sov_tp_settle(s);
        if (st != SOV_TP_FELL_BACK) /* else unlocked and unpublished */
            sov_sock_unlock(s);
        if (st == SOV_TP_PENDING)
            sov_pairing_add(s);
        pthread_mutex_lock(&sov_g.lock);
    }
    pthread_mutex_unlock(&sov_g.lock);
}

static void ensure_service(void);

/* Caller holds sov_g.lock. Whether a new pairing or closing socket needs
 * the service thread woken: not when its timed sleep ends within the 1 ms
 * a woken thread would wait before its pass anyway. Waking it at every
 * connect and close of a busy process was a context switch each (and a
 * pass over the lists) on both ends of every connection. */
static bool service_needs_wake(void)
{
    uint64_t until = sov_g.service_until_ns, now = sov_now_ns();
    return until <= now || until > now + 1000000; /* a past one: a fork's copy */
}

/* A peer nudged one of our VIs (it leaves for the kernel connection:
 * migrate.c): every carried connection not busy in a call of the program
 * handles what came, which is how its REQUEST is answered while the
 * program waits elsewhere (a pipe, a child). Rare: the scan is fine. */
static void service_nudged(void)
{
    for (int fd = 0, n = sov_table_limit(); fd < n; fd++) {
        struct sov_sock *s = sov_lookup(fd);
        if (!s || !s->transparent || !sov_sock_trylock(s))
            continue;
        if (!s->dead && s->kind == SK_CONNECTED && s->conn && !s->tp_waiting)
            sov_progress(s);
        sov_sock_unlock(s);
    }
}

/* The provider's thread, with no lock of ours held. */
void sov_nudged(void *ctx, VIP_VI_HANDLE vi)
{
    (void)ctx;
    (void)vi;
    pthread_mutex_lock(&sov_g.lock);
    sov_g.nudged = true;
    ensure_service();
    pthread_mutex_unlock(&sov_g.lock);
    pthread_cond_signal(&sov_g.service_cond); /* after the unlock: sov_pairing_add */
}

static void *service_thread(void *arg)
{
    (void)arg;
    uint64_t close_poll_ms = 1;
    bool owned = false;
    /* Its doorbell for sleeping on the CQ (a blocking flush at close) now,
     * so the process's descriptors are settled once its threads are up. */
    int fds[2], bound;
    VipxCQPollFds(sov_g.cq, fds, &bound);
    pthread_mutex_lock(&sov_g.lock);
    for (;;) {
        bool closing = sov_g.closing != NULL, timed = sov_g.timed != NULL;
        bool pairing = sov_g.pairing != NULL;
        if (sov_g.nudged) {
            sov_g.nudged = false;
            pthread_mutex_unlock(&sov_g.lock);
            service_nudged();
            pthread_mutex_lock(&sov_g.lock);
            close_poll_ms = 1; /* a closed connection may be asked too */
            continue;
        }
        if (sov_g.closing_added) { /* a fresh close: its FINACK comes soon */
            sov_g.closing_added = false;
            close_poll_ms = 1;
        }
        uint64_t wait_ms = 0;
        if (closing)
            wait_ms = close_poll_ms;
        if (pairing)
            wait_ms = 1;
        if (timed) {
            uint64_t t = sov_g.cfg.combine_ms / 2 ? sov_g.cfg.combine_ms / 2 : 1;
            if (owned && t > OWNED_POLL_MS)
                t = OWNED_POLL_MS;
            wait_ms = wait_ms && wait_ms < t ? wait_ms : t;
        }
        if (!wait_ms) {
            close_poll_ms = 1;
            sov_g.service_until_ns = 0;
            pthread_cond_wait(&sov_g.service_cond, &sov_g.lock);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(wait_ms * 1000000);
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        sov_g.service_until_ns = sov_now_ns() + wait_ms * 1000000;
        pthread_cond_timedwait(&sov_g.service_cond, &sov_g.lock, &ts);
        sov_g.service_until_ns = 0;
        pthread_mutex_unlock(&sov_g.lock);
        uint64_t now = sov_now_ns();
        if (closing && service_closing(now))
            close_poll_ms = close_poll_ms < 20 ? close_poll_ms * 2 : 20;
        owned = timed && service_timers(now);
        if (pairing)
            service_pairing();
        pthread_mutex_lock(&sov_g.lock);
    }
    return NULL;
}

/* Caller holds sov_g.lock. */
static void ensure_service(void)
{
    if (sov_g.service_running)
        return;
    sov_g.service_running =
        VipxThreadCreate(&sov_g.service_thread, NULL, service_thread, NULL) == 0;
}

void sov_timer_add(struct sov_sock *s)
{
    pthread_mutex_lock(&sov_g.lock);
    if (!s->timed) {
        s->next_timed = sov_g.timed;
        sov_g.timed = s;
        s->timed = true;
    }
    ensure_service();
    pthread_mutex_unlock(&sov_g.lock);
    pthread_cond_signal(&sov_g.service_cond); /* after the unlock: sov_pairing_add */
}

/* The signals go after the unlock: a thread woken under the lock found it
 * held and slept again on it at once (two more futex calls and a context
 * switch, at every connect and close: strace of sovia bench connrate). The
 * thread reads the lists under the lock before it waits, so none is lost. */
void sov_pairing_add(struct sov_sock *s)
{
    pthread_mutex_lock(&sov_g.lock);
    if (!s->in_pairing) {
        s->next_pairing = sov_g.pairing;
        sov_g.pairing = s;
        s->in_pairing = true;
    }
    ensure_service();
    bool wake = service_needs_wake();
    pthread_mutex_unlock(&sov_g.lock);
    if (wake)
        pthread_cond_signal(&sov_g.service_cond); /* after the unlock */
}

void sov_pairing_remove(struct sov_sock *s)
{
    pthread_mutex_lock(&sov_g.lock);
    struct sov_sock **lists[] = {&sov_g.pairing, &sov_g.pairing_taken};
    for (unsigned i = 0; i < 2; i++)
        for (struct sov_sock **p = lists[i]; *p; p = &(*p)->next_pairing)
            if (*p == s) {
                *p = s->next_pairing;
                break;
            }
    s->in_pairing = false;
    pthread_mutex_unlock(&sov_g.lock);
}

void sov_timer_remove(struct sov_sock *s)
{
    pthread_mutex_lock(&sov_g.lock);
    for (struct sov_sock **p = &sov_g.timed; *p; p = &(*p)->next_timed)
        if (*p == s) {
            *p = s->next_timed;
            break;
        }
    s->timed = false;
    pthread_mutex_unlock(&sov_g.lock);
}

/* A socket just became connected (s->lock held). */
void sov_conn_established(struct sov_sock *s)
{
    atomic_fetch_add(&sov_g.open_conns, 1);
    sov_stat_serve_start();
    sov_conn_attach_handling(s);
    if (s->conn->cfg.combine || s->owned) {
        sov_sock_unlock(s);
        sov_timer_add(s);
        sov_sock_lock(s);
    }
}

/*
 * sov_close of a connected socket (unlocked, already dead and unlisted):
 * reset at once if unread data is pending or SO_LINGER says so, else hand
 * it to the service thread to finish gracefully; SO_LINGER with a timeout
 * waits for that.
 */
void sov_close_connected(struct sov_sock *s)
{
    sov_timer_remove(s);
    sov_pairing_remove(s);
    sov_sock_lock(s);
    struct sov_conn *c = s->conn;
    /* A shared copy may be stale (another holder used the connection):
     * what arrived is not for it, and its window accounting would take
     * the other holder's traffic for a violation and fail the connection. */
    if (!c->shared || c->clen)
        sov_progress(s);
    /* An unpaired sovia run connection has nobody to say FIN to yet. One
     * whose WAKEUPs crossed (the client answered, or the server heard the
     * answer) is paired for the other end already: it closes gracefully. */
    bool unpaired = s->tp_waiting && (c->tentative || !c->peer_window);
    if (s->tp_waiting && !unpaired) { /* counted as sov_tp_settle would */
        s->tp_waiting = false;
        atomic_fetch_add(&sov_g.tp_paired, 1);
        if (c->far)
            atomic_fetch_add(&sov_g.tp_paired_far, 1);
        atomic_fetch_add(&sov_g.open_conns, 1);
    }
    bool abort = c->rx_bytes || c->reset || c->peer_gone || unpaired ||
                 (s->linger.l_onoff && s->linger.l_linger == 0);
    s->app_closed = true;
    /* Another process may still hold a shared connection: only our copy
     * goes, after what we combined (the FIN is the last holder's exit). */
    if (c->shared && !abort) {
        sov_flush(s, true);
        abort = true;
    }
    if (abort) {
        sov_sock_unlock(s);
        sov_conn_destroy(take_conn(s)); /* the peer sees ECONNRESET */
        if (!unpaired) /* an unpaired one was never counted open */
            atomic_fetch_sub(&sov_g.open_conns, 1);
        sov_sock_free(s);
        return;
    }
    if (c->clen == 0 && !c->wr_shut)
        sov_send_fin(s); /* fast path: FIN now; the thread does the rest */
    uint64_t linger_ns = s->linger.l_onoff ? (uint64_t)s->linger.l_linger * 1000000000u : 0;
    s->close_deadline_ns = sov_now_ns() + (linger_ns ? linger_ns : CLOSE_TIMEOUT_NS);
    unsigned seen = atomic_load(&s->events);
    sov_sock_unlock(s);
    pthread_mutex_lock(&sov_g.lock);
    s->next_closing = sov_g.closing;
    sov_g.closing = s;
    sov_g.closing_added = true;
    ensure_service();
    bool wake = linger_ns || service_needs_wake();
    pthread_mutex_unlock(&sov_g.lock);
    if (wake)
        pthread_cond_signal(&sov_g.service_cond); /* after the unlock: sov_pairing_add */
    if (linger_ns) { /* SO_LINGER: wait until the service thread is done */
        pthread_mutex_lock(&s->wait_lock);
        while (atomic_load(&s->events) == seen)
            pthread_cond_wait(&s->cond, &s->wait_lock);
        pthread_mutex_unlock(&s->wait_lock);
    }
}

/* At exit: close what the application left open, gracefully, and wait up
 * to 2 s for every connection to finish (seed 000, section 4.4). */
void sov_atexit(void)
{
    for (int fd = 0, n = sov_table_limit(); fd < n; fd++) {
        struct sov_sock *s = sov_lookup(fd);
        if (!s)
            continue;
        /* A signal handler that longjmp'd out of a sovia call (iperf3 does
         * on Ctrl-C) left that socket locked: exit without it. */
        uint64_t end = sov_now_ns() + 100000000u;
        bool got;
        while (!(got = sov_sock_trylock(s)) && sov_now_ns() < end)
            sched_yield();
        if (!got)
            continue;
        sov_sock_unlock(s);
        sov_close(fd);
    }
    uint64_t end = sov_now_ns() + 2000000000u;
    while (atomic_load(&sov_g.open_conns) && sov_now_ns() < end) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
}
