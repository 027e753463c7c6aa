/*
 * watch.c - the library's threads never outlive the program's.
 *
 * The library runs threads of its own in the program's process (the shm
 * agent, notify threads, the sockets layer's service, listener and
 * handler threads). A process ends when its last thread does, so without
 * care they would keep it alive after the program's last thread went
 * without exit(): killed by a seccomp filter (SECCOMP_RET_KILL_THREAD, as
 * OpenSSH's sandbox does: the kernel would have ended the process with
 * SIGSYS), or ended by pthread_exit() or a raw SYS_exit. Such a process
 * sat half dead for ever, holding its connections (the peer waited), and
 * a library thread could spin on a lock the killed thread held.
 *
 * Every library thread is started by VipxThreadCreate, which counts it.
 * The process's first thread (the leader) holds a robust mutex from the
 * library's constructor on (and a forked child's only thread from the fork
 * on); a watcher thread, started with the first library thread, waits for
 * it. When the leader dies (the kernel hands the mutex over with
 * EOWNERDEAD), the watcher counts the threads left (/proc/self/stat) until
 * none is the program's, then ends the process as the kernel would have
 * without the library's threads: with the signal that killed the leader,
 * or with the status it exited with (exit(), so atexit handlers run, as
 * glibc's pthread_exit does in a process's last thread).
 *
 * A library loaded by another thread than the leader (dlopen) has no
 * leader to watch, and a process without /proc cannot count: no watcher
 * then. The watcher reads /proc/self/stat through a descriptor opened
 * when it starts, so a later chroot and RLIMIT_NOFILE of 1 (OpenSSH's
 * pre-authentication child, which forks with the connection and then
 * sandboxes itself) do not blind it.
 *
 * The spinlocks of the provider and the sockets layer hold their owner's
 * thread id: a waiter that has spun a while asks vipl_thread_gone whether
 * the owner still lives, and takes the lock over from a dead one (the
 * leader's death is the watcher's word: a zombie leader answers signals).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

__thread pid_t vipl_tid_cache;
static _Atomic bool leader_dead;
static pthread_mutex_t leader_alive; /* robust: held by the leader */
static pid_t leader_pid;             /* the process whose leader holds it */
static _Atomic int library_threads;
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t watched_pid; /* the process the watcher runs in */
static int stat_fd = -1;  /* its /proc/self/stat */

#define RECOUNT_NS 50000000L /* while the program still has threads */

/* In the leader (the constructor, or a forked child's fork handler). */
static void hold_leader(void)
{
    leader_pid = 0;
    vipl_tid_cache = gettid();
    if (vipl_tid_cache != getpid())
        return; /* dlopen'ed by another thread */
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&leader_alive, &a);
    pthread_mutexattr_destroy(&a);
    if (pthread_mutex_lock(&leader_alive) == 0)
        leader_pid = getpid();
}

/* A forked child has one thread, the program's: the parent's watcher and
 * library threads stayed there. */
static void forked_child(void)
{
    /* The parent thread's before: taken now, before the program can
     * install a seccomp filter that forbids gettid (OpenSSH's child). */
    vipl_tid_cache = gettid();
    atomic_store(&leader_dead, false);
    atomic_store(&library_threads, 0);
    pthread_mutex_init(&start_lock, NULL);
    watched_pid = 0;
    if (stat_fd >= 0) { /* the parent's */
        vipl_fd_close_forked(stat_fd);
        stat_fd = -1;
    }
    hold_leader();
}

__attribute__((constructor)) static void watch_init(void)
{
    hold_leader();
    pthread_atfork(NULL, NULL, forked_child);
}

/* The leader's end as waitpid would report it, and how many threads the
 * process has; false if /proc cannot tell. */
static bool read_stat(int *exit_code, long *threads)
{
    char buf[1024];
    ssize_t n = pread(stat_fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the name may hold anything */
    /* Fields from the state (3rd) on: num_threads is the 20th, exit_code
     * the 52nd (Linux 3.5). */
    long field[53];
    int k = 3;
    for (char *save = NULL, *t = p ? strtok_r(p + 1, " ", &save) : NULL; t && k <= 52;
         t = strtok_r(NULL, " ", &save))
        field[k++] = strtol(t, NULL, 10);
    if (k <= 52)
        return false;
    *threads = field[20];
    *exit_code = (int)field[52];
    return true;
}

/* As the kernel ends a process whose last thread did what the leader did. */
__attribute__((noreturn)) static void end_as_leader(int exit_code)
{
    int sig = exit_code & 0x7f;
    if (sig) {
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        sigaction(sig, &dfl, NULL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        pthread_sigmask(SIG_UNBLOCK, &one, NULL);
        raise(sig);
        _exit(128 + sig); /* a signal whose default is not to end */
    }
    exit((exit_code >> 8) & 0xff);
}

static void *watcher(void *arg)
{
    (void)arg;
    if (pthread_mutex_lock(&leader_alive) != EOWNERDEAD)
        return NULL;
    atomic_store(&leader_dead, true);
    for (;;) {
        int exit_code;
        long threads;
        if (!read_stat(&exit_code, &threads))
            return NULL;
        /* The leader stays a zombie until the last thread goes. */
        if (threads - 1 - atomic_load(&library_threads) <= 0)
            end_as_leader(exit_code);
        struct timespec ts = {0, RECOUNT_NS};
        nanosleep(&ts, NULL);
    }
}

struct start {
    void *(*fn)(void *);
    void *arg;
};

/* `arg` stays allocated while the thread runs, as the thread's own
 * argument would (LeakSanitizer finds what it points to through it). */
static void *library_thread(void *arg)
{
    struct start *st = arg;
    atomic_fetch_add(&library_threads, 1);
    void *rv = st->fn(st->arg);
    atomic_fetch_sub(&library_threads, 1);
    free(st);
    return rv;
}

static int start_thread(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *),
                        void *arg)
{
    struct start *st = malloc(sizeof(*st));
    if (!st)
        return ENOMEM;
    *st = (struct start){fn, arg};
    /* The program's signals must not land on a library thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(thread, attr, library_thread, st);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc)
        free(st);
    return rc;
}

/* Once per process, with its first library thread. */
static void start_watcher(void)
{
    pid_t me = getpid();
    /* Opened before the lock: VipxFdAdopt closes the first number through
     * the preload's close(), which takes its own locks (epoll sets). */
    pthread_mutex_lock(&start_lock);
    bool want = watched_pid != me && leader_pid == me && stat_fd < 0;
    pthread_mutex_unlock(&start_lock);
    int fresh = -1;
    if (want) {
        VipxFdCreateBegin(); /* one of ours: safe from the program's stale close() */
        fresh = VipxFdAdopt(open("/proc/self/stat", O_RDONLY | O_CLOEXEC));
        VipxFdCreateEnd();
    }
    pthread_mutex_lock(&start_lock);
    if (fresh >= 0 && stat_fd < 0) {
        stat_fd = fresh;
        fresh = -1;
    }
    if (watched_pid != me && leader_pid == me) {
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_t t;
        if (stat_fd >= 0 && start_thread(&t, &a, watcher, NULL) == 0)
            watched_pid = me;
        pthread_attr_destroy(&a);
    }
    pthread_mutex_unlock(&start_lock);
    if (fresh >= 0) /* another thread's came first */
        VipxFdClose(fresh);
}

VIPL_EXPORT int VipxThreadCreate(pthread_t *Thread, const pthread_attr_t *Attr,
                                 void *(*Start)(void *), void *Arg)
{
    if (!Thread || !Start)
        return EINVAL;
    start_watcher();
    return start_thread(Thread, Attr, Start, Arg);
}

bool vipl_thread_gone(int32_t tid)
{
    pid_t me = getpid();
    if (tid <= 0)
        return false;
    if (tid == me) /* a zombie leader still answers signals */
        return atomic_load(&leader_dead);
    int err = errno;
    bool gone = syscall(SYS_tgkill, me, tid, 0) != 0 && errno == ESRCH;
    errno = err;
    return gone;
}

VIPL_EXPORT VIP_BOOLEAN VipxThreadGone(int Tid)
{
    return vipl_thread_gone(Tid) ? VIP_TRUE : VIP_FALSE;
}

/* A section that never ends belongs to a thread that died inside it, at a
 * system call (where a seccomp filter kills): after spinning and yielding
 * a while, the waiter asks, and takes the lock over from a dead owner. */
bool vipl_lock_slow(_Atomic int32_t *owner, int32_t me)
{
    for (unsigned spins = 1;; spins++) {
        int32_t held = atomic_load_explicit(owner, memory_order_relaxed);
        if (!held) {
            if (atomic_compare_exchange_weak_explicit(owner, &held, me, memory_order_acquire,
                                                      memory_order_relaxed))
                return true;
        } else if (spins <= 100) {
            __builtin_ia32_pause();
        } else if ((spins & 63) == 0 && vipl_thread_gone(held) &&
                   atomic_compare_exchange_strong_explicit(owner, &held, me, memory_order_acquire,
                                                           memory_order_relaxed)) {
            return false;
        } else {
            sched_yield();
        }
    }
}

VIPL_EXPORT VIP_BOOLEAN VipxLockSlow(void *LockWord, int Self)
{
    return LockWord && vipl_lock_slow(LockWord, Self) ? VIP_TRUE : VIP_FALSE;
}
