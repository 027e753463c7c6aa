/*
 * recv_flags: reads smaller than what is there, MSG_PEEK, MSG_WAITALL,
 * MSG_DONTWAIT / O_NONBLOCK on an empty socket, readv / writev scatter-gather
 * byte-exact, MSG_MORE, MSG_OOB (TCP urgent data: the read stops at the
 * mark, recv(MSG_OOB) takes the byte once, POLLPRI until then; with
 * SO_OOBINLINE the byte stays in band) - docs/SOCKETS.md "Data".
 *
 * "What is there": before checking exact return counts the reader peeks
 * until the whole message is visible, so a recv of k bytes with n >= k
 * bytes there must return exactly k ("return what is there").
 */
#include "sharness.h"

#include <fcntl.h>
#include <limits.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

struct roles {
    void (*reader)(int fd, int chan);
    void (*writer)(int fd, int chan);
};

static void reader_role(int chan, void *arg)
{
    const struct roles *r = arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 1);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    int one = 1;
    SYS(sov_setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
    r->reader(fd, chan);
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
}

static void writer_role(int chan, void *arg)
{
    const struct roles *r = arg;
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    int one = 1;
    SYS(sov_setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
    r->writer(fd, chan);
    SYS(sov_close(fd));
}

/* Peeks until n bytes are visible (up to 5 s); fails otherwise. */
static void wait_visible(int fd, size_t n)
{
    unsigned char *tmp = malloc(n + 1);
    CHECK(tmp);
    double t0 = s_now_ms();
    for (;;) {
        errno = 0;
        ssize_t r = sov_recv(fd, tmp, n + 1, MSG_PEEK | MSG_DONTWAIT);
        CHECK_MSG(r > 0 || (r == -1 && errno == EAGAIN),
                  "peek returned %zd (errno %s) waiting for %zu bytes", r, s_errname(errno), n);
        CHECK_MSG(r <= (ssize_t)n, "peek shows %zd bytes, only %zu were sent", r, n);
        if (r == (ssize_t)n)
            break;
        CHECK_MSG(s_now_ms() - t0 < 5000, "only %zd of %zu bytes visible after 5 s", r, n);
        s_sleep_ms(1);
    }
    free(tmp);
}

/* ---- partial reads -------------------------------------------------------- */

static void partial_writer(int fd, int chan)
{
    s_send_pattern(fd, 1, 0, 1000, 0);
    s_want(chan, 'n');
    s_send_pattern(fd, 2, 0, 1000, 0);
    s_want(chan, 'd');
}

static void partial_reader(int fd, int chan)
{
    unsigned char buf[1000];
    wait_visible(fd, 1000);
    const size_t sizes[] = {1, 10, 100, 500, 389};
    size_t pos = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        memset(buf, 0xee, sizeof buf);
        ssize_t r = SYS(sov_recv(fd, buf, sizes[i], 0));
        CHECK_MSG(r == (ssize_t)sizes[i], "recv(%zu) with %zu bytes there returned %zd",
                  sizes[i], 1000 - pos, r);
        CHECK(s_pattern_check(buf, (size_t)r, 1, pos) < 0);
        CHECK_MSG(buf[r] == 0xee, "recv(%zu) wrote past the count it returned", sizes[i]);
        pos += (size_t)r;
    }
    CHECK_EQ(pos, 1000);
    /* Nothing left. */
    CHECK_ERR(sov_recv(fd, buf, 1, MSG_DONTWAIT), EAGAIN);
    s_tok(chan, 'n');
    /* Reads of varying small sizes as bytes arrive: each returns 1..len. */
    pos = 0;
    size_t k = 1;
    while (pos < 1000) {
        size_t want = k < 1000 - pos ? k : 1000 - pos;
        ssize_t r = SYS(sov_read(fd, buf, want));
        CHECK_MSG(r >= 1 && (size_t)r <= want, "read(%zu) returned %zd", want, r);
        CHECK(s_pattern_check(buf, (size_t)r, 2, pos) < 0);
        pos += (size_t)r;
        k = k * 3 % 97 + 1;
    }
    s_tok(chan, 'd');
    s_recv_eof(fd);
}

/* ---- MSG_PEEK --------------------------------------------------------------- */

static void peek_writer(int fd, int chan)
{
    s_want(chan, '0');
    s_send_pattern(fd, 3, 0, 100, 0);
    s_want(chan, '1');
    s_send_all(fd, "abc", 3, 0);
    s_send_all(fd, "defgh", 5, 0);
    s_want(chan, '2');
    s_sleep_ms(100); /* the reader is blocked in a MSG_PEEK */
    s_send_all(fd, "late", 4, 0);
    s_want(chan, '3');
    SYS(sov_shutdown(fd, SHUT_WR));
    s_want(chan, '4');
}

static void peek_reader(int fd, int chan)
{
    unsigned char a[128], b[128], c[128];
    /* Empty: a non-blocking peek finds nothing. */
    CHECK_ERR(sov_recv(fd, a, sizeof a, MSG_PEEK | MSG_DONTWAIT), EAGAIN);
    s_tok(chan, '0');
    wait_visible(fd, 100);
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    CHECK_EQ(SYS(sov_recv(fd, a, 100, MSG_PEEK)), 100);
    CHECK_EQ(SYS(sov_recv(fd, b, 100, MSG_PEEK)), 100);
    CHECK(memcmp(a, b, 100) == 0);
    CHECK(s_pattern_check(a, 100, 3, 0) < 0);
    memset(b, 0, sizeof b);
    CHECK_EQ(SYS(sov_recv(fd, b, 10, MSG_PEEK)), 10);
    CHECK(memcmp(a, b, 10) == 0);
    CHECK_EQ(SYS(sov_recv(fd, c, 100, 0)), 100);
    CHECK(memcmp(a, c, 100) == 0);
    CHECK_ERR(sov_recv(fd, a, sizeof a, MSG_PEEK | MSG_DONTWAIT), EAGAIN);
    s_tok(chan, '1');
    /* Two sends seen as one stream by peek and by the read after it. */
    wait_visible(fd, 8);
    CHECK_EQ(SYS(sov_recv(fd, a, sizeof a, MSG_PEEK)), 8);
    CHECK(memcmp(a, "abcdefgh", 8) == 0);
    CHECK_EQ(SYS(sov_recv(fd, b, 4, MSG_PEEK)), 4);
    CHECK(memcmp(b, "abcd", 4) == 0);
    CHECK_EQ(SYS(sov_recv(fd, b, 2, 0)), 2);
    CHECK(memcmp(b, "ab", 2) == 0);
    CHECK_EQ(SYS(sov_recv(fd, b, sizeof b, MSG_PEEK)), 6);
    CHECK(memcmp(b, "cdefgh", 6) == 0);
    CHECK_EQ(SYS(sov_recv(fd, b, sizeof b, 0)), 6);
    CHECK(memcmp(b, "cdefgh", 6) == 0);
    /* A blocking peek waits for data and still does not consume it. */
    s_tok(chan, '2');
    s_guard(5000, "blocking MSG_PEEK");
    ssize_t n = SYS(sov_recv(fd, a, sizeof a, MSG_PEEK));
    s_unguard();
    CHECK(n >= 1 && n <= 4);
    CHECK(memcmp(a, "late", (size_t)n) == 0);
    s_recv_all(fd, b, 4);
    CHECK(memcmp(b, "late", 4) == 0);
    s_tok(chan, '3');
    /* At end of stream a peek returns 0, and so does the read. */
    s_guard(5000, "MSG_PEEK at end of stream");
    CHECK_EQ(SYS(sov_recv(fd, a, sizeof a, MSG_PEEK)), 0);
    s_unguard();
    CHECK_EQ(SYS(sov_recv(fd, a, sizeof a, 0)), 0);
    s_tok(chan, '4');
}

/* ---- MSG_WAITALL ---------------------------------------------------------- */

static void waitall_writer(int fd, int chan)
{
    s_want(chan, 'w');
    for (int i = 0; i < 5; i++) {
        s_send_pattern(fd, 4, (uint64_t)i * 1000, 1000, 0);
        s_sleep_ms(30);
    }
    s_want(chan, 'e');
    s_send_pattern(fd, 5, 0, 300, 0);
    s_sleep_ms(30);
    SYS(sov_shutdown(fd, SHUT_WR));
    s_want(chan, 'x');
}

static void waitall_reader(int fd, int chan)
{
    unsigned char *buf = malloc(5000);
    CHECK(buf);
    s_tok(chan, 'w');
    s_guard(10000, "sov_recv(MSG_WAITALL) across five sends");
    ssize_t n = SYS(sov_recv(fd, buf, 5000, MSG_WAITALL));
    s_unguard();
    CHECK_MSG(n == 5000, "MSG_WAITALL of 5000 over five 1000-byte sends returned %zd", n);
    CHECK(s_pattern_check(buf, 5000, 4, 0) < 0);
    s_tok(chan, 'e');
    /* End of stream cuts MSG_WAITALL short. */
    s_guard(10000, "sov_recv(MSG_WAITALL) ended by end of stream");
    n = SYS(sov_recv(fd, buf, 1000, MSG_WAITALL));
    s_unguard();
    CHECK_MSG(n == 300, "MSG_WAITALL(1000) with 300 bytes then end of stream returned %zd", n);
    CHECK(s_pattern_check(buf, 300, 5, 0) < 0);
    CHECK_EQ(SYS(sov_recv(fd, buf, 1000, MSG_WAITALL)), 0);
    s_tok(chan, 'x');
    free(buf);
}

/* ---- MSG_DONTWAIT and O_NONBLOCK on an empty socket --------------------------- */

static void dontwait_writer(int fd, int chan)
{
    s_want(chan, 's');
    s_send_all(fd, "z", 1, 0);
    s_want(chan, 't');
    s_send_all(fd, "yy", 2, 0);
    s_want(chan, 'u');
}

static void dontwait_reader(int fd, int chan)
{
    char buf[16];
    struct iovec iov = {buf, sizeof buf};
    CHECK_ERR(sov_recv(fd, buf, sizeof buf, MSG_DONTWAIT), EAGAIN);
    CHECK_ERR(sov_recv(fd, buf, sizeof buf, MSG_DONTWAIT | MSG_WAITALL), EAGAIN);
    /* The socket itself stays blocking. */
    CHECK(!(SYS(sov_fcntl(fd, F_GETFL)) & O_NONBLOCK));
    s_tok(chan, 's');
    s_guard(5000, "blocking sov_recv after MSG_DONTWAIT");
    CHECK_EQ(SYS(sov_recv(fd, buf, sizeof buf, 0)), 1);
    s_unguard();
    CHECK_EQ(buf[0], 'z');
    /* O_NONBLOCK: every read call says EAGAIN. */
    int fl = (int)SYS(sov_fcntl(fd, F_GETFL));
    SYS(sov_fcntl(fd, F_SETFL, fl | O_NONBLOCK));
    CHECK_ERR(sov_recv(fd, buf, sizeof buf, 0), EAGAIN);
    CHECK_ERR(sov_read(fd, buf, sizeof buf), EAGAIN);
    CHECK_ERR(sov_readv(fd, &iov, 1), EAGAIN);
    CHECK_ERR(sov_recv(fd, buf, sizeof buf, MSG_WAITALL), EAGAIN);
    s_tok(chan, 't');
    wait_visible(fd, 2);
    CHECK_EQ(SYS(sov_recv(fd, buf, sizeof buf, MSG_DONTWAIT)), 2);
    CHECK(memcmp(buf, "yy", 2) == 0);
    CHECK_ERR(sov_read(fd, buf, sizeof buf), EAGAIN);
    SYS(sov_fcntl(fd, F_SETFL, fl));
    s_tok(chan, 'u');
    s_recv_eof(fd);
}

/* ---- readv / writev ---------------------------------------------------------- */

#define VEC_TOTAL (1 + 0 + 7 + 4096 + 100000 + 3)

static void vec_writer(int fd, int chan)
{
    unsigned char *data = malloc(VEC_TOTAL);
    CHECK(data);
    s_pattern_fill(data, VEC_TOTAL, 6, 0);
    size_t sizes[] = {1, 0, 7, 4096, 100000, 3};
    struct iovec iov[6];
    size_t off = 0;
    for (int i = 0; i < 6; i++) {
        iov[i].iov_base = sizes[i] ? data + off : NULL;
        iov[i].iov_len = sizes[i];
        off += sizes[i];
    }
    CHECK_EQ(SYS(sov_writev(fd, iov, 6)), VEC_TOTAL);
    s_want(chan, 'a');
    /* Bad counts. */
    CHECK_ERR(sov_writev(fd, iov, -1), EINVAL);
    struct iovec *many = calloc(IOV_MAX + 1, sizeof *many);
    CHECK(many);
    CHECK_ERR(sov_writev(fd, many, IOV_MAX + 1), EINVAL);
    /* IOV_MAX one-byte vectors. */
    unsigned char *ones = malloc(IOV_MAX);
    CHECK(ones);
    s_pattern_fill(ones, IOV_MAX, 7, 0);
    for (int i = 0; i < IOV_MAX; i++) {
        many[i].iov_base = ones + i;
        many[i].iov_len = 1;
    }
    CHECK_EQ(SYS(sov_writev(fd, many, IOV_MAX)), IOV_MAX);
    s_want(chan, 'v');
    free(many);
    free(ones);
    free(data);
}

#define GUARD 64

static void vec_reader(int fd, int chan)
{
    /* Receive vectors: 5, 0, 13, 70000, 30000 (less than what is there). */
    size_t sizes[] = {5, 0, 13, 70000, 30000};
    enum { NV = 5 };
    unsigned char *bufs[NV];
    for (int i = 0; i < NV; i++) {
        bufs[i] = malloc(sizes[i] + GUARD);
        CHECK(bufs[i]);
        memset(bufs[i], 0xee, sizes[i] + GUARD);
    }
    /* Wait for all of the first writev so the readv returns what is asked. */
    wait_visible(fd, VEC_TOTAL);
    struct iovec iov[NV];
    for (int i = 0; i < NV; i++) {
        iov[i].iov_base = bufs[i];
        iov[i].iov_len = sizes[i];
    }
    CHECK_ERR(sov_readv(fd, iov, -1), EINVAL);
    ssize_t n = SYS(sov_readv(fd, iov, NV));
    size_t cap = 5 + 13 + 70000 + 30000;
    CHECK_MSG(n == (ssize_t)cap, "readv of %zu with %d bytes there returned %zd", cap,
              VEC_TOTAL, n);
    s_tok(chan, 'a'); /* the writer goes on with IOV_MAX one-byte vectors */
    size_t pos = 0;
    for (int i = 0; i < NV; i++) {
        long bad = s_pattern_check(bufs[i], sizes[i], 6, pos);
        CHECK_MSG(bad < 0, "readv vector %d (%zu bytes at stream byte %zu): mismatch at %ld", i,
                  sizes[i], pos, bad);
        for (size_t g = 0; g < GUARD; g++)
            CHECK_MSG(bufs[i][sizes[i] + g] == 0xee, "readv wrote past vector %d", i);
        pos += sizes[i];
    }
    /* The rest (VEC_TOTAL - cap of the first writev, then the IOV_MAX bytes)
     * through a readv with vectors of 1, 2, 3, ... bytes. */
    size_t rest = VEC_TOTAL - cap, total = rest + IOV_MAX;
    unsigned char *all = malloc(total + GUARD);
    CHECK(all);
    memset(all, 0xee, total + GUARD);
    size_t got = 0;
    while (got < total) {
        /* Vectors of 1, 2, 3, ... bytes from where the data stopped, up to
         * the guard's end (so an overrun would land in the guard). */
        struct iovec small[64];
        size_t off = got;
        int k = 0;
        for (; k < 64 && off < total + GUARD; k++) {
            size_t l = (size_t)k + 1;
            if (off + l > total + GUARD)
                l = total + GUARD - off;
            small[k].iov_base = all + off;
            small[k].iov_len = l;
            off += l;
        }
        ssize_t r = SYS(sov_readv(fd, small, k));
        CHECK(r > 0 && (size_t)r <= off - got);
        got += (size_t)r;
        CHECK_MSG(got <= total, "readv returned more than was sent");
    }
    CHECK_EQ(got, total);
    CHECK(s_pattern_check(all, rest, 6, cap) < 0);
    CHECK(s_pattern_check(all + rest, IOV_MAX, 7, 0) < 0);
    for (size_t g = 0; g < GUARD; g++)
        CHECK_MSG(all[total + g] == 0xee, "readv wrote past the data");
    s_tok(chan, 'v');
    s_recv_eof(fd);
    for (int i = 0; i < NV; i++)
        free(bufs[i]);
    free(all);
}

/* ---- MSG_OOB -------------------------------------------------------------- */

/* "ab", urgent "XY", "cd"; twice: the reader reads the second in band. */
static void oob_writer(int fd, int chan)
{
    for (int round = 0; round < 2; round++) {
        CHECK_EQ(SYS(sov_send(fd, "ab", 2, 0)), 2);
        CHECK_EQ(SYS(sov_send(fd, "XY", 2, MSG_OOB)), 2);
        CHECK_EQ(SYS(sov_send(fd, "cd", 2, 0)), 2);
        s_want(chan, 'o');
    }
}

static void oob_reader(int fd, int chan)
{
    char buf[16], c = 0;
    for (int round = 0; round < 2; round++) {
        int inl = round;
        SYS(sov_setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &inl, sizeof inl));
        int got = -1;
        socklen_t len = sizeof got;
        SYS(sov_getsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &got, &len));
        CHECK_EQ(got, inl);
        struct pollfd p = {.fd = fd, .events = POLLPRI};
        CHECK_EQ(SYS(sov_poll(&p, 1, 5000)), 1);
        CHECK(p.revents & POLLPRI);
        /* POLLPRI: the urgent byte is here, so are the bytes before it
         * (a peek stops at the mark too). */
        CHECK_EQ(SYS(sov_recv(fd, buf, sizeof buf, MSG_PEEK)), 3);
        CHECK_EQ(SYS(sov_recv(fd, buf, sizeof buf, 0)), 3); /* stops at the mark */
        CHECK(memcmp(buf, "abX", 3) == 0);
        if (!inl) {
            CHECK_EQ(SYS(sov_recv(fd, &c, 1, MSG_OOB)), 1);
            CHECK_EQ(c, 'Y');
            CHECK_ERR(sov_recv(fd, &c, 1, MSG_OOB), EINVAL); /* taken */
            CHECK_EQ(SYS(sov_poll(&p, 1, 0)), 0);
        } else {
            CHECK_ERR(sov_recv(fd, &c, 1, MSG_OOB), EINVAL); /* in band */
        }
        s_recv_all(fd, buf, 2 + inl);
        CHECK(memcmp(buf, inl ? "Ycd" : "cd", 2 + inl) == 0);
        s_tok(chan, 'o');
    }
    s_recv_eof(fd);
}

/* ---- MSG_MORE, zero-length send --------------------------------------------- */

static void more_writer(int fd, int chan)
{
    char c = 'q';
    CHECK_EQ(SYS(sov_send(fd, &c, 0, 0)), 0);
    CHECK_EQ(SYS(sov_send(fd, "ab", 2, MSG_MORE)), 2);
    CHECK_EQ(SYS(sov_send(fd, "cd", 2, MSG_MORE)), 2);
    CHECK_EQ(SYS(sov_send(fd, "ef", 2, 0)), 2);
    s_want(chan, 'm');
}

static void more_reader(int fd, int chan)
{
    char buf[8];
    s_guard(5000, "reading data sent with MSG_MORE then without");
    s_recv_all(fd, buf, 6);
    s_unguard();
    CHECK(memcmp(buf, "abcdef", 6) == 0);
    s_tok(chan, 'm');
    s_recv_eof(fd);
}

static void run(const char *name, void (*rd)(int, int), void (*wr)(int, int))
{
    static struct roles r;
    r.reader = rd;
    r.writer = wr;
    if (s_case(name))
        s_run_pair("reader", reader_role, "writer", writer_role, &r);
}

int main(void)
{
    s_init("recv_flags", 100);
    run("partial", partial_reader, partial_writer);
    run("peek", peek_reader, peek_writer);
    run("waitall", waitall_reader, waitall_writer);
    run("dontwait", dontwait_reader, dontwait_writer);
    run("readv_writev", vec_reader, vec_writer);
    run("oob", oob_reader, oob_writer);
    run("more", more_reader, more_writer);
    s_pass();
}
