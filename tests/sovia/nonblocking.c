/*
 * nonblocking: O_NONBLOCK (sov_fcntl and SOCK_NONBLOCK), MSG_DONTWAIT and
 * sov_poll (docs/SOCKETS.md "Connecting", "Data", "sov_poll").
 *  - connect: EINPROGRESS, then POLLOUT and SO_ERROR 0; to a dead port:
 *    POLLERR (with or without POLLOUT) and SO_ERROR ECONNREFUSED, cleared
 *    by reading (an immediate ECONNREFUSED is accepted too);
 *  - accept: EAGAIN, then POLLIN when a client connects; accept4 flags;
 *  - recv: EAGAIN, then POLLIN when the peer sends;
 *  - send: a peer that does not read fills the window: EAGAIN or a short
 *    count, no POLLOUT; POLLOUT once the peer reads;
 *  - sov_poll over a sovia socket and a pipe: each ready on its own; the
 *    timeout is honoured (roughly); negative fds ignored, closed fds
 *    POLLNVAL;
 *  - POLLRDHUP and POLLIN after the peer's SHUT_WR, POLLHUP when both
 *    directions are closed;
 *  - a receiver that only retries non-blocking recv (never waits inside
 *    sovia), combining off, ack_every == w: the sender never stalls
 *    (tests/model/README.md, finding 2).
 */
#include "sharness.h"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static int so_error(int fd)
{
    int e = -1;
    socklen_t l = sizeof e;
    SYS(sov_getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l));
    CHECK_EQ(l, sizeof e);
    return e;
}

/* sov_poll on one descriptor; returns revents (0 on timeout). */
static short poll1(int fd, short events, int timeout)
{
    struct pollfd p = {fd, events, 0};
    int r = (int)SYS(sov_poll(&p, 1, timeout));
    CHECK(r == 0 || r == 1);
    if (r == 0)
        CHECK_EQ(p.revents, 0);
    return r ? p.revents : 0;
}

static void set_nonblock(int fd, int on)
{
    int fl = (int)SYS(sov_fcntl(fd, F_GETFL));
    SYS(sov_fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK)));
    CHECK_EQ(!!(SYS(sov_fcntl(fd, F_GETFL)) & O_NONBLOCK), !!on);
}

/* ---- connect --------------------------------------------------------------- */

static void conn_server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 4);
    s_put_u64(chan, port);
    for (int i = 0; i < 2; i++) {
        int fd = s_accept(lfd);
        s_recv_pattern(fd, 10 + (uint64_t)i, 0, 1000);
        s_send_pattern(fd, 20 + (uint64_t)i, 0, 1000, 0);
        s_recv_eof(fd);
        SYS(sov_close(fd));
    }
    SYS(sov_close(lfd));
}

static void nb_connect_one(int fd, uint16_t port, int i)
{
    struct sockaddr_in a;
    s_addr4(&a, port);
    CHECK_ERR(sov_connect(fd, (struct sockaddr *)&a, sizeof a), EINPROGRESS);
    errno = 0;
    int r = sov_connect(fd, (struct sockaddr *)&a, sizeof a);
    int e = errno;
    CHECK_MSG((r == -1 && (e == EALREADY || e == EISCONN)) || r == 0,
              "a second sov_connect while connecting returned %d (errno %s), expected EALREADY "
              "(or EISCONN / 0 once done)",
              r, s_errname(e));
    s_log("second connect: %s", r == 0 ? "0" : s_errname(e));
    s_guard(6000, "sov_poll(POLLOUT) for a non-blocking connect");
    short re = poll1(fd, POLLOUT, 5000);
    s_unguard();
    CHECK_MSG(re & POLLOUT, "connect did not finish: revents 0x%x", re);
    CHECK_MSG(!(re & (POLLERR | POLLHUP)), "successful connect: revents 0x%x", re);
    CHECK_EQ(so_error(fd), 0);
    /* Done: connect says 0 once (as Linux) or EISCONN, then EISCONN. */
    errno = 0;
    r = sov_connect(fd, (struct sockaddr *)&a, sizeof a);
    e = errno;
    CHECK_MSG(r == 0 || (r == -1 && e == EISCONN), "connect after POLLOUT returned %d (errno %s)",
              r, s_errname(e));
    CHECK_ERR(sov_connect(fd, (struct sockaddr *)&a, sizeof a), EISCONN);
    CHECK_EQ(s_peer_port(fd), port);
    /* Data over the non-blocking socket. */
    unsigned char buf[1000];
    s_pattern_fill(buf, sizeof buf, 10 + (uint64_t)i, 0);
    size_t done = 0;
    while (done < sizeof buf) {
        errno = 0;
        ssize_t w = sov_send(fd, buf + done, sizeof buf - done, 0);
        if (w < 0) {
            CHECK_MSG(errno == EAGAIN, "send: %s", s_errname(errno));
            poll1(fd, POLLOUT, 1000);
            continue;
        }
        done += (size_t)w;
    }
    done = 0;
    double t0 = s_now_ms();
    while (done < sizeof buf) {
        errno = 0;
        ssize_t n = sov_recv(fd, buf + done, sizeof buf - done, 0);
        if (n < 0) {
            CHECK_MSG(errno == EAGAIN, "recv: %s", s_errname(errno));
            CHECK_MSG(s_now_ms() - t0 < 5000, "no data within 5 s");
            poll1(fd, POLLIN, 1000);
            continue;
        }
        CHECK(n > 0);
        done += (size_t)n;
    }
    CHECK(s_pattern_check(buf, sizeof buf, 20 + (uint64_t)i, 0) < 0);
    SYS(sov_close(fd));
}

static void conn_client(int chan, void *arg)
{
    (void)arg;
    uint16_t port = (uint16_t)s_get_u64(chan);
    int a = s_socket(AF_INET, SOCK_NONBLOCK);
    nb_connect_one(a, port, 0);
    int b = s_socket(AF_INET, 0);
    set_nonblock(b, 1);
    nb_connect_one(b, port, 1);
}

static void refused_solo(int chan, void *arg)
{
    (void)chan;
    (void)arg;
    int tmp = s_socket(AF_INET, 0);
    struct sockaddr_in a;
    s_addr4(&a, 0);
    SYS(sov_bind(tmp, (struct sockaddr *)&a, sizeof a));
    uint16_t dead = s_local_port(tmp);
    SYS(sov_close(tmp));
    for (int i = 0; i < 2; i++) {
        int fd = s_socket(AF_INET, i == 0 ? SOCK_NONBLOCK : 0);
        if (i == 1)
            set_nonblock(fd, 1);
        s_addr4(&a, dead);
        errno = 0;
        int r = sov_connect(fd, (struct sockaddr *)&a, sizeof a);
        int e = errno;
        if (r == -1 && e == ECONNREFUSED) {
            s_log("non-blocking connect refused at once");
        } else {
            CHECK_MSG(r == -1 && e == EINPROGRESS,
                      "non-blocking connect to a dead port returned %d (errno %s), expected "
                      "EINPROGRESS or ECONNREFUSED",
                      r, s_errname(e));
            s_guard(6000, "sov_poll for a refused non-blocking connect");
            short re = poll1(fd, POLLOUT, 5000);
            s_unguard();
            CHECK_MSG(re & POLLERR, "refused connect: revents 0x%x, expected POLLERR", re);
            s_log("refused connect: revents%s%s%s", re & POLLOUT ? " POLLOUT" : "",
                  re & POLLERR ? " POLLERR" : "", re & POLLHUP ? " POLLHUP" : "");
            CHECK_MSG(!(re & (POLLIN | POLLRDHUP)), "refused connect: revents 0x%x", re);
            int se = so_error(fd);
            CHECK_MSG(se == ECONNREFUSED, "SO_ERROR after a refused connect: %s", s_errname(se));
            /* Cleared by reading. */
            CHECK_EQ(so_error(fd), 0);
        }
        struct sockaddr_in p;
        CHECK_ERR(sov_getpeername(fd, (struct sockaddr *)&p, &(socklen_t){sizeof p}), ENOTCONN);
        SYS(sov_close(fd));
    }
}

/* ---- accept ------------------------------------------------------------------- */

static void acc_server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 4);
    set_nonblock(lfd, 1);
    s_put_u64(chan, port);
    CHECK_ERR(sov_accept(lfd, NULL, NULL), EAGAIN);
    CHECK_ERR(sov_accept4(lfd, NULL, NULL, SOCK_CLOEXEC), EAGAIN);
    CHECK_EQ(poll1(lfd, POLLIN, 0), 0);
    double t0 = s_now_ms();
    CHECK_EQ(poll1(lfd, POLLIN, 150), 0);
    CHECK_MSG(s_now_ms() - t0 >= 100, "sov_poll(150 ms) on a listener returned after %.0f ms",
              s_now_ms() - t0);
    s_tok(chan, 'c');
    s_guard(6000, "sov_poll(POLLIN) on a listener");
    short re = poll1(lfd, POLLIN, 5000);
    s_unguard();
    CHECK_MSG(re == POLLIN, "listener with a connection ready: revents 0x%x, expected POLLIN", re);
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    int fd = (int)SYS(sov_accept4(lfd, (struct sockaddr *)&a, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC));
    CHECK_EQ(alen, sizeof a);
    CHECK(SYS(sov_fcntl(fd, F_GETFL)) & O_NONBLOCK);
    CHECK(SYS(sov_fcntl(fd, F_GETFD)) & FD_CLOEXEC);
    CHECK_ERR(sov_accept(lfd, NULL, NULL), EAGAIN);
    char b;
    CHECK_ERR(sov_recv(fd, &b, 1, 0), EAGAIN);
    s_tok(chan, 'd');
    s_guard(6000, "sov_poll(POLLIN) on a listener");
    re = poll1(lfd, POLLIN, 5000);
    s_unguard();
    CHECK_EQ(re, POLLIN);
    /* Plain accept: O_NONBLOCK is not inherited from the listener (as Linux). */
    int fd2 = (int)SYS(sov_accept(lfd, NULL, NULL));
    CHECK_MSG(!(SYS(sov_fcntl(fd2, F_GETFL)) & O_NONBLOCK),
              "an accepted socket inherited O_NONBLOCK from its listener");
    CHECK(!(SYS(sov_fcntl(fd2, F_GETFD)) & FD_CLOEXEC));
    s_recv_all(fd2, &b, 1);
    CHECK_EQ(b, '2');
    s_want(chan, 'e');
    SYS(sov_close(fd));
    SYS(sov_close(fd2));
    SYS(sov_close(lfd));
}

static void acc_client(int chan, void *arg)
{
    (void)arg;
    uint16_t port = (uint16_t)s_get_u64(chan);
    s_want(chan, 'c');
    int c1 = s_connect(AF_INET, port);
    s_want(chan, 'd');
    int c2 = s_connect(AF_INET, port);
    s_send_all(c2, "2", 1, 0);
    s_tok(chan, 'e');
    SYS(sov_close(c1));
    SYS(sov_close(c2));
}

/* ---- recv EAGAIN then POLLIN ---------------------------------------------------- */

static void rcv_server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 1);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    s_want(chan, 's');
    s_send_pattern(fd, 30, 0, 100, 0);
    s_want(chan, 'e');
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
}

static void rcv_client(int chan, void *arg)
{
    (void)arg;
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    set_nonblock(fd, 1);
    unsigned char buf[200];
    CHECK_ERR(sov_recv(fd, buf, sizeof buf, 0), EAGAIN);
    CHECK_ERR(sov_read(fd, buf, sizeof buf), EAGAIN);
    CHECK_EQ(poll1(fd, POLLIN, 0), 0);
    /* Nothing to read but room to send. */
    short re = poll1(fd, POLLIN | POLLOUT, 0);
    CHECK_MSG(re == POLLOUT, "idle connected socket: revents 0x%x, expected POLLOUT", re);
    s_tok(chan, 's');
    size_t got = 0;
    double t0 = s_now_ms();
    while (got < 100) {
        s_guard(6000, "sov_poll(POLLIN) while the peer sends");
        re = poll1(fd, POLLIN, 5000);
        s_unguard();
        CHECK_MSG(re & POLLIN, "no POLLIN within 5 s (revents 0x%x)", re);
        CHECK_MSG(!(re & (POLLERR | POLLHUP | POLLRDHUP)), "revents 0x%x", re);
        ssize_t n = SYS(sov_recv(fd, buf + got, sizeof buf - got, 0));
        CHECK(n > 0);
        got += (size_t)n;
        CHECK(s_now_ms() - t0 < 5000);
    }
    CHECK_EQ(got, 100);
    CHECK(s_pattern_check(buf, 100, 30, 0) < 0);
    CHECK_ERR(sov_recv(fd, buf, sizeof buf, 0), EAGAIN);
    CHECK_EQ(poll1(fd, POLLIN, 0), 0);
    s_tok(chan, 'e');
    SYS(sov_close(fd));
}

/* ---- send fills the window ------------------------------------------------------ */

#define CHUNK 65536
#define SEND_LIMIT (256u << 20)

static void full_server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 1);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    /* Not reading until told how much is queued. */
    uint64_t queued = s_get_u64(chan);
    s_recv_pattern(fd, 40, 0, (size_t)queued);
    s_tok(chan, 'r');
    uint64_t more = s_get_u64(chan);
    s_recv_pattern(fd, 40, queued, (size_t)more);
    s_recv_eof(fd);
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
}

/* Sends until the window is full; returns the bytes sent. */
static uint64_t fill(int fd, uint64_t pos, int flags, const char *how)
{
    unsigned char *buf = malloc(CHUNK);
    CHECK(buf);
    uint64_t start = pos;
    for (;;) {
        s_pattern_fill(buf, CHUNK, 40, pos);
        errno = 0;
        ssize_t w = sov_send(fd, buf, CHUNK, flags);
        if (w == -1 && errno == EAGAIN)
            break;
        CHECK_MSG(w > 0 && w <= CHUNK, "%s: sov_send returned %zd (errno %s)", how, w,
                  s_errname(errno));
        pos += (uint64_t)w;
        CHECK_MSG(pos - start < SEND_LIMIT, "%s: %u MiB sent to a peer that does not read",
                  how, SEND_LIMIT >> 20);
        if (w < CHUNK) {
            /* A short count: the window is full now. */
            s_pattern_fill(buf, CHUNK, 40, pos);
            CHECK_ERR(sov_send(fd, buf, CHUNK, flags), EAGAIN);
            break;
        }
    }
    free(buf);
    return pos - start;
}

/*
 * arg != NULL: TCP_NODELAY, so no send can be combined and a full window
 * means no send of any size fits: no POLLOUT, every send EAGAIN. With
 * combining on (the default) a small send still fits in the combining
 * buffer while the window is full, so only the large sends are checked.
 */
static void full_client(int chan, void *arg)
{
    int nodelay = arg != NULL;
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    if (nodelay) {
        int one = 1;
        SYS(sov_setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
    }
    /* MSG_DONTWAIT on a blocking socket. */
    uint64_t q = fill(fd, 0, MSG_DONTWAIT, "MSG_DONTWAIT");
    CHECK_MSG(q > 0, "nothing could be sent to an idle peer");
    short full_re = poll1(fd, POLLOUT, 0);
    s_log("window full after %llu bytes; sov_poll then says 0x%x", (unsigned long long)q,
          full_re);
    /* O_NONBLOCK: sends that need the window say EAGAIN. */
    set_nonblock(fd, 1);
    unsigned char *big = calloc(1, CHUNK);
    CHECK(big);
    CHECK_ERR(sov_send(fd, big, CHUNK, 0), EAGAIN);
    CHECK_ERR(sov_write(fd, big, CHUNK), EAGAIN);
    struct iovec iov = {big, CHUNK};
    CHECK_ERR(sov_writev(fd, &iov, 1), EAGAIN);
    free(big);
    if (nodelay) {
        CHECK_MSG(full_re == 0, "window full (TCP_NODELAY): sov_poll(POLLOUT) gave 0x%x", full_re);
        unsigned char one = 0;
        CHECK_ERR(sov_send(fd, &one, 1, 0), EAGAIN);
        CHECK_ERR(sov_write(fd, &one, 1), EAGAIN);
        struct iovec iov1 = {&one, 1};
        CHECK_ERR(sov_writev(fd, &iov1, 1), EAGAIN);
        double t0 = s_now_ms();
        CHECK_EQ(poll1(fd, POLLOUT, 200), 0);
        CHECK(s_now_ms() - t0 >= 150);
    }
    s_put_u64(chan, q);
    if (nodelay) {
        s_guard(6000, "sov_poll(POLLOUT) after the peer read");
        short re = poll1(fd, POLLOUT, 5000);
        s_unguard();
        CHECK_MSG(re & POLLOUT, "no POLLOUT after the peer read everything (revents 0x%x)", re);
    }
    s_want(chan, 'r');
    /* The peer read everything: a large send goes again. */
    CHECK_MSG(poll1(fd, POLLOUT, 1000) & POLLOUT, "no POLLOUT after the peer read everything");
    uint64_t more = fill(fd, q, 0, "O_NONBLOCK");
    CHECK(more > 0);
    s_put_u64(chan, more);
    set_nonblock(fd, 0);
    SYS(sov_shutdown(fd, SHUT_WR));
    SYS(sov_close(fd));
}

/* ---- sov_poll over a sovia socket and a pipe ----------------------------------- */

struct pipe_writer {
    int fd;
    unsigned delay_ms;
};

static void *pipe_writer_thread(void *arg)
{
    struct pipe_writer *p = arg;
    s_sleep_ms(p->delay_ms);
    ssize_t w = write(p->fd, "p", 1);
    (void)w;
    return NULL;
}

static void mixed_server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 1);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    int one = 1;
    SYS(sov_setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
    s_want(chan, '1');
    s_sleep_ms(100);
    s_send_all(fd, "s1", 2, 0);
    s_want(chan, '2');
    s_send_all(fd, "s2", 2, 0);
    s_want(chan, '3');
    s_recv_eof(fd);
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
}

static void mixed_client(int chan, void *arg)
{
    (void)arg;
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    int p[2];
    CHECK(pipe(p) == 0);
    struct pollfd f[2] = {{fd, POLLIN, 0}, {p[0], POLLIN, 0}};
    char buf[8];

    /* Nothing ready: the timeout is honoured (roughly). */
    double t0 = s_now_ms();
    CHECK_EQ(SYS(sov_poll(f, 2, 300)), 0);
    double el = s_now_ms() - t0;
    s_log("sov_poll(300 ms) with nothing ready returned after %.0f ms", el);
    CHECK_MSG(el >= 250 && el < 3000, "sov_poll(300 ms) returned after %.0f ms", el);
    CHECK_EQ(f[0].revents, 0);
    CHECK_EQ(f[1].revents, 0);
    t0 = s_now_ms();
    CHECK_EQ(SYS(sov_poll(f, 2, 0)), 0);
    CHECK_MSG(s_now_ms() - t0 < 1000, "sov_poll(0) took %.0f ms", s_now_ms() - t0);

    /* The pipe alone becomes ready while sov_poll sleeps. */
    struct pipe_writer pw = {p[1], 100};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, pipe_writer_thread, &pw) == 0);
    s_guard(6000, "sov_poll waiting for a pipe");
    t0 = s_now_ms();
    int r = (int)SYS(sov_poll(f, 2, 5000));
    s_unguard();
    pthread_join(th, NULL);
    CHECK_MSG(r == 1 && f[1].revents == POLLIN && f[0].revents == 0,
              "pipe written: sov_poll returned %d, revents sovia 0x%x pipe 0x%x", r, f[0].revents,
              f[1].revents);
    CHECK_MSG(s_now_ms() - t0 < 4000, "woke %.0f ms after a pipe write at 100 ms",
              s_now_ms() - t0);
    CHECK_EQ(read(p[0], buf, 1), 1);

    /* The socket alone becomes ready while sov_poll sleeps (infinite timeout). */
    s_tok(chan, '1');
    s_guard(6000, "sov_poll(-1) waiting for the sovia socket");
    r = (int)SYS(sov_poll(f, 2, -1));
    s_unguard();
    CHECK_MSG(r == 1 && (f[0].revents & POLLIN) && f[1].revents == 0,
              "data sent: sov_poll returned %d, revents sovia 0x%x pipe 0x%x", r, f[0].revents,
              f[1].revents);
    s_recv_all(fd, buf, 2);
    CHECK(memcmp(buf, "s1", 2) == 0);

    /* Both ready. */
    CHECK_EQ(write(p[1], "q", 1), 1);
    s_tok(chan, '2');
    t0 = s_now_ms();
    for (;;) {
        r = (int)SYS(sov_poll(f, 2, 1000));
        if (r == 2)
            break;
        CHECK_MSG(r == 1 && f[1].revents == POLLIN, "sov_poll returned %d (0x%x 0x%x)", r,
                  f[0].revents, f[1].revents);
        CHECK_MSG(s_now_ms() - t0 < 5000, "the socket did not become ready within 5 s");
    }
    CHECK(f[0].revents & POLLIN);
    CHECK_EQ(f[1].revents, POLLIN);
    s_recv_all(fd, buf, 2);
    CHECK(memcmp(buf, "s2", 2) == 0);
    CHECK_EQ(read(p[0], buf, 1), 1);

    /* Negative fds are ignored, closed ones are POLLNVAL; POLLOUT on both. */
    int q[2];
    CHECK(pipe(q) == 0);
    close(q[0]);
    close(q[1]);
    struct pollfd g[4] = {{-1, POLLIN, 0}, {fd, POLLOUT, 0}, {q[0], POLLIN, 0}, {p[1], POLLOUT, 0}};
    r = (int)SYS(sov_poll(g, 4, 1000));
    CHECK_MSG(r == 3, "sov_poll returned %d (revents 0x%x 0x%x 0x%x 0x%x)", r, g[0].revents,
              g[1].revents, g[2].revents, g[3].revents);
    CHECK_EQ(g[0].revents, 0);
    CHECK_EQ(g[1].revents, POLLOUT);
    CHECK_EQ(g[2].revents, POLLNVAL);
    CHECK_EQ(g[3].revents, POLLOUT);
    /* Only ordinary descriptors, and none at all. */
    struct pollfd h = {p[0], POLLIN, 0};
    CHECK_EQ(SYS(sov_poll(&h, 1, 50)), 0);
    t0 = s_now_ms();
    CHECK_EQ(SYS(sov_poll(NULL, 0, 100)), 0);
    CHECK_MSG(s_now_ms() - t0 >= 80, "sov_poll(NULL, 0, 100) returned after %.0f ms",
              s_now_ms() - t0);
    s_tok(chan, '3');
    SYS(sov_close(fd));
    close(p[0]);
    close(p[1]);
}

/* ---- POLLRDHUP / POLLHUP ----------------------------------------------------- */

static void rdhup_server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 1);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    s_want(chan, 'a');
    s_send_all(fd, "bye", 3, 0);
    SYS(sov_shutdown(fd, SHUT_WR));
    s_guard(5000, "sov_recv for the client's end of stream");
    s_recv_eof(fd);
    s_unguard();
    s_want(chan, 'z');
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
}

static void rdhup_client(int chan, void *arg)
{
    (void)arg;
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    set_nonblock(fd, 1);
    CHECK_EQ(poll1(fd, POLLIN | POLLRDHUP, 0), 0);
    s_tok(chan, 'a');
    double t0 = s_now_ms();
    short re = 0;
    s_guard(8000, "waiting for POLLRDHUP");
    while (!(re & POLLRDHUP)) {
        re = poll1(fd, POLLIN | POLLRDHUP | POLLOUT, 5000);
        CHECK_MSG(re, "no event within 5 s of the peer's SHUT_WR");
        CHECK_MSG(s_now_ms() - t0 < 5000, "no POLLRDHUP within 5 s (revents 0x%x)", re);
        if (!(re & POLLRDHUP))
            s_sleep_ms(1);
    }
    s_unguard();
    CHECK_MSG(re & POLLIN, "after the peer's FIN: revents 0x%x without POLLIN", re);
    CHECK_MSG(re & POLLOUT, "after the peer's FIN the socket can still send: revents 0x%x", re);
    CHECK_MSG(!(re & (POLLHUP | POLLERR)), "one direction closed: revents 0x%x", re);
    /* POLLRDHUP is only reported when asked for. */
    re = poll1(fd, POLLIN, 0);
    CHECK_MSG(re == POLLIN, "revents 0x%x for events POLLIN", re);
    char buf[8];
    s_recv_all(fd, buf, 3);
    CHECK(memcmp(buf, "bye", 3) == 0);
    CHECK_EQ(SYS(sov_recv(fd, buf, sizeof buf, 0)), 0);
    re = poll1(fd, POLLIN | POLLRDHUP, 0);
    CHECK_MSG(re == (POLLIN | POLLRDHUP), "at end of stream: revents 0x%x", re);
    /* Both directions closed: POLLHUP, reported even when not asked for. */
    SYS(sov_shutdown(fd, SHUT_WR));
    re = poll1(fd, POLLIN | POLLOUT | POLLRDHUP, 1000);
    CHECK_MSG(re & POLLHUP, "both directions closed: revents 0x%x without POLLHUP", re);
    re = poll1(fd, 0, 1000);
    CHECK_MSG(re & POLLHUP, "events 0, both directions closed: revents 0x%x", re);
    s_tok(chan, 'z');
    SYS(sov_close(fd));
}


/* ---- A receiver that only polls (tests/model/README.md, finding 2) ------- */

#define POLLER_MSG 4000
#define POLLER_COUNT 80

struct poller_cfg {
    unsigned recv_w, recv_t, send_w, send_t;
};

static void use_window(unsigned w, unsigned t)
{
    struct sov_config c;
    SYS(sov_get_config(&c));
    c.window = w;
    c.ack_threshold = t;
    c.combine = 0; /* no timer to give a held buffer back */
    SYS(sov_set_config(&c));
}

static void poller_sender(int chan, void *arg)
{
    const struct poller_cfg *pc = arg;
    use_window(pc->send_w, pc->send_t);
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 1);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    s_send_pattern(fd, 21, 0, (size_t)POLLER_MSG * POLLER_COUNT, 0);
    s_want(chan, 'D');
    CHECK_EQ(SYS(sov_close(fd)), 0);
    CHECK_EQ(SYS(sov_close(lfd)), 0);
}

/* Never waits inside sovia: non-blocking recv, and a sleep elsewhere. The
 * sender must not stall for want of an acknowledgement this end holds. */
static void poller_receiver(int chan, void *arg)
{
    const struct poller_cfg *pc = arg;
    use_window(pc->recv_w, pc->recv_t);
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    static unsigned char buf[POLLER_MSG];
    size_t total = 0, want = (size_t)POLLER_MSG * POLLER_COUNT;
    double last = s_now_ms();
    while (total < want) {
        ssize_t n = sov_recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
            CHECK_EQ(s_pattern_check(buf, (size_t)n, 21, total), -1);
            total += (size_t)n;
            last = s_now_ms();
            continue;
        }
        CHECK_MSG(n == -1 && errno == EAGAIN, "sov_recv: %zd (errno %s)", n, s_errname(errno));
        CHECK_MSG(s_now_ms() - last < 3000, "the sender stalled: %zu of %zu bytes (w=%u t=%u)",
                  total, want, pc->recv_w, pc->recv_t);
        s_sleep_ms(1);
    }
    s_tok(chan, 'D');
    CHECK_EQ(SYS(sov_close(fd)), 0);
}

int main(void)
{
    s_init("nonblocking", 110);
    if (s_case("connect"))
        s_run_pair("server", conn_server, "client", conn_client, NULL);
    if (s_case("connect_refused"))
        s_run_solo("solo", refused_solo, NULL);
    if (s_case("accept"))
        s_run_pair("server", acc_server, "client", acc_client, NULL);
    if (s_case("recv"))
        s_run_pair("server", rcv_server, "client", rcv_client, NULL);
    if (s_case("send_window"))
        s_run_pair("server", full_server, "client", full_client, NULL);
    if (s_case("send_window_nodelay"))
        s_run_pair("server", full_server, "client", full_client, (void *)1);
    if (s_case("poll_mixed"))
        s_run_pair("server", mixed_server, "client", mixed_client, NULL);
    if (s_case("rdhup"))
        s_run_pair("server", rdhup_server, "client", rdhup_client, NULL);
    static struct poller_cfg t_is_w = {4, 4, 4, 4}, few_ack_slots = {32, 16, 1, 1};
    if (s_case("poll_only_receiver"))
        s_run_pair("server", poller_sender, "client", poller_receiver, &t_is_w);
    if (s_case("poll_only_receiver_few_ack_slots"))
        s_run_pair("server", poller_sender, "client", poller_receiver, &few_ack_slots);
    s_pass();
}
