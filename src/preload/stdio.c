/*
 * stdio.c - fdopen on a carried socket. glibc's stdio reads and writes
 * through internal entry points that no preload can interpose, so the
 * stream gets cookie functions that go through the wrappers, and keeps the
 * descriptor as its fileno.
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
    if (!carried(fd) || !mode)
        return real.fdopen(fd, mode);
    if (fcntl(fd, F_GETFD) < 0)
        return NULL; /* EBADF */
    cookie_io_functions_t io = {cookie_read, cookie_write, NULL, cookie_close};
    FILE *f = fopencookie((void *)(intptr_t)fd, mode, io);
    if (f)
        f->_fileno = fd; /* fileno() must still name the socket */
    return f;
}
