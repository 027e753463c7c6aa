/*
 * pair.c - sovia run: pairing a VI connection with the kernel connection it
 * stands for (the client's tentative connect, the server's match in
 * accept(), and a claim from another process that accepted it).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "listener.h"
#include "transparent.h"

/* The client half: a VI connection from `local` (the kernel socket's own
 * address, so the server can match it) that stays tentative until the
 * server's accept() pairs it and sends its WAKEUP. 0 or -errno. */
/* How long a listener has to answer a VI's request. */
#define CONNECT_ANSWER_MS 1000u

int sov_connect_tentative(struct sov_conn *c, int fd, const struct sockaddr *local,
                          const struct sockaddr *peer, uint32_t ticket, bool async)
{
    /* Across hosts (a fabric NIC with a cluster key) the proof stands
     * for the token, which cannot cross hosts (xhost.c). */
    if (sov_xhost_proves(c))
        return ticket ? -ECONNREFUSED : sov_xhost_connect(c, local, peer);
    /* Whose VI listener: the user of the TCP listener we connect to, or,
     * redirected, the user that accepted our connection (its server end's
     * owner; the listening user only names the ticket). Without socket
     * diagnostics, our own, as always before. */
    uid_t owner = geteuid();
    uint64_t ino;
    int err = ticket ? sov_socket_owner(peer, local, &owner, &ino) : sov_listener_owner(peer, &owner);
    if (err == -ENOENT || (ticket && err))
        return -ECONNREFUSED; /* nobody listens; or we cannot tell where to go */
    VIP_NET_ADDRESS *la = sov_vi_address(local);
    VIP_NET_ADDRESS *ra_addr = ticket ? sov_vi_ticket_address(peer, ticket) : sov_vi_address(peer);
    err = -ENOMEM;
    /* The kernel socket goes with the request (to another user, only an
     * epoll instance watching it: vipl_ext.h): the server's accept() pairs
     * the VI only with that socket's connection (sov_accept_match). */
    if (la && ra_addr && VipxViSetConnectToken(c->vi, fd) == VIP_SUCCESS &&
        VipxViSetConnectUser(c->vi, owner) == VIP_SUCCESS) {
        /* Asynchronous: the request is on its way before the kernel
         * connect (so the server's accept() finds it, or sees it coming:
         * sov_accept_match), and its answer is taken later. */
        VIP_RETURN r = async ? VipxConnectStart(c->vi, la, ra_addr) : VIP_ERROR_NOT_SUPPORTED;
        if (r == VIP_SUCCESS) {
            c->connecting = true;
        } else if (r == VIP_ERROR_NOT_SUPPORTED) {
            VIP_VI_ATTRIBUTES ra;
            /* No listener answers at once; a busy one gets a second. */
            r = VipConnectRequest(c->vi, la, ra_addr, CONNECT_ANSWER_MS, &ra);
            if (r == VIP_SUCCESS && ra.MaxTransferSize < c->send_mtu)
                c->send_mtu = ra.MaxTransferSize;
        }
        err = r == VIP_SUCCESS ? 0 : sov_map_connect_error(r);
    }
    free(la);
    free(ra_addr);
    if (!err) {
        c->tentative = true;
        c->tentative_since_ns = sov_now_ns();
    }
    return err;
}

bool sov_connect_finish(struct sov_conn *c, unsigned wait_ms)
{
    if (!c->connecting)
        return true;
    VIP_VI_ATTRIBUTES ra;
    VIP_RETURN r = VipxConnectDone(c->vi, wait_ms, &ra);
    if (r == VIP_TIMEOUT) {
        /* As long as VipConnectRequest would have waited. */
        if (sov_now_ns() - c->tentative_since_ns < CONNECT_ANSWER_MS * 1000000ull)
            return false;
        VipxConnectAbandon(c->vi);
    }
    c->connecting = false;
    c->connect_err = r == VIP_SUCCESS ? 0 : sov_map_connect_error(r);
    if (r == VIP_SUCCESS && ra.MaxTransferSize < c->send_mtu)
        c->send_mtu = ra.MaxTransferSize;
    return true;
}

uint16_t sov_token_port(int token)
{
    struct sockaddr_storage a;
    socklen_t len = sizeof(a);
    if (getsockname(token, (struct sockaddr *)&a, &len) != 0 ||
        (a.ss_family != AF_INET && a.ss_family != AF_INET6))
        return 0;
    return sov_addr_port((struct sockaddr *)&a);
}

/* Long enough for a request the provider holds to reach the thread
 * (the client's own wait ends at its pairing timeout anyway). */
#define GAVE_UP_NS 2000000000u

void sov_gave_up_note(struct sov_listener *l, uint16_t port)
{
    l->gave_up[l->gave_up_next] = (struct sov_gave_up){port, sov_now_ns()};
    l->gave_up_next = (l->gave_up_next + 1) % SOV_GAVE_UP_MAX;
}

bool sov_gave_up_take(struct sov_listener *l, uint16_t port, int token)
{
    uint64_t now = sov_now_ns();
    bool any = false;
    for (unsigned i = 0; i < SOV_GAVE_UP_MAX && !any; i++)
        any = l->gave_up[i].port && now - l->gave_up[i].at_ns < GAVE_UP_NS;
    if (!any) /* (the token's port is a system call: only when needed) */
        return false;
    if (!port && token >= 0)
        port = sov_token_port(token);
    for (unsigned i = 0; i < SOV_GAVE_UP_MAX && port; i++)
        if (l->gave_up[i].port == port && now - l->gave_up[i].at_ns < GAVE_UP_NS) {
            l->gave_up[i].port = 0;
            return true;
        }
    return false;
}

uint16_t sov_pending_port(struct pending *p)
{
    uint16_t port = sov_addr_port((struct sockaddr *)&p->peer);
    if (port || !p->unbound || p->token < 0 || p->foreign)
        return port;
    if ((port = sov_token_port(p->token)) == 0)
        return 0;
    /* Only the port: an IPv4 client of a dual-stack listener keeps the
     * listener's family here; the token's proof compares the addresses. */
    sov_addr_set_port(&p->peer, port);
    return port;
}

#define ACCEPT_STALL_NS 100000000u
#define ACCEPT_WAIT_NS 1000000000u

/* The server half, from accept(): takes the queued connection whose client
 * sent the kernel socket of `fd`'s connection, pairs it (our WAKEUP, then
 * the client's) and returns it; NULL when the client does not run sovia or
 * gave up. A queued VI from the same port that did not send that socket
 * claims a connection that is not its own: it goes. A redirected client
 * (patience_ns) is still on its way: its VI may not even be arriving yet. */
struct sov_conn *sov_accept_match(struct sov_sock *s, int fd, const struct sockaddr *peer,
                                  uint64_t patience_ns)
{
    uint16_t port = sov_addr_port(peer);
    struct sov_conn *c = NULL;
    /* The client end of the connection: its own address is our peer. */
    struct sockaddr_storage own, client;
    socklen_t ol = sizeof(own), cl = sizeof(client);
    if (getsockname(fd, (struct sockaddr *)&own, &ol) != 0 ||
        getpeername(fd, (struct sockaddr *)&client, &cl) != 0)
        return NULL;
    /* Another user's client socket for this connection (its inode and
     * owner), asked once, for that user's unbound VIs. */
    uint64_t client_ino = 0;
    uid_t client_uid = (uid_t)-1;
    bool client_known = false;
    pthread_mutex_lock(&s->wait_lock);
    struct sov_listener *l = s->lst;
    /* The client sends its VI's request before its kernel connect, so its
     * entry is queued, being queued by the connection thread right now, or
     * waiting for it. Up to ACCEPT_STALL_NS without the thread moving on
     * (a burst of requests is taken in turn; a stuck thread is not waited
     * for), and ACCEPT_WAIT_NS in all. */
    uint64_t start = sov_now_ns(), end = start + ACCEPT_STALL_NS;
    uint32_t moved = l ? l->handled : 0;
    /* Every VI over fabric (SOVIA_PROVIDER=fabric with a key): the
     * connection is made synchronously there, nothing is held back. */
    bool all_far = sov_xhost_on() && !sov_xhost_far_wanted();
    while (l && !c) {
        for (unsigned i = 0; i < l->count; i++) {
            struct pending *p = &l->q[(l->head + i) % l->cap];
            bool broken = sov_queued_conn_broken(p->conn);
            /* A fabric NIC's VI (far, or every one over fabric) proves
             * itself by its HELLO; a shm one by its token. */
            bool xhost = sov_xhost_proves(p->conn);
            uint16_t pport = broken ? 0 : sov_pending_port(p);
            if (!broken && pport != port && !(p->unbound && pport == 0))
                continue;
            /* Across hosts the VI names its client end, and its HELLO,
             * checked below, proves it: one of another client's is left. */
            if (!broken && xhost &&
                !sov_xhost_same_client((struct sockaddr *)&own, (struct sockaddr *)&p->peer,
                                       (struct sockaddr *)&client))
                continue;
            if (!broken && !xhost && p->unbound && p->foreign) {
                /* One socket-diagnostics question per accept, not one per
                 * such VI (each of up to FOREIGN_MAX would be asked). */
                if (!p->target_ino) {
                    uint64_t t = sov_token_target(p->token);
                    p->target_ino = t ? t : UINT64_MAX;
                }
                if (!client_known) {
                    client_known = true;
                    if (sov_socket_owner((struct sockaddr *)&client, (struct sockaddr *)&own,
                                         &client_uid, &client_ino) != 0)
                        client_ino = 0;
                }
                if (!client_ino || p->target_ino != client_ino || p->uid != client_uid)
                    continue; /* another connection's, or no proof: stays until its client goes */
            }
            bool ours = !broken && (xhost || sov_token_holds(p->token, p->uid,
                                                             (struct sockaddr *)&client,
                                                             (struct sockaddr *)&own));
            if (!ours && !broken && !xhost && p->unbound)
                continue; /* another connection's client, not yet accepted */
            struct pending taken = sov_queue_take(l, i--);
            if (!ours) { /* gone, or claims a connection that is not its own */
                sov_pending_drop(&taken);
                continue;
            }
            if (taken.token >= 0)
                VipxFdClose(taken.token);
            c = taken.conn;
            break;
        }
        uint64_t now = sov_now_ns();
        bool arriving = l->establishing_port == port || now - start < patience_ns;
        if (l->establishing_port == SOV_ESTABLISHING_ANY && !arriving)
            arriving = l->establishing_token < 0 || /* another user's: cannot tell */
                       sov_token_port(l->establishing_token) == port;
        /* A non-blocking client sends its request before its kernel
         * connect and does not wait for the answer: the request may still
         * be with the provider, not yet taken by the connection thread. */
        if (!c && !arriving && !all_far)
            arriving = VipxListenWaiting(sov_g.nic, l->addr) == VIP_SUCCESS;
        if (l->handled != moved && now - start < ACCEPT_WAIT_NS) {
            moved = l->handled;
            end = now + ACCEPT_STALL_NS;
        }
        if (c || !arriving || (now > end && now - start >= patience_ns)) {
            if (!c && !all_far)
                sov_gave_up_note(l, port);
            break;
        }
        /* A redirected client that could not follow fell back: its bytes,
         * if any, come on the kernel connection (the system call itself:
         * recv() is the preload's). */
        char b;
        if (patience_ns &&
            syscall(SYS_recvfrom, fd, &b, 1, MSG_PEEK | MSG_DONTWAIT, NULL, NULL) > 0)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 1000000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->cond, &s->wait_lock, &ts);
    }
    pthread_mutex_unlock(&s->wait_lock);
    if (!c)
        return NULL;
    if (sov_xhost_proves(c) && sov_xhost_accept(c, fd) != 0) {
        sov_conn_destroy(c); /* the client sees its VI go: kernel TCP */
        return NULL;
    }
    /* The client answers our WAKEUP with its own, which opens our window;
     * until then we are tentative too (transparent.c), and if the client
     * gave up meanwhile both ends use the kernel connection. */
    if (sov_conn_send_ctrl(c, PKT_WAKEUP) != 0) {
        sov_conn_destroy(c);
        return NULL;
    }
    return c;
}

/* The claimant (see serve_claim): `fd` was accepted on a socket listening
 * at `listening`, whose shadow listener another process runs. 1 when that
 * process redirected the client to our `ticket` (0: none wanted); 0 when it
 * answered otherwise (the client, if it queued a VI there, falls back now);
 * -ECONNREFUSED when nobody listens there any more (that process went);
 * another -errno when no answer came in time. The claim's own VI carries
 * no data: no arena, no posted receive. */
int sov_claim(int fd, const struct sockaddr *listening, uid_t owner, uint32_t ticket)
{
    struct sockaddr_storage own, client;
    socklen_t len = sizeof(own), clen = sizeof(client);
    if (getsockname(fd, (struct sockaddr *)&own, &len) != 0 ||
        getpeername(fd, (struct sockaddr *)&client, &clen) != 0)
        return -errno;
    VIP_NET_ADDRESS *from =
        sov_vi_claim_address((struct sockaddr *)&own, (struct sockaddr *)&client, ticket);
    VIP_NET_ADDRESS *to = sov_vi_address(listening);
    VIP_VI_ATTRIBUTES va = sov_conn_attrs(&sov_g.cfg);
    VIPX_VI_CONFIG vc = {.QueueDepth = 1, .StagingBytes = 64};
    VIP_VI_HANDLE vi = NULL;
    int err = -ENOMEM;
    /* To the listening socket's owner, whose process shadows it (a worker
     * that runs as another user claims from its root master). */
    if (from && to && VipxCreateVi(sov_g.nic, &va, NULL, NULL, &vc, &vi) == VIP_SUCCESS &&
        VipxViSetConnectToken(vi, fd) == VIP_SUCCESS &&
        VipxViSetConnectUser(vi, owner) == VIP_SUCCESS) {
        VIP_VI_ATTRIBUTES ra;
        VIP_RETURN r = VipConnectRequest(vi, from, to, 200, &ra);
        err = r == VIP_REJECT ? 0 : r == VIP_NO_MATCH ? -ECONNREFUSED : sov_map_connect_error(r);
        if (r == VIP_SUCCESS) { /* accept_claim: the client comes to us */
            VipxDisconnectLast(vi);
            err = ticket ? 1 : -EPROTO;
        }
    }
    if (vi)
        VipDestroyVi(vi);
    free(from);
    free(to);
    return err;
}
