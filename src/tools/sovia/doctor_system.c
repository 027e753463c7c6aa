/*
 * doctor_system.c - `sovia doctor`'s checks of the kernel and the limits:
 * each feature is tried the way sovia uses it (a sealed memfd, a pidfd, a
 * descriptor passed over an AF_UNIX socket), never inferred from a version.
 */
#include "doctor.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

/* The shm provider's segments (shm_segment.c): created, sized, sealed. */
static int try_sealed_memfd(void)
{
    int fd = memfd_create("sovia-doctor", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    int rc = ftruncate(fd, 4096) == 0 &&
                     fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0
                 ? 0
                 : -errno;
    close(fd);
    return rc;
}

/* How connections are set up: memfds passed over an AF_UNIX socket. */
static int try_scm_rights(void)
{
    int sv[2], rc = 0;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return -errno;
    char b = 1, cbuf[CMSG_SPACE(sizeof(int))];
    memset(cbuf, 0, sizeof cbuf);
    struct iovec iov = {&b, 1};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                        .msg_controllen = sizeof cbuf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &sv[0], sizeof(int));
    if (sendmsg(sv[0], &mh, MSG_NOSIGNAL) != 1 || recvmsg(sv[1], &mh, MSG_CMSG_CLOEXEC) != 1)
        rc = -errno;
    else if (!(c = CMSG_FIRSTHDR(&mh)) || c->cmsg_type != SCM_RIGHTS)
        rc = -EPROTO;
    else {
        int got;
        memcpy(&got, CMSG_DATA(c), sizeof got);
        close(got);
    }
    close(sv[0]);
    close(sv[1]);
    return rc;
}

static int read_long(const char *path, long *v)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    int rc = fscanf(f, "%ld", v) == 1 ? 0 : -EINVAL;
    fclose(f);
    return rc;
}

static void kernel_feature(struct doctor *d, const char *name, int rc, const char *why)
{
    if (rc == 0)
        doctor_add(d, name, DOC_OK, "yes", "%s", why);
    else
        doctor_add(d, name, DOC_FAIL, strerror(-rc), "%s: nothing can be carried", why);
}

static void yama(struct doctor *d)
{
    long scope;
    int rc = read_long("/proc/sys/kernel/yama/ptrace_scope", &scope);
    char v[32];
    if (rc != 0) {
        doctor_add(d, "ptrace_scope", DOC_OK, "absent",
                   "no Yama: VIPL RDMA writes into a peer's own memory (process_vm_writev) "
                   "reach every process of this user");
        return;
    }
    snprintf(v, sizeof v, "%ld", scope);
    if (scope == 0)
        doctor_add(d, "ptrace_scope", DOC_OK, v,
                   "VIPL RDMA writes into a peer's own memory reach every process of this user");
    else if (scope == 1)
        doctor_add(d, "ptrace_scope", DOC_OK, v,
                   "VIPL RDMA writes into a peer's own memory reach descendants only (others "
                   "complete RDMA_PROT_ERROR: register such regions in the arena, docs/VIPL.md); "
                   "sockets are not affected");
    else
        doctor_add(d, "ptrace_scope", DOC_WARN, v,
                   "VIPL RDMA writes into a peer's own memory always fail (RDMA_PROT_ERROR; "
                   "regions in the arena still work, docs/VIPL.md); sockets are not affected");
}

/* `sovia lane` and `sovia ksock` are optional: what they lack is "off". */
static void optional_features(struct doctor *d)
{
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        close(fd);
        doctor_add(d, "tun", DOC_OK, "/dev/net/tun",
                   "sovia lane (IP over VI) can make its devices (as root)");
    } else {
        doctor_add(d, "tun", DOC_OFF, strerror(errno),
                   "/dev/net/tun cannot be opened: sovia lane is unavailable "
                   "(modprobe tun; root or CAP_NET_ADMIN)");
    }
    struct stat st;
    bool cg2 = stat("/sys/fs/cgroup/cgroup.controllers", &st) == 0 ||
               stat("/sys/fs/cgroup/unified/cgroup.controllers", &st) == 0;
    bool bpf = access("/proc/sys/kernel/unprivileged_bpf_disabled", F_OK) == 0 ||
               access("/sys/fs/bpf", F_OK) == 0;
    if (!cg2 || !bpf)
        doctor_add(d, "ksock", DOC_OFF, !cg2 ? "no cgroup v2" : "no BPF",
                   "sovia ksock needs BPF and a cgroup v2 mount");
    else if (geteuid() != 0)
        doctor_add(d, "ksock", DOC_OFF, "not root",
                   "sovia ksock needs root (CAP_BPF, CAP_NET_ADMIN); `sovia ksock --check` "
                   "loads its programs to be sure");
    else
        doctor_add(d, "ksock", DOC_OK, "cgroup v2, BPF, root",
                   "`sovia ksock --check` loads and attaches the programs to be sure");
}

void doctor_kernel(struct doctor *d)
{
    struct utsname u;
    if (uname(&u) == 0)
        doctor_add(d, "kernel", DOC_OK, u.release, "%s %s", u.sysname, u.machine);
    kernel_feature(d, "memfd_seals", try_sealed_memfd(),
                   "the shm provider's segments are sealed memfds");
    int pfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    kernel_feature(d, "pidfd", pfd >= 0 ? 0 : -errno,
                   "the shm provider's agent watches each peer by pidfd (Linux 5.3)");
    if (pfd >= 0)
        close(pfd);
    kernel_feature(d, "scm_rights", try_scm_rights(),
                   "connections are set up by passing memfds over AF_UNIX sockets");
    yama(d);
    optional_features(d);
}

/* ---- Limits and cores ---------------------------------------------------- */

/* Below this many descriptors a program that a kernel socket would serve
 * may run out under sovia, whose connections hold more than one. */
#define NOFILE_WANT 1024
/* The kernel's default (DEFAULT_MAX_MAP_COUNT): every carried connection
 * maps its segments, so a lower value caps the connections. */
#define MAP_COUNT_WANT 65530

static void limit_text(char *out, size_t len, rlim_t v)
{
    if (v == RLIM_INFINITY)
        snprintf(out, len, "unlimited");
    else
        snprintf(out, len, "%llu", (unsigned long long)v);
}

static void limits(struct doctor *d)
{
    struct rlimit rl;
    char v[96], soft[32], hard[32];
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        limit_text(soft, sizeof soft, rl.rlim_cur);
        limit_text(hard, sizeof hard, rl.rlim_max);
        snprintf(v, sizeof v, "%s soft, %s hard", soft, hard);
        if (rl.rlim_cur < NOFILE_WANT)
            doctor_add(d, "nofile", DOC_WARN, v,
                       "under %d: a carried connection holds more descriptors than a kernel "
                       "socket (its kernel socket stays open for the fallback), so programs "
                       "run out sooner; raise it (%s%s)",
                       NOFILE_WANT, rl.rlim_cur < rl.rlim_max ? "ulimit -n " : "the hard limit: ",
                       rl.rlim_cur < rl.rlim_max ? hard : "limits.conf, systemd's LimitNOFILE=");
        else
            doctor_add(d, "nofile", DOC_OK, v, "at least %d descriptors", NOFILE_WANT);
    }
    long maps;
    if (read_long("/proc/sys/vm/max_map_count", &maps) == 0) {
        snprintf(v, sizeof v, "%ld", maps);
        if (maps < MAP_COUNT_WANT)
            doctor_add(d, "max_map_count", DOC_WARN, v,
                       "under the kernel's default %d: each carried connection maps its "
                       "segments, so fewer connections fit (sysctl vm.max_map_count=%d)",
                       MAP_COUNT_WANT, MAP_COUNT_WANT);
        else
            doctor_add(d, "max_map_count", DOC_OK, v, "mappings for the connections' segments");
    }
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        limit_text(soft, sizeof soft, rl.rlim_cur);
        doctor_add(d, "memlock", DOC_OK, soft,
                   "shm pins nothing; libfabric's RDMA providers (verbs) pin registered "
                   "memory against this limit");
    }
}

static void cores(struct doctor *d)
{
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    double load = 0;
    long running = 0, total = 0;
    FILE *f = fopen("/proc/loadavg", "re");
    if (f) {
        if (fscanf(f, "%lf %*f %*f %ld/%ld", &load, &running, &total) != 3)
            load = 0;
        fclose(f);
    }
    char v[96];
    snprintf(v, sizeof v, "%d cores, load %.2f, %ld running", n, load, running);
    const char *w = getenv("SOVIA_WAIT");
    bool polling = w && strcmp(w, "poll") == 0;
    if (n > 0 && load >= n)
        doctor_add(d, "cores", DOC_WARN, v,
                   "the cores are busy: waiting threads that poll (the latency profile, "
                   "SOVIA_WAIT=poll%s) take cores from the others; balanced sleeps after "
                   "50 us",
                   polling ? ", in force now" : "");
    else if (n == 1 && polling)
        doctor_add(d, "cores", DOC_WARN, v,
                   "one core and SOVIA_WAIT=poll: a polling waiter keeps its peer from running");
    else
        doctor_add(d, "cores", DOC_OK, v, "spare cores for waiting threads that poll");
}

void doctor_limits(struct doctor *d)
{
    limits(d);
    cores(d);
}
