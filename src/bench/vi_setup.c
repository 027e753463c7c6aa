/*
 * vi_setup.c - bring a vi endpoint up (NIC, ptag, VI with arena, registered
 * memory, pre-posted receives, connection) and down again.
 */
#include "vi_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define CONNECT_RETRY_S 5.0     /* the peer may not be listening yet */
#define CONNECT_WAIT_MS 10000   /* peer side: the driver should come quickly */
#define DRAIN_TIMEOUT_S 2.0

_Static_assert(sizeof(VIP_DESCRIPTOR) % VIP_DESCRIPTOR_ALIGNMENT == 0,
               "descriptors are laid out back to back, 64-byte aligned");


static const char *error_code_name(int code)
{
    static const char *const names[] = {
        "POST_DESC",  "CONN_LOST",  "RECVQ_EMPTY", "VI_OVERRUN",     "RDMAW_PROT",  "RDMAW_DATA",
        "RDMAW_ABORT", "RDMAR_PROT", "COMP_PROT",  "RDMA_TRANSPORT", "CATASTROPHIC",
    };
    if (code >= 0 && code < (int)(sizeof names / sizeof names[0]))
        return names[code];
    return "?";
}

int vi_fail(struct vi_ep *ep, const char *what, VIP_RETURN rc)
{
    int async = atomic_load(&ep->async_error);
    char extra[64] = "";

    if (async >= 0)
        snprintf(extra, sizeof extra, " (error handler: VIP_ERROR_%s)", error_code_name(async));
    /* One write, so the two processes' messages do not interleave. */
    fprintf(stderr, "%s (%s): %s: %s%s\n", ep->name,
            ep->role == BENCH_DRIVER ? "driver" : "peer", what, VipxReturnString(rc), extra);
    return -1;
}

/* Runs on the provider's agent thread (or the posting thread): only record. */
static void on_error(VIP_PVOID ctx, VIP_ERROR_DESCRIPTOR *e)
{
    struct vi_ep *ep = ctx;
    atomic_store(&ep->async_error, (int)e->ErrorCode);
}

void vi_fill_recv(struct vi_ep *ep, VIP_DESCRIPTOR *d)
{
    size_t i = (size_t)(d - ep->descs);

    memset(d, 0, sizeof *d);
    d->CS.Control = VIP_CONTROL_OP_SENDRECV;
    d->CS.SegCount = 1;
    /* Messages land in receives in posting order, so handing buffers out in
     * that order gives any `window` consecutive messages distinct buffers:
     * a buffer is never written while its message is still unread. */
    (void)i;
    d->DS[0].Local.Data.Address = ep->arena + (ep->next_buf++ % ep->nbuf) * ep->slot;
    d->DS[0].Local.Handle = ep->arena_mh;
    /* Exactly the largest piece: a longer buffer could exceed the VI's
     * MaxTransferSize. Slots are only spaced to cache lines. */
    d->DS[0].Local.Length = (VIP_UINT32)ep->frag;
}

static int alloc_memory(struct vi_ep *ep)
{
    VIP_MEM_ATTRIBUTES ma = {.Ptag = ep->ptag, .EnableRdmaWrite = VIP_FALSE,
                             .EnableRdmaRead = VIP_FALSE};
    size_t dlen = ((size_t)ep->nrecv + 1) * sizeof(VIP_DESCRIPTOR);
    VIP_PVOID base;
    VIP_RETURN rc;

    if (ep->user_mem) {
        ep->arena_len = (ep->nbuf * ep->slot + 4095) & ~(size_t)4095;
        base = mmap(NULL, ep->arena_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                    -1, 0);
        if (base == MAP_FAILED) {
            fprintf(stderr, "%s: mmap: %s\n", ep->name, strerror(errno));
            return -1;
        }
        ep->arena = base;
    } else {
        rc = VipxViArena(ep->vi, &base, &ep->arena_len);
        if (rc != VIP_SUCCESS)
            return vi_fail(ep, "VipxViArena", rc);
    }
    if (!base || ep->arena_len < ep->nbuf * ep->slot) {
        fprintf(stderr, "%s: arena is %lu bytes, %zu needed\n", ep->name,
                (unsigned long)ep->arena_len, ep->nbuf * ep->slot);
        return -1;
    }
    ep->arena = base;
    /* Touch every page now: first-touch faults on a large arena would
     * otherwise land in the timed loops (ping-pong cycles through all slots). */
    memset(ep->arena, 0, ep->nbuf * ep->slot);
    rc = VipRegisterMem(ep->nic, ep->arena, ep->arena_len, &ma, &ep->arena_mh);
    if (rc != VIP_SUCCESS)
        return vi_fail(ep, "VipRegisterMem(arena)", rc);
    ep->arena_reg = true;

    ep->descs = aligned_alloc(VIP_DESCRIPTOR_ALIGNMENT, dlen);
    if (!ep->descs)
        return -1;
    memset(ep->descs, 0, dlen);
    rc = VipRegisterMem(ep->nic, ep->descs, dlen, &ma, &ep->desc_mh);
    if (rc != VIP_SUCCESS)
        return vi_fail(ep, "VipRegisterMem(descriptors)", rc);
    ep->desc_reg = true;

    /* Send buffer: ordinary page-aligned memory, touched now. */
    ep->sbuf_len = (ep->max_msg + 4095) & ~(size_t)4095;
    ep->sbuf = mmap(NULL, ep->sbuf_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                    -1, 0);
    if (ep->sbuf == MAP_FAILED) {
        ep->sbuf = NULL;
        fprintf(stderr, "%s: mmap: %s\n", ep->name, strerror(errno));
        return -1;
    }
    memset(ep->sbuf, 0, ep->sbuf_len);
    rc = VipRegisterMem(ep->nic, ep->sbuf, ep->sbuf_len, &ma, &ep->sbuf_mh);
    if (rc != VIP_SUCCESS)
        return vi_fail(ep, "VipRegisterMem(send buffer)", rc);
    ep->sbuf_reg = true;
    return 0;
}

static int connect_peer(struct vi_ep *ep, struct vi_shared *sh)
{
    VIP_NET_ADDRESS *local = NULL, *remote = NULL;
    VIP_VI_ATTRIBUTES rattrs;
    VIP_RETURN rc;
    int ret = -1;

    if (ep->role == BENCH_PEER) {
        VIP_CONN_HANDLE conn;
        struct in_addr me = bench_addr(BENCH_PEER);
        local = VipxAllocNetAddress(&me, 4, sh->disc, (VIP_UINT16)strlen(sh->disc));
        /* Room for any peer address: 4 bytes of host, up to 64 of discriminator. */
        remote = calloc(1, sizeof(VIP_NET_ADDRESS) + 4 + 64);
        if (!local || !remote)
            goto out;
        rc = VipConnectWait(ep->nic, local, CONNECT_WAIT_MS, remote, &rattrs, &conn);
        if (rc != VIP_SUCCESS) {
            vi_fail(ep, "VipConnectWait", rc);
            goto out;
        }
        rc = VipConnectAccept(conn, ep->vi);
        if (rc != VIP_SUCCESS) {
            vi_fail(ep, "VipConnectAccept", rc);
            goto out;
        }
    } else {
        char mine[64];
        double deadline = bench_now() + CONNECT_RETRY_S;
        snprintf(mine, sizeof mine, "%s-d", sh->disc);
        struct in_addr me = bench_addr(BENCH_DRIVER), peer = bench_addr(BENCH_PEER);
        local = VipxAllocNetAddress(&me, 4, mine, (VIP_UINT16)strlen(mine));
        remote = VipxAllocNetAddress(&peer, 4, sh->disc, (VIP_UINT16)strlen(sh->disc));
        if (!local || !remote)
            goto out;
        for (;;) {
            rc = VipConnectRequest(ep->vi, local, remote, CONNECT_WAIT_MS, &rattrs);
            if (rc != VIP_NO_MATCH || bench_now() > deadline || !bench_peer_alive())
                break;
            nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL);
        }
        if (rc != VIP_SUCCESS) {
            vi_fail(ep, "VipConnectRequest", rc);
            goto out;
        }
    }
    ep->connected = true;
    ret = 0;
out:
    if (ret != 0 && (!local || !remote))
        fprintf(stderr, "%s: out of memory for addresses\n", ep->name);
    free(local);
    free(remote);
    return ret;
}

int vi_open(struct vi_shared *sh, enum bench_role role, size_t max_msg, struct vi_ep **out)
{
    struct vi_ep *ep = calloc(1, sizeof *ep);
    VIP_NIC_ATTRIBUTES na;
    VIP_VI_ATTRIBUTES va;
    VIPX_VI_CONFIG cfg;
    VIP_RETURN rc;

    if (!ep)
        return -1;
    ep->name = sh->consume           ? "vi-copy"
               : sh->user_mem        ? "vi-user"
               : sh->wait == VI_POLL ? "vi"
               : sh->wait == VI_BLOCK ? "vi-block"
                                      : "vi-notify";
    ep->wait = sh->wait;
    if (sh->consume && !(ep->app_buf = malloc(max_msg ? max_msg : 1)))
        goto fail;
    ep->role = role;
    ep->user_mem = sh->user_mem;
    ep->max_msg = max_msg;
    ep->frag = sh->ring && sh->frag && sh->frag < max_msg ? sh->frag : max_msg;
    ep->slot = (ep->frag + 63) & ~(size_t)63;
    ep->credits = VI_K; /* lowered to the window once nbuf is known */
    atomic_init(&ep->async_error, -1);
    if (pthread_mutex_init(&ep->mu, NULL) == 0) {
        if (pthread_cond_init(&ep->cv, NULL) == 0)
            ep->sync_init = true;
        else
            pthread_mutex_destroy(&ep->mu);
    }
    if (!ep->sync_init)
        goto fail;

    rc = VipOpenNic(NULL, &ep->nic);
    if (rc != VIP_SUCCESS) {
        ep->nic = NULL;
        vi_fail(ep, "VipOpenNic", rc);
        goto fail;
    }
    rc = VipErrorCallback(ep->nic, ep, on_error);
    if (rc != VIP_SUCCESS) {
        vi_fail(ep, "VipErrorCallback", rc);
        goto fail;
    }
    rc = VipQueryNic(ep->nic, &na);
    if (rc != VIP_SUCCESS) {
        vi_fail(ep, "VipQueryNic", rc);
        goto fail;
    }
    if (na.MaxTransferSize < ep->frag) {
        fprintf(stderr, "%s: NIC carries at most %lu bytes per message, %zu asked\n", ep->name,
                (unsigned long)na.MaxTransferSize, ep->frag);
        goto fail;
    }
    rc = VipCreatePtag(ep->nic, &ep->ptag);
    if (rc != VIP_SUCCESS) {
        ep->ptag = NULL;
        vi_fail(ep, "VipCreatePtag", rc);
        goto fail;
    }
    memset(&va, 0, sizeof va);
    va.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
    va.MaxTransferSize = ep->frag;
    va.Ptag = ep->ptag;
    memset(&cfg, 0, sizeof cfg);
    if (sh->ring) {
        /* NetPIPE-VIA: every descriptor of the ring has its own buffer, and
         * the receiver says "continue" once all of them are reposted. */
        ep->nbuf = sh->ring;
        ep->window = sh->ring;
        ep->grant_at = sh->ring;
    } else {
        /* Receive buffers are reused round-robin within RECV_WORKING_SET, as
         * ucx_perftest and NetPIPE reuse theirs: the data is never examined,
         * and cycling megabytes of distinct buffers would measure cache
         * misses. */
        ep->nbuf = RECV_WORKING_SET / ep->slot;
        if (ep->nbuf < 1)
            ep->nbuf = 1;
        if (ep->nbuf > VI_NRECV)
            ep->nbuf = VI_NRECV;
        ep->window = ep->nbuf < VI_K ? (unsigned)ep->nbuf : VI_K;
        ep->grant_at = (ep->window + 1) / 2;
    }
    ep->nrecv = ep->window + VI_CREDIT_SLOTS;
    ep->credits = ep->window;
    ep->ring = calloc(ep->nrecv, sizeof *ep->ring);
    if (!ep->ring)
        goto fail;
    cfg.QueueDepth = 2 * ep->nrecv;
    cfg.ArenaBytes = ep->user_mem ? 0 : ((ep->nbuf * ep->slot) + 4095) & ~(size_t)4095;
    rc = VipxCreateVi(ep->nic, &va, NULL, NULL, &cfg, &ep->vi);
    if (rc != VIP_SUCCESS) {
        ep->vi = NULL;
        vi_fail(ep, "VipxCreateVi", rc);
        goto fail;
    }
    if (alloc_memory(ep) != 0)
        goto fail;

    /* Pre-post every receive before connecting: the peer may send at once. */
    for (unsigned i = 0; i < ep->nrecv; i++) {
        VIP_DESCRIPTOR *d = &ep->descs[i];
        vi_fill_recv(ep, d);
        rc = VipPostRecv(ep->vi, d, ep->desc_mh);
        if (rc != VIP_SUCCESS) {
            vi_fail(ep, "VipPostRecv", rc);
            goto fail;
        }
        ep->posted++;
    }
    if (connect_peer(ep, sh) != 0)
        goto fail;
    *out = ep;
    return 0;
fail:
    vi_close(ep);
    return -1;
}

/* Take back every posted receive (flushed by the disconnect). */
static int drain(struct vi_ep *ep)
{
    double deadline = bench_now() + DRAIN_TIMEOUT_S;

    while (ep->posted > 0 && bench_now() < deadline) {
        VIP_DESCRIPTOR *d = NULL;
        VIP_RETURN rc = VipRecvDone(ep->vi, &d);

        if (rc == VIP_SUCCESS) {
            ep->posted--;
            continue;
        }
        /* A notify armed on an error path may have taken one. */
        pthread_mutex_lock(&ep->mu);
        if (ep->handed) {
            ep->handed = NULL;
            ep->posted--;
        }
        pthread_mutex_unlock(&ep->mu);
        if (rc != VIP_NOT_DONE)
            return vi_fail(ep, "VipRecvDone while draining", rc);
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    if (ep->posted > 0) {
        fprintf(stderr, "%s: %u posted receives were not flushed within %.0f s of the "
                        "disconnect\n", ep->name, ep->posted, DRAIN_TIMEOUT_S);
        return -1;
    }
    return 0;
}

int vi_close(struct vi_ep *ep)
{
    VIP_RETURN rc;
    int ret = 0;

    /* Setup failed part-way: closing the NIC releases everything it owns,
     * without the flush dance a connected VI needs. */
    if (!ep->connected)
        goto close_nic;
    /* The peer may have disconnected first (our VI is in ERROR then), so a
     * refusal here is expected; the drain shows what happened. */
    (void)VipDisconnect(ep->vi);
    if (drain(ep) != 0)
        ret = -1;
    if (ep->arena_reg && (rc = VipDeregisterMem(ep->nic, ep->arena, ep->arena_mh)) != VIP_SUCCESS)
        ret = vi_fail(ep, "VipDeregisterMem(arena)", rc);
    if (ep->desc_reg && (rc = VipDeregisterMem(ep->nic, ep->descs, ep->desc_mh)) != VIP_SUCCESS)
        ret = vi_fail(ep, "VipDeregisterMem(descriptors)", rc);
    if (ep->sbuf_reg && (rc = VipDeregisterMem(ep->nic, ep->sbuf, ep->sbuf_mh)) != VIP_SUCCESS)
        ret = vi_fail(ep, "VipDeregisterMem(send buffer)", rc);
    if ((rc = VipDestroyVi(ep->vi)) != VIP_SUCCESS)
        ret = vi_fail(ep, "VipDestroyVi", rc);
    else if ((rc = VipDestroyPtag(ep->nic, ep->ptag)) != VIP_SUCCESS)
        ret = vi_fail(ep, "VipDestroyPtag", rc);
close_nic:
    /* Closing the NIC stops its threads: no handler can touch ep after this. */
    if (ep->nic && (rc = VipCloseNic(ep->nic)) != VIP_SUCCESS)
        ret = vi_fail(ep, "VipCloseNic", rc);
    if (ep->sbuf)
        munmap(ep->sbuf, ep->sbuf_len);
    if (ep->user_mem && ep->arena)
        munmap(ep->arena, ep->arena_len);
    free(ep->descs);
    free(ep->ring);
    free(ep->app_buf);
    if (ep->sync_init) {
        pthread_cond_destroy(&ep->cv);
        pthread_mutex_destroy(&ep->mu);
    }
    free(ep);
    return ret;
}
