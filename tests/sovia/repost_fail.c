/*
 * repost_fail: a read over several receive buffers whose repost the
 * provider refuses midway (VipPostRecv fails with the VI still connected:
 * sov_conn_abort resets the connection from inside the read, in copy_out's
 * general loop, and drops what is unread). The read returns the bytes it
 * copied before; the next one says ECONNRESET. Before, copy_out took the
 * bytes it had copied off the count of unread bytes the reset had set to
 * 0: it wrapped, the socket looked readable for ever with nothing queued,
 * and the next sov_recv spun without end.
 *
 * The provider's refusal is made here: this executable's VipPostRecv
 * stands in front of libvipl's (the sockets library calls it through the
 * dynamic linker) and fails once when told to.
 */
#define _GNU_SOURCE 1
#include "sharness.h"

#include <dlfcn.h>
#include <netinet/tcp.h>
#include <stdatomic.h>

#include <vipl.h>

static atomic_bool fail_next;

VIP_RETURN VipPostRecv(VIP_VI_HANDLE vi, VIP_DESCRIPTOR *d, VIP_MEM_HANDLE mh)
{
    static VIP_RETURN (*real)(VIP_VI_HANDLE, VIP_DESCRIPTOR *, VIP_MEM_HANDLE);
    if (!real)
        real = (VIP_RETURN(*)(VIP_VI_HANDLE, VIP_DESCRIPTOR *, VIP_MEM_HANDLE))dlsym(
            RTLD_NEXT, "VipPostRecv");
    if (atomic_exchange(&fail_next, false))
        return VIP_ERROR_RESOURCE;
    return real(vi, d, mh);
}

enum { PACKETS = 4, PACKET = 100 };

static void server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 4);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    s_want(chan, 's');
    char buf[PACKETS * PACKET];
    /* Every packet waits in our buffers (a peek takes none off). */
    s_guard(5000, "the packets to come");
    while (sov_recv(fd, buf, sizeof buf, MSG_PEEK) != (ssize_t)sizeof buf)
        s_sleep_ms(1);
    s_unguard();
    atomic_store(&fail_next, true);
    s_guard(5000, "sov_recv over refused reposts");
    ssize_t n = sov_recv(fd, buf, sizeof buf, 0);
    s_unguard();
    CHECK_MSG(!atomic_load(&fail_next), "no repost was refused: the read took another way");
    CHECK_MSG(n > 0 && n % PACKET == 0 && n < (ssize_t)sizeof buf,
              "the read that reset returned %zd (errno %s), want the bytes copied before",
              n, s_errname(errno));
    for (ssize_t i = 0; i < n; i++)
        CHECK_MSG(buf[i] == (char)(i / PACKET + 1), "byte %zd is %d", i, buf[i]);
    s_guard(5000, "sov_recv after the reset");
    errno = 0;
    ssize_t m = sov_recv(fd, buf, sizeof buf, 0);
    s_unguard();
    CHECK_MSG(m == -1 && errno == ECONNRESET, "the next read returned %zd (errno %s), want ECONNRESET",
              m, s_errname(errno));
    s_log("read %zd bytes, then ECONNRESET", n);
    s_tok(chan, 'd');
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
}

static void client(int chan, void *arg)
{
    (void)arg;
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    int one = 1;
    SYS(sov_setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one)); /* a packet each */
    char p[PACKET];
    for (int k = 0; k < PACKETS; k++) {
        memset(p, k + 1, sizeof p);
        s_send_all(fd, p, sizeof p, 0);
    }
    s_tok(chan, 's');
    s_want(chan, 'd');
    sov_close(fd);
}

int main(void)
{
    s_init("repost_fail", 60);
    if (s_case("refused_mid_read"))
        s_run_pair("server", server, "client", client, NULL);
    s_pass();
}
