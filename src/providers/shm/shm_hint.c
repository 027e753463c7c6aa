/*
 * shm_hint.c - readiness hints: which of a CQ's VIs a peer completed on,
 * so that a waiter over many connections looks at those rather than at
 * every VI (one cache miss each).
 *
 * A CQ keeps one page per peer process (the pid its connection socket
 * gave), never one page shared by all peers: a peer can clear only its
 * own connections' bits. Each VI connected to that process through the
 * CQ (same user, neither end inheritable) has a slot there, a bit that the
 * peer sets after each completion it writes into the VI's rx (complete_slot),
 * and that VipxCQHints takes (test-and-clear). Everything the peer writes
 * is a hint only: the taker looks at the VI's real state, so a spurious
 * bit costs a look, all bits set cost the scan there would have been
 * anyway, and a withheld bit leaves the VI to the taker's periodic look at
 * every entry (docs/ARCHITECTURE.md, "Readiness hints"). Local events (a
 * DISCONNECT, a peer's death, a nudge) set the bit from our side.
 *
 * A forked child drops the pages it inherited (the parent takes their
 * bits); its VIs from the parent have no slot. Neither have the VIs a next
 * image imports (their peers' bits go to a page nobody reads). The peer's
 * side goes with its VI to its next image (shm_inherit.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shm.h"

struct shm_hintpage {
    pid_t pid;
    int fd;
    _Atomic uint64_t *bits; /* the page; the peer writes it */
    struct shm_vi **slot;   /* slot -> VI (NULL: free); ours */
    uint32_t cap, used, end; /* slots tracked, taken, one past the highest taken */
    uint32_t lo;             /* no free slot below (a connection costs O(1), not O(slots)) */
};

static uint32_t page_slots(struct shm_cq *cq)
{
    return (uint32_t)(shm_nic(cq->core.nic)->page * 8);
}

/* Caller holds cq->lock. */
static struct shm_hintpage *page_find(struct shm_cq *cq, pid_t pid)
{
    for (uint32_t i = 0; i < cq->nhint; i++)
        if (cq->hint[i]->pid == pid)
            return cq->hint[i];
    return NULL;
}

/* A new page for peer `pid`, without the CQ lock: making or closing a
 * descriptor passes through the preload's hooks, which take an epoll
 * set's lock, and a scan holds that one while it takes the hints. */
static struct shm_hintpage *page_make(struct shm_cq *cq, pid_t pid)
{
    size_t page = shm_nic(cq->core.nic)->page;
    struct shm_hintpage *h = calloc(1, sizeof(*h));
    int fd = h ? shm_memfd("sovia-cq-hint", page) : -1;
    /* Sealed at its size (the peer maps it: shrunk, it would fault), not
     * against writing: the peer writes it. */
    void *map = fd >= 0 && shm_seal(fd, false) == 0 ? shm_map_fixed(NULL, fd, page) : NULL;
    if (!map) {
        if (fd >= 0)
            VipxFdClose(fd);
        free(h);
        return NULL;
    }
    *h = (struct shm_hintpage){.pid = pid, .fd = fd, .bits = map};
    return h;
}

/* Lists it; false if out of memory. Caller holds cq->lock. */
static bool page_add(struct shm_cq *cq, struct shm_hintpage *h)
{
    if (cq->nhint == cq->hintcap) {
        uint32_t cap = cq->hintcap ? cq->hintcap * 2 : 4;
        struct shm_hintpage **v = realloc(cq->hint, cap * sizeof(*v));
        if (!v)
            return false;
        cq->hint = v;
        cq->hintcap = cap;
    }
    cq->hint[cq->nhint++] = h;
    return true;
}

/* Without the CQ lock (see page_make). */
static void page_free(struct shm_cq *cq, struct shm_hintpage *h, bool unmap)
{
    if (!h)
        return;
    if (unmap)
        munmap((void *)h->bits, shm_nic(cq->core.nic)->page);
    VipxFdClose(h->fd);
    free(h->slot);
    free(h);
}

/* A page with no slot taken leaves the list (a peer still holding a
 * mapping only writes into memory nobody reads): returned, for the caller
 * to free once it let go of cq->lock, which it holds. */
static struct shm_hintpage *page_drop(struct shm_cq *cq, struct shm_hintpage *h)
{
    if (h->used)
        return NULL;
    for (uint32_t i = 0; i < cq->nhint; i++)
        if (cq->hint[i] == h) {
            cq->hint[i] = cq->hint[--cq->nhint];
            break;
        }
    return h;
}

/* Caller holds cq->lock; frees what it returns after (page_drop). */
static struct shm_hintpage *release_locked(struct shm_cq *cq, struct shm_vi *vi)
{
    struct shm_hintpage *h = vi->hint_page;
    __atomic_store_n(&vi->hint_on, false, __ATOMIC_RELEASE);
    if (!h)
        return NULL;
    __atomic_store_n(&vi->hint_page, NULL, __ATOMIC_RELEASE);
    if (vi->hint_slot < h->cap && h->slot[vi->hint_slot] == vi) {
        h->slot[vi->hint_slot] = NULL;
        h->used--;
        if (vi->hint_slot < h->lo)
            h->lo = vi->hint_slot;
    }
    return page_drop(cq, h);
}

void shm_hint_release(struct shm_vi *vi)
{
    struct shm_cq *cq = vi->core.recv_cq ? shm_cq(vi->core.recv_cq) : NULL;
    if (!cq || !vi->hint_page)
        return;
    pthread_mutex_lock(&cq->lock);
    struct shm_hintpage *gone = release_locked(cq, vi);
    pthread_mutex_unlock(&cq->lock);
    page_free(cq, gone, true);
}

int shm_hint_offer(struct shm_vi *vi, pid_t pid, uint32_t *slot)
{
    struct shm_cq *cq = vi->core.recv_cq ? shm_cq(vi->core.recv_cq) : NULL;
    *slot = 0;
    if (!cq || pid <= 0)
        return -1;
    pthread_mutex_lock(&cq->lock);
    struct shm_hintpage *gone = release_locked(cq, vi); /* a reconnect: a slot anew */
    struct shm_hintpage *h = page_find(cq, pid), *fresh = NULL;
    if (!h) {
        pthread_mutex_unlock(&cq->lock);
        page_free(cq, gone, true);
        gone = NULL;
        fresh = page_make(cq, pid);
        pthread_mutex_lock(&cq->lock);
        h = page_find(cq, pid); /* another connection's, made meanwhile */
        if (!h && fresh && page_add(cq, fresh)) {
            h = fresh;
            fresh = NULL;
        }
    }
    uint32_t s = h ? h->lo : 0, max = page_slots(cq);
    if (h) {
        while (s < h->cap && h->slot[s])
            s++;
        h->lo = s;
        if (s == h->cap && h->cap < max) {
            uint32_t cap = h->cap ? h->cap * 2 : 64;
            cap = cap > max ? max : cap;
            struct shm_vi **v = realloc(h->slot, cap * sizeof(*v));
            if (v) {
                memset(v + h->cap, 0, (cap - h->cap) * sizeof(*v));
                h->slot = v;
                h->cap = cap;
            }
        }
    }
    int fd = -1;
    if (h && s < h->cap) {
        h->slot[s] = vi;
        h->used++;
        if (s >= h->end)
            h->end = s + 1;
        /* A stale bit from the slot's last VI is only a look. */
        vi->hint_slot = s;
        __atomic_store_n(&vi->hint_page, h, __ATOMIC_RELEASE);
        *slot = s + 1;
        fd = h->fd;
    }
    struct shm_hintpage *empty = h && fd < 0 ? page_drop(cq, h) : NULL; /* no slot in it */
    pthread_mutex_unlock(&cq->lock);
    page_free(cq, gone, true);
    page_free(cq, fresh, true);
    page_free(cq, empty, true);
    return fd;
}

void shm_hint_confirm(struct shm_vi *vi, const struct shm_msg *peer_msg)
{
    /* The peer maps it with ours (and takes it to its next image). */
    (void)peer_msg;
    if (vi->hint_page)
        __atomic_store_n(&vi->hint_on, true, __ATOMIC_RELEASE);
}

void shm_hint_self(struct shm_vi *vi)
{
    struct shm_cq *cq = vi->core.recv_cq ? shm_cq(vi->core.recv_cq) : NULL;
    /* Without the CQ lock (the agent calls this under its own): a
     * connected VI's slot stays until it is unwatched and detached. */
    struct shm_hintpage *h = __atomic_load_n(&vi->hint_page, __ATOMIC_ACQUIRE);
    if (cq && h)
        atomic_fetch_or_explicit(&h->bits[vi->hint_slot / 64], 1ull << (vi->hint_slot % 64),
                                 memory_order_release);
}

/* Takes every page's set bits; a bit for a slot beyond `end` or a free one
 * (stale, or a hostile peer's) is dropped. */
VIP_RETURN shm_cq_hints(struct vipl_cq *ccq, void **cookies, unsigned long max,
                        unsigned long *count)
{
    struct shm_cq *cq = shm_cq(ccq);
    unsigned long n = 0;
    bool over = false;
    pthread_mutex_lock(&cq->lock);
    for (uint32_t p = 0; p < cq->nhint; p++) {
        struct shm_hintpage *h = cq->hint[p];
        for (uint32_t w = 0; w < (h->end + 63) / 64; w++) {
            if (!atomic_load_explicit(&h->bits[w], memory_order_relaxed))
                continue;
            uint64_t b = atomic_exchange_explicit(&h->bits[w], 0, memory_order_acquire);
            while (b) {
                uint32_t s = w * 64 + (uint32_t)__builtin_ctzll(b);
                b &= b - 1;
                struct shm_vi *vi = s < h->end ? h->slot[s] : NULL;
                void *cookie = vi ? __atomic_load_n(&vi->core.hint_cookie, __ATOMIC_ACQUIRE) : NULL;
                if (!cookie)
                    continue;
                if (n < max)
                    cookies[n++] = cookie;
                else
                    over = true;
            }
        }
    }
    pthread_mutex_unlock(&cq->lock);
    *count = n;
    return over ? VIP_ERROR_RESOURCE : VIP_SUCCESS;
}

bool shm_vi_hinted(struct vipl_vi *cvi)
{
    struct shm_vi *vi = shm_vi(cvi);
    return __atomic_load_n(&vi->hint_on, __ATOMIC_ACQUIRE);
}

/* In a forked child (alone): the parent's pages are the parent's to take. */
void shm_hint_forked(struct shm_cq *cq)
{
    for (uint32_t i = 0; i < cq->nr; i++) {
        cq->rvis[i]->hint_page = NULL;
        cq->rvis[i]->hint_on = false;
    }
    for (uint32_t i = 0; i < cq->nhint; i++)
        page_free(cq, cq->hint[i], true);
    cq->nhint = 0;
}

void shm_hint_destroy(struct shm_cq *cq)
{
    for (uint32_t i = 0; i < cq->nhint; i++)
        page_free(cq, cq->hint[i], true);
    free(cq->hint);
    cq->hint = NULL;
    cq->nhint = cq->hintcap = 0;
}

/* SOVIA_VIPL_HINTS=off or all makes this process the peer that withholds
 * hints, or one that sets every bit of the page at each completion: what
 * the taker's periodic look and its bounds must survive (the tests). */
enum hint_mode { HINT_SET, HINT_OFF, HINT_ALL };

static enum hint_mode hint_mode(void)
{
    static _Atomic int mode = -1;
    int m = atomic_load_explicit(&mode, memory_order_relaxed);
    if (m < 0) {
        const char *e = getenv("SOVIA_VIPL_HINTS");
        m = e && !strcmp(e, "off") ? HINT_OFF : e && !strcmp(e, "all") ? HINT_ALL : HINT_SET;
        atomic_store_explicit(&mode, m, memory_order_relaxed);
    }
    return (enum hint_mode)m;
}

void shm_hint_map(struct shm_peer *peer, struct shm_nic *snic, int *fd, uint32_t slot)
{
    enum hint_mode mode = hint_mode();
    /* None, out of the page, a file that could shrink under us (a hostile
     * offer), or withheld. */
    if (*fd >= 0 && slot != 0 && slot - 1 < snic->page * 8 && mode != HINT_OFF &&
        shm_sealed_size(*fd) == snic->page)
        peer->hint_sh = shm_shared_get(snic, fd, snic->page, true);
    if (*fd >= 0) /* not taken */
        VipxFdClose(*fd);
    *fd = -1;
    if (!peer->hint_sh)
        return;
    _Atomic uint64_t *bits = shm_shared_map(peer->hint_sh);
    if (mode == HINT_ALL) { /* every word, all bits */
        peer->hint_word = bits;
        peer->hint_mask = ~0ull;
        peer->hint_words = (uint32_t)(snic->page / 8);
        return;
    }
    peer->hint_word = &bits[(slot - 1) / 64];
    peer->hint_mask = 1ull << ((slot - 1) % 64);
    peer->hint_words = 1;
}
