/*
 * ephemeral: sovia run's client port (src/sovia/ephemeral.c), which
 * connect() gives a socket before the kernel connect.
 *  - the sysctl texts: range and reserved lists, and what the kernel would
 *    not write (EINVAL);
 *  - a port of the range only, never a reserved one, and a free one of
 *    the range is taken (not bind(0)'s);
 *  - a port that another socket holds (bound, or in TIME_WAIT) is not
 *    taken: with every port of a one-port range held, bind(0) picks, as
 *    it does when nothing is readable;
 *  - a socket that shares ports (SO_REUSEADDR) gets bind(0)'s port.
 */
#include "sharness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <unistd.h>

#include "../../src/sovia/ephemeral.h"

/* A kernel TCP socket (the picker binds kernel sockets, not sovia's). */
static int ksock(int family)
{
    return (int)SYS(socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
}

static unsigned port_of(int fd)
{
    struct sockaddr_storage a;
    socklen_t len = sizeof a;
    SYS(getsockname(fd, (struct sockaddr *)&a, &len));
    return ntohs(a.ss_family == AF_INET ? ((struct sockaddr_in *)&a)->sin_port
                                        : ((struct sockaddr_in6 *)&a)->sin6_port);
}

/* A port free now on both families' wildcard addresses. */
static unsigned free_port(void)
{
    int fd = ksock(AF_INET6);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6};
    SYS(bind(fd, (struct sockaddr *)&a, sizeof a));
    unsigned p = port_of(fd);
    close(fd);
    return p;
}

static void parse(void)
{
    struct sov_ports p;
    CHECK_EQ(sov_ports_parse(&p, "32768\t60999\n", "\n"), 0);
    CHECK(p.ok && p.lo == 32768 && p.hi == 60999);
    CHECK_EQ(sov_ports_parse(&p, "1024 65535", "8080,9000-9002\n"), 0);
    CHECK(p.reserved[8080 / 8] & (1u << (8080 % 8)));
    for (unsigned x = 9000; x <= 9002; x++)
        CHECK(p.reserved[x / 8] & (1u << (x % 8)));
    CHECK(!(p.reserved[9003 / 8] & (1u << (9003 % 8))));
    CHECK(!(p.reserved[8081 / 8] & (1u << (8081 % 8))));
    const char *bad[][2] = {{"", ""},         {"5 4", ""},          {"0 10", ""},
                            {"1 70000", ""},  {"1 2", "x"},         {"1 2", "5-3"},
                            {"1 2", "70000"}, {"1 2", "8080;9000"}, {NULL, ""}};
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(sov_ports_parse(&p, bad[i][0], bad[i][1]) == -EINVAL && !p.ok,
                  "range '%s' reserved '%s' accepted", bad[i][0] ? bad[i][0] : "(null)",
                  bad[i][1]);
    }
}

/* Within the range, never reserved: a range of 4 free ports, 3 reserved. */
static void range_only(int family)
{
    unsigned base = free_port();
    char range[32], res[64];
    struct sov_ports p;
    snprintf(range, sizeof range, "%u %u", base, base + 3);
    snprintf(res, sizeof res, "%u-%u,%u", base + 1, base + 2, base + 3);
    CHECK_EQ(sov_ports_parse(&p, range, res), 0);
    for (int i = 0; i < 20; i++) {
        int fd = ksock(family);
        SYS(sov_ports_bind(&p, fd, family));
        unsigned got = port_of(fd);
        close(fd);
        /* base itself, or (taken meanwhile by another test) bind(0)'s */
        CHECK_MSG(got == base || got < base || got > base + 3,
                  "got reserved port %u (range %s, reserved %s)", got, range, res);
    }
}

/* A free port of the range is the one taken (not bind(0)'s): its only
 * one; three tries, as another process may take a port freed just now. */
static void picks(int family)
{
    unsigned base = 0, got = 0;
    for (int t = 0; t < 3 && got != base + 2; t++) {
        char range[32], res[32];
        struct sov_ports p;
        base = free_port() - 2;
        snprintf(range, sizeof range, "%u %u", base, base + 2);
        snprintf(res, sizeof res, "%u-%u", base, base + 1);
        CHECK_EQ(sov_ports_parse(&p, range, res), 0);
        int fd = ksock(family);
        SYS(sov_ports_bind(&p, fd, family));
        got = port_of(fd);
        close(fd);
    }
    CHECK_MSG(got == base + 2, "range [%u, %u] (all but the last reserved) gave port %u", base,
              base + 2, got);
}

/* A range of one port, free now; its port. */
static unsigned one_port(struct sov_ports *p)
{
    unsigned base = free_port();
    char range[32];
    snprintf(range, sizeof range, "%u %u", base, base);
    CHECK_EQ(sov_ports_parse(p, range, ""), 0);
    return base;
}

/* The one port of the range is held: not taken twice. */
static void held(void)
{
    struct sov_ports p;
    one_port(&p);
    int a = ksock(AF_INET);
    SYS(sov_ports_bind(&p, a, AF_INET));
    unsigned pa = port_of(a);
    int b = ksock(AF_INET);
    SYS(sov_ports_bind(&p, b, AF_INET));
    unsigned pb = port_of(b);
    CHECK_MSG(pa != pb, "two sockets bound to port %u", pa);
    CHECK(pb != 0);
    close(a);
    close(b);
}

/* Nothing readable: bind(0) itself. */
static void not_ok(void)
{
    struct sov_ports p;
    CHECK_EQ(sov_ports_parse(&p, "garbage", ""), -EINVAL);
    int fd = ksock(AF_INET);
    SYS(sov_ports_bind(&p, fd, AF_INET));
    CHECK(port_of(fd) != 0);
    close(fd);
}

/* SO_REUSEADDR: the range is not used (bind(0) picks). */
static void shares(void)
{
    struct sov_ports p;
    unsigned base = one_port(&p);
    int hits = 0;
    for (int i = 0; i < 10; i++) {
        int fd = ksock(AF_INET), on = 1;
        SYS(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on));
        SYS(sov_ports_bind(&p, fd, AF_INET));
        hits += port_of(fd) == base;
        close(fd);
    }
    CHECK_MSG(hits < 10, "a socket with SO_REUSEADDR got the range's port %u every time", base);
}

int main(void)
{
    s_init("ephemeral", 60);
    if (s_case("parse"))
        parse();
    if (s_case("range_only")) {
        range_only(AF_INET);
        range_only(AF_INET6);
    }
    if (s_case("picks")) {
        picks(AF_INET);
        picks(AF_INET6);
    }
    if (s_case("held"))
        held();
    if (s_case("not_ok"))
        not_ok();
    if (s_case("shares"))
        shares();
    s_pass();
}
