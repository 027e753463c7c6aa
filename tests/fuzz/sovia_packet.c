/*
 * sovia_packet.c - fuzzes the sovia protocol engine's decoding of peer
 * packets (src/sovia/data.c: the type and ACK count in the immediate data,
 * the WAKEUP window and slot fields, DATA lengths) without copying any of
 * it: the victim is a real accepted sov_* socket, the harness its peer, a
 * raw VI that speaks the protocol (docs/PROTOCOL.md) from the input.
 *
 Input: the mode (u8: even = the victim accepted the connection, odd = it
 * connected, with a non-blocking sov_connect), the first packet's immediate
 * data and length (the victim takes it as the peer's WAKEUP), then up to
 * MAX_OPS operations (see the OP_*): raw packets, well-formed ones, and the
 * victim's own sov_recv / sov_send / sov_shutdown with MSG_DONTWAIT.
 *
 * Checks: a server accepts the connection exactly when the first packet is
 * a valid WAKEUP; a client whose peer's first packet is not one fails the
 * connection (ECONNRESET or a connect error) within seconds; the victim's bytes from sov_recv are exactly the stream of
 * the DATA packets sent, in order (an exact-size heap buffer, so an
 * overflow is an ASan report); every packet the victim sends is well formed
 * (one WAKEUP first with its window and slots, then DATA / ACK / FIN /
 * FINACK only, DATA of 1 .. MTU bytes carrying its own stream in order, ACK
 * counts never more than the DATA packets it was sent).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <sovia.h>
#include <vipl.h>
#include <vipl_ext.h>

#include "fz.h"

/* The victim's configuration (fixed per process: a listener snapshots it). */
#define WINDOW 4
#define ACK_T 2
#define MTU 4096
#define P (WINDOW + (WINDOW + ACK_T - 1) / ACK_T + 2)

#define MAX_OPS 48
#define HRECVS 32 /* receives the harness keeps posted */
#define DESC_SLOT 128

enum { PKT_DATA = 1, PKT_ACK, PKT_WAKEUP, PKT_FIN, PKT_FINACK };

enum {
    OP_RAW,      /* a packet with raw immediate data and length */
    OP_GOOD,     /* a well-formed packet of a type, acknowledging what is owed */
    OP_RECV,     /* sov_recv of u16 bytes (flags from a byte) */
    OP_SEND,     /* sov_send of u16 bytes */
    OP_SHUTDOWN, /* sov_shutdown(SHUT_WR) */
    OP_COUNT
};

static struct {
    VIP_NIC_HANDLE nic;
    VIP_PROTECTION_HANDLE ptag;
    int lfd;
    VIP_NET_ADDRESS *remote, *local;
    /* Client mode: the harness listens on a port sovia reserved for us
     * (port_fd holds it), so no other sovia process can listen there. */
    int port_fd;
    struct sockaddr_in peer_sin;
    VIP_NET_ADDRESS *listen_addr;
    VIP_NET_ADDRESS *conn_remote;
    uint8_t *mem; /* registered: send buffer, receive buffers, descriptors */
    VIP_MEM_HANDLE mh;
    uint8_t *sbuf, *rbufs, *descs;
    uint8_t src[16384]; /* the victim's send source */
} g;

/* One run's state. */
struct run {
    VIP_VI_HANDLE vi;
    int fd; /* the victim's socket, -1 until accepted */
    uint64_t h_off;      /* stream offset of the harness's next DATA byte */
    uint64_t v_got;      /* bytes the victim's sov_recv returned */
    uint64_t v_sent;     /* bytes the victim's sov_send accepted */
    uint64_t h_seen;     /* bytes of the victim's DATA the harness received */
    unsigned pkts_in;    /* packets from the victim */
    uint64_t h_data;     /* DATA packets the harness sent (that the victim may ack) */
    uint64_t acks_in;    /* acks the victim gave */
    unsigned owed;       /* victim DATA packets the harness has not acked */
    bool broken;
};

static uint8_t h_byte(uint64_t off)
{
    return (uint8_t)(off * 131 + 7);
}

static uint8_t v_byte(uint64_t off)
{
    return (uint8_t)(off * 37 + 3);
}

static VIP_DESCRIPTOR *desc(unsigned i)
{
    return (VIP_DESCRIPTOR *)(g.descs + (size_t)i * DESC_SLOT);
}

static void setup(void)
{
    struct sov_config c;
    sov_config_defaults(&c);
    c.window = WINDOW;
    c.ack_threshold = ACK_T;
    c.mtu = MTU;
    c.copy_threshold = 1024;
    c.combine = false;
    c.handling = SOV_SINGLE;
    FZ_CHECK(sov_set_config(&c) == 0);
    g.lfd = sov_socket(AF_INET, SOCK_VIA, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    FZ_CHECK(g.lfd >= 0 && sov_bind(g.lfd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
    FZ_CHECK(sov_listen(g.lfd, 64) == 0);
    FZ_CHECK(sov_getsockname(g.lfd, (struct sockaddr *)&sin, &len) == 0);
    FZ_CHECK(sov_fcntl(g.lfd, F_SETFL, O_NONBLOCK) == 0);

    /* The VI address a sovia socket has: host, then "sovia" + port. */
    static const uint8_t lo[4] = {127, 0, 0, 1};
    uint8_t disc[7] = {'s', 'o', 'v', 'i', 'a'};
    memcpy(disc + 5, &sin.sin_port, 2);
    g.remote = VipxAllocNetAddress(lo, 4, disc, 7);
    uint16_t mine = htons(1);
    memcpy(disc + 5, &mine, 2);
    g.local = VipxAllocNetAddress(lo, 4, disc, 7);

    g.port_fd = sov_socket(AF_INET, SOCK_VIA, 0);
    g.peer_sin = (struct sockaddr_in){.sin_family = AF_INET,
                                      .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    len = sizeof(g.peer_sin);
    FZ_CHECK(g.port_fd >= 0 &&
             sov_bind(g.port_fd, (struct sockaddr *)&g.peer_sin, sizeof(g.peer_sin)) == 0);
    FZ_CHECK(sov_getsockname(g.port_fd, (struct sockaddr *)&g.peer_sin, &len) == 0);
    memcpy(disc + 5, &g.peer_sin.sin_port, 2);
    g.listen_addr = VipxAllocNetAddress(lo, 4, disc, 7);
    g.conn_remote = calloc(1, sizeof(VIP_NET_ADDRESS) + 16 + 64);

    FZ_CHECK(VipOpenNic(NULL, &g.nic) == VIP_SUCCESS);
    FZ_CHECK(VipCreatePtag(g.nic, &g.ptag) == VIP_SUCCESS);
    size_t len_mem = MTU + (size_t)HRECVS * MTU + (size_t)(HRECVS + 1) * DESC_SLOT;
    g.mem = aligned_alloc(64, len_mem);
    FZ_CHECK(g.remote && g.local && g.mem);
    VIP_MEM_ATTRIBUTES ma = {.Ptag = g.ptag};
    FZ_CHECK(VipRegisterMem(g.nic, g.mem, len_mem, &ma, &g.mh) == VIP_SUCCESS);
    FZ_CHECK(g.listen_addr && g.conn_remote && VipxListen(g.nic, g.listen_addr) == VIP_SUCCESS);
    g.sbuf = g.mem;
    g.rbufs = g.mem + MTU;
    g.descs = g.rbufs + (size_t)HRECVS * MTU;
}

static void post_recv(struct run *r, unsigned i)
{
    VIP_DESCRIPTOR *d = desc(1 + i);
    memset(d, 0, DESC_SLOT);
    d->CS.SegCount = 1;
    d->CS.Length = MTU;
    d->DS[0].Local.Data.Address = g.rbufs + (size_t)i * MTU;
    d->DS[0].Local.Handle = g.mh;
    d->DS[0].Local.Length = MTU;
    if (VipPostRecv(r->vi, d, g.mh) != VIP_SUCCESS)
        r->broken = true;
}

/* Sends one packet; false if the harness's VI refused or failed it. */
static bool send_pkt(struct run *r, uint32_t imm, uint32_t len)
{
    if (r->broken)
        return false;
    VIP_DESCRIPTOR *d = desc(0);
    memset(d, 0, DESC_SLOT);
    d->CS.Control = VIP_CONTROL_OP_SENDRECV | VIP_CONTROL_IMMEDIATE;
    d->CS.ImmediateData = imm;
    d->CS.Length = len;
    bool data = (imm & 7) == PKT_DATA;
    for (uint32_t i = 0; i < len; i++)
        g.sbuf[i] = data ? h_byte(r->h_off + i) : 0xee;
    if (len) {
        d->CS.SegCount = 1;
        d->DS[0].Local.Data.Address = g.sbuf;
        d->DS[0].Local.Handle = g.mh;
        d->DS[0].Local.Length = len;
    }
    VIP_DESCRIPTOR *done;
    if (VipPostSend(r->vi, d, g.mh) != VIP_SUCCESS || VipSendDone(r->vi, &done) != VIP_SUCCESS ||
        (d->CS.Status & VIP_STATUS_ERROR_MASK)) {
        r->broken = true;
        return false;
    }
    if (data) {
        r->h_off += len;
        r->h_data++;
    }
    return true;
}

/* Every packet the victim sent so far: checked, then its buffer reposted. */
static void drain(struct run *r)
{
    VIP_DESCRIPTOR *d;
    while (!r->broken && VipRecvDone(r->vi, &d) == VIP_SUCCESS) {
        unsigned i = (unsigned)(((uint8_t *)d - g.descs) / DESC_SLOT) - 1;
        FZ_CHECK(i < HRECVS);
        if (d->CS.Status & VIP_STATUS_ERROR_MASK) {
            r->broken = true; /* flushed: the victim disconnected */
            return;
        }
        uint32_t imm = d->CS.ImmediateData, type = imm & 7;
        fz_trace("victim packet: type %u imm %#x length %u", type, imm, d->CS.Length);
        FZ_CHECK(d->CS.Status & VIP_STATUS_IMMEDIATE);
        if (r->pkts_in++ == 0) {
            FZ_CHECK(type == PKT_WAKEUP);
            FZ_CHECK(imm == (PKT_WAKEUP | WINDOW << 8 | (P - WINDOW - 2) << 20));
        } else {
            FZ_CHECK(type == PKT_DATA || type == PKT_ACK || type == PKT_FIN ||
                     type == PKT_FINACK);
            FZ_CHECK(!(imm & 0xff0000f8u)); /* only type and acks */
            r->acks_in += imm >> 8 & 0xffff;
            FZ_CHECK(r->acks_in <= r->h_data);
        }
        if (type == PKT_DATA) {
            uint32_t len = d->CS.Length;
            FZ_CHECK(len >= 1 && len <= MTU);
            const uint8_t *b = g.rbufs + (size_t)i * MTU;
            for (uint32_t k = 0; k < len; k++)
                FZ_CHECK(b[k] == v_byte(r->h_seen + k));
            r->h_seen += len;
            r->owed++;
        } else {
            FZ_CHECK(d->CS.Length == 0);
        }
        post_recv(r, i);
    }
}

/* Per docs/PROTOCOL.md: what the victim must take as the peer's WAKEUP. */
static bool wakeup_valid(uint32_t imm)
{
    uint32_t w = imm >> 8 & 0xfff, slots = imm >> 20 & 0xfff;
    return (imm & 0xff) == PKT_WAKEUP && w >= 1 && w <= 1024 && slots >= 1;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int sov_poll_fn(struct pollfd *pfd, unsigned long n, int timeout_ms)
{
    return sov_poll(pfd, (nfds_t)n, timeout_ms);
}

/* The victim's accept: within 5 s exactly when the WAKEUP was valid. */
static void accept_victim(struct run *r, bool expect)
{
    uint64_t end = now_ms() + 5000;
    r->fd = -1;
    while (now_ms() < end) {
        r->fd = sov_accept(g.lfd, NULL, NULL);
        if (r->fd >= 0)
            break;
        FZ_CHECK(errno == EAGAIN);
        VIP_VI_STATE st;
        VIP_VI_ATTRIBUTES va;
        VIP_BOOLEAN sq, rq;
        FZ_CHECK(VipQueryVi(r->vi, &st, &va, &sq, &rq) == VIP_SUCCESS);
        if (!expect && st != VIP_STATE_CONNECTED)
            break; /* the victim dropped the connection, as it must */
        struct pollfd pfd = {.fd = g.lfd, .events = POLLIN};
        fz_poll_with(sov_poll_fn, &pfd, 1, 1);
    }
    fz_trace("accept: %d (expected %s)", r->fd, expect ? "yes" : "no");
    if (expect)
        FZ_CHECK(r->fd >= 0);
    else
        FZ_CHECK(r->fd < 0);
}

/* Client mode: the victim connects (non-blocking) to the harness, which
 * accepts with its VI and answers with the input's first packet. */
static bool connect_victim(struct run *r, uint32_t imm, uint32_t len)
{
    r->fd = sov_socket(AF_INET, SOCK_VIA | SOCK_NONBLOCK, 0);
    FZ_CHECK(r->fd >= 0);
    int rc = sov_connect(r->fd, (struct sockaddr *)&g.peer_sin, sizeof(g.peer_sin));
    FZ_CHECK(rc == 0 || errno == EINPROGRESS);
    VIP_CONN_HANDLE conn;
    VIP_VI_ATTRIBUTES ra;
    FZ_CHECK(VipConnectWait(g.nic, g.listen_addr, 5000, g.conn_remote, &ra, &conn) ==
             VIP_SUCCESS);
    FZ_CHECK(VipConnectAccept(conn, r->vi) == VIP_SUCCESS);
    bool valid = send_pkt(r, imm, len) && wakeup_valid(imm);
    /* Writable once connected (with the peer's window as credit), or failed. */
    struct pollfd pfd = {.fd = r->fd, .events = POLLOUT};
    int ready = fz_poll_with(sov_poll_fn, &pfd, 1, valid ? 5000 : 2000);
    int err = 0;
    socklen_t elen = sizeof(err);
    FZ_CHECK(sov_getsockopt(r->fd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0);
    fz_trace("connect: poll %d so_error %d", ready, err);
    if (valid) {
        FZ_CHECK(ready == 1 && err == 0);
        return true;
    }
    if (err != 0)
        return false; /* the connect failed: fine */
    /* Connected to a peer that does not speak the protocol: the connection
     * must fail on its own (docs/PROTOCOL.md), not wait for ever. */
    uint64_t end = now_ms() + 2000;
    char b;
    ssize_t got;
    while ((got = sov_recv(r->fd, &b, 1, MSG_DONTWAIT)) < 0 && errno == EAGAIN &&
           now_ms() < end)
        usleep(1000);
    fz_trace("after a bad WAKEUP: sov_recv %zd errno %d", got, got < 0 ? errno : 0);
    FZ_CHECK(got < 0 && errno != EAGAIN);
    return false;
}

static void op_recv(struct run *r, struct fz_in *in)
{
    size_t n = 1 + fz_u16(in) % 8192;
    uint8_t f = fz_u8(in);
    int flags = MSG_DONTWAIT | (f & 1 ? MSG_PEEK : 0) | (f & 2 ? MSG_WAITALL : 0);
    uint8_t *buf = malloc(n);
    FZ_CHECK(buf);
    ssize_t got = sov_recv(r->fd, buf, n, flags);
    fz_trace("sov_recv %zu: %zd (errno %d)", n, got, got < 0 ? errno : 0);
    if (got < 0) {
        FZ_CHECK(errno == EAGAIN || errno == ECONNRESET);
    } else {
        FZ_CHECK((size_t)got <= n);
        for (ssize_t k = 0; k < got; k++) {
            if (buf[k] != h_byte(r->v_got + (uint64_t)k))
                fz_trace("stream byte %llu: got 0x%02x, sent 0x%02x",
                         (unsigned long long)(r->v_got + (uint64_t)k), buf[k],
                         h_byte(r->v_got + (uint64_t)k));
            FZ_CHECK(buf[k] == h_byte(r->v_got + (uint64_t)k));
        }
        if (!(flags & MSG_PEEK))
            r->v_got += (uint64_t)got;
        FZ_CHECK(r->v_got <= r->h_off);
    }
    free(buf);
}

static void op_send(struct run *r, struct fz_in *in)
{
    size_t n = 1 + fz_u16(in) % sizeof(g.src);
    for (size_t k = 0; k < n; k++)
        g.src[k] = v_byte(r->v_sent + k);
    ssize_t sent = sov_send(r->fd, g.src, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    fz_trace("sov_send %zu: %zd (errno %d)", n, sent, sent < 0 ? errno : 0);
    if (sent < 0)
        FZ_CHECK(errno == EAGAIN || errno == ECONNRESET || errno == EPIPE);
    else
        r->v_sent += (uint64_t)sent;
}

static void op_good(struct run *r, struct fz_in *in)
{
    fz_trace("good packet at stream offset %llu", (unsigned long long)r->h_off);
    uint8_t t = fz_u8(in);
    uint32_t len = 1 + fz_u16(in) % MTU;
    static const uint32_t types[] = {PKT_DATA, PKT_ACK, PKT_FIN, PKT_FINACK};
    uint32_t type = types[t % 4];
    if (send_pkt(r, type | r->owed << 8, type == PKT_DATA ? len : 0))
        r->owed = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g.nic)
        setup();
    struct fz_in in = {data, size};
    struct run r = {.fd = -1};
    VIP_VI_ATTRIBUTES va = {.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY,
                            .MaxTransferSize = MTU,
                            .Ptag = g.ptag};
    VIPX_VI_CONFIG vc = {.QueueDepth = 64, .StagingBytes = (HRECVS + 1) * MTU};
    FZ_CHECK(VipxCreateVi(g.nic, &va, NULL, NULL, &vc, &r.vi) == VIP_SUCCESS);
    for (unsigned i = 0; i < HRECVS; i++)
        post_recv(&r, i);
    bool client = fz_u8(&in) & 1;
    uint32_t imm = fz_u32(&in);
    uint32_t len = fz_u16(&in) % (MTU + 1);
    bool run_ops;
    if (client) {
        run_ops = connect_victim(&r, imm, len);
    } else {
        VIP_VI_ATTRIBUTES ra;
        FZ_CHECK(VipConnectRequest(r.vi, g.local, g.remote, 5000, &ra) == VIP_SUCCESS);
        bool sent = send_pkt(&r, imm, len);
        accept_victim(&r, sent && wakeup_valid(imm));
        run_ops = r.fd >= 0;
    }
    if (run_ops) {
        for (int n = 0; n < MAX_OPS && in.n; n++) {
            switch (fz_u8(&in) % OP_COUNT) {
            case OP_RAW: {
                uint32_t i2 = fz_u32(&in);
                send_pkt(&r, i2, fz_u16(&in) % (MTU + 1));
                break;
            }
            case OP_GOOD:
                op_good(&r, &in);
                break;
            case OP_RECV:
                op_recv(&r, &in);
                break;
            case OP_SEND:
                op_send(&r, &in);
                break;
            case OP_SHUTDOWN:
                sov_shutdown(r.fd, SHUT_WR);
                break;
            }
            drain(&r);
        }
    }
    if (r.fd >= 0)
        FZ_CHECK(sov_close(r.fd) == 0);
    VIP_VI_STATE st;
    VIP_BOOLEAN sq, rq;
    FZ_CHECK(VipQueryVi(r.vi, &st, &va, &sq, &rq) == VIP_SUCCESS);
    if (st == VIP_STATE_CONNECTED || st == VIP_STATE_ERROR)
        FZ_CHECK(VipDisconnect(r.vi) == VIP_SUCCESS);
    VIP_DESCRIPTOR *d;
    while (VipSendDone(r.vi, &d) == VIP_SUCCESS || VipRecvDone(r.vi, &d) == VIP_SUCCESS)
        ;
    FZ_CHECK(VipDestroyVi(r.vi) == VIP_SUCCESS);
    return 0;
}
