/*
 * inherit.c - carried connections handed to the next program image, for
 * the preload's exec wrappers (docs/TRANSPARENT.md, "Transparent mode").
 *
 * Before exec: every carried connection named by a descriptor that survives
 * exec is described in a memfd (protocol state, unread-data queue, posted
 * receives, the VI's and the CQ's exported state), and the descriptors the
 * VI and CQ live on stop being close-on-exec. The new image's preload reads
 * it before main() and rebuilds each connection around the same shared
 * memory: the peer notices nothing, and no byte is lost or repeated.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sock.h"
#include "transparent.h"

#define INHERIT_MAGIC 0x53564948u /* "SVIH" */
#define INHERIT_VERSION 3u
#define INHERIT_NAMES 16 /* descriptors naming one connection */
#define INHERIT_MAX_BUFFERS 65536

struct inh_header {
    uint32_t magic, version, nconns;
    VIPX_STATE cq;
};

/* One connection; followed by its recvq (buffer index and data length
 * pairs, oldest first) and the arena offsets of its posted receives
 * (posting order). */
struct inh_conn {
    int32_t names[INHERIT_NAMES];
    uint32_t nnames;
    int32_t domain;
    uint8_t nonblock, nodelay, keepalive, rd_shut, oobinline;
    struct linger linger;
    int32_t sndbuf;
    struct sockaddr_storage local, peer;
    uint32_t local_len, peer_len;
    struct sov_config sock_cfg, cfg;
    uint32_t nrecv, nsend, credits, to_ack, peer_window, ack_every;
    uint64_t send_mtu, rq_off, rx_bytes;
    uint32_t rq_count, nposted;
    uint8_t wr_shut, fin_acked, peer_fin, peer_gone, reset, reset_told, shared;
    uint8_t urg, urg_valid, urg_byte; /* the urgent mark (MSG_OOB) */
    uint64_t urg_ahead;
    int32_t rec_fd; /* the shared record (shared.c), or -1 */
    struct sov_stats stats;
    uint64_t base_sent, taken; /* what this process moved (stats.c) */
    VIPX_STATE vi;
};

static int raw_getfd(int fd)
{
    return (int)syscall(SYS_fcntl, fd, F_GETFD);
}

static int raw_setfd(int fd, int flags)
{
    return (int)syscall(SYS_fcntl, fd, F_SETFD, flags);
}

/* ---- Before exec ----------------------------------------------------------- */

static bool keep_open(struct sov_handoff *h, int fd)
{
    int flags = raw_getfd(fd);
    if (flags < 0)
        return false;
    if (flags & FD_CLOEXEC) {
        if (raw_setfd(fd, flags & ~FD_CLOEXEC) != 0)
            return false;
        h->reopened[h->nreopened++] = fd;
    }
    return true;
}

static bool keep_state_open(struct sov_handoff *h, const VIPX_STATE *st)
{
    for (unsigned i = 0; i < st->NumFds; i++)
        if (!keep_open(h, st->Fds[i]))
            return false;
    return true;
}

/* The program's descriptors naming s that survive exec. */
static unsigned surviving_names(struct sov_sock *s, int32_t *names)
{
    unsigned n = 0;
    for (int fd = 0, lim = sov_table_limit(); fd < lim && n < INHERIT_NAMES; fd++) {
        int flags;
        if (sov_lookup(fd) == s && (flags = raw_getfd(fd)) >= 0 && !(flags & FD_CLOEXEC))
            names[n++] = fd;
    }
    return n;
}

static bool write_all(int fd, const void *p, size_t len)
{
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n <= 0)
            return false;
        p = (const char *)p + n;
        len -= (size_t)n;
    }
    return true;
}

/* Caller holds s->lock. Quiesces the connection and writes its record. */
static bool export_conn(struct sov_handoff *h, struct sov_sock *s, const int32_t *names,
                        unsigned nnames, bool forked)
{
    struct sov_conn *c = s->conn;
    sov_progress(s);
    if (c->clen && !c->reset)
        sov_flush(s, true);
    c = s->conn;
    sov_repost_deferred(c);
    sov_sends_settle(c); /* none of ours left in flight for the next holder */
    if (forked && !c->shared) { /* vfork: the parent holds it too */
        VipxViShare(c->vi);
        c->shared = true;
    }
    uint32_t posted[INHERIT_MAX_BUFFERS < 4096 ? INHERIT_MAX_BUFFERS : 4096];
    VIP_ULONG offs[sizeof(posted) / sizeof(posted[0])];
    VIP_ULONG nposted = sizeof(posted) / sizeof(posted[0]);
    struct inh_conn r = {0};
    if (c->reset || c->nrecv > nposted ||
        VipxViExport(c->vi, &r.vi, offs, &nposted) != VIP_SUCCESS || !keep_state_open(h, &r.vi))
        return false;
    r.rec_fd = -1;
    if (c->rec) { /* the other holders go on using it */
        if (!keep_open(h, c->rec_fd))
            return false;
        r.rec_fd = c->rec_fd;
    }
    for (VIP_ULONG k = 0; k < nposted; k++)
        posted[k] = (uint32_t)offs[k];
    memcpy(r.names, names, nnames * sizeof(*names));
    r.nnames = nnames;
    r.domain = s->domain;
    r.nonblock = s->nonblock;
    r.nodelay = s->nodelay;
    r.oobinline = s->oobinline;
    r.keepalive = s->keepalive;
    r.rd_shut = s->rd_shut;
    r.linger = s->linger;
    r.sndbuf = s->sndbuf;
    r.local = s->local;
    r.peer = s->peer;
    r.local_len = s->local_len;
    r.peer_len = s->peer_len;
    r.sock_cfg = s->cfg;
    r.cfg = c->cfg;
    r.nrecv = c->nrecv;
    r.nsend = c->nsend;
    r.credits = c->credits;
    r.to_ack = c->to_ack;
    r.peer_window = c->peer_window;
    r.ack_every = c->ack_every;
    r.send_mtu = c->send_mtu;
    r.rq_off = c->rq_off;
    r.rx_bytes = c->rx_bytes;
    r.rq_count = c->rq_count;
    r.nposted = (uint32_t)nposted;
    r.wr_shut = c->wr_shut;
    r.fin_acked = c->fin_acked;
    r.peer_fin = c->peer_fin;
    r.peer_gone = c->peer_gone;
    r.reset_told = c->reset_told;
    r.urg = c->urg;
    r.urg_valid = c->urg_valid;
    r.urg_byte = c->urg_byte;
    r.urg_ahead = c->urg_ahead;
    r.shared = c->shared;
    r.stats = c->stats;
    r.base_sent = c->base_sent;
    r.taken = c->taken;
    uint32_t recvq[c->rq_count ? 2 * c->rq_count : 1];
    for (unsigned k = 0; k < c->rq_count; k++) {
        unsigned i = c->recvq[(c->rq_head + k) % (c->nrecv + 1)];
        recvq[2 * k] = i;
        recvq[2 * k + 1] = c->rdesc[i].CS.Length;
    }
    return write_all(h->memfd, &r, sizeof(r)) &&
           write_all(h->memfd, recvq, 2 * c->rq_count * sizeof(recvq[0])) &&
           write_all(h->memfd, posted, nposted * sizeof(posted[0]));
}

/*
 * NOTIFY: the notify thread takes a packet off the VI's queue before its
 * callback takes s->lock, held here; exported meanwhile, the record would
 * lack that packet and the callback never run in the new image. Hold the
 * notify and wait one in flight out (the callback handles it), up to 1 s.
 * Not for a vfork child: its memory is the parent's, whose notify goes on.
 */
static void hold_notify(struct sov_sock *s)
{
    VIP_VI_HANDLE vi = s->conn->vi;
    VipxViNotifyHold(vi, VIP_TRUE);
    for (int i = 0; i < 20000 && !VipxViNotifyIdle(vi); i++) {
        sov_sock_unlock(s);
        nanosleep(&(struct timespec){.tv_nsec = 50000}, NULL);
        sov_sock_lock(s);
        if (s->dead || !s->conn || s->conn->vi != vi)
            return;
    }
}

static bool notified(const struct sov_sock *s)
{
    return !s->dead && s->kind == SK_CONNECTED && s->conn && !s->conn->reset &&
           s->conn->cfg.handling == SOV_NOTIFY;
}

int sov_inherit_export(struct sov_handoff *h)
{
    *h = (struct sov_handoff){.memfd = -1};
    if (!sov_g.nic)
        return 0; /* sovia never started here */
    bool forked = getpid() != sov_g.pid; /* a vfork child: no atfork handler ran */
    int lim = sov_table_limit();
    h->reopened = malloc(((size_t)lim * VIPX_STATE_FDS + VIPX_STATE_FDS + 1) * sizeof(int));
    VipxFdCreateBegin();
    h->memfd = VipxFdAdopt(memfd_create("sovia-inherit", 0)); /* survives exec on purpose */
    VipxFdCreateEnd();
    struct inh_header hdr = {.magic = INHERIT_MAGIC, .version = INHERIT_VERSION};
    if (!h->reopened || h->memfd < 0 || VipxCQExport(sov_g.cq, &hdr.cq) != VIP_SUCCESS ||
        !keep_state_open(h, &hdr.cq) || !write_all(h->memfd, &hdr, sizeof(hdr))) {
        sov_inherit_abort(h);
        return -1;
    }
    for (int fd = 0; fd < lim; fd++) {
        struct sov_sock *s = sov_lookup(fd);
        int32_t names[INHERIT_NAMES];
        if (!s || !s->transparent)
            continue;
        sov_sock_lock(s);
        if (!sov_tp_settle_wait(&s, fd))
            continue; /* fell back to TCP: the kernel socket is all there is */
        if (!forked && notified(s))
            hold_notify(s);
        /* Each socket once, at its lowest surviving name. */
        unsigned n = s->dead || s->kind != SK_CONNECTED || !s->conn || s->tp_waiting
                         ? 0
                         : surviving_names(s, names);
        if (n && names[0] == fd) {
            if (!export_conn(h, s, names, n, forked)) {
                sov_sock_unlock(s);
                sov_inherit_abort(h);
                return -1;
            }
            hdr.nconns++;
        }
        sov_sock_unlock(s);
    }
    if (!hdr.nconns || pwrite(h->memfd, &hdr.nconns, sizeof(hdr.nconns),
                              offsetof(struct inh_header, nconns)) != sizeof(hdr.nconns)) {
        sov_inherit_abort(h);
        return hdr.nconns ? -1 : 0;
    }
    lseek(h->memfd, 0, SEEK_SET);
    return 1;
}

/* The exec failed (or nothing to hand over): everything is as it was. */
void sov_inherit_abort(struct sov_handoff *h)
{
    if (sov_g.nic && getpid() == sov_g.pid) /* the notifies hold_notify held go on */
        for (int fd = 0, lim = sov_table_limit(); fd < lim; fd++) {
            struct sov_sock *s = sov_lookup(fd);
            if (!s || !s->transparent)
                continue;
            sov_sock_lock(s);
            if (notified(s))
                VipxViNotifyHold(s->conn->vi, VIP_FALSE);
            sov_sock_unlock(s);
        }
    for (unsigned i = 0; i < h->nreopened; i++) {
        int flags = raw_getfd(h->reopened[i]);
        if (flags >= 0)
            raw_setfd(h->reopened[i], flags | FD_CLOEXEC);
    }
    if (h->memfd >= 0)
        VipxFdClose(h->memfd);
    free(h->reopened);
    *h = (struct sov_handoff){.memfd = -1};
}

/* ---- In the new image ---------------------------------------------------- */

static bool read_all(int fd, void *p, size_t len)
{
    while (len) {
        ssize_t n = read(fd, p, len);
        if (n <= 0)
            return false;
        p = (char *)p + n;
        len -= (size_t)n;
    }
    return true;
}

static void close_state(const VIPX_STATE *st)
{
    for (unsigned i = 0; i < st->NumFds && i < VIPX_STATE_FDS; i++)
        VipxFdClose(st->Fds[i]);
}

/* The inherited descriptors are the library's again (registered; they are
 * high already, so they keep their numbers), closed on a next exec. */
static void adopt_state(VIPX_STATE *st)
{
    VipxFdCreateBegin();
    for (unsigned i = 0; i < st->NumFds && i < VIPX_STATE_FDS; i++) {
        raw_setfd(st->Fds[i], FD_CLOEXEC);
        st->Fds[i] = VipxFdAdopt(st->Fds[i]);
    }
    VipxFdCreateEnd();
}

/* Every name must still be a socket of ours (the program cannot have
 * touched them before main(), but be sure). */
static bool names_ok(const struct inh_conn *r)
{
    if (r->nnames == 0 || r->nnames > INHERIT_NAMES)
        return false;
    for (unsigned i = 0; i < r->nnames; i++) {
        struct stat sb;
        if (fstat(r->names[i], &sb) != 0 || !S_ISSOCK(sb.st_mode) || sov_lookup(r->names[i]))
            return false;
    }
    return true;
}

static void restore_conn(struct sov_conn *c, const struct inh_conn *r, const uint32_t *recvq)
{
    c->credits = r->credits;
    c->to_ack = r->to_ack;
    c->peer_window = r->peer_window;
    c->ack_every = r->ack_every;
    c->send_mtu = r->send_mtu;
    c->rq_head = 0;
    c->rq_count = r->rq_count;
    for (unsigned k = 0; k < r->rq_count; k++) {
        c->recvq[k] = recvq[2 * k];
        c->rdesc[recvq[2 * k]].CS.Length = recvq[2 * k + 1];
    }
    c->rq_off = r->rq_off;
    c->rx_bytes = r->rx_bytes;
    c->wr_shut = r->wr_shut;
    c->fin_acked = r->fin_acked;
    c->peer_fin = r->peer_fin;
    c->peer_gone = r->peer_gone;
    c->reset_told = r->reset_told;
    c->urg = r->urg && r->urg_ahead < r->rx_bytes; /* the urgent byte is unread */
    c->urg_valid = c->urg && r->urg_valid;
    c->urg_byte = r->urg_byte;
    c->urg_ahead = c->urg ? r->urg_ahead : 0;
    c->shared = r->shared;
    c->stats = r->stats;
    c->base_sent = r->base_sent <= r->stats.bytes_sent ? r->base_sent : r->stats.bytes_sent;
    c->taken = r->taken;
}

static void restore_sock(struct sov_sock *s, struct sov_conn *c, const struct inh_conn *r)
{
    s->gen++;
    s->transparent = true;
    s->kind = SK_CONNECTED;
    s->conn = c;
    s->cfg = r->sock_cfg;
    s->nodelay = r->nodelay;
    s->oobinline = r->oobinline;
    s->keepalive = r->keepalive;
    s->rd_shut = r->rd_shut;
    s->linger = r->linger;
    s->sndbuf = r->sndbuf;
    s->local = r->local;
    s->peer = r->peer;
    s->local_len = r->local_len;
    s->peer_len = r->peer_len;
    s->bound = true;
}

/* One connection record; false stops the import (the stream is corrupt). */
static bool import_conn(int memfd)
{
    struct inh_conn r;
    if (!read_all(memfd, &r, sizeof(r)))
        return false;
    bool sane = r.nrecv && r.nrecv <= INHERIT_MAX_BUFFERS && r.rq_count <= r.nrecv &&
                r.nposted <= r.nrecv && r.cfg.mtu && r.nsend && r.nsend <= 64 &&
                r.local_len <= sizeof(r.local) && r.peer_len <= sizeof(r.peer) &&
                r.vi.NumFds <= VIPX_STATE_FDS;
    size_t words = 2 * (size_t)r.rq_count + r.nposted;
    uint32_t *tail = sane ? malloc((words + 1) * sizeof(uint32_t)) : NULL;
    if (!tail || !read_all(memfd, tail, words * sizeof(uint32_t))) {
        free(tail);
        if (sane)
            close_state(&r.vi);
        return false;
    }
    for (unsigned k = 0; k < r.rq_count; k++)
        sane = sane && tail[2 * k] < r.nrecv && tail[2 * k + 1] <= r.cfg.mtu;
    int err = 0;
    adopt_state(&r.vi);
    struct sov_conn *c = NULL;
    if (sane && names_ok(&r))
        c = sov_conn_import(&r.cfg, r.nrecv, r.nsend, &r.vi, tail + 2 * r.rq_count, r.nposted,
                            &err);
    else
        close_state(&r.vi);
    struct sov_sock *s = c ? sov_sock_adopt(r.names[0], r.domain, r.nonblock) : NULL;
    /* HANDLER: this image has no handler thread yet (socket() and the
     * preload's publish() start it), and its connection is handled by
     * nobody else: every wait for the handler would wait for ever. */
    if (s && c->cfg.handling != SOV_SINGLE && sov_handling_start() != 0) {
        sov_sock_free(s);
        s = NULL;
    }
    if (c && !s)
        sov_conn_destroy(c);
    if (r.rec_fd >= 0) {
        VIPX_STATE rec = {.NumFds = 1, .Fds = {r.rec_fd}};
        adopt_state(&rec);
        /* Without its record the connection is still ours, but is one to
         * use one process at a time, as before records existed. */
        if (s)
            sov_shared_attach(c, rec.Fds[0]);
        else
            VipxFdClose(rec.Fds[0]);
    }
    if (s) {
        restore_conn(c, &r, tail);
        restore_sock(s, c, &r);
        s->nfds = 0;
        for (unsigned i = 0; i < r.nnames; i++)
            if (sov_table_set(r.names[i], s) == 0)
                s->nfds++;
        atomic_fetch_add(&sov_g.tp_paired, 1);
        sov_sock_lock(s);
        sov_conn_established(s);
        sov_sock_unlock(s);
    }
    free(tail);
    /* A connection that cannot come back is gone for this image (its VI's
     * descriptors are closed: the peer reads the end of stream). The
     * program must not write into the idle kernel connection unnoticed. */
    if (!s)
        for (unsigned i = 0; sane && i < r.nnames; i++)
            shutdown(r.names[i], SHUT_RDWR);
    return true;
}

void sov_inherit_import(void)
{
    const char *v = getenv("SOVIA_INHERIT");
    if (!v)
        return;
    int memfd = atoi(v);
    unsetenv("SOVIA_INHERIT"); /* for this image only */
    struct stat sb;
    struct inh_header hdr;
    if (memfd < 0 || fstat(memfd, &sb) != 0 || !S_ISREG(sb.st_mode) ||
        !read_all(memfd, &hdr, sizeof(hdr)) || hdr.magic != INHERIT_MAGIC ||
        hdr.version != INHERIT_VERSION || hdr.cq.NumFds > VIPX_STATE_FDS) {
        if (memfd >= 0)
            VipxFdClose(memfd);
        fprintf(stderr, "sovia: inherited connections unreadable; they are dropped\n");
        return;
    }
    adopt_state(&hdr.cq);
    sov_g.inherited_cq = &hdr.cq;
    if (sov_init() != 0) {
        VipxFdClose(memfd);
        return;
    }
    /* Records may name one shared descriptor several times (the provider
     * holds it once for many connections): no number is closed, and none
     * can change hands, until every record is in. */
    VipxFdDeferBegin();
    for (uint32_t i = 0; i < hdr.nconns; i++)
        if (!import_conn(memfd))
            break;
    VipxFdDeferEnd();
    VipxFdClose(memfd);
}
