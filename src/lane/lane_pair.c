/*
 * lane_pair.c - the two forwarders of a LANE link as child processes:
 * started together, ready when both devices are up, stopped together. Each
 * dies with the process that started it (PR_SET_PDEATHSIG).
 */
#include "lane.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Lock-free, so a handler may store it; read by the forwarder's threads. */
static atomic_int child_stop;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the stop flag is set in a signal handler");

static void on_term(int sig)
{
    atomic_store(&child_stop, sig);
}

static pid_t spawn(const struct lane_config *cfg, const struct lane_side *side, int role,
                   int ready_fd, pid_t parent)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    struct sigaction sa = {.sa_handler = on_term};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(1);
    _exit(lane_forward(cfg, side, role, ready_fd, &child_stop) == 0 ? 0 : 1);
}

int lane_pair_start(struct lane_pair *lp, struct lane_config *cfg, const struct lane_side sides[2])
{
    struct timespec ts;
    int pfd[2], ready = 0;

    lp->pids[0] = lp->pids[1] = -1;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(cfg->disc, sizeof cfg->disc, "lane-%ld-%lx", (long)getpid(),
             (unsigned long)ts.tv_nsec);
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        perror("sovia lane: pipe");
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        lp->pids[i] = spawn(cfg, &sides[i], i, pfd[1], getpid());
        if (lp->pids[i] < 0) {
            perror("sovia lane: fork");
            break;
        }
    }
    close(pfd[1]);
    /* EOF: both forwarders are gone (or never started); a signal: give up. */
    while (lp->pids[1] > 0 && ready < 2) {
        char c;
        ssize_t n = read(pfd[0], &c, 1);
        if (n == 1)
            ready++;
        else
            break;
    }
    close(pfd[0]);
    if (ready == 2)
        return 0;
    lane_pair_stop(lp);
    return -1;
}

int lane_pair_wait(struct lane_pair *lp, volatile sig_atomic_t *stop)
{
    int ret = 0;
    while (lp->pids[0] > 0 || lp->pids[1] > 0) {
        int st;
        pid_t p = waitpid(-1, &st, 0);
        if (p < 0 && errno == EINTR) {
            if (*stop)
                for (int i = 0; i < 2; i++)
                    if (lp->pids[i] > 0)
                        kill(lp->pids[i], SIGTERM);
            continue;
        }
        if (p < 0)
            break;
        for (int i = 0; i < 2; i++) {
            if (p != lp->pids[i])
                continue;
            lp->pids[i] = -1;
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                ret = -1;
            /* One end stopped: the link is down, stop the other. */
            if (lp->pids[!i] > 0)
                kill(lp->pids[!i], SIGTERM);
        }
    }
    return ret;
}

int lane_pair_stop(struct lane_pair *lp)
{
    int ret = 0;
    for (int i = 0; i < 2; i++)
        if (lp->pids[i] > 0)
            kill(lp->pids[i], SIGTERM);
    for (int i = 0; i < 2; i++) {
        int st;
        if (lp->pids[i] <= 0)
            continue;
        while (waitpid(lp->pids[i], &st, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            ret = -1;
        lp->pids[i] = -1;
    }
    return ret;
}
