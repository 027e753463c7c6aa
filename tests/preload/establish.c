/*
 * establish.c - connection establishment under the preload: socket, bind,
 * listen, accept, accept4 flags, blocking and non-blocking connect, the
 * 4-tuple seen by both sides, ECONNREFUSED, several pending connections
 * paired by port, IPv6, and a server listening on one port over IPv4 and
 * IPv6 (rsync's daemon: 0.0.0.0 and :: with IPV6_V6ONLY), whose clients
 * are all carried whichever socket they reach (before, each socket had a
 * shadow listener on the port's one name and a client's VI queued at
 * either: half the connections fell back to kernel TCP).
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pharness.h"

static void check_v4(const struct sockaddr_in *a, socklen_t len, int port)
{
    CHECK_EQ(len, sizeof(struct sockaddr_in));
    CHECK_EQ(a->sin_family, AF_INET);
    CHECK_EQ(ntohl(a->sin_addr.s_addr), INADDR_LOOPBACK);
    if (port >= 0)
        CHECK_EQ(ntohs(a->sin_port), port);
}

static void check_socket_fd(int fd)
{
    struct stat st;
    SYS(fstat(fd, &st));
    CHECK(S_ISSOCK(st.st_mode));
    int v = -1;
    socklen_t len = sizeof v;
    SYS(getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len));
    CHECK_EQ(v, SOCK_STREAM);
    len = sizeof v;
    SYS(getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &len));
    CHECK_EQ(v, 0);
}

/* ---- blocking: accept/connect and the 4-tuple -------------------------------- */

struct tuple {
    uint16_t local_port, peer_port;
};

static void blocking_server(struct p_role *r)
{
    struct sockaddr_in peer;
    socklen_t plen = sizeof peer;
    int fd = (int)SYS(accept(r->lfd, (struct sockaddr *)&peer, &plen));
    check_v4(&peer, plen, -1);
    check_socket_fd(fd);
    struct sockaddr_in local, kpeer;
    socklen_t len = sizeof local;
    SYS(getsockname(fd, (struct sockaddr *)&local, &len));
    check_v4(&local, len, r->port);
    len = sizeof kpeer;
    SYS(getpeername(fd, (struct sockaddr *)&kpeer, &len));
    check_v4(&kpeer, len, ntohs(peer.sin_port));
    /* the client's view, through the connection itself */
    struct tuple t;
    p_read_all(fd, &t, sizeof t);
    CHECK_EQ(t.local_port, ntohs(peer.sin_port));
    CHECK_EQ(t.peer_port, r->port);
    struct tuple mine = {(uint16_t)r->port, ntohs(peer.sin_port)};
    p_write_all(fd, &mine, sizeof mine);
    char c;
    CHECK_EQ(read(fd, &c, 1), 0); /* the client closed */
    SYS(close(fd));
}

static void blocking_client(struct p_role *r)
{
    int fd = (int)SYS(socket(AF_INET, SOCK_STREAM, 0));
    check_socket_fd(fd);
    struct sockaddr_in to = p_loopback(r->port);
    SYS(connect(fd, (struct sockaddr *)&to, sizeof to));
    check_socket_fd(fd);
    struct sockaddr_in local, peer;
    socklen_t len = sizeof local;
    SYS(getsockname(fd, (struct sockaddr *)&local, &len));
    check_v4(&local, len, -1);
    CHECK(ntohs(local.sin_port) != 0);
    len = sizeof peer;
    SYS(getpeername(fd, (struct sockaddr *)&peer, &len));
    check_v4(&peer, len, r->port);
    struct tuple t = {ntohs(local.sin_port), (uint16_t)r->port};
    p_write_all(fd, &t, sizeof t);
    struct tuple theirs;
    p_read_all(fd, &theirs, sizeof theirs);
    CHECK_EQ(theirs.local_port, r->port);
    CHECK_EQ(theirs.peer_port, ntohs(local.sin_port));
    /* connecting again: already connected */
    CHECK_ERR(connect(fd, (struct sockaddr *)&to, sizeof to), EISCONN);
    SYS(close(fd));
}

/* ---- explicit bind of the client, then connect ----------------------------- */

/* The client's side of blocking_server's check: our ports, theirs back;
 * then closes fd. */
static void exchange_tuples(struct p_role *r, int fd, uint16_t my_port)
{
    struct tuple t = {my_port, (uint16_t)r->port};
    p_write_all(fd, &t, sizeof t);
    struct tuple theirs;
    p_read_all(fd, &theirs, sizeof theirs);
    CHECK_EQ(theirs.peer_port, my_port);
    SYS(close(fd));
}

static void bound_client(struct p_role *r)
{
    int fd = (int)SYS(socket(AF_INET, SOCK_STREAM, 0));
    struct sockaddr_in me = p_loopback(0);
    SYS(bind(fd, (struct sockaddr *)&me, sizeof me));
    socklen_t len = sizeof me;
    SYS(getsockname(fd, (struct sockaddr *)&me, &len));
    struct sockaddr_in to = p_loopback(r->port);
    SYS(connect(fd, (struct sockaddr *)&to, sizeof to));
    struct sockaddr_in after;
    len = sizeof after;
    SYS(getsockname(fd, (struct sockaddr *)&after, &len));
    CHECK_EQ(after.sin_port, me.sin_port); /* connect kept the bound port */
    exchange_tuples(r, fd, ntohs(me.sin_port));
}

/* A connect to 0.0.0.0 (the kernel takes it for this host's loopback) of a
 * server that listens on 127.0.0.1: its owner is looked up there. */
static void any_address_client(struct p_role *r)
{
    int fd = (int)SYS(socket(AF_INET, SOCK_STREAM, 0));
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)r->port)};
    to.sin_addr.s_addr = htonl(INADDR_ANY);
    SYS(connect(fd, (struct sockaddr *)&to, sizeof to));
    struct sockaddr_in me;
    socklen_t len = sizeof me;
    SYS(getsockname(fd, (struct sockaddr *)&me, &len));
    exchange_tuples(r, fd, ntohs(me.sin_port));
}

/* ---- accept4 flags, non-blocking listener ---------------------------------------- */

static void accept4_server(struct p_role *r)
{
    /* a non-blocking listener with nothing pending */
    int fl = (int)SYS(fcntl(r->lfd, F_GETFL));
    SYS(fcntl(r->lfd, F_SETFL, fl | O_NONBLOCK));
    CHECK_ERR(accept4(r->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), EAGAIN);
    CHECK_ERR(accept(r->lfd, NULL, NULL), EAGAIN);
    p_put_int(r, 1); /* now connect */
    struct pollfd p = {.fd = r->lfd, .events = POLLIN};
    CHECK_EQ(poll(&p, 1, 10000), 1);
    CHECK(p.revents & POLLIN);
    int fd = (int)SYS(accept4(r->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC));
    CHECK((SYS(fcntl(fd, F_GETFL)) & O_NONBLOCK) != 0);
    CHECK((SYS(fcntl(fd, F_GETFD)) & FD_CLOEXEC) != 0);
    char buf[8];
    CHECK_ERR(recv(fd, buf, sizeof buf, 0), EAGAIN);
    CHECK_ERR(read(fd, buf, sizeof buf), EAGAIN);
    struct pollfd w = {.fd = fd, .events = POLLOUT};
    CHECK_EQ(poll(&w, 1, 10000), 1);
    CHECK_EQ(w.revents, POLLOUT);
    p_write_all(fd, "go", 2);
    p = (struct pollfd){.fd = fd, .events = POLLIN};
    CHECK_EQ(poll(&p, 1, 10000), 1);
    CHECK_EQ(recv(fd, buf, sizeof buf, 0), 5);
    CHECK(memcmp(buf, "hello", 5) == 0);
    CHECK_ERR(recv(fd, buf, sizeof buf, 0), EAGAIN);
    /* without the flags: a blocking descriptor without FD_CLOEXEC */
    SYS(fcntl(r->lfd, F_SETFL, fl));
    p_put_int(r, 2);
    int fd2 = (int)SYS(accept4(r->lfd, NULL, NULL, 0));
    CHECK((SYS(fcntl(fd2, F_GETFL)) & O_NONBLOCK) == 0);
    CHECK((SYS(fcntl(fd2, F_GETFD)) & FD_CLOEXEC) == 0);
    p_write_all(fd2, "x", 1);
    CHECK_EQ(read(fd2, buf, 1), 1);
    CHECK_EQ(buf[0], 'y');
    SYS(close(fd2));
    SYS(close(fd));
}

static void accept4_client(struct p_role *r)
{
    CHECK_EQ(p_get_int(r), 1);
    int fd = p_connect(r->port);
    char buf[2];
    p_read_all(fd, buf, 2); /* the server speaks first */
    CHECK(memcmp(buf, "go", 2) == 0);
    p_write_all(fd, "hello", 5);
    CHECK_EQ(p_get_int(r), 2);
    int fd2 = p_connect(r->port);
    p_read_all(fd2, buf, 1);
    CHECK_EQ(buf[0], 'x');
    p_write_all(fd2, "y", 1);
    char c;
    CHECK_EQ(read(fd2, &c, 1), 0);
    CHECK_EQ(read(fd, &c, 1), 0);
    SYS(close(fd2));
    SYS(close(fd));
}

/* A freshly accepted socket is writable at once (an empty send buffer). */
static void write_at_once_server(struct p_role *r)
{
    int fd = (int)SYS(accept4(r->lfd, NULL, NULL, SOCK_NONBLOCK));
    ssize_t n = send(fd, "hi", 2, 0);
    if (n != 2)
        FAILF("send on a just accepted non-blocking socket: %zd (errno %s), want 2", n,
              p_errname(errno));
    struct pollfd w = {.fd = fd, .events = POLLOUT};
    CHECK_EQ(poll(&w, 1, 0), 1);
    CHECK_EQ(w.revents, POLLOUT);
    p_barrier(r);
    SYS(close(fd));
}

static void write_at_once_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    char buf[2];
    p_read_all(fd, buf, 2);
    CHECK(memcmp(buf, "hi", 2) == 0);
    p_barrier(r);
    SYS(close(fd));
}

/* Bytes written before the client answered the pairing (it sleeps after
 * connect) reach it once, in order, whatever the server does next. */
#define GREETING "220 ready\r\n"

static void greet_client_common(struct p_role *r, int fd)
{
    char buf[sizeof GREETING - 1];
    p_read_all(fd, buf, sizeof buf);
    CHECK(memcmp(buf, GREETING, sizeof buf) == 0);
    char c;
    CHECK_EQ(read(fd, &c, 1), 0);
    (void)r;
}

/* Greets and closes at once (as a busy server's "421"). */
static void greet_close_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    p_write_all(fd, GREETING, sizeof GREETING - 1);
    SYS(close(fd));
}

static void greet_close_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    p_sleep_ms(20);
    greet_client_common(r, fd);
    SYS(close(fd));
}

/* Greets, ends its side with shutdown, then reads the client's answer. */
static void greet_shutdown_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    p_write_all(fd, GREETING, sizeof GREETING - 1);
    SYS(shutdown(fd, SHUT_WR));
    char buf[3];
    p_read_all(fd, buf, 3);
    CHECK(memcmp(buf, "bye", 3) == 0);
    SYS(close(fd));
}

static void greet_shutdown_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    p_sleep_ms(20);
    greet_client_common(r, fd);
    p_write_all(fd, "bye", 3);
    SYS(close(fd));
}

/* A non-blocking server streams 300 KB from the moment it accepts: the
 * first bytes go early, the rest once the client answers. */
#define EARLY_STREAM (300 * 1024)

static void early_stream_server(struct p_role *r)
{
    int fd = (int)SYS(accept4(r->lfd, NULL, NULL, SOCK_NONBLOCK));
    static char buf[EARLY_STREAM];
    p_fill(buf, sizeof buf, 7);
    size_t off = 0;
    while (off < sizeof buf) {
        ssize_t n = send(fd, buf + off, sizeof buf - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        CHECK_EQ(errno, EAGAIN);
        struct pollfd w = {.fd = fd, .events = POLLOUT};
        CHECK_EQ(poll(&w, 1, 5000), 1);
    }
    SYS(shutdown(fd, SHUT_WR));
    p_barrier(r);
    SYS(close(fd));
}

/* A blocking write larger than a packet right after accept returns whole
 * (a blocking send never returns short: ftpd takes that for an error). */
static void big_write_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    static char buf[EARLY_STREAM];
    p_fill(buf, sizeof buf, 7);
    CHECK_EQ(write(fd, buf, sizeof buf), (ssize_t)sizeof buf);
    SYS(shutdown(fd, SHUT_WR));
    p_barrier(r);
    SYS(close(fd));
}

static void early_stream_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    p_sleep_ms(20);
    static char want[EARLY_STREAM], got[EARLY_STREAM];
    p_fill(want, sizeof want, 7);
    p_read_all(fd, got, sizeof got);
    CHECK(memcmp(got, want, sizeof got) == 0);
    char c;
    CHECK_EQ(read(fd, &c, 1), 0);
    p_barrier(r);
    SYS(close(fd));
}

/* ---- non-blocking connect ------------------------------------------------------ */

static void echo_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char buf[4096];
    ssize_t n;
    while ((n = SYS(read(fd, buf, sizeof buf))) > 0)
        p_write_all(fd, buf, (size_t)n);
    SYS(close(fd));
}

static void nonblocking_client(struct p_role *r)
{
    int fd = (int)SYS(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
    struct sockaddr_in to = p_loopback(r->port);
    CHECK_ERR(connect(fd, (struct sockaddr *)&to, sizeof to), EINPROGRESS);
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    CHECK_EQ(poll(&p, 1, 10000), 1);
    CHECK_EQ(p.revents, POLLOUT);
    int err = -1;
    socklen_t len = sizeof err;
    SYS(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len));
    CHECK_EQ(err, 0);
    struct sockaddr_in peer;
    len = sizeof peer;
    SYS(getpeername(fd, (struct sockaddr *)&peer, &len));
    check_v4(&peer, len, r->port);
    /* Linux reports the finished connect once (0), then EISCONN */
    if (connect(fd, (struct sockaddr *)&to, sizeof to) != 0)
        CHECK_EQ(errno, EISCONN);
    CHECK_ERR(connect(fd, (struct sockaddr *)&to, sizeof to), EISCONN);
    char out[3000], in[3000];
    p_fill(out, sizeof out, 7);
    size_t sent = 0, got = 0;
    while (got < sizeof in) {
        short ev = (short)(POLLIN | (sent < sizeof out ? POLLOUT : 0));
        p = (struct pollfd){.fd = fd, .events = ev};
        CHECK(poll(&p, 1, 10000) == 1);
        if (p.revents & POLLOUT) {
            ssize_t n = send(fd, out + sent, sizeof out - sent, 0);
            if (n < 0)
                CHECK_EQ(errno, EAGAIN);
            else
                sent += (size_t)n;
        }
        if (p.revents & POLLIN) {
            ssize_t n = recv(fd, in + got, sizeof in - got, 0);
            if (n < 0)
                CHECK_EQ(errno, EAGAIN);
            else {
                CHECK(n > 0);
                got += (size_t)n;
            }
        }
    }
    CHECK(memcmp(in, out, sizeof in) == 0);
    CHECK_ERR(recv(fd, in, sizeof in, 0), EAGAIN);
    SYS(close(fd));
}

/* ---- connection refused ------------------------------------------------------------ */

static void idle_server(struct p_role *r)
{
    p_barrier(r);
}

static void refused_client(struct p_role *r)
{
    int port = p_free_port();
    struct sockaddr_in to = p_loopback(port);
    int fd = (int)SYS(socket(AF_INET, SOCK_STREAM, 0));
    CHECK_ERR(connect(fd, (struct sockaddr *)&to, sizeof to), ECONNREFUSED);
    SYS(close(fd));

    fd = (int)SYS(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
    int rc = connect(fd, (struct sockaddr *)&to, sizeof to);
    if (rc != 0) {
        CHECK_EQ(errno, EINPROGRESS);
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        CHECK_EQ(poll(&p, 1, 10000), 1);
        CHECK(p.revents & POLLERR);
        int err = 0;
        socklen_t len = sizeof err;
        SYS(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len));
        CHECK_EQ(err, ECONNREFUSED);
    } else {
        FAILF("non-blocking connect to a closed port succeeded");
    }
    SYS(close(fd));

    /* a port whose listener was closed: refused again, also for sovia */
    int lport;
    int lfd = p_listener(&lport);
    SYS(close(lfd));
    fd = (int)SYS(socket(AF_INET, SOCK_STREAM, 0));
    to = p_loopback(lport);
    CHECK_ERR(connect(fd, (struct sockaddr *)&to, sizeof to), ECONNREFUSED);
    SYS(close(fd));
    p_barrier(r);
}

/* ---- several connections pending before accept, paired by port ----------------- */

#define NPEND 4

static void pending_server(struct p_role *r)
{
    int ports[NPEND];
    for (int i = 0; i < NPEND; i++)
        ports[i] = (int)p_get_int(r);
    for (int k = 0; k < NPEND; k++) {
        struct sockaddr_in peer;
        socklen_t len = sizeof peer;
        int fd = (int)SYS(accept(r->lfd, (struct sockaddr *)&peer, &len));
        int idx = -1;
        for (int i = 0; i < NPEND; i++)
            if (ports[i] == ntohs(peer.sin_port))
                idx = i;
        CHECK(idx >= 0);
        int got;
        p_read_all(fd, &got, sizeof got);
        CHECK_EQ(got, idx);
        got = idx * 100;
        p_write_all(fd, &got, sizeof got);
        SYS(close(fd));
    }
}

static void pending_client(struct p_role *r)
{
    int fds[NPEND];
    for (int i = 0; i < NPEND; i++) {
        fds[i] = p_connect(r->port);
        struct sockaddr_in me;
        socklen_t len = sizeof me;
        SYS(getsockname(fds[i], (struct sockaddr *)&me, &len));
        p_put_int(r, ntohs(me.sin_port));
    }
    for (int i = 0; i < NPEND; i++)
        p_write_all(fds[i], &i, sizeof i);
    for (int i = 0; i < NPEND; i++) {
        int v;
        p_read_all(fds[i], &v, sizeof v);
        CHECK_EQ(v, i * 100);
        SYS(close(fds[i]));
    }
}

/* ---- many connections in sequence -------------------------------------------------- */

#define NSEQ 20

static void seq_server(struct p_role *r)
{
    for (int i = 0; i < NSEQ; i++) {
        int fd = (int)SYS(accept(r->lfd, NULL, NULL));
        int v;
        p_read_all(fd, &v, sizeof v);
        CHECK_EQ(v, i);
        v = -i;
        p_write_all(fd, &v, sizeof v);
        SYS(close(fd));
    }
}

static void seq_client(struct p_role *r)
{
    for (int i = 0; i < NSEQ; i++) {
        int fd = p_connect(r->port);
        p_write_all(fd, &i, sizeof i);
        int v;
        p_read_all(fd, &v, sizeof v);
        CHECK_EQ(v, -i);
        char c;
        CHECK_EQ(read(fd, &c, 1), 0);
        SYS(close(fd));
    }
}

/* ---- the client does nothing on its socket for a while after connect ------------ */

static void idle_client_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    p_put_int(r, 1); /* accepted */
    char buf[5];
    p_read_all(fd, buf, 5);
    CHECK(memcmp(buf, "later", 5) == 0);
    p_write_all(fd, "ok", 2);
    SYS(close(fd));
}

static void idle_client_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    /* wait for the server's accept() without touching the socket */
    CHECK_EQ(p_get_int(r), 1);
    p_write_all(fd, "later", 5);
    char buf[2];
    p_read_all(fd, buf, 2);
    CHECK(memcmp(buf, "ok", 2) == 0);
    SYS(close(fd));
}

/* ---- IPv6 loopback ---------------------------------------------------------------- */

static int v6_listener(int *port)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    SYS(listen(fd, 8));
    socklen_t len = sizeof a;
    SYS(getsockname(fd, (struct sockaddr *)&a, &len));
    *port = ntohs(a.sin6_port);
    return fd;
}

static void v6_server(struct p_role *r)
{
    int port = 0;
    int lfd = v6_listener(&port);
    p_put_int(r, lfd < 0 ? -1 : port);
    if (lfd < 0) {
        p_log("no IPv6 loopback here: case reduced to nothing");
        return;
    }
    struct sockaddr_in6 peer;
    socklen_t len = sizeof peer;
    int fd = (int)SYS(accept(lfd, (struct sockaddr *)&peer, &len));
    CHECK_EQ(len, sizeof peer);
    CHECK(IN6_IS_ADDR_LOOPBACK(&peer.sin6_addr));
    char buf[6];
    p_read_all(fd, buf, 6);
    CHECK(memcmp(buf, "ipv6!!", 6) == 0);
    p_write_all(fd, "v6", 2);
    SYS(close(fd));
    SYS(close(lfd));
}

static void v6_client(struct p_role *r)
{
    int port = (int)p_get_int(r);
    if (port < 0)
        return;
    int fd = (int)SYS(socket(AF_INET6, SOCK_STREAM, 0));
    struct sockaddr_in6 to = {.sin6_family = AF_INET6,
                              .sin6_addr = IN6ADDR_LOOPBACK_INIT,
                              .sin6_port = htons((uint16_t)port)};
    SYS(connect(fd, (struct sockaddr *)&to, sizeof to));
    p_write_all(fd, "ipv6!!", 6);
    char buf[2];
    p_read_all(fd, buf, 2);
    CHECK(memcmp(buf, "v6", 2) == 0);
    SYS(close(fd));
}

#define NDUAL 6 /* then one more, over IPv6, with the IPv4 socket closed */

/* Listening on 127.0.0.1:port (given 0: the kernel picks) and [::1]:port,
 * IPv6 only; false when this host has no IPv6 loopback. */
static bool dual_listeners(int *port, int lfd[2])
{
    lfd[0] = (int)SYS(socket(AF_INET, SOCK_STREAM, 0));
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    SYS(bind(lfd[0], (struct sockaddr *)&a4, sizeof a4));
    socklen_t len = sizeof a4;
    SYS(getsockname(lfd[0], (struct sockaddr *)&a4, &len));
    *port = ntohs(a4.sin_port);
    lfd[1] = (int)SYS(socket(AF_INET6, SOCK_STREAM, 0));
    int one = 1;
    SYS(setsockopt(lfd[1], IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one));
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT,
                              .sin6_port = a4.sin_port};
    if (bind(lfd[1], (struct sockaddr *)&a6, sizeof a6) != 0)
        return false;
    SYS(listen(lfd[0], 8));
    SYS(listen(lfd[1], 8));
    return true;
}

static void dual_server(struct p_role *r)
{
    int port = 0, lfd[2];
    bool v6 = dual_listeners(&port, lfd);
    p_put_int(r, v6 ? port : -1);
    if (!v6) {
        p_log("no IPv6 loopback here: case reduced to nothing");
        return;
    }
    for (int n = 0; n <= NDUAL; n++) {
        if (n == NDUAL) { /* the IPv6 socket keeps the port's listener */
            SYS(close(lfd[0]));
            lfd[0] = -1;
            p_put_int(r, 1);
        }
        struct pollfd pf[2] = {{.fd = lfd[0], .events = POLLIN}, {.fd = lfd[1], .events = POLLIN}};
        CHECK(SYS(poll(pf, 2, 10000)) > 0);
        int fd = (int)SYS(accept(pf[0].revents ? lfd[0] : lfd[1], NULL, NULL));
        char buf[8];
        p_read_all(fd, buf, sizeof buf);
        p_write_all(fd, buf, sizeof buf);
        char c;
        CHECK_EQ(SYS(read(fd, &c, 1)), 0);
        SYS(close(fd));
    }
    SYS(close(lfd[1]));
}

static void dual_client(struct p_role *r)
{
    int port = (int)p_get_int(r);
    if (port < 0)
        return;
    for (int n = 0; n <= NDUAL; n++) {
        if (n == NDUAL)
            CHECK_EQ(p_get_int(r), 1); /* the IPv4 socket is closed */
        struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT,
                                  .sin6_port = htons((uint16_t)port)};
        bool v4 = n % 2 == 0 && n < NDUAL;
        int fd = (int)SYS(socket(v4 ? AF_INET : AF_INET6, SOCK_STREAM, 0));
        if (v4)
            SYS(connect(fd, (struct sockaddr *)&a4, sizeof a4));
        else
            SYS(connect(fd, (struct sockaddr *)&a6, sizeof a6));
        char out[8], in[8];
        p_fill(out, sizeof out, (uint64_t)n);
        p_write_all(fd, out, sizeof out);
        p_read_all(fd, in, sizeof in);
        CHECK(memcmp(in, out, sizeof in) == 0);
        SYS(shutdown(fd, SHUT_WR));
        SYS(close(fd));
    }
}

int main(void)
{
    p_init("establish");
    p_case("blocking", blocking_server, blocking_client, P_CARRIED);
    p_case("bound_client", blocking_server, bound_client, P_CARRIED);
    p_case("any_address_client", blocking_server, any_address_client, P_CARRIED);
    p_expect_carried(2);
    p_case("accept4_flags", accept4_server, accept4_client, P_CARRIED);
    p_case("accept4_nonblock_write_at_once", write_at_once_server, write_at_once_client,
           P_CARRIED);
    p_case("greeting_then_close", greet_close_server, greet_close_client, P_CARRIED);
    p_case("greeting_then_shutdown", greet_shutdown_server, greet_shutdown_client, P_CARRIED);
    p_case("stream_from_accept", early_stream_server, early_stream_client, P_CARRIED);
    p_case("blocking_write_from_accept", big_write_server, early_stream_client, P_CARRIED);
    p_case("nonblocking_connect", echo_server, nonblocking_client, P_CARRIED);
    p_case("refused", idle_server, refused_client, P_NO_STATS);
    p_expect_carried(NPEND);
    p_case("pending_paired_by_port", pending_server, pending_client, P_CARRIED);
    p_expect_carried(NSEQ);
    p_case("sequential", seq_server, seq_client, P_CARRIED);
    p_case("idle_client_after_connect", idle_client_server, idle_client_client, P_CARRIED);
    p_case("ipv6", v6_server, v6_client, P_CARRIED);
    p_expect_carried(NDUAL + 1);
    p_case("dual_stack", dual_server, dual_client, P_CARRIED);
    return p_done();
}
