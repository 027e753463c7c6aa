/*
 * addr.c - socket addresses, VI addresses and ports.
 *
 * A socket address maps to a VI address: host part = the IP address (4 or
 * 16 bytes), discriminator = "sovia" + the port in network byte order.
 * Ports are reserved per user by binding an abstract Unix socket named
 * "sovia-port.<euid>.<port>": the kernel arbitrates between processes and
 * releases the name with the socket, however the process exits.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "sock.h"

#define DISC_PREFIX "sovia"
#define DISC_LEN (sizeof(DISC_PREFIX) - 1 + 2) /* prefix, port */
#define EPHEMERAL_LO 49152
#define EPHEMERAL_HI 65535

static socklen_t family_len(int domain)
{
    return domain == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

int sov_addr_check(const struct sov_sock *s, const struct sockaddr *a, socklen_t len)
{
    if (!a || len < sizeof(sa_family_t))
        return -EINVAL;
    if (a->sa_family != s->domain)
        return -EAFNOSUPPORT;
    if (len < family_len(s->domain))
        return -EINVAL;
    return 0;
}

uint16_t sov_addr_port(const struct sockaddr *a)
{
    return ntohs(a->sa_family == AF_INET ? ((const struct sockaddr_in *)a)->sin_port
                                         : ((const struct sockaddr_in6 *)a)->sin6_port);
}

void sov_addr_set_port(struct sockaddr_storage *a, uint16_t port)
{
    if (a->ss_family == AF_INET)
        ((struct sockaddr_in *)a)->sin_port = htons(port);
    else
        ((struct sockaddr_in6 *)a)->sin6_port = htons(port);
}

/* The host part of a VI address: the IP address (4 or 16 bytes); an
 * unspecified one (0.0.0.0, ::) becomes loopback (only this host is
 * reachable) unless `keep_any`: a listener's, which a provider that
 * reaches other hosts (fabric) listens on at every address. Its length. */
static uint16_t host_bytes(const struct sockaddr *a, uint8_t host[16], bool keep_any)
{
    if (a->sa_family == AF_INET) {
        struct in_addr in = ((const struct sockaddr_in *)a)->sin_addr;
        if (in.s_addr == htonl(INADDR_ANY) && !keep_any)
            in.s_addr = htonl(INADDR_LOOPBACK);
        memcpy(host, &in, 4);
        return 4;
    }
    struct in6_addr in6 = ((const struct sockaddr_in6 *)a)->sin6_addr;
    if (IN6_IS_ADDR_UNSPECIFIED(&in6) && !keep_any)
        in6 = in6addr_loopback;
    memcpy(host, &in6, 16);
    return 16;
}

/* The VI address of a socket address (malloc'd; free()). The
 * discriminator is "sovia" + the port; `kind` 0 is the socket's own, else
 * one more byte (CLAIM_MARK, TICKET_MARK), then the ticket if nonzero. */
static VIP_NET_ADDRESS *vi_address(const struct sockaddr *a, uint8_t kind, uint32_t ticket,
                                   bool keep_any)
{
    uint8_t host[16];
    uint16_t hlen = host_bytes(a, host, keep_any);
    uint8_t disc[DISC_LEN + 1 + sizeof(ticket)];
    uint16_t port = htons(sov_addr_port(a));
    memcpy(disc, DISC_PREFIX, sizeof(DISC_PREFIX) - 1);
    memcpy(disc + sizeof(DISC_PREFIX) - 1, &port, 2);
    uint16_t len = DISC_LEN;
    if (kind) {
        disc[len++] = kind;
        if (ticket) {
            memcpy(disc + len, &ticket, sizeof(ticket));
            len += sizeof(ticket);
        }
    }
    return VipxAllocNetAddress(host, hlen, disc, len);
}

VIP_NET_ADDRESS *sov_vi_address(const struct sockaddr *a)
{
    return vi_address(a, 0, 0, false);
}

VIP_NET_ADDRESS *sov_vi_listen_address(const struct sockaddr *a)
{
    return vi_address(a, 0, 0, true);
}

#define CLAIM_MARK 'C'
#define TICKET_MARK 'T'

/* A claim names the accepted connection: the host part is its server
 * address, the discriminator "sovia" + the server port + CLAIM_MARK + the
 * ticket (4 bytes, 0: none) + the client port + the client's IP address
 * (as long as the server's). */
VIP_NET_ADDRESS *sov_vi_claim_address(const struct sockaddr *server, const struct sockaddr *client,
                                      uint32_t ticket)
{
    uint8_t host[16], chost[16];
    uint16_t hlen = host_bytes(server, host, false);
    if (host_bytes(client, chost, false) != hlen)
        return NULL;
    uint8_t disc[DISC_LEN + 1 + sizeof(ticket) + 2 + 16];
    uint16_t port = htons(sov_addr_port(server)), cport = htons(sov_addr_port(client));
    uint16_t len = DISC_LEN + 1;
    memcpy(disc, DISC_PREFIX, sizeof(DISC_PREFIX) - 1);
    memcpy(disc + sizeof(DISC_PREFIX) - 1, &port, 2);
    disc[DISC_LEN] = CLAIM_MARK;
    memcpy(disc + len, &ticket, sizeof(ticket));
    len += sizeof(ticket);
    memcpy(disc + len, &cport, 2);
    memcpy(disc + len + 2, chost, hlen);
    len += 2 + hlen;
    return VipxAllocNetAddress(host, hlen, disc, len);
}

VIP_NET_ADDRESS *sov_vi_ticket_address(const struct sockaddr *a, uint32_t ticket)
{
    return vi_address(a, TICKET_MARK, ticket, false);
}

static void sockaddr_of(const uint8_t *host, uint16_t hlen, const uint8_t *port,
                        struct sockaddr_storage *out)
{
    memset(out, 0, sizeof(*out));
    if (hlen == 4) {
        struct sockaddr_in *sin = (struct sockaddr_in *)out;
        sin->sin_family = AF_INET;
        memcpy(&sin->sin_port, port, 2);
        memcpy(&sin->sin_addr, host, 4);
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)out;
        sin6->sin6_family = AF_INET6;
        memcpy(&sin6->sin6_port, port, 2);
        memcpy(&sin6->sin6_addr, host, 16);
    }
}

/* The requester names its own address, so a claim's connection is only
 * what it says: the listener checks that the claimant holds it (its
 * token). The ticket (0: none), and the connection's two ends. */
bool sov_vi_is_claim(const VIP_NET_ADDRESS *va, uint32_t *ticket, struct sockaddr_storage *server,
                     struct sockaddr_storage *client)
{
    const uint8_t *disc = va->HostAddress + va->HostAddressLen;
    uint16_t len = va->DiscriminatorLen, hlen = va->HostAddressLen;
    if ((hlen != 4 && hlen != 16) || len != DISC_LEN + 1 + sizeof(*ticket) + 2 + hlen ||
        memcmp(disc, DISC_PREFIX, sizeof(DISC_PREFIX) - 1) != 0 || disc[DISC_LEN] != CLAIM_MARK)
        return false;
    memcpy(ticket, disc + DISC_LEN + 1, sizeof(*ticket));
    sockaddr_of(va->HostAddress, hlen, disc + sizeof(DISC_PREFIX) - 1, server);
    sockaddr_of(disc + DISC_LEN + 1 + sizeof(*ticket) + 2, hlen,
                disc + DISC_LEN + 1 + sizeof(*ticket), client);
    return true;
}

/* A peer's VI address (from VipConnectWait) back into a socket address. */
int sov_sockaddr_from_vi(const VIP_NET_ADDRESS *va, int domain, struct sockaddr_storage *out,
                         socklen_t *len)
{
    const uint8_t *disc = va->HostAddress + va->HostAddressLen;
    if (va->DiscriminatorLen != DISC_LEN ||
        memcmp(disc, DISC_PREFIX, sizeof(DISC_PREFIX) - 1) != 0)
        return -EPROTO;
    uint16_t port;
    memcpy(&port, disc + sizeof(DISC_PREFIX) - 1, 2);
    memset(out, 0, sizeof(*out));
    if (domain == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)out;
        sin->sin_family = AF_INET;
        sin->sin_port = port;
        if (va->HostAddressLen == 4)
            memcpy(&sin->sin_addr, va->HostAddress, 4);
        else /* an IPv6 client of an IPv4 socket: show loopback */
            sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)out;
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = port;
        if (va->HostAddressLen == 16) {
            memcpy(&sin6->sin6_addr, va->HostAddress, 16);
        } else { /* v4-mapped */
            sin6->sin6_addr.s6_addr[10] = sin6->sin6_addr.s6_addr[11] = 0xff;
            memcpy(&sin6->sin6_addr.s6_addr[12], va->HostAddress, 4);
        }
    }
    *len = family_len(domain);
    return 0;
}

static int try_reserve(uint16_t port)
{
    VipxFdCreateBegin();
    int fd = VipxFdAdopt(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    VipxFdCreateEnd();
    if (fd < 0)
        return -errno;
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    int n = snprintf(sun.sun_path + 1, sizeof(sun.sun_path) - 1, "sovia-port.%u.%u",
                     (unsigned)geteuid(), (unsigned)port);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    if (bind(fd, (struct sockaddr *)&sun, len) != 0) {
        int err = errno;
        VipxFdClose(fd);
        return -err;
    }
    return fd;
}

/* Reserves `port` (0: a free ephemeral one) for `s` and records it in
 * s->local. 0 or -EADDRINUSE. */
int sov_reserve_port(struct sov_sock *s, uint16_t port)
{
    if (port) {
        int fd = try_reserve(port);
        if (fd < 0)
            return fd == -EADDRINUSE ? -EADDRINUSE : fd;
        s->port_fd = fd;
        sov_addr_set_port(&s->local, port);
        return 0;
    }
    unsigned span = EPHEMERAL_HI - EPHEMERAL_LO + 1;
    unsigned start = (unsigned)(sov_now_ns() ^ (uint64_t)getpid() * 2654435761u) % span;
    for (unsigned i = 0; i < span; i++) {
        uint16_t p = (uint16_t)(EPHEMERAL_LO + (start + i) % span);
        int fd = try_reserve(p);
        if (fd >= 0) {
            s->port_fd = fd;
            sov_addr_set_port(&s->local, p);
            return 0;
        }
        if (fd != -EADDRINUSE)
            return fd;
    }
    return -EADDRINUSE;
}

void sov_copy_addr(const struct sockaddr_storage *from, socklen_t from_len, struct sockaddr *to,
                   socklen_t *to_len)
{
    if (to && to_len) {
        socklen_t n = *to_len < from_len ? *to_len : from_len;
        memcpy(to, from, n);
    }
    if (to_len)
        *to_len = from_len;
}

/* The last answers for other addresses, for a second: each costs three
 * system calls, paid on every connect() (to a host without sovia too:
 * 1.2x kernel TCP's connect and first exchange, docs/SOCKETS.md). A host
 * gains or loses an address rarely, and a stale answer only picks another
 * carrier: a shm pairing or the key's proofs check every connection.
 * trylock: never waits (a fork child of a thread holding it answers
 * uncached). */
#define LOCAL_CACHED 8
#define LOCAL_TTL_NS 1000000000ull
static struct local_answer {
    struct sockaddr_storage a; /* port 0 */
    socklen_t len;
    bool local;
    uint64_t at_ns; /* 0: empty */
} local_cache[LOCAL_CACHED];
static unsigned local_next;
static pthread_mutex_t local_lock = PTHREAD_MUTEX_INITIALIZER;

static int local_cached(const struct sockaddr_storage *a, socklen_t len, uint64_t now)
{
    int found = -1;
    if (pthread_mutex_trylock(&local_lock) != 0)
        return -1;
    for (unsigned i = 0; i < LOCAL_CACHED && found < 0; i++) {
        const struct local_answer *e = &local_cache[i];
        if (e->at_ns && now - e->at_ns < LOCAL_TTL_NS && e->len == len && memcmp(&e->a, a, len) == 0)
            found = e->local;
    }
    pthread_mutex_unlock(&local_lock);
    return found;
}

static void local_note(const struct sockaddr_storage *a, socklen_t len, bool local, uint64_t now)
{
    if (pthread_mutex_trylock(&local_lock) != 0)
        return;
    struct local_answer *e = &local_cache[local_next++ % LOCAL_CACHED];
    e->a = *a;
    e->len = len;
    e->local = local;
    e->at_ns = now;
    pthread_mutex_unlock(&local_lock);
}

/* Is `a` an address of this host (any address, loopback, or bindable)? */
bool sov_addr_is_local(const struct sockaddr *a, socklen_t len)
{
    if (a->sa_family == AF_INET) {
        struct in_addr in = ((const struct sockaddr_in *)a)->sin_addr;
        if (in.s_addr == htonl(INADDR_ANY) || (ntohl(in.s_addr) >> 24) == 127)
            return true;
    } else {
        const struct in6_addr *in6 = &((const struct sockaddr_in6 *)a)->sin6_addr;
        if (IN6_IS_ADDR_UNSPECIFIED(in6) || IN6_IS_ADDR_LOOPBACK(in6))
            return true;
    }
    struct sockaddr_storage tmp = {0};
    if (len > sizeof(tmp))
        len = sizeof(tmp);
    memcpy(&tmp, a, len);
    sov_addr_set_port(&tmp, 0);
    uint64_t now = sov_now_ns();
    int cached = local_cached(&tmp, len, now);
    if (cached >= 0)
        return cached;
    VipxFdCreateBegin();
    int fd = VipxFdAdopt(socket(a->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    VipxFdCreateEnd();
    if (fd < 0)
        return false;
    bool ok = bind(fd, (struct sockaddr *)&tmp, len) == 0;
    VipxFdClose(fd);
    local_note(&tmp, len, ok, now);
    return ok;
}

bool sov_addr_is_loopback(const struct sockaddr *a)
{
    if (a->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
    const struct in6_addr *in6 = &((const struct sockaddr_in6 *)a)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(in6) || (IN6_IS_ADDR_V4MAPPED(in6) && in6->s6_addr[12] == 127);
}

static bool is_loopback_or_any(const struct sockaddr *a)
{
    if (a->sa_family == AF_INET) {
        uint32_t in = ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr);
        return in == INADDR_ANY || (in >> 24) == 127;
    }
    const struct in6_addr *in6 = &((const struct sockaddr_in6 *)a)->sin6_addr;
    return IN6_IS_ADDR_UNSPECIFIED(in6) || IN6_IS_ADDR_LOOPBACK(in6) ||
           (IN6_IS_ADDR_V4MAPPED(in6) && in6->s6_addr[12] == 127);
}

/* The address the kernel would send from to reach `peer`: that of a
 * datagram socket connected to it (connect sends nothing). */
static int route_source(const struct sockaddr *peer, struct sockaddr_storage *out)
{
    socklen_t plen = family_len(peer->sa_family), olen = sizeof(*out);
    VipxFdCreateBegin();
    int fd = VipxFdAdopt(socket(peer->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    VipxFdCreateEnd();
    if (fd < 0)
        return -errno;
    struct sockaddr_storage to;
    memcpy(&to, peer, plen);
    sov_addr_set_port(&to, 9); /* any nonzero port: 0 is refused */
    int err = connect(fd, (struct sockaddr *)&to, plen) == 0 &&
                      getsockname(fd, (struct sockaddr *)out, &olen) == 0
                  ? 0
                  : -errno;
    VipxFdClose(fd);
    return err;
}

int sov_addr_fill_source(struct sockaddr_storage *local, const struct sockaddr *peer)
{
    bool any = local->ss_family == AF_INET
                   ? ((struct sockaddr_in *)local)->sin_addr.s_addr == htonl(INADDR_ANY)
                   : IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)local)->sin6_addr);
    if (!any || peer->sa_family != local->ss_family)
        return 0;
    uint16_t port = sov_addr_port((struct sockaddr *)local);
    if (is_loopback_or_any(peer)) {
        /* As the kernel chooses for local routes: the destination itself
         * (0.0.0.0 / :: reach loopback). */
        uint8_t host[16];
        host_bytes(peer, host, false);
        if (local->ss_family == AF_INET)
            memcpy(&((struct sockaddr_in *)local)->sin_addr, host, 4);
        else
            memcpy(&((struct sockaddr_in6 *)local)->sin6_addr, host, 16);
    } else {
        struct sockaddr_storage src;
        int err = route_source(peer, &src);
        if (err)
            return err;
        memcpy(local, &src, family_len(local->ss_family));
    }
    sov_addr_set_port(local, port);
    return 0;
}
