/*
 * cmd_ksock.c - `sovia ksock [--check] [--stats] [--] PROGRAM ARGS...`:
 * runs a program with KSOVIA in force (src/ksock/): the established
 * loopback TCP connections it and its children make are carried socket to
 * socket by BPF, past TCP/IP. Its cgroup is removed when the program is
 * done, however it (or this process) ends.
 */
#include "cli.h"
#include "ksock.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXIT_UNAVAILABLE 3

static volatile sig_atomic_t child_pid;

static void usage(FILE *f)
{
    fprintf(f, "usage: sovia ksock [--stats] [--] PROGRAM [ARGS...]\n"
               "       sovia ksock --check\n"
               "\n"
               "Runs PROGRAM with KSOVIA (seed 003's kernel-level sockets) on today's kernel:\n"
               "a sock_ops BPF program puts every established TCP connection between\n"
               "loopback addresses made by PROGRAM and its children into a sockhash, and an\n"
               "sk_msg program hands each send to the peer socket's receive queue, past\n"
               "TCP/IP. They run in a cgroup v2 of their own, made for the run and removed\n"
               "after it. Needs root (CAP_BPF, CAP_NET_ADMIN, cgroup v2 write access).\n"
               "  --check  load and attach the programs, then detach: exit 0 if they work\n"
               "           here, 3 with the reason if not\n"
               "  --stats  at the end, print what was collected and redirected (stderr)\n");
}

static void forward(int sig)
{
    if (child_pid > 0)
        kill(child_pid, sig);
}

static void print_stats(struct ksock *k)
{
    uint64_t s[KSOCK_NSTATS];

    if (ksock_stats(k, s) != 0)
        return;
    fprintf(stderr,
            "sovia ksock: %llu sockets collected (%llu refused), %llu sends redirected "
            "(%llu bytes), %llu left to TCP\n",
            (unsigned long long)s[KSOCK_STAT_COLLECTED],
            (unsigned long long)s[KSOCK_STAT_COLLECT_FAILED],
            (unsigned long long)s[KSOCK_STAT_REDIRECTED],
            (unsigned long long)s[KSOCK_STAT_REDIRECTED_BYTES],
            (unsigned long long)s[KSOCK_STAT_PASSED]);
}

int cmd_ksock(int argc, char **argv)
{
    bool check = false, stats = false;
    struct ksock *k;
    char why[600];
    int i = 1, status;

    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--check") == 0)
            check = true;
        else if (strcmp(argv[i], "--stats") == 0)
            stats = true;
        else
            return cli_usage_error("ksock", "unknown option '%s'", argv[i]);
    }
    if (check == (i < argc)) {
        usage(stderr);
        return SOVIA_EXIT_USAGE;
    }
    if (ksock_open(&k, why, sizeof why) != 0) {
        fprintf(stderr, "sovia ksock: unavailable: %s\n", why);
        return EXIT_UNAVAILABLE;
    }
    if (check) {
        printf("sovia ksock: available (programs verified and attached to %s)\n",
               ksock_cgroup(k));
        ksock_close(k);
        return 0;
    }
    /* Signals for the program go to it; we stay to clean up after it. */
    signal(SIGINT, forward);
    signal(SIGTERM, forward);
    signal(SIGHUP, forward);
    signal(SIGQUIT, forward);
    pid_t pid = fork();
    if (pid == 0) {
        int rc = ksock_enter(k, 0);
        if (rc != 0) {
            fprintf(stderr, "sovia ksock: cannot move into %s: %s\n", ksock_cgroup(k),
                    strerror(-rc));
            _exit(126);
        }
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        signal(SIGQUIT, SIG_DFL);
        execvp(argv[i], argv + i); /* the BPF and watcher fds are close-on-exec */
        fprintf(stderr, "sovia ksock: %s: %s\n", argv[i], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    if (pid < 0) {
        fprintf(stderr, "sovia ksock: fork: %s\n", strerror(errno));
        ksock_close(k);
        return 1;
    }
    child_pid = pid;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            status = 1 << 8;
            break;
        }
    if (stats)
        print_stats(k);
    ksock_close(k);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
