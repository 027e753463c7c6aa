/*
 * closefrom.c - closefrom and close_range. Daemons close every descriptor
 * they do not know before they exec a service (openbsd-inetd does), or at
 * start; among them are sovia's own (segments, connection and wake-up
 * sockets), without which the carried connections die, and a handed-over
 * connection cannot reach the new program. The wrappers close the others
 * one by one (a carried socket through close(), as if closed by hand) and
 * spare sovia's.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload.h"
#include "sock.h"

/* The open descriptors in [first, last], from /proc/self/fd. */
static int *open_fds(unsigned first, unsigned last, size_t *count)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return NULL;
    size_t n = 0, cap = 64;
    int *fds = malloc(cap * sizeof(*fds));
    struct dirent *e;
    while (fds && (e = readdir(d))) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end || end == e->d_name || fd == dirfd(d) || fd < (long)first || fd > (long)last)
            continue;
        if (n == cap) {
            int *more = realloc(fds, (cap *= 2) * sizeof(*fds));
            if (!more) {
                free(fds);
                fds = NULL;
                break;
            }
            fds = more;
        }
        fds[n++] = (int)fd;
    }
    closedir(d);
    *count = n;
    return fds;
}

/* Has sovia descriptors of its own yet? (The exit record's log is open
 * from the start, before any connection.) */
static bool sovia_holds_fds(void)
{
    return sov_g.nic || exitlog_fd() >= 0;
}

/* Closes (or marks close-on-exec) what is not sovia's. -1 with errno when
 * the descriptors could not be listed: the caller then asks the kernel. */
static int spare_sovia(unsigned first, unsigned last, int flags)
{
    size_t n = 0;
    int *fds = open_fds(first, last, &n);
    if (!fds) {
        errno = ENOMEM;
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (VipxFdIsOwn(fds[i]))
            continue;
        if (flags & CLOSE_RANGE_CLOEXEC)
            fcntl(fds[i], F_SETFD, FD_CLOEXEC);
        else
            close(fds[i]); /* the wrapper: a carried socket is closed properly */
    }
    free(fds);
    return 0;
}

PRELOAD_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
    preload_ready();
    if (!sovia_holds_fds() || first > last || (flags & ~(CLOSE_RANGE_CLOEXEC | CLOSE_RANGE_UNSHARE)))
        return (int)syscall(SYS_close_range, first, last, flags);
    if ((flags & CLOSE_RANGE_UNSHARE) && unshare(CLONE_FILES) != 0)
        return -1;
    if (spare_sovia(first, last, flags) == 0)
        return 0;
    return (int)syscall(SYS_close_range, first, last, flags & ~CLOSE_RANGE_UNSHARE);
}

PRELOAD_EXPORT void closefrom(int lowfd)
{
    if (lowfd < 0)
        lowfd = 0;
    close_range((unsigned)lowfd, ~0u, 0);
}
