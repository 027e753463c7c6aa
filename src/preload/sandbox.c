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
 * The wrappers: prctl(PR_SET_SECCOMP), and syscall(2) for seccomp(2),
 * prctl and io_uring_setup (libseccomp and liburing call the kernel
 * through it, or, built without libc, on their own: see docs/SOCKETS.md
 * for what cannot be seen).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload.h"
#include "sock.h"
#include "transparent.h"

#define PR_SET_SECCOMP_ 22 /* <linux/prctl.h>, without its declarations of prctl */
#define SECCOMP_SET_MODE_FILTER_ 1 /* <linux/seccomp.h>; 0 is strict mode */

static void step_aside(bool sandbox)
{
    if (!atomic_load(&sov_g.inert))
        sov_tp_migrate_all(); /* sets inert: no new connection is carried */
    if (sandbox)
        exitlog_now(); /* final now; at its end it may not be allowed the calls */
}

static long (*_Atomic libc_syscall)(long, ...);

static long kernel(long nr, long a0, long a1, long a2, long a3, long a4, long a5)
{
    long (*f)(long, ...) = atomic_load_explicit(&libc_syscall, memory_order_relaxed);
    if (!f) {
        f = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
        atomic_store_explicit(&libc_syscall, f, memory_order_relaxed);
    }
    return f(nr, a0, a1, a2, a3, a4, a5);
}

/* glibc's prctl is variadic; five words is what the kernel takes. */
PRELOAD_EXPORT int prctl(int option, unsigned long a2, unsigned long a3, unsigned long a4,
                         unsigned long a5)
{
    if (option == PR_SET_SECCOMP_)
        step_aside(true);
    return (int)kernel(SYS_prctl, option, (long)a2, (long)a3, (long)a4, (long)a5, 0);
}

PRELOAD_EXPORT long syscall(long nr, ...)
{
    va_list ap;
    va_start(ap, nr);
    long a[6];
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    bool filter = (nr == SYS_seccomp && (a[0] == 0 || a[0] == SECCOMP_SET_MODE_FILTER_)) ||
                  (nr == SYS_prctl && a[0] == PR_SET_SECCOMP_);
    if (filter || nr == SYS_io_uring_setup)
        step_aside(filter);
    return kernel(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
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
