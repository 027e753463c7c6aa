/*
 * halfclose: docs/SOCKETS.md "Closing" and the EPIPE / SIGPIPE / ECONNRESET
 * rules of "Data".
 *  - SHUT_WR: the peer reads everything then end of stream and can still
 *    send; sending after it: EPIPE, SIGPIPE unless MSG_NOSIGNAL.
 *  - SHUT_RD: reads return 0, incoming data is discarded (the peer can keep
 *    sending more than a window); SHUT_RDWR: both.
 *  - sov_close delivers everything written before it (10 MB, a slow reader),
 *    also when the writer exits right after, or exits without closing.
 *  - closing with unread data resets: ECONNRESET once, then 0 / EPIPE.
 */
#include "sharness.h"

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#define MIB (1024 * 1024)
#define TEN_MB 10000000

static volatile sig_atomic_t sigpipes;
static void on_sigpipe(int sig)
{
    (void)sig;
    sigpipes++;
}

static void count_sigpipe(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigpipe;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPIPE, &sa, NULL);
}

/* EPIPE checks for a socket whose sending side is closed. */
static void check_epipe(int fd)
{
    char b[4] = "xyz";
    int before = sigpipes;
    CHECK_ERR(sov_send(fd, b, 3, MSG_NOSIGNAL), EPIPE);
    CHECK_MSG(sigpipes == before, "SIGPIPE raised despite MSG_NOSIGNAL");
    CHECK_ERR(sov_send(fd, b, 3, 0), EPIPE);
    CHECK_MSG(sigpipes == before + 1, "sov_send -> EPIPE without MSG_NOSIGNAL: %d SIGPIPE, expected 1",
              sigpipes - before);
    CHECK_ERR(sov_write(fd, b, 3), EPIPE);
    CHECK_MSG(sigpipes == before + 2, "sov_write -> EPIPE: no SIGPIPE");
    struct iovec iov = {b, 3};
    CHECK_ERR(sov_writev(fd, &iov, 1), EPIPE);
    CHECK_MSG(sigpipes == before + 3, "sov_writev -> EPIPE: no SIGPIPE");
    CHECK_ERR(sov_send(fd, b, 3, MSG_NOSIGNAL | MSG_DONTWAIT), EPIPE);
    CHECK_MSG(sigpipes == before + 3, "SIGPIPE raised despite MSG_NOSIGNAL");
}

struct roles {
    void (*server)(int fd, int chan);
    void (*client)(int fd, int chan);
};

/* A label both ends apply first (NULL: the default configuration). */
static const char *label;

static void server_role(int chan, void *arg)
{
    const struct roles *r = arg;
    count_sigpipe();
    if (label)
        s_use_label(label);
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 1);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    SYS(sov_close(lfd));
    r->server(fd, chan);
}

static void client_role(int chan, void *arg)
{
    const struct roles *r = arg;
    count_sigpipe();
    if (label)
        s_use_label(label);
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    r->client(fd, chan);
}

/* ---- SHUT_WR ------------------------------------------------------------- */

static void shutwr_server(int fd, int chan)
{
    s_recv_pattern(fd, 1, 0, MIB);
    s_guard(5000, "sov_recv at end of stream");
    s_recv_eof(fd);
    s_recv_eof(fd);
    s_unguard();
    /* The reverse direction still works. */
    s_send_pattern(fd, 2, 0, MIB / 2, 0);
    s_want(chan, 'r');
    SYS(sov_close(fd));
}

static void shutwr_client(int fd, int chan)
{
    s_send_pattern(fd, 1, 0, MIB, 0);
    CHECK_EQ(SYS(sov_shutdown(fd, SHUT_WR)), 0);
    check_epipe(fd);
    /* A second SHUT_WR is harmless (as TCP). */
    CHECK_EQ(SYS(sov_shutdown(fd, SHUT_WR)), 0);
    s_recv_pattern(fd, 2, 0, MIB / 2);
    s_tok(chan, 'r');
    s_guard(5000, "sov_recv after the peer closed");
    s_recv_eof(fd);
    s_unguard();
    check_epipe(fd);
    SYS(sov_close(fd));
}

/* ---- SHUT_RD -------------------------------------------------------------- */

static void shutrd_server(int fd, int chan)
{
    s_want(chan, 'd');
    /* More than a window: the discarded data must not stall the sender. */
    s_guard(20000, "sending 4 MiB to a peer that shut down reading");
    s_send_pattern(fd, 3, 0, 4 * MIB, MSG_NOSIGNAL);
    s_unguard();
    s_tok(chan, 's');
    s_recv_pattern(fd, 4, 0, 5000);
    s_want(chan, 'e');
    SYS(sov_close(fd));
}

static void shutrd_client(int fd, int chan)
{
    char buf[64];
    CHECK_EQ(SYS(sov_shutdown(fd, SHUT_RD)), 0);
    s_guard(2000, "sov_recv after SHUT_RD");
    CHECK_EQ(SYS(sov_recv(fd, buf, sizeof buf, 0)), 0);
    s_unguard();
    s_tok(chan, 'd');
    /* With SOV_SINGLE, packets are handled inside sovia calls: keep calling
     * (every read must say 0) while the peer sends. */
    s_guard(30000, "sov_recv after SHUT_RD while the peer sends");
    for (;;) {
        struct pollfd p = {chan, POLLIN, 0};
        CHECK_EQ(SYS(sov_recv(fd, buf, sizeof buf, 0)), 0);
        if (poll(&p, 1, 0) == 1)
            break;
        s_sleep_ms(1);
    }
    s_want(chan, 's');
    CHECK_EQ(SYS(sov_recv(fd, buf, sizeof buf, 0)), 0);
    CHECK_EQ(SYS(sov_read(fd, buf, sizeof buf)), 0);
    s_unguard();
    /* Sending still works. */
    s_send_pattern(fd, 4, 0, 5000, 0);
    s_tok(chan, 'e');
    SYS(sov_close(fd));
}

/* With a handler thread (SOVIA_HANDLER) incoming packets are handled
 * without application calls: the reader can stay idle while the discarded
 * data flows. */
static void shutrd_idle_client(int fd, int chan)
{
    char buf[64];
    CHECK_EQ(SYS(sov_shutdown(fd, SHUT_RD)), 0);
    s_tok(chan, 'd');
    s_want(chan, 's'); /* no sovia call while the peer sends 4 MiB */
    CHECK_EQ(SYS(sov_recv(fd, buf, sizeof buf, 0)), 0);
    s_send_pattern(fd, 4, 0, 5000, 0);
    s_tok(chan, 'e');
    SYS(sov_close(fd));
}

/* ---- SHUT_RDWR ------------------------------------------------------------ */

static void shutrdwr_server(int fd, int chan)
{
    s_recv_pattern(fd, 5, 0, 1000);
    s_guard(5000, "sov_recv at end of stream after the peer's SHUT_RDWR");
    s_recv_eof(fd);
    s_unguard();
    s_want(chan, 'z');
    SYS(sov_close(fd));
}

static void shutrdwr_client(int fd, int chan)
{
    char buf[8];
    s_send_pattern(fd, 5, 0, 1000, 0);
    CHECK_EQ(SYS(sov_shutdown(fd, SHUT_RDWR)), 0);
    s_guard(2000, "sov_recv after SHUT_RDWR");
    CHECK_EQ(SYS(sov_recv(fd, buf, sizeof buf, 0)), 0);
    s_unguard();
    check_epipe(fd);
    s_tok(chan, 'z');
    SYS(sov_close(fd));
}

/* ---- close delivers what was written -------------------------------------------- */

enum close_how { CLOSE_STAY, CLOSE_EXIT, EXIT_OPEN };

static enum close_how close_mode;

static void delivered_server(int fd, int chan)
{
    /* A slow start: the writer's window fills and close finds data queued. */
    s_sleep_ms(300);
    s_guard(30000, "reading the 10 MB written before sov_close");
    s_recv_pattern(fd, 6, 0, TEN_MB);
    s_recv_eof(fd);
    s_unguard();
    s_tok(chan, 'k');
    SYS(sov_close(fd));
}

static void delivered_client(int fd, int chan)
{
    s_send_pattern(fd, 6, 0, TEN_MB, 0);
    if (close_mode == EXIT_OPEN) {
        s_log("exiting with the connection open");
        exit(0);
    }
    double t0 = s_now_ms();
    CHECK_EQ(SYS(sov_close(fd)), 0);
    s_log("sov_close returned after %.1f ms", s_now_ms() - t0);
    if (close_mode == CLOSE_EXIT)
        exit(0);
    s_want(chan, 'k');
}

/* ---- reset by closing with unread data ------------------------------------------- */

static void wait_visible(int fd, size_t n)
{
    char buf[2048];
    double t0 = s_now_ms();
    for (;;) {
        ssize_t r = sov_recv(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
        if (r == (ssize_t)n)
            return;
        CHECK_MSG(r > 0 || (r == -1 && errno == EAGAIN), "peek: %zd (%s)", r, s_errname(errno));
        CHECK_MSG(s_now_ms() - t0 < 5000, "%zu bytes not visible after 5 s", n);
        s_sleep_ms(1);
    }
}

static void reset_server(int fd, int chan)
{
    wait_visible(fd, 1000);
    s_want(chan, 'b'); /* the client is about to block in sov_recv */
    s_sleep_ms(100);
    SYS(sov_close(fd)); /* 1000 bytes unread: reset */
    s_put_f64(chan, s_now_ms());
    s_want(chan, 'q');
}

static void reset_client(int fd, int chan)
{
    char buf[64];
    s_send_pattern(fd, 7, 0, 1000, 0);
    s_tok(chan, 'b');
    s_guard(5000, "sov_recv blocked when the peer reset");
    errno = 0;
    ssize_t n = sov_recv(fd, buf, sizeof buf, 0);
    int e = errno;
    double t = s_now_ms();
    s_unguard();
    CHECK_MSG(n == -1 && e == ECONNRESET,
              "peer closed with unread data: sov_recv returned %zd (errno %s), expected ECONNRESET",
              n, s_errname(e));
    double at = s_get_f64(chan);
    s_log("ECONNRESET %.1f ms after the peer's sov_close", t - at);
    CHECK_MSG(t - at < S_DEADLINE_MS, "ECONNRESET came %.0f ms after the close", t - at);
    /* Once; then 0, and sends say EPIPE. */
    s_guard(2000, "calls after the reset");
    CHECK_EQ(SYS(sov_recv(fd, buf, sizeof buf, 0)), 0);
    CHECK_EQ(SYS(sov_recv(fd, buf, sizeof buf, MSG_DONTWAIT)), 0);
    check_epipe(fd);
    s_unguard();
    s_tok(chan, 'q');
    SYS(sov_close(fd));
}

/* The reset is first seen by a send: ECONNRESET there, then EPIPE / 0. */
static void reset_send_server(int fd, int chan)
{
    wait_visible(fd, 1000);
    SYS(sov_close(fd));
    s_tok(chan, 'c');
    s_want(chan, 'q');
}

static void reset_send_client(int fd, int chan)
{
    char buf[64];
    s_send_pattern(fd, 8, 0, 1000, 0);
    s_want(chan, 'c');
    /* Wait (without consuming anything) until the reset has arrived. */
    struct pollfd p = {fd, POLLIN, 0};
    s_guard(5000, "sov_poll for the reset");
    int r = (int)SYS(sov_poll(&p, 1, 3000));
    s_unguard();
    CHECK_MSG(r == 1, "no event within 3 s of the peer's reset");
    CHECK_MSG(p.revents & (POLLHUP | POLLERR),
              "after a reset sov_poll gave revents 0x%x, expected POLLHUP and/or POLLERR",
              p.revents);
    int before = sigpipes;
    CHECK_ERR(sov_send(fd, "abc", 3, MSG_NOSIGNAL), ECONNRESET);
    CHECK_MSG(sigpipes == before, "SIGPIPE with ECONNRESET");
    check_epipe(fd);
    CHECK_EQ(SYS(sov_recv(fd, buf, sizeof buf, 0)), 0);
    s_tok(chan, 'q');
    SYS(sov_close(fd));
}

static void run(const char *name, void (*srv)(int, int), void (*cli)(int, int))
{
    static struct roles r;
    r.server = srv;
    r.client = cli;
    if (s_case(name))
        s_run_pair("server", server_role, "client", client_role, &r);
}

int main(void)
{
    s_init("halfclose", 110);
    run("shut_wr", shutwr_server, shutwr_client);
    run("shut_rd", shutrd_server, shutrd_client);
    label = "SOVIA_HANDLER";
    run("shut_rd_handler_idle", shutrd_server, shutrd_idle_client);
    label = NULL;
    run("shut_rdwr", shutrdwr_server, shutrdwr_client);
    close_mode = CLOSE_STAY;
    run("close_delivers", delivered_server, delivered_client);
    close_mode = CLOSE_EXIT;
    run("close_then_exit", delivered_server, delivered_client);
    close_mode = EXIT_OPEN;
    run("exit_without_close", delivered_server, delivered_client);
    run("reset_unread", reset_server, reset_client);
    run("reset_seen_by_send", reset_send_server, reset_send_client);
    s_pass();
}
