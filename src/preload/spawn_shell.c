/*
 * spawn_shell.c - system and popen. glibc's run /bin/sh through its
 * internal posix_spawn, out of the wrappers' reach (spawn.c says why);
 * while the process holds carried connections they run the shell through
 * spawn_run instead, with glibc's semantics:
 *  - system: SIGINT and SIGQUIT ignored and SIGCHLD blocked in the caller
 *    while the shell runs (the shell gets them back as they were), the
 *    wait status returned (127 as exit status if the shell could not be
 *    started), system(NULL) says whether a shell is there; a cancelled
 *    caller kills and reaps the shell;
 *  - popen: "r" or "w", with "e" for a close-on-exec stream; the child
 *    gets neither end of the streams earlier popen calls made. The stream
 *    is a cookie stream whose close waits for the shell: glibc's pclose is
 *    fclose, so pclose returns the shell's wait status, as glibc's does.
 * Otherwise glibc's own functions run.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "preload.h"
#include "spawn_plan.h"

#define SHELL_PATH "/bin/sh"

extern char **environ;

static struct {
    int (*system)(const char *);
    FILE *(*popen)(const char *, const char *);
} libc;

static pthread_once_t resolved = PTHREAD_ONCE_INIT;

static void resolve_once(void)
{
    libc.system = (__typeof__(libc.system))dlsym(RTLD_NEXT, "system");
    libc.popen = (__typeof__(libc.popen))dlsym(RTLD_NEXT, "popen");
}

static int wait_child(pid_t pid, int *status)
{
    pid_t r;
    while ((r = waitpid(pid, status, 0)) < 0 && errno == EINTR)
        continue;
    return r == pid ? 0 : -1;
}

/* ---- system ------------------------------------------------------------------- */

/* Concurrent calls ignore SIGINT and SIGQUIT once, and the last one out
 * puts the program's dispositions back. */
static pthread_mutex_t system_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned system_users;
static struct sigaction saved_intr, saved_quit;

static void system_leave(const sigset_t *omask)
{
    pthread_mutex_lock(&system_lock);
    if (--system_users == 0) {
        sigaction(SIGINT, &saved_intr, NULL);
        sigaction(SIGQUIT, &saved_quit, NULL);
    }
    pthread_mutex_unlock(&system_lock);
    pthread_sigmask(SIG_SETMASK, omask, NULL);
}

struct system_cancel {
    pid_t pid;
    const sigset_t *omask;
};

/* The caller was cancelled while it waited: the shell goes too. */
static void system_cancelled(void *arg)
{
    struct system_cancel *c = arg;
    kill(c->pid, SIGKILL);
    wait_child(c->pid, NULL);
    system_leave(c->omask);
}

static int run_system(const char *line)
{
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigemptyset(&ign.sa_mask);
    pthread_mutex_lock(&system_lock);
    if (system_users++ == 0) {
        sigaction(SIGINT, &ign, &saved_intr);
        sigaction(SIGQUIT, &ign, &saved_quit);
    }
    struct spawn_plan plan = {.flags = POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK};
    sigemptyset(&plan.sigdefault);
    if (saved_intr.sa_handler != SIG_IGN)
        sigaddset(&plan.sigdefault, SIGINT);
    if (saved_quit.sa_handler != SIG_IGN)
        sigaddset(&plan.sigdefault, SIGQUIT);
    pthread_mutex_unlock(&system_lock);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &chld, &plan.sigmask); /* the shell gets the caller's */
    pid_t pid;
    char *argv[] = {"sh", "-c", (char *)line, NULL};
    int err = spawn_run(&pid, SHELL_PATH, false, &plan, argv, environ);
    int status;
    if (err == 0) {
        struct system_cancel c = {pid, &plan.sigmask};
        pthread_cleanup_push(system_cancelled, &c);
        if (wait_child(pid, &status) != 0) /* waitpid is the cancellation point */
            status = -1;
        pthread_cleanup_pop(0);
    } else {
        status = W_EXITCODE(127, 0); /* POSIX: as if the shell exited with 127 */
    }
    system_leave(&plan.sigmask);
    if (err)
        errno = err;
    return status;
}

PRELOAD_EXPORT int system(const char *line)
{
    preload_ready();
    if (!spawn_needed()) {
        pthread_once(&resolved, resolve_once);
        if (!libc.system) {
            errno = ENOSYS;
            return -1;
        }
        return libc.system(line);
    }
    if (!line) /* is there a shell? */
        return run_system("exit 0") == 0;
    return run_system(line);
}

/* ---- popen ---------------------------------------------------------------------- */

/* Our popen streams: each child closes the others' descriptors. */
struct piped {
    int fd;
    pid_t pid;
    struct piped *next;
};

static struct piped *pipes;
static pthread_mutex_t pipes_lock = PTHREAD_MUTEX_INITIALIZER;

static ssize_t piped_read(void *cookie, char *buf, size_t len)
{
    return read(((struct piped *)cookie)->fd, buf, len);
}

static ssize_t piped_write(void *cookie, const char *buf, size_t len)
{
    return stdio_write_full(((struct piped *)cookie)->fd, buf, len);
}

/* fclose (and so pclose): the shell's wait status, or -1. */
static int piped_close(void *cookie)
{
    struct piped *k = cookie;
    pthread_mutex_lock(&pipes_lock);
    for (struct piped **p = &pipes; *p; p = &(*p)->next)
        if (*p == k) {
            *p = k->next;
            break;
        }
    pthread_mutex_unlock(&pipes_lock);
    int status = -1, cancel;
    if (close(k->fd) == 0) {
        pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
        if (wait_child(k->pid, &status) != 0)
            status = -1;
        pthread_setcancelstate(cancel, NULL);
    }
    free(k);
    return status;
}

/* glibc's mode: 'r' or 'w' (one of them), and 'e'. */
static bool parse_mode(const char *mode, bool *reading, bool *cloexec)
{
    bool r = false, w = false;
    *cloexec = false;
    for (; *mode; mode++) {
        if (*mode == 'r')
            r = true;
        else if (*mode == 'w')
            w = true;
        else if (*mode == 'e')
            *cloexec = true;
        else
            return false;
    }
    *reading = r;
    return r != w;
}

/* The child's actions: its end onto stdin or stdout, the other streams'
 * descriptors closed. */
static bool popen_plan(struct spawn_plan *plan, int child_end, int std_fd)
{
    *plan = (struct spawn_plan){0};
    pthread_mutex_lock(&pipes_lock);
    size_t n = 1;
    for (struct piped *k = pipes; k; k = k->next)
        n++;
    plan->ops = calloc(n, sizeof(*plan->ops));
    if (plan->ops) {
        plan->ops[plan->nops++] = (struct spawn_op){.kind = SPAWN_DUP2, .fd = child_end,
                                                    .newfd = std_fd};
        for (struct piped *k = pipes; k; k = k->next)
            if (k->fd != std_fd)
                plan->ops[plan->nops++] = (struct spawn_op){.kind = SPAWN_CLOSE, .fd = k->fd};
    }
    pthread_mutex_unlock(&pipes_lock);
    return plan->ops != NULL;
}

static FILE *run_popen(const char *command, bool reading, bool cloexec)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return NULL;
    int ours = reading ? p[0] : p[1], theirs = reading ? p[1] : p[0];
    struct piped *k = malloc(sizeof(*k));
    struct spawn_plan plan;
    int err = !k ? ENOMEM : !popen_plan(&plan, theirs, reading ? 1 : 0) ? ENOMEM : 0;
    pid_t pid = -1;
    if (!err) {
        char *argv[] = {"sh", "-c", (char *)command, NULL};
        err = spawn_run(&pid, SHELL_PATH, false, &plan, argv, environ);
        free(plan.ops);
    }
    close(theirs);
    FILE *f = NULL;
    if (!err) {
        if (!cloexec)
            fcntl(ours, F_SETFD, 0);
        *k = (struct piped){.fd = ours, .pid = pid};
        cookie_io_functions_t io = {piped_read, piped_write, NULL, piped_close};
        f = fopencookie(k, reading ? "r" : "w", io);
        err = f ? 0 : errno;
    }
    if (!f) {
        close(ours);
        if (pid > 0) /* the stream could not be made: the shell sees end of file */
            wait_child(pid, NULL);
        free(k);
        errno = err;
        return NULL;
    }
    f->_fileno = ours; /* fileno() names the pipe, as glibc's stream does */
    pthread_mutex_lock(&pipes_lock);
    k->next = pipes;
    pipes = k;
    pthread_mutex_unlock(&pipes_lock);
    return f;
}

PRELOAD_EXPORT FILE *popen(const char *command, const char *mode)
{
    preload_ready();
    if (!spawn_needed()) {
        pthread_once(&resolved, resolve_once);
        if (!libc.popen) {
            errno = ENOSYS;
            return NULL;
        }
        return libc.popen(command, mode);
    }
    bool reading, cloexec;
    if (!mode || !parse_mode(mode, &reading, &cloexec)) {
        errno = EINVAL;
        return NULL;
    }
    return run_popen(command, reading, cloexec);
}
