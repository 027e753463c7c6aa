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

VIP_RETURN shm_create_cq(struct vipl_cq *ccq)
{
    struct shm_cq *cq = shm_cq(ccq);
    pthread_mutex_init(&cq->lock, NULL);
    cq->cap = (uint32_t)ccq->entries;
    cq->armed_fd = cq->wake_rx = cq->wake_tx = -1;
    cq->inheritable = ccq->flags & VIPX_CQ_INHERITABLE;
    int sv[2];
    cq->send_ring = calloc(cq->cap, sizeof(*cq->send_ring));
    if (!cq->send_ring) {
        pthread_mutex_destroy(&cq->lock);
        return VIP_ERROR_RESOURCE;
    }
    if (vipl_fd_socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0) {
        cq->wake_rx = sv[0];
        cq->wake_tx = sv[1];
    }
    if (cq->wake_rx < 0 || shm_cq_armed_page(cq, -1) != 0) {
        shm_destroy_cq(ccq);
        return VIP_ERROR_RESOURCE;
    }
    return VIP_SUCCESS;
}

void shm_destroy_cq(struct vipl_cq *ccq)
{
    struct shm_cq *cq = shm_cq(ccq);
    size_t page = shm_nic(ccq->nic)->page;
    if (cq->armed)
        munmap(cq->armed, page);
    if (cq->armed_fd >= 0)
        VipxFdClose(cq->armed_fd);
    if (cq->wake_rx >= 0)
        VipxFdClose(cq->wake_rx);
    if (cq->wake_tx >= 0)
        VipxFdClose(cq->wake_tx);
    free(cq->send_ring);
    free(cq->rvis);
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

void shm_cq_detach(struct shm_cq *cq, struct shm_vi *vi)
{
    pthread_mutex_lock(&cq->lock);
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
