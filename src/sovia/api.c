/*
 * api.c - process setup and the sov_* entry points: argument checks, errno,
 * locking; the work is in conn.c, data.c and close.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <vipl_trace.h>

#include "sock.h"
#include "transparent.h"

struct sov_global sov_g = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .service_cond = PTHREAD_COND_INITIALIZER,
};

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
void (*sov_init_hook)(void);
static int init_err;

uint64_t sov_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Every thread of this process asleep in a sovia wait looks again. */
void sov_signal_event(void)
{
    VipxWakeWaiters();
}

void sov_wake_waiters(struct sov_sock *s)
{
    pthread_mutex_lock(&s->wait_lock);
    atomic_fetch_add(&s->events, 1);
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->wait_lock);
    sov_signal_event();
}

static void do_init(void)
{
    sov_config_defaults(&sov_g.cfg);
    /* sovia run: a write must be on its way when write() returns, as with
     * a kernel socket, even if the program then leaves by _exit(); bytes a
     * combining buffer holds back would be lost. SOVIA_COMBINE=1 still
     * asks for combining. */
    if (sov_g.inheritable)
        sov_g.cfg.combine = false;
    sov_config_from_env(&sov_g.cfg);
    init_err = -ENOMEM;
    if (VipOpenNic(NULL, &sov_g.nic) != VIP_SUCCESS)
        return;
    /* sovia does its own spinning (wait modes); vipl should sleep at once. */
    VipxSetWaitSpin(sov_g.nic, 0);
    VipxNicSetNudgeHandler(sov_g.nic, sov_nudged, NULL);
    VIP_RETURN cq;
    if (sov_g.inherited_cq) /* peers keep waking the CQ the last image made */
        cq = VipxCQImport(sov_g.nic, 65536, sov_g.inherited_cq, &sov_g.cq);
    else
        cq = VipxCreateCQ(sov_g.nic, 65536, sov_g.inheritable ? VIPX_CQ_INHERITABLE : 0, &sov_g.cq);
    sov_g.inherited_cq = NULL;
    int fds[2], bound;
    if (VipCreatePtag(sov_g.nic, &sov_g.ptag) != VIP_SUCCESS || cq != VIP_SUCCESS ||
        VipxCQPollFds(sov_g.cq, fds, &bound) != VIP_SUCCESS)
        return;
    sov_g.pid = getpid();
    sov_spin_init();
    if (sov_init_hook)
        sov_init_hook();
    static bool handlers_installed; /* a forked child may initialize again */
    if (!handlers_installed) {
        atexit(sov_atexit);
        pthread_atfork(sov_before_fork, sov_after_fork_parent, sov_after_fork_child);
        handlers_installed = true;
    }
    init_err = 0;
}

int sov_init(void)
{
    pthread_once(&init_once, do_init);
    return init_err;
}

static int fail(int err)
{
    errno = -err;
    return -1;
}

SOV_EXPORT bool sov_is_socket(int fd)
{
    struct sov_sock *s = sov_acquire(fd);
    if (!s)
        return false;
    sov_release(s);
    return true;
}

SOV_EXPORT int sov_socket(int domain, int type, int protocol)
{
    if (domain != AF_INET && domain != AF_INET6)
        return fail(-EAFNOSUPPORT);
    if ((type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) != SOCK_VIA)
        return fail(-EINVAL);
    if (protocol != 0 && protocol != IPPROTO_TCP)
        return fail(-EPROTONOSUPPORT);
    int err = sov_init();
    if (err)
        return fail(err);
    struct sov_sock *s = sov_sock_new(domain, type & SOCK_NONBLOCK, type & SOCK_CLOEXEC);
    if (!s)
        return -1;
    s->gen++;
    if (s->cfg.handling != SOV_SINGLE && (err = sov_handling_start()) != 0) {
        close(s->fd);
        sov_sock_free(s);
        return fail(err);
    }
    atomic_store(&sov_g.sockets_created, true);
    err = sov_table_insert(s);
    if (err) {
        close(s->fd);
        sov_sock_free(s);
        return fail(err);
    }
    return s->fd;
}

SOV_EXPORT int sov_bind(int fd, const struct sockaddr *addr, socklen_t addrlen)
{
    struct sov_sock *s = sov_acquire(fd);
    if (!s)
        return -1;
    int err = sov_addr_check(s, addr, addrlen);
    if (!err && (s->bound || s->kind != SK_NEW))
        err = -EINVAL;
    if (!err && !sov_addr_is_local(addr, addrlen))
        err = -EADDRNOTAVAIL;
    if (!err) {
        memcpy(&s->local, addr, s->local_len);
        err = sov_reserve_port(s, sov_addr_port(addr));
        s->bound = err == 0;
    }
    sov_release(s);
    return err ? fail(err) : 0;
}

SOV_EXPORT int sov_listen(int fd, int backlog)
{
    struct sov_sock *s = sov_acquire(fd);
    if (!s)
        return -1;
    int err = 0;
    if (s->kind == SK_LISTENING) {
        sov_release(s); /* a second listen() only changes the backlog in TCP */
        return 0;
    }
    if (s->kind != SK_NEW)
        err = -EINVAL;
    if (!err && !s->bound) {
        err = sov_reserve_port(s, 0);
        s->bound = err == 0;
    }
    if (!err)
        err = sov_listen_start(s, backlog <= 0 ? 1 : backlog, false, 0);
    sov_release(s);
    return err ? fail(err) : 0;
}

SOV_EXPORT int sov_accept4(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags)
{
    if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC))
        return fail(-EINVAL);
    struct sov_sock *s = sov_acquire(fd);
    if (!s)
        return -1;
    if (s->kind != SK_LISTENING) {
        sov_release(s);
        return fail(-EINVAL);
    }
    bool nonblock = s->nonblock;
    int domain = s->domain;
    struct sockaddr_storage local = s->local;
    socklen_t local_len = s->local_len;
    sov_release(s); /* accept sleeps on the listener's queue, not the lock */

    struct sockaddr_storage peer;
    socklen_t peer_len;
    int err;
    struct sov_conn *c = sov_accept_take(s, &peer, &peer_len, nonblock, &err);
    if (!c)
        return fail(err);
    struct sov_sock *n = sov_sock_new(domain, flags & SOCK_NONBLOCK, flags & SOCK_CLOEXEC);
    if (!n) {
        sov_conn_destroy(c);
        return -1;
    }
    n->gen++;
    sov_sock_lock(n);
    n->cfg = c->cfg;
    n->conn = c;
    n->kind = SK_CONNECTED;
    n->local = local;
    n->local_len = local_len;
    n->peer = peer;
    /* Bound to any address: the one that reaches the peer (loopback on
     * this host). */
    if (sov_addr_fill_source(&n->local, (struct sockaddr *)&peer) != 0) {
        struct sockaddr_storage any = {.ss_family = (sa_family_t)domain};
        sov_addr_fill_source(&n->local, (struct sockaddr *)&any); /* loopback */
    }
    n->peer_len = peer_len;
    sov_conn_established(n);
    sov_sock_unlock(n);
    err = sov_table_insert(n);
    if (err) {
        sov_conn_destroy(c);
        close(n->fd);
        sov_sock_free(n);
        return fail(err);
    }
    sov_copy_addr(&peer, peer_len, addr, addrlen);
    return n->fd;
}

SOV_EXPORT int sov_accept(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
    return sov_accept4(fd, addr, addrlen, 0);
}

SOV_EXPORT int sov_connect(int fd, const struct sockaddr *addr, socklen_t addrlen)
{
    struct sov_sock *s = sov_acquire(fd);
    if (!s)
        return -1;
    int err = sov_do_connect(s, addr, addrlen);
    bool orphan = s->dead; /* closed by another thread while we connected */
    sov_release(s);
    if (orphan)
        sov_sock_free(s);
    return err ? fail(err) : 0;
}

/* EPIPE raises SIGPIPE at the calling thread unless MSG_NOSIGNAL, as the
 * kernel does. */
static ssize_t send_result(ssize_t r, int flags)
{
    if (r >= 0)
        return r;
    if (r == -EPIPE && !(flags & MSG_NOSIGNAL))
        pthread_kill(pthread_self(), SIGPIPE);
    errno = (int)-r;
    return -1;
}

/*
 * Set by each sov_sendv/sov_recvv that ends with EBADF (only then: not a
 * store per message; the preload reads it only after one): true when another
 * thread closed the socket while the call waited in it. The preload sends
 * an EBADF caller to the kernel socket (a fallback, a migration), but a
 * closed one's descriptor number is free, or already another file's: a
 * recv there slept for ever on the kernel socket not yet closed, or would
 * read a newer connection's bytes (preload/threads close_while_in_recv).
 */
static _Thread_local bool closed_meanwhile __attribute__((tls_model("initial-exec")));

bool sov_tp_closed_meanwhile(void)
{
    return closed_meanwhile;
}

ssize_t sov_sendv(int fd, const struct iovec *iov, int iovcnt, int flags)
{
    if (iovcnt < 0 || iovcnt > IOV_MAX)
        return fail(-EINVAL);
    struct sov_sock *s = sov_acquire(fd);
    if (!s) {
        closed_meanwhile = false; /* not in the table: fell back, or never ours */
        return -1;
    }
    VIPX_TRACE(VIPX_TP_SOV_SEND, iovcnt ? iov[0].iov_len : 0);
    ssize_t r = sov_do_send(s, iov, iovcnt, flags);
    if (r == -EBADF)
        closed_meanwhile = s->closing;
    sov_release(s);
    return send_result(r, flags);
}

ssize_t sov_recvv(int fd, const struct iovec *iov, int iovcnt, int flags)
{
    if (iovcnt < 0 || iovcnt > IOV_MAX)
        return fail(-EINVAL);
    struct sov_sock *s = sov_acquire(fd);
    if (!s) {
        closed_meanwhile = false; /* not in the table: fell back, or never ours */
        return -1;
    }
    ssize_t r = sov_do_recv(s, iov, iovcnt, flags);
    if (r == -EBADF)
        closed_meanwhile = s->closing;
    sov_release(s);
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return r;
}

SOV_EXPORT ssize_t sov_send(int fd, const void *buf, size_t len, int flags)
{
    struct iovec iov = {(void *)buf, len};
    return sov_sendv(fd, &iov, 1, flags);
}

SOV_EXPORT ssize_t sov_write(int fd, const void *buf, size_t len)
{
    return sov_send(fd, buf, len, 0);
}

SOV_EXPORT ssize_t sov_writev(int fd, const struct iovec *iov, int iovcnt)
{
    return sov_sendv(fd, iov, iovcnt, 0);
}

SOV_EXPORT ssize_t sov_recv(int fd, void *buf, size_t len, int flags)
{
    struct iovec iov = {buf, len};
    return sov_recvv(fd, &iov, 1, flags);
}

SOV_EXPORT ssize_t sov_read(int fd, void *buf, size_t len)
{
    return sov_recv(fd, buf, len, 0);
}

SOV_EXPORT ssize_t sov_readv(int fd, const struct iovec *iov, int iovcnt)
{
    return sov_recvv(fd, iov, iovcnt, 0);
}

SOV_EXPORT int sov_shutdown(int fd, int how)
{
    if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
        return fail(-EINVAL);
    struct sov_sock *s = sov_acquire(fd);
    if (!s)
        return -1;
    int err = 0;
    if (s->kind != SK_CONNECTED) {
        err = -ENOTCONN;
    } else {
        if (how != SHUT_WR)
            s->rd_shut = true;
        if (how != SHUT_RD && !s->conn->reset)
            err = sov_send_fin(s);
        if (err == -ECONNRESET)
            err = 0; /* shutting down a broken connection is not an error */
    }
    sov_release(s);
    return err ? fail(err) : 0;
}

SOV_EXPORT int sov_close(int fd)
{
    struct sov_sock *s = sov_acquire(fd);
    if (!s)
        return -1;
    s->dead = s->closing = true;
    if (s->tp_client && s->kind == SK_CONNECTED && !s->tp_waiting && s->conn)
        sov_tp_note_carried((struct sockaddr *)&s->peer, s->conn->stats.data_packets_sent +
                                                             s->conn->stats.data_packets_received);
    sov_table_remove(s);
    enum sov_kind kind = s->kind;
    int port_fd = s->port_fd;
    s->port_fd = -1;
    sov_release(s);
    sov_wake_waiters(s); /* sleepers on this socket see it dead */

    if (kind == SK_LISTENING)
        sov_listen_stop(s);
    if (kind == SK_CONNECTED && s->transparent) {
        /* While the kernel socket is open: bytes held for the pairing may
         * have to go there (sov_tp_close_settle). */
        sov_sock_lock(s);
        bool abortive = s->linger.l_onoff && s->linger.l_linger == 0;
        if (s->tp_waiting)
            sov_tp_close_settle(s, abortive);
        sov_mig_keep_kernel(s, abortive);
        sov_sock_unlock(s);
    }
    close(fd);
    if (port_fd >= 0)
        VipxFdClose(port_fd);
    if (kind == SK_CONNECTED) {
        sov_close_connected(s); /* the close thread finishes and frees it */
        return 0;
    }
    if (kind != SK_CONNECTING) /* a connect job in flight frees nothing */
        sov_sock_free(s);
    return 0;
}

SOV_EXPORT int sov_getsockname(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
    if (!addr || !addrlen)
        return fail(-EFAULT);
    struct sov_sock *s = sov_acquire(fd);
    if (!s)
        return -1;
    sov_copy_addr(&s->local, s->local_len, addr, addrlen);
    sov_release(s);
    return 0;
}

SOV_EXPORT int sov_getpeername(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
    if (!addr || !addrlen)
        return fail(-EFAULT);
    struct sov_sock *s = sov_acquire(fd);
    if (!s)
        return -1;
    int err = s->kind == SK_CONNECTED ? 0 : -ENOTCONN;
    if (!err)
        sov_copy_addr(&s->peer, s->peer_len, addr, addrlen);
    sov_release(s);
    return err ? fail(err) : 0;
}

/*
 * Every socket's lock is held across fork(), so that none is copied held
 * by a thread the child does not have: the service thread settling a
 * connection that was pairing (a client that forks right after connect)
 * left the child's copy locked for ever (preload/shared
 * concurrent_writers hung 1 run in 10 under ThreadSanitizer). The raw
 * lock: a record section (shared.c) must not span the fork. Nobody takes
 * a second socket's lock while holding one, so the order is free.
 */
static struct sov_sock *fork_locked;

static void fork_lock_sockets(void)
{
    fork_locked = NULL;
    for (int fd = 0, n = sov_table_limit(); fd < n; fd++) {
        struct sov_sock *s = sov_lookup(fd);
        if (!s || s->forking) /* a dup'ed socket is in the table twice */
            continue;
        if (!sov_lock(&s->lock))
            sov_sock_salvage(s);
        s->forking = true; /* only the forking thread reads or writes it */
        s->next_forking = fork_locked;
        fork_locked = s;
    }
}

/* In both processes, after the fork. */
static void fork_unlock_sockets(bool child)
{
    while (fork_locked) {
        struct sov_sock *s = fork_locked;
        fork_locked = s->next_forking;
        if (child && s->conn) /* the parent's threads asleep on it */
            atomic_store(&s->conn->sleepers, 0);
        s->forking = false;
        sov_unlock(&s->lock);
    }
}

/* One socket's connection becomes shared with the child about to be
 * forked (caller holds its lock); once per fork (c->rec_forking). */
static void share_at_fork(struct sov_sock *s)
{
    struct sov_conn *c = s->conn;
    /* A non-blocking connect's VI still waiting for its listener's answer:
     * the answer comes on one descriptor, and this process takes it now
     * (a child's copy of that descriptor must not take it instead). */
    if (c && c->connecting)
        sov_connect_finish(c, 1000);
    if (!s->dead && s->kind == SK_CONNECTED && c && !c->rec && !c->rec_forking) {
        sov_progress(s);
        if (c->clen && !c->reset)
            sov_flush(s, true);
        c = s->conn;
        sov_repost_deferred(c);
        VIP_VI_STATE st;
        if (VipQueryVi(c->vi, &st, NULL, NULL, NULL) == VIP_SUCCESS && st == VIP_STATE_CONNECTED) {
            if (!c->shared)
                VipxViShare(c->vi);
            sov_conn_handle_in_calls(s); /* a record needs it (shared.c) */
            /* Without a record, one process at a time may use it. A
             * shared one has none when it was ours alone again. */
            sov_shared_begin(s, 2);
        }
        c->shared = true;
        c->rec_forking = true;
    } else if (!s->dead && c && c->rec) {
        sov_shared_fork(c);
    }
}

/*
 * Before fork: every connection becomes shared by parent and child. What a
 * connection holds back in this process (combined bytes, a deferred repost)
 * goes out now, or both copies would send or post it after the fork. The
 * provider tells each peer that our pid's end no longer ends the connection.
 */
void sov_before_fork(void)
{
    /* First, while nothing is held: each waits for its peer's answer. */
    sov_tp_migrate_fabric();
    for (int fd = 0, n = sov_table_limit(); fd < n; fd++) {
        struct sov_sock *s = sov_lookup(fd);
        if (!s)
            continue; /* a dup'ed socket is seen again: c->shared says so */
        sov_sock_lock(s);
        /* A server connection whose client has not answered yet pairs
         * first: the WAKEUP answer must reach the process that sends the
         * bytes written so far (the parent), not whichever polls first. */
        if (s->tp_waiting && s->conn && !s->conn->tentative_since_ns &&
            !sov_tp_settle_wait(&s, fd))
            continue;
        share_at_fork(s);
        sov_sock_unlock(s);
    }
    /* Last, and held across the fork, so that no other thread is inside
     * them when the child's copy is made (sockets first: the service
     * thread takes sov_g.lock before a socket's lock). */
    fork_lock_sockets();
    /* Connections the program's threads made while the loop above went
     * by (it may wait up to the pairing timeout for one that pairs): the
     * child's copy of one not shared ended it for the parent at the
     * child's exit, with a FIN or a disconnect (forkstress: a churn
     * exchange read end of stream; a child destroyed an inherited
     * connection it did not share). */
    for (struct sov_sock *s = fork_locked; s; s = s->next_forking)
        share_at_fork(s);
    sov_table_fork_lock(true);
    pthread_mutex_lock(&sov_g.lock);
}

void sov_after_fork_parent(void)
{
    /* Before the sockets are unlocked: the program's threads close them
     * and change s->conn then (ThreadSanitizer, forkstress). */
    sov_shared_forked(false);
    pthread_mutex_unlock(&sov_g.lock);
    sov_table_fork_lock(false);
    fork_unlock_sockets(false);
}

/* In a forked child: the parent's threads are gone; they start again when
 * needed. The locks the forking thread took in sov_before_fork are this
 * thread's to release. Connections the parent was closing or pairing stay
 * the parent's business. */
void sov_after_fork_child(void)
{
    sov_tid_cache = gettid(); /* now, before the program may sandbox itself */
    pthread_mutex_unlock(&sov_g.lock);
    sov_table_fork_lock(false);
    fork_unlock_sockets(true);
    /* The parent's service thread may have been waiting on the condition
     * variable: its waiter count came along and a signal would wait for
     * that waiter forever (glibc's condvar quiesces it). */
    pthread_cond_init(&sov_g.service_cond, NULL);
    sov_g.service_running = false;
    sov_g.handler_running = false;
    sov_g.pid = getpid();
    for (struct sov_sock *s = sov_g.closing; s; s = s->next_closing)
        atomic_fetch_sub(&sov_g.open_conns, 1);
    sov_g.closing = NULL;
    sov_g.pairing = NULL;
    sov_g.pairing_taken = NULL;
    /* Bytes written before a client answered are the parent's to send,
     * unless they are in the connection's record, shared by both. A
     * socket's wait_lock is also taken by the parent's connection threads
     * (a listener's queue) and the agent's nudges: one held at the fork
     * hung the child's accept on an inherited listener, and a sleeper's
     * count in `cond` would hang the child's first broadcast
     * (tests/preload/forkstress.c). */
    for (int fd = 0, n = sov_table_limit(); fd < n; fd++) {
        struct sov_sock *s = sov_lookup(fd);
        if (!s)
            continue;
        pthread_mutex_init(&s->wait_lock, NULL);
        pthread_cond_init(&s->cond, NULL);
        /* Every socket of the table, not only the ones fork_lock_sockets
         * went by: one accepted into the table behind its pass (before
         * the table's fork lock) may have a parent's thread asleep on it,
         * and the child's close then waited for that sleeper forever
         * (forkstress: a child hung at exit in sov_conn_destroy). */
        if (s->conn)
            atomic_store(&s->conn->sleepers, 0);
        if (s->conn && !s->conn->rec)
            s->conn->early_len = 0;
    }
    sov_shared_forked(true);
    /* A child holding only connections not counted open (still pairing:
     * the parent's business) only closes them: the NIC's locks are made
     * new (a parent's thread held shm's shared_lock at the fork, and the
     * child's exit hung on it: forkstress); the provider's threads are
     * not restarted (that broke sovia/peer_death: the observer saw its
     * peer's death 2.3 s late). */
    sov_far_forked(); /* the parent's: this child's other hosts get kernel TCP */
    if (sov_g.nic && atomic_load(&sov_g.open_conns)) {
        VipxNicAfterFork(sov_g.nic);
    } else if (sov_g.nic) { /* the parent's listening must not outlive it here */
        VipxNicForkLocks(sov_g.nic);
        VipxNicLeaveListening(sov_g.nic);
    }
    if (atomic_load(&sov_g.open_conns) == 0 && !sov_g.pairing) {
        /* Nothing of the parent's to keep using: the next connection gets a
         * NIC and CQ of this process (the parent's are left alone). */
        init_once = (pthread_once_t)PTHREAD_ONCE_INIT;
        init_err = 0;
    }
}
