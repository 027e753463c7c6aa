/*
 * spawn_plan.h - posix_spawn, system and popen while the process holds
 * carried connections (spawn.c, spawn_actions.c, spawn_shell.c). glibc's
 * own versions start the child with an internal clone and exec through an
 * internal execve that no preload sees, so the child would get only the
 * idle kernel sockets; these run the child through fork and the exec
 * wrappers (exec.c) instead, which hand the carried connections over. (Not
 * named spawn.h: that is the system header this one includes.)
 */
#ifndef SOVIA_PRELOAD_SPAWN_PLAN_H
#define SOVIA_PRELOAD_SPAWN_PLAN_H

#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* One file action, as posix_spawn_file_actions_add* recorded it. */
enum spawn_op_kind {
    SPAWN_OPEN,
    SPAWN_CLOSE,
    SPAWN_DUP2,
    SPAWN_CHDIR,
    SPAWN_FCHDIR,
    SPAWN_CLOSEFROM,
    SPAWN_TCSETPGRP,
};

struct spawn_op {
    enum spawn_op_kind kind;
    int fd;    /* open: target; close, fchdir, closefrom, tcsetpgrp: the fd; dup2: source */
    int newfd; /* dup2 */
    int oflag;
    mode_t mode;
    char *path; /* open, chdir (owned) */
};

/* What the child does before exec: the file actions, then the attributes
 * (in glibc's order: signal defaults, scheduling, session, group, ids,
 * file actions, signal mask). */
struct spawn_plan {
    struct spawn_op *ops;
    size_t nops;
    short flags; /* POSIX_SPAWN_* */
    sigset_t sigmask, sigdefault;
    pid_t pgroup;
    int policy;
    struct sched_param param;
};

/* Does the process hold a carried connection (a child could inherit it)?
 * If not, glibc's own functions run unchanged. */
bool spawn_needed(void);

/* Starts the child: 0 and *pid (if pid) once it has exec'd, or the error
 * number of the step that failed (the child is reaped), as posix_spawn.
 * search: file is looked up in PATH, as posix_spawnp. */
int spawn_run(pid_t *pid, const char *file, bool search, const struct spawn_plan *plan,
              char *const argv[], char *const envp[]);

/* spawn_actions.c: a copy of the actions recorded for fa (NULL: none);
 * false if they are not known (fa made before the preload saw it, or
 * changed behind it): glibc's posix_spawn must then run. */
bool spawn_actions_copy(const posix_spawn_file_actions_t *fa, struct spawn_op **ops,
                        size_t *n);
void spawn_ops_free(struct spawn_op *ops, size_t n);

#endif /* SOVIA_PRELOAD_SPAWN_PLAN_H */
