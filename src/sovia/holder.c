/*
 * holder.c - sovia run: who owns the ends of a kernel TCP connection, and
 * whether a VI's sender holds one (docs/SECURITY.md, "Another user").
 *
 * The kernel's socket diagnostics (NETLINK_SOCK_DIAG, open to every user:
 * `ss -e` shows the same) give, for a TCP socket named by its four
 * addresses, the uid it belongs to (its creator's, or for an accepted
 * socket the accepting process's) and its inode (0 until accepted). A
 * client dials the sovia listener of the user that owns the TCP listener
 * it connects to, and follows a REDIRECT only to the user that accepted
 * its connection; a listener pairs a VI only with a connection whose end
 * the VI's sender proves to hold (sov_token_holds).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "sock.h"

/* A socket of sovia's own (vipl_ext.h, "sovia's own descriptors"). */
static int own_socket(int domain, int type, int protocol)
{
    VipxFdCreateBegin();
    int fd = VipxFdAdopt(socket(domain, type, protocol));
    VipxFdCreateEnd();
    return fd;
}

/* An IPv4-mapped IPv6 address is looked up as the IPv4 one: the kernel
 * hashes such connections by their IPv4 addresses. An unspecified one
 * (0.0.0.0, ::: a connect there reaches this host's loopback) as
 * loopback. */
static int diag_addr(const struct sockaddr *a, uint8_t *family, uint32_t out[4], uint16_t *port)
{
    memset(out, 0, 16);
    if (a->sa_family == AF_INET) {
        const struct sockaddr_in *s = (const void *)a;
        *family = AF_INET;
        out[0] = s->sin_addr.s_addr == htonl(INADDR_ANY) ? htonl(INADDR_LOOPBACK)
                                                         : s->sin_addr.s_addr;
        *port = s->sin_port;
        return 0;
    }
    if (a->sa_family != AF_INET6)
        return -EAFNOSUPPORT;
    const struct sockaddr_in6 *s = (const void *)a;
    *port = s->sin6_port;
    if (IN6_IS_ADDR_V4MAPPED(&s->sin6_addr)) {
        *family = AF_INET;
        memcpy(out, &s->sin6_addr.s6_addr[12], 4);
    } else {
        *family = AF_INET6;
        memcpy(out, IN6_IS_ADDR_UNSPECIFIED(&s->sin6_addr) ? &in6addr_loopback : &s->sin6_addr, 16);
    }
    return 0;
}

/*
 * The TCP socket the kernel would deliver a segment from `peer` to `own`
 * to: with a peer of 0.0.0.0:0, the listener of `own`. Its uid and inode;
 * 0, -ENOENT (none), or another -errno (no socket diagnostics here).
 */
static int lookup(const struct sockaddr *own, const struct sockaddr *peer, uid_t *uid,
                  uint64_t *ino)
{
    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 r;
    } req = {
        .nlh = {.nlmsg_len = sizeof(req), .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                .nlmsg_flags = NLM_F_REQUEST, .nlmsg_seq = 1},
        .r = {.sdiag_protocol = IPPROTO_TCP, .idiag_states = ~0u,
              .id.idiag_cookie = {INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE}},
    };
    uint8_t pf = 0;
    int err = diag_addr(own, &req.r.sdiag_family, req.r.id.idiag_src, &req.r.id.idiag_sport);
    if (!err && peer)
        err = diag_addr(peer, &pf, req.r.id.idiag_dst, &req.r.id.idiag_dport);
    if (err || (peer && pf != req.r.sdiag_family))
        return err ? err : -EAFNOSUPPORT;
    int nl = own_socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (nl < 0)
        return -errno;
    /* The system calls themselves: send and recv are the preload's. */
    union {
        struct nlmsghdr h;
        char buf[1024];
    } u;
    long n = syscall(SYS_sendto, nl, &req, sizeof(req), 0, NULL, 0);
    if (n == (long)sizeof(req))
        n = syscall(SYS_recvfrom, nl, u.buf, sizeof(u.buf), 0, NULL, NULL);
    err = n < 0 ? -errno : -EPROTO;
    VipxFdClose(nl);
    if (n < (long)sizeof(struct nlmsghdr) || u.h.nlmsg_len > (uint32_t)n)
        return err;
    if (u.h.nlmsg_type == NLMSG_ERROR && u.h.nlmsg_len >= NLMSG_LENGTH(sizeof(struct nlmsgerr))) {
        const struct nlmsgerr *e = NLMSG_DATA(&u.h);
        return e->error ? e->error : -EPROTO;
    }
    if (u.h.nlmsg_type != SOCK_DIAG_BY_FAMILY ||
        u.h.nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
        return -EPROTO;
    const struct inet_diag_msg *m = NLMSG_DATA(&u.h);
    /* The listener, when asked for one (not a connection of that port). */
    if (!peer && m->idiag_state != TCP_LISTEN)
        return -ENOENT;
    *uid = m->idiag_uid;
    *ino = m->idiag_inode;
    return 0;
}

int sov_listener_owner(const struct sockaddr *to, uid_t *uid)
{
    uint64_t ino;
    return lookup(to, NULL, uid, &ino);
}

int sov_socket_owner(const struct sockaddr *own, const struct sockaddr *peer, uid_t *uid,
                     uint64_t *ino)
{
    return lookup(own, peer, uid, ino);
}

/* An IPv4-mapped IPv6 address as the IPv4 one, for comparing. */
static void plain_addr(struct sockaddr_storage *a)
{
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)a;
    if (a->ss_family != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
        return;
    struct sockaddr_in s4 = {.sin_family = AF_INET, .sin_port = s6->sin6_port};
    memcpy(&s4.sin_addr, &s6->sin6_addr.s6_addr[12], 4);
    memset(a, 0, sizeof(*a));
    memcpy(a, &s4, sizeof(s4));
}

bool sov_same_endpoint(const struct sockaddr *x, const struct sockaddr *y)
{
    struct sockaddr_storage a = {0}, b = {0};
    memcpy(&a, x, x->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
    memcpy(&b, y, y->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
    plain_addr(&a);
    plain_addr(&b);
    if (a.ss_family != b.ss_family)
        return false;
    if (a.ss_family == AF_INET) {
        const struct sockaddr_in *p = (const void *)&a, *q = (const void *)&b;
        return p->sin_port == q->sin_port && p->sin_addr.s_addr == q->sin_addr.s_addr;
    }
    const struct sockaddr_in6 *p = (const void *)&a, *q = (const void *)&b;
    return a.ss_family == AF_INET6 && p->sin6_port == q->sin6_port &&
           !memcmp(&p->sin6_addr, &q->sin6_addr, sizeof(p->sin6_addr));
}

/* A socket token (the same user's): a TCP socket whose own and peer
 * addresses are those. A connection's four addresses name one socket on
 * this host, and another process holds it only if its owner gave it. */
static bool socket_is(int token, const struct sockaddr *own, const struct sockaddr *peer)
{
    int type = 0, proto = 0;
    socklen_t tl = sizeof(type), pl = sizeof(proto);
    struct sockaddr_storage t_own, t_peer;
    socklen_t l1 = sizeof(t_own), l2 = sizeof(t_peer);
    return getsockopt(token, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM &&
           getsockopt(token, SOL_SOCKET, SO_PROTOCOL, &proto, &pl) == 0 &&
           proto == IPPROTO_TCP && getsockname(token, (struct sockaddr *)&t_own, &l1) == 0 &&
           getpeername(token, (struct sockaddr *)&t_peer, &l2) == 0 &&
           sov_same_endpoint((struct sockaddr *)&t_own, own) &&
           sov_same_endpoint((struct sockaddr *)&t_peer, peer);
}

/* The one file an epoll token watches, from /proc/self/fdinfo: its inode
 * and the kernel's number of its file system. False unless there is
 * exactly one (only epoll's fdinfo has "tfd:" lines). */
static bool epoll_target(int token, uint64_t *ino, unsigned long *sdev)
{
    char path[48], buf[1024];
    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", token);
    int f = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (f < 0)
        return false;
    long n = syscall(SYS_read, f, buf, sizeof(buf) - 1);
    syscall(SYS_close, f);
    if (n <= 0 || n == (long)sizeof(buf) - 1)
        return false;
    buf[n] = 0;
    const char *t = strstr(buf, "\ntfd:");
    if (!t || strstr(t + 1, "\ntfd:"))
        return false;
    const char *i = strstr(t, " ino:"), *d = strstr(t, " sdev:");
    const char *eol = strchr(t + 1, '\n');
    return i && d && (!eol || (i < eol && d < eol)) && sscanf(i, " ino:%" SCNx64, ino) == 1 &&
           sscanf(d, " sdev:%lx", sdev) == 1;
}

/* The kernel's number (major << 20 | minor) of the sockets' file system,
 * looked up once (racing first callers store the same value). */
static bool sockfs_dev(unsigned long *dev)
{
    static _Atomic unsigned long cached; /* 0: not yet (sockfs is never 0:0) */
    unsigned long d = atomic_load_explicit(&cached, memory_order_relaxed);
    if (!d) {
        int s = own_socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct stat st;
        bool ok = s >= 0 && fstat(s, &st) == 0;
        if (s >= 0)
            VipxFdClose(s);
        if (!ok)
            return false;
        d = (unsigned long)major(st.st_dev) << 20 | minor(st.st_dev);
        atomic_store_explicit(&cached, d, memory_order_relaxed);
    }
    *dev = d;
    return true;
}

uint64_t sov_token_target(int token)
{
    uint64_t ino;
    unsigned long sdev, dev;
    return epoll_target(token, &ino, &sdev) && sockfs_dev(&dev) && sdev == dev ? ino : 0;
}

/*
 * Whether `token`, sent with a VI by a process of `uid`, proves that the
 * process holds the TCP socket whose own address is `own` and peer `peer`:
 * either it is that socket (the same user's), or an epoll instance that
 * watches exactly that socket (another user's, shm_token_wrap), which
 * only a holder of the socket could make; the socket must belong to `uid`
 * too. Inode numbers can repeat after 2^32 sockets, so the uid check is
 * what stops another user even then.
 */
bool sov_token_holds(int token, uid_t uid, const struct sockaddr *own, const struct sockaddr *peer)
{
    if (token < 0)
        return false;
    if (socket_is(token, own, peer))
        return true;
    uint64_t want, ino;
    unsigned long sdev, dev;
    uid_t owner;
    return epoll_target(token, &want, &sdev) && sockfs_dev(&dev) && sdev == dev &&
           sov_socket_owner(own, peer, &owner, &ino) == 0 && ino && ino == want && owner == uid;
}
