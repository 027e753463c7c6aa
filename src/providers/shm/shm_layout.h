/*
 * shm_layout.h - what two processes share, and who writes each field.
 *
 * Each VI owns two memfd segments:
 *
 *   ctl  written by the owner only. The peer maps it read-only; the segment
 *        is sealed (F_SEAL_FUTURE_WRITE) so the peer cannot map it writable.
 *        Holds the geometry, the count of posted receives, the posted
 *        receive slots (where the peer may place each message), the wake-up
 *        "armed" flag and the table of regions open to RDMA write.
 *   rx   written by the peer: the wake-up word, the completion slots, the
 *        staging area and the zero-copy arena. The owner reads it and
 *        validates every value before use.
 *
 * Both are sealed against shrinking and growing, so a peer can never make
 * the other side fault on its mapping. Offsets are relative to the segment
 * start; nothing in shared memory is a pointer.
 *
 * A receive posted at local index i is published at shared index s (only
 * valid descriptors are published). The owner fills post[s % depth] and then
 * release-stores posted = s + 1; the sender writes the data, then the
 * completion slot cmpl[s % depth], and release-stores its seq = s + 1 last.
 */
#ifndef SHM_LAYOUT_H
#define SHM_LAYOUT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_LINE 64
#define SHM_MAGIC 0x53564941u /* "SVIA" */
#define SHM_VERSION 4u /* 4: a completion is two lines, 96 inline bytes */
#define SHM_POST_SEGS 6
/* Data up to this long rides in the completion slot: a request or an
 * answer of an RPC never touches a page of the receiver's buffers from the
 * sender's side (on a connection taking turns with thousands of others,
 * each such page was a fault in both processes). */
#define SHM_INLINE_MAX 96
#define SHM_MAX_DEPTH 4096
#define SHM_REG_SLOTS 64
#define SHM_MAX_SEGMENT (1u << 30)

/* ---- ctl segment (owner writes) ---------------------------------------- */

struct shm_ctl_header { /* constant after creation */
    uint32_t magic;
    uint32_t version;
    uint32_t depth;     /* slots per queue, a power of two */
    uint32_t reg_slots; /* RDMA-write export entries */
    uint32_t rx_size;   /* bytes of the owner's rx segment */
    uint32_t data_off;  /* first rx byte the peer may write data to */
    uint32_t staging_off, staging_len;
    uint32_t arena_off, arena_len;
    uint32_t max_transfer;
    uint32_t reserved[5];
};

/* Another process holding this end of the VI (a forked child) and asleep
 * on a CQ of its own: the peer also wakes it, by sending a byte to the
 * abstract datagram socket "sovia-w." + id in hex (shm_wake.c). */
struct shm_holder {
    _Atomic uint64_t id;    /* 0: free */
    _Atomic uint32_t armed; /* > 0: asleep */
    _Atomic int32_t pid;    /* the holder, so the others can free a dead one's slot */
};

#define SHM_HOLDERS 3

struct shm_ctl_live {
    _Atomic uint32_t posted; /* receives published so far */
    uint32_t reserved0[15];
    /* Its own line: the peer reads it after every send, and must not pull
     * in the line the owner writes on every post. */
    _Atomic uint32_t recv_armed; /* > 0: the owner sleeps on rx.wake_seq */
    _Atomic uint32_t recv_epoch; /* armings of recv_armed by the relay (SHM_CQ_EPOCH) */
    struct shm_holder holder[SHM_HOLDERS];
    /* > 0: a thread of the owner (or of a holder since a fork) sleeps with
     * a futex on rx.wake_seq though the VI is on a CQ (VipxViSleepArm): the
     * peer bumps the word and wakes it instead of the CQ's datagram. */
    _Atomic uint32_t futex_armed;
    uint32_t reserved2[1];
};

#define SHM_POST_STAGED 1u

struct shm_post { /* one line: where the sender may put message s */
    _Atomic uint32_t seq; /* s + 1 once filled */
    uint16_t nseg;
    uint16_t flags;
    uint32_t total; /* sum of the segment lengths */
    uint32_t reserved;
    struct {
        uint32_t off, len; /* in the owner's rx segment */
    } seg[SHM_POST_SEGS];
};

/* The region is the owner's own memory, outside its arena: the writer
 * reaches it by cross-memory attach (process_vm_writev), not through rx. */
#define SHM_EXPORT_XMEM 1u

struct shm_reg_export { /* a region the peer may RDMA-write */
    _Atomic uint32_t handle; /* 0: empty */
    uint32_t len;
    uint64_t base; /* the owner's virtual address of the region */
    uint32_t rx_off; /* in rx (0 with SHM_EXPORT_XMEM) */
    uint32_t flags;  /* SHM_EXPORT_* */
    uint32_t reserved[2];
};

struct shm_ctl {
    struct shm_ctl_header hdr;
    struct shm_ctl_live live;
    struct shm_post post[]; /* depth entries, then reg_slots shm_reg_export */
};

_Static_assert(sizeof(struct shm_ctl_header) == SHM_LINE, "header is one line");
_Static_assert(sizeof(struct shm_ctl_live) == 2 * SHM_LINE, "live is two lines");
_Static_assert(sizeof(struct shm_holder) == 16, "holder slot size");
_Static_assert(sizeof(struct shm_post) == SHM_LINE, "a post is one line");
_Static_assert(sizeof(struct shm_reg_export) == 32, "export entry size");

/* ---- rx segment (peer writes) ------------------------------------------ */

struct shm_rx_live {
    _Atomic uint32_t wake_seq; /* futex word: bumped to wake the owner */
    uint32_t reserved[15];
};

struct shm_cmpl { /* two lines: the completion of message s (data <= 32 B: the first only) */
    _Atomic uint32_t seq; /* s + 1, stored last */
    uint32_t status;      /* VIP_STATUS_* as the sender sees it (no DONE bit) */
    uint32_t length;
    uint32_t imm;
    uint32_t inline_len; /* > 0: the data is in inline_data, not in staging */
    uint32_t reserved[3];
    uint8_t inline_data[SHM_INLINE_MAX];
};

struct shm_rx {
    struct shm_rx_live live;
    struct shm_cmpl cmpl[]; /* depth entries, then staging, then the arena */
};

_Static_assert(sizeof(struct shm_rx_live) == SHM_LINE, "rx live is one line");
_Static_assert(sizeof(struct shm_cmpl) == 2 * SHM_LINE, "a completion is two lines");

/* ---- wake pages of a CQ ------------------------------------------------- */
/* A CQ has an "armed" page (owner writes, sealed) and a "word" page (every
 * peer VI attached to the CQ bumps it), one memfd each. The armed page
 * holds the count of sleepers and, in the next word, the count of armings
 * (SHM_CQ_EPOCH): a peer sends one wake-up byte per arming, not one per
 * message, however many it sends while the sleeper wakes. */
#define SHM_CQ_EPOCH 1 /* index of the arming count in the armed page's words */

static inline size_t shm_ctl_size(uint32_t depth, uint32_t reg_slots, size_t page)
{
    size_t n = sizeof(struct shm_ctl) + (size_t)depth * sizeof(struct shm_post) +
               (size_t)reg_slots * sizeof(struct shm_reg_export);
    return (n + page - 1) & ~(page - 1);
}

static inline struct shm_reg_export *shm_ctl_regs(struct shm_ctl *ctl, uint32_t depth)
{
    return (struct shm_reg_export *)&ctl->post[depth];
}

#endif /* SHM_LAYOUT_H */
