/*
 * batch.c - the less common data calls on a carried socket, each against
 * the ordinary calls at the other end (so bytes the kernel socket took
 * instead would never arrive): sendmmsg / recvmmsg (MSG_WAITFORONE,
 * MSG_DONTWAIT, the timeout), preadv2 / pwritev2 at offset -1 (RWF_NOWAIT;
 * ESPIPE at an offset), splice both ways through a pipe (1 MiB, byte-exact;
 * ESPIPE, EINVAL, EAGAIN), epoll_pwait2, and the fortified _chk entry
 * points this file is built to call (_FORTIFY_SOURCE=2: read, recv,
 * recvfrom, poll, ppoll).
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "pharness.h"

static void wait_in(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    CHECK_EQ(poll(&p, 1, 10000), 1);
}

/* ---- sendmmsg / recvmmsg ------------------------------------------------------ */

#define MSGS 5
#define MSG_BYTES 700

static void mmsg_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char want[MSGS * MSG_BYTES], got[MSGS * MSG_BYTES];
    /* sendmmsg -> read */
    p_fill(want, sizeof want, 31);
    p_read_all(fd, got, sizeof got);
    CHECK(memcmp(got, want, sizeof want) == 0);

    /* write -> recvmmsg */
    struct mmsghdr v[8];
    char bufs[8][400];
    struct iovec iv[8];
    memset(v, 0, sizeof v);
    for (int i = 0; i < 8; i++) {
        iv[i] = (struct iovec){bufs[i], sizeof bufs[i]};
        v[i].msg_hdr.msg_iov = &iv[i];
        v[i].msg_hdr.msg_iovlen = 1;
    }
    CHECK_ERR(recvmmsg(fd, v, 8, MSG_DONTWAIT, NULL), EAGAIN);
    struct timespec bad = {0, 1000000000L};
    CHECK_ERR(recvmmsg(fd, v, 8, 0, &bad), EINVAL);
    p_put_int(r, 1);
    p_fill(want, 2000, 32);
    size_t have = 0;
    while (have < 2000) {
        wait_in(fd);
        int n = (int)SYS(recvmmsg(fd, v, 8, MSG_WAITFORONE, NULL));
        CHECK(n >= 1 && n <= 8);
        for (int i = 0; i < n; i++) {
            CHECK(v[i].msg_len <= sizeof bufs[i] && have + v[i].msg_len <= 2000);
            CHECK(memcmp(bufs[i], want + have, v[i].msg_len) == 0);
            have += v[i].msg_len;
        }
    }
    /* with a timeout: it is looked at after each message, and counts down */
    p_put_int(r, 2);
    wait_in(fd);
    struct timespec t = {5, 0};
    int n = (int)SYS(recvmmsg(fd, v, 1, 0, &t));
    CHECK_EQ(n, 1);
    CHECK_EQ(v[0].msg_len, 10);
    CHECK(t.tv_sec <= 5 && (t.tv_sec < 5 || t.tv_nsec == 0) && t.tv_sec >= 4);
    SYS(close(fd));
}

static void mmsg_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    char data[MSGS * MSG_BYTES];
    p_fill(data, sizeof data, 31);
    struct mmsghdr v[MSGS];
    struct iovec iv[MSGS][2];
    memset(v, 0, sizeof v);
    for (int i = 0; i < MSGS; i++) {
        char *m = data + i * MSG_BYTES;
        iv[i][0] = (struct iovec){m, 100};
        iv[i][1] = (struct iovec){m + 100, MSG_BYTES - 100};
        v[i].msg_hdr.msg_iov = iv[i];
        v[i].msg_hdr.msg_iovlen = 2;
    }
    CHECK_EQ(sendmmsg(fd, v, MSGS, 0), MSGS);
    for (int i = 0; i < MSGS; i++)
        CHECK_EQ(v[i].msg_len, MSG_BYTES);
    CHECK_EQ(p_get_int(r), 1);
    p_fill(data, 2000, 32);
    p_write_all(fd, data, 2000);
    CHECK_EQ(p_get_int(r), 2);
    p_write_all(fd, "0123456789", 10);
    SYS(close(fd));
}

/* ---- preadv2 / pwritev2 ------------------------------------------------------- */

static void rwv2_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char want[300], got[300];
    /* pwritev2 -> read */
    p_fill(want, 300, 41);
    p_read_all(fd, got, 300);
    CHECK(memcmp(got, want, 300) == 0);
    /* write -> preadv2 */
    char a[50], b[250];
    struct iovec iv[2] = {{a, sizeof a}, {b, sizeof b}};
    CHECK_ERR(preadv2(fd, iv, 2, -1, RWF_NOWAIT), EAGAIN);
    CHECK_ERR(preadv2(fd, iv, 2, 0, 0), ESPIPE);
    p_put_int(r, 1);
    p_fill(want, 300, 42);
    size_t have = 0;
    while (have < 300) {
        wait_in(fd);
        struct iovec rest[2] = {{a, sizeof a}, {b, sizeof b}};
        ssize_t n = SYS(preadv2(fd, rest, 2, -1, 0));
        CHECK(n > 0);
        char joined[300];
        memcpy(joined, a, sizeof a);
        memcpy(joined + sizeof a, b, sizeof b);
        CHECK(memcmp(joined, want + have, (size_t)n) == 0);
        have += (size_t)n;
    }
    SYS(close(fd));
}

static void rwv2_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    char data[300];
    p_fill(data, 300, 41);
    struct iovec iv[2] = {{data, 120}, {data + 120, 180}};
    CHECK_ERR(pwritev2(fd, iv, 2, 0, 0), ESPIPE);
    CHECK_EQ(pwritev2(fd, iv, 2, -1, 0), 300);
    CHECK_EQ(p_get_int(r), 1);
    p_fill(data, 300, 42);
    p_write_all(fd, data, 300);
    SYS(close(fd));
}

/* ---- splice ------------------------------------------------------------------- */

#define SPLICE_BYTES ((1u << 20) + 77)

static void splice_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    int pp[2];
    SYS(pipe(pp));
    /* socket -> pipe, the pipe drained by us between splices */
    char *want = malloc(SPLICE_BYTES), *got = malloc(SPLICE_BYTES);
    CHECK(want && got);
    p_fill(want, SPLICE_BYTES, 51);
    size_t have = 0;
    while (have < SPLICE_BYTES) {
        ssize_t n = SYS(splice(fd, NULL, pp[1], NULL, SPLICE_BYTES - have, 0));
        CHECK(n > 0);
        size_t drained = 0;
        while (drained < (size_t)n) {
            ssize_t k = SYS(read(pp[0], got + have + drained, (size_t)n - drained));
            CHECK(k > 0);
            drained += (size_t)k;
        }
        have += (size_t)n;
    }
    CHECK(memcmp(got, want, SPLICE_BYTES) == 0);
    /* argument errors leave the stream alone */
    loff_t off = 0;
    CHECK_ERR(splice(fd, &off, pp[1], NULL, 10, 0), ESPIPE);
    int file = p_temp_file(10, 1);
    CHECK_ERR(splice(fd, NULL, file, NULL, 10, 0), EINVAL);
    SYS(close(file));
    SYS(fcntl(fd, F_SETFL, O_NONBLOCK));
    CHECK_ERR(splice(fd, NULL, pp[1], NULL, 10, 0), EAGAIN);
    SYS(fcntl(fd, F_SETFL, 0));
    p_put_int(r, 1);
    /* pipe -> socket */
    p_fill(want, SPLICE_BYTES, 52);
    size_t sent = 0;
    while (sent < SPLICE_BYTES) {
        size_t chunk = SPLICE_BYTES - sent < 65536 ? SPLICE_BYTES - sent : 65536;
        p_write_all(pp[1], want + sent, chunk);
        size_t moved = 0;
        while (moved < chunk) {
            ssize_t n = SYS(splice(pp[0], NULL, fd, NULL, chunk - moved, 0));
            CHECK(n > 0);
            moved += (size_t)n;
        }
        sent += chunk;
    }
    CHECK_ERR(splice(pp[0], NULL, fd, NULL, 10, SPLICE_F_NONBLOCK), EAGAIN); /* empty pipe */
    CHECK_EQ(p_get_int(r), 2);
    free(want);
    free(got);
    SYS(close(pp[0]));
    SYS(close(pp[1]));
    SYS(close(fd));
}

static void splice_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    char *data = malloc(SPLICE_BYTES);
    CHECK(data != NULL);
    p_fill(data, SPLICE_BYTES, 51);
    p_write_all(fd, data, SPLICE_BYTES);
    CHECK_EQ(p_get_int(r), 1);
    char *got = malloc(SPLICE_BYTES);
    CHECK(got != NULL);
    p_read_all(fd, got, SPLICE_BYTES);
    p_fill(data, SPLICE_BYTES, 52);
    CHECK(memcmp(got, data, SPLICE_BYTES) == 0);
    p_put_int(r, 2);
    free(data);
    free(got);
    SYS(close(fd));
}

/* ---- epoll_pwait2 ------------------------------------------------------------- */

static void pwait2_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    int ep = (int)SYS(epoll_create1(0));
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 7};
    SYS(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
    struct timespec t = {0, 50 * 1000000L};
    double t0 = p_now_ms();
    CHECK_EQ(epoll_pwait2(ep, &ev, 1, &t, NULL), 0);
    CHECK(p_now_ms() - t0 >= 45);
    struct timespec bad = {0, -1};
    CHECK_ERR(epoll_pwait2(ep, &ev, 1, &bad, NULL), EINVAL);
    p_put_int(r, 1);
    t = (struct timespec){10, 0};
    memset(&ev, 0, sizeof ev);
    CHECK_EQ(epoll_pwait2(ep, &ev, 1, &t, NULL), 1);
    CHECK_EQ(ev.data.u64, 7);
    CHECK(ev.events & EPOLLIN);
    char buf[4];
    p_read_all(fd, buf, 4);
    CHECK(memcmp(buf, "ping", 4) == 0);
    SYS(close(ep));
    SYS(close(fd));
}

static void pwait2_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    CHECK_EQ(p_get_int(r), 1);
    p_write_all(fd, "ping", 4);
    char buf[1];
    CHECK_EQ(read(fd, buf, 1), 0);
    SYS(close(fd));
}

/* ---- fortified entry points ---------------------------------------------------- */

static void chk_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char a[16], b[16], c[16];
    /* Sizes the compiler cannot see: fortified calls check them at run time. */
    volatile size_t len = 16;
    volatile nfds_t nfds = 1;
    struct pollfd p[1] = {{.fd = fd, .events = POLLIN}};
    CHECK_EQ(poll(p, nfds, 10000), 1);
    CHECK_EQ(read(fd, a, len), 16);
    struct timespec t = {10, 0};
    CHECK_EQ(ppoll(p, nfds, &t, NULL), 1);
    CHECK_EQ(recv(fd, b, len, MSG_WAITALL), 16);
    CHECK_EQ(recvfrom(fd, c, len, MSG_WAITALL, NULL, NULL), 16);
    char want[48];
    p_fill(want, 48, 61);
    CHECK(memcmp(a, want, 16) == 0 && memcmp(b, want + 16, 16) == 0 &&
          memcmp(c, want + 32, 16) == 0);
    SYS(close(fd));
}

static void chk_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    char data[48];
    p_fill(data, 48, 61);
    p_write_all(fd, data, 16);
    p_sleep_ms(20);
    p_write_all(fd, data + 16, 32);
    char buf[1];
    CHECK_EQ(read(fd, buf, 1), 0);
    SYS(close(fd));
}

int main(void)
{
    p_init("batch");
    p_case("mmsg", mmsg_server, mmsg_client, P_CARRIED);
    p_case("rwv2", rwv2_server, rwv2_client, P_CARRIED);
    p_case("splice", splice_server, splice_client, P_CARRIED);
    p_case("epoll_pwait2", pwait2_server, pwait2_client, P_CARRIED);
    p_case("chk", chk_server, chk_client, P_CARRIED);
    return p_done();
}
