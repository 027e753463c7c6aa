/* nic.c - opening, closing and querying a NIC; provider selection. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* NIC structures are reused, never freed, so a closed NIC's handle stays
 * safe to check. */
static struct vipl_pool nic_pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .size = sizeof(struct vipl_nic)};

/* Frees what the NIC owned (its dead objects) and recycles the NIC itself. */
static void release_nic(struct vipl_nic *nic)
{
    vipl_pool_drain(&nic->ptags);
    vipl_pool_drain(&nic->vi_pool);
    vipl_pool_drain(&nic->cqs);
    vipl_pool_drain(&nic->conns);
    pthread_mutex_destroy(&nic->lock);
    vipl_pool_put(&nic_pool, nic);
}

/* The device a NULL or empty name opens: SOVIA_PROVIDER ("shm", "fabric",
 * "fabric:<name>"), or its older name SOVIA_VIPL_DEVICE; NULL: the first
 * provider (shm). */
static const char *env_device(void)
{
    const char *d = getenv("SOVIA_PROVIDER");
    if (!d || !*d)
        d = getenv("SOVIA_VIPL_DEVICE");
    return d && *d ? d : NULL;
}

const struct vipl_provider *vipl_find_provider(const char *device)
{
    if (!device || !*device)
        device = env_device();
    if (!device || !*device)
        return vipl_providers[0];
    /* "fabric:tcp": the provider "fabric", which reads the rest itself. */
    const char *colon = strchr(device, ':');
    size_t n = colon ? (size_t)(colon - device) : strlen(device);
    for (const struct vipl_provider *const *p = vipl_providers; *p; p++)
        for (const char *const *name = (*p)->device_names; *name; name++)
            if (strlen(*name) == n && strncmp(*name, device, n) == 0 &&
                (!colon || (*p)->sub_names))
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
    const char *device = DeviceName && *DeviceName ? DeviceName : env_device();
    if (device && strlen(device) >= sizeof(((struct vipl_nic *)0)->device))
        return VIP_INVALID_PARAMETER;
    struct vipl_nic *nic = vipl_pool_get(&nic_pool);
    if (!nic)
        return VIP_ERROR_RESOURCE;
    nic->prov = prov;
    snprintf(nic->device, sizeof nic->device, "%s", device && *device ? device : prov->name);
    vipl_pool_init(&nic->ptags, sizeof(struct vipl_ptag));
    vipl_pool_init(&nic->vi_pool, prov->vi_size);
    vipl_pool_init(&nic->cqs, prov->cq_size);
    vipl_pool_init(&nic->conns, sizeof(struct vipl_conn));
    pthread_mutex_init(&nic->lock, NULL);
    if (vipl_mr_table_init(nic) != 0 || prov->open_nic(nic) != 0) {
        vipl_mr_table_fini(nic);
        release_nic(nic);
        return VIP_ERROR_RESOURCE;
    }
    const char *spin = getenv("SOVIA_VIPL_SPIN_US");
    atomic_store(&nic->wait_spin_ns, (spin && *spin ? strtoull(spin, NULL, 10) : 20) * 1000);
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
    release_nic(nic);
    return VIP_SUCCESS;
}

static const VIP_UINT8 loopback[VIPL_HOST_ADDR_LEN] = {127, 0, 0, 1};

/* The limits the core sets, then the provider's own values. */
void vipl_nic_query(struct vipl_nic *nic, VIP_NIC_ATTRIBUTES *a)
{
    *a = (VIP_NIC_ATTRIBUTES){
        .HardwareVersion = 1,
        .NicAddressLen = VIPL_HOST_ADDR_LEN,
        .LocalNicAddress = loopback,
        .ThreadSafe = VIP_TRUE,
        .MaxDiscriminatorLen = VIPL_MAX_DISC,
        .MaxRegisterBytes = (VIP_ULONG)1 << 40,
        .MaxRegisterRegions = VIPL_MR_MAX,
        .MaxRegisterBlockBytes = (VIP_ULONG)1 << 40,
        .MaxVI = 65536,
        .MaxSegmentsPerDesc = VIPL_MAX_SEGS,
        .MaxCQ = 65536,
        .MaxCQEntries = 65536,
        .MaxPtags = 1024,
        .RDMAReadSupport = 0,
    };
    nic->prov->query_nic(nic, a);
}

VIPL_EXPORT VIP_RETURN VipQueryNic(VIP_NIC_HANDLE NicHandle, VIP_NIC_ATTRIBUTES *NicAttribs)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic || !NicAttribs)
        return VIP_INVALID_PARAMETER;
    vipl_nic_query(nic, NicAttribs);
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

/* In a forked child: the NIC's locks may have been held by a thread that
 * does not exist here. */
VIPL_EXPORT VIP_RETURN VipxNicForkLocks(VIP_NIC_HANDLE NicHandle)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic)
        return VIP_INVALID_PARAMETER;
    pthread_mutex_init(&nic->lock, NULL);
    struct vipl_pool *pools[] = {&nic->ptags, &nic->vi_pool, &nic->cqs, &nic->conns};
    for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++)
        pthread_mutex_init(&pools[i]->lock, NULL);
    if (nic->prov->fork_locks)
        nic->prov->fork_locks(nic);
    return VIP_SUCCESS;
}

/* ... and the provider's threads are gone. */
VIPL_EXPORT VIP_RETURN VipxNicAfterFork(VIP_NIC_HANDLE NicHandle)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic)
        return VIP_INVALID_PARAMETER;
    VipxNicForkLocks(NicHandle);
    if (nic->prov->after_fork)
        nic->prov->after_fork(nic);
    return VipxNicLeaveListening(NicHandle);
}

/* In a forked child: listening stays the parent's. */
VIPL_EXPORT VIP_RETURN VipxNicLeaveListening(VIP_NIC_HANDLE NicHandle)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic)
        return VIP_INVALID_PARAMETER;
    if (nic->prov->leave_listening)
        nic->prov->leave_listening(nic);
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipxSetWaitSpin(VIP_NIC_HANDLE NicHandle, VIP_ULONG Microseconds)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic || Microseconds > 1000000)
        return VIP_INVALID_PARAMETER;
    atomic_store(&nic->wait_spin_ns, (uint64_t)Microseconds * 1000);
    return VIP_SUCCESS;
}
