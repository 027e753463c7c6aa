/*
 * inline_small: on shm, a message of up to 96 bytes rides in the
 * completion slot (docs/ARCHITECTURE.md "The data path"): the sender
 * never touches the page of the receive buffer it lands in, so a
 * connection taking its turn among thousands costs no page fault on the
 * sender's side. The receiver posts buffers on untouched arena pages; once
 * the sender has completed its sends, mincore() must show the page of the
 * 96-byte message's buffer still absent and the 97-byte one's present
 * (copied there by the sender); then both arrive intact, as does a 1-byte
 * and a 0-byte one.
 */
#define _DEFAULT_SOURCE
#include "harness.h"

#include <sys/mman.h>
#include <unistd.h>

static const VIP_UINT32 lens[] = {96, 97, 1, 0};
#define NMSG (sizeof lens / sizeof lens[0])

struct cfg {
    char srv[80], cli[80];
};

/* Is the page holding p in memory? (A shared mapping's page cache.) */
static int resident(const void *p)
{
    long page = sysconf(_SC_PAGESIZE);
    unsigned char v = 0;
    CHECK(mincore((void *)((uintptr_t)p & ~(uintptr_t)(page - 1)), (size_t)page, &v) == 0);
    return v & 1;
}

static void peer(int fd, void *arg)
{
    struct cfg *c = arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 64 * 1024);
    VIP_PVOID abase;
    VIP_ULONG alen;
    CHECK_OK(VipxViArena(vi, &abase, &alen));
    CHECK(alen >= NMSG * 8192);
    h_mem ar = h_mem_reg(nic, t, abase, NMSG * 8192, 0);
    h_descs d = h_descs_alloc(nic, t, NMSG);
    /* Buffers 8 KiB apart: each on pages of its own, none touched yet. */
    for (unsigned i = 0; i < NMSG; i++) {
        CHECK_MSG(!resident(ar.ptr + i * 8192), "arena page %u touched before any message", i);
        h_post_recv1(vi, &d, i, ar.ptr + i * 8192, ar.mh, 4096);
    }
    h_accept(nic, vi, c->srv, NULL);
    h_expect(fd, 'S'); /* every send completed: the data is where it will be */
    CHECK_MSG(!resident(ar.ptr), "the sender wrote the page of a 96-byte message's buffer");
    CHECK_MSG(resident(ar.ptr + 8192), "a 97-byte message is not in its buffer's page");
    for (unsigned i = 0; i < NMSG; i++) {
        VIP_DESCRIPTOR *x = h_recv_wait(vi, 5000);
        CHECK(x == h_desc(&d, i));
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
        CHECK_EQ(x->CS.Length, lens[i]);
        CHECK_RANDOM(ar.ptr + i * 8192, lens[i], 100 + i);
    }
    h_signal(fd, 'V');
    h_expect(fd, 'Q');
    h_mem_free(&ar);
    h_vi_teardown(vi);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
}

int main(void)
{
    h_init("inline_small", 30);
    static struct cfg c;
    h_disc(c.srv, sizeof c.srv);
    h_disc(c.cli, sizeof c.cli);
    h_peer p = h_fork(peer, &c);
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    h_mem src = h_mem_alloc(nic, t, 4096, 0);
    h_descs d = h_descs_alloc(nic, t, 1);
    h_connect(vi, c.cli, c.srv, NULL);
    for (unsigned i = 0; i < NMSG; i++) {
        h_fill_random(src.ptr, lens[i], 100 + i);
        h_post_send1(vi, &d, 0, src.ptr, src.mh, lens[i], 0, 0);
        CHECK_STATUS(h_send_done(vi), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
    }
    h_signal(p.fd, 'S');
    h_expect(p.fd, 'V');
    h_signal(p.fd, 'Q');
    h_peer_finish(&p);
    h_vi_teardown(vi);
    h_mem_free(&src);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
