/*
 * urgent.c - TCP urgent data (send/recv with MSG_OOB) on a carried
 * connection, as programs use it: ftp's ABOR (tnftp sends its Telnet
 * "data mark" urgent, ftpd catches SIGURG and reads up to the mark),
 * telnet's interrupt. The client sends "ab", then "XY" with MSG_OOB (Y is
 * the urgent byte), then "cd".
 *
 *   - urgent_byte: the server, owner of its socket (F_SETOWN), gets
 *     SIGURG; poll reports POLLPRI and select the exceptional condition; a
 *     read stops at the mark ("abX"), where SIOCATMARK says so;
 *     recv(MSG_OOB) returns 'Y' once, then EINVAL; the next read passes
 *     over it ("cd").
 *   - urgent_inline: with SO_OOBINLINE the urgent byte stays in the stream:
 *     recv(MSG_OOB) says EINVAL, a read still stops at the mark ("abX"),
 *     and the next one reads "Ycd".
 *   - urgent_inline_inherited: the same with SO_OOBINLINE set on the
 *     listening socket, which the accepted one inherits.
 *   - urgent_peek: MSG_PEEK stops at the mark too, and at the mark peeks
 *     past the urgent byte ("cd"), which the next read then takes.
 *   - urgent_replaced: a second urgent byte before the reader came to the
 *     first: the newer mark counts, the older byte is in band ("aXYz":
 *     a read gives "aX", MSG_OOB 'Y', the next read "z").
 * PRELOAD_TEST_KERNEL=1 checks the same on kernel TCP.
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pharness.h"

static volatile sig_atomic_t urg_signals;

static void on_sigurg(int sig)
{
    (void)sig;
    urg_signals++;
}

/* One read, which must return exactly `want`. */
static void read_once(int fd, const char *want, int flags)
{
    char got[16] = {0};
    ssize_t n = SYS(recv(fd, got, sizeof got, flags));
    if ((size_t)n != strlen(want) || memcmp(got, want, (size_t)n) != 0)
        FAILF("a read (flags %#x) returned \"%.*s\", want \"%s\"", flags, (int)n, got, want);
}

static int at_mark(int fd)
{
    int at = -1;
    SYS(ioctl(fd, SIOCATMARK, &at));
    return at;
}

static bool pri_now(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLPRI};
    return SYS(poll(&p, 1, 0)) == 1 && (p.revents & POLLPRI);
}

/* Until POLLPRI (at most 2 s): the urgent byte is here. */
static void await_urgent(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLPRI};
    CHECK_EQ(poll(&p, 1, 2000), 1);
    CHECK(p.revents & POLLPRI);
}

/* Until `n` bytes are unread (FIONREAD), at most 2 s. */
static void await_unread(int fd, int n)
{
    int have = 0;
    for (int ms = 0; ms < 2000; ms++) {
        SYS(ioctl(fd, FIONREAD, &have));
        if (have >= n)
            return;
        p_sleep_ms(1);
    }
    FAILF("%d bytes unread after 2 s, want %d", have, n);
}

static int accept_owned(struct p_role *r)
{
    struct sigaction sa = {.sa_handler = on_sigurg, .sa_flags = SA_RESTART};
    SYS(sigaction(SIGURG, &sa, NULL));
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    SYS(fcntl(fd, F_SETOWN, getpid()));
    return fd;
}

/* "ab", urgent "XY", "cd"; then the server's "ok"; then end. */
static void abxycd_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    p_barrier(r); /* the server is ready */
    p_write_all(fd, "ab", 2);
    CHECK_EQ(send(fd, "XY", 2, MSG_OOB), 2);
    p_write_all(fd, "cd", 2);
    p_barrier(r); /* all sent */
    char ok[2];
    p_read_all(fd, ok, 2);
    CHECK(memcmp(ok, "ok", 2) == 0);
    char c;
    CHECK_EQ(read(fd, &c, 1), 0);
    SYS(close(fd));
}

static void finish(int fd)
{
    CHECK(!pri_now(fd));
    p_write_all(fd, "ok", 2); /* the connection goes on as before */
    SYS(close(fd));
}

/* ---- urgent_byte ---------------------------------------------------------- */

static void urgent_byte_server(struct p_role *r)
{
    int fd = accept_owned(r);
    p_barrier(r);
    p_barrier(r);
    await_urgent(fd);
    for (int ms = 0; urg_signals == 0 && ms < 2000; ms++)
        p_sleep_ms(1);
    CHECK_EQ(urg_signals, 1);
    fd_set ex;
    FD_ZERO(&ex);
    FD_SET(fd, &ex);
    struct timeval tv = {1, 0};
    CHECK_EQ(select(fd + 1, NULL, NULL, &ex, &tv), 1);
    CHECK(FD_ISSET(fd, &ex));
    CHECK_EQ(at_mark(fd), 0);
    await_unread(fd, 5); /* "abX", Y, "cd" */
    read_once(fd, "abX", 0);
    CHECK_EQ(at_mark(fd), 1);
    char c = 0;
    CHECK_EQ(recv(fd, &c, 1, MSG_OOB), 1);
    CHECK_EQ(c, 'Y');
    CHECK_ERR(recv(fd, &c, 1, MSG_OOB), EINVAL); /* taken */
    CHECK(!pri_now(fd));
    CHECK_EQ(at_mark(fd), 1);
    read_once(fd, "cd", 0);
    CHECK_EQ(at_mark(fd), 0);
    finish(fd);
}

/* ---- urgent_inline -------------------------------------------------------- */

static bool inline_on_listener; /* set before accept(), which inherits it */

static void urgent_inline_server(struct p_role *r)
{
    int on = 1;
    if (inline_on_listener)
        SYS(setsockopt(r->lfd, SOL_SOCKET, SO_OOBINLINE, &on, sizeof on));
    int fd = accept_owned(r);
    if (!inline_on_listener)
        SYS(setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &on, sizeof on));
    p_barrier(r);
    p_barrier(r);
    await_urgent(fd); /* POLLPRI in band too */
    char c;
    CHECK_ERR(recv(fd, &c, 1, MSG_OOB), EINVAL); /* it is in the stream */
    await_unread(fd, 6);
    read_once(fd, "abX", 0);
    CHECK_EQ(at_mark(fd), 1);
    read_once(fd, "Ycd", 0);
    CHECK_EQ(at_mark(fd), 0);
    finish(fd);
}

/* ---- urgent_peek ---------------------------------------------------------- */

static void inherited_inline_server(struct p_role *r)
{
    inline_on_listener = true;
    urgent_inline_server(r);
}

static void urgent_peek_server(struct p_role *r)
{
    int fd = accept_owned(r);
    p_barrier(r);
    p_barrier(r);
    await_urgent(fd);
    await_unread(fd, 5);
    read_once(fd, "abX", MSG_PEEK);
    read_once(fd, "abX", 0);
    read_once(fd, "cd", MSG_PEEK); /* past the urgent byte, which stays */
    char c = 0;
    CHECK_EQ(recv(fd, &c, 1, MSG_OOB | MSG_PEEK), 1);
    CHECK_EQ(c, 'Y');
    CHECK(pri_now(fd)); /* a peek does not take it */
    CHECK_EQ(recv(fd, &c, 1, MSG_OOB), 1);
    CHECK_EQ(c, 'Y');
    read_once(fd, "cd", 0);
    finish(fd);
}

/* ---- urgent_replaced ------------------------------------------------------ */

static void replaced_server(struct p_role *r)
{
    int fd = accept_owned(r);
    p_barrier(r);
    p_barrier(r); /* "a", urgent "X", urgent "Y", "z" all sent */
    await_urgent(fd);
    await_unread(fd, 3); /* "aX", Y, "z" */
    read_once(fd, "aX", 0);
    CHECK_EQ(at_mark(fd), 1);
    char c = 0;
    CHECK_EQ(recv(fd, &c, 1, MSG_OOB), 1);
    CHECK_EQ(c, 'Y');
    read_once(fd, "z", 0);
    finish(fd);
}

static void replaced_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    p_barrier(r);
    p_write_all(fd, "a", 1);
    CHECK_EQ(send(fd, "X", 1, MSG_OOB), 1);
    CHECK_EQ(send(fd, "Y", 1, MSG_OOB), 1);
    p_write_all(fd, "z", 1);
    p_barrier(r);
    char ok[2];
    p_read_all(fd, ok, 2);
    char c;
    CHECK_EQ(read(fd, &c, 1), 0);
    SYS(close(fd));
}

int main(void)
{
    p_init("urgent");
    p_case("urgent_byte", urgent_byte_server, abxycd_client, P_CARRIED);
    p_case("urgent_inline", urgent_inline_server, abxycd_client, P_CARRIED);
    p_case("urgent_inline_inherited", inherited_inline_server, abxycd_client, P_CARRIED);
    p_case("urgent_peek", urgent_peek_server, abxycd_client, P_CARRIED);
    p_case("urgent_replaced", replaced_server, replaced_client, P_CARRIED);
    return p_done();
}
