/*
 * shm_inherit.c - a connected VI and its CQ handed to the next program
 * image (exec). Everything the peer shares with us lives in memfds and one
 * connection socket, so the new image maps the same segments again and the
 * peer notices nothing: its sends keep landing in our rx segment, whose
 * completion slots the new image reads. What is private (the receive queue,
 * the cached peer counters) travels as bytes.
 *
 * Descriptors in VIPX_STATE: ctl, rx, the connection socket, then the
 * peer's ctl, rx, armed page and word page (or wake-up socket), and its
 * readiness hint page for us if it gave one (shm_hint.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm.h"

#define STATE_MAGIC 0x53564958u /* "SVIX" */

enum { FD_CTL, FD_RX, FD_SOCK, FD_PEER, FD_HINT = FD_PEER + 4, NFDS };

struct vi_state {
    uint32_t magic, version;
    uint64_t ctl_len, rx_len;
    /* Our geometry, from our private record: an inheritable VI's ctl is not
     * sealed against the peer, so its header is not to be believed. */
    uint32_t depth, staging_off, staging_len, arena_off, arena_len;
    uint32_t rq_published; /* shared index of the next receive to publish */
    uint32_t first_sidx, nposted;
    uint32_t peer_consumed, peer_posted_seen;
    int32_t peer_pid;
    uint8_t watch_pid, shared, relay, merged;
    struct shm_msg peer_msg;
};

_Static_assert(sizeof(struct vi_state) <= VIPX_STATE_BYTES, "state fits VIPX_STATE");

VIP_RETURN shm_vi_export(struct vipl_vi *cvi, VIPX_STATE *st, VIP_ULONG *offsets, VIP_ULONG *n)
{
    struct shm_vi *vi = shm_vi(cvi);
    VIP_RETURN r = VIP_SUCCESS;
    shm_lock(&vi->sq_lock);
    shm_lock(&vi->rq_lock);
    struct shm_peer *peer = vi->peer;
    uint32_t first = 0;
    if (!vi->inheritable || vi->no_export || vi->ctl_fd < 0)
        r = VIP_INVALID_STATE;
    else
        r = shm_rq_posted(vi, offsets, n, &first);
    if (r == VIP_SUCCESS) {
        struct vi_state s = {
            .magic = STATE_MAGIC,
            .version = SHM_VERSION,
            .ctl_len = vi->ctl_len,
            .rx_len = vi->rx_len,
            .depth = vi->depth,
            .staging_off = vi->staging_off,
            .staging_len = vi->staging_len,
            .arena_off = vi->arena_off,
            .arena_len = vi->arena_len,
            .rq_published = vi->rq_published,
            .first_sidx = first,
            .nposted = (uint32_t)*n,
            .peer_consumed = peer->consumed,
            .peer_posted_seen = peer->posted_seen,
            .peer_pid = peer->pid,
            .watch_pid = peer->pidfd >= 0 || peer->pidw || peer->watch_pid,
            .shared = vi->shared,
            .relay = vi->relay,
            .merged = vi->merged,
            .peer_msg = peer->msg,
        };
        memcpy(st->Data, &s, sizeof(s));
        st->Length = sizeof(s);
        /* Shared entries (socket mode) are named once per connection: the
         * next image's shm_peer_map finds the same descriptor again. */
        int fds[NFDS] = {vi->ctl_fd, vi->merged ? vi->ctl_fd : vi->rx_fd, peer->sock,
                         peer->kept[0], peer->msg.rx_off ? peer->kept[0] : peer->kept[1],
                         peer->armed_sh ? shm_shared_fd(peer->armed_sh) : peer->kept[2],
                         peer->msg.wake_sock == SHM_WAKE_SOCKET ? peer->wake_sock : peer->kept[3],
                         peer->hint_sh ? shm_shared_fd(peer->hint_sh) : -1};
        memcpy(st->Fds, fds, sizeof(fds));
        st->NumFds = peer->hint_sh ? NFDS : FD_HINT;
    }
    shm_unlock(&vi->rq_lock);
    shm_unlock(&vi->sq_lock);
    return r;
}

/* The descriptors kept for the export go: the mappings keep the memory,
 * and a reconnect makes new segments (closed once the peer mapped them,
 * shm_conn.c). */
void shm_vi_forget_export(struct vipl_vi *cvi)
{
    struct shm_vi *vi = shm_vi(cvi);
    int gone[6], n = 0;
    shm_lock(&vi->sq_lock);
    shm_lock(&vi->rq_lock);
    vi->no_export = true;
    if (vi->peer) { /* before: shm_conn.c closes them once the peer mapped them */
        for (int i = 0; i < 4; i++)
            gone[n++] = vi->peer->kept[i];
        memset(vi->peer->kept, -1, sizeof(vi->peer->kept));
        gone[n++] = vi->ctl_fd;
        gone[n++] = vi->rx_fd;
        vi->ctl_fd = vi->rx_fd = -1;
    }
    shm_unlock(&vi->rq_lock);
    shm_unlock(&vi->sq_lock);
    for (int i = 0; i < n; i++)
        if (gone[i] >= 0)
            VipxFdClose(gone[i]);
}

/* The size of one of our own inherited memfds, which must be `want`. */
static bool own_segment_ok(int fd, uint64_t want)
{
    struct stat sb;
    return want && want <= SHM_MAX_SEGMENT && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) &&
           (uint64_t)sb.st_size == want;
}

/* Our own segments again, at new addresses, with the geometry we recorded
 * (checked against the segments' sizes all the same). */
static int adopt_segments(struct shm_vi *vi, const struct vi_state *s, int ctl_fd, int rx_fd)
{
    if (s->merged) { /* one memfd, named twice: ctl, then rx */
        if (rx_fd != ctl_fd || s->ctl_len > SHM_MAX_SEGMENT || s->rx_len > SHM_MAX_SEGMENT ||
            s->ctl_len % shm_nic(vi->core.nic)->page ||
            !own_segment_ok(ctl_fd, s->ctl_len + s->rx_len))
            return -EPROTO;
        vi->ctl = shm_map_fixed(NULL, ctl_fd, s->ctl_len + s->rx_len);
        vi->rx = vi->ctl ? (struct shm_rx *)((char *)vi->ctl + s->ctl_len) : NULL;
        rx_fd = -1;
    } else {
        if (!own_segment_ok(ctl_fd, s->ctl_len) || !own_segment_ok(rx_fd, s->rx_len))
            return -EPROTO;
        vi->ctl = shm_map_fixed(NULL, ctl_fd, s->ctl_len);
        vi->rx = shm_map_fixed(NULL, rx_fd, s->rx_len);
    }
    vi->merged = s->merged;
    vi->ctl_len = s->ctl_len;
    vi->rx_len = s->rx_len;
    vi->ctl_fd = ctl_fd;
    vi->rx_fd = rx_fd;
    if (!vi->ctl || !vi->rx)
        return -ENOMEM;
    size_t page = shm_nic(vi->core.nic)->page;
    size_t cmpl_end = sizeof(struct shm_rx) + (size_t)s->depth * sizeof(struct shm_cmpl);
    if (!s->depth || (s->depth & (s->depth - 1)) || s->depth > SHM_MAX_DEPTH ||
        shm_ctl_size(s->depth, SHM_REG_SLOTS, page) > s->ctl_len || cmpl_end > s->staging_off ||
        s->staging_off > s->arena_off || s->staging_len > s->arena_off - s->staging_off ||
        s->arena_off > s->rx_len || s->arena_len > s->rx_len - s->arena_off)
        return -EPROTO;
    vi->depth = s->depth;
    vi->mask = s->depth - 1;
    vi->staging_off = s->staging_off;
    vi->staging_len = s->staging_len;
    vi->arena_off = s->arena_off;
    vi->arena_len = s->arena_len;
    vi->arena = s->arena_len ? (uint8_t *)vi->rx + s->arena_off : NULL;
    return 0;
}

static int adopt_peer(struct shm_vi *vi, const struct vi_state *s, int *fds)
{
    struct shm_peer *peer = calloc(1, sizeof(*peer));
    if (!peer)
        return -ENOMEM;
    int pfds[4];
    memcpy(pfds, fds + FD_PEER, sizeof(pfds));
    int rc = shm_peer_map(peer, pfds, &s->peer_msg, shm_nic(vi->core.nic));
    /* What it took (socket mode; a merged peer's second name of its one
     * memfd) is no longer the caller's to close. */
    for (int i = 1; i < 4; i++)
        if (pfds[i] < 0)
            fds[FD_PEER + i] = -1;
    if (rc != 0) {
        free(peer);
        return rc;
    }
    memcpy(peer->kept, pfds, sizeof(peer->kept)); /* the word socket went to wake_sock */
    if (s->peer_msg.wake_sock == SHM_WAKE_SOCKET)
        shm_hint_map(peer, shm_nic(vi->core.nic), &fds[FD_HINT], s->peer_msg.hint_slot);
    peer->msg = s->peer_msg;
    peer->attrs = shm_attrs_of(&s->peer_msg);
    peer->consumed = s->peer_consumed;
    peer->posted_seen = s->peer_posted_seen;
    peer->sock = fds[FD_SOCK];
    peer->pid = s->peer_pid;
    peer->pidfd = s->watch_pid ? vipl_fd_pidfd(s->peer_pid) : -1;
    vi->peer = peer;
    return 0;
}

/* Takes the descriptors in `st` whatever the outcome. */
VIP_RETURN shm_vi_import(struct vipl_vi *cvi, const VIPX_STATE *st)
{
    struct shm_vi *vi = shm_vi(cvi);
    struct vi_state s;
    int fds[NFDS];
    bool ok = (st->NumFds == NFDS || st->NumFds == FD_HINT) && st->Length == sizeof(s);
    for (int i = 0; i < NFDS; i++)
        fds[i] = i < (int)st->NumFds ? st->Fds[i] : -1;
    if (ok)
        memcpy(&s, st->Data, sizeof(s));
    ok = ok && s.magic == STATE_MAGIC && s.version == SHM_VERSION;
    vi->ctl_fd = vi->rx_fd = -1;
    vi->inheritable = true;
    vi->no_export = false;
    int rc = ok ? adopt_segments(vi, &s, fds[FD_CTL], fds[FD_RX]) : -EPROTO;
    fds[FD_CTL] = fds[FD_RX] = -1; /* the VI holds them now */
    if (rc == 0 && s.nposted > vi->depth)
        rc = -EPROTO;
    if (rc == 0) {
        vi->rq = calloc(vi->depth, sizeof(*vi->rq));
        vi->sq = calloc(vi->depth, sizeof(*vi->sq));
        rc = vi->rq && vi->sq ? 0 : -ENOMEM;
    }
    if (rc == 0)
        rc = adopt_peer(vi, &s, fds);
    if (rc == 0) {
        for (int i = FD_SOCK; i < NFDS; i++)
            fds[i] = -1; /* the peer holds them now */
        vi->rq_published = s.rq_published;
        vi->import_next = s.first_sidx;
        vi->import_left = s.nposted;
        vi->shared = s.shared;
        if (cvi->recv_cq && shm_cq_attach(shm_cq(cvi->recv_cq), vi) != 0)
            rc = -ENOMEM;
        else if (cvi->recv_cq) /* held since a fork, before the exec */
            shm_holder_find(shm_cq(cvi->recv_cq), vi);
        if (cvi->recv_cq && s.relay) /* a peer of another user reads our own word */
            shm_cq_relay(shm_cq(cvi->recv_cq), vi, true);
    }
    if (rc == 0) {
        atomic_store(&cvi->state, VIP_STATE_CONNECTED);
        if (shm_agent_watch(shm_nic(cvi->nic)->agent, vi) == 0)
            return VIP_SUCCESS;
        if (cvi->recv_cq)
            shm_cq_detach(shm_cq(cvi->recv_cq), vi);
        rc = -ENOMEM;
    }
    for (int i = 0; i < NFDS; i++)
        if (fds[i] >= 0)
            VipxFdClose(fds[i]);
    if (vi->peer) {
        shm_peer_free(vi->peer);
        vi->peer = NULL;
    }
    shm_vi_segments_destroy(vi);
    free(vi->rq);
    free(vi->sq);
    return rc == -ENOMEM ? VIP_ERROR_RESOURCE : VIP_INVALID_PARAMETER;
}

/* The next exported receive gets its descriptor: it must describe exactly
 * what the published slot says (our own ctl segment, written by us). */
VIP_RETURN shm_vi_import_recv(struct vipl_vi *cvi, struct vipl_wr *wr)
{
    struct shm_vi *vi = shm_vi(cvi);
    VIP_RETURN r = VIP_INVALID_PARAMETER;
    shm_lock(&vi->rq_lock);
    const struct shm_post *p = &vi->ctl->post[vi->import_next & vi->mask];
    uint32_t tail = atomic_load_explicit(&vi->rq_tail, memory_order_relaxed);
    bool match = vi->import_left && wr->nsge == p->nseg && wr->nsge <= SHM_POST_SEGS &&
                 wr->total == p->total;
    for (uint32_t i = 0; match && i < wr->nsge; i++) {
        uint32_t off;
        match = shm_arena_offset(vi, wr->sge[i].addr, wr->sge[i].len, &off) &&
                off == p->seg[i].off && wr->sge[i].len == p->seg[i].len;
    }
    if (!vi->import_left) {
        r = VIP_INVALID_STATE;
    } else if (match) {
        struct shm_rq_entry *e = &vi->rq[tail & vi->mask];
        *e = (struct shm_rq_entry){.desc = wr->desc,
                                   .total = (uint32_t)wr->total,
                                   .sidx = vi->import_next,
                                   .published = true,
                                   .nsge = wr->nsge};
        memcpy(e->sge, wr->sge, wr->nsge * sizeof(wr->sge[0]));
        wr->desc->CS.Status = 0;
        vi->import_next++;
        vi->import_left--;
        atomic_store_explicit(&vi->rq_tail, tail + 1, memory_order_release);
        r = VIP_SUCCESS;
    }
    shm_unlock(&vi->rq_lock);
    return r;
}

enum { CQ_FD_ARMED, CQ_FD_WAKE_RX, CQ_FD_WAKE_TX, CQ_NFDS };

VIP_RETURN shm_cq_export(struct vipl_cq *ccq, VIPX_STATE *st)
{
    struct shm_cq *cq = shm_cq(ccq);
    if (!cq->inheritable)
        return VIP_INVALID_STATE;
    st->Fds[CQ_FD_ARMED] = cq->armed_fd;
    st->Fds[CQ_FD_WAKE_RX] = cq->wake_rx;
    st->Fds[CQ_FD_WAKE_TX] = cq->wake_tx;
    st->NumFds = CQ_NFDS;
    return VIP_SUCCESS;
}

/* Peers keep waking the inherited socket and reading the inherited armed
 * page, so the CQ is the same one for them. Takes the descriptors. */
VIP_RETURN shm_cq_import(struct vipl_cq *ccq, const VIPX_STATE *st)
{
    struct shm_cq *cq = shm_cq(ccq);
    pthread_mutex_init(&cq->lock, NULL);
    cq->cap = (uint32_t)ccq->entries;
    cq->inheritable = true;
    cq->armed_fd = cq->wake_rx = cq->wake_tx = -1;
    if (st->NumFds != CQ_NFDS) {
        for (unsigned i = 0; i < st->NumFds && i < VIPX_STATE_FDS; i++)
            VipxFdClose(st->Fds[i]);
        goto fail;
    }
    cq->wake_rx = st->Fds[CQ_FD_WAKE_RX];
    cq->wake_tx = st->Fds[CQ_FD_WAKE_TX];
    int fd = st->Fds[CQ_FD_ARMED];
    struct stat sb;
    cq->send_ring = calloc(cq->cap, sizeof(*cq->send_ring));
    if (!cq->send_ring || fstat(fd, &sb) != 0 || (size_t)sb.st_size != shm_nic(ccq->nic)->page) {
        VipxFdClose(fd);
        goto fail;
    }
    if (shm_cq_armed_page(cq, fd) != 0) /* closes fd on failure */
        goto fail;
    if (!shm_wake_id_of(cq->wake_rx, &cq->wake_id))
        goto fail;
    shm_cq_list(cq);
    return VIP_SUCCESS;
fail:
    shm_destroy_cq(ccq);
    return VIP_INVALID_PARAMETER;
}
