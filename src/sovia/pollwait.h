/*
 * pollwait.h - sov_poll's waiting, as the preload library of `sovia run`
 * shares it (its poll/select and epoll over carried sockets).
 *
 * The hooks are empty in libsovia; the preload fills them in: readiness the
 * kernel cannot see of descriptors the layer does not carry (an epoll set
 * holding carried sockets), a count of the signal handlers run on the
 * calling thread (a wait spinning in user space fails with EINTR once a
 * handler ran, as the kernel's would), and libc's own ppoll (the layer's
 * calls to poll would otherwise come back to the preload's wrapper).
 */
#ifndef SOVIA_POLLWAIT_H
#define SOVIA_POLLWAIT_H

#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

struct sov_poll_hooks {
    /* Readiness of fd (not a sovia socket) known only in user space, or 0;
     * or'ed with the kernel's. Set once it can matter (read atomically). */
    short (*user_revents)(int fd, short events);
    /* The calling thread's count of signal handlers run (wraps around). */
    const _Atomic unsigned *(*signal_count)(void);
    int (*kernel_ppoll)(struct pollfd *fds, nfds_t n, const struct timespec *t,
                        const sigset_t *mask);
    /* The calling thread sleeps from now on with `fd` (an eventfd) in its
     * poll set, or no longer (-1): a handler that runs on the thread in
     * between writes to it once, so that the sleep ends at once (the
     * self-pipe trick, instead of blocking signals around the sleep).
     * Returns whether a handler wrote since the last call (also in a sleep
     * a handler left with siglongjmp): the caller reads the eventfd. */
    bool (*dozing)(int fd);
};

extern struct sov_poll_hooks sov_poll_hooks;

/* A wait's watch on its thread's signal handlers. */
struct sov_sigwatch {
    const _Atomic unsigned *count; /* NULL: not counted (libsovia alone) */
    unsigned start;
};

static inline struct sov_sigwatch sov_sigwatch_start(void)
{
    struct sov_sigwatch w = {sov_poll_hooks.signal_count ? sov_poll_hooks.signal_count() : 0, 0};
    if (w.count)
        w.start = atomic_load_explicit(w.count, memory_order_relaxed);
    return w;
}

/* Has a handler run on this thread since the wait began? */
static inline bool sov_sigwatch_fired(const struct sov_sigwatch *w)
{
    return w->count && atomic_load_explicit(w->count, memory_order_relaxed) != w->start;
}

/*
 * Without a count (libsovia alone: the program's handlers are its own), a
 * wait that spins holds the thread's catchable signals back from its first
 * spinning turn (sov_sighold_on) and looks at what is pending now and then
 * (sov_sighold_look): a signal the program had not blocked is let through
 * at once (the mask as it was: its handler runs, or its default action),
 * and one with a handler ends the wait with EINTR, as the kernel's sleep
 * would. Faults (SIGSEGV & co.) are never held. Nothing while counted.
 */
/* A spinning wait holds signals only once it has spun this long: a reply
 * that comes within it (a ping-pong's) costs no sigprocmask pair (0.33 ->
 * 0.57 us one-way at 4 bytes when every spinning call held). A handler run
 * before then ends the wait only if the wait sleeps later, as one that ran
 * just before the call would. */
#define SOV_SIGHOLD_AFTER_NS 5000u

struct sov_sighold {
    bool on;
    unsigned looks;
    sigset_t saved; /* the thread's mask before */
};
void sov_sighold_on(struct sov_sighold *h);
/* True if a handler of a signal let through runs (ran) now; `now`: look
 * whatever the count of looks (else one look in 16). */
bool sov_sighold_look(struct sov_sighold *h, bool now);
void sov_sighold_off(struct sov_sighold *h);

/* sov_poll with ppoll's signal mask (NULL: none): the mask holds from the
 * first look that finds nothing ready to the return, spinning included; a
 * handler run meanwhile ends the call with EINTR. */
int sov_poll_masked(struct pollfd *fds, nfds_t nfds, int timeout, const sigset_t *mask);

/* Sleeps up to `ms` (-1: no limit) until kfds[0..nk) or the layer's
 * doorbells (the completion queue's wake-up and the event descriptor) are
 * ready; kfds has room for two more entries. The caller armed the CQ.
 * A handler run since the wait began (`w`) fails it with EINTR, also one
 * that arrives just before the sleep. Returns poll's result. */
int sov_poll_doze(struct pollfd *kfds, nfds_t nk, int ms, const struct sov_sigwatch *w);

#endif /* SOVIA_POLLWAIT_H */
