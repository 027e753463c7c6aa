/*
 * stdio.c - fdopen on a carried socket. glibc's stdio reads and writes
 * through internal entry points that no preload can interpose, so the
 * stream gets cookie functions that go through the wrappers, and keeps the
 * descriptor as its fileno. A TCP socket that is not carried yet gets one
 * too: it may be connected after fdopen (linux-ftpd's active-mode data
 * socket is), and fclose of a plain stream would close the descriptor
 * inside glibc, unseen, leaving a stale carried entry behind.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"

/* Our streams, so that freopen can tell them (it cannot work on a cookie
 * stream: glibc's freopen reaches into the file's own fields). */
struct cookie {
    int fd;
    FILE *f;
    struct cookie *next;
};

static struct cookie *cookies;
static pthread_mutex_t cookies_lock = PTHREAD_MUTEX_INITIALIZER;

static ssize_t cookie_read(void *c, char *buf, size_t len)
{
    return read(((struct cookie *)c)->fd, buf, len);
}

/* stdio treats a cookie's short write as an error: all of it, or what
 * went before the error (-1 if nothing did). */
ssize_t stdio_write_full(int fd, const char *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, buf + done, len - done);
        if (n < 0)
            return done ? (ssize_t)done : -1;
        done += (size_t)n;
    }
    return (ssize_t)done;
}

static ssize_t cookie_write(void *c, const char *buf, size_t len)
{
    return stdio_write_full(((struct cookie *)c)->fd, buf, len);
}

static int cookie_close(void *c)
{
    struct cookie *k = c;
    pthread_mutex_lock(&cookies_lock);
    for (struct cookie **p = &cookies; *p; p = &(*p)->next)
        if (*p == k) {
            *p = k->next;
            break;
        }
    pthread_mutex_unlock(&cookies_lock);
    int rc = close(k->fd);
    free(k);
    return rc;
}

static bool ours(FILE *f)
{
    pthread_mutex_lock(&cookies_lock);
    struct cookie *k = cookies;
    while (k && k->f != f)
        k = k->next;
    pthread_mutex_unlock(&cookies_lock);
    return k != NULL;
}

PRELOAD_EXPORT FILE *fdopen(int fd, const char *mode)
{
    preload_ready();
    if (!mode || (!carried(fd) && !tcp_socket(fd)))
        return real.fdopen(fd, mode);
    if (fcntl(fd, F_GETFD) < 0)
        return NULL; /* EBADF */
    struct cookie *k = malloc(sizeof(*k));
    if (!k) {
        errno = ENOMEM;
        return NULL;
    }
    k->fd = fd;
    cookie_io_functions_t io = {cookie_read, cookie_write, NULL, cookie_close};
    FILE *f = fopencookie(k, mode, io);
    if (!f) {
        free(k);
        return NULL;
    }
    f->_fileno = fd; /* fileno() must still name the socket */
    k->f = f;
    pthread_mutex_lock(&cookies_lock);
    k->next = cookies;
    cookies = k;
    pthread_mutex_unlock(&cookies_lock);
    return f;
}

/* freopen of one of our streams (a daemon sends stderr to /dev/null):
 * close it, open the file on the lowest descriptor (the one just freed, as
 * glibc's freopen keeps the number) and put the new stream where the old
 * one was, if that was stdin, stdout or stderr. */
static FILE *reopen_ours(const char *path, const char *mode, FILE *f)
{
    FILE **std = f == stdin ? &stdin : f == stdout ? &stdout : f == stderr ? &stderr : NULL;
    fclose(f);
    if (!path) { /* changing the mode of a socket stream: not supported */
        errno = EBADF;
        return NULL;
    }
    FILE *nf = fopen(path, mode);
    if (nf && std)
        *std = nf;
    return nf;
}

PRELOAD_EXPORT FILE *freopen(const char *path, const char *mode, FILE *f)
{
    preload_ready();
    if (f && ours(f))
        return reopen_ours(path, mode, f);
    static FILE *(*libc_freopen)(const char *, const char *, FILE *);
    if (!libc_freopen)
        libc_freopen = (__typeof__(libc_freopen))dlsym(RTLD_NEXT, "freopen");
    return libc_freopen(path, mode, f);
}

PRELOAD_EXPORT FILE *freopen64(const char *path, const char *mode, FILE *f)
{
    preload_ready();
    if (f && ours(f))
        return reopen_ours(path, mode, f);
    static FILE *(*libc_freopen64)(const char *, const char *, FILE *);
    if (!libc_freopen64)
        libc_freopen64 = (__typeof__(libc_freopen64))dlsym(RTLD_NEXT, "freopen64");
    return libc_freopen64(path, mode, f);
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
