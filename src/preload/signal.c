/*
 * signal.c - counts the signal handlers that run on each thread.
 *
 * A wait over carried sockets spins in user space (poll, select, epoll and
 * their signal-mask variants), where no system call is there to fail with
 * EINTR when a handler runs; the kernel's waits always do (they are never
 * restarted, whatever SA_RESTART says). So the program's handlers are
 * installed behind a trampoline that bumps a thread-local counter first,
 * and a wait ends with EINTR once the counter moved. A second counter, of
 * the handlers without SA_RESTART, lets a recv or send on a carried socket
 * restart as the kernel's would when every handler that ran asked for it. sigaction reports the
 * program's own handler and flags back; the calls that install handlers
 * through glibc's internals (signal, sysv_signal, sigset) are completed,
 * then their handler is wrapped the same way. A handler that would run
 * while the thread holds a socket lock is deferred to the lock's release
 * (sock.h, sov_locks_held).
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>

#include "preload.h"
#include "sock.h"
#include "waits.h"

static __thread _Atomic unsigned handled __attribute__((tls_model("initial-exec")));
/* Of those, the handlers installed without SA_RESTART. */
static __thread _Atomic unsigned interrupting __attribute__((tls_model("initial-exec")));

const _Atomic unsigned *preload_signal_count(void)
{
    return &handled;
}

const _Atomic unsigned *preload_interrupt_count(void)
{
    return &interrupting;
}

/* The program's disposition of one signal: two slots, the current one read
 * by the trampoline while a change writes the other. */
struct action {
    void *handler; /* sa_handler or sa_sigaction (SA_SIGINFO in flags) */
    int flags;
};
static struct {
    struct action slot[2];
    atomic_uint cur;
} actions[NSIG];

static struct action current(int sig)
{
    return actions[sig].slot[atomic_load_explicit(&actions[sig].cur, memory_order_acquire) & 1];
}

static void store(int sig, void *handler, int flags)
{
    unsigned c = atomic_load_explicit(&actions[sig].cur, memory_order_relaxed);
    actions[sig].slot[(c + 1) & 1] = (struct action){handler, flags};
    atomic_store_explicit(&actions[sig].cur, c + 1, memory_order_release);
}

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

static sigaction_fn next_sigaction(void)
{
    static _Atomic(sigaction_fn) next;
    sigaction_fn f = atomic_load_explicit(&next, memory_order_relaxed);
    if (!f) {
        f = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
        atomic_store_explicit(&next, f, memory_order_relaxed);
    }
    return f;
}

/* Raised by the process's own faults: they cannot wait. A handler reset
 * on delivery (SA_RESETHAND) cannot be raised again either. */
static bool deferrable(int sig, int flags)
{
    return sig != SIGSEGV && sig != SIGBUS && sig != SIGFPE && sig != SIGILL && sig != SIGTRAP &&
           sig != SIGSYS && sig <= 64 && !(flags & SA_RESETHAND);
}

static void trampoline(int sig, siginfo_t *info, void *uc)
{
    struct action a = current(sig);
    if (sov_locks_held && deferrable(sig, a.flags)) { /* see sov_locks_held */
        atomic_fetch_or_explicit(&sov_signals_deferred, 1ull << (sig - 1), memory_order_relaxed);
        return;
    }
    atomic_fetch_add_explicit(&handled, 1, memory_order_relaxed);
    if (!(a.flags & SA_RESTART))
        atomic_fetch_add_explicit(&interrupting, 1, memory_order_relaxed);
    if (a.flags & SA_RESETHAND) /* the kernel has just done the same */
        store(sig, (void *)SIG_DFL, 0);
    if (a.handler == (void *)SIG_DFL || a.handler == (void *)SIG_IGN)
        return; /* changed while this one was on its way */
    if (a.flags & SA_SIGINFO)
        ((void (*)(int, siginfo_t *, void *))a.handler)(sig, info, uc);
    else
        ((void (*)(int))a.handler)(sig);
}

static bool wrappable(int sig, void *handler)
{
    return sig > 0 && sig < NSIG && sig != SIGKILL && sig != SIGSTOP &&
           handler != (void *)SIG_DFL && handler != (void *)SIG_IGN &&
           handler != (void *)trampoline;
}

/* What the kernel holds, as the program set it. */
static void unwrap(struct sigaction *k, struct action program)
{
    if ((void *)k->sa_sigaction != (void *)trampoline)
        return;
    k->sa_sigaction = (void (*)(int, siginfo_t *, void *))program.handler;
    k->sa_flags = (k->sa_flags & ~SA_SIGINFO) | (program.flags & SA_SIGINFO);
}

PRELOAD_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    sigaction_fn next = next_sigaction();
    if (sig <= 0 || sig >= NSIG)
        return next(sig, act, old);
    struct action before = current(sig);
    int rc;
    if (act && wrappable(sig, (void *)act->sa_sigaction)) {
        store(sig, (void *)act->sa_sigaction, act->sa_flags);
        struct sigaction k = *act;
        k.sa_sigaction = trampoline;
        k.sa_flags |= SA_SIGINFO;
        rc = next(sig, &k, old);
        if (rc != 0) {
            int err = errno;
            store(sig, before.handler, before.flags);
            errno = err;
        }
    } else {
        rc = next(sig, act, old);
        if (rc == 0 && act) /* SIG_DFL, SIG_IGN (or SIGKILL/SIGSTOP: refused above) */
            store(sig, (void *)act->sa_sigaction, act->sa_flags);
    }
    if (rc == 0 && old)
        unwrap(old, before);
    return rc;
}

/* After libc installed a handler by itself: wrap it; returns what the call
 * returned, as the program's handler. */
static sighandler_t adopt(int sig, sighandler_t ret, struct action before)
{
    if (ret == SIG_ERR || sig <= 0 || sig >= NSIG)
        return ret;
    int err = errno;
    struct sigaction k;
    if (next_sigaction()(sig, NULL, &k) == 0 && (void *)k.sa_sigaction != (void *)trampoline) {
        store(sig, (void *)k.sa_sigaction, k.sa_flags);
        if (wrappable(sig, (void *)k.sa_sigaction)) {
            k.sa_sigaction = trampoline;
            k.sa_flags |= SA_SIGINFO;
            next_sigaction()(sig, &k, NULL);
        }
    }
    errno = err;
    return (void *)ret == (void *)trampoline ? (sighandler_t)before.handler : ret;
}

/* signal() and its relatives: libc's own, then adopt(). */
#define ADOPTING(name)                                                                    \
    PRELOAD_EXPORT sighandler_t name(int sig, sighandler_t handler)                       \
    {                                                                                     \
        static _Atomic(sighandler_t (*)(int, sighandler_t)) next;                         \
        sighandler_t (*f)(int, sighandler_t) = atomic_load(&next);                        \
        if (!f) {                                                                         \
            f = (sighandler_t(*)(int, sighandler_t))dlsym(RTLD_NEXT, #name);              \
            atomic_store(&next, f);                                                       \
        }                                                                                 \
        if (!f) {                                                                         \
            errno = ENOSYS;                                                               \
            return SIG_ERR;                                                               \
        }                                                                                 \
        struct action before = sig > 0 && sig < NSIG ? current(sig) : (struct action){0}; \
        return adopt(sig, f(sig, handler), before);                                       \
    }

ADOPTING(signal)
ADOPTING(bsd_signal)
ADOPTING(ssignal)
ADOPTING(sysv_signal)
ADOPTING(__sysv_signal)
ADOPTING(sigset)
