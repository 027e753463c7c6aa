/* nic.c - opening, closing and querying a NIC; provider selection. */
#include <stdlib.h>
#include <string.h>

#include "core.h"

const struct vipl_provider *vipl_find_provider(const char *device)
{
    if (!device || !*device)
        device = getenv("SOVIA_VIPL_DEVICE");
    if (!device || !*device)
        return vipl_providers[0];
    for (const struct vipl_provider *const *p = vipl_providers; *p; p++)
        for (const char *const *name = (*p)->device_names; *name; name++)
            if (strcmp(*name, device) == 0)
                return *p;
    return NULL;
}

VIPL_EXPORT VIP_RETURN VipOpenNic(const VIP_CHAR *DeviceName, VIP_NIC_HANDLE *NicHandle)
{
    if (!NicHandle)
        return VIP_INVALID_PARAMETER;
    const struct vipl_provider *prov = vipl_find_provider(DeviceName);
    if (!prov)
        return VIP_INVALID_PARAMETER;
    struct vipl_nic *nic = calloc(1, sizeof(*nic));
    if (!nic)
        return VIP_ERROR_RESOURCE;
    nic->prov = prov;
    pthread_mutex_init(&nic->lock, NULL);
    if (vipl_mr_table_init(nic) != 0) {
        free(nic);
        return VIP_ERROR_RESOURCE;
    }
    if (prov->open_nic(nic) != 0) {
        vipl_mr_table_fini(nic);
        free(nic);
        return VIP_ERROR_RESOURCE;
    }
    nic->magic = VIPL_NIC_MAGIC;
    *NicHandle = nic;
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipCloseNic(VIP_NIC_HANDLE NicHandle)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic)
        return VIP_INVALID_PARAMETER;
    pthread_mutex_lock(&nic->lock);
    bool busy = nic->n_vis || nic->n_cqs;
    pthread_mutex_unlock(&nic->lock);
    if (busy)
        return VIP_INVALID_STATE;
    nic->prov->close_nic(nic);
    vipl_mr_table_fini(nic);
    nic->magic = 0;
    pthread_mutex_destroy(&nic->lock);
    free(nic);
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipQueryNic(VIP_NIC_HANDLE NicHandle, VIP_NIC_ATTRIBUTES *NicAttribs)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic || !NicAttribs)
        return VIP_INVALID_PARAMETER;
    memset(NicAttribs, 0, sizeof(*NicAttribs));
    nic->prov->query_nic(nic, NicAttribs);
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipQuerySystemManagementInfo(VIP_NIC_HANDLE NicHandle,
                                                    VIP_ULONG InfoType, VIP_PVOID SysManInfo)
{
    (void)InfoType;
    (void)SysManInfo;
    if (!nic_of(NicHandle))
        return VIP_INVALID_PARAMETER;
    return VIP_ERROR_NOT_SUPPORTED;
}
