/*
 * inherit.c - handing VIs and CQs to the next program image (exec), and a
 * shared VI's queue state between the processes holding it. The core
 * checks handles and arguments; the provider packs and unpacks its state
 * (VIPX_STATE: bytes plus descriptors).
 */
#include "core.h"

/* VipxViExport and VipxViSyncSave: a connected VI's state, by `sync`'s op. */
static VIP_RETURN save_vi(VIP_VI_HANDLE ViHandle, VIPX_STATE *State, VIP_ULONG *PostedOffsets,
                          VIP_ULONG *NumPosted, bool sync)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi || !State || !NumPosted || (*NumPosted && !PostedOffsets))
        return VIP_INVALID_PARAMETER;
    /* A shared VI that failed still hands over what the peer wrote before
     * it went (its last bytes, its end): the holders must agree on it. */
    VIP_VI_STATE st = vipl_vi_state(vi);
    if (st != VIP_STATE_CONNECTED && !(sync && st == VIP_STATE_ERROR))
        return VIP_INVALID_STATE;
    const struct vipl_provider *p = vi->nic->prov;
    VIP_RETURN (*op)(struct vipl_vi *, VIPX_STATE *, VIP_ULONG *, VIP_ULONG *) =
        sync ? p->vi_sync_save : p->vi_export;
    if (!op)
        return VIP_ERROR_NOT_SUPPORTED;
    *State = (VIPX_STATE){0};
    return op(vi, State, PostedOffsets, NumPosted);
}

VIPL_EXPORT VIP_RETURN VipxViExport(VIP_VI_HANDLE ViHandle, VIPX_STATE *State,
                                    VIP_ULONG *PostedOffsets, VIP_ULONG *NumPosted)
{
    return save_vi(ViHandle, State, PostedOffsets, NumPosted, false);
}

VIPL_EXPORT VIP_RETURN VipxViImport(VIP_NIC_HANDLE NicHandle, VIP_VI_ATTRIBUTES *ViAttribs,
                                    VIP_CQ_HANDLE SendCQHandle, VIP_CQ_HANDLE RecvCQHandle,
                                    const VIPX_STATE *State, VIP_VI_HANDLE *ViHandle)
{
    if (!State || State->NumFds > VIPX_STATE_FDS || State->Length > VIPX_STATE_BYTES)
        return VIP_INVALID_PARAMETER;
    return vipl_vi_make(NicHandle, ViAttribs, SendCQHandle, RecvCQHandle, NULL, State,
                        ViHandle);
}

VIPL_EXPORT VIP_RETURN VipxViForgetExport(VIP_VI_HANDLE ViHandle)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi)
        return VIP_INVALID_PARAMETER;
    if (!vi->nic->prov->vi_forget_export)
        return VIP_ERROR_NOT_SUPPORTED;
    vi->nic->prov->vi_forget_export(vi);
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipxViImportRecv(VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR *DescriptorPtr,
                                        VIP_MEM_HANDLE MemoryHandle)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi || !DescriptorPtr || ((uintptr_t)DescriptorPtr & (VIP_DESCRIPTOR_ALIGNMENT - 1)))
        return VIP_INVALID_PARAMETER;
    if (!vi->nic->prov->vi_import_recv)
        return VIP_ERROR_NOT_SUPPORTED;
    struct vipl_wr wr;
    vipl_decode_desc(vi, DescriptorPtr, MemoryHandle, true, &wr);
    if (wr.error)
        return VIP_INVALID_PARAMETER; /* an import must match what was posted */
    return vi->nic->prov->vi_import_recv(vi, &wr);
}

VIPL_EXPORT VIP_RETURN VipxViSyncSave(VIP_VI_HANDLE ViHandle, VIPX_STATE *State,
                                      VIP_ULONG *PostedOffsets, VIP_ULONG *NumPosted)
{
    return save_vi(ViHandle, State, PostedOffsets, NumPosted, true);
}

VIPL_EXPORT VIP_RETURN VipxViSyncLoad(VIP_VI_HANDLE ViHandle, const VIPX_STATE *State)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi || !State || State->NumFds || State->Length > VIPX_STATE_BYTES)
        return VIP_INVALID_PARAMETER;
    VIP_VI_STATE st = vipl_vi_state(vi);
    if (st != VIP_STATE_CONNECTED && st != VIP_STATE_ERROR)
        return VIP_INVALID_STATE;
    if (!vi->nic->prov->vi_sync_load)
        return VIP_ERROR_NOT_SUPPORTED;
    return vi->nic->prov->vi_sync_load(vi, State);
}

VIPL_EXPORT VIP_RETURN VipxCQExport(VIP_CQ_HANDLE CQHandle, VIPX_STATE *State)
{
    struct vipl_cq *cq = cq_of(CQHandle);
    if (!cq || !State)
        return VIP_INVALID_PARAMETER;
    if (!cq->nic->prov->cq_export)
        return VIP_ERROR_NOT_SUPPORTED;
    *State = (VIPX_STATE){0};
    return cq->nic->prov->cq_export(cq, State);
}

VIPL_EXPORT VIP_RETURN VipxCQImport(VIP_NIC_HANDLE NicHandle, VIP_ULONG EntryCount,
                                    const VIPX_STATE *State, VIP_CQ_HANDLE *CQHandle)
{
    if (!State || State->NumFds > VIPX_STATE_FDS || State->Length > VIPX_STATE_BYTES)
        return VIP_INVALID_PARAMETER;
    return vipl_cq_make(NicHandle, EntryCount, VIPX_CQ_INHERITABLE, State, CQHandle);
}
