/*
 * mem.c - memory registration.
 *
 * Regions live in a fixed table so the data path can look a handle up
 * without a lock: a handle is the slot index plus a generation, and a slot's
 * handle word is cleared on deregistration, so a stale handle never matches.
 */
#include <stdlib.h>

#include "core.h"

#define MR_INDEX_MASK ((1u << VIPL_MR_INDEX_BITS) - 1)
#define MR_GEN_MASK ((1u << (32 - VIPL_MR_INDEX_BITS)) - 1)

int vipl_mr_table_init(struct vipl_nic *nic)
{
    nic->mrs = calloc(VIPL_MR_MAX + 1, sizeof(*nic->mrs)); /* slot 0 is never used */
    nic->mr_free = calloc(VIPL_MR_MAX, sizeof(*nic->mr_free));
    if (!nic->mrs || !nic->mr_free) {
        free(nic->mrs);
        free(nic->mr_free);
        return -1;
    }
    return 0;
}

void vipl_mr_table_fini(struct vipl_nic *nic)
{
    free(nic->mrs);
    free(nic->mr_free);
}

struct vipl_mr *vipl_mr_lookup(struct vipl_nic *nic, VIP_MEM_HANDLE h)
{
    uint32_t idx = h & MR_INDEX_MASK;
    if (h == 0 || idx > VIPL_MR_MAX)
        return NULL;
    struct vipl_mr *mr = &nic->mrs[idx];
    return atomic_load_explicit(&mr->handle, memory_order_acquire) == h ? mr : NULL;
}

bool vipl_mr_covers(const struct vipl_mr *mr, const void *addr, uint64_t len)
{
    uintptr_t a = (uintptr_t)addr;
    return a >= mr->base && len <= mr->len && a - mr->base <= mr->len - len;
}

/* The attribute rules shared by registration and VipSetMemAttributes. */
static VIP_RETURN check_mem_attrs(struct vipl_nic *nic, const VIP_MEM_ATTRIBUTES *a,
                                  struct vipl_ptag **tag)
{
    *tag = ptag_of(nic, a->Ptag);
    if (!*tag)
        return VIP_INVALID_PTAG;
    return a->EnableRdmaRead ? VIP_INVALID_RDMAREAD : VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipRegisterMem(VIP_NIC_HANDLE NicHandle, VIP_PVOID VirtualAddress,
                                      VIP_ULONG Length, VIP_MEM_ATTRIBUTES *MemAttribs,
                                      VIP_MEM_HANDLE *MemoryHandle)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic || !VirtualAddress || Length == 0 || !MemAttribs || !MemoryHandle ||
        (uintptr_t)VirtualAddress + Length < (uintptr_t)VirtualAddress)
        return VIP_INVALID_PARAMETER;
    struct vipl_ptag *tag;
    VIP_RETURN r = check_mem_attrs(nic, MemAttribs, &tag);
    if (r != VIP_SUCCESS)
        return r;

    pthread_mutex_lock(&nic->lock);
    uint32_t idx;
    if (nic->mr_nfree)
        idx = nic->mr_free[--nic->mr_nfree];
    else if (nic->mr_next < VIPL_MR_MAX)
        idx = ++nic->mr_next; /* slot 0 stays unused so no handle is 0 */
    else {
        pthread_mutex_unlock(&nic->lock);
        return VIP_ERROR_RESOURCE;
    }
    nic->mr_gen = (nic->mr_gen + 1) & MR_GEN_MASK;
    if (nic->mr_gen == 0)
        nic->mr_gen = 1;
    struct vipl_mr *mr = &nic->mrs[idx];
    mr->base = (uintptr_t)VirtualAddress;
    mr->len = Length;
    mr->ptag = tag;
    mr->rdma_write = MemAttribs->EnableRdmaWrite != 0;
    atomic_fetch_add(&tag->users, 1);
    uint32_t h = idx | nic->mr_gen << VIPL_MR_INDEX_BITS;
    if (nic->prov->mem_register && nic->prov->mem_register(nic, mr, h) != 0) {
        atomic_fetch_sub(&tag->users, 1);
        nic->mr_free[nic->mr_nfree++] = idx;
        pthread_mutex_unlock(&nic->lock);
        return VIP_ERROR_RESOURCE;
    }
    atomic_store_explicit(&mr->handle, h, memory_order_release);
    pthread_mutex_unlock(&nic->lock);

    if (mr->rdma_write && nic->prov->mem_changed)
        nic->prov->mem_changed(nic);
    *MemoryHandle = h;
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipDeregisterMem(VIP_NIC_HANDLE NicHandle, VIP_PVOID VirtualAddress,
                                        VIP_MEM_HANDLE MemoryHandle)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic)
        return VIP_INVALID_PARAMETER;
    pthread_mutex_lock(&nic->lock);
    struct vipl_mr *mr = vipl_mr_lookup(nic, MemoryHandle);
    if (!mr || mr->base != (uintptr_t)VirtualAddress) {
        pthread_mutex_unlock(&nic->lock);
        return VIP_INVALID_PARAMETER;
    }
    bool exported = mr->rdma_write;
    atomic_store_explicit(&mr->handle, 0, memory_order_release);
    if (nic->prov->mem_deregister)
        nic->prov->mem_deregister(nic, MemoryHandle & MR_INDEX_MASK);
    atomic_fetch_sub(&mr->ptag->users, 1);
    nic->mr_free[nic->mr_nfree++] = MemoryHandle & MR_INDEX_MASK;
    pthread_mutex_unlock(&nic->lock);
    if (exported && nic->prov->mem_changed)
        nic->prov->mem_changed(nic);
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipQueryMem(VIP_NIC_HANDLE NicHandle, VIP_PVOID VirtualAddress,
                                   VIP_MEM_HANDLE MemoryHandle, VIP_MEM_ATTRIBUTES *MemAttribs)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    struct vipl_mr *mr = nic ? vipl_mr_lookup(nic, MemoryHandle) : NULL;
    if (!mr || !MemAttribs || mr->base != (uintptr_t)VirtualAddress)
        return VIP_INVALID_PARAMETER;
    MemAttribs->Ptag = mr->ptag;
    MemAttribs->EnableRdmaWrite = mr->rdma_write;
    MemAttribs->EnableRdmaRead = VIP_FALSE;
    return VIP_SUCCESS;
}

VIPL_EXPORT VIP_RETURN VipSetMemAttributes(VIP_NIC_HANDLE NicHandle, VIP_PVOID VirtualAddress,
                                           VIP_MEM_HANDLE MemoryHandle,
                                           VIP_MEM_ATTRIBUTES *MemAttribs)
{
    struct vipl_nic *nic = nic_of(NicHandle);
    if (!nic || !MemAttribs)
        return VIP_INVALID_PARAMETER;
    struct vipl_ptag *tag;
    VIP_RETURN r = check_mem_attrs(nic, MemAttribs, &tag);
    if (r != VIP_SUCCESS)
        return r;
    pthread_mutex_lock(&nic->lock);
    struct vipl_mr *mr = vipl_mr_lookup(nic, MemoryHandle);
    if (!mr || mr->base != (uintptr_t)VirtualAddress) {
        pthread_mutex_unlock(&nic->lock);
        return VIP_INVALID_PARAMETER;
    }
    atomic_fetch_add(&tag->users, 1);
    atomic_fetch_sub(&mr->ptag->users, 1);
    bool was = mr->rdma_write;
    struct vipl_ptag *old = mr->ptag;
    mr->ptag = tag;
    mr->rdma_write = MemAttribs->EnableRdmaWrite != 0;
    uint32_t idx = MemoryHandle & MR_INDEX_MASK;
    /* the device's access, or the tag it is registered under, changes */
    if (nic->prov->mem_register && (was != mr->rdma_write || old != tag)) {
        nic->prov->mem_deregister(nic, idx);
        if (nic->prov->mem_register(nic, mr, MemoryHandle) != 0) {
            mr->rdma_write = false; /* registered for nothing: its posts fail */
            pthread_mutex_unlock(&nic->lock);
            return VIP_ERROR_RESOURCE;
        }
    }
    pthread_mutex_unlock(&nic->lock);
    if (nic->prov->mem_changed)
        nic->prov->mem_changed(nic);
    return VIP_SUCCESS;
}
