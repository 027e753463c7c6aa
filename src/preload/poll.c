/*
 * poll.c - poll, ppoll and select over a mix of carried and kernel
 * descriptors: sets without a carried descriptor (or an epoll set holding
 * one) go to the kernel as they are; the others through the sockets
 * layer's sov_poll (docs/SOCKETS.md, wait modes), which the preload
 * extends through its hooks (pollwait.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sovia.h>

#include "pollwait.h"
#include "preload.h"
#include "waits.h"

static int kernel_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t,
                        const sigset_t *mask)
{
    preload_ready();
    return real.ppoll(fds, n, t, mask);
}

__attribute__((constructor)) static void install_poll_hooks(void)
{
    sov_poll_hooks = (struct sov_poll_hooks){
        .signal_count = preload_signal_count,
        .kernel_ppoll = kernel_ppoll,
        .dozing = preload_dozing,
    };
}

static bool ours(int fd)
{
    return fd >= 0 && (carried(fd) || epoll_active(fd));
}

static bool any_carried(const struct pollfd *fds, nfds_t n)
{
    for (nfds_t i = 0; i < n; i++)
        if (ours(fds[i].fd))
            return true;
    return false;
}

/* The signal mask is the kernel's way: applied for the wait, spinning
 * included, and a handler that runs meanwhile (or one pending that the
 * mask unblocks) ends the call with EINTR (sov_poll_masked). */
int poll_any(struct pollfd *fds, nfds_t n, int timeout_ms, const sigset_t *mask)
{
    return sov_poll_masked(fds, n, timeout_ms, mask);
}

PRELOAD_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    preload_ready();
    if (!fds || !any_carried(fds, n))
        return real.poll(fds, n, timeout);
    return poll_any(fds, n, timeout, NULL);
}

PRELOAD_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
    if (fdslen / sizeof(*fds) < n)
        abort();
    return poll(fds, n, timeout);
}

int timespec_ms(const struct timespec *t)
{
    if (!t)
        return -1;
    long long ms = (long long)t->tv_sec * 1000 + (t->tv_nsec + 999999) / 1000000;
    return ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}

bool timespec_valid(const struct timespec *t)
{
    return !t || (t->tv_sec >= 0 && t->tv_nsec >= 0 && t->tv_nsec < 1000000000L);
}

PRELOAD_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t,
                         const sigset_t *mask)
{
    preload_ready();
    if (!fds || !any_carried(fds, n))
        return real.ppoll(fds, n, t, mask);
    if (!timespec_valid(t)) {
        errno = EINVAL;
        return -1;
    }
    return poll_any(fds, n, timespec_ms(t), mask);
}

PRELOAD_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *t,
                               const sigset_t *mask, size_t fdslen)
{
    if (fdslen / sizeof(*fds) < n)
        abort();
    return ppoll(fds, n, t, mask);
}

/* select on a carried descriptor: the same sets, expressed as a poll. */
static int select_any(int nfds, fd_set *r, fd_set *w, fd_set *e, int timeout_ms,
                      const sigset_t *mask)
{
    struct pollfd fds[FD_SETSIZE]; /* no malloc: see sov_poll */
    nfds_t n = 0;
    for (int fd = 0; fd < nfds; fd++) {
        short ev = (short)((r && FD_ISSET(fd, r) ? POLLIN : 0) |
                           (w && FD_ISSET(fd, w) ? POLLOUT : 0) |
                           (e && FD_ISSET(fd, e) ? POLLPRI : 0));
        if (ev)
            fds[n++] = (struct pollfd){.fd = fd, .events = ev};
    }
    int rc = poll_any(fds, n, timeout_ms, mask);
    if (rc < 0)
        return -1;
    for (nfds_t i = 0; i < n; i++)
        if (fds[i].revents & POLLNVAL) {
            errno = EBADF;
            return -1;
        }
    if (r)
        FD_ZERO(r);
    if (w)
        FD_ZERO(w);
    if (e)
        FD_ZERO(e);
    int count = 0;
    for (nfds_t i = 0; i < n; i++) {
        short re = fds[i].revents, ev = fds[i].events;
        /* select reports errors and hang-ups as readable/writable */
        if ((ev & POLLIN) && (re & (POLLIN | POLLHUP | POLLERR)))
            FD_SET(fds[i].fd, r), count++;
        if ((ev & POLLOUT) && (re & (POLLOUT | POLLERR)))
            FD_SET(fds[i].fd, w), count++;
        if ((ev & POLLPRI) && (re & POLLPRI))
            FD_SET(fds[i].fd, e), count++;
    }
    return count;
}

static bool sets_carry(int nfds, fd_set *r, fd_set *w, fd_set *e)
{
    for (int fd = 0; fd < nfds && fd < FD_SETSIZE; fd++)
        if (((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e))) &&
            ours(fd))
            return true;
    return false;
}

PRELOAD_EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
    preload_ready();
    if (nfds < 0 || nfds > FD_SETSIZE || !sets_carry(nfds, r, w, e))
        return real.select(nfds, r, w, e, tv);
    if (tv && (tv->tv_sec < 0 || tv->tv_usec < 0)) {
        errno = EINVAL;
        return -1;
    }
    int ms = -1;
    if (tv) {
        long long t = (long long)tv->tv_sec * 1000 + (tv->tv_usec + 999) / 1000;
        ms = t > 0x7fffffff ? 0x7fffffff : (int)t;
    }
    int rc = select_any(nfds, r, w, e, ms, NULL);
    if (rc == 0 && tv) /* Linux leaves the time not slept; a timeout leaves none */
        *tv = (struct timeval){0, 0};
    return rc;
}

PRELOAD_EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *t,
                           const sigset_t *mask)
{
    preload_ready();
    if (nfds < 0 || nfds > FD_SETSIZE || !sets_carry(nfds, r, w, e))
        return real.pselect(nfds, r, w, e, t, mask);
    if (!timespec_valid(t)) {
        errno = EINVAL;
        return -1;
    }
    return select_any(nfds, r, w, e, timespec_ms(t), mask);
}
