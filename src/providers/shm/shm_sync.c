/*
 * shm_sync.c - a shared VI's queue state between the processes holding it
 * (VipxViSyncSave/Load). After a fork both map the same segments at the
 * same addresses; what each keeps privately is its receive queue (which
 * shared slots it published, with which descriptors) and its cached view of
 * the peer's counters. The holder that used the VI last saves those; the
 * next one loads them over its own stale copy.
 */
#include <string.h>

#include "shm.h"

#define SYNC_MAGIC 0x53564953u /* "SVIS" */

struct sync_state {
    uint32_t magic, version;
    uint32_t rq_published; /* shared index of the next receive to publish */
    uint32_t first_sidx, nposted;
    uint32_t peer_consumed, peer_posted_seen;
};

_Static_assert(sizeof(struct sync_state) <= VIPX_STATE_BYTES, "state fits VIPX_STATE");

/* Caller holds sq_lock and rq_lock. The arena offsets of the receives
 * posted, in order (*n: capacity in, count out) and the shared index of
 * the first. Fails unless every send is reaped and every receive is a
 * plain arena receive published in order (what can be re-attached).
 * Receives posted after the VI failed were never published and can only
 * complete flushed: the list ends at the first of them. */
VIP_RETURN shm_rq_posted(struct shm_vi *vi, VIP_ULONG *offsets, VIP_ULONG *n, uint32_t *first)
{
    uint32_t head = vi->rq_head, tail = atomic_load(&vi->rq_tail);
    *first = head != tail ? vi->rq[head & vi->mask].sidx : vi->rq_published;
    if (!vi->peer || vi->sq_head != vi->sq_tail)
        return VIP_INVALID_STATE;
    if (tail - head > *n)
        return VIP_ERROR_RESOURCE;
    for (uint32_t i = head; i != tail; i++) {
        const struct shm_rq_entry *e = &vi->rq[i & vi->mask];
        if (!e->published && e->local_status == VIP_STATUS_DESC_FLUSHED_ERROR &&
            vipl_vi_state(&vi->core) == VIP_STATE_ERROR) {
            tail = i;
            break;
        }
        uint32_t off;
        bool plain = e->published && !e->staged && !e->local_status && e->nsge &&
                     e->sidx == *first + (i - head);
        if (!plain || !shm_arena_offset(vi, e->sge[0].addr, e->sge[0].len, &off))
            return VIP_ERROR_NOT_SUPPORTED;
        offsets[i - head] = off - vi->arena_off;
    }
    *n = tail - head;
    if (tail == head)
        *first = vi->rq_published;
    return VIP_SUCCESS;
}

VIP_RETURN shm_vi_sync_save(struct vipl_vi *cvi, VIPX_STATE *st, VIP_ULONG *offsets,
                            VIP_ULONG *n)
{
    struct shm_vi *vi = shm_vi(cvi);
    shm_lock(&vi->sq_lock);
    shm_lock(&vi->rq_lock);
    uint32_t first = 0;
    VIP_RETURN r = shm_rq_posted(vi, offsets, n, &first);
    if (r == VIP_SUCCESS) {
        struct sync_state s = {
            .magic = SYNC_MAGIC,
            .version = SHM_VERSION,
            .rq_published = vi->rq_published,
            .first_sidx = first,
            .nposted = (uint32_t)*n,
            .peer_consumed = vi->peer->consumed,
            .peer_posted_seen = vi->peer->posted_seen,
        };
        memcpy(st->Data, &s, sizeof(s));
        st->Length = sizeof(s);
    }
    shm_unlock(&vi->rq_lock);
    shm_unlock(&vi->sq_lock);
    return r;
}

/* The saved queue replaces ours; VipxViImportRecv re-attaches it. The
 * counters come from another process of this program, not from the peer,
 * but are checked all the same: a wrong one could only make us read or
 * overwrite the wrong slot of this connection. */
VIP_RETURN shm_vi_sync_load(struct vipl_vi *cvi, const VIPX_STATE *st)
{
    struct shm_vi *vi = shm_vi(cvi);
    struct sync_state s;
    if (st->Length != sizeof(s))
        return VIP_INVALID_PARAMETER;
    memcpy(&s, st->Data, sizeof(s));
    if (s.magic != SYNC_MAGIC || s.version != SHM_VERSION || s.nposted > vi->depth ||
        s.first_sidx + s.nposted != s.rq_published)
        return VIP_INVALID_PARAMETER;
    VIP_RETURN r = VIP_SUCCESS;
    shm_lock(&vi->sq_lock);
    shm_lock(&vi->rq_lock);
    struct shm_peer *peer = vi->peer;
    if (!peer || vi->sq_head != vi->sq_tail) {
        r = VIP_INVALID_STATE;
    } else if (s.peer_posted_seen - s.peer_consumed > peer->depth) {
        r = VIP_INVALID_PARAMETER;
    } else {
        uint32_t head = vi->rq_head;
        atomic_store_explicit(&vi->rq_tail, head, memory_order_relaxed);
        atomic_store_explicit(&vi->flush_upto, head, memory_order_relaxed);
        vi->cq_reported = head;
        vi->staging_alloc = vi->staging_free = vi->staging_released = 0;
        vi->rq_published = s.rq_published;
        vi->import_next = s.first_sidx;
        vi->import_left = s.nposted;
        peer->consumed = s.peer_consumed;
        peer->posted_seen = s.peer_posted_seen;
    }
    shm_unlock(&vi->rq_lock);
    shm_unlock(&vi->sq_lock);
    return r;
}
