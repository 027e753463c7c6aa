/*
 * frame.c - lane_frame_ok: what a forwarder accepts from its peer. Whole
 * IPv4/IPv6 packets pass; short, long, truncated, non-IP frames and
 * virtio-net headers asking for more than TCP segmentation and a checksum
 * inside the packet are refused.
 */
#include "lane.h"

#include <linux/virtio_net.h>
#include <stdio.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond);                        \
            failures++;                                                                       \
        }                                                                                     \
    } while (0)

static unsigned char buf[70000];

static size_t ipv4(unsigned char *f, size_t total, unsigned ihl_words)
{
    memset(f, 0, total);
    f[0] = (unsigned char)(0x40 | ihl_words);
    f[2] = (unsigned char)(total >> 8);
    f[3] = (unsigned char)total;
    return total;
}

static size_t ipv6(unsigned char *f, size_t payload)
{
    memset(f, 0, 40 + payload);
    f[0] = 0x60;
    f[4] = (unsigned char)(payload >> 8);
    f[5] = (unsigned char)payload;
    return 40 + payload;
}

int main(void)
{
    unsigned char *f = buf;
    size_t n;

    /* Plain frames. */
    n = ipv4(f, 84, 5);
    CHECK(lane_frame_ok(f, n, false));
    CHECK(!lane_frame_ok(f, n - 1, false)); /* fewer bytes than the header says */
    CHECK(!lane_frame_ok(f, n + 1, false)); /* more */
    n = ipv4(f, 65535, 5);
    CHECK(lane_frame_ok(f, n, false));
    n = ipv4(f, 19, 5);
    CHECK(!lane_frame_ok(f, n, false)); /* below an IPv4 header */
    n = ipv4(f, 40, 4);
    CHECK(!lane_frame_ok(f, n, false)); /* IHL under 5 words */
    n = ipv4(f, 40, 15);
    CHECK(!lane_frame_ok(f, n, false)); /* header longer than the packet */
    n = ipv6(f, 1000);
    CHECK(lane_frame_ok(f, n, false));
    CHECK(!lane_frame_ok(f, n - 1, false));
    CHECK(!lane_frame_ok(f, 39, false));
    f[0] = 0x50;
    CHECK(!lane_frame_ok(f, n, false)); /* neither 4 nor 6 */
    CHECK(!lane_frame_ok(f, 0, false));

    /* With a virtio-net header. */
    struct virtio_net_hdr h;
    const size_t hl = sizeof h;
    memset(&h, 0, sizeof h);
    h.flags = VIRTIO_NET_HDR_F_NEEDS_CSUM;
    h.gso_type = VIRTIO_NET_HDR_GSO_TCPV4;
    h.gso_size = 1448;
    h.csum_start = 20;
    h.csum_offset = 16;
    n = hl + ipv4(f + hl, 60000, 5);
    memcpy(f, &h, hl);
    CHECK(lane_frame_ok(f, n, true));
    CHECK(!lane_frame_ok(f + hl, n - hl, true)); /* the header is required */
    CHECK(!lane_frame_ok(f, hl, true));
    h.gso_type = VIRTIO_NET_HDR_GSO_UDP;
    memcpy(f, &h, hl);
    CHECK(!lane_frame_ok(f, n, true));
    h.gso_type = VIRTIO_NET_HDR_GSO_TCPV6 | VIRTIO_NET_HDR_GSO_ECN;
    memcpy(f, &h, hl);
    CHECK(lane_frame_ok(f, n, true)); /* the IP check is the packet's own */
    h.gso_type = VIRTIO_NET_HDR_GSO_TCPV4;
    h.gso_size = 0;
    memcpy(f, &h, hl);
    CHECK(!lane_frame_ok(f, n, true));
    h.gso_size = 1448;
    h.flags = 0x80;
    memcpy(f, &h, hl);
    CHECK(!lane_frame_ok(f, n, true));
    h.flags = VIRTIO_NET_HDR_F_NEEDS_CSUM;
    h.csum_start = 60000 - 16;
    memcpy(f, &h, hl);
    CHECK(!lane_frame_ok(f, n, true)); /* checksum field past the end */
    h.csum_start = 60000 - 18;
    h.csum_offset = 16;
    memcpy(f, &h, hl);
    CHECK(lane_frame_ok(f, n, true)); /* its last two bytes */

    if (failures)
        return 1;
    printf("ok\n");
    return 0;
}
