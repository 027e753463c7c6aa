/*
 * signal.c - counts the signal handlers that run on each thread, and
 * stands in for the default action of the signals that end a process, so
 * that it writes its exit record first.
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
 *
 * Exit records (exitlog.c): once a log is named, a signal of ENDING whose
 * disposition is SIG_DFL gets `ending` in the kernel instead. It writes
 * the record, puts SIG_DFL back, unblocks the signal and raises it again:
 * the process ends as it would have (the parent sees the signal, a core is
 * dumped for SIGQUIT). The program never sees the stand-in: sigaction and
 * signal report SIG_DFL with the program's mask and flags, a handler or
 * SIG_IGN it installs replaces it, and exec resets it to SIG_DFL, where
 * the next image's preload stands in again (a fork child inherits it).
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

/* The eventfd the thread polls in a sleep (sov_poll_hooks.dozing), + 1,
 * and whether a handler wrote it. */
static __thread int dozing_on __attribute__((tls_model("initial-exec")));
static __thread bool doze_rung __attribute__((tls_model("initial-exec")));

const _Atomic unsigned *preload_signal_count(void)
{
    return &handled;
}

bool preload_dozing(int fd)
{
    atomic_signal_fence(memory_order_seq_cst);
    dozing_on = fd + 1;
    atomic_signal_fence(memory_order_seq_cst);
    bool rung = doze_rung;
    doze_rung = false;
    atomic_signal_fence(memory_order_seq_cst);
    return rung;
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

/* ---- Standing in for SIG_DFL ------------------------------------------------ */

/* The signals sent to end a process (kill, Ctrl-C and Ctrl-\\, a closed
 * terminal, a pipe's reader gone, the program's own alarm, and the user
 * signals whose default is to end it). Not the faults (SIGSEGV & co.,
 * SIGABRT: the state that crashed cannot be trusted for a record, and the
 * crash must stay exact), nor SIGKILL (it cannot be caught), nor the rarer
 * ones (SIGXCPU, SIGVTALRM, SIGPROF, SIGIO, real-time signals: programs
 * that get them install handlers; and every signal taken over shows in
 * /proc/PID/status as caught). */
static const int ENDING[] = {SIGHUP, SIGINT, SIGQUIT, SIGPIPE, SIGALRM, SIGTERM, SIGUSR1, SIGUSR2};
#define NENDING (sizeof(ENDING) / sizeof(ENDING[0]))

void preload_ending_signals(sigset_t *set)
{
    sigemptyset(set);
    for (size_t i = 0; i < NENDING; i++)
        sigaddset(set, ENDING[i]);
}

static atomic_bool armed; /* a log is named: stand in */
/* What a query reports while `ending` stands in: SIG_DFL with the mask and
 * flags the program gave it (or the kernel had at start). */
static struct sigaction dfl_view[NSIG];

static bool stands_in(int sig)
{
    if (!atomic_load_explicit(&armed, memory_order_relaxed))
        return false;
    for (size_t i = 0; i < NENDING; i++)
        if (ENDING[i] == sig)
            return true;
    return false;
}

/* Raised again at the release of the thread's last socket lock (sock.h,
 * sov_locks_held). */
static void defer(int sig)
{
    atomic_fetch_or_explicit(&sov_signals_deferred, 1ull << (sig - 1), memory_order_relaxed);
}

static void ending(int sig, siginfo_t *info, void *uc)
{
    (void)info;
    (void)uc;
    if (sov_locks_held) { /* the record waits for the lock's release */
        defer(sig);
        return;
    }
    int err = errno;
    exitlog_signal(sig);
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    next_sigaction()(sig, &dfl, NULL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    sigprocmask(SIG_UNBLOCK, &one, NULL);
    raise(sig);
    errno = err; /* only if the program changed the disposition meanwhile */
}

static int install_ending(sigaction_fn next, int sig, struct sigaction *old)
{
    struct sigaction k = {.sa_sigaction = ending, .sa_flags = SA_SIGINFO | SA_RESTART};
    sigfillset(&k.sa_mask); /* one record: no other signal's handler nests in */
    return next(sig, &k, old);
}

/* `kernel`: the SIG_DFL disposition the kernel holds now, as the program
 * would read it. */
static void stand_in(sigaction_fn next, int sig, const struct sigaction *kernel)
{
    dfl_view[sig] = *kernel;
    install_ending(next, sig, NULL);
}

/* The program set SIG_DFL (act) and `ending` stands in: the view is act as
 * the kernel would hold it, with what libc adds to every disposition
 * (x86-64's SA_RESTORER and restorer), read back from ours. */
static void view_as_set(sigaction_fn next, int sig, const struct sigaction *act)
{
    struct sigaction v;
    if (next(sig, NULL, &v) != 0)
        v = *act;
    int added = v.sa_flags & ~(SA_SIGINFO | SA_RESTART);
    v.sa_handler = SIG_DFL;
    v.sa_mask = act->sa_mask;
    sigdelset(&v.sa_mask, SIGKILL);
    sigdelset(&v.sa_mask, SIGSTOP);
    v.sa_flags = act->sa_flags | added;
    dfl_view[sig] = v;
}

void preload_signals_arm(void)
{
    sigaction_fn next = next_sigaction(); /* resolved now: a handler cannot dlsym */
    if (!next || atomic_exchange(&armed, true))
        return;
    for (size_t i = 0; i < NENDING; i++) {
        struct sigaction k;
        if (next(ENDING[i], NULL, &k) == 0 && (void *)k.sa_sigaction == (void *)SIG_DFL)
            stand_in(next, ENDING[i], &k); /* SIG_IGN and handlers stay */
    }
}

/* A handler with SA_RESETHAND has just been reset to SIG_DFL by the
 * kernel: stand in for that one too. */
static void stand_in_again(int sig, int program_flags)
{
    sigaction_fn next = next_sigaction();
    struct sigaction k;
    if (next(sig, NULL, &k) != 0 || (void *)k.sa_sigaction != (void *)SIG_DFL)
        return;
    k.sa_flags = (k.sa_flags & ~SA_SIGINFO) | (program_flags & SA_SIGINFO);
    stand_in(next, sig, &k);
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
    if (sov_locks_held && deferrable(sig, a.flags)) {
        defer(sig);
        return;
    }
    atomic_fetch_add_explicit(&handled, 1, memory_order_relaxed);
    if (!(a.flags & SA_RESTART))
        atomic_fetch_add_explicit(&interrupting, 1, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    VipxWakeSelf(); /* a futex sleep of the thread's (epoll.c) ends at once */
    int bell = dozing_on - 1;
    if (bell >= 0) { /* the sleep it may have missed ends at once; one write */
        dozing_on = 0;
        doze_rung = true;
        int err = errno;
        uint64_t one = 1;
        if (real.write(bell, &one, sizeof(one)) < 0) {
            /* a full counter is readable already */
        }
        errno = err;
    }
    if (a.flags & SA_RESETHAND) { /* the kernel has just done the same */
        store(sig, (void *)SIG_DFL, 0);
        if (stands_in(sig))
            stand_in_again(sig, a.flags);
    }
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
           handler != (void *)trampoline && handler != (void *)ending;
}

/* What the kernel holds, as the program set it. */
static void unwrap(struct sigaction *k, struct action program, const struct sigaction *dfl)
{
    if ((void *)k->sa_sigaction == (void *)ending) {
        *k = *dfl;
        return;
    }
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
    struct sigaction before_dfl = dfl_view[sig];
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
    } else if (act && (void *)act->sa_sigaction == (void *)SIG_DFL && stands_in(sig)) {
        rc = install_ending(next, sig, old);
        if (rc == 0) {
            store(sig, (void *)SIG_DFL, act->sa_flags);
            view_as_set(next, sig, act);
        }
    } else {
        rc = next(sig, act, old);
        if (rc == 0 && act) /* SIG_DFL, SIG_IGN (or SIGKILL/SIGSTOP: refused above) */
            store(sig, (void *)act->sa_sigaction, act->sa_flags);
    }
    if (rc == 0 && old)
        unwrap(old, before, &before_dfl);
    return rc;
}

/* After libc installed a handler by itself: wrap it; returns what the call
 * returned, as the program's handler. */
static sighandler_t adopt(int sig, sighandler_t ret, struct action before)
{
    if (ret == SIG_ERR || sig <= 0 || sig >= NSIG)
        return ret;
    int err = errno;
    sigaction_fn next = next_sigaction();
    struct sigaction k;
    if (next(sig, NULL, &k) == 0 && (void *)k.sa_sigaction != (void *)trampoline &&
        (void *)k.sa_sigaction != (void *)ending) {
        store(sig, (void *)k.sa_sigaction, k.sa_flags);
        if (wrappable(sig, (void *)k.sa_sigaction)) {
            k.sa_sigaction = trampoline;
            k.sa_flags |= SA_SIGINFO;
            next(sig, &k, NULL);
        } else if ((void *)k.sa_sigaction == (void *)SIG_DFL && stands_in(sig)) {
            stand_in(next, sig, &k);
        }
    }
    errno = err;
    if ((void *)ret == (void *)trampoline)
        return (sighandler_t)before.handler;
    return (void *)ret == (void *)ending ? SIG_DFL : ret;
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
