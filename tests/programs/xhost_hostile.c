/*
 * xhost_hostile: a client of another host that connects a fabric VI to a
 * server under `sovia run` (cluster key, fabric) and then breaks the
 * pairing's rules (test_xhost.py, hostile_* cases; issue 17). Built from
 * the sockets layer's own objects, which make its VI and proofs.
 *
 *   xhost_hostile MODE SERVER PORT KEYFILE    (with SOVIA_PROVIDER=fabric:tcp)
 *
 * MODE, what goes on the VI before the kernel connection is made:
 *   wrongkey    a HELLO made with another key
 *   replay      a HELLO of this key for another connection (its client port)
 *   truncated   this connection's HELLO less its last byte
 *   badmagic    this connection's HELLO, its magic changed
 *   oversized   a proof packet twice the receive buffers' size
 *   wakeup      a WAKEUP and no proof
 *   data        a DATA packet and no proof
 *   twohello    this connection's HELLO twice
 *   noconfirm   this connection's HELLO, then a WAKEUP without CONFIRM
 *   badconfirm  this connection's HELLO, then a CONFIRM for other nonces
 * Then the kernel connection, from the VI's port: 64 KiB there and back
 * must come back whole (the server fell back to kernel TCP), and the
 * server must have dropped the VI. Prints "ok" (exit 0), or what went
 * wrong (1); 2: usage or set-up.
 *
 *   stall       VIs, each from a port of its own with its proper HELLO,
 *               until the server refuses one (its accept queue is full),
 *               and no kernel connection ever: the server must drop each
 *               within the pairing timeout (SOVIA_PAIR_TIMEOUT_MS, 1 s)
 *               and 1.5 s: "ok N MS" (N VIs, the longest one lived MS).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sock.h"
#include "xauth.h"

#define BYTES 65536

static int die(const char *what, int err)
{
    printf("set-up: %s: %s\n", what, strerror(err < 0 ? -err : err));
    return 2;
}

static int send_msg(struct sov_conn *c, enum sov_pkt type, const void *m, uint32_t len)
{
    uint8_t *b = c->sbuf; /* nsend buffers of mtu bytes, one registration */
    memcpy(b, m, len);
    int err = sov_post_packet(c, type, b, len, c->sbuf_mh);
    sov_sends_out(c);
    return err;
}

/* The kernel connection from `k` (bound to the VI's port): BYTES echoed. */
static int exchange(int k, const struct sockaddr_in *server)
{
    /* A server that paired with us would echo over the VI: nothing here. */
    struct timeval tv = {.tv_sec = 20};
    setsockopt(k, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(k, (const struct sockaddr *)server, sizeof(*server)) != 0)
        return printf("bad: kernel connect: %s\n", strerror(errno)), 1;
    static uint8_t out[BYTES], in[BYTES];
    if (getrandom(out, sizeof out, 0) != (ssize_t)sizeof out)
        return die("getrandom", errno);
    /* 64 KiB fits the sockets' buffers: written whole before reading. */
    for (size_t off = 0; off < sizeof out;) {
        ssize_t n = send(k, out + off, sizeof out - off, 0);
        if (n <= 0)
            return printf("bad: send: %s\n", strerror(errno)), 1;
        off += (size_t)n;
    }
    shutdown(k, SHUT_WR);
    size_t got = 0;
    for (;;) {
        ssize_t n = recv(k, in + got, sizeof in - got, 0);
        if (n < 0)
            return printf("bad: recv: %s\n", strerror(errno)), 1;
        if (n == 0 || (got += (size_t)n) == sizeof in)
            break;
    }
    if (got != sizeof in || memcmp(in, out, sizeof in) != 0)
        return printf("bad: %zu bytes came back, or other ones\n", got), 1;
    return 0;
}

/* Our end as the server will see it: the route's source, a port of ours
 * (k, bound there, never connected unless the mode says so). */
static int own_end(const struct sockaddr_in *server, int *k, struct sockaddr_storage *src)
{
    *k = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    *src = (struct sockaddr_storage){.ss_family = AF_INET};
    socklen_t sl = sizeof(struct sockaddr_in);
    int err = *k < 0 ? errno : sov_addr_fill_source(src, (const struct sockaddr *)server);
    if (!err && (bind(*k, (struct sockaddr *)src, sl) != 0 ||
                 getsockname(*k, (struct sockaddr *)src, &sl) != 0))
        err = errno;
    return err;
}

/* A VI to the server from src; false if the server refused it. */
static bool vi_connect(struct sov_conn *c, const struct sockaddr_storage *src,
                       const struct sockaddr_in *server)
{
    VIP_NET_ADDRESS *la = sov_vi_address((const struct sockaddr *)src);
    VIP_NET_ADDRESS *ra_addr = sov_vi_address((const struct sockaddr *)server);
    VIP_VI_ATTRIBUTES ra;
    bool ok = la && ra_addr && VipConnectRequest(c->vi, la, ra_addr, 2000, &ra) == VIP_SUCCESS;
    free(la);
    free(ra_addr);
    return ok;
}

static bool vi_connected(struct sov_conn *c)
{
    VIP_DESCRIPTOR *d;
    VipRecvDone(c->vi, &d); /* progress, for providers that need it */
    VIP_VI_STATE st;
    return VipQueryVi(c->vi, &st, NULL, NULL, NULL) == VIP_SUCCESS && st == VIP_STATE_CONNECTED;
}

#define STALL_MAX 64

/* The stall mode: VIs that fill the server's accept queue and name
 * kernel connections that never come. */
static int stall(const struct sockaddr_in *server, const struct sov_xkey *key)
{
    const char *v = getenv("SOVIA_PAIR_TIMEOUT_MS");
    long bound_ms = (v && atol(v) > 0 ? atol(v) : 1000) + 1500;
    struct sov_conn *c[STALL_MAX];
    uint64_t since[STALL_MAX];
    unsigned n = 0;
    bool refused = false;
    while (n < STALL_MAX && !refused) {
        int k, err;
        struct sockaddr_storage src;
        struct sov_xtuple t;
        if ((err = own_end(server, &k, &src)) != 0)
            return die("socket", err);
        if (sov_xtuple((const struct sockaddr *)server, (struct sockaddr *)&src, &t) != 0)
            return die("tuple", EINVAL);
        if (!(c[n] = sov_conn_create(&sov_g.cfg, false, &err)))
            return die("VI", err);
        refused = !vi_connect(c[n], &src, server);
        if (refused)
            break; /* (k stays open: its port is not reused meanwhile) */
        since[n] = sov_now_ns();
        uint8_t hello[SOV_XAUTH_HELLO_LEN], cnonce[SOV_XAUTH_NONCE];
        sov_xauth_hello(key, &t, cnonce, hello);
        send_msg(c[n++], PKT_XAUTH, hello, sizeof hello);
    }
    if (!refused || n == 0)
        return printf("bad: %u VIs accepted, %s\n", n, refused ? "none" : "none refused"), 1;
    uint64_t longest = 0, end = sov_now_ns() + (uint64_t)(bound_ms + 3500) * 1000000u;
    for (unsigned left = n; left && sov_now_ns() < end; usleep(10000)) {
        for (unsigned i = 0; i < n; i++)
            if (since[i] && !vi_connected(c[i])) {
                uint64_t lived = sov_now_ns() - since[i];
                longest = lived > longest ? lived : longest;
                since[i] = 0;
                left--;
            }
    }
    for (unsigned i = 0; i < n; i++)
        if (since[i])
            return printf("bad: the server kept VI %u of %u past %ld ms\n", i, n, bound_ms + 3500),
                   1;
    if (longest / 1000000 > (uint64_t)bound_ms)
        return printf("bad: a VI lived %llu ms (bound %ld)\n",
                      (unsigned long long)(longest / 1000000), bound_ms), 1;
    printf("ok %u %llu\n", n, (unsigned long long)(longest / 1000000));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 5)
        return fprintf(stderr, "usage: xhost_hostile MODE SERVER PORT KEYFILE\n"), 2;
    const char *mode = argv[1];
    struct sockaddr_in server = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
    if (inet_pton(AF_INET, argv[2], &server.sin_addr) != 1)
        return die("address", EINVAL);
    struct sov_xkey key, other;
    int err = sov_xkey_load(argv[4], &key);
    if (err)
        return die("key", err);
    other = key;
    other.k[0] ^= 0x5a;
    if ((err = sov_init()) != 0)
        return die("sov_init", err);

    if (strcmp(mode, "stall") == 0) {
        int rc = stall(&server, &key);
        fflush(stdout);
        _exit(rc); /* the VIs are left to the exit, as a crashed peer's */
    }
    int k;
    struct sockaddr_storage src;
    if ((err = own_end(&server, &k, &src)) != 0)
        return die("socket", err);
    struct sov_xtuple t, t_other;
    struct sockaddr_in src_other = *(struct sockaddr_in *)&src;
    src_other.sin_port = htons(ntohs(src_other.sin_port) + 1);
    if (sov_xtuple((struct sockaddr *)&server, (struct sockaddr *)&src, &t) != 0 ||
        sov_xtuple((struct sockaddr *)&server, (struct sockaddr *)&src_other, &t_other) != 0)
        return die("tuple", EINVAL);

    struct sov_conn *c = sov_conn_create(&sov_g.cfg, false, &err);
    if (!c)
        return die("VI", err);
    if (!vi_connect(c, &src, &server))
        return printf("bad: the VI was not accepted\n"), 1;

    uint8_t hello[SOV_XAUTH_HELLO_LEN], cnonce[SOV_XAUTH_NONCE];
    const struct sov_xkey *hk = strcmp(mode, "wrongkey") == 0 ? &other : &key;
    sov_xauth_hello(hk, strcmp(mode, "replay") == 0 ? &t_other : &t, cnonce, hello);
    uint32_t len = sizeof hello;
    if (strcmp(mode, "truncated") == 0)
        len--;
    if (strcmp(mode, "badmagic") == 0)
        hello[0] ^= 0x20;
    if (strcmp(mode, "wakeup") == 0) {
        err = sov_conn_send_ctrl(c, PKT_WAKEUP);
    } else if (strcmp(mode, "data") == 0) {
        err = send_msg(c, PKT_DATA, "not proven", 10);
    } else if (strcmp(mode, "oversized") == 0) {
        memset(c->sbuf, 0x41, 2 * (size_t)c->cfg.mtu);
        memcpy(c->sbuf, hello, sizeof hello);
        err = sov_post_packet(c, PKT_XAUTH, c->sbuf, 2 * c->cfg.mtu, c->sbuf_mh);
        sov_sends_out(c);
    } else {
        err = send_msg(c, PKT_XAUTH, hello, len);
        if (!err && strcmp(mode, "twohello") == 0)
            err = send_msg(c, PKT_XAUTH, hello, len);
        if (!err && strcmp(mode, "noconfirm") == 0)
            err = sov_conn_send_ctrl(c, PKT_WAKEUP);
        if (!err && strcmp(mode, "badconfirm") == 0) {
            uint8_t snonce[SOV_XAUTH_NONCE] = {0}, confirm[SOV_XAUTH_CONFIRM_LEN];
            sov_xauth_confirm(&key, &t, cnonce, snonce, confirm);
            err = send_msg(c, PKT_XAUTH, confirm, sizeof confirm);
        }
    }
    /* A failed post is what a broken VI gives: the kernel side still counts. */
    (void)err;
    int rc = exchange(k, &server);
    /* The server dropped our VI (not merely left it queued): it saw what
     * we sent and turned it away. */
    bool kept = true;
    for (int i = 0; rc == 0 && i < 500 && (kept = vi_connected(c)); i++)
        usleep(10000);
    if (rc == 0 && kept) {
        printf("bad: the server kept our VI 5 s after the exchange\n");
        rc = 1;
    }
    if (rc == 0)
        printf("ok\n");
    fflush(stdout);
    _exit(rc); /* the VI is left to the exit, as a crashed peer's */
}
