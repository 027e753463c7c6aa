/*
 * exitlog.c - with SOVIA_STAT_LOG=FILE, each process run under sovia
 * appends one JSON line to FILE when it exits: how many connections sovia
 * carried, how many fell back to kernel TCP, and the bytes it moved. Tests
 * and scripts use it to prove a program's traffic really went over sovia.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"
#include "sock.h"

__attribute__((destructor)) static void write_exit_record(void)
{
    const char *path = getenv("SOVIA_STAT_LOG");
    unsigned carried = atomic_load(&sov_g.tp_paired), fell_back = atomic_load(&sov_g.tp_fell_back),
             kernel = atomic_load(&sov_g.tp_kernel);
    if (!path || !*path || carried + fell_back + kernel == 0)
        return; /* only processes that made or took TCP connections */
    char exe[256] = "?";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 1] = '\0';
    char line[512];
    int len = snprintf(line, sizeof(line),
                       "{\"pid\": %d, \"exe\": \"%s\", \"carried\": %u, \"fell_back\": %u, "
                       "\"kernel\": %u, \"bytes_sent\": %llu, \"bytes_received\": %llu}\n",
                       (int)getpid(), exe, carried, fell_back, kernel, atomic_load(&sov_g.bytes_sent),
                       atomic_load(&sov_g.bytes_received));
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    if (len > 0 && real.write(fd, line, (size_t)len) < 0) {
        /* nothing to do at exit */
    }
    real.close(fd);
}
