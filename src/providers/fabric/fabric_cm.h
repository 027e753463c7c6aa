/* fabric_cm.h - connection messages in connect private data (fabric_cm.c). */
#ifndef VIPL_FABRIC_CM_H
#define VIPL_FABRIC_CM_H

#include "fabric.h"

#define FAB_CM_MAGIC 0x56464231u /* "VFB1" */
#define FAB_CM_VERSION 1
enum { FAB_CM_REQUEST = 1, FAB_CM_ACCEPT = 2, FAB_CM_REJECT = 3 };

struct fab_cm {
    uint64_t listener_fp; /* request: the listener meant */
    uint32_t magic;
    uint8_t version, type, reliability, rdma_write;
    uint32_t max_transfer;
    uint8_t disc_len;     /* request: the requester's discriminator, cut */
    uint8_t disc[27];
};
_Static_assert(sizeof(struct fab_cm) <= FAB_CM_DATA_MAX, "connect data over verbs' limit");

uint64_t fab_disc_fp(const uint8_t *disc, size_t len);
/* The port a discriminator listens on (docs/VIPL.md: fabric). */
uint16_t fab_disc_port(const uint8_t *disc, size_t len);
void fab_cm_build(struct fab_cm *m, uint8_t type, const VIP_VI_ATTRIBUTES *a, uint64_t fp,
                  const uint8_t *disc, size_t dlen);
/* A peer's message: false unless it is whole, of this type and sane. */
bool fab_cm_check(const void *data, size_t len, uint8_t type, struct fab_cm *out);
void fab_cm_attrs(const struct fab_cm *m, VIP_VI_ATTRIBUTES *a);

#endif
