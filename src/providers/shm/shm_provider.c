/* shm_provider.c - the shm provider's ops table and NIC. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm.h"

VIP_RETURN shm_create_vi(struct vipl_vi *vi, const VIPX_VI_CONFIG *cfg);
void shm_destroy_vi(struct vipl_vi *vi);
VIP_RETURN shm_vi_arena(struct vipl_vi *vi, void **base, size_t *len);
bool shm_queue_empty(struct vipl_vi *vi, enum vipl_queue q);
void shm_vi_stats(struct vipl_vi *vi, VIPX_VI_STATS *stats);
void shm_mem_changed(struct vipl_nic *nic);
int shm_cq_wait_fd(struct vipl_cq *cq);
int shm_cq_sleep_bound(struct vipl_cq *cq);

#define SHM_MAX_TRANSFER (4u << 20)


static int shm_open_nic(struct vipl_nic *nic)
{
    struct shm_nic *snic = calloc(1, sizeof(*snic));
    if (!snic)
        return -1;
    snic->page = (size_t)sysconf(_SC_PAGESIZE);
    pthread_mutex_init(&snic->lock, NULL);
    shm_shared_init(snic);
    snic->agent = shm_agent_start();
    if (!snic->agent) {
        pthread_mutex_destroy(&snic->lock);
        shm_shared_destroy(snic);
        free(snic);
        return -1;
    }
    nic->prov_nic = snic;
    return 0;
}

static void shm_close_nic(struct vipl_nic *nic)
{
    struct shm_nic *snic = shm_nic(nic);
    shm_close_listeners(snic);
    shm_agent_stop(snic->agent);
    pthread_mutex_destroy(&snic->lock);
    shm_shared_destroy(snic);
    free(snic);
}

static void shm_fork_locks(struct vipl_nic *nic)
{
    struct shm_nic *snic = shm_nic(nic);
    pthread_mutex_init(&snic->lock, NULL);
    shm_shared_after_fork(snic);
    for (struct vipl_pool_obj *o = nic->cqs.all; o; o = o->all) {
        struct vipl_cq *cq = vipl_pool_object(o);
        if (cq->magic == VIPL_CQ_MAGIC)
            pthread_mutex_init(&shm_cq(cq)->lock, NULL);
    }
    shm_agent_forked(snic->agent);
}

static void shm_after_fork(struct vipl_nic *nic)
{
    struct shm_nic *snic = shm_nic(nic);
    snic->agent = shm_agent_after_fork(snic->agent, nic);
}

static void shm_leave_listening(struct vipl_nic *nic)
{
    shm_forget_listeners(shm_nic(nic));
}

static void shm_query_nic(struct vipl_nic *nic, VIP_NIC_ATTRIBUTES *a)
{
    (void)nic;
    strcpy(a->Name, "shm0");
    a->ProviderVersion = SHM_VERSION;
    a->MaxDescriptorsPerQueue = SHM_MAX_DEPTH;
    a->MaxTransferSize = SHM_MAX_TRANSFER;
    a->NativeMTU = SHM_MAX_TRANSFER;
    a->ReliabilityLevelSupport = VIP_SERVICE_UNRELIABLE | VIP_SERVICE_RELIABLE_DELIVERY |
                                 VIP_SERVICE_RELIABLE_RECEPTION;
}

static const char *const shm_device_names[] = {"shm", "shm0", NULL};

const struct vipl_provider vipl_provider_shm = {
    .name = "shm",
    .device_names = shm_device_names,
    .vi_size = sizeof(struct shm_vi),
    .cq_size = sizeof(struct shm_cq),
    .open_nic = shm_open_nic,
    .close_nic = shm_close_nic,
    .query_nic = shm_query_nic,
    .mem_changed = shm_mem_changed,
    .create_vi = shm_create_vi,
    .destroy_vi = shm_destroy_vi,
    .vi_arena = shm_vi_arena,
    .queue_empty = shm_queue_empty,
    .vi_stats = shm_vi_stats,
    .post_send = shm_post_send,
    .post_recv = shm_post_recv,
    .send_done = shm_send_done,
    .recv_done = shm_recv_done,
    .create_cq = shm_create_cq,
    .destroy_cq = shm_destroy_cq,
    .resize_cq = shm_resize_cq,
    .cq_done = shm_cq_done,
    .wait_prepare = shm_wait_prepare,
    .wait_sleep = shm_wait_sleep,
    .wait_finish = shm_wait_finish,
    .wait_wake = shm_wait_wake,
    .vi_sleep_arm = shm_vi_sleep_arm,
    .connect_wait = shm_connect_wait,
    .connect_accept = shm_connect_accept,
    .connect_reject = shm_connect_reject,
    .connect_request = shm_connect_request,
    .connect_start = shm_connect_start,
    .connect_finish = shm_connect_finish,
    .connect_abandon = shm_connect_abandon,
    .listen_waiting = shm_listen_waiting,
    .disconnect = shm_disconnect,
    .listen = shm_listen,
    .unlisten = shm_unlisten,
    .cq_wait_fd = shm_cq_wait_fd,
    .cq_wait_drain = shm_cq_wait_drain,
    .cq_sleep_bound = shm_cq_sleep_bound,
    .cq_hints = shm_cq_hints,
    .vi_hinted = shm_vi_hinted,
    .fork_locks = shm_fork_locks,
    .after_fork = shm_after_fork,
    .leave_listening = shm_leave_listening,
    .share_vi = shm_share_vi,
    .nudge_vi = shm_nudge_vi,
    .release_vi = shm_release_vi,
    .vi_export = shm_vi_export,
    .vi_forget_export = shm_vi_forget_export,
    .vi_import = shm_vi_import,
    .vi_import_recv = shm_vi_import_recv,
    .vi_sync_save = shm_vi_sync_save,
    .vi_sync_load = shm_vi_sync_load,
    .cq_export = shm_cq_export,
    .cq_import = shm_cq_import,
};
