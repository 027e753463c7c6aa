/*
 * table.c - from descriptor to socket.
 *
 * The table is two-level (chunks of 1024 slots) and read without a lock.
 * Socket structures are recycled, never freed: a lookup that races with
 * sov_close finds valid memory, takes the socket's lock and sees that the
 * socket is dead or belongs to another descriptor, just as the kernel lets
 * a racing close-and-reopen hand a thread the new file.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "sock.h"

#define CHUNK_BITS 10
#define CHUNK (1u << CHUNK_BITS)
#define NCHUNKS 1024

static _Atomic(_Atomic(struct sov_sock *) *) chunks[NCHUNKS];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sov_sock *pool; /* recycled sockets, linked through next_closing */

__thread volatile unsigned sov_locks_held;
__thread pid_t sov_tid_cache;
__thread _Atomic uint64_t sov_signals_deferred;

void sov_raise_deferred(void)
{
    uint64_t pending = atomic_exchange_explicit(&sov_signals_deferred, 0, memory_order_relaxed);
    for (int sig = 1; pending; sig++, pending >>= 1)
        if (pending & 1)
            pthread_kill(pthread_self(), sig);
}

void sov_sock_salvage(struct sov_sock *s)
{
    if (s->conn && !s->conn->reset)
        sov_conn_abort(s->conn);
}

struct sov_sock *sov_lookup(int fd)
{
    if (fd < 0 || (unsigned)fd >= CHUNK * NCHUNKS)
        return NULL;
    _Atomic(struct sov_sock *) *chunk =
        atomic_load_explicit(&chunks[(unsigned)fd >> CHUNK_BITS], memory_order_acquire);
    return chunk ? atomic_load_explicit(&chunk[(unsigned)fd & (CHUNK - 1)], memory_order_acquire)
                 : NULL;
}

struct sov_sock *sov_acquire(int fd)
{
    struct sov_sock *s = sov_lookup(fd);
    if (s) {
        sov_sock_lock(s);
        if (!s->dead && sov_lookup(fd) == s)
            return s;
        sov_sock_unlock(s);
    }
    errno = fcntl(fd, F_GETFD) < 0 ? EBADF : ENOTSOCK;
    return NULL;
}

/* One past the largest descriptor the table can hold now (for walking it). */
int sov_table_limit(void)
{
    unsigned c = NCHUNKS;
    while (c > 0 && !atomic_load(&chunks[c - 1]))
        c--;
    return (int)(c * CHUNK);
}

int sov_table_insert(struct sov_sock *s)
{
    return sov_table_set(s->fd, s);
}

int sov_table_set(int fd, struct sov_sock *s)
{
    if (fd < 0 || (unsigned)fd >= CHUNK * NCHUNKS)
        return -EMFILE;
    pthread_mutex_lock(&table_lock);
    unsigned c = (unsigned)fd >> CHUNK_BITS;
    _Atomic(struct sov_sock *) *chunk = atomic_load(&chunks[c]);
    if (!chunk) {
        chunk = calloc(CHUNK, sizeof(*chunk));
        if (!chunk) {
            pthread_mutex_unlock(&table_lock);
            return -ENOMEM;
        }
        atomic_store_explicit(&chunks[c], chunk, memory_order_release);
    }
    atomic_store_explicit(&chunk[(unsigned)fd & (CHUNK - 1)], s, memory_order_release);
    pthread_mutex_unlock(&table_lock);
    return 0;
}

bool sov_table_clear(int fd, struct sov_sock *s)
{
    bool found = false;
    pthread_mutex_lock(&table_lock);
    _Atomic(struct sov_sock *) *chunk =
        fd >= 0 && (unsigned)fd < CHUNK * NCHUNKS ? atomic_load(&chunks[(unsigned)fd >> CHUNK_BITS])
                                                  : NULL;
    if (chunk && atomic_load(&chunk[(unsigned)fd & (CHUNK - 1)]) == s) {
        atomic_store(&chunk[(unsigned)fd & (CHUNK - 1)], NULL);
        found = true;
    }
    pthread_mutex_unlock(&table_lock);
    return found;
}

/* Unpublishes `s` (caller holds its lock and marks it dead). */
void sov_table_remove(struct sov_sock *s)
{
    sov_table_clear(s->fd, s);
}

/* A placeholder descriptor: unique in the process, harmless if misused. */
static int placeholder_fd(bool cloexec)
{
    int flags = O_RDWR | (cloexec ? O_CLOEXEC : 0);
    int fd = open("/dev/null", flags);
    if (fd < 0 && errno == EMFILE) {
        /* Many connections: use the hard limit, as servers do. */
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
                fd = open("/dev/null", flags);
        }
    }
    return fd;
}

struct sov_sock *sov_sock_new(int domain, bool nonblock, bool cloexec)
{
    int fd = placeholder_fd(cloexec);
    if (fd < 0)
        return NULL;
    struct sov_sock *s = sov_sock_adopt(fd, domain, nonblock);
    if (!s)
        close(fd);
    return s;
}

struct sov_sock *sov_sock_adopt(int fd, int domain, bool nonblock)
{
    pthread_mutex_lock(&table_lock);
    struct sov_sock *s = pool;
    if (s)
        pool = s->next_closing;
    pthread_mutex_unlock(&table_lock);
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s) {
            errno = ENOMEM;
            return NULL;
        }
        pthread_mutex_init(&s->wait_lock, NULL);
        pthread_cond_init(&s->cond, NULL);
    }
    sov_sock_lock(s);
    s->fd = fd;
    s->dead = s->closing = s->tp_client = false;
    s->kind = SK_NEW;
    s->domain = domain;
    s->nonblock = nonblock;
    s->rd_shut = s->app_closed = s->bound = s->transparent = s->tp_waiting = false;
    s->fd_kept = false;
    s->in_pairing = false;
    s->nfds = 1;
    s->nodelay = s->reuseaddr = s->keepalive = s->oobinline = s->owned = false;
    s->migrating = false;
    s->linger = (struct linger){0, 0};
    s->sndbuf = 212992;
    s->so_error = 0;
    s->port_fd = -1;
    s->lst = NULL;
    s->conn = NULL;
    s->next_closing = NULL;
    s->peer_len = 0;
    s->local = (struct sockaddr_storage){.ss_family = (sa_family_t)domain};
    s->local_len = domain == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    pthread_mutex_lock(&sov_g.lock);
    s->cfg = sov_g.cfg;
    pthread_mutex_unlock(&sov_g.lock);
    sov_sock_unlock(s);
    return s;
}

/* Back to the pool; the placeholder and the port are released by the caller. */
void sov_sock_free(struct sov_sock *s)
{
    if (s->fd_kept) { /* the kernel connection's FIN, if not sent yet */
        s->fd_kept = false;
        VipxFdClose(s->fd);
    }
    pthread_mutex_lock(&table_lock);
    s->next_closing = pool;
    pool = s;
    pthread_mutex_unlock(&table_lock);
}

/* Held across fork() by sov_before_fork, so the child's table is whole. */
void sov_table_fork_lock(bool lock)
{
    if (lock)
        pthread_mutex_lock(&table_lock);
    else
        pthread_mutex_unlock(&table_lock);
}
