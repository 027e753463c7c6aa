/*
 * fabric_provider.c - the fabric provider's ops table and NIC: which
 * libfabric provider carries the VIs, and the domain they share.
 *
 * "fabric" takes the best FI_EP_MSG provider fi_getinfo offers (hardware
 * first: verbs, efa, cxi, then tcp, then the rest); "fabric:<name>" forces
 * one. The hints say what this code honours, the strictest modes included
 * (FI_MR_LOCAL, FI_MR_VIRT_ADDR, FI_MR_PROV_KEY, FI_MR_ALLOCATED,
 * FI_CONTEXT, FI_RX_CQ_DATA), so any provider may pick what it needs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric.h"

#define FAB_VERSION FI_VERSION(1, 17)

VIP_RETURN fab_vi_arena(struct vipl_vi *vi, void **base, size_t *len);


struct fi_info *fab_hints(const char *prov_name)
{
    struct fi_info *h = fi_dupinfo(NULL); /* fi_allocinfo(), without its linked symbol */
    if (!h)
        return NULL;
    h->ep_attr->type = FI_EP_MSG;
    h->caps = FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
    h->mode = FI_CONTEXT | FI_RX_CQ_DATA;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
    h->domain_attr->threading = FI_THREAD_SAFE;
    h->domain_attr->data_progress = FI_PROGRESS_MANUAL;
    h->domain_attr->control_progress = FI_PROGRESS_MANUAL;
    if (prov_name && *prov_name) {
        h->fabric_attr->prov_name = strdup(prov_name);
        if (!h->fabric_attr->prov_name) {
            fi_freeinfo(h);
            return NULL;
        }
    }
    return h;
}

/* Lower is better: hardware first, then tcp, then what emulates it. */
static int rank(const struct fi_info *i)
{
    static const char *const order[] = {"verbs", "efa", "cxi", "tcp", "net", "sockets"};
    const char *p = i->fabric_attr->prov_name;
    if (strchr(p, ';')) /* a utility provider layered on a core one */
        return 100;
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++)
        if (strcmp(p, order[k]) == 0)
            return (int)k;
    return 50;
}

static struct fi_info *choose(const char *prov_name)
{
    struct fi_info *hints = fab_hints(prov_name), *all = NULL;
    if (!hints)
        return NULL;
    int r = fi_getinfo(FAB_VERSION, NULL, NULL, 0, hints, &all);
    fi_freeinfo(hints);
    if (r != 0)
        return NULL;
    struct fi_info *best = NULL;
    for (struct fi_info *i = all; i; i = i->next)
        if (!best || rank(i) < rank(best))
            best = i;
    struct fi_info *pick = best && rank(best) < 100 ? fi_dupinfo(best) : NULL;
    fi_freeinfo(all);
    return pick;
}

static int fab_open_nic(struct vipl_nic *nic)
{
    if (!fab_dl_load())
        return -1; /* no libfabric.so.1 on this host */
    const char *dev = nic->device;
    const char *colon = strchr(dev, ':');
    struct fab_nic *fn = calloc(1, sizeof(*fn));
    if (!fn)
        return -1;
    pthread_mutex_init(&fn->lock, NULL);
    pthread_mutex_init(&fn->dom_lock, NULL);
    fn->info = choose(colon ? colon + 1 : NULL);
    if (!fn->info)
        goto fail;
    /* With FI_MR_VIRT_ADDR unset a provider reads remote addresses as
     * offsets into the region; VIA addresses are virtual, and asking for
     * virtual addresses is what every provider honours. */
    fn->info->domain_attr->mr_mode |= FI_MR_VIRT_ADDR;
    int m = fn->info->domain_attr->mr_mode;
    fn->mr_local = (m & FI_MR_LOCAL) != 0;
    fn->mr_virt = true;
    fn->mr_prov_key = (m & FI_MR_PROV_KEY) != 0;
    fn->cq_data_size = fn->info->domain_attr->cq_data_size;
    fn->tx_iov_limit = fn->info->tx_attr->iov_limit ? fn->info->tx_attr->iov_limit : 1;
    fn->rx_iov_limit = fn->info->rx_attr->iov_limit ? fn->info->rx_attr->iov_limit : 1;
    strncpy(fn->prov_name, fn->info->fabric_attr->prov_name, sizeof fn->prov_name - 1);
    fn->mrs = calloc(VIPL_MR_MAX + 1, sizeof(*fn->mrs));
    if (!fn->mrs || fi_fabric(fn->info->fabric_attr, &fn->fabric, NULL) != 0)
        goto fail;
    if (fi_domain(fn->fabric, fn->info, &fn->domain, NULL) != 0)
        goto fail;
    nic->prov_nic = fn;
    fn->agent = fab_agent_start(nic);
    if (!fn->agent) {
        nic->prov_nic = NULL;
        fi_close(&fn->domain->fid);
        goto fail;
    }
    return 0;
fail:
    if (fn->fabric)
        fi_close(&fn->fabric->fid);
    if (fn->info)
        fi_freeinfo(fn->info);
    free(fn->mrs);
    pthread_mutex_destroy(&fn->lock);
    pthread_mutex_destroy(&fn->dom_lock);
    free(fn);
    return -1;
}

static void fab_close_nic(struct vipl_nic *nic)
{
    struct fab_nic *fn = fab_nic(nic);
    fab_agent_stop(fn->agent);
    fab_close_listeners(fn);
    for (uint32_t i = 0; i <= VIPL_MR_MAX; i++)
        if (fn->mrs[i])
            fi_close(&fn->mrs[i]->fid);
    fab_domains_close(fn);
    pthread_mutex_destroy(&fn->dom_lock);
    fi_close(&fn->fabric->fid);
    fi_freeinfo(fn->info);
    free(fn->mrs);
    pthread_mutex_destroy(&fn->lock);
    free(fn);
}

static void fab_query_nic(struct vipl_nic *nic, VIP_NIC_ATTRIBUTES *a)
{
    struct fab_nic *fn = fab_nic(nic);
    snprintf(a->Name, sizeof a->Name, "fabric:%s", fn->prov_name);
    a->ProviderVersion = fi_version();
    a->MaxDescriptorsPerQueue = FAB_DEPTH_MAX;
    size_t mts = fn->info->ep_attr->max_msg_size;
    a->MaxTransferSize = mts < FAB_MAX_TRANSFER ? (VIP_ULONG)mts : FAB_MAX_TRANSFER;
    a->NativeMTU = a->MaxTransferSize;
    a->ReliabilityLevelSupport = VIP_SERVICE_RELIABLE_DELIVERY | VIP_SERVICE_RELIABLE_RECEPTION;
}

/* The arena is plain memory here: every receive is written in place by
 * the provider, inside the arena or not. */
VIP_RETURN fab_vi_arena(struct vipl_vi *cvi, void **base, size_t *len)
{
    struct fab_vi *vi = fab_vi(cvi);
    *base = vi->arena;
    *len = vi->arena ? vi->arena_len : 0;
    return VIP_SUCCESS;
}

static const char *const fab_device_names[] = {"fabric", NULL};

const struct vipl_provider vipl_provider_fabric = {
    .name = "fabric",
    .device_names = fab_device_names,
    .sub_names = true,
    .vi_size = sizeof(struct fab_vi),
    .cq_size = sizeof(struct fab_cq),
    .open_nic = fab_open_nic,
    .close_nic = fab_close_nic,
    .query_nic = fab_query_nic,
    .mem_register = fab_mem_register,
    .mem_deregister = fab_mem_deregister,
    .create_vi = fab_create_vi,
    .destroy_vi = fab_destroy_vi,
    .vi_arena = fab_vi_arena,
    .queue_empty = fab_queue_empty,
    .vi_stats = fab_vi_stats,
    .post_send = fab_post_send,
    .post_recv = fab_post_recv,
    .send_done = fab_send_done,
    .recv_done = fab_recv_done,
    .create_cq = fab_create_cq,
    .destroy_cq = fab_destroy_cq,
    .resize_cq = fab_resize_cq,
    .cq_done = fab_cq_done,
    .wait_prepare = fab_wait_prepare,
    .wait_sleep = fab_wait_sleep,
    .wait_finish = fab_wait_finish,
    .wait_wake = fab_wait_wake,
    .connect_wait = fab_connect_wait,
    .connect_accept = fab_connect_accept,
    .connect_reject = fab_connect_reject,
    .connect_request = fab_connect_request,
    .disconnect = fab_disconnect,
    .listen = fab_listen,
    .unlisten = fab_unlisten,
    .cq_wait_fd = fab_cq_wait_fd,
    .cq_wait_drain = fab_cq_wait_drain,
    .cq_sleep_bound = fab_cq_sleep_bound,
};
