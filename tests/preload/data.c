/*
 * data.c - the data calls under the preload: read/write, readv/writev,
 * send/sendto/sendmsg, recv/recvfrom/recvmsg, MSG_PEEK, MSG_WAITALL,
 * MSG_DONTWAIT, an 8 MiB stream, sendfile, end of stream, EPIPE/SIGPIPE,
 * shutdown(SHUT_WR), reset on close with unread data.
 */
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "pharness.h"

/* Waits until at least n bytes can be peeked (polling; no FIONREAD here). */
static void wait_readable(int fd, size_t n)
{
    char *buf = malloc(n);
    CHECK(buf != NULL);
    for (int i = 0; i < 20000; i++) {
        ssize_t k = recv(fd, buf, n, MSG_PEEK | MSG_DONTWAIT);
        if (k >= (ssize_t)n) {
            free(buf);
            return;
        }
        if (k < 0)
            CHECK_EQ(errno, EAGAIN);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, 1);
        if (k >= 0)
            p_sleep_ms(1);
    }
    FAILF("%zu bytes never became readable", n);
}

/* ---- each call, byte-exact -------------------------------------------------- */

static void calls_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char buf[256], want[256];

    /* write -> read */
    p_fill(want, 100, 1);
    p_read_all(fd, buf, 100);
    CHECK(memcmp(buf, want, 100) == 0);

    /* writev -> readv (scatter into 3 buffers) */
    p_fill(want, 150, 2);
    wait_readable(fd, 150);
    char a[10], b[40], c[100];
    struct iovec iv[3] = {{a, sizeof a}, {b, sizeof b}, {c, sizeof c}};
    CHECK_EQ(readv(fd, iv, 3), 150);
    CHECK(memcmp(a, want, 10) == 0 && memcmp(b, want + 10, 40) == 0 &&
          memcmp(c, want + 50, 100) == 0);

    /* send -> recv */
    p_fill(want, 64, 3);
    wait_readable(fd, 64);
    CHECK_EQ(recv(fd, buf, 64, 0), 64);
    CHECK(memcmp(buf, want, 64) == 0);

    /* sendto (no address, then an address: TCP ignores it) -> recvfrom */
    p_fill(want, 90, 4);
    wait_readable(fd, 80);
    struct sockaddr_in from;
    memset(&from, 0xab, sizeof from);
    socklen_t flen = sizeof from;
    CHECK_EQ(recvfrom(fd, buf, 80, 0, (struct sockaddr *)&from, &flen), 80);
    CHECK(memcmp(buf, want, 80) == 0);
    CHECK_EQ(flen, 0); /* a stream socket gives no source address */
    CHECK_EQ(recvfrom(fd, buf, 10, 0, NULL, NULL), 10);
    CHECK(memcmp(buf, want + 80, 10) == 0);

    /* sendmsg (3 iovecs) -> recvmsg (2 iovecs) */
    p_fill(want, 120, 5);
    wait_readable(fd, 120);
    char x[50], y[70];
    struct iovec rv[2] = {{x, sizeof x}, {y, sizeof y}};
    char name[32];
    char control[64];
    struct msghdr m = {.msg_name = name,
                       .msg_namelen = sizeof name,
                       .msg_iov = rv,
                       .msg_iovlen = 2,
                       .msg_control = control,
                       .msg_controllen = sizeof control,
                       .msg_flags = 0x7fff};
    CHECK_EQ(recvmsg(fd, &m, 0), 120);
    CHECK(memcmp(x, want, 50) == 0 && memcmp(y, want + 50, 70) == 0);
    CHECK_EQ(m.msg_namelen, 0);
    CHECK_EQ(m.msg_controllen, 0);
    CHECK_EQ(m.msg_flags, 0);

    /* the other direction, each call once more */
    p_fill(want, 200, 6);
    p_write_all(fd, want, 50);
    CHECK_EQ(send(fd, want + 50, 50, MSG_NOSIGNAL), 50);
    struct sockaddr_in bogus = {.sin_family = AF_INET, .sin_port = htons(9)};
    ssize_t n = sendto(fd, want + 100, 50, 0, (struct sockaddr *)&bogus, sizeof bogus);
    if (n != 50) /* Linux TCP ignores the address of a connected socket */
        FAILF("sendto with an address on a connected stream: %zd (errno %s)", n,
              p_errname(errno));
    struct iovec sv[2] = {{want + 150, 20}, {want + 170, 30}};
    struct msghdr sm = {.msg_iov = sv, .msg_iovlen = 2};
    CHECK_EQ(sendmsg(fd, &sm, MSG_NOSIGNAL), 50);
    CHECK_EQ(read(fd, buf, 1), 0);
    SYS(close(fd));
}

static void calls_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    char buf[256];
    p_fill(buf, 100, 1);
    CHECK_EQ(write(fd, buf, 100), 100);

    p_fill(buf, 150, 2);
    struct iovec wv[3] = {{buf, 1}, {buf + 1, 99}, {buf + 100, 50}};
    CHECK_EQ(writev(fd, wv, 3), 150);

    p_fill(buf, 64, 3);
    CHECK_EQ(send(fd, buf, 64, 0), 64);

    p_fill(buf, 90, 4);
    CHECK_EQ(sendto(fd, buf, 80, 0, NULL, 0), 80);
    CHECK_EQ(sendto(fd, buf + 80, 10, 0, NULL, 0), 10);

    p_fill(buf, 120, 5);
    struct iovec sv[3] = {{buf, 30}, {buf + 30, 0}, {buf + 30, 90}};
    struct msghdr m = {.msg_iov = sv, .msg_iovlen = 3};
    CHECK_EQ(sendmsg(fd, &m, 0), 120);

    char want[200], got[200];
    p_fill(want, 200, 6);
    wait_readable(fd, 200);
    /* readv with an empty buffer in the middle, recvmsg, recvfrom, recv */
    struct iovec rv[3] = {{got, 40}, {got + 40, 0}, {got + 40, 20}};
    CHECK_EQ(readv(fd, rv, 3), 60);
    struct iovec mv[1] = {{got + 60, 40}};
    struct msghdr rm = {.msg_iov = mv, .msg_iovlen = 1};
    CHECK_EQ(recvmsg(fd, &rm, 0), 40);
    socklen_t flen = 0;
    struct sockaddr_in from;
    CHECK_EQ(recvfrom(fd, got + 100, 50, MSG_WAITALL, (struct sockaddr *)&from, &flen), 50);
    CHECK_EQ(flen, 0);
    CHECK_EQ(recv(fd, got + 150, 50, MSG_WAITALL), 50);
    CHECK(memcmp(got, want, 200) == 0);
    /* zero-length calls */
    CHECK_EQ(send(fd, buf, 0, 0), 0);
    CHECK_EQ(write(fd, buf, 0), 0);
    SYS(close(fd));
}

/* ---- MSG_PEEK ---------------------------------------------------------------- */

static void peek_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char buf[16] = {0};
    wait_readable(fd, 12);
    CHECK_EQ(recv(fd, buf, 4, MSG_PEEK), 4);
    CHECK(memcmp(buf, "abcd", 4) == 0);
    CHECK_EQ(recv(fd, buf, 12, MSG_PEEK), 12);
    CHECK(memcmp(buf, "abcdefghijkl", 12) == 0);
    CHECK_EQ(recvfrom(fd, buf, 2, MSG_PEEK, NULL, NULL), 2);
    CHECK(memcmp(buf, "ab", 2) == 0);
    CHECK_EQ(recv(fd, buf, 4, 0), 4);
    CHECK(memcmp(buf, "abcd", 4) == 0);
    CHECK_EQ(recv(fd, buf, 4, MSG_PEEK | MSG_DONTWAIT), 4);
    CHECK(memcmp(buf, "efgh", 4) == 0);
    CHECK_EQ(read(fd, buf, 8), 8);
    CHECK(memcmp(buf, "efghijkl", 8) == 0);
    CHECK_ERR(recv(fd, buf, 4, MSG_PEEK | MSG_DONTWAIT), EAGAIN);
    p_put_int(r, 1);
    CHECK_EQ(recv(fd, buf, 4, MSG_PEEK), 0); /* end of stream peeks as 0 too */
    CHECK_EQ(recv(fd, buf, 4, 0), 0);
    SYS(close(fd));
}

static void peek_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    p_write_all(fd, "abcdefghijkl", 12);
    CHECK_EQ(p_get_int(r), 1);
    SYS(close(fd));
}

/* recvmsg(MSG_PEEK) into two buffers: both filled from the stream, in order. */
static void peek_iov_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    wait_readable(fd, 8);
    char a[4], b[4];
    struct iovec iv[2] = {{a, 4}, {b, 4}};
    struct msghdr m = {.msg_iov = iv, .msg_iovlen = 2};
    CHECK_EQ(recvmsg(fd, &m, MSG_PEEK), 8);
    CHECK(memcmp(a, "abcd", 4) == 0);
    if (memcmp(b, "efgh", 4) != 0)
        FAILF("recvmsg(MSG_PEEK) second buffer: \"%.4s\", want \"efgh\"", b);
    char all[8];
    p_read_all(fd, all, 8);
    CHECK(memcmp(all, "abcdefgh", 8) == 0);
    p_put_int(r, 1);
    SYS(close(fd));
}

static void peek_iov_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    p_write_all(fd, "abcdefgh", 8);
    CHECK_EQ(p_get_int(r), 1);
    SYS(close(fd));
}

/* ---- MSG_WAITALL --------------------------------------------------------------- */

static void waitall_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char buf[3000], want[3000];
    p_fill(want, sizeof want, 9);
    CHECK_EQ(recv(fd, buf, 3000, MSG_WAITALL), 3000); /* sent in 3 parts, 30 ms apart */
    CHECK(memcmp(buf, want, 3000) == 0);
    p_put_int(r, 1);
    /* at end of stream MSG_WAITALL returns what there was */
    CHECK_EQ(recv(fd, buf, sizeof buf, MSG_WAITALL), 10);
    CHECK(memcmp(buf, want, 10) == 0);
    CHECK_EQ(recv(fd, buf, sizeof buf, MSG_WAITALL), 0);
    SYS(close(fd));
}

/* Each write its own packet, so the reader really sees the parts arrive. */
static int nodelay_connect(int port)
{
    int fd = p_connect(port), one = 1;
    SYS(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
    return fd;
}

static void waitall_client(struct p_role *r)
{
    int fd = nodelay_connect(r->port);
    char want[3000];
    p_fill(want, sizeof want, 9);
    for (int i = 0; i < 3; i++) {
        p_write_all(fd, want + i * 1000, 1000);
        p_sleep_ms(50);
    }
    CHECK_EQ(p_get_int(r), 1);
    p_write_all(fd, want, 10);
    SYS(close(fd));
}

/* recvmsg(MSG_WAITALL) into two buffers waits for both to fill. */
static void waitall_iov_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char a[1500], b[1500], want[3000];
    p_fill(want, sizeof want, 10);
    struct iovec iv[2] = {{a, sizeof a}, {b, sizeof b}};
    struct msghdr m = {.msg_iov = iv, .msg_iovlen = 2};
    ssize_t n = recvmsg(fd, &m, MSG_WAITALL);
    if (n != 3000)
        FAILF("recvmsg(MSG_WAITALL) into 2 x 1500 bytes returned %zd (errno %s), want 3000", n,
              p_errname(errno));
    CHECK(memcmp(a, want, 1500) == 0 && memcmp(b, want + 1500, 1500) == 0);
    p_put_int(r, 1);
    SYS(close(fd));
}

static void waitall_iov_client(struct p_role *r)
{
    int fd = nodelay_connect(r->port);
    char want[3000];
    p_fill(want, sizeof want, 10);
    for (int i = 0; i < 3; i++) {
        p_write_all(fd, want + i * 1000, 1000);
        p_sleep_ms(50);
    }
    CHECK_EQ(p_get_int(r), 1);
    SYS(close(fd));
}

/* ---- MSG_DONTWAIT ------------------------------------------------------------- */

static void dontwait_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char buf[64];
    CHECK_ERR(recv(fd, buf, sizeof buf, MSG_DONTWAIT), EAGAIN);
    CHECK_ERR(recvfrom(fd, buf, sizeof buf, MSG_DONTWAIT, NULL, NULL), EAGAIN);
    struct iovec iv = {buf, sizeof buf};
    struct msghdr m = {.msg_iov = &iv, .msg_iovlen = 1};
    CHECK_ERR(recvmsg(fd, &m, MSG_DONTWAIT), EAGAIN);
    /* the socket itself stays blocking */
    CHECK((SYS(fcntl(fd, F_GETFL)) & O_NONBLOCK) == 0);
    p_put_int(r, 1); /* now send */
    wait_readable(fd, 5);
    CHECK_EQ(recv(fd, buf, sizeof buf, MSG_DONTWAIT), 5);
    CHECK(memcmp(buf, "12345", 5) == 0);
    CHECK_ERR(recv(fd, buf, sizeof buf, MSG_DONTWAIT), EAGAIN);

    /* the client fills the window with MSG_DONTWAIT sends until EAGAIN */
    long long total = p_get_int(r);
    CHECK(total > 0);
    char *big = malloc((size_t)total), *want = malloc((size_t)total);
    CHECK(big && want);
    p_read_all(fd, big, (size_t)total);
    p_fill(want, (size_t)total, 11);
    CHECK(memcmp(big, want, (size_t)total) == 0);
    free(big);
    free(want);
    CHECK_EQ(read(fd, buf, 1), 0);
    SYS(close(fd));
}

static void dontwait_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    CHECK_EQ(p_get_int(r), 1);
    p_write_all(fd, "12345", 5);
    const size_t cap = 256u << 20;
    char *data = malloc(cap);
    CHECK(data != NULL);
    p_fill(data, cap, 11);
    size_t sent = 0;
    for (;;) {
        CHECK(sent < cap); /* a window without end */
        ssize_t n = send(fd, data + sent, 65536, MSG_DONTWAIT);
        if (n < 0) {
            CHECK_EQ(errno, EAGAIN);
            break;
        }
        CHECK(n > 0);
        sent += (size_t)n;
    }
    CHECK((SYS(fcntl(fd, F_GETFL)) & O_NONBLOCK) == 0);
    p_log("window full after %zu bytes", sent);
    p_put_int(r, (long long)sent);
    free(data);
    SYS(close(fd));
}

/* ---- an 8 MiB stream through every call ---------------------------------- */

#define STREAM_BYTES (8u << 20)

static void stream_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char *buf = malloc(1 << 17);
    CHECK(buf != NULL);
    uint64_t h = P_HASH_INIT, rnd = 77;
    size_t got = 0;
    unsigned call = 0;
    while (got < STREAM_BYTES + 1) {
        rnd = rnd * 6364136223846793005ull + 1442695040888963407ull;
        size_t want = 1 + (size_t)(rnd >> 33) % (1 << 17);
        ssize_t n;
        switch (call++ % 5) {
        case 0:
            n = read(fd, buf, want);
            break;
        case 1:
            n = recv(fd, buf, want, 0);
            break;
        case 2: {
            size_t half = want / 2;
            struct iovec iv[2] = {{buf, half}, {buf + half, want - half}};
            n = readv(fd, iv, 2);
            break;
        }
        case 3: {
            struct iovec iv = {buf, want};
            struct msghdr m = {.msg_iov = &iv, .msg_iovlen = 1};
            n = recvmsg(fd, &m, 0);
            break;
        }
        default:
            n = recvfrom(fd, buf, want, 0, NULL, NULL);
            break;
        }
        CHECK(n >= 0);
        if (n == 0)
            break;
        h = p_hash(h, buf, (size_t)n);
        got += (size_t)n;
    }
    CHECK_EQ(got, STREAM_BYTES);
    long long theirs = p_get_int(r);
    CHECK_EQ((unsigned long long)theirs, h);
    free(buf);
    SYS(close(fd));
}

static void stream_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    char *data = malloc(STREAM_BYTES);
    CHECK(data != NULL);
    p_fill(data, STREAM_BYTES, 12345);
    uint64_t h = p_hash(P_HASH_INIT, data, STREAM_BYTES), rnd = 99;
    size_t sent = 0;
    unsigned call = 0;
    while (sent < STREAM_BYTES) {
        rnd = rnd * 6364136223846793005ull + 1442695040888963407ull;
        size_t want = 1 + (size_t)(rnd >> 33) % 100000;
        if (want > STREAM_BYTES - sent)
            want = STREAM_BYTES - sent;
        char *p = data + sent;
        ssize_t n;
        switch (call++ % 5) {
        case 0:
            n = write(fd, p, want);
            break;
        case 1:
            n = send(fd, p, want, MSG_NOSIGNAL);
            break;
        case 2: {
            size_t third = want / 3;
            struct iovec iv[3] = {{p, third}, {p + third, third}, {p + 2 * third, want - 2 * third}};
            n = writev(fd, iv, 3);
            break;
        }
        case 3: {
            struct iovec iv[2] = {{p, want / 2}, {p + want / 2, want - want / 2}};
            struct msghdr m = {.msg_iov = iv, .msg_iovlen = 2};
            n = sendmsg(fd, &m, 0);
            break;
        }
        default:
            n = sendto(fd, p, want, 0, NULL, 0);
            break;
        }
        CHECK(n > 0);
        sent += (size_t)n;
    }
    p_put_int(r, (long long)h);
    free(data);
    SYS(close(fd));
}

/* ---- sendfile ------------------------------------------------------------------ */

#define FILE_BYTES ((1u << 20) + 123)

static void sendfile_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    int file = p_temp_file(FILE_BYTES, 21);
    /* no offset: from the file position, which moves */
    SYS(lseek(file, 100, SEEK_SET));
    size_t done = 0;
    while (done < 300000) {
        ssize_t n = SYS(sendfile(fd, file, NULL, 300000 - done));
        CHECK(n > 0);
        done += (size_t)n;
    }
    CHECK_EQ(lseek(file, 0, SEEK_CUR), 100 + 300000);
    /* with an offset: from there, the offset moves, the position does not */
    off_t off = 5000;
    done = 0;
    while (done < 200000) {
        ssize_t n = SYS(sendfile(fd, file, &off, 200000 - done));
        CHECK(n > 0);
        done += (size_t)n;
    }
    CHECK_EQ(off, 5000 + 200000);
    CHECK_EQ(lseek(file, 0, SEEK_CUR), 100 + 300000);
    /* asking past the end sends what there is */
    off = FILE_BYTES - 1000;
    CHECK_EQ(sendfile(fd, file, &off, 5000), 1000);
    CHECK_EQ(off, FILE_BYTES);
    CHECK_EQ(sendfile(fd, file, &off, 5000), 0);
    SYS(lseek(file, -10, SEEK_END));
    CHECK_EQ(sendfile(fd, file, NULL, 5000), 10);
    CHECK_EQ(lseek(file, 0, SEEK_CUR), FILE_BYTES);
    /* the whole file in one call */
    off = 0;
    done = 0;
    while (done < FILE_BYTES) {
        ssize_t n = SYS(sendfile(fd, file, &off, FILE_BYTES - done));
        CHECK(n > 0);
        done += (size_t)n;
    }
    CHECK_EQ(off, FILE_BYTES);
    /* errors: a descriptor not open for reading */
    CHECK_ERR(sendfile(fd, -1, NULL, 10), EBADF);
    SYS(close(file));
    char c;
    CHECK_EQ(read(fd, &c, 1), 0);
    SYS(close(fd));
}

static void sendfile_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    char *file = malloc(FILE_BYTES), *got = malloc(FILE_BYTES);
    CHECK(file && got);
    p_fill(file, FILE_BYTES, 21);
    p_read_all(fd, got, 300000);
    CHECK(memcmp(got, file + 100, 300000) == 0);
    p_read_all(fd, got, 200000);
    CHECK(memcmp(got, file + 5000, 200000) == 0);
    p_read_all(fd, got, 1000);
    CHECK(memcmp(got, file + FILE_BYTES - 1000, 1000) == 0);
    p_read_all(fd, got, 10);
    CHECK(memcmp(got, file + FILE_BYTES - 10, 10) == 0);
    p_read_all(fd, got, FILE_BYTES);
    CHECK(memcmp(got, file, FILE_BYTES) == 0);
    free(file);
    free(got);
    SYS(close(fd));
}

/* ---- end of stream, EPIPE, SIGPIPE -------------------------------------------- */

static void closer_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    p_write_all(fd, "bye", 3);
    SYS(close(fd));
    p_barrier(r);
}

static volatile sig_atomic_t sigpipes;

static void on_sigpipe(int sig)
{
    (void)sig;
    sigpipes++;
}

/* Sends until the first error (the peer closed): returns that errno. */
static int send_until_error(int fd, int flags)
{
    for (int i = 0; i < 500; i++) {
        ssize_t n = send(fd, "x", 1, flags);
        if (n < 0)
            return errno;
        CHECK_EQ(n, 1);
        p_sleep_ms(5);
    }
    FAILF("sends to a closed peer kept succeeding");
}

static void eof_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    char buf[8];
    p_read_all(fd, buf, 3);
    CHECK(memcmp(buf, "bye", 3) == 0);
    CHECK_EQ(read(fd, buf, sizeof buf), 0);
    CHECK_EQ(recv(fd, buf, sizeof buf, 0), 0); /* and again */
    CHECK_EQ(recv(fd, buf, sizeof buf, MSG_DONTWAIT), 0);
    struct iovec iv = {buf, sizeof buf};
    CHECK_EQ(readv(fd, &iv, 1), 0);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    CHECK_EQ(poll(&p, 1, 0), 1);
    CHECK(p.revents & POLLIN);
    SYS(close(fd));
    p_barrier(r);
}

/* After the peer closed: the first send may still go (the peer's kernel
 * answers with a reset); then EPIPE, as Linux reports a reset in
 * CLOSE_WAIT. */
static void epipe_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    char buf[8];
    p_read_all(fd, buf, 3);
    CHECK_EQ(read(fd, buf, sizeof buf), 0);
    int e = send_until_error(fd, MSG_NOSIGNAL);
    if (e != EPIPE)
        FAILF("first failing send after the peer closed: %s, want EPIPE", p_errname(e));
    CHECK_EQ(e, EPIPE);
    CHECK_ERR(send(fd, "y", 1, MSG_NOSIGNAL), EPIPE);
    /* without MSG_NOSIGNAL: EPIPE and SIGPIPE */
    struct sigaction sa = {.sa_handler = on_sigpipe};
    sigemptyset(&sa.sa_mask);
    SYS(sigaction(SIGPIPE, &sa, NULL));
    CHECK_ERR(write(fd, "z", 1), EPIPE);
    CHECK_EQ(sigpipes, 1);
    SYS(close(fd));
    p_barrier(r);
}

/* The server exits without closing: the client still sees end of stream. */
static void exiter_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    p_write_all(fd, "last", 4);
    (void)fd;
    exit(0);
}

static void exiter_client(struct p_role *r)
{
    (void)r;
    int fd = p_connect(r->port);
    char buf[8];
    p_read_all(fd, buf, 4);
    CHECK(memcmp(buf, "last", 4) == 0);
    CHECK_EQ(read(fd, buf, sizeof buf), 0);
    SYS(close(fd));
}

/* ---- shutdown ------------------------------------------------------------------- */

static void shut_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char buf[16];
    p_read_all(fd, buf, 5);
    CHECK(memcmp(buf, "half!", 5) == 0);
    CHECK_EQ(read(fd, buf, sizeof buf), 0); /* the client shut down its side */
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    CHECK_EQ(poll(&p, 1, 0), 1);
    CHECK((p.revents & (POLLIN | POLLRDHUP)) == (POLLIN | POLLRDHUP));
    /* we can still send */
    p_write_all(fd, "still here", 10);
    p_barrier(r);
    SYS(shutdown(fd, SHUT_WR));
    CHECK_ERR(send(fd, "n", 1, MSG_NOSIGNAL), EPIPE);
    p_barrier(r);
    SYS(close(fd));
}

static void shut_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    CHECK_ERR(shutdown(fd, 42), EINVAL);
    p_write_all(fd, "half!", 5);
    SYS(shutdown(fd, SHUT_WR));
    CHECK_ERR(send(fd, "n", 1, MSG_NOSIGNAL), EPIPE);
    struct sigaction sa = {.sa_handler = on_sigpipe};
    sigemptyset(&sa.sa_mask);
    SYS(sigaction(SIGPIPE, &sa, NULL));
    CHECK_ERR(write(fd, "n", 1), EPIPE);
    CHECK_EQ(sigpipes, 1);
    struct iovec iv = {"n", 1};
    CHECK_ERR(writev(fd, &iv, 1), EPIPE);
    CHECK_EQ(sigpipes, 2);
    CHECK_ERR(send(fd, "n", 1, MSG_NOSIGNAL | MSG_DONTWAIT), EPIPE);
    CHECK_EQ(sigpipes, 2);
    char buf[16];
    p_read_all(fd, buf, 10);
    CHECK(memcmp(buf, "still here", 10) == 0);
    SYS(shutdown(fd, SHUT_RD));
    CHECK_EQ(read(fd, buf, sizeof buf), 0); /* nothing pending, reading shut */
    p_barrier(r);
    CHECK_EQ(read(fd, buf, sizeof buf), 0);
    p_barrier(r);
    SYS(close(fd));
    /* shutdown on a socket that never connected */
    int u = (int)SYS(socket(AF_INET, SOCK_STREAM, 0));
    CHECK_ERR(shutdown(u, SHUT_WR), ENOTCONN);
    SYS(close(u));
}

/* ---- closing with unread data resets ---------------------------------------- */

static void reset_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char buf[4];
    p_read_all(fd, buf, 4);
    p_put_int(r, 1);
    CHECK_EQ(p_get_int(r), 2); /* more was sent, unread */
    wait_readable(fd, 6);
    SYS(close(fd));
    p_put_int(r, 3);
}

static void reset_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    p_write_all(fd, "ping", 4);
    CHECK_EQ(p_get_int(r), 1);
    p_write_all(fd, "unread", 6);
    p_put_int(r, 2);
    CHECK_EQ(p_get_int(r), 3);
    char buf[8];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    CHECK_EQ(poll(&p, 1, 10000), 1);
    CHECK_ERR(recv(fd, buf, sizeof buf, 0), ECONNRESET);
    CHECK_EQ(recv(fd, buf, sizeof buf, 0), 0);
    SYS(close(fd));
}

int main(void)
{
    p_init("data");
    p_case("calls", calls_server, calls_client, P_CARRIED);
    p_case("peek", peek_server, peek_client, P_CARRIED);
    p_case("peek_recvmsg_iov", peek_iov_server, peek_iov_client, P_CARRIED);
    p_case("waitall", waitall_server, waitall_client, P_CARRIED);
    p_case("waitall_recvmsg_iov", waitall_iov_server, waitall_iov_client, P_CARRIED);
    p_case("dontwait", dontwait_server, dontwait_client, P_CARRIED);
    p_case("stream_8mib", stream_server, stream_client, P_CARRIED);
    p_case("sendfile", sendfile_server, sendfile_client, P_CARRIED);
    p_case("eof_after_peer_close", closer_server, eof_client, P_CARRIED);
    p_case("epipe_after_peer_close", closer_server, epipe_client, P_CARRIED);
    p_case("peer_exit_eof", exiter_server, exiter_client, P_CARRIED);
    p_case("shutdown", shut_server, shut_client, P_CARRIED);
    p_case("close_unread_resets", reset_server, reset_client, P_CARRIED);
    return p_done();
}
