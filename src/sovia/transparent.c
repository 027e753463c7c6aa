/*
 * transparent.c - sovia connections behind programs' own kernel TCP sockets,
 * for the preload library of `sovia run` (docs/ARCHITECTURE.md,
 * "Transparent mode").
 *
 * The program keeps its kernel socket; sovia only carries the bytes. A
 * listening socket gets a shadow sovia listener that is not in the table
 * (the kernel still reports its readiness). A client connects its VI first,
 * from its kernel socket's address, then its kernel socket; the server's
 * accept() pairs the two by the client's port and sends its WAKEUP. Until
 * that WAKEUP the client's connection is tentative: if the kernel socket
 * speaks first, or nothing comes within the pairing timeout, the client
 * drops its VI and both ends stay on kernel TCP.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sock.h"
#include "ephemeral.h"
#include "transparent.h"
#include "xauth.h"

/* Read on first use by whichever thread settles a socket first: the
 * program's and the service thread, each under its own socket's lock, so
 * the cache is atomic (racing first callers store the same value). */
uint64_t sov_tp_pair_timeout_ns(void)
{
    static _Atomic uint64_t cached;
    uint64_t ns = atomic_load_explicit(&cached, memory_order_relaxed);
    if (!ns) {
        const char *v = getenv("SOVIA_PAIR_TIMEOUT_MS");
        long ms = v ? strtol(v, NULL, 10) : 1000;
        ns = (uint64_t)(ms > 0 ? ms : 1000) * 1000000u;
        atomic_store_explicit(&cached, ns, memory_order_relaxed);
    }
    return ns;
}

bool sov_tp_fd_room(void)
{
    return VipxFdRoom(SOV_TP_CONN_FDS);
}

/* Only a process that was given a key starts sovia for a connection to
 * another host (the variable as first seen: nginx clears it). */
static bool across_wanted(void)
{
    static _Atomic int wanted = -1;
    int w = atomic_load_explicit(&wanted, memory_order_relaxed);
    if (w < 0) {
        w = getenv("SOVIA_CLUSTER_KEY_FILE") != NULL;
        atomic_store_explicit(&wanted, w, memory_order_relaxed);
    }
    return w;
}

bool sov_tp_across_hosts(void)
{
    return across_wanted() && sov_init() == 0 && sov_xhost_on();
}

bool sov_tp_far_beside(void)
{
    return sov_tp_across_hosts() && sov_xhost_far_wanted();
}

bool sov_tp_host_worth_trying(const struct sockaddr *peer)
{
    return sov_tp_across_hosts() && !sov_xpeer_refusing(peer, sov_now_ns());
}

int sov_tp_connect(int fd, int domain, const struct sockaddr *local, const struct sockaddr *peer,
                   bool nonblock, struct sov_sock **out)
{
    int err = sov_init();
    if (err)
        return err;
    if (!sov_xhost_nic_pairs())
        return -ECONNREFUSED;
    if (!sov_tp_fd_room())
        return -EMFILE;
    /* With a key beside shm, a peer on another host goes over the far NIC
     * (far.c: opened now, the first time). */
    bool far = sov_xhost_far_wanted() &&
               !sov_addr_is_local(peer, peer->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                                   : sizeof(struct sockaddr_in6));
    if (far && sov_far_open() != 0)
        return -ECONNREFUSED;
    /* Across hosts (fabric) the HELLO proves the connection's four
     * addresses, so the client port is bound now (ephemeral.c); on this
     * host the VI names none and the kernel's connect picks it (pair.c). */
    struct sockaddr_storage bound;
    if ((far || (sov_xhost_on() && !sov_xhost_far_wanted())) && sov_addr_port(local) == 0) {
        socklen_t bl = sizeof(bound);
        if (sov_bind_ephemeral(fd, domain) != 0 ||
            getsockname(fd, (struct sockaddr *)&bound, &bl) != 0)
            return -EADDRNOTAVAIL;
        local = (struct sockaddr *)&bound;
    }
    struct sov_sock *s = sov_sock_adopt(fd, domain, nonblock);
    if (!s)
        return -ENOMEM;
    s->gen++;
    struct sov_conn *c = sov_conn_create(&s->cfg, far, &err);
    if (c && (err = sov_connect_tentative(c, fd, local, peer, 0, nonblock)) != 0) {
        sov_conn_destroy(c);
        c = NULL;
    }
    if (!c) {
        sov_sock_free(s);
        return err;
    }
    /* Under the lock, as sov_sock_adopt: the socket may be recycled, and
     * the service thread may still hold it from its last pairing list. */
    sov_sock_lock(s);
    s->conn = c;
    s->transparent = true;
    s->tp_waiting = true;
    s->tp_client = true;
    s->peer_len = peer->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                             : sizeof(struct sockaddr_in6);
    memcpy(&s->peer, peer, s->peer_len);
    s->kind = SK_CONNECTED;
    sov_sock_unlock(s);
    *out = s;
    return 0;
}

/* The connection leaves the socket under its lock: a thread that still
 * holds the socket from a pairing list locks it and looks at s->conn. */
static struct sov_conn *detach_conn(struct sov_sock *s)
{
    sov_sock_lock(s);
    struct sov_conn *c = s->conn;
    s->conn = NULL;
    sov_sock_unlock(s);
    return c;
}

void sov_tp_discard(struct sov_sock *s)
{
    sov_conn_destroy(detach_conn(s));
    sov_sock_free(s);
}

/* Publishes an established (or tentative) connection under its descriptor. */
/* Options the program set on its kernel socket before sovia carried it
 * (TCP_NODELAY is often set before connect, and accepted sockets inherit
 * it from the listener). */
static void inherit_options(struct sov_sock *s)
{
    int on = 0;
    socklen_t len = sizeof(on);
    if (getsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &on, &len) == 0)
        s->nodelay = on != 0;
    len = sizeof(on); /* accepted sockets inherit it from the listener */
    if (getsockopt(s->fd, SOL_SOCKET, SO_OOBINLINE, &on, &len) == 0)
        s->oobinline = on != 0;
    len = sizeof(s->linger);
    if (getsockopt(s->fd, SOL_SOCKET, SO_LINGER, &s->linger, &len) != 0)
        s->linger = (struct linger){0, 0};
}

/* A connection whose socket is made close-on-exec (SOCK_CLOEXEC, accept4's
 * flag) goes to no next image: its VI lets go of the two memfds it kept
 * for one (docs/SOCKETS.md). Decided when it is published, as the program
 * made it: a program that sets the flag later, to keep the socket from
 * some children and give it to others (tests/preload/spawn.c), keeps the
 * connection carried across those execs. The system call itself: the
 * preload's fcntl takes the socket's lock. */
static void forget_export(struct sov_sock *s)
{
    long fl = syscall(SYS_fcntl, s->fd, F_GETFD);
    if (fl >= 0 && (fl & FD_CLOEXEC) && VipxViForgetExport(s->conn->vi) == VIP_SUCCESS)
        s->conn->no_export = true;
}

static int publish(struct sov_sock *s)
{
    inherit_options(s);
    forget_export(s); /* not published yet: nobody else holds s */
    if (s->cfg.handling != SOV_SINGLE) {
        int err = sov_handling_start();
        if (err)
            return err;
    }
    atomic_store(&sov_g.sockets_created, true);
    int err = sov_table_insert(s);
    if (!err) /* the service thread answers the peer even if the program is idle */
        sov_pairing_add(s);
    return err;
}

int sov_tp_publish_client(struct sov_sock *s)
{
    return publish(s);
}

struct sov_sock *sov_tp_listen(int fd, int domain, const struct sockaddr *local, int backlog,
                               uint32_t ticket)
{
    if (sov_init() != 0 || !sov_xhost_nic_pairs())
        return NULL;
    struct sov_sock *s = sov_sock_adopt(fd, domain, false);
    if (!s)
        return NULL;
    s->gen++;
    s->transparent = true;
    sov_copy_addr((const struct sockaddr_storage *)local,
                  domain == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6),
                  (struct sockaddr *)&s->local, &s->local_len);
    if (sov_listen_start(s, backlog < 16 ? 16 : backlog, true, ticket) != 0) {
        sov_sock_free(s);
        return NULL;
    }
    return s;
}

void sov_tp_unlisten(struct sov_sock *l)
{
    sov_sock_lock(l);
    l->dead = true;
    sov_sock_unlock(l);
    sov_wake_waiters(l);
    sov_listen_stop(l);
    sov_sock_free(l);
}

void sov_tp_listen_forked(struct sov_sock *l)
{
    sov_listen_forked(l);
}

/* A redirected client reacts in microseconds when it is in a sovia call,
 * within a millisecond through its service thread (close.c), once it runs.
 * On a crowded host (more runnable threads than CPUs: sov_spin_pays) it,
 * the listening process's thread that redirects it and our ticketed
 * listener's each wait for a CPU first: with 3 busy loops on 2 cores a
 * client took up to 0.35 s to follow, and 50 ms sent 1 run in 10 of
 * tests/preload/prefork.c back to kernel TCP. There the wait is the
 * client's own pairing timeout. A client that fell back instead (it could
 * not follow) ends the wait as soon as its bytes come on the kernel
 * connection (sov_accept_match). */
#define REDIRECT_PATIENCE_NS 50000000u

int sov_tp_accept(struct sov_sock *l, int fd, const struct sockaddr *peer, bool nonblock,
                  bool redirected)
{
    uint64_t patience = 0;
    if (redirected)
        patience = sov_spin_pays(sov_now_ns()) ? REDIRECT_PATIENCE_NS : sov_tp_pair_timeout_ns();
    if (sov_tp_far_beside())
        sov_listen_far(l, peer);
    struct sov_conn *c = sov_accept_match(l, fd, peer, patience);
    if (!c)
        return -ENOENT;
    /* The accepted socket's family (a listener may serve IPv4 and IPv6
     * sockets of its port alike). */
    struct sov_sock *s = sov_sock_adopt(fd, peer->sa_family, nonblock);
    if (!s) {
        sov_conn_destroy(c);
        return -ENOMEM;
    }
    s->gen++;
    sov_sock_lock(s); /* as in sov_tp_connect */
    s->transparent = true;
    s->cfg = c->cfg;
    s->conn = c;
    s->kind = SK_CONNECTED;
    s->tp_waiting = true;
    sov_sock_unlock(s);
    int err = publish(s);
    if (err) {
        sov_tp_discard(s);
        return err;
    }
    return 0;
}

int sov_tp_await(struct sov_sock *t, const struct sockaddr *client, bool on)
{
    return sov_listen_await(t, sov_addr_port(client), on);
}

int sov_tp_claim(int fd, const struct sockaddr *listening, uid_t owner, uint32_t ticket)
{
    int err = sov_init();
    return err ? err : sov_claim(fd, listening, owner, ticket);
}

static void fall_back(struct sov_sock *s);
static bool kernel_spoke(const struct sov_sock *s, bool server);

/* ---- Bytes written before the pairing ------------------------------------------ */

/* Either end, as a kernel socket's send buffer would: a client whose
 * server has not accepted yet (a non-blocking client otherwise met EAGAIN
 * while poll reported POLLOUT, and spun until the accept), and a server
 * whose client has not answered. */
static bool takes_early(const struct sov_sock *s)
{
    const struct sov_conn *c = s->conn;
    return s->tp_waiting && !s->dead && c && !c->peer_window && !c->reset && !c->wr_shut;
}

bool sov_tp_early_room(const struct sov_sock *s)
{
    /* Not while the listener has not answered: the socket is not
     * writable before its rendezvous, as a kernel socket before its
     * handshake (a send meanwhile is taken all the same). */
    return takes_early(s) && !s->conn->connecting && s->conn->early_len < s->conn->send_mtu;
}

ssize_t sov_tp_send_early(struct sov_sock *s, const struct iovec *iov, int iovcnt, bool whole)
{
    if (!takes_early(s))
        return 0;
    struct sov_conn *c = s->conn;
    size_t total = 0;
    for (int k = 0; k < iovcnt; k++)
        total += iov[k].iov_len;
    if (whole && total > c->send_mtu - c->early_len)
        return -EAGAIN; /* the blocking send waits for the pairing instead */
    if (!c->early && !(c->early = malloc(c->send_mtu)))
        return -EAGAIN;
    size_t taken = 0;
    for (int k = 0; k < iovcnt && c->early_len < c->send_mtu; k++) {
        size_t n = iov[k].iov_len;
        if (n > c->send_mtu - c->early_len)
            n = c->send_mtu - c->early_len;
        memcpy(c->early + c->early_len, iov[k].iov_base, n);
        c->early_len += (uint32_t)n;
        taken += n;
    }
    return taken ? (ssize_t)taken : -EAGAIN;
}

/* After pairing the window is open (the client's WAKEUP gave credits): the
 * early bytes are one packet and leave at once, before anything later. */
static void send_early(struct sov_sock *s)
{
    struct sov_conn *c = s->conn;
    if (!c->early_len)
        return;
    struct iovec v = {c->early, c->early_len};
    c->early_len = 0;
    sov_do_send(s, &v, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* An end closing with the pairing not complete. The peer may be pairing
 * right now (a client answering, a server accepting), and would then take
 * the VI going as a reset: a brief wait (CLOSE_ANSWER_NS; a client in a
 * sovia call, or its service thread, answers within microseconds) lets the
 * close be graceful. With no pairing by then, the early bytes go to the
 * kernel socket, where the peer reads them: a client looks there before it
 * answers (sov_tp_settle), a server whose client's VI went uses the kernel
 * connection. (Not before the wait: a client would take them for a server
 * that gave up, and fall back.) A client that holds no early bytes does not
 * wait. An abortive close (SO_LINGER {1, 0}) neither waits nor sends.
 * Caller holds the lock, on a socket no longer in the table. */
#define CLOSE_ANSWER_NS 20000000u

static void write_kernel(struct sov_sock *s);
static int follow_redirect(struct sov_sock *s);

/* 100 us with the socket's lock released (the client's answer comes from
 * another process; its own thread, or ours, may need the lock meanwhile). */
static void nap_unlocked(struct sov_sock *s)
{
    sov_sock_unlock(s);
    struct timespec pause = {0, 100000};
    nanosleep(&pause, NULL);
    sov_sock_lock(s);
}

void sov_tp_close_settle(struct sov_sock *s, bool abortive)
{
    if (abortive || !s->conn)
        return;
    /* A connection another process holds too (it was pairing at a fork)
     * is that holder's to pair, early bytes and all (they stay in the
     * record): a forked child's exit wrote them to the kernel socket while
     * its parent paired, the server fell back and reset the VI, and the
     * parent's client fell back too (forkstress). */
    if (sov_shared_others(s->conn))
        return;
    bool client = s->conn->tentative_since_ns != 0;
    if (client && !s->conn->early_len)
        return;
    uint64_t end = sov_now_ns() + CLOSE_ANSWER_NS;
    for (;;) {
        /* A non-blocking connect's VI not answered yet: its answer first. */
        bool refused = s->conn->connecting && sov_connect_finish(s->conn, 0) &&
                       s->conn->connect_err;
        if (!s->conn->connecting && !refused) {
            sov_progress(s);
            if (s->conn->redirect) /* failed: the VI it leaves resets */
                follow_redirect(s);
        }
        struct sov_conn *c = s->conn;
        if (!c->connecting && !refused && c->peer_window && !c->tentative && !c->reset) {
            send_early(s);
            return;
        }
        if (refused || c->reset || sov_now_ns() > end ||
            (client && c->tentative && kernel_spoke(s, false))) {
            write_kernel(s);
            atomic_fetch_add(&sov_g.tp_fell_back, 1);
            c->early_len = 0;
            return;
        }
        nap_unlocked(s);
    }
}

/* Writes the early bytes to the kernel socket, keeping them. */
static void write_kernel(struct sov_sock *s)
{
    struct sov_conn *c = s->conn;
    if (!c || !c->early_len)
        return;
    /* The system calls themselves: send() and poll() are the preload's. A
     * fresh kernel connection has room for one packet; the loop is for a
     * loaded host, and gives up as a reset would. */
    size_t off = 0;
    uint64_t end = sov_now_ns() + 1000000000u;
    while (off < c->early_len) {
        long r = syscall(SYS_sendto, s->fd, c->early + off, c->early_len - off,
                         MSG_NOSIGNAL | MSG_DONTWAIT, NULL, 0);
        if (r > 0) {
            off += (size_t)r;
            continue;
        }
        if (r == 0 || (errno != EAGAIN && errno != EINTR) || sov_now_ns() > end)
            break;
        struct pollfd p = {.fd = s->fd, .events = POLLOUT};
        struct timespec slice = {0, 10000000};
        syscall(SYS_ppoll, &p, 1, &slice, NULL, 0);
    }
}

/* Has the other end written on the kernel socket (or, for a client, closed
 * it)? The system calls themselves: poll() and recv() are the preload's,
 * which would come back here for this very socket. */
static bool kernel_spoke(const struct sov_sock *s, bool server)
{
    if (server) { /* bytes only: an end of stream alone says nothing new */
        char b;
        return syscall(SYS_recvfrom, s->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT, NULL, NULL) > 0;
    }
    struct pollfd p = {.fd = s->fd, .events = POLLIN};
    struct timespec zero = {0, 0};
    return syscall(SYS_ppoll, &p, 1, &zero, NULL, 0) > 0;
}

/* The listening process redirected us (REDIRECT): another of its
 * processes accepted our kernel connection. A VI to that one, from our
 * address and with our kernel socket as the token again; the bytes held
 * move over, and the pairing starts afresh. Caller holds s->lock. */
static int follow_redirect(struct sov_sock *s)
{
    struct sov_conn *old = s->conn;
    uint32_t ticket = old->redirect;
    old->redirect = 0; /* once */
    if (sov_xhost_proves(old))
        return -ECONNREFUSED; /* its proof cannot go elsewhere: kernel TCP */
    struct sockaddr_storage local, peer;
    socklen_t llen = sizeof(local), plen = sizeof(peer);
    if (getsockname(s->fd, (struct sockaddr *)&local, &llen) != 0 ||
        getpeername(s->fd, (struct sockaddr *)&peer, &plen) != 0)
        return -errno;
    /* Early bytes in a shared connection's record (written before a
     * fork) come out of it first: the record goes with the old VI. */
    if (!sov_shared_own_early(old))
        return -ENOMEM;
    int err;
    struct sov_conn *c = sov_conn_create(&s->cfg, old->far, &err);
    if (!c)
        return err;
    err = sov_connect_tentative(c, s->fd, (struct sockaddr *)&local, (struct sockaddr *)&peer,
                                ticket, false);
    if (err) {
        sov_conn_destroy(c);
        return err;
    }
    c->redirected = true;
    c->early = old->early;
    c->early_len = old->early_len;
    old->early = NULL;
    old->early_len = 0;
    /* The old record's section ends before the record goes (the other
     * holders see no early bytes left, and its lock free): destroyed
     * inside it, the record was unmapped under the section, and the
     * unlock read the freed connection (forkstress: SIGSEGV). */
    if (s->rec_entered)
        sov_shared_leave(s);
    s->conn = c; /* under the lock: see detach_conn */
    if (old->no_export && VipxViForgetExport(c->vi) == VIP_SUCCESS)
        c->no_export = true; /* as the VI it replaces */
    sov_conn_destroy(old);
    atomic_fetch_add(&sov_g.tp_redirected, 1);
    return 0;
}

/* A non-blocking connect's VI whose listener had not answered when
 * connect() returned (caller holds s->lock; c->connecting, or it failed
 * while a fork waited for it: c->connect_err): 1 while no
 * answer came (or the socket's own pairing timeout has not run out); 0
 * once it came, and the pairing goes on as for a blocking connect; -1
 * when the connection left for the kernel socket (lock released): the
 * listener refused (its queue full: as a refusal before connect()
 * returned, kernel TCP), the kernel connection failed or its peer spoke
 * first, or no answer came in time. */
static int connect_step(struct sov_sock *s)
{
    struct sov_conn *c = s->conn;
    if (c->connecting && kernel_spoke(s, false)) { /* a failed kernel connect: POLLERR */
        fall_back(s);
        return -1;
    }
    if (!sov_connect_finish(c, 0))
        return 1;
    if (c->connect_err) {
        atomic_fetch_add(&sov_g.tp_kernel, 1);
        sov_tp_fall_back(s);
        return -1;
    }
    return 0;
}

/* Caller holds s->lock. Paired once the peer's WAKEUP opened our window
 * (and, on the client, ours answered it). */
enum sov_tp_state sov_tp_settle(struct sov_sock *s)
{
    struct sov_conn *c = s->conn;
    /* Migrated (migrate.c): by another holder of ours, or the peer, and
     * nothing of the stream is left on the VI. */
    if (c && !s->tp_waiting && (c->mig || c->peer_mig) && sov_mig_over(s)) {
        sov_tp_fall_back(s);
        return SOV_TP_FELL_BACK;
    }
    if (!c || !s->tp_waiting)
        return SOV_TP_PAIRED;
    if (c->connecting || c->connect_err) {
        int st = connect_step(s);
        if (st != 0)
            return st > 0 ? SOV_TP_PENDING : SOV_TP_FELL_BACK;
    }
    bool server = !c->tentative_since_ns;
    /* A client that has not answered looks at the kernel socket first: a
     * server that gave up waiting for the answer (it closed or shut down
     * with bytes held) wrote them there, and its WAKEUP, still in our ring
     * (we were stopped, say), must not pair us with a VI it dropped. */
    bool looked = !server && c->tentative;
    if (looked && kernel_spoke(s, false)) {
        fall_back(s);
        return SOV_TP_FELL_BACK;
    }
    /* Twice at most: an answer that came while we looked at the kernel
     * socket wins over what we saw there. */
    for (int look = 0;; look++) {
        sov_progress(s);
        if (c->redirect) {
            if (follow_redirect(s) == 0)
                return SOV_TP_PENDING;
            fall_back(s);
            return SOV_TP_FELL_BACK;
        }
        if (c->peer_window && !c->tentative && !c->reset) {
            s->tp_waiting = false;
            atomic_fetch_add(&sov_g.tp_paired, 1);
            if (c->far)
                atomic_fetch_add(&sov_g.tp_paired_far, 1);
            sov_pairing_remove(s);
            sov_conn_established(s);
            send_early(s);
            return SOV_TP_PAIRED;
        }
        /* The VI ended before it paired: reset, or every process on the
         * other side went (PeerClosed: a client killed or exiting before
         * it answered our WAKEUP). Its end, if any, is the kernel
         * connection's: the peer's kernel sent FIN or RST there. */
        if (c->reset || c->peer_gone) {
            sov_xhost_turned_away(c); /* across hosts: before its ACCEPT */
            fall_back(s);
            return SOV_TP_FELL_BACK;
        }
        /* The other end speaking on the kernel socket did not pair. A
         * client's server runs without sovia, or accepted in another
         * process; a server's client gave up (it drops its VI first) or
         * does not keep to the protocol: its bytes must be read where it
         * wrote them. */
        bool spoke = !(look == 0 && looked) && kernel_spoke(s, server); /* looked just now */
        uint64_t waited = sov_now_ns() - c->tentative_since_ns;
        if (!spoke && (server || waited <= sov_tp_pair_timeout_ns()))
            return SOV_TP_PENDING;
        if (look == 1) {
            fall_back(s);
            return SOV_TP_FELL_BACK;
        }
    }
}

/* A server about to end its side (shutdown) with early bytes held: the
 * client has CLOSE_ANSWER_NS to answer; else the connection falls back, so
 * the bytes and the end go over the kernel socket, in order. Caller holds
 * the lock; released if it fell back. */
enum sov_tp_state sov_tp_settle_soon(struct sov_sock *s)
{
    uint64_t end = sov_now_ns() + CLOSE_ANSWER_NS;
    for (;;) {
        enum sov_tp_state st = sov_tp_settle(s);
        if (st != SOV_TP_PENDING)
            return st;
        if (!s->conn->early_len)
            return st; /* nothing held: a FIN after nothing is in order */
        if (sov_now_ns() > end) {
            fall_back(s);
            return SOV_TP_FELL_BACK;
        }
        nap_unlocked(s);
        if (s->dead)
            return SOV_TP_PENDING;
    }
}

/* Up to the pairing timeout for the socket at `fd` to pair or fall back
 * (see transparent.h). The socket may be closed and replaced meanwhile, so
 * it is looked up again after each pause. */
bool sov_tp_settle_wait(struct sov_sock **sp, int fd)
{
    struct sov_sock *s = *sp;
    uint64_t deadline = sov_now_ns() + 1500000000u; /* past the client's pairing timeout */
    while (s->tp_waiting && !s->dead) {
        if (sov_now_ns() > deadline) {
            sov_sock_unlock(s);
            return false;
        }
        enum sov_tp_state st = sov_tp_settle(s);
        if (st == SOV_TP_FELL_BACK)
            return false;
        if (st == SOV_TP_PAIRED)
            break;
        sov_sock_unlock(s);
        struct timespec pause = {0, 100000};
        nanosleep(&pause, NULL);
        s = sov_lookup(fd);
        if (!s)
            return false;
        sov_sock_lock(s);
        *sp = s;
    }
    return true;
}

/* Caller holds s->lock; returns with it released. The descriptor stays
 * open as the plain kernel socket it always was. */
static void fall_back(struct sov_sock *s)
{
    atomic_fetch_add(&sov_g.tp_fell_back, 1);
    sov_tp_fall_back(s);
}

/* fall_back, for a connection that moved over on purpose (migrate.c) or
 * never paired: not counted as fallen back. */
void sov_tp_fall_back(struct sov_sock *s)
{
    sov_pairing_remove(s);
    sov_timer_remove(s); /* an owned socket (sov_tp_watch_owner) may be timed */
    s->dead = true;
    for (int fd = 0, n = sov_table_limit(); fd < n && s->nfds; fd++)
        if (sov_table_clear(fd, s))
            s->nfds--;
    write_kernel(s); /* early bytes, before anything the program writes next */
    sov_mig_kernel_fin(s); /* after them: the FIN our program sent over sovia */
    struct sov_conn *c = s->conn;
    s->conn = NULL; /* under the lock: see detach_conn */
    if (c)
        c->early_len = 0;
    bool counted = c && !s->tp_waiting; /* paired (a migration): counted open */
    sov_sock_unlock(s);
    sov_wake_waiters(s);
    sov_conn_destroy(c); /* the server sees the VI go: it stays on TCP */
    if (counted)
        atomic_fetch_sub(&sov_g.open_conns, 1);
    sov_sock_free(s);
}

int sov_tp_dup(int oldfd, int newfd)
{
    struct sov_sock *s = sov_acquire(oldfd);
    if (!s)
        return -EBADF;
    int err = sov_table_set(newfd, s);
    if (!err)
        s->nfds++;
    sov_release(s);
    return err;
}

bool sov_tp_forget(int fd)
{
    struct sov_sock *s = sov_acquire(fd);
    if (!s)
        return false;
    if (s->nfds > 1) {
        sov_table_clear(fd, s);
        s->nfds--;
        if (s->fd == fd) /* keep a name the socket still has */
            for (int f = 0, n = sov_table_limit(); f < n; f++)
                if (sov_lookup(f) == s) {
                    s->fd = f;
                    break;
                }
        sov_release(s);
        return true;
    }
    sov_release(s);
    return false;
}

void sov_tp_set_nonblock(int fd, bool on)
{
    struct sov_sock *s = sov_acquire(fd);
    if (s) {
        s->nonblock = on;
        sov_release(s);
    }
}

int sov_tp_unread(int fd, int *bytes)
{
    struct sov_sock *s = sov_acquire(fd);
    if (!s)
        return -EBADF;
    sov_progress(s);
    size_t n = s->conn ? s->conn->rx_bytes : 0;
    *bytes = n > INT32_MAX ? INT32_MAX : (int)n;
    sov_release(s);
    return 0;
}

void sov_tp_watch_owner(int fd)
{
    struct sov_sock *s = sov_acquire(fd);
    if (!s)
        return;
    bool paired = !s->tp_waiting && s->kind == SK_CONNECTED && s->conn;
    bool added = paired && !s->owned;
    s->owned = true; /* a pairing to come adds it (sov_conn_established) */
    sov_release(s);
    if (added)
        sov_timer_add(s);
}

int sov_tp_atmark(int fd, int *at)
{
    struct sov_sock *s = sov_acquire(fd);
    if (!s)
        return -EBADF;
    sov_progress(s);
    *at = s->conn && s->conn->urg && s->conn->urg_ahead == 0;
    sov_release(s);
    return 0;
}

void sov_tp_drop_stale(int fd)
{
    struct sov_sock *s = sov_acquire(fd);
    if (!s)
        return;
    if (s->nfds > 1) {
        sov_table_clear(fd, s);
        s->nfds--;
        sov_release(s);
        return;
    }
    fall_back(s);
}
