/*
 * socket.c - establishment under `sovia run`: listen() adds a shadow sovia
 * listener, connect() tries sovia before the kernel connect and accept()
 * pairs; close, shutdown and socket options. The kernel socket always
 * stays the program's descriptor (docs/ARCHITECTURE.md, Transparent mode).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sovia.h>

#include "pollwait.h"
#include "preload.h"
#include "sock.h"
#include "transparent.h"

/* ---- Shadow listeners (few: a list) ---------------------------------------- */

struct shadow {
    int fd;
    uint16_t port; /* network order */
    bool inherited; /* from before a fork (or none): the queue is another's */
    /* The port's shadow listener: one per port and process, shared by the
     * sockets listening on it (IPv4 and IPv6 with IPV6_ONLY, two
     * addresses), since all their clients' VIs come to one name. */
    struct sov_sock *l;
    /* This process's listener for the clients the port's shadow listener,
     * another process's, redirects to it (accepted_elsewhere); NULL until
     * the first, and in a forked child (the parent's). */
    struct sov_sock *ticketed;
    uint32_t ticket;
    struct shadow *next;
};

static pthread_mutex_t shadows_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shadow *shadows;
static atomic_int nshadows;

static struct shadow *shadow_find(int fd)
{
    for (struct shadow *h = shadows; h; h = h->next)
        if (h->fd == fd)
            return h;
    return NULL;
}

/* This process's shadow listener of `port`, if any (caller holds
 * shadows_lock). */
static struct sov_sock *port_listener(uint16_t port)
{
    for (struct shadow *h = shadows; h; h = h->next)
        if (!h->inherited && h->l && h->port == port)
            return h->l;
    return NULL;
}

void listener_drop(int fd)
{
    if (!atomic_load_explicit(&nshadows, memory_order_relaxed))
        return;
    pthread_mutex_lock(&shadows_lock);
    struct shadow **pp = &shadows, *h = NULL;
    while (*pp && (*pp)->fd != fd)
        pp = &(*pp)->next;
    bool shared = false;
    if ((h = *pp) != NULL) {
        *pp = h->next;
        atomic_fetch_sub(&nshadows, 1);
        for (struct shadow *o = shadows; o && !shared; o = o->next)
            shared = !o->inherited && o->l == h->l; /* another socket of the port */
    }
    pthread_mutex_unlock(&shadows_lock);
    if (h && !h->inherited && !shared) /* an inherited one's thread lives in the parent */
        sov_tp_unlisten(h->l);
    if (h && h->ticketed)
        sov_tp_unlisten(h->ticketed);
    free(h);
}

void listeners_after_fork_child(void)
{
    pthread_mutex_init(&shadows_lock, NULL);
    for (struct shadow *h = shadows; h; h = h->next) {
        if (!h->inherited)
            sov_tp_listen_forked(h->l);
        if (h->ticketed)
            sov_tp_listen_forked(h->ticketed);
        h->inherited = true;
        h->ticketed = NULL; /* the parent's memory: left alone */
    }
}

/* ---- Helpers ------------------------------------------------------------- */

bool carried(int fd)
{
    return sov_lookup(fd) != NULL;
}

static bool tcp_stream(int fd, int *domain)
{
    int type = 0, proto = 0;
    socklen_t len = sizeof(int);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
        return false;
    len = sizeof(int);
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, domain, &len) != 0 ||
        (*domain != AF_INET && *domain != AF_INET6))
        return false;
    len = sizeof(int);
    return getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) == 0 && proto == IPPROTO_TCP;
}

bool tcp_socket(int fd)
{
    int domain = 0;
    return tcp_stream(fd, &domain);
}

static bool is_nonblocking(int fd)
{
    int fl = real.fcntl(fd, F_GETFL);
    return fl >= 0 && (fl & O_NONBLOCK);
}

/* The live socket carried on fd, locked; NULL if there is none. */
static struct sov_sock *lock_carried(int fd)
{
    struct sov_sock *s = sov_lookup(fd);
    if (!s)
        return NULL;
    sov_sock_lock(s);
    if (s->dead || sov_lookup(fd) != s) {
        sov_sock_unlock(s);
        return NULL;
    }
    return s;
}

int tp_prepare_send(int fd, int msg_flags, const struct iovec *iov, int iovcnt, ssize_t *early)
{
    uint64_t start = 0;
    for (;;) {
        struct sov_sock *s = lock_carried(fd);
        if (!s)
            return 0;
        enum sov_tp_state st = sov_tp_settle(s);
        if (st == SOV_TP_FELL_BACK)
            return 0; /* unlocked: the kernel socket from now on */
        bool nonblock = s->nonblock || (msg_flags & MSG_DONTWAIT);
        /* A socket not paired yet takes a send's first bytes at once
         * (sov_tp_send_early); urgent ones wait for the pairing, which
         * carries their mark. */
        ssize_t taken = st == SOV_TP_PENDING && iov && !(msg_flags & MSG_OOB)
                            ? sov_tp_send_early(s, iov, iovcnt, !nonblock) : 0;
        sov_sock_unlock(s);
        if (taken > 0) {
            *early = taken;
            return 1;
        }
        if (st == SOV_TP_PAIRED)
            return 1;
        if (nonblock) {
            errno = EAGAIN;
            return -1;
        }
        /* Pairing is microseconds away when the server accepts promptly. */
        uint64_t now = sov_now_ns();
        if (!start)
            start = now;
        if (now - start < 100000 && sov_spin_pays(now)) {
            __builtin_ia32_pause();
            continue;
        }
        /* Sleep until the kernel socket speaks, or the completion queue
         * (armed) gets the peer's WAKEUP or the end of a VI a claim dropped;
         * 1 ms at most, so the pairing timeout is looked at. */
        struct sov_sigwatch w = sov_sigwatch_start();
        struct pollfd p[3] = {{.fd = fd, .events = POLLIN}};
        sov_cq_arm();
        int rc = sov_poll_doze(p, 1, 1, &w);
        sov_doze_disarm(&p[1], rc);
        if ((rc < 0 && errno == EINTR) || sov_sigwatch_fired(&w)) {
            errno = EINTR; /* also a handler just before the sleep (it rang) */
            return -1;
        }
    }
}

int tp_prepare(int fd, int msg_flags)
{
    return tp_prepare_send(fd, msg_flags, NULL, 0, NULL);
}

/* Early bytes must leave before the end of the stream (see
 * sov_tp_settle_soon). */
static void settle_early(int fd)
{
    struct sov_sock *s = lock_carried(fd);
    if (s && s->conn && s->conn->early_len && sov_tp_settle_soon(s) == SOV_TP_FELL_BACK)
        return; /* unlocked */
    if (s)
        sov_sock_unlock(s);
}

/* ---- The calls --------------------------------------------------------------- */

/* Where libfabric's code is mapped (0, 0: not loaded). The fabric
 * provider's own TCP connections (libfabric's tcp provider listens,
 * connects and accepts through these very functions) are the transport,
 * never a program's connection to carry: carrying them would recurse into
 * the provider that makes them. */
static _Atomic uintptr_t fabric_lo, fabric_hi;

static int find_fabric(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    if (!info->dlpi_name || !strstr(info->dlpi_name, "/libfabric.so"))
        return 0;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        lo = a < lo ? a : lo;
        hi = a + ph->p_memsz > hi ? a + ph->p_memsz : hi;
    }
    atomic_store(&fabric_lo, lo);
    atomic_store(&fabric_hi, hi);
    return 1;
}

void preload_fabric_seen(void)
{
    dl_iterate_phdr(find_fabric, NULL);
}

static bool from_fabric(const void *caller)
{
    uintptr_t a = (uintptr_t)caller;
    return a < atomic_load_explicit(&fabric_hi, memory_order_relaxed) &&
           a >= atomic_load_explicit(&fabric_lo, memory_order_relaxed);
}

PRELOAD_EXPORT int socket(int domain, int type, int protocol)
{
    preload_ready();
    int fd = real.socket(domain, type, protocol);
    if (fd >= 0 && carried(fd)) /* a stale entry: that descriptor was closed behind us */
        sov_tp_drop_stale(fd);
    return fd;
}

/* The shadow entry of a listening socket bound to a known port, with its
 * sovia listener (shared with another socket of the same port, as rsync's
 * daemon listens on 0.0.0.0 and ::); NULL if there is none to make. *made
 * says whether the listener is new (ours to stop if listen() fails). */
static struct shadow *shadow_prepare(int fd, int domain, int backlog, bool *made)
{
    struct sockaddr_storage local;
    socklen_t len = sizeof(local);
    *made = false;
    pthread_mutex_lock(&shadows_lock);
    bool have = shadow_find(fd) != NULL;
    pthread_mutex_unlock(&shadows_lock);
    if (have || getsockname(fd, (struct sockaddr *)&local, &len) != 0 ||
        sov_addr_port((struct sockaddr *)&local) == 0)
        return NULL;
    struct shadow *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->fd = fd;
    h->port = sov_addr_port((struct sockaddr *)&local);
    pthread_mutex_lock(&shadows_lock);
    h->l = port_listener(h->port);
    pthread_mutex_unlock(&shadows_lock);
    if (!h->l) {
        h->l = sov_tp_listen(fd, domain, (struct sockaddr *)&local, backlog, 0);
        *made = h->l != NULL;
    }
    if (!h->l) { /* the port has a sovia listener elsewhere: kernel only */
        free(h);
        return NULL;
    }
    return h;
}

PRELOAD_EXPORT int listen(int fd, int backlog)
{
    preload_ready();
    if (from_fabric(__builtin_return_address(0)))
        return real.listen(fd, backlog);
    int domain;
    bool made = false;
    struct shadow *h = NULL;
    bool ours = !atomic_load(&sov_g.inert) && tcp_stream(fd, &domain);
    /* sovia's listener first where the port is already bound: a client
     * that sees the kernel socket listen (a script polling the port, or
     * /proc/net/tcp) then finds sovia's too, instead of pairing with
     * nobody and staying on kernel TCP. */
    if (ours)
        h = shadow_prepare(fd, domain, backlog, &made);
    int rc = real.listen(fd, backlog);
    if (rc != 0) {
        int err = errno;
        if (h && made)
            sov_tp_unlisten(h->l);
        free(h);
        errno = err;
        return rc;
    }
    if (ours && !h) /* bound by listen() itself */
        h = shadow_prepare(fd, domain, backlog, &made);
    if (!h)
        return rc;
    pthread_mutex_lock(&shadows_lock);
    h->next = shadows;
    shadows = h;
    atomic_fetch_add(&nshadows, 1);
    pthread_mutex_unlock(&shadows_lock);
    return rc;
}

/* The shadow entry for fd, made if there is none (caller holds
 * shadows_lock); NULL without memory. */
static struct shadow *shadow_entry(int fd)
{
    struct shadow *h = shadow_find(fd);
    if (!h && (h = calloc(1, sizeof(*h))) != NULL) {
        h->fd = fd;
        h->inherited = true; /* no queue of ours */
        h->next = shadows;
        shadows = h;
        atomic_fetch_add(&nshadows, 1);
    }
    return h;
}

/* A random ticket (never 0): nothing to guess from it, and two processes
 * drawing the same one only find the address taken. */
static uint32_t new_ticket(void)
{
    uint32_t t = 0;
    while (!t && getrandom(&t, sizeof(t), 0) == sizeof(t))
        t &= REDIRECT_TICKET_MAX;
    return t;
}

/* This process's ticketed listener for the listening socket fd, started on
 * first use; NULL if it cannot be. */
static struct sov_sock *ticketed_listener(int fd, int domain, const struct sockaddr *local,
                                          uint32_t *ticket)
{
    pthread_mutex_lock(&shadows_lock);
    struct shadow *h = shadow_find(fd);
    struct sov_sock *t = h ? h->ticketed : NULL;
    *ticket = h ? h->ticket : 0;
    pthread_mutex_unlock(&shadows_lock);
    for (int tries = 0; !t && tries < 3; tries++) {
        *ticket = new_ticket();
        /* Not under shadows_lock: starting a listener closes descriptors. */
        t = *ticket ? sov_tp_listen(fd, domain, local, SOMAXCONN, *ticket) : NULL;
    }
    if (!t)
        return NULL;
    pthread_mutex_lock(&shadows_lock);
    h = shadow_entry(fd);
    struct sov_sock *spare = NULL;
    if (h && h->ticketed && h->ticketed != t) { /* a thread of ours was first */
        spare = t;
        t = h->ticketed;
        *ticket = h->ticket;
    } else if (h) {
        h->ticketed = t;
        h->ticket = *ticket;
    } else {
        spare = t;
        t = NULL;
    }
    pthread_mutex_unlock(&shadows_lock);
    if (spare)
        sov_tp_unlisten(spare);
    return t;
}

/*
 * accept() on a listening socket whose shadow listener is not this
 * process's: inherited over fork (a prefork server's workers, a daemon
 * whose parent listened and exited) or exec (inetd), or a port another
 * process shadows (SO_REUSEPORT). The client queued its VI with that
 * listener, which cannot pair it: a claim makes it redirect the client to
 * this process's ticketed listener, which pairs it as accept() does. If
 * nobody shadows the port any more, this process starts its own shadow
 * listener, and the connections that follow are carried the usual way.
 */
static void accepted_elsewhere(int fd, int nfd, const struct sockaddr *peer, bool nonblock,
                               bool far)
{
    int domain;
    struct sockaddr_storage local;
    socklen_t len = sizeof(local);
    struct stat st;
    if (!tcp_stream(fd, &domain) || getsockname(fd, (struct sockaddr *)&local, &len) != 0 ||
        fstat(fd, &st) != 0)
        return;
    /* The port's shadow listener is its listening socket's owner's (the
     * socket's inode belongs to the user that made it): a prefork
     * server's master, when its workers run as another user. Short of
     * descriptors, no ticket: the claim only lets the client go. */
    uint32_t ticket = 0;
    struct sov_sock *t = !far && sov_tp_fd_room()
                             ? ticketed_listener(fd, domain, (struct sockaddr *)&local, &ticket)
                             : NULL;
    if (t && sov_tp_await(t, peer, true) != 0)
        t = NULL; /* no room to await it: the client falls back */
    int rc = sov_tp_claim(nfd, (struct sockaddr *)&local, st.st_uid, t ? ticket : 0);
    bool paired = rc == 1 && sov_tp_accept(t, nfd, peer, nonblock, true) == 0;
    if (t) /* paired, or given up: a later VI of this client is refused */
        sov_tp_await(t, peer, false);
    if (paired)
        return;
    atomic_fetch_add(&sov_g.tp_kernel, 1); /* this one is kernel TCP */
    /* Nobody shadows the port any more: this process takes over, if its
     * clients will find it (they dial the listening socket's owner). */
    if (rc != -ECONNREFUSED || st.st_uid != geteuid())
        return;
    struct sov_sock *l = sov_tp_listen(fd, domain, (struct sockaddr *)&local, SOMAXCONN, 0);
    if (!l) /* another process (or thread) was first */
        return;
    pthread_mutex_lock(&shadows_lock);
    struct shadow *h = shadow_entry(fd);
    if (h && !h->inherited)
        h = NULL; /* a thread of ours was first */
    if (h) { /* an inherited copy is the parent's memory: left alone */
        h->l = l;
        h->port = sov_addr_port((struct sockaddr *)&local);
        h->inherited = false;
    }
    pthread_mutex_unlock(&shadows_lock);
    if (!h)
        sov_tp_unlisten(l);
}

/* A shadow listener's thread answering a request takes descriptors for a
 * moment (the Unix connection, the memfds it carries), even when it then
 * refuses for want of them: in a process short of descriptors, the
 * program's accept may meet EMFILE that the kernel alone would not have
 * given. It tries again for up to ACCEPT_EMFILE_NS. */
#define ACCEPT_EMFILE_NS 20000000u

static int accept_kernel(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags)
{
    uint64_t end = 0;
    for (;;) {
        int nfd = real.accept4(fd, addr, addrlen, flags);
        if (nfd >= 0 || errno != EMFILE || !atomic_load_explicit(&nshadows, memory_order_relaxed))
            return nfd;
        uint64_t now = sov_now_ns();
        if (!end)
            end = now + ACCEPT_EMFILE_NS;
        else if (now > end)
            return nfd;
        struct timespec pause = {0, 200000};
        nanosleep(&pause, NULL);
    }
}

PRELOAD_EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags)
{
    preload_ready();
    if (from_fabric(__builtin_return_address(0)))
        return real.accept4(fd, addr, addrlen, flags);
    int nfd = accept_kernel(fd, addr, addrlen, flags);
    if (nfd < 0)
        return nfd;
    bool shadowing = atomic_load_explicit(&nshadows, memory_order_relaxed) != 0;
    if (shadowing && carried(nfd)) /* stale entry for a reused number */
        sov_tp_drop_stale(nfd);
    int saved = errno;
    struct sockaddr_storage peer;
    socklen_t plen = sizeof(peer);
    bool across = shadowing && sov_tp_across_hosts();
    if (getpeername(nfd, (struct sockaddr *)&peer, &plen) != 0 ||
        (peer.ss_family != AF_INET && peer.ss_family != AF_INET6) ||
        (!across && !sov_addr_is_local((struct sockaddr *)&peer, plen))) {
        errno = saved;
        return nfd;
    }
    if (preload_io_uring_check()) { /* sovia stepped aside here: kernel TCP */
        atomic_fetch_add(&sov_g.tp_kernel, 1);
        errno = saved;
        return nfd;
    }
    struct sov_sock *l = NULL;
    if (shadowing) {
        pthread_mutex_lock(&shadows_lock);
        struct shadow *h = shadow_find(fd);
        l = h && !h->inherited ? h->l : NULL;
        pthread_mutex_unlock(&shadows_lock);
    }
    /* Claims prove a same-host token: kernel TCP for every client when
     * this process is all fabric; another host's client is let go (not
     * redirected here), so its VI falls back at once. */
    if (!l && across && !sov_tp_far_beside())
        atomic_fetch_add(&sov_g.tp_kernel, 1);
    else if (!l)
        accepted_elsewhere(fd, nfd, (struct sockaddr *)&peer, flags & SOCK_NONBLOCK,
                           across && !sov_addr_is_local((struct sockaddr *)&peer, plen));
    else if (sov_tp_accept(l, nfd, (struct sockaddr *)&peer, flags & SOCK_NONBLOCK, false) != 0)
        atomic_fetch_add(&sov_g.tp_kernel, 1);
    errno = saved;
    return nfd;
}

PRELOAD_EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
    if (from_fabric(__builtin_return_address(0)))
        return real.accept4(fd, addr, addrlen, 0);
    return accept4(fd, addr, addrlen, 0);
}

/* The socket's own address as the program left it. An unbound socket is
 * not bound here: its VI names no port, the kernel's connect picks one as
 * it would without sovia, and the server's accept() finds the VI by the
 * socket sent with it (pair.c). Bound first (bind(0) or a port of our
 * choosing), its port could not be taken again while a connection of it
 * was in TIME_WAIT, as connect()'s own choice can (net.ipv4.tcp_tw_reuse),
 * and connect()'s choice skips every port bind() ever took: with a few
 * hundred short connections a second, sovia run's connects failed with
 * EADDRNOTAVAIL where kernel TCP's did not (tests/preload/churn.c). */
static int local_address(int fd, struct sockaddr_storage *local)
{
    socklen_t len = sizeof(*local);
    return getsockname(fd, (struct sockaddr *)local, &len);
}

PRELOAD_EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t addrlen)
{
    preload_ready();
    if (from_fabric(__builtin_return_address(0)))
        return real.connect(fd, addr, addrlen);
    int domain = 0;
    struct sockaddr_storage local;
    struct sov_sock *s = NULL;
    bool tcp = addr && addrlen >= sizeof(struct sockaddr_in) && !carried(fd) &&
               (addr->sa_family == AF_INET || addr->sa_family == AF_INET6) &&
               tcp_stream(fd, &domain) && addr->sa_family == domain;
    /* A second connect() on a connected socket (ab calls it again once the
     * socket is writable, to learn the result; the kernel says 0 once,
     * then EISCONN) is the kernel's to answer: a connection that fell
     * back got a second VI, which waited for a pairing its server never
     * began (1 s, the pairing timeout). */
    if (tcp) {
        struct sockaddr_storage peer;
        socklen_t plen = sizeof(peer);
        int saved = errno;
        tcp = getpeername(fd, (struct sockaddr *)&peer, &plen) != 0;
        errno = saved;
    }
    bool too_short = false; /* shortconn.c */
    if (tcp && sov_addr_port(addr) != 0 &&
        (sov_addr_is_local(addr, addrlen) || sov_tp_host_worth_trying(addr)) &&
        !preload_io_uring_check() && !(too_short = !sov_tp_worth_carrying(addr))) {
        int saved = errno;
        if (local_address(fd, &local) != 0 ||
            sov_tp_connect(fd, domain, (struct sockaddr *)&local, addr, is_nonblocking(fd), &s) != 0)
            s = NULL; /* no sovia listener there: plain TCP */
        errno = saved;
    }
    int rc = real.connect(fd, addr, addrlen);
    if (!s) {
        if (tcp && (rc == 0 || errno == EINPROGRESS)) {
            atomic_fetch_add(&sov_g.tp_kernel, 1);
            if (too_short)
                atomic_fetch_add(&sov_g.tp_short, 1);
        }
        return rc;
    }
    int err = errno;
    if (rc != 0 && err == EINPROGRESS) {
        /* Loopback handshakes finish within microseconds. */
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int soerr = 1;
        socklen_t len = sizeof(soerr);
        if (real.poll(&p, 1, 5) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 ||
            soerr != 0) {
            sov_tp_discard(s);
            errno = err;
            return rc;
        }
    } else if (rc != 0) {
        sov_tp_discard(s);
        errno = err;
        return rc;
    }
    if (sov_tp_publish_client(s) != 0)
        sov_tp_discard(s);
    errno = err;
    return rc;
}

/* sovia's own descriptors are not the program's to close: a stale close()
 * (a second one of the same number, harmless with the kernel's EBADF) must
 * not take one from under sovia (VipxFdAppCloseBegin). */
static int close_kernel(int fd)
{
    if (VipxFdAppCloseBegin(fd)) {
        errno = EBADF;
        return -1;
    }
    int rc = real.close(fd);
    int err = errno;
    VipxFdAppCloseEnd();
    errno = err;
    return rc;
}

PRELOAD_EXPORT int close(int fd)
{
    preload_ready();
    if (carried(fd)) {
        epoll_forget_fd(fd);
        if (sov_tp_forget(fd))
            return real.close(fd);
        if (sov_close(fd) == 0) /* closes fd too */
            return 0;
    }
    if (atomic_load_explicit(&nshadows, memory_order_relaxed))
        listener_drop(fd);
    epoll_close_fd(fd);
    return close_kernel(fd);
}

PRELOAD_EXPORT int shutdown(int fd, int how)
{
    preload_ready();
    if (carried(fd))
        settle_early(fd);
    int r = carried(fd) ? tp_prepare(fd, MSG_DONTWAIT) : 0;
    if (r != 0) {
        if (sov_shutdown(fd, how) == 0) {
            /* Paired: the kernel socket's FIN waits until the stream is
             * the kernel's (sov_mig_kernel_fin): a peer that leaves may
             * give back bytes that must reach it first. */
            if (r > 0)
                return how == SHUT_WR ? 0 : real.shutdown(fd, SHUT_RD);
        } else if (errno != EBADF) {
            return -1;
        }
    }
    return real.shutdown(fd, how);
}

PRELOAD_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
    preload_ready();
    int rc = real.setsockopt(fd, level, name, val, len);
    /* The options that change sovia's own behaviour follow the kernel's. */
    bool mirrored = (level == IPPROTO_TCP && name == TCP_NODELAY) ||
                    (level == SOL_SOCKET && (name == SO_LINGER || name == SO_OOBINLINE));
    if (rc == 0 && mirrored && carried(fd)) {
        int saved = errno;
        sov_setsockopt(fd, level, name, val, len);
        errno = saved;
    }
    return rc;
}
