/*
 * provider.h - the interface between the vipl core and its providers.
 *
 * The core owns handles, argument checking, protection tags, the memory
 * registration table, descriptor decoding, blocking waits, notify threads,
 * the name service and error reporting. A provider owns data movement,
 * completion and connection management, behind `struct vipl_provider`.
 *
 * Providers embed the core objects as the first member of their own VI and
 * CQ structures (the core allocates `vi_size` / `cq_size` bytes), so the data
 * path reaches provider state without a pointer chase.
 */
#ifndef VIPL_PROVIDER_H
#define VIPL_PROVIDER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <vipl.h>
#include <vipl_ext.h>

#define VIPL_EXPORT __attribute__((visibility("default")))

/* trace.c: VipxTraceOn's twin, for the probes inside libvipl (vipl_trace.h). */
extern int vipl_trace_on __attribute__((visibility("hidden")));
#define VIPX_TRACE_FLAG vipl_trace_on

#define VIPL_MAX_SEGS 16
#define VIPL_MAX_DISC 64
#define VIPL_HOST_ADDR_LEN 4

enum vipl_magic {
    VIPL_NIC_MAGIC = 0x4e49430a,
    VIPL_VI_MAGIC = 0x5649560a,
    VIPL_CQ_MAGIC = 0x4351510a,
    VIPL_PTAG_MAGIC = 0x5054470a,
    VIPL_CONN_MAGIC = 0x434f4e0a,
};

struct vipl_nic;
struct vipl_notify;

#define VIPL_POOL_ALIGN 64

/* Destroyed objects of one kind, kept for reuse (see pool.c). */
struct vipl_pool {
    pthread_mutex_t lock;
    void *dead;
    struct vipl_pool_obj *all; /* every object ever made, live or dead */
    size_t size;
};

/* pool.c: each object sits after this header; `all` links every object of
 * the pool, live or dead (vipl_pool.all), `next` the dead ones. */
struct vipl_pool_obj {
    struct vipl_pool_obj *next;
    struct vipl_pool_obj *all;
    char pad[VIPL_POOL_ALIGN - 2 * sizeof(struct vipl_pool_obj *)];
};

static inline void *vipl_pool_object(struct vipl_pool_obj *o)
{
    return o + 1;
}

struct vipl_ptag {
    uint32_t magic;
    struct vipl_nic *nic;
    atomic_uint users; /* VIs and memory regions holding the tag */
};

/* One registered memory region. Handles are index | generation << 20. */
struct vipl_mr {
    _Atomic uint32_t handle; /* 0 while the slot is free */
    uintptr_t base;
    size_t len;
    struct vipl_ptag *ptag;
    bool rdma_write;
};

#define VIPL_MR_INDEX_BITS 20
#define VIPL_MR_MAX (1u << 16)

struct vipl_nic {
    uint32_t magic;
    const struct vipl_provider *prov;
    pthread_mutex_t lock; /* object lists and the registration table's free list */
    struct vipl_mr *mrs;  /* VIPL_MR_MAX slots, lookups are lock-free */
    uint32_t mr_next;     /* next never-used slot */
    uint32_t *mr_free;    /* stack of freed slots */
    uint32_t mr_nfree;
    uint32_t mr_gen;
    VIP_ERROR_HANDLER err_handler;
    VIP_PVOID err_context;
    VIPX_NUDGE_HANDLER nudge_handler; /* under lock */
    VIP_PVOID nudge_context;
    atomic_ulong errors_reported;
    _Atomic uint64_t wait_spin_ns; /* …Wait polls this long before sleeping */
    unsigned n_vis, n_cqs, n_ptags;
    struct vipl_vi *vis; /* list of VIs, linked through vipl_vi.next and .prev */
    struct vipl_pool ptags, vi_pool, cqs, conns;
    void *prov_nic;      /* provider state */
    char device[64];     /* the name it was opened by ("fabric:tcp") */
};

struct vipl_cq {
    uint32_t magic;
    struct vipl_nic *nic;
    VIP_ULONG entries;
    VIP_ULONG flags; /* VIPX_CQ_* */
    atomic_uint attached; /* work queues using this CQ */
    struct vipl_notify *notify;
};

struct vipl_vi {
    uint32_t magic;
    struct vipl_nic *nic;
    struct vipl_vi *next, *prev; /* prev: O(1) unlink (a process may hold 100,000) */
    VIP_VI_ATTRIBUTES attrs;
    struct vipl_ptag *ptag;
    struct vipl_cq *send_cq, *recv_cq;
    _Atomic int state; /* VIP_VI_STATE */
    struct vipl_notify *send_notify, *recv_notify;
    int connect_token; /* -1, or sent with the next connection request */
    uid_t connect_uid; /* whose listener the next request dials ((uid_t)-1: our own) */
    bool last; /* disconnected for destruction: no fresh segments, no new connection */
    void *hint_cookie; /* VipxViHintCookie: what VipxCQHints reports for it */
};

/* A local scatter/gather element, already checked against its region. */
struct vipl_sge {
    void *addr;
    uint32_t len;
    struct vipl_mr *mr;
};

/* A decoded descriptor. `error` holds VIP_STATUS_* error bits when the
 * descriptor itself is invalid: the provider then completes it in order with
 * that status and moves nothing. */
struct vipl_wr {
    VIP_DESCRIPTOR *desc;
    uint32_t op;    /* VIP_CONTROL_OP_* */
    uint32_t error; /* VIP_STATUS_* error bits, 0 when valid */
    bool immediate;
    uint32_t imm;
    uint64_t total;
    uint32_t nsge;
    struct vipl_sge sge[VIPL_MAX_SEGS];
    uint64_t remote_addr; /* RDMA write target */
    VIP_MEM_HANDLE remote_handle;
};

enum vipl_queue { VIPL_SENDQ = 0, VIPL_RECVQ = 1, VIPL_CQ = 2 };

/* Connection request as seen by the accepting side. */
struct vipl_conn {
    uint32_t magic;
    struct vipl_nic *nic;
    VIP_VI_ATTRIBUTES remote_attrs;
    void *prov_conn;
    int token; /* -1, or the requester's token (the provider sets it) */
    uid_t peer_uid; /* the requester's effective uid (the provider sets it) */
    bool foreign;   /* the requester is another user than we are now */
};

struct vipl_provider {
    const char *name;
    const char *const *device_names; /* NULL-terminated */
    bool sub_names; /* "<name>:<rest>" opens it too (the rest is its to read) */
    size_t vi_size, cq_size;

    int (*open_nic)(struct vipl_nic *nic);
    void (*close_nic)(struct vipl_nic *nic);
    /* Fills in what is the provider's (name, versions, queue depth,
     * transfer size, reliability levels) over the core's values (nic.c,
     * vipl_nic_query: the core's limits, one host address). */
    void (*query_nic)(struct vipl_nic *nic, VIP_NIC_ATTRIBUTES *attrs);

    /* Registration table changes, for providers that export regions. */
    void (*mem_changed)(struct vipl_nic *nic);
    /* Each region, for providers whose device registers it (handle: the
     * one it will have; slot: its index in nic->mrs, the handle's low
     * VIPL_MR_INDEX_BITS); register fails with -errno, and the region with it. */
    int (*mem_register)(struct vipl_nic *nic, struct vipl_mr *mr, uint32_t handle);
    void (*mem_deregister)(struct vipl_nic *nic, uint32_t slot);

    VIP_RETURN (*create_vi)(struct vipl_vi *vi, const VIPX_VI_CONFIG *cfg);
    void (*destroy_vi)(struct vipl_vi *vi);
    VIP_RETURN (*vi_arena)(struct vipl_vi *vi, void **base, size_t *len);
    bool (*queue_empty)(struct vipl_vi *vi, enum vipl_queue q);
    void (*vi_stats)(struct vipl_vi *vi, VIPX_VI_STATS *stats);

    VIP_RETURN (*post_send)(struct vipl_vi *vi, struct vipl_wr *wr);
    VIP_RETURN (*post_recv)(struct vipl_vi *vi, struct vipl_wr *wr);
    VIP_RETURN (*send_done)(struct vipl_vi *vi, VIP_DESCRIPTOR **desc);
    VIP_RETURN (*recv_done)(struct vipl_vi *vi, VIP_DESCRIPTOR **desc);

    VIP_RETURN (*create_cq)(struct vipl_cq *cq);
    void (*destroy_cq)(struct vipl_cq *cq);
    VIP_RETURN (*resize_cq)(struct vipl_cq *cq, VIP_ULONG entries);
    VIP_RETURN (*cq_done)(struct vipl_cq *cq, struct vipl_vi **vi, VIP_BOOLEAN *recvq);

    /*
     * Blocking: prepare arms the wake-up of queue `q` of `obj` (a vipl_vi or
     * a vipl_cq) and returns a token; sleep blocks until the token is stale,
     * the deadline (CLOCK_MONOTONIC, NULL = forever) passes (-ETIMEDOUT) or
     * wake is called; finish disarms.
     */
    uint32_t (*wait_prepare)(void *obj, enum vipl_queue q);
    int (*wait_sleep)(void *obj, enum vipl_queue q, uint32_t token,
                      const struct timespec *deadline);
    void (*wait_finish)(void *obj, enum vipl_queue q);
    void (*wait_wake)(void *obj, enum vipl_queue q);

    VIP_RETURN (*connect_wait)(struct vipl_nic *nic, const VIP_NET_ADDRESS *local,
                               const struct timespec *deadline, VIP_NET_ADDRESS *remote,
                               struct vipl_conn *conn);
    VIP_RETURN (*connect_accept)(struct vipl_conn *conn, struct vipl_vi *vi);
    void (*connect_reject)(struct vipl_conn *conn);
    VIP_RETURN (*connect_request)(struct vipl_vi *vi, const VIP_NET_ADDRESS *local,
                                  const VIP_NET_ADDRESS *remote,
                                  const struct timespec *deadline, VIP_VI_ATTRIBUTES *rattrs);
    /* The same request in two steps (optional): start sends it and
     * returns; finish waits until `deadline` for the answer (VIP_TIMEOUT:
     * not yet, still pending) and ends it otherwise; abandon ends one
     * unanswered (the listener sees the requester go). */
    VIP_RETURN (*connect_start)(struct vipl_vi *vi, const VIP_NET_ADDRESS *local,
                                const VIP_NET_ADDRESS *remote);
    VIP_RETURN (*connect_finish)(struct vipl_vi *vi, const struct timespec *deadline,
                                 VIP_VI_ATTRIBUTES *rattrs);
    void (*connect_abandon)(struct vipl_vi *vi);
    /* Whether requests to `local` wait to be taken by connect_wait
     * (optional). */
    bool (*listen_waiting)(struct vipl_nic *nic, const VIP_NET_ADDRESS *local);
    VIP_RETURN (*disconnect)(struct vipl_vi *vi);
    VIP_RETURN (*listen)(struct vipl_nic *nic, const VIP_NET_ADDRESS *local, bool any_user);
    VIP_RETURN (*unlisten)(struct vipl_nic *nic, const VIP_NET_ADDRESS *local);
    /* A descriptor that polls readable when an armed CQ may have work, and
     * its draining: true if it was readable. Every thread asleep on the CQ
     * polls it; the core drains it when a sleeper disarms and then wakes
     * the others (waiters.c), so no sleeper's wake-up is taken by another. */
    int (*cq_wait_fd)(struct vipl_cq *cq);
    bool (*cq_wait_drain)(struct vipl_cq *cq);
    /* The longest a sleep on the CQ may last (ms; -1: no limit) when some
     * wake-up may not come: a sleeper with no doorbell of its own, or a CQ
     * whose armed flag a peer can write (VIPX_CQ_INHERITABLE). */
    int (*cq_sleep_bound)(struct vipl_cq *cq);
    /* Readiness hints (optional; VipxCQHints): takes the cookies of the
     * VIs whose peers hinted since the last call, VIP_ERROR_RESOURCE if
     * more than max; and whether a VI's peer hints at all. */
    VIP_RETURN (*cq_hints)(struct vipl_cq *cq, void **cookies, unsigned long max,
                           unsigned long *count);
    bool (*vi_hinted)(struct vipl_vi *vi);
    /* A sleep on the VI's own futex word though it is on a CQ, for a
     * thread that waits for a few VIs (VipxViSleepArm); optional. Arm:
     * counts the sleeper where the peer looks after each completion, gives
     * the word and its value, and returns the longest the sleep may last
     * (ms, -1: no limit). Disarm (arm false): word and token untouched. */
    int (*vi_sleep_arm)(struct vipl_vi *vi, bool arm, _Atomic uint32_t **word, uint32_t *token);

    /* Connections held by several processes (VipxViShare & co.). */
    void (*fork_locks)(struct vipl_nic *nic);   /* in the child: its locks made new */
    void (*after_fork)(struct vipl_nic *nic);   /* in the child, after fork_locks */
    void (*leave_listening)(struct vipl_nic *nic); /* in the child: close its listener copies */
    VIP_RETURN (*share_vi)(struct vipl_vi *vi);  /* connected VIs only */
    VIP_RETURN (*nudge_vi)(struct vipl_vi *vi);  /* connected VIs only */
    void (*release_vi)(struct vipl_vi *vi);      /* drop the connection locally */

    /* Handing objects to the next program image (VipxViExport & co.). */
    VIP_RETURN (*vi_export)(struct vipl_vi *vi, VIPX_STATE *st, VIP_ULONG *offsets,
                            VIP_ULONG *n);
    VIP_RETURN (*vi_import)(struct vipl_vi *vi, const VIPX_STATE *st); /* connected */
    VIP_RETURN (*vi_import_recv)(struct vipl_vi *vi, struct vipl_wr *wr);
    void (*vi_forget_export)(struct vipl_vi *vi); /* VipxViForgetExport */
    /* Between the holders of a shared VI (VipxViSyncSave/Load). */
    VIP_RETURN (*vi_sync_save)(struct vipl_vi *vi, VIPX_STATE *st, VIP_ULONG *offsets,
                               VIP_ULONG *n);
    VIP_RETURN (*vi_sync_load)(struct vipl_vi *vi, const VIPX_STATE *st);
    VIP_RETURN (*cq_export)(struct vipl_cq *cq, VIPX_STATE *st);
    VIP_RETURN (*cq_import)(struct vipl_cq *cq, const VIPX_STATE *st);
};

extern const struct vipl_provider *const vipl_providers[];

/* ---- Core services for providers --------------------------------------- */

/* The peer nudged `vi` (VipxViNudge): calls the consumer's handler. */
void vipl_report_nudge(struct vipl_vi *vi);
/* Moves `vi` to ERROR (once) and reports `code` to the error handler. */
void vipl_vi_fail(struct vipl_vi *vi, VIP_ERROR_CODE code, VIP_DESCRIPTOR *desc);
void vipl_report_error(struct vipl_nic *nic, struct vipl_vi *vi, struct vipl_cq *cq,
                       VIP_DESCRIPTOR *desc, VIP_RESOURCE_CODE res, VIP_ERROR_CODE code);

static inline int vipl_vi_state(const struct vipl_vi *vi)
{
    return atomic_load_explicit(&vi->state, memory_order_acquire);
}

static inline bool vipl_vi_reliable(const struct vipl_vi *vi)
{
    return vi->attrs.ReliabilityLevel != VIP_SERVICE_UNRELIABLE;
}

/* Writes a completion into a descriptor; the status word goes last. */
static inline void vipl_complete_desc(VIP_DESCRIPTOR *d, uint32_t status, uint32_t length,
                                      uint32_t imm)
{
    d->CS.Length = length;
    d->CS.ImmediateData = imm;
    __atomic_store_n(&d->CS.Status, status | VIP_STATUS_DONE, __ATOMIC_RELEASE);
}

/* Absolute CLOCK_MONOTONIC deadline for a VIPL timeout; NULL if infinite. */
const struct timespec *vipl_deadline(VIP_ULONG timeout_ms, struct timespec *buf);
/* Milliseconds left until `deadline` (-1: infinite). */
int vipl_ms_left(const struct timespec *deadline);

/* watch.c: this thread's id (cached; a forked child's is refreshed), and
 * whether the thread `tid` of this process has ended (a holder of a lock
 * killed inside its section: a seccomp filter's SECCOMP_RET_KILL_THREAD). */
extern __thread pid_t vipl_tid_cache __attribute__((tls_model("initial-exec")));
static inline int32_t vipl_tid(void)
{
    if (__builtin_expect(!vipl_tid_cache, 0))
        vipl_tid_cache = gettid();
    return vipl_tid_cache;
}
bool vipl_thread_gone(int32_t tid);
/* The contended path of a spinlock whose word holds its owner's thread id
 * (0: free): false if it was taken over from a dead owner. */
bool vipl_lock_slow(_Atomic int32_t *owner, int32_t me);

/* fdguard.c: every descriptor a provider keeps is made by one of these (a
 * high, registered number; see VipxFdAdopt) and closed by VipxFdClose. They
 * return what the call they wrap returns, with its errno. */
int vipl_fd_memfd(const char *name, unsigned flags);
int vipl_fd_socket(int domain, int type, int protocol);
int vipl_fd_socketpair(int domain, int type, int protocol, int sv[2]);
int vipl_fd_accept4(int fd, int flags);
int vipl_fd_reserve(void); /* a /dev/null to give up when out of descriptors */
int vipl_fd_eventfd(unsigned initval, int flags);
int vipl_fd_epoll(int flags);
int vipl_fd_pidfd(pid_t pid);
int vipl_fd_dup(int fd); /* F_DUPFD_CLOEXEC */
/* Pinned: VipxFdClose leaves it open until it is unpinned (a descriptor
 * many connections share, closed by its last user). 0 or -ENOMEM. */
int vipl_fd_pin(int fd, bool pin);
/* A close in a fork handler of vipl's, past the preload's close(). */
void vipl_fd_close_forked(int fd);
/* An own descriptor a forked child closes first thing, in fdguard's fork
 * handler, before any other handler makes descriptors of its own. */
void vipl_fd_fork_close(int fd);
/* ... and one it no longer does (received where a token goes, kept). */
void vipl_fd_fork_keep(int fd);
struct msghdr;
/* Adopts the SCM_RIGHTS descriptors; those from index fork_close_from on
 * (UINT_MAX: none) are closed in a forked child (another process's
 * sockets: fdguard.c). */
ssize_t vipl_fd_recvmsg(int sock, struct msghdr *mh, int flags, unsigned fork_close_from);

#endif /* VIPL_PROVIDER_H */
