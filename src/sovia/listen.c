/*
 * listen.c - listen and accept: the server side runs one connection thread
 * per listening socket (as the papers do). It takes each VI connection
 * request, accepts it and queues the connection, so connect() completes
 * before the server reaches accept().
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <string.h>

#include "sock.h"
#include "transparent.h"
#include "listener.h"

/* Whether a ticketed listener awaits the client from `port` (caller holds
 * the socket's wait_lock); any client for other listeners. */
static bool awaited(const struct sov_listener *l, uint16_t port)
{
    for (unsigned i = 0; i < l->nawaited; i++)
        if (l->awaited[i] == port)
            return true;
    return !l->ticketed;
}

/* ---- Listening ------------------------------------------------------------ */

#define WAKEUP_WAIT_NS (10ull * 1000000000u) /* as long as a client waits for ours */

/* Drops a VI its client should not wait for. Another host's client
 * (a VI that proves itself by the key) is told to fall back first (a
 * REDIRECT, which it cannot follow): a VI that just ends before its
 * ACCEPT reads as a host that turned it away, held off for a minute. */
static void let_go(struct pending *p)
{
    if (sov_xhost_proves(p->conn))
        sov_post_redirect(p->conn, 1);
    sov_pending_drop(p);
}

/* Queues an accepted connection for sov_accept; false if the queue is full. */
static bool enqueue(struct sov_listener *l, const struct pending *p)
{
    pthread_mutex_lock(&l->s->wait_lock);
    uint16_t port = sov_addr_port((const struct sockaddr *)&p->peer);
    /* sovia run: its accept() gave up meanwhile (it waits for an
     * establishing VI only so long): the client falls back at once. */
    bool late = l->transparent && (port || !p->foreign) &&
                sov_gave_up_take(l, port, p->unbound && !p->foreign ? p->token : -1);
    bool room = !late && l->count < l->cap && awaited(l, port);
    l->handled++;
    if (room) {
        l->q[(l->head + l->count) % l->cap] = *p;
        l->count++;
        atomic_fetch_add(&l->s->events, 1);
    }
    l->establishing_port = 0;
    l->establishing_token = -1;
    pthread_mutex_unlock(&l->s->wait_lock);
    /* After the unlock: a woken accept() no longer finds the lock held and
     * sleeps on it again. The listener outlives its thread (this one). */
    pthread_cond_broadcast(&l->s->cond);
    if (room)
        sov_signal_event();
    return room;
}

/* The client's WAKEUP: 1 came and is valid, 0 not yet, -1 something else
 * came first or the VI broke before it. (A client that sent its WAKEUP and
 * data and then went is accepted, as TCP would: its data is there to read.) */
static int wakeup_state(struct sov_conn *c)
{
    VIP_DESCRIPTOR *d;
    VIP_RETURN r = VipRecvDone(c->vi, &d);
    if (r == VIP_NOT_DONE)
        return 0;
    return r == VIP_SUCCESS && sov_conn_wakeup(c, d) == 0 ? 1 : -1;
}

/* Queues the establishing connections whose WAKEUP came, oldest first
 * (accept order follows the handshakes, as with TCP); drops those that sent
 * something else, broke, or stayed silent past their deadline. */
static void settle(struct sov_listener *l, struct establishing *e, unsigned *n)
{
    uint64_t now = sov_now_ns();
    unsigned kept = 0;
    for (unsigned i = 0; i < *n; i++) {
        int st = wakeup_state(e[i].p.conn);
        if (st == 0 && now < e[i].deadline_ns)
            e[kept++] = e[i];
        else if (st <= 0 || !enqueue(l, &e[i].p))
            sov_pending_drop(&e[i].p);
    }
    *n = kept;
}

bool sov_queued_conn_broken(struct sov_conn *c)
{
    VIP_VI_STATE st;
    VIP_VI_ATTRIBUTES at;
    VIP_BOOLEAN sq, rq;
    return VipQueryVi(c->vi, &st, &at, &sq, &rq) != VIP_SUCCESS || st != VIP_STATE_CONNECTED;
}

/* Takes entry i out of the accept queue, keeping the order (caller holds
 * the socket's wait_lock). */
struct pending sov_queue_take(struct sov_listener *l, unsigned i)
{
    struct pending p = l->q[(l->head + i) % l->cap];
    for (unsigned j = i; j + 1 < l->count; j++)
        l->q[(l->head + j) % l->cap] = l->q[(l->head + j + 1) % l->cap];
    l->count--;
    return p;
}

/* sovia run: a queued VI whose client went (it gave up pairing, or died)
 * is dropped now, not at the program's next accept(), which may be far;
 * so is one proven by the cluster key whose pairing timeout passed (its
 * client has given up, or never meant to make its kernel connection).
 * At most every PRUNE_NS: also while requests keep coming. */
#define PRUNE_NS 20000000u

static void prune(struct sov_listener *l, uint64_t *next_ns)
{
    uint64_t now = sov_now_ns();
    if (!l->transparent || now < *next_ns)
        return;
    *next_ns = now + PRUNE_NS;
    pthread_mutex_lock(&l->s->wait_lock);
    for (unsigned i = 0; i < l->count; i++) {
        const struct pending *q = &l->q[(l->head + i) % l->cap];
        bool broken = sov_queued_conn_broken(q->conn);
        if (broken || (q->expires_ns && now >= q->expires_ns)) {
            struct pending p = sov_queue_take(l, i--);
            if (broken)
                sov_pending_drop(&p); /* its token too: the client's socket goes */
            else
                let_go(&p);
        }
    }
    pthread_mutex_unlock(&l->s->wait_lock);
}

/* sovia run: while connections are queued, short slices drop those whose
 * client went soon (each holds its client's kernel socket, whose end of
 * stream waits for it). */
static unsigned queue_slice(struct sov_listener *l)
{
    if (!l->transparent)
        return 500;
    pthread_mutex_lock(&l->s->wait_lock);
    bool queued = l->count > 0;
    pthread_mutex_unlock(&l->s->wait_lock);
    return queued ? 20 : 500;
}

/*
 * sovia run: another process (a forked child, a program exec'd with the
 * listening socket, a prefork server's worker that runs as another user)
 * accepted one of this port's kernel connections and claims it: the claim
 * names the connection's two ends and comes with a token that proves the
 * claimant holds the server end (sov_token_holds: its accepted socket, or
 * from another user an epoll instance watching it). The VI that
 * connection's client queued here, whose token proves it holds the client
 * end, can never be paired here: it goes now. With a ticket, the claimant
 * takes the client instead: a REDIRECT names the ticket first, and the
 * client reconnects to the claimant's ticket address (docs/ARCHITECTURE.md,
 * step 6); accepting the claim says so. Otherwise (no ticket, nothing
 * queued) refusing it is the answer, and a client whose VI went falls
 * back at once instead of at its pairing timeout. Only the holder of the
 * connection's server end can name its VI, and only that client's.
 */

/* The claimant waits for "redirected" (an accepted request): a VI of no
 * use but to accept with. */
static void accept_claim(VIP_CONN_HANDLE ch)
{
    VIP_VI_ATTRIBUTES va = sov_conn_attrs(&sov_g.cfg);
    VIPX_VI_CONFIG vc = {.QueueDepth = 1, .StagingBytes = 64};
    VIP_VI_HANDLE vi = NULL;
    if (VipxCreateVi(sov_g.nic, &va, NULL, NULL, &vc, &vi) != VIP_SUCCESS) {
        VipConnectReject(ch); /* the client meets its pairing timeout */
        return;
    }
    if (VipConnectAccept(ch, vi) == VIP_SUCCESS)
        VipxDisconnectLast(vi);
    VipDestroyVi(vi);
}

static void serve_claim(struct sov_listener *l, VIP_CONN_HANDLE ch, uint32_t ticket,
                        const struct sockaddr_storage *server, const struct sockaddr_storage *client,
                        uid_t claimant)
{
    int token = -1;
    VipxConnToken(ch, &token);
    struct pending taken = {.conn = NULL};
    const struct sockaddr *srv = (const struct sockaddr *)server;
    const struct sockaddr *cli = (const struct sockaddr *)client;
    bool holds = sov_token_holds(token, claimant, srv, cli);
    if (holds) {
        pthread_mutex_lock(&l->s->wait_lock);
        for (unsigned i = 0; i < l->count && !taken.conn; i++) {
            struct pending *p = &l->q[(l->head + i) % l->cap];
            /* (The port only: a client's VI may name loopback for the
             * address the kernel chose; its token decides. Another host's
             * VI names its client end, proven by its HELLO.) */
            uint16_t pport = sov_pending_port(p);
            if (sov_xhost_proves(p->conn)
                    ? sov_xhost_same_client(srv, (const struct sockaddr *)&p->peer, cli)
                    : (pport == sov_addr_port(cli) || (p->unbound && pport == 0)) &&
                          sov_token_holds(p->token, p->uid, cli, srv))
                taken = sov_queue_take(l, i);
        }
        pthread_mutex_unlock(&l->s->wait_lock);
    }
    /* Another host's client is let go (let_go), the claimant refused. One
     * whose VI has not been queued yet is let go when it comes. */
    socklen_t clen = cli->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                : sizeof(struct sockaddr_in6);
    bool far = taken.conn ? sov_xhost_proves(taken.conn) : holds && !sov_addr_is_local(cli, clen);
    if (far && !taken.conn) {
        pthread_mutex_lock(&l->s->wait_lock);
        sov_gave_up_note(l, sov_addr_port(cli));
        pthread_mutex_unlock(&l->s->wait_lock);
    }
    if (far)
        ticket = 0;
    /* The client handles the REDIRECT before it sees its VI go. */
    bool redirected = taken.conn && ticket && ticket <= REDIRECT_TICKET_MAX &&
                      sov_post_redirect(taken.conn, ticket) == 0;
    if (redirected) /* the answer first: the claimant's accept() waits for it */
        accept_claim(ch);
    else
        VipConnectReject(ch);
    if (taken.conn && far)
        let_go(&taken);
    else if (taken.conn)
        sov_pending_drop(&taken);
    if (token >= 0)
        VipxFdClose(token);
}

/* Connections of other users queued or establishing at one listener: each
 * holds about 8 of our descriptors until its client goes, so another user
 * may not hold more than this many (its next ones fall back at once). */
#define FOREIGN_MAX 32

static unsigned foreign_held(struct sov_listener *l, const struct establishing *est, unsigned nest)
{
    unsigned n = 0;
    pthread_mutex_lock(&l->s->wait_lock);
    for (unsigned i = 0; i < l->count; i++)
        n += l->q[(l->head + i) % l->cap].foreign;
    pthread_mutex_unlock(&l->s->wait_lock);
    for (unsigned i = 0; i < nest; i++)
        n += est[i].p.foreign;
    return n;
}

static void *connection_thread(void *arg)
{
    struct sov_lside *side = arg;
    struct sov_listener *l = side->l;
    VIP_NET_ADDRESS *remote = side->remote;
    struct establishing *est = side->est;
    unsigned nest = 0;
    uint64_t prune_ns = 0;
    if (side->far) {
        /* libfabric loads here, not in the program's listen(); a client
         * from another host before it listens falls back to kernel TCP. */
        if (sov_far_open() != 0 || atomic_load(&l->stop) ||
            VipxListenAnyUser(sov_g.far.nic, l->addr) != VIP_SUCCESS)
            return NULL;
    }
    VIP_NIC_HANDLE nic = side->far ? sov_g.far.nic : sov_g.nic;
    while (!atomic_load(&l->stop)) {
        VIP_CONN_HANDLE ch;
        VIP_VI_ATTRIBUTES ra;
        /* Bounded: if sov_close unlistened before this thread first got
         * here, VipConnectWait would quietly listen again; the slice lets
         * the thread see `stop` (and the unlisten below undoes that). While
         * connections are establishing, short slices look at them often. */
        VIP_RETURN r = VipConnectWait(nic, l->addr, nest ? 2 : queue_slice(l), remote, &ra, &ch);
        if (r == VIP_INVALID_STATE || atomic_load(&l->stop)) {
            if (r == VIP_SUCCESS)
                VipConnectReject(ch);
            break;
        }
        prune(l, &prune_ns);
        if (r != VIP_SUCCESS) {
            settle(l, est, &nest);
            continue;
        }
        uint32_t ticket;
        uid_t uid = geteuid();
        VIP_BOOLEAN foreign = VIP_FALSE;
        VipxConnPeerUser(ch, &uid, &foreign);
        struct sockaddr_storage server, client;
        if (l->transparent && sov_vi_is_claim(remote, &ticket, &server, &client)) {
            if (side->far) /* a claim proves a same-host token */
                VipConnectReject(ch);
            else
                serve_claim(l, ch, ticket, &server, &client, uid);
            settle(l, est, &nest);
            continue;
        }
        struct pending p = {.token = -1, .uid = uid, .foreign = foreign};
        int err;
        pthread_mutex_lock(&l->s->wait_lock);
        bool full = l->count + nest >= l->cap;
        pthread_mutex_unlock(&l->s->wait_lock);
        full = full || (foreign && foreign_held(l, est, nest) >= FOREIGN_MAX);
        /* sovia run: the program's descriptors come first (each queued
         * connection holds ours until accept() pairs it). */
        full = full || (l->transparent && !sov_tp_fd_room());
        bool unknown = sov_sockaddr_from_vi(remote, l->domain, &p.peer, &p.peer_len) != 0;
        if (!unknown && l->ticketed) {
            pthread_mutex_lock(&l->s->wait_lock);
            unknown = !awaited(l, sov_addr_port((struct sockaddr *)&p.peer));
            pthread_mutex_unlock(&l->s->wait_lock);
        }
        if (full || unknown || !(p.conn = sov_conn_create(&l->cfg, side->far, &err))) {
            VipConnectReject(ch); /* the client gets ECONNREFUSED */
            settle(l, est, &nest);
            continue;
        }
        if (ra.MaxTransferSize < p.conn->send_mtu)
            p.conn->send_mtu = ra.MaxTransferSize;
        if (l->transparent) /* accept() checks it against the kernel connection */
            VipxConnToken(ch, &p.token);
        if (l->transparent && sov_xhost_proves(p.conn))
            p.expires_ns = sov_now_ns() + sov_tp_pair_timeout_ns();
        pthread_mutex_lock(&l->s->wait_lock);
        p.unbound = l->transparent && !l->ticketed && sov_addr_port((struct sockaddr *)&p.peer) == 0;
        uint16_t port = sov_addr_port((struct sockaddr *)&p.peer);
        /* Its accept() came and went (sov_accept_match): kernel TCP. An
         * unbound client's token has no port before its kernel connect,
         * and no accept() has come for it then. */
        bool late = l->transparent && (port || !p.foreign) &&
                    sov_gave_up_take(l, port, p.unbound && !p.foreign ? p.token : -1);
        l->handled++;
        if (!late) {
            l->establishing_port = p.unbound ? SOV_ESTABLISHING_ANY : port;
            l->establishing_token = p.unbound && !p.foreign ? p.token : -1;
        }
        pthread_mutex_unlock(&l->s->wait_lock);
        if (late) {
            /* The client falls back at once: refused, or (another host's,
             * which a refusal would hold off) let go. */
            if (side->far && VipConnectAccept(ch, p.conn->vi) == VIP_SUCCESS) {
                let_go(&p);
            } else {
                VipConnectReject(ch);
                sov_pending_drop(&p);
            }
            settle(l, est, &nest);
            continue;
        }
        bool ok = VipConnectAccept(ch, p.conn->vi) == VIP_SUCCESS;
        int st = 1; /* sovia run: WAKEUP waits for accept() */
        if (ok && !l->transparent) {
            ok = sov_conn_send_ctrl(p.conn, PKT_WAKEUP) == 0;
            /* The client's WAKEUP is usually microseconds away. */
            uint64_t end = sov_now_ns() + 20000;
            while (ok && (st = wakeup_state(p.conn)) == 0 && sov_now_ns() < end)
                __builtin_ia32_pause();
        }
        settle(l, est, &nest); /* older handshakes that completed go first */
        if (ok && st == 0) {
            est[nest++] = (struct establishing){p, sov_now_ns() + WAKEUP_WAIT_NS};
        } else if (!ok || st < 0 || !enqueue(l, &p)) {
            pthread_mutex_lock(&l->s->wait_lock);
            l->establishing_port = 0;
            l->establishing_token = -1;
            pthread_mutex_unlock(&l->s->wait_lock);
            pthread_cond_broadcast(&l->s->cond); /* after the unlock: enqueue */
            if (ok)
                let_go(&p);
            else
                sov_pending_drop(&p);
        }
    }
    for (unsigned i = 0; i < nest; i++)
        sov_pending_drop(&est[i].p);
    VipxUnlisten(nic, l->addr); /* an implicit re-listen, if any */
    return NULL;
}

static void listener_free(struct sov_listener *l)
{
    free(l->q);
    for (int i = 0; i < 2; i++) {
        free(l->side[i].est);
        free(l->side[i].remote);
    }
    free(l->addr);
    free(l);
}

static bool side_alloc(struct sov_listener *l, int i)
{
    struct sov_lside *d = &l->side[i];
    d->l = l;
    d->far = i == 1;
    d->est = calloc(l->cap, sizeof(*d->est));
    d->remote = calloc(1, sizeof(VIP_NET_ADDRESS) + 16 + 64);
    return d->est && d->remote;
}

/* sovia run with a cluster key beside shm: may clients on other hosts
 * reach this port (not one bound to a loopback address)? */
static bool far_side_wanted(const struct sov_listener *l, const struct sov_sock *s)
{
    return l->transparent && !l->ticketed && sov_xhost_far_wanted() &&
           !sov_addr_is_loopback((const struct sockaddr *)&s->local);
}

/* Caller holds s->lock. */
int sov_listen_start(struct sov_sock *s, int backlog, bool transparent, uint32_t ticket)
{
    struct sov_listener *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->s = s;
    l->transparent = transparent;
    l->cfg = s->cfg;
    l->domain = s->domain;
    l->cap = backlog < 1 ? 1 : backlog > 4096 ? 4096 : (unsigned)backlog;
    l->q = calloc(l->cap, sizeof(*l->q));
    l->addr = ticket ? sov_vi_ticket_address((struct sockaddr *)&s->local, ticket)
                     : sov_vi_listen_address((struct sockaddr *)&s->local);
    l->owner = getpid();
    l->ticketed = ticket != 0;
    bool far = far_side_wanted(l, s);
    if (!l->q || !l->addr || !side_alloc(l, 0) || (far && !side_alloc(l, 1))) {
        listener_free(l);
        return -ENOMEM;
    }
    /* sovia run carries connections between users (holder.c decides
     * whose VIs pair); the sockets API keeps to its own. */
    VIP_RETURN r = transparent ? VipxListenAnyUser(sov_g.nic, l->addr)
                               : VipxListen(sov_g.nic, l->addr);
    if (r != VIP_SUCCESS) {
        listener_free(l);
        return r == VIP_ERROR_RESOURCE ? -EADDRINUSE : -EADDRNOTAVAIL;
    }
    if (VipxThreadCreate(&l->side[0].thread, NULL, connection_thread, &l->side[0]) != 0) {
        VipxUnlisten(sov_g.nic, l->addr);
        listener_free(l);
        return -EAGAIN;
    }
    l->side[0].started = true;
    /* The far side waits for a client from another host (sov_listen_far):
     * a program whose peers are all on this host never loads libfabric. */
    l->far_wanted = far;
    s->lst = l;
    s->kind = SK_LISTENING;
    return 0;
}

/* Under s->wait_lock. */
static struct sov_listener *far_waiting(struct sov_sock *s)
{
    struct sov_listener *l = s->lst;
    return l && l->far_wanted && l->owner == getpid() && !atomic_load(&l->stop) ? l : NULL;
}

void sov_listen_far(struct sov_sock *s, const struct sockaddr *peer)
{
    pthread_mutex_lock(&s->wait_lock); /* sov_listen_stop frees l after taking it */
    bool waiting = far_waiting(s) != NULL;
    pthread_mutex_unlock(&s->wait_lock);
    socklen_t len = peer->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                               : sizeof(struct sockaddr_in6);
    if (!waiting || sov_addr_is_local(peer, len))
        return;
    pthread_mutex_lock(&s->wait_lock);
    struct sov_listener *l = far_waiting(s);
    /* Once: a failed start is not retried (that port's clients from
     * other hosts stay on kernel TCP, as before the far NIC opens). */
    if (l) {
        l->far_wanted = false;
        l->side[1].started =
            VipxThreadCreate(&l->side[1].thread, NULL, connection_thread, &l->side[1]) == 0;
    }
    pthread_mutex_unlock(&s->wait_lock);
}

/* Stops the connection thread and refuses what is still queued. The
 * caller must not hold s->lock (the thread may be queueing). */
void sov_listen_stop(struct sov_sock *s)
{
    struct sov_listener *l = s->lst;
    if (!l)
        return;
    s->lst = NULL;
    if (l->owner != getpid()) {
        /* A forked child's copy: the thread, the listening and the queued
         * connections are the parent's, which goes on serving them. */
        listener_free(l);
        return;
    }
    atomic_store(&l->stop, true);
    VipxUnlisten(sov_g.nic, l->addr); /* wakes VipConnectWait */
    pthread_join(l->side[0].thread, NULL);
    pthread_mutex_lock(&l->s->wait_lock); /* against sov_listen_far */
    bool far_started = l->side[1].started;
    pthread_mutex_unlock(&l->s->wait_lock);
    if (far_started) {
        if (atomic_load(&sov_g.far_open))
            VipxUnlisten(sov_g.far.nic, l->addr);
        pthread_join(l->side[1].thread, NULL);
    }
    for (unsigned i = 0; i < l->count; i++)
        sov_pending_drop(&l->q[(l->head + i) % l->cap]);
    listener_free(l);
}

/*
 * In a forked child (fork handler, one thread): the queue stays the
 * parent's (its connection thread serves it). The child's copies of the
 * tokens, the clients' kernel sockets, are closed already, with those the
 * parent's thread held outside the queue (vipl closes every received
 * token in a forked child: a copy would hold its connection open, and a
 * client's close would send no FIN); the numbers are forgotten here, as
 * they may be reused. If the parent's thread held the queue at the fork,
 * the copy may be half written and is left alone.
 */
void sov_listen_forked(struct sov_sock *s)
{
    struct sov_listener *l = s->lst;
    if (!l || l->owner == getpid() || pthread_mutex_trylock(&s->wait_lock) != 0)
        return;
    for (unsigned i = 0; i < l->count; i++)
        l->q[(l->head + i) % l->cap].token = -1;
    pthread_mutex_unlock(&s->wait_lock);
}

int sov_listen_await(struct sov_sock *s, uint16_t port, bool on)
{
    struct pending gone[4];
    unsigned ngone = 0;
    int err = 0;
    pthread_mutex_lock(&s->wait_lock);
    struct sov_listener *l = s->lst;
    if (!l) {
        err = -EINVAL;
    } else if (on && l->nawaited == SOV_AWAITED_MAX) {
        err = -ENOSPC;
    } else if (on) {
        l->awaited[l->nawaited++] = port;
    } else {
        for (unsigned i = 0; i < l->nawaited; i++)
            if (l->awaited[i] == port) {
                l->awaited[i] = l->awaited[--l->nawaited];
                break;
            }
        /* What came for it and was not taken: its client falls back now. */
        for (unsigned i = 0; i < l->count && ngone < 4; i++)
            if (sov_addr_port((struct sockaddr *)&l->q[(l->head + i) % l->cap].peer) == port &&
                !awaited(l, port))
                gone[ngone++] = sov_queue_take(l, i--);
    }
    pthread_mutex_unlock(&s->wait_lock);
    for (unsigned i = 0; i < ngone; i++)
        sov_pending_drop(&gone[i]);
    return err;
}

bool sov_accept_ready(struct sov_sock *s)
{
    pthread_mutex_lock(&s->wait_lock);
    bool ready = s->lst && s->lst->count > 0;
    pthread_mutex_unlock(&s->wait_lock);
    return ready;
}

/* Takes the next accepted connection; blocks unless nonblock. The caller
 * does not hold s->lock. Sleeps in poll() on its thread's doorbell (the
 * connection thread rings every sleeper: sov_wake_waiters), armed before
 * it looks at the queue, so a signal interrupts it: -EINTR. */
struct sov_conn *sov_accept_take(struct sov_sock *s, struct sockaddr_storage *peer,
                                 socklen_t *peer_len, bool nonblock, int *err)
{
    for (;;) {
        if (!nonblock)
            sov_cq_arm();
        pthread_mutex_lock(&s->wait_lock);
        struct sov_listener *l = s->lst;
        if (!l || s->dead) {
            pthread_mutex_unlock(&s->wait_lock);
            if (!nonblock)
                sov_cq_disarm(true);
            *err = -EINVAL;
            return NULL;
        }
        if (l->count) {
            if (!nonblock)
                sov_cq_disarm(true);
            struct pending p = l->q[l->head];
            l->head = (l->head + 1) % l->cap;
            l->count--;
            pthread_mutex_unlock(&s->wait_lock);
            if (p.token >= 0)
                VipxFdClose(p.token);
            *peer = p.peer;
            *peer_len = p.peer_len;
            return p.conn;
        }
        pthread_mutex_unlock(&s->wait_lock);
        if (nonblock) {
            *err = -EAGAIN;
            return NULL;
        }
        struct pollfd p[2];
        int rc = poll(p, 2, sov_doze_fds(p, -1));
        int e = errno;
        sov_cq_disarm(true);
        if (rc < 0 && e == EINTR) {
            *err = -EINTR;
            return NULL;
        }
    }
}
