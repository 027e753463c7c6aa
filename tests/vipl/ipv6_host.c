/*
 * ipv6_host: 16-byte (IPv6) host addresses in VIP_NET_ADDRESS.
 *   - a request to ::1, and to ::ffff:127.0.0.1, reaches a listener on this
 *     host like 127.0.0.1 does: connected, data byte-exact; the listener
 *     sees the requester's (16-byte) address as given;
 *   - a listener may name itself ::1 (VipxListen, VipConnectWait);
 *   - a global IPv6 address of this host (if it has one) works too;
 *   - a 16-byte address that is not this host (2001:db8::1, ::ffff:192.0.2.1)
 *     and a host length of 5: VIP_NOT_REACHABLE, promptly, the VI IDLE
 *     after, even though the discriminator is listened to.
 */
#include "harness.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>

enum { R_V6, R_MAPPED, R_V6_TO_V4, R_GLOBAL, NROUNDS };
static char srv[NROUNDS][80], cli[NROUNDS][80];

static const VIP_UINT8 v6_loop[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
static const VIP_UINT8 v6_mapped_loop[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
static const VIP_UINT8 v6_doc[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
static const VIP_UINT8 v6_mapped_far[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1};

static int have_global;
static VIP_UINT8 v6_global[16];

/* Per round: the requester's local host and the address it dials. */
struct round {
    const VIP_UINT8 *cli_host;
    VIP_UINT16 cli_len;
    const VIP_UINT8 *srv_host; /* the address dialled */
    VIP_UINT16 srv_len;
    const VIP_UINT8 *listen_host; /* the listener's own LocalAddr */
    VIP_UINT16 listen_len;
};
static struct round rounds[NROUNDS];

#define MSG 333

static VIP_NET_ADDRESS *mkaddr(const VIP_UINT8 *host, VIP_UINT16 hlen, const char *disc)
{
    VIP_NET_ADDRESS *a = VipxAllocNetAddress(host, hlen, disc, (VIP_UINT16)strlen(disc));
    CHECK_MSG(a != NULL, "VipxAllocNetAddress(host length %u, \"%s\") returned NULL",
              (unsigned)hlen, disc);
    CHECK_EQ(a->HostAddressLen, hlen);
    CHECK(memcmp(a->HostAddress, host, hlen) == 0);
    return a;
}

/* Built by hand: VipxAllocNetAddress may refuse odd host lengths. */
static VIP_NET_ADDRESS *mkaddr_raw(const VIP_UINT8 *host, VIP_UINT16 hlen, const char *disc)
{
    size_t dl = strlen(disc);
    VIP_NET_ADDRESS *a = calloc(1, sizeof(VIP_NET_ADDRESS) + hlen + dl);
    CHECK(a != NULL);
    a->HostAddressLen = hlen;
    a->DiscriminatorLen = (VIP_UINT16)dl;
    memcpy(a->HostAddress, host, hlen);
    memcpy(a->HostAddress + hlen, disc, dl);
    return a;
}

/* ---- peer: the listener ----------------------------------------------------------- */

static void peer(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    h_mem buf = h_mem_alloc(nic, t, NROUNDS * 4096, 0);
    h_descs d = h_descs_alloc(nic, t, NROUNDS);
    VIP_VI_HANDLE vi[NROUNDS] = {0};
    VIP_NET_ADDRESS *local[NROUNDS];
    for (int i = 0; i < NROUNDS; i++) {
        if (i == R_GLOBAL && !have_global)
            continue;
        local[i] = mkaddr(rounds[i].listen_host, rounds[i].listen_len, srv[i]);
        CHECK_OK(VipxListen(nic, local[i]));
    }
    h_signal(fd, 'L');
    for (int i = 0; i < NROUNDS; i++) {
        if (i == R_GLOBAL && !have_global)
            continue;
        VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
        vi[i] = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
        h_post_recv1(vi[i], &d, (unsigned)i, buf.ptr + 4096 * i, buf.mh, 4096);
        VIP_NET_ADDRESS *remote = h_addr_room();
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn = NULL;
        CHECK_OK(VipConnectWait(nic, local[i], 20000, remote, &ra, &conn));
        /* The requester's address, as it gave it. */
        CHECK_EQ(remote->HostAddressLen, rounds[i].cli_len);
        CHECK_MSG(memcmp(remote->HostAddress, rounds[i].cli_host, rounds[i].cli_len) == 0,
                  "round %d: the requester's host address differs from what it gave", i);
        CHECK_EQ(remote->DiscriminatorLen, strlen(cli[i]));
        CHECK(memcmp(remote->HostAddress + remote->HostAddressLen, cli[i], strlen(cli[i])) == 0);
        CHECK_OK(VipConnectAccept(conn, vi[i]));
        VIP_DESCRIPTOR *x = h_recv_wait(vi[i], 5000);
        CHECK(x == h_desc(&d, (unsigned)i));
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE | VIP_STATUS_IMMEDIATE);
        CHECK_EQ(x->CS.Length, MSG);
        CHECK_EQ(x->CS.ImmediateData, 600 + i);
        CHECK_RANDOM(buf.ptr + 4096 * i, MSG, 600 + (uint64_t)i);
        CHECK_OK(VipxUnlisten(nic, local[i]));
        free(remote);
        free(local[i]);
        h_signal(fd, 'a');
    }
    h_expect(fd, 'Q');
    for (int i = 0; i < NROUNDS; i++)
        if (vi[i])
            h_vi_teardown(vi[i]);
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
}

/* ---- parent: the requester --------------------------------------------------------- */

static int is_local_v6(const VIP_UINT8 *a)
{
    struct ifaddrs *ifs = NULL;
    int found = 0;
    CHECK(getifaddrs(&ifs) == 0);
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET6)
            found = memcmp(&((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr, a, 16) == 0;
    freeifaddrs(ifs);
    return found;
}

static void find_global_v6(void)
{
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0)
        return;
    for (struct ifaddrs *i = ifs; i && !have_global; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET6 || !(i->ifa_flags & IFF_UP))
            continue;
        const struct in6_addr *a = &((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_LINKLOCAL(a) || IN6_IS_ADDR_V4MAPPED(a) ||
            IN6_IS_ADDR_MULTICAST(a) || IN6_IS_ADDR_UNSPECIFIED(a))
            continue;
        memcpy(v6_global, a, 16);
        have_global = 1;
    }
    freeifaddrs(ifs);
}

static void check_unreachable(VIP_VI_HANDLE vi, const VIP_UINT8 *host, VIP_UINT16 hlen,
                              const char *what)
{
    VIP_NET_ADDRESS *local = h_addr(cli[R_V6]);
    /* A discriminator that is listened to: only the host makes it fail. */
    VIP_NET_ADDRESS *remote = mkaddr_raw(host, hlen, srv[R_MAPPED]);
    VIP_VI_ATTRIBUTES ra;
    double t0 = h_now_ms();
    VIP_RETURN r = VipConnectRequest(vi, local, remote, 5000, &ra);
    double el = h_now_ms() - t0;
    /* fabric: a host that answers with a reset is there (docs/VIPL.md, fabric) */
    CHECK_MSG(r == VIP_NOT_REACHABLE || (h_fabric() && r == VIP_NO_MATCH),
              "request to %s: %s, expected VIP_NOT_REACHABLE", what, VipxReturnString(r));
    /* fabric: the kernel's neighbour discovery may take its 3 s (docs/VIPL.md) */
    CHECK_MSG(el < (h_fabric() ? 5000 : 2000), "VIP_NOT_REACHABLE for %s took %.0f ms (timeout 5000)",
              what, el);
    CHECK_EQ(h_vi_state(vi), VIP_STATE_IDLE);
    free(local);
    free(remote);
}

int main(void)
{
    h_init("ipv6_host", 60);
    for (int i = 0; i < NROUNDS; i++) {
        h_disc(srv[i], sizeof srv[i]);
        h_disc(cli[i], sizeof cli[i]);
    }
    find_global_v6();
    /* ::1 to ::1, the listener naming itself ::1. */
    rounds[R_V6] = (struct round){v6_loop, 16, v6_loop, 16, v6_loop, 16};
    /* 127.0.0.1 dials ::ffff:127.0.0.1; the listener names itself 127.0.0.1. */
    rounds[R_MAPPED] = (struct round){h_loopback, 4, v6_mapped_loop, 16, h_loopback, 4};
    /* ::1 dials 127.0.0.1; the listener names itself ::1. */
    rounds[R_V6_TO_V4] = (struct round){v6_loop, 16, h_loopback, 4, v6_loop, 16};
    rounds[R_GLOBAL] = (struct round){v6_global, 16, v6_global, 16, v6_loop, 16};
    if (have_global) {
        char s[INET6_ADDRSTRLEN];
        inet_ntop(AF_INET6, v6_global, s, sizeof s);
        h_log("this host's global IPv6 address %s is tested too", s);
    } else {
        h_log("this host has no global IPv6 address: that round is skipped");
    }
    CHECK(!is_local_v6(v6_doc));

    h_peer p = h_fork(peer, NULL);
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    h_mem buf = h_mem_alloc(nic, t, 4096, 0);
    h_descs d = h_descs_alloc(nic, t, NROUNDS);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE vi[NROUNDS] = {0};
    h_expect(p.fd, 'L'); /* every round's discriminator is listened to */

    /* Not this host. */
    VIP_VI_HANDLE vx = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    check_unreachable(vx, v6_doc, 16, "2001:db8::1");
    check_unreachable(vx, v6_mapped_far, 16, "::ffff:192.0.2.1");
    static const VIP_UINT8 five[5] = {127, 0, 0, 1, 0};
    check_unreachable(vx, five, 5, "a 5-byte host address 127.0.0.1.0");
    CHECK_OK(VipDestroyVi(vx));

    /* A listener cannot name a host that is not this one. */
    {
        VIP_NET_ADDRESS *far = mkaddr(v6_doc, 16, cli[R_V6]);
        VIP_NET_ADDRESS *room = h_addr_room();
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn = NULL;
        VIP_RETURN r = VipxListen(nic, far);
        h_log("VipxListen naming 2001:db8::1: %s", VipxReturnString(r));
        CHECK_MSG(r != VIP_SUCCESS, "VipxListen naming 2001:db8::1 succeeded");
        r = VipConnectWait(nic, far, 100, room, &ra, &conn);
        h_log("VipConnectWait naming 2001:db8::1: %s", VipxReturnString(r));
        CHECK_MSG(r != VIP_SUCCESS && r != VIP_TIMEOUT,
                  "VipConnectWait naming 2001:db8::1: %s, expected an error",
                  VipxReturnString(r));
        free(far);
        free(room);
    }

    for (int i = 0; i < NROUNDS; i++) {
        if (i == R_GLOBAL && !have_global)
            continue;
        vi[i] = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
        VIP_NET_ADDRESS *local = mkaddr(rounds[i].cli_host, rounds[i].cli_len, cli[i]);
        VIP_NET_ADDRESS *remote = mkaddr(rounds[i].srv_host, rounds[i].srv_len, srv[i]);
        VIP_VI_ATTRIBUTES ra;
        VIP_RETURN r = VipConnectRequest(vi[i], local, remote, 10000, &ra);
        CHECK_MSG(r == VIP_SUCCESS, "round %d: request (host length %u) to a listener on this "
                                    "host: %s", i, (unsigned)rounds[i].srv_len,
                  VipxReturnString(r));
        CHECK_EQ(h_vi_state(vi[i]), VIP_STATE_CONNECTED);
        CHECK_EQ(ra.ReliabilityLevel, VIP_SERVICE_RELIABLE_DELIVERY);
        h_fill_random(buf.ptr, MSG, 600 + (uint64_t)i);
        h_post_send1(vi[i], &d, (unsigned)i, buf.ptr, buf.mh, MSG, VIP_CONTROL_IMMEDIATE,
                     (VIP_UINT32)(600 + i));
        CHECK_STATUS(h_send_done(vi[i]), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
        h_expect(p.fd, 'a');
        free(local);
        free(remote);
    }

    h_signal(p.fd, 'Q');
    h_peer_finish(&p);
    for (int i = 0; i < NROUNDS; i++)
        if (vi[i])
            h_vi_teardown(vi[i]);
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
