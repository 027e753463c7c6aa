/*
 * exec.c - the exec family. A carried connection named by a descriptor
 * that survives exec goes to the new program (the sockets layer's
 * inherit.c): its description travels in a memfd named by SOVIA_INHERIT in
 * the new program's environment, and the new image's preload takes it
 * before main(). A program that will not run sovia (LD_PRELOAD gone from
 * its environment, or an image the preload cannot follow: image.c) gets
 * kernel sockets that carry the whole stream: the connections it would
 * inherit go back to them first, in mid-stream (migrate.c).
 *
 * glibc's posix_spawn, system and popen exec without these wrappers; while
 * carried connections exist, spawn.c and spawn_shell.c run them through
 * fork and these wrappers instead, and vfork is fork (spawn.c).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"
#include "sock.h"
#include "transparent.h"

#define INHERIT_VAR "SOVIA_INHERIT="
#define STAT_LOG_VAR "SOVIA_STAT_LOG="

extern char **environ;

static struct {
    int (*execve)(const char *, char *const[], char *const[]);
    int (*execvpe)(const char *, char *const[], char *const[]);
    int (*fexecve)(int, char *const[], char *const[]);
} libc;

static void resolve(void)
{
    libc.execve = (__typeof__(libc.execve))dlsym(RTLD_NEXT, "execve");
    libc.execvpe = (__typeof__(libc.execvpe))dlsym(RTLD_NEXT, "execvpe");
    libc.fexecve = (__typeof__(libc.fexecve))dlsym(RTLD_NEXT, "fexecve");
}

__attribute__((constructor)) static void take_inherited(void)
{
    resolve();
    preload_ready();
    sov_g.inheritable = true; /* every connection here can go to a next image */
    sov_inherit_import();
    for (int fd = 0; fd <= 2; fd++) /* a service started by inetd */
        if (carried(fd))
            stdio_follow_socket(fd);
}

/* The new program runs sovia only if its environment still preloads us. */
static bool preloads_sovia(char *const envp[])
{
    for (char *const *e = envp; e && *e; e++)
        if (strncmp(*e, "LD_PRELOAD=", 11) == 0 && strstr(*e, "libsovia-preload"))
            return true;
    return false;
}

/* envp for a next image that loads the preload: with SOVIA_INHERIT=<memfd>
 * when connections go along (replacing a stale one), and with the exit
 * record's SOVIA_STAT_LOG if the program left it out (exitlog.c). One
 * block to free(). NULL: envp as it is (nothing to add, or no memory:
 * *memfd_kept false then). */
char **preload_exec_env(char *const envp[], int memfd, bool *memfd_kept)
{
    *memfd_kept = false;
    if (!preloads_sovia(envp))
        return NULL;
    const char *log = exitlog_for_exec(envp);
    if (memfd < 0 && !log)
        return NULL;
    size_t n = 0;
    for (char *const *e = envp; e && *e; e++)
        n++;
    size_t vars = (n + 3) * sizeof(char *), inherit = sizeof(INHERIT_VAR) + 16;
    size_t loglen = log ? sizeof(STAT_LOG_VAR) + strlen(log) : 0;
    char **out = malloc(vars + inherit + loglen);
    if (!out)
        return NULL;
    size_t k = 0;
    for (char *const *e = envp; e && *e; e++)
        if (memfd < 0 || strncmp(*e, INHERIT_VAR, strlen(INHERIT_VAR)) != 0)
            out[k++] = *e;
    if (memfd >= 0) {
        out[k] = (char *)out + vars;
        snprintf(out[k++], inherit, INHERIT_VAR "%d", memfd);
        *memfd_kept = true;
    }
    if (log) {
        out[k] = (char *)out + vars + inherit;
        snprintf(out[k++], loglen, STAT_LOG_VAR "%s", log);
    }
    out[k] = NULL;
    return out;
}

enum exec_kind { BY_PATH, BY_SEARCH, BY_FD };

static int do_exec(enum exec_kind kind, const char *file, int fd, char *const argv[],
                   char *const envp[])
{
    preload_ready();
    if (!libc.execve)
        resolve();
    struct sov_handoff h = {.memfd = -1};
    bool follows = preloads_sovia(envp);
    if (atomic_load(&sov_g.open_conns)) {
        char *found = kind == BY_SEARCH ? preload_image_search(file) : NULL;
        if (follows && !preload_image_runs_sovia(kind == BY_SEARCH ? found : file, fd))
            follows = false;
        free(found);
        if (!follows)
            sov_tp_migrate_inherited();
        else if (atomic_load(&sov_g.far_open))
            sov_tp_migrate_far_inherited();
    }
    if (follows)
        sov_inherit_export(&h);
    bool kept;
    char **env = preload_exec_env(envp, h.memfd, &kept);
    if (h.memfd >= 0 && !kept)
        sov_inherit_abort(&h);
    char *const *use = env ? env : envp;
    int rc;
    if (kind == BY_PATH)
        rc = libc.execve(file, argv, use);
    else if (kind == BY_SEARCH)
        rc = libc.execvpe(file, argv, use);
    else
        rc = libc.fexecve(fd, argv, use);
    int err = errno;
    if (h.memfd >= 0)
        sov_inherit_abort(&h);
    free(env);
    errno = err;
    return rc;
}

PRELOAD_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    return do_exec(BY_PATH, path, -1, argv, envp);
}

PRELOAD_EXPORT int execv(const char *path, char *const argv[])
{
    return do_exec(BY_PATH, path, -1, argv, environ);
}

PRELOAD_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    return do_exec(BY_SEARCH, file, -1, argv, envp);
}

PRELOAD_EXPORT int execvp(const char *file, char *const argv[])
{
    return do_exec(BY_SEARCH, file, -1, argv, environ);
}

PRELOAD_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    return do_exec(BY_FD, NULL, fd, argv, envp);
}

/* execl & co.: the variable arguments become an argv (and, for execle, the
 * environment after the terminating NULL). */
static int exec_list(enum exec_kind kind, const char *file, const char *arg0, va_list ap,
                     bool with_env)
{
    size_t n = 1;
    va_list count;
    va_copy(count, ap);
    while (va_arg(count, char *))
        n++;
    va_end(count);
    char **argv = malloc((n + 1) * sizeof(*argv));
    if (!argv) {
        errno = ENOMEM;
        return -1;
    }
    argv[0] = (char *)arg0;
    for (size_t i = 1; i <= n; i++)
        argv[i] = va_arg(ap, char *); /* the last one is the NULL */
    char *const *envp = with_env ? va_arg(ap, char *const *) : environ;
    int rc = do_exec(kind, file, -1, argv, envp);
    int err = errno;
    free(argv);
    errno = err;
    return rc;
}

/* glibc declares arg non-null: argv[0] is always there. */
PRELOAD_EXPORT int execl(const char *path, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    int rc = exec_list(BY_PATH, path, arg, ap, false);
    va_end(ap);
    return rc;
}

PRELOAD_EXPORT int execlp(const char *file, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    int rc = exec_list(BY_SEARCH, file, arg, ap, false);
    va_end(ap);
    return rc;
}

PRELOAD_EXPORT int execle(const char *path, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    int rc = exec_list(BY_PATH, path, arg, ap, true);
    va_end(ap);
    return rc;
}
