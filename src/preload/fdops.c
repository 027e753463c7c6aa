/*
 * fdops.c - descriptor calls: dup names the same sovia socket under another
 * descriptor; fcntl and ioctl keep sovia's view of O_NONBLOCK and answer
 * FIONREAD, SIOCATMARK. Everything else is the kernel's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sovia.h>
#include <vipl_ext.h>

#include "preload.h"
#include "transparent.h"

/* newfd now names oldfd's file: make it name the sovia socket too. */
static int alias(int oldfd, int newfd)
{
    if (newfd < 0 || newfd == oldfd || !carried(oldfd))
        return newfd;
    int err = sov_tp_dup(oldfd, newfd);
    if (err) {
        real.close(newfd);
        errno = -err;
        return -1;
    }
    if (newfd <= 2)
        stdio_follow_socket(newfd);
    return newfd;
}

PRELOAD_EXPORT int dup(int fd)
{
    preload_ready();
    return alias(fd, real.dup(fd));
}

/* dup2 onto one of sovia's own descriptors would close it under sovia:
 * refused with the errno Linux gives when dup2 races with an open. */
static bool taken_by_sovia(int newfd)
{
    if (!VipxFdIsOwn(newfd))
        return false;
    errno = EBUSY;
    return true;
}

PRELOAD_EXPORT int dup3(int oldfd, int newfd, int flags)
{
    preload_ready();
    if (taken_by_sovia(newfd))
        return -1;
    if (oldfd != newfd && carried(newfd)) /* dup2 closes newfd first */
        close(newfd);
    return alias(oldfd, real.dup3(oldfd, newfd, flags));
}

PRELOAD_EXPORT int dup2(int oldfd, int newfd)
{
    preload_ready();
    if (taken_by_sovia(newfd))
        return -1;
    if (oldfd != newfd && carried(newfd))
        close(newfd);
    return alias(oldfd, real.dup2(oldfd, newfd));
}

static int do_fcntl(int fd, int cmd, va_list ap)
{
    /* Every command takes an int, a pointer or nothing; a long carries each. */
    long arg = va_arg(ap, long);
    int rc = real.fcntl(fd, cmd, arg);
    if (rc < 0 || !carried(fd))
        return rc;
    switch (cmd) {
    case F_DUPFD:
    case F_DUPFD_CLOEXEC:
        return alias(fd, rc);
    case F_SETFL:
        sov_tp_set_nonblock(fd, (arg & O_NONBLOCK) != 0);
        break;
    case F_SETOWN:
    case F_SETOWN_EX:
        sov_tp_watch_owner(fd);
        break;
    default:
        break;
    }
    return rc;
}

PRELOAD_EXPORT int fcntl(int fd, int cmd, ...)
{
    preload_ready();
    va_list ap;
    va_start(ap, cmd);
    int rc = do_fcntl(fd, cmd, ap);
    va_end(ap);
    return rc;
}

PRELOAD_EXPORT int fcntl64(int fd, int cmd, ...)
{
    preload_ready();
    va_list ap;
    va_start(ap, cmd);
    int rc = do_fcntl(fd, cmd, ap);
    va_end(ap);
    return rc;
}

PRELOAD_EXPORT int ioctl(int fd, unsigned long req, ...)
{
    preload_ready();
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if ((req == FIONREAD || req == SIOCATMARK) && carried(fd) &&
        tp_prepare(fd, MSG_DONTWAIT) != 0) {
        int n = 0;
        if ((req == FIONREAD ? sov_tp_unread(fd, &n) : sov_tp_atmark(fd, &n)) == 0) {
            if (!arg) {
                errno = EFAULT;
                return -1;
            }
            *(int *)arg = n;
            return 0;
        }
    }
    int rc = real.ioctl(fd, req, arg);
    if (rc == 0 && req == FIONBIO && arg && carried(fd))
        sov_tp_set_nonblock(fd, *(int *)arg != 0);
    if (rc == 0 && (req == FIOSETOWN || req == SIOCSPGRP) && carried(fd))
        sov_tp_watch_owner(fd);
    return rc;
}
