/*
 * fdguard.c - the library's own descriptors: registered, kept at high
 * numbers, and safe from an application's stale close.
 *
 * Programs close a descriptor twice more often than one would think (tnftp
 * closes every data connection through fclose() and then close()). With
 * kernel sockets the second close() is harmless: it says EBADF. Under sovia
 * a background thread may have been handed that number in between (a
 * segment, a connection socket), and the stale close takes it away; later
 * the thread closes "its" number, now the program's next file. So:
 *
 * - every descriptor the library creates is created inside a bracket
 *   (VipxFdCreateBegin/End), moved to a high number (VipxFdAdopt: clear of
 *   the low numbers programs reuse) and registered;
 * - the preload's close() asks VipxFdAppCloseBegin, which waits for brackets
 *   in flight (so no number changes hands between its check and its close)
 *   and answers true for a registered descriptor: close() then says EBADF,
 *   as it would have without sovia.
 *
 * Both sides count themselves in before looking at the other (sequentially
 * consistent atomics), and both waits are bounded, so neither can stall the
 * other for long (a close() that lingers, a signal handler that closes in
 * the middle of its own thread's bracket).
 *
 * Some received descriptors are another process's sockets (a connect
 * token: a client's kernel socket, sent with its VI request). A forked
 * child closes its copies at once, wherever the parent held them (a
 * listener's queue, a request being accepted, a claim being served):
 * a copy in a child that never uses it would hold that connection open,
 * and the client's close() would send no FIN (tests/preload/prefork.c,
 * worker_gave_up). Linux has no close-on-fork flag: these are marked here.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

#define CHUNK_BITS 4096u /* descriptors per lazily allocated chunk */
#define CHUNKS 256u      /* so descriptors below 2^20 are tracked */
#define HIGH_BASE_MAX 4096
#define WAIT_BOUND_NS 2000000u

static _Atomic(_Atomic uint64_t *) chunks[CHUNKS];
static _Atomic(_Atomic uint64_t *) fork_chunks[CHUNKS]; /* closed in a forked child */
static atomic_int own_count; /* registered descriptors */
static atomic_int creating;    /* brackets in flight */
static atomic_int app_closing; /* application closes in flight */
static atomic_int receiving;   /* receives of descriptors to mark for fork */
static _Thread_local int bracket_depth;

static _Atomic uint64_t *chunk_in(_Atomic(_Atomic uint64_t *) *table, int fd, bool make)
{
    if (fd < 0 || (unsigned)fd >= CHUNK_BITS * CHUNKS)
        return NULL;
    _Atomic(_Atomic uint64_t *) *slot = &table[(unsigned)fd / CHUNK_BITS];
    _Atomic uint64_t *c = atomic_load(slot);
    if (c || !make)
        return c;
    /* No lock: a fork while another thread held one here left it held in
     * the child, whose first receive of a descriptor above 4095 then hung
     * its connection thread (tests/preload/fallback.c, child_accepts_*,
     * about 1 run in 20). The loser of a race frees its copy. */
    _Atomic uint64_t *fresh = calloc(CHUNK_BITS / 64, sizeof(*fresh));
    if (!fresh)
        return NULL;
    if (atomic_compare_exchange_strong(slot, &c, fresh))
        return fresh;
    free(fresh);
    return c;
}

static _Atomic uint64_t *chunk_of(int fd, bool make)
{
    return chunk_in(chunks, fd, make);
}

static void mark(int fd, bool own)
{
    _Atomic uint64_t *c = chunk_of(fd, own);
    if (!c)
        return;
    unsigned bit = (unsigned)fd % CHUNK_BITS;
    uint64_t m = (uint64_t)1 << (bit % 64);
    if (own) {
        if (!(atomic_fetch_or(&c[bit / 64], m) & m))
            atomic_fetch_add(&own_count, 1);
        return;
    }
    if (atomic_fetch_and(&c[bit / 64], ~m) & m)
        atomic_fetch_sub(&own_count, 1);
    _Atomic uint64_t *f = chunk_in(fork_chunks, fd, false);
    if (f)
        atomic_fetch_and(&f[bit / 64], ~m);
}

/* An own descriptor a forked child closes (see the top). */
static void mark_fork_close(int fd)
{
    _Atomic uint64_t *f = chunk_in(fork_chunks, fd, true);
    unsigned bit = (unsigned)fd % CHUNK_BITS;
    if (f)
        atomic_fetch_or(&f[bit / 64], (uint64_t)1 << (bit % 64));
}

void vipl_fd_fork_close(int fd)
{
    if (fd >= 0)
        mark_fork_close(fd);
}

void vipl_fd_fork_keep(int fd)
{
    _Atomic uint64_t *f = fd >= 0 ? chunk_in(fork_chunks, fd, false) : NULL;
    unsigned bit = (unsigned)fd % CHUNK_BITS;
    if (f)
        atomic_fetch_and(&f[bit / 64], ~((uint64_t)1 << (bit % 64)));
}

VIPL_EXPORT VIP_BOOLEAN VipxFdIsOwn(int Fd)
{
    _Atomic uint64_t *c = chunk_of(Fd, false);
    unsigned bit = (unsigned)Fd % CHUNK_BITS;
    return c && (atomic_load(&c[bit / 64]) >> (bit % 64) & 1);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Until *count is zero, or for WAIT_BOUND_NS at most. */
static void wait_for_none(atomic_int *count)
{
    uint64_t end = 0;
    for (unsigned spins = 0; atomic_load(count) > 0; spins++) {
        if (spins < 64)
            continue;
        if (!end)
            end = now_ns() + WAIT_BOUND_NS;
        else if (now_ns() > end)
            return;
        sched_yield();
    }
}

VIPL_EXPORT void VipxFdCreateBegin(void)
{
    if (bracket_depth++ > 0)
        return;
    atomic_fetch_add(&creating, 1);
    if (atomic_load(&app_closing) == 0)
        return;
    /* Let the application's close finish first; it waits for us too, so
     * one side steps back, bounded in case that close lingers. */
    atomic_fetch_sub(&creating, 1);
    wait_for_none(&app_closing);
    atomic_fetch_add(&creating, 1);
}

VIPL_EXPORT void VipxFdCreateEnd(void)
{
    if (--bracket_depth == 0)
        atomic_fetch_sub(&creating, 1);
}

/* Where our descriptors go: high, but not so high that every process's
 * descriptor table (copied by fork) grows large. Read from RLIMIT_NOFILE at
 * most every BASE_TTL_NS (a connection adopts about ten descriptors per end,
 * and each getrlimit was a system call: 21 per connection in strace of sovia
 * bench connrate), and again at once when the limit proved lower. */
#define BASE_TTL_NS 100000000u
static atomic_int base_cached = -1;
static _Atomic uint64_t base_read_ns;

static int high_base(bool fresh)
{
    uint64_t now = now_ns();
    int base = atomic_load(&base_cached);
    if (!fresh && base >= 0 && now - atomic_load(&base_read_ns) < BASE_TTL_NS)
        return base;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    rlim_t b = rl.rlim_cur / 4 * 3;
    base = b > HIGH_BASE_MAX ? HIGH_BASE_MAX : (int)b;
    atomic_store(&base_cached, base);
    atomic_store(&base_read_ns, now);
    return base;
}

/* Moves fd up (move_up) and registers it. fdflags: its F_GETFD flags when
 * the creator knows them (FD_CLOEXEC from the creation flags), -1 to ask. */
static int adopt(int fd, bool move_up, int fdflags)
{
    if (fd < 0)
        return fd;
    int err = errno;
    int base = move_up ? high_base(false) : -1;
    if (base > fd && fdflags < 0)
        fdflags = fcntl(fd, F_GETFD);
    if (base > fd && fdflags >= 0) {
        int cmd = (fdflags & FD_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD;
        int high = fcntl(fd, cmd, base);
        if (high < 0 && errno == EINVAL) { /* the limit was lowered since */
            base = high_base(true);
            high = base > fd ? fcntl(fd, cmd, base) : -1;
        }
        if (high >= 0) { /* else it stays where it is: still ours */
            close(fd);
            fd = high;
        }
    }
    mark(fd, true);
    errno = err;
    return fd;
}

VIPL_EXPORT int VipxFdAdopt(int Fd)
{
    return adopt(Fd, true, -1);
}

/* Our descriptors below `fd`. */
static long own_below(int fd)
{
    long n = 0;
    for (int base = 0; base < fd && (unsigned)base < CHUNK_BITS * CHUNKS; base += 64) {
        _Atomic uint64_t *c = chunk_of(base, false);
        if (!c) {
            base += CHUNK_BITS - 64; /* a chunk never made holds none */
            continue;
        }
        uint64_t w = atomic_load(&c[((unsigned)base % CHUNK_BITS) / 64]);
        if (fd - base < 64)
            w &= ((uint64_t)1 << (fd - base)) - 1;
        n += __builtin_popcountll(w);
    }
    return n;
}

/* One copy, straight to the high base, registered as ours. */
static int dup_high(int Fd)
{
    int base = high_base(false);
    int fd = (int)syscall(SYS_fcntl, Fd, F_DUPFD_CLOEXEC, base > 0 ? base : 0);
    if (fd < 0 && errno == EINVAL && base > 0) { /* the limit was lowered since */
        base = high_base(true);
        fd = (int)syscall(SYS_fcntl, Fd, F_DUPFD_CLOEXEC, base > 0 ? base : 0);
    }
    if (fd >= 0)
        mark(fd, true);
    return fd;
}

/* One copy, straight to a high number (the system call itself: a
 * preload's fcntl would make a carried socket's copy one more name of
 * it), marked to close in a forked child: the copy outlives the program's
 * own close, and one in a child would hold the connection open there. */
VIPL_EXPORT int VipxFdKeep(int Fd)
{
    VipxFdCreateBegin();
    int fd = dup_high(Fd);
    if (fd >= 0)
        mark_fork_close(fd);
    VipxFdCreateEnd();
    return fd;
}

/* Counts ours exactly and the program's as the lowest free number, which
 * the kernel hands out (a program's descriptors are dense at the bottom),
 * less ours below it: a reserve taken and given back at once. Ours sit
 * high, but a program holding more than their base has its numbers above
 * them: counting those of ours twice kept 2 connections in 3 of 10,000 on
 * kernel TCP where they fitted. */
VIPL_EXPORT VIP_BOOLEAN VipxFdRoom(int Count)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > INT_MAX / 2)
        return VIP_TRUE;
    long limit = (long)rl.rlim_cur, own = atomic_load(&own_count);
    if (own + Count + limit / 4 > limit)
        return VIP_FALSE;
    int low = vipl_fd_reserve();
    if (low >= 0)
        VipxFdClose(low);
    return low >= 0 && low - own_below(low) + own + Count + limit / 4 <= limit;
}

/* ---- Shared descriptors and deferred closes ------------------------------
 *
 * A descriptor the provider holds once for many connections (a peer's CQ
 * armed page and wake-up socket) is named by each of them in an exec's
 * export, so a new image sees one number several times: closing it on one
 * connection's failure path would take it from the others. A pinned
 * descriptor is closed only by unpinning it first (its last user), and
 * while an image imports its connections no number is closed at all
 * (a number closed by one connection's failure and named by the next
 * could be handed to another descriptor meanwhile): the closes wait for
 * VipxFdDeferEnd, which makes those not pinned by then. */

static pthread_mutex_t pin_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int npinned;
static atomic_bool deferring;
static int *pins, *deferred;
static size_t pins_cap, ndeferred, deferred_cap;

static bool push_fd(int **v, size_t *n, size_t *cap, int fd)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        int *nv = realloc(*v, c * sizeof(**v));
        if (!nv)
            return false;
        *v = nv;
        *cap = c;
    }
    (*v)[(*n)++] = fd;
    return true;
}

static bool pinned_locked(int fd)
{
    for (int i = 0; i < atomic_load(&npinned); i++)
        if (pins[i] == fd)
            return true;
    return false;
}

int vipl_fd_pin(int fd, bool pin)
{
    int rc = 0;
    pthread_mutex_lock(&pin_lock);
    if (pin) {
        size_t n = (size_t)atomic_load(&npinned);
        if (!pinned_locked(fd)) {
            if (push_fd(&pins, &n, &pins_cap, fd))
                atomic_store(&npinned, (int)n);
            else
                rc = -ENOMEM;
        }
    } else {
        for (int i = 0; i < atomic_load(&npinned); i++)
            if (pins[i] == fd) {
                pins[i] = pins[atomic_load(&npinned) - 1];
                atomic_fetch_sub(&npinned, 1);
                break;
            }
    }
    pthread_mutex_unlock(&pin_lock);
    return rc;
}

/* True when the close is not to be made now (pinned, or deferred). */
static bool close_held(int fd)
{
    if (atomic_load(&npinned) == 0 && !atomic_load(&deferring))
        return false;
    pthread_mutex_lock(&pin_lock);
    bool held = pinned_locked(fd) ||
                (atomic_load(&deferring) && push_fd(&deferred, &ndeferred, &deferred_cap, fd));
    pthread_mutex_unlock(&pin_lock);
    return held;
}

VIPL_EXPORT void VipxFdDeferBegin(void)
{
    atomic_store(&deferring, true);
}

static int cmp_int(const void *a, const void *b)
{
    return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

VIPL_EXPORT void VipxFdDeferEnd(void)
{
    pthread_mutex_lock(&pin_lock);
    atomic_store(&deferring, false);
    int *v = deferred;
    size_t n = ndeferred;
    deferred = NULL;
    ndeferred = deferred_cap = 0;
    pthread_mutex_unlock(&pin_lock);
    if (v)
        qsort(v, n, sizeof(*v), cmp_int);
    for (size_t i = 0; i < n; i++)
        if (i == 0 || v[i] != v[i - 1])
            VipxFdClose(v[i]); /* a pinned one stays */
    free(v);
}

VIPL_EXPORT int VipxFdClose(int Fd)
{
    if (Fd < 0) {
        errno = EBADF;
        return -1;
    }
    if (close_held(Fd))
        return 0;
    VipxFdCreateBegin(); /* the number must not change hands halfway */
    mark(Fd, false);
    /* Through close() (a preload's too: ThreadSanitizer must see every
     * close of a number that another thread may be handed next); the
     * bracket tells the preload not to wait for it. */
    int rc = close(Fd);
    int err = errno;
    VipxFdCreateEnd();
    errno = err;
    return rc;
}

VIPL_EXPORT VIP_BOOLEAN VipxFdAppCloseBegin(int Fd)
{
    atomic_fetch_add(&app_closing, 1);
    if (bracket_depth == 0) /* not our own thread's bracket (a signal handler) */
        wait_for_none(&creating);
    if (!VipxFdIsOwn(Fd))
        return VIP_FALSE;
    atomic_fetch_sub(&app_closing, 1);
    return VIP_TRUE;
}

VIPL_EXPORT void VipxFdAppCloseEnd(void)
{
    atomic_fetch_sub(&app_closing, 1);
}

/* A receive of descriptors to mark (vipl_fd_recvmsg) finishes before the
 * fork, so the child knows which of its copies to close. */
static void before_fork(void)
{
    wait_for_none(&receiving);
}

/* In a forked child's fork handlers: the system call itself. The
 * preload's close() takes locks of its own (its listeners, epoll sets)
 * that a parent's thread may have held at the fork, and its handler, which
 * makes them new, runs after vipl's (tests/preload/forkstress.c: a child
 * hung here in the preload's listener_drop). Still marked ours while it
 * closes: the preload's syscall() sends a close of any other descriptor
 * to its close() (a child hung there so, in shadows_lock). The child has
 * one thread: the number cannot change hands before the mark goes. */
void vipl_fd_close_forked(int fd)
{
    syscall(SYS_close, fd);
    mark(fd, false);
}

/* A forked child has one thread: brackets of the others never end there.
 * The descriptors marked to close on fork go now. */
static void forked_child(void)
{
    pthread_mutex_init(&pin_lock, NULL);
    atomic_store(&creating, bracket_depth > 0);
    atomic_store(&app_closing, 0);
    atomic_store(&receiving, 0);
    for (unsigned k = 0; k < CHUNKS; k++) {
        _Atomic uint64_t *f = atomic_load(&fork_chunks[k]);
        for (unsigned w = 0; f && w < CHUNK_BITS / 64; w++)
            for (uint64_t bits = atomic_load(&f[w]); bits; bits &= bits - 1)
                vipl_fd_close_forked((int)(k * CHUNK_BITS + w * 64 + (unsigned)__builtin_ctzll(bits)));
    }
}

__attribute__((constructor)) static void fdguard_init(void)
{
    pthread_atfork(before_fork, NULL, forked_child);
}

/* ---- The library's creators ---------------------------------------------- */

/* cloexec: the creation flags asked for it, so adopt need not ask. */
static int adopted(int fd, bool cloexec)
{
    fd = adopt(fd, true, cloexec ? FD_CLOEXEC : 0);
    VipxFdCreateEnd();
    return fd;
}

int vipl_fd_memfd(const char *name, unsigned flags)
{
    VipxFdCreateBegin();
    return adopted(memfd_create(name, flags), flags & MFD_CLOEXEC);
}

int vipl_fd_socket(int domain, int type, int protocol)
{
    VipxFdCreateBegin();
    return adopted(socket(domain, type, protocol), type & SOCK_CLOEXEC);
}

int vipl_fd_socketpair(int domain, int type, int protocol, int sv[2])
{
    VipxFdCreateBegin();
    int rc = socketpair(domain, type, protocol, sv);
    if (rc == 0) {
        int fdflags = (type & SOCK_CLOEXEC) ? FD_CLOEXEC : 0;
        sv[0] = adopt(sv[0], true, fdflags);
        sv[1] = adopt(sv[1], true, fdflags);
    }
    VipxFdCreateEnd();
    return rc;
}

int vipl_fd_accept4(int fd, int flags)
{
    VipxFdCreateBegin();
    return adopted(accept4(fd, NULL, NULL, flags), flags & SOCK_CLOEXEC);
}

int vipl_fd_reserve(void)
{
    /* Low, unlike the others: it is given up so that an accept() finds a
     * number under RLIMIT_NOFILE, which may have been lowered since. */
    VipxFdCreateBegin();
    int fd = adopt(open("/dev/null", O_RDONLY | O_CLOEXEC), false, FD_CLOEXEC);
    VipxFdCreateEnd();
    return fd;
}

int vipl_fd_eventfd(unsigned initval, int flags)
{
    VipxFdCreateBegin();
    return adopted(eventfd(initval, flags), flags & EFD_CLOEXEC);
}

int vipl_fd_epoll(int flags)
{
    VipxFdCreateBegin();
    return adopted(epoll_create1(flags), flags & EPOLL_CLOEXEC);
}

int vipl_fd_pidfd(pid_t pid)
{
    VipxFdCreateBegin();
    return adopted((int)syscall(SYS_pidfd_open, pid, 0), true); /* always close-on-exec */
}

/* The system call itself: a preload's fcntl would take a copy of a socket
 * it carries (a connect token) for one more name of that socket. */
int vipl_fd_dup(int fd)
{
    VipxFdCreateBegin(); /* straight to the high base: a copy low and its move were 3 calls */
    int high = dup_high(fd);
    VipxFdCreateEnd();
    return high;
}

ssize_t vipl_fd_recvmsg(int sock, struct msghdr *mh, int flags, unsigned fork_close_from)
{
    bool marking = fork_close_from != UINT_MAX;
    if (marking)
        atomic_fetch_add(&receiving, 1);
    VipxFdCreateBegin();
    ssize_t n = recvmsg(sock, mh, flags);
    unsigned k = 0;
    for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(mh) : NULL; c; c = CMSG_NXTHDR(mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
            fd = adopt(fd, true, (flags & MSG_CMSG_CLOEXEC) ? FD_CLOEXEC : -1);
            if (k++ >= fork_close_from && fd >= 0)
                mark_fork_close(fd);
            memcpy(CMSG_DATA(c) + i * sizeof(int), &fd, sizeof(fd));
        }
    }
    VipxFdCreateEnd();
    if (marking)
        atomic_fetch_sub(&receiving, 1);
    return n;
}
