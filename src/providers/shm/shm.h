/*
 * shm.h - the same-host shared-memory provider's private state.
 *
 * The sending process plays the NIC: VipPostSend validates the peer's posted
 * receive slot, copies the data into the peer's memory and writes the
 * completion, all with plain memory operations. See shm_layout.h for the
 * shared layout and docs/ARCHITECTURE.md for the whole path.
 */
#ifndef SHM_H
#define SHM_H

#include <sched.h>
#include <sys/types.h>

#include "provider.h"
#include "shm_layout.h"

/* A short spinlock: critical sections are a few hundred nanoseconds and
 * never block, so a mutex's syscall path would only cost. It holds its
 * owner's thread id: a thread killed inside a section (a seccomp filter
 * refusing the wake-up's system call) is noticed, and its lock taken over. */
typedef struct {
    _Atomic int32_t owner; /* 0: free */
} shm_lock_t;

static inline void shm_lock(shm_lock_t *l)
{
    int32_t me = vipl_tid(), free_ = 0;
    if (!atomic_compare_exchange_strong_explicit(&l->owner, &free_, me, memory_order_acquire,
                                                 memory_order_relaxed))
        vipl_lock_slow(&l->owner, me);
}

static inline void shm_unlock(shm_lock_t *l)
{
    atomic_store_explicit(&l->owner, 0, memory_order_release);
}

/* A full (StoreLoad) barrier. A locked RMW on a thread-local word costs the
 * same as a fence instruction and, unlike atomic_thread_fence, is modelled
 * by ThreadSanitizer. */
static inline void shm_full_barrier(void)
{
    static _Thread_local _Atomic uint32_t word;
    atomic_fetch_add_explicit(&word, 0, memory_order_seq_cst);
}

/*
 * A wake-up target: `armed` counts sleepers. A VI's own queues sleep on a
 * futex `word`; a CQ sleeps in poll() on the read end of a datagram
 * socketpair (`sock`), so it can be polled together with other descriptors.
 */
struct shm_wake {
    _Atomic uint32_t *armed;
    _Atomic uint32_t *word; /* futex mode */
    bool shared;            /* the word is in shared memory (another process wakes us) */
    int sock;               /* socket mode when >= 0: sleep on this end */
    int sock_tx;            /* and wake through this one */
};

/* Messages on a VI's connection socket. REQUEST and ACCEPT carry the
 * sender's four segment fds: ctl, rx, wake-armed page, wake-word page. */
enum shm_msg_type {
    SHM_MSG_REQUEST = 1,
    SHM_MSG_ACCEPT,
    SHM_MSG_REJECT,
    SHM_MSG_DISCONNECT,
    SHM_MSG_BROKEN,
    SHM_MSG_SHARED, /* another process holds our end too (fork): stop watching our pid */
    SHM_MSG_NUDGE,  /* look at the VI now (VipxViNudge) */
};

/* How a peer wakes the sender of a REQUEST or ACCEPT (shm_msg.wake_sock).
 * Between two users only FUTEX and NAMED: the sender's own VI's words, or
 * a byte sent to its CQ's wake-up socket by name (anyone may send there:
 * the name only), never a socket or page another user gave us, nor one
 * our other connections share. */
enum shm_wake_mode {
    SHM_WAKE_FUTEX = 0,  /* fd 2 holds the armed word, fd 3 the futex word */
    SHM_WAKE_SOCKET = 1, /* fd 2 holds the armed word, fd 3 is a datagram socket */
    SHM_WAKE_NAMED = 2,  /* fd 2 holds the armed word; send a byte to "sovia-w." + wake_id */
};

struct shm_msg {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint16_t reliability;
    uint16_t rdma_write;
    uint32_t max_transfer;
    uint32_t armed_off, word_off; /* offsets of the wake words in fds 2 and 3 */
    uint32_t wake_sock;           /* enum shm_wake_mode */
    uint16_t host_len, disc_len;  /* the sender's own address */
    uint8_t addr[16 + VIPL_MAX_DISC];
    uint64_t wake_id; /* SHM_WAKE_NAMED: the CQ's wake-up socket */
    /* Nonzero: ctl and rx are one memfd (fds 0 and 1 name it), rx at this
     * page-aligned offset, ctl before it (an inheritable VI: one
     * descriptor per end to keep for exec instead of two). */
    uint32_t rx_off;
    /* Nonzero: the sender's readiness hint page for us is the last fd, our
     * VI's bit in it is hint_slot - 1 (shm_hint.c). */
    uint32_t hint_slot;
};

/* What we map of the connected peer and how we reach it. */
struct shm_peer {
    const struct shm_ctl *ctl; /* read-only */
    size_t ctl_len;
    struct shm_rx *rx; /* we write data and completions here */
    size_t rx_len;
    bool merged; /* ctl and rx are one mapping of one file */
    const _Atomic uint32_t *wake_armed; /* the peer's receive wake-up */
    _Atomic uint32_t *wake_word;        /* futex mode */
    int wake_sock;                      /* socket mode when >= 0 */
    /* Socket mode: the peer CQ's arming (SHM_CQ_EPOCH) we last sent a byte
     * for, with bit 32 set; our own memory, so a peer cannot stop our
     * wake-ups of it. */
    _Atomic uint64_t rung_epoch;
    uint64_t wake_named;                /* SHM_WAKE_NAMED: its CQ's wake-up socket (0: none) */
    void *armed_map, *word_map;
    size_t armed_len, word_len;
    /* Socket mode: the armed page and the wake-up socket are the NIC's,
     * shared by every connection to that peer CQ (shm_shared.c). */
    struct shm_nic *nic;
    struct shm_shared *armed_sh, *sock_sh;
    /* The peer's geometry, copied once and validated at connect. */
    uint32_t depth, mask, reg_slots, data_off, rx_size;
    uint32_t posted_seen; /* last value read from ctl->live.posted */
    uint32_t consumed;    /* receive slots used so far */
    VIP_VI_ATTRIBUTES attrs;
    int sock;  /* the connection socket, watched by the agent */
    /* The peer process: its pidfd until the agent watches it, then the
     * agent's watch of it, one per peer process (shm_agent.c). watch_pid:
     * it was watched until the VI was unwatched (the exec export). */
    int pidfd;
    struct shm_pidwatch *pidw;
    bool watch_pid;
    pid_t pid;
    /* Inheritable VIs only: what the next image needs to map the peer again
     * (its message, and its ctl, rx, armed and word descriptors; -1 when
     * not kept, or the word is a socket, held in wake_sock). */
    struct shm_msg msg;
    int kept[4];
    /* The peer's readiness hint page for our connections (shm_hint.c):
     * the word and bit we set after each completion; NULL: none. */
    struct shm_shared *hint_sh;
    _Atomic uint64_t *hint_word;
    uint64_t hint_mask;
    uint32_t hint_words; /* 1 (all of the page's for SOVIA_VIPL_HINTS=all) */
};

/* A receive descriptor as the owner remembers it. */
struct shm_rq_entry {
    VIP_DESCRIPTOR *desc;
    uint32_t sidx;         /* shared index, valid when published */
    uint32_t local_status; /* nonzero: completes locally with this status */
    uint32_t total;
    uint32_t staging_off;   /* rx offset of the reservation */
    uint32_t staging_bytes; /* bytes reserved, including wrap-around waste */
    bool published, staged;
    uint32_t nsge;
    struct vipl_sge sge[VIPL_MAX_SEGS];
};

struct shm_cq;

struct shm_vi {
    struct vipl_vi core; /* first: the core allocates the whole structure */

    /* Our segments. Their addresses never change, even when a reconnect
     * replaces the memfds behind them (MAP_FIXED). */
    struct shm_ctl *ctl;
    struct shm_rx *rx;
    size_t ctl_len, rx_len;
    int ctl_fd, rx_fd;
    /* Inheritable VIs: ctl and rx are one memfd (ctl_fd; rx_fd is -1) and
     * one mapping, rx right after ctl. Decided at the first creation. */
    bool merged;
    uint32_t depth, mask;
    uint32_t staging_off, staging_len, arena_off, arena_len;
    uint8_t *arena;

    /* Receive queue (rq_lock). */
    shm_lock_t rq_lock;
    struct shm_rq_entry *rq;
    uint32_t rq_head, rq_published;
    _Atomic uint32_t rq_tail;
    _Atomic uint32_t flush_upto; /* receives below this index complete as flushed */
    uint64_t staging_alloc, staging_free;
    uint64_t staging_released; /* below this, freed pages went back (shm_recv.c) */
    /* receive completions reported by the CQ (CQ lock). Atomic: a shared
     * record's load (shm_sync.c) resets it under the VI's locks while a
     * handler thread may still poll the CQ of a connection a fork made
     * SINGLE (it skips that connection's packets; TSan saw the race). */
    _Atomic uint32_t cq_reported;

    /* Send queue (sq_lock). Sends complete inside VipPostSend. */
    shm_lock_t sq_lock;
    VIP_DESCRIPTOR **sq;
    uint32_t sq_head, sq_tail;
    _Atomic uint32_t sq_armed, sq_word;

    struct shm_peer *peer; /* NULL unless connected (changes under sq_lock) */
    VIPX_VI_STATS stats;
    bool agent_watched;
    uint64_t agent_id; /* this watch's, in the agent's epoll events (shm_agent.c) */
    bool shared; /* SHM_MSG_SHARED sent (sq_lock) */
    /* Connected to another user through a CQ (SHM_WAKE_NAMED): the peer
     * reads our own ctl's recv_armed, which follows the CQ's armed count
     * (CQ lock). */
    bool relay;
    /* VIPX_VI_INHERITABLE: descriptors are kept for VipxViExport, and ctl
     * is not sealed against writing (a new image must write it again). */
    bool inheritable;
    /* VipxViForgetExport: an inheritable VI that keeps no descriptor (no
     * next image will take it), as one that is not inheritable. */
    bool no_export;
    uint32_t import_next, import_left; /* posted receives still to re-attach */
    /* Our slot in ctl->live.holder (index + 1; 0: none): this process holds
     * the VI since a fork and sleeps on a CQ of its own (shm_cq.c). */
    uint8_t holder;
    /* A request sent and not answered yet (shm_connect_start; req_open:
     * false in a VI made any way, an imported one included): the
     * listener's socket, its process and whether our armed word follows
     * the CQ meanwhile (relay_on). */
    bool req_open;
    int req_sock, req_pidfd;
    pid_t req_pid;
    bool req_relay, req_foreign;
    /* Our readiness hint slot (CQ lock; shm_hint.c); hint_on: the peer
     * sets its bit, so a waiter may leave the VI to the hints. */
    struct shm_hintpage *hint_page;
    uint32_t hint_slot;
    bool hint_on;
};

struct shm_cq {
    struct vipl_cq core;
    struct shm_cq *next_all; /* the process's CQs (shm_cq.c: fork) */
    pthread_mutex_t lock;
    struct shm_vi **send_ring; /* send completions, in order */
    uint32_t cap, head, tail;
    struct shm_vi **rvis; /* VIs whose receive queue feeds this CQ */
    uint32_t nr, rcap, scan;
    int armed_fd;
    bool inheritable; /* the armed page stays writable for a new image */
    _Atomic uint32_t *armed;
    /* wake_rx: a datagram socket bound to the abstract name "sovia-w." +
     * wake_id in hex; wake_tx: one connected to it, which peers get. */
    int wake_rx, wake_tx;
    uint64_t wake_id;
    /* VIs this process holds since a fork, woken through their holder slot
     * (shm_vi.holder) rather than the peer's copy of the parent's wake_tx. */
    struct shm_vi **svis;
    uint32_t ns, scap;
    /* Some sleeper of ours may not be woken (no slot, no socket): sleep in
     * slices (VipxCQPollFds gives no doorbell). */
    bool lossy;
    uint32_t nrelay; /* attached VIs with `relay` (CQ lock) */
    uint32_t narmed; /* sleepers armed, counted under the CQ lock (shm_cq_relay) */
    struct shm_hintpage **hint; /* one readiness hint page per peer process (shm_hint.c) */
    uint32_t nhint, hintcap;
};

/* A requester's socket taken from the listening socket whose REQUEST has
 * not come yet: waited for together with every other, so one that says
 * nothing holds nobody up. */
#define SHM_ARRIVALS 64
struct shm_arrival {
    int sock;
    pid_t pid;
    uid_t uid;
    bool foreign;
    uint64_t deadline_ns; /* CLOCK_MONOTONIC: dropped after */
};

/* A listening discriminator. Waiters hold references, so VipxUnlisten can
 * wake them (shutdown) without closing a descriptor they still poll. */
struct shm_listener {
    struct shm_listener *next;
    uint8_t disc[VIPL_MAX_DISC];
    uint16_t disc_len;
    int fd;
    atomic_int reserve; /* /dev/null, given up to refuse when out of fds */
    unsigned refs;     /* the NIC's list holds one while listed */
    bool any_user;     /* takes requests of other users (VipxListenAnyUser) */
    atomic_bool closed; /* unlistened: waiters return */
    atomic_uint taking; /* requests taken and not yet accepted or refused */
    pthread_mutex_t alock; /* arrivals */
    struct shm_arrival arrivals[SHM_ARRIVALS];
    unsigned narrivals;
};

struct shm_agent;

struct shm_shared;

struct shm_nic {
    pthread_mutex_t lock; /* listeners */
    struct shm_listener *listeners;
    struct shm_agent *agent;
    size_t page;
    /* What peers give every connection alike, held once (shm_shared.c). */
    pthread_mutex_t shared_lock;
    struct shm_shared **shared;
    size_t nshared, capshared;
};

static inline struct shm_vi *shm_vi(struct vipl_vi *vi)
{
    return (struct shm_vi *)vi;
}

static inline struct shm_cq *shm_cq(struct vipl_cq *cq)
{
    return (struct shm_cq *)cq;
}

static inline struct shm_nic *shm_nic(struct vipl_nic *nic)
{
    return nic->prov_nic;
}

/* shm_segment.c */
int shm_memfd(const char *name, size_t len);
int shm_seal(int fd, bool owner_only);
size_t shm_sealed_size(int fd); /* a peer memfd's size if it cannot shrink or grow; else 0 */
void *shm_map_fixed(void *at, int fd, size_t len);
int shm_vi_segments_create(struct shm_vi *vi);
void shm_vi_segments_destroy(struct shm_vi *vi);
int shm_peer_map(struct shm_peer *peer, int fds[4], const struct shm_msg *m,
                 struct shm_nic *snic);
void shm_peer_unmap(struct shm_peer *peer);
void shm_peer_free(struct shm_peer *peer); /* unmap, close its descriptors, free */

/* The data path reports a connection-breaking error as a VIP_ERROR_CODE in
 * an int; this marks "none" (VIP_ERROR_POST_DESC is 0). */
#define SHM_NO_FAILURE (-1)

/* The rx offset of a buffer in the VI's arena; false if it is not inside. */
static inline bool shm_arena_offset(const struct shm_vi *vi, const void *addr, uint32_t len,
                                    uint32_t *off)
{
    uintptr_t a = (uintptr_t)addr, base = (uintptr_t)vi->arena;
    if (!vi->arena || a < base || len > vi->arena_len || a - base > vi->arena_len - len)
        return false;
    *off = vi->arena_off + (uint32_t)(a - base);
    return true;
}

/* shm_inherit.c */
VIP_RETURN shm_vi_export(struct vipl_vi *vi, VIPX_STATE *st, VIP_ULONG *offsets, VIP_ULONG *n);
VIP_RETURN shm_vi_import(struct vipl_vi *vi, const VIPX_STATE *st);
VIP_RETURN shm_vi_import_recv(struct vipl_vi *vi, struct vipl_wr *wr);
void shm_vi_forget_export(struct vipl_vi *vi);
/* shm_sync.c */
VIP_RETURN shm_rq_posted(struct shm_vi *vi, VIP_ULONG *offsets, VIP_ULONG *n, uint32_t *first);
VIP_RETURN shm_vi_sync_save(struct vipl_vi *vi, VIPX_STATE *st, VIP_ULONG *offsets, VIP_ULONG *n);
VIP_RETURN shm_vi_sync_load(struct vipl_vi *vi, const VIPX_STATE *st);
VIP_RETURN shm_cq_export(struct vipl_cq *cq, VIPX_STATE *st);
VIP_RETURN shm_cq_import(struct vipl_cq *cq, const VIPX_STATE *st);
int shm_cq_armed_page(struct shm_cq *cq, int fd); /* maps (fd >= 0) or makes the page */
VIP_VI_ATTRIBUTES shm_attrs_of(const struct shm_msg *m);

/* shm_vi.c */
void shm_vi_export_regs(struct shm_vi *vi);
bool shm_vi_recv_ready(struct shm_vi *vi, uint32_t idx);
/* A fatal error on the connection: tell the peer, fail our VI. */
void shm_vi_break(struct shm_vi *vi, VIP_ERROR_CODE code, VIP_DESCRIPTOR *desc);

/* shm_send.c / shm_recv.c */
VIP_RETURN shm_post_send(struct vipl_vi *vi, struct vipl_wr *wr);
VIP_RETURN shm_send_done(struct vipl_vi *vi, VIP_DESCRIPTOR **desc);
VIP_RETURN shm_post_recv(struct vipl_vi *vi, struct vipl_wr *wr);
VIP_RETURN shm_recv_done(struct vipl_vi *vi, VIP_DESCRIPTOR **desc);
void shm_rq_flush_all(struct shm_vi *vi);

/* shm_cq.c */
VIP_RETURN shm_create_cq(struct vipl_cq *cq);
void shm_destroy_cq(struct vipl_cq *cq);
VIP_RETURN shm_resize_cq(struct vipl_cq *cq, VIP_ULONG entries);
VIP_RETURN shm_cq_done(struct vipl_cq *cq, struct vipl_vi **vi, VIP_BOOLEAN *recvq);
int shm_cq_attach(struct shm_cq *cq, struct shm_vi *vi);
void shm_cq_detach(struct shm_cq *cq, struct shm_vi *vi);
bool shm_cq_push_send(struct shm_cq *cq, struct shm_vi *vi);
void shm_cq_list(struct shm_cq *cq); /* a new or imported CQ, for fork */
/* Arms (+1) or disarms (-1) the holder slots of the CQ's VIs held since a
 * fork. */
void shm_cq_arm_holders(struct shm_cq *cq, int delta);
/* This process's slot in vi's holder table goes (the VI is released). */
void shm_holder_leave(struct shm_vi *vi);
/* An imported VI on an imported CQ: its slot, if it had one before exec. */
void shm_holder_find(struct shm_cq *cq, struct shm_vi *vi);
void shm_cq_relay(struct shm_cq *cq, struct shm_vi *vi, bool on);

/* shm_hint.c: readiness hints. offer: a slot for vi in the CQ's page for
 * peer `pid`; the page's fd to send (-1: none) and *slot (slot + 1, 0:
 * none). confirm: after the peer's message, whether it sets the bit. */
struct shm_hintpage;
int shm_hint_offer(struct shm_vi *vi, pid_t pid, uint32_t *slot);
void shm_hint_confirm(struct shm_vi *vi, const struct shm_msg *peer_msg);
void shm_hint_release(struct shm_vi *vi);
void shm_hint_self(struct shm_vi *vi); /* a local event: our own bit */
VIP_RETURN shm_cq_hints(struct vipl_cq *cq, void **cookies, unsigned long max,
                        unsigned long *count);
bool shm_vi_hinted(struct vipl_vi *vi);
void shm_hint_forked(struct shm_cq *cq);
void shm_hint_destroy(struct shm_cq *cq);
/* The sender's side: maps the page a peer offered (takes *fd) and sets
 * our bit after a completion. */
void shm_hint_map(struct shm_peer *peer, struct shm_nic *snic, int *fd, uint32_t slot);
static inline void shm_hint_set(struct shm_peer *p)
{
    for (uint32_t i = 0; i < p->hint_words; i++)
        atomic_fetch_or_explicit(&p->hint_word[i], p->hint_mask, memory_order_release);
}

/* shm_cred.c */
bool shm_peer_cred(int sock, pid_t *pid, uid_t *uid);
bool shm_process_is_self(pid_t pid, int pidfd);
int shm_token_wrap(int token);

/* shm_wake.c */
/* A CQ's wake-up sockets (see struct shm_cq); 0 or -errno. */
int shm_wake_sockets(int *rx, int *tx, uint64_t *id);
bool shm_wake_id_of(int rx, uint64_t *id); /* from the name rx is bound to */
int shm_ring_socket(void); /* the process's socket for waking holders, made once */
struct shm_wake shm_wake_of(void *obj, enum vipl_queue q);
void shm_wake_peer(struct shm_peer *peer);
void shm_wake_local(struct shm_wake w);
uint32_t shm_wait_prepare(void *obj, enum vipl_queue q);
int shm_wait_sleep(void *obj, enum vipl_queue q, uint32_t token, const struct timespec *dl);
void shm_wait_finish(void *obj, enum vipl_queue q);
void shm_wait_wake(void *obj, enum vipl_queue q);
int shm_vi_sleep_arm(struct vipl_vi *vi, bool arm, _Atomic uint32_t **word, uint32_t *token);
void shm_vi_sleep_kick(struct shm_vi *vi);
bool shm_recv_may_be_ready(struct shm_vi *vi); /* lock-free */
bool shm_cq_wait_drain(struct vipl_cq *cq);

/* shm_conn.c */
VIP_RETURN shm_connect_wait(struct vipl_nic *nic, const VIP_NET_ADDRESS *local,
                            const struct timespec *deadline, VIP_NET_ADDRESS *remote,
                            struct vipl_conn *conn);
VIP_RETURN shm_connect_accept(struct vipl_conn *conn, struct vipl_vi *vi);
void shm_connect_reject(struct vipl_conn *conn);
VIP_RETURN shm_connect_request(struct vipl_vi *vi, const VIP_NET_ADDRESS *local,
                               const VIP_NET_ADDRESS *remote, const struct timespec *deadline,
                               VIP_VI_ATTRIBUTES *rattrs);
VIP_RETURN shm_connect_start(struct vipl_vi *vi, const VIP_NET_ADDRESS *local,
                             const VIP_NET_ADDRESS *remote);
VIP_RETURN shm_connect_finish(struct vipl_vi *vi, const struct timespec *deadline,
                              VIP_VI_ATTRIBUTES *rattrs);
void shm_connect_abandon(struct vipl_vi *vi);
bool shm_listen_waiting(struct vipl_nic *nic, const VIP_NET_ADDRESS *local);
VIP_RETURN shm_disconnect(struct vipl_vi *vi);
VIP_RETURN shm_share_vi(struct vipl_vi *vi);
VIP_RETURN shm_nudge_vi(struct vipl_vi *vi);
void shm_release_vi(struct vipl_vi *vi);
VIP_RETURN shm_listen(struct vipl_nic *nic, const VIP_NET_ADDRESS *local, bool any_user);
VIP_RETURN shm_unlisten(struct vipl_nic *nic, const VIP_NET_ADDRESS *local);
void shm_close_listeners(struct shm_nic *snic);
void shm_forget_listeners(struct shm_nic *snic); /* in a forked child */
/* Best-effort one-message notice to the peer (BROKEN / DISCONNECT). */
void shm_conn_notify(struct shm_peer *peer, enum shm_msg_type type);

/* shm_shared.c: a peer's CQ armed page (map_len: mapped read-only) or
 * wake-up socket (map_len 0), once per NIC whatever the connections. get
 * takes *fd (set to -1; closed if an entry for that file exists); NULL if
 * out of memory or the mapping fails (*fd is then left to the caller). */
void shm_shared_init(struct shm_nic *snic);
struct shm_shared *shm_shared_get(struct shm_nic *snic, int *fd, size_t map_len, bool writable);
int shm_shared_fd(const struct shm_shared *e);
void *shm_shared_map(const struct shm_shared *e);
void shm_shared_put(struct shm_nic *snic, struct shm_shared *e);
void shm_shared_after_fork(struct shm_nic *snic);
void shm_shared_destroy(struct shm_nic *snic);

/* shm_agent.c */
struct shm_agent *shm_agent_start(void);
void shm_agent_stop(struct shm_agent *agent);
int shm_agent_watch(struct shm_agent *agent, struct shm_vi *vi);
void shm_agent_unwatch(struct shm_agent *agent, struct shm_vi *vi);
/* Whether the peer process still runs, by its pidfd (false without one). */
bool shm_agent_peer_runs(struct shm_agent *agent, const struct shm_peer *peer);
/* Its epoll set and stop eventfd; up to cap, returns the count. */
/* In a forked child: a fresh agent watching the NIC's connected VIs. */
struct shm_agent *shm_agent_after_fork(struct shm_agent *old, struct vipl_nic *nic);
/* In a forked child: the parent's agent, its lock made new; its epoll set
 * (the parent's too) is no longer changed here. */
void shm_agent_forked(struct shm_agent *agent);

#endif /* SHM_H */
