/*
 * fabric_cm.c - the connection messages: what rides in libfabric's
 * connect private data (at most FAB_CM_DATA_MAX = 48 bytes, verbs' limit),
 * built here and checked here before anything in them is used.
 *
 * A request names the listener it meant (a fingerprint of the whole
 * discriminator: several discriminators may share a port), its VI's
 * attributes, and the requester's own discriminator, cut to what fits.
 * An accept carries the acceptor's attributes, a reject only its kind.
 */
#include <string.h>

#include "fabric_cm.h"

uint64_t fab_disc_fp(const uint8_t *disc, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ disc[i]) * 0x100000001b3ull;
    return h;
}

uint16_t fab_disc_port(const uint8_t *disc, size_t len)
{
    return (uint16_t)(FAB_PORT_BASE + fab_disc_fp(disc, len) % FAB_PORT_SPAN);
}

void fab_cm_build(struct fab_cm *m, uint8_t type, const VIP_VI_ATTRIBUTES *a, uint64_t fp,
                  const uint8_t *disc, size_t dlen)
{
    memset(m, 0, sizeof(*m));
    m->magic = FAB_CM_MAGIC;
    m->version = FAB_CM_VERSION;
    m->type = type;
    if (a) {
        m->reliability = (uint8_t)a->ReliabilityLevel;
        m->rdma_write = a->EnableRdmaWrite ? 1 : 0;
        m->max_transfer = (uint32_t)a->MaxTransferSize;
    }
    m->listener_fp = fp;
    if (dlen > sizeof m->disc)
        dlen = sizeof m->disc;
    m->disc_len = (uint8_t)dlen;
    if (dlen)
        memcpy(m->disc, disc, dlen);
}

bool fab_cm_check(const void *data, size_t len, uint8_t type, struct fab_cm *out)
{
    if (len < sizeof(*out))
        return false;
    memcpy(out, data, sizeof(*out));
    if (out->magic != FAB_CM_MAGIC || out->version != FAB_CM_VERSION || out->type != type)
        return false;
    if (type == FAB_CM_REJECT)
        return true;
    switch (out->reliability) {
    case VIP_SERVICE_UNRELIABLE: /* carried reliably all the same */
    case VIP_SERVICE_RELIABLE_DELIVERY:
    case VIP_SERVICE_RELIABLE_RECEPTION:
        break;
    default:
        return false;
    }
    return out->rdma_write <= 1 && out->max_transfer >= 1 &&
           out->max_transfer <= FAB_MAX_TRANSFER && out->disc_len <= sizeof out->disc &&
           (type != FAB_CM_REQUEST || out->disc_len >= 1);
}

void fab_cm_attrs(const struct fab_cm *m, VIP_VI_ATTRIBUTES *a)
{
    memset(a, 0, sizeof(*a));
    a->ReliabilityLevel = m->reliability;
    a->MaxTransferSize = m->max_transfer;
    a->EnableRdmaWrite = m->rdma_write;
}
