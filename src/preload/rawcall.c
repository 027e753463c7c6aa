/*
 * rawcall.c - syscall(), glibc's function for making a system call by
 * number. libuv (Node.js) closes every descriptor with syscall(SYS_close,
 * fd), never close(): a carried socket stayed in sovia's table, its peer
 * never saw the end of stream (a client reading to the end, curl after a
 * Node server's socket.destroy(), waited for ever), and the next descriptor
 * the program got with that number (a file it opened) had its writes sent
 * to the peer. SYS_close goes through the close() wrapper; every other
 * number, and sovia's own descriptors (its threads close some with this
 * very call, on purpose past the wrapper), go to the kernel as they came,
 * after sandbox.c had its look (seccomp, prctl(PR_SET_SECCOMP) and
 * io_uring_setup make sovia step aside first).
 * A program that makes the system call itself (Go, inline assembly) is not
 * seen: docs/TRANSPARENT.md, "Transparent mode".
 */
#include <limits.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload.h"
#include "vipl_ext.h"

PRELOAD_EXPORT long syscall(long number, ...)
{
    /* glibc's own takes six argument words whatever the call: so do we */
    va_list ap;
    va_start(ap, number);
    long a[6];
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (number == SYS_close && a[0] >= 0 && a[0] <= INT_MAX && !VipxFdIsOwn((int)a[0]))
        return close((int)a[0]);
    preload_sandbox_syscall(number, a); /* seccomp, io_uring: sovia steps aside */
    preload_ready();
    return real.syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
