/*
 * conformance_rdma: RDMA write into the consumer's own buffers.
 *
 * VIA 1.0: an RDMA write names a region the remote consumer registered with
 * EnableRdmaWrite (memory handle and virtual address) on a VI that enables
 * RDMA write, under the same protection tag; any registered memory
 * qualifies. The writer's descriptor completes DONE | OP_RDMA_WRITE. Without
 * immediate data the target's work queues see nothing, and the data is in
 * place before any later message on the VI completes; with immediate data
 * the write consumes the target's next receive descriptor, which completes
 * DONE | OP_REMOTE_RDMA_WRITE | IMMEDIATE with the immediate data, its
 * buffer untouched. On a reliable VI a write outside the region, or into a
 * region without EnableRdmaWrite, completes with an error and moves the VI
 * to ERROR, and not one byte of the target changes.
 *
 * The target's regions come from malloc and anonymous mmap.
 */
#include "conformance.h"

#define REG (64 * 1024)
#define CANARY 0x5A
#define NWRITES 8

static char srv[80], cli[80];

struct target_info {
    uint64_t addr[2];
    VIP_MEM_HANDLE mh[2];
};

/* Write w: its region, offset, length and immediate data (0: none). */
static void write_of(unsigned w, unsigned *reg, uint32_t *off, uint32_t *len, uint32_t *imm)
{
    static const uint32_t lens[NWRITES] = {1, 64, 4096, REG, 33, 8192, 60000, 4};
    *reg = w % 2;
    *len = lens[w];
    *off = (uint32_t)((w * 4099u) % (REG - *len + 1));
    *imm = w % 3 == 1 ? 0xC0DE0000u + w : 0;
}

static void target(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE tag = h_ptag(nic);
    VIP_VI_HANDLE vi = cf_vi(nic, tag, VIP_SERVICE_RELIABLE_DELIVERY, REG, VIP_TRUE, NULL, NULL);
    cf_mem r[2] = {cf_mem_get(nic, tag, REG, CF_MALLOC, 1), cf_mem_get(nic, tag, REG, CF_MMAP, 1)};
    cf_mem off = cf_mem_get(nic, tag, REG, CF_MALLOC, 0); /* registered, not for RDMA write */
    cf_mem rb = cf_mem_get(nic, tag, (size_t)2 * NWRITES * 64, CF_MALLOC, 0);
    memset(r[0].ptr, CANARY, REG);
    memset(r[1].ptr, CANARY, REG);
    memset(off.ptr, CANARY, REG);
    memset(rb.ptr, CANARY, rb.len);
    cf_descs d = cf_descs_get(nic, tag, 2 * NWRITES);
    for (unsigned i = 0; i < 2 * NWRITES; i++) {
        cf_fill(cf_desc(&d, i), VIP_CONTROL_OP_SENDRECV, rb.ptr + i * 64, rb.mh, 64, 0);
        CHECK_OK(VipPostRecv(vi, cf_desc(&d, i), d.m.mh));
    }
    h_accept(nic, vi, srv, NULL);
    struct target_info info = {{(uintptr_t)r[0].ptr, (uintptr_t)r[1].ptr}, {r[0].mh, r[1].mh}};
    h_xsend(fd, &info, sizeof info);
    struct target_info bad = {{(uintptr_t)off.ptr, 0}, {off.mh, 0}};
    h_xsend(fd, &bad, sizeof bad);

    unsigned next = 0;
    for (unsigned w = 0; w < NWRITES; w++) {
        unsigned reg;
        uint32_t o, len, imm;
        write_of(w, &reg, &o, &len, &imm);
        VIP_DESCRIPTOR *x = NULL;
        CHECK_OK(VipRecvWait(vi, 5000, &x));
        CHECK(x == cf_desc(&d, next));
        next++;
        if (imm) {
            CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_REMOTE_RDMA_WRITE |
                                VIP_STATUS_IMMEDIATE);
            CHECK_EQ(x->CS.ImmediateData, imm);
        } else { /* the writer's message after the write */
            CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
            CHECK_EQ(x->CS.Length, 4);
            CHECK_EQ(*(uint32_t *)(rb.ptr + (next - 1) * 64), w);
        }
        long bad_at = h_check_random(r[reg].ptr + o, len, 77 + w);
        CHECK_MSG(bad_at < 0, "write %u (%u bytes at %u of region %u%s): byte %ld not written",
                  w, len, o, reg, imm ? ", immediate" : "", bad_at);
        CHECK_BYTES(r[reg].ptr, o, CANARY);
        CHECK_BYTES(r[reg].ptr + o + len, REG - o - len, CANARY);
        memset(r[reg].ptr + o, CANARY, len);
        CHECK_BYTES(r[reg ^ 1].ptr, REG, CANARY);
        if (imm)
            CHECK_BYTES(rb.ptr + (next - 1) * 64, 64, CANARY);
        h_signal(fd, 'n'); /* checked: the next write may come */
    }
    h_signal(fd, 'w');
    /* The writer's protection errors (reliable: the connection ends). */
    CHECK(h_wait_state(vi, VIP_STATE_ERROR, 5000) == VIP_STATE_ERROR);
    h_expect(fd, 'e');
    CHECK_BYTES(r[0].ptr, REG, CANARY);
    CHECK_BYTES(r[1].ptr, REG, CANARY);
    CHECK_BYTES(off.ptr, REG, CANARY);
    (void)VipDisconnect(vi);
    VIP_DESCRIPTOR *x;
    while (VipRecvDone(vi, &x) == VIP_SUCCESS)
        ;
    CHECK_OK(VipDestroyVi(vi));
    for (int i = 0; i < 2; i++)
        cf_mem_put(&r[i]);
    cf_mem_put(&off);
    cf_mem_put(&rb);
    cf_mem_put(&d.m);
    CHECK_OK(VipDestroyPtag(nic, tag));
    CHECK_OK(VipCloseNic(nic));
}

int main(void)
{
    h_init("conformance_rdma", 60);
    h_disc(srv, sizeof srv);
    h_disc(cli, sizeof cli);
    h_peer p = h_fork(target, NULL);
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE tag = h_ptag(nic);
    VIP_VI_HANDLE vi = cf_vi(nic, tag, VIP_SERVICE_RELIABLE_DELIVERY, REG, VIP_TRUE, NULL, NULL);
    h_connect(vi, cli, srv, NULL);
    struct target_info info, bad;
    h_xrecv(p.fd, &info, sizeof info);
    h_xrecv(p.fd, &bad, sizeof bad);
    cf_mem src = cf_mem_get(nic, tag, REG, CF_MEMALIGN, 0);
    cf_descs d = cf_descs_get(nic, tag, 2);
    VIP_DESCRIPTOR *x = cf_desc(&d, 0), *got;
    for (unsigned w = 0; w < NWRITES; w++) {
        unsigned reg;
        uint32_t o, len, imm;
        write_of(w, &reg, &o, &len, &imm);
        h_fill_random(src.ptr, len, 77 + w);
        memset(x, 0, sizeof *x);
        x->CS.Control = VIP_CONTROL_OP_RDMAWRITE | (imm ? VIP_CONTROL_IMMEDIATE : 0);
        x->CS.ImmediateData = imm;
        x->CS.SegCount = 2;
        x->CS.Length = len;
        x->DS[0].Remote.Data.AddressBits = info.addr[reg] + o;
        x->DS[0].Remote.Handle = info.mh[reg];
        x->DS[1].Local.Data.Address = src.ptr;
        x->DS[1].Local.Handle = src.mh;
        x->DS[1].Local.Length = len;
        CHECK_OK(VipPostSend(vi, x, d.m.mh));
        cf_send_wait(vi, x);
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RDMA_WRITE);
        CHECK_EQ(x->CS.Length, len);
        if (!imm) { /* a message after the write: the target looks once it lands */
            memcpy(src.ptr + REG - 4, &w, 4);
            VIP_DESCRIPTOR *y = cf_desc(&d, 1);
            cf_fill(y, VIP_CONTROL_OP_SENDRECV, src.ptr + REG - 4, src.mh, 4, 0);
            CHECK_OK(VipPostSend(vi, y, d.m.mh));
            cf_send_wait(vi, y);
            CHECK_STATUS(y, VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
        }
        h_expect(p.fd, 'n');
    }
    h_expect(p.fd, 'w');
    /* Into a region registered without EnableRdmaWrite. */
    memset(x, 0, sizeof *x);
    x->CS.Control = VIP_CONTROL_OP_RDMAWRITE;
    x->CS.SegCount = 2;
    x->CS.Length = 64;
    x->DS[0].Remote.Data.AddressBits = bad.addr[0];
    x->DS[0].Remote.Handle = bad.mh[0];
    x->DS[1].Local.Data.Address = src.ptr;
    x->DS[1].Local.Handle = src.mh;
    x->DS[1].Local.Length = 64;
    CHECK_OK(VipPostSend(vi, x, d.m.mh));
    CHECK_OK(VipSendWait(vi, 5000, &got));
    CHECK(got == x);
    CHECK_MSG(x->CS.Status & VIP_STATUS_ERROR_MASK, "a write into a region without "
              "EnableRdmaWrite completed 0x%x", x->CS.Status);
    CHECK(h_wait_state(vi, VIP_STATE_ERROR, 2000) == VIP_STATE_ERROR);
    h_signal(p.fd, 'e');
    (void)VipDisconnect(vi);
    CHECK_OK(VipDestroyVi(vi));
    cf_mem_put(&src);
    cf_mem_put(&d.m);
    CHECK_OK(VipDestroyPtag(nic, tag));
    h_peer_finish(&p);
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
