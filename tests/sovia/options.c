/*
 * options: docs/SOCKETS.md "Options" and "Configuration".
 *  - TCP_NODELAY round trip, and its effect (each send one DATA packet, no
 *    combining; with combining, quick small sends share packets);
 *  - SO_RCVBUF: window = value / MTU (2..1024), get = window x MTU; set
 *    before connecting it sets the connection's window (sov_get_stats) and
 *    so how many packets the peer may send unread;
 *  - SO_SNDBUF, SO_REUSEADDR, SO_KEEPALIVE stored and returned; SO_TYPE;
 *  - SO_LINGER {1,0}: the peer's recv gets ECONNRESET; {1,t}: close waits
 *    for the exchange and everything is delivered;
 *  - SO_ERROR: the pending error, cleared by reading (POLLERR with it);
 *  - sov_config_defaults / sov_config_label (every label, Table 4) /
 *    sov_set_config ranges (EINVAL) and EBUSY for the handling strategy;
 *  - the SOVIA_* environment variables, read by a re-executed child.
 */
#include "sharness.h"

#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

extern char **environ;

#define MTU_DEFAULT 32768

static int get_int(int fd, int level, int opt)
{
    int v = -12345;
    socklen_t l = sizeof v;
    SYS(sov_getsockopt(fd, level, opt, &v, &l));
    CHECK_EQ(l, sizeof v);
    return v;
}

static void set_int(int fd, int level, int opt, int v)
{
    SYS(sov_setsockopt(fd, level, opt, &v, sizeof v));
}

static struct sov_stats stats(int fd)
{
    struct sov_stats st;
    memset(&st, 0, sizeof st);
    SYS(sov_get_stats(fd, &st));
    return st;
}

static void clear_sovia_env(void)
{
    /* Collect first: unsetenv changes environ. */
    char *names[64];
    int n = 0;
    for (char **e = environ; *e && n < 64; e++)
        if (strncmp(*e, "SOVIA_", 6) == 0 && strncmp(*e, "SOVIA_TEST_", 11) != 0) {
            size_t l = strcspn(*e, "=");
            names[n] = strndup(*e, l);
            n++;
        }
    for (int i = 0; i < n; i++) {
        unsetenv(names[i]);
        free(names[i]);
    }
}

/* ---- TCP_NODELAY and combining ------------------------------------------------ */

static void nd_server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 1);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    /* 10 x 10 bytes, a writev of 5 x 10 (TCP_NODELAY), then 10 x 10 combined. */
    s_recv_pattern(fd, 50, 0, 150);
    s_tok(chan, 'a');
    /* Combined data must arrive while the sender waits in sov_recv. */
    s_guard(5000, "reading combined small sends");
    s_recv_pattern(fd, 51, 0, 100);
    s_recv_pattern(fd, 52, 0, 10);
    s_unguard();
    s_log("combined sends arrived %.1f ms after the sender's last send",
          s_now_ms() - s_get_f64(chan));
    s_send_all(fd, "r", 1, 0);
    s_recv_eof(fd);
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
}

static void nd_client(int chan, void *arg)
{
    (void)arg;
    int fd = s_socket(AF_INET, 0);
    CHECK_EQ(get_int(fd, IPPROTO_TCP, TCP_NODELAY), 0);
    set_int(fd, IPPROTO_TCP, TCP_NODELAY, 1);
    CHECK_EQ(get_int(fd, IPPROTO_TCP, TCP_NODELAY), 1);
    set_int(fd, IPPROTO_TCP, TCP_NODELAY, 0);
    CHECK_EQ(get_int(fd, IPPROTO_TCP, TCP_NODELAY), 0);
    set_int(fd, IPPROTO_TCP, TCP_NODELAY, 5);
    CHECK_EQ(get_int(fd, IPPROTO_TCP, TCP_NODELAY), 1);
    struct sockaddr_in a;
    s_addr4(&a, (uint16_t)s_get_u64(chan));
    SYS(sov_connect(fd, (struct sockaddr *)&a, sizeof a));
    CHECK_EQ(get_int(fd, IPPROTO_TCP, TCP_NODELAY), 1);

    unsigned char buf[150];
    s_pattern_fill(buf, sizeof buf, 50, 0);
    struct sov_stats s0 = stats(fd);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(SYS(sov_send(fd, buf + 10 * i, 10, 0)), 10);
    struct sov_stats s1 = stats(fd);
    CHECK_MSG(s1.data_packets_sent - s0.data_packets_sent == 10,
              "TCP_NODELAY: 10 sends went out as %llu DATA packets",
              (unsigned long long)(s1.data_packets_sent - s0.data_packets_sent));
    CHECK_EQ(s1.combined_messages, s0.combined_messages);
    /* A writev is one send: one packet. */
    struct iovec iov[5];
    for (int i = 0; i < 5; i++) {
        iov[i].iov_base = buf + 100 + 10 * i;
        iov[i].iov_len = 10;
    }
    CHECK_EQ(SYS(sov_writev(fd, iov, 5)), 50);
    struct sov_stats s2 = stats(fd);
    uint64_t wv = s2.data_packets_sent - s1.data_packets_sent;
    s_want(chan, 'a');
    CHECK_MSG(wv == 1, "TCP_NODELAY (\"each send is a packet\"): a writev of 5 x 10 bytes went "
              "out as %llu DATA packets", (unsigned long long)wv);

    /* Combining on: quick small sends share packets. */
    set_int(fd, IPPROTO_TCP, TCP_NODELAY, 0);
    s_pattern_fill(buf, 100, 51, 0);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(SYS(sov_send(fd, buf + 10 * i, 10, 0)), 10);
    struct sov_stats s3 = stats(fd);
    CHECK_MSG(s3.data_packets_sent - s2.data_packets_sent < 10,
              "combining on: 10 quick 10-byte sends went out as %llu packets",
              (unsigned long long)(s3.data_packets_sent - s2.data_packets_sent));
    CHECK_MSG(s3.combined_messages > s2.combined_messages, "combining on: combined_messages "
              "did not grow");
    /* A small send, then waiting in sov_recv on the same socket. */
    s_pattern_fill(buf, 10, 52, 0);
    CHECK_EQ(SYS(sov_send(fd, buf, 10, 0)), 10);
    s_put_f64(chan, s_now_ms());
    char r;
    s_guard(5000, "sov_recv for the reply to a combined send");
    s_recv_all(fd, &r, 1);
    s_unguard();
    CHECK_EQ(r, 'r');
    SYS(sov_close(fd));
}

/* ---- the combining timer: a held small send goes out by itself -------------- */

static void ct_server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 1);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    s_guard(5000, "a combined send while its sender makes no sovia call");
    s_recv_pattern(fd, 53, 0, 10);
    s_unguard();
    double t = s_now_ms(), at = s_get_f64(chan);
    s_log("a held 10-byte send arrived %.1f ms after it was made (combine_ms 100)", t - at);
    CHECK_MSG(t - at < S_DEADLINE_MS, "the combining timer flushed after %.0f ms", t - at);
    s_tok(chan, 'k');
    s_recv_eof(fd);
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
}

static void ct_client(int chan, void *arg)
{
    (void)arg;
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    unsigned char b[10];
    s_pattern_fill(b, 10, 53, 0);
    s_put_f64(chan, s_now_ms());
    CHECK_EQ(SYS(sov_send(fd, b, 10, 0)), 10);
    s_want(chan, 'k'); /* no sovia call until the server has the bytes */
    SYS(sov_close(fd));
}

/* ---- SO_RCVBUF ------------------------------------------------------------------ */

static void rcvbuf_solo(int chan, void *arg)
{
    (void)chan;
    (void)arg;
    int fd = s_socket(AF_INET, 0);
    CHECK_EQ(get_int(fd, SOL_SOCKET, SO_RCVBUF), 32 * MTU_DEFAULT);
    const struct {
        int set, get;
    } t[] = {
        {4 * MTU_DEFAULT, 4 * MTU_DEFAULT},
        {100000, 3 * MTU_DEFAULT},     /* 100000 / 32768 = 3 */
        {1, 2 * MTU_DEFAULT},          /* at least 2 */
        {0, 2 * MTU_DEFAULT},
        {1 << 30, 1024 * MTU_DEFAULT}, /* at most 1024 */
        {64 * MTU_DEFAULT, 64 * MTU_DEFAULT},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        set_int(fd, SOL_SOCKET, SO_RCVBUF, t[i].set);
        int g = get_int(fd, SOL_SOCKET, SO_RCVBUF);
        CHECK_MSG(g == t[i].get, "SO_RCVBUF set %d: get %d, expected %d", t[i].set, g, t[i].get);
    }
    SYS(sov_close(fd));
}

static void rb_server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 1);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    int one = 1;
    SYS(sov_setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
    struct sov_stats st = stats(fd);
    s_log("server: window %u credits %u recv_buffers %u", st.window, st.credits, st.recv_buffers);
    /* The client does not read: how many one-byte packets fit? */
    int sent = 0;
    for (;;) {
        errno = 0;
        ssize_t w = sov_send(fd, "x", 1, MSG_DONTWAIT);
        if (w == -1 && errno == EAGAIN)
            break;
        CHECK_MSG(w == 1, "send: %zd (%s)", w, s_errname(errno));
        CHECK_MSG(++sent <= 64, "more than 64 packets to a peer with a 4-packet window");
    }
    CHECK_MSG(sent == 4, "peer's SO_RCVBUF is 4 x MTU: %d one-byte packets fit before EAGAIN, "
              "expected 4", sent);
    s_put_u64(chan, (uint64_t)sent);
    s_recv_eof(fd);
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
}

static void rb_client(int chan, void *arg)
{
    (void)arg;
    int fd = s_socket(AF_INET, 0);
    set_int(fd, SOL_SOCKET, SO_RCVBUF, 4 * MTU_DEFAULT);
    struct sockaddr_in a;
    s_addr4(&a, (uint16_t)s_get_u64(chan));
    SYS(sov_connect(fd, (struct sockaddr *)&a, sizeof a));
    CHECK_EQ(get_int(fd, SOL_SOCKET, SO_RCVBUF), 4 * MTU_DEFAULT);
    struct sov_stats st = stats(fd);
    s_log("client: window %u credits %u recv_buffers %u", st.window, st.credits,
          st.recv_buffers);
    CHECK_MSG(st.window == 4, "SO_RCVBUF 4 x MTU before connect: sov_get_stats window %u",
              st.window);
    uint64_t n = s_get_u64(chan);
    unsigned char buf[64];
    s_recv_all(fd, buf, (size_t)n);
    SYS(sov_close(fd));
}

/* ---- the two ends configured differently ------------------------------------------ */

/* arg: "w=N" or "mtu=N", applied by the client only (the server keeps the
 * defaults). Each process configures itself (environment, sov_set_config,
 * SO_RCVBUF): the ends of one connection need not agree. */
static void apply_mismatch(const char *spec)
{
    struct sov_config c;
    SYS(sov_get_config(&c));
    if (strncmp(spec, "w=", 2) == 0) {
        c.window = (unsigned)atoi(spec + 2);
        c.ack_threshold = 1;
    } else {
        c.mtu = (size_t)atol(spec + 4);
    }
    SYS(sov_set_config(&c));
}

static void mm_server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 1);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    s_guard(20000, "4 MiB each way between differently configured ends");
    s_send_pattern(fd, 70, 0, 4u << 20, 0);
    s_recv_pattern(fd, 71, 0, 4u << 20);
    s_unguard();
    s_recv_eof(fd);
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
}

static void mm_client(int chan, void *arg)
{
    apply_mismatch(arg);
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    s_guard(20000, "4 MiB each way between differently configured ends");
    s_recv_pattern(fd, 70, 0, 4u << 20);
    s_send_pattern(fd, 71, 0, 4u << 20, 0);
    s_unguard();
    SYS(sov_close(fd));
}

/* ---- stored flags, SO_TYPE --------------------------------------------------- */

static void flags_server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 1);
    CHECK_EQ(get_int(lfd, SOL_SOCKET, SO_TYPE), SOCK_STREAM);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    CHECK_EQ(get_int(fd, SOL_SOCKET, SO_TYPE), SOCK_STREAM);
    s_recv_eof(fd);
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
}

static void flags_client(int chan, void *arg)
{
    (void)arg;
    int fd = s_socket(AF_INET, 0);
    int fd6 = s_socket(AF_INET6, 0);
    CHECK_EQ(get_int(fd, SOL_SOCKET, SO_TYPE), SOCK_STREAM);
    CHECK_EQ(get_int(fd6, SOL_SOCKET, SO_TYPE), SOCK_STREAM);
    const int opts[] = {SO_REUSEADDR, SO_KEEPALIVE};
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(get_int(fd, SOL_SOCKET, opts[i]), 0);
        set_int(fd, SOL_SOCKET, opts[i], 1);
        CHECK_EQ(get_int(fd, SOL_SOCKET, opts[i]), 1);
        set_int(fd, SOL_SOCKET, opts[i], 0);
        CHECK_EQ(get_int(fd, SOL_SOCKET, opts[i]), 0);
        set_int(fd, SOL_SOCKET, opts[i], 1);
    }
    int sb0 = get_int(fd, SOL_SOCKET, SO_SNDBUF);
    s_log("default SO_SNDBUF %d", sb0);
    set_int(fd, SOL_SOCKET, SO_SNDBUF, 12345);
    CHECK_EQ(get_int(fd, SOL_SOCKET, SO_SNDBUF), 12345);
    set_int(fd, SOL_SOCKET, SO_SNDBUF, 1 << 20);
    CHECK_EQ(get_int(fd, SOL_SOCKET, SO_SNDBUF), 1 << 20);
    struct linger lg = {7, 7};
    socklen_t l = sizeof lg;
    SYS(sov_getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &l));
    CHECK_EQ(l, sizeof lg);
    CHECK_EQ(lg.l_onoff, 0);
    CHECK_EQ(lg.l_linger, 0);
    /* Stored across connect. */
    struct sockaddr_in a;
    s_addr4(&a, (uint16_t)s_get_u64(chan));
    SYS(sov_connect(fd, (struct sockaddr *)&a, sizeof a));
    CHECK_EQ(get_int(fd, SOL_SOCKET, SO_REUSEADDR), 1);
    CHECK_EQ(get_int(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
    CHECK_EQ(get_int(fd, SOL_SOCKET, SO_SNDBUF), 1 << 20);
    CHECK_EQ(get_int(fd, SOL_SOCKET, SO_TYPE), SOCK_STREAM);
    CHECK_EQ(get_int(fd, SOL_SOCKET, SO_ERROR), 0);
    SYS(sov_close(fd));
    SYS(sov_close(fd6));
}

/* ---- SO_LINGER ------------------------------------------------------------------- */

static void lg0_server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 1);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    s_recv_pattern(fd, 60, 0, 100);
    s_tok(chan, 'c');
    char b[8];
    s_guard(5000, "sov_recv when the peer closes with SO_LINGER {1,0}");
    errno = 0;
    ssize_t n = sov_recv(fd, b, sizeof b, 0);
    int e = errno;
    double t = s_now_ms();
    s_unguard();
    CHECK_MSG(n == -1 && e == ECONNRESET,
              "peer closed with SO_LINGER {1,0}: sov_recv returned %zd (errno %s), expected "
              "ECONNRESET", n, s_errname(e));
    double at = s_get_f64(chan);
    CHECK_MSG(t - at < S_DEADLINE_MS, "ECONNRESET %.0f ms after the close", t - at);
    CHECK_EQ(SYS(sov_recv(fd, b, sizeof b, 0)), 0);
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
}

static void lg0_client(int chan, void *arg)
{
    (void)arg;
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    struct linger lg = {1, 0};
    SYS(sov_setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg));
    struct linger g = {9, 9};
    socklen_t l = sizeof g;
    SYS(sov_getsockopt(fd, SOL_SOCKET, SO_LINGER, &g, &l));
    CHECK_EQ(l, sizeof g);
    CHECK_EQ(g.l_onoff, 1);
    CHECK_EQ(g.l_linger, 0);
    s_send_pattern(fd, 60, 0, 100, 0);
    s_want(chan, 'c');
    s_sleep_ms(100); /* the server is blocked in sov_recv */
    double t0 = s_now_ms();
    SYS(sov_close(fd));
    s_put_f64(chan, t0);
    s_log("sov_close with SO_LINGER {1,0} took %.1f ms", s_now_ms() - t0);
}

static void lgt_server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 1);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    s_recv_pattern(fd, 61, 0, 2u << 20);
    s_recv_eof(fd);
    /* Closing this end completes the FIN/FINACK exchange. */
    SYS(sov_close(fd));
    s_want(chan, 'd');
    SYS(sov_close(lfd));
}

static void lgt_client(int chan, void *arg)
{
    (void)arg;
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    struct linger lg = {1, 5};
    SYS(sov_setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg));
    s_send_pattern(fd, 61, 0, 2u << 20, 0);
    double t0 = s_now_ms();
    s_guard(8000, "sov_close with SO_LINGER {1,5}");
    CHECK_EQ(SYS(sov_close(fd)), 0);
    s_unguard();
    double el = s_now_ms() - t0;
    s_log("sov_close with SO_LINGER {1,5} returned after %.1f ms", el);
    /* The peer read everything and closed at once: the exchange finished
     * long before the 5 s timeout. */
    CHECK_MSG(el < 4000, "sov_close with SO_LINGER {1,5} took %.0f ms although the peer read "
              "everything and closed", el);
    s_tok(chan, 'd');
}

/* ---- SO_ERROR -------------------------------------------------------------------- */

static void err_server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 1);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    struct linger lg = {1, 0};
    SYS(sov_setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg));
    s_want(chan, 'k');
    SYS(sov_close(fd));
    s_want(chan, 'e');
    SYS(sov_close(lfd));
}

static void err_client(int chan, void *arg)
{
    (void)arg;
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    CHECK_EQ(get_int(fd, SOL_SOCKET, SO_ERROR), 0);
    s_tok(chan, 'k');
    struct pollfd p = {fd, POLLIN, 0};
    s_guard(5000, "sov_poll for the reset");
    CHECK_EQ(SYS(sov_poll(&p, 1, 3000)), 1);
    s_unguard();
    CHECK_MSG(p.revents & POLLERR, "reset: revents 0x%x without POLLERR (SO_ERROR is set)",
              p.revents);
    CHECK_MSG(p.revents & POLLHUP, "reset: revents 0x%x without POLLHUP", p.revents);
    int e = get_int(fd, SOL_SOCKET, SO_ERROR);
    CHECK_MSG(e == ECONNRESET, "SO_ERROR after a reset: %s", s_errname(e));
    CHECK_EQ(get_int(fd, SOL_SOCKET, SO_ERROR), 0);
    p.revents = 0;
    CHECK_EQ(SYS(sov_poll(&p, 1, 0)), 1);
    CHECK_MSG(!(p.revents & POLLERR), "SO_ERROR read: revents 0x%x still has POLLERR", p.revents);
    /* The error was reported by SO_ERROR: reads now say end of stream. */
    char b[4];
    errno = 0;
    ssize_t n = sov_recv(fd, b, sizeof b, 0);
    CHECK_MSG(n == 0, "after SO_ERROR took the reset, sov_recv returned %zd (errno %s), "
              "expected 0", n, s_errname(errno));
    s_tok(chan, 'e');
    SYS(sov_close(fd));
}

/* ---- configuration ------------------------------------------------------------ */

struct label_row {
    const char *label;
    enum sov_handling h;
    enum sov_copy_mode m;
    unsigned w, t;
    bool combine;
};

static const struct label_row table4[] = {
    {"SOVIA_NOTIFY", SOV_NOTIFY, SOV_REG, 1, 1, false},
    {"SOVIA_HANDLER", SOV_HANDLER, SOV_REG, 1, 1, false},
    {"SOVIA_SINGLE", SOV_SINGLE, SOV_REG, 1, 1, false},
    {"SOVIA_REG", SOV_SINGLE, SOV_REG, 1, 1, false},
    {"SOVIA_COPY", SOV_SINGLE, SOV_COPY, 1, 1, false},
    {"SOVIA_HYBRID", SOV_SINGLE, SOV_HYBRID, 1, 1, false},
    {"SOVIA_BASE", SOV_SINGLE, SOV_HYBRID, 1, 1, false},
    {"SOVIA_FLOWCNTL", SOV_SINGLE, SOV_HYBRID, 32, 1, false},
    {"SOVIA_DACKS", SOV_SINGLE, SOV_HYBRID, 32, 16, false},
    {"SOVIA_COMBINE", SOV_SINGLE, SOV_HYBRID, 32, 16, true},
};

static void check_defaults(const struct sov_config *c, const char *what)
{
    CHECK_MSG(c->window == 32 && c->ack_threshold == 16 && c->copy_threshold == 2048 &&
                  c->mtu == 32768 && c->combine && c->combine_ms == 100 &&
                  c->handling == SOV_SINGLE && c->copy_mode == SOV_HYBRID &&
                  c->wait_mode == SOV_WAIT_ADAPTIVE && c->spin_us == 50,
              "%s: w %u t %u copy_threshold %zu mtu %zu combine %d combine_ms %u handling %d "
              "copy_mode %d wait %d spin %u, expected the documented defaults",
              what, c->window, c->ack_threshold, c->copy_threshold, c->mtu, c->combine,
              c->combine_ms, c->handling, c->copy_mode, c->wait_mode, c->spin_us);
}

static int cfg_equal(const struct sov_config *a, const struct sov_config *b)
{
    return a->window == b->window && a->ack_threshold == b->ack_threshold &&
           a->copy_threshold == b->copy_threshold && a->mtu == b->mtu &&
           a->combine == b->combine && a->combine_ms == b->combine_ms &&
           a->handling == b->handling && a->copy_mode == b->copy_mode &&
           a->wait_mode == b->wait_mode && a->spin_us == b->spin_us;
}

static void labels_solo(int chan, void *arg)
{
    (void)chan;
    (void)arg;
    struct sov_config c;
    memset(&c, 0xab, sizeof c);
    sov_config_defaults(&c);
    check_defaults(&c, "sov_config_defaults");
    for (size_t i = 0; i < sizeof table4 / sizeof table4[0]; i++) {
        const struct label_row *r = &table4[i];
        /* Start from values the table does not set, and from the opposite
         * of what it sets. */
        sov_config_defaults(&c);
        c.window = 7;
        c.ack_threshold = 3;
        c.combine = !r->combine;
        c.handling = r->h == SOV_SINGLE ? SOV_HANDLER : SOV_SINGLE;
        c.copy_mode = r->m == SOV_COPY ? SOV_REG : SOV_COPY;
        c.mtu = 65536;
        c.copy_threshold = 4096;
        c.combine_ms = 7;
        c.wait_mode = SOV_WAIT_POLL;
        c.spin_us = 9;
        CHECK_EQ(SYS(sov_config_label(&c, r->label)), 0);
        CHECK_MSG(c.handling == r->h && c.copy_mode == r->m && c.window == r->w &&
                      c.ack_threshold == r->t && c.combine == r->combine,
                  "%s: handling %d copy_mode %d w %u t %u combine %d, expected %d %d %u %u %d",
                  r->label, c.handling, c.copy_mode, c.window, c.ack_threshold, c.combine, r->h,
                  r->m, r->w, r->t, r->combine);
        CHECK_MSG(c.mtu == 65536 && c.copy_threshold == 4096 && c.combine_ms == 7 &&
                      c.wait_mode == SOV_WAIT_POLL && c.spin_us == 9,
                  "%s changed fields outside Table 4 (mtu %zu copy_threshold %zu combine_ms %u "
                  "wait %d spin %u)",
                  r->label, c.mtu, c.copy_threshold, c.combine_ms, c.wait_mode, c.spin_us);
    }
    struct sov_config before;
    sov_config_defaults(&c);
    before = c;
    CHECK_ERR(sov_config_label(&c, "SOVIA_BOGUS"), EINVAL);
    CHECK_ERR(sov_config_label(&c, ""), EINVAL);
    CHECK_ERR(sov_config_label(&c, "COMBINE"), EINVAL);
    CHECK_MSG(cfg_equal(&c, &before), "a rejected label changed the configuration");
}

static void setcfg_solo(int chan, void *arg)
{
    (void)chan;
    (void)arg;
    clear_sovia_env();
    struct sov_config c, cur;
    SYS(sov_get_config(&c));
    check_defaults(&c, "sov_get_config with no SOVIA_* variables");
    struct sov_config base = c;

    struct {
        const char *what;
        unsigned w, t;
        size_t mtu, ct;
        int h, m, wm;
    } bad[] = {
        {"t > w", 4, 5, 32768, 2048, SOV_SINGLE, SOV_HYBRID, SOV_WAIT_ADAPTIVE},
        {"t = 0", 4, 0, 32768, 2048, SOV_SINGLE, SOV_HYBRID, SOV_WAIT_ADAPTIVE},
        {"w = 0", 0, 0, 32768, 2048, SOV_SINGLE, SOV_HYBRID, SOV_WAIT_ADAPTIVE},
        {"w = 1025", 1025, 16, 32768, 2048, SOV_SINGLE, SOV_HYBRID, SOV_WAIT_ADAPTIVE},
        {"mtu = 255", 32, 16, 255, 128, SOV_SINGLE, SOV_HYBRID, SOV_WAIT_ADAPTIVE},
        {"mtu = 4 MiB + 1", 32, 16, (4u << 20) + 1, 2048, SOV_SINGLE, SOV_HYBRID,
         SOV_WAIT_ADAPTIVE},
        {"mtu = 0", 32, 16, 0, 0, SOV_SINGLE, SOV_HYBRID, SOV_WAIT_ADAPTIVE},
        {"copy_threshold > mtu", 32, 16, 4096, 4097, SOV_SINGLE, SOV_HYBRID, SOV_WAIT_ADAPTIVE},
        {"handling 7", 32, 16, 32768, 2048, 7, SOV_HYBRID, SOV_WAIT_ADAPTIVE},
        {"copy_mode 9", 32, 16, 32768, 2048, SOV_SINGLE, 9, SOV_WAIT_ADAPTIVE},
        {"wait_mode 9", 32, 16, 32768, 2048, SOV_SINGLE, SOV_HYBRID, 9},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = base;
        c.window = bad[i].w;
        c.ack_threshold = bad[i].t;
        c.mtu = bad[i].mtu;
        c.copy_threshold = bad[i].ct;
        c.handling = (enum sov_handling)bad[i].h;
        c.copy_mode = (enum sov_copy_mode)bad[i].m;
        c.wait_mode = (enum sov_wait_mode)bad[i].wm;
        errno = 0;
        int r = sov_set_config(&c);
        CHECK_MSG(r == -1 && errno == EINVAL, "sov_set_config with %s returned %d (errno %s), "
                  "expected EINVAL", bad[i].what, r, s_errname(errno));
        SYS(sov_get_config(&cur));
        CHECK_MSG(cfg_equal(&cur, &base), "a rejected sov_set_config (%s) changed the "
                  "configuration", bad[i].what);
    }
    /* The edges are valid. */
    struct {
        unsigned w, t;
        size_t mtu, ct;
    } good[] = {{1024, 1024, 4u << 20, 4u << 20}, {1, 1, 256, 256}, {1024, 1, 256, 0},
                {8, 8, 65536, 1000}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        c = base;
        c.window = good[i].w;
        c.ack_threshold = good[i].t;
        c.mtu = good[i].mtu;
        c.copy_threshold = good[i].ct;
        c.combine = i & 1;
        c.combine_ms = 3 + (unsigned)i;
        c.copy_mode = (enum sov_copy_mode)(i % 3);
        c.wait_mode = (enum sov_wait_mode)((i + 1) % 3);
        c.spin_us = 10 * (unsigned)i;
        errno = 0;
        int r = sov_set_config(&c);
        CHECK_MSG(r == 0, "sov_set_config(w %u t %u mtu %zu copy_threshold %zu) returned %d "
                  "(errno %s)", good[i].w, good[i].t, good[i].mtu, good[i].ct, r,
                  s_errname(errno));
        SYS(sov_get_config(&cur));
        CHECK_MSG(cfg_equal(&cur, &c), "sov_get_config does not return what was set (case %zu)",
                  i);
    }
    /* The last one (w 8, mtu 65536) applies to sockets created now. */
    int fd = s_socket(AF_INET, 0);
    CHECK_EQ(get_int(fd, SOL_SOCKET, SO_RCVBUF), 8 * 65536);
    /* After the first socket the handling strategy is fixed. */
    c = cur;
    c.handling = SOV_HANDLER;
    CHECK_ERR(sov_set_config(&c), EBUSY);
    SYS(sov_get_config(&cur));
    CHECK_EQ(cur.handling, SOV_SINGLE);
    /* Other changes still apply, to sockets created afterwards only. */
    c = cur;
    c.window = 16;
    c.ack_threshold = 4;
    c.mtu = 32768;
    c.copy_threshold = 2048;
    CHECK_EQ(SYS(sov_set_config(&c)), 0);
    int fd2 = s_socket(AF_INET, 0);
    CHECK_EQ(get_int(fd2, SOL_SOCKET, SO_RCVBUF), 16 * 32768);
    CHECK_EQ(get_int(fd, SOL_SOCKET, SO_RCVBUF), 8 * 65536);
    SYS(sov_close(fd));
    SYS(sov_close(fd2));
}

/* ---- environment variables (re-executed child) ---------------------------------- */

struct env_case {
    const char *name;
    const char *vars[12];
    /* expected: w t ct mtu combine cms handling copy wait spin */
    const char *expect;
};

static const struct env_case env_cases[] = {
    {"none", {NULL}, "32 16 2048 32768 1 100 0 0 0 50"},
    {"all",
     {"SOVIA_WINDOW=8", "SOVIA_ACK_THRESHOLD=4", "SOVIA_COPY_THRESHOLD=1000", "SOVIA_MTU=65536",
      "SOVIA_COMBINE=0", "SOVIA_COMBINE_MS=7", "SOVIA_HANDLING=handler", "SOVIA_COPY_MODE=copy",
      "SOVIA_WAIT=block", "SOVIA_SPIN_US=9", NULL},
     "8 4 1000 65536 0 7 1 1 2 9"},
    {"modes", {"SOVIA_HANDLING=notify", "SOVIA_COPY_MODE=reg", "SOVIA_WAIT=poll", NULL},
     "32 16 2048 32768 1 100 2 2 1 50"},
    {"label", {"SOVIA_CONFIG=SOVIA_FLOWCNTL", NULL}, "32 1 2048 32768 0 100 0 0 0 50"},
    {"label_then_vars",
     {"SOVIA_CONFIG=SOVIA_BASE", "SOVIA_WINDOW=4", "SOVIA_ACK_THRESHOLD=2", "SOVIA_COMBINE=1",
      NULL},
     "4 2 2048 32768 1 100 0 0 0 50"},
    {"label_handler", {"SOVIA_CONFIG=SOVIA_HANDLER", "SOVIA_COPY_MODE=hybrid", NULL},
     "1 1 2048 32768 0 100 1 0 0 50"},
};

static void env_exec(int chan, void *arg)
{
    (void)chan;
    const struct env_case *ec = arg;
    clear_sovia_env();
    for (int i = 0; ec->vars[i]; i++)
        CHECK(putenv((char *)ec->vars[i]) == 0);
    char *argv[] = {"options", "--env-child", (char *)ec->name, (char *)ec->expect, NULL};
    execve("/proc/self/exe", argv, environ);
    FAILF("execve(/proc/self/exe): %s", strerror(errno));
}

static int env_child(const char *name, const char *expect)
{
    s_init("options", 30);
    s_case(name);
    unsigned w, t, comb, cms, h, m, wm, spin;
    size_t ct, mtu;
    CHECK(sscanf(expect, "%u %u %zu %zu %u %u %u %u %u %u", &w, &t, &ct, &mtu, &comb, &cms, &h,
                 &m, &wm, &spin) == 10);
    struct sov_config c;
    SYS(sov_get_config(&c));
    CHECK_MSG(c.window == w && c.ack_threshold == t && c.copy_threshold == ct && c.mtu == mtu &&
                  c.combine == (comb != 0) && c.combine_ms == cms && (unsigned)c.handling == h &&
                  (unsigned)c.copy_mode == m && (unsigned)c.wait_mode == wm && c.spin_us == spin,
              "environment case %s: got \"%u %u %zu %zu %d %u %d %d %d %u\", expected \"%s\" "
              "(w t copy_threshold mtu combine combine_ms handling copy_mode wait spin)",
              name, c.window, c.ack_threshold, c.copy_threshold, c.mtu, c.combine, c.combine_ms,
              c.handling, c.copy_mode, c.wait_mode, c.spin_us, expect);
    /* New sockets get it. */
    int fd = s_socket(AF_INET, 0);
    int rb = get_int(fd, SOL_SOCKET, SO_RCVBUF);
    CHECK_MSG((size_t)rb == (size_t)w * mtu, "environment case %s: SO_RCVBUF %d, expected w x "
              "mtu = %zu", name, rb, (size_t)w * mtu);
    SYS(sov_close(fd));
    s_log("sov_get_config matches");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--env-child") == 0)
        return env_child(argv[2], argv[3]);
    s_init("options", 100);
    if (s_case("nodelay"))
        s_run_pair("server", nd_server, "client", nd_client, NULL);
    if (s_case("combine_timer"))
        s_run_pair("server", ct_server, "client", ct_client, NULL);
    if (s_case("rcvbuf_values"))
        s_run_solo("solo", rcvbuf_solo, NULL);
    if (s_case("rcvbuf_window"))
        s_run_pair("server", rb_server, "client", rb_client, NULL);
    if (s_case("window_mismatch"))
        s_run_pair("server", mm_server, "client", mm_client, "w=1");
    if (s_case("mtu_mismatch"))
        s_run_pair("server", mm_server, "client", mm_client, "mtu=65536");
    if (s_case("stored_flags"))
        s_run_pair("server", flags_server, "client", flags_client, NULL);
    if (s_case("linger_reset"))
        s_run_pair("server", lg0_server, "client", lg0_client, NULL);
    if (s_case("linger_timeout"))
        s_run_pair("server", lgt_server, "client", lgt_client, NULL);
    if (s_case("so_error"))
        s_run_pair("server", err_server, "client", err_client, NULL);
    if (s_case("labels"))
        s_run_solo("solo", labels_solo, NULL);
    if (s_case("set_config"))
        s_run_solo("solo", setcfg_solo, NULL);
    for (size_t i = 0; i < sizeof env_cases / sizeof env_cases[0]; i++) {
        char nm[64];
        snprintf(nm, sizeof nm, "env_%s", env_cases[i].name);
        if (s_case(nm))
            s_run_solo("exec", env_exec, (void *)&env_cases[i]);
    }
    s_pass();
}
