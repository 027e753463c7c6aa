/*
 * data.c - the protocol engine: handling incoming packets, sending with
 * flow control, combining and copy-or-register, receiving from the recvq,
 * delayed acknowledgements (waiting: wait.c). Callers hold the socket's lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <vipl_trace.h>

#include "pollwait.h"
#include "sock.h"

void sov_conn_abort(struct sov_conn *c)
{
    c->reset = true;
    /* Unread DATA goes with the connection, as TCP drops it on a reset:
     * VipDisconnect gives the VI fresh (zeroed) segments, so the arena
     * buffers the recvq names no longer hold it, and reading them would
     * hand the application zeros instead of ECONNRESET. */
    c->rq_count = 0;
    c->rq_off = 0;
    c->rx_bytes = 0;
    c->deferred = -1;
    VIP_VI_STATE st;
    if (VipQueryVi(c->vi, &st, NULL, NULL, NULL) == VIP_SUCCESS && st == VIP_STATE_CONNECTED)
        VipDisconnect(c->vi); /* the peer learns at once (ECONNRESET) */
}

/* Receive buffer i's descriptor, ready to post (its address and memory
 * handle never change). */
VIP_DESCRIPTOR *sov_rdesc_reset(struct sov_conn *c, unsigned i)
{
    VIP_DESCRIPTOR *d = &c->rdesc[i];
    d->CS.Status = 0;
    d->CS.Length = 0;
    d->CS.ImmediateData = 0;
    d->CS.Control = 0;
    d->CS.SegCount = 1;
    d->DS[0].Local.Length = (VIP_UINT32)c->cfg.mtu;
    return d;
}

static int repost(struct sov_conn *c, unsigned i)
{
    /* The peer left the VI (migrate.c): nothing more comes, but for its
     * ACKs of what we still give back (every migration is a crossing). */
    if (c->peer_mig == PMIG_ENDED && c->mig != MIG_RETURNING)
        return 0;
    VIP_DESCRIPTOR *d = sov_rdesc_reset(c, i);
    if (VipPostRecv(c->vi, d, c->desc_mh) != VIP_SUCCESS) {
        VIP_VI_STATE st;
        if (VipQueryVi(c->vi, &st, NULL, NULL, NULL) == VIP_SUCCESS && st == VIP_STATE_ERROR)
            return sov_conn_lost(c);
        sov_conn_abort(c);
        return -ECONNRESET;
    }
    return 0;
}

int sov_conn_repost(struct sov_conn *c, unsigned i)
{
    return repost(c, i);
}

static void repost_and_ack(struct sov_conn *c, unsigned i)
{
    if (repost(c, i) != 0 || c->peer_mig == PMIG_ENDED)
        return;
    c->to_ack++;
    if (c->to_ack >= c->ack_every)
        sov_conn_send_ctrl(c, PKT_ACK);
}

/*
 * A DATA buffer was read completely: repost it and owe the peer an
 * acknowledgement (sent on its own only when t are owed). The last such
 * buffer's repost is deferred until after our next send or until we wait:
 * in a request/response exchange the reply then leaves before the repost,
 * which is off the critical path. At most one buffer per connection waits.
 */
static void consumed(struct sov_conn *c, unsigned i)
{
    sov_repost_deferred(c);
    /* Not deferred when one held buffer would be much of the window, nor
     * when ack_every == w: then the held buffer can be the one whose ACK
     * the peer's closed window waits for, and a reader that never waits
     * inside sovia (non-blocking recv retried) would stall it for good
     * (tests/model/README.md). With ack_every < w the peer always keeps a
     * credit, and its next DATA reposts the held buffer. */
    if (c->cfg.window < 4 || c->ack_every >= c->cfg.window) {
        repost_and_ack(c, i);
        return;
    }
    c->deferred = (int)i;
}

void sov_repost_deferred(struct sov_conn *c)
{
    if (c->deferred >= 0) {
        unsigned i = (unsigned)c->deferred;
        c->deferred = -1;
        repost_and_ack(c, i);
    }
}

/* ---- Urgent data (MSG_OOB), as TCP's ------------------------------------------- */

size_t sov_readable(const struct sov_sock *s)
{
    const struct sov_conn *c = s->conn;
    if (!c || !c->rx_bytes)
        return 0;
    return c->rx_bytes - (c->urg && !s->oobinline);
}

static size_t copy_out(struct sov_conn *c, const struct iovec *iov, int iovcnt, size_t at,
                       size_t skip, size_t max, bool peek);

/* A newer mark replaces the one pending. A reader standing at the older
 * mark's byte never reads it (Linux drops it, tcp_check_urg). */
static void urgent_arriving(struct sov_sock *s, struct sov_conn *c)
{
    if (c->urg && c->urg_ahead == 0 && !s->oobinline)
        copy_out(c, NULL, 0, 0, 1, 0, false);
}

/* The socket's owner (F_SETOWN on the kernel socket) gets SIGURG. The
 * system call itself: the preload's fcntl would take the socket's lock. */
static void signal_owner(int fd)
{
    struct f_owner_ex o;
    if (syscall(SYS_fcntl, fd, F_GETOWN_EX, &o) != 0 || o.pid <= 0)
        return;
    if (o.type == F_OWNER_TID)
        syscall(SYS_tkill, o.pid, SIGURG);
    else
        kill(o.type == F_OWNER_PGRP ? -o.pid : o.pid, SIGURG);
}

/* The DATA in buffer i (queued) ends with the urgent byte: the new mark. */
static void urgent_arrived(struct sov_sock *s, struct sov_conn *c, unsigned i, uint32_t len)
{
    c->urg = c->urg_valid = true;
    c->urg_byte = c->arena[(size_t)i * c->cfg.mtu + len - 1];
    c->urg_ahead = c->rx_bytes - 1;
    if (s->transparent)
        signal_owner(s->fd);
}

void sov_handle_packet(struct sov_sock *s, VIP_DESCRIPTOR *d)
{
    struct sov_conn *c = s->conn;
    size_t i = (size_t)(d - c->rdesc);
    if (i >= c->nrecv)
        return; /* not ours: cannot happen with a sane provider */
    if (c->reset)
        return; /* after a reset nothing more is delivered (a packet that
                  * completed before the VI failed would leave a gap) */
    uint32_t status = d->CS.Status;
    if (status & VIP_STATUS_ERROR_MASK) {
        sov_conn_lost(c); /* flushed: the VI broke or the other side is gone */
        return;
    }
    uint32_t imm = d->CS.ImmediateData;
    uint32_t type = imm & PKT_TYPE_MASK, acks = (imm >> PKT_ACKS_SHIFT) & PKT_ACKS_MAX;
    /* The peer left the VI: nothing more may come, but for an ACK of what
     * we gave back when we leave too (its END can overtake it). */
    if (c->peer_mig == PMIG_ENDED && (type != PKT_ACK || c->mig == MIG_NONE)) {
        sov_conn_abort(c);
        return;
    }
    if (type == PKT_XAUTH) { /* sovia run across hosts: a proof (xhost.c) */
        sov_xhost_packet(c, d, (unsigned)i);
        return;
    }
    if (type == PKT_WAKEUP) {
        /* Across hosts, no pairing before the proof is complete. */
        if (!sov_xhost_may_wake(c) || sov_conn_wakeup(c, d) != 0) {
            sov_conn_abort(c);
        } else if (c->tentative) { /* sovia run: the server paired us; confirm */
            c->tentative = false;
            if (sov_conn_send_ctrl(c, PKT_WAKEUP) != 0)
                sov_conn_abort(c);
        }
        return;
    }
    if (type == PKT_REDIRECT) {
        /* sovia run: from the listening process, to a client it has not
         * paired, once (a chain of them could keep it hopping for ever). A
         * shared connection cannot follow it (its holders would part
         * ways): the VI goes and its pairing falls back. */
        uint32_t ticket = imm >> REDIRECT_TICKET_SHIFT;
        if (!c->tentative || c->peer_window || c->redirect || c->redirected || !ticket ||
            d->CS.Length)
            sov_conn_abort(c);
        else if (!c->rec)
            c->redirect = ticket;
        return;
    }
    /* The peer can only acknowledge what we sent, and leaves the reserved
     * bits zero: anything else is a protocol violation, and fails this
     * connection only. */
    uint32_t allowed = PKT_TYPE_MASK | PKT_ACKS_MAX << PKT_ACKS_SHIFT;
    if (type == PKT_DATA)
        allowed |= PKT_URG;
    if (type == PKT_MIGRATE)
        allowed |= MIG_SUB_MASK << MIG_SUB_SHIFT | MIG_RESERVED_MASK; /* checked there */
    if (!c->peer_window || acks > c->peer_window - c->credits || (imm & ~allowed)) {
        sov_conn_abort(c);
        return;
    }
    c->credits += acks;
    switch (type) {
    case PKT_MIGRATE: {
        uint32_t len = d->CS.Length; /* the repost clears it */
        if (repost(c, (unsigned)i) == 0)
            sov_mig_packet(s, c, imm, len);
        return;
    }
    case PKT_DATA: {
        uint32_t len = d->CS.Length;
        if (c->peer_mig == PMIG_ASKED) { /* our own bytes it had not read, back */
            if (len == 0 || len > c->cfg.mtu || (imm & PKT_URG)) {
                sov_conn_abort(c);
                return;
            }
            sov_mig_returned(s, c, c->arena + i * c->cfg.mtu, len);
            repost_and_ack(c, (unsigned)i);
            return;
        }
        if (c->mig >= MIG_RETURNING) { /* after its ACK it sends no DATA */
            sov_conn_abort(c);
            return;
        }
        /* DATA we hold and have not acknowledged: the peer may have sent
         * at most our window of it, and none after its FIN. */
        unsigned held = c->rq_count + (c->deferred >= 0) + c->to_ack;
        if (len == 0 || len > c->cfg.mtu || held >= c->cfg.window || c->peer_fin) {
            sov_conn_abort(c);
            return;
        }
        c->stats.data_packets_received++;
        c->stats.bytes_received += len;
        if (s->app_closed) { /* data for a closed socket: TCP resets */
            sov_conn_abort(c);
            return;
        }
        if (s->rd_shut) {
            repost_and_ack(c, (unsigned)i);
            return;
        }
        if (imm & PKT_URG)
            urgent_arriving(s, c);
        c->recvq[sov_rq_slot(c, c->rq_count)] = (unsigned)i;
        c->rq_count++;
        c->rx_bytes += len;
        VIPX_TRACE(VIPX_TP_SOV_HANDLED, len);
        if (imm & PKT_URG)
            urgent_arrived(s, c, (unsigned)i, len);
        return;
    }
    case PKT_ACK:
        c->stats.ack_packets_received++;
        repost(c, (unsigned)i);
        return;
    case PKT_FIN:
        /* A second FIN: the peer's state is not ours; one after its
         * migration request goes to the kernel connection. */
        if (c->peer_fin || c->peer_mig) {
            sov_conn_abort(c);
            return;
        }
        c->peer_fin = true;
        if (repost(c, (unsigned)i) == 0)
            sov_conn_send_ctrl(c, PKT_FINACK);
        return;
    case PKT_FINACK:
        c->fin_acked = true;
        repost(c, (unsigned)i);
        return;
    default:
        sov_conn_abort(c);
    }
}

/* The peer's WAKEUP: its window becomes our credits, and our ACK packets
 * are paced so they never outnumber the peer's buffers for them (at most
 * w_ours / ack_every can be outstanding). 0 or -EPROTO. */
int sov_conn_wakeup(struct sov_conn *c, VIP_DESCRIPTOR *d)
{
    uint32_t imm = d->CS.ImmediateData;
    unsigned w = (imm >> WAKEUP_WINDOW_SHIFT) & WAKEUP_FIELD_MASK;
    unsigned slots = (imm >> WAKEUP_SLOTS_SHIFT) & WAKEUP_FIELD_MASK;
    if ((imm & PKT_TYPE_MASK) != PKT_WAKEUP || (imm & WAKEUP_RESERVED_MASK) ||
        (d->CS.Status & VIP_STATUS_ERROR_MASK) ||
        w < 1 || w > 1024 || slots < 1 || c->peer_window)
        return -EPROTO;
    unsigned need = (c->cfg.window + slots - 1) / slots;
    c->ack_every = c->cfg.ack_threshold > need ? c->cfg.ack_threshold : need;
    c->peer_window = w;
    c->credits = w;
    return repost(c, (unsigned)(d - c->rdesc));
}

/* Handles every completed receive of the socket's VI (SINGLE strategy; in
 * HANDLER and NOTIFY another thread does this). */
int sov_progress(struct sov_sock *s)
{
    struct sov_conn *c = s->conn;
    if (!c)
        return 0;
    sov_sends_drive(c);
    if (sov_handled_elsewhere(s, c))
        return 0;
    int n = 0;
    VIP_DESCRIPTOR *d;
    while (VipRecvDone(c->vi, &d) == VIP_SUCCESS) {
        sov_handle_packet(s, d);
        n++;
    }
    /* Our side of a migration the peer asked for; the flag is looked at
     * here, as this runs on every turn of a polling wait. */
    if (s->conn && s->conn->mig_auto)
        sov_mig_step(s);
    return n;
}

/* ---- Sending ---------------------------------------------------------------- */


/* The stream leaves the VI (the peer's REQUEST came, or another thread of
 * ours moves it): no DATA may follow on the VI, whatever credits the
 * move brings (the peer's ACKs for what we give back, or for its bytes it
 * gives back). A send that finds it so, before or after a wait, goes on
 * where the stream goes (send_moved). */
static bool leaving_vi(const struct sov_conn *c)
{
    return c->peer_mig || sov_mig_ours_moving(c);
}
/* Waits for the window to open. 0, -EAGAIN, -EINTR, -ECONNRESET, -EBADF. */
static int wait_credit(struct sov_sock *s, bool nonblock)
{
    struct sov_conn *c = s->conn;
    uint64_t spun = 0;
    bool stalled = false;
    while (c->credits == 0 && !leaving_vi(c)) {
        sov_progress(s);
        if (c->credits || leaving_vi(c))
            break;
        /* After the progress: it may have found the end (a sleep now would
         * wait for a wake-up that already came). */
        if (c->reset)
            return -ECONNRESET;
        if (c->peer_gone)
            return -EPIPE;
        if (nonblock)
            return -EAGAIN;
        if (!stalled) {
            c->stats.window_stalls++;
            stalled = true;
        }
        int rc = sov_wait(s, &spun);
        if (rc)
            return rc;
        c = s->conn;
    }
    return c->reset ? -ECONNRESET : 0;
}

static void sent_packet(struct sov_conn *c, size_t len)
{
    c->credits--;
    c->stats.data_packets_sent++;
    c->stats.bytes_sent += len;
}

/* One DATA packet copied into the next copy buffer. 0 or -errno. */
static int send_copied(struct sov_conn *c, const void *p, size_t len)
{
    uint8_t *b = sov_stage(c);
    memcpy(b, p, len);
    int rc = sov_post_packet(c, PKT_DATA, b, (uint32_t)len, c->sbuf_mh);
    if (rc)
        return rc;
    c->stats.copied_sends++;
    sent_packet(c, len);
    return 0;
}

/* Big bytes from the caller's memory, registered in place: as many
 * packets as credits and send descriptors allow go under one registration,
 * in flight together; the memory is the caller's again once all have
 * completed (sov_sends_out), before we return. Bytes sent or -errno.
 * Registration refused (read-only mapping on some providers): copied. */
static ssize_t send_registered(struct sov_conn *c, const uint8_t *p, size_t a)
{
    size_t k = c->credits < c->nsend ? c->credits : c->nsend;
    size_t span = a < k * c->send_mtu ? a : k * c->send_mtu;
    VIP_MEM_ATTRIBUTES ma = {.Ptag = sov_conn_ptag(c)};
    VIP_MEM_HANDLE mh;
    if (VipRegisterMem(sov_conn_nic(c), (void *)p, span, &ma, &mh) != VIP_SUCCESS) {
        size_t chunk = a < c->send_mtu ? a : c->send_mtu;
        int rc = send_copied(c, p, chunk);
        return rc ? rc : (ssize_t)chunk;
    }
    size_t sent = 0;
    int rc = 0;
    while (rc == 0 && sent < span) {
        size_t chunk = span - sent < c->send_mtu ? span - sent : c->send_mtu;
        rc = sov_post_inflight(c, p + sent, (uint32_t)chunk, mh);
        if (rc == 0) {
            c->stats.registered_sends++;
            sent_packet(c, chunk);
            sent += chunk;
        }
    }
    sov_sends_out(c);
    VipDeregisterMem(sov_conn_nic(c), (void *)p, mh);
    return sent ? (ssize_t)sent : rc;
}

/* Sends the combining buffer. 0, or what wait_credit says. */
int sov_flush(struct sov_sock *s, bool may_block)
{
    struct sov_conn *c = s->conn;
    if (!c || c->clen == 0)
        return 0;
    int rc = wait_credit(s, !may_block);
    if (rc)
        return rc;
    c = s->conn;
    /* Another thread flushed it while we waited for credit, or the stream
     * left the VI: its combined bytes went to the kernel's share then
     * (migrate.c, owe_combined). */
    if (c->clen == 0 || leaving_vi(c))
        return 0;
    rc = sov_post_packet(c, PKT_DATA, c->cbuf, (uint32_t)c->clen, c->cbuf_mh);
    if (rc)
        return rc;
    sent_packet(c, c->clen);
    c->clen = 0;
    return 0;
}

static int send_error(struct sov_sock *s)
{
    struct sov_conn *c = s->conn;
    if (c->reset) {
        if (!c->reset_told) {
            c->reset_told = true;
            return -ECONNRESET;
        }
        return -EPIPE;
    }
    return c->wr_shut || c->peer_gone ? -EPIPE : 0;
}

/* A cursor over the caller's iovec. */
struct cursor {
    const struct iovec *iov;
    int n, k;
    size_t off;
};

static size_t cur_avail(const struct cursor *u)
{
    return u->k < u->n ? u->iov[u->k].iov_len - u->off : 0;
}

static const uint8_t *cur_ptr(const struct cursor *u)
{
    return (const uint8_t *)u->iov[u->k].iov_base + u->off;
}

static void cur_skip(struct cursor *u, size_t n)
{
    u->off += n;
    while (u->k < u->n && u->off == u->iov[u->k].iov_len) {
        u->k++;
        u->off = 0;
    }
}

/* Gathers small pieces into the send buffer, up to one MTU, stopping
 * before a piece big enough to be registered: one DATA packet for a writev
 * of small parts, as TCP sends one segment. */
static size_t gather_small(struct sov_conn *c, struct cursor *u, uint8_t *b)
{
    size_t n = 0;
    while (u->k < u->n && n < c->send_mtu) {
        size_t a = cur_avail(u);
        if (a > c->cfg.copy_threshold && c->cfg.copy_mode != SOV_COPY && n)
            break;
        size_t take = a < c->send_mtu - n ? a : c->send_mtu - n;
        memcpy(b + n, cur_ptr(u), take);
        n += take;
        cur_skip(u, take);
    }
    return n;
}

/* One DATA packet of the next bytes; returns the bytes sent or -errno. */
static ssize_t send_next(struct sov_conn *c, struct cursor *u)
{
    size_t a = cur_avail(u);
    bool big = a > c->cfg.copy_threshold || c->cfg.copy_mode == SOV_REG;
    if (big && c->cfg.copy_mode != SOV_COPY) {
        ssize_t n = send_registered(c, cur_ptr(u), a);
        if (n > 0)
            cur_skip(u, (size_t)n);
        return n;
    }
    uint8_t *b = sov_stage(c);
    size_t n = gather_small(c, u, b);
    int rc = sov_post_packet(c, PKT_DATA, b, (uint32_t)n, c->sbuf_mh);
    if (rc)
        return rc;
    c->stats.copied_sends++;
    sent_packet(c, n);
    return (ssize_t)n;
}

static ssize_t send_urgent(struct sov_sock *s, const struct iovec *iov, int iovcnt, int flags);

/* The stream left the VI during the call, after `sent` bytes went there:
 * the rest follows it. Behind a peer that leaves, it goes to the kernel
 * socket once what is owed there went (sov_mig_send), so a blocking send
 * still sends all, as TCP's. While another thread of ours moves it, it
 * waits for that; a send that already sent some returns that much, and
 * the program's next call goes to the kernel socket. */
static ssize_t send_moved(struct sov_sock *s, const struct cursor *u, int flags, size_t sent)
{
    bool nonblock = s->nonblock || (flags & MSG_DONTWAIT);
    sov_sends_out(s->conn); /* what went, all handed to the provider */
    if (!s->conn->peer_mig)
        return sent ? (ssize_t)sent : sov_mig_wait_ours(s, nonblock);
    struct iovec rest[u->n - u->k];
    int n = 0;
    rest[n++] = (struct iovec){(void *)cur_ptr(u), cur_avail(u)};
    for (int k = u->k + 1; k < u->n; k++)
        rest[n++] = u->iov[k];
    ssize_t r = sov_mig_send(s, rest, n, flags);
    if (r < 0)
        return sent ? (ssize_t)sent : r; /* the error shows on the next call */
    return (ssize_t)sent + r;
}

/*
 * The usual send(fd, buf, small, 0): one piece that goes as one copied
 * DATA packet now (no combining, nothing combined before it, a credit in
 * hand, the stream on the VI). What the loop of sov_do_send would do for
 * it, without its cursor and its checks for the cases excluded here: on a
 * 4-byte ping-pong that work was a quarter of sovia's send (issue 16).
 * False: not this case (the caller takes the general path); else *r is
 * the send's result.
 */
static bool send_small(struct sov_sock *s, const struct iovec *iov, int iovcnt, int flags,
                       ssize_t *r)
{
    struct sov_conn *c = s->conn;
    size_t a = iov[0].iov_len;
    if (iovcnt != 1 || a == 0 || a > c->send_mtu || (flags & MSG_OOB) || c->clen ||
        c->credits == 0 || c->reset || c->wr_shut || c->peer_gone || leaving_vi(c) ||
        (c->cfg.combine && !s->nodelay && !c->rec) ||
        (c->cfg.copy_mode != SOV_COPY && (a > c->cfg.copy_threshold || c->cfg.copy_mode == SOV_REG)))
        return false;
    uint8_t *b = sov_stage(c);
    memcpy(b, iov[0].iov_base, a);
    int rc = sov_post_packet(c, PKT_DATA, b, (uint32_t)a, c->sbuf_mh);
    if (rc) {
        sov_sends_out(s->conn);
        *r = rc == -ECONNRESET || rc == -EPIPE ? send_error(s) : rc;
        return true;
    }
    c->stats.copied_sends++;
    sent_packet(c, a);
    sov_sends_out(c);
    sov_repost_deferred(c); /* the data left first; now the repost */
    *r = (ssize_t)a;
    return true;
}

ssize_t sov_do_send(struct sov_sock *s, const struct iovec *iov, int iovcnt, int flags)
{
    ssize_t r;
    if (s->kind == SK_CONNECTED && iovcnt > 0 && send_small(s, iov, iovcnt, flags, &r))
        return r;
    if (s->kind == SK_CONNECTING)
        return -EAGAIN;
    if (s->kind != SK_CONNECTED)
        return -EPIPE; /* as tcp_sendmsg on a socket that never connected */
    /* Incoming packets are handled only when the window is closed (below,
     * in wait_credit): a broken connection shows anyway as a flushed send,
     * and polling here would pull in the line the peer's reply will use. */
    int err = send_error(s);
    if (err)
        return err;
    if (s->conn->peer_mig) /* the peer went back to the kernel connection */
        return sov_mig_send(s, iov, iovcnt, flags);
    if (sov_mig_ours_moving(s->conn)) /* another thread of ours moves it there */
        return sov_mig_wait_ours(s, s->nonblock || (flags & MSG_DONTWAIT));
    if (flags & MSG_OOB)
        return send_urgent(s, iov, iovcnt, flags & ~MSG_OOB);
    bool nonblock = s->nonblock || (flags & MSG_DONTWAIT);
    struct cursor u = {iov, iovcnt, 0, 0};
    cur_skip(&u, 0);
    size_t sent = 0;
    while (u.k < u.n) {
        struct sov_conn *c = s->conn;
        if (leaving_vi(c)) /* it left the VI while we waited (wait_credit) */
            return send_moved(s, &u, flags, sent);
        /* Not for a shared connection: combined bytes would wait in this
         * process's buffer, out of the other holders' sight. */
        bool combine = c->cfg.combine && !s->nodelay && !c->rec;
        size_t a = cur_avail(&u);
        ssize_t n;
        int rc = 0;
        if (combine && a < c->cfg.copy_threshold) {
            if (c->clen + a > c->send_mtu)
                rc = sov_flush(s, !nonblock); /* condition (2): no room */
            if (rc == 0 && leaving_vi(s->conn))
                continue;
            if (rc == 0) {
                c = s->conn;
                if (c->clen == 0)
                    c->cdeadline_ns = sov_now_ns() + (uint64_t)c->cfg.combine_ms * 1000000;
                memcpy(c->cbuf + c->clen, cur_ptr(&u), a);
                c->clen += a;
                c->stats.combined_messages++;
                cur_skip(&u, a);
                n = (ssize_t)a;
            }
        } else {
            /* (The calls only when they have work: this is every send.) */
            if (c->clen)
                rc = sov_flush(s, !nonblock); /* condition (3): a large send */
            c = s->conn;
            if (rc == 0 && (c->credits == 0 || c->reset))
                rc = wait_credit(s, nonblock);
            if (rc == 0 && leaving_vi(s->conn))
                continue;
            if (rc == 0) {
                n = send_next(s->conn, &u);
                rc = n < 0 ? (int)n : 0;
            }
        }
        if (rc) {
            sov_sends_out(s->conn);
            if (sent && (rc == -EAGAIN || rc == -EINTR || rc == -ECONNRESET || rc == -EPIPE))
                return (ssize_t)sent; /* the error shows on the next call, as TCP */
            return rc == -ECONNRESET || rc == -EPIPE ? send_error(s) : rc;
        }
        sent += (size_t)n;
        if (sent >= SSIZE_MAX - c->send_mtu)
            break;
    }
    /* Packets go in flight together within the call, but it returns with
     * all handed to the provider's transport, as before: a program killed
     * now loses none of them (its kernel sends what it was given). */
    sov_sends_out(s->conn);
    sov_repost_deferred(s->conn); /* the data left first; now the repost */
    return (ssize_t)sent;
}

/* MSG_OOB: the call's last byte is urgent (the receiver's mark). The bytes
 * before it go as usual; it goes alone, in a DATA packet with PKT_URG. If
 * the bytes before it do not all go (a non-blocking send), nothing is
 * marked (Linux would mark the last byte that went). */
static ssize_t send_urgent(struct sov_sock *s, const struct iovec *iov, int iovcnt, int flags)
{
    int last = -1;
    size_t total = 0;
    for (int k = 0; k < iovcnt; k++) {
        total += iov[k].iov_len;
        if (iov[k].iov_len)
            last = k;
    }
    if (last < 0)
        return sov_do_send(s, iov, iovcnt, flags);
    struct iovec head[last + 1];
    memcpy(head, iov, sizeof(head));
    head[last].iov_len--;
    uint8_t urgent = ((const uint8_t *)iov[last].iov_base)[head[last].iov_len];
    ssize_t n = 0;
    if (total > 1 && (n = sov_do_send(s, head, last + 1, flags)) < 0)
        return n;
    if ((size_t)n < total - 1)
        return n;
    bool nonblock = s->nonblock || (flags & MSG_DONTWAIT);
    int rc = sov_flush(s, !nonblock); /* what the head left combined goes first */
    if (rc == 0)
        rc = wait_credit(s, nonblock);
    struct sov_conn *c = s->conn;
    if (rc == 0 && leaving_vi(c)) { /* the urgent byte follows the stream */
        struct cursor u = {&iov[last], 1, 0, head[last].iov_len};
        return send_moved(s, &u, flags | MSG_OOB, (size_t)n);
    }
    if (rc == 0) {
        uint8_t *b = sov_stage(c);
        b[0] = urgent;
        rc = sov_post_urgent(c, b, 1, c->sbuf_mh);
    }
    if (rc) {
        if (n)
            return n;
        return rc == -ECONNRESET || rc == -EPIPE ? send_error(s) : rc;
    }
    c->stats.copied_sends++;
    sent_packet(c, 1);
    sov_sends_out(c);
    sov_repost_deferred(c);
    return n + 1;
}

/* ---- Receiving -------------------------------------------------------------- */

/* Passes over `skip` unread bytes, then copies up to `max` into the iovec
 * from byte `at` on. Consumes them (reposting emptied buffers) unless
 * `peek`. Returns the bytes copied. */
/* copy_out's usual case: a read into one buffer, no urgent mark pending,
 * of the head packet alone (it holds all that fits, or it is the only
 * one). Its general loop was half of sovia's receive on a 4-byte
 * ping-pong (issue 16). SIZE_MAX: not this case. */
static size_t copy_head(struct sov_conn *c, const struct iovec *iov, int iovcnt, size_t at,
                        size_t skip, size_t max, bool peek)
{
    if (peek || skip || at || iovcnt != 1 || c->urg || c->rq_count == 0)
        return SIZE_MAX;
    unsigned i = c->recvq[c->rq_head];
    size_t off = c->rq_off, blen = c->rdesc[i].CS.Length, n = blen - off;
    size_t room = max < iov[0].iov_len ? max : iov[0].iov_len;
    if (n < room && c->rq_count > 1)
        return SIZE_MAX;
    if (n > room)
        n = room;
    memcpy(iov[0].iov_base, c->arena + (size_t)i * c->cfg.mtu + off, n);
    c->rx_bytes -= n;
    c->taken += n;
    if (off + n < blen) {
        c->rq_off = off + n;
        return n;
    }
    c->rq_off = 0;
    c->rq_head = sov_rq_slot(c, 1);
    c->rq_count--;
    consumed(c, i);
    return n;
}

static size_t copy_out(struct sov_conn *c, const struct iovec *iov, int iovcnt, size_t at,
                       size_t skip, size_t max, bool peek)
{
    size_t head = copy_head(c, iov, iovcnt, at, skip, max, peek);
    if (head != SIZE_MAX)
        return head;
    size_t done = 0, passed = 0, off = c->rq_off;
    unsigned q = 0;
    int k = 0;
    size_t kpos = 0; /* position inside iov[k] */
    /* Skip to byte `at` of the iovec. */
    while (k < iovcnt && at >= iov[k].iov_len) {
        at -= iov[k].iov_len;
        k++;
    }
    kpos = at;
    while (q < c->rq_count && (passed < skip || (done < max && k < iovcnt))) {
        unsigned i = c->recvq[sov_rq_slot(c, q)];
        const uint8_t *buf = c->arena + (size_t)i * c->cfg.mtu;
        size_t blen = c->rdesc[i].CS.Length;
        size_t n = blen - off;
        if (passed < skip) {
            if (n > skip - passed)
                n = skip - passed;
            passed += n;
        } else {
            if (n > max - done)
                n = max - done;
            if (n > iov[k].iov_len - kpos)
                n = iov[k].iov_len - kpos;
            memcpy((uint8_t *)iov[k].iov_base + kpos, buf + off, n);
            done += n;
            kpos += n;
            if (kpos == iov[k].iov_len) {
                k++;
                kpos = 0;
            }
        }
        off += n;
        if (off == blen) {
            off = 0;
            if (peek) {
                q++;
            } else {
                c->rq_head = sov_rq_slot(c, 1);
                c->rq_count--;
                consumed(c, i);
            }
        }
    }
    if (!peek) {
        /* A repost the provider refused reset the connection in consumed()
         * (sov_conn_abort): what was unread is gone, the count with it
         * (taking our bytes off it wrapped: readable for ever, nothing
         * queued, the next sov_recv spun; sovia/repost_fail). */
        bool dropped = c->reset && c->rq_count == 0 && c->rx_bytes < done + passed;
        c->rq_off = dropped ? 0 : off;
        c->rx_bytes = dropped ? 0 : c->rx_bytes - (done + passed);
        c->taken += done + passed;
        if (c->urg && done + passed > c->urg_ahead)
            c->urg = c->urg_valid = false; /* the reader went past the mark */
        else if (c->urg)
            c->urg_ahead -= done + passed;
    }
    return done;
}

/* One copy, as TCP reads around an urgent mark: up to the mark; at the
 * mark, only if nothing was copied yet, and then past the urgent byte
 * (read in band with SO_OOBINLINE, else passed over). */
static size_t read_step(struct sov_sock *s, struct sov_conn *c, const struct iovec *iov,
                        int iovcnt, size_t got, size_t want, bool peek)
{
    size_t max = want - got, skip = 0;
    if (c->urg && c->urg_ahead == 0) {
        if (got)
            return 0;
        skip = !s->oobinline;
    } else if (c->urg && max > c->urg_ahead) {
        max = c->urg_ahead;
    }
    return copy_out(c, iov, iovcnt, got, skip, max, peek);
}

/* Up to len bytes of what our program would read next, taken without
 * handling packets (migrate.c gives them back to the peer). */
size_t sov_vi_take(struct sov_sock *s, void *buf, size_t len)
{
    if (!sov_readable(s) || s->rd_shut)
        return 0;
    struct iovec v = {buf, len};
    return read_step(s, s->conn, &v, 1, 0, len, false);
}

/* recv(MSG_OOB): the urgent byte, once, as TCP (tcp_recv_urg): EINVAL when
 * there is none, it was taken, or it is read in band (SO_OOBINLINE). */
static ssize_t recv_urgent(struct sov_sock *s, const struct iovec *iov, int iovcnt, int flags)
{
    if (s->kind == SK_LISTENING)
        return -ENOTCONN;
    if (s->kind != SK_CONNECTED)
        return -EINVAL;
    sov_progress(s);
    struct sov_conn *c = s->conn;
    if (!c->urg_valid || s->oobinline)
        return -EINVAL;
    if (!(flags & MSG_PEEK))
        c->urg_valid = false;
    for (int k = 0; k < iovcnt; k++)
        if (iov[k].iov_len) {
            *(uint8_t *)iov[k].iov_base = c->urg_byte;
            return 1;
        }
    return 0;
}

ssize_t sov_do_recv(struct sov_sock *s, const struct iovec *iov, int iovcnt, int flags)
{
    if (flags & MSG_OOB)
        return recv_urgent(s, iov, iovcnt, flags);
    if (s->kind != SK_CONNECTED)
        return -ENOTCONN;
    size_t want = 0;
    for (int k = 0; k < iovcnt; k++)
        want += iov[k].iov_len;
    if (want == 0)
        return 0;
    bool peek = flags & MSG_PEEK, waitall = (flags & MSG_WAITALL) && !peek;
    bool nonblock = s->nonblock || (flags & MSG_DONTWAIT);
    size_t got = 0;
    uint64_t spun = 0;
    bool handled = false; /* the last wait handled a packet: no poll now */
    for (;;) {
        struct sov_conn *c = s->conn;
        bool from_spin = handled;
        if (!handled)
            sov_progress(s);
        handled = false;
        if (c->clen)
            sov_flush(s, false); /* condition (4): recv() sends what is combined */
        c = s->conn;
        /* The peer's REQUEST moves our side too, and what is unread goes
         * back from the front (migrate.c): the rest is the kernel's. */
        if (sov_mig_answer_moving(c)) {
            int rc = got ? 0 : sov_mig_wait_ours(s, nonblock);
            if (got || rc)
                return got ? (ssize_t)got : rc;
            continue;
        }
        if (sov_readable(s) && !s->rd_shut) {
            got += read_step(s, c, iov, iovcnt, got, want, peek);
            bool at_mark = c->urg && c->urg_ahead == 0;
            if (got == want || (got && (!waitall || at_mark))) {
                /* The spin's packet alone was read, and there is room: what
                 * came with it is read too (one look), as when a poll of
                 * the queue came before the read (a stream's receiver). */
                if (from_spin && got < want && !at_mark && !peek && sov_progress(s) > 0 &&
                    !sov_mig_answer_moving(s->conn) && sov_readable(s) && !s->rd_shut)
                    got += read_step(s, s->conn, iov, iovcnt, got, want, false);
                return (ssize_t)got;
            }
            continue;
        }
        if (s->rd_shut)
            return (ssize_t)got;
        /* Another thread of ours moves it to the kernel socket: the VI's
         * part is read (what is left goes back), the rest is there. */
        if (sov_mig_ours_moving(c) && !c->mig_auto && !c->reset)
            return got ? (ssize_t)got : sov_mig_wait_ours(s, nonblock);
        if (c->peer_fin && !c->mig_auto) /* (with our side moved, the kernel's) */
            return (ssize_t)got;
        if (c->peer_mig && !c->reset) /* the rest of its stream: the kernel's */
            return sov_mig_recv(s, iov, iovcnt, flags, got);
        if (c->reset) {
            if (got)
                return (ssize_t)got;
            if (!c->reset_told) {
                c->reset_told = true;
                return -ECONNRESET;
            }
            return 0;
        }
        if (nonblock)
            return got ? (ssize_t)got : -EAGAIN;
        int rc = sov_wait_turn(s, &spun, &handled);
        if (rc)
            return got ? (ssize_t)got : rc;
    }
}

/* Sends our FIN after everything written so far. 0 or -errno. */
int sov_send_fin(struct sov_sock *s)
{
    struct sov_conn *c = s->conn;
    if (c->wr_shut)
        return 0;
    if (c->peer_mig)
        return sov_mig_shutdown_wr(s);
    if (sov_mig_ours_moving(c))
        return sov_mig_wait_ours(s, false);
    int rc = sov_flush(s, true);
    if (rc)
        return rc;
    c = s->conn;
    rc = sov_conn_send_ctrl(c, PKT_FIN);
    if (rc)
        return rc;
    c->wr_shut = true;
    return 0;
}
