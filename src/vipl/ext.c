/* ext.c - small sovia extensions: return-code names, address building. */
#include <stdlib.h>
#include <string.h>

#include "core.h"

VIPL_EXPORT const char *VipxReturnString(VIP_RETURN Code)
{
    static const char *const names[] = {
        "VIP_SUCCESS", "VIP_NOT_DONE", "VIP_INVALID_PARAMETER", "VIP_ERROR_RESOURCE",
        "VIP_TIMEOUT", "VIP_REJECT", "VIP_INVALID_RELIABILITY_LEVEL", "VIP_INVALID_MTU",
        "VIP_INVALID_QOS", "VIP_INVALID_PTAG", "VIP_INVALID_RDMAREAD", "VIP_DESCRIPTOR_ERROR",
        "VIP_INVALID_STATE", "VIP_ERROR_NAMESERVICE", "VIP_NO_MATCH", "VIP_NOT_REACHABLE",
        "VIP_ERROR_NOT_SUPPORTED",
    };
    if ((unsigned)Code < sizeof(names) / sizeof(names[0]))
        return names[Code];
    return "VIP_(unknown)";
}

VIPL_EXPORT VIP_NET_ADDRESS *VipxAllocNetAddress(const void *HostAddress,
                                                 VIP_UINT16 HostAddressLen,
                                                 const void *Discriminator,
                                                 VIP_UINT16 DiscriminatorLen)
{
    if (HostAddressLen > 16 || DiscriminatorLen > VIPL_MAX_DISC ||
        (HostAddressLen && !HostAddress) || (DiscriminatorLen && !Discriminator))
        return NULL;
    VIP_NET_ADDRESS *a = calloc(1, sizeof(*a) + HostAddressLen + DiscriminatorLen);
    if (!a)
        return NULL;
    a->HostAddressLen = HostAddressLen;
    a->DiscriminatorLen = DiscriminatorLen;
    if (HostAddressLen)
        memcpy(a->HostAddress, HostAddress, HostAddressLen);
    if (DiscriminatorLen)
        memcpy(a->HostAddress + HostAddressLen, Discriminator, DiscriminatorLen);
    return a;
}
