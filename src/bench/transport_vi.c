/*
 * transport_vi.c - the vi data path: sends, the three ways of waiting for
 * a receive, credit-based flow control, and the three ops tables.
 */
#include "vi_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SPIN_CHECK (1u << 20)
#define NOTIFY_CHECK_MS 200

static unsigned disc_counter;

static int vi_prepare(const struct bench_params *p, enum vi_wait wait, void **shared)
{
    struct vi_shared *sh = calloc(1, sizeof *sh);

    if (!sh)
        return -1;
    sh->wait = wait;
    sh->ring = p->ring;
    sh->frag = p->frag;
    /* Unique per run so concurrent benchmarks never meet each other. */
    snprintf(sh->disc, sizeof sh->disc, "bench-%d-%u", (int)getpid(), disc_counter++);
    *shared = sh;
    return 0;
}

static int prepare_poll(const struct bench_params *p, size_t m, void **sh)
{
    (void)m;
    return vi_prepare(p, VI_POLL, sh);
}

/* vi-copy: polling vi whose receiver copies every message into its own
 * buffer, as an application consuming the data (or a sockets receiver)
 * must: the fair baseline for the sockets layer's bandwidth. */
static int prepare_copy(const struct bench_params *p, size_t m, void **sh)
{
    (void)m;
    int rc = vi_prepare(p, VI_POLL, sh);
    if (rc == 0)
        ((struct vi_shared *)*sh)->consume = true;
    return rc;
}

/* vi-user: as vi, with receive buffers in the consumer's own memory (an
 * anonymous mapping, registered), as a program written to VIA 1.0 has
 * them: the provider stages what it cannot write in place. */
static int prepare_user(const struct bench_params *p, size_t m, void **sh)
{
    (void)m;
    int rc = vi_prepare(p, VI_POLL, sh);
    if (rc == 0)
        ((struct vi_shared *)*sh)->user_mem = true;
    return rc;
}

static int prepare_block(const struct bench_params *p, size_t m, void **sh)
{
    (void)m;
    return vi_prepare(p, VI_BLOCK, sh);
}

static int prepare_notify(const struct bench_params *p, size_t m, void **sh)
{
    (void)m;
    return vi_prepare(p, VI_NOTIFY, sh);
}

static void vi_release(void *shared)
{
    free(shared);
}

static int vi_setup(void *shared, enum bench_role role, size_t max_msg, void **out)
{
    return vi_open(shared, role, max_msg, (struct vi_ep **)out);
}

static int vi_teardown(void *p)
{
    return vi_close(p);
}

static void *vi_send_buf(void *p)
{
    return ((struct vi_ep *)p)->sbuf;
}

/* Post one send and take it back: the provider completes it inside
 * VipPostSend, so VipSendDone finds it done at once. */
static int post_send(struct vi_ep *ep, size_t off, size_t len, VIP_UINT32 imm)
{
    VIP_DESCRIPTOR *d = &ep->descs[ep->nrecv], *done = NULL;
    VIP_RETURN rc;
    unsigned spins = 0;

    memset(d, 0, sizeof *d);
    d->CS.Control = VIP_CONTROL_OP_SENDRECV | VIP_CONTROL_IMMEDIATE;
    d->CS.ImmediateData = imm;
    d->CS.Length = (VIP_UINT32)len;
    d->CS.SegCount = len ? 1 : 0;
    d->DS[0].Local.Data.Address = ep->sbuf + off;
    d->DS[0].Local.Handle = ep->sbuf_mh;
    d->DS[0].Local.Length = (VIP_UINT32)len;
    rc = VipPostSend(ep->vi, d, ep->desc_mh);
    if (rc != VIP_SUCCESS)
        return vi_fail(ep, "VipPostSend", rc);
    while ((rc = VipSendDone(ep->vi, &done)) == VIP_NOT_DONE)
        if (++spins == SPIN_CHECK) {
            spins = 0;
            if (!bench_peer_alive()) {
                fprintf(stderr, "%s: peer process exited\n", ep->name);
                return -1;
            }
        }
    if (rc != VIP_SUCCESS)
        return vi_fail(ep, "VipSendDone", rc);
    if (done != d || !(d->CS.Status & VIP_STATUS_DONE) || (d->CS.Status & VIP_STATUS_ERROR_MASK)) {
        fprintf(stderr, "%s: send completed with status 0x%x\n", ep->name,
                (unsigned)d->CS.Status);
        return vi_fail(ep, "send", VIP_DESCRIPTOR_ERROR);
    }
    return 0;
}

void vi_notify_handler(VIP_PVOID ctx, VIP_NIC_HANDLE nic, VIP_VI_HANDLE vi, VIP_DESCRIPTOR *d)
{
    struct vi_ep *ep = ctx;

    (void)nic;
    (void)vi;
    /* Provider thread: hand the descriptor over and wake the application. */
    pthread_mutex_lock(&ep->mu);
    ep->handed = d;
    ep->armed = false;
    pthread_cond_signal(&ep->cv);
    pthread_mutex_unlock(&ep->mu);
}

static int notify_wait(struct vi_ep *ep, VIP_DESCRIPTOR **out)
{
    VIP_RETURN rc;
    int err = 0;

    pthread_mutex_lock(&ep->mu);
    ep->armed = true;
    pthread_mutex_unlock(&ep->mu);
    /* Not holding the lock: the handler may run before this returns. */
    rc = VipRecvNotify(ep->vi, ep, vi_notify_handler);
    if (rc != VIP_SUCCESS) {
        ep->armed = false;
        return vi_fail(ep, "VipRecvNotify", rc);
    }
    pthread_mutex_lock(&ep->mu);
    while (!ep->handed && err == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += NOTIFY_CHECK_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        /* Timed only to notice a dead peer; a live one wakes us. */
        if (pthread_cond_timedwait(&ep->cv, &ep->mu, &ts) == ETIMEDOUT && !ep->handed &&
            !bench_peer_alive())
            err = -1;
    }
    *out = ep->handed;
    ep->handed = NULL;
    pthread_mutex_unlock(&ep->mu);
    if (err)
        fprintf(stderr, "%s: peer process exited\n", ep->name);
    return err;
}

/* The next completed receive, waiting the transport's way. */
static int next_completion(struct vi_ep *ep, VIP_DESCRIPTOR **out)
{
    VIP_DESCRIPTOR *d = NULL;
    VIP_RETURN rc;
    unsigned spins = 0;

    switch (ep->wait) {
    case VI_POLL:
        while ((rc = VipRecvDone(ep->vi, &d)) == VIP_NOT_DONE)
            if (++spins == SPIN_CHECK) {
                spins = 0;
                if (!bench_peer_alive()) {
                    fprintf(stderr, "%s: peer process exited\n", ep->name);
                    return -1;
                }
            }
        if (rc != VIP_SUCCESS)
            return vi_fail(ep, "VipRecvDone", rc);
        break;
    case VI_BLOCK:
        rc = VipRecvWait(ep->vi, VIP_INFINITE, &d);
        if (rc != VIP_SUCCESS)
            return vi_fail(ep, "VipRecvWait", rc);
        break;
    case VI_NOTIFY:
        if (notify_wait(ep, &d) != 0)
            return -1;
        break;
    }
    if (!d) {
        fprintf(stderr, "%s: receive completion without a descriptor\n", ep->name);
        return -1;
    }
    ep->posted--;
    if (!(d->CS.Status & VIP_STATUS_DONE) || (d->CS.Status & VIP_STATUS_ERROR_MASK)) {
        fprintf(stderr, "%s: receive completed with status 0x%x%s\n", ep->name,
                (unsigned)d->CS.Status,
                d->CS.Status & VIP_STATUS_DESC_FLUSHED_ERROR ? " (flushed: connection lost)"
                                                              : "");
        return vi_fail(ep, "receive", VIP_DESCRIPTOR_ERROR);
    }
    if ((d->CS.Status & VIP_STATUS_OP_MASK) != VIP_STATUS_OP_RECEIVE ||
        !(d->CS.Status & VIP_STATUS_IMMEDIATE)) {
        fprintf(stderr, "%s: unexpected receive status 0x%x\n", ep->name,
                (unsigned)d->CS.Status);
        return -1;
    }
    *out = d;
    return 0;
}

static int repost(struct vi_ep *ep, VIP_DESCRIPTOR *d)
{
    VIP_RETURN rc;

    vi_fill_recv(ep, d);
    rc = VipPostRecv(ep->vi, d, ep->desc_mh);
    if (rc != VIP_SUCCESS)
        return vi_fail(ep, "VipPostRecv", rc);
    ep->posted++;
    return 0;
}

/*
 * Take one completion. Credit messages are absorbed (and their receive
 * reposted at once); a data message is returned in *data.
 */
static int take_one(struct vi_ep *ep, VIP_DESCRIPTOR **data)
{
    VIP_DESCRIPTOR *d = NULL;
    VIP_UINT32 imm;

    if (next_completion(ep, &d) != 0)
        return -1;
    imm = d->CS.ImmediateData;
    switch (imm & VI_TAG_MASK) {
    case VI_TAG_CREDIT:
        ep->credits += imm & ~VI_TAG_MASK;
        if (ep->credits > ep->window) {
            fprintf(stderr, "%s: peer granted more credits than it has receives\n", ep->name);
            return -1;
        }
        *data = NULL;
        return repost(ep, d);
    case VI_TAG_DATA:
        *data = d;
        return 0;
    default:
        fprintf(stderr, "%s: unexpected immediate data 0x%x\n", ep->name, (unsigned)imm);
        return -1;
    }
}

/* A message goes as this many pieces (one unless a --ring fragments it). */
static size_t pieces(const struct vi_ep *ep, size_t len)
{
    return len <= ep->frag ? 1 : (len + ep->frag - 1) / ep->frag;
}

static int vi_send(void *p, size_t len)
{
    struct vi_ep *ep = p;
    size_t n = pieces(ep, len);

    for (size_t i = 0; i < n; i++) {
        size_t off = i * ep->frag, plen = len - off < ep->frag ? len - off : ep->frag;

        while (ep->credits == 0) {
            VIP_DESCRIPTOR *d = NULL;
            if (take_one(ep, &d) != 0)
                return -1;
            if (d) { /* data while waiting for credit: keep it for recv_msg */
                if (ep->ring_count == ep->nrecv) {
                    fprintf(stderr, "%s: peer sent more than it had credit for\n", ep->name);
                    return -1;
                }
                ep->ring[(ep->ring_head + ep->ring_count++) % ep->nrecv] = d;
            }
        }
        ep->credits--;
        if (post_send(ep, off, plen, VI_TAG_DATA) != 0)
            return -1;
    }
    return 0;
}

/* Repost a receive whose data was used and grant credit in batches. */
static int give_back(struct vi_ep *ep, VIP_DESCRIPTOR *d)
{
    if (repost(ep, d) != 0)
        return -1;
    if (++ep->to_grant >= ep->grant_at) {
        VIP_UINT32 n = ep->to_grant;
        ep->to_grant = 0;
        return post_send(ep, 0, 0, VI_TAG_CREDIT | n);
    }
    return 0;
}

/* Repost the receive handed out last time. */
static int release_held(struct vi_ep *ep)
{
    VIP_DESCRIPTOR *d = ep->held;

    if (!d)
        return 0;
    ep->held = NULL;
    return give_back(ep, d);
}

static int next_data(struct vi_ep *ep, VIP_DESCRIPTOR **out)
{
    VIP_DESCRIPTOR *d = NULL;

    if (ep->ring_count) {
        d = ep->ring[ep->ring_head];
        ep->ring_head = (ep->ring_head + 1) % ep->nrecv;
        ep->ring_count--;
    }
    while (!d)
        if (take_one(ep, &d) != 0)
            return -1;
    *out = d;
    return 0;
}

static int vi_recv(void *p, size_t len, const void **data)
{
    struct vi_ep *ep = p;
    size_t n = pieces(ep, len);
    VIP_DESCRIPTOR *d = NULL;

    /* The data handed out last time stays valid until now, so it is
     * reposted only here: no copy out of the arena. */
    if (release_held(ep) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        size_t off = i * ep->frag, plen = len - off < ep->frag ? len - off : ep->frag;

        if (next_data(ep, &d) != 0)
            return -1;
        if (d->CS.Length != plen) {
            fprintf(stderr, "%s: received %u bytes, expected %zu\n", ep->name,
                    (unsigned)d->CS.Length, plen);
            ep->held = d;
            return -1;
        }
        if (ep->app_buf)
            memcpy(ep->app_buf + off, d->DS[0].Local.Data.Address, plen);
        else if (i == 0 && n > 1) /* the stream's marker is the first byte */
            memcpy(ep->head, d->DS[0].Local.Data.Address, sizeof ep->head);
        /* Every piece but the last goes back at once (the ring's receiver
         * reposts as it goes); the last is what *data points to. */
        if (i + 1 < n && give_back(ep, d) != 0)
            return -1;
    }
    ep->held = d;
    /* A message in pieces is whole only where the receiver copies (vi-copy);
     * otherwise *data holds its first VI_HEAD_BYTES, all the driver reads. */
    *data = ep->app_buf ? (const void *)ep->app_buf
            : n > 1     ? (const void *)ep->head
                        : d->DS[0].Local.Data.Address;
    return 0;
}

#define VI_OPS                                                                                \
    .max_msg = VI_MAX_MSG, .setup = vi_setup, .send_buf = vi_send_buf, .send_msg = vi_send,  \
    .recv_msg = vi_recv, .teardown = vi_teardown, .release = vi_release, .ring = true

const struct bench_transport bench_transport_vi = {
    .name = "vi",
    .summary = "native vipl (shm provider), polling with VipRecvDone (pinned)",
    .polling = true,
    .prepare = prepare_poll,
    VI_OPS,
};

const struct bench_transport bench_transport_vi_copy = {
    .name = "vi-copy",
    .summary = "as vi, the receiver also copies each message into its own buffer (pinned)",
    .polling = true,
    .prepare = prepare_copy,
    VI_OPS,
};

const struct bench_transport bench_transport_vi_user = {
    .name = "vi-user",
    .summary = "as vi, receive buffers in the consumer's own memory instead of the arena (pinned)",
    .polling = true,
    .prepare = prepare_user,
    VI_OPS,
};

const struct bench_transport bench_transport_vi_block = {
    .name = "vi-block",
    .summary = "native vipl (shm provider), VipRecvWait: spins up to 20 us, then sleeps (pinned)",
    /* VipRecvWait spins before it sleeps: two spinners on one CPU would
     * measure the scheduler, so it is pinned like the polling transports. */
    .polling = true,
    .prepare = prepare_block,
    VI_OPS,
};

const struct bench_transport bench_transport_vi_notify = {
    .name = "vi-notify",
    .summary = "native vipl (shm provider), VipRecvNotify handing off to the app thread",
    .polling = false,
    .prepare = prepare_notify,
    VI_OPS,
};
