/*
 * preload.h - the preload library of `sovia run`: libc's socket calls,
 * interposed. Descriptors sovia carries are found through the sockets
 * layer's table; every other descriptor goes straight to libc.
 */
#ifndef SOVIA_PRELOAD_H
#define SOVIA_PRELOAD_H

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#define PRELOAD_EXPORT __attribute__((visibility("default")))

/* The libc functions the wrappers stand in front of. */
struct real_libc {
    int (*socket)(int, int, int);
    int (*connect)(int, const struct sockaddr *, socklen_t);
    int (*listen)(int, int);
    int (*accept)(int, struct sockaddr *, socklen_t *);
    int (*accept4)(int, struct sockaddr *, socklen_t *, int);
    int (*close)(int);
    int (*shutdown)(int, int);
    ssize_t (*read)(int, void *, size_t);
    ssize_t (*write)(int, const void *, size_t);
    ssize_t (*readv)(int, const struct iovec *, int);
    ssize_t (*writev)(int, const struct iovec *, int);
    ssize_t (*send)(int, const void *, size_t, int);
    ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
    ssize_t (*sendmsg)(int, const struct msghdr *, int);
    ssize_t (*recv)(int, void *, size_t, int);
    ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
    ssize_t (*recvmsg)(int, struct msghdr *, int);
    ssize_t (*sendfile)(int, int, off_t *, size_t);
    ssize_t (*splice)(int, loff_t *, int, loff_t *, size_t, unsigned);
    int (*sendmmsg)(int, struct mmsghdr *, unsigned, int);
    int (*recvmmsg)(int, struct mmsghdr *, unsigned, int, struct timespec *);
    ssize_t (*preadv2)(int, const struct iovec *, int, off_t, int);
    ssize_t (*pwritev2)(int, const struct iovec *, int, off_t, int);
    int (*dup)(int);
    int (*dup2)(int, int);
    int (*dup3)(int, int, int);
    int (*fcntl)(int, int, ...);
    int (*ioctl)(int, unsigned long, ...);
    int (*setsockopt)(int, int, int, const void *, socklen_t);
    int (*poll)(struct pollfd *, nfds_t, int);
    int (*ppoll)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
    int (*select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
    int (*pselect)(int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *);
    int (*epoll_create)(int);
    int (*epoll_create1)(int);
    int (*epoll_ctl)(int, int, int, struct epoll_event *);
    int (*epoll_wait)(int, struct epoll_event *, int, int);
    int (*epoll_pwait)(int, struct epoll_event *, int, int, const sigset_t *);
    int (*epoll_pwait2)(int, struct epoll_event *, int, const struct timespec *, const sigset_t *);
    pid_t (*fork)(void);
    FILE *(*fdopen)(int, const char *);
    long (*syscall)(long, ...);
};

extern struct real_libc real;
void preload_resolve(void);

static inline void preload_ready(void)
{
    if (__builtin_expect(!real.read, 0))
        preload_resolve();
}

/* Is fd carried by sovia right now (a hint; the sov_* call re-checks)? */
bool carried(int fd);

/* Before using a carried descriptor: 1 carried (and paired), 0 use the
 * kernel, -1 with errno (EAGAIN while a non-blocking client awaits pairing,
 * EINTR). */
int tp_prepare(int fd, int msg_flags);
/* tp_prepare for a send: with *early set to the bytes an accepted socket
 * awaiting its client's answer took at once (then nothing more to send). */
int tp_prepare_send(int fd, int msg_flags, const struct iovec *iov, int iovcnt, ssize_t *early);

/* socket.c */
bool tcp_socket(int fd); /* an AF_INET/AF_INET6 TCP stream socket */

/* stdio.c: stdin, stdout or stderr (fd 0..2) become a stream that goes
 * through the wrappers, for a descriptor that is now a carried socket. */
void stdio_follow_socket(int fd);
/* A cookie stream's write: the whole buffer (stdio takes a short write for
 * an error). */
ssize_t stdio_write_full(int fd, const char *buf, size_t len);
void listeners_after_fork_child(void);
void epoll_after_fork_child(void);   /* the sets' locks made new */
/* image.c: whether the program an exec starts loads the preload and reads
 * its sockets through libc (path, or fd >= 0 for fexecve). */
bool preload_image_runs_sovia(const char *path, int fd);
char *preload_image_search(const char *file); /* execvp's search; malloc'd or NULL */
/* sandbox.c: an io_uring instance in the process makes sovia step aside
 * (its connections back to the kernel, no new one carried): true then. */
bool preload_io_uring_check(void);
/* Before syscall(nr, a...) goes to the kernel (rawcall.c). */
void preload_sandbox_syscall(long nr, const long a[6]);
void listener_drop(int fd);

/* epoll.c: a closed descriptor leaves the epoll sets that hold it. */
void epoll_forget_fd(int fd);
void epoll_close_fd(int fd); /* fd itself (maybe an epoll set) is closed */

/* signal.c: the signals whose default action ends the process and that
 * exitlog.c writes a record for; arm: stand in for SIG_DFL from now on. */
void preload_ending_signals(sigset_t *set);
void preload_signals_arm(void);

/* exitlog.c: the exit record (SOVIA_STAT_LOG). */
/* socket.c: libfabric's own sockets (the fabric provider's connections)
 * are never carried; seen: where libfabric is mapped (at sovia's init). */
void preload_fabric_seen(void);
void exitlog_capture(void);     /* at start and in a fork child */
void exitlog_signal(int sig);   /* async-signal-safe: before `sig` ends the process */
void exitlog_now(void);         /* the record now: the process sandboxes itself */
int exitlog_fd(void);           /* the log it keeps open, or -1 */
/* The SOVIA_STAT_LOG path to put in a next image's environment, which
 * lacks the variable; NULL if envp has it, or no log is named. */
const char *exitlog_for_exec(char *const envp[]);
/* exec.c: the environment of a next image (SOVIA_INHERIT=memfd when
 * memfd >= 0, SOVIA_STAT_LOG put back); NULL: use envp. free() it. */
char **preload_exec_env(char *const envp[], int memfd, bool *memfd_kept);

/* poll.c */
int poll_any(struct pollfd *fds, nfds_t n, int timeout_ms, const sigset_t *mask);
/* A wait's timespec: valid (NULL is), and in whole ms rounded up (-1 for NULL). */
bool timespec_valid(const struct timespec *t);
int timespec_ms(const struct timespec *t);

#endif /* SOVIA_PRELOAD_H */
