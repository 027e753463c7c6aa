/*
 * shm_cred.c - who is at the other end of a connection socket, and what a
 * connection between two users may carry (docs/SECURITY.md, "Another
 * user").
 *
 * SO_PEERCRED names the user a socket belonged to when it was made: for a
 * dialled listener, when that listener called listen(). A process may
 * since have changed user (a server that listens as root and then runs as
 * nobody), so before a dialler hands a listener of its own uid what only
 * its own user should hold (a connect token, its completion queue's
 * wake-up page and socket), it looks at that process's credentials now.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shm.h"

bool shm_peer_cred(int sock, pid_t *pid, uid_t *uid)
{
    struct ucred cr;
    socklen_t len = sizeof(cr);
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || len != sizeof(cr))
        return false;
    *pid = cr.pid;
    *uid = cr.uid;
    return true;
}

/* PIDFD_GET_INFO (Linux 6.13), declared here for older headers: the first
 * published layout, which every kernel that has the call accepts. */
struct shm_pidfd_info {
    uint64_t mask;
    uint64_t cgroupid;
    uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
    uint32_t spare0;
};
#define SHM_PIDFD_GET_INFO _IOWR(0xFF, 11, struct shm_pidfd_info)
#define SHM_PIDFD_INFO_CREDS 2u

/* The four uids of the process, from /proc (any user may read it). */
static bool proc_uids(pid_t pid, uint32_t uids[4])
{
    char path[48], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0)
        return false;
    ssize_t n = read(f, buf, sizeof(buf) - 1);
    close(f);
    if (n <= 0)
        return false;
    buf[n] = 0;
    const char *u = strstr(buf, "\nUid:");
    return u && sscanf(u, "\nUid: %u %u %u %u", &uids[0], &uids[1], &uids[2], &uids[3]) == 4;
}

/*
 * Whether the process is, at this moment, of our effective user and no
 * other: its real, effective, saved and file-system uids all ours. False
 * when that cannot be told (it went, /proc is hidden): the connection is
 * then treated as one between users, which is always safe. `pidfd` is
 * the process's, or -1.
 */
bool shm_process_is_self(pid_t pid, int pidfd)
{
    uint32_t me = (uint32_t)geteuid(), uids[4];
    struct shm_pidfd_info info = {.mask = SHM_PIDFD_INFO_CREDS};
    if (pidfd >= 0 && ioctl(pidfd, SHM_PIDFD_GET_INFO, &info) == 0 &&
        (info.mask & SHM_PIDFD_INFO_CREDS)) {
        uids[0] = info.ruid;
        uids[1] = info.euid;
        uids[2] = info.suid;
        uids[3] = info.fsuid;
    } else if (!proc_uids(pid, uids)) {
        return false;
    }
    /* The pidfd names that very process; /proc may name a new one, but
     * only after the old one exited, and then the connection fails. */
    return uids[0] == me && uids[1] == me && uids[2] == me && uids[3] == me;
}

/*
 * What goes to another user in place of a connect token: an epoll
 * instance watching it. Its holder can read which socket it watches in
 * /proc/self/fdinfo (the inode), proving that we held that socket, and
 * its readiness, but cannot read, write, close, keep open or reach the
 * socket itself (an epoll instance holds no reference to its targets).
 * A new descriptor, or -1.
 */
int shm_token_wrap(int token)
{
    int ep = vipl_fd_epoll(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = 0, .data.u64 = 0};
    if (ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, token, &ev) != 0) {
        VipxFdClose(ep);
        ep = -1;
    }
    return ep;
}
