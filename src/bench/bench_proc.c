/* bench_proc.c - the second process: fork/exec, CPU pinning, reaping. */
#include "bench_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Set by SIGCHLD in the driver: a spinning driver must notice a dead peer
 * (shared-memory spins never see an EOF). */
static volatile sig_atomic_t child_exited;
static pid_t parent_pid; /* in the peer: the driver's pid */
static bool is_peer;

static void on_sigchld(int sig)
{
    (void)sig;
    child_exited = 1;
}

int bench_pick_cpus(int cpus[2])
{
    cpu_set_t set;
    int n = 0;

    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 0;
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &set))
            cpus[n++] = c;
    return n;
}

int bench_pin_self(int cpu)
{
    cpu_set_t set;

    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        fprintf(stderr, "sovia bench: cannot pin to CPU %d: %s\n", cpu, strerror(errno));
        return -1;
    }
    return 0;
}

pid_t bench_fork_peer(void)
{
    struct sigaction sa;
    pid_t driver = getpid();
    pid_t pid;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigchld;
    /* SA_RESTART: a blocked driver keeps blocking; transports that can
     * block forever on a dead peer poll bench_peer_alive() instead. */
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    child_exited = 0;
    sigaction(SIGCHLD, &sa, NULL);

    fflush(NULL); /* no buffered output duplicated into the child */
    pid = fork();
    if (pid < 0) {
        perror("sovia bench: fork");
        return -1;
    }
    if (pid == 0) {
        is_peer = true;
        parent_pid = driver;
        /* No orphaned peer spinning on a CPU if the driver is killed. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != driver || bench_peer_netns_enter() != 0)
            _exit(1);
        signal(SIGCHLD, SIG_DFL);
    }
    return pid;
}

bool bench_peer_alive(void)
{
    if (is_peer)
        return getppid() == parent_pid;
    return !child_exited;
}

void bench_kill_child(pid_t pid)
{
    if (pid > 0) {
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
}

int bench_wait_child(pid_t pid, double timeout_s)
{
    double deadline = bench_now() + timeout_s;
    int status;

    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR)
            return -1;
        if (bench_now() > deadline) {
            fprintf(stderr, "sovia bench: process %d did not exit; killing it\n", (int)pid);
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            break;
        }
        nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL);
    }
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return -1;
}

bool bench_in_path(const char *prog)
{
    const char *path = getenv("PATH");
    char buf[4096];

    if (strchr(prog, '/'))
        return access(prog, X_OK) == 0;
    if (!path)
        path = "/usr/bin:/bin";
    while (*path) {
        size_t n = strcspn(path, ":");
        if (n > 0 && n + strlen(prog) + 2 < sizeof buf) {
            memcpy(buf, path, n);
            buf[n] = '/';
            strcpy(buf + n + 1, prog);
            if (access(buf, X_OK) == 0)
                return true;
        }
        path += n;
        if (*path == ':')
            path++;
    }
    return false;
}

pid_t bench_spawn(char *const argv[], int cpu, int *out_fd)
{
    int fds[2] = {-1, -1};
    pid_t pid;

    if (out_fd && pipe2(fds, O_CLOEXEC) != 0) {
        perror("sovia bench: pipe");
        return -1;
    }
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        perror("sovia bench: fork");
        if (out_fd) {
            close(fds[0]);
            close(fds[1]);
        }
        return -1;
    }
    if (pid == 0) {
        int out = out_fd ? fds[1] : open("/dev/null", O_WRONLY);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (out < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
            _exit(127);
        if (cpu >= 0 && bench_pin_self(cpu) != 0)
            _exit(127);
        execvp(argv[0], argv);
        _exit(127);
    }
    if (out_fd) {
        close(fds[1]);
        *out_fd = fds[0];
    }
    return pid;
}

char *bench_slurp(int fd)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);

    if (!buf)
        return NULL;
    for (;;) {
        ssize_t n;
        if (len + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
        n = read(fd, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    return buf;
}
