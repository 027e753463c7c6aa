/*
 * fabric_domain.c - a libfabric domain per protection tag. Providers check
 * an RDMA write's key against the regions of the endpoint's domain, not a
 * VI's tag, so each tag gets its own domain: its VIs' endpoints and
 * fi_cqs and its regions live there, and a peer's write through a VI of
 * one tag cannot name a region of another (VIA: the target region's tag
 * must be the target VI's). The cost: a VIPL CQ serves the VIs of one tag.
 */
#include <stdlib.h>

#include "fabric.h"

struct fid_domain *fab_domain(struct fab_nic *fn, struct vipl_ptag *tag)
{
    pthread_mutex_lock(&fn->dom_lock);
    struct fab_dom *d = fn->doms;
    while (d && d->ptag != tag)
        d = d->next;
    if (!d && (d = calloc(1, sizeof(*d)))) {
        d->ptag = tag;
        if (!fn->doms && fn->domain) {
            d->domain = fn->domain; /* the one opened with the NIC */
            fn->domain = NULL;
        } else if (fi_domain(fn->fabric, fn->info, &d->domain, NULL) != 0) {
            free(d);
            d = NULL;
        }
        if (d) {
            d->next = fn->doms;
            fn->doms = d;
        }
    }
    pthread_mutex_unlock(&fn->dom_lock);
    return d ? d->domain : NULL;
}

void fab_domains_close(struct fab_nic *fn)
{
    while (fn->doms) {
        struct fab_dom *d = fn->doms;
        fn->doms = d->next;
        fi_close(&d->domain->fid);
        free(d);
    }
    if (fn->domain)
        fi_close(&fn->domain->fid);
    fn->domain = NULL;
}
