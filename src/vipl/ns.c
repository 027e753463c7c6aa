/* ns.c - the VIPL name service, backed by the system resolver (IPv4). */
#include <arpa/inet.h>
#include <netdb.h>
#include <string.h>

#include "core.h"

VIPL_EXPORT VIP_RETURN VipNSInit(VIP_NIC_HANDLE NicHandle, VIP_PVOID NSInitInfo)
{
    (void)NSInitInfo;
    return nic_of(NicHandle) ? VIP_SUCCESS : VIP_INVALID_PARAMETER;
}

VIPL_EXPORT VIP_RETURN VipNSShutdown(VIP_NIC_HANDLE NicHandle)
{
    return nic_of(NicHandle) ? VIP_SUCCESS : VIP_INVALID_PARAMETER;
}

VIPL_EXPORT VIP_RETURN VipNSGetHostByName(VIP_NIC_HANDLE NicHandle, VIP_CHAR *Name,
                                          VIP_NET_ADDRESS *Address, VIP_ULONG NameIndex)
{
    if (!nic_of(NicHandle) || !Name || !Address)
        return VIP_INVALID_PARAMETER;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res;
    if (getaddrinfo(Name, NULL, &hints, &res) != 0)
        return VIP_ERROR_NAMESERVICE;
    /* The resolver may list an address once per protocol: count distinct ones. */
    struct in_addr seen[64];
    VIP_ULONG n = 0;
    VIP_RETURN r = VIP_ERROR_NAMESERVICE;
    for (struct addrinfo *ai = res; ai && n < 64; ai = ai->ai_next) {
        struct in_addr a = ((struct sockaddr_in *)ai->ai_addr)->sin_addr;
        bool dup = false;
        for (VIP_ULONG i = 0; i < n; i++)
            dup |= seen[i].s_addr == a.s_addr;
        if (dup)
            continue;
        if (n == NameIndex) {
            Address->HostAddressLen = VIPL_HOST_ADDR_LEN;
            Address->DiscriminatorLen = 0;
            memcpy(Address->HostAddress, &a, VIPL_HOST_ADDR_LEN);
            r = VIP_SUCCESS;
            break;
        }
        seen[n++] = a;
    }
    freeaddrinfo(res);
    return r;
}

VIPL_EXPORT VIP_RETURN VipNSGetHostByAddr(VIP_NIC_HANDLE NicHandle, VIP_NET_ADDRESS *Address,
                                          VIP_CHAR *Name, VIP_ULONG *NameLen)
{
    if (!nic_of(NicHandle) || !Address || !Name || !NameLen ||
        Address->HostAddressLen != VIPL_HOST_ADDR_LEN)
        return VIP_INVALID_PARAMETER;
    struct sockaddr_in sin = {.sin_family = AF_INET};
    memcpy(&sin.sin_addr, Address->HostAddress, VIPL_HOST_ADDR_LEN);
    char host[NI_MAXHOST];
    if (getnameinfo((struct sockaddr *)&sin, sizeof(sin), host, sizeof(host), NULL, 0,
                    NI_NAMEREQD) != 0)
        return VIP_ERROR_NAMESERVICE;
    size_t need = strlen(host) + 1;
    if (need > *NameLen) {
        *NameLen = need;
        return VIP_INVALID_PARAMETER;
    }
    memcpy(Name, host, need);
    *NameLen = need;
    return VIP_SUCCESS;
}
