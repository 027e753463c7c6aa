/*
 * post.c - posting descriptors and reaping completions.
 *
 * The core decodes and checks a descriptor against the registration table
 * (format, protection, length) and hands the provider a `vipl_wr`. An
 * invalid descriptor is not refused: it completes in order with the error
 * status, as on a hardware VI NIC.
 */
#include "core.h"
#include <vipl_trace.h>

static VIP_DESCRIPTOR_SEGMENT *desc_segments(VIP_DESCRIPTOR *desc)
{
    /* Descriptors carry SegCount segments, more than the two declared. */
    return (VIP_DESCRIPTOR_SEGMENT *)((char *)desc + sizeof(VIP_CONTROL_SEGMENT));
}

static uint32_t decode_segments(struct vipl_vi *vi, VIP_DESCRIPTOR *desc, VIP_MEM_HANDLE memh,
                                struct vipl_wr *wr)
{
    struct vipl_nic *nic = vi->nic;
    uint32_t nseg = desc->CS.SegCount;
    struct vipl_mr *dmr = vipl_mr_lookup(nic, memh);
    size_t dlen = sizeof(VIP_CONTROL_SEGMENT) + (size_t)nseg * sizeof(VIP_DESCRIPTOR_SEGMENT);
    if (!dmr || !vipl_mr_covers(dmr, desc, dlen) || dmr->ptag != vi->ptag)
        return VIP_STATUS_PROTECTION_ERROR;

    VIP_DESCRIPTOR_SEGMENT *ds = desc_segments(desc);
    uint32_t first = 0;
    if (wr->op == VIP_CONTROL_OP_RDMAWRITE) {
        if (!vi->attrs.EnableRdmaWrite)
            return VIP_STATUS_RDMA_PROT_ERROR;
        wr->remote_addr = ds[0].Remote.Data.AddressBits;
        wr->remote_handle = ds[0].Remote.Handle;
        first = 1;
    }
    for (uint32_t i = first; i < nseg; i++) {
        const VIP_DATA_SEGMENT *seg = &ds[i].Local;
        uint32_t len = seg->Length;
        if (len == 0)
            continue;
        struct vipl_mr *mr = vipl_mr_lookup(nic, seg->Handle);
        if (!mr || !vipl_mr_covers(mr, seg->Data.Address, len) || mr->ptag != vi->ptag)
            return VIP_STATUS_PROTECTION_ERROR;
        wr->sge[wr->nsge++] = (struct vipl_sge){seg->Data.Address, len, mr};
        wr->total += len;
    }
    if (wr->total > vi->attrs.MaxTransferSize)
        return VIP_STATUS_LENGTH_ERROR;
    return 0;
}

void vipl_decode_desc(struct vipl_vi *vi, VIP_DESCRIPTOR *desc, VIP_MEM_HANDLE memh, bool recv,
                      struct vipl_wr *wr)
{
    uint16_t control = desc->CS.Control;
    wr->desc = desc;
    wr->op = control & VIP_CONTROL_OP_MASK;
    wr->immediate = (control & VIP_CONTROL_IMMEDIATE) != 0;
    wr->imm = desc->CS.ImmediateData;
    wr->total = 0;
    wr->nsge = 0;
    wr->error = 0;

    bool bad_op = wr->op == VIP_CONTROL_OP_RDMAREAD || wr->op == VIP_CONTROL_OP_RESERVED ||
                  (wr->op == VIP_CONTROL_OP_RDMAWRITE && (recv || desc->CS.SegCount == 0));
    if ((control & VIP_CONTROL_RESERVED) || desc->CS.SegCount > VIPL_MAX_SEGS || bad_op) {
        wr->error = VIP_STATUS_FORMAT_ERROR;
        return;
    }
    wr->error = decode_segments(vi, desc, memh, wr);
}

static VIP_RETURN check_post(struct vipl_vi *vi, VIP_DESCRIPTOR *desc)
{
    if (!vi || !desc || ((uintptr_t)desc & (VIP_DESCRIPTOR_ALIGNMENT - 1)))
        return VIP_INVALID_PARAMETER;
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipPostSend(VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR *DescriptorPtr,
                                   VIP_MEM_HANDLE MemoryHandle)
{
    /* The post's time is taken here, its mark written once the length is
     * known (the anatomy matches marks by length). */
    uint64_t t0 = __builtin_expect(__atomic_load_n(&vipl_trace_on, __ATOMIC_RELAXED), 0)
                      ? VipxTraceClock() : 0;
    struct vipl_vi *vi = vi_of(ViHandle);
    VIP_RETURN r = check_post(vi, DescriptorPtr);
    if (r != VIP_SUCCESS)
        return r;
    int state = vipl_vi_state(vi);
    if (state == VIP_STATE_IDLE || state == VIP_STATE_CONNECT_PENDING)
        return VIP_INVALID_STATE;
    struct vipl_wr wr;
    vipl_decode_desc(vi, DescriptorPtr, MemoryHandle, false, &wr);
    if (__builtin_expect(t0 != 0, 0)) {
        vipl_trace_mark_at(VIPX_TP_POST, wr.total, t0);
        VipxTraceMark(VIPX_TP_DOORBELL, (uint32_t)wr.total);
    }
    return vi->nic->prov->post_send(vi, &wr);
}

VIPL_EXPORT VIP_RETURN VipPostRecv(VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR *DescriptorPtr,
                                   VIP_MEM_HANDLE MemoryHandle)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    VIP_RETURN r = check_post(vi, DescriptorPtr);
    if (r != VIP_SUCCESS)
        return r;
    if (vipl_vi_state(vi) == VIP_STATE_CONNECT_PENDING)
        return VIP_INVALID_STATE;
    struct vipl_wr wr;
    vipl_decode_desc(vi, DescriptorPtr, MemoryHandle, true, &wr);
    return vi->nic->prov->post_recv(vi, &wr);
}

VIPL_EXPORT VIP_RETURN VipSendDone(VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR **DescriptorPtr)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi || !DescriptorPtr)
        return VIP_INVALID_PARAMETER;
    return vi->nic->prov->send_done(vi, DescriptorPtr);
}

VIPL_EXPORT VIP_RETURN VipRecvDone(VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR **DescriptorPtr)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi || !DescriptorPtr)
        return VIP_INVALID_PARAMETER;
    return vi->nic->prov->recv_done(vi, DescriptorPtr);
}
