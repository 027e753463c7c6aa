/*
 * spawn: a carried connection inherited by a child that posix_spawn,
 * posix_spawnp, vfork + execve, system or popen started keeps working in
 * that child (glibc's own versions exec out of the preload's reach: the
 * child got only the idle kernel socket, read nothing and its writes were
 * lost). docs/TRANSPARENT.md, "Transparent mode".
 *
 * The child is this test re-executed as an echo service: it echoes the
 * connection until end of stream, then sends its pid (8 bytes) and exits;
 * the client passes the pid on, and the server checks that the child's
 * own stat record counts a carried connection (it was imported, not used
 * as kernel TCP). Each client exchanges 1 MiB byte-exact in lockstep.
 *  - inetd-like posix_spawn: dup2 onto 0 and 1, close; attributes (signal
 *    mask, signal defaults, process group) checked in the child;
 *  - posix_spawnp through PATH, with closefrom, an open action on the
 *    descriptor the error pipe takes in the parent, and chdir;
 *  - vfork + execve: what the child writes stays out of the parent's
 *    memory (the preload's vfork is fork);
 *  - system: the shell inherits the socket and execs the echo; SIGINT and
 *    the signal mask are as before afterwards;
 *  - failed spawns return ENOENT / EBADF, leave *pid alone and reap their
 *    child, and the connection is unaffected (the server echoes it); glibc's
 *    own functions while nothing is carried;
 *  - popen "w" and "re" streams, pclose statuses, a popen child not holding
 *    an earlier stream's pipe, and the echo under popen "r".
 */
#include "pharness.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The emulated posix_spawn, system and popen fork this threaded process,
 * and the child starts the sockets layer's threads. */
P_THREADED_FORK_CHILDREN

#define STREAM (1u << 20)
#define CHUNK 16384u
#define COUNTED 100000u /* what the popen "w" child must read */
#define COUNT_OK 42     /* its exit status when it did */

extern char **environ;

static char exe[PATH_MAX]; /* this test, re-executed as the children */
static const char *want_head; /* the vfork case: the parent's first words */
static bool want_hello;       /* the echo says 'R' before the client sends */
static volatile int child_touched; /* the vfork child writes it */

/* ---- The children ------------------------------------------------------------ */

/* A child's stdout may be the socket: failures go to stderr. */
#define HCHECK(cond)                                                                  \
    do {                                                                              \
        if (!(cond))                                                                  \
            helper_fail(__LINE__, #cond);                                             \
    } while (0)

__attribute__((noreturn)) static void helper_fail(int line, const char *what)
{
    char buf[256];
    int n = snprintf(buf, sizeof buf, "[spawn helper %d] FAIL spawn.c:%d: %s (errno %s)\n",
                     (int)getpid(), line, what, p_errname(errno));
    if (n > 0 && write(STDERR_FILENO, buf, (size_t)n) < 0) {
        /* nowhere to report */
    }
    exit(1);
}

static void helper_write_all(int fd, const void *buf, size_t len)
{
    for (size_t done = 0; done < len;) {
        ssize_t n = write(fd, (const char *)buf + done, len - done);
        HCHECK(n > 0);
        done += (size_t)n;
    }
}

static bool same_file(int fd, const char *path)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_rdev == b.st_rdev &&
           a.st_ino == b.st_ino;
}

/* What the spawning case asked to find in the child. */
static void helper_checks(const char *opts)
{
    const char *p;
    if ((p = strstr(opts, "null=")) != NULL)
        HCHECK(same_file(atoi(p + 5), "/dev/null"));
    if (strstr(opts, "cwd=/")) {
        char cwd[PATH_MAX];
        HCHECK(getcwd(cwd, sizeof cwd) && strcmp(cwd, "/") == 0);
    }
    if (strstr(opts, "attrs")) {
        sigset_t m;
        struct sigaction sa;
        HCHECK(sigprocmask(SIG_SETMASK, NULL, &m) == 0 && sigismember(&m, SIGUSR2) == 1);
        HCHECK(sigaction(SIGUSR1, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL);
        HCHECK(getpgrp() == getpid());
    }
}

/* Echoes until end of stream, then sends the pid. */
static void echo_stream(int in, int out)
{
    static char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        helper_write_all(out, buf, (size_t)n);
    HCHECK(n == 0);
    int64_t pid = getpid();
    helper_write_all(out, &pid, sizeof pid);
}

/* --echo IN OUT OPTS: the echo service. */
static int echo_child(char **argv)
{
    int in = atoi(argv[2]), out = atoi(argv[3]);
    struct stat sb;
    HCHECK(fstat(in, &sb) == 0 && S_ISSOCK(sb.st_mode));
    helper_checks(argv[4]);
    if (strstr(argv[4], "hello"))
        helper_write_all(out, "R", 1);
    echo_stream(in, out);
    if (strstr(argv[4], "report")) { /* popen "r": the line the server reads */
        char line[32];
        int len = snprintf(line, sizeof line, "done %d\n", (int)getpid());
        helper_write_all(STDOUT_FILENO, line, (size_t)len);
    }
    return 0;
}

/* --count-stdin: COUNT_OK if stdin held exactly the COUNTED pattern bytes. */
static int count_child(void)
{
    static char got[COUNTED + 1], want[COUNTED];
    size_t len = 0;
    ssize_t n;
    while ((n = read(STDIN_FILENO, got + len, sizeof got - len)) > 0 && len < sizeof got)
        len += (size_t)n;
    p_fill(want, COUNTED, 11);
    return n == 0 && len == COUNTED && memcmp(got, want, COUNTED) == 0 ? COUNT_OK : 1;
}

/* ---- Shared by the roles ------------------------------------------------------- */

/* The client of an echo child: 1 MiB in lockstep, its pid, end of stream. */
static void echo_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    char got[64];
    if (want_head) {
        size_t n = strlen(want_head);
        p_read_all(fd, got, n);
        CHECK(memcmp(got, want_head, n) == 0);
    }
    if (want_hello) {
        p_read_all(fd, got, 1);
        CHECK_EQ(got[0], 'R');
    }
    static char out[CHUNK], back[CHUNK];
    for (size_t done = 0; done < STREAM; done += CHUNK) {
        p_fill(out, CHUNK, 3 + done);
        p_write_all(fd, out, CHUNK);
        p_read_all(fd, back, CHUNK);
        if (memcmp(out, back, CHUNK) != 0)
            FAILF("echo differs in bytes %zu..%zu", done, done + CHUNK);
    }
    SYS(shutdown(fd, SHUT_WR));
    int64_t pid;
    p_read_all(fd, &pid, sizeof pid);
    char c;
    CHECK_EQ(read(fd, &c, 1), 0); /* every holder is gone */
    SYS(close(fd));
    p_put_int(r, pid);
    p_barrier(r);
}

/* Server, once its child is reaped: the pid the echo sent (which must be
 * `spawned` if known) names a record with the connection carried. */
static void check_echo_child(struct p_role *r, pid_t spawned)
{
    pid_t pid = (pid_t)p_get_int(r);
    if (spawned > 0)
        CHECK_EQ(pid, spawned);
    struct p_stat st;
    if (!p_kernel_mode()) {
        CHECK(p_stat_of(pid, &st));
        CHECK(st.carried >= 1);
    }
    p_barrier(r);
}

static void reap_ok(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        CHECK(errno == EINTR);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        FAILF("child %d ended with status 0x%x", (int)pid, st);
}

static int lowest_free_fd(void)
{
    int fd = (int)SYS(open("/dev/null", O_RDONLY));
    SYS(close(fd));
    return fd;
}

/* ---- posix_spawn: an inetd-like spawner ------------------------------------------- */

static void spawn_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    posix_spawn_file_actions_t fa;
    CHECK_EQ(posix_spawn_file_actions_init(&fa), 0);
    CHECK_EQ(posix_spawn_file_actions_adddup2(&fa, fd, 0), 0);
    CHECK_EQ(posix_spawn_file_actions_adddup2(&fa, fd, 1), 0);
    CHECK_EQ(posix_spawn_file_actions_addclose(&fa, fd), 0);
    posix_spawnattr_t at;
    CHECK_EQ(posix_spawnattr_init(&at), 0);
    sigset_t mask, dfl;
    sigemptyset(&mask);
    sigaddset(&mask, SIGUSR2);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGUSR1);
    CHECK_EQ(posix_spawnattr_setsigmask(&at, &mask), 0);
    CHECK_EQ(posix_spawnattr_setsigdefault(&at, &dfl), 0);
    CHECK_EQ(posix_spawnattr_setpgroup(&at, 0), 0);
    CHECK_EQ(posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                               POSIX_SPAWN_SETPGROUP),
             0);
    signal(SIGUSR1, SIG_IGN); /* inherited as ignored, but for SETSIGDEF */
    char *argv[] = {"spawn-echo", "--echo", "0", "1", "attrs", NULL};
    pid_t pid = -1;
    CHECK_EQ(posix_spawn(&pid, exe, &fa, &at, argv, environ), 0);
    CHECK(pid > 0);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    SYS(close(fd)); /* the child is the connection's last holder */
    sigset_t now;
    SYS(sigprocmask(SIG_SETMASK, NULL, &now));
    CHECK_EQ(sigismember(&now, SIGUSR2), 0); /* the attributes were the child's */
    reap_ok(pid);
    check_echo_child(r, pid);
}

/* ---- posix_spawnp: PATH, closefrom, open, chdir ------------------------------- */

static void spawnp_server(struct p_role *r)
{
    char path[PATH_MAX + 32], *slash = strrchr(exe, '/');
    snprintf(path, sizeof path, "/nonexistent-dir:%.*s", (int)(slash - exe), exe);
    SYS(setenv("PATH", path, 1));
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    /* The emulation's error pipe takes this descriptor in the parent: the
     * open action must get it in the child all the same. */
    int nullfd = lowest_free_fd();
    CHECK(nullfd > 2);
    posix_spawn_file_actions_t fa;
    CHECK_EQ(posix_spawn_file_actions_init(&fa), 0);
    CHECK_EQ(posix_spawn_file_actions_adddup2(&fa, fd, 0), 0);
    CHECK_EQ(posix_spawn_file_actions_adddup2(&fa, fd, 1), 0);
    CHECK_EQ(posix_spawn_file_actions_addclosefrom_np(&fa, 3), 0);
    CHECK_EQ(posix_spawn_file_actions_addopen(&fa, nullfd, "/dev/null", O_RDONLY, 0), 0);
    CHECK_EQ(posix_spawn_file_actions_addchdir_np(&fa, "/"), 0);
    char opts[32];
    snprintf(opts, sizeof opts, "null=%d,cwd=/", nullfd);
    char *argv[] = {"spawnp-echo", "--echo", "0", "1", opts, NULL};
    pid_t pid = -1;
    CHECK_EQ(posix_spawnp(&pid, slash + 1, &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    SYS(close(fd));
    reap_ok(pid);
    check_echo_child(r, pid);
}

/* ---- vfork + execve -------------------------------------------------------------- */

static void vfork_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    if (want_head) /* the parent used it first */
        p_write_all(fd, want_head, strlen(want_head));
    char *argv[] = {"vfork-echo", "--echo", "0", "1", "-", NULL};
    child_touched = 0;
    pid_t pid = vfork();
    if (pid == 0) {
        child_touched = 1; /* a real vfork child would write the parent's memory */
        if (dup2(fd, 0) == 0 && dup2(fd, 1) == 1)
            execve(exe, argv, environ);
        _exit(127);
    }
    CHECK(pid > 0);
    if (!p_kernel_mode())
        CHECK_EQ(child_touched, 0); /* the preload's vfork is fork */
    SYS(close(fd));
    reap_ok(pid);
    check_echo_child(r, pid);
}

/* ---- system ------------------------------------------------------------------------- */

static void system_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    struct sigaction before, after;
    SYS(sigaction(SIGINT, NULL, &before));
    CHECK(system(NULL) != 0);
    CHECK_EQ(system("exit 3"), 3 << 8);
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "%s --echo %d %d %s", exe, fd, fd, want_hello ? "hello" : "-");
    if (!want_hello) { /* what the client sent first is in our copy already */
        struct pollfd p = {.fd = fd, .events = POLLIN};
        CHECK_EQ(poll(&p, 1, 10000), 1);
    }
    int st = system(cmd); /* the shell inherits the socket, the echo from it */
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    SYS(sigaction(SIGINT, NULL, &after));
    CHECK(after.sa_handler == before.sa_handler);
    sigset_t now;
    SYS(sigprocmask(SIG_SETMASK, NULL, &now));
    CHECK_EQ(sigismember(&now, SIGCHLD), 0);
    SYS(close(fd));
    check_echo_child(r, 0);
}

/* ---- failures, and nothing carried ------------------------------------------------ */

static void failed_server(struct p_role *r)
{
    char *argv[] = {"nothing", NULL};
    /* Nothing carried yet (a listener only): glibc's own functions. */
    pid_t pid = -7;
    CHECK_EQ(posix_spawn(&pid, "/bin/true", NULL, NULL, argv, environ), 0);
    reap_ok(pid);
    CHECK_EQ(system("exit 4"), 4 << 8);
    FILE *z = popen("exit 5", "r");
    CHECK(z);
    CHECK_EQ(pclose(z), 5 << 8);

    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    pid = -7;
    CHECK_EQ(posix_spawn(&pid, "/nonexistent/program", NULL, NULL, argv, environ), ENOENT);
    CHECK_EQ(posix_spawnp(&pid, "no-such-program-here", NULL, NULL, argv, environ), ENOENT);
    CHECK_EQ(pid, -7); /* untouched on failure */
    int closed = getdtablesize() - 1;
    CHECK(fcntl(closed, F_GETFD) < 0);
    posix_spawn_file_actions_t fa;
    CHECK_EQ(posix_spawn_file_actions_init(&fa), 0);
    CHECK_EQ(posix_spawn_file_actions_adddup2(&fa, closed, 0), 0);
    CHECK_EQ(posix_spawn(&pid, "/bin/true", &fa, NULL, argv, environ), EBADF);
    posix_spawn_file_actions_destroy(&fa);
    CHECK_EQ(pid, -7);
    CHECK_ERR(waitpid(-1, NULL, WNOHANG), ECHILD); /* the failed children were reaped */
    /* A child that inherits the connection and exits without using it. */
    CHECK_EQ(posix_spawn(&pid, "/bin/true", NULL, NULL, argv, environ), 0);
    reap_ok(pid);
    echo_stream(fd, fd); /* the server is the echo this time */
    SYS(close(fd));
    CHECK_EQ(p_get_int(r), getpid());
    p_barrier(r);
}

/* ---- popen -------------------------------------------------------------------------- */

static void popen_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    SYS(fcntl(fd, F_SETFD, FD_CLOEXEC)); /* not for the first two children */
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "%s --count-stdin", exe);
    FILE *w = popen(cmd, "w");
    CHECK(w);
    CHECK_EQ(fcntl(fileno(w), F_GETFD), 0);
    FILE *b = popen("echo $$; exec sleep 30", "re");
    CHECK(b);
    CHECK(fcntl(fileno(b), F_GETFD) & FD_CLOEXEC);
    int bpid = 0;
    CHECK_EQ(fscanf(b, "%d", &bpid), 1);
    static char data[COUNTED];
    p_fill(data, COUNTED, 11);
    CHECK_EQ(fwrite(data, 1, COUNTED, w), COUNTED);
    /* Would hang if the second child held the first stream's pipe. */
    CHECK_EQ(pclose(w), COUNT_OK << 8);
    CHECK_EQ(kill(bpid, 0), 0); /* and did not wait for the second */
    SYS(kill(bpid, SIGTERM));
    int st = pclose(b);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);

    SYS(fcntl(fd, F_SETFD, 0));
    snprintf(cmd, sizeof cmd, "%s --echo %d %d report", exe, fd, fd);
    FILE *e = popen(cmd, "r");
    CHECK(e);
    SYS(close(fd));
    char line[64];
    int pid = 0;
    CHECK(fgets(line, sizeof line, e) && sscanf(line, "done %d", &pid) == 1);
    CHECK_EQ(pclose(e), 0);
    check_echo_child(r, pid);
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--echo") == 0)
        return echo_child(argv);
    if (argc == 2 && strcmp(argv[1], "--count-stdin") == 0)
        return count_child();
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        FAILF("readlink(/proc/self/exe): %s", p_errname(errno));
    exe[n] = '\0';

    p_init("spawn");
    p_case("posix_spawn_inetd", spawn_server, echo_client, P_CARRIED);
    p_case("posix_spawnp_path_actions", spawnp_server, echo_client, P_CARRIED);
    p_case("vfork_execve", vfork_server, echo_client, P_CARRIED);
    want_head = "parent-before-vfork";
    /* The parent's bytes are held until the client answers; the fork
     * waits for that answer (sov_before_fork), else parent and child both
     * polled the VI and one took what the other needed. */
    p_case("vfork_execve_parent_wrote_first", vfork_server, echo_client, P_CARRIED);
    want_head = NULL;
    /* system() holds the caller's copy while the shell serves: the client
     * waits for the echo's hello, so the caller's copy received nothing. */
    want_hello = true;
    p_case("system_shell_inherits", system_server, echo_client, P_CARRIED);
    want_hello = false;
    p_case("system_caller_had_unread_data", system_server, echo_client, P_CARRIED);
    p_case("failed_spawn_keeps_connection", failed_server, echo_client, P_CARRIED);
    p_case("popen_streams", popen_server, echo_client, P_CARRIED);
    return p_done();
}
