/* conformance.c - the consumer's own memory and descriptors (conformance.h). */
#include "conformance.h"

#include <stdlib.h>
#include <sys/mman.h>

cf_mem cf_mem_get(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE ptag, size_t len, enum cf_alloc how,
                  int rdma_write)
{
    cf_mem m = {.nic = nic, .len = len, .how = how};
    void *p = NULL;
    switch (how) {
    case CF_MALLOC:
        p = malloc(len);
        break;
    case CF_MEMALIGN:
        CHECK(posix_memalign(&p, 4096, len) == 0);
        break;
    case CF_MMAP:
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            p = NULL;
        break;
    }
    CHECK(p != NULL);
    m.ptr = p;
    VIP_MEM_ATTRIBUTES a = {.Ptag = ptag, .EnableRdmaWrite = rdma_write ? VIP_TRUE : VIP_FALSE,
                            .EnableRdmaRead = VIP_FALSE};
    CHECK_OK(VipRegisterMem(nic, m.ptr, len, &a, &m.mh));
    return m;
}

void cf_mem_put(cf_mem *m)
{
    if (!m->ptr)
        return;
    CHECK_OK(VipDeregisterMem(m->nic, m->ptr, m->mh));
    if (m->how == CF_MMAP)
        munmap(m->ptr, m->len);
    else
        free(m->ptr);
    m->ptr = NULL;
}

cf_descs cf_descs_get(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE ptag, unsigned n)
{
    cf_descs d = {.n = n};
    d.m = cf_mem_get(nic, ptag, (size_t)n * sizeof(VIP_DESCRIPTOR), CF_MEMALIGN, 0);
    memset(d.m.ptr, 0, d.m.len);
    return d;
}

VIP_DESCRIPTOR *cf_desc(cf_descs *d, unsigned i)
{
    CHECK(i < d->n);
    return (VIP_DESCRIPTOR *)d->m.ptr + i;
}

void cf_fill(VIP_DESCRIPTOR *d, VIP_UINT16 control, const void *buf, VIP_MEM_HANDLE mh,
             VIP_UINT32 len, VIP_UINT32 imm)
{
    memset(d, 0, sizeof *d);
    d->CS.Control = control | (imm ? VIP_CONTROL_IMMEDIATE : 0);
    d->CS.SegCount = 1;
    d->CS.Length = len;
    d->CS.ImmediateData = imm;
    d->DS[0].Local.Data.Address = (VIP_PVOID)buf;
    d->DS[0].Local.Handle = mh;
    d->DS[0].Local.Length = len;
}

VIP_VI_HANDLE cf_vi(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE ptag, VIP_RELIABILITY_LEVEL rel,
                    VIP_ULONG mtu, VIP_BOOLEAN rdma_write, VIP_CQ_HANDLE scq, VIP_CQ_HANDLE rcq)
{
    VIP_VI_ATTRIBUTES a;
    memset(&a, 0, sizeof a);
    a.ReliabilityLevel = rel;
    a.MaxTransferSize = mtu;
    a.Ptag = ptag;
    a.EnableRdmaWrite = rdma_write;
    a.EnableRdmaRead = VIP_FALSE;
    VIP_VI_HANDLE vi = NULL;
    CHECK_OK(VipCreateVi(nic, &a, scq, rcq, &vi));
    return vi;
}

void cf_send_wait(VIP_VI_HANDLE vi, VIP_DESCRIPTOR *want)
{
    VIP_DESCRIPTOR *x = NULL;
    CHECK_OK(VipSendWait(vi, 5000, &x));
    CHECK(x == want);
}

void cf_expect_flushed(VIP_VI_HANDLE vi, VIP_DESCRIPTOR **want, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        VIP_DESCRIPTOR *x = NULL;
        CHECK_OK(VipRecvWait(vi, 5000, &x));
        CHECK_MSG(x == want[i], "flushed receive %u is not the %u-th posted", i, i);
        CHECK_MSG((x->CS.Status & VIP_STATUS_DONE) &&
                      (x->CS.Status & VIP_STATUS_DESC_FLUSHED_ERROR),
                  "receive %u: status 0x%x, expected DONE and DESC_FLUSHED_ERROR", i,
                  x->CS.Status);
    }
    VIP_DESCRIPTOR *x = NULL;
    CHECK_RET(VipRecvDone(vi, &x), VIP_NOT_DONE);
}
