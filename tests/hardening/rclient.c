/*
 * rclient.c - hostile_run's healthy client and probe under `sovia run`:
 * plain libc clients of the victim (see rvictim.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rvictim.h"

/* Sends len bytes of stream `seed` from *pos and reads them back, checking
 * each byte, within ms (non-blocking fd). NULL when all came back exact,
 * else what went wrong (in a static buffer). */
static const char *echo(int fd, uint64_t seed, uint64_t *pos, size_t len, int ms)
{
    static char why[160];
    static uint8_t buf[64 * 1024];
    size_t sent = 0, got = 0;
    double end = rv_now_ms() + ms;
    while (got < len) {
        int left = (int)(end - rv_now_ms());
        if (left <= 0) {
            snprintf(why, sizeof why, "timed out: %zu of %zu bytes sent, %zu back", sent, len, got);
            return why;
        }
        struct pollfd p = {fd, (short)(POLLIN | (sent < len ? POLLOUT : 0)), 0};
        if (poll(&p, 1, left) < 0 && errno != EINTR) {
            snprintf(why, sizeof why, "poll: %s", strerror(errno));
            return why;
        }
        if (sent < len && (p.revents & (POLLOUT | POLLERR))) {
            size_t k = len - sent < sizeof buf ? len - sent : sizeof buf;
            for (size_t i = 0; i < k; i++)
                buf[i] = rv_pattern(seed, *pos + sent + i);
            ssize_t n = send(fd, buf, k, MSG_NOSIGNAL);
            if (n < 0 && errno != EAGAIN && errno != EINTR) {
                snprintf(why, sizeof why, "send: %s", strerror(errno));
                return why;
            }
            sent += n > 0 ? (size_t)n : 0;
        }
        if (p.revents & (POLLIN | POLLERR | POLLHUP)) {
            ssize_t n = recv(fd, buf, sizeof buf, 0);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                snprintf(why, sizeof why, "recv after %zu bytes: %s", got,
                         n == 0 ? "end of stream" : strerror(errno));
                return why;
            }
            for (ssize_t i = 0; i < n; i++)
                if (buf[i] != rv_pattern(seed, *pos + got + (size_t)i)) {
                    snprintf(why, sizeof why, "byte %zu of the echo differs",
                             got + (size_t)i);
                    return why;
                }
            got += n > 0 ? (size_t)n : 0;
        }
    }
    *pos += len;
    return NULL;
}

/* A connected TCP socket to 127.0.0.1:port (from local_port unless 0),
 * non-blocking once connected; -1 with errno. */
static int dial(uint16_t port, uint16_t local_port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int on = 1;
    a.sin_port = htons(local_port);
    if (local_port && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
                       bind(fd, (struct sockaddr *)&a, sizeof a) != 0))
        goto fail;
    a.sin_port = htons(port);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0)
        goto fail;
    return fd;
fail:;
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

int rv_client(int chan, uint16_t port)
{
    int fd = dial(port, 0);
    RV_CHECK(fd >= 0, "connect to %u: %s", port, strerror(errno));
    uint64_t pos = 0;
    for (;;) {
        uint64_t seed;
        rv_get(chan, &seed, sizeof seed);
        if (seed == RV_QUIT)
            break;
        size_t len = 1 + (size_t)((seed * 0x9e3779b97f4a7c15ULL) >> 40) % 200000;
        const char *why = echo(fd, 42, &pos, len, RV_ECHO_MS);
        RV_CHECK(!why, "the healthy echo of %zu bytes at %llu: %s", len,
                 (unsigned long long)pos, why);
        rv_put(chan, "k", 1);
    }
    RV_CHECK(close(fd) == 0, "close: %s", strerror(errno));
    rv_put(chan, "c", 1);
    return 0;
}

int rv_probe(int chan, uint16_t port, uint16_t local_port)
{
    int32_t ok = 0;
    int fd = dial(port, local_port);
    if (fd < 0) {
        rv_log("probe: connect from %u: %s", local_port, strerror(errno));
    } else {
        uint64_t pos = 0;
        const char *why = echo(fd, 7, &pos, 5000, RV_ECHO_MS);
        if (why)
            rv_log("probe from port %u: %s", local_port, why);
        ok = !why;
        close(fd);
    }
    rv_put(chan, &ok, sizeof ok);
    return 0;
}
