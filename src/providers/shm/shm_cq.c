/*
 * shm_cq.c - completion queues.
 *
 * Send completions happen inside VipPostSend, in this process, so they are
 * queued here in order. Receive completions are written by peers into each
 * VI's own rx segment; the CQ finds them by visiting its VIs round-robin, so
 * no peer ever writes memory that other connections share (a hostile peer
 * can only disturb its own connection). The cost is a scan of the attached
 * VIs per empty poll; see ARCHITECTURE.md for the scaling note.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shm.h"

/* The armed page: made new (fd < 0), or an inherited one mapped again. */
int shm_cq_armed_page(struct shm_cq *cq, int fd)
{
    size_t page = shm_nic(cq->core.nic)->page;
    bool fresh = fd < 0;
    if (fresh && (fd = shm_memfd("sovia-cq-armed", page)) < 0)
        return fd;
    void *p = shm_map_fixed(NULL, fd, page);
    if (!p || (fresh && shm_seal(fd, !cq->inheritable) != 0)) {
        if (p)
            munmap(p, page);
        VipxFdClose(fd);
        return -1;
    }
    cq->armed = p;
    cq->armed_fd = fd;
    return 0;
}

/* ---- The process's CQs across fork ------------------------------------------
 *
 * A forked child gets copies of its parent's CQs, wake-up socket and armed
 * page included: asleep on them, parent and child would take each other's
 * wake-ups. So each CQ is made new in the child (shm_cq_forked): its own
 * wake-up socket and armed page, for the connections it makes from now on,
 * and, for every VI it holds from the parent, a slot in that VI's holder
 * table (shm_layout.h), through which the peer wakes the child too. This is
 * done in the fork handler, while the child has one thread: nothing else
 * of ours uses the descriptors it replaces. */

static pthread_mutex_t all_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shm_cq *all_cqs;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void before_fork(void)
{
    pthread_mutex_lock(&all_lock);
    for (struct shm_cq *cq = all_cqs; cq; cq = cq->next_all)
        pthread_mutex_lock(&cq->lock);
}

static void after_fork_parent(void)
{
    for (struct shm_cq *cq = all_cqs; cq; cq = cq->next_all)
        pthread_mutex_unlock(&cq->lock);
    pthread_mutex_unlock(&all_lock);
}

static void holder_join(struct shm_cq *cq, struct shm_vi *vi);

static void rebirth(struct shm_cq *cq)
{
    int rx, tx;
    uint64_t id;
    int old_fd = cq->armed_fd;
    _Atomic uint32_t *old = cq->armed;
    if (shm_wake_sockets(&rx, &tx, &id) != 0 || shm_cq_armed_page(cq, -1) != 0) {
        if (rx >= 0) {
            VipxFdClose(rx);
            VipxFdClose(tx);
        }
        cq->lossy = true; /* shares the parent's: sleep in slices */
        return;
    }
    munmap((void *)old, shm_nic(cq->core.nic)->page);
    VipxFdClose(old_fd);
    VipxFdClose(cq->wake_rx);
    VipxFdClose(cq->wake_tx);
    cq->wake_rx = rx;
    cq->wake_tx = tx;
    cq->wake_id = id;
    /* The parent's holder slots and sleepers are the parent's, and so is a
     * relay VI's own armed word: the child is woken through its slot. */
    cq->ns = 0;
    cq->nrelay = 0;
    cq->narmed = 0;
    shm_hint_forked(cq);
    for (uint32_t i = 0; i < cq->nr; i++) {
        cq->rvis[i]->holder = 0;
        cq->rvis[i]->relay = false;
        holder_join(cq, cq->rvis[i]);
    }
}

static void after_fork_child(void)
{
    for (struct shm_cq *cq = all_cqs; cq; cq = cq->next_all) {
        pthread_mutex_init(&cq->lock, NULL);
        rebirth(cq);
    }
    pthread_mutex_init(&all_lock, NULL);
}

static void register_fork(void)
{
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

VIP_RETURN shm_create_cq(struct vipl_cq *ccq)
{
    struct shm_cq *cq = shm_cq(ccq);
    pthread_mutex_init(&cq->lock, NULL);
    cq->cap = (uint32_t)ccq->entries;
    cq->armed_fd = cq->wake_rx = cq->wake_tx = -1;
    cq->inheritable = ccq->flags & VIPX_CQ_INHERITABLE;
    cq->send_ring = calloc(cq->cap, sizeof(*cq->send_ring));
    if (!cq->send_ring) {
        pthread_mutex_destroy(&cq->lock);
        return VIP_ERROR_RESOURCE;
    }
    if (shm_wake_sockets(&cq->wake_rx, &cq->wake_tx, &cq->wake_id) != 0 ||
        shm_cq_armed_page(cq, -1) != 0) {
        shm_destroy_cq(ccq);
        return VIP_ERROR_RESOURCE;
    }
    shm_cq_list(cq);
    /* Made with the first CQ rather than at the first holder's wake-up:
     * a process's descriptors stay what they were after its setup. */
    shm_ring_socket();
    return VIP_SUCCESS;
}

void shm_cq_list(struct shm_cq *cq)
{
    pthread_once(&fork_once, register_fork);
    pthread_mutex_lock(&all_lock);
    cq->next_all = all_cqs;
    all_cqs = cq;
    pthread_mutex_unlock(&all_lock);
}

void shm_destroy_cq(struct vipl_cq *ccq)
{
    struct shm_cq *cq = shm_cq(ccq);
    size_t page = shm_nic(ccq->nic)->page;
    pthread_mutex_lock(&all_lock);
    for (struct shm_cq **p = &all_cqs; *p; p = &(*p)->next_all)
        if (*p == cq) {
            *p = cq->next_all;
            break;
        }
    pthread_mutex_unlock(&all_lock);
    if (cq->armed)
        munmap(cq->armed, page);
    if (cq->armed_fd >= 0)
        VipxFdClose(cq->armed_fd);
    if (cq->wake_rx >= 0)
        VipxFdClose(cq->wake_rx);
    if (cq->wake_tx >= 0)
        VipxFdClose(cq->wake_tx);
    shm_hint_destroy(cq);
    free(cq->send_ring);
    free(cq->rvis);
    free(cq->svis);
    pthread_mutex_destroy(&cq->lock);
}

/* Completions the CQ holds and has not reported yet: queued sends plus
 * finished receives of every attached VI. Caller holds the CQ lock. */
static uint64_t pending_entries(struct shm_cq *cq)
{
    uint64_t n = cq->tail - cq->head;
    for (uint32_t i = 0; i < cq->nr; i++) {
        struct shm_vi *v = cq->rvis[i];
        for (uint32_t k = 0; k < v->depth && shm_vi_recv_ready(v, v->cq_reported + k); k++)
            n++;
    }
    return n;
}

VIP_RETURN shm_resize_cq(struct vipl_cq *ccq, VIP_ULONG entries)
{
    struct shm_cq *cq = shm_cq(ccq);
    pthread_mutex_lock(&cq->lock);
    uint32_t pending = cq->tail - cq->head;
    if (entries < pending_entries(cq)) {
        pthread_mutex_unlock(&cq->lock);
        return VIP_INVALID_PARAMETER;
    }
    struct shm_vi **ring = calloc(entries, sizeof(*ring));
    if (!ring) {
        pthread_mutex_unlock(&cq->lock);
        return VIP_ERROR_RESOURCE;
    }
    for (uint32_t i = 0; i < pending; i++)
        ring[i] = cq->send_ring[(cq->head + i) % cq->cap];
    free(cq->send_ring);
    cq->send_ring = ring;
    cq->cap = (uint32_t)entries;
    cq->head = 0;
    cq->tail = pending;
    ccq->entries = entries;
    pthread_mutex_unlock(&cq->lock);
    return VIP_SUCCESS;
}

int shm_cq_attach(struct shm_cq *cq, struct shm_vi *vi)
{
    pthread_mutex_lock(&cq->lock);
    if (cq->nr == cq->rcap) {
        uint32_t cap = cq->rcap ? cq->rcap * 2 : 8;
        struct shm_vi **v = realloc(cq->rvis, cap * sizeof(*v));
        if (!v) {
            pthread_mutex_unlock(&cq->lock);
            return -1;
        }
        cq->rvis = v;
        cq->rcap = cap;
    }
    cq->rvis[cq->nr++] = vi;
    pthread_mutex_unlock(&cq->lock);
    return 0;
}

/*
 * A VI connected to another user (SHM_WAKE_NAMED) must not give it the
 * CQ's armed page, which the CQ's other connections share: its peer reads
 * the VI's own recv_armed instead, which follows the CQ's armed count from
 * now on (on: true) or no longer (false), and wakes the CQ by its socket's
 * name. Turned on before the peer can complete anything (before our
 * REQUEST or ACCEPT leaves); the count copied is the one shm_cq_arm_holders
 * keeps under the same lock, so it is exact.
 */
void shm_cq_relay(struct shm_cq *cq, struct shm_vi *vi, bool on)
{
    pthread_mutex_lock(&cq->lock);
    if (on && !vi->relay) {
        atomic_store(&vi->ctl->live.recv_armed, cq->narmed);
        cq->nrelay++;
    } else if (!on && vi->relay) {
        cq->nrelay--;
    }
    vi->relay = on;
    pthread_mutex_unlock(&cq->lock);
}

void shm_cq_detach(struct shm_cq *cq, struct shm_vi *vi)
{
    shm_holder_leave(vi);
    if (&cq->core == vi->core.recv_cq)
        shm_hint_release(vi);
    pthread_mutex_lock(&cq->lock);
    if (vi->relay) {
        vi->relay = false;
        cq->nrelay--;
    }
    for (uint32_t i = 0; i < cq->nr; i++)
        if (cq->rvis[i] == vi) {
            cq->rvis[i] = cq->rvis[--cq->nr];
            break;
        }
    /* Pending send entries of this VI would name a dead handle. */
    uint32_t kept = cq->head;
    for (uint32_t i = cq->head; i != cq->tail; i++)
        if (cq->send_ring[i % cq->cap] != vi)
            cq->send_ring[kept++ % cq->cap] = cq->send_ring[i % cq->cap];
    cq->tail = kept;
    pthread_mutex_unlock(&cq->lock);
}

bool shm_cq_push_send(struct shm_cq *cq, struct shm_vi *vi)
{
    pthread_mutex_lock(&cq->lock);
    bool ok = cq->tail - cq->head < cq->cap;
    if (ok) {
        cq->send_ring[cq->tail % cq->cap] = vi;
        cq->tail++;
    }
    pthread_mutex_unlock(&cq->lock);
    shm_wake_local(shm_wake_of(cq, VIPL_CQ));
    return ok;
}

VIP_RETURN shm_cq_done(struct vipl_cq *ccq, struct vipl_vi **vi, VIP_BOOLEAN *recvq)
{
    struct shm_cq *cq = shm_cq(ccq);
    pthread_mutex_lock(&cq->lock);
    if (cq->head != cq->tail) {
        *vi = &cq->send_ring[cq->head % cq->cap]->core;
        cq->head++;
        *recvq = VIP_FALSE;
        pthread_mutex_unlock(&cq->lock);
        return VIP_SUCCESS;
    }
    for (uint32_t k = 0; k < cq->nr; k++) {
        uint32_t i = (cq->scan + k) % cq->nr;
        struct shm_vi *v = cq->rvis[i];
        if (shm_vi_recv_ready(v, v->cq_reported)) {
            v->cq_reported++;
            cq->scan = i + 1;
            *vi = &v->core;
            *recvq = VIP_TRUE;
            pthread_mutex_unlock(&cq->lock);
            return VIP_SUCCESS;
        }
    }
    pthread_mutex_unlock(&cq->lock);
    return VIP_NOT_DONE;
}

int shm_cq_wait_fd(struct vipl_cq *ccq)
{
    return shm_cq(ccq)->wake_rx;
}

/* An inheritable CQ's armed page is not sealed against peers (a new image
 * must write it again), so a hostile one could zero it and make the
 * process's other peers skip their wake-ups: such a loss costs at most
 * 100 ms. A CQ short of holder slots shares a wake-up: 1 ms. */
int shm_cq_sleep_bound(struct vipl_cq *ccq)
{
    struct shm_cq *cq = shm_cq(ccq);
    return cq->lossy ? 1 : cq->inheritable ? 100 : -1;
}

/* ---- Holder slots ------------------------------------------------------------ */

static bool pid_gone(pid_t pid)
{
    return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

/* Room for one more VI held through a slot. Caller holds cq->lock. */
static bool svis_room(struct shm_cq *cq)
{
    if (cq->ns < cq->scap)
        return true;
    uint32_t cap = cq->scap ? cq->scap * 2 : 8;
    struct shm_vi **v = realloc(cq->svis, cap * sizeof(*v));
    if (!v)
        return false;
    cq->svis = v;
    cq->scap = cap;
    return true;
}

/* Caller holds cq->lock (or is the child of a fork, alone). */
static void holder_join(struct shm_cq *cq, struct shm_vi *vi)
{
    if (!vi->ctl || !vi->peer)
        return;
    if (!svis_room(cq)) {
        cq->lossy = true;
        return;
    }
    struct shm_holder *h = vi->ctl->live.holder;
    for (int k = 0; k < SHM_HOLDERS; k++) {
        uint64_t cur = atomic_load(&h[k].id);
        /* A slot whose holder died without a word is free again. */
        if (cur && !pid_gone(atomic_load(&h[k].pid)))
            continue;
        if (!atomic_compare_exchange_strong(&h[k].id, &cur, cq->wake_id))
            continue;
        atomic_store(&h[k].armed, 0);
        atomic_store(&h[k].pid, getpid());
        vi->holder = (uint8_t)(k + 1);
        cq->svis[cq->ns++] = vi;
        return;
    }
    cq->lossy = true; /* more holders than slots: this one sleeps in slices */
}

void shm_holder_leave(struct shm_vi *vi)
{
    if (!vi->holder)
        return;
    struct shm_holder *h = &vi->ctl->live.holder[vi->holder - 1];
    vi->holder = 0;
    uint64_t mine = 0;
    struct shm_cq *cq = vi->core.recv_cq ? shm_cq(vi->core.recv_cq) : NULL;
    if (cq) {
        pthread_mutex_lock(&cq->lock);
        mine = cq->wake_id;
        for (uint32_t i = 0; i < cq->ns; i++)
            if (cq->svis[i] == vi) {
                cq->svis[i] = cq->svis[--cq->ns];
                break;
            }
        pthread_mutex_unlock(&cq->lock);
    }
    if (mine && atomic_load(&h->id) == mine) {
        atomic_store(&h->armed, 0);
        atomic_store(&h->pid, 0);
        atomic_store(&h->id, 0);
    }
}

void shm_holder_find(struct shm_cq *cq, struct shm_vi *vi)
{
    struct shm_holder *h = vi->ctl->live.holder;
    pthread_mutex_lock(&cq->lock);
    for (int k = 0; k < SHM_HOLDERS && !vi->holder; k++)
        if (atomic_load(&h[k].id) == cq->wake_id) {
            if (!svis_room(cq)) {
                cq->lossy = true;
                break;
            }
            vi->holder = (uint8_t)(k + 1);
            cq->svis[cq->ns++] = vi;
        }
    pthread_mutex_unlock(&cq->lock);
}

/* One count more or less, never below zero (a peer may write the word). */
static void arm_word(_Atomic uint32_t *a, int delta)
{
    if (delta > 0) { /* the arming first, as in shm_wait_prepare */
        atomic_fetch_add(&a[SHM_CQ_EPOCH], 1);
        atomic_fetch_add(a, 1);
        return;
    }
    uint32_t v = atomic_load(a);
    while (v && !atomic_compare_exchange_weak(a, &v, v - 1))
        ;
}

void shm_cq_arm_holders(struct shm_cq *cq, int delta)
{
    pthread_mutex_lock(&cq->lock);
    if (delta > 0 || cq->narmed)
        cq->narmed += delta > 0 ? 1 : -1;
    /* The armed words of VIs connected to another user (shm_cq_relay). */
    for (uint32_t i = 0, n = cq->nrelay; i < cq->nr && n; i++)
        if (cq->rvis[i]->relay) {
            arm_word(&cq->rvis[i]->ctl->live.recv_armed, delta);
            n--;
        }
    for (uint32_t i = 0; i < cq->ns; i++) {
        struct shm_holder *h = &cq->svis[i]->ctl->live.holder[cq->svis[i]->holder - 1];
        if (delta > 0) {
            atomic_fetch_add(&h->armed, 1);
            continue;
        }
        uint32_t a = atomic_load(&h->armed);
        while (a && !atomic_compare_exchange_weak(&h->armed, &a, a - 1))
            ;
    }
    pthread_mutex_unlock(&cq->lock);
}
