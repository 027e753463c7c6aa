/* stats.c - per-socket statistics, and the process's tally for sovia run's exit
 * record. */
#include <errno.h>
#include <sched.h>

#include "sock.h"

SOV_EXPORT int sov_get_stats(int fd, struct sov_stats *stats)
{
    if (!stats) {
        errno = EFAULT;
        return -1;
    }
    struct sov_sock *s = sov_acquire(fd);
    if (!s)
        return -1;
    if (s->conn) {
        sov_progress(s);
        *stats = s->conn->stats;
        stats->credits = s->conn->credits;
    } else {
        *stats = (struct sov_stats){.window = s->cfg.window,
                                    .recv_buffers = sov_recv_buffers(&s->cfg)};
    }
    sov_release(s);
    return 0;
}

/* ---- This process's tally (sovia run's exit record) ------------------------ */

/* How long a tally waits, in all, for sockets busy in other threads
 * (sections are short and never sleep). */
#define TALLY_WAIT_NS 20000000u

static _Atomic uint32_t tally_gen;

/* The bytes s's connection moved in this process, once per walk. The raw
 * lock, not a record section: the counters are this process's own copy.
 * The caller's thread holds no socket lock (sock.h, sov_locks_held), so a
 * busy one is another thread's, for a moment: waited for until `until`,
 * then left out. */
static void tally_sock(struct sov_sock *s, bool closing, uint32_t gen, uint64_t until,
                       struct sov_tally *t)
{
    while (!sov_trylock(&s->lock)) {
        if (sov_now_ns() > until)
            return;
        sched_yield();
    }
    struct sov_conn *c = s->conn;
    if (c && s->tally_gen != gen && (closing || !s->dead)) {
        s->tally_gen = gen;
        t->bytes_sent += c->stats.bytes_sent - c->base_sent;
        t->bytes_received += c->taken;
    }
    sov_unlock(&s->lock);
}

/* The counts, the bytes of destroyed connections, then those of the
 * connections still open or still closing (an inetd service exits with its
 * socket open, and a close finishes in the service thread). */
void sov_tally(struct sov_tally *t)
{
    *t = (struct sov_tally){
        .carried = atomic_load(&sov_g.tp_paired),
        .carried_far = atomic_load(&sov_g.tp_paired_far),
        .fell_back = atomic_load(&sov_g.tp_fell_back),
        .kernel = atomic_load(&sov_g.tp_kernel),
        .redirected = atomic_load(&sov_g.tp_redirected),
        .short_ = atomic_load(&sov_g.tp_short),
        .migrated = atomic_load(&sov_g.tp_migrated),
        .bytes_sent = atomic_load(&sov_g.bytes_sent),
        .bytes_received = atomic_load(&sov_g.bytes_received),
    };
    uint32_t gen = atomic_fetch_add(&tally_gen, 1) + 1;
    uint64_t until = sov_now_ns() + TALLY_WAIT_NS;
    int busy; /* a pthread mutex: this very thread may hold it */
    while ((busy = pthread_mutex_trylock(&sov_g.lock)) != 0 && sov_now_ns() <= until)
        sched_yield();
    if (!busy) {
        for (struct sov_sock *s = sov_g.closing; s; s = s->next_closing)
            tally_sock(s, true, gen, until, t);
        pthread_mutex_unlock(&sov_g.lock);
    }
    for (int fd = 0, n = sov_table_limit(); fd < n; fd++) {
        struct sov_sock *s = sov_lookup(fd);
        if (s)
            tally_sock(s, false, gen, until, t);
    }
}

/* A forked child counts what it holds and what it moves itself: the
 * carried connections it inherited (still open here, paired), and from
 * now on its own connections and bytes. Each inherited connection's bytes
 * so far are the parent's (bytes not read yet go to whoever reads them).
 * The child runs alone here: no lock. */
void sov_tally_forked(void)
{
    atomic_store(&sov_g.bytes_sent, 0);
    atomic_store(&sov_g.bytes_received, 0);
    atomic_store(&sov_g.tp_paired, 0);
    atomic_store(&sov_g.tp_paired_far, 0);
    atomic_store(&sov_g.tp_fell_back, 0);
    atomic_store(&sov_g.tp_kernel, 0);
    atomic_store(&sov_g.tp_redirected, 0);
    atomic_store(&sov_g.tp_short, 0);
    atomic_store(&sov_g.tp_migrated, 0);
    uint32_t gen = atomic_fetch_add(&tally_gen, 1) + 1;
    for (int fd = 0, n = sov_table_limit(); fd < n; fd++) {
        struct sov_sock *s = sov_lookup(fd);
        struct sov_conn *c = s ? s->conn : NULL;
        if (!c || s->dead || s->tally_gen == gen)
            continue;
        s->tally_gen = gen;
        c->base_sent = c->stats.bytes_sent;
        c->taken = 0;
        if (s->transparent && s->kind == SK_CONNECTED && !s->tp_waiting) {
            atomic_fetch_add(&sov_g.tp_paired, 1);
            if (c->far)
                atomic_fetch_add(&sov_g.tp_paired_far, 1);
            if (c->redirected)
                atomic_fetch_add(&sov_g.tp_redirected, 1);
        }
    }
}
