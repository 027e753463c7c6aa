/*
 * ksock_cgroup.c - the cgroup v2 that scopes the ksock programs: made under
 * the caller's own cgroup, named after the caller's pid, and removed once
 * the caller has gone, however it went: a watcher process outside the
 * cgroup holds the read end of a pipe whose write end only the caller has;
 * at its EOF (exit, crash, SIGKILL) the watcher removes the cgroup as soon
 * as nothing runs in it any more.
 */
#include "ksock.h"

#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PREFIX "sovia-ksock."

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Where cgroup v2 is mounted (hybrid hosts: /sys/fs/cgroup/unified). */
static int cg2_mount(char *out, size_t len)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[1024];
    int rc = -ENOENT;

    if (!f)
        return -errno;
    while (rc != 0 && fgets(line, sizeof line, f)) {
        char *sep = strstr(line, " - ");
        char mnt[512];
        char fstype[32];

        if (!sep || sscanf(sep + 3, "%31s", fstype) != 1 || strcmp(fstype, "cgroup2") != 0)
            continue;
        /* id parent major:minor root mountpoint ... */
        if (sscanf(line, "%*s %*s %*s %*s %511s", mnt) == 1 && strlen(mnt) < len) {
            strcpy(out, mnt);
            rc = 0;
        }
    }
    fclose(f);
    return rc;
}

/* The caller's cgroup v2 path (the "0::" line). */
static int cg2_self(char *out, size_t len)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    char line[1024];
    int rc = -ENOENT;

    if (!f)
        return -errno;
    while (rc != 0 && fgets(line, sizeof line, f))
        if (strncmp(line, "0::", 3) == 0) {
            line[strcspn(line, "\n")] = '\0';
            if (strlen(line + 3) < len) {
                strcpy(out, strcmp(line + 3, "/") == 0 ? "" : line + 3);
                rc = 0;
            }
        }
    fclose(f);
    return rc;
}

static int write_pid(const char *dir, pid_t pid)
{
    char path[800], buf[32];
    int fd, n, rc = 0;

    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    n = snprintf(buf, sizeof buf, "%d\n", (int)pid);
    if (write(fd, buf, (size_t)n) != n)
        rc = -errno;
    close(fd);
    return rc;
}

/* Cgroups of ours whose owner is gone and which nothing runs in any more
 * (their watcher was killed too): removed, as they would have been. */
static void sweep(const char *parent)
{
    DIR *d = opendir(parent);
    struct dirent *e;

    if (!d)
        return;
    while ((e = readdir(d))) {
        int pid;
        unsigned seq;
        char path[800];

        if (sscanf(e->d_name, PREFIX "%d.%u", &pid, &seq) != 2 || pid <= 0)
            continue;
        if (kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", parent, e->d_name) < sizeof path)
            (void)rmdir(path); /* EBUSY: still in use, its watcher's job */
    }
    closedir(d);
}

/* The watcher: only async-signal-safe calls (the caller may have threads). */
static void watch(int rd, const char *dir)
{
    char c;
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);

    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
    }
    if (dup2(rd, 3) < 0)
        _exit(1);
    close_range(4, ~0u, 0); /* no one waits for EOF on a pipe we hold */
    setsid(); /* not in the caller's process group: a Ctrl-C is not ours */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    while (read(3, &c, 1) != 0 && (errno == EINTR || errno == EAGAIN))
        ;
    for (;;) {
        if (rmdir(dir) == 0 || errno == ENOENT)
            _exit(0);
        if (errno != EBUSY)
            _exit(1);
        nap_ms(50); /* processes still in it: wait for them */
    }
}

int ksock_cg_make(struct ksock_cg *cg, char *why, size_t whylen)
{
    static unsigned seq;
    char mnt[256], self[256];
    int pfd[2], rc;

    cg->dir_fd = cg->watch_fd = -1;
    cg->watcher = -1;
    if ((rc = cg2_mount(mnt, sizeof mnt)) != 0) {
        snprintf(why, whylen, "no cgroup v2 file system mounted");
        return rc;
    }
    if ((rc = cg2_self(self, sizeof self)) != 0) {
        snprintf(why, whylen, "this process is in no cgroup v2 (/proc/self/cgroup)");
        return rc;
    }
    snprintf(cg->home, sizeof cg->home, "%s%s", mnt, self);
    sweep(cg->home);
    snprintf(cg->dir, sizeof cg->dir, "%s/" PREFIX "%d.%u", cg->home, (int)getpid(), seq++);
    if (mkdir(cg->dir, 0700) != 0) {
        rc = -errno;
        snprintf(why, whylen, "cannot make cgroup %s: %s", cg->dir, strerror(errno));
        return rc;
    }
    cg->dir_fd = open(cg->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cg->dir_fd < 0 || pipe2(pfd, O_CLOEXEC) != 0) {
        rc = -errno;
        snprintf(why, whylen, "cgroup %s: %s", cg->dir, strerror(errno));
        goto fail;
    }
    cg->watcher = fork();
    if (cg->watcher == 0) {
        close(pfd[1]);
        watch(pfd[0], cg->dir);
    }
    close(pfd[0]);
    if (cg->watcher < 0) {
        rc = -errno;
        close(pfd[1]);
        snprintf(why, whylen, "fork: %s", strerror(errno));
        goto fail;
    }
    cg->watch_fd = pfd[1];
    /* Moving a process needs write access to both cgroups' procs files. */
    if ((rc = write_pid(cg->home, getpid())) != 0) {
        snprintf(why, whylen, "cannot move processes in cgroup v2 (%s/cgroup.procs): %s",
                 cg->home, strerror(-rc));
        ksock_cg_remove(cg);
        return rc;
    }
    return 0;
fail:
    if (cg->dir_fd >= 0)
        close(cg->dir_fd);
    cg->dir_fd = -1;
    rmdir(cg->dir);
    return rc;
}

int ksock_cg_enter(struct ksock_cg *cg, pid_t pid)
{
    return write_pid(cg->dir, pid ? pid : getpid());
}

int ksock_cg_leave(struct ksock_cg *cg)
{
    return write_pid(cg->home, getpid());
}

void ksock_cg_remove(struct ksock_cg *cg)
{
    bool gone = false;

    if (cg->dir_fd < 0)
        return;
    (void)ksock_cg_leave(cg);
    close(cg->dir_fd);
    cg->dir_fd = -1;
    /* Processes that just exited leave the cgroup a moment later. */
    for (int i = 0; i < 100 && !gone; i++) {
        gone = rmdir(cg->dir) == 0 || errno == ENOENT;
        if (!gone && errno != EBUSY)
            break;
        if (!gone)
            nap_ms(10);
    }
    close(cg->watch_fd); /* the watcher removes it if we could not */
    cg->watch_fd = -1;
    if (gone && cg->watcher > 0)
        while (waitpid(cg->watcher, NULL, 0) < 0 && errno == EINTR)
            ;
    cg->watcher = -1;
}
