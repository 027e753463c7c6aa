/*
 * transfer.c - sendfile and splice with a carried socket at one end. The
 * kernel would move the bytes over its own TCP connection, which the peer
 * never reads; here they go through a bounce buffer and sovia.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "preload.h"

enum { CHUNK = 256 * 1024 };

/* A thread's bounce buffer, kept for its next transfer. */
static char *chunk(void)
{
    static __thread char *buf;
    if (!buf && !(buf = malloc(CHUNK)))
        errno = ENOMEM;
    return buf;
}

/* Sends all of buf, waiting for room when the socket is non-blocking:
 * bytes taken out of a file or pipe cannot be put back. */
static ssize_t send_whole(int fd, const char *buf, size_t len)
{
    size_t sent = 0;
    while (sent < len) {
        ssize_t k = send(fd, buf + sent, len - sent, 0);
        if (k < 0 && errno == EAGAIN) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (poll(&p, 1, -1) >= 0 || errno == EINTR)
                continue;
        }
        if (k < 0)
            return sent ? (ssize_t)sent : -1;
        sent += (size_t)k;
    }
    return (ssize_t)sent;
}

/* sendfile to a carried socket: read the file and send, as the kernel would
 * (offset given: pread and advance *offset; else the file position moves). */
PRELOAD_EXPORT ssize_t sendfile(int out, int in, off_t *offset, size_t count)
{
    preload_ready();
    if (!carried(out))
        return real.sendfile(out, in, offset, count);
    char *buf = chunk();
    if (!buf)
        return -1;
    size_t done = 0;
    while (done < count) {
        size_t want = count - done < CHUNK ? count - done : CHUNK;
        ssize_t got = offset ? pread(in, buf, want, *offset) : real.read(in, buf, want);
        if (got <= 0) {
            if (got < 0 && done == 0)
                return -1;
            break;
        }
        ssize_t sent = 0;
        while (sent < got) {
            ssize_t k = send(out, buf + sent, (size_t)(got - sent), 0);
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

static bool is_pipe(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

static bool nonblocking(int fd, unsigned flags)
{
    return (flags & SPLICE_F_NONBLOCK) || (fcntl(fd, F_GETFL) & O_NONBLOCK);
}

/* Bytes the pipe can take now (waiting for room if it may block), or -1
 * (EAGAIN, EPIPE, EINTR). Reading no more than this from the socket keeps every
 * byte taken either in the pipe or still in the socket. */
static ssize_t pipe_room(int pipe, size_t want, unsigned flags)
{
    for (;;) {
        struct pollfd p = {.fd = pipe, .events = POLLOUT};
        if (poll(&p, 1, 0) == 1 && (p.revents & POLLERR)) {
            raise(SIGPIPE); /* no reader: as a write to the pipe would */
            errno = EPIPE;
            return -1;
        }
        int size = fcntl(pipe, F_GETPIPE_SZ), used = 0;
        if (size < 0 || ioctl(pipe, FIONREAD, &used) != 0)
            return -1;
        if (used < size)
            return (size_t)(size - used) < want ? size - used : (ssize_t)want;
        if (nonblocking(pipe, flags)) {
            errno = EAGAIN;
            return -1;
        }
        if (poll(&p, 1, -1) < 0)
            return -1;
    }
}

/* Writes all of buf to the pipe; as send_whole, it waits if it must. */
static void pipe_put(int pipe, const char *buf, size_t len)
{
    size_t put = 0;
    while (put < len) {
        ssize_t k = real.write(pipe, buf + put, len - put);
        if (k > 0) {
            put += (size_t)k;
            continue;
        }
        if (k < 0 && errno != EAGAIN && errno != EINTR)
            return; /* the reader went away (EPIPE): the bytes are lost with it */
        struct pollfd p = {.fd = pipe, .events = POLLOUT};
        poll(&p, 1, -1);
    }
}

static ssize_t socket_to_pipe(int sock, int pipe, size_t len, unsigned flags)
{
    char *buf = chunk();
    if (!buf)
        return -1;
    ssize_t room = pipe_room(pipe, len < CHUNK ? len : CHUNK, flags);
    if (room < 0)
        return -1;
    ssize_t n = recv(sock, buf, (size_t)room, 0);
    if (n > 0)
        pipe_put(pipe, buf, (size_t)n);
    return n;
}

static ssize_t pipe_to_socket(int pipe, int sock, size_t len, unsigned flags)
{
    char *buf = chunk();
    if (!buf)
        return -1;
    /* A socket with no room: EAGAIN before anything leaves the pipe. */
    struct pollfd p = {.fd = sock, .events = POLLOUT};
    if ((fcntl(sock, F_GETFL) & O_NONBLOCK) && poll(&p, 1, 0) == 0) {
        errno = EAGAIN;
        return -1;
    }
    if (flags & SPLICE_F_NONBLOCK) {
        struct pollfd q = {.fd = pipe, .events = POLLIN};
        if (poll(&q, 1, 0) == 0) {
            errno = EAGAIN;
            return -1;
        }
    }
    ssize_t got = real.read(pipe, buf, len < CHUNK ? len : CHUNK);
    if (got <= 0)
        return got;
    return send_whole(sock, buf, (size_t)got);
}

PRELOAD_EXPORT ssize_t splice(int in, loff_t *in_off, int out, loff_t *out_off, size_t len,
                              unsigned flags)
{
    preload_ready();
    bool from_sock = carried(in), to_sock = carried(out);
    if (!from_sock && !to_sock)
        return real.splice(in, in_off, out, out_off, len, flags);
    if ((from_sock && to_sock) || !is_pipe(from_sock ? out : in)) {
        errno = EINVAL; /* one end must be a pipe */
        return -1;
    }
    if (in_off || out_off) { /* neither a socket nor a pipe has a position */
        errno = ESPIPE;
        return -1;
    }
    if (len == 0)
        return 0;
    return from_sock ? socket_to_pipe(in, out, len, flags) : pipe_to_socket(in, out, len, flags);
}
