/* common.c - see fz.h. */
#include "fz.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

void fz_fail(const char *file, int line, const char *what)
{
    fprintf(stderr, "fuzz check failed at %s:%d: %s\n", file, line, what);
    abort();
}

void fz_trace(const char *fmt, ...)
{
    static int on = -1;
    if (on < 0)
        on = getenv("FZ_TRACE") != NULL;
    if (!on)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int fz_count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

int fz_seals_of(uint8_t bits)
{
    static const int map[] = {F_SEAL_SEAL, F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_WRITE,
                              F_SEAL_FUTURE_WRITE};
    int seals = 0;
    for (unsigned i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (bits & (1u << i))
            seals |= map[i];
    return seals;
}

int fz_memfd(size_t len, const void *init, size_t init_len, int seals)
{
    int fd = memfd_create("fz-seg", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    if (init_len > len)
        init_len = len;
    if (ftruncate(fd, (off_t)len) != 0 ||
        (init_len && pwrite(fd, init, init_len, 0) != (ssize_t)init_len)) {
        close(fd);
        return -1;
    }
    /* F_SEAL_SEAL last: it would refuse the others. */
    if ((seals & ~F_SEAL_SEAL) && fcntl(fd, F_ADD_SEALS, seals & ~F_SEAL_SEAL) != 0) {
        close(fd);
        return -1;
    }
    if ((seals & F_SEAL_SEAL) && fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int fz_make_fd(enum fz_fd_kind kind, size_t len, const void *init, size_t init_len, int seals)
{
    int two[2];
    switch (kind) {
    case FZ_FD_MEMFD:
        return fz_memfd(len, init, init_len, seals);
    case FZ_FD_PIPE:
        if (pipe2(two, O_CLOEXEC) != 0)
            return -1;
        close(two[1]);
        return two[0];
    case FZ_FD_DGRAM:
    case FZ_FD_STREAM:
        if (socketpair(AF_UNIX, (kind == FZ_FD_DGRAM ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC,
                       0, two) != 0)
            return -1;
        close(two[1]);
        return two[0];
    case FZ_FD_DEVNULL:
        return open("/dev/null", O_RDWR | O_CLOEXEC);
    default:
        return -1;
    }
}

socklen_t fz_vipl_sockaddr(struct sockaddr_un *sun, const char *disc)
{
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    /* The provider's naming (docs/ARCHITECTURE.md, "Connections"). */
    int n = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1, "sovia-vipl.%u.%s",
                     (unsigned)geteuid(), disc);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static int sys_poll(struct pollfd *pfd, unsigned long n, int timeout_ms)
{
    return poll(pfd, n, timeout_ms);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int fz_poll_with(int (*fn)(struct pollfd *, unsigned long, int), struct pollfd *pfd,
                 unsigned n, int timeout_ms)
{
    long long end = now_ms() + timeout_ms;
    for (;;) {
        long long left = end - now_ms();
        int rc = fn(pfd, n, left > 0 ? (int)left : 0);
        if (rc >= 0 || errno != EINTR)
            return rc;
    }
}

int fz_poll(struct pollfd *pfd, unsigned n, int timeout_ms)
{
    return fz_poll_with(sys_poll, pfd, n, timeout_ms);
}

ssize_t fz_send_fds(int sock, const void *buf, size_t len, const int *fds, int n)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * 8)];
        struct cmsghdr align;
    } u;
    struct iovec iov = {(void *)buf, len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (n > 8)
        n = 8;
    if (n > 0) {
        mh.msg_control = u.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)n);
    }
    return sendmsg(sock, &mh, MSG_NOSIGNAL);
}

ssize_t fz_recv_fds(int sock, void *buf, size_t len, int *fds, int max, int *nfds,
                    int timeout_ms)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * 8)];
        struct cmsghdr align;
    } u;
    struct iovec iov = {buf, len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = sizeof(u.buf)};
    struct pollfd pfd = {.fd = sock, .events = POLLIN};
    *nfds = 0;
    if (fz_poll(&pfd, 1, timeout_ms) != 1)
        return -1;
    ssize_t got = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    for (struct cmsghdr *c = got >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c)) {
        int n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (*nfds < max)
                fds[(*nfds)++] = fd;
            else
                close(fd);
        }
    }
    return got;
}

void fz_disc(char *buf, size_t len, const char *tag)
{
    snprintf(buf, len, "fz-%d-%s", (int)getpid(), tag);
}
