/*
 * ep_worker.c - the workers of `sovia bench epoll`: many connections into
 * one epoll server, few of them busy (the C10K shape: what a ready event
 * costs when most registered sockets are idle). Plain libc calls, so that
 * under the preload library they are what `sovia run` gives a program.
 *
 *   server "ep-server --count N": "ready pPORT\n"; accepts N; one thread
 *     serves them all in one level-triggered epoll set (rr_server_loop:
 *     each request of EP_SIZE bytes echoed); "go START WARM END" on fd 0;
 *     once the client has closed them all, writes an rr_result (tx_total:
 *     echoes; its CPU time at WARM and END).
 *   client "ep-client --count N --active A pPORT": connects N, one checked
 *     exchange on every one (so the server holds them all), "ready\n"; on
 *     "go ..." keeps one request outstanding on each of A connections from
 *     START to END, in one poll() loop. After each answer its slot moves on
 *     to the next connection of its residue class (slot j: j, j+A, j+2A,
 *     ...), so that over a run every connection is used and which ones are
 *     busy keeps changing, as on a real server. Writes an rr_result
 *     (tx_window, lat: requests sent between WARM and END; unanswered:
 *     those still out EP_DRAIN_S after END).
 */
#include "conn.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define EP_DRAIN_S 5.0

static int parse(int argc, char **argv, long *count, long *active, const char **addr)
{
    *count = 0;
    *active = 0;
    *addr = NULL;
    for (int i = 2; i < argc; i++) {
        long *v = strcmp(argv[i], "--count") == 0    ? count
                  : strcmp(argv[i], "--active") == 0 ? active
                                                     : NULL;
        char *end;
        if (!v) {
            if (*addr)
                return -1;
            *addr = argv[i];
            continue;
        }
        if (++i == argc)
            return -1;
        errno = 0;
        *v = strtol(argv[i], &end, 10);
        if (errno || *end || *v < 1 || (unsigned long)*v > CONN_MAX_COUNT)
            return -1;
    }
    return *count > 0 ? 0 : -1;
}

/* ---- Server --------------------------------------------------------------- */

static int ep_server(long count)
{
    struct rr_result *res = calloc(1, sizeof *res);
    struct conn_echo e;
    struct rr_marks m;
    int rc;

    if (!res || conn_echo_start(&e, count, EP_SIZE, "ep") != 0)
        return 1;
    if (rr_read_go(&m, 0) != 0) {
        fprintf(stderr, "sovia-rr ep server: no start from the bench\n");
        return 1;
    }
    rr_sample_marks(&m, res);
    pthread_join(e.tid, NULL); /* the client closed them all */
    res->magic = RR_RESULT_MAGIC;
    res->role = RR_ROLE_SERVER;
    res->threads = 1;
    res->tx_total = e.t.tx_total;
    rc = e.rc == 0 && rr_write_all(1, res, sizeof *res) == 0 ? 0 : 1;
    free(e.t.fds);
    free(res);
    return rc;
}

/* ---- Client --------------------------------------------------------------- */

struct slot {
    long conn;        /* index into fds */
    uint64_t seq;     /* requests sent by this slot */
    size_t off;       /* bytes of the answer read */
    int64_t t0;       /* when the request went out; 0: none outstanding */
    unsigned char want[EP_SIZE], got[EP_SIZE];
};

struct ep_cli {
    int *fds;
    long count, active;
    struct rr_marks m;
    struct rr_result *res;
    int rc;
};

static int slot_send(struct ep_cli *c, struct slot *s, struct pollfd *p)
{
    conn_pattern(s->want, EP_SIZE, (uint64_t)s->conn * 7919u + s->seq++);
    s->off = 0;
    s->t0 = rr_now_ns();
    p->fd = c->fds[s->conn];
    return conn_send_all(p->fd, s->want, EP_SIZE);
}

/* Reads what came on slot j: 1 a whole answer (checked), 0 not yet, -1. */
static int slot_read(struct ep_cli *c, struct slot *s)
{
    for (;;) {
        ssize_t n = recv(c->fds[s->conn], s->got + s->off, EP_SIZE - s->off, MSG_DONTWAIT);
        if (n > 0) {
            s->off += (size_t)n;
            if (s->off < EP_SIZE)
                continue;
            if (memcmp(s->got, s->want, EP_SIZE) != 0) {
                errno = EBADMSG;
                return -1;
            }
            return 1;
        }
        if (n == 0) {
            errno = ECONNRESET;
            return -1;
        }
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    }
}

static int client_loop(struct ep_cli *c, struct slot *sl, struct pollfd *pf)
{
    int64_t drain = c->m.end_ns + (int64_t)(EP_DRAIN_S * 1e9);
    long out = 0;

    rr_sleep_until(c->m.start_ns);
    for (long j = 0; j < c->active; j++) {
        sl[j].conn = j;
        pf[j].events = POLLIN;
        if (slot_send(c, &sl[j], &pf[j]) != 0)
            return -1;
        out++;
    }
    while (out > 0) {
        int64_t now = rr_now_ns();
        int n;
        if (now >= drain)
            break;
        n = poll(pf, (nfds_t)c->active, 100);
        if (n < 0 && errno != EINTR)
            return -1;
        for (long j = 0; j < c->active && n > 0; j++) {
            struct slot *s = &sl[j];
            int r;
            if (!pf[j].revents)
                continue;
            n--;
            r = s->t0 ? slot_read(c, s) : 0;
            if (r < 0) {
                fprintf(stderr, "sovia-rr ep client: connection %ld: %s\n", s->conn + 1,
                        strerror(errno));
                return -1;
            }
            if (r == 0)
                continue;
            now = rr_now_ns();
            c->res->tx_total++;
            if (s->t0 >= c->m.warm_ns && s->t0 < c->m.end_ns) {
                c->res->tx_window++;
                rr_hist_add(&c->res->lat, (uint64_t)(now - s->t0));
            }
            s->t0 = 0;
            out--;
            if (now >= c->m.end_ns) {
                pf[j].fd = -1; /* done: poll ignores it */
                continue;
            }
            s->conn = s->conn + c->active < c->count ? s->conn + c->active : j;
            if (slot_send(c, s, &pf[j]) != 0)
                return -1;
            out++;
        }
    }
    for (long j = 0; j < c->active; j++)
        if (sl[j].t0 >= c->m.warm_ns && sl[j].t0 < c->m.end_ns)
            c->res->unanswered++;
    return 0;
}

static void *cli_main(void *arg)
{
    struct ep_cli *c = arg;
    struct slot *sl = calloc((size_t)c->active, sizeof *sl);
    struct pollfd *pf = calloc((size_t)c->active, sizeof *pf);

    c->rc = sl && pf ? client_loop(c, sl, pf) : -1;
    free(sl);
    free(pf);
    return NULL;
}

static int ep_client(long count, long active, const char *addr)
{
    struct ep_cli c = {.count = count, .active = active, .res = calloc(1, sizeof *c.res)};
    unsigned char b[EP_SIZE];
    struct rr_addr a;
    pthread_t tid;
    int rc;

    c.fds = calloc((size_t)count, sizeof(int));
    if (!c.res || !c.fds || rr_addr_parse(addr, &a) != 0)
        return 1;
    for (long i = 0; i < count; i++) {
        c.fds[i] = rr_connect(&rr_libc_ops, &a);
        if (c.fds[i] < 0) {
            fprintf(stderr, "sovia-rr ep client: connect %ld of %ld: %s\n", i + 1, count,
                    strerror(errno));
            return 1;
        }
    }
    /* All requests out, then all answers: the server's one loop serves them. */
    for (long i = 0; i < count; i++) {
        conn_pattern(b, sizeof b, (uint64_t)i);
        if (conn_send_all(c.fds[i], b, sizeof b) != 0)
            goto io_error;
    }
    for (long i = 0; i < count; i++) {
        conn_pattern(b, sizeof b, (uint64_t)i);
        if (conn_recv_check(c.fds[i], b, sizeof b) != 0)
            goto io_error;
    }
    if (rr_write_all(1, "ready\n", 6) != 0)
        return 1;
    if (rr_read_go(&c.m, 0) != 0) {
        fprintf(stderr, "sovia-rr ep client: no start from the bench\n");
        return 1;
    }
    if (pthread_create(&tid, NULL, cli_main, &c) != 0)
        return 1;
    rr_sample_marks(&c.m, c.res);
    pthread_join(tid, NULL);
    for (long i = 0; i < count; i++)
        close(c.fds[i]);
    c.res->magic = RR_RESULT_MAGIC;
    c.res->role = RR_ROLE_CLIENT;
    c.res->threads = 1;
    rc = c.rc == 0 && rr_write_all(1, c.res, sizeof *c.res) == 0 ? 0 : 1;
    free(c.fds);
    free(c.res);
    return rc;
io_error:
    fprintf(stderr, "sovia-rr ep client: first exchange: %s\n", strerror(errno));
    return 1;
}

int ep_worker_main(int argc, char **argv)
{
    const char *role = argv[1], *addr;
    long count, active;

    if (parse(argc, argv, &count, &active, &addr) != 0) {
        fprintf(stderr, "sovia-rr: bad arguments for %s (this program is run by 'sovia bench')\n",
                role);
        return 2;
    }
    rr_raise_nofile();
    if (strcmp(role, "ep-server") == 0 && !addr && active == 0)
        return ep_server(count);
    if (strcmp(role, "ep-client") == 0 && addr && active > 0 && active <= count)
        return ep_client(count, active, addr);
    fprintf(stderr, "sovia-rr: bad arguments for %s (this program is run by 'sovia bench')\n",
            role);
    return 2;
}
