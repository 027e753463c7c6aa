/*
 * lane_frame.c - what a LANE forwarder accepts from its peer before writing
 * it to the TUN device: the peer writes every byte, so each length and
 * header field is checked here (the kernel checks again).
 */
#include "lane.h"

#include <linux/virtio_net.h>
#include <string.h>

/* A frame from the peer is hostile input: it must be a whole IPv4 or IPv6
 * packet by its own header, no longer than what arrived. */
static bool ip_frame_ok(const unsigned char *f, size_t len)
{
    if (len >= 20 && f[0] >> 4 == 4) {
        size_t ihl = (size_t)(f[0] & 15) * 4, tot = (size_t)f[2] << 8 | f[3];
        return ihl >= 20 && tot >= ihl && tot == len;
    }
    if (len >= 40 && f[0] >> 4 == 6)
        return ((size_t)f[4] << 8 | f[5]) + 40 == len;
    return false;
}

/* The header is checked again by the kernel (virtio_net_hdr_to_skb); here
 * only what LANE asks for may pass: TCP segmentation, partial checksums. */
static bool vnet_frame_ok(const unsigned char *f, size_t len)
{
    struct virtio_net_hdr h;
    const size_t hl = sizeof h;
    if (len <= hl)
        return false;
    memcpy(&h, f, hl);
    unsigned gso = h.gso_type & ~VIRTIO_NET_HDR_GSO_ECN;
    if (gso != VIRTIO_NET_HDR_GSO_NONE && gso != VIRTIO_NET_HDR_GSO_TCPV4 &&
        gso != VIRTIO_NET_HDR_GSO_TCPV6)
        return false;
    if (h.flags & ~(VIRTIO_NET_HDR_F_NEEDS_CSUM | VIRTIO_NET_HDR_F_DATA_VALID))
        return false;
    if (gso != VIRTIO_NET_HDR_GSO_NONE && h.gso_size == 0)
        return false;
    /* The checksum the receiver completes lies inside the packet. */
    if ((h.flags & VIRTIO_NET_HDR_F_NEEDS_CSUM) &&
        (size_t)h.csum_start + h.csum_offset + 2 > len - hl)
        return false;
    return ip_frame_ok(f + hl, len - hl);
}

bool lane_frame_ok(const unsigned char *f, size_t len, bool vnet)
{
    return vnet ? vnet_frame_ok(f, len) : ip_frame_ok(f, len);
}
