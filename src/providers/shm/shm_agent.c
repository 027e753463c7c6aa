/*
 * shm_agent.c - the emulated NIC's kernel agent: one thread per NIC that
 * notices a lost peer (its process exited, it disconnected, it reported a
 * broken connection, or its socket closed) and moves the VI to ERROR, which
 * wakes every waiter and flushes the posted receives. It sleeps in
 * epoll_wait the rest of the time.
 *
 * Each watched VI contributes its connection socket and the peer process's
 * pidfd (the socket alone misses a death when a forked child still holds
 * it by accident). The pidfd is one per peer process, whatever its number
 * of connections (`struct shm_pidwatch`, counted per VI): a pidfd per
 * connection was a descriptor per connection. A peer that shares its end with a child on purpose says
 * so (SHM_MSG_SHARED, VipxViShare): its pid is no longer watched, and the
 * connection ends when the socket reaches end-of-file, after the last
 * holder. Events are taken one at a time and checked against the set of VIs
 * still watched, under a lock that unwatch also takes, so a VI is never
 * touched after it was torn down. An event names the watch by a number of
 * its own, not the VI: VI structures are reused (pool.c), and an event
 * taken for a VI just before it was unwatched and destroyed (its peer
 * disconnected: a hang-up) used to be read, once the agent had the lock,
 * as news of the next VI made in the same structure. That one failed as
 * closed by its peer right after it connected: under sovia run a prefork
 * worker's claim VI, then the VI of the client it paired with, whose
 * echo then read end of stream or ECONNRESET (tests/preload/prefork.c).
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shm.h"

#define PIDFD_TAG 1u

/* A watched peer process: its pidfd in the epoll set, and the VIs that
 * watch it (refs). */
struct shm_pidwatch {
    pid_t pid;
    int fd;
    unsigned refs;
};

struct shm_agent {
    pthread_t thread;
    int epfd, stopfd;
    pthread_mutex_t lock; /* recursive: the error handler may tear the VI down */
    struct shm_vi **watched;
    size_t n, cap;
    uint64_t last_id; /* of a watch; 0 is the stop request's event */
    struct shm_pidwatch **pids;
    size_t npids, cappids;
    bool parents; /* a forked child's copy: epfd is the parent's set */
};

/* The process a pidfd names has exited (or cannot be asked). */
static bool pidfd_exited(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) != 0;
}

bool shm_agent_peer_runs(struct shm_agent *a, const struct shm_peer *peer)
{
    if (a)
        pthread_mutex_lock(&a->lock); /* the agent moves peer->pidfd into pidw */
    int fd = peer->pidw ? peer->pidw->fd : peer->pidfd;
    bool runs = fd >= 0 && !pidfd_exited(fd);
    if (a)
        pthread_mutex_unlock(&a->lock);
    return runs;
}

static struct shm_pidwatch *pidwatch_find(struct shm_agent *a, const struct shm_pidwatch *w)
{
    for (size_t i = 0; i < a->npids; i++)
        if (a->pids[i] == w)
            return a->pids[i];
    return NULL;
}

/* The watch of the process *pidfd names (taken: set to -1), shared with the
 * VIs that watch it already. Both pidfds still running with one pid name
 * the same process. NULL when out of memory (*pidfd left). */
static struct shm_pidwatch *pidwatch_get(struct shm_agent *a, pid_t pid, int *pidfd)
{
    bool alive = !pidfd_exited(*pidfd);
    struct shm_pidwatch *w;

    for (size_t i = 0; alive && i < a->npids; i++) {
        w = a->pids[i];
        if (w->pid == pid && !pidfd_exited(w->fd)) {
            w->refs++;
            VipxFdClose(*pidfd);
            *pidfd = -1;
            return w;
        }
    }
    if (a->npids == a->cappids) {
        size_t cap = a->cappids ? a->cappids * 2 : 8;
        struct shm_pidwatch **n = realloc(a->pids, cap * sizeof(*n));
        if (!n)
            return NULL;
        a->pids = n;
        a->cappids = cap;
    }
    w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    *w = (struct shm_pidwatch){.pid = pid, .fd = *pidfd, .refs = 1};
    struct epoll_event pev = {.events = EPOLLIN, .data.u64 = (uintptr_t)w | PIDFD_TAG};
    if (epoll_ctl(a->epfd, EPOLL_CTL_ADD, w->fd, &pev) != 0) {
        free(w);
        return NULL;
    }
    a->pids[a->npids++] = w;
    *pidfd = -1;
    return w;
}

static void pidwatch_put(struct shm_agent *a, struct shm_pidwatch *w)
{
    if (--w->refs)
        return;
    for (size_t i = 0; i < a->npids; i++)
        if (a->pids[i] == w) {
            a->pids[i] = a->pids[--a->npids];
            break;
        }
    if (!a->parents)
        epoll_ctl(a->epfd, EPOLL_CTL_DEL, w->fd, NULL);
    VipxFdClose(w->fd);
    free(w);
}

/* The VI watched under `id`, if it still is. */
static struct shm_vi *watched_as(struct shm_agent *a, uint64_t id)
{
    for (size_t i = 0; i < a->n; i++)
        if (a->watched[i]->agent_id == id)
            return a->watched[i];
    return NULL;
}

enum peer_news { PEER_ALIVE, PEER_CLOSED, PEER_BROKEN };

static void stop_watching_pid(struct shm_agent *a, struct shm_peer *peer)
{
    if (peer->pidw) {
        pidwatch_put(a, peer->pidw);
        peer->pidw = NULL;
    }
    if (peer->pidfd >= 0) {
        VipxFdClose(peer->pidfd);
        peer->pidfd = -1;
    }
}

/* Reads what the peer sent. End-of-file without a notice is the last
 * holder on the other side closing or exiting: an orderly end. */
static enum peer_news read_socket(struct shm_agent *a, struct shm_peer *peer, uint32_t events,
                                  bool *nudged)
{
    for (;;) {
        struct shm_msg m;
        char cbuf[CMSG_SPACE(sizeof(int) * 8)];
        struct iovec iov = {&m, sizeof(m)};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                            .msg_controllen = sizeof(cbuf)};
        ssize_t n = vipl_fd_recvmsg(peer->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC, UINT_MAX);
        if (n < 0) {
            if (errno != EAGAIN && errno != EINTR)
                return PEER_CLOSED;
            return events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP) ? PEER_CLOSED : PEER_ALIVE;
        }
        if (n == 0)
            return PEER_CLOSED;
        /* Nothing is expected with descriptors now: drop any. */
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
                for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++)
                    VipxFdClose(((int *)CMSG_DATA(c))[i]);
        if (n != (ssize_t)sizeof(m) || m.magic != SHM_MAGIC)
            continue;
        if (m.type == SHM_MSG_DISCONNECT || m.type == SHM_MSG_BROKEN)
            return PEER_BROKEN;
        if (m.type == SHM_MSG_SHARED)
            stop_watching_pid(a, peer);
        if (m.type == SHM_MSG_NUDGE)
            *nudged = true;
    }
}

static void unwatch_locked(struct shm_agent *a, struct shm_vi *vi)
{
    for (size_t i = 0; i < a->n; i++)
        if (a->watched[i] == vi) {
            a->watched[i] = a->watched[--a->n];
            break;
        }
    if (vi->peer) {
        if (!a->parents) /* the child's DEL would end the parent's watch */
            epoll_ctl(a->epfd, EPOLL_CTL_DEL, vi->peer->sock, NULL);
        /* Only its share of the watch: the exec export asks watch_pid. */
        if (vi->peer->pidw) {
            pidwatch_put(a, vi->peer->pidw);
            vi->peer->pidw = NULL;
            vi->peer->watch_pid = true;
        }
    }
    vi->agent_watched = false;
}

/* Takes what the peer said, then fails the VI if it went. nudged: set when
 * it asked for a look. */
static void check_peer(struct shm_agent *a, struct shm_vi *vi, uint32_t events, bool pid_died,
                       bool *nudged)
{
    /* The socket first: a SHARED notice may stand before the death. */
    enum peer_news news = read_socket(a, vi->peer, events, nudged);
    if (news == PEER_ALIVE && pid_died && vi->peer->pidw)
        news = PEER_CLOSED;
    if (news != PEER_ALIVE) {
        unwatch_locked(a, vi);
        shm_lock(&vi->sq_lock);
        vi->stats.PeerClosed = news == PEER_CLOSED;
        shm_unlock(&vi->sq_lock);
        vipl_vi_fail(&vi->core, VIP_ERROR_CONN_LOST, NULL);
    }
    if (news != PEER_ALIVE || *nudged) /* a waiter leaving the VI to hints looks */
        shm_hint_self(vi);
}

/* A watched process exited: every VI watching it, one after another (the
 * error handler may tear others down: each is looked at again). */
static void pid_exited(struct shm_agent *a, struct shm_pidwatch *w)
{
    size_t n = 0;
    struct shm_vi **vis = malloc((a->n ? a->n : 1) * sizeof(*vis));
    bool *nudged = calloc(a->n ? a->n : 1, sizeof(*nudged));

    if (!vis || !nudged) {
        free(vis);
        free(nudged);
        return; /* looked at again: the pidfd stays readable */
    }
    for (size_t i = 0; i < a->n; i++)
        if (a->watched[i]->peer && a->watched[i]->peer->pidw == w)
            vis[n++] = a->watched[i];
    w->refs++; /* kept while we look */
    for (size_t i = 0; i < n; i++)
        if (vis[i]->agent_watched && vis[i]->peer && vis[i]->peer->pidw == w)
            check_peer(a, vis[i], 0, true, &nudged[i]);
    pidwatch_put(a, w);
    pthread_mutex_unlock(&a->lock);
    for (size_t i = 0; i < n; i++)
        if (nudged[i])
            vipl_report_nudge(&vis[i]->core);
    pthread_mutex_lock(&a->lock);
    free(vis);
    free(nudged);
}

static void *agent_thread(void *arg)
{
    struct shm_agent *a = arg;
    for (;;) {
        struct epoll_event ev;
        int n = epoll_wait(a->epfd, &ev, 1, -1);
        if (n <= 0)
            continue;
        if (ev.data.u64 == 0)
            return NULL; /* stop request */
        void *ptr = (void *)(uintptr_t)(ev.data.u64 & ~(uint64_t)PIDFD_TAG);
        bool nudged = false;
        struct shm_vi *vi = NULL;
        pthread_mutex_lock(&a->lock);
        if (ev.data.u64 & PIDFD_TAG) {
            /* A watch let go of meanwhile, or one made anew at its address,
             * whose process still runs, is not that event's. */
            struct shm_pidwatch *w = pidwatch_find(a, ptr);
            if (w && pidfd_exited(w->fd))
                pid_exited(a, w);
        } else if ((vi = watched_as(a, ev.data.u64 >> 1)) != NULL && vi->peer) {
            check_peer(a, vi, ev.events, false, &nudged);
        } else {
            vi = NULL;
        }
        pthread_mutex_unlock(&a->lock);
        /* Unlocked: the consumer's handler may take its own locks, and
         * threads holding those may tear a VI down (which takes ours). A
         * VI handle is never freed (pool.c), so a stale one only makes the
         * handler look at a VI for nothing. */
        if (nudged)
            vipl_report_nudge(&vi->core);
    }
}

static void init_lock(struct shm_agent *a)
{
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&a->lock, &ma);
    pthread_mutexattr_destroy(&ma);
}

struct shm_agent *shm_agent_start(void)
{
    struct shm_agent *a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    init_lock(a);
    a->epfd = vipl_fd_epoll(EPOLL_CLOEXEC);
    a->stopfd = vipl_fd_eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
    if (a->epfd < 0 || a->stopfd < 0 || epoll_ctl(a->epfd, EPOLL_CTL_ADD, a->stopfd, &ev) != 0)
        goto fail;
    if (VipxThreadCreate(&a->thread, NULL, agent_thread, a) == 0)
        return a;
fail:
    if (a->epfd >= 0)
        VipxFdClose(a->epfd);
    if (a->stopfd >= 0)
        VipxFdClose(a->stopfd);
    pthread_mutex_destroy(&a->lock);
    free(a);
    return NULL;
}

void shm_agent_stop(struct shm_agent *a)
{
    if (!a)
        return;
    uint64_t one = 1;
    if (write(a->stopfd, &one, sizeof(one)) == sizeof(one))
        pthread_join(a->thread, NULL);
    VipxFdClose(a->epfd);
    VipxFdClose(a->stopfd);
    pthread_mutex_destroy(&a->lock);
    for (size_t i = 0; i < a->npids; i++) {
        VipxFdClose(a->pids[i]->fd);
        free(a->pids[i]);
    }
    free(a->pids);
    free(a->watched);
    free(a);
}

void shm_agent_forked(struct shm_agent *a)
{
    if (!a)
        return;
    init_lock(a);
    a->parents = true;
}

struct shm_agent *shm_agent_after_fork(struct shm_agent *old, struct vipl_nic *nic)
{
    /* The old agent's thread is the parent's; its epoll set is shared with
     * the parent, so it is only closed here, never changed. */
    VipxFdClose(old->epfd);
    VipxFdClose(old->stopfd);
    /* Each VI gets its own copy of the pidfd it watched (the very process,
     * where a new pidfd_open could find another by now), shared again
     * below. */
    for (struct vipl_vi *cvi = nic->vis; cvi; cvi = cvi->next) {
        struct shm_peer *peer = shm_vi(cvi)->peer;
        if (peer && peer->pidw) {
            peer->pidfd = vipl_fd_dup(peer->pidw->fd);
            peer->pidw = NULL;
        }
    }
    for (size_t i = 0; i < old->npids; i++) {
        VipxFdClose(old->pids[i]->fd);
        free(old->pids[i]);
    }
    free(old->pids);
    free(old->watched);
    free(old);
    struct shm_agent *a = shm_agent_start();
    for (struct vipl_vi *cvi = nic->vis; cvi; cvi = cvi->next) {
        struct shm_vi *vi = shm_vi(cvi);
        bool was_watched = vi->agent_watched;
        vi->agent_watched = false;
        if (a && was_watched && vi->peer)
            shm_agent_watch(a, vi);
    }
    return a;
}

int shm_agent_watch(struct shm_agent *a, struct shm_vi *vi)
{
    if (!a || a->parents)
        return -1; /* a forked child that could not start one, or has none */
    pthread_mutex_lock(&a->lock);
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        struct shm_vi **w = realloc(a->watched, cap * sizeof(*w));
        if (!w) {
            pthread_mutex_unlock(&a->lock);
            return -1;
        }
        a->watched = w;
        a->cap = cap;
    }
    struct shm_peer *peer = vi->peer;
    vi->agent_id = ++a->last_id;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = vi->agent_id << 1};
    int rc = epoll_ctl(a->epfd, EPOLL_CTL_ADD, peer->sock, &ev);
    if (rc == 0 && peer->pidfd >= 0) {
        peer->pidw = pidwatch_get(a, peer->pid, &peer->pidfd);
        if (!peer->pidw) {
            epoll_ctl(a->epfd, EPOLL_CTL_DEL, peer->sock, NULL);
            rc = -1;
        }
    }
    if (rc == 0) {
        a->watched[a->n++] = vi;
        vi->agent_watched = true;
    }
    pthread_mutex_unlock(&a->lock);
    return rc;
}

void shm_agent_unwatch(struct shm_agent *a, struct shm_vi *vi)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    if (vi->agent_watched)
        unwatch_locked(a, vi);
    pthread_mutex_unlock(&a->lock);
}
