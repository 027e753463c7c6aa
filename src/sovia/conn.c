/*
 * conn.c - a connection's VI and buffers, its sends, and connect
 * (listen and accept: listen.c).
 *
 * Every connection pre-posts P receive buffers of one MTU in its VI's arena
 * before it connects, so the peer's first packets always find one.
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

int sov_post_redirect(struct sov_conn *c, uint32_t ticket)
{
    return post(c, PKT_REDIRECT, ticket << REDIRECT_TICKET_SHIFT, NULL, 0, 0, false);
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
