/*
 * spin.c - whether a waiter should spin: only while no runnable thread on
 * this machine waits for a CPU.
 *
 * A waiter that spins instead of sleeping saves the sleep and the wake-up
 * (a few microseconds) when the answer comes soon. It pays for that with a
 * CPU, which costs nothing only while every runnable thread has one: with
 * more runnable threads than CPUs, the thread a spinner waits for may be
 * the one waiting for the spinner's CPU (with four busy processes on two
 * cores the default profile ran PostgreSQL at 0.6x and sovia bench rr at
 * 0.2-0.5x of kernel TCP). The kernel's count of runnable threads, the
 * fourth field of /proc/loadavg (the reader counted in), says exactly that;
 * it is read at most once per READ_EVERY_NS (READ_EVERY_CROWDED_NS while
 * crowded) by whichever thread finds it stale, so a spinning process pays
 * one read per millisecond or so.
 *
 * Where /proc/loadavg cannot be read (a chroot, a sandbox), waiters spin as
 * configured. SOVIA_WAIT=poll (the latency profile) always spins: that is
 * a user who gave each process its own core.
 */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sock.h"

#define READ_EVERY_NS 500000u
/* Crowded, a read every 16 ms: the waits then sleep anyway, a wait that
 * starts more than 0.5 ms after the last read is the rule rather than the
 * exception (one read of /proc/loadavg per wait was 2 of the 16 system
 * calls of a sleeping round trip; every 4 ms, 32 processes still spent
 * 1.5 % of the CPUs on it, about 4 us a read), and a crowd that thins out
 * costs at most 16 ms of sleeping instead of spinning. */
#define READ_EVERY_CROWDED_NS 16000000u

static _Atomic uint64_t read_at;   /* when `crowded` was last read; 0: never */
static atomic_bool crowded;        /* more runnable threads than CPUs */
static atomic_bool reading;        /* a thread is reading it now */
static atomic_int loadavg_fd = -1; /* -2: cannot be read */
static long cpus;

/* Runnable threads now, from /proc/loadavg ("0.10 0.20 0.30 3/456 789"), or -1. */
static long runnable_now(void)
{
    int fd = atomic_load(&loadavg_fd);
    if (fd == -2)
        return -1;
    if (fd < 0) {
        VipxFdCreateBegin();
        fd = VipxFdAdopt(open("/proc/loadavg", O_RDONLY | O_CLOEXEC));
        VipxFdCreateEnd();
        int none = -1;
        if (fd < 0 || !atomic_compare_exchange_strong(&loadavg_fd, &none, fd)) {
            if (fd >= 0)
                VipxFdClose(fd); /* another thread opened it first */
            else
                atomic_store(&loadavg_fd, -2);
            fd = atomic_load(&loadavg_fd);
            if (fd < 0)
                return -1;
        }
        cpus = sysconf(_SC_NPROCESSORS_ONLN);
    }
    char buf[128];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    const char *p = buf;
    for (int field = 0; field < 3 && p; field++) {
        p = strchr(p, ' ');
        p = p ? p + 1 : NULL;
    }
    if (!p)
        return -1;
    char *end;
    long r = strtol(p, &end, 10);
    return end != p && *end == '/' ? r : -1;
}

void sov_spin_init(void)
{
    runnable_now(); /* opens it: a process's descriptors settle with its setup */
}

bool sov_spin_pays(uint64_t now)
{
    uint64_t at = atomic_load_explicit(&read_at, memory_order_relaxed);
    uint64_t every = atomic_load_explicit(&crowded, memory_order_relaxed) ? READ_EVERY_CROWDED_NS
                                                                           : READ_EVERY_NS;
    if (now - at >= every &&
        !atomic_exchange_explicit(&reading, true, memory_order_acquire)) {
        long r = runnable_now();
        atomic_store_explicit(&crowded, r > 0 && cpus > 0 && r > cpus, memory_order_relaxed);
        atomic_store_explicit(&read_at, now, memory_order_relaxed);
        atomic_store_explicit(&reading, false, memory_order_release);
    }
    return !atomic_load_explicit(&crowded, memory_order_relaxed);
}
