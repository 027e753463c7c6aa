/*
 * vi_internal.h - the vi transports (native vipl over the shm provider):
 * vi (polling), vi-block (VipRecvWait) and vi-notify (VipRecvNotify + a
 * condition variable). Only the public headers are used.
 */
#ifndef SOVIA_BENCH_VI_INTERNAL_H
#define SOVIA_BENCH_VI_INTERNAL_H

#include "bench_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <vipl.h>
#include <vipl_ext.h>

/*
 * Flow control (the pre-posting constraint: on a reliable VI a send that
 * finds no receive posted breaks the connection). Each side pre-posts
 * VI_NRECV receives. The peer may send VI_K data messages on credit; the
 * receiver grants credits back in zero-length "credit" messages after every
 * VI_K/2 reposted receives, like NetPIPE-VIA's continue messages. Credit
 * messages need receives too but carry no credit themselves: at most
 * two can be unprocessed at a time (each grants >= VI_K/2 of at most VI_K
 * outstanding), so VI_CREDIT_SLOTS extra receives cover them.
 */
#define VI_K 64
#define VI_CREDIT_SLOTS 2
/* Receive buffers span at most this many bytes (see vi_setup.c). */
#define RECV_WORKING_SET (256u * 1024)
#define VI_NRECV (VI_K + VI_CREDIT_SLOTS)

/*
 * NetPIPE-VIA's ring (seed 001, section 3.1; `--ring N [--frag F]`): N
 * receive descriptors (bench.h: BENCH_RING_*), each with its own buffer of F bytes (default: the
 * largest message); a message is sent as ceil(size / F) fragments, and the
 * sender stops after N unacknowledged fragments until the receiver, having
 * reposted all N, sends a "continue" (a credit of N: the grant waits for
 * the whole ring instead of half of it). The counts run across messages,
 * not per message as in the paper, so streaming is safe too; in ping-pong
 * it is the paper's scheme.
 */
#define VI_HEAD_BYTES BENCH_FRAG_MIN

/* Immediate data: top byte says what a message is. */
#define VI_TAG_MASK 0xff000000u
#define VI_TAG_DATA 0x5d000000u
#define VI_TAG_CREDIT 0xc7000000u

/* The shm provider's MaxTransferSize (docs/VIPL.md); checked at setup. */
#define VI_MAX_MSG ((size_t)4 << 20)

enum vi_wait { VI_POLL, VI_BLOCK, VI_NOTIFY };

/* Made by the parent before fork: both sides agree on the discriminator. */
struct vi_shared {
    enum vi_wait wait;
    bool consume; /* vi-copy: the receiver copies each message out */
    bool user_mem; /* vi-user: receive buffers in the consumer's own memory, no arena */
    unsigned ring;  /* --ring N; 0: the default credit scheme */
    size_t frag;    /* --frag F with --ring; 0: the largest message */
    char disc[48];
};

struct vi_ep {
    const char *name;
    enum vi_wait wait;
    uint8_t *app_buf; /* vi-copy: where the "application" copies messages to */
    enum bench_role role;
    size_t max_msg;
    size_t frag;      /* bytes per message piece: max_msg unless a ring fragments */
    unsigned nrecv;   /* receives posted: window + VI_CREDIT_SLOTS */
    unsigned grant_at; /* reposted receives per credit message */

    VIP_NIC_HANDLE nic;
    VIP_PROTECTION_HANDLE ptag;
    VIP_VI_HANDLE vi;
    bool connected;

    unsigned char *arena; /* receive buffers: nbuf slots of slot bytes */
    bool user_mem;        /* vi-user: arena is our own mmap, not the VI's */
    VIP_ULONG arena_len;
    VIP_MEM_HANDLE arena_mh;
    bool arena_reg;
    size_t slot;
    size_t nbuf;     /* distinct receive buffers, handed out round-robin as posted */
    size_t next_buf; /* buffer for the next receive posted */
    unsigned window; /* data messages on credit: min(VI_K, nbuf), see vi_setup.c */
    VIP_DESCRIPTOR *descs; /* nrecv receive descriptors + 1 send descriptor */
    VIP_MEM_HANDLE desc_mh;
    bool desc_reg;
    unsigned char *sbuf;
    size_t sbuf_len;
    VIP_MEM_HANDLE sbuf_mh;
    bool sbuf_reg;

    unsigned posted;    /* receives currently on the queue */
    unsigned credits;   /* data messages we may still send */
    unsigned to_grant;  /* reposted receives not yet granted to the peer */
    VIP_DESCRIPTOR *held; /* returned by recv_msg; reposted at the next call */
    unsigned char head[VI_HEAD_BYTES]; /* a fragmented message's first bytes */
    /* Data that arrived while we waited for credits, in arrival order. */
    VIP_DESCRIPTOR **ring; /* nrecv entries */
    unsigned ring_head, ring_count;

    /* vi-notify: the provider thread hands one descriptor over. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool sync_init;
    VIP_DESCRIPTOR *handed;
    bool armed;

    _Atomic int async_error; /* last VIP_ERROR_CODE from the error handler, or -1 */
};

/* vi_setup.c */
int vi_open(struct vi_shared *sh, enum bench_role role, size_t max_msg, struct vi_ep **out);
int vi_close(struct vi_ep *ep);
void vi_fill_recv(struct vi_ep *ep, VIP_DESCRIPTOR *d);
int vi_fail(struct vi_ep *ep, const char *what, VIP_RETURN rc);

/* transport_vi.c */
void vi_notify_handler(VIP_PVOID ctx, VIP_NIC_HANDLE nic, VIP_VI_HANDLE vi, VIP_DESCRIPTOR *d);

#endif /* SOVIA_BENCH_VI_INTERNAL_H */
