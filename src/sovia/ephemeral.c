/*
 * ephemeral.c - sovia run's client port: connect() binds the socket before
 * the kernel connect, so that its VI can name the client port (docs/
 * ARCHITECTURE.md, "Establishment"). bind() to port 0 scans the ephemeral
 * range for a port no socket holds at all, and a host that makes many
 * short connections holds thousands in TIME_WAIT: with 16,700 of them here
 * one bind(0) took 0.13 to 6 ms, where the kernel's own connect() (which
 * may share a port with a TIME_WAIT of another peer) takes microseconds.
 * So a few random ports of the same range are tried first, each one bind()
 * that looks at that port only; bind(0) remains the last resort.
 */
#include "ephemeral.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

/* Random ports tried before bind(0): at 90 % of the range taken, all 8
 * miss 43 % of the time. */
#define PORT_TRIES 8

static bool reserved(const struct sov_ports *p, unsigned port)
{
    return p->reserved[port / 8] & (1u << (port % 8));
}

int sov_ports_parse(struct sov_ports *p, const char *range, const char *reserved_list)
{
    memset(p, 0, sizeof(*p));
    unsigned lo, hi;
    if (!range || sscanf(range, "%u %u", &lo, &hi) != 2 || lo == 0 || lo > hi || hi > 65535)
        return -EINVAL;
    p->lo = (uint16_t)lo;
    p->hi = (uint16_t)hi;
    /* "8080,9000-9010" (empty: none) */
    for (const char *s = reserved_list ? reserved_list : ""; *s && *s != '\n';) {
        char *end;
        unsigned long a = strtoul(s, &end, 10), b = a;
        if (end == s || a > 65535)
            return -EINVAL;
        if (*end == '-') {
            s = end + 1;
            b = strtoul(s, &end, 10);
            if (end == s || b > 65535 || b < a)
                return -EINVAL;
        }
        for (unsigned long x = a; x <= b; x++)
            p->reserved[x / 8] |= (uint8_t)(1u << (x % 8));
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',' && *end != '\n')
            return -EINVAL;
    }
    p->ok = true;
    return 0;
}

static int bind_port(int fd, int domain, unsigned port)
{
    struct sockaddr_storage a = {.ss_family = (sa_family_t)domain};
    socklen_t len = sizeof(struct sockaddr_in);
    if (domain == AF_INET) {
        ((struct sockaddr_in *)&a)->sin_port = htons((uint16_t)port);
    } else {
        ((struct sockaddr_in6 *)&a)->sin6_port = htons((uint16_t)port);
        len = sizeof(struct sockaddr_in6);
    }
    return bind(fd, (struct sockaddr *)&a, len);
}

static uint64_t next_random(void)
{
    static _Thread_local uint64_t x;
    if (!x && (getrandom(&x, sizeof(x), GRND_NONBLOCK) != sizeof(x) || !x)) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        x = ((uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec) | 1;
    }
    x ^= x << 13; /* xorshift64: spreading ports, nothing secret */
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}

int sov_ports_bind(const struct sov_ports *p, int fd, int domain)
{
    /* A socket that shares ports (SO_REUSEADDR, SO_REUSEPORT) could be
     * bound beside another of the same peer; bind(0) picks for it. */
    int on = 0;
    socklen_t len = sizeof(on);
    bool shares = getsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, &len) != 0 || on;
    len = sizeof(on);
    shares = shares || getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, &len) != 0 || on;
    if (p->ok && !shares) {
        unsigned span = (unsigned)p->hi - p->lo + 1u;
        for (int i = 0; i < PORT_TRIES; i++) {
            unsigned port = p->lo + (unsigned)(next_random() % span);
            if (reserved(p, port))
                continue;
            if (bind_port(fd, domain, port) == 0)
                return 0;
            if (errno != EADDRINUSE)
                break; /* a policy of the host's, say: the kernel's choice */
        }
    }
    return bind_port(fd, domain, 0);
}

static struct sov_ports host_ports;
static pthread_once_t host_once = PTHREAD_ONCE_INIT;

static void read_line(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    if (!fgets(buf, (int)len, f))
        buf[0] = '\0';
    fclose(f);
}

/* The network namespace's settings when the process first connects (a
 * change later is not seen: bind(0) would follow it, these tries not). */
static void host_read(void)
{
    static char range[64], res[4096];
    read_line("/proc/sys/net/ipv4/ip_local_port_range", range, sizeof(range));
    read_line("/proc/sys/net/ipv4/ip_local_reserved_ports", res, sizeof(res));
    if (sov_ports_parse(&host_ports, range, res) != 0)
        host_ports.ok = false; /* unreadable (a sandbox): bind(0) only */
}

int sov_bind_ephemeral(int fd, int domain)
{
    pthread_once(&host_once, host_read);
    return sov_ports_bind(&host_ports, fd, domain);
}
