/*
 * io.c - the data calls. A carried descriptor's bytes go through sovia;
 * every other descriptor goes to libc untouched.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sovia.h>

#include "preload.h"
#include "sock.h"
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
    int r = tp_prepare(fd, flags);
    if (r <= 0)
        return r == 0 ? KERNEL : -1;
    unsigned before = atomic_load_explicit(preload_interrupt_count(), memory_order_relaxed);
    ssize_t n;
    do
        n = sov_recvv(fd, iov, iovcnt, flags);
    while (restartable(n, before));
    if (n < 0 && errno == EBADF && !carried(fd))
        return KERNEL; /* fell back or was closed meanwhile: the kernel says which */
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
    if (n < 0 && errno == EBADF && !carried(fd))
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
                msg->msg_flags = 0;
            }
            return n;
        }
    }
    return real.recvmsg(fd, msg, flags);
}

/* sendfile to a carried socket: read the file and send, as the kernel would
 * (offset given: pread and advance *offset; else the file position moves). */
PRELOAD_EXPORT ssize_t sendfile(int out, int in, off_t *offset, size_t count)
{
    preload_ready();
    if (!carried(out))
        return real.sendfile(out, in, offset, count);
    static __thread char *chunk;
    const size_t chunk_size = 256 * 1024;
    if (!chunk && !(chunk = malloc(chunk_size))) {
        errno = ENOMEM;
        return -1;
    }
    size_t done = 0;
    while (done < count) {
        size_t want = count - done < chunk_size ? count - done : chunk_size;
        ssize_t got = offset ? pread(in, chunk, want, *offset) : real.read(in, chunk, want);
        if (got <= 0) {
            if (got < 0 && done == 0)
                return -1;
            break;
        }
        ssize_t sent = 0;
        while (sent < got) {
            ssize_t k = send(out, chunk + sent, (size_t)(got - sent), 0);
            if (k < 0) {
                /* give back what was read but not sent */
                if (!offset)
                    lseek(in, -(off_t)(got - sent), SEEK_CUR);
                if (offset)
                    *offset += sent;
                done += (size_t)sent;
                return done ? (ssize_t)done : -1;
            }
            sent += k;
        }
        if (offset)
            *offset += got;
        done += (size_t)got;
    }
    return (ssize_t)done;
}

PRELOAD_EXPORT ssize_t sendfile64(int out, int in, off_t *offset, size_t count)
{
    return sendfile(out, in, offset, count);
}
