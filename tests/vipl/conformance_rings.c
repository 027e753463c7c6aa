/*
 * conformance_rings: a VIA program's receive rings in its own memory.
 *
 * VIA 1.0: a receive descriptor may name any memory the consumer registered;
 * VipPostRecv is allowed before the VI is connected (the pre-posting
 * constraint makes it necessary) and after; a work queue holds up to the
 * NIC's MaxDescriptorsPerQueue descriptors, each of up to the VI's
 * MaxTransferSize; receives complete in the order they were posted, with
 * Status DONE | OP_RECEIVE and Length the bytes received.
 *
 * The peer (receiver) owns everything: descriptors from posix_memalign,
 * buffers from malloc, posix_memalign or anonymous mmap, a VI from
 * VipCreateVi. Cases: 64 receives of 8 KB and 256 of 32 KB posted before
 * connecting; 64 before and 192 after (mmap'd buffers), then each reposted
 * as it completes for a second lap; MaxDescriptorsPerQueue receives of
 * 8 KB posted before connecting. The sender sends messages of every length
 * up to the buffer's and the receiver checks order, status, length and
 * every byte.
 */
#include "conformance.h"

#include <stdlib.h>

struct ring_case {
    const char *name;
    unsigned n;        /* receives posted before the sends start; 0: MaxDescriptorsPerQueue */
    unsigned before;   /* of them, posted before connecting */
    unsigned laps;     /* 2: each receive is reposted once as it completes */
    VIP_UINT32 size;   /* each buffer, and the VI's MaxTransferSize */
    enum cf_alloc how;
    char srv[80], cli[80];
};

static struct ring_case cases[] = {
    {"64 x 8 KB before connect, malloc", 64, 64, 1, 8192, CF_MALLOC, "", ""},
    {"256 x 32 KB before connect, posix_memalign", 256, 256, 1, 32768, CF_MEMALIGN, "", ""},
    {"64 before + 192 after connect x 16 KB, mmap, two laps", 256, 64, 2, 16384, CF_MMAP, "",
     ""},
    {"MaxDescriptorsPerQueue x 8 KB before connect, mmap", 0, 0, 1, 8192, CF_MMAP, "", ""},
};
#define NCASES (sizeof cases / sizeof cases[0])

/* Message m's length: every length class up to the buffer, the full size too. */
static VIP_UINT32 msg_len(unsigned m, VIP_UINT32 size)
{
    static const VIP_UINT32 small[] = {0, 1, 4, 32, 33, 64, 1000, 4096};
    if (m % 3 == 0)
        return size;
    if (m % 3 == 1)
        return small[(m / 3) % 8] < size ? small[(m / 3) % 8] : size;
    return 1 + (VIP_UINT32)((m * 2654435761u) % size);
}

static unsigned max_depth(VIP_NIC_HANDLE nic)
{
    VIP_NIC_ATTRIBUTES na;
    CHECK_OK(VipQueryNic(nic, &na));
    CHECK(na.MaxDescriptorsPerQueue >= 1);
    return (unsigned)na.MaxDescriptorsPerQueue;
}

static void receiver(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE tag = h_ptag(nic);
    for (unsigned c = 0; c < NCASES; c++) {
        struct ring_case *k = &cases[c];
        unsigned n = k->n ? k->n : max_depth(nic);
        unsigned before = k->before ? k->before : n;
        VIP_VI_HANDLE vi =
            cf_vi(nic, tag, VIP_SERVICE_RELIABLE_DELIVERY, k->size, VIP_FALSE, NULL, NULL);
        cf_descs d = cf_descs_get(nic, tag, n);
        cf_mem buf = cf_mem_get(nic, tag, (size_t)n * k->size, k->how, 0);
        for (unsigned i = 0; i < before; i++) {
            cf_fill(cf_desc(&d, i), VIP_CONTROL_OP_SENDRECV, buf.ptr + (size_t)i * k->size,
                    buf.mh, k->size, 0);
            VIP_RETURN r = VipPostRecv(vi, cf_desc(&d, i), d.m.mh);
            CHECK_MSG(r == VIP_SUCCESS, "%s: VipPostRecv of receive %u (IDLE) returned %s",
                      k->name, i, VipxReturnString(r));
        }
        h_accept(nic, vi, k->srv, NULL);
        for (unsigned i = before; i < n; i++) {
            cf_fill(cf_desc(&d, i), VIP_CONTROL_OP_SENDRECV, buf.ptr + (size_t)i * k->size,
                    buf.mh, k->size, 0);
            VIP_RETURN r = VipPostRecv(vi, cf_desc(&d, i), d.m.mh);
            CHECK_MSG(r == VIP_SUCCESS, "%s: VipPostRecv of receive %u (CONNECTED) returned %s",
                      k->name, i, VipxReturnString(r));
        }
        h_signal(fd, 'p');
        for (unsigned m = 0; m < n * k->laps; m++) {
            unsigned i = m % n;
            VIP_DESCRIPTOR *x = NULL;
            VIP_RETURN r = VipRecvWait(vi, 10000, &x);
            CHECK_MSG(r == VIP_SUCCESS, "%s: message %u: VipRecvWait returned %s", k->name, m,
                      VipxReturnString(r));
            CHECK_MSG(x == cf_desc(&d, i), "%s: message %u completed descriptor %ld", k->name,
                      m, (long)(x - cf_desc(&d, 0)));
            CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
            VIP_UINT32 len = msg_len(m, k->size);
            CHECK_EQ(x->CS.Length, len);
            CHECK_RANDOM(buf.ptr + (size_t)i * k->size, len, 1000003u * c + m);
            if (m + n < n * k->laps) { /* the next lap's receive */
                cf_fill(x, VIP_CONTROL_OP_SENDRECV, buf.ptr + (size_t)i * k->size, buf.mh,
                        k->size, 0);
                CHECK_OK(VipPostRecv(vi, x, d.m.mh));
                h_signal(fd, 'r');
            }
        }
        h_signal(fd, 'k');
        h_expect(fd, 'd'); /* the sender disconnected */
        (void)VipDisconnect(vi); /* the VI may be in ERROR already: either way, IDLE after */
        CHECK_OK(VipDestroyVi(vi));
        cf_mem_put(&buf);
        cf_mem_put(&d.m);
        h_log("%s: %u messages", k->name, n * k->laps);
    }
    CHECK_OK(VipDestroyPtag(nic, tag));
    CHECK_OK(VipCloseNic(nic));
}

static void sender(h_peer *p, VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE tag, unsigned c)
{
    struct ring_case *k = &cases[c];
    unsigned n = k->n ? k->n : max_depth(nic);
    VIP_VI_HANDLE vi = cf_vi(nic, tag, VIP_SERVICE_RELIABLE_DELIVERY, k->size, VIP_FALSE, NULL,
                             NULL);
    cf_descs d = cf_descs_get(nic, tag, 1);
    cf_mem buf = cf_mem_get(nic, tag, k->size, CF_MALLOC, 0);
    h_connect(vi, k->cli, k->srv, NULL);
    h_expect(p->fd, 'p');
    for (unsigned m = 0; m < n * k->laps; m++) {
        if (m >= n)
            h_expect(p->fd, 'r'); /* reposted: the pre-posting constraint holds */
        VIP_UINT32 len = msg_len(m, k->size);
        h_fill_random(buf.ptr, len, 1000003u * c + m);
        VIP_DESCRIPTOR *x = cf_desc(&d, 0);
        cf_fill(x, VIP_CONTROL_OP_SENDRECV, buf.ptr, buf.mh, len, 0);
        CHECK_OK(VipPostSend(vi, x, d.m.mh));
        cf_send_wait(vi, x);
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
    }
    h_expect(p->fd, 'k');
    CHECK_OK(VipDisconnect(vi));
    h_signal(p->fd, 'd');
    CHECK_OK(VipDestroyVi(vi));
    cf_mem_put(&buf);
    cf_mem_put(&d.m);
}

int main(void)
{
    h_init("conformance_rings", 120);
    for (unsigned c = 0; c < NCASES; c++) {
        h_disc(cases[c].srv, sizeof cases[c].srv);
        h_disc(cases[c].cli, sizeof cases[c].cli);
    }
    h_peer p = h_fork(receiver, NULL);
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE tag = h_ptag(nic);
    for (unsigned c = 0; c < NCASES; c++)
        sender(&p, nic, tag, c);
    h_peer_finish(&p);
    CHECK_OK(VipDestroyPtag(nic, tag));
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
