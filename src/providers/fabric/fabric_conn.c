/*
 * fabric_conn.c - the VIA connection model over libfabric's: a passive
 * endpoint and its event queue per listened discriminator, an active
 * endpoint and its own event queue per connecting VI.
 *
 * A discriminator listens on a TCP-style port derived from it
 * (fab_disc_port: FAB_PORT_BASE + its fingerprint mod FAB_PORT_SPAN) at the
 * host address it names; the request carries the whole discriminator's
 * fingerprint, so a listener refuses requests meant for another
 * discriminator that shares its port. Everything in a peer's private data
 * is checked (fabric_cm.c) before use; a bad request is rejected, a bad
 * accept fails that connect. Timeouts are the event queues' reads.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "fabric_cm.h"

struct fab_listener {
    struct fab_listener *next;
    uint8_t host[16];
    uint16_t host_len;
    uint8_t disc[VIPL_MAX_DISC];
    uint16_t disc_len;
    uint64_t fp;
    struct fid_pep *pep;
    struct fid_eq *eq;
    atomic_uint refs;    /* the list's, each VipConnectWait's, each pending request's */
    atomic_bool closed;  /* unlistened: its waiters return */
};

/* A request VipConnectWait took, until Accept or Reject. */
struct fab_pending {
    struct fi_info *info;
    struct fab_listener *l;
};

/* An event queue entry with room for any provider's private data. */
union fab_eq_buf {
    struct fi_eq_cm_entry e;
    uint8_t b[sizeof(struct fi_eq_cm_entry) + 256];
};
#define FAB_ACCEPT_MS 5000

static const uint8_t *disc_of(const VIP_NET_ADDRESS *a)
{
    return a->HostAddress + a->HostAddressLen;
}

/* "127.0.0.1" / "::1" for the address's host part; NULL if it has none
 * we can name (then any address: listening only). */
static const char *host_str(const VIP_NET_ADDRESS *a, char *buf, size_t len)
{
    if (a->HostAddressLen == 4)
        return inet_ntop(AF_INET, a->HostAddress, buf, (socklen_t)len);
    if (a->HostAddressLen == 16)
        return inet_ntop(AF_INET6, a->HostAddress, buf, (socklen_t)len);
    return NULL;
}

static struct fi_info *addr_info(struct fab_nic *fn, const VIP_NET_ADDRESS *a, bool source)
{
    char host[INET6_ADDRSTRLEN], port[8];
    const char *h = host_str(a, host, sizeof host);
    if (!h && !source)
        return NULL;
    snprintf(port, sizeof port, "%u", fab_disc_port(disc_of(a), a->DiscriminatorLen));
    struct fi_info *hints = fab_hints(fn->prov_name), *info = NULL;
    if (!hints)
        return NULL;
    hints->domain_attr->name = strdup(fn->info->domain_attr->name);
    if (fi_getinfo(FI_VERSION(1, 17), h, port, source ? FI_SOURCE : 0, hints, &info) != 0)
        info = NULL;
    /* another domain (interface) than the NIC's may answer for the address */
    if (!info) {
        free(hints->domain_attr->name);
        hints->domain_attr->name = NULL;
        if (fi_getinfo(FI_VERSION(1, 17), h, port, source ? FI_SOURCE : 0, hints, &info) != 0)
            info = NULL;
    }
    fi_freeinfo(hints);
    return info;
}

static int eq_open(struct fab_nic *fn, struct fid_eq **eq)
{
    struct fi_eq_attr attr = {.size = 64, .wait_obj = FI_WAIT_UNSPEC};
    return fi_eq_open(fn->fabric, &attr, eq, NULL);
}

static struct fab_listener *listener_find(struct fab_nic *fn, const VIP_NET_ADDRESS *a)
{
    for (struct fab_listener *l = fn->listeners; l; l = l->next)
        if (l->host_len == a->HostAddressLen && !memcmp(l->host, a->HostAddress, l->host_len) &&
            l->disc_len == a->DiscriminatorLen && !memcmp(l->disc, disc_of(a), l->disc_len))
            return l;
    return NULL;
}

static void listener_free(struct fab_listener *l);

static void listener_put(struct fab_listener *l)
{
    if (atomic_fetch_sub(&l->refs, 1) == 1)
        listener_free(l);
}

static void listener_free(struct fab_listener *l)
{
    if (l->pep)
        fi_close(&l->pep->fid);
    if (l->eq)
        fi_close(&l->eq->fid);
    free(l);
}

/* The listener for `a`, made if need be, with a reference for the
 * caller. Under fn->lock. */
static struct fab_listener *listener_get(struct fab_nic *fn, const VIP_NET_ADDRESS *a)
{
    struct fab_listener *l = listener_find(fn, a);
    if (l) {
        atomic_fetch_add(&l->refs, 1);
        return l;
    }
    l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->host_len = a->HostAddressLen;
    memcpy(l->host, a->HostAddress, l->host_len);
    l->disc_len = a->DiscriminatorLen;
    memcpy(l->disc, disc_of(a), l->disc_len);
    l->fp = fab_disc_fp(l->disc, l->disc_len);
    struct fi_info *info = addr_info(fn, a, true);
    if (!info || fi_passive_ep(fn->fabric, info, &l->pep, NULL) != 0 ||
        eq_open(fn, &l->eq) != 0 || fi_pep_bind(l->pep, &l->eq->fid, 0) != 0 ||
        fi_listen(l->pep) != 0) {
        if (info)
            fi_freeinfo(info);
        listener_free(l);
        return NULL; /* the port is taken (another process, another discriminator) */
    }
    fi_freeinfo(info);
    atomic_store(&l->refs, 2);
    l->next = fn->listeners;
    fn->listeners = l;
    return l;
}

VIP_RETURN fab_listen(struct vipl_nic *nic, const VIP_NET_ADDRESS *local, bool any_user)
{
    (void)any_user; /* across hosts a user is not known; see docs/VIPL.md */
    struct fab_nic *fn = fab_nic(nic);
    pthread_mutex_lock(&fn->lock);
    struct fab_listener *l = listener_get(fn, local);
    pthread_mutex_unlock(&fn->lock);
    if (!l)
        return VIP_ERROR_RESOURCE;
    listener_put(l);
    return VIP_SUCCESS;
}

VIP_RETURN fab_unlisten(struct vipl_nic *nic, const VIP_NET_ADDRESS *local)
{
    struct fab_nic *fn = fab_nic(nic);
    pthread_mutex_lock(&fn->lock);
    struct fab_listener *l = listener_find(fn, local);
    if (l)
        for (struct fab_listener **p = &fn->listeners; *p; p = &(*p)->next)
            if (*p == l) {
                *p = l->next;
                break;
            }
    pthread_mutex_unlock(&fn->lock);
    if (!l)
        return VIP_INVALID_STATE;
    atomic_store(&l->closed, true); /* its VipConnectWaits return within 100 ms */
    listener_put(l);
    return VIP_SUCCESS;
}

void fab_close_listeners(struct fab_nic *fn)
{
    while (fn->listeners) {
        struct fab_listener *l = fn->listeners;
        fn->listeners = l->next;
        atomic_store(&l->closed, true);
        listener_put(l);
    }
}

static void reject(struct fab_listener *l, struct fi_info *info)
{
    struct fab_cm m;
    fab_cm_build(&m, FAB_CM_REJECT, NULL, 0, NULL, 0);
    fi_reject(l->pep, info->handle, &m, sizeof m);
    fi_freeinfo(info);
}

static void pending_free(struct fab_pending *p)
{
    listener_put(p->l);
    free(p);
}

/* Reads one event within the deadline: its type, or -errno (-ETIMEDOUT).
 * An error event is read too: -FI_ECONNREFUSED &c, with its data in buf. */
static ssize_t eq_next(struct fid_eq *eq, uint32_t *event, void *buf, size_t len,
                       const struct timespec *deadline, size_t *data_len, atomic_bool *stop)
{
    for (;;) {
        if (stop && atomic_load(stop))
            return -ECANCELED;
        int ms = vipl_ms_left(deadline);
        ssize_t n = fi_eq_sread(eq, event, buf, len, ms < 0 || ms > 100 ? 100 : ms, 0);
        if (n >= 0) {
            *data_len = (size_t)n;
            return 0;
        }
        if (n == -FI_EAVAIL) {
            struct fi_eq_err_entry err = {0};
            if (fi_eq_readerr(eq, &err, 0) < 0)
                return -EIO;
            *data_len = 0;
            if (err.err_data && err.err_data_size <= len) {
                memcpy(buf, err.err_data, err.err_data_size);
                *data_len = err.err_data_size;
            }
            return err.err ? -(ssize_t)err.err : -EIO;
        }
        if (n != -FI_EAGAIN && n != -FI_ETIMEDOUT && n != -FI_EINTR)
            return n;
        if (vipl_ms_left(deadline) == 0)
            return -ETIMEDOUT;
    }
}

VIP_RETURN fab_connect_wait(struct vipl_nic *nic, const VIP_NET_ADDRESS *local,
                            const struct timespec *deadline, VIP_NET_ADDRESS *remote,
                            struct vipl_conn *conn)
{
    struct fab_nic *fn = fab_nic(nic);
    pthread_mutex_lock(&fn->lock);
    struct fab_listener *l = listener_get(fn, local);
    pthread_mutex_unlock(&fn->lock);
    if (!l)
        return VIP_ERROR_RESOURCE;
    union fab_eq_buf u;
    for (;;) {
        uint32_t ev;
        size_t n;
        ssize_t r = eq_next(l->eq, &ev, &u, sizeof u, deadline, &n, &l->closed);
        if (r == -ETIMEDOUT || r == -ECANCELED) {
            listener_put(l);
            return r == -ETIMEDOUT ? VIP_TIMEOUT : VIP_INVALID_STATE;
        }
        if (r < 0 || ev != FI_CONNREQ || n < sizeof u.e)
            continue; /* a failed request's error: nothing to answer */
        struct fab_cm m;
        struct fi_info *info = u.e.info;
        if (!fab_cm_check(u.e.data, n - sizeof u.e, FAB_CM_REQUEST, &m) || m.listener_fp != l->fp) {
            reject(l, info); /* garbage, or meant for another discriminator */
            continue;
        }
        struct fab_pending *p = malloc(sizeof(*p));
        if (!p) {
            reject(l, info);
            listener_put(l);
            return VIP_ERROR_RESOURCE;
        }
        *p = (struct fab_pending){info, l}; /* our reference goes with it */
        conn->prov_conn = p;
        fab_cm_attrs(&m, &conn->remote_attrs);
        const struct sockaddr_in *sin = info->dest_addr;
        const struct sockaddr_in6 *sin6 = info->dest_addr;
        remote->HostAddressLen = 4;
        memset(remote->HostAddress, 0, 4);
        if (sin && info->dest_addrlen >= sizeof(*sin) && sin->sin_family == AF_INET) {
            memcpy(remote->HostAddress, &sin->sin_addr, 4);
        } else if (sin6 && info->dest_addrlen >= sizeof(*sin6) && sin6->sin6_family == AF_INET6) {
            remote->HostAddressLen = 16;
            memcpy(remote->HostAddress, &sin6->sin6_addr, 16);
        }
        remote->DiscriminatorLen = m.disc_len;
        memcpy(remote->HostAddress + remote->HostAddressLen, m.disc, m.disc_len);
        return VIP_SUCCESS;
    }
}

/* An endpoint for `info`, bound to the VI's queues and its own event
 * queue, enabled. */
static int ep_open(struct fab_vi *vi, struct fi_info *info)
{
    struct fab_nic *fn = fab_nic(vi->core.nic);
    info->tx_attr->size = 2 * (size_t)vi->sq.depth; /* a write and its notice per slot */
    info->rx_attr->size = vi->rq.depth;
    info->tx_attr->op_flags = 0;
    struct fid_domain *want = fab_domain(fn, vi->core.ptag);
    if (!want)
        return -FI_ENOMEM;
    if (want != vi->domain) { /* VipSetViAttributes gave it another tag while IDLE */
        struct vipl_vi *c = &vi->core;
        if ((c->send_cq && fab_cq(c->send_cq)->x.domain != want) ||
            (c->recv_cq && fab_cq(c->recv_cq)->x.domain != want))
            return -FI_EINVAL; /* its CQs serve the other tag's VIs */
        fab_cqx_close(&vi->own); /* nothing of an IDLE VI is on the wire */
        if (fab_cqx_init(fn, &vi->own, 0) != 0 || fab_cqx_bind(&vi->own, want) != 0)
            return -FI_ENOMEM;
        vi->domain = want;
    }
    struct fid_ep *ep = NULL;
    int r = fi_endpoint(vi->domain, info, &ep, NULL);
    if (r != 0)
        return r;
    __atomic_store_n(&vi->ep, ep, __ATOMIC_RELEASE);
    if ((r = eq_open(fn, &vi->eq)) != 0 || (r = fi_ep_bind(vi->ep, &vi->eq->fid, 0)) != 0 ||
        (r = fi_ep_bind(vi->ep, &vi->sq.cqx->cq->fid, FI_TRANSMIT | FI_SELECTIVE_COMPLETION)) != 0 ||
        (r = fi_ep_bind(vi->ep, &vi->rq.cqx->cq->fid, FI_RECV)) != 0 ||
        (r = fi_enable(vi->ep)) != 0) {
        fab_ep_close(vi);
        return r;
    }
    return 0;
}

void fab_ep_close(struct fab_vi *vi)
{
    pthread_mutex_lock(&vi->ep_lock);
    struct fid_ep *ep = vi->ep;
    struct fid_eq *eq = vi->eq;
    __atomic_store_n(&vi->ep, NULL, __ATOMIC_RELEASE); /* the agent looks without the lock */
    vi->eq = NULL;
    pthread_mutex_unlock(&vi->ep_lock);
    if (ep)
        fi_close(&ep->fid);
    if (eq)
        fi_close(&eq->fid);
    if (ep) { /* what the endpoint's close produced: flushed, or nothing */
        fab_cqx_progress(vi->sq.cqx);
        fab_cqx_progress(vi->rq.cqx);
    }
}

/* After the endpoint is gone, nothing posted can complete any more. */
static void flush_all(struct fab_vi *vi)
{
    fab_queue_flush(&vi->sq);
    fab_queue_flush(&vi->rq);
}

static VIP_RETURN wait_connected(struct fab_vi *vi, const struct timespec *deadline,
                                 struct fab_cm *peer, bool want_data)
{
    union fab_eq_buf u;
    for (;;) {
        uint32_t ev;
        size_t n;
        ssize_t r = eq_next(vi->eq, &ev, &u, sizeof u, deadline, &n, NULL);
        if (r == -ETIMEDOUT)
            return VIP_TIMEOUT;
        if (r == -FI_ECONNREFUSED) {
            struct fab_cm m;
            /* refused with our REJECT: the server said no; else nobody listens */
            return fab_cm_check(u.b, n, FAB_CM_REJECT, &m) ? VIP_REJECT : VIP_NO_MATCH;
        }
        if (r == -FI_EHOSTUNREACH || r == -FI_ENETUNREACH || r == -FI_ETIMEDOUT)
            return VIP_NOT_REACHABLE;
        if (r < 0)
            return VIP_NO_MATCH;
        if (ev != FI_CONNECTED)
            return VIP_ERROR_RESOURCE;
        if (!want_data)
            return VIP_SUCCESS;
        if (n < sizeof u.e || !fab_cm_check(u.e.data, n - sizeof u.e, FAB_CM_ACCEPT, peer))
            return VIP_ERROR_RESOURCE; /* an acceptor that is not one of ours */
        return VIP_SUCCESS;
    }
}

VIP_RETURN fab_connect_accept(struct vipl_conn *conn, struct vipl_vi *cvi)
{
    struct fab_vi *vi = fab_vi(cvi);
    struct fab_pending *p = conn->prov_conn;
    conn->prov_conn = NULL;
    if (ep_open(vi, p->info) != 0 || fab_rq_push(vi) != 0) {
        fab_ep_close(vi);
        reject(p->l, p->info);
        pending_free(p);
        return VIP_ERROR_RESOURCE;
    }
    struct fab_cm m;
    fab_cm_build(&m, FAB_CM_ACCEPT, &cvi->attrs, 0, NULL, 0);
    VIP_RETURN r = fi_accept(vi->ep, &m, sizeof m) == 0 ? VIP_SUCCESS : VIP_ERROR_RESOURCE;
    fi_freeinfo(p->info);
    pending_free(p);
    struct timespec buf;
    if (r == VIP_SUCCESS)
        r = wait_connected(vi, vipl_deadline(FAB_ACCEPT_MS, &buf), NULL, false);
    if (r != VIP_SUCCESS) {
        fab_ep_close(vi);
        fab_queue_flush(&vi->sq);
        /* the receives stay posted, for the next connection */
        pthread_mutex_lock(&vi->rq.lock);
        vi->rq.wire = vi->rq.done;
        pthread_mutex_unlock(&vi->rq.lock);
        return r == VIP_TIMEOUT ? VIP_ERROR_RESOURCE : r;
    }
    atomic_store(&cvi->state, VIP_STATE_CONNECTED);
    return VIP_SUCCESS;
}

void fab_connect_reject(struct vipl_conn *conn)
{
    struct fab_pending *p = conn->prov_conn;
    conn->prov_conn = NULL;
    if (p) {
        reject(p->l, p->info);
        pending_free(p);
    }
}

/* Whether the kernel has a route to the host: a datagram socket's
 * connect sends nothing and fails at once without one. */
static bool routable(const VIP_NET_ADDRESS *a)
{
    struct sockaddr_in6 s6 = {.sin6_family = AF_INET6, .sin6_port = htons(9)};
    struct sockaddr_in s4 = {.sin_family = AF_INET, .sin_port = htons(9)};
    bool v4 = a->HostAddressLen == 4;
    if (v4)
        memcpy(&s4.sin_addr, a->HostAddress, 4);
    else if (a->HostAddressLen == 16)
        memcpy(&s6.sin6_addr, a->HostAddress, 16);
    else
        return false;
    int fd = vipl_fd_socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return true; /* let the provider find out */
    int r = v4 ? connect(fd, (struct sockaddr *)&s4, sizeof s4)
               : connect(fd, (struct sockaddr *)&s6, sizeof s6);
    bool ok = r == 0 || (errno != ENETUNREACH && errno != EHOSTUNREACH);
    VipxFdClose(fd);
    return ok;
}

VIP_RETURN fab_connect_request(struct vipl_vi *cvi, const VIP_NET_ADDRESS *local,
                               const VIP_NET_ADDRESS *remote, const struct timespec *deadline,
                               VIP_VI_ATTRIBUTES *rattrs)
{
    struct fab_vi *vi = fab_vi(cvi);
    struct fab_nic *fn = fab_nic(cvi->nic);
    if (!routable(remote))
        return VIP_NOT_REACHABLE;
    struct fi_info *info = addr_info(fn, remote, false);
    if (!info)
        return VIP_INVALID_PARAMETER;
    if (ep_open(vi, info) != 0) {
        fi_freeinfo(info);
        return VIP_ERROR_RESOURCE;
    }
    struct fab_cm m, peer;
    fab_cm_build(&m, FAB_CM_REQUEST, &cvi->attrs,
                 fab_disc_fp(disc_of(remote), remote->DiscriminatorLen), disc_of(local),
                 local->DiscriminatorLen);
    VIP_RETURN ret = VIP_ERROR_RESOURCE;
    if (fi_connect(vi->ep, info->dest_addr, &m, sizeof m) == 0)
        ret = wait_connected(vi, deadline, &peer, true);
    fi_freeinfo(info);
    if (ret == VIP_SUCCESS && fab_rq_push(vi) != 0)
        ret = VIP_ERROR_RESOURCE;
    if (ret != VIP_SUCCESS) {
        fi_shutdown(vi->ep, 0);
        fab_ep_close(vi);
        return ret;
    }
    fab_cm_attrs(&peer, rattrs);
    if (rattrs->ReliabilityLevel != cvi->attrs.ReliabilityLevel) {
        fi_shutdown(vi->ep, 0);
        fab_ep_close(vi);
        return VIP_INVALID_RELIABILITY_LEVEL;
    }
    atomic_store(&cvi->state, VIP_STATE_CONNECTED);
    return VIP_SUCCESS;
}

VIP_RETURN fab_disconnect(struct vipl_vi *cvi)
{
    struct fab_vi *vi = fab_vi(cvi);
    pthread_mutex_lock(&vi->ep_lock);
    if (vi->ep)
        fi_shutdown(vi->ep, 0);
    pthread_mutex_unlock(&vi->ep_lock);
    fab_ep_close(vi);
    flush_all(vi);
    atomic_store(&cvi->state, VIP_STATE_IDLE);
    atomic_store(&vi->wake, true);
    return VIP_SUCCESS;
}

void fab_vi_break(struct fab_vi *vi, VIP_ERROR_CODE code, VIP_DESCRIPTOR *desc)
{
    pthread_mutex_lock(&vi->ep_lock);
    if (vi->ep)
        fi_shutdown(vi->ep, 0); /* the peer's VI breaks too */
    pthread_mutex_unlock(&vi->ep_lock);
    vipl_vi_fail(&vi->core, code, desc);
    flush_all(vi);
}

void fab_ep_events(struct fab_vi *vi)
{
    union fab_eq_buf u;
    uint32_t ev = 0;
    pthread_mutex_lock(&vi->ep_lock);
    ssize_t n = vi->eq ? fi_eq_read(vi->eq, &ev, &u, sizeof u, 0) : -FI_EAGAIN;
    if (n == -FI_EAVAIL) {
        struct fi_eq_err_entry err = {0};
        fi_eq_readerr(vi->eq, &err, 0);
        ev = FI_SHUTDOWN;
    }
    pthread_mutex_unlock(&vi->ep_lock);
    if ((n >= 0 || n == -FI_EAVAIL) && ev == FI_SHUTDOWN &&
        vipl_vi_state(&vi->core) == VIP_STATE_CONNECTED) {
        /* What arrived before the peer left is delivered first. */
        fab_cqx_progress(vi->rq.cqx);
        vipl_vi_fail(&vi->core, VIP_ERROR_CONN_LOST, NULL);
        fab_queue_flush(&vi->rq);
        fab_queue_flush(&vi->sq);
        atomic_store(&vi->wake, true);
    }
}
