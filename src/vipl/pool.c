/*
 * pool.c - handle memory.
 *
 * VIPL handles are pointers, and programs do pass destroyed handles back.
 * So a destroyed object is never returned to malloc while its NIC lives: it
 * keeps its memory with the magic number cleared (a stale handle fails the
 * magic check) and is reused by the next object of its kind.
 *
 * Every object is also on the pool's `all` list, so a live object stays
 * reachable from the NIC even when only a thread's stack points at it: in
 * a forked child, whose copy of such a thread does not exist, a leak
 * checker would otherwise report it.
 */
#include <stdlib.h>
#include <string.h>

#include "core.h"

void vipl_pool_init(struct vipl_pool *pool, size_t size)
{
    pthread_mutex_init(&pool->lock, NULL);
    pool->dead = NULL;
    pool->all = NULL;
    pool->size = size;
}

void *vipl_pool_get(struct vipl_pool *pool)
{
    pthread_mutex_lock(&pool->lock);
    struct vipl_pool_obj *h = pool->dead;
    if (h)
        pool->dead = h->next;
    pthread_mutex_unlock(&pool->lock);
    if (!h) {
        size_t n = sizeof(*h) + pool->size;
        h = aligned_alloc(VIPL_POOL_ALIGN, (n + VIPL_POOL_ALIGN - 1) & ~(size_t)(VIPL_POOL_ALIGN - 1));
        if (!h)
            return NULL;
        pthread_mutex_lock(&pool->lock);
        h->all = pool->all;
        pool->all = h;
        pthread_mutex_unlock(&pool->lock);
    }
    memset(h + 1, 0, pool->size);
    return h + 1;
}

void vipl_pool_put(struct vipl_pool *pool, void *obj)
{
    *(uint32_t *)obj = 0; /* every core object starts with its magic */
    struct vipl_pool_obj *h = (struct vipl_pool_obj *)obj - 1;
    pthread_mutex_lock(&pool->lock);
    h->next = pool->dead;
    pool->dead = h;
    pthread_mutex_unlock(&pool->lock);
}

void vipl_pool_drain(struct vipl_pool *pool)
{
    while (pool->dead) {
        struct vipl_pool_obj *h = pool->dead;
        pool->dead = h->next;
        free(h);
    }
    pool->all = NULL; /* what is still live was leaked by its owner */
    pthread_mutex_destroy(&pool->lock);
}
