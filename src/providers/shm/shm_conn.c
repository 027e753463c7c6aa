/*
 * shm_conn.c - connection management over Unix sockets.
 *
 * A discriminator maps to an abstract-namespace SOCK_SEQPACKET socket named
 * "sovia-vipl.<euid>.<discriminator bytes>": nothing is ever created in the
 * file system, so nothing can be left behind, whatever way a process dies.
 * Abstract sockets have no file permissions, so every connection's peer
 * credentials (SO_PEERCRED) are checked on both sides: a requester talks
 * only to a listener of the user it dialled, and a listener drops a
 * requester of another user before a byte or a descriptor is exchanged,
 * unless it takes every user's (VipxListenAnyUser). A connection between
 * two users carries only that connection's segments (fill_msg, shm_cred.c).
 *
 * The request carries the client's segment fds, the accept the server's.
 * The socket then stays open for the life of the connection: the agent
 * thread reads DISCONNECT/BROKEN notices and end-of-file from it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "shm.h"

/* A request accepted by VipConnectWait, waiting for Accept or Reject.
 * fds: the requester's four segment descriptors, then its token if any. */
struct shm_pending {
    int sock;
    int fds[5];
    int hint_fd; /* the requester's hint page for us, or -1 */
    struct shm_msg msg;
    pid_t pid;
    bool foreign; /* another user than we are now */
    /* The listener it came to, counting it as taken until it is accepted
     * or refused (shm_listen_waiting), and holding a reference. */
    struct shm_nic *snic;
    struct shm_listener *l;
};

static socklen_t sock_name(struct sockaddr_un *sun, uid_t uid, const uint8_t *disc, uint16_t len)
{
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    int n = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1, "sovia-vipl.%u.",
                     (unsigned)uid);
    memcpy(sun->sun_path + 1 + n, disc, len);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n + len);
}

static const uint8_t *disc_of(const VIP_NET_ADDRESS *a)
{
    return a->HostAddress + a->HostAddressLen;
}

/* Only this host is reachable: loopback, or an address we can bind
 * (4 bytes IPv4, 16 bytes IPv6, or no host part at all). */
static bool host_is_local(const VIP_NET_ADDRESS *a)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    struct sockaddr_in6 sin6 = {.sin6_family = AF_INET6};
    struct sockaddr *sa;
    socklen_t len;
    if (a->HostAddressLen == 0)
        return true;
    if (a->HostAddressLen == 4) {
        if (a->HostAddress[0] == 127)
            return true;
        memcpy(&sin.sin_addr, a->HostAddress, 4);
        sa = (struct sockaddr *)&sin;
        len = sizeof(sin);
    } else if (a->HostAddressLen == 16) {
        memcpy(&sin6.sin6_addr, a->HostAddress, 16);
        if (IN6_IS_ADDR_LOOPBACK(&sin6.sin6_addr) ||
            (IN6_IS_ADDR_V4MAPPED(&sin6.sin6_addr) && a->HostAddress[12] == 127))
            return true;
        sa = (struct sockaddr *)&sin6;
        len = sizeof(sin6);
    } else {
        return false;
    }
    int s = vipl_fd_socket(sa->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return false;
    bool local = bind(s, sa, len) == 0;
    VipxFdClose(s);
    return local;
}

static int send_msg(int sock, const struct shm_msg *m, const int *fds, int nfds)
{
    struct iovec iov = {(void *)m, sizeof(*m)};
    union {
        char buf[CMSG_SPACE(sizeof(int) * 6)];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds) {
        mh.msg_control = u.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    return sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof(*m) ? 0 : -1;
}

static void close_fds(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            VipxFdClose(fds[i]);
}

/*
 * Receives one message and up to five fds (a request's token is the
 * fifth), waiting until `deadline`, and the sender's hint page (the last
 * fd when m->hint_slot is set) into *hint_fd (-1: none). Returns the
 * number of the other fds (0..5), -ETIMEDOUT, or -EPROTO for anything
 * malformed (any fds that came with it are closed).
 */
static int recv_msg(int sock, struct shm_msg *m, int fds[5], int *hint_fd,
                    const struct timespec *deadline)
{
    *hint_fd = -1;
    struct pollfd pfd = {.fd = sock, .events = POLLIN};
    int rc;
    do
        rc = poll(&pfd, 1, vipl_ms_left(deadline));
    while (rc < 0 && errno == EINTR);
    if (rc == 0)
        return -ETIMEDOUT;
    union {
        char buf[CMSG_SPACE(sizeof(int) * 8)];
        struct cmsghdr align;
    } u;
    struct iovec iov = {m, sizeof(*m)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = sizeof(u.buf)};
    /* A token (the fifth) is the requester's kernel socket: a child we
     * fork must not hold that connection open. */
    ssize_t n = vipl_fd_recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT, 4);
    if (n == 0 || (n < 0 && errno == ECONNRESET))
        return -ECONNRESET; /* the other side closed: refused or gone */
    int got[8], nfds = 0;
    for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < k && nfds < 8; i++)
            memcpy(&got[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
    bool ok = n == (ssize_t)sizeof(*m) && !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) &&
              m->magic == SHM_MAGIC && m->version == SHM_VERSION &&
              nfds <= 5 + (m->hint_slot != 0) && (!m->hint_slot || nfds >= 1) &&
              m->host_len <= 16 && m->disc_len <= VIPL_MAX_DISC;
    if (!ok) {
        close_fds(got, nfds);
        return -EPROTO;
    }
    if (m->hint_slot) {
        /* Received where a token goes, so marked for a forked child to
         * close (vipl_fd_recvmsg): unmarked (a copy of it, and the
         * original's close, were two system calls more per connection). */
        *hint_fd = got[--nfds];
        vipl_fd_fork_keep(*hint_fd);
    }
    memcpy(fds, got, sizeof(int) * (size_t)nfds);
    return nfds;
}

/* Our side of a connection: the fds and the address to announce. To
 * another user (foreign) only this VI's own segments: its CQ's armed page
 * and wake-up socket serve our other connections too, so such a peer
 * reads the VI's own armed word and wakes the CQ by its socket's name,
 * which anyone may send to anyway. */
static void fill_msg(struct shm_vi *vi, enum shm_msg_type type, const VIP_NET_ADDRESS *self,
                     struct shm_msg *m, int fds[4], bool foreign, pid_t pid, int *hint)
{
    *hint = -1;
    *m = (struct shm_msg){
        .magic = SHM_MAGIC,
        .version = SHM_VERSION,
        .type = (uint16_t)type,
        .reliability = vi->core.attrs.ReliabilityLevel,
        .rdma_write = vi->core.attrs.EnableRdmaWrite != 0,
        .max_transfer = (uint32_t)vi->core.attrs.MaxTransferSize,
    };
    if (self) {
        m->host_len = self->HostAddressLen;
        m->disc_len = self->DiscriminatorLen;
        memcpy(m->addr, self->HostAddress, (size_t)m->host_len + m->disc_len);
    }
    /* Merged (inheritable): one memfd, named twice, rx after ctl. */
    int rx_fd = vi->merged ? vi->ctl_fd : vi->rx_fd;
    uint32_t rx_base = vi->merged ? (uint32_t)vi->ctl_len : 0;
    fds[0] = vi->ctl_fd;
    fds[1] = rx_fd;
    m->rx_off = rx_base;
    if (vi->core.recv_cq && !foreign) {
        struct shm_cq *cq = shm_cq(vi->core.recv_cq);
        fds[2] = cq->armed_fd;
        fds[3] = cq->wake_tx;
        m->wake_sock = SHM_WAKE_SOCKET;
        *hint = shm_hint_offer(vi, pid, &m->hint_slot); /* our user's only */
    } else {
        fds[2] = vi->ctl_fd;
        fds[3] = rx_fd;
        m->armed_off = (uint32_t)offsetof(struct shm_ctl, live.recv_armed);
        m->word_off = rx_base + (uint32_t)offsetof(struct shm_rx, live.wake_seq);
        m->wake_sock = vi->core.recv_cq ? SHM_WAKE_NAMED : SHM_WAKE_FUTEX;
        m->wake_id = vi->core.recv_cq ? shm_cq(vi->core.recv_cq)->wake_id : 0;
    }
}

/* Before the peer can complete anything: the own armed word of a VI woken
 * by name follows its CQ (shm_cq_relay). */
static void relay_on(struct shm_vi *vi, const struct shm_msg *ours, bool on)
{
    if (vi->core.recv_cq && ours->wake_sock == SHM_WAKE_NAMED)
        shm_cq_relay(shm_cq(vi->core.recv_cq), vi, on);
}

VIP_VI_ATTRIBUTES shm_attrs_of(const struct shm_msg *m)
{
    return (VIP_VI_ATTRIBUTES){
        .ReliabilityLevel = m->reliability,
        .MaxTransferSize = m->max_transfer,
        .EnableRdmaWrite = m->rdma_write != 0,
    };
}

/* Maps the peer described by `m` and its fds and attaches it to `vi`.
 * Takes ownership of the fds, of `sock` and of `pidfd` (the peer's, or -1
 * to open one), whatever the outcome. */
static VIP_RETURN attach_peer(struct shm_vi *vi, const struct shm_msg *m, int fds[4], int hint_fd,
                              int sock, pid_t pid, int pidfd)
{
    struct shm_nic *snic = shm_nic(vi->core.nic);
    struct shm_peer *peer = calloc(1, sizeof(*peer));
    int rc = peer ? shm_peer_map(peer, fds, m, snic) : -ENOMEM;
    /* The peer's hint page: our user's only, never another's. */
    if (rc == 0 && m->wake_sock == SHM_WAKE_SOCKET)
        shm_hint_map(peer, snic, &hint_fd, m->hint_slot);
    if (hint_fd >= 0)
        VipxFdClose(hint_fd);
    if (rc == 0)
        shm_hint_confirm(vi, m);
    else
        shm_hint_release(vi);
    if (rc == 0 && vi->inheritable && !vi->no_export) { /* a next image maps them again */
        memcpy(peer->kept, fds, sizeof(peer->kept));
        memset(fds, -1, 4 * sizeof(int));
    }
    close_fds(fds, 4); /* the mappings keep the memory */
    if (rc != 0) {
        free(peer);
        VipxFdClose(sock);
        if (pidfd >= 0)
            VipxFdClose(pidfd);
        return VIP_ERROR_RESOURCE;
    }
    peer->msg = *m;
    peer->attrs = shm_attrs_of(m);
    peer->sock = sock;
    peer->pid = pid;
    peer->pidfd = pidfd >= 0 ? pidfd : vipl_fd_pidfd(pid);
    shm_lock(&vi->sq_lock);
    vi->peer = peer;
    shm_unlock(&vi->sq_lock);
    atomic_store(&vi->core.state, VIP_STATE_CONNECTED);
    /* The peer has mapped our segments; the descriptors are no longer
     * needed (a reconnect makes new ones), and 1000 connections should not
     * cost 2000 of them, unless a next image must map them again. */
    if (!vi->inheritable || vi->no_export) {
        VipxFdClose(vi->ctl_fd);
        VipxFdClose(vi->rx_fd);
        vi->ctl_fd = vi->rx_fd = -1;
    }
    if (shm_agent_watch(snic->agent, vi) != 0) {
        shm_disconnect(&vi->core);
        return VIP_ERROR_RESOURCE;
    }
    return VIP_SUCCESS;
}

/* The listener for `local`'s discriminator, with a reference for the
 * caller; created (listening) if `create`. NULL with *err on failure. */
static struct shm_listener *listener_get(struct shm_nic *snic, const VIP_NET_ADDRESS *local,
                                         bool create, bool any_user, int *err)
{
    const uint8_t *disc = disc_of(local);
    pthread_mutex_lock(&snic->lock);
    for (struct shm_listener *l = snic->listeners; l; l = l->next)
        if (l->disc_len == local->DiscriminatorLen && !memcmp(l->disc, disc, l->disc_len)) {
            l->any_user |= any_user; /* (under the NIC lock) */
            l->refs++;
            pthread_mutex_unlock(&snic->lock);
            return l;
        }
    *err = -ENOENT;
    if (!create) {
        pthread_mutex_unlock(&snic->lock);
        return NULL;
    }
    int fd = vipl_fd_socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_un sun;
    socklen_t len = sock_name(&sun, geteuid(), disc, local->DiscriminatorLen);
    struct shm_listener *l = calloc(1, sizeof(*l));
    if (fd < 0 || !l || bind(fd, (struct sockaddr *)&sun, len) != 0 || listen(fd, SOMAXCONN)) {
        *err = fd < 0 || !l ? -ENOMEM : -errno;
        if (fd >= 0)
            VipxFdClose(fd);
        free(l);
        pthread_mutex_unlock(&snic->lock);
        return NULL;
    }
    memcpy(l->disc, disc, local->DiscriminatorLen);
    l->disc_len = local->DiscriminatorLen;
    l->fd = fd;
    l->any_user = any_user;
    pthread_mutex_init(&l->alock, NULL);
    atomic_init(&l->reserve, vipl_fd_reserve());
    l->refs = 2; /* the list's and the caller's */
    l->next = snic->listeners;
    snic->listeners = l;
    pthread_mutex_unlock(&snic->lock);
    return l;
}

static void listener_free(struct shm_listener *l)
{
    for (unsigned i = 0; i < l->narrivals; i++)
        VipxFdClose(l->arrivals[i].sock);
    pthread_mutex_destroy(&l->alock);
    VipxFdClose(l->fd);
    int r = atomic_load(&l->reserve);
    if (r >= 0)
        VipxFdClose(r);
    free(l);
}

static void listener_put(struct shm_nic *snic, struct shm_listener *l)
{
    pthread_mutex_lock(&snic->lock);
    bool last = --l->refs == 0;
    pthread_mutex_unlock(&snic->lock);
    if (last)
        listener_free(l);
}

/* Unlists `l`: new requests get no answer but a refusal, waiters wake. */
static void listener_close(struct shm_nic *snic, struct shm_listener *l)
{
    atomic_store(&l->closed, true);
    shutdown(l->fd, SHUT_RDWR);
    listener_put(snic, l);
}

void shm_close_listeners(struct shm_nic *snic)
{
    for (;;) {
        pthread_mutex_lock(&snic->lock);
        struct shm_listener *l = snic->listeners;
        if (l)
            snic->listeners = l->next;
        pthread_mutex_unlock(&snic->lock);
        if (!l)
            return;
        listener_close(snic, l);
    }
}

/*
 * In a forked child (one thread): its copies of the listening sockets go.
 * The parent's connection threads serve them; a copy kept here would keep
 * the name bound after the parent exits, and a client dialling it would
 * wait for an answer nobody gives, its request (and the descriptors it
 * carries) stuck in the backlog. Not shutdown(): the socket is the
 * parent's too. A reference held by a parent's thread (VipConnectWait)
 * has no thread here to use it.
 */
void shm_forget_listeners(struct shm_nic *snic)
{
    while (snic->listeners) {
        struct shm_listener *l = snic->listeners;
        snic->listeners = l->next;
        listener_free(l);
    }
}

VIP_RETURN shm_listen(struct vipl_nic *nic, const VIP_NET_ADDRESS *local, bool any_user)
{
    if (!host_is_local(local))
        return VIP_INVALID_PARAMETER;
    int err;
    struct shm_listener *l = listener_get(shm_nic(nic), local, true, any_user, &err);
    if (!l)
        return VIP_ERROR_RESOURCE; /* EADDRINUSE: another process listens */
    listener_put(shm_nic(nic), l);
    return VIP_SUCCESS;
}

VIP_RETURN shm_unlisten(struct vipl_nic *nic, const VIP_NET_ADDRESS *local)
{
    struct shm_nic *snic = shm_nic(nic);
    int err;
    struct shm_listener *l = listener_get(snic, local, false, false, &err);
    if (!l)
        return VIP_INVALID_STATE;
    /* Two threads may unlisten at once (a listener's close and its
     * connection thread); only the one that unlists it owns the list's
     * reference, or both would drop it. The other one was too late, as
     * if it had come after. */
    bool unlisted = false;
    pthread_mutex_lock(&snic->lock);
    for (struct shm_listener **p = &snic->listeners; *p; p = &(*p)->next)
        if (*p == l) {
            *p = l->next;
            unlisted = true;
            break;
        }
    pthread_mutex_unlock(&snic->lock);
    if (unlisted)
        listener_close(snic, l); /* drops the list's reference */
    listener_put(snic, l);       /* and ours */
    return unlisted ? VIP_SUCCESS : VIP_INVALID_STATE;
}

/* accept4 failed for want of a descriptor: the client would wait for an
 * answer, and poll would report it again at once. Giving up the reserved
 * descriptor lets us take the client and close it, which the client reads
 * as a refusal (the server is full, as ECONNREFUSED says). Without a
 * reserve (another thread has it, or it could not be reopened), wait a
 * little instead of spinning. */
static void refuse_for_want_of_fds(struct shm_listener *l)
{
    int r = atomic_exchange(&l->reserve, -1);
    if (r >= 0) {
        VipxFdClose(r);
        int s = vipl_fd_accept4(l->fd, SOCK_CLOEXEC);
        if (s >= 0)
            VipxFdClose(s);
    } else {
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    r = vipl_fd_reserve(); /* the reserve again */
    if (r >= 0 && !atomic_compare_exchange_strong(&l->reserve, &(int){-1}, r))
        VipxFdClose(r);
}

/* A request must name a well-formed client address; one of another user
 * must not ask us to send to a socket it gave (only its own VI's words, or
 * a wake-up by name): sending to a socket of its choosing, we would speak for our own
 * user to whatever it is connected to. */
static bool request_ok(const struct shm_msg *m, int nfds, bool foreign)
{
    return m->type == SHM_MSG_REQUEST && (nfds == 4 || nfds == 5) && m->disc_len >= 1 &&
           !(foreign && m->wake_sock == SHM_WAKE_SOCKET) &&
           (m->reliability == VIP_SERVICE_UNRELIABLE ||
            m->reliability == VIP_SERVICE_RELIABLE_DELIVERY ||
            m->reliability == VIP_SERVICE_RELIABLE_RECEPTION);
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* A requester has this long to send its REQUEST after it connected (it
 * sends it at once; this only bounds what a silent one holds). */
#define ARRIVAL_NS 2000000000u

/* The next requester from the listening socket; false if there is none,
 * or it is of another user and the listener is not for every user
 * (dropped at once). */
static bool accept_arrival(struct shm_nic *snic, struct shm_listener *l, struct shm_arrival *a)
{
    int s = vipl_fd_accept4(l->fd, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (s < 0 && (errno == EMFILE || errno == ENFILE))
        refuse_for_want_of_fds(l);
    if (s < 0)
        return false; /* another waiter took it */
    /* (The requester's credentials when it connected: just now.) */
    *a = (struct shm_arrival){.sock = s, .uid = (uid_t)-1, .deadline_ns = now_ns() + ARRIVAL_NS};
    bool known = shm_peer_cred(s, &a->pid, &a->uid);
    a->foreign = a->uid != geteuid();
    pthread_mutex_lock(&snic->lock);
    bool welcome = known && (!a->foreign || l->any_user);
    pthread_mutex_unlock(&snic->lock);
    if (!welcome)
        VipxFdClose(s);
    return welcome;
}

/* Keeps an arrival whose REQUEST has not come yet (the oldest goes if
 * they are full). */
static void arrival_keep(struct shm_listener *l, const struct shm_arrival *a)
{
    int drop = -1;
    pthread_mutex_lock(&l->alock);
    if (l->narrivals == SHM_ARRIVALS) {
        drop = l->arrivals[0].sock;
        memmove(l->arrivals, l->arrivals + 1, sizeof(*a) * (SHM_ARRIVALS - 1));
        l->narrivals--;
    }
    l->arrivals[l->narrivals++] = *a;
    pthread_mutex_unlock(&l->alock);
    if (drop >= 0)
        VipxFdClose(drop);
}

/* Takes arrival `sock` out of the list (false: another waiter has it, or
 * it went); with sock < 0, drops those past their deadline and returns
 * the milliseconds to the next deadline in *next_ms (-1: none). */
static bool arrival_take(struct shm_listener *l, int sock, struct shm_arrival *out, int *next_ms)
{
    bool found = false;
    uint64_t now = now_ns(), next = UINT64_MAX;
    int gone[SHM_ARRIVALS];
    unsigned ngone = 0, kept = 0;
    pthread_mutex_lock(&l->alock);
    for (unsigned i = 0; i < l->narrivals; i++) {
        struct shm_arrival *a = &l->arrivals[i];
        if (sock >= 0 ? a->sock == sock : a->deadline_ns <= now) {
            if (sock >= 0)
                *out = *a;
            else
                gone[ngone++] = a->sock;
            found = true;
            continue;
        }
        if (a->deadline_ns < next)
            next = a->deadline_ns;
        l->arrivals[kept++] = *a;
    }
    l->narrivals = kept;
    pthread_mutex_unlock(&l->alock);
    for (unsigned i = 0; i < ngone; i++)
        VipxFdClose(gone[i]);
    if (next_ms)
        *next_ms = next == UINT64_MAX ? -1 : (int)((next - now) / 1000000u) + 1;
    return found;
}

/* An arrival's REQUEST, if it is there: the pending request, or NULL
 * with *nfds -ETIMEDOUT (not yet: the arrival is left alone) or another
 * -errno (malformed, refused, or the requester went: it is closed). */
static struct shm_pending *read_request(struct shm_arrival *a, int *nfds)
{
    struct shm_pending *pc = calloc(1, sizeof(*pc));
    struct timespec now;
    int n = pc ? recv_msg(a->sock, &pc->msg, pc->fds, &pc->hint_fd, vipl_deadline(0, &now))
               : -ENOMEM;
    *nfds = n;
    if (n == -ETIMEDOUT) {
        free(pc);
        return NULL;
    }
    if (n < 0 || !request_ok(&pc->msg, n, a->foreign)) {
        if (n > 0)
            close_fds(pc->fds, n);
        if (n >= 0 && pc->hint_fd >= 0)
            VipxFdClose(pc->hint_fd);
        free(pc);
        VipxFdClose(a->sock);
        return NULL;
    }
    pc->sock = a->sock;
    pc->pid = a->pid;
    pc->foreign = a->foreign;
    return pc;
}

/*
 * Waits for a request on `local`. The listening socket and every requester
 * that connected but has not sent its REQUEST yet are polled together, so
 * a requester that says nothing (anyone may connect to a listener for
 * every user) delays nobody else.
 */
VIP_RETURN shm_connect_wait(struct vipl_nic *nic, const VIP_NET_ADDRESS *local,
                            const struct timespec *deadline, VIP_NET_ADDRESS *remote,
                            struct vipl_conn *conn)
{
    if (!host_is_local(local))
        return VIP_INVALID_PARAMETER;
    struct shm_nic *snic = shm_nic(nic);
    int err;
    struct shm_listener *l = listener_get(snic, local, true, false, &err);
    if (!l)
        return VIP_ERROR_RESOURCE; /* another process listens on it */
    VIP_RETURN r = VIP_TIMEOUT;
    struct pollfd pfd[1 + SHM_ARRIVALS];
    for (;;) {
        if (atomic_load(&l->closed)) {
            r = VIP_INVALID_STATE;
            break;
        }
        int next_ms, left = vipl_ms_left(deadline);
        arrival_take(l, -1, NULL, &next_ms);
        pfd[0] = (struct pollfd){.fd = l->fd, .events = POLLIN};
        nfds_t n = 1;
        pthread_mutex_lock(&l->alock);
        for (unsigned i = 0; i < l->narrivals; i++)
            pfd[n++] = (struct pollfd){.fd = l->arrivals[i].sock, .events = POLLIN};
        pthread_mutex_unlock(&l->alock);
        int rc = poll(pfd, n, next_ms >= 0 && (left < 0 || next_ms < left) ? next_ms : left);
        if (rc == 0 && vipl_ms_left(deadline) == 0)
            break; /* VIP_TIMEOUT */
        if (rc <= 0 || atomic_load(&l->closed))
            continue; /* EINTR, an arrival's deadline, or unlistened: checked above */
        struct shm_pending *pc = NULL;
        int nfds = 0;
        struct shm_arrival a;
        /* From before it leaves the backlog or the arrivals until it is
         * accepted or refused, a request counts as taken (no gap in which
         * shm_listen_waiting would miss it). */
        atomic_fetch_add(&l->taking, 1);
        for (nfds_t i = 1; i < n && !pc; i++)
            if (pfd[i].revents && arrival_take(l, pfd[i].fd, &a, NULL))
                pc = read_request(&a, &nfds);
        /* A new requester's REQUEST is usually there already. */
        if (!pc && (pfd[0].revents & POLLIN) && accept_arrival(snic, l, &a) &&
            !(pc = read_request(&a, &nfds)) && nfds == -ETIMEDOUT)
            arrival_keep(l, &a);
        if (!pc) {
            atomic_fetch_sub(&l->taking, 1);
            continue;
        }
        pthread_mutex_lock(&snic->lock);
        l->refs++; /* the pending request's */
        pthread_mutex_unlock(&snic->lock);
        pc->snic = snic;
        pc->l = l;
        conn->token = nfds == 5 ? pc->fds[4] : -1; /* the core's from now on */
        conn->peer_uid = a.uid;
        conn->foreign = a.foreign;
        remote->HostAddressLen = pc->msg.host_len;
        remote->DiscriminatorLen = pc->msg.disc_len;
        memcpy(remote->HostAddress, pc->msg.addr, (size_t)pc->msg.host_len + pc->msg.disc_len);
        conn->remote_attrs = shm_attrs_of(&pc->msg);
        conn->prov_conn = pc;
        r = VIP_SUCCESS;
        break;
    }
    listener_put(snic, l);
    return r;
}

/* Requests that reached `local` and that are not answered yet: requesters
 * in the listening socket's backlog, arrivals whose REQUEST is there to
 * read (a silent one is not counted), and requests a connect_wait took
 * and nobody accepted or refused yet. */
bool shm_listen_waiting(struct vipl_nic *nic, const VIP_NET_ADDRESS *local)
{
    struct shm_nic *snic = shm_nic(nic);
    int err;
    struct shm_listener *l = listener_get(snic, local, false, false, &err);
    if (!l)
        return false;
    struct pollfd pfd[1 + SHM_ARRIVALS] = {{.fd = l->fd, .events = POLLIN}};
    nfds_t n = 1;
    pthread_mutex_lock(&l->alock);
    for (unsigned i = 0; i < l->narrivals; i++)
        pfd[n++] = (struct pollfd){.fd = l->arrivals[i].sock, .events = POLLIN};
    pthread_mutex_unlock(&l->alock);
    bool waiting = !atomic_load(&l->closed) && (atomic_load(&l->taking) || poll(pfd, n, 0) > 0);
    listener_put(snic, l);
    return waiting;
}

/* Accepted or refused: no longer taken. */
static void pending_done(struct shm_pending *pc)
{
    atomic_fetch_sub(&pc->l->taking, 1);
    listener_put(pc->snic, pc->l);
}

static void pending_free(struct shm_pending *pc, bool close_sock)
{
    pending_done(pc);
    close_fds(pc->fds, 4);
    if (pc->hint_fd >= 0)
        VipxFdClose(pc->hint_fd);
    if (close_sock)
        VipxFdClose(pc->sock);
    free(pc);
}

VIP_RETURN shm_connect_accept(struct vipl_conn *conn, struct vipl_vi *cvi)
{
    struct shm_vi *vi = shm_vi(cvi);
    struct shm_pending *pc = conn->prov_conn;
    struct shm_msg reply;
    int ours[5];
    /* A requester that wakes us by name (it takes us for another user) is
     * answered alike. */
    fill_msg(vi, SHM_MSG_ACCEPT, NULL, &reply, ours,
             pc->foreign || pc->msg.wake_sock == SHM_WAKE_NAMED, pc->pid, &ours[4]);
    relay_on(vi, &reply, true);
    if (send_msg(pc->sock, &reply, ours, ours[4] >= 0 ? 5 : 4) != 0) {
        relay_on(vi, &reply, false);
        shm_hint_release(vi);
        pending_free(pc, true);
        return VIP_ERROR_RESOURCE; /* the requester is gone */
    }
    pending_done(pc);
    VIP_RETURN r = attach_peer(vi, &pc->msg, pc->fds, pc->hint_fd, pc->sock, pc->pid, -1);
    free(pc); /* attach_peer owns the fds and the socket now */
    return r;
}

void shm_connect_reject(struct vipl_conn *conn)
{
    struct shm_pending *pc = conn->prov_conn;
    struct shm_msg rej = {.magic = SHM_MAGIC, .version = SHM_VERSION, .type = SHM_MSG_REJECT};
    send_msg(pc->sock, &rej, NULL, 0);
    pending_free(pc, true);
}

/* Connects to uid's listener; -ECONNREFUSED if nobody listens, or if its
 * backlog is full. A listener takes requesters as they come (arrivals), so
 * a full backlog (4096) is one that does not, and a squatter may keep its
 * own full on purpose: waiting there would make every dialler wait. */
static int dial(const VIP_NET_ADDRESS *remote, uid_t uid)
{
    struct sockaddr_un sun;
    socklen_t len = sock_name(&sun, uid, disc_of(remote), remote->DiscriminatorLen);
    int s = vipl_fd_socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0)
        return -errno;
    if (connect(s, (struct sockaddr *)&sun, len) == 0)
        return s;
    int err = errno;
    VipxFdClose(s);
    return err == ENOENT || err == EAGAIN || err == ECONNREFUSED ? -ECONNREFUSED : -err;
}

/*
 * The requester's side. The listener must be of the user we dialled (a
 * squatter of another user is left before a byte or a descriptor goes);
 * whether the connection is between two users is decided by the
 * listening process's credentials now (shm_cred.c): then our token goes
 * wrapped (shm_token_wrap) and the peer wakes our CQ by name. Start sends
 * the REQUEST; finish takes the listener's answer (the connection thread
 * of a sovia listener answers without its program: a non-blocking
 * connect() under sovia run returns in between, docs/PROTOCOL.md).
 */
VIP_RETURN shm_connect_start(struct vipl_vi *cvi, const VIP_NET_ADDRESS *local,
                             const VIP_NET_ADDRESS *remote)
{
    struct shm_vi *vi = shm_vi(cvi);
    if (!host_is_local(remote))
        return VIP_NOT_REACHABLE;
    uid_t want = cvi->connect_uid == (uid_t)-1 ? geteuid() : cvi->connect_uid;
    int s = dial(remote, want);
    if (s < 0)
        return s == -ECONNREFUSED ? VIP_NO_MATCH : VIP_ERROR_RESOURCE;
    pid_t pid;
    uid_t uid;
    if (!shm_peer_cred(s, &pid, &uid) || uid != want) {
        VipxFdClose(s);
        return VIP_NO_MATCH;
    }
    int pidfd = vipl_fd_pidfd(pid);
    bool foreign = want != geteuid() || !shm_process_is_self(pid, pidfd);
    struct shm_msg m;
    int fds[6], hint;
    fill_msg(vi, SHM_MSG_REQUEST, local, &m, fds, foreign, pid, &hint);
    fds[4] = cvi->connect_token >= 0 && foreign ? shm_token_wrap(cvi->connect_token)
                                                : cvi->connect_token;
    int nfds = fds[4] >= 0 ? 5 : 4;
    if (hint >= 0) /* the last */
        fds[nfds++] = hint;
    relay_on(vi, &m, true);
    bool sent = (cvi->connect_token < 0 || fds[4] >= 0) && send_msg(s, &m, fds, nfds) == 0;
    if (foreign && fds[4] >= 0)
        VipxFdClose(fds[4]); /* the wrapper is the listener's now */
    if (!sent) {
        relay_on(vi, &m, false);
        shm_hint_release(vi);
        VipxFdClose(s);
        if (pidfd >= 0)
            VipxFdClose(pidfd);
        return VIP_NO_MATCH;
    }
    vi->req_open = true;
    vi->req_sock = s;
    vi->req_pid = pid;
    vi->req_pidfd = pidfd;
    vi->req_relay = m.wake_sock == SHM_WAKE_NAMED;
    vi->req_foreign = foreign;
    return VIP_SUCCESS;
}

void shm_connect_abandon(struct vipl_vi *cvi)
{
    struct shm_vi *vi = shm_vi(cvi);
    if (!vi->req_open)
        return;
    vi->req_open = false;
    if (vi->req_relay)
        shm_cq_relay(shm_cq(cvi->recv_cq), vi, false);
    if (vi->req_pidfd >= 0)
        VipxFdClose(vi->req_pidfd);
    VipxFdClose(vi->req_sock);
    vi->req_sock = vi->req_pidfd = -1;
}

VIP_RETURN shm_connect_finish(struct vipl_vi *cvi, const struct timespec *deadline,
                              VIP_VI_ATTRIBUTES *rattrs)
{
    struct shm_vi *vi = shm_vi(cvi);
    if (!vi->req_open)
        return VIP_INVALID_STATE;
    struct shm_msg m;
    int fds[5], hint_fd;
    int n = recv_msg(vi->req_sock, &m, fds, &hint_fd, deadline);
    if (n == -ETIMEDOUT)
        return VIP_TIMEOUT; /* still pending: the caller waits on, or abandons */
    if (n == 4 && m.type == SHM_MSG_ACCEPT && !(vi->req_foreign && m.wake_sock == SHM_WAKE_SOCKET)) {
        int s = vi->req_sock, pidfd = vi->req_pidfd;
        bool relay = vi->req_relay;
        vi->req_open = false; /* attach_peer's now */
        vi->req_sock = vi->req_pidfd = -1;
        VIP_RETURN r = attach_peer(vi, &m, fds, hint_fd, s, vi->req_pid, pidfd);
        if (r == VIP_SUCCESS)
            *rattrs = shm_attrs_of(&m);
        else if (relay)
            shm_cq_relay(shm_cq(cvi->recv_cq), vi, false);
        return r;
    }
    if (n > 0)
        close_fds(fds, n);
    if (n >= 0 && hint_fd >= 0)
        VipxFdClose(hint_fd);
    shm_hint_release(vi);
    shm_connect_abandon(cvi);
    if (n == -ECONNRESET) /* the listener closed before taking the request */
        return VIP_REJECT;
    return n >= 0 && m.type == SHM_MSG_REJECT ? VIP_REJECT : VIP_ERROR_RESOURCE;
}

VIP_RETURN shm_connect_request(struct vipl_vi *cvi, const VIP_NET_ADDRESS *local,
                               const VIP_NET_ADDRESS *remote, const struct timespec *deadline,
                               VIP_VI_ATTRIBUTES *rattrs)
{
    VIP_RETURN r = shm_connect_start(cvi, local, remote);
    if (r == VIP_SUCCESS && (r = shm_connect_finish(cvi, deadline, rattrs)) == VIP_TIMEOUT)
        shm_connect_abandon(cvi);
    return r;
}

void shm_conn_notify(struct shm_peer *peer, enum shm_msg_type type)
{
    struct shm_msg m = {.magic = SHM_MAGIC, .version = SHM_VERSION, .type = (uint16_t)type};
    send_msg(peer->sock, &m, NULL, 0);
}

/* Takes the peer away from the VI (the agent first, so it never sees a
 * freed peer) and lets go of it, telling it `notice` unless 0. */
static void peer_drop(struct shm_vi *vi, enum shm_msg_type notice)
{
    shm_holder_leave(vi);
    shm_agent_unwatch(shm_nic(vi->core.nic)->agent, vi);
    shm_lock(&vi->sq_lock);
    struct shm_peer *peer = vi->peer;
    vi->peer = NULL;
    shm_unlock(&vi->sq_lock);
    if (!peer)
        return;
    if (notice)
        shm_conn_notify(peer, notice);
    shm_peer_free(peer);
}

/* The peer hears of a second holder before it could see this process go,
 * because the notice is queued on the connection socket ahead of any
 * end-of-file and the agent reads the socket before it trusts a pidfd. */
VIP_RETURN shm_share_vi(struct vipl_vi *cvi)
{
    struct shm_vi *vi = shm_vi(cvi);
    shm_lock(&vi->sq_lock);
    if (vi->peer && !vi->shared) {
        shm_conn_notify(vi->peer, SHM_MSG_SHARED);
        vi->shared = true;
    }
    shm_unlock(&vi->sq_lock);
    return VIP_SUCCESS;
}

VIP_RETURN shm_nudge_vi(struct vipl_vi *cvi)
{
    struct shm_vi *vi = shm_vi(cvi);
    shm_lock(&vi->sq_lock);
    VIP_RETURN r = VIP_INVALID_STATE;
    if (vi->peer) {
        shm_conn_notify(vi->peer, SHM_MSG_NUDGE);
        r = VIP_SUCCESS;
    }
    shm_unlock(&vi->sq_lock);
    return r;
}

/* Our references go (mappings, descriptors); the peer is told nothing. Its
 * connection socket reaches end-of-file when the last holder lets go. */
void shm_release_vi(struct vipl_vi *cvi)
{
    peer_drop(shm_vi(cvi), 0);
}

VIP_RETURN shm_disconnect(struct vipl_vi *cvi)
{
    struct shm_vi *vi = shm_vi(cvi);
    peer_drop(vi, SHM_MSG_DISCONNECT);
    if (cvi->recv_cq) /* (a relay VI's own armed word stops following the CQ) */
        shm_cq_relay(shm_cq(cvi->recv_cq), vi, false);
    /* Fresh segments: whatever the old peer still maps is no longer ours.
     * A VI destroyed next (VipxDisconnectLast) reads nothing of them again. */
    shm_rq_flush_all(vi);
    if (!cvi->last) {
        shm_vi_sleep_kick(vi);
        if (shm_vi_segments_create(vi) != 0)
            return VIP_ERROR_RESOURCE;
        pthread_mutex_lock(&cvi->nic->lock);
        shm_vi_export_regs(vi);
        pthread_mutex_unlock(&cvi->nic->lock);
    }
    atomic_store(&cvi->state, VIP_STATE_IDLE);
    shm_wait_wake(vi, VIPL_RECVQ);
    shm_wait_wake(vi, VIPL_SENDQ);
    return VIP_SUCCESS;
}
