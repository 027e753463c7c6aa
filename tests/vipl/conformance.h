/*
 * conformance.h - what the conformance tests (conformance_*.c, CTest label
 * `conformance`) share: a consumer that owns all its memory.
 *
 * The suite is written from the VIA 1.0 specification and the VIPL
 * developer guide, not from this implementation: only vipl.h's calls
 * (VipCreateVi, not VipxCreateVi; no arena), descriptors and buffers from
 * malloc, posix_memalign or anonymous mmap, registered with VipRegisterMem,
 * and what the specification says each call returns and each descriptor
 * completes with. The harness only forks the peer, builds addresses and
 * checks.
 */
#ifndef SOVIA_TESTS_VIPL_CONFORMANCE_H
#define SOVIA_TESTS_VIPL_CONFORMANCE_H

#include "harness.h"

enum cf_alloc { CF_MALLOC, CF_MEMALIGN, CF_MMAP };

/* A consumer allocation, registered. */
typedef struct {
    VIP_NIC_HANDLE nic;
    unsigned char *ptr;
    size_t len;
    VIP_MEM_HANDLE mh;
    enum cf_alloc how;
} cf_mem;

cf_mem cf_mem_get(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE ptag, size_t len, enum cf_alloc how,
                  int rdma_write);
void cf_mem_put(cf_mem *m);

/* n descriptors, 64-byte aligned, in consumer memory (posix_memalign). */
typedef struct {
    cf_mem m;
    unsigned n;
} cf_descs;

cf_descs cf_descs_get(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE ptag, unsigned n);
VIP_DESCRIPTOR *cf_desc(cf_descs *d, unsigned i);

/* A descriptor of one data segment. */
void cf_fill(VIP_DESCRIPTOR *d, VIP_UINT16 control, const void *buf, VIP_MEM_HANDLE mh,
             VIP_UINT32 len, VIP_UINT32 imm);

/* VipCreateVi with the given reliability, MaxTransferSize and RDMA write. */
VIP_VI_HANDLE cf_vi(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE ptag, VIP_RELIABILITY_LEVEL rel,
                    VIP_ULONG mtu, VIP_BOOLEAN rdma_write, VIP_CQ_HANDLE scq, VIP_CQ_HANDLE rcq);

/* The send completes (VipSendWait), and is the one posted. */
void cf_send_wait(VIP_VI_HANDLE vi, VIP_DESCRIPTOR *want);

/* Everything posted on vi's receive queue, taken back after a disconnect or
 * an error: each must be `want[i]` in posting order, flushed. */
void cf_expect_flushed(VIP_VI_HANDLE vi, VIP_DESCRIPTOR **want, unsigned n);

#endif
