/*
 * hints.c - which carried sockets may have news: the peers' readiness
 * hints (VipxCQHints, docs/ARCHITECTURE.md "Readiness hints"), kept in one
 * log for the process so that every epoll set reads them, each from its
 * own cursor. A set that fell more than a log behind, or a CQ that had more
 * hints than one take holds, looks at every entry instead; so does one
 * where the provider has none.
 */
#include <pthread.h>
#include <stdint.h>

#include <sovia.h>

#include "hints.h"
#include "sock.h"

#define LOG_SIZE 4096
#define TAKE 256

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int ring[LOG_SIZE]; /* descriptors (VI cookies are fd + 1) */
static uint64_t head = LOG_SIZE; /* a cursor of 0 is a log behind: a first look at every entry */

void hints_after_fork_child(void)
{
    pthread_mutex_init(&lock, NULL);
    head += LOG_SIZE; /* the parent's hints were the parent's: look at every entry */
}

/* Takes the CQ's new hints into the log; false if it has none. */
static bool pull(void)
{
    VIP_CQ_HANDLE cq = sov_g.cq;
    void *got[TAKE];
    VIP_ULONG n = 0;
    VIP_RETURN r = cq ? VipxCQHints(cq, got, TAKE, &n) : VIP_ERROR_NOT_SUPPORTED;
    if (r != VIP_SUCCESS && r != VIP_ERROR_RESOURCE)
        return false;
    for (VIP_ULONG i = 0; i < n; i++)
        ring[head++ % LOG_SIZE] = (int)((intptr_t)got[i] - 1);
    if (r == VIP_ERROR_RESOURCE) /* some were not taken: everyone looks at everything */
        head += LOG_SIZE;
    return true;
}

bool hints_take(uint64_t *cursor, void (*fn)(void *arg, int fd), void *arg)
{
    pthread_mutex_lock(&lock);
    bool ok = pull() && head - *cursor <= LOG_SIZE;
    for (uint64_t i = *cursor; ok && i < head; i++)
        fn(arg, ring[i % LOG_SIZE]);
    *cursor = head;
    pthread_mutex_unlock(&lock);
    return ok;
}

bool hints_cover(struct sov_sock *s, int fd)
{
    struct sov_conn *c = s->conn;
    if (!c || !c->vi || c->far || c->cfg.handling != SOV_SINGLE || s->tp_waiting || s->fd != fd ||
        c->peer_mig || sov_mig_ours_moving(c))
        return false;
    void *cookie = (void *)((intptr_t)fd + 1);
    if (c->hint_cookie != cookie) {
        /* Named before the look that follows, under the log's lock so that
         * every taker of hints from now on knows the name: no hint lost. */
        pthread_mutex_lock(&lock);
        VIP_RETURN r = VipxViHintCookie(c->vi, cookie);
        pthread_mutex_unlock(&lock);
        if (r != VIP_SUCCESS)
            return false;
        c->hint_cookie = cookie;
    }
    return VipxViHinted(c->vi);
}
