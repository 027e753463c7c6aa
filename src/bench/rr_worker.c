/*
 * rr_worker.c - a `sovia bench rr` worker process (client or server): sets
 * up its connections in the main thread, runs one loop thread per --threads,
 * and meanwhile the main thread sleeps until WARM and END to take this
 * process's CPU time (getrusage: every thread, the sockets layer's own
 * included) at those two instants. The protocol with the bench is in rr.h.
 */
#include "rr.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

struct wopts {
    int role, threads, conns, id;
    size_t size;
    int family;
    const char *transport;
    double drain_s;
    char **addrs; /* clients: one per thread */
    int naddrs;
};

static int usage(const char *why)
{
    fprintf(stderr, "sovia-rr: %s (this program is run by 'sovia bench rr')\n", why);
    return 2;
}

static bool parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v;

    errno = 0;
    v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

static int parse(int argc, char **argv, struct wopts *o)
{
    int i = 2, size;

    memset(o, 0, sizeof *o);
    o->threads = o->conns = 1;
    o->size = RR_DEFAULT_SIZE;
    o->family = AF_INET;
    o->transport = "tcp";
    o->drain_s = RR_DEFAULT_DRAIN_S;
    if (argc < 2)
        return usage("client or server?");
    if (strcmp(argv[1], "client") == 0)
        o->role = RR_ROLE_CLIENT;
    else if (strcmp(argv[1], "server") == 0)
        o->role = RR_ROLE_SERVER;
    else
        return usage("client or server?");
    for (; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] != '-')
            break;
        i++;
        if (strcmp(a, "--threads") == 0 && parse_int(v, 1, RR_MAX_PAIRS, &o->threads))
            continue;
        if (strcmp(a, "--conns") == 0 && parse_int(v, 1, RR_MAX_CONNS, &o->conns))
            continue;
        if (strcmp(a, "--id") == 0 && parse_int(v, 0, RR_MAX_PAIRS, &o->id))
            continue;
        if (strcmp(a, "--size") == 0 && parse_int(v, 1, (int)RR_MAX_SIZE, &size)) {
            o->size = (size_t)size;
            continue;
        }
        if (strcmp(a, "--transport") == 0 && v) {
            o->transport = v;
            o->family = strcmp(v, "uds") == 0 ? AF_UNIX : AF_INET;
            continue;
        }
        if (strcmp(a, "--drain") == 0 && v) {
            char *end;
            o->drain_s = strtod(v, &end);
            if (*end == '\0' && o->drain_s >= 0 && o->drain_s <= 3600)
                continue;
        }
        fprintf(stderr, "sovia-rr: bad option %s %s\n", a, v ? v : "");
        return 2;
    }
    o->addrs = argv + i;
    o->naddrs = argc - i;
    if (o->role == RR_ROLE_CLIENT && o->naddrs != o->threads)
        return usage("a client needs one server address per thread");
    if (o->role == RR_ROLE_SERVER && o->naddrs != 0)
        return usage("a server takes no addresses");
    return 0;
}

/* Room for every connection (the sockets layer may need several
 * descriptors per connection): the soft limit up to the hard one. */
void rr_raise_nofile(void)
{
    struct rlimit r;

    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        setrlimit(RLIMIT_NOFILE, &r);
    }
}

int rr_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int rr_read_line(char *line, size_t size)
{
    size_t len = 0;

    while (len + 1 < size) {
        ssize_t n = read(0, line + len, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        if (line[len] == '\n')
            break;
        len++;
    }
    line[len] = '\0';
    return 0;
}

/* "go START WARM END" from fd 0. */
int rr_read_go(struct rr_marks *m, double drain_s)
{
    char line[128];
    long long s, w, e;

    if (rr_read_line(line, sizeof line) != 0)
        return -1;
    if (sscanf(line, "go %lld %lld %lld", &s, &w, &e) != 3 || !(s <= w && w <= e))
        return -1;
    m->start_ns = s;
    m->warm_ns = w;
    m->end_ns = e;
    m->drain_ns = e + (int64_t)(drain_s * 1e9);
    return 0;
}

static uint64_t tv_ns(struct timeval tv)
{
    return (uint64_t)tv.tv_sec * 1000000000u + (uint64_t)tv.tv_usec * 1000u;
}

/* This process's CPU time at WARM and at END, and how late each was read. */
void rr_sample_marks(const struct rr_marks *m, struct rr_result *r)
{
    int64_t at[2] = {m->warm_ns, m->end_ns};

    for (int k = 0; k < 2; k++) {
        struct rusage ru;
        int64_t late;
        rr_sleep_until(at[k]);
        getrusage(RUSAGE_SELF, &ru);
        late = rr_now_ns() - at[k];
        r->cpu_user_ns[k] = tv_ns(ru.ru_utime);
        r->cpu_sys_ns[k] = tv_ns(ru.ru_stime);
        if (late > 0 && (uint64_t)late > r->mark_late_ns)
            r->mark_late_ns = (uint64_t)late;
    }
}

struct wthread {
    struct rr_thread t;
    int role, rc;
    pthread_t tid;
};

static void *thread_main(void *arg)
{
    struct wthread *w = arg;

    w->rc = w->role == RR_ROLE_CLIENT ? rr_client_loop(&w->t) : rr_server_loop(&w->t);
    return NULL;
}

/* Listeners (servers) or connections (clients) for every thread. */
static int setup(const struct wopts *o, const struct rr_ops *ops, struct wthread *w)
{
    char line[64 + RR_MAX_PAIRS * 120];
    size_t len = (size_t)snprintf(line, sizeof line, "ready");
    int *lfd = calloc((size_t)o->threads, sizeof *lfd);

    if (!lfd)
        return -1;
    for (int t = 0; t < o->threads; t++) {
        struct rr_addr a = rr_addr_loopback(o->family);
        if (o->role == RR_ROLE_CLIENT) {
            if (rr_addr_parse(o->addrs[t], &a) != 0 || a.family != o->family) {
                fprintf(stderr, "sovia-rr: bad server address '%s'\n", o->addrs[t]);
                goto fail;
            }
            for (int k = 0; k < o->conns; k++) {
                w[t].t.fds[k] = rr_connect(ops, &a);
                if (w[t].t.fds[k] < 0) {
                    fprintf(stderr, "sovia-rr client %d: connect to %s: %s\n", o->id,
                            o->addrs[t], strerror(errno));
                    goto fail;
                }
            }
            continue;
        }
        lfd[t] = rr_listen(ops, &a, o->conns);
        if (lfd[t] < 0 || rr_addr_format(&a, line + len + 1, sizeof line - len - 1) != 0) {
            fprintf(stderr, "sovia-rr server %d: listen: %s\n", o->id, strerror(errno));
            goto fail;
        }
        line[len] = ' ';
        len += 1 + strlen(line + len + 1);
    }
    line[len++] = '\n';
    if (rr_write_all(1, line, len) != 0) {
        fprintf(stderr, "sovia-rr: cannot report to the bench: %s\n", strerror(errno));
        goto fail;
    }
    /* The clients connect in the same order: thread by thread. */
    for (int t = 0; o->role == RR_ROLE_SERVER && t < o->threads; t++) {
        for (int k = 0; k < o->conns; k++) {
            w[t].t.fds[k] = rr_accept(ops, lfd[t], o->family);
            if (w[t].t.fds[k] < 0) {
                fprintf(stderr, "sovia-rr server %d: accept: %s\n", o->id, strerror(errno));
                goto fail;
            }
        }
        ops->close(lfd[t]);
    }
    free(lfd);
    return 0;
fail:
    free(lfd); /* the process exits: no need to close what it holds */
    return -1;
}

int rr_worker_main(int argc, char **argv, const struct rr_ops *ops)
{
    struct wopts o;
    struct wthread *w;
    struct rr_result *res;
    struct rr_marks m = {0, 0, 0, 0};
    int rc, started = 0;

    if (argc >= 2 && (strncmp(argv[1], "conns-", 6) == 0 || strncmp(argv[1], "rate-", 5) == 0 ||
                      strncmp(argv[1], "ep-", 3) == 0))
        return conn_worker_main(argc, argv, ops);
    rc = parse(argc, argv, &o);
    if (rc != 0)
        return rc;
    rr_raise_nofile();
    if (ops->proc_init(o.transport) != 0) {
        fprintf(stderr, "sovia-rr: %s: %s\n", o.transport, strerror(errno));
        return 1;
    }
    w = calloc((size_t)o.threads, sizeof *w);
    res = calloc(1, sizeof *res);
    if (!w || !res)
        return 1;
    for (int t = 0; t < o.threads; t++) {
        w[t].role = o.role;
        w[t].t.ops = ops;
        w[t].t.index = t;
        w[t].t.nconns = o.conns;
        w[t].t.size = o.size;
        w[t].t.conn_base = ((uint64_t)o.id * (uint64_t)o.threads + (uint64_t)t) * (uint64_t)o.conns;
        w[t].t.fds = malloc((size_t)o.conns * sizeof(int));
        if (!w[t].t.fds)
            return 1;
    }
    if (setup(&o, ops, w) != 0)
        return 1;
    /* Servers serve from now on; clients start at START. */
    if (o.role == RR_ROLE_CLIENT && rr_read_go(&m, o.drain_s) != 0) {
        fprintf(stderr, "sovia-rr client %d: no start from the bench\n", o.id);
        return 1;
    }
    for (int t = 0; t < o.threads; t++) {
        w[t].t.m = m;
        if (pthread_create(&w[t].tid, NULL, thread_main, &w[t]) != 0) {
            fprintf(stderr, "sovia-rr: cannot start a thread\n");
            rc = 1;
            break;
        }
        started++;
    }
    if (rc == 0 && o.role == RR_ROLE_SERVER && rr_read_go(&m, o.drain_s) != 0) {
        fprintf(stderr, "sovia-rr server %d: no start from the bench\n", o.id);
        rc = 1;
    }
    if (rc == 0)
        rr_sample_marks(&m, res);
    res->magic = RR_RESULT_MAGIC;
    res->role = (uint64_t)o.role;
    res->threads = (uint64_t)o.threads;
    for (int t = 0; t < started; t++) {
        pthread_join(w[t].tid, NULL);
        if (w[t].rc != 0)
            rc = 1;
        res->tx_window += w[t].t.tx_window;
        res->tx_total += w[t].t.tx_total;
        res->unanswered += w[t].t.unanswered;
        rr_hist_merge(&res->lat, &w[t].t.lat);
    }
    if (rc == 0 && rr_write_all(1, res, sizeof *res) != 0) {
        fprintf(stderr, "sovia-rr: cannot report to the bench: %s\n", strerror(errno));
        rc = 1;
    }
    for (int t = 0; t < o.threads; t++)
        free(w[t].t.fds);
    free(w);
    free(res);
    return rc;
}
