/*
 * epoll.c - epoll over carried descriptors.
 *
 * The kernel cannot see a carried socket's readiness, so each epoll set
 * that holds one keeps those entries here (level- or edge-triggered,
 * EPOLLONESHOT) while its kernel descriptors stay in the kernel set. Two
 * doorbells join the kernel set: the completion queue's wake-up descriptor
 * and sovia's event descriptor, so a sleeping epoll_wait wakes for sovia
 * traffic, and an epoll set nested in another becomes readable too.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sovia.h>

#include "preload.h"
#include "sock.h"
#include "transparent.h"

#define DOORBELL_CQ 0x736f7669610001ull
#define DOORBELL_EVENT 0x736f7669610002ull
#define MAX_SETS 65536

struct item {
    int fd;
    uint32_t events;
    epoll_data_t data;
    bool disabled;  /* EPOLLONESHOT fired */
    uint32_t last;  /* readiness at the previous look (for edges) */
    uint64_t last_rx, last_tx;
};

struct epset {
    pthread_mutex_t lock;
    struct item *v;
    unsigned n, cap;
    bool doorbells;
    atomic_uint rounds; /* scans since the kernel set was last asked */
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
    struct epset *expected = NULL;
    if (!atomic_compare_exchange_strong(&sets[epfd], &expected, s)) {
        free(s);
        return expected;
    }
    int end = atomic_load(&sets_end);
    while (end <= epfd && !atomic_compare_exchange_weak(&sets_end, &end, epfd + 1))
        ;
    return s;
}

static struct item *find(struct epset *s, int fd)
{
    for (unsigned i = 0; i < s->n; i++)
        if (s->v[i].fd == fd)
            return &s->v[i];
    return NULL;
}

static void drop(struct epset *s, struct item *it)
{
    *it = s->v[--s->n];
}

void epoll_forget_fd(int fd)
{
    for (int e = 0, end = atomic_load(&sets_end); e < end; e++) {
        struct epset *s = atomic_load_explicit(&sets[e], memory_order_relaxed);
        if (!s || !s->n)
            continue;
        pthread_mutex_lock(&s->lock);
        struct item *it = find(s, fd);
        if (it)
            drop(s, it);
        pthread_mutex_unlock(&s->lock);
    }
}

static int ring_doorbells(int epfd, struct epset *s)
{
    if (s->doorbells)
        return 0;
    if (sov_init() != 0)
        return -1;
    struct epoll_event cq = {.events = EPOLLIN, .data.u64 = DOORBELL_CQ};
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = DOORBELL_EVENT};
    if (real.epoll_ctl(epfd, EPOLL_CTL_ADD, sov_g.cq_fd, &cq) != 0 && errno != EEXIST)
        return -1;
    if (real.epoll_ctl(epfd, EPOLL_CTL_ADD, sov_g.event_fd, &ev) != 0 && errno != EEXIST)
        return -1;
    s->doorbells = true;
    return 0;
}

/* Does this set hold carried entries (so a set nesting it must ask us)? */
static bool set_is_ours(int fd)
{
    struct epset *s = set_of(fd);
    return s && s->n;
}

PRELOAD_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    preload_ready();
    bool ours = carried(fd) || set_is_ours(fd);
    struct epset *s = set_of(epfd);
    if (!ours) {
        if (s && s->n) { /* it was carried when added, and fell back since */
            pthread_mutex_lock(&s->lock);
            struct item *it = find(s, fd);
            if (it)
                drop(s, it);
            pthread_mutex_unlock(&s->lock);
            if (it && op == EPOLL_CTL_DEL)
                return 0;
            if (it && op == EPOLL_CTL_MOD)
                op = EPOLL_CTL_ADD;
        }
        return real.epoll_ctl(epfd, op, fd, ev);
    }
    if (fd == epfd) {
        errno = EINVAL;
        return -1;
    }
    /* Let the kernel validate epfd (EBADF, EINVAL for a non-epoll). */
    if (fcntl(epfd, F_GETFD) < 0)
        return -1;
    if (op != EPOLL_CTL_DEL && !ev) {
        errno = EFAULT;
        return -1;
    }
    if (!(s = set_get(epfd)) || ring_doorbells(epfd, s) != 0) {
        errno = ENOMEM;
        return -1;
    }
    bool nested = set_is_ours(fd);
    pthread_mutex_lock(&s->lock);
    struct item *it = find(s, fd);
    int err = 0;
    switch (op) {
    case EPOLL_CTL_ADD:
        if (it) {
            err = EEXIST;
        } else if (s->n == s->cap) {
            unsigned cap = s->cap ? s->cap * 2 : 8;
            struct item *v = realloc(s->v, cap * sizeof(*v));
            if (!v)
                err = ENOMEM;
            else
                s->v = v, s->cap = cap;
        }
        if (!err)
            s->v[s->n++] = (struct item){.fd = fd, .events = ev->events, .data = ev->data};
        break;
    case EPOLL_CTL_MOD:
        if (!it)
            err = ENOENT;
        else
            *it = (struct item){.fd = fd, .events = ev->events, .data = ev->data};
        break;
    case EPOLL_CTL_DEL:
        if (!it)
            err = ENOENT;
        else
            drop(s, it);
        break;
    default:
        err = EINVAL;
    }
    pthread_mutex_unlock(&s->lock);
    if (!err && nested) /* the inner set's kernel entries reach us through the kernel */
        real.epoll_ctl(epfd, op, fd, ev);
    if (err) {
        errno = err;
        return -1;
    }
    return 0;
}

static uint32_t readiness(struct item *it, bool *pending, bool *gone);

/* Any ready entry in a nested set (without consuming edges). */
static bool set_has_ready(int fd)
{
    struct epset *s = set_of(fd);
    if (!s)
        return false;
    bool ready = false, pending, gone;
    pthread_mutex_lock(&s->lock);
    for (unsigned i = 0; i < s->n && !ready; i++) {
        struct item copy = s->v[i];
        ready = !copy.disabled && (readiness(&copy, &pending, &gone) & copy.events);
    }
    pthread_mutex_unlock(&s->lock);
    return ready;
}

/* The entry's readiness as epoll bits; *gone when its socket is no longer
 * carried (closed, or fell back to the kernel). */
static uint32_t readiness(struct item *it, bool *pending, bool *gone)
{
    *gone = false;
    if (set_is_ours(it->fd))
        return set_has_ready(it->fd) ? EPOLLIN : 0;
    struct sov_sock *s = sov_lookup(it->fd);
    if (!s) {
        *gone = true;
        return 0;
    }
    sov_lock(&s->lock);
    if (s->dead || sov_lookup(it->fd) != s) {
        sov_unlock(&s->lock);
        *gone = true;
        return 0;
    }
    switch (sov_tp_settle(s)) {
    case SOV_TP_PENDING:
        sov_unlock(&s->lock);
        *pending = true;
        return 0;
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
    sov_unlock(&s->lock);
    return r;
}

/* Moves an entry whose socket fell back to the kernel into the kernel set. */
static void to_kernel(int epfd, struct item *it)
{
    struct epoll_event ev = {.events = it->events, .data = it->data};
    if (fcntl(it->fd, F_GETFD) >= 0)
        real.epoll_ctl(epfd, EPOLL_CTL_ADD, it->fd, &ev);
}

static int scan(int epfd, struct epset *s, struct epoll_event *out, int max, bool *pending)
{
    int n = 0;
    pthread_mutex_lock(&s->lock);
    for (unsigned i = 0; i < s->n && n < max;) {
        struct item *it = &s->v[i];
        bool gone;
        uint32_t r = it->disabled ? 0 : readiness(it, pending, &gone);
        if (!it->disabled && gone) {
            to_kernel(epfd, it);
            drop(s, it);
            continue;
        }
        uint32_t report = r & (it->events | EPOLLERR | EPOLLHUP);
        if (it->events & EPOLLET) {
            uint32_t fresh = report & ~it->last;
            it->last = report;
            report = fresh;
        }
        if (report) {
            out[n++] = (struct epoll_event){.events = report, .data = it->data};
            if (it->events & EPOLLONESHOT)
                it->disabled = true;
        }
        i++;
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

/* Kernel events after `n` user ones, without the doorbells (drained). */
static int kernel_events(int epfd, struct epoll_event *out, int n, int max, int timeout)
{
    int k = real.epoll_wait(epfd, out + n, max - n, timeout);
    if (k < 0)
        return -1;
    int kept = n;
    for (int i = n; i < n + k; i++) {
        uint64_t tag = out[i].data.u64;
        if (tag == DOORBELL_EVENT) {
            uint64_t v;
            if (real.read(sov_g.event_fd, &v, sizeof(v)) < 0) {
                /* drained by another waiter */
            }
        } else if (tag == DOORBELL_CQ) {
            VipxCQArm(sov_g.cq, VIP_TRUE); /* arming drains old wake-ups */
            VipxCQArm(sov_g.cq, VIP_FALSE);
        } else {
            out[kept++] = out[i];
        }
    }
    return kept;
}

static int wait_any(int epfd, struct epset *s, struct epoll_event *out, int max, int timeout)
{
    uint64_t start = sov_now_ns(), spin_ns = sov_poll_spin_ns();
    for (;;) {
        bool pending = false;
        int n = scan(epfd, s, out, max, &pending);
        /* The kernel set is asked every 64th scan (counted across calls): a
         * system call each time would cost more than a sovia round trip. */
        if (n < max && atomic_fetch_add(&s->rounds, 1) % 64 == 0) {
            int k = kernel_events(epfd, out, n, max, 0);
            if (k < 0)
                return -1;
            n = k;
        }
        if (n || timeout == 0)
            return n;
        uint64_t now = sov_now_ns();
        long left_ms = timeout < 0 ? -1 : timeout - (long)((now - start) / 1000000);
        if (timeout > 0 && left_ms <= 0)
            return 0;
        if (now - start < spin_ns)
            continue;
        VipxCQArm(sov_g.cq, VIP_TRUE);
        n = scan(epfd, s, out, max, &pending);
        if (n) {
            VipxCQArm(sov_g.cq, VIP_FALSE);
            return n;
        }
        int cap = pending ? 2 : 20;
        int slice = left_ms < 0 || left_ms > cap ? cap : (int)left_ms;
        int k = kernel_events(epfd, out, 0, max, slice);
        VipxCQArm(sov_g.cq, VIP_FALSE);
        if (k != 0)
            return k; /* kernel events, or -1 (EINTR) */
    }
}

PRELOAD_EXPORT int epoll_wait(int epfd, struct epoll_event *out, int max, int timeout)
{
    preload_ready();
    struct epset *s = set_of(epfd);
    if (!s || !s->doorbells)
        return real.epoll_wait(epfd, out, max, timeout);
    if (!out || max <= 0) {
        errno = EINVAL;
        return -1;
    }
    if (!s->n) { /* no carried entry left: the kernel's, minus the doorbells */
        uint64_t end = sov_now_ns() + (uint64_t)(timeout > 0 ? timeout : 0) * 1000000u;
        for (;;) {
            int left = timeout < 0 ? -1 : (int)((end - sov_now_ns()) / 1000000u);
            if (timeout >= 0 && sov_now_ns() >= end)
                left = 0;
            int k = kernel_events(epfd, out, 0, max, left);
            if (k != 0 || left == 0)
                return k;
        }
    }
    return wait_any(epfd, s, out, max, timeout);
}

PRELOAD_EXPORT int epoll_pwait(int epfd, struct epoll_event *out, int max, int timeout,
                               const sigset_t *mask)
{
    preload_ready();
    struct epset *s = set_of(epfd);
    if (!s || !s->doorbells)
        return real.epoll_pwait(epfd, out, max, timeout, mask);
    sigset_t old;
    if (mask)
        pthread_sigmask(SIG_SETMASK, mask, &old);
    int rc = epoll_wait(epfd, out, max, timeout);
    if (mask) {
        int err = errno;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        errno = err;
    }
    return rc;
}

void epoll_close_fd(int fd)
{
    struct epset *s = set_of(fd);
    if (s) {
        pthread_mutex_lock(&s->lock);
        s->n = 0;
        s->doorbells = false;
        pthread_mutex_unlock(&s->lock);
    }
}

/* A new epoll descriptor may reuse the number of one closed behind our
 * back: start it empty. */
static int fresh_set(int epfd)
{
    struct epset *s = set_of(epfd);
    if (s) {
        pthread_mutex_lock(&s->lock);
        s->n = 0;
        s->doorbells = false;
        pthread_mutex_unlock(&s->lock);
    }
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
