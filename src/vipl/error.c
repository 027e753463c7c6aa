/* error.c - the asynchronous error handler. */
#include "core.h"

VIPL_EXPORT VIP_RETURN VipErrorCallback(VIP_NIC_HANDLE NicHandle, VIP_PVOID Context,
                                        VIP_ERROR_HANDLER Handler)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic)
        return VIP_INVALID_PARAMETER;
    pthread_mutex_lock(&nic->lock);
    nic->err_handler = Handler;
    nic->err_context = Context;
    pthread_mutex_unlock(&nic->lock);
    return VIP_SUCCESS;
}

void vipl_report_error(struct vipl_nic *nic, struct vipl_vi *vi, struct vipl_cq *cq,
                       VIP_DESCRIPTOR *desc, VIP_RESOURCE_CODE res, VIP_ERROR_CODE code)
{
    atomic_fetch_add(&nic->errors_reported, 1);
    pthread_mutex_lock(&nic->lock);
    VIP_ERROR_HANDLER handler = nic->err_handler;
    VIP_PVOID context = nic->err_context;
    pthread_mutex_unlock(&nic->lock);
    if (!handler)
        return; /* the default handler only counts */
    VIP_ERROR_DESCRIPTOR ed = {
        .NicHandle = nic,
        .ViHandle = vi,
        .CQHandle = cq,
        .DescriptorPtr = desc,
        .OpCode = desc ? (VIP_ULONG)(desc->CS.Control & VIP_CONTROL_OP_MASK) : 0,
        .ResourceCode = res,
        .ErrorCode = code,
    };
    handler(context, &ed);
}

VIPL_EXPORT VIP_RETURN VipxNicSetNudgeHandler(VIP_NIC_HANDLE NicHandle,
                                              VIPX_NUDGE_HANDLER Handler, VIP_PVOID Context)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic)
        return VIP_INVALID_PARAMETER;
    pthread_mutex_lock(&nic->lock);
    nic->nudge_handler = Handler;
    nic->nudge_context = Context;
    pthread_mutex_unlock(&nic->lock);
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipxViNudge(VIP_VI_HANDLE ViHandle)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi)
        return VIP_INVALID_PARAMETER;
    if (vipl_vi_state(vi) != VIP_STATE_CONNECTED)
        return VIP_INVALID_STATE;
    return vi->nic->prov->nudge_vi ? vi->nic->prov->nudge_vi(vi) : VIP_ERROR_NOT_SUPPORTED;
}

void vipl_report_nudge(struct vipl_vi *vi)
{
    struct vipl_nic *nic = vi->nic;
    pthread_mutex_lock(&nic->lock);
    VIPX_NUDGE_HANDLER handler = nic->nudge_handler;
    VIP_PVOID context = nic->nudge_context;
    pthread_mutex_unlock(&nic->lock);
    if (handler)
        handler(context, vi);
}

void vipl_vi_fail(struct vipl_vi *vi, VIP_ERROR_CODE code, VIP_DESCRIPTOR *desc)
{
    int state = vipl_vi_state(vi);
    for (;;) {
        if (state == VIP_STATE_ERROR || state == VIP_STATE_IDLE)
            return; /* already failed, or disconnected on purpose */
        if (atomic_compare_exchange_weak(&vi->state, &state, VIP_STATE_ERROR))
            break;
    }
    /* Waiters must see the flushed descriptors even if the handler blocks. */
    vi->nic->prov->wait_wake(vi, VIPL_RECVQ);
    vi->nic->prov->wait_wake(vi, VIPL_SENDQ);
    vipl_report_error(vi->nic, vi, NULL, desc, desc ? VIP_RESOURCE_DESCRIPTOR : VIP_RESOURCE_VI,
                      code);
}

VIPL_EXPORT VIP_RETURN VipxViHintCookie(VIP_VI_HANDLE ViHandle, VIP_PVOID Cookie)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    if (!vi)
        return VIP_INVALID_PARAMETER;
    __atomic_store_n(&vi->hint_cookie, Cookie, __ATOMIC_RELEASE);
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_BOOLEAN VipxViHinted(VIP_VI_HANDLE ViHandle)
{
    struct vipl_vi *vi = vi_of(ViHandle);
    const struct vipl_provider *p = vi ? vi->nic->prov : NULL;
    return p && p->vi_hinted && p->vi_hinted(vi) ? VIP_TRUE : VIP_FALSE;
}
