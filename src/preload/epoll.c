/*
 * epoll.c - epoll over carried descriptors.
 *
 * The kernel cannot see a carried socket's readiness, so each epoll set
 * that holds one keeps those entries here (level- or edge-triggered,
 * EPOLLONESHOT) while its kernel descriptors stay in the kernel set. A
 * carried socket is in the kernel set as well, as a placeholder that asks
 * for no event under a tag of ours: so the kernel checks every epoll_ctl
 * on it as on any socket (EBADF, EINVAL, EPERM, EEXIST, ENOENT, ...), the
 * entry leaves the set with the socket, and a socket that falls back to
 * kernel TCP only needs its entry given the program's events.
 *
 * An epoll set registered in another is both a kernel entry of the outer
 * set (for its kernel descriptors) and an entry here (for its carried
 * ones, looked at on each scan). The kernel sets hold nothing else of
 * ours, and placeholders report nothing, so what the kernel reports for a
 * set (to poll, select, or a set nesting it) is what its kernel
 * descriptors have.
 *
 * A wait on a set with carried entries looks at them and asks the kernel
 * set (zero timeout) in the same call (see wait_active), the two taking
 * turns to go first, then spins (wait modes) asking the kernel every so
 * often; to sleep it polls the sockets layer's doorbells, with the set if
 * that may hold kernel entries (an entry that joins a sleeper's set rings
 * them). A signal handler run meanwhile ends it with EINTR.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include <sovia.h>

#include "pollwait.h"
#include "preload.h"
#include "sock.h"
#include "transparent.h"
#include "waits.h"

#define MAX_SETS 65536
#define MAX_DEPTH 6      /* sets looked into at once (the kernel nests 4 levels) */
#define NESTED_TRIES 64  /* a nested set's lock is tried that often (look_lock) */
#define KERNEL_EVERY 64  /* spinning: rounds between looks at the kernel set */
#define KERNEL_QUIET_NS 10000 /* a kernel set found empty is left alone as long */
#define TAG_OURS 0x736f7669u /* "sovi": a placeholder's tag, with its descriptor */

enum kind { CARRIED, NESTED };

struct item {
    int fd;
    enum kind kind;
    uint32_t events;
    epoll_data_t data;
    bool disabled; /* EPOLLONESHOT fired */
    bool gone;     /* no longer carried, or the nested set closed: dropped after the scan */
    uint32_t last; /* readiness at the previous look (for edges) */
    uint64_t last_rx, last_tx;
};

struct epset {
    pthread_mutex_t lock;
    struct item *v;
    unsigned n, cap;
    /* v's index + 1 of each descriptor's entry (0: none), so that
     * epoll_ctl costs the same with 10 entries as with 10,000 (a server
     * re-arming one-shot entries calls it per event) */
    unsigned *at;
    unsigned at_cap;
    unsigned counted[2]; /* entries of each kind */
    unsigned cursor; /* where the next scan starts: ready entries take turns */
    atomic_uint ncarried, nnested;
    atomic_int nkernel;         /* kernel entries added through us (may overcount) */
    atomic_bool kernel_unknown; /* not seen created: it may hold any */
    atomic_bool is_epoll;       /* an epoll descriptor (the kernel said so) */
    atomic_uint turn;           /* even: carried entries first, odd: kernel ones */
    atomic_bool kernel_quiet;   /* the last look found the kernel set empty */
    atomic_bool kernel_owed;    /* a call returned at once without looking */
    _Atomic uint64_t kernel_seen_ns; /* when the kernel set was last looked at */
    atomic_int sleepers;        /* threads asleep on it */
    /* No futex sleep tried before (an entry did not fit: futex_hold) */
    _Atomic uint64_t futex_after_ns;
};

static _Atomic(struct epset *) sets[MAX_SETS];
static atomic_int sets_end; /* one past the highest epfd with a set */

static struct epset *set_of(int epfd)
{
    return epfd >= 0 && epfd < MAX_SETS ? atomic_load(&sets[epfd]) : NULL;
}

static struct epset *set_get(int epfd)
{
    struct epset *s = set_of(epfd);
    if (s || epfd < 0 || epfd >= MAX_SETS)
        return s;
    s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    pthread_mutex_init(&s->lock, NULL);
    atomic_store(&s->kernel_unknown, true);
    struct epset *expected = NULL;
    if (!atomic_compare_exchange_strong(&sets[epfd], &expected, s)) {
        pthread_mutex_destroy(&s->lock);
        free(s);
        return expected;
    }
    int end = atomic_load(&sets_end);
    while (end <= epfd && !atomic_compare_exchange_weak(&sets_end, &end, epfd + 1))
        ;
    return s;
}

/* In a forked child: a set's lock is also taken by sovia's threads (their
 * close of a number that was a set once), and by the program's other
 * threads, gone here; one held at the fork would hang the child's first
 * epoll call on the set. */
void epoll_after_fork_child(void)
{
    for (int e = 0, end = atomic_load(&sets_end); e < end; e++) {
        struct epset *s = atomic_load(&sets[e]);
        if (s) {
            pthread_mutex_init(&s->lock, NULL);
            atomic_store(&s->sleepers, 0);
        }
    }
}

/* Empties a set whose descriptor was (re)created, or closed. */
static void set_reset(struct epset *s, bool created)
{
    pthread_mutex_lock(&s->lock);
    for (unsigned i = 0; i < s->n; i++)
        s->at[s->v[i].fd] = 0;
    s->n = 0;
    s->counted[CARRIED] = s->counted[NESTED] = 0;
    s->cursor = 0;
    atomic_store(&s->ncarried, 0);
    atomic_store(&s->nnested, 0);
    atomic_store(&s->nkernel, 0);
    atomic_store(&s->kernel_unknown, !created);
    atomic_store(&s->is_epoll, created);
    pthread_mutex_unlock(&s->lock);
}

/* ---- entries (under the set's lock) ------------------------------------------ */

static struct item *find(struct epset *s, int fd)
{
    if (fd < 0 || (unsigned)fd >= s->at_cap || !s->at[fd])
        return NULL;
    return &s->v[s->at[fd] - 1];
}

/* A new entry for fd (none yet), of this kind, its other fields zero. */
static struct item *append(struct epset *s, int fd, enum kind kind)
{
    if (fd < 0)
        return NULL;
    if ((unsigned)fd >= s->at_cap) {
        unsigned cap = s->at_cap ? s->at_cap : 64;
        while (cap <= (unsigned)fd)
            cap *= 2;
        unsigned *at = realloc(s->at, cap * sizeof(*at));
        if (!at)
            return NULL;
        memset(at + s->at_cap, 0, (cap - s->at_cap) * sizeof(*at));
        s->at = at;
        s->at_cap = cap;
    }
    if (s->n == s->cap) {
        unsigned cap = s->cap ? s->cap * 2 : 8;
        struct item *v = realloc(s->v, cap * sizeof(*v));
        if (!v)
            return NULL;
        s->v = v;
        s->cap = cap;
    }
    s->at[fd] = s->n + 1;
    s->counted[kind]++;
    s->v[s->n] = (struct item){.fd = fd, .kind = kind};
    return &s->v[s->n++];
}

/* Sets an entry's events and data anew (its kind as it was given). */
static void fill(struct item *it, const struct epoll_event *ev)
{
    *it = (struct item){.fd = it->fd, .kind = it->kind, .events = ev->events, .data = ev->data};
}

static void drop(struct epset *s, struct item *it)
{
    s->at[it->fd] = 0;
    s->counted[it->kind]--;
    struct item *last = &s->v[--s->n];
    if (it != last) {
        *it = *last;
        s->at[it->fd] = (unsigned)(it - s->v) + 1;
    }
}

static short epoll_user_revents(int fd, short events);

static void recount(struct epset *s)
{
    unsigned carried = s->counted[CARRIED], nested = s->counted[NESTED];
    atomic_store(&s->ncarried, carried);
    atomic_store(&s->nnested, nested);
    atomic_store(&s->futex_after_ns, 0); /* may fit now */
    /* From now on poll and select may meet an epoll set with carried
     * entries: sov_poll asks us about the descriptors it does not carry. */
    if (carried && !__atomic_load_n(&sov_poll_hooks.user_revents, __ATOMIC_RELAXED))
        __atomic_store_n(&sov_poll_hooks.user_revents, epoll_user_revents, __ATOMIC_RELEASE);
}

static void count_kernel(struct epset *s, int delta)
{
    int v = atomic_load(&s->nkernel) + delta;
    atomic_store(&s->nkernel, v < 0 ? 0 : v);
    /* A sleeper that did not poll the kernel set (kernel_may) polls it
     * from now on. (It counts itself in before it looks at nkernel, we
     * after changing it: one side sees the other.) */
    if (delta > 0 && atomic_load(&s->sleepers) > 0)
        sov_signal_event();
}

/* Drops every entry of this kind for fd, in all sets. */
static void forget(int fd, enum kind kind)
{
    for (int e = 0, end = atomic_load(&sets_end); e < end; e++) {
        struct epset *s = atomic_load_explicit(&sets[e], memory_order_relaxed);
        if (!s || !atomic_load(kind == CARRIED ? &s->ncarried : &s->nnested))
            continue;
        pthread_mutex_lock(&s->lock);
        struct item *it = find(s, fd);
        if (it && it->kind == kind) {
            drop(s, it);
            recount(s);
        }
        pthread_mutex_unlock(&s->lock);
    }
}

void epoll_forget_fd(int fd)
{
    forget(fd, CARRIED);
}

void epoll_close_fd(int fd)
{
    struct epset *s = set_of(fd);
    if (!s)
        return;
    bool was_epoll = atomic_load(&s->is_epoll);
    set_reset(s, false);
    if (was_epoll) /* the kernel drops it from the sets nesting it */
        forget(fd, NESTED);
}

/* ---- readiness ------------------------------------------------------------------ */

/* The sets this thread holds locked while looking into nested ones,
 * outermost first. A set met again (a cycle, possible only through a
 * descriptor closed and reused behind our back) is not looked into: it
 * would deadlock. Such a cycle also locks its sets in both orders, a wait
 * on either set taking its own lock first: two threads waiting on one set
 * each would deadlock. So only the outermost set is locked outright; a set
 * looked into from another is tried, NESTED_TRIES times (its holder, a
 * scan or an epoll_ctl, is quick), and else left with *busy set: its
 * readiness is unknown this time. */
static __thread struct epset *looking[MAX_DEPTH] __attribute__((tls_model("initial-exec")));
static __thread int nlooking __attribute__((tls_model("initial-exec")));

static bool look_lock(struct epset *s, bool *busy)
{
    if (nlooking == MAX_DEPTH)
        return false;
    for (int i = 0; i < nlooking; i++)
        if (looking[i] == s)
            return false;
    if (nlooking == 0) {
        pthread_mutex_lock(&s->lock);
    } else {
        for (int tries = 1; pthread_mutex_trylock(&s->lock) != 0; tries++) {
            if (tries == NESTED_TRIES) {
                *busy = true;
                return false;
            }
            sched_yield();
        }
    }
    looking[nlooking++] = s;
    return true;
}

static void look_unlock(struct epset *s)
{
    nlooking--;
    pthread_mutex_unlock(&s->lock);
}

static bool set_peek(struct epset *s, bool *pending);

/* The entry's readiness as epoll bits; *gone when it no longer stands for a
 * carried socket (closed, or fell back to the kernel) or an epoll set. */
static uint32_t readiness(struct item *it, bool *pending, bool *gone)
{
    *gone = false;
    if (it->kind == NESTED) {
        struct epset *inner = set_of(it->fd);
        if (!inner || !atomic_load(&inner->is_epoll)) {
            *gone = true;
            return 0;
        }
        return set_peek(inner, pending) ? EPOLLIN : 0; /* busy: pending */
    }
    struct sov_sock *s = sov_lookup(it->fd);
    if (!s) {
        *gone = true;
        return 0;
    }
    sov_sock_lock(s);
    if (s->dead || sov_lookup(it->fd) != s) {
        sov_sock_unlock(s);
        *gone = true;
        return 0;
    }
    switch (sov_tp_settle(s)) {
    case SOV_TP_PENDING: {
        bool room = sov_tp_early_room(s); /* a server may write at once */
        sov_sock_unlock(s);
        *pending = true;
        return room ? EPOLLOUT : 0;
    }
    case SOV_TP_FELL_BACK: /* unlocked */
        *gone = true;
        return 0;
    case SOV_TP_PAIRED:
        break;
    }
    short want = (short)(POLLIN | POLLOUT | POLLRDHUP | POLLPRI);
    uint32_t r = (uint16_t)sov_sock_revents(s, want);
    if (s->conn) { /* new bytes either way re-arm an edge-triggered entry */
        uint64_t rx = s->conn->stats.bytes_received, tx = s->conn->stats.bytes_sent;
        if ((it->events & EPOLLET) && (rx != it->last_rx || tx != it->last_tx))
            it->last = 0;
        it->last_rx = rx;
        it->last_tx = tx;
    }
    sov_sock_unlock(s);
    return r;
}

/* Would a wait on the set report one of its carried or nested entries?
 * Looks without consuming edges or one-shots, as poll on an epoll set.
 * *pending: a socket still pairing, or a nested set busy (look again). */
static bool set_peek(struct epset *s, bool *pending)
{
    if ((!atomic_load(&s->ncarried) && !atomic_load(&s->nnested)) || !look_lock(s, pending))
        return false;
    bool ready = false, gone;
    for (unsigned i = 0; i < s->n && !ready; i++) {
        struct item copy = s->v[i];
        if (copy.disabled)
            continue;
        uint32_t r = readiness(&copy, pending, &gone) & (copy.events | EPOLLERR | EPOLLHUP);
        if (copy.events & EPOLLET)
            r &= ~copy.last;
        ready = r != 0;
    }
    look_unlock(s);
    return ready;
}

/* Does the set (or one nested in it) hold a carried entry? A nested set
 * found busy may: waiting our way is right for any set. */
static bool set_active(struct epset *s)
{
    if (atomic_load(&s->ncarried))
        return true;
    bool busy = false;
    if (!atomic_load(&s->nnested) || !look_lock(s, &busy))
        return busy;
    bool active = false;
    for (unsigned i = 0; i < s->n && !active; i++) {
        struct epset *inner = s->v[i].kind == NESTED ? set_of(s->v[i].fd) : NULL;
        active = inner && atomic_load(&inner->is_epoll) && set_active(inner);
    }
    look_unlock(s);
    return active;
}

bool epoll_active(int fd)
{
    struct epset *s = set_of(fd);
    return s && atomic_load(&s->is_epoll) && set_active(s);
}

/* poll and select on an epoll set: POLLIN if it has a carried entry to
 * report (its kernel entries are the kernel's to tell). */
static short epoll_user_revents(int fd, short events)
{
    struct epset *s = set_of(fd);
    if (!s || !(events & (POLLIN | POLLRDNORM)) || !atomic_load(&s->is_epoll))
        return 0;
    bool pending = false;
    return set_peek(s, &pending) ? (short)(events & (POLLIN | POLLRDNORM)) : 0;
}

/* ---- epoll_ctl ------------------------------------------------------------------- */

/* A carried socket's kernel entry: no event of its own (errors and
 * hang-ups of the kernel socket come once: one-shot), the program's flags
 * so that the kernel checks them (EPOLLEXCLUSIVE with others: EINVAL), and
 * EPOLLOUT, which the connected kernel socket has at once, to wake threads
 * asleep on the set in the kernel. */
static struct epoll_event placeholder(int fd, const struct epoll_event *ev, bool wake)
{
    uint32_t want = ev ? ev->events : 0;
    uint32_t keep = EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE | EPOLLWAKEUP;
    if (want & EPOLLEXCLUSIVE)
        keep |= ~(uint32_t)(EPOLLIN | EPOLLOUT);
    uint32_t e = want & keep;
    e |= (e & EPOLLEXCLUSIVE) ? EPOLLET : EPOLLONESHOT;
    if (wake && !(e & EPOLLEXCLUSIVE))
        e |= EPOLLOUT;
    return (struct epoll_event){.events = e, .data.u64 = (uint64_t)TAG_OURS << 32 | (uint32_t)fd};
}

static bool placeholder_tag(epoll_data_t d)
{
    return d.u64 >> 32 == TAG_OURS;
}

/* A carried entry whose socket went to the kernel: its kernel entry takes
 * over with the program's events. */
static void to_kernel(int epfd, struct epset *s, struct item *it)
{
    struct epoll_event ev = {.events = it->disabled ? EPOLLONESHOT : it->events, .data = it->data};
    if (real.epoll_ctl(epfd, EPOLL_CTL_MOD, it->fd, &ev) == 0)
        count_kernel(s, 1);
}

static int ctl_carried(int epfd, int op, int fd, struct epoll_event *ev)
{
    if (op != EPOLL_CTL_DEL && !ev) { /* the kernel's first check */
        errno = EFAULT;
        return -1;
    }
    struct epoll_event hold = placeholder(fd, ev, false);
    if (real.epoll_ctl(epfd, op, fd, &hold) != 0)
        return -1; /* the kernel's errno */
    struct epset *s = set_get(epfd);
    if (!s) {
        if (op == EPOLL_CTL_ADD)
            real.epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
        errno = ENOMEM;
        return -1;
    }
    atomic_store(&s->is_epoll, true);
    pthread_mutex_lock(&s->lock);
    struct item *it = find(s, fd);
    int err = 0;
    if (op == EPOLL_CTL_DEL) {
        if (it)
            drop(s, it);
        else /* added while still a kernel socket */
            count_kernel(s, -1);
    } else { /* ADD (an entry of ours would be stale) or MOD */
        if (!it && op == EPOLL_CTL_MOD) /* added while still a kernel socket */
            count_kernel(s, -1);
        if (it && it->kind != CARRIED) /* a nested set's number, reused */
            drop(s, it), it = NULL;
        if (!it && !(it = append(s, fd, CARRIED)))
            err = ENOMEM;
        else
            fill(it, ev);
    }
    recount(s);
    pthread_mutex_unlock(&s->lock);
    if (err) {
        if (op == EPOLL_CTL_ADD)
            real.epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
        errno = err;
        return -1;
    }
    /* Threads asleep in the kernel on this set would not see the entry:
     * the placeholder wakes them. (They count themselves in before they
     * look at the entries, we after adding it: one side sees the other.) */
    if (op != EPOLL_CTL_DEL && atomic_load(&s->sleepers) > 0) {
        hold = placeholder(fd, ev, true);
        real.epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &hold);
        sov_signal_event(); /* and those asleep on the doorbells alone */
    }
    return 0;
}

/* fd is no longer carried: an entry of ours for it (the socket fell back
 * since it was added) becomes the kernel's. */
static void fell_back(int epfd, struct epset *s, int fd)
{
    pthread_mutex_lock(&s->lock);
    struct item *it = find(s, fd);
    if (it && it->kind == CARRIED) {
        to_kernel(epfd, s, it);
        drop(s, it);
        recount(s);
    }
    pthread_mutex_unlock(&s->lock);
}

/* After the kernel took a change to a kernel entry: our bookkeeping. */
static void kernel_changed(int epfd, int op, int fd, const struct epoll_event *ev)
{
    struct epset *s = set_get(epfd);
    if (!s)
        return;
    atomic_store(&s->is_epoll, true);
    struct epset *inner = fd != epfd ? set_of(fd) : NULL;
    bool nested = inner && atomic_load(&inner->is_epoll);
    pthread_mutex_lock(&s->lock);
    count_kernel(s, op == EPOLL_CTL_ADD ? 1 : op == EPOLL_CTL_DEL ? -1 : 0);
    struct item *it = find(s, fd);
    if (it && (op == EPOLL_CTL_DEL || op == EPOLL_CTL_ADD || it->kind != NESTED))
        drop(s, it), it = NULL; /* DEL, or a stale one */
    if (nested && op != EPOLL_CTL_DEL && (it || (it = append(s, fd, NESTED))))
        fill(it, ev);
    recount(s);
    pthread_mutex_unlock(&s->lock);
}

PRELOAD_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    preload_ready();
    if (carried(fd))
        return ctl_carried(epfd, op, fd, ev);
    struct epset *s = set_of(epfd);
    if (s && atomic_load(&s->ncarried))
        fell_back(epfd, s, fd);
    int rc = real.epoll_ctl(epfd, op, fd, ev);
    if (rc == 0) {
        int err = errno;
        kernel_changed(epfd, op, fd, ev);
        errno = err;
    }
    return rc;
}

/* ---- waiting -------------------------------------------------------------------- */

/* Folds events for `data` into an event already in out[0..n) with the same
 * data (a nested set reported by both the kernel and us): true if done. */
static bool merge(struct epoll_event *out, int n, epoll_data_t data, uint32_t events)
{
    for (int i = 0; i < n; i++)
        if (out[i].data.u64 == data.u64) {
            out[i].events |= events;
            return true;
        }
    return false;
}

/* Our side of a one-shot nested entry fired: so does its kernel side. */
static void disarm_kernel(int epfd, struct item *it)
{
    struct epoll_event ev = {.events = EPOLLONESHOT, .data = it->data};
    real.epoll_ctl(epfd, EPOLL_CTL_MOD, it->fd, &ev);
}

/* Drops the entries a scan found gone. */
static void sweep(int epfd, struct epset *s)
{
    for (unsigned i = 0; i < s->n;) {
        struct item *it = &s->v[i];
        if (!it->gone) {
            i++;
            continue;
        }
        if (it->kind == CARRIED)
            to_kernel(epfd, s, it);
        else /* the closed set's kernel entry went with it */
            count_kernel(s, -1);
        drop(s, it);
    }
    recount(s);
}

/* Adds the ready carried and nested entries to out[n..max), starting after
 * the last one reported (each has its turn when `max` is small); returns
 * the new count. */
static int scan(int epfd, struct epset *s, struct epoll_event *out, int n, int max, bool *pending)
{
    int n0 = n;
    bool swept = false;
    if (!look_lock(s, pending)) /* outermost: never busy */
        return n;
    unsigned count = s->n, i = s->cursor < count ? s->cursor : 0;
    for (unsigned k = 0; k < count && n < max; k++, i = i + 1 < count ? i + 1 : 0) {
        struct item *it = &s->v[i];
        if (it->disabled)
            continue;
        bool gone;
        uint32_t report = readiness(it, pending, &gone) & (it->events | EPOLLERR | EPOLLHUP);
        if (gone) {
            it->gone = swept = true;
            continue;
        }
        if (it->events & EPOLLET) {
            uint32_t fresh = report & ~it->last;
            it->last = report;
            report = fresh;
        }
        if (!report)
            continue;
        if (it->events & EPOLLONESHOT) {
            it->disabled = true;
            if (it->kind == NESTED)
                disarm_kernel(epfd, it);
        }
        s->cursor = i + 1;
        if (it->kind == NESTED && merge(out, n0, it->data, report))
            continue;
        out[n++] = (struct epoll_event){.events = report, .data = it->data};
    }
    if (swept)
        sweep(epfd, s);
    look_unlock(s);
    return n;
}

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
    return nested && merge(out, n0, ev.data, ev.events);
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
        if (placeholder_tag(ev.data) || (nested && nested_fired(s, ev, out, n0)))
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
    n = scan(epfd, s, out, n, max, pending);
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
    if (atomic_load(&s->nnested) > 0 || !look_lock(s, &busy))
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
    look_unlock(s);
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
        if (set_active(s)) { /* joined just now: see ctl_carried */
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
        if (!placeholder_tag(out[i].data))
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
    struct epset *s = set_of(epfd);
    if (!s)
        return real.epoll_wait(epfd, out, max, timeout);
    if (set_active(s))
        return wait_active(epfd, s, out, max, timeout, NULL);
    return wait_kernel(epfd, s, out, max, timeout, NULL, false);
}

PRELOAD_EXPORT int epoll_pwait(int epfd, struct epoll_event *out, int max, int timeout,
                               const sigset_t *mask)
{
    preload_ready();
    struct epset *s = set_of(epfd);
    if (!s)
        return real.epoll_pwait(epfd, out, max, timeout, mask);
    if (set_active(s))
        return wait_active(epfd, s, out, max, timeout, mask);
    return wait_kernel(epfd, s, out, max, timeout, mask, true);
}

/* The timeout rounds up to whole milliseconds, as epoll_pwait's does. */
PRELOAD_EXPORT int epoll_pwait2(int epfd, struct epoll_event *out, int max,
                                const struct timespec *t, const sigset_t *mask)
{
    preload_ready();
    struct epset *s = set_of(epfd);
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

/* ---- creation --------------------------------------------------------------------- */

/* A new epoll descriptor may reuse the number of one closed behind our
 * back: start it empty, known to hold nothing. */
static int fresh_set(int epfd)
{
    struct epset *s = epfd >= 0 ? set_get(epfd) : NULL;
    if (s)
        set_reset(s, true);
    return epfd;
}

PRELOAD_EXPORT int epoll_create(int size)
{
    preload_ready();
    return fresh_set(real.epoll_create(size));
}

PRELOAD_EXPORT int epoll_create1(int flags)
{
    preload_ready();
    return fresh_set(real.epoll_create1(flags));
}
