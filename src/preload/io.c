/*
 * io.c - the data calls. A carried descriptor's bytes go through sovia;
 * every other descriptor goes to libc untouched.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sovia.h>

#include "preload.h"
#include "sock.h"
#include "transparent.h"
#include "waits.h"

/* Each call: -1 means "not carried, use the kernel"; otherwise the result. */
#define KERNEL (-2)

/* A blocked recv or send interrupted by handlers that all had SA_RESTART
 * starts again, as the kernel's socket calls do (signal(7)). */
static bool restartable(ssize_t n, unsigned interrupting_before)
{
    return n < 0 && errno == EINTR &&
           atomic_load_explicit(preload_interrupt_count(), memory_order_relaxed) ==
               interrupting_before;
}

static ssize_t via_recv(int fd, const struct iovec *iov, int iovcnt, int flags)
{
    /* recv(MSG_OOB) never waits: before the pairing there is no urgent
     * byte, as on a connection that never had one (EINVAL). */
    int r = tp_prepare(fd, flags & MSG_OOB ? flags | MSG_DONTWAIT : flags);
    if (r < 0 && (flags & MSG_OOB) && errno == EAGAIN)
        errno = EINVAL;
    if (r <= 0)
        return r == 0 ? KERNEL : -1;
    unsigned before = atomic_load_explicit(preload_interrupt_count(), memory_order_relaxed);
    ssize_t n;
    do
        n = sov_recvv(fd, iov, iovcnt, flags);
    while (restartable(n, before));
    if (n < 0 && errno == EBADF && !carried(fd) && !sov_tp_closed_meanwhile())
        return KERNEL; /* fell back meanwhile */
    return n;
}

static ssize_t via_send(int fd, const struct iovec *iov, int iovcnt, int flags)
{
    ssize_t early = 0;
    int r = tp_prepare_send(fd, flags, iov, iovcnt, &early);
    if (r <= 0)
        return r == 0 ? KERNEL : -1;
    if (early)
        return early;
    unsigned before = atomic_load_explicit(preload_interrupt_count(), memory_order_relaxed);
    ssize_t n;
    do
        n = sov_sendv(fd, iov, iovcnt, flags);
    while (restartable(n, before));
    if (n < 0 && errno == EBADF && !carried(fd) && !sov_tp_closed_meanwhile())
        return KERNEL;
    return n;
}

PRELOAD_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
    preload_ready();
    if (carried(fd)) {
        struct iovec v = {buf, len};
        ssize_t n = via_recv(fd, &v, 1, 0);
        if (n != KERNEL)
            return n;
    }
    return real.read(fd, buf, len);
}

PRELOAD_EXPORT ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen)
{
    if (len > buflen)
        abort(); /* as glibc's fortify check does */
    return read(fd, buf, len);
}

PRELOAD_EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
    preload_ready();
    if (carried(fd)) {
        struct iovec v = {(void *)buf, len};
        ssize_t n = via_send(fd, &v, 1, 0);
        if (n != KERNEL)
            return n;
    }
    return real.write(fd, buf, len);
}

PRELOAD_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
    preload_ready();
    if (carried(fd) && iovcnt > 0 && iovcnt <= IOV_MAX) {
        ssize_t n = via_recv(fd, iov, iovcnt, 0);
        if (n != KERNEL)
            return n;
    }
    return real.readv(fd, iov, iovcnt);
}

PRELOAD_EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
    preload_ready();
    if (carried(fd) && iovcnt > 0 && iovcnt <= IOV_MAX) {
        ssize_t n = via_send(fd, iov, iovcnt, 0);
        if (n != KERNEL)
            return n;
    }
    return real.writev(fd, iov, iovcnt);
}

PRELOAD_EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
    preload_ready();
    if (carried(fd)) {
        struct iovec v = {(void *)buf, len};
        ssize_t n = via_send(fd, &v, 1, flags);
        if (n != KERNEL)
            return n;
    }
    return real.send(fd, buf, len, flags);
}

PRELOAD_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags,
                              const struct sockaddr *to, socklen_t tolen)
{
    preload_ready();
    if (carried(fd)) { /* a connected stream ignores the address, as TCP does */
        struct iovec v = {(void *)buf, len};
        ssize_t n = via_send(fd, &v, 1, flags);
        if (n != KERNEL)
            return n;
    }
    return real.sendto(fd, buf, len, flags, to, tolen);
}

PRELOAD_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    preload_ready();
    if (carried(fd) && msg && msg->msg_iovlen > 0 && msg->msg_iovlen <= IOV_MAX) {
        ssize_t n = via_send(fd, msg->msg_iov, (int)msg->msg_iovlen, flags);
        if (n != KERNEL)
            return n;
    }
    return real.sendmsg(fd, msg, flags);
}

PRELOAD_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    preload_ready();
    if (carried(fd)) {
        struct iovec v = {buf, len};
        ssize_t n = via_recv(fd, &v, 1, flags);
        if (n != KERNEL)
            return n;
    }
    return real.recv(fd, buf, len, flags);
}

PRELOAD_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags)
{
    if (len > buflen)
        abort();
    return recv(fd, buf, len, flags);
}

PRELOAD_EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *from,
                                socklen_t *fromlen)
{
    preload_ready();
    if (carried(fd)) {
        struct iovec v = {buf, len};
        ssize_t n = via_recv(fd, &v, 1, flags);
        if (n != KERNEL) {
            if (n >= 0 && from && fromlen)
                *fromlen = 0; /* TCP gives no source address */
            return n;
        }
    }
    return real.recvfrom(fd, buf, len, flags, from, fromlen);
}

PRELOAD_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
                                      struct sockaddr *from, socklen_t *fromlen)
{
    if (len > buflen)
        abort();
    return recvfrom(fd, buf, len, flags, from, fromlen);
}

PRELOAD_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    preload_ready();
    if (carried(fd) && msg && msg->msg_iovlen > 0 && msg->msg_iovlen <= IOV_MAX) {
        ssize_t n = via_recv(fd, msg->msg_iov, (int)msg->msg_iovlen, flags);
        if (n != KERNEL) {
            if (n >= 0) {
                msg->msg_namelen = 0;
                msg->msg_controllen = 0;
                msg->msg_flags = flags & MSG_OOB; /* as TCP marks the urgent byte */
            }
            return n;
        }
    }
    return real.recvmsg(fd, msg, flags);
}

/* preadv2/pwritev2 at offset -1 are readv/writev with flags; any other
 * offset leaves the kernel to refuse (ESPIPE, EINVAL) as it would. */
static int rwf_msg_flags(int rwf)
{
    return rwf & RWF_NOWAIT ? MSG_DONTWAIT : 0;
}

static bool rwf_known(int rwf)
{
    return !(rwf & ~(RWF_HIPRI | RWF_DSYNC | RWF_SYNC | RWF_NOWAIT | RWF_APPEND));
}

PRELOAD_EXPORT ssize_t preadv2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int rwf)
{
    preload_ready();
    if (offset == -1 && carried(fd) && iovcnt > 0 && iovcnt <= IOV_MAX && rwf_known(rwf)) {
        ssize_t n = via_recv(fd, iov, iovcnt, rwf_msg_flags(rwf));
        if (n != KERNEL)
            return n;
    }
    return real.preadv2(fd, iov, iovcnt, offset, rwf);
}

PRELOAD_EXPORT ssize_t pwritev2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int rwf)
{
    preload_ready();
    if (offset == -1 && carried(fd) && iovcnt > 0 && iovcnt <= IOV_MAX && rwf_known(rwf)) {
        ssize_t n = via_send(fd, iov, iovcnt, rwf_msg_flags(rwf));
        if (n != KERNEL)
            return n;
    }
    return real.pwritev2(fd, iov, iovcnt, offset, rwf);
}

PRELOAD_EXPORT ssize_t preadv64v2(int fd, const struct iovec *iov, int iovcnt, off_t offset,
                                  int rwf)
{
    return preadv2(fd, iov, iovcnt, offset, rwf);
}

PRELOAD_EXPORT ssize_t pwritev64v2(int fd, const struct iovec *iov, int iovcnt, off_t offset,
                                   int rwf)
{
    return pwritev2(fd, iov, iovcnt, offset, rwf);
}

/* The batch calls, message by message as the kernel does for a stream:
 * a count once any message went through, -1 only if the first failed. */
PRELOAD_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned vlen, int flags)
{
    preload_ready();
    if (!carried(fd))
        return real.sendmmsg(fd, vec, vlen, flags);
    if (vlen > IOV_MAX)
        vlen = IOV_MAX;
    if (vlen && !vec) {
        errno = EFAULT;
        return -1;
    }
    unsigned done = 0;
    for (; done < vlen; done++) {
        ssize_t n = sendmsg(fd, &vec[done].msg_hdr, flags);
        if (n < 0)
            break;
        vec[done].msg_len = (unsigned)n;
    }
    return done || !vlen ? (int)done : -1;
}

/* As the kernel: the timeout is looked at only after each message, so
 * it does not bound a blocking receive (recvmmsg(2), BUGS). */
PRELOAD_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned vlen, int flags,
                            struct timespec *timeout)
{
    preload_ready();
    if (!carried(fd))
        return real.recvmmsg(fd, vec, vlen, flags, timeout);
    if (!timespec_valid(timeout)) {
        errno = EINVAL;
        return -1;
    }
    if (vlen > IOV_MAX)
        vlen = IOV_MAX;
    if (vlen && !vec) {
        errno = EFAULT;
        return -1;
    }
    uint64_t end = timeout ? sov_now_ns() + (uint64_t)timeout->tv_sec * 1000000000u +
                                 (uint64_t)timeout->tv_nsec
                           : 0;
    int each = flags & ~MSG_WAITFORONE;
    unsigned done = 0;
    while (done < vlen) {
        ssize_t n = recvmsg(fd, &vec[done].msg_hdr, each);
        if (n < 0)
            break;
        vec[done++].msg_len = (unsigned)n;
        if (flags & MSG_WAITFORONE)
            each |= MSG_DONTWAIT;
        if (timeout) {
            uint64_t now = sov_now_ns();
            uint64_t left = now < end ? end - now : 0;
            timeout->tv_sec = (time_t)(left / 1000000000u);
            timeout->tv_nsec = (long)(left % 1000000000u);
            if (!left)
                break;
        }
    }
    return done || !vlen ? (int)done : -1;
}
