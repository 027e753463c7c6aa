/*
 * hpeer.h - the hostile peer's kit (tests/hardening/).
 *
 * A hostile peer is an ordinary vipl program that gets connected through
 * the public API and the real shm provider, then reaches into what the
 * connection shares (docs/ARCHITECTURE.md, "Shared-memory layout"):
 *   - its own ctl segment, which the victim reads: `posted`, the posted
 *     receive slots, the `recv_armed` flag and the RDMA-write export table;
 *   - the victim's rx segment, which it writes: the completion slots, the
 *     wake-up word, the staging area and the arena.
 * It finds them through the provider's private structures (a VI handle is
 * a pointer to the provider's `struct shm_vi`): a test-only view of the
 * "hardware", compiled against the same tree, needing no hook in src/.
 *
 * Everything else here is a small vipl toolkit for the hardening tests
 * (descriptors, registered buffers, honest sends and receives) and the
 * catalogue of fields a hostile peer can write, for the random mode.
 * Failures use the sharness CHECK macros (tests/sovia/sharness.h).
 */
#ifndef SOVIA_TESTS_HARDENING_HPEER_H
#define SOVIA_TESTS_HARDENING_HPEER_H

#include <stdbool.h>
#include <stdint.h>

#include <vipl.h>
#include <vipl_ext.h>

#include "hcommon.h"
#include "shm.h" /* src/providers/shm: the provider's private view */

/* ---- A vipl endpoint ------------------------------------------------------- */

struct hp {
    VIP_NIC_HANDLE nic;
    VIP_PROTECTION_HANDLE ptag;
    VIP_VI_HANDLE vi;
    VIP_CQ_HANDLE cq;   /* the receive queue's (opts.cq), or NULL */
    struct shm_vi *svi; /* the provider's view of `vi` */
    /* The VI's arena: nbufs receive buffers of bufsz bytes, then the
     * RDMA-write region (rdma_len bytes, EnableRdmaWrite when asked). */
    uint8_t *arena;
    size_t arena_len, bufsz;
    unsigned nbufs;
    VIP_MEM_HANDLE bufs_mh;
    uint8_t *rdma;
    size_t rdma_len;
    VIP_MEM_HANDLE rdma_mh;
    /* Private (not shared) memory: send buffer and descriptors. */
    uint8_t *sbuf;
    size_t sbuf_len;
    VIP_MEM_HANDLE sbuf_mh;
    VIP_DESCRIPTOR *rdesc, *sdesc; /* nbufs receive, nsend send descriptors */
    unsigned nsend, s_next;
    VIP_MEM_HANDLE desc_mh;
    bool rdma_enabled;
};

struct hp_opts {
    VIP_ULONG mtu;      /* MaxTransferSize */
    unsigned nbufs;     /* receive buffers (and descriptors) */
    size_t bufsz;       /* bytes per receive buffer */
    size_t rdma_len;    /* RDMA-write region after the buffers (0: none) */
    bool rdma;          /* the VI's EnableRdmaWrite */
    unsigned depth;     /* queue depth (0: nbufs + 16) */
    bool cq;            /* receives complete on a CQ (their waits sleep on it) */
};

void hp_open(struct hp *h, const struct hp_opts *o);
void hp_close(struct hp *h); /* disconnects if needed, frees everything */

/* VipConnectRequest, retried while nobody listens yet (up to timeout_ms). */
VIP_RETURN hp_connect(struct hp *h, const VIP_NET_ADDRESS *local, const VIP_NET_ADDRESS *remote,
                      unsigned timeout_ms);

void hp_post_recv(struct hp *h, unsigned i);
/* Next completed receive within timeout_ms, or NULL. */
VIP_DESCRIPTOR *hp_recv(struct hp *h, unsigned timeout_ms);
unsigned hp_rindex(const struct hp *h, const VIP_DESCRIPTOR *d);
uint8_t *hp_rbuf(const struct hp *h, unsigned i);
/* An honest send of len bytes from `data` (copied into sbuf); returns the
 * completed descriptor's status. `imm` is sent when with_imm. */
uint32_t hp_send(struct hp *h, const void *data, uint32_t len, bool with_imm, uint32_t imm);
/* An honest RDMA write of len bytes to the peer's (raddr, rh). */
uint32_t hp_rdma_write(struct hp *h, const void *data, uint32_t len, uint64_t raddr,
                       VIP_MEM_HANDLE rh, bool with_imm, uint32_t imm);
VIP_VI_STATE hp_state(const struct hp *h);

/* ---- What the connection shares ----------------------------------------------- */

static inline struct shm_peer *hp_peer(const struct hp *h)
{
    return h->svi->peer;
}
/* Our ctl segment (the victim reads it). */
static inline struct shm_ctl *hp_own_ctl(const struct hp *h)
{
    return h->svi->ctl;
}
static inline struct shm_reg_export *hp_own_regs(const struct hp *h)
{
    return shm_ctl_regs(h->svi->ctl, h->svi->depth);
}
/* The export slot holding our RDMA region's handle (NULL if none). */
struct shm_reg_export *hp_own_export(const struct hp *h);

/*
 * Writes a completion of our choosing into the victim's next receive slot
 * (the one our next send would complete), stores `seq` last, advances our
 * send position when seq is the right one, and wakes the victim if it
 * sleeps, exactly as an honest send's completion would.
 */
void hp_raw_complete(struct hp *h, uint32_t seq, uint32_t status, uint32_t length, uint32_t imm,
                     uint32_t inline_len, const void *inline_data);
/* The sequence number the victim expects in its next completion slot. */
uint32_t hp_next_seq(const struct hp *h);
/* Bumps the victim's wake-up (futex word or wake socket), as a waker does. */
void hp_ring(struct hp *h);

/* A storm thread plays a second writer the victim cannot tell from its
 * peer: it scribbles on shared memory while this process's own library
 * uses the same bytes. Under ThreadSanitizer its accesses between these
 * two calls are not recorded, as another process's would not be, so the
 * races it exists to cause are not reported as this process's bugs. */
void hp_foreign_begin(void);
void hp_foreign_end(void);

/* ---- Under `sovia run` ----------------------------------------------------------------- */

/* The victim's ctl segment (its posted slots, export table, header) and
 * its completion queue's armed word, made writable in this process
 * (mprotect). A `sovia run` victim's VIs and CQ are inheritable, so not
 * sealed against writing (docs/SECURITY.md, known limits); elsewhere the
 * seal makes these fail with EACCES. NULL with errno. */
void *hp_victim_ctl_writable(const struct hp *h, size_t *len);
_Atomic uint32_t *hp_victim_armed_writable(const struct hp *h);

/* ---- The catalogue of writable fields (random mode) ------------------------------ */

/* One random write to any field the hostile peer can reach after connect:
 * its own posted count, posted slots, armed flag and export table; the
 * victim's completion slots (with a believable sequence number most of the
 * time), wake word, staging and arena bytes. Describes it in `what`. */
void hp_random_write(struct hp *h, uint64_t *rng, char *what, size_t what_len);
/* An "interesting" 32-bit value near `near` (boundaries, wraps, bit flips). */
uint32_t hp_interesting(uint64_t *rng, uint32_t near);

#endif
