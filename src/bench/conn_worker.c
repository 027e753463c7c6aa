/*
 * conn_worker.c - the worker roles of `sovia bench conns` and `connrate`
 * (the protocol is in conn.h): plain libc calls, so that under the preload
 * library they are what an unmodified program gets from `sovia run`.
 */
#include "conn.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* ---- /proc/self ------------------------------------------------------- */

static uint64_t count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    uint64_t n = 0;

    if (!d)
        return 0;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n > 0 ? n - 1 : 0; /* not the one reading the directory */
}

int conn_usage_read(struct conn_usage *u)
{
    char line[512];
    FILE *f = fopen("/proc/self/maps", "re");

    memset(u, 0, sizeof *u);
    u->fds = count_fds();
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        u->maps++;
        /* Shared file mappings: sovia's segments are memfds ("/memfd:"). */
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && perms[3] == 's')
            u->shm_mapped += hi - lo;
    }
    fclose(f);
    f = fopen("/proc/self/status", "re");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long kb;
        if (sscanf(line, "RssShmem: %lu kB", &kb) == 1)
            u->shm_resident = (uint64_t)kb << 10;
        else if (sscanf(line, "VmRSS: %lu kB", &kb) == 1)
            u->rss = (uint64_t)kb << 10;
    }
    fclose(f);
    return 0;
}

/* ---- Common ------------------------------------------------------------- */

static int parse_count(int argc, char **argv, int *i, long *count)
{
    char *end;

    if (*i + 1 < argc && strcmp(argv[*i], "--count") == 0) {
        errno = 0;
        *count = strtol(argv[*i + 1], &end, 10);
        if (errno || *end || *count < 1 || (unsigned long)*count > CONN_MAX_COUNT)
            return -1;
        *i += 2;
    }
    return 0;
}

/* "ready pPORT\n" for a listener at 127.0.0.1, any port. */
int conn_listen_ready(int backlog, struct rr_addr *a)
{
    char line[64];
    int lfd, len;

    *a = rr_addr_loopback(AF_INET);
    lfd = rr_listen(&rr_libc_ops, a, backlog);
    if (lfd < 0 || rr_addr_format(a, line + 6, sizeof line - 7) != 0) {
        fprintf(stderr, "sovia-rr: listen: %s\n", strerror(errno));
        return -1;
    }
    memcpy(line, "ready ", 6);
    len = (int)strlen(line);
    line[len++] = '\n';
    if (rr_write_all(1, line, (size_t)len) != 0)
        return -1;
    return lfd;
}

/* Waits for fd to be readable (or writable); 0, or -1 with errno. */
static int wait_fd(int fd, short events)
{
    struct pollfd p = {.fd = fd, .events = events};
    int r;

    do
        r = poll(&p, 1, 30000);
    while (r < 0 && errno == EINTR);
    if (r == 0)
        errno = ETIMEDOUT;
    return r > 0 ? 0 : -1;
}

void conn_pattern(unsigned char *b, size_t len, uint64_t i)
{
    for (size_t k = 0; k < len; k++)
        b[k] = (unsigned char)(i * 131u + (uint64_t)k * 7u + 1u);
}

static void pattern(unsigned char *b, uint64_t i)
{
    conn_pattern(b, CONN_PING, i);
}

int conn_send_all(int fd, const unsigned char *b, size_t len)
{
    size_t off = 0;

    while (off < len) {
        ssize_t n = send(fd, b + off, len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_fd(fd, POLLOUT) == 0)
            continue;
        return -1;
    }
    return 0;
}

int conn_recv_check(int fd, const unsigned char *want, size_t len)
{
    unsigned char b[CONN_MAX_MSG];
    size_t off = 0;

    if (len > sizeof b) {
        errno = EINVAL;
        return -1;
    }

    while (off < len) {
        ssize_t n = recv(fd, b + off, len - off, MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n == 0) {
            errno = ECONNRESET;
            return -1;
        }
        if (errno == EINTR || ((errno == EAGAIN || errno == EWOULDBLOCK) &&
                               wait_fd(fd, POLLIN) == 0))
            continue;
        return -1;
    }
    if (memcmp(b, want, len) != 0) {
        errno = EBADMSG;
        return -1;
    }
    return 0;
}

/* Waits for the peer's end of stream (and nothing before it). */
static int recv_end(int fd)
{
    for (;;) {
        char c;
        ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
        if (n == 0)
            return 0;
        if (n > 0) {
            errno = EPROTO;
            return -1;
        }
        if (errno == EINTR || ((errno == EAGAIN || errno == EWOULDBLOCK) &&
                               wait_fd(fd, POLLIN) == 0))
            continue;
        return -1;
    }
}

/* ---- conns ------------------------------------------------------------- */

static void *echo_main(void *arg)
{
    struct conn_echo *e = arg;
    e->rc = rr_server_loop(&e->t);
    return NULL;
}

int conn_echo_start(struct conn_echo *e, long count, size_t size, const char *who)
{
    struct rr_addr a;
    int lfd;

    /* the server's loop: epoll, or what SOVIA_BENCH_RR_LOOP names */
    *e = (struct conn_echo){.t = {.ops = rr_libc_ops_chosen(), .nconns = (int)count, .size = size}};
    e->t.fds = calloc((size_t)count, sizeof(int));
    if (!e->t.fds)
        return -1;
    lfd = conn_listen_ready(count < 4096 ? (int)count : 4096, &a);
    if (lfd < 0)
        return -1;
    for (long i = 0; i < count; i++) {
        e->t.fds[i] = rr_accept(&rr_libc_ops, lfd, AF_INET);
        if (e->t.fds[i] < 0) {
            fprintf(stderr, "sovia-rr %s server: accept %ld of %ld: %s\n", who, i + 1, count,
                    strerror(errno));
            return -1;
        }
    }
    close(lfd);
    return pthread_create(&e->tid, NULL, echo_main, e) == 0 ? 0 : -1;
}

static int conns_server(long count)
{
    struct conn_result *res = calloc(1, sizeof *res);
    struct conn_echo e;
    char line[32];

    if (!res)
        return 1;
    conn_usage_read(&res->before);
    if (conn_echo_start(&e, count, CONN_PING, "conns") != 0)
        return 1;
    if (rr_read_line(line, sizeof line) != 0 || strcmp(line, "sample") != 0)
        return 1;
    conn_usage_read(&res->after);
    *res = (struct conn_result){.magic = CONN_RESULT_MAGIC, .role = RR_ROLE_SERVER,
                                .count = (uint64_t)count, .before = res->before,
                                .after = res->after};
    int rc = rr_write_all(1, res, sizeof *res) == 0 ? 0 : 1;
    pthread_join(e.tid, NULL); /* the loop closed the connections */
    free(e.t.fds);
    free(res);
    return rc == 0 && e.rc == 0 ? 0 : 1;
}

static int conns_client(long count, const char *addr)
{
    struct conn_result *res = calloc(1, sizeof *res);
    int *fds = calloc((size_t)count, sizeof(int));
    unsigned char b[CONN_PING];
    struct rr_addr a;
    int64_t t0, t1;
    uint64_t close_ns;
    char line[32];

    if (!res || !fds || rr_addr_parse(addr, &a) != 0)
        return 1;
    res->magic = CONN_RESULT_MAGIC;
    res->role = RR_ROLE_CLIENT;
    res->count = (uint64_t)count;
    conn_usage_read(&res->before);
    t0 = rr_now_ns();
    for (long i = 0; i < count; i++) {
        int64_t c0 = rr_now_ns();
        fds[i] = rr_connect(&rr_libc_ops, &a);
        if (fds[i] < 0) {
            fprintf(stderr, "sovia-rr conns client: connect %ld of %ld: %s\n", i + 1, count,
                    strerror(errno));
            return 1;
        }
        rr_hist_add(&res->connect, (uint64_t)(rr_now_ns() - c0));
    }
    t1 = rr_now_ns();
    res->setup_ns = (uint64_t)(t1 - t0);
    /* Every request out first, then every answer: the server's one loop
     * serves them as they come. */
    for (long i = 0; i < count; i++) {
        pattern(b, (uint64_t)i);
        if (conn_send_all(fds[i], b, sizeof b) != 0)
            goto io_error;
    }
    for (long i = 0; i < count; i++) {
        pattern(b, (uint64_t)i);
        if (conn_recv_check(fds[i], b, sizeof b) != 0) {
            fprintf(stderr, "sovia-rr conns client: exchange on connection %ld: %s\n", i + 1,
                    strerror(errno));
            return 1;
        }
    }
    res->ping_ns = (uint64_t)(rr_now_ns() - t1);
    conn_usage_read(&res->after);
    if (rr_write_all(1, res, sizeof *res) != 0)
        return 1;
    if (rr_read_line(line, sizeof line) != 0 || strcmp(line, "close") != 0)
        return 1;
    t0 = rr_now_ns();
    for (long i = 0; i < count; i++)
        close(fds[i]);
    close_ns = (uint64_t)(rr_now_ns() - t0);
    free(fds);
    free(res);
    return rr_write_all(1, &close_ns, sizeof close_ns) == 0 ? 0 : 1;
io_error:
    fprintf(stderr, "sovia-rr conns client: send: %s\n", strerror(errno));
    return 1;
}

/* ---- connrate ----------------------------------------------------------- */

struct rate_srv {
    int lfd, ep;
    atomic_bool stop;
    uint64_t echoes;
    int rc;
};

/* Per descriptor: bytes of the request read so far. */
struct rate_conn {
    unsigned char buf[CONN_PING];
    unsigned char off;
};

static int rate_accept(struct rate_srv *s, struct rate_conn **conns, int *cap)
{
    for (;;) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        struct epoll_event ev = {.events = EPOLLIN};
        if (fd < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED ||
                           errno == EINTR
                       ? 0
                       : -1;
        if (fd >= *cap) {
            int ncap = fd * 2 + 16;
            struct rate_conn *n = realloc(*conns, (size_t)ncap * sizeof *n);
            if (!n)
                return -1;
            memset(n + *cap, 0, (size_t)(ncap - *cap) * sizeof *n);
            *conns = n;
            *cap = ncap;
        }
        (*conns)[fd].off = 0;
        ev.data.fd = fd;
        if (epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ev) != 0)
            return -1;
    }
}

/* Reads what came; echoes the request and closes, as an HTTP/1.0 server
 * does (the server's end keeps the TIME_WAIT: at ten thousand connections
 * a second, clients that closed first would run out of ephemeral ports). */
static void rate_serve(struct rate_srv *s, struct rate_conn *c, int fd)
{
    for (;;) {
        ssize_t n = recv(fd, c->buf + c->off, CONN_PING - c->off, MSG_DONTWAIT);
        if (n > 0) {
            c->off = (unsigned char)(c->off + n);
            if (c->off < CONN_PING)
                continue;
            c->off = 0;
            if (conn_send_all(fd, c->buf, CONN_PING) == 0)
                s->echoes++;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        }
        epoll_ctl(s->ep, EPOLL_CTL_DEL, fd, NULL);
        close(fd);
        return;
    }
}

static void *rate_server_main(void *arg)
{
    struct rate_srv *s = arg;
    struct rate_conn *conns = NULL;
    struct epoll_event ev[64];
    int cap = 0;

    while (!atomic_load(&s->stop)) {
        int n = epoll_wait(s->ep, ev, 64, 50);
        if (n < 0 && errno != EINTR) {
            s->rc = -1;
            break;
        }
        for (int k = 0; k < n; k++) {
            if (ev[k].data.fd == s->lfd) {
                if (rate_accept(s, &conns, &cap) != 0) {
                    perror("sovia-rr rate server: accept");
                    s->rc = -1;
                }
                continue;
            }
            if (ev[k].data.fd < cap)
                rate_serve(s, &conns[ev[k].data.fd], ev[k].data.fd);
        }
    }
    free(conns);
    return NULL;
}

static int rate_server(void)
{
    struct rr_result *res = calloc(1, sizeof *res);
    struct rate_srv s = {.rc = 0};
    struct epoll_event ev = {.events = EPOLLIN};
    struct rr_marks m;
    struct rr_addr a;
    pthread_t tid;

    if (!res)
        return 1;
    s.lfd = conn_listen_ready(1024, &a);
    s.ep = epoll_create1(EPOLL_CLOEXEC);
    if (s.lfd < 0 || s.ep < 0 || fcntl(s.lfd, F_SETFL, O_NONBLOCK) != 0)
        return 1;
    ev.data.fd = s.lfd;
    if (epoll_ctl(s.ep, EPOLL_CTL_ADD, s.lfd, &ev) != 0 ||
        pthread_create(&tid, NULL, rate_server_main, &s) != 0)
        return 1;
    if (rr_read_go(&m, CONN_RATE_DRAIN_S) != 0) {
        fprintf(stderr, "sovia-rr rate server: no start from the bench\n");
        return 1;
    }
    rr_sample_marks(&m, res);
    rr_sleep_until(m.drain_ns);
    atomic_store(&s.stop, true);
    pthread_join(tid, NULL);
    res->magic = RR_RESULT_MAGIC;
    res->role = RR_ROLE_SERVER;
    res->threads = 1;
    res->tx_total = s.echoes;
    int rc = s.rc == 0 && rr_write_all(1, res, sizeof *res) == 0 ? 0 : 1;
    free(res);
    close(s.ep);
    close(s.lfd);
    return rc;
}

struct rate_cli {
    struct rr_addr a;
    struct rr_marks m;
    struct rr_result *res;
    int rc;
};

/* Connect, one exchange, close, until END; the cycles begun between WARM
 * and END are counted, with their times. */
static void *rate_client_main(void *arg)
{
    struct rate_cli *c = arg;
    unsigned char b[CONN_PING];
    uint64_t i = 0;

    rr_sleep_until(c->m.start_ns);
    for (int64_t t0 = rr_now_ns(); t0 < c->m.end_ns; t0 = rr_now_ns(), i++) {
        int fd = rr_connect(&rr_libc_ops, &c->a);
        pattern(b, i);
        if (fd < 0 || conn_send_all(fd, b, sizeof b) != 0 || conn_recv_check(fd, b, sizeof b) != 0 ||
            recv_end(fd) != 0) {
            fprintf(stderr, "sovia-rr rate client: connection %llu: %s\n",
                    (unsigned long long)i + 1, strerror(errno));
            c->rc = -1;
            return NULL;
        }
        close(fd);
        c->res->tx_total++;
        if (t0 >= c->m.warm_ns) {
            c->res->tx_window++;
            rr_hist_add(&c->res->lat, (uint64_t)(rr_now_ns() - t0));
        }
    }
    return NULL;
}

static int rate_client(const char *addr)
{
    struct rate_cli c = {.res = calloc(1, sizeof *c.res)};
    pthread_t tid;

    if (!c.res || rr_addr_parse(addr, &c.a) != 0 || rr_write_all(1, "ready\n", 6) != 0)
        return 1;
    if (rr_read_go(&c.m, 0) != 0) {
        fprintf(stderr, "sovia-rr rate client: no start from the bench\n");
        return 1;
    }
    if (pthread_create(&tid, NULL, rate_client_main, &c) != 0)
        return 1;
    rr_sample_marks(&c.m, c.res);
    pthread_join(tid, NULL);
    c.res->magic = RR_RESULT_MAGIC;
    c.res->role = RR_ROLE_CLIENT;
    c.res->threads = 1;
    int rc = c.rc == 0 && rr_write_all(1, c.res, sizeof *c.res) == 0 ? 0 : 1;
    free(c.res);
    return rc;
}

int conn_worker_main(int argc, char **argv, const struct rr_ops *ops)
{
    const char *role = argv[1];
    long count = 1;
    int i = 2;

    if (ops->socket != rr_libc_ops.socket) {
        fprintf(stderr, "sovia-rr: %s runs over libc only\n", role);
        return 2;
    }
    if (strncmp(role, "ep-", 3) == 0)
        return ep_worker_main(argc, argv);
    if (parse_count(argc, argv, &i, &count) != 0) {
        fprintf(stderr, "sovia-rr: %s: bad --count\n", role);
        return 2;
    }
    rr_raise_nofile();
    if (strcmp(role, "conns-server") == 0 && i == argc)
        return conns_server(count);
    if (strcmp(role, "conns-client") == 0 && i + 1 == argc)
        return conns_client(count, argv[i]);
    if (strcmp(role, "rate-server") == 0 && i == argc)
        return rate_server();
    if (strcmp(role, "rate-client") == 0 && i + 1 == argc)
        return rate_client(argv[i]);
    fprintf(stderr, "sovia-rr: bad arguments for %s (this program is run by 'sovia bench')\n",
            role);
    return 2;
}
