/*
 * conn.c - a connection's VI and buffers; connect, listen and accept.
 *
 * Every connection pre-posts P receive buffers of one MTU in its VI's arena
 * before it connects, so the peer's first packets always find one. The
 * server side runs one connection thread per listening socket (as the
 * papers do): it takes each VI connection request, accepts it and queues
 * the connection, so connect() completes before the server reaches accept().
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

void sov_pending_drop(struct pending *p)
{
    sov_conn_destroy(p->conn);
    if (p->token >= 0)
        VipxFdClose(p->token);
}


/* Whether a ticketed listener awaits the client from `port` (caller holds
 * the socket's wait_lock); any client for other listeners. */
static bool awaited(const struct sov_listener *l, uint16_t port)
{
    for (unsigned i = 0; i < l->nawaited; i++)
        if (l->awaited[i] == port)
            return true;
    return !l->ticketed;
}

static VIP_RETURN reg(const struct sov_conn *c, void *p, size_t len, VIP_MEM_HANDLE *mh)
{
    VIP_MEM_ATTRIBUTES ma = {.Ptag = sov_conn_ptag(c)};
    return VipRegisterMem(sov_conn_nic(c), p, len, &ma, mh);
}

static void dereg(const struct sov_conn *c, void *p, VIP_MEM_HANDLE mh)
{
    if (p && mh)
        VipDeregisterMem(sov_conn_nic(c), p, mh);
}

static int post_recv_buffer(struct sov_conn *c, unsigned i)
{
    VIP_DESCRIPTOR *d = &c->rdesc[i];
    memset(&d->CS, 0, sizeof(d->CS));
    d->CS.SegCount = 1;
    d->DS[0].Local.Data.Address = c->arena + (size_t)i * c->cfg.mtu;
    d->DS[0].Local.Handle = c->arena_mh;
    d->DS[0].Local.Length = (VIP_UINT32)c->cfg.mtu;
    return VipPostRecv(c->vi, d, c->desc_mh) == VIP_SUCCESS ? 0 : -ENOMEM;
}

/* The connection's own memory around its VI: descriptors, the copy and
 * combining buffers, the recvq, all registered, and the arena's handle. */
static int conn_buffers(struct sov_conn *c)
{
    const struct sov_config *cfg = &c->cfg;
    size_t dlen = (size_t)(c->nrecv + c->nsend) * sizeof(VIP_DESCRIPTOR);
    VIP_PVOID arena;
    VIP_ULONG alen;
    c->rdesc = aligned_alloc(VIP_DESCRIPTOR_ALIGNMENT, dlen);
    c->sbuf = aligned_alloc(64, c->nsend * ((cfg->mtu + 63) & ~(size_t)63));
    c->cbuf = aligned_alloc(64, (cfg->mtu + 63) & ~(size_t)63);
    c->recvq = calloc(c->nrecv + 1, sizeof(*c->recvq));
    if (VipxViArena(c->vi, &arena, &alen) != VIP_SUCCESS || !arena ||
        alen < (VIP_ULONG)c->nrecv * cfg->mtu || !c->rdesc || !c->sbuf || !c->cbuf || !c->recvq)
        return -ENOMEM;
    c->arena = arena;
    memset(c->rdesc, 0, dlen);
    c->sdesc = c->rdesc + c->nrecv;
    if (reg(c, c->arena, alen, &c->arena_mh) != VIP_SUCCESS ||
        reg(c, c->rdesc, dlen, &c->desc_mh) != VIP_SUCCESS ||
        reg(c, c->sbuf, c->nsend * ((cfg->mtu + 63) & ~(size_t)63), &c->sbuf_mh) != VIP_SUCCESS ||
        reg(c, c->cbuf, cfg->mtu, &c->cbuf_mh) != VIP_SUCCESS)
        return -ENOMEM;
    c->deferred = -1;
    /* This end owns its arena plus the control and completion lines. */
    c->stats.shm_bytes = alen + (size_t)(c->nrecv + c->nsend + 1) * 2 * 64 + 3 * 4096;
    return 0;
}

VIP_VI_ATTRIBUTES sov_conn_attrs(const struct sov_config *cfg)
{
    return (VIP_VI_ATTRIBUTES){.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY,
                               .MaxTransferSize = cfg->mtu,
                               .Ptag = sov_g.ptag};
}

struct sov_conn *sov_conn_create(const struct sov_config *cfg, bool far, int *err)
{
    struct sov_conn *c = calloc(1, sizeof(*c));
    if (!c) {
        *err = -ENOMEM;
        return NULL;
    }
    c->far = far && atomic_load(&sov_g.far_open);
    if (far && !c->far) {
        free(c);
        *err = -ENETUNREACH;
        return NULL;
    }
    c->cfg = *cfg;
    c->nrecv = sov_recv_buffers(cfg);
    c->nsend = 4;
    VIP_VI_ATTRIBUTES va = sov_conn_attrs(cfg);
    va.Ptag = sov_conn_ptag(c);
    /* Receives always land in the arena: no staging area is needed. */
    VIPX_VI_CONFIG vc = {.QueueDepth = c->nrecv + c->nsend + 1,
                         .StagingBytes = 64,
                         .ArenaBytes = (VIP_ULONG)c->nrecv * cfg->mtu,
                         .Flags = sov_g.inheritable && !c->far ? VIPX_VI_INHERITABLE : 0};
    *err = -ENOMEM;
    if (VipxCreateVi(sov_conn_nic(c), &va, NULL, c->far ? sov_g.far.cq : sov_g.cq, &vc, &c->vi) !=
        VIP_SUCCESS) {
        free(c);
        return NULL;
    }
    if (conn_buffers(c) != 0)
        goto fail;
    for (unsigned i = 0; i < c->nrecv; i++)
        if (post_recv_buffer(c, i) != 0)
            goto fail;
    c->credits = 0; /* until the peer's WAKEUP says how many buffers it has */
    c->ack_every = cfg->ack_threshold;
    c->send_mtu = cfg->mtu;
    c->stats.window = cfg->window;
    c->stats.recv_buffers = c->nrecv;
    return c;
fail:
    sov_conn_destroy(c);
    return NULL;
}

/*
 * A connection handed over by the previous program image (inherit.c): the
 * VI comes back connected, and each receive buffer that was posted gets its
 * descriptor again, in posting order. The caller restores the protocol
 * state. NULL with *err on failure (the VI state's descriptors are taken).
 */
struct sov_conn *sov_conn_import(const struct sov_config *cfg, unsigned nrecv, unsigned nsend,
                                 const VIPX_STATE *vs, const uint32_t *posted, unsigned nposted,
                                 int *err)
{
    struct sov_conn *c = calloc(1, sizeof(*c));
    *err = -ENOMEM;
    if (!c)
        return NULL;
    c->cfg = *cfg;
    c->nrecv = nrecv;
    c->nsend = nsend;
    VIP_VI_ATTRIBUTES va = sov_conn_attrs(cfg);
    if (VipxViImport(sov_g.nic, &va, NULL, sov_g.cq, vs, &c->vi) != VIP_SUCCESS) {
        free(c);
        *err = -EPROTO;
        return NULL;
    }
    if (conn_buffers(c) != 0)
        goto fail;
    /* Every buffer's descriptor names it again (those holding unread data
     * are reposted from theirs later); the posted ones are re-attached. */
    for (unsigned i = 0; i < nrecv; i++) {
        VIP_DESCRIPTOR *d = &c->rdesc[i];
        d->CS.SegCount = 1;
        d->DS[0].Local.Data.Address = c->arena + (size_t)i * cfg->mtu;
        d->DS[0].Local.Handle = c->arena_mh;
        d->DS[0].Local.Length = (VIP_UINT32)cfg->mtu;
    }
    *err = -EPROTO;
    for (unsigned k = 0; k < nposted; k++)
        if (posted[k] % cfg->mtu || posted[k] / cfg->mtu >= nrecv ||
            VipxViImportRecv(c->vi, &c->rdesc[posted[k] / cfg->mtu], c->desc_mh) != VIP_SUCCESS)
            goto fail;
    return c;
fail:
    sov_conn_destroy(c);
    return NULL;
}

/* Tears the connection down at once (the peer sees ECONNRESET), or lets
 * go of this process's copy of a shared one. */
void sov_conn_destroy(struct sov_conn *c)
{
    if (!c)
        return;
    while (atomic_load(&c->sleepers)) { /* they only disarm before letting go */
        VipxWakeWaiters();
        sched_yield();
    }
    atomic_fetch_add(&sov_g.bytes_sent, c->stats.bytes_sent - c->base_sent);
    atomic_fetch_add(&sov_g.bytes_received, c->taken);
    sov_shared_drop(c);
    if (c->connecting) /* a non-blocking connect's request, unanswered */
        VipxConnectAbandon(c->vi);
    VIP_VI_STATE st = VIP_STATE_IDLE;
    if (c->vi)
        VipQueryVi(c->vi, &st, NULL, NULL, NULL);
    if (c->vi && c->shared && st == VIP_STATE_CONNECTED) {
        VipxViRelease(c->vi); /* other holders keep the connection */
    } else if (c->vi) {
        /* IDLE as well: a connection that never came up still holds its
         * pre-posted receives, and VipDestroyVi refuses a VI that does.
         * (Last: no fresh segments for a VI about to go.) */
        if (st == VIP_STATE_CONNECTED || st == VIP_STATE_ERROR || st == VIP_STATE_IDLE)
            VipxDisconnectLast(c->vi);
        VIP_DESCRIPTOR *d;
        while (VipRecvDone(c->vi, &d) == VIP_SUCCESS || VipSendDone(c->vi, &d) == VIP_SUCCESS)
            ;
        VipDestroyVi(c->vi);
    }
    dereg(c, c->arena, c->arena_mh);
    dereg(c, c->rdesc, c->desc_mh);
    dereg(c, c->sbuf, c->sbuf_mh);
    dereg(c, c->cbuf, c->cbuf_mh);
    free(c->rdesc);
    free(c->sbuf);
    free(c->cbuf);
    free(c->early);
    free(c->xp);
    free(c->ret);
    free(c->recvq);
    free(c);
}

/*
 * The VI failed under us: a reset, unless the other side had ended its
 * stream first (its FIN came: TCP's reset in CLOSE_WAIT is EPIPE) or every
 * process there closed or exited without one (PeerClosed): then it is an
 * orderly end. -ECONNRESET or -EPIPE.
 */
int sov_conn_lost(struct sov_conn *c)
{
    /* The VI is done with once the peer's END came, or ours went with no
     * END of the peer's due (migrate.c): its end is no loss. */
    if (c->peer_mig == PMIG_ENDED || (c->mig >= MIG_ENDED && c->peer_mig == PMIG_NONE))
        return 0;
    VIPX_VI_STATS st;
    if (!c->reset && (c->peer_fin || (VipxQueryViStats(c->vi, &st) == VIP_SUCCESS &&
                                      st.PeerClosed))) {
        c->peer_fin = true;
        c->peer_gone = true;
    } else {
        c->reset = true;
    }
    return c->reset ? -ECONNRESET : -EPIPE;
}

/* A send that found the VI gone. While the peer's END is due, the peer
 * dropped the VI after it (the END and what came before it wait in our
 * queue, handled next): what we sent (an ACK for bytes it gave back) is
 * no longer needed, and no loss. A receive flushed before that END still
 * is one. */
static int send_lost(struct sov_conn *c)
{
    return c->peer_mig == PMIG_ASKED ? 0 : sov_conn_lost(c);
}

/* The packet's immediate data: its type and the acknowledgements owed
 * (piggybacking), or a WAKEUP's window; `extra` bits are a REDIRECT's
 * ticket, or DATA's PKT_URG. */
static uint32_t packet_imm(const struct sov_conn *c, enum sov_pkt type, uint32_t extra)
{
    if (type == PKT_WAKEUP)
        return (uint32_t)PKT_WAKEUP | c->cfg.window << WAKEUP_WINDOW_SHIFT |
               (c->nrecv - c->cfg.window - SOV_CTRL_BUFFERS) << WAKEUP_SLOTS_SHIFT;
    if (type == PKT_REDIRECT)
        return (uint32_t)PKT_REDIRECT | extra;
    if (type == PKT_XAUTH)
        return (uint32_t)PKT_XAUTH;
    return pkt_imm(type, c->to_ack) | extra;
}

/* Dequeues the oldest completed send, if there is one; a failed one is
 * remembered for the next post, as staged sends are not waited for. */
static bool reap(struct sov_conn *c)
{
    VIP_DESCRIPTOR *done;
    if (VipSendDone(c->vi, &done) != VIP_SUCCESS)
        return false;
    c->s_reaped++;
    if (done->CS.Status & VIP_STATUS_ERROR_MASK)
        c->send_failed = true;
    return true;
}

/* Until the next send descriptor (and its staging slot) is free. */
static void next_free(struct sov_conn *c)
{
    while (c->s_next - c->s_reaped >= c->nsend)
        if (!reap(c))
            __builtin_ia32_pause();
}

/* Send descriptor n's index: a mask for the usual power of two (a
 * division on every packet cost more than the rest of the index work). */
static unsigned send_index(const struct sov_conn *c, unsigned n)
{
    return (c->nsend & (c->nsend - 1)) == 0 ? n & (c->nsend - 1) : n % c->nsend;
}

/* The copy buffer of send descriptor i (0 <= i < nsend). */
static uint8_t *slot(const struct sov_conn *c, unsigned i)
{
    return c->sbuf + (size_t)i * ((c->cfg.mtu + 63) & ~(size_t)63);
}

uint8_t *sov_stage_next(struct sov_conn *c)
{
    next_free(c);
    return slot(c, send_index(c, c->s_next));
}

/* Whether the last send posted has completed: in order, all have. */
static bool all_out(struct sov_conn *c)
{
    if (c->s_next == c->s_reaped ||
        (__atomic_load_n(&c->sdesc[send_index(c, c->s_next - 1)].CS.Status, __ATOMIC_ACQUIRE) &
         VIP_STATUS_DONE))
        c->inflight = false;
    return !c->inflight;
}

void sov_sends_step(struct sov_conn *c)
{
    if (!all_out(c))
        reap(c);
}

void sov_sends_finish(struct sov_conn *c)
{
    while (!all_out(c))
        if (!reap(c))
            __builtin_ia32_pause();
}

void sov_sends_settle(struct sov_conn *c)
{
    while (c->s_next != c->s_reaped)
        if (!reap(c))
            __builtin_ia32_pause();
}

/* Sends one packet. A packet staged in its descriptor's slot (sov_stage)
 * is left in flight: its slot is not written again before the descriptor
 * is reaped, so several go at once where completion comes late (fabric).
 * So is one whose caller keeps its memory until sov_sends_out (`inflight`).
 * Any other packet's memory is the caller's, or reused at once (cbuf):
 * post waits for its completion. 0 or -ECONNRESET. */
static int post(struct sov_conn *c, enum sov_pkt type, uint32_t extra, const void *data,
                uint32_t len, VIP_MEM_HANDLE mh, bool inflight)
{
    /* Completed sends are dequeued lazily, when their slot comes round. */
    next_free(c);
    if (__builtin_expect(c->send_failed, 0)) {
        c->send_failed = false;
        int rc = send_lost(c);
        if (rc)
            return rc;
    }
    unsigned i = send_index(c, c->s_next++);
    VIP_DESCRIPTOR *d = &c->sdesc[i];
    bool acking = type != PKT_WAKEUP && type != PKT_REDIRECT && type != PKT_XAUTH;
    uint32_t acks = acking ? c->to_ack : 0;
    d->CS.Status = 0;
    d->CS.Length = 0;
    d->CS.Reserved = 0;
    d->CS.Control = VIP_CONTROL_OP_SENDRECV | VIP_CONTROL_IMMEDIATE;
    d->CS.ImmediateData = packet_imm(c, type, extra);
    d->CS.SegCount = len ? 1 : 0;
    if (len) {
        d->DS[0].Local.Data.Address = (void *)data;
        d->DS[0].Local.Handle = mh;
        d->DS[0].Local.Length = len;
    }
    if (VipPostSend(c->vi, d, c->desc_mh) != VIP_SUCCESS) {
        c->s_next--; /* not queued: it will not complete */
        return send_lost(c);
    }
    /* The caller's memory (registered sends) is free only once the send
     * completed: the shm provider completes it inside VipPostSend (so the
     * rest is for other providers and costs shm one load), a provider with
     * a real NIC later, and one with manual progress (fabric:tcp) only
     * while its queue is read: reap reads it (sends complete in order, so
     * what it returns is ours to reap). */
    uint32_t st = __atomic_load_n(&d->CS.Status, __ATOMIC_ACQUIRE);
    if (!(st & VIP_STATUS_DONE)) {
        c->inflight = true;
        bool staged = len && mh == c->sbuf_mh && data == slot(c, i);
        while (!inflight && !staged && !(st & VIP_STATUS_DONE)) {
            if (!reap(c))
                __builtin_ia32_pause();
            st = __atomic_load_n(&d->CS.Status, __ATOMIC_ACQUIRE);
        }
    }
    if ((st & VIP_STATUS_DONE) && (st & VIP_STATUS_ERROR_MASK))
        return send_lost(c);
    if (acking)
        c->to_ack = 0;
    if (acks && type == PKT_DATA)
        c->stats.acks_piggybacked += acks;
    if (type == PKT_ACK)
        c->stats.ack_packets_sent++;
    /* The slot the next post takes, reaped now that this packet left
     * rather than in next_free before the next one goes: in a ping-pong
     * that is on the wait for the reply, not in front of our own reply. */
    if (c->s_next - c->s_reaped >= c->nsend)
        reap(c);
    return 0;
}

int sov_post_packet(struct sov_conn *c, enum sov_pkt type, const void *data, uint32_t len,
                    VIP_MEM_HANDLE mh)
{
    return post(c, type, 0, data, len, mh, false);
}

int sov_post_inflight(struct sov_conn *c, const void *data, uint32_t len, VIP_MEM_HANDLE mh)
{
    return post(c, PKT_DATA, 0, data, len, mh, true);
}

int sov_post_urgent(struct sov_conn *c, const void *data, uint32_t len, VIP_MEM_HANDLE mh)
{
    return post(c, PKT_DATA, PKT_URG, data, len, mh, false);
}

int sov_post_migrate(struct sov_conn *c, uint32_t sub)
{
    return post(c, PKT_MIGRATE, sub << MIG_SUB_SHIFT, NULL, 0, 0, false);
}

int sov_conn_send_ctrl(struct sov_conn *c, enum sov_pkt type)
{
    return sov_post_packet(c, type, NULL, 0, 0);
}

/* Establishment completes with the peer's WAKEUP, always its first packet
 * (it carries the window, so both ends can send at once, as after TCP's
 * handshake). 0, -ETIMEDOUT or -ECONNRESET. */
static int await_wakeup(struct sov_conn *c)
{
    VIP_DESCRIPTOR *d;
    VIP_RETURN r = VIP_NOT_DONE;
    uint64_t end = sov_now_ns() + 20000; /* it is usually microseconds away */
    while ((r = VipRecvDone(c->vi, &d)) == VIP_NOT_DONE && sov_now_ns() < end)
        __builtin_ia32_pause();
    if (r == VIP_NOT_DONE)
        r = VipRecvWait(c->vi, 10000, &d);
    if (r == VIP_TIMEOUT)
        return -ETIMEDOUT;
    if (r != VIP_SUCCESS)
        return -ECONNRESET; /* the VI broke: the next handling sees it flushed */
    if (sov_conn_wakeup(c, d) != 0) {
        /* Not a WAKEUP, or a malformed one: a protocol violation, which
         * fails this connection (docs/PROTOCOL.md). Nothing else would:
         * a client would stay connected with no window and wait for ever. */
        c->reset = true;
        VipDisconnect(c->vi);
        return -ECONNRESET;
    }
    return 0;
}

int sov_map_connect_error(VIP_RETURN r)
{
    switch (r) {
    case VIP_NO_MATCH:
    case VIP_REJECT:
        return -ECONNREFUSED;
    case VIP_TIMEOUT:
        return -ETIMEDOUT;
    case VIP_NOT_REACHABLE:
        return -ENETUNREACH;
    case VIP_ERROR_RESOURCE:
        /* Our side ran short (descriptors, memory) setting the connection
         * up: "refused" would send the program looking for a server that
         * is there. */
        return -ENOMEM;
    default:
        return -ECONNREFUSED;
    }
}

struct connect_job {
    struct sov_sock *s;
    bool detached; /* a non-blocking connect's own thread */
    unsigned gen;
    int fd;
    struct sockaddr_storage to;
    struct sov_config cfg;
};

/* Connects and installs the connection in the socket if it still exists. */
static int run_connect(struct connect_job *j)
{
    int err;
    VIP_NET_ADDRESS *local = sov_vi_address((struct sockaddr *)&j->s->local);
    VIP_NET_ADDRESS *remote = sov_vi_address((struct sockaddr *)&j->to);
    struct sov_conn *c = local && remote ? sov_conn_create(&j->cfg, false, &err) : NULL;
    if (!local || !remote)
        err = -ENOMEM;
    if (c) {
        VIP_VI_ATTRIBUTES ra;
        VIP_RETURN r = VipConnectRequest(c->vi, local, remote, 30000, &ra);
        if (r == VIP_SUCCESS && ra.MaxTransferSize < c->send_mtu)
            c->send_mtu = ra.MaxTransferSize;
        err = r == VIP_SUCCESS ? sov_conn_send_ctrl(c, PKT_WAKEUP) : sov_map_connect_error(r);
        if (err == -EPIPE) /* the server went during the handshake: no orderly end */
            err = -ECONNRESET;
        if (err == 0)
            err = await_wakeup(c) == -ETIMEDOUT ? -ETIMEDOUT : 0;
    }
    free(local);
    free(remote);
    struct sov_sock *s = j->s;
    sov_sock_lock(s);
    bool gone = s->dead || s->gen != j->gen || s->fd != j->fd;
    if (!gone) {
        if (err == 0) {
            s->conn = c;
            s->kind = SK_CONNECTED;
            sov_conn_established(s);
        } else {
            s->kind = SK_NEW;
            s->so_error = -err;
        }
    }
    bool free_sock = gone && j->detached && s->dead && s->gen == j->gen;
    sov_sock_unlock(s);
    if (gone || err)
        sov_conn_destroy(c);
    if (gone && !err)
        err = -EBADF;
    sov_wake_waiters(s);
    if (free_sock) /* closed while connecting: sov_close left it to us */
        sov_sock_free(s);
    return err;
}

static void *connect_thread(void *arg)
{
    struct connect_job *j = arg;
    run_connect(j);
    free(j);
    return NULL;
}

/* Caller holds s->lock; it is released while a blocking connect runs. */
int sov_do_connect(struct sov_sock *s, const struct sockaddr *to, socklen_t len)
{
    int err = sov_addr_check(s, to, len);
    if (err)
        return err;
    if (s->kind == SK_CONNECTING)
        return -EALREADY;
    if (s->kind != SK_NEW)
        return -EISCONN;
    if (sov_addr_port(to) == 0)
        return -ECONNREFUSED;
    if (!s->bound) {
        err = sov_reserve_port(s, 0);
        if (err)
            return err;
        s->bound = true;
    }
    /* The source address: the destination itself on this host, as the
     * kernel chooses it for local routes; the route's towards another. */
    err = sov_addr_fill_source(&s->local, to);
    if (err)
        return err;
    struct connect_job *j = calloc(1, sizeof(*j));
    if (!j)
        return -ENOMEM;
    *j = (struct connect_job){.s = s, .gen = s->gen, .fd = s->fd, .cfg = s->cfg};
    memcpy(&j->to, to, len < sizeof(j->to) ? len : sizeof(j->to));
    memcpy(&s->peer, &j->to, sizeof(s->peer));
    s->peer_len = len < sizeof(s->peer) ? len : sizeof(s->peer);
    s->kind = SK_CONNECTING;
    s->so_error = 0;
    if (s->nonblock) {
        j->detached = true;
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int rc = VipxThreadCreate(&t, &at, connect_thread, j);
        pthread_attr_destroy(&at);
        if (rc != 0) {
            free(j);
            s->kind = SK_NEW;
            return -EAGAIN;
        }
        return -EINPROGRESS;
    }
    sov_sock_unlock(s);
    err = run_connect(j);
    free(j);
    sov_sock_lock(s);
    if (!err)
        return 0;
    s->so_error = 0; /* reported by this call, not later */
    return err;
}

/* ---- Listening ------------------------------------------------------------ */

#define WAKEUP_WAIT_NS (10ull * 1000000000u) /* as long as a client waits for ours */

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
 * is dropped now, not at the program's next accept(), which may be far. */
static void prune_broken(struct sov_listener *l)
{
    pthread_mutex_lock(&l->s->wait_lock);
    for (unsigned i = 0; i < l->count; i++)
        if (sov_queued_conn_broken(l->q[(l->head + i) % l->cap].conn)) {
            struct pending p = sov_queue_take(l, i--);
            sov_pending_drop(&p); /* its token too: the client's socket goes */
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
    if (sov_token_holds(token, claimant, srv, cli)) {
        pthread_mutex_lock(&l->s->wait_lock);
        for (unsigned i = 0; i < l->count && !taken.conn; i++) {
            struct pending *p = &l->q[(l->head + i) % l->cap];
            /* (The port only: a client's VI may name loopback for the
             * address the kernel chose; its token decides.) */
            uint16_t pport = sov_pending_port(p);
            if ((pport == sov_addr_port(cli) || (p->unbound && pport == 0)) &&
                sov_token_holds(p->token, p->uid, cli, srv))
                taken = sov_queue_take(l, i);
        }
        pthread_mutex_unlock(&l->s->wait_lock);
    }
    /* The client handles the REDIRECT before it sees its VI go. */
    bool redirected = taken.conn && ticket && ticket <= REDIRECT_TICKET_MAX &&
                      post(taken.conn, PKT_REDIRECT, ticket << REDIRECT_TICKET_SHIFT, NULL, 0,
                           0, false) == 0;
    if (redirected) /* the answer first: the claimant's accept() waits for it */
        accept_claim(ch);
    else
        VipConnectReject(ch);
    if (taken.conn)
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
        if (r != VIP_SUCCESS) {
            settle(l, est, &nest);
            if (l->transparent)
                prune_broken(l);
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
            VipConnectReject(ch); /* the client falls back at once */
            sov_pending_drop(&p);
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
