/*
 * spawn_actions.c - posix_spawn's file actions, recorded. The actions
 * object is opaque (glibc keeps its list in an internal format), so each
 * posix_spawn_file_actions_* call goes to glibc as usual, and what it added
 * is also written in a side table keyed by the object's address: the
 * emulated posix_spawn (spawn.c) replays it in the child. glibc's list
 * length and array (public fields of the object) are noted with each
 * record, so an object copied, or changed behind the wrappers, is seen as
 * unknown and glibc's own posix_spawn runs for it.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "preload.h"
#include "spawn_plan.h"

struct record {
    const posix_spawn_file_actions_t *key;
    struct spawn_op *ops;
    size_t n, cap;
    bool broken; /* an action could not be recorded (no memory) */
    const void *glibc_list;
    int glibc_used;
    struct record *next;
};

static struct record *records;
static pthread_mutex_t records_lock = PTHREAD_MUTEX_INITIALIZER;

static struct record *find(const posix_spawn_file_actions_t *fa)
{
    struct record *r = records;
    while (r && r->key != fa)
        r = r->next;
    return r;
}

static void note_glibc(struct record *r)
{
    r->glibc_list = r->key->__actions;
    r->glibc_used = r->key->__used;
}

static void clear_ops(struct record *r)
{
    spawn_ops_free(r->ops, r->n);
    r->ops = NULL;
    r->n = r->cap = 0;
}

static void start_record(posix_spawn_file_actions_t *fa)
{
    pthread_mutex_lock(&records_lock);
    struct record *r = find(fa); /* an object re-initialized without destroy */
    if (!r && (r = calloc(1, sizeof(*r))) != NULL) {
        r->key = fa;
        r->next = records;
        records = r;
    }
    if (r) {
        clear_ops(r);
        r->broken = false;
        note_glibc(r);
    }
    pthread_mutex_unlock(&records_lock);
}

static void drop_record(posix_spawn_file_actions_t *fa)
{
    pthread_mutex_lock(&records_lock);
    struct record **pp = &records;
    while (*pp && (*pp)->key != fa)
        pp = &(*pp)->next;
    struct record *r = *pp;
    if (r) {
        *pp = r->next;
        clear_ops(r);
        free(r);
    }
    pthread_mutex_unlock(&records_lock);
}

/* glibc added op to fa: the record follows (it takes op.path). */
static void add_op(posix_spawn_file_actions_t *fa, struct spawn_op op)
{
    pthread_mutex_lock(&records_lock);
    struct record *r = find(fa);
    if (r && !r->broken && r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 8;
        struct spawn_op *more = realloc(r->ops, cap * sizeof(*more));
        if (more) {
            r->ops = more;
            r->cap = cap;
        }
    }
    if (r && !r->broken && r->n < r->cap &&
        ((op.kind != SPAWN_OPEN && op.kind != SPAWN_CHDIR) || op.path)) {
        r->ops[r->n++] = op;
        op.path = NULL;
    } else if (r) {
        r->broken = true;
    }
    if (r)
        note_glibc(r);
    pthread_mutex_unlock(&records_lock);
    free(op.path);
}

void spawn_ops_free(struct spawn_op *ops, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(ops[i].path);
    free(ops);
}

bool spawn_actions_copy(const posix_spawn_file_actions_t *fa, struct spawn_op **ops, size_t *n)
{
    *ops = NULL;
    *n = 0;
    if (!fa)
        return true;
    pthread_mutex_lock(&records_lock);
    struct record *r = find(fa);
    bool ok = r && !r->broken && r->glibc_list == fa->__actions && r->glibc_used == fa->__used &&
              (size_t)fa->__used == r->n;
    struct spawn_op *copy = ok && r->n ? calloc(r->n, sizeof(*copy)) : NULL;
    if (ok && r->n && !copy)
        ok = false;
    for (size_t i = 0; ok && i < r->n; i++) {
        copy[i] = r->ops[i];
        copy[i].path = NULL;
        if (r->ops[i].path && !(copy[i].path = strdup(r->ops[i].path))) {
            spawn_ops_free(copy, i);
            copy = NULL;
            ok = false;
        }
    }
    pthread_mutex_unlock(&records_lock);
    if (ok) {
        *ops = copy;
        *n = r ? r->n : 0;
    }
    return ok;
}

/* ---- The wrappers: glibc first, then the record ---------------------------- */

static struct {
    __typeof__(posix_spawn_file_actions_init) *init;
    __typeof__(posix_spawn_file_actions_destroy) *destroy;
    __typeof__(posix_spawn_file_actions_addopen) *addopen;
    __typeof__(posix_spawn_file_actions_addclose) *addclose;
    __typeof__(posix_spawn_file_actions_adddup2) *adddup2;
    __typeof__(posix_spawn_file_actions_addchdir_np) *addchdir_np;
    __typeof__(posix_spawn_file_actions_addfchdir_np) *addfchdir_np;
    __typeof__(posix_spawn_file_actions_addclosefrom_np) *addclosefrom_np;
    __typeof__(posix_spawn_file_actions_addtcsetpgrp_np) *addtcsetpgrp_np;
} libc;

#define FIND(name) \
    libc.name = (__typeof__(libc.name))dlsym(RTLD_NEXT, "posix_spawn_file_actions_" #name)

static pthread_once_t resolved = PTHREAD_ONCE_INIT;

static void resolve_once(void)
{
    FIND(init);
    FIND(destroy);
    FIND(addopen);
    FIND(addclose);
    FIND(adddup2);
    FIND(addchdir_np);
    FIND(addfchdir_np);
    FIND(addclosefrom_np); /* glibc 2.34 */
    FIND(addtcsetpgrp_np); /* glibc 2.35 */
}

/* Calls glibc's name (ENOSYS if this glibc has none). */
#define NEXT(name, ...)                                                               \
    do {                                                                              \
        pthread_once(&resolved, resolve_once);                                        \
        if (!libc.name)                                                               \
            return ENOSYS;                                                            \
        rc = libc.name(__VA_ARGS__);                                                  \
    } while (0)

PRELOAD_EXPORT int posix_spawn_file_actions_init(posix_spawn_file_actions_t *fa)
{
    int rc;
    NEXT(init, fa);
    if (rc == 0)
        start_record(fa);
    return rc;
}

PRELOAD_EXPORT int posix_spawn_file_actions_destroy(posix_spawn_file_actions_t *fa)
{
    drop_record(fa);
    int rc;
    NEXT(destroy, fa);
    return rc;
}

PRELOAD_EXPORT int posix_spawn_file_actions_addopen(posix_spawn_file_actions_t *fa, int fd,
                                                    const char *path, int oflag, mode_t mode)
{
    int rc;
    NEXT(addopen, fa, fd, path, oflag, mode);
    if (rc == 0)
        add_op(fa, (struct spawn_op){.kind = SPAWN_OPEN,
                                     .fd = fd,
                                     .oflag = oflag,
                                     .mode = mode,
                                     .path = strdup(path)});
    return rc;
}

PRELOAD_EXPORT int posix_spawn_file_actions_addclose(posix_spawn_file_actions_t *fa, int fd)
{
    int rc;
    NEXT(addclose, fa, fd);
    if (rc == 0)
        add_op(fa, (struct spawn_op){.kind = SPAWN_CLOSE, .fd = fd});
    return rc;
}

PRELOAD_EXPORT int posix_spawn_file_actions_adddup2(posix_spawn_file_actions_t *fa, int fd,
                                                    int newfd)
{
    int rc;
    NEXT(adddup2, fa, fd, newfd);
    if (rc == 0)
        add_op(fa, (struct spawn_op){.kind = SPAWN_DUP2, .fd = fd, .newfd = newfd});
    return rc;
}

PRELOAD_EXPORT int posix_spawn_file_actions_addchdir_np(posix_spawn_file_actions_t *fa,
                                                        const char *path)
{
    int rc;
    NEXT(addchdir_np, fa, path);
    if (rc == 0)
        add_op(fa, (struct spawn_op){.kind = SPAWN_CHDIR, .path = strdup(path)});
    return rc;
}

PRELOAD_EXPORT int posix_spawn_file_actions_addfchdir_np(posix_spawn_file_actions_t *fa, int fd)
{
    int rc;
    NEXT(addfchdir_np, fa, fd);
    if (rc == 0)
        add_op(fa, (struct spawn_op){.kind = SPAWN_FCHDIR, .fd = fd});
    return rc;
}

PRELOAD_EXPORT int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *fa,
                                                            int from)
{
    int rc;
    NEXT(addclosefrom_np, fa, from);
    if (rc == 0)
        add_op(fa, (struct spawn_op){.kind = SPAWN_CLOSEFROM, .fd = from});
    return rc;
}

PRELOAD_EXPORT int posix_spawn_file_actions_addtcsetpgrp_np(posix_spawn_file_actions_t *fa,
                                                            int fd)
{
    int rc;
    NEXT(addtcsetpgrp_np, fa, fd);
    if (rc == 0)
        add_op(fa, (struct spawn_op){.kind = SPAWN_TCSETPGRP, .fd = fd});
    return rc;
}
