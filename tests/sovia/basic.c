/*
 * basic: socket / bind / listen / accept / connect / send / recv round trip,
 * getsockname / getpeername, and the errno of every error case of
 * docs/SOCKETS.md "Sockets and addresses", "Connecting" and "Options"
 * (unknown option, short optlen), plus EBADF / ENOTSOCK for descriptors
 * that are not sovia sockets.
 */
#include "sharness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static void check_addr4(const struct sockaddr_in *a, socklen_t len, uint16_t port,
                        const char *what)
{
    CHECK_MSG(len == sizeof(struct sockaddr_in), "%s: addrlen %u, expected %zu", what,
              (unsigned)len, sizeof(struct sockaddr_in));
    CHECK_MSG(a->sin_family == AF_INET, "%s: family %d", what, a->sin_family);
    CHECK_MSG(a->sin_addr.s_addr == htonl(INADDR_LOOPBACK), "%s: address %s, expected 127.0.0.1",
              what, inet_ntoa(a->sin_addr));
    if (port)
        CHECK_MSG(ntohs(a->sin_port) == port, "%s: port %u, expected %u", what,
                  ntohs(a->sin_port), port);
}

static void check_ephemeral(uint16_t port, const char *what)
{
    CHECK_MSG(port >= 49152, "%s: port %u is not in 49152-65535", what, port);
}

/* ---- roundtrip ------------------------------------------------------------ */

static void rt_server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 16);
    CHECK(sov_is_socket(lfd));
    check_ephemeral(port, "listener");
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    SYS(sov_getsockname(lfd, (struct sockaddr *)&a, &alen));
    check_addr4(&a, alen, port, "getsockname(listener)");
    s_put_u64(chan, port);

    memset(&a, 0xee, sizeof a);
    alen = sizeof a;
    int fd = (int)SYS(sov_accept(lfd, (struct sockaddr *)&a, &alen));
    CHECK(sov_is_socket(fd));
    CHECK(fd != lfd);
    uint16_t cport = (uint16_t)s_get_u64(chan);
    check_addr4(&a, alen, cport, "sov_accept's address");
    alen = sizeof a;
    SYS(sov_getpeername(fd, (struct sockaddr *)&a, &alen));
    check_addr4(&a, alen, cport, "getpeername(accepted)");
    alen = sizeof a;
    SYS(sov_getsockname(fd, (struct sockaddr *)&a, &alen));
    check_addr4(&a, alen, port, "getsockname(accepted)");

    char buf[16] = {0};
    s_recv_all(fd, buf, 4);
    CHECK(memcmp(buf, "ping", 4) == 0);
    CHECK_EQ(SYS(sov_write(fd, "pong!", 5)), 5);
    /* A larger message both ways through read/write. */
    unsigned char *big = malloc(100000);
    CHECK(big);
    s_recv_pattern(fd, 7, 0, 100000);
    s_pattern_fill(big, 100000, 8, 0);
    CHECK_EQ(SYS(sov_write(fd, big, 100000)), 100000);
    free(big);
    s_recv_eof(fd);
    CHECK_EQ(SYS(sov_close(fd)), 0);
    CHECK(!sov_is_socket(fd));
    CHECK_EQ(SYS(sov_close(lfd)), 0);
    CHECK(!sov_is_socket(lfd));
}

static void rt_client(int chan, void *arg)
{
    (void)arg;
    uint16_t port = (uint16_t)s_get_u64(chan);
    int fd = s_socket(AF_INET, 0);
    /* Unbound: getsockname gives 0.0.0.0:0, as TCP. */
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    memset(&a, 0xee, sizeof a);
    SYS(sov_getsockname(fd, (struct sockaddr *)&a, &alen));
    CHECK_EQ(alen, sizeof a);
    CHECK_EQ(a.sin_family, AF_INET);
    CHECK_EQ(a.sin_port, 0);
    CHECK_EQ(a.sin_addr.s_addr, 0);

    struct sockaddr_in to;
    s_addr4(&to, port);
    CHECK_EQ(SYS(sov_connect(fd, (struct sockaddr *)&to, sizeof to)), 0);
    /* Connecting unbound picks a port as port 0 does. */
    alen = sizeof a;
    SYS(sov_getsockname(fd, (struct sockaddr *)&a, &alen));
    check_addr4(&a, alen, 0, "getsockname(client)");
    uint16_t cport = ntohs(a.sin_port);
    check_ephemeral(cport, "client's implicit port");
    CHECK(cport != port);
    s_put_u64(chan, cport);
    alen = sizeof a;
    SYS(sov_getpeername(fd, (struct sockaddr *)&a, &alen));
    check_addr4(&a, alen, port, "getpeername(client)");

    /* Truncation: *addrlen 4 gets 4 bytes and the full size back. */
    unsigned char small[sizeof(struct sockaddr_in)];
    memset(small, 0xee, sizeof small);
    alen = 4;
    SYS(sov_getsockname(fd, (struct sockaddr *)small, &alen));
    CHECK_EQ(alen, sizeof(struct sockaddr_in));
    struct sockaddr_in full;
    alen = sizeof full;
    SYS(sov_getsockname(fd, (struct sockaddr *)&full, &alen));
    CHECK(memcmp(small, &full, 4) == 0);
    for (size_t i = 4; i < sizeof small; i++)
        CHECK_MSG(small[i] == 0xee, "getsockname wrote byte %zu past a 4-byte addrlen", i);

    CHECK_EQ(SYS(sov_send(fd, "ping", 4, 0)), 4);
    char buf[8] = {0};
    size_t got = 0;
    while (got < 5) {
        ssize_t n = sov_read(fd, buf + got, 5 - got);
        CHECK_MSG(n > 0, "sov_read returned %zd (errno %s)", n, s_errname(errno));
        got += (size_t)n;
    }
    CHECK(memcmp(buf, "pong!", 5) == 0);
    s_send_pattern(fd, 7, 0, 100000, 0);
    s_recv_pattern(fd, 8, 0, 100000);
    CHECK_EQ(SYS(sov_close(fd)), 0);
}

/* ---- sockets: sov_socket arguments and flags --------------------------------- */

static void sockets_solo(int chan, void *arg)
{
    (void)chan;
    (void)arg;
    CHECK_ERR(sov_socket(AF_UNIX, SOCK_VIA, 0), EAFNOSUPPORT);
    CHECK_ERR(sov_socket(AF_PACKET, SOCK_VIA, 0), EAFNOSUPPORT);
    CHECK_ERR(sov_socket(AF_INET, SOCK_STREAM, 0), EINVAL);
    CHECK_ERR(sov_socket(AF_INET, SOCK_DGRAM, 0), EINVAL);
    CHECK_ERR(sov_socket(AF_INET, 13, 0), EINVAL);
    CHECK_ERR(sov_socket(AF_INET, SOCK_VIA, IPPROTO_UDP), EPROTONOSUPPORT);
    CHECK_ERR(sov_socket(AF_INET6, SOCK_VIA, IPPROTO_SCTP), EPROTONOSUPPORT);
    /* A stray kernel socket() call with SOCK_VIA fails. */
    errno = 0;
    int k = socket(AF_INET, SOCK_VIA, 0);
    CHECK_MSG(k == -1, "kernel socket(AF_INET, SOCK_VIA, 0) succeeded");

    int a = (int)SYS(sov_socket(AF_INET, SOCK_VIA, 0));
    int b = (int)SYS(sov_socket(AF_INET, SOCK_VIA, IPPROTO_TCP));
    int c = (int)SYS(sov_socket(AF_INET6, SOCK_VIA, 0));
    int d = (int)SYS(sov_socket(AF_INET6, SOCK_VIA, IPPROTO_TCP));
    CHECK(a != b && a != c && a != d && b != c && b != d && c != d);
    CHECK(sov_is_socket(a) && sov_is_socket(b) && sov_is_socket(c) && sov_is_socket(d));
    int fl = (int)SYS(sov_fcntl(a, F_GETFL));
    CHECK_MSG(!(fl & O_NONBLOCK), "a new socket is non-blocking");
    int fdfl = (int)SYS(sov_fcntl(a, F_GETFD));
    CHECK_MSG(!(fdfl & FD_CLOEXEC), "a new socket is close-on-exec");
    /* The placeholder is a real descriptor: its number is taken. */
    CHECK_MSG(fcntl(a, F_GETFD) >= 0, "descriptor %d of a sovia socket is not open", a);

    int nb = (int)SYS(sov_socket(AF_INET, SOCK_VIA | SOCK_NONBLOCK, 0));
    CHECK_MSG(SYS(sov_fcntl(nb, F_GETFL)) & O_NONBLOCK, "SOCK_NONBLOCK not reflected by F_GETFL");
    CHECK_MSG(!(SYS(sov_fcntl(nb, F_GETFD)) & FD_CLOEXEC), "SOCK_NONBLOCK set FD_CLOEXEC");
    int ce = (int)SYS(sov_socket(AF_INET, SOCK_VIA | SOCK_CLOEXEC, 0));
    CHECK_MSG(SYS(sov_fcntl(ce, F_GETFD)) & FD_CLOEXEC, "SOCK_CLOEXEC not reflected by F_GETFD");
    CHECK_MSG(fcntl(ce, F_GETFD) & FD_CLOEXEC, "SOCK_CLOEXEC: the descriptor itself is not FD_CLOEXEC");
    CHECK_MSG(!(SYS(sov_fcntl(ce, F_GETFL)) & O_NONBLOCK), "SOCK_CLOEXEC set O_NONBLOCK");
    int both = (int)SYS(sov_socket(AF_INET6, SOCK_VIA | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    CHECK(SYS(sov_fcntl(both, F_GETFL)) & O_NONBLOCK);
    CHECK(SYS(sov_fcntl(both, F_GETFD)) & FD_CLOEXEC);

    /* F_SETFL / F_SETFD round trip; other commands EINVAL. */
    SYS(sov_fcntl(a, F_SETFL, O_NONBLOCK));
    CHECK(SYS(sov_fcntl(a, F_GETFL)) & O_NONBLOCK);
    SYS(sov_fcntl(a, F_SETFL, 0));
    CHECK(!(SYS(sov_fcntl(a, F_GETFL)) & O_NONBLOCK));
    SYS(sov_fcntl(a, F_SETFD, FD_CLOEXEC));
    CHECK(SYS(sov_fcntl(a, F_GETFD)) & FD_CLOEXEC);
    SYS(sov_fcntl(a, F_SETFD, 0));
    CHECK(!(SYS(sov_fcntl(a, F_GETFD)) & FD_CLOEXEC));
    CHECK_ERR(sov_fcntl(a, F_DUPFD, 0), EINVAL);
    CHECK_ERR(sov_fcntl(a, F_GETLK, NULL), EINVAL);

    int p[2];
    CHECK(pipe(p) == 0);
    CHECK(!sov_is_socket(p[0]));
    CHECK(!sov_is_socket(-1));
    CHECK(!sov_is_socket(0));
    int ints[] = {a, b, c, d, nb, ce, both};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        CHECK_EQ(SYS(sov_close(ints[i])), 0);
        CHECK(!sov_is_socket(ints[i]));
    }
    close(p[0]);
    close(p[1]);
}

/* ---- bind ------------------------------------------------------------------ */

static void bind_solo(int chan, void *arg)
{
    (void)chan;
    (void)arg;
    struct sockaddr_in a;
    int s1 = s_socket(AF_INET, 0);
    s_addr4(&a, 0);
    CHECK_EQ(SYS(sov_bind(s1, (struct sockaddr *)&a, sizeof a)), 0);
    uint16_t port = s_local_port(s1);
    check_ephemeral(port, "bind to port 0");
    /* Binding twice. */
    CHECK_ERR(sov_bind(s1, (struct sockaddr *)&a, sizeof a), EINVAL);
    struct sockaddr_in same;
    s_addr4(&same, port);
    CHECK_ERR(sov_bind(s1, (struct sockaddr *)&same, sizeof same), EINVAL);

    /* Another socket of this process on the same port. */
    int s2 = s_socket(AF_INET, 0);
    CHECK_ERR(sov_bind(s2, (struct sockaddr *)&same, sizeof same), EADDRINUSE);
    /* IPv4 and IPv6 share one port namespace (dual stack). */
    int s6 = s_socket(AF_INET6, 0);
    struct sockaddr_in6 a6;
    s_addr6(&a6, port);
    CHECK_ERR(sov_bind(s6, (struct sockaddr *)&a6, sizeof a6), EADDRINUSE);
    /* The failed binds left s2 and s6 unbound: they can take other ports. */
    s_addr4(&a, 0);
    SYS(sov_bind(s2, (struct sockaddr *)&a, sizeof a));
    CHECK(s_local_port(s2) != port);
    check_ephemeral(s_local_port(s2), "s2");
    s_addr6(&a6, 0);
    SYS(sov_bind(s6, (struct sockaddr *)&a6, sizeof a6));
    check_ephemeral(s_local_port(s6), "s6");
    CHECK(s_local_port(s6) != port && s_local_port(s6) != s_local_port(s2));

    /* Family, length and address errors. */
    int s3 = s_socket(AF_INET, 0);
    s_addr6(&a6, 0);
    CHECK_ERR(sov_bind(s3, (struct sockaddr *)&a6, sizeof a6), EAFNOSUPPORT);
    s_addr4(&a, 0);
    CHECK_ERR(sov_bind(s3, (struct sockaddr *)&a, sizeof a - 1), EINVAL);
    CHECK_ERR(sov_bind(s3, (struct sockaddr *)&a, 2), EINVAL);
    struct sockaddr_in far;
    s_addr4(&far, 0);
    far.sin_addr.s_addr = htonl(0xc0000201); /* 192.0.2.1, TEST-NET-1: not this host */
    CHECK_ERR(sov_bind(s3, (struct sockaddr *)&far, sizeof far), EADDRNOTAVAIL);
    int s4 = s_socket(AF_INET6, 0);
    struct sockaddr_in6 far6;
    s_addr6(&far6, 0);
    CHECK(inet_pton(AF_INET6, "2001:db8::1", &far6.sin6_addr) == 1);
    CHECK_ERR(sov_bind(s4, (struct sockaddr *)&far6, sizeof far6), EADDRNOTAVAIL);
    /* After all those failures s3 still binds. */
    SYS(sov_bind(s3, (struct sockaddr *)&a, sizeof a));

    /* Closing the holder frees the port. */
    SYS(sov_close(s1));
    int s5 = s_socket(AF_INET, 0);
    CHECK_EQ(SYS(sov_bind(s5, (struct sockaddr *)&same, sizeof same)), 0);
    CHECK_EQ(s_local_port(s5), port);
    SYS(sov_close(s2));
    SYS(sov_close(s3));
    SYS(sov_close(s4));
    SYS(sov_close(s5));
    SYS(sov_close(s6));
}

/* ---- bind_other_process: ports are per user, not per process ----------------- */

static void bop_holder(int chan, void *arg)
{
    (void)arg;
    int fd = s_socket(AF_INET, 0);
    struct sockaddr_in a;
    s_addr4(&a, 0);
    SYS(sov_bind(fd, (struct sockaddr *)&a, sizeof a));
    s_put_u64(chan, s_local_port(fd));
    s_want(chan, '1');
    SYS(sov_listen(fd, 4));
    s_tok(chan, 'L');
    s_want(chan, '2');
    SYS(sov_close(fd));
    s_tok(chan, 'C');
    s_want(chan, '3');
}

static void bop_other(int chan, void *arg)
{
    (void)arg;
    uint16_t port = (uint16_t)s_get_u64(chan);
    struct sockaddr_in a;
    s_addr4(&a, port);
    int fd = s_socket(AF_INET, 0);
    /* Bound (not listening) in the other process. */
    CHECK_ERR(sov_bind(fd, (struct sockaddr *)&a, sizeof a), EADDRINUSE);
    struct sockaddr_in6 a6;
    s_addr6(&a6, port);
    int fd6 = s_socket(AF_INET6, 0);
    CHECK_ERR(sov_bind(fd6, (struct sockaddr *)&a6, sizeof a6), EADDRINUSE);
    s_tok(chan, '1');
    s_want(chan, 'L');
    /* Listening in the other process. */
    CHECK_ERR(sov_bind(fd, (struct sockaddr *)&a, sizeof a), EADDRINUSE);
    s_tok(chan, '2');
    s_want(chan, 'C');
    /* Closed there: free here. */
    CHECK_EQ(SYS(sov_bind(fd, (struct sockaddr *)&a, sizeof a)), 0);
    CHECK_EQ(s_local_port(fd), port);
    s_tok(chan, '3');
    SYS(sov_close(fd));
    SYS(sov_close(fd6));
}

/* ---- refused: nobody listening, another host ------------------------------ */

static void refused_solo(int chan, void *arg)
{
    (void)chan;
    (void)arg;
    struct sockaddr_in a;
    /* A port bound but not listening. */
    int bound = s_socket(AF_INET, 0);
    s_addr4(&a, 0);
    SYS(sov_bind(bound, (struct sockaddr *)&a, sizeof a));
    uint16_t p1 = s_local_port(bound);
    /* A port that was taken and freed. */
    int tmp = s_socket(AF_INET, 0);
    SYS(sov_bind(tmp, (struct sockaddr *)&a, sizeof a));
    uint16_t p2 = s_local_port(tmp);
    SYS(sov_close(tmp));
    /* A port that listened and closed. */
    uint16_t p3;
    int l = s_listener(AF_INET, &p3, 1);
    SYS(sov_close(l));

    uint16_t ports[3] = {p1, p2, p3};
    for (int i = 0; i < 3; i++) {
        int fd = s_socket(AF_INET, 0);
        s_addr4(&a, ports[i]);
        s_guard(5000, "sov_connect to a port nobody listens on");
        CHECK_ERR(sov_connect(fd, (struct sockaddr *)&a, sizeof a), ECONNREFUSED);
        s_unguard();
        CHECK_ERR(sov_getpeername(fd, (struct sockaddr *)&a, &(socklen_t){sizeof a}), ENOTCONN);
        SYS(sov_close(fd));
    }
    int fd6 = s_socket(AF_INET6, 0);
    struct sockaddr_in6 a6;
    s_addr6(&a6, p2);
    CHECK_ERR(sov_connect(fd6, (struct sockaddr *)&a6, sizeof a6), ECONNREFUSED);
    SYS(sov_close(fd6));

    /* Another host: the shm provider reaches only this one (the fabric
     * provider reaches it: tests/sovia/hosts.c). */
    const char *prov = getenv("SOVIA_PROVIDER");
    if (!prov || !*prov)
        prov = getenv("SOVIA_VIPL_DEVICE");
    if (!prov || strncmp(prov, "fabric", 6) != 0) {
        int fd = s_socket(AF_INET, 0);
        s_addr4(&a, 80);
        a.sin_addr.s_addr = htonl(0xc0000201);
        s_guard(5000, "sov_connect to another host");
        CHECK_ERR(sov_connect(fd, (struct sockaddr *)&a, sizeof a), ENETUNREACH);
        s_unguard();
        SYS(sov_close(fd));
    }
    SYS(sov_close(bound));
}

/* ---- state errors: EISCONN, ENOTCONN, EINVAL ------------------------------- */

static int sigpipes;
static void on_sigpipe(int sig)
{
    (void)sig;
    sigpipes++;
}

static void unconnected_checks(int fd, const char *what, int listening)
{
    char buf[8] = "abcdefg";
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    s_log("EPIPE / ENOTCONN checks on %s", what);
    /* As kernel TCP: sending on a socket that never connected is EPIPE
     * (with SIGPIPE unless MSG_NOSIGNAL); receiving is ENOTCONN. */
    CHECK_ERR(sov_send(fd, buf, 4, MSG_NOSIGNAL), EPIPE);
    CHECK_EQ(sigpipes, 0);
    CHECK_ERR(sov_send(fd, buf, 4, 0), EPIPE);
    CHECK_ERR(sov_write(fd, buf, 4), EPIPE);
    struct iovec iov = {buf, 4};
    CHECK_ERR(sov_writev(fd, &iov, 1), EPIPE);
    CHECK_MSG(sigpipes == 3, "SIGPIPE raised %d times for 3 sends without MSG_NOSIGNAL", sigpipes);
    sigpipes = 0;
    CHECK_ERR(sov_recv(fd, buf, sizeof buf, 0), ENOTCONN);
    CHECK_ERR(sov_recv(fd, buf, sizeof buf, MSG_DONTWAIT), ENOTCONN);
    CHECK_ERR(sov_read(fd, buf, sizeof buf), ENOTCONN);
    CHECK_ERR(sov_readv(fd, &iov, 1), ENOTCONN);
    CHECK_ERR(sov_getpeername(fd, (struct sockaddr *)&a, &alen), ENOTCONN);
    if (!listening) { /* (kernel TCP: shutdown of a listener stops it; not covered) */
        CHECK_ERR(sov_shutdown(fd, SHUT_WR), ENOTCONN);
        CHECK_ERR(sov_shutdown(fd, SHUT_RDWR), ENOTCONN);
    }
    CHECK_MSG(sigpipes == 0, "SIGPIPE raised for a send on %s", what);
}

static void st_server(int chan, void *arg)
{
    (void)arg;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigpipe;
    sigaction(SIGPIPE, &sa, NULL);

    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 8);
    s_put_u64(chan, port);
    unconnected_checks(lfd, "a listening socket", 1);

    /* accept on sockets that are not listening. */
    int fresh = s_socket(AF_INET, 0);
    CHECK_ERR(sov_accept(fresh, NULL, NULL), EINVAL);
    CHECK_ERR(sov_accept4(fresh, NULL, NULL, SOCK_NONBLOCK), EINVAL);
    unconnected_checks(fresh, "a new socket", 0);
    struct sockaddr_in a;
    s_addr4(&a, 0);
    SYS(sov_bind(fresh, (struct sockaddr *)&a, sizeof a));
    CHECK_ERR(sov_accept(fresh, NULL, NULL), EINVAL);
    unconnected_checks(fresh, "a bound socket", 0);
    /* accept4 with a bad flag. */
    CHECK_ERR(sov_accept4(lfd, NULL, NULL, 0x40000000), EINVAL);

    int fd = s_accept(lfd);
    CHECK_ERR(sov_accept(fd, NULL, NULL), EINVAL);
    CHECK_ERR(sov_listen(fd, 4), EINVAL);
    s_recv_eof(fd);
    SYS(sov_close(fd));
    SYS(sov_close(fresh));
    SYS(sov_close(lfd));
}

static void st_client(int chan, void *arg)
{
    (void)arg;
    uint16_t port = (uint16_t)s_get_u64(chan);
    int fd = s_connect(AF_INET, port);
    struct sockaddr_in a;
    s_addr4(&a, port);
    CHECK_ERR(sov_connect(fd, (struct sockaddr *)&a, sizeof a), EISCONN);
    CHECK_ERR(sov_listen(fd, 4), EINVAL);
    CHECK_ERR(sov_accept(fd, NULL, NULL), EINVAL);
    s_addr4(&a, 0);
    CHECK_ERR(sov_bind(fd, (struct sockaddr *)&a, sizeof a), EINVAL);
    CHECK_ERR(sov_shutdown(fd, 7), EINVAL);
    CHECK_ERR(sov_shutdown(fd, -1), EINVAL);
    /* Still usable. */
    SYS(sov_close(fd));
}

/* ---- not_sovia: EBADF / ENOTSOCK ------------------------------------------ */

static void not_sovia_calls(int fd, int want)
{
    struct sockaddr_in a;
    s_addr4(&a, 1);
    socklen_t alen = sizeof a;
    char buf[4] = "abc";
    int one = 1;
    socklen_t ol = sizeof one;
    CHECK_ERR(sov_bind(fd, (struct sockaddr *)&a, sizeof a), want);
    CHECK_ERR(sov_listen(fd, 1), want);
    CHECK_ERR(sov_accept(fd, NULL, NULL), want);
    CHECK_ERR(sov_accept4(fd, NULL, NULL, 0), want);
    CHECK_ERR(sov_connect(fd, (struct sockaddr *)&a, sizeof a), want);
    CHECK_ERR(sov_send(fd, buf, 1, MSG_NOSIGNAL), want);
    CHECK_ERR(sov_recv(fd, buf, 1, MSG_DONTWAIT), want);
    CHECK_ERR(sov_shutdown(fd, SHUT_RDWR), want);
    CHECK_ERR(sov_getsockname(fd, (struct sockaddr *)&a, &alen), want);
    CHECK_ERR(sov_getpeername(fd, (struct sockaddr *)&a, &alen), want);
    CHECK_ERR(sov_setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one), want);
    CHECK_ERR(sov_getsockopt(fd, SOL_SOCKET, SO_TYPE, &one, &ol), want);
    struct sov_stats st;
    CHECK_MSG(sov_get_stats(fd, &st) == -1, "sov_get_stats succeeded on descriptor %d", fd);
    CHECK(!sov_is_socket(fd));
}

static void not_sovia_solo(int chan, void *arg)
{
    (void)chan;
    (void)arg;
    s_log("EBADF: -1, a closed number, a closed sovia socket");
    not_sovia_calls(-1, EBADF);
    int p[2];
    CHECK(pipe(p) == 0);
    int closed = p[1];
    close(closed);
    not_sovia_calls(closed, EBADF);
    int sfd = s_socket(AF_INET, 0);
    SYS(sov_close(sfd));
    CHECK_MSG(fcntl(sfd, F_GETFD) == -1, "a closed sovia socket's descriptor %d is still open",
              sfd);
    not_sovia_calls(sfd, EBADF);
    CHECK_ERR(sov_close(sfd), EBADF);
    CHECK_ERR(sov_close(-1), EBADF);

    s_log("ENOTSOCK: a pipe, /dev/null, a regular file");
    not_sovia_calls(p[0], ENOTSOCK);
    int dn = open("/dev/null", O_RDWR);
    CHECK(dn >= 0);
    not_sovia_calls(dn, ENOTSOCK);
    int rf = open("/proc/self/status", O_RDONLY);
    CHECK(rf >= 0);
    not_sovia_calls(rf, ENOTSOCK);
    /* A sovia socket's number reused by an ordinary descriptor. */
    int s2 = s_socket(AF_INET, 0);
    SYS(sov_close(s2));
    int re = open("/dev/null", O_RDONLY);
    CHECK(re >= 0);
    if (re == s2)
        not_sovia_calls(re, ENOTSOCK);
    close(re);
    close(rf);
    close(dn);
    close(p[0]);
}

/* ---- sockopt errors ----------------------------------------------------- */

static void sockopt_solo(int chan, void *arg)
{
    (void)chan;
    (void)arg;
    int fd = s_socket(AF_INET, 0);
    int v = 1;
    socklen_t ol = sizeof v;
    CHECK_ERR(sov_getsockopt(fd, SOL_SOCKET, 9999, &v, &ol), ENOPROTOOPT);
    ol = sizeof v;
    CHECK_ERR(sov_getsockopt(fd, IPPROTO_TCP, 9999, &v, &ol), ENOPROTOOPT);
    ol = sizeof v;
    CHECK_ERR(sov_getsockopt(fd, 9999, 1, &v, &ol), ENOPROTOOPT);
    CHECK_ERR(sov_setsockopt(fd, SOL_SOCKET, 9999, &v, sizeof v), ENOPROTOOPT);
    CHECK_ERR(sov_setsockopt(fd, IPPROTO_TCP, 9999, &v, sizeof v), ENOPROTOOPT);
    CHECK_ERR(sov_setsockopt(fd, 9999, 1, &v, sizeof v), ENOPROTOOPT);
    /* optlen too small: truncated, as the kernel does. */
    ol = 2;
    v = 0;
    SYS(sov_getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &ol));
    CHECK_EQ(ol, 2);
    ol = 2;
    SYS(sov_getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &ol));
    CHECK_EQ(ol, 2);
    CHECK_ERR(sov_setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, 2), EINVAL);
    CHECK_ERR(sov_setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, 0), EINVAL);
    struct linger lg = {1, 0};
    CHECK_ERR(sov_setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(int)), EINVAL);
    ol = sizeof(int);
    SYS(sov_getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &ol));
    CHECK_EQ(ol, sizeof(int));
    /* A valid one still works. */
    ol = sizeof v;
    v = -1;
    SYS(sov_getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &ol));
    CHECK_EQ(v, SOCK_STREAM);
    CHECK_EQ(ol, sizeof v);
    SYS(sov_close(fd));
}

/* ---- backlog: at most `backlog` connections wait; closing refuses them -------- */

static void bl_server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 2);
    s_put_u64(chan, port);
    s_want(chan, 'A'); /* three connects done: two waiting, one refused */
    int fd1 = s_accept(lfd);
    s_tok(chan, 'a');
    s_want(chan, 'B'); /* a fourth took the freed place */
    SYS(sov_close(lfd));
    s_tok(chan, 'c');
    CHECK_EQ(SYS(sov_send(fd1, "x", 1, 0)), 1);
    s_recv_eof(fd1);
    SYS(sov_close(fd1));

    /* Backlog 0 means 1. */
    uint16_t port0;
    int l0 = s_listener(AF_INET, &port0, 0);
    s_put_u64(chan, port0);
    s_want(chan, 'D');
    SYS(sov_close(l0));
}

static void bl_client(int chan, void *arg)
{
    (void)arg;
    uint16_t port = (uint16_t)s_get_u64(chan);
    int c1 = s_connect(AF_INET, port);
    int c2 = s_connect(AF_INET, port);
    int c3 = s_socket(AF_INET, 0);
    struct sockaddr_in a;
    s_addr4(&a, port);
    s_guard(5000, "sov_connect beyond the backlog");
    CHECK_ERR(sov_connect(c3, (struct sockaddr *)&a, sizeof a), ECONNREFUSED);
    s_unguard();
    SYS(sov_close(c3));
    s_tok(chan, 'A');
    s_want(chan, 'a');
    int c4 = s_connect(AF_INET, port);
    s_tok(chan, 'B');
    s_want(chan, 'c');
    /* c2 and c4 were waiting to be accepted when the listener closed. */
    int pending[2] = {c2, c4};
    for (int i = 0; i < 2; i++) {
        char ch;
        double t0 = s_now_ms();
        s_guard(5000, "sov_recv on a refused pending connection");
        errno = 0;
        ssize_t n = sov_recv(pending[i], &ch, 1, 0);
        int e = errno;
        s_unguard();
        CHECK_MSG(n == 0 || (n == -1 && e == ECONNRESET),
                  "recv on a pending connection of a closed listener returned %zd (errno %s), "
                  "expected ECONNRESET or 0",
                  n, s_errname(e));
        CHECK_MSG(s_now_ms() - t0 < S_DEADLINE_MS, "took %.0f ms", s_now_ms() - t0);
        SYS(sov_close(pending[i]));
    }
    int c5 = s_socket(AF_INET, 0);
    CHECK_ERR(sov_connect(c5, (struct sockaddr *)&a, sizeof a), ECONNREFUSED);
    SYS(sov_close(c5));
    /* The accepted connection is unaffected. */
    char ch = 0;
    s_recv_all(c1, &ch, 1);
    CHECK_EQ(ch, 'x');
    SYS(sov_close(c1));

    uint16_t port0 = (uint16_t)s_get_u64(chan);
    int d1 = s_connect(AF_INET, port0);
    int d2 = s_socket(AF_INET, 0);
    s_addr4(&a, port0);
    s_guard(5000, "sov_connect beyond backlog 1");
    CHECK_ERR(sov_connect(d2, (struct sockaddr *)&a, sizeof a), ECONNREFUSED);
    s_unguard();
    s_tok(chan, 'D');
    SYS(sov_close(d1));
    SYS(sov_close(d2));
}

/* ---- any_addr: a listener on INADDR_ANY accepts 127.0.0.1 -------------------- */

static void any_server(int chan, void *arg)
{
    (void)arg;
    int lfd = s_socket(AF_INET, 0);
    struct sockaddr_in a;
    s_addr4(&a, 0);
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    SYS(sov_bind(lfd, (struct sockaddr *)&a, sizeof a));
    SYS(sov_listen(lfd, 4));
    socklen_t alen = sizeof a;
    SYS(sov_getsockname(lfd, (struct sockaddr *)&a, &alen));
    CHECK_EQ(a.sin_addr.s_addr, htonl(INADDR_ANY));
    uint16_t port = ntohs(a.sin_port);
    check_ephemeral(port, "INADDR_ANY listener");
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    alen = sizeof a;
    SYS(sov_getsockname(fd, (struct sockaddr *)&a, &alen));
    check_addr4(&a, alen, port, "getsockname(accepted from an INADDR_ANY listener)");
    char b[3];
    s_recv_all(fd, b, 3);
    CHECK(memcmp(b, "any", 3) == 0);
    s_recv_eof(fd);
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
}

static void any_client(int chan, void *arg)
{
    (void)arg;
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    s_send_all(fd, "any", 3, 0);
    SYS(sov_close(fd));
}

/* ---- ipv6 ------------------------------------------------------------------- */

static void v6_server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET6, &port, 4);
    check_ephemeral(port, "IPv6 listener");
    s_put_u64(chan, port);
    struct sockaddr_in6 a;
    socklen_t alen = sizeof a;
    int fd = (int)SYS(sov_accept(lfd, (struct sockaddr *)&a, &alen));
    CHECK_EQ(alen, sizeof(struct sockaddr_in6));
    CHECK_EQ(a.sin6_family, AF_INET6);
    CHECK(memcmp(&a.sin6_addr, &in6addr_loopback, 16) == 0);
    CHECK_EQ(ntohs(a.sin6_port), s_get_u64(chan));
    alen = sizeof a;
    SYS(sov_getsockname(fd, (struct sockaddr *)&a, &alen));
    CHECK_EQ(alen, sizeof(struct sockaddr_in6));
    CHECK(memcmp(&a.sin6_addr, &in6addr_loopback, 16) == 0);
    CHECK_EQ(ntohs(a.sin6_port), port);
    s_recv_pattern(fd, 66, 0, 50000);
    s_send_pattern(fd, 67, 0, 50000, 0);
    s_recv_eof(fd);
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
}

static void v6_client(int chan, void *arg)
{
    (void)arg;
    uint16_t port = (uint16_t)s_get_u64(chan);
    int fd = s_connect(AF_INET6, port);
    s_put_u64(chan, s_local_port(fd));
    struct sockaddr_in6 a;
    socklen_t alen = sizeof a;
    SYS(sov_getpeername(fd, (struct sockaddr *)&a, &alen));
    CHECK_EQ(alen, sizeof(struct sockaddr_in6));
    CHECK(memcmp(&a.sin6_addr, &in6addr_loopback, 16) == 0);
    CHECK_EQ(ntohs(a.sin6_port), port);
    s_send_pattern(fd, 66, 0, 50000, 0);
    s_recv_pattern(fd, 67, 0, 50000);
    SYS(sov_close(fd));
}

int main(void)
{
    s_init("basic", 100);
    if (s_case("roundtrip"))
        s_run_pair("server", rt_server, "client", rt_client, NULL);
    if (s_case("sockets"))
        s_run_solo("solo", sockets_solo, NULL);
    if (s_case("bind"))
        s_run_solo("solo", bind_solo, NULL);
    if (s_case("bind_other_process"))
        s_run_pair("holder", bop_holder, "other", bop_other, NULL);
    if (s_case("refused"))
        s_run_solo("solo", refused_solo, NULL);
    if (s_case("state_errors"))
        s_run_pair("server", st_server, "client", st_client, NULL);
    if (s_case("not_sovia"))
        s_run_solo("solo", not_sovia_solo, NULL);
    if (s_case("sockopt_errors"))
        s_run_solo("solo", sockopt_solo, NULL);
    if (s_case("backlog"))
        s_run_pair("server", bl_server, "client", bl_client, NULL);
    if (s_case("any_addr"))
        s_run_pair("server", any_server, "client", any_client, NULL);
    if (s_case("ipv6"))
        s_run_pair("server", v6_server, "client", v6_client, NULL);
    s_pass();
}
