/*
 * rr_proc.c - the worker processes of `sovia bench rr`, `conns` and
 * `connrate`: started with two pipes (their fd 0 and fd 1), read from with a
 * deadline, reaped; and the CPUs and CPU time of the run.
 */
#include "bench_internal.h"
#include "rr_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#define EXIT_TIMEOUT_S 10.0

int rr_proc_spawn(struct rr_proc *pr, const char *worker, char **argv,
                  int (*forked)(void *ctx, const struct rr_proc *self), void *ctx)
{
    int ctl[2], res[2];
    pid_t parent = getpid();

    if (pipe2(ctl, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(res, O_CLOEXEC) != 0) {
        close(ctl[0]);
        close(ctl[1]);
        return -1;
    }
    fflush(NULL);
    pr->pid = fork();
    if (pr->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        signal(SIGPIPE, SIG_DFL);
        if (dup2(ctl[0], 0) < 0 || dup2(res[1], 1) < 0)
            _exit(127);
        close(ctl[1]);
        close(res[0]);
        if (forked) {
            close(ctl[0]);
            close(res[1]);
            exit(forked(ctx, pr));
        }
        execv(worker, argv);
        fprintf(stderr, "sovia bench: %s: %s\n", worker, strerror(errno));
        _exit(127);
    }
    close(ctl[0]);
    close(res[1]);
    if (pr->pid < 0) {
        close(ctl[1]);
        close(res[0]);
        return -1;
    }
    pr->ctl = ctl[1];
    pr->res = res[0];
    return 0;
}

ssize_t rr_read_by(int fd, void *buf, size_t len, bool line, double deadline)
{
    char *p = buf;
    size_t got = 0;

    while (got < len) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        double left = deadline - bench_now();
        ssize_t n;
        int r;
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        r = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno != EINTR)
            return -1;
        if (r <= 0)
            continue;
        n = read(fd, p + got, line ? 1 : len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            errno = n == 0 ? EPIPE : errno;
            return -1;
        }
        got += (size_t)n;
        if (line && p[got - 1] == '\n') {
            p[got - 1] = '\0';
            return (ssize_t)got;
        }
    }
    if (line) {
        errno = EMSGSIZE;
        return -1;
    }
    return (ssize_t)got;
}

int rr_report_error(const char *mode, const char *who, int i, const char *what)
{
    fprintf(stderr, "sovia bench %s: %s %d: %s: %s\n", mode, who, i, what,
            errno == EPIPE ? "it exited" : strerror(errno));
    return -1;
}

int rr_proc_reap(struct rr_proc *pr, const char *mode, const char *who, int i, bool ok)
{
    int st;

    if (pr->ctl >= 0)
        close(pr->ctl);
    if (pr->res >= 0)
        close(pr->res);
    pr->ctl = pr->res = -1;
    if (pr->pid <= 0)
        return 0;
    if (!ok) {
        bench_kill_child(pr->pid);
        pr->pid = -1;
        return 0;
    }
    st = bench_wait_child(pr->pid, EXIT_TIMEOUT_S);
    pr->pid = -1;
    if (st != 0) {
        fprintf(stderr, "sovia bench %s: %s %d exited with status %d\n", mode, who, i, st);
        return -1;
    }
    return 0;
}

int rr_count_cpus(void)
{
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
}

double rr_children_cpu_s(void)
{
    struct rusage ru;

    if (getrusage(RUSAGE_CHILDREN, &ru) != 0)
        return 0.0;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}
