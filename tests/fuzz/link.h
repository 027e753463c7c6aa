/*
 * link.h - a real VI (the victim) connected to a fake peer the harness
 * plays by hand: the harness owns the peer's ctl and rx segments (so it
 * can write any posted-receive slot, posted count or RDMA export entry the
 * victim will read as a sender) and maps the victim's own segments (so it
 * can write any completion slot or staged byte the victim will read as a
 * receiver). The connection is made with the provider's real handshake on
 * the victim's side (VipConnectWait + VipConnectAccept).
 */
#ifndef SOVIA_TESTS_FUZZ_LINK_H
#define SOVIA_TESTS_FUZZ_LINK_H

#include "fz.h"
#include "shm.h"

struct fz_link_cfg {
    VIP_RELIABILITY_LEVEL reliability;
    uint32_t depth, staging, arena; /* the victim's VIPX_VI_CONFIG */
    bool rdma_write;                /* the victim's EnableRdmaWrite */
    uint32_t peer_depth;            /* the fake peer's geometry */
    bool peer_rdma_write;           /* what the peer announces */
};

struct fz_link {
    VIP_NIC_HANDLE nic;
    VIP_PROTECTION_HANDLE ptag;
    VIP_VI_HANDLE vi;
    int sock; /* the peer's end of the connection socket */
    /* The fake peer's segments, writable by the harness. */
    struct shm_ctl *ctl;
    size_t ctl_len;
    struct shm_rx *rx;
    size_t rx_len;
    uint32_t depth, data_off;
    /* The victim's segments: ctl read-only, rx writable (as a peer maps them). */
    const struct shm_ctl *vctl;
    size_t vctl_len;
    struct shm_rx *vrx;
    size_t vrx_len;
};

/* Opens the NIC and starts listening (once per process; idempotent). */
void fz_link_init(VIP_NIC_HANDLE *nic, VIP_PROTECTION_HANDLE *ptag);
/* Connects a new victim VI (after fz_link_init). */
void fz_link_open(struct fz_link *l, const struct fz_link_cfg *cfg);
/* Disconnects and destroys the victim (reaping every descriptor) and
 * unmaps everything. */
void fz_link_close(struct fz_link *l);

/* The fake peer's segment sizes for a depth (with 4 KiB staging and a
 * 16 KiB arena, as a small VI has). */
void fz_link_peer_geometry(uint32_t depth, size_t *ctl_len, size_t *rx_len, uint32_t *data_off);

#endif
