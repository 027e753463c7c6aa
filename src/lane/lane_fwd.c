/*
 * lane_fwd.c - a LANE forwarder: one unreliable VI to the other side, with
 * LANE_NRECV receives pre-posted in its arena (one frame each), and two
 * loops: tun -> VI (read a frame, post it as one send; the shm provider
 * carries a send out inside VipPostSend) on a thread of its own, and
 * VI -> tun (VipRecvWait, check the frame, write it, repost) on the caller's.
 * Both look at *stop every LANE_TICK_MS.
 */
#include "lane.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <linux/virtio_net.h> /* struct virtio_net_hdr: its size */
#include <vipl.h>
#include <vipl_ext.h>

#define LANE_NRECV 64      /* frames in flight toward us: 4 MiB at 64 KiB */
#define LANE_TICK_MS 200   /* how often the loops look at the stop flag */
#define CONNECT_WAIT_MS 10000

struct lane_ep {
    VIP_NIC_HANDLE nic;
    VIP_PROTECTION_HANDLE ptag;
    VIP_VI_HANDLE vi;
    size_t slot;             /* the MTU, rounded up to cache lines */
    unsigned frame;          /* the longest message: the MTU, or a GSO frame with its header */
    bool vnet;               /* frames start with a struct virtio_net_hdr */
    unsigned char *arena;    /* LANE_NRECV receive slots */
    VIP_MEM_HANDLE arena_mh;
    VIP_DESCRIPTOR *descs;   /* LANE_NRECV receives + 1 send */
    VIP_MEM_HANDLE desc_mh;
    unsigned char *sbuf;     /* the frame being sent */
    size_t sbuf_len;
    VIP_MEM_HANDLE sbuf_mh;
    int tun;
    atomic_int *stop;
    atomic_bool done;        /* either loop ended: the other follows */
    unsigned long long dropped_bad; /* frames from the peer that were not IP */
};

static int fail(const char *what, VIP_RETURN rc)
{
    fprintf(stderr, "sovia lane: %s: %s\n", what, VipxReturnString(rc));
    return -1;
}

static bool stopping(struct lane_ep *ep)
{
    return atomic_load(ep->stop) || atomic_load(&ep->done);
}

static void fill_recv(struct lane_ep *ep, unsigned i)
{
    VIP_DESCRIPTOR *d = &ep->descs[i];
    memset(d, 0, sizeof *d);
    d->CS.Control = VIP_CONTROL_OP_SENDRECV;
    d->CS.SegCount = 1;
    d->DS[0].Local.Data.Address = ep->arena + (size_t)i * ep->slot;
    d->DS[0].Local.Handle = ep->arena_mh;
    d->DS[0].Local.Length = ep->frame;
}

static int setup_memory(struct lane_ep *ep)
{
    VIP_MEM_ATTRIBUTES ma = {.Ptag = ep->ptag};
    size_t dlen = (LANE_NRECV + 1) * sizeof(VIP_DESCRIPTOR);
    VIP_PVOID base;
    VIP_ULONG len;
    VIP_RETURN rc;

    if ((rc = VipxViArena(ep->vi, &base, &len)) != VIP_SUCCESS)
        return fail("VipxViArena", rc);
    if (!base || len < LANE_NRECV * ep->slot) {
        fprintf(stderr, "sovia lane: the VI's arena is too small\n");
        return -1;
    }
    ep->arena = base;
    if ((rc = VipRegisterMem(ep->nic, ep->arena, len, &ma, &ep->arena_mh)) != VIP_SUCCESS)
        return fail("VipRegisterMem(arena)", rc);
    ep->descs = aligned_alloc(VIP_DESCRIPTOR_ALIGNMENT, dlen);
    if (!ep->descs)
        return -1;
    memset(ep->descs, 0, dlen);
    if ((rc = VipRegisterMem(ep->nic, ep->descs, dlen, &ma, &ep->desc_mh)) != VIP_SUCCESS)
        return fail("VipRegisterMem(descriptors)", rc);
    ep->sbuf_len = (ep->frame + 4095u) & ~(size_t)4095;
    ep->sbuf = mmap(NULL, ep->sbuf_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ep->sbuf == MAP_FAILED) {
        ep->sbuf = NULL;
        return -1;
    }
    if ((rc = VipRegisterMem(ep->nic, ep->sbuf, ep->sbuf_len, &ma, &ep->sbuf_mh)) != VIP_SUCCESS)
        return fail("VipRegisterMem(send buffer)", rc);
    for (unsigned i = 0; i < LANE_NRECV; i++) {
        fill_recv(ep, i);
        if ((rc = VipPostRecv(ep->vi, &ep->descs[i], ep->desc_mh)) != VIP_SUCCESS)
            return fail("VipPostRecv", rc);
    }
    return 0;
}

static int vi_connect(struct lane_ep *ep, const char *disc, int role)
{
    struct in_addr host = {.s_addr = htonl(INADDR_LOOPBACK)};
    char mine[64];
    VIP_NET_ADDRESS *local, *remote;
    VIP_VI_ATTRIBUTES ra;
    VIP_RETURN rc;

    snprintf(mine, sizeof mine, "%s-%d", disc, role);
    local = VipxAllocNetAddress(&host, 4, mine, (VIP_UINT16)strlen(mine));
    if (role == 0)
        remote = calloc(1, sizeof(VIP_NET_ADDRESS) + 4 + 64);
    else {
        snprintf(mine, sizeof mine, "%s-0", disc);
        remote = VipxAllocNetAddress(&host, 4, mine, (VIP_UINT16)strlen(mine));
    }
    if (!local || !remote) {
        free(local);
        free(remote);
        return -1;
    }
    if (role == 0) {
        VIP_CONN_HANDLE conn;
        rc = VipConnectWait(ep->nic, local, CONNECT_WAIT_MS, remote, &ra, &conn);
        if (rc == VIP_SUCCESS)
            rc = VipConnectAccept(conn, ep->vi);
    } else {
        /* The other side may not listen yet. */
        for (int tries = 0;; tries++) {
            rc = VipConnectRequest(ep->vi, local, remote, CONNECT_WAIT_MS, &ra);
            if (rc != VIP_NO_MATCH || tries > 2500 || atomic_load(ep->stop))
                break;
            nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL);
        }
    }
    free(local);
    free(remote);
    return rc == VIP_SUCCESS ? 0 : fail(role == 0 ? "VipConnectWait" : "VipConnectRequest", rc);
}

static int ep_open(struct lane_ep *ep, const struct lane_config *cfg, int role)
{
    VIP_VI_ATTRIBUTES va;
    VIPX_VI_CONFIG vc;
    VIP_RETURN rc;

    ep->vnet = cfg->offload;
    /* With TSO the kernel hands over segments of up to 64 KB whatever the
     * MTU, each behind its virtio-net header. */
    ep->frame = cfg->offload ? (unsigned)sizeof(struct virtio_net_hdr) + LANE_MAX_MTU : cfg->mtu;
    ep->slot = (ep->frame + 63u) & ~(size_t)63;
    if ((rc = VipOpenNic(NULL, &ep->nic)) != VIP_SUCCESS) {
        ep->nic = NULL;
        return fail("VipOpenNic", rc);
    }
    if ((rc = VipCreatePtag(ep->nic, &ep->ptag)) != VIP_SUCCESS)
        return fail("VipCreatePtag", rc);
    memset(&va, 0, sizeof va);
    /* A NIC's semantics: a frame that finds no receive posted is dropped. */
    va.ReliabilityLevel = VIP_SERVICE_UNRELIABLE;
    va.MaxTransferSize = ep->frame;
    va.Ptag = ep->ptag;
    memset(&vc, 0, sizeof vc);
    vc.QueueDepth = 2 * LANE_NRECV;
    vc.ArenaBytes = (LANE_NRECV * ep->slot + 4095) & ~(size_t)4095;
    if ((rc = VipxCreateVi(ep->nic, &va, NULL, NULL, &vc, &ep->vi)) != VIP_SUCCESS) {
        ep->vi = NULL;
        return fail("VipxCreateVi", rc);
    }
    if (setup_memory(ep) != 0)
        return -1;
    return vi_connect(ep, cfg->disc, role);
}

/* Closing the NIC releases what it owns; the process's end would as well. */
static void ep_close(struct lane_ep *ep)
{
    if (ep->vi)
        (void)VipDisconnect(ep->vi);
    if (ep->nic)
        (void)VipCloseNic(ep->nic);
    if (ep->sbuf)
        munmap(ep->sbuf, ep->sbuf_len);
    free(ep->descs);
}

static bool vi_connected(struct lane_ep *ep)
{
    VIP_VI_STATE st;
    VIP_BOOLEAN sq, rq;
    VIP_VI_ATTRIBUTES a;
    return VipQueryVi(ep->vi, &st, &a, &sq, &rq) == VIP_SUCCESS && st == VIP_STATE_CONNECTED;
}

static void *tun_to_vi(void *arg)
{
    struct lane_ep *ep = arg;
    VIP_DESCRIPTOR *sd = &ep->descs[LANE_NRECV], *done;
    struct pollfd pfd = {.fd = ep->tun, .events = POLLIN};

    while (!stopping(ep)) {
        ssize_t n = read(ep->tun, ep->sbuf, ep->frame);
        if (n < 0 && errno == EAGAIN) {
            if (poll(&pfd, 1, LANE_TICK_MS) < 0 && errno != EINTR)
                break;
            if (pfd.revents & (POLLERR | POLLHUP | POLLNVAL))
                break; /* the device was deleted */
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        memset(sd, 0, sizeof *sd);
        sd->CS.Control = VIP_CONTROL_OP_SENDRECV;
        sd->CS.SegCount = 1;
        sd->CS.Length = (VIP_UINT32)n;
        sd->DS[0].Local.Data.Address = ep->sbuf;
        sd->DS[0].Local.Handle = ep->sbuf_mh;
        sd->DS[0].Local.Length = (VIP_UINT32)n;
        if (VipPostSend(ep->vi, sd, ep->desc_mh) != VIP_SUCCESS)
            break;
        /* Complete when VipPostSend returns (docs/VIPL.md); dropped at a
         * full peer is still DONE without an error bit. */
        if (VipSendWait(ep->vi, VIP_INFINITE, &done) != VIP_SUCCESS ||
            ((done->CS.Status & VIP_STATUS_ERROR_MASK) && !vi_connected(ep)))
            break;
    }
    atomic_store(&ep->done, true);
    return NULL;
}

static int vi_to_tun(struct lane_ep *ep)
{
    while (!stopping(ep)) {
        VIP_DESCRIPTOR *d = NULL;
        VIP_RETURN rc = VipRecvWait(ep->vi, LANE_TICK_MS, &d);
        if (rc == VIP_TIMEOUT) {
            if (!vi_connected(ep))
                break;
            continue;
        }
        if (rc != VIP_SUCCESS || !d)
            break;
        size_t i = (size_t)(d - ep->descs);
        if (i >= LANE_NRECV)
            break;
        if (d->CS.Status & VIP_STATUS_ERROR_MASK) {
            if (!vi_connected(ep))
                break;
        } else {
            size_t len = d->CS.Length;
            const unsigned char *f = ep->arena + i * ep->slot;
            if (len > ep->frame || !lane_frame_ok(f, len, ep->vnet))
                ep->dropped_bad++;
            else if (write(ep->tun, f, len) < 0 && (errno == EBADFD || errno == EIO))
                break; /* the device was deleted; other errors drop one frame */
        }
        fill_recv(ep, (unsigned)i);
        if (VipPostRecv(ep->vi, d, ep->desc_mh) != VIP_SUCCESS)
            break;
    }
    atomic_store(&ep->done, true);
    return 0;
}

int lane_forward(const struct lane_config *cfg, const struct lane_side *side, int role,
                 int ready_fd, atomic_int *stop)
{
    struct lane_ep ep = {.tun = -1, .stop = stop};
    pthread_t tx;
    int ret = -1;

    atomic_init(&ep.done, false);
    if (ep_open(&ep, cfg, role) != 0)
        goto out;
    if (lane_enter_netns(side->ns) != 0)
        goto out;
    ep.tun = lane_tun_open(cfg->dev, cfg->mtu, side->addr, side->prefix, cfg->offload);
    if (ep.tun < 0)
        goto out;
    if (pthread_create(&tx, NULL, tun_to_vi, &ep) != 0) {
        fprintf(stderr, "sovia lane: pthread_create failed\n");
        goto out;
    }
    if (ready_fd >= 0)
        (void)!write(ready_fd, "1", 1);
    vi_to_tun(&ep);
    pthread_join(tx, NULL);
    if (ep.dropped_bad)
        fprintf(stderr, "sovia lane: %s: dropped %llu malformed frames from the peer\n",
                side->ns, ep.dropped_bad);
    ret = 0;
out:
    if (ep.tun >= 0)
        close(ep.tun);
    ep_close(&ep);
    return ret;
}
