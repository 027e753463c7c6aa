/*
 * xhost.c - sovia run across hosts (issue 17 item 4; docs/ARCHITECTURE.md
 * "Transparent mode across hosts", docs/SECURITY.md "Between hosts").
 *
 * With a cluster key, a connection carried over fabric (the far NIC beside
 * shm, far.c, or every one with SOVIA_PROVIDER=fabric) pairs through
 * proofs instead of the same-host token (the client's kernel socket, which
 * cannot cross hosts): the client's VI sends HELLO as its first packet,
 * the server's accept() checks it against the accepted kernel socket's two
 * ends and answers ACCEPT before its WAKEUP, and the client answers
 * CONFIRM before its own. Every proof is bound to the TCP 4-tuple, so a
 * VI can only pair with the kernel connection it names, and only between
 * holders of the key. Anything else (no answer, a wrong proof, a WAKEUP
 * before the proof) leaves the connection on kernel TCP: the program's
 * bytes never go anywhere but the kernel stream or the proven VI.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sock.h"
#include "xauth.h"

struct sov_xproof {
    struct sov_xtuple t;
    uint8_t cnonce[SOV_XAUTH_NONCE], snonce[SOV_XAUTH_NONCE];
    struct sockaddr_storage server; /* the client's: the host it tried */
};

static struct {
    pthread_once_t once;
    bool on;
    bool all; /* the process's own NIC is fabric: every connection proves */
    struct sov_xkey key;
    char provider[64];
} xg = {.once = PTHREAD_ONCE_INIT};

static void xhost_init(void)
{
    VIP_NIC_ATTRIBUTES na;
    if (VipQueryNic(sov_g.nic, &na) != VIP_SUCCESS)
        return;
    memcpy(xg.provider, na.Name, sizeof(xg.provider) - 1);
    /* The provider, not the device: shm's NIC is "shm0", fabric's names
     * the libfabric provider ("fabric:tcp"). */
    size_t n = strlen(xg.provider);
    while (strncmp(xg.provider, "fabric", 6) != 0 && n && xg.provider[n - 1] >= '0' &&
           xg.provider[n - 1] <= '9')
        xg.provider[--n] = '\0';
    /* Over fabric (SOVIA_PROVIDER=fabric) every connection, this host's
     * too, pairs through the key's proofs; over shm the key adds the far
     * NIC (far.c) for other hosts' peers. Without a key, nothing here is
     * used and same-host pairing is as before. */
    xg.all = strncmp(xg.provider, "fabric", 6) == 0;
    int err = sov_xkey_from_env(&xg.key);
    xg.on = err == 0;
    /* Said once: otherwise a refused key looks like a peer without sovia. */
    if (err && err != -ENOKEY)
        fprintf(stderr, "sovia: SOVIA_CLUSTER_KEY_FILE refused (%s): connections to other hosts "
                        "stay on kernel TCP (docs/SECURITY.md, \"Between hosts\")\n",
                strerror(-err));
}

bool sov_xhost_on(void)
{
    if (!sov_g.nic)
        return false;
    pthread_once(&xg.once, xhost_init);
    return xg.on;
}

bool sov_xhost_far_wanted(void)
{
    return sov_xhost_on() && !xg.all;
}

bool sov_xhost_proves(const struct sov_conn *c)
{
    return c->far || (xg.all && sov_xhost_on());
}

bool sov_xhost_nic_pairs(void)
{
    return sov_xhost_on() || strncmp(sov_provider_name(), "fabric", 6) != 0;
}

const char *sov_provider_name(void)
{
    if (!sov_g.nic)
        return "";
    pthread_once(&xg.once, xhost_init);
    return xg.provider;
}

const char *sov_conn_provider(const struct sov_conn *c)
{
    return c->far ? sov_far_provider_name() : sov_provider_name();
}

/* Microseconds on a LAN; a host that drops the fabric port's packets
 * (a firewall) costs this once, then the refused-hosts table. */
static unsigned connect_timeout_ms(void)
{
    const char *v = getenv("SOVIA_XHOST_CONNECT_MS");
    long ms = v ? strtol(v, NULL, 10) : 100;
    return ms > 0 && ms <= 10000 ? (unsigned)ms : 100;
}

/* One proof message as a PKT_XAUTH packet (staged: it goes from a send
 * slot, which stays ours until it completed). */
static int send_proof(struct sov_conn *c, const uint8_t *msg, uint32_t len)
{
    uint8_t *b = sov_stage_next(c);
    memcpy(b, msg, len);
    return sov_post_packet(c, PKT_XAUTH, b, len, c->sbuf_mh);
}

int sov_xhost_connect(struct sov_conn *c, const struct sockaddr *local, const struct sockaddr *peer)
{
    uint64_t now = sov_now_ns();
    if (sov_xpeer_refusing(peer, now))
        return -ECONNREFUSED; /* a look-up, not a round trip */
    struct sov_xproof *xp = calloc(1, sizeof(*xp));
    if (!xp)
        return -ENOMEM;
    /* Our end as the kernel will name it: the route's source address. */
    struct sockaddr_storage src;
    memcpy(&src, local, local->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                    : sizeof(struct sockaddr_in6));
    int err = sov_addr_fill_source(&src, peer);
    if (!err)
        err = sov_xtuple(peer, (struct sockaddr *)&src, &xp->t);
    VIP_NET_ADDRESS *la = err ? NULL : sov_vi_address((struct sockaddr *)&src);
    VIP_NET_ADDRESS *ra_addr = err ? NULL : sov_vi_address(peer);
    if (!err && (!la || !ra_addr))
        err = -ENOMEM;
    if (!err) {
        VIP_VI_ATTRIBUTES ra;
        VIP_RETURN r = VipConnectRequest(c->vi, la, ra_addr, connect_timeout_ms(), &ra);
        if (r != VIP_SUCCESS) {
            /* Nothing listens there for this port (no sovia, no key, not
             * carried, or a listener whose far side has not started yet),
             * or no answer: kernel TCP, and no second try for a while. */
            sov_xpeer_refused(peer, sov_now_ns(), r == VIP_NO_MATCH);
            err = -ECONNREFUSED;
        } else if (ra.MaxTransferSize < c->send_mtu) {
            c->send_mtu = ra.MaxTransferSize;
        }
    }
    free(la);
    free(ra_addr);
    uint8_t hello[SOV_XAUTH_HELLO_LEN];
    if (!err)
        err = sov_xauth_hello(&xg.key, &xp->t, xp->cnonce, hello);
    if (!err)
        err = send_proof(c, hello, sizeof(hello));
    if (err) {
        free(xp);
        return err == -ENOMEM ? err : -ECONNREFUSED;
    }
    memcpy(&xp->server, peer, peer->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                         : sizeof(struct sockaddr_in6));
    c->xp = xp;
    c->xh = XH_CLIENT_HELLO;
    c->tentative = true;
    c->tentative_since_ns = sov_now_ns();
    return 0;
}

bool sov_xhost_same_client(const struct sockaddr *own, const struct sockaddr *a,
                           const struct sockaddr *b)
{
    struct sov_xtuple ta, tb;
    return sov_xtuple(own, a, &ta) == 0 && sov_xtuple(own, b, &tb) == 0 &&
           memcmp(&ta, &tb, sizeof(ta)) == 0;
}

/* The client sends HELLO right after its VI connected, before its kernel
 * connect: by the time accept() returns that connection it is there, or
 * within a round trip of the fabric connection. */
#define HELLO_WAIT_MS 200

/* The proof message in receive buffer i (d, completed), or NULL. */
static const uint8_t *proof_of(const struct sov_conn *c, const VIP_DESCRIPTOR *d, unsigned i,
                               uint32_t *len)
{
    if ((d->CS.Status & VIP_STATUS_ERROR_MASK) || d->CS.ImmediateData != PKT_XAUTH ||
        d->CS.Length > c->cfg.mtu)
        return NULL;
    *len = d->CS.Length;
    return c->arena + (size_t)i * c->cfg.mtu;
}

int sov_xhost_accept(struct sov_conn *c, int fd)
{
    struct sockaddr_storage own, client;
    socklen_t ol = sizeof(own), cl = sizeof(client);
    if (getsockname(fd, (struct sockaddr *)&own, &ol) != 0 ||
        getpeername(fd, (struct sockaddr *)&client, &cl) != 0)
        return -errno;
    struct sov_xproof *xp = calloc(1, sizeof(*xp));
    if (!xp)
        return -ENOMEM;
    int err = sov_xtuple((struct sockaddr *)&own, (struct sockaddr *)&client, &xp->t);
    VIP_DESCRIPTOR *d = NULL;
    VIP_RETURN r = VIP_SUCCESS;
    if (!err && (r = VipRecvDone(c->vi, &d)) == VIP_NOT_DONE)
        r = VipRecvWait(c->vi, HELLO_WAIT_MS, &d);
    if (!err && r != VIP_SUCCESS)
        err = r == VIP_TIMEOUT ? -ETIMEDOUT : -ECONNRESET;
    if (!err) {
        size_t i = (size_t)(d - c->rdesc);
        uint32_t len = 0;
        const uint8_t *m = i < c->nrecv ? proof_of(c, d, (unsigned)i, &len) : NULL;
        err = m ? sov_xauth_hello_check(&xg.key, &xp->t, m, len, xp->cnonce) : -EPROTO;
        if (i < c->nrecv && sov_conn_repost(c, (unsigned)i) != 0 && !err)
            err = -ECONNRESET;
    }
    uint8_t accept_msg[SOV_XAUTH_ACCEPT_LEN];
    if (!err)
        err = sov_xauth_accept(&xg.key, &xp->t, xp->cnonce, xp->snonce, accept_msg);
    if (!err)
        err = send_proof(c, accept_msg, sizeof(accept_msg));
    if (err) {
        free(xp);
        return err;
    }
    c->xp = xp;
    c->xh = XH_SERVER_ACCEPTED;
    return 0;
}

void sov_xhost_turned_away(const struct sov_conn *c)
{
    if (c && c->xh == XH_CLIENT_HELLO && c->xp)
        sov_xpeer_refused((const struct sockaddr *)&c->xp->server, sov_now_ns(), false);
}

void sov_xhost_packet(struct sov_conn *c, VIP_DESCRIPTOR *d, unsigned i)
{
    uint32_t len = 0;
    const uint8_t *m = proof_of(c, d, i, &len);
    struct sov_xproof *xp = c->xp;
    int err = -EPROTO;
    if (m && xp && c->xh == XH_CLIENT_HELLO) {
        err = sov_xauth_accept_check(&xg.key, &xp->t, xp->cnonce, m, len, xp->snonce);
        if (!err) {
            uint8_t confirm[SOV_XAUTH_CONFIRM_LEN];
            sov_xauth_confirm(&xg.key, &xp->t, xp->cnonce, xp->snonce, confirm);
            err = sov_conn_repost(c, i);
            if (!err)
                err = send_proof(c, confirm, sizeof(confirm));
            if (!err) {
                c->xh = XH_CLIENT_OK;
                sov_xpeer_answered((struct sockaddr *)&xp->server);
            }
        } else {
            /* Another key (or none that works): this host will not pair
             * with us; its next connections go to kernel TCP at once. */
            sov_xpeer_refused((struct sockaddr *)&xp->server, sov_now_ns(), false);
        }
    } else if (m && xp && c->xh == XH_SERVER_ACCEPTED) {
        err = sov_xauth_confirm_check(&xg.key, &xp->t, xp->cnonce, xp->snonce, m, len);
        if (!err)
            err = sov_conn_repost(c, i);
        if (!err)
            c->xh = XH_SERVER_OK;
    }
    if (err) /* fails this connection only: both ends stay on kernel TCP */
        sov_conn_abort(c);
}
