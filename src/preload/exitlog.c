/*
 * exitlog.c - with SOVIA_STAT_LOG=FILE, each process run under sovia
 * appends one JSON line to FILE when it ends: how many connections sovia
 * carried, how many fell back to kernel TCP, and the bytes it moved. Tests
 * and scripts use it to prove a program's traffic really went over sovia
 * (docs/TRANSPARENT.md, "Exit records").
 *
 * Where: the variable as the process found it at start or at its last
 * fork, kept in memory (nginx clears its workers' environment); at exit()
 * the environment wins if it has the variable (empty: no record).
 * exec.c puts the variable back into a next image's environment that
 * lacks it. When: at exit(), or on a signal whose default action ends the
 * process (signal.c stands in for SIG_DFL and calls exitlog_signal), once
 * per process whichever comes first. The record is written with
 * async-signal-safe calls only (no stdio, no allocation), and waits for
 * locks other threads hold for 20 ms at most (stats.c).
 */
#include <fcntl.h>
#include <limits.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "preload.h"
#include "sock.h"

#define LOG_NAME "SOVIA_STAT_LOG"

/* The log's path: a new one goes to the other slot, then becomes current,
 * so a signal handler reads a whole one. Written only by the constructor
 * and a fork child's handler, while the process has one thread. */
static struct {
    char slot[2][PATH_MAX];
    atomic_uint cur;
} where;

static const char *kept_path(void)
{
    return where.slot[atomic_load_explicit(&where.cur, memory_order_acquire) & 1];
}

static void keep_path(const char *path)
{
    unsigned c = atomic_load_explicit(&where.cur, memory_order_relaxed);
    size_t n = strlen(path);
    if (n >= PATH_MAX)
        n = 0; /* no file can have that name */
    memcpy(where.slot[(c + 1) & 1], path, n);
    where.slot[(c + 1) & 1][n] = '\0';
    atomic_store_explicit(&where.cur, c + 1, memory_order_release);
}

/* The kept log, open from the process's first sovia call (sov_init_hook),
 * and the program's name: the record is then written with write(2) alone,
 * which a process that sandboxed itself (OpenSSH's pre-authentication
 * child: RLIMIT_NOFILE 1, a seccomp filter that kills on readlink) can
 * still do. Replaced in a fork child, alone. */
static atomic_int log_fd = -1;
static char exe[256] = "?";
/* The NIC that carried this process's connections ("shm", "fabric:tcp");
 * read here, outside any signal handler (it loads the cluster key). */
static char provider[64];

int exitlog_fd(void)
{
    return atomic_load_explicit(&log_fd, memory_order_relaxed);
}

static void open_kept(void)
{
    const char *path = kept_path();
    int fd = -1;
    if (*path) {
        VipxFdCreateBegin(); /* one of ours: safe from the program's stale close() */
        fd = VipxFdAdopt(open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600));
        VipxFdCreateEnd();
    }
    int old = atomic_exchange(&log_fd, fd);
    if (old >= 0)
        VipxFdClose(old);
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 1] = '\0';
}

/* Once per process: NOT_YET, then WRITING, then WRITTEN. */
enum { NOT_YET, WRITING, WRITTEN };
static atomic_int state;

/* ---- The line, built without stdio ----------------------------------------- */

struct line {
    char buf[2048]; /* exe escaped (6 bytes a byte at most) and the numbers */
    size_t len;
};

static void put(struct line *l, const char *s)
{
    for (; *s && l->len < sizeof(l->buf); s++)
        l->buf[l->len++] = *s;
}

static void put_uint(struct line *l, unsigned long long v)
{
    char digits[24];
    size_t n = 0;
    do
        digits[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n && l->len < sizeof(l->buf))
        l->buf[l->len++] = digits[--n];
}

/* A JSON string's contents: quote, backslash and control bytes escaped. */
static void put_json(struct line *l, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[7] = {'\\', (char)c, 0};
        if (c < 0x20) {
            const char *hex = "0123456789abcdef";
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            esc[6] = 0;
        } else if (c != '"' && c != '\\') {
            esc[0] = (char)c;
            esc[1] = 0;
        }
        put(l, esc);
    }
}

static void put_field(struct line *l, const char *name, unsigned long long v)
{
    put(l, ", \"");
    put(l, name);
    put(l, "\": ");
    put_uint(l, v);
}

/* `sig`: the signal that ends the process, 0 at exit(). */
static void write_record(const char *path, int sig)
{
    struct sov_tally t;
    sov_tally(&t);
    if (!path || !*path || t.carried + t.fell_back + t.kernel + t.migrated == 0)
        return; /* only processes that made or took TCP connections */
    struct line l = {.len = 0};
    put(&l, "{\"pid\": ");
    put_uint(&l, (unsigned long long)getpid());
    put(&l, ", \"exe\": \"");
    put_json(&l, exe);
    put(&l, "\", \"provider\": \"");
    put_json(&l, provider);
    /* Carried connections per provider: with a cluster key beside shm,
     * this host's peers on shm and other hosts' on the far NIC (far.c). */
    put(&l, "\", \"providers\": {\"");
    put_json(&l, provider);
    put(&l, "\": ");
    put_uint(&l, t.carried - t.carried_far);
    if (t.carried_far) {
        put(&l, ", \"");
        put_json(&l, sov_far_provider_name());
        put(&l, "\": ");
        put_uint(&l, t.carried_far);
    }
    put(&l, "}");
    put_field(&l, "carried", t.carried);
    put_field(&l, "fell_back", t.fell_back);
    put_field(&l, "kernel", t.kernel);
    put_field(&l, "short", t.short_);
    put_field(&l, "redirected", t.redirected);
    put_field(&l, "migrated", t.migrated);
    put_field(&l, "bytes_sent", t.bytes_sent);
    put_field(&l, "bytes_received", t.bytes_received);
    put_field(&l, "signal", (unsigned long long)sig);
    put(&l, "}\n");
    if (l.len == sizeof(l.buf))
        return; /* cannot be: the fields are bounded */
    int kept = atomic_load(&log_fd);
    bool own = kept < 0 || strcmp(path, kept_path()) != 0;
    int fd = own ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600) : kept;
    if (fd < 0)
        return;
    /* A write past RLIMIT_FSIZE kills with SIGXFSZ (OpenSSH's sandboxed
     * child sets it to 0): no record rather than a death of ours. */
    struct rlimit fsz;
    struct stat st;
    bool fits = getrlimit(RLIMIT_FSIZE, &fsz) != 0 || fsz.rlim_cur == RLIM_INFINITY ||
                (fstat(fd, &st) == 0 && (rlim_t)st.st_size + l.len <= fsz.rlim_cur);
    if (fits && real.write(fd, l.buf, l.len) < 0) {
        /* nothing to do at exit */
    }
    if (own)
        real.close(fd);
}

static bool claim(void)
{
    int expect = NOT_YET;
    return atomic_compare_exchange_strong(&state, &expect, WRITING);
}

/* Before the process sandboxes itself (sandbox.c): sovia is inert from
 * then on, so its counts are final, and at its end the process may no
 * longer be allowed the calls a record takes. */
void exitlog_now(void)
{
    if (claim()) {
        const char *env = getenv(LOG_NAME);
        write_record(env ? env : kept_path(), 0);
        atomic_store(&state, WRITTEN);
    }
}

/* ---- When ---------------------------------------------------------------- */

void exitlog_signal(int sig)
{
    if (claim()) {
        write_record(kept_path(), sig);
        atomic_store(&state, WRITTEN);
        return;
    }
    /* Another thread writes it (a second signal, or exit()): the process
     * must not die under it, but not wait for ever either. */
    struct timespec ms = {0, 1000000};
    for (int i = 0; i < 1000 && atomic_load(&state) == WRITING; i++)
        nanosleep(&ms, NULL);
}

__attribute__((destructor)) static void write_exit_record(void)
{
    /* A handler of ours on this thread must not find the record half
     * written (it would wait for it). */
    sigset_t ending, old;
    preload_ending_signals(&ending);
    pthread_sigmask(SIG_BLOCK, &ending, &old);
    if (claim()) { /* else written already, or by a handler that ends us */
        const char *env = getenv(LOG_NAME);
        write_record(env ? env : kept_path(), 0);
        atomic_store(&state, WRITTEN);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* At start and in a fork child: the variable, if the environment has it
 * (the child may have been given another by its parent's setenv). */
void exitlog_capture(void)
{
    const char *env = getenv(LOG_NAME);
    bool changed = env && strcmp(env, kept_path()) != 0;
    if (changed)
        keep_path(env);
    if (changed && atomic_load(&log_fd) >= 0) /* a child told of another log */
        open_kept();
    atomic_store(&state, NOT_YET); /* a child writes its own */
    if (*kept_path())
        preload_signals_arm();
}

static void open_at_init(void)
{
    strncpy(provider, sov_provider_name(), sizeof(provider) - 1);
    preload_fabric_seen();
    if (atomic_load(&log_fd) < 0 && *kept_path())
        open_kept();
}

__attribute__((constructor)) static void exitlog_start(void)
{
    preload_ready();
    sov_init_hook = open_at_init;
    sov_far_hook = preload_fabric_seen; /* libfabric loads later, if ever */
    exitlog_capture();
}

/* The log a next image should be told of: the kept one, if its
 * environment does not name one (not even empty: the program's choice). */
const char *exitlog_for_exec(char *const envp[])
{
    for (char *const *e = envp; e && *e; e++)
        if (strncmp(*e, LOG_NAME "=", sizeof(LOG_NAME)) == 0)
            return NULL;
    const char *path = kept_path();
    return *path ? path : NULL;
}
