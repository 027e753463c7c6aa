/*
 * spawn.c - vfork, posix_spawn and posix_spawnp (docs/ARCHITECTURE.md,
 * "Transparent mode"). glibc's posix_spawn starts the child with
 * clone(CLONE_VM | CLONE_VFORK) and execs through an internal execve: no
 * atfork handler runs and no exec wrapper sees it, so a child given a
 * carried socket (an inetd-like spawner dup2's it onto stdin and stdout)
 * would get only the idle kernel socket. While the process holds carried
 * connections, posix_spawn is done here instead: fork (the sockets layer's
 * atfork handlers share every connection with the child), the file
 * actions and attributes in the child as glibc applies them, then the exec
 * wrappers, which hand the surviving connections to the new image. The
 * child reports a failure before or in exec through a close-on-exec pipe;
 * posix_spawn returns that error number, as glibc's does, once the child
 * has exec'd or failed. Otherwise glibc's functions run unchanged (with
 * SOVIA_STAT_LOG put back into an environment that dropped it, as the exec
 * wrappers do).
 *
 * vfork is fork: a vfork child shares the parent's memory, and everything
 * the wrappers it calls do (the exec handover quiesces connections and
 * rewrites their state; close drops preload bookkeeping) would happen to
 * the parent's state too. POSIX allows vfork to be fork.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "preload.h"
#include "sock.h"
#include "spawn_plan.h"

#define KNOWN_FLAGS                                                                   \
    (POSIX_SPAWN_RESETIDS | POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |            \
     POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSCHEDPARAM | POSIX_SPAWN_SETSCHEDULER |    \
     POSIX_SPAWN_USEVFORK | POSIX_SPAWN_SETSID)

/* While the child has not exec'd, another thread's fork may have copied the
 * pipe's write end into a child that neither execs nor exits for a long
 * time (no end of file then): every so often the parent looks whether its
 * own child still holds the pipe. */
#define EXEC_CHECK_MS 50

typedef int spawn_fn(pid_t *, const char *, const posix_spawn_file_actions_t *,
                     const posix_spawnattr_t *, char *const[], char *const[]);

bool spawn_needed(void)
{
    if (!sov_g.nic)
        return false; /* sovia never started here */
    for (int fd = 0, lim = sov_table_limit(); fd < lim; fd++) {
        struct sov_sock *s = sov_lookup(fd);
        if (!s)
            continue;
        sov_sock_lock(s);
        bool live = !s->dead && s->transparent && s->kind == SK_CONNECTED;
        sov_sock_unlock(s);
        if (live)
            return true;
    }
    return false;
}

/* ---- In the child ------------------------------------------------------------ */

/* glibc's test for a close action's descriptor (others are ignored). */
static bool fd_in_range(int fd)
{
    return fd >= 0 && fd < getdtablesize();
}

/* The error pipe must not be where an action puts a descriptor. */
static bool move_errfd(int *errfd, int fd)
{
    if (fd != *errfd)
        return true;
    int moved = fcntl(*errfd, F_DUPFD_CLOEXEC, 0);
    if (moved < 0)
        return false;
    close(*errfd);
    *errfd = moved;
    return true;
}

/* The error pipe is not open as far as the program knows. */
static bool source_ok(int errfd, int fd)
{
    if (fd != errfd)
        return true;
    errno = EBADF;
    return false;
}

static bool close_from(int errfd, int from)
{
    if (from < 0) {
        errno = EBADF;
        return false;
    }
    /* closefrom's wrapper spares sovia's own descriptors. */
    if (errfd >= from) {
        if (errfd > from && close_range((unsigned)from, (unsigned)errfd - 1, 0) != 0)
            return false;
        from = errfd + 1;
    }
    return close_range((unsigned)from, ~0u, 0) == 0;
}

static bool do_open(int *errfd, const struct spawn_op *op)
{
    if (!move_errfd(errfd, op->fd))
        return false;
    close(op->fd); /* POSIX: an open target is closed first */
    int fd = open(op->path, op->oflag, op->mode);
    if (fd < 0)
        return false;
    if (fd != op->fd && (dup2(fd, op->fd) != op->fd || close(fd) != 0))
        return false;
    return true;
}

static bool do_dup2(int *errfd, const struct spawn_op *op)
{
    if (!source_ok(*errfd, op->fd))
        return false;
    if (op->fd == op->newfd) { /* Austin Group 411: clears FD_CLOEXEC */
        int flags = fcntl(op->fd, F_GETFD);
        return flags >= 0 && fcntl(op->fd, F_SETFD, flags & ~FD_CLOEXEC) == 0;
    }
    return move_errfd(errfd, op->newfd) && dup2(op->fd, op->newfd) == op->newfd;
}

static bool do_op(int *errfd, const struct spawn_plan *plan, const struct spawn_op *op)
{
    switch (op->kind) {
    case SPAWN_OPEN:
        return do_open(errfd, op);
    case SPAWN_CLOSE:
        /* glibc ignores a failed close of a descriptor in range */
        return op->fd == *errfd || close(op->fd) == 0 || fd_in_range(op->fd);
    case SPAWN_DUP2:
        return do_dup2(errfd, op);
    case SPAWN_CHDIR:
        return chdir(op->path) == 0;
    case SPAWN_FCHDIR:
        return source_ok(*errfd, op->fd) && fchdir(op->fd) == 0;
    case SPAWN_CLOSEFROM:
        return close_from(*errfd, op->fd);
    case SPAWN_TCSETPGRP: {
        pid_t pgrp = (plan->flags & POSIX_SPAWN_SETPGROUP) && plan->pgroup ? plan->pgroup
                                                                            : getpgid(0);
        return source_ok(*errfd, op->fd) && tcsetpgrp(op->fd, pgrp) == 0;
    }
    }
    errno = EINVAL;
    return false;
}

/* The attributes applied before the file actions, in glibc's order. */
static bool apply_attributes(const struct spawn_plan *plan)
{
    short f = plan->flags;
    if (f & POSIX_SPAWN_SETSIGDEF) {
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        sigemptyset(&dfl.sa_mask);
        for (int sig = 1; sig < NSIG; sig++)
            if (sig != SIGKILL && sig != SIGSTOP && sigismember(&plan->sigdefault, sig) == 1)
                sigaction(sig, &dfl, NULL);
    }
    if ((f & (POSIX_SPAWN_SETSCHEDPARAM | POSIX_SPAWN_SETSCHEDULER)) ==
        POSIX_SPAWN_SETSCHEDPARAM) {
        if (sched_setparam(0, &plan->param) != 0)
            return false;
    } else if ((f & POSIX_SPAWN_SETSCHEDULER) &&
               sched_setscheduler(0, plan->policy, &plan->param) == -1) {
        return false;
    }
    if ((f & POSIX_SPAWN_SETSID) && setsid() < 0)
        return false;
    if ((f & POSIX_SPAWN_SETPGROUP) && setpgid(0, plan->pgroup) != 0)
        return false;
    /* glibc's order (the group after the user) */
    if ((f & POSIX_SPAWN_RESETIDS) && (seteuid(getuid()) != 0 || setegid(getgid()) != 0))
        return false;
    return true;
}

/* posix_spawnp's search, as glibc's (no shell for a file without a
 * #! line). Returns with errno when nothing could be exec'd. */
static void exec_search(const char *file, char *const argv[], char *const envp[])
{
    if (!*file) {
        errno = ENOENT;
        return;
    }
    if (strchr(file, '/')) {
        execve(file, argv, envp);
        return;
    }
    size_t flen = strlen(file);
    if (flen > NAME_MAX) {
        errno = ENAMETOOLONG;
        return;
    }
    const char *path = getenv("PATH");
    if (!path)
        path = "/bin:/usr/bin"; /* confstr(_CS_PATH) */
    bool eacces = false;
    char buf[PATH_MAX];
    for (const char *p = path, *end;; p = end + 1) {
        end = strchrnul(p, ':');
        size_t dlen = (size_t)(end - p);
        if (dlen + 1 + flen < sizeof buf) {
            memcpy(buf, p, dlen);
            buf[dlen] = '/';
            /* an empty entry is the current directory */
            memcpy(dlen ? buf + dlen + 1 : buf, file, flen + 1);
            execve(buf, argv, envp);
            switch (errno) {
            case EACCES:
                eacces = true;
                break;
            case ENOENT:
            case ESTALE:
            case ENOTDIR:
            case ENODEV:
            case ETIMEDOUT:
                break;
            default:
                return; /* glibc stops at any other error too */
            }
        }
        if (!*end)
            break;
    }
    errno = eacces ? EACCES : ENOENT;
}

__attribute__((noreturn)) static void child(int errfd, const char *file, bool search,
                                           const struct spawn_plan *plan,
                                           const sigset_t *parent_mask, char *const argv[],
                                           char *const envp[])
{
    bool ok = apply_attributes(plan);
    for (size_t i = 0; ok && i < plan->nops; i++)
        ok = do_op(&errfd, plan, &plan->ops[i]);
    if (ok) {
        pthread_sigmask(SIG_SETMASK,
                        (plan->flags & POSIX_SPAWN_SETSIGMASK) ? &plan->sigmask : parent_mask,
                        NULL);
        if (search)
            exec_search(file, argv, envp);
        else
            execve(file, argv, envp); /* the wrapper: carried connections go along */
    }
    int err = errno ? errno : ENOEXEC;
    if (write(errfd, &err, sizeof err) < 0) {
        /* the parent then reports success; nothing better to do */
    }
    _exit(127);
}

/* ---- In the parent ------------------------------------------------------------ */

/* Does process pid still have the pipe whose inode is ino open? */
static bool holds_pipe(pid_t pid, ino_t ino)
{
    char dir[64], want[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    snprintf(want, sizeof want, "pipe:[%llu]", (unsigned long long)ino);
    DIR *d = opendir(dir);
    if (!d) /* gone (a zombie); or no /proc: then keep waiting for the pipe */
        return access("/proc/self/fd", F_OK) != 0;
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        char link[64];
        ssize_t n = readlinkat(dirfd(d), e->d_name, link, sizeof link - 1);
        if (n > 0) {
            link[n] = '\0';
            found = strcmp(link, want) == 0;
        }
    }
    closedir(d);
    return found;
}

/* The child's report: 0 once it has exec'd (the pipe closed), else its
 * error number. */
static int await_exec(int rd, pid_t pid)
{
    struct stat sb;
    bool can_look = fstat(rd, &sb) == 0;
    for (;;) {
        struct pollfd p = {.fd = rd, .events = POLLIN};
        int r = poll(&p, 1, EXEC_CHECK_MS);
        if (r == 0) {
            if (!can_look || holds_pipe(pid, sb.st_ino))
                continue;
            /* It let go of the pipe: exec'd, or failed and wrote first. */
            if (poll(&p, 1, 0) <= 0)
                return 0;
        } else if (r < 0) {
            continue; /* EINTR */
        }
        int err = 0;
        ssize_t n = read(rd, &err, sizeof err);
        if (n < 0 && errno == EINTR)
            continue;
        return n == (ssize_t)sizeof err ? err : 0;
    }
}

int spawn_run(pid_t *pid, const char *file, bool search, const struct spawn_plan *plan,
              char *const argv[], char *const envp[])
{
    int saved_errno = errno, cancel;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
    int p[2], err = 0;
    pid_t kid = -1;
    if (pipe2(p, O_CLOEXEC) != 0) {
        err = errno;
    } else {
        /* No handler of the parent's may run in the child before exec. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        kid = fork();
        if (kid == 0) {
            close(p[0]);
            child(p[1], file, search, plan, &old, argv, envp);
        }
        err = kid < 0 ? errno : 0;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        close(p[1]);
        if (kid > 0)
            err = await_exec(p[0], kid);
        close(p[0]);
    }
    if (kid > 0 && err)
        while (waitpid(kid, NULL, 0) < 0 && errno == EINTR)
            continue;
    if (!err && pid)
        *pid = kid;
    pthread_setcancelstate(cancel, NULL);
    errno = saved_errno;
    return err;
}

/* The plan for posix_spawn's actions and attributes; false: not known here
 * (glibc's posix_spawn must run). */
static bool plan_of(const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *attr,
                    struct spawn_plan *plan)
{
    *plan = (struct spawn_plan){0};
    sigemptyset(&plan->sigmask);
    sigemptyset(&plan->sigdefault);
    if (attr && (posix_spawnattr_getflags(attr, &plan->flags) != 0 ||
                 (plan->flags & ~KNOWN_FLAGS) ||
                 posix_spawnattr_getsigmask(attr, &plan->sigmask) != 0 ||
                 posix_spawnattr_getsigdefault(attr, &plan->sigdefault) != 0 ||
                 posix_spawnattr_getpgroup(attr, &plan->pgroup) != 0 ||
                 posix_spawnattr_getschedpolicy(attr, &plan->policy) != 0 ||
                 posix_spawnattr_getschedparam(attr, &plan->param) != 0))
        return false;
    return spawn_actions_copy(fa, &plan->ops, &plan->nops);
}

static spawn_fn *libc_spawn, *libc_spawnp;

static void resolve_once(void)
{
    libc_spawn = (spawn_fn *)dlsym(RTLD_NEXT, "posix_spawn");
    libc_spawnp = (spawn_fn *)dlsym(RTLD_NEXT, "posix_spawnp");
}

static int spawn(bool search, pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                 const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    static pthread_once_t resolved = PTHREAD_ONCE_INIT;
    preload_ready();
    struct spawn_plan plan;
    if (spawn_needed() && plan_of(fa, attr, &plan)) {
        int rc = spawn_run(pid, file, search, &plan, argv, envp);
        spawn_ops_free(plan.ops, plan.nops);
        return rc;
    }
    pthread_once(&resolved, resolve_once);
    spawn_fn *next = search ? libc_spawnp : libc_spawn;
    if (!next)
        return ENOSYS;
    bool unused;
    char **env = preload_exec_env(envp, -1, &unused); /* SOVIA_STAT_LOG put back */
    int rc = next(pid, file, fa, attr, argv, env ? env : envp);
    free(env);
    return rc;
}

PRELOAD_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                               const posix_spawnattr_t *attr, char *const argv[],
                               char *const envp[])
{
    return spawn(false, pid, path, fa, attr, argv, envp);
}

PRELOAD_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                                const posix_spawnattr_t *attr, char *const argv[],
                                char *const envp[])
{
    return spawn(true, pid, file, fa, attr, argv, envp);
}

PRELOAD_EXPORT pid_t vfork(void)
{
    return fork();
}

PRELOAD_EXPORT pid_t __vfork(void)
{
    return fork();
}
