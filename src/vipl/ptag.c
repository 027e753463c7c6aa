/* ptag.c - protection tags. */
#include <stdlib.h>

#include "core.h"

VIPL_EXPORT VIP_RETURN VipCreatePtag(VIP_NIC_HANDLE NicHandle,
                                     VIP_PROTECTION_HANDLE *ProtectionTag)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic || !ProtectionTag)
        return VIP_INVALID_PARAMETER;
    struct vipl_ptag *tag = vipl_pool_get(&nic->ptags);
    if (!tag)
        return VIP_ERROR_RESOURCE;
    tag->magic = VIPL_PTAG_MAGIC;
    tag->nic = nic;
    pthread_mutex_lock(&nic->lock);
    nic->n_ptags++;
    pthread_mutex_unlock(&nic->lock);
    *ProtectionTag = tag;
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipDestroyPtag(VIP_NIC_HANDLE NicHandle,
                                      VIP_PROTECTION_HANDLE ProtectionTag)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    struct vipl_ptag *tag = nic ? ptag_of(nic, ProtectionTag) : NULL;
    if (!tag)
        return VIP_INVALID_PARAMETER;
    if (atomic_load(&tag->users) != 0)
        return VIP_INVALID_STATE;
    pthread_mutex_lock(&nic->lock);
    nic->n_ptags--;
    pthread_mutex_unlock(&nic->lock);
    vipl_pool_put(&nic->ptags, tag);
    return VIP_SUCCESS;
}
