/* opts.c - socket options and fcntl. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "sock.h"

static int int_opt(const void *val, socklen_t len, int *out)
{
    if (!val || len < (socklen_t)sizeof(int))
        return -EINVAL;
    memcpy(out, val, sizeof(int));
    return 0;
}

SOV_EXPORT int sov_setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
    struct sov_sock *s = sov_acquire(fd);
    if (!s)
        return -1;
    int v = 0, err = 0;
    if (level == IPPROTO_TCP && name == TCP_NODELAY) {
        if (!(err = int_opt(val, len, &v))) {
            s->nodelay = v != 0;
            if (s->nodelay && s->conn && s->conn->clen)
                sov_flush(s, false); /* as TCP: pending data goes now */
        }
    } else if (level == SOL_SOCKET && name == SO_RCVBUF) {
        if (!(err = int_opt(val, len, &v)) && s->kind != SK_CONNECTED) {
            size_t w = (size_t)(v > 0 ? v : 0) / s->cfg.mtu;
            s->cfg.window = (unsigned)(w < 2 ? 2 : w > 1024 ? 1024 : w);
            if (s->cfg.ack_threshold > s->cfg.window)
                s->cfg.ack_threshold = s->cfg.window;
        }
    } else if (level == SOL_SOCKET && name == SO_SNDBUF) {
        if (!(err = int_opt(val, len, &v)))
            s->sndbuf = v < 2048 ? 2048 : v;
    } else if (level == SOL_SOCKET && name == SO_REUSEADDR) {
        if (!(err = int_opt(val, len, &v)))
            s->reuseaddr = v != 0;
    } else if (level == SOL_SOCKET && name == SO_KEEPALIVE) {
        if (!(err = int_opt(val, len, &v)))
            s->keepalive = v != 0;
    } else if (level == SOL_SOCKET && name == SO_OOBINLINE) {
        if (!(err = int_opt(val, len, &v)))
            s->oobinline = v != 0;
    } else if (level == SOL_SOCKET && name == SO_LINGER) {
        if (!val || len < (socklen_t)sizeof(struct linger))
            err = -EINVAL;
        else
            memcpy(&s->linger, val, sizeof(struct linger));
    } else {
        err = -ENOPROTOOPT;
    }
    sov_release(s);
    if (err) {
        errno = -err;
        return -1;
    }
    return 0;
}

SOV_EXPORT int sov_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
    struct sov_sock *s = sov_acquire(fd);
    if (!s)
        return -1;
    int v = 0, err = 0;
    bool is_linger = false;
    if (level == IPPROTO_TCP && name == TCP_NODELAY)
        v = s->nodelay;
    else if (level == SOL_SOCKET && name == SO_RCVBUF)
        v = (int)((s->conn ? s->conn->cfg.window : s->cfg.window) * s->cfg.mtu);
    else if (level == SOL_SOCKET && name == SO_SNDBUF)
        v = s->sndbuf;
    else if (level == SOL_SOCKET && name == SO_REUSEADDR)
        v = s->reuseaddr;
    else if (level == SOL_SOCKET && name == SO_KEEPALIVE)
        v = s->keepalive;
    else if (level == SOL_SOCKET && name == SO_OOBINLINE)
        v = s->oobinline;
    else if (level == SOL_SOCKET && name == SO_TYPE)
        v = SOCK_STREAM;
    else if (level == SOL_SOCKET && name == SO_ERROR) {
        v = s->so_error;
        s->so_error = 0;
        if (!v && s->conn && s->conn->reset && !s->conn->reset_told) {
            v = ECONNRESET; /* a pending reset is reported once, as TCP's sk_err */
            s->conn->reset_told = true;
        }
    } else if (level == SOL_SOCKET && name == SO_LINGER)
        is_linger = true;
    else
        err = -ENOPROTOOPT;
    if (!err) {
        /* As the kernel: a shorter buffer gets the value truncated. */
        socklen_t need = is_linger ? sizeof(struct linger) : sizeof(int);
        if (!val || !len || (int)*len < 0) {
            err = -EINVAL;
        } else {
            socklen_t n = *len < need ? *len : need;
            memcpy(val, is_linger ? (void *)&s->linger : (void *)&v, n);
            *len = n;
        }
    }
    sov_release(s);
    if (err) {
        errno = -err;
        return -1;
    }
    return 0;
}

SOV_EXPORT int sov_fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    int arg = va_arg(ap, int);
    va_end(ap);
    struct sov_sock *s = sov_acquire(fd);
    if (!s)
        return -1;
    int r = 0;
    switch (cmd) {
    case F_GETFL:
        r = O_RDWR | (s->nonblock ? O_NONBLOCK : 0);
        break;
    case F_SETFL:
        s->nonblock = arg & O_NONBLOCK;
        break;
    case F_GETFD:
    case F_SETFD:
        r = fcntl(fd, cmd, arg); /* the placeholder carries FD_CLOEXEC */
        break;
    default:
        errno = EINVAL;
        r = -1;
    }
    sov_release(s);
    return r;
}
