/*
 * fabric_mr.c - registration: every region VipRegisterMem accepts (the
 * protection tag was checked by the core) is registered with the domain,
 * for local access always (FI_MR_LOCAL providers need a descriptor for
 * every buffer they touch) and for remote writes only when the VIA region
 * enables RDMA write. Without FI_MR_PROV_KEY the key is the VIA memory
 * handle, which is what a VIA peer is given; a provider that picks its own
 * keys cannot be reached by RDMA write (docs/VIPL.md, fabric).
 */
#include <errno.h>

#include "fabric.h"

int fab_mem_register(struct vipl_nic *nic, struct vipl_mr *mr, uint32_t handle)
{
    struct fab_nic *fn = fab_nic(nic);
    uint64_t access = FI_SEND | FI_RECV | FI_WRITE;
    if (mr->rdma_write)
        access |= FI_REMOTE_WRITE;
    /* The key is the handle (slot and generation): a stale handle names
     * no key, even when its slot holds a new region. */
    uint32_t slot = handle & ((1u << VIPL_MR_INDEX_BITS) - 1);
    uint64_t key = handle;
    struct fid_mr *m = NULL;
    struct fid_domain *domain = fab_domain(fn, mr->ptag); /* only its tag's VIs reach it */
    if (!domain)
        return -ENOMEM;
    int r = fi_mr_reg(domain, (void *)mr->base, mr->len, access, 0, key, 0, &m, NULL);
    if (r != 0)
        return r < 0 ? r : -EIO;
    fn->mrs[slot] = m;
    return 0;
}

void fab_mem_deregister(struct vipl_nic *nic, uint32_t slot)
{
    struct fab_nic *fn = fab_nic(nic);
    if (fn->mrs[slot]) {
        fi_close(&fn->mrs[slot]->fid);
        fn->mrs[slot] = NULL;
    }
}

void *fab_mr_desc(struct vipl_nic *nic, const struct vipl_mr *mr)
{
    struct fab_nic *fn = fab_nic(nic);
    struct fid_mr *m = fn->mrs[mr - nic->mrs];
    return m ? fi_mr_desc(m) : NULL;
}

/* The key a peer's VIA memory handle names (see above). */
uint64_t fab_mr_key(struct vipl_nic *nic, VIP_MEM_HANDLE h)
{
    (void)nic;
    return h;
}
