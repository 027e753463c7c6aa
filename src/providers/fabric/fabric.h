/*
 * fabric.h - the libfabric provider's objects (issue 17).
 *
 * A VI is an FI_EP_MSG endpoint, made when it connects (an endpoint cannot
 * be reused after a shutdown, a VI can). Each work queue is a ring of
 * slots in post order; libfabric completes them out of our sight, and the
 * ring hands them back in order (VipSendDone/VipRecvDone). Every queue
 * reports to one fi_cq: its VI's own, or the VIPL CQ's when the queue has
 * one (then the fi_cq's reader also queues (VI, queue) notices for
 * VipCQDone). Providers with manual progress (tcp) move data only inside
 * fi_cq_read / fi_eq_read, so every Done and Wait reads the fi_cq first.
 */
#ifndef VIPL_FABRIC_H
#define VIPL_FABRIC_H

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "provider.h"

/* libfabric's named functions, reached through fabric_dl.c (loaded when a
 * fabric NIC opens); fi_allocinfo() is fi_dupinfo(NULL). Test programs that
 * link libfabric themselves define FAB_LINKED. */
#ifndef FAB_LINKED
bool fab_dl_load(void);
int fab_fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
                   const struct fi_info *hints, struct fi_info **info);
void fab_fi_freeinfo(struct fi_info *info);
struct fi_info *fab_fi_dupinfo(const struct fi_info *info);
int fab_fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
uint32_t fab_fi_version(void);
#define fi_getinfo fab_fi_getinfo
#define fi_freeinfo fab_fi_freeinfo
#define fi_dupinfo fab_fi_dupinfo
#define fi_fabric fab_fi_fabric
#define fi_version fab_fi_version
#endif

#define FAB_DEPTH_DEFAULT 256u
#define FAB_DEPTH_MAX 4096u
#define FAB_MAX_TRANSFER (4u << 20)
#define FAB_CM_DATA_MAX 48 /* what verbs carries; tcp carries more */
#define FAB_PORT_BASE 10000u
#define FAB_PORT_SPAN 20000u

/* Remote CQ data: bits 0-31 the immediate data, 32-55 the length of the
 * RDMA write a notice stands for, 56-63 the kind. Anything else from a
 * peer fails its connection. */
#define FAB_DATA_SEND 1u     /* a send with immediate data */
#define FAB_DATA_RDMA_IMM 2u /* the notice after an RDMA write with immediate data */
#define FAB_DATA(kind, len, imm) ((uint64_t)(kind) << 56 | (uint64_t)(len) << 32 | (imm))

/* One libfabric domain per protection tag: a provider checks remote keys
 * within a domain, so an endpoint of a VI reaches only the regions of its
 * own tag, as VIA's RDMA write protection says (fabric_domain.c). */
struct fab_dom {
    struct fab_dom *next;
    struct vipl_ptag *ptag;
    struct fid_domain *domain;
};

struct fab_nic {
    struct fi_info *info; /* the provider chosen at VipOpenNic */
    struct fid_fabric *fabric;
    struct fid_domain *domain; /* the first one opened, kept to test the provider */
    struct fab_dom *doms;      /* under dom_lock */
    pthread_mutex_t dom_lock;
    struct fid_mr **mrs;  /* by registration slot, VIPL_MR_MAX + 1 */
    bool mr_local, mr_virt, mr_prov_key;
    size_t tx_iov_limit, rx_iov_limit;
    size_t cq_data_size;
    pthread_mutex_t lock; /* listeners */
    struct fab_listener *listeners;
    char prov_name[32];
    struct fab_agent *agent;
};

/* One fi_cq and its reader's lock. For a VIPL CQ, also its notices. */
struct fab_cqx {
    struct fid_cq *cq;     /* NULL until a VI of some tag binds to it */
    struct fid_domain *domain;
    pthread_mutex_t lock;
    int fd; /* FI_WAIT_FD (a VIPL CQ's: outer), or -1 */
    /* A VIPL CQ's descriptor from its creation, before any VI binds it to a
     * domain (sovia polls its CQ before it has a connection): an epoll set
     * that the fi_cq's wait object joins once it exists. -1: none. */
    int outer;
    struct fid_fabric *fabric;
    /* VIPL CQ notices: (VI, receive queue?) in completion order */
    struct fab_notice {
        struct vipl_vi *vi;
        bool recvq;
    } *notices;
    pthread_mutex_t nlock; /* the notices (taken under a queue's lock) */
    uint32_t nhead, ntail, ncap;
    bool overflowed;
    /* Waiters armed on it (VipxCQArm): they poll fd and progress it
     * themselves, so the agent leaves it alone; its progress could take a
     * completion inside between the provider's wake-up and the poller's
     * look, and fd, quiet again, would not wake a poll without a bound. */
    atomic_uint armed;
};

struct fab_queue;

struct fab_slot {
    struct fi_context ctx; /* first: libfabric hands it back */
    struct fab_queue *q;
    VIP_DESCRIPTOR *desc;
    uint32_t status, len, imm;
    uint32_t total;    /* a send's bytes */
    uint32_t op;       /* VIP_STATUS_OP_* of its completion */
    uint32_t staged;   /* a receive's share of the staging budget */
    bool finished;     /* libfabric (or the post, for an invalid one) is done */
    bool on_wire;      /* handed to libfabric */
    uint32_t nsge;
    struct iovec iov[VIPL_MAX_SEGS];
    void *mrdesc[VIPL_MAX_SEGS];
    void *bounce; /* more segments than the provider takes: fabric_bounce.c */
    struct fid_mr *bounce_mr;
    void *bounce_desc;
    struct iovec bounce_iov;
};

struct fab_queue {
    struct fab_vi *vi;
    bool recv;
    pthread_mutex_t lock;
    struct fab_slot *slots;
    uint32_t depth;
    uint32_t head;   /* next to hand back */
    uint32_t done;   /* next to complete in order */
    uint32_t wire;   /* next to hand to libfabric (receives posted while idle) */
    uint32_t tail;   /* next free */
    uint32_t outstanding; /* on the wire, not finished */
    struct fab_cqx *cqx;  /* the fi_cq this queue reports to */
    uint64_t posted, completed, bytes, rdma_writes, peer_errors, staged_recvs;
    uint64_t staging_len, staging_used; /* receives: the budget of fabric_queue.c */
};

struct fab_vi {
    struct vipl_vi core;
    struct fab_queue sq, rq;
    struct fab_cqx own; /* for queues without a VIPL CQ */
    struct fid_ep *ep;
    struct fid_eq *eq;
    struct fid_domain *domain; /* its ptag's (fab_domain) */
    pthread_mutex_t ep_lock; /* ep/eq lifetime against posts and reads */
    atomic_bool wake;
    atomic_bool agent_busy; /* fabric_agent.c */
    void *arena; /* VipxViArena's memory (mmap) */
    size_t arena_len;
};

struct fab_cq {
    struct vipl_cq core;
    struct fab_cqx x;
};

static inline struct fab_nic *fab_nic(struct vipl_nic *nic)
{
    return nic->prov_nic;
}

static inline struct fab_vi *fab_vi(struct vipl_vi *vi)
{
    return (struct fab_vi *)vi;
}

static inline struct fab_cq *fab_cq(struct vipl_cq *cq)
{
    return (struct fab_cq *)cq;
}

/* fabric_provider.c */
struct fi_info *fab_hints(const char *prov_name);

/* fabric_domain.c */
struct fid_domain *fab_domain(struct fab_nic *fn, struct vipl_ptag *tag);
void fab_domains_close(struct fab_nic *fn);

/* fabric_cqx.c */
int fab_cqx_init(struct fab_nic *fn, struct fab_cqx *x, uint32_t notices);
/* Opens the fi_cq in `domain`, or checks it is there already:
 * -EINVAL if the CQ's queues are another tag's. */
int fab_cqx_bind(struct fab_cqx *x, struct fid_domain *domain);
void fab_cqx_close(struct fab_cqx *x);
void fab_cqx_progress(struct fab_cqx *x);
/* Takes the oldest notice: false if there is none. */
bool fab_cqx_take(struct fab_cqx *x, struct vipl_vi **vi, bool *recvq);
/* Sleeps on the fi_cq's wait object until something may have come, the
 * bound passes or the deadline does; -ETIMEDOUT at the deadline. */
int fab_cqx_sleep(struct fab_cqx *x, const struct timespec *deadline, int bound_ms);
void fab_cqx_notice(struct fab_cqx *x, struct vipl_vi *vi, bool recvq);

/* fabric_queue.c */
VIP_RETURN fab_create_vi(struct vipl_vi *vi, const VIPX_VI_CONFIG *cfg);
void fab_destroy_vi(struct vipl_vi *vi);
bool fab_queue_empty(struct vipl_vi *vi, enum vipl_queue q);
void fab_vi_stats(struct vipl_vi *vi, VIPX_VI_STATS *stats);
VIP_RETURN fab_post_send(struct vipl_vi *vi, struct vipl_wr *wr);
VIP_RETURN fab_post_recv(struct vipl_vi *vi, struct vipl_wr *wr);
VIP_RETURN fab_send_done(struct vipl_vi *vi, VIP_DESCRIPTOR **desc);
VIP_RETURN fab_recv_done(struct vipl_vi *vi, VIP_DESCRIPTOR **desc);
/* A completion (or its error) read from an fi_cq. */
void fab_slot_finish(struct fab_slot *s, uint32_t status, uint32_t len, uint32_t imm);
/* Hands every receive posted while there was no endpoint to the new one. */
int fab_rq_push(struct fab_vi *vi);
/* Every descriptor not yet completed completes flushed. */
void fab_queue_flush(struct fab_queue *q);

/* fabric_agent.c */
struct fab_agent *fab_agent_start(struct vipl_nic *nic);
void fab_agent_stop(struct fab_agent *a);
/* Waits until the agent is done with a VI being destroyed. */
void fab_agent_forget(struct fab_vi *vi);

/* fabric_bounce.c */
int fab_bounce_take(struct fab_nic *fn, struct fab_slot *s, bool gather);
/* Scatters a receive's `len` bytes (scatter) and lets the buffer go. */
void fab_bounce_done(struct fab_slot *s, uint32_t len, bool scatter);
/* What to post for the slot: its segments, or its bounce buffer. */
void fab_slot_iov(struct fab_slot *s, struct iovec **iov, void ***desc, size_t *count);

/* fabric_cq.c */
VIP_RETURN fab_create_cq(struct vipl_cq *cq);
void fab_destroy_cq(struct vipl_cq *cq);
VIP_RETURN fab_resize_cq(struct vipl_cq *cq, VIP_ULONG entries);
VIP_RETURN fab_cq_done(struct vipl_cq *cq, struct vipl_vi **vi, VIP_BOOLEAN *recvq);
uint32_t fab_wait_prepare(void *obj, enum vipl_queue q);
int fab_wait_sleep(void *obj, enum vipl_queue q, uint32_t token, const struct timespec *deadline);
void fab_wait_finish(void *obj, enum vipl_queue q);
void fab_wait_wake(void *obj, enum vipl_queue q);
int fab_cq_wait_fd(struct vipl_cq *cq);
bool fab_cq_wait_drain(struct vipl_cq *cq);
int fab_cq_sleep_bound(struct vipl_cq *cq);

/* fabric_conn.c */
VIP_RETURN fab_connect_wait(struct vipl_nic *nic, const VIP_NET_ADDRESS *local,
                            const struct timespec *deadline, VIP_NET_ADDRESS *remote,
                            struct vipl_conn *conn);
VIP_RETURN fab_connect_accept(struct vipl_conn *conn, struct vipl_vi *vi);
void fab_connect_reject(struct vipl_conn *conn);
VIP_RETURN fab_connect_request(struct vipl_vi *vi, const VIP_NET_ADDRESS *local,
                               const VIP_NET_ADDRESS *remote, const struct timespec *deadline,
                               VIP_VI_ATTRIBUTES *rattrs);
VIP_RETURN fab_disconnect(struct vipl_vi *vi);
VIP_RETURN fab_listen(struct vipl_nic *nic, const VIP_NET_ADDRESS *local, bool any_user);
VIP_RETURN fab_unlisten(struct vipl_nic *nic, const VIP_NET_ADDRESS *local);
void fab_close_listeners(struct fab_nic *fn);
/* Reads the VI's connection events (a peer's shutdown); manual progress. */
void fab_ep_events(struct fab_vi *vi);
/* The VI's end on our side (an invalid descriptor on a reliable VI, a
 * peer's bad data): it turns ERROR, reports `code`, the peer is told. */
void fab_vi_break(struct fab_vi *vi, VIP_ERROR_CODE code, VIP_DESCRIPTOR *desc);
/* Closes the endpoint and its event queue (after the queues are flushed). */
void fab_ep_close(struct fab_vi *vi);

/* fabric_mr.c */
int fab_mem_register(struct vipl_nic *nic, struct vipl_mr *mr, uint32_t handle);
void fab_mem_deregister(struct vipl_nic *nic, uint32_t slot);
void *fab_mr_desc(struct vipl_nic *nic, const struct vipl_mr *mr);
uint64_t fab_mr_key(struct vipl_nic *nic, VIP_MEM_HANDLE h);

#endif /* VIPL_FABRIC_H */
