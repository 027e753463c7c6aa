/*
 * ksock_none.c - this build has no BPF programs (CMake found no clang
 * with a BPF target or no libbpf): every call says why.
 */
#include "ksock.h"

#include <errno.h>
#include <stdio.h>

int ksock_built(const char **why)
{
    *why = "sovia was built without KSOVIA: " SOVIA_KSOCK_MISSING;
    return 0;
}

int ksock_open(struct ksock **out, char *why, size_t whylen)
{
    const char *w;

    (void)out;
    ksock_built(&w);
    snprintf(why, whylen, "%s", w);
    return -ENOSYS;
}

int ksock_enter(struct ksock *k, pid_t pid)
{
    (void)k;
    (void)pid;
    return -ENOSYS;
}

int ksock_leave(struct ksock *k)
{
    (void)k;
    return -ENOSYS;
}

int ksock_stats(const struct ksock *k, uint64_t out[KSOCK_NSTATS])
{
    (void)k;
    (void)out;
    return -ENOSYS;
}

int ksock_holds(const struct ksock *k, int fd)
{
    (void)k;
    (void)fd;
    return -ENOSYS;
}

int ksock_ids(const struct ksock *k, uint32_t ids[3])
{
    (void)k;
    (void)ids;
    return -ENOSYS;
}

const char *ksock_cgroup(const struct ksock *k)
{
    (void)k;
    return "";
}

void ksock_close(struct ksock *k)
{
    (void)k;
}
