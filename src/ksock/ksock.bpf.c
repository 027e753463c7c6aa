/*
 * ksock.bpf.c - KSOVIA on today's kernel: established loopback TCP
 * connections of one cgroup skip TCP/IP. The sock_ops program puts each
 * established socket into a sockhash keyed by its own four addresses; the
 * sk_msg program, run on every send of such a socket, looks up the socket
 * with the reversed key (its peer) and queues the bytes on the peer's
 * receive side (BPF_F_INGRESS): no segment, no TCP/IP processing, no
 * loopback device. Built with clang -target bpf, loaded by ksock_load.c.
 */
#include <linux/bpf.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "ksock_abi.h"

#define AF_INET 2
#define AF_INET6 10

char LICENSE[] SEC("license") = "GPL";

struct {
    __uint(type, BPF_MAP_TYPE_SOCKHASH);
    __uint(max_entries, KSOCK_MAX_SOCKETS);
    __type(key, struct ksock_key);
    __type(value, __u64);
} ksock_hash SEC(".maps");

/* Sockets whose send once went through TCP (the peer was not in the
 * sockhash yet): never redirected again, or later bytes could overtake
 * bytes still in the peer's TCP receive queue. LRU: closed ones age out. */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, KSOCK_MAX_SOCKETS);
    __type(key, struct ksock_key);
    __type(value, __u8);
} ksock_tcp_only SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, KSOCK_NSTATS);
    __type(key, __u32);
    __type(value, __u64);
} ksock_stats SEC(".maps");

static __always_inline void count(__u32 which, __u64 n)
{
    __u64 *v = bpf_map_lookup_elem(&ksock_stats, &which);

    if (v)
        *v += n;
}

static __always_inline int loopback4(__u32 be_addr)
{
    return (bpf_ntohl(be_addr) >> 24) == 127;
}

static __always_inline int loopback6(const __u32 a[4])
{
    /* ::1, or ::ffff:127.x.y.z (an IPv4 peer of a dual-stack socket) */
    if (a[0] || a[1])
        return 0;
    if (a[2] == 0 && a[3] == bpf_htonl(1))
        return 1;
    return a[2] == bpf_htonl(0xffff) && loopback4(a[3]);
}

SEC("sockops")
int ksock_collect(struct bpf_sock_ops *ops)
{
    struct ksock_key k = {};

    if (ops->op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB &&
        ops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
        return 1;
    k.netns = bpf_get_netns_cookie(ops);
    k.family = ops->family;
    if (k.family == AF_INET) {
        if (!loopback4(ops->local_ip4) || !loopback4(ops->remote_ip4))
            return 1;
        k.local[3] = ops->local_ip4;
        k.remote[3] = ops->remote_ip4;
    } else if (k.family == AF_INET6) {
        k.local[0] = ops->local_ip6[0];
        k.local[1] = ops->local_ip6[1];
        k.local[2] = ops->local_ip6[2];
        k.local[3] = ops->local_ip6[3];
        k.remote[0] = ops->remote_ip6[0];
        k.remote[1] = ops->remote_ip6[1];
        k.remote[2] = ops->remote_ip6[2];
        k.remote[3] = ops->remote_ip6[3];
        if (!loopback6(k.local) || !loopback6(k.remote))
            return 1;
    } else {
        return 1;
    }
    k.local_port = ops->local_port;            /* host order */
    k.remote_port = bpf_ntohl(ops->remote_port); /* network order, upper half */
    /* A new connection on a four-tuple an old one had: start afresh. */
    bpf_map_delete_elem(&ksock_tcp_only, &k);
    if (bpf_sock_hash_update(ops, &ksock_hash, &k, BPF_NOEXIST) == 0)
        count(KSOCK_STAT_COLLECTED, 1);
    else
        count(KSOCK_STAT_COLLECT_FAILED, 1);
    return 1;
}

SEC("sk_msg")
int ksock_redirect(struct sk_msg_md *msg)
{
    struct ksock_key self = {}, peer = {};
    /* Every field read once, unconditionally: the verifier refuses the
     * context pointer arithmetic clang makes of loads under branches. */
    __u32 len = msg->size, family = msg->family;
    __u32 l4 = msg->local_ip4, r4 = msg->remote_ip4;
    __u32 l6[4] = {msg->local_ip6[0], msg->local_ip6[1], msg->local_ip6[2], msg->local_ip6[3]};
    __u32 r6[4] = {msg->remote_ip6[0], msg->remote_ip6[1], msg->remote_ip6[2],
                   msg->remote_ip6[3]};
    __u32 lport = msg->local_port, rport = bpf_ntohl(msg->remote_port);

    self.netns = peer.netns = bpf_get_netns_cookie(msg);
    self.family = peer.family = family;
    if (family == AF_INET) {
        self.local[3] = peer.remote[3] = l4;
        self.remote[3] = peer.local[3] = r4;
    } else {
        for (int i = 0; i < 4; i++) {
            self.local[i] = peer.remote[i] = l6[i];
            self.remote[i] = peer.local[i] = r6[i];
        }
    }
    self.local_port = peer.remote_port = lport;
    self.remote_port = peer.local_port = rport;

    if (bpf_map_lookup_elem(&ksock_tcp_only, &self)) {
        count(KSOCK_STAT_PASSED, 1);
        return SK_PASS;
    }
    if (bpf_msg_redirect_hash(msg, &ksock_hash, &peer, BPF_F_INGRESS) == SK_PASS) {
        count(KSOCK_STAT_REDIRECTED, 1);
        count(KSOCK_STAT_REDIRECTED_BYTES, len);
        return SK_PASS;
    }
    /* No peer here (not collected yet, another cgroup, gone): kernel TCP
     * carries this send and every later one of this socket. */
    {
        __u8 one = 1;
        bpf_map_update_elem(&ksock_tcp_only, &self, &one, BPF_ANY);
    }
    count(KSOCK_STAT_PASSED, 1);
    return SK_PASS;
}
