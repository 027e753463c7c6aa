/*
 * sandbox.c - before a process installs a seccomp filter, or sets up an
 * io_uring instance, its carried connections go back to their kernel
 * sockets in mid-stream (migrate.c) and no new one is carried.
 *
 * A filter may kill the thread on the first system call it does not list
 * (OpenSSH's pre-authentication child dies on a sendto), and sovia makes
 * system calls of its own on the data path (wake-ups, futexes, its record
 * of a shared connection). An io_uring instance reads and writes sockets
 * without libc: a carried socket's kernel side is idle, so its reads would
 * wait for ever. In both cases sovia steps aside: the program's sockets
 * are plain kernel sockets from then on, with every byte in its place.
 *
 * The wrappers: prctl(PR_SET_SECCOMP), and syscall(2) (rawcall.c) for
 * seccomp(2), prctl and io_uring_setup (libseccomp and liburing call the
 * kernel through it, or, built without libc, on their own: see
 * docs/SOCKETS.md for what cannot be seen). A process started under a filter (inherited)
 * runs without sovia unless a probe finds every call sovia makes allowed.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <linux/netlink.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload.h"
#include "sock.h"
#include "transparent.h"

#define PR_SET_SECCOMP_ 22 /* <linux/prctl.h>, without its declarations of prctl */
#define SECCOMP_SET_MODE_FILTER_ 1 /* <linux/seccomp.h>; 0 is strict mode */
#define FUTEX_WAKE_PRIVATE_ 129   /* <linux/futex.h> */

static void step_aside(bool sandbox)
{
    if (!atomic_load(&sov_g.inert))
        sov_tp_migrate_all(); /* sets inert: no new connection is carried */
    if (sandbox)
        exitlog_now(); /* final now; at its end it may not be allowed the calls */
}

static long kernel(long nr, long a0, long a1, long a2, long a3, long a4, long a5)
{
    preload_ready();
    return real.syscall(nr, a0, a1, a2, a3, a4, a5);
}

/* glibc's prctl is variadic; five words is what the kernel takes. */
PRELOAD_EXPORT int prctl(int option, unsigned long a2, unsigned long a3, unsigned long a4,
                         unsigned long a5)
{
    if (option == PR_SET_SECCOMP_)
        step_aside(true);
    return (int)kernel(SYS_prctl, option, (long)a2, (long)a3, (long)a4, (long)a5, 0);
}

void preload_sandbox_syscall(long nr, const long a[6])
{
    bool filter = (nr == SYS_seccomp && (a[0] == 0 || a[0] == SECCOMP_SET_MODE_FILTER_)) ||
                  (nr == SYS_prctl && a[0] == PR_SET_SECCOMP_);
    if (filter || nr == SYS_io_uring_setup)
        step_aside(filter);
}

/* ---- io_uring instances made without libc ------------------------------------------------ */

/* liburing makes its system calls itself, so an instance shows only as a
 * descriptor ("anon_inode:[io_uring]"). Looked for when a connection would
 * be carried, at most once per SCAN_EVERY_NS and never more often than a
 * hundred times the last look took (a process with many descriptors).
 * Then sovia steps aside; true from then on. */
#define SCAN_EVERY_NS 100000000ull

static _Atomic uint64_t next_scan_ns;

static bool io_uring_open(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return false;
    bool found = false;
    char path[300], target[32];
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, target, sizeof(target) - 1);
        found = n == 21 && memcmp(target, "anon_inode:[io_uring]", 21) == 0;
    }
    closedir(d);
    return found;
}

bool preload_io_uring_check(void)
{
    if (atomic_load_explicit(&sov_g.inert, memory_order_relaxed))
        return true;
    uint64_t now = sov_now_ns(), next = atomic_load_explicit(&next_scan_ns, memory_order_relaxed);
    if (now < next || !atomic_compare_exchange_strong(&next_scan_ns, &next, UINT64_MAX))
        return false; /* looked lately, or another thread looks now */
    bool found = io_uring_open();
    uint64_t took = sov_now_ns() - now;
    atomic_store(&next_scan_ns, now + (SCAN_EVERY_NS > 100 * took ? SCAN_EVERY_NS : 100 * took));
    if (found)
        step_aside(false);
    return found;
}

/* ---- A process started under a seccomp filter ------------------------------------------ */

/* What sovia's own calls need, tried once in a child: a filter that
 * forbids one of them (with an error, or by killing the thread) leaves
 * this process without sovia, carrying nothing, rather than killed by
 * sovia's next call (systemd's SystemCallFilter=, a container runtime's
 * profile). Every call is made on objects of the child's own. */
static void *probe_thread(void *arg)
{
    return arg;
}

static bool probe_calls(void)
{
    int sv[2], efd, ep, mfd;
    char b = 1;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0 ||
        sendto(sv[0], &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL, NULL, 0) != 1 ||
        recvfrom(sv[1], &b, 1, MSG_DONTWAIT, NULL, NULL) != 1)
        return false;
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {&b, 1};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                        .msg_controllen = sizeof(cbuf)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &sv[0], sizeof(int));
    if (sendmsg(sv[0], &mh, MSG_NOSIGNAL) != 1 || recvmsg(sv[1], &mh, 0) != 1)
        return false;
    struct mmsghdr mm = {.msg_hdr = {.msg_iov = &iov, .msg_iovlen = 1}};
    if (sendto(sv[0], &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL, NULL, 0) != 1 ||
        recvmmsg(sv[1], &mm, 1, MSG_DONTWAIT, NULL) != 1) /* a CQ's wake-up drain */
        return false;
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(sv[0], SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return false;
    if ((mfd = memfd_create("sovia-probe", MFD_CLOEXEC | MFD_ALLOW_SEALING)) < 0 ||
        ftruncate(mfd, 4096) != 0 || fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK) != 0)
        return false;
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (p == MAP_FAILED || munmap(p, 4096) != 0)
        return false;
    struct epoll_event ev = {.events = EPOLLIN};
    if ((efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
        (ep = epoll_create1(EPOLL_CLOEXEC)) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev) != 0 ||
        epoll_wait(ep, &ev, 1, 0) < 0)
        return false;
    uint32_t word = 0;
    struct timespec zero = {0, 0};
    struct pollfd pf = {.fd = efd, .events = POLLIN};
    if (kernel(SYS_futex, (long)&word, FUTEX_WAKE_PRIVATE_, 1, 0, 0, 0) < 0 ||
        kernel(SYS_pidfd_open, getpid(), 0, 0, 0, 0, 0) < 0 ||
        ppoll(&pf, 1, &zero, NULL) < 0 || kill(getpid(), 0) != 0 ||
        kernel(SYS_tgkill, getpid(), kernel(SYS_gettid, 0, 0, 0, 0, 0, 0), 0, 0, 0, 0) != 0 ||
        getrandom(&word, sizeof(word), GRND_NONBLOCK) < 0 || sched_yield() != 0)
        return false;
    int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (nl < 0 && errno != EAFNOSUPPORT && errno != EPROTONOSUPPORT)
        return false;
    char exe[64];
    struct rlimit rl;
    if (readlink("/proc/self/exe", exe, sizeof(exe)) < 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return false;
    pthread_t t;
    return pthread_create(&t, NULL, probe_thread, NULL) == 0 && pthread_join(t, NULL) == 0;
}

/* "Seccomp: 2" in /proc/self/status: a filter is installed. */
static bool filtered(void)
{
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    const char *s = strstr(buf, "\nSeccomp:");
    return s && atoi(s + 9) == 2;
}

/* First of the preload's constructors: before sovia makes a call. */
__attribute__((constructor(101))) static void started_sandboxed(void)
{
    if (!filtered())
        return;
    pid_t pid = fork();
    if (pid == 0)
        _exit(probe_calls() ? 0 : 1);
    /* A second at most: a probe that hangs (a thread that never starts) is
     * a no as well. */
    int status = 0;
    pid_t got = 0;
    struct timespec ms = {0, 1000000};
    for (int i = 0; pid > 0 && i < 1000 && (got = waitpid(pid, &status, WNOHANG)) == 0; i++)
        nanosleep(&ms, NULL);
    if (pid > 0 && got == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    if (pid < 0 || got != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        atomic_store(&sov_g.inert, true); /* not killed by a call of ours: no sovia here */
}
