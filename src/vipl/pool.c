/*
 * pool.c - handle memory.
 *
 * VIPL handles are pointers, and programs do pass destroyed handles back.
 * So a destroyed object is never returned to malloc while its NIC lives: it
 * keeps its memory with the magic number cleared (a stale handle fails the
 * magic check) and is reused by the next object of its kind.
 */
#include <stdlib.h>
#include <string.h>

#include "core.h"

struct pool_hdr {
    struct pool_hdr *next;
    char pad[VIPL_POOL_ALIGN - sizeof(struct pool_hdr *)];
};

void vipl_pool_init(struct vipl_pool *pool, size_t size)
{
    pthread_mutex_init(&pool->lock, NULL);
    pool->dead = NULL;
    pool->size = size;
}

void *vipl_pool_get(struct vipl_pool *pool)
{
    pthread_mutex_lock(&pool->lock);
    struct pool_hdr *h = pool->dead;
    if (h)
        pool->dead = h->next;
    pthread_mutex_unlock(&pool->lock);
    if (!h) {
        size_t n = sizeof(*h) + pool->size;
        h = aligned_alloc(VIPL_POOL_ALIGN, (n + VIPL_POOL_ALIGN - 1) & ~(size_t)(VIPL_POOL_ALIGN - 1));
        if (!h)
            return NULL;
    }
    memset(h + 1, 0, pool->size);
    return h + 1;
}

void vipl_pool_put(struct vipl_pool *pool, void *obj)
{
    *(uint32_t *)obj = 0; /* every core object starts with its magic */
    struct pool_hdr *h = (struct pool_hdr *)obj - 1;
    pthread_mutex_lock(&pool->lock);
    h->next = pool->dead;
    pool->dead = h;
    pthread_mutex_unlock(&pool->lock);
}

void vipl_pool_drain(struct vipl_pool *pool)
{
    while (pool->dead) {
        struct pool_hdr *h = pool->dead;
        pool->dead = h->next;
        free(h);
    }
    pthread_mutex_destroy(&pool->lock);
}
