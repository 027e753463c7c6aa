/*
 * shm_shared.c - what a peer process gives every one of its connections
 * alike, held once per NIC: its completion queue's armed page (mapped
 * read-only) and wake-up socket. A peer sends them again with each REQUEST
 * or ACCEPT (the connection's own descriptors ride in the same message);
 * before, each connection kept its own descriptor of each and its own
 * mapping of the page, two descriptors and a mapping per connection for
 * the same two objects. Entries are found by the file's identity (device
 * and inode, from fstat), counted per connection, and let go with the last:
 * their descriptors are pinned (fdguard.c), so that no other path closes
 * them (an exec's export names one in every connection that uses it).
 *
 * Only for the socket wake mode, which is never used between users
 * (shm_cred.c): the objects are our own user's, and one connection's peer
 * can name no object here it does not hold itself.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "shm.h"

struct shm_shared {
    dev_t dev;
    ino_t ino;
    int fd;
    void *map; /* NULL for a socket */
    size_t len;
    bool writable;
    unsigned refs;
};

void shm_shared_init(struct shm_nic *snic)
{
    pthread_mutex_init(&snic->shared_lock, NULL);
}

struct shm_shared *shm_shared_get(struct shm_nic *snic, int *fd, size_t map_len, bool writable)
{
    struct stat st;
    struct shm_shared *e = NULL;

    if (fstat(*fd, &st) != 0)
        return NULL;
    pthread_mutex_lock(&snic->shared_lock);
    for (size_t i = 0; i < snic->nshared; i++) {
        struct shm_shared *o = snic->shared[i];
        if (o->dev == st.st_dev && o->ino == st.st_ino && o->len == map_len &&
            o->writable == writable) {
            e = o;
            break;
        }
    }
    if (e) {
        /* The same number again (exec hands one descriptor to every
         * connection that used it): already ours. Closed after the lock:
         * a close may wait (2 ms at most) for the program's closes in
         * flight (fdguard.c), and one of those may be letting go of an
         * entry (shm_shared_put). */
        int dup = *fd != e->fd ? *fd : -1;
        e->refs++;
        *fd = -1;
        pthread_mutex_unlock(&snic->shared_lock);
        if (dup >= 0)
            VipxFdClose(dup);
        return e;
    }
    if (snic->nshared == snic->capshared) {
        size_t cap = snic->capshared ? snic->capshared * 2 : 8;
        struct shm_shared **n = realloc(snic->shared, cap * sizeof(*n));
        if (!n)
            goto fail;
        snic->shared = n;
        snic->capshared = cap;
    }
    e = calloc(1, sizeof(*e));
    if (!e || vipl_fd_pin(*fd, true) != 0) {
        free(e);
        goto fail;
    }
    *e = (struct shm_shared){.dev = st.st_dev, .ino = st.st_ino, .fd = *fd, .len = map_len,
                             .writable = writable, .refs = 1};
    if (map_len) {
        e->map = mmap(NULL, map_len, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, *fd, 0);
        if (e->map == MAP_FAILED) {
            vipl_fd_pin(*fd, false);
            free(e);
            goto fail;
        }
    }
    snic->shared[snic->nshared++] = e;
    *fd = -1;
    pthread_mutex_unlock(&snic->shared_lock);
    return e;
fail:
    pthread_mutex_unlock(&snic->shared_lock);
    return NULL;
}

int shm_shared_fd(const struct shm_shared *e)
{
    return e->fd;
}

void *shm_shared_map(const struct shm_shared *e)
{
    return e->map;
}

void shm_shared_put(struct shm_nic *snic, struct shm_shared *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&snic->shared_lock);
    if (--e->refs == 0) {
        for (size_t i = 0; i < snic->nshared; i++)
            if (snic->shared[i] == e) {
                snic->shared[i] = snic->shared[--snic->nshared];
                break;
            }
        if (e->map)
            munmap(e->map, e->len);
        vipl_fd_pin(e->fd, false);
        VipxFdClose(e->fd);
        free(e);
    }
    pthread_mutex_unlock(&snic->shared_lock);
}

void shm_shared_after_fork(struct shm_nic *snic)
{
    /* The child holds the same connections, descriptors and mappings. */
    pthread_mutex_init(&snic->shared_lock, NULL);
}

void shm_shared_destroy(struct shm_nic *snic)
{
    pthread_mutex_destroy(&snic->shared_lock);
    free(snic->shared);
}
