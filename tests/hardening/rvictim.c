/*
 * rvictim.c - hostile_run's victim under `sovia run`: an ordinary libc
 * echo server (see rvictim.h), and the executable's entry point and
 * helpers. Nothing here knows about sovia; the preload carries what it can.
 */
#include "rvictim.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>


static const char *mode = "rvictim";

/* ---- Helpers ----------------------------------------------------------------------- */

static void vlog(const char *what, const char *fmt, va_list ap)
{
    char line[1024];
    int n = snprintf(line, sizeof line, "[hostile_run %s] %s", mode, what);
    if (n < 0 || n >= (int)sizeof line)
        n = 0;
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    size_t len = strlen(line);
    line[len++] = '\n';
    if (write(STDOUT_FILENO, line, len) < 0) {
        /* nowhere to report */
    }
}

void rv_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog("", fmt, ap);
    va_end(ap);
}

void rv_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog("FAIL ", fmt, ap);
    va_end(ap);
    exit(1);
}

double rv_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

void rv_put(int chan, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = write(chan, p, len);
        RV_CHECK(n > 0 || (n < 0 && errno == EINTR), "channel write: %s", strerror(errno));
        if (n > 0)
            p += n, len -= (size_t)n;
    }
}

void rv_get(int chan, void *buf, size_t len)
{
    char *p = buf;
    while (len) {
        ssize_t n = read(chan, p, len);
        RV_CHECK(n != 0, "the test closed the channel");
        RV_CHECK(n > 0 || errno == EINTR, "channel read: %s", strerror(errno));
        if (n > 0)
            p += n, len -= (size_t)n;
    }
}

uint8_t rv_pattern(uint64_t seed, uint64_t pos)
{
    uint64_t x = (pos >> 3) * 0x9e3779b97f4a7c15ULL ^ seed * 0xd6e8feb86659fd93ULL;
    x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 29;
    return (uint8_t)(x >> (8 * (pos & 7)));
}

/* ---- The echo server ----------------------------------------------------------------- */

#define MAXC 16
#define BUF (256u * 1024u)

enum role { HEALTHY, HOSTILE, EXTRA }; /* EXTRA: any other, e.g. a hostile's late one */

struct conn {
    int fd;
    enum role role;
    uint8_t *out; /* read and not yet echoed */
    size_t out_len;
};

static struct conn conns[MAXC];
static int nconns;
static struct sv_report rep;
static double max_call_ms; /* of the round */
static bool in_round;

/* Times one socket call of the round. */
static double call_t0;
static void call_begin(void)
{
    call_t0 = rv_now_ms();
}
static void call_end(void)
{
    double ms = rv_now_ms() - call_t0;
    if (ms > max_call_ms)
        max_call_ms = ms;
}

/* Every connection but the healthy one is reset (SO_LINGER {1, 0}), as a
 * server drops a client it gave up on: nothing lingers for a peer that
 * may never answer. */
static void close_conn(int k)
{
    struct conn *c = &conns[k];
    call_begin();
    if (c->role != HEALTHY) {
        struct linger l = {1, 0};
        RV_CHECK(setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &l, sizeof l) == 0,
                 "SO_LINGER: %s", strerror(errno));
    }
    RV_CHECK(close(c->fd) == 0, "close(%d): %s", c->fd, strerror(errno));
    call_end();
    free(c->out);
    *c = conns[--nconns];
}

/* A call on connection k failed; 1 when the connection is gone. */
static int failed(int k, const char *what)
{
    int e = errno;
    if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR)
        return 0;
    RV_CHECK(conns[k].role != HEALTHY, "healthy connection: %s failed: %s", what, strerror(e));
    if (conns[k].role == HOSTILE && !rep.err)
        rep.err = e;
    close_conn(k);
    return 1;
}

static int flush_out(int k)
{
    struct conn *c = &conns[k];
    while (c->out_len) {
        call_begin();
        ssize_t w = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
        call_end();
        if (w < 0)
            return failed(k, "send");
        if (c->role == HOSTILE)
            rep.bytes_out += w;
        memmove(c->out, c->out + w, c->out_len - (size_t)w);
        c->out_len -= (size_t)w;
    }
    return 0;
}

/* Reads what is there and echoes it; 1 when the connection is gone. */
static int read_in(int k)
{
    struct conn *c = &conns[k];
    if (c->out_len == BUF)
        return flush_out(k);
    call_begin();
    ssize_t n = recv(c->fd, c->out + c->out_len, BUF - c->out_len, MSG_DONTWAIT);
    call_end();
    if (n < 0)
        return failed(k, "recv");
    if (n == 0) {
        RV_CHECK(c->role != HEALTHY, "healthy connection: unexpected end of stream");
        if (c->role == HOSTILE)
            rep.eof = 1;
        close_conn(k);
        return 1;
    }
    if (c->role == HOSTILE)
        rep.bytes_in += n;
    c->out_len += (size_t)n;
    return flush_out(k);
}

static void add_conn(int fd, enum role role)
{
    RV_CHECK(nconns < MAXC, "too many connections");
    conns[nconns] = (struct conn){.fd = fd, .role = role, .out = malloc(BUF)};
    RV_CHECK(conns[nconns].out != NULL, "out of memory");
    nconns++;
}

static void accept_all(int lfd)
{
    int fd;
    for (;;) {
        call_begin();
        fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        call_end();
        if (fd < 0)
            break;
        bool hostile = in_round && !rep.accepted;
        if (hostile)
            rep.accepted = 1;
        else
            rep.extra_conns++;
        add_conn(fd, hostile ? HOSTILE : EXTRA);
    }
    RV_CHECK(errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED, "accept4: %s",
             strerror(errno));
}

static int find(enum role role)
{
    for (int k = 0; k < nconns; k++)
        if (conns[k].role == role)
            return k;
    return -1;
}

static int listener(void)
{
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    RV_CHECK(lfd >= 0, "socket: %s", strerror(errno));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    RV_CHECK(bind(lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(lfd, 16) == 0,
             "listener: %s", strerror(errno));
    return lfd;
}

/* Waits up to ms for fd to be ready for `events`. */
static bool ready(int fd, short events, int ms)
{
    struct pollfd p = {fd, events, 0};
    return poll(&p, 1, ms) == 1;
}

/* One command from the test; false on 'Q'. */
static bool command(int chan)
{
    char cmd;
    rv_get(chan, &cmd, 1);
    if (cmd == 'R') {
        rep = (struct sv_report){0};
        max_call_ms = 0;
        in_round = true;
    } else if (cmd == 'S') {
        /* What the round's connection has to say first (an error poll has
         * just found), then it goes. */
        int k = find(HOSTILE);
        if (k >= 0 && !read_in(k))
            close_conn(find(HOSTILE));
        in_round = false;
        struct rv_report r = {rep, max_call_ms};
        rv_put(chan, &r, sizeof r);
    } else {
        RV_CHECK(cmd == 'Q', "unknown command %c", cmd);
        return false;
    }
    return true;
}

int rv_server(int chan)
{
    signal(SIGPIPE, SIG_IGN);
    int lfd = listener();
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    RV_CHECK(getsockname(lfd, (struct sockaddr *)&a, &al) == 0, "getsockname");
    uint64_t port = ntohs(a.sin_port);
    rv_put(chan, &port, sizeof port);
    RV_CHECK(ready(lfd, POLLIN, 10000), "the healthy client did not connect");
    int hfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    RV_CHECK(hfd >= 0, "accept4 (healthy): %s", strerror(errno));
    add_conn(hfd, HEALTHY);
    for (;;) {
        struct pollfd p[MAXC + 2];
        p[0] = (struct pollfd){chan, POLLIN, 0};
        p[1] = (struct pollfd){lfd, POLLIN, 0};
        for (int k = 0; k < nconns; k++)
            p[2 + k] = (struct pollfd){conns[k].fd,
                                       (short)(POLLIN | (conns[k].out_len ? POLLOUT : 0)), 0};
        double t0 = rv_now_ms();
        int n = poll(p, (nfds_t)(2 + nconns), SV_WAIT_MS);
        double over = rv_now_ms() - t0 - SV_WAIT_MS;
        RV_CHECK(n >= 0, "poll: %s", strerror(errno));
        if (over > rep.max_over_ms)
            rep.max_over_ms = over;
        /* The channel first: a round's 'R' is there before its connection
         * can be (a poll that found a carried socket ready in its spin may
         * not have asked the kernel about the channel). */
        if ((p[0].revents & POLLIN) || ready(chan, POLLIN, 0)) {
            if (!command(chan))
                break;
            continue; /* the table may have changed */
        }
        for (int k = nconns - 1; k >= 0; k--) {
            short re = p[2 + k].revents;
            if ((re & POLLOUT) && flush_out(k))
                continue;
            if (re & (POLLIN | POLLERR | POLLHUP))
                read_in(k);
        }
        if (p[1].revents & POLLIN)
            accept_all(lfd);
    }
    /* Connections still to come (a hostile handshake that completed after
     * its round) go too. */
    for (double end = rv_now_ms() + 200; rv_now_ms() < end; usleep(10000))
        accept_all(lfd);
    for (int k = nconns - 1; k >= 0; k--)
        if (conns[k].role != HEALTHY)
            close_conn(k);
    rv_put(chan, "q", 1);
    char c;
    rv_get(chan, &c, 1);
    RV_CHECK(c == 'c', "want 'c', got %c", c);
    RV_CHECK(ready(hfd, POLLIN, 3000), "no end of stream from the healthy client");
    char b;
    ssize_t n = recv(hfd, &b, 1, 0);
    RV_CHECK(n == 0, "healthy connection: want end of stream, got %zd (%s)", n,
             n < 0 ? strerror(errno) : "data");
    close_conn(find(HEALTHY));
    RV_CHECK(close(lfd) == 0, "close(listener): %s", strerror(errno));
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    int chan = argc >= 3 ? atoi(argv[2]) : -1;
    RV_CHECK(chan >= 0, "usage: rvictim server|client|probe CHAN [PORT [LOCAL_PORT]]");
    mode = strcmp(argv[1], "server") == 0 ? "victim" : strcmp(argv[1], "client") == 0 ? "healthy" : argv[1];
    if (strcmp(argv[1], "server") == 0)
        return rv_server(chan);
    RV_CHECK(argc >= 4, "client and probe need a port");
    uint16_t port = (uint16_t)atoi(argv[3]);
    if (strcmp(argv[1], "client") == 0)
        return rv_client(chan, port);
    RV_CHECK(strcmp(argv[1], "probe") == 0 && argc >= 5, "unknown mode %s", argv[1]);
    return rv_probe(chan, port, (uint16_t)atoi(argv[4]));
}
