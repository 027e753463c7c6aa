/*
 * stdio.c - fdopen on a carried socket. glibc's stdio reads and writes
 * through internal entry points that no preload can interpose, so the
 * stream gets cookie functions that go through the wrappers, and keeps the
 * descriptor as its fileno. A TCP socket that is not carried yet gets one
 * too: it may be connected after fdopen (linux-ftpd's active-mode data
 * socket is), and fclose of a plain stream would close the descriptor
 * inside glibc, unseen, leaving a stale carried entry behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"

static ssize_t cookie_read(void *c, char *buf, size_t len)
{
    return read((int)(intptr_t)c, buf, len);
}

static ssize_t cookie_write(void *c, const char *buf, size_t len)
{
    size_t done = 0;
    while (done < len) { /* stdio treats a short write as an error */
        ssize_t n = write((int)(intptr_t)c, buf + done, len - done);
        if (n < 0)
            return done ? (ssize_t)done : -1;
        done += (size_t)n;
    }
    return (ssize_t)done;
}

static int cookie_close(void *c)
{
    return close((int)(intptr_t)c);
}

PRELOAD_EXPORT FILE *fdopen(int fd, const char *mode)
{
    preload_ready();
    if (!mode || (!carried(fd) && !tcp_socket(fd)))
        return real.fdopen(fd, mode);
    if (fcntl(fd, F_GETFD) < 0)
        return NULL; /* EBADF */
    cookie_io_functions_t io = {cookie_read, cookie_write, NULL, cookie_close};
    FILE *f = fopencookie((void *)(intptr_t)fd, mode, io);
    if (f)
        f->_fileno = fd; /* fileno() must still name the socket */
    return f;
}

/* glibc's stdin, stdout and stderr read and write through its internal
 * entry points, which no preload sees. A server that serves a connection
 * through them (ftpd -D's child after dup2(socket, 0/1), a service inetd
 * started on the socket) gets a cookie stream on the descriptor in their
 * place; the old stream is flushed and left open (closing it would close
 * the descriptor). */
void stdio_follow_socket(int fd)
{
    if (fd < 0 || fd > 2)
        return;
    FILE **std = fd == 0 ? &stdin : fd == 1 ? &stdout : &stderr;
    fflush(*std);
    FILE *f = fdopen(fd, fd == 0 ? "r" : "w");
    if (!f)
        return;
    if (fd == 2)
        setvbuf(f, NULL, _IONBF, 0);
    *std = f;
}
