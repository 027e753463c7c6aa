/*
 * statsrv.c - answers `sovia stat`: this process's live connections.
 *
 * The first connection a process establishes starts one small thread that
 * listens on the abstract SOCK_STREAM Unix socket "sovia-stat.<euid>.<pid>"
 * (nothing in the file system, gone with the process) and sleeps in
 * accept(). Abstract names have no permissions, so a client whose
 * SO_PEERCRED uid is not our effective uid is closed before anything is
 * sent. The client sends nothing; the server writes the answer and closes:
 *
 *     sovia-stat 1\n
 *     one line per connection, fields separated by one tab, in this order:
 *       fd         the (lowest) descriptor naming the socket
 *       local      address:port, IPv6 as [address]:port, "*" if unknown
 *       peer       likewise
 *       state      established | closing (our FIN is sent) | peer closed
 *                  (the peer's FIN arrived) | reset | pairing (a `sovia run`
 *                  connection not yet paired with its kernel connection)
 *       tx_bytes, rx_bytes, tx_packets, rx_packets   DATA, from sov_stats
 *       window     w, DATA packets in flight at most
 *       credits    DATA packets the peer can take now
 *       wait       adaptive | poll | block
 *       handling   single | handler | notify
 *       mode       sovia (sov_* socket) | run (a program's kernel socket,
 *                  carried by `sovia run`)
 *       provider   the NIC's provider that carries it: shm | fabric:<name>
 *                  (a process with a cluster key holds both, far.c)
 *     Readers ignore fields after these (later versions may add some).
 *
 * The thread blocks every signal, is detached and holds no lock while it
 * sleeps, so it neither keeps the process alive nor delays its exit. Each
 * socket's lock is held only to copy its fields, never while writing; a
 * client that does not read is dropped after a 1 s send timeout. A forked
 * child closes its copy of the listening socket (the name is the parent's)
 * and starts its own server with its own first connection (so connections
 * it only inherited are not listed for it before that). A program that
 * closes the listening descriptor itself stops the server (checked before
 * each accept); its next connection starts a new one.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "sock.h"

#define RETRY_NS 1000000000ull /* after a failed start, try again at most once a second */

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t srv_lock = PTHREAD_MUTEX_INITIALIZER;  /* starting the server */
static pthread_mutex_t walk_lock = PTHREAD_MUTEX_INITIALIZER; /* held while reading sockets */
static atomic_bool srv_running;
static int srv_fd = -1;
static uint64_t srv_last_try_ns;

/* ---- The answer ------------------------------------------------------------ */

struct outbuf {
    char *p;
    size_t len, cap;
    bool failed;
};

__attribute__((format(printf, 2, 3))) static void out_printf(struct outbuf *b, const char *fmt,
                                                             ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap - b->len <= (size_t)n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

static void format_addr(const struct sockaddr_storage *a, socklen_t len, char *out, size_t n)
{
    char host[INET6_ADDRSTRLEN];
    if (a->ss_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)a;
        if (inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host))) {
            snprintf(out, n, "%s:%u", host, ntohs(in->sin_port));
            return;
        }
    } else if (a->ss_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)a;
        if (inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host))) {
            snprintf(out, n, "[%s]:%u", host, ntohs(in6->sin6_port));
            return;
        }
    }
    snprintf(out, n, "*");
}

static const char *state_name(const struct sov_sock *s)
{
    const struct sov_conn *c = s->conn;
    if (c->reset)
        return "reset";
    if (s->tp_waiting)
        return "pairing";
    if (c->wr_shut)
        return "closing";
    if (c->peer_fin)
        return "peer closed";
    return "established";
}

static const char *wait_name(enum sov_wait_mode m)
{
    return m == SOV_WAIT_POLL ? "poll" : m == SOV_WAIT_BLOCK ? "block" : "adaptive";
}

static const char *handling_name(enum sov_handling h)
{
    return h == SOV_HANDLER ? "handler" : h == SOV_NOTIFY ? "notify" : "single";
}

/* One line for the socket named `fd`, if it is a live connection. */
static void describe(struct outbuf *b, struct sov_sock *s, int fd)
{
    struct sockaddr_storage local, peer;
    socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
    sov_sock_lock(s);
    if (s->dead || sov_lookup(fd) != s || s->kind != SK_CONNECTED || !s->conn) {
        sov_sock_unlock(s);
        return;
    }
    if (!s->tp_waiting) /* pairing is for the program and the service thread */
        sov_progress(s); /* count what has arrived, as sov_get_stats does */
    struct sov_conn *c = s->conn;
    bool transparent = s->transparent;
    if (transparent) { /* the kernel socket has the program's addresses */
        if (getsockname(s->fd, (struct sockaddr *)&local, &local_len) != 0)
            local_len = 0;
        if (getpeername(s->fd, (struct sockaddr *)&peer, &peer_len) != 0)
            peer_len = 0;
    } else {
        local = s->local;
        local_len = s->local_len;
        peer = s->peer;
        peer_len = s->peer_len;
    }
    const char *state = state_name(s);
    struct sov_stats st = c->stats;
    unsigned window = c->cfg.window, credits = c->credits;
    enum sov_wait_mode wait = c->cfg.wait_mode;
    enum sov_handling handling = c->cfg.handling;
    const char *provider = sov_conn_provider(c);
    sov_sock_unlock(s);

    char ls[INET6_ADDRSTRLEN + 16], ps[INET6_ADDRSTRLEN + 16];
    format_addr(&local, local_len, ls, sizeof(ls));
    format_addr(&peer, peer_len, ps, sizeof(ps));
    out_printf(b, "%d\t%s\t%s\t%s\t%llu\t%llu\t%llu\t%llu\t%u\t%u\t%s\t%s\t%s\t%s\n", fd, ls, ps, state,
               (unsigned long long)st.bytes_sent, (unsigned long long)st.bytes_received,
               (unsigned long long)st.data_packets_sent,
               (unsigned long long)st.data_packets_received, window, credits, wait_name(wait),
               handling_name(handling), transparent ? "run" : "sovia", provider);
}

struct named {
    struct sov_sock *s;
    int fd;
};

static int by_sock_then_fd(const void *a, const void *b)
{
    const struct named *x = a, *y = b;
    if (x->s != y->s)
        return (uintptr_t)x->s < (uintptr_t)y->s ? -1 : 1;
    return (x->fd > y->fd) - (x->fd < y->fd);
}

static int by_fd(const void *a, const void *b)
{
    const struct named *x = a, *y = b;
    return (x->fd > y->fd) - (x->fd < y->fd);
}

/* Every live connection once (a dup'ed descriptor names its socket twice),
 * under its lowest descriptor, in descriptor order. */
static void describe_all(struct outbuf *b)
{
    out_printf(b, "sovia-stat 1\n");
    struct named *v = NULL;
    size_t n = 0, cap = 0;
    for (int fd = 0, limit = sov_table_limit(); fd < limit; fd++) {
        struct sov_sock *s = sov_lookup(fd);
        if (!s)
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            struct named *nv = realloc(v, ncap * sizeof(*v));
            if (!nv) {
                b->failed = true;
                free(v);
                return;
            }
            v = nv;
            cap = ncap;
        }
        v[n++] = (struct named){s, fd};
    }
    if (!v)
        return; /* none left (qsort may not be given NULL, even for none) */
    qsort(v, n, sizeof(*v), by_sock_then_fd);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (i == 0 || v[i].s != v[i - 1].s)
            v[m++] = v[i];
    qsort(v, m, sizeof(*v), by_fd);
    for (size_t i = 0; i < m; i++)
        describe(b, v[i].s, v[i].fd);
    free(v);
}

static void answer(int c)
{
    struct ucred cr;
    socklen_t len = sizeof(cr);
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || len != sizeof(cr) ||
        cr.uid != geteuid())
        return; /* another user: not a byte */
    struct timeval tv = {1, 0};
    setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct outbuf b = {0};
    pthread_mutex_lock(&walk_lock);
    describe_all(&b);
    pthread_mutex_unlock(&walk_lock);
    for (size_t off = 0; !b.failed && off < b.len;) {
        ssize_t w = send(c, b.p + off, b.len - off, MSG_NOSIGNAL);
        if (w > 0)
            off += (size_t)w;
        else if (w < 0 && errno == EINTR)
            continue;
        else
            break;
    }
    free(b.p);
}

/* Whether descriptor `fd` is still the socket we listen on: a program that
 * closes descriptors it does not know may have closed it, and the number
 * may now be the program's own (accepting on it would steal connections). */
static bool still_ours(int fd, const struct stat *was)
{
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_dev == was->st_dev && st.st_ino == was->st_ino;
}

static void *serve(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    struct stat self;
    if (fstat(lfd, &self) != 0)
        return NULL;
    while (still_ours(lfd, &self)) {
        /* Wait in poll, not in accept: a blocked accept holds the lowest
         * free descriptor number (the kernel takes it before it waits),
         * which the program's next open() would otherwise have had. */
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        if (poll(&p, 1, -1) < 0 && errno != EINTR)
            break;
        VipxFdCreateBegin();
        int c = VipxFdAdopt(accept4(lfd, NULL, NULL, SOCK_CLOEXEC));
        VipxFdCreateEnd();
        if (c < 0) {
            if (errno == EBADF || errno == EINVAL || errno == ENOTSOCK)
                break; /* the descriptor is gone: nothing more to serve */
            if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN) {
                struct timespec ts = {0, 100000000}; /* EMFILE and the like */
                nanosleep(&ts, NULL);
            }
            continue;
        }
        answer(c);
        VipxFdClose(c);
    }
    /* Lost our descriptor: the next connection starts a new server. */
    pthread_mutex_lock(&srv_lock);
    if (srv_fd == lfd) {
        srv_fd = -1;
        srv_last_try_ns = 0;
        atomic_store(&srv_running, false);
    }
    pthread_mutex_unlock(&srv_lock);
    return NULL;
}

/* ---- Starting, and fork --------------------------------------------------- */

static void fork_prepare(void)
{
    pthread_mutex_lock(&srv_lock);
    pthread_mutex_lock(&walk_lock); /* the child must not inherit a held socket lock */
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&walk_lock);
    pthread_mutex_unlock(&srv_lock);
}

static void fork_child(void)
{
    pthread_mutex_unlock(&walk_lock);
    pthread_mutex_unlock(&srv_lock);
    /* The name carries the parent's pid: the child must not hold it. The
     * raw system call: no wrapper should see this descriptor. */
    if (srv_fd >= 0)
        syscall(SYS_close, srv_fd);
    srv_fd = -1;
    srv_last_try_ns = 0;
    atomic_store(&srv_running, false);
}

static void register_atfork(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Caller holds srv_lock. */
static void start_locked(void)
{
    uint64_t now = sov_now_ns();
    if (srv_last_try_ns && now - srv_last_try_ns < RETRY_NS)
        return;
    srv_last_try_ns = now;
    VipxFdCreateBegin();
    int fd = VipxFdAdopt(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    VipxFdCreateEnd();
    if (fd < 0)
        return;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "sovia-stat.%u.%d",
                     (unsigned)geteuid(), (int)getpid());
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    if (bind(fd, (struct sockaddr *)&a, len) != 0 || listen(fd, 16) != 0) {
        VipxFdClose(fd);
        return;
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 128 * 1024);
    pthread_t t;
    int err = VipxThreadCreate(&t, &attr, serve, (void *)(intptr_t)fd);
    pthread_attr_destroy(&attr);
    if (err) {
        VipxFdClose(fd);
        return;
    }
    srv_fd = fd;
    atomic_store_explicit(&srv_running, true, memory_order_release);
}

void sov_stat_serve_start(void)
{
    if (atomic_load_explicit(&srv_running, memory_order_acquire))
        return;
    pthread_once(&atfork_once, register_atfork);
    /* Never wait here: the caller holds a socket's lock, which the server
     * thread may be waiting for while a fork waits for it (fork_prepare).
     * Whoever holds srv_lock is starting the server already. */
    if (pthread_mutex_trylock(&srv_lock) != 0)
        return;
    if (!atomic_load(&srv_running))
        start_locked();
    pthread_mutex_unlock(&srv_lock);
}

int sov_stat_fd(void)
{
    return srv_fd;
}
