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

#include "hints.h"
#include "pollwait.h"
#include "preload.h"
#include "sock.h"
#include "transparent.h"
#include "waits.h"
#include "epset.h"

#define MAX_SETS 65536
#define MAX_DEPTH 6      /* sets looked into at once (the kernel nests 4 levels) */
#define NESTED_TRIES 64  /* a nested set's lock is tried that often (look_lock) */
#define TAG_OURS 0x736f7669u /* "sovi": a placeholder's tag, with its descriptor */
#define SMALL_SET 32     /* a set of at most as many entries is looked at whole */
#define BACKSTOP_NS 20000000 /* at least this often, every entry (hints are hints) */
#define BACKSTOP_SHARE 64    /* and at most a 64th of the time in such looks */

static _Atomic(struct epset *) sets[MAX_SETS];
static atomic_int sets_end; /* one past the highest epfd with a set */

struct epset *eps_of(int epfd)
{
    return epfd >= 0 && epfd < MAX_SETS ? atomic_load(&sets[epfd]) : NULL;
}

static struct epset *set_get(int epfd)
{
    struct epset *s = eps_of(epfd);
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
    hints_after_fork_child();
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
    s->ndue = 0;
    s->full_owed = true;
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

/* The entry is looked at in each scan until a look finds it may wait for
 * its next hint. No room: the next scan looks at every entry. */
static void mark_due(struct epset *s, struct item *it)
{
    if (it->due)
        return;
    if (s->ndue == s->duecap) {
        unsigned cap = s->duecap ? s->duecap * 2 : 64;
        int *due = realloc(s->due, cap * sizeof(*due));
        int *spare = due ? realloc(s->spare, cap * sizeof(*spare)) : NULL;
        if (due)
            s->due = due;
        if (!spare) {
            s->full_owed = true;
            return;
        }
        s->spare = spare;
        s->duecap = cap;
    }
    it->due = true;
    s->due[s->ndue++] = it->fd;
}

/* Sets an entry's events and data anew (its kind as it was given). */
static void fill(struct epset *s, struct item *it, const struct epoll_event *ev)
{
    *it = (struct item){.fd = it->fd, .kind = it->kind, .events = ev->events, .data = ev->data};
    mark_due(s, it);
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
    struct epset *s = eps_of(fd);
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

bool eps_look_lock(struct epset *s, bool *busy)
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

void eps_look_unlock(struct epset *s)
{
    nlooking--;
    pthread_mutex_unlock(&s->lock);
}

static bool set_peek(struct epset *s, bool *pending);

/* The entry's readiness as epoll bits; *gone when it no longer stands for a
 * carried socket (closed, or fell back to the kernel) or an epoll set;
 * *cover when it may wait for a hint before it is looked at again. */
static uint32_t readiness(struct item *it, bool *pending, bool *gone, bool *cover)
{
    *gone = false;
    *cover = false;
    if (it->kind == NESTED) {
        struct epset *inner = eps_of(it->fd);
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
    *cover = hints_cover(s, it->fd); /* before the look: see hints_cover */
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
    if ((!atomic_load(&s->ncarried) && !atomic_load(&s->nnested)) || !eps_look_lock(s, pending))
        return false;
    bool ready = false, gone, cover;
    for (unsigned i = 0; i < s->n && !ready; i++) {
        struct item copy = s->v[i];
        if (copy.disabled)
            continue;
        uint32_t r = readiness(&copy, pending, &gone, &cover) & (copy.events | EPOLLERR | EPOLLHUP);
        if (copy.events & EPOLLET)
            r &= ~copy.last;
        ready = r != 0;
    }
    eps_look_unlock(s);
    return ready;
}

/* Does the set (or one nested in it) hold a carried entry? A nested set
 * found busy may: waiting our way is right for any set. */
bool eps_active(struct epset *s)
{
    if (atomic_load(&s->ncarried))
        return true;
    bool busy = false;
    if (!atomic_load(&s->nnested) || !eps_look_lock(s, &busy))
        return busy;
    bool active = false;
    for (unsigned i = 0; i < s->n && !active; i++) {
        struct epset *inner = s->v[i].kind == NESTED ? eps_of(s->v[i].fd) : NULL;
        active = inner && atomic_load(&inner->is_epoll) && eps_active(inner);
    }
    eps_look_unlock(s);
    return active;
}

bool epoll_active(int fd)
{
    struct epset *s = eps_of(fd);
    return s && atomic_load(&s->is_epoll) && eps_active(s);
}

/* poll and select on an epoll set: POLLIN if it has a carried entry to
 * report (its kernel entries are the kernel's to tell). */
static short epoll_user_revents(int fd, short events)
{
    struct epset *s = eps_of(fd);
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

bool eps_placeholder(epoll_data_t d)
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
            fill(s, it, ev);
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
    struct epset *inner = fd != epfd ? eps_of(fd) : NULL;
    bool nested = inner && atomic_load(&inner->is_epoll);
    pthread_mutex_lock(&s->lock);
    count_kernel(s, op == EPOLL_CTL_ADD ? 1 : op == EPOLL_CTL_DEL ? -1 : 0);
    struct item *it = find(s, fd);
    if (it && (op == EPOLL_CTL_DEL || op == EPOLL_CTL_ADD || it->kind != NESTED))
        drop(s, it), it = NULL; /* DEL, or a stale one */
    if (nested && op != EPOLL_CTL_DEL && (it || (it = append(s, fd, NESTED))))
        fill(s, it, ev);
    recount(s);
    pthread_mutex_unlock(&s->lock);
}

PRELOAD_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    preload_ready();
    if (carried(fd))
        return ctl_carried(epfd, op, fd, ev);
    struct epset *s = eps_of(epfd);
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
bool eps_merge(struct epoll_event *out, int n, epoll_data_t data, uint32_t events)
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

/* One scan's state: the events so far, and what it found. */
struct look {
    struct epoll_event *out;
    int n, n0, max;
    bool *pending, swept;
};

/* Looks at one entry, adds its event if ready; true if the entry stays
 * due: not left to hints (a set, a socket pairing, migrating, or on
 * another NIC), or reported level-triggered (still ready next time, as on
 * the kernel's ready list). */
static bool visit(int epfd, struct item *it, struct look *l, bool *reported)
{
    *reported = false;
    if (it->disabled)
        return false; /* until a MOD arms it again (fill) */
    bool gone, cover, pending = false;
    uint32_t report = readiness(it, &pending, &gone, &cover) & (it->events | EPOLLERR | EPOLLHUP);
    *l->pending |= pending;
    if (gone) {
        it->gone = l->swept = true;
        return false;
    }
    if (it->events & EPOLLET) {
        uint32_t fresh = report & ~it->last;
        it->last = report;
        report = fresh;
    }
    if (!report)
        return !cover || pending;
    *reported = true;
    if (it->events & EPOLLONESHOT) {
        it->disabled = true;
        if (it->kind == NESTED)
            disarm_kernel(epfd, it);
    }
    if (!(it->kind == NESTED && eps_merge(l->out, l->n0, it->data, report)))
        l->out[l->n++] = (struct epoll_event){.events = report, .data = it->data};
    return !cover || pending || !(it->events & (EPOLLET | EPOLLONESHOT));
}

/* Every entry, starting after the last one reported (each has its turn
 * when `max` is small); the due list made anew from the entries' marks. */
static void scan_all(int epfd, struct epset *s, struct look *l)
{
    unsigned count = s->n, i = s->cursor < count ? s->cursor : 0;
    for (unsigned k = 0; k < count && l->n < l->max; k++, i = i + 1 < count ? i + 1 : 0) {
        struct item *it = &s->v[i];
        bool reported;
        it->due = visit(epfd, it, l, &reported);
        if (reported)
            s->cursor = i + 1;
    }
    s->ndue = 0;
    for (i = 0; i < count; i++)
        if (s->v[i].due) {
            s->v[i].due = false;
            mark_due(s, &s->v[i]);
        }
}

/* The due entries only; those reported go to the end of the list (their
 * turn comes after the others'). */
static void scan_due(int epfd, struct epset *s, struct look *l)
{
    unsigned kept = 0, last = 0, gen = ++s->gen;
    for (unsigned i = 0; i < s->ndue; i++) {
        int fd = s->due[i];
        struct item *it = find(s, fd);
        if (!it || !it->due || it->gen == gen)
            continue; /* dropped, or met already */
        it->gen = gen;
        bool reported = false;
        if (l->n >= l->max || visit(epfd, it, l, &reported)) {
            if (reported)
                s->spare[last++] = fd;
            else
                s->due[kept++] = fd;
        } else {
            it->due = false;
        }
    }
    memcpy(s->due + kept, s->spare, last * sizeof(*s->due));
    s->ndue = kept + last;
}

static void hinted(void *arg, int fd)
{
    struct epset *s = arg;
    struct item *it = find(s, fd);
    if (it && it->kind == CARRIED)
        mark_due(s, it);
}

/* Adds the ready carried and nested entries to out[n..max); returns the
 * new count. A small set, one whose hints the log lost, or one not looked
 * at whole for BACKSTOP_NS (a peer may withhold hints; a local change
 * comes without one) is looked at whole, the rest of the time only its due
 * entries: a scan costs what is ready, not what is carried. */
int eps_scan(int epfd, struct epset *s, struct epoll_event *out, int n, int max, bool *pending)
{
    struct look l = {.out = out, .n = n, .n0 = n, .max = max, .pending = pending};
    if (!eps_look_lock(s, pending)) /* outermost: never busy */
        return n;
    bool whole = !hints_take(&s->hint_cursor, hinted, s) || s->full_owed || s->n <= SMALL_SET;
    uint64_t now = sov_now_ns();
    uint64_t every = s->full_cost_ns * BACKSTOP_SHARE;
    if (whole || now - s->full_ns >= (every > BACKSTOP_NS ? every : BACKSTOP_NS)) {
        s->full_owed = false;
        scan_all(epfd, s, &l);
        if (s->n > SMALL_SET) {
            s->full_ns = sov_now_ns();
            s->full_cost_ns = s->full_ns - now;
        }
    } else {
        scan_due(epfd, s, &l);
    }
    if (l.swept)
        sweep(epfd, s);
    eps_look_unlock(s);
    return l.n;
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
