/*
 * core.h - helpers shared by the vipl core's files (not seen by providers).
 */
#ifndef VIPL_CORE_H
#define VIPL_CORE_H

#include "provider.h"

static inline struct vipl_nic *nic_of(VIP_NIC_HANDLE h)
{
    struct vipl_nic *nic = h;
    return nic && nic->magic == VIPL_NIC_MAGIC ? nic : NULL;
}

static inline struct vipl_vi *vi_of(VIP_VI_HANDLE h)
{
    struct vipl_vi *vi = h;
    return vi && vi->magic == VIPL_VI_MAGIC ? vi : NULL;
}

static inline struct vipl_cq *cq_of(VIP_CQ_HANDLE h)
{
    struct vipl_cq *cq = h;
    return cq && cq->magic == VIPL_CQ_MAGIC ? cq : NULL;
}

static inline struct vipl_ptag *ptag_of(struct vipl_nic *nic, VIP_PROTECTION_HANDLE h)
{
    struct vipl_ptag *tag = h;
    return tag && tag->magic == VIPL_PTAG_MAGIC && tag->nic == nic ? tag : NULL;
}

/* mem.c */
int vipl_mr_table_init(struct vipl_nic *nic);
void vipl_mr_table_fini(struct vipl_nic *nic);
/* The region behind `h`, or NULL for an unknown or stale handle. */
struct vipl_mr *vipl_mr_lookup(struct vipl_nic *nic, VIP_MEM_HANDLE h);
bool vipl_mr_covers(const struct vipl_mr *mr, const void *addr, uint64_t len);

/* post.c */
void vipl_decode_desc(struct vipl_vi *vi, VIP_DESCRIPTOR *desc, VIP_MEM_HANDLE memh,
                      bool recv, struct vipl_wr *wr);

/* wait.c: the blocking loop shared by VipSendWait, VipRecvWait, VipCQWait. */
typedef VIP_RETURN (*vipl_poll_fn)(void *obj, void *out1, void *out2);
VIP_RETURN vipl_wait(void *obj, enum vipl_queue q, VIP_ULONG timeout_ms, vipl_poll_fn poll,
                     void *out1, void *out2);
/* Arms the wake-up of queue q of obj (its CQ's, when it reports to one),
 * looks once more with poll(parg, out1, out2) and sleeps unless that found
 * something: poll's result, VIP_NOT_DONE after a wake-up, or VIP_TIMEOUT at
 * the deadline. */
VIP_RETURN vipl_sleep_once(void *obj, enum vipl_queue q, vipl_poll_fn poll, void *parg,
                           void *out1, void *out2, const struct timespec *deadline);
VIP_RETURN vipl_poll_send(void *obj, void *out1, void *out2);
VIP_RETURN vipl_poll_recv(void *obj, void *out1, void *out2);
VIP_RETURN vipl_poll_cq(void *obj, void *out1, void *out2);

/* waiters.c: this process's threads asleep on CQs, each with a doorbell. */
struct vipl_waiter;
struct vipl_waiter *vipl_waiter_self(void); /* NULL: none to be had */
int vipl_waiter_fd(const struct vipl_waiter *w);
void vipl_waiter_arm(struct vipl_waiter *w);
void vipl_waiter_disarm(struct vipl_waiter *w);
void vipl_waiters_ring(const struct vipl_waiter *except); /* every sleeper but one */
/* sleep.c's futex sleeps: the thread's own word, rung instead of its doorbell. */
uint32_t vipl_waiter_sleep_arm(struct vipl_waiter *w);
void vipl_waiter_sleep_disarm(struct vipl_waiter *w);
_Atomic uint32_t *vipl_waiter_word(struct vipl_waiter *w);
void vipl_waiter_ring_self(void);

/* cq.c: a thread's sleep on a CQ (see waiters.c). */
void vipl_cq_arm(struct vipl_cq *cq);
void vipl_cq_disarm(struct vipl_cq *cq);
void vipl_nic_query(struct vipl_nic *nic, VIP_NIC_ATTRIBUTES *a);
/* How long one sleep may last (ms, -1: no limit), see cq_sleep_bound. */
int vipl_cq_sleep_bound(struct vipl_cq *cq, int doorbell);

/* notify.c */
enum vipl_notify_kind { VIPL_NOTIFY_WQ, VIPL_NOTIFY_CQ };
VIP_RETURN vipl_notify_arm(struct vipl_notify **slot, void *obj, enum vipl_queue q,
                           void *context, void *handler);
void vipl_notify_destroy(struct vipl_notify **slot, void *obj, enum vipl_queue q);

/* pool.c */
/* vi.c / cq.c: creation, or (import != NULL) rebuilding an exported object. */
VIP_RETURN vipl_vi_make(VIP_NIC_HANDLE nic, VIP_VI_ATTRIBUTES *attrs, VIP_CQ_HANDLE scq,
                        VIP_CQ_HANDLE rcq, const VIPX_VI_CONFIG *cfg, const VIPX_STATE *import,
                        VIP_VI_HANDLE *out);
VIP_RETURN vipl_cq_make(VIP_NIC_HANDLE nic, VIP_ULONG entries, VIP_ULONG flags,
                        const VIPX_STATE *import, VIP_CQ_HANDLE *out);

void vipl_pool_init(struct vipl_pool *pool, size_t size);
void *vipl_pool_get(struct vipl_pool *pool);
void vipl_pool_put(struct vipl_pool *pool, void *obj);
void vipl_pool_drain(struct vipl_pool *pool);

/* nic.c */
const struct vipl_provider *vipl_find_provider(const char *device);

/* trace.c: a probe mark with a time taken earlier (vipl_trace.h). */
void vipl_trace_mark_at(uint32_t point, uint64_t arg, uint64_t tsc);

#endif /* VIPL_CORE_H */
