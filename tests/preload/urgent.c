/*
 * urgent.c - TCP urgent data (send/recv with MSG_OOB) on a carried
 * connection, as programs use it: ftp's ABOR (tnftp sends its Telnet
 * "data mark" urgent and ftpd catches SIGURG), telnet's interrupt.
 *
 *   - urgent_byte: the client sends "ab", then "XY" with MSG_OOB, then "cd".
 *     The server, owner of its socket (F_SETOWN), gets SIGURG; poll reports
 *     POLLPRI and select the exceptional condition; recv(MSG_OOB) returns
 *     'Y' once and then EINVAL; then the stream reads "abXcd" (the urgent
 *     byte is not in it, SO_OOBINLINE being off).
 *   - urgent_inline: with SO_OOBINLINE set on the server's socket, an urgent
 *     'Z' sent alone is read in-band, before the "cd" sent after it, and
 *     recv(MSG_OOB) says EINVAL.
 * PRELOAD_TEST_KERNEL=1 checks the same on kernel TCP.
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
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

static void read_exactly(int fd, const char *want)
{
    char got[16] = {0};
    size_t n = strlen(want);
    CHECK(n < sizeof got);
    p_read_all(fd, got, n);
    if (memcmp(got, want, n) != 0)
        FAILF("the stream read \"%.*s\", want \"%s\"", (int)n, got, want);
}

/* ---- urgent_byte --------------------------------------------------------------- */

static void urgent_byte_server(struct p_role *r)
{
    struct sigaction sa = {.sa_handler = on_sigurg, .sa_flags = SA_RESTART};
    SYS(sigaction(SIGURG, &sa, NULL));
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    SYS(fcntl(fd, F_SETOWN, getpid()));
    p_barrier(r); /* we own the socket: the client may send */
    for (int ms = 0; urg_signals == 0 && ms < 2000; ms++)
        p_sleep_ms(1);
    CHECK_EQ(urg_signals, 1);

    struct pollfd p = {.fd = fd, .events = POLLPRI};
    CHECK_EQ(poll(&p, 1, 1000), 1);
    CHECK(p.revents & POLLPRI);
    fd_set ex;
    FD_ZERO(&ex);
    FD_SET(fd, &ex);
    struct timeval tv = {1, 0};
    CHECK_EQ(select(fd + 1, NULL, NULL, &ex, &tv), 1);
    CHECK(FD_ISSET(fd, &ex));

    char c = 0;
    CHECK_EQ(recv(fd, &c, 1, MSG_OOB), 1);
    CHECK_EQ(c, 'Y');
    CHECK_ERR(recv(fd, &c, 1, MSG_OOB), EINVAL); /* read already */
    /* Read before the stream passes it: TCP drops an urgent byte the
     * reader has gone past. */
    read_exactly(fd, "abXcd");
    p = (struct pollfd){.fd = fd, .events = POLLPRI};
    CHECK_EQ(poll(&p, 1, 0), 0);

    p_write_all(fd, "ok", 2); /* the connection goes on as before */
    read_exactly(fd, "bye");
    SYS(close(fd));
}

static void urgent_byte_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    p_barrier(r);
    p_write_all(fd, "ab", 2);
    CHECK_EQ(send(fd, "XY", 2, MSG_OOB), 2);
    p_write_all(fd, "cd", 2);
    read_exactly(fd, "ok");
    p_write_all(fd, "bye", 3);
    char c;
    CHECK_EQ(read(fd, &c, 1), 0);
    SYS(close(fd));
}

/* ---- urgent_inline --------------------------------------------------------------- */

static void urgent_inline_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    int on = 1;
    SYS(setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &on, sizeof on));
    int got = 0;
    socklen_t len = sizeof got;
    SYS(getsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &got, &len));
    CHECK_EQ(got, 1);
    p_barrier(r); /* the option is set: the client may send */
    p_barrier(r); /* the urgent byte is on its way */
    for (int ms = 0; ms < 2000; ms++) { /* until it arrived (kernel TCP: in-band at once) */
        struct pollfd p = {.fd = fd, .events = POLLPRI};
        if (poll(&p, 1, 0) == 1)
            break;
        p_sleep_ms(1);
    }
    char c;
    CHECK_ERR(recv(fd, &c, 1, MSG_OOB), EINVAL); /* it is in the stream */
    p_barrier(r); /* now the in-band bytes after it */
    read_exactly(fd, "Zcd");
    SYS(close(fd));
}

static void urgent_inline_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    p_barrier(r);
    CHECK_EQ(send(fd, "Z", 1, MSG_OOB), 1);
    p_barrier(r);
    p_barrier(r);
    p_write_all(fd, "cd", 2);
    char c;
    CHECK_EQ(read(fd, &c, 1), 0);
    SYS(close(fd));
}

int main(void)
{
    p_init("urgent");
    p_case("urgent_byte", urgent_byte_server, urgent_byte_client, P_CARRIED);
    p_case("urgent_inline", urgent_inline_server, urgent_inline_client, P_CARRIED);
    return p_done();
}
