/*
 * sock.h - the sovia sockets layer's internal state.
 *
 * One socket is a `struct sov_sock` found from its descriptor through a
 * lock-free table; a connected socket owns a `struct sov_conn`: one VI, its
 * pre-posted receive buffers (in the VI's arena, so the peer writes them
 * directly) and the protocol state of docs/PROTOCOL.md. Functions of the
 * sockets layer return -1 with errno set (or a byte count); internal
 * helpers return 0 or a negative errno.
 */
#ifndef SOVIA_SOCK_H
#define SOVIA_SOCK_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sovia.h>
#include <vipl.h>
#include <vipl_ext.h>

#define SOV_EXPORT __attribute__((visibility("default")))

/* ---- Packets: type and piggybacked ACK count in the immediate data ------ */

enum sov_pkt {
    PKT_XAUTH = 0, /* sovia run across hosts: HELLO, ACCEPT or CONFIRM (xhost.c) */
    PKT_DATA = 1,
    PKT_ACK = 2,
    PKT_WAKEUP = 3,
    PKT_FIN = 4,
    PKT_FINACK = 5,
    PKT_REDIRECT = 6, /* sovia run: a ticket in bits 3-31 (docs/PROTOCOL.md) */
    PKT_MIGRATE = 7,  /* sovia run: back to the kernel connection (migrate.c) */
};

#define PKT_TYPE_MASK 0x7u
#define PKT_URG 0x8u /* DATA: its last byte is urgent (MSG_OOB, TCP's mark) */
#define PKT_ACKS_SHIFT 8
#define PKT_ACKS_MAX 0xffffu

static inline uint32_t pkt_imm(enum sov_pkt type, uint32_t acks)
{
    return (uint32_t)type | acks << PKT_ACKS_SHIFT;
}

/* WAKEUP announces the sender's receive window (DATA buffers) and how many
 * ACK packets it has buffers for, 12 bits each. */
#define WAKEUP_WINDOW_SHIFT 8
#define WAKEUP_SLOTS_SHIFT 20
#define WAKEUP_FIELD_MASK 0xfffu
#define WAKEUP_RESERVED_MASK 0xf8u /* bits 3-7 */

/* MIGRATE: what of the migration it is (bits 3-4), bits 5-7 zero */
#define MIG_SUB_SHIFT 3
#define MIG_SUB_MASK 0x3u
#define MIG_RESERVED_MASK 0xe0u
enum { MIG_REQUEST = 0, MIG_ACK = 1, MIG_END = 2 };
/* Our end's migration (sov_conn.mig: MIG_ENDED once our END went), and
 * the peer's (peer_mig). */
enum { MIG_NONE, MIG_ASKED, MIG_RETURNING, MIG_ENDED, MIG_DONE };
enum { PMIG_NONE, PMIG_ASKED, PMIG_ENDED };

/* REDIRECT: the ticket of the process that accepted the kernel connection */
#define REDIRECT_TICKET_SHIFT 3
#define REDIRECT_TICKET_MAX 0x1fffffffu

/* ---- A spinlock for the data path ---------------------------------------- */

/* Socket critical sections are short and never sleep; an uncontended
 * pthread mutex would double the layer's cost per message. The lock holds
 * its owner's thread id, so a waiter notices an owner killed inside its
 * section (a seccomp filter) and takes the lock over (VipxLockSlow). */
typedef struct {
    _Atomic int32_t owner; /* 0: free */
} sov_lock_t;

/* This thread's id, cached (the forked child's refreshed by the fork
 * handler). */
extern __thread pid_t sov_tid_cache __attribute__((tls_model("initial-exec")));
static inline int32_t sov_tid(void)
{
    if (__builtin_expect(!sov_tid_cache, 0))
        sov_tid_cache = gettid();
    return sov_tid_cache;
}

/* The socket locks this thread holds. `sovia run`'s signal trampoline
 * defers a program's handler that would run while one is held (a handler
 * may longjmp out, as iperf3's SIGINT handler does, and leave the lock
 * held for ever): it marks the signal here, and the last unlock raises it
 * again, so it is delivered at that point instead. Only this thread and
 * its signal handlers touch these: volatile, not atomic, on the data path. */
extern __thread volatile unsigned sov_locks_held __attribute__((tls_model("initial-exec")));
extern __thread _Atomic uint64_t sov_signals_deferred __attribute__((tls_model("initial-exec")));
void sov_raise_deferred(void);

/* False: what the lock protects was left half done by a dead thread. */
static inline bool sov_lock(sov_lock_t *l)
{
    sov_locks_held++;
    int32_t me = sov_tid(), free_ = 0;
    return atomic_compare_exchange_strong_explicit(&l->owner, &free_, me, memory_order_acquire,
                                                   memory_order_relaxed) ||
           VipxLockSlow(&l->owner, me); /* false: taken over from a dead owner */
}

/* A spinning wait of this thread holds signals back (wait.c: libsovia
 * alone, no count of handlers); they go through at the call's end, the
 * release of its last lock. */
extern __thread volatile bool sov_signals_held __attribute__((tls_model("initial-exec")));
void sov_signals_let_go(void);

/* Counted as held only while held: a deferred signal is raised if it fails. */
static inline void sov_locks_release(void)
{
    if (--sov_locks_held == 0) {
        if (atomic_load_explicit(&sov_signals_deferred, memory_order_relaxed))
            sov_raise_deferred();
        if (__builtin_expect(sov_signals_held, 0))
            sov_signals_let_go();
    }
}

static inline void sov_unlock(sov_lock_t *l)
{
    atomic_store_explicit(&l->owner, 0, memory_order_release);
    sov_locks_release();
}

/* The lock if it is free. */
static inline bool sov_trylock(sov_lock_t *l)
{
    sov_locks_held++;
    int32_t free_ = 0;
    if (atomic_compare_exchange_strong_explicit(&l->owner, &free_, sov_tid(), memory_order_acquire,
                                                memory_order_relaxed))
        return true;
    sov_locks_release();
    return false;
}

/* ---- A connection -------------------------------------------------------- */

struct sov_conn {
    VIP_VI_HANDLE vi;
    /* The socket its VI names for readiness hints (the preload's epoll,
     * VipxViHintCookie); NULL: not named yet. */
    void *hint_cookie;
    /* Threads in a futex sleep on the VI's word (the preload's epoll):
     * sov_conn_destroy wakes them and waits for them to let go of it. */
    atomic_uint sleepers;
    struct sov_config cfg; /* snapshot: the connection's w, t, MTU, modes */
    unsigned nrecv;        /* P pre-posted receive buffers */
    unsigned nsend;        /* send descriptors */
    uint8_t *arena;        /* nrecv buffers of cfg.mtu bytes, written by the peer */
    VIP_MEM_HANDLE arena_mh;
    VIP_DESCRIPTOR *rdesc, *sdesc; /* receive and send descriptors */
    VIP_MEM_HANDLE desc_mh;
    uint8_t *sbuf; /* copy buffers: one MTU per send descriptor, registered */
    VIP_MEM_HANDLE sbuf_mh;
    uint8_t *cbuf; /* combining buffer (one MTU), registered */
    VIP_MEM_HANDLE cbuf_mh;
    size_t clen;            /* bytes waiting in cbuf */
    uint64_t cdeadline_ns;  /* when cbuf must go out */

    /* recvq: receive buffers holding unread DATA, in order (P + 1 slots). */
    unsigned *recvq;
    unsigned rq_head, rq_count;
    size_t rq_off;   /* bytes already read from the head buffer */
    size_t rx_bytes; /* unread bytes in recvq */

    unsigned credits;     /* DATA packets the peer can still take */
    unsigned to_ack;      /* buffers reposted but not yet acknowledged (d) */
    unsigned peer_window; /* the peer's w, from its WAKEUP (0 before) */
    unsigned ack_every;   /* our effective t: our ACKs must fit the peer's buffers */
    size_t send_mtu;      /* largest DATA the peer takes: min of both MTUs */
    unsigned s_next;   /* next send descriptor */
    unsigned s_reaped; /* send descriptors dequeued with VipSendDone */
    bool send_failed;  /* a reaped send had failed: the next post reports it */
    bool inflight;     /* a send may not have completed yet (never on shm) */
    int deferred;      /* a read buffer whose repost waits (-1: none), see consumed() */

    bool wr_shut;     /* our FIN is sent (or owed after the combining buffer) */
    bool fin_acked;   /* the peer acknowledged our FIN */
    bool peer_fin;    /* the peer's FIN arrived: end of stream after recvq */
    bool reset;       /* the connection broke: ECONNRESET */
    bool reset_told;  /* ECONNRESET was reported once */
    /* Every process on the other side closed or exited without a FIN (the
     * VI ended with PeerClosed): end of stream, as TCP's FIN; sends fail
     * with EPIPE. */
    bool peer_gone;
    /* Held by more than one process since a fork: closing lets go of this
     * process's copy (VipxViRelease) and says nothing to the peer, whose
     * stream ends when the last holder lets go. */
    bool shared;
    /* Under sovia run, the VI kept nothing for a next image (VipxViForgetExport:
     * the program's socket was close-on-exec when published): a descriptor
     * of it that survives exec after all migrates it first (migrate.c). */
    bool no_export;
    /* Shared with a record (shared.c): the state at rest lives in memory
     * every holder maps, so any of them may use the connection. */
    struct sov_rec *rec;
    int rec_fd;
    size_t rec_len;
    uint32_t rec_seen;  /* the record's version this copy matches */
    bool rec_forking;   /* counted once for the fork under way */
    uint64_t rec_reaped_ns; /* when we last looked for holders gone (shared.c) */
    uint32_t rec_sections;
    /* sovia run: bytes an accepted connection was given before the client
     * answered our WAKEUP (a kernel socket takes them at once). They go as
     * the first DATA when it pairs, or to the kernel socket if the client
     * falls back (transparent.c); at most one packet. */
    uint8_t *early;
    uint32_t early_len;
    /* sovia run: the client's connection waits for the server's accept()
     * to pair it with the kernel connection (docs/ARCHITECTURE.md). */
    bool tentative;
    uint64_t tentative_since_ns;
    /* sovia run, a non-blocking connect(): the VI's request went to the
     * server's listener and its answer (ACCEPT) has not been taken yet
     * (sov_tp_connect_finish); -errno once it failed (falls back). */
    bool connecting;
    int connect_err;
    /* sovia run: the listening process says another of its processes
     * accepted our kernel connection; reconnect to that one (its ticket).
     * Once: a connection made by following one takes no other. */
    uint32_t redirect;
    bool redirected;
    /* sovia run across hosts (xhost.c): where the proof of this
     * connection stands (enum sov_xh), and what it is bound to. */
    uint8_t xh;
    struct sov_xproof *xp;
    /* On the far NIC (sov_g.far, far.c): a peer on another host while
     * this process's own NIC is shm. */
    bool far;
    /* TCP urgent data (MSG_OOB): one mark, as TCP keeps one urgent
     * pointer, a newer one replacing it. urg_ahead: unread bytes before
     * the urgent byte, which stays in recvq (read in band with
     * SO_OOBINLINE, else passed over); urg_valid until recv(MSG_OOB) takes
     * urg_byte. The mark goes once the reader is past it. */
    bool urg, urg_valid;
    uint8_t urg_byte;
    size_t urg_ahead;
    /* sovia run: the connection going back to its kernel socket in
     * mid-stream (migrate.c). mig: ours (we leave); peer_mig: the peer's.
     * ret: what we owe the kernel connection before our program's next
     * bytes: the peer's unread ones it gave back, then, the last ret_tail
     * bytes until its END, what we had combined; ret_off of it is out. */
    uint8_t mig, peer_mig;
    /* Our side moves because the peer asked (our REQUEST answered its
     * own): sov_mig_step moves it, not our program. */
    bool mig_auto;
    uint32_t gb_len; /* read ahead to give back, in sbuf, waiting for a credit */
    /* The kernel socket is shut for writing: our program shut down while
     * carried (wr_shut), and the stream's send side became the kernel's
     * (sov_mig_kernel_fin). Not before: a peer that leaves gives back
     * bytes we must still write there. */
    bool kfin;
    uint64_t mig_deadline_ns; /* the peer's END is due (it asked) */
    uint8_t *ret;
    size_t ret_len, ret_off, ret_cap, ret_tail;
    struct sov_stats stats;
    /* What this process moved itself, for its exit record (stats.c): the
     * bytes sent since it got its copy (stats' count then: base_sent),
     * and the bytes its reads took from the stream (whichever holder
     * handled their arrival). */
    uint64_t base_sent, taken;
};

/* recvq slot of the k-th unread buffer (k <= nrecv; rq_head < nrecv + 1),
 * without a division: it ran on every packet, several per message. */
static inline unsigned sov_rq_slot(const struct sov_conn *c, unsigned k)
{
    unsigned at = c->rq_head + k;
    return at > c->nrecv ? at - (c->nrecv + 1) : at;
}

/* ---- A socket ---------------------------------------------------------- */

enum sov_kind { SK_NEW, SK_LISTENING, SK_CONNECTING, SK_CONNECTED };

struct sov_listener;

struct sov_sock {
    int fd; /* the placeholder descriptor the application holds */
    sov_lock_t lock;
    pthread_mutex_t wait_lock; /* for sleeping on `cond` (accept, HANDLER, NOTIFY) */
    pthread_cond_t cond;
    bool dead;    /* closed: the descriptor no longer names this socket */
    /* sov_close took it (not a fallback): a call that was waiting in it
     * ends with EBADF, never on the kernel socket (sov_tp_closed_meanwhile) */
    bool closing;
    bool tp_client; /* sovia run: our connect() made it (s->peer: where to) */
    unsigned gen; /* bumped when the structure is recycled */
    atomic_uint events; /* bumped by HANDLER/NOTIFY threads after handling */
    enum sov_kind kind;
    int domain;
    bool nonblock;
    bool rd_shut;    /* SHUT_RD: reads return 0, data is discarded */
    bool app_closed; /* sov_close was called: the close thread finishes it */
    bool transparent; /* `fd` is the program's kernel TCP socket (sovia run) */
    /* Closed by the program: `fd` is our copy of its kernel socket, which
     * sov_sock_free closes (sov_mig_keep_kernel). */
    bool fd_kept;
    unsigned nfds;    /* descriptors naming this socket (dup) */
    bool tp_waiting;  /* a tentative client connection, see transparent.c */

    struct sockaddr_storage local, peer;
    socklen_t local_len, peer_len;
    bool bound;
    int port_fd; /* holds the port reservation */

    /* options */
    bool nodelay, reuseaddr, keepalive;
    struct linger linger;
    bool oobinline; /* SO_OOBINLINE (under sovia run, the kernel socket's, mirrored) */
    /* sovia run: the program named an owner for SIGURG (F_SETOWN): the
     * service thread handles its packets while the program is elsewhere,
     * as the kernel signals urgent data whatever the program does. */
    bool owned;
    int sndbuf;
    int so_error;
    struct sov_config cfg; /* taken at creation; SO_RCVBUF may change w */

    struct sov_listener *lst;
    struct sov_conn *conn;
    struct sov_sock *next_closing; /* the close thread's list (and the pool) */
    struct sov_sock *next_timed;   /* the combining timer's list */
    struct sov_sock *next_pairing; /* the service thread's pairing list */
    struct sov_sock *next_forking; /* locked across fork() (sov_before_fork) */
    bool forking;
    bool in_pairing;
    atomic_bool timed; /* written under sov_g.lock; read by a packet's handler */
    bool migrating;    /* the service thread pushes what it owes the kernel */
    uint64_t close_deadline_ns;
    struct sov_conn *rec_entered; /* its record is held by this section */
    uint32_t tally_gen; /* counted once per walk of stats.c (dup'ed names) */
};

/* shared.c: a connection held by several processes. Every section of a
 * socket's lock is, for such a connection, also a section of its record's
 * lock: it starts from the state the last holder left and leaves its own. */
void sov_shared_enter(struct sov_sock *s);
void sov_shared_leave(struct sov_sock *s);

/* The lock was taken over from a thread that died inside a section: its
 * connection cannot be trusted (the others get ECONNRESET). */
void sov_sock_salvage(struct sov_sock *s);

static inline void sov_sock_lock(struct sov_sock *s)
{
    bool intact = sov_lock(&s->lock);
    if (__builtin_expect(s->conn && s->conn->rec, 0))
        sov_shared_enter(s);
    if (__builtin_expect(!intact, 0))
        sov_sock_salvage(s);
}

static inline void sov_sock_unlock(struct sov_sock *s)
{
    if (__builtin_expect(s->rec_entered != NULL, 0))
        sov_shared_leave(s);
    sov_unlock(&s->lock);
}

/* The lock if it is free (a timer must not wait on a busy socket). */
static inline bool sov_sock_trylock(struct sov_sock *s)
{
    if (!sov_trylock(&s->lock))
        return false;
    if (__builtin_expect(s->conn && s->conn->rec, 0))
        sov_shared_enter(s);
    return true;
}

/* ---- Process-wide state ---------------------------------------------------- */

struct sov_nic {
    VIP_NIC_HANDLE nic;
    VIP_PROTECTION_HANDLE ptag;
    VIP_CQ_HANDLE cq;
};

struct sov_global {
    VIP_NIC_HANDLE nic;
    VIP_PROTECTION_HANDLE ptag;
    VIP_CQ_HANDLE cq; /* every connection's receive queue reports here */
    /* sovia run with a cluster key beside shm: the fabric NIC for peers on
     * other hosts (far.c), opened on first need; usable once far_open. */
    struct sov_nic far;
    atomic_bool far_open;
    struct sov_config cfg;
    pthread_mutex_t lock; /* config, closing list, service thread */
    pthread_cond_t service_cond;
    pthread_t service_thread;
    bool service_running;
    /* The end of the service thread's timed sleep (0: awake, or asleep
     * with no timer), and whether a close came since its last pass. */
    uint64_t service_until_ns;
    bool closing_added;
    struct sov_sock *closing;
    struct sov_sock *timed; /* connected sockets that may hold combined data */
    struct sov_sock *pairing; /* sovia run connections not yet paired */
    struct sov_sock *pairing_taken; /* the part the service thread works through */
    atomic_uint open_conns;
    atomic_bool sockets_created;
    pthread_t handler_thread;
    bool handler_running;
    /* sovia run: connections can be handed to the next program image
     * (inherit.c); inherited_cq, when set, is the CQ the last image left. */
    bool inheritable;
    VIPX_STATE *inherited_cq;
    pid_t pid; /* this process (a vfork child sees another pid) */
    /* Totals for `sovia run`'s exit record (SOVIA_STAT_LOG), this
     * process's own (a fork child starts again: sov_tally_forked). */
    atomic_ullong bytes_sent, bytes_received; /* of destroyed connections */
    atomic_uint tp_paired, tp_fell_back, tp_kernel, tp_redirected;
    atomic_uint tp_paired_far; /* of tp_paired: on the far NIC */
    atomic_uint tp_short; /* of tp_kernel: left to it as too short to carry (shortconn.c) */
    atomic_uint tp_migrated; /* carried connections moved back to the kernel */
    /* sovia run: no new connection is carried (the process sandboxed
     * itself: sovia's system calls may no longer be allowed). */
    atomic_bool inert;
    bool nudged; /* a peer nudged a VI: the service thread looks (sov_g.lock) */
};

extern struct sov_global sov_g;

/* A connection's NIC and protection tag: the process's own or the far one. */
static inline VIP_NIC_HANDLE sov_conn_nic(const struct sov_conn *c)
{
    return c->far ? sov_g.far.nic : sov_g.nic;
}
static inline VIP_PROTECTION_HANDLE sov_conn_ptag(const struct sov_conn *c)
{
    return c->far ? sov_g.far.ptag : sov_g.ptag;
}

/* far.c: the far NIC. sov_far_open opens it once (libfabric is loaded
 * then, about 370 ms here) and says whether it is usable in this process
 * (0 or -errno; a fork child's is its parent's: -ENETUNREACH). Every CQ
 * sleep arms and disarms through sov_cq_arm/sov_cq_disarm, which take the
 * far CQ too once it is open (drained: the caller's poll saw the CQ's
 * descriptor; quiet: it did not). */
int sov_far_open(void);
void sov_far_forked(void);
const char *sov_far_provider_name(void); /* "" until it opened */
void sov_cq_arm(void);
void sov_cq_disarm(bool drained);
/* The preload's, run once the far NIC opened (libfabric's calls to the
 * socket API pass through from then on). */
extern void (*sov_far_hook)(void);
/* The descriptor a CQ sleep polls for `fd` (the CQ's own) and its bound. */
int sov_far_doze_fd(int fd, int *bound);

/* stats.c: what this process carried and moved, for `sovia run`'s exit
 * record (docs/TRANSPARENT.md, "Exit records"). sov_tally waits at most
 * 20 ms in all for locks busy in other threads (then leaves those bytes
 * out), so a signal handler may call it in a thread that holds no socket
 * lock. */
struct sov_tally {
    unsigned carried, fell_back, kernel, redirected, migrated, short_;
    unsigned carried_far; /* of carried: on the far NIC */
    unsigned long long bytes_sent, bytes_received;
};
void sov_tally(struct sov_tally *t);
void sov_tally_forked(void); /* in the child: only what it inherited */

/* api.c / table.c */
int sov_init(void); /* once per process; 0 or -errno */
/* The preload's, run at the end of a process's sov_init (exitlog.c opens
 * the exit record's log then: before the program can sandbox itself). */
extern void (*sov_init_hook)(void);
void sov_before_fork(void);
void sov_after_fork_parent(void);
void sov_table_fork_lock(bool lock);
void sov_after_fork_child(void);
/* The socket behind fd, locked; NULL with errno EBADF or ENOTSOCK. */
struct sov_sock *sov_acquire(int fd);
static inline void sov_release(struct sov_sock *s)
{
    sov_sock_unlock(s);
}
struct sov_sock *sov_lookup(int fd); /* unlocked, may be stale */
int sov_table_limit(void);
int sov_table_insert(struct sov_sock *s);
void sov_table_remove(struct sov_sock *s);
struct sov_sock *sov_sock_new(int domain, bool nonblock, bool cloexec);
/* A socket for an existing descriptor (not yet in the table). */
struct sov_sock *sov_sock_adopt(int fd, int domain, bool nonblock);
int sov_table_set(int fd, struct sov_sock *s);  /* another name for s (dup) */
bool sov_table_clear(int fd, struct sov_sock *s); /* removes one name */
void sov_sock_free(struct sov_sock *s);
uint64_t sov_now_ns(void);
void sov_signal_event(void); /* every sleeping thread looks again */
/* A sleep's two descriptors after the caller's: the completion queue's and
 * this thread's doorbell (VipxCQPollFds; the caller armed the CQ). Returns
 * how long the sleep may last (ms, -1: no limit) given `ms`, shortened
 * where a wake-up may be lost (VipxCQPollFds says). */
int sov_doze_fds(struct pollfd out[2], int ms);
/* Disarms the CQ after a sleep that polled `cq` (the entry sov_doze_fds
 * filled with the CQ's descriptor) and returned `rc`: drains the
 * descriptor only if the poll reported it (VipxCQDisarmQuiet otherwise). */
void sov_doze_disarm(const struct pollfd *cq, int rc);
/* The iovec send and receive behind sov_send/sov_recv & co.: -1 and errno. */
ssize_t sov_sendv(int fd, const struct iovec *iov, int iovcnt, int flags);
ssize_t sov_recvv(int fd, const struct iovec *iov, int iovcnt, int flags);
/* Wakes threads sleeping on this socket (accept, HANDLER/NOTIFY waits,
 * SO_LINGER) and any sov_poll. */
void sov_wake_waiters(struct sov_sock *s);

/* inherit.c: carried connections across exec (the preload's wrappers). */
struct sov_handoff {
    int memfd;      /* the description, for SOVIA_INHERIT=<fd> */
    int *reopened;  /* descriptors made to survive exec */
    unsigned nreopened;
};
/* 1: h->memfd describes connections to hand over; 0: none; -1: failed. */
int sov_inherit_export(struct sov_handoff *h);
void sov_inherit_abort(struct sov_handoff *h); /* the exec failed */
void sov_inherit_import(void);                 /* in the new image, before main() */

/* config.c */
int sov_config_check(const struct sov_config *c);
void sov_config_from_env(struct sov_config *c);
/* Receive buffers beyond the window's DATA and ACK packets: the peer's FIN,
 * a FINACK outstanding with it after a half-close, and a MIGRATE REQUEST
 * and ACK of the peer's outstanding together when REQUESTs cross. */
#define SOV_CTRL_BUFFERS 4
unsigned sov_recv_buffers(const struct sov_config *c);

/* addr.c */
int sov_addr_check(const struct sov_sock *s, const struct sockaddr *a, socklen_t len);
uint16_t sov_addr_port(const struct sockaddr *a);
/* Is `a` an address of this host (any address, loopback, or bindable)? */
bool sov_addr_is_local(const struct sockaddr *a, socklen_t len);
bool sov_addr_is_loopback(const struct sockaddr *a); /* 127/8, ::1, ::ffff:127/104 */
void sov_addr_set_port(struct sockaddr_storage *a, uint16_t port);
VIP_NET_ADDRESS *sov_vi_address(const struct sockaddr *a);
/* A listener's: 0.0.0.0 / :: stay (any address), where sov_vi_address
 * makes them loopback. */
VIP_NET_ADDRESS *sov_vi_listen_address(const struct sockaddr *a);
/* If `local`'s address is unspecified, the one the kernel would use to
 * reach `peer` (its port kept): the peer itself on loopback, else the
 * route's source. 0, or -ENETUNREACH etc. when there is no route. */
int sov_addr_fill_source(struct sockaddr_storage *local, const struct sockaddr *peer);
/* sovia run: the address a claim comes from (see sov_claim), naming the
 * accepted connection's two ends, and the test, which gives them back with
 * the claimant's ticket (0: none). A ticket's address is where that
 * claimant takes the client it redirects (REDIRECT). */
VIP_NET_ADDRESS *sov_vi_claim_address(const struct sockaddr *server, const struct sockaddr *client,
                                      uint32_t ticket);
bool sov_vi_is_claim(const VIP_NET_ADDRESS *va, uint32_t *ticket, struct sockaddr_storage *server,
                     struct sockaddr_storage *client);
VIP_NET_ADDRESS *sov_vi_ticket_address(const struct sockaddr *a, uint32_t ticket);
int sov_sockaddr_from_vi(const VIP_NET_ADDRESS *va, int domain, struct sockaddr_storage *out,
                         socklen_t *len);
int sov_reserve_port(struct sov_sock *s, uint16_t port); /* 0 = any free port */
void sov_copy_addr(const struct sockaddr_storage *from, socklen_t from_len,
                   struct sockaddr *to, socklen_t *to_len);

/* holder.c: the owners of a kernel TCP connection's ends (sovia run) */
/* The uid of the TCP listener a connection to `to` would reach: 0,
 * -ENOENT (none), or another -errno (no socket diagnostics). */
int sov_listener_owner(const struct sockaddr *to, uid_t *uid);
/* The uid and inode (0: not accepted yet) of the TCP socket whose own
 * address is `own` and peer `peer`: 0, -ENOENT or another -errno. */
int sov_socket_owner(const struct sockaddr *own, const struct sockaddr *peer, uid_t *uid,
                     uint64_t *ino);
/* Whether `token`, sent with a VI by a process of `uid`, proves it holds
 * that socket (the socket itself, or an epoll instance watching it). */
bool sov_token_holds(int token, uid_t uid, const struct sockaddr *own, const struct sockaddr *peer);
/* The inode of the one socket an epoll token (another user's) watches;
 * 0 if it is no such token. */
uint64_t sov_token_target(int token);
bool sov_same_endpoint(const struct sockaddr *x, const struct sockaddr *y);

/* conn.c: VI, buffers, connect/accept machinery */
struct sov_conn *sov_conn_create(const struct sov_config *cfg, bool far, int *err);
struct sov_conn *sov_conn_import(const struct sov_config *cfg, unsigned nrecv, unsigned nsend,
                                 const VIPX_STATE *vs, const uint32_t *posted, unsigned nposted,
                                 int *err);
void sov_conn_destroy(struct sov_conn *c);
/* A futex sleeper on the connection's VI (data.c, the preload's epoll):
 * counted in c->sleepers, so the VI stays until sov_conn_sleep_release, and
 * the VI's word armed into *w (its bound, ms or -1, into *bound). false:
 * not armed, nothing held. */
bool sov_conn_sleep_hold(struct sov_conn *c, VIPX_SLEEP_WORD *w, int *bound);
void sov_conn_sleep_release(struct sov_conn *c);
/* Whether a wait may sleep on futex words at all (the blocked recv/send's
 * futex_block, sov_poll's and the preload's epoll's futex_doze): not under
 * ThreadSanitizer, which runs a handler for a signal that came in a raw
 * system call only at the thread's next intercepted call, so the sigwatch
 * count had not moved when futex_waitv ended with EINTR, the sleep began
 * again and the call never failed with EINTR (preload/threads signal_eintr
 * hung 1 run in 3; preload/epoll signal_during_wait returned 0 at its
 * timeout). Those waits sleep the CQ's way then, in poll(), which it
 * intercepts. */
#if defined(__SANITIZE_THREAD__)
#define SOV_FUTEX_SLEEPS 0
#else
#define SOV_FUTEX_SLEEPS 1
#endif

/* A futex sleep on a few connections (sov_poll's, the preload's epoll's):
 * the thread's own word first (VipxSleepArm), then each held connection's;
 * `bound` the shortest of their bounds (ms, -1: none). */
#define SOV_FUTEX_CONNS 16
struct sov_futex_sleep {
    VIPX_SLEEP_WORD w[SOV_FUTEX_CONNS + 1];
    struct sov_conn *c[SOV_FUTEX_CONNS];
    unsigned nc;
    int bound;
};
bool sov_futex_hold(struct sov_futex_sleep *f, struct sov_conn *c); /* false: not held */
void sov_futex_let_go(struct sov_futex_sleep *f);                   /* every one held */
/* Sleeps up to ms (-1: no limit) within the bound, unless a handler ran
 * since `sig` began (-1, EINTR: a later one rings the thread's word), then
 * lets go of every connection and disarms the thread (VipxSleepDisarm). 1
 * or -1. */
struct sov_sigwatch;
int sov_futex_sleep(struct sov_futex_sleep *f, int ms, const struct sov_sigwatch *sig);
int sov_conn_send_ctrl(struct sov_conn *c, enum sov_pkt type);
int sov_conn_lost(struct sov_conn *c); /* the VI failed: -ECONNRESET or -EPIPE */
void sov_conn_abort(struct sov_conn *c); /* reset it: the peer gets ECONNRESET */
VIP_DESCRIPTOR *sov_rdesc_reset(struct sov_conn *c, unsigned i);
/* shared.c */
int sov_shared_begin(struct sov_sock *s, unsigned holders);
int sov_shared_attach(struct sov_conn *c, int fd);
void sov_shared_drop(struct sov_conn *c);
/* The early bytes out of the record into memory of this process (a
 * holder taking them elsewhere); false: no memory. */
bool sov_shared_own_early(struct sov_conn *c);
/* Inside a section: whether another live process holds the connection. */
bool sov_shared_others(struct sov_conn *c);
void sov_shared_fork(struct sov_conn *c);
void sov_shared_forked(bool child); /* after fork, in both processes */
/* The copy buffer of the next send. With nothing in flight (always on
 * shm, whose sends complete inside the post) every buffer is free and the
 * first serves, as the single one did; else the next descriptor's own,
 * once that descriptor was reaped. Data staged in its descriptor's buffer
 * and posted at once stays in flight after the post. c->inflight is tested
 * inline here and below: these run on every send and the receive spin. */
uint8_t *sov_stage_next(struct sov_conn *c);
static inline uint8_t *sov_stage(struct sov_conn *c)
{
    return c->inflight ? sov_stage_next(c) : c->sbuf;
}
/* Reads the send queue when its oldest send is still in flight: progress
 * for providers that move data only then (fabric:tcp). */
void sov_sends_step(struct sov_conn *c);
static inline void sov_sends_drive(struct sov_conn *c)
{
    if (c->inflight)
        sov_sends_step(c);
}
/* Until every send posted has completed (sov_sends_out), and been reaped
 * (sov_sends_settle). */
void sov_sends_finish(struct sov_conn *c);
static inline void sov_sends_out(struct sov_conn *c)
{
    if (c->inflight)
        sov_sends_finish(c);
}
void sov_sends_settle(struct sov_conn *c);
/* DATA left in flight: its memory stays until sov_sends_out. */
int sov_post_inflight(struct sov_conn *c, const void *data, uint32_t len, VIP_MEM_HANDLE mh);
int sov_post_packet(struct sov_conn *c, enum sov_pkt type, const void *data, uint32_t len,
                    VIP_MEM_HANDLE mh);
int sov_post_urgent(struct sov_conn *c, const void *data, uint32_t len, VIP_MEM_HANDLE mh);
int sov_post_migrate(struct sov_conn *c, uint32_t sub);
int sov_post_redirect(struct sov_conn *c, uint32_t ticket); /* a claim's redirect */

/* migrate.c: back to the kernel connection in mid-stream (sovia run). */
/* Our end leaves: 0 when the kernel socket carries the stream from now on
 * (the descriptor is no longer carried), -errno when the connection had to
 * be reset. Caller holds s->lock; returns with it released. */
int sov_migrate(struct sov_sock *s);
void sov_mig_packet(struct sov_sock *s, struct sov_conn *c, uint32_t imm, uint32_t len);
void sov_mig_returned(struct sov_sock *s, struct sov_conn *c, const uint8_t *p, uint32_t len);
bool sov_mig_push(struct sov_sock *s);
bool sov_mig_send_ready(const struct sov_conn *c);
bool sov_mig_overdue(struct sov_conn *c); /* reset if the peer's END is late */
bool sov_mig_over(const struct sov_sock *s); /* nothing is left on the VI */
ssize_t sov_mig_send(struct sov_sock *s, const struct iovec *iov, int iovcnt, int flags);
ssize_t sov_mig_recv(struct sov_sock *s, const struct iovec *iov, int iovcnt, int flags,
                     size_t got);
short sov_mig_revents(struct sov_sock *s, short r);
int sov_mig_shutdown_wr(struct sov_sock *s);
void sov_mig_kernel_fin(struct sov_sock *s); /* the kernel socket's FIN, if owed */
/* At close (lock held, before the program's descriptor goes): a copy of
 * the kernel socket stays with the socket until its close is finished. */
void sov_mig_keep_kernel(struct sov_sock *s, bool abortive);
/* sov_migrate under way (inline, as the next: every send and receive asks). */
static inline bool sov_mig_ours_moving(const struct sov_conn *c)
{
    return c->mig != MIG_NONE && c->mig != MIG_DONE;
}
int sov_mig_wait_ours(struct sov_sock *s, bool nonblock); /* another thread leaves */
void sov_mig_watch(struct sov_sock *s); /* the service thread pushes for it */
void sov_mig_step(struct sov_sock *s); /* our side, when the peer asked */
/* Our side moves because the peer asked, and gives back from the front
 * what our program has not read: its reads wait, then take the kernel's. */
static inline bool sov_mig_answer_moving(const struct sov_conn *c)
{
    return c->mig_auto && c->mig >= MIG_RETURNING && c->mig != MIG_DONE && !c->reset;
}
size_t sov_vi_take(struct sov_sock *s, void *buf, size_t len); /* data.c */
int sov_do_connect(struct sov_sock *s, const struct sockaddr *to, socklen_t len);
/* ticket: 0, or listen at that ticket's address of s->local (sovia run). */
int sov_listen_start(struct sov_sock *s, int backlog, bool transparent, uint32_t ticket);
/* To `peer`'s own address, or its ticket's (sovia run's REDIRECT).
 * `async`: the request only goes, and c->connecting says its answer is
 * still to take (sov_connect_finish). */
int sov_connect_tentative(struct sov_conn *c, int fd, const struct sockaddr *local,
                          const struct sockaddr *peer, uint32_t ticket, bool async);
/* Takes the answer to an async request, waiting up to `wait_ms` (0: only
 * looks): false while none came; true once c->connecting is over, with
 * c->connect_err 0 (a tentative VI now) or the -errno it failed with. */
bool sov_connect_finish(struct sov_conn *c, unsigned wait_ms);
/* patience_ns: how long to wait for a VI that is not even arriving yet. */
struct sov_conn *sov_accept_match(struct sov_sock *s, int fd, const struct sockaddr *peer,
                                  uint64_t patience_ns);
int sov_claim(int fd, const struct sockaddr *listening, uid_t owner, uint32_t ticket);

/* xhost.c: sovia run across hosts (docs/ARCHITECTURE.md "Transparent mode
 * across hosts"). On only with a cluster key (SOVIA_CLUSTER_KEY_FILE);
 * then every connection carried over fabric pairs through
 * the proofs of xauth.h, sent as PKT_XAUTH packets before the WAKEUPs:
 * client HELLO, server ACCEPT (and its WAKEUP), client CONFIRM (and its
 * WAKEUP). A WAKEUP before the proof is complete fails the connection. */
enum sov_xh { XH_NONE, XH_CLIENT_HELLO, XH_CLIENT_OK, XH_SERVER_ACCEPTED, XH_SERVER_OK };
bool sov_xhost_on(void); /* the key is usable (after sov_init) */
/* ... and the process's own NIC is shm: peers on other hosts go over the
 * far NIC (far.c). */
bool sov_xhost_far_wanted(void);
/* Whether connection c pairs through the proofs (it is on a fabric NIC). */
bool sov_xhost_proves(const struct sov_conn *c);
/* The provider that carries c ("shm", "fabric:tcp"). */
const char *sov_conn_provider(const struct sov_conn *c);
/* Can this process's NIC pair sovia run connections at all? shm (the
 * token), or fabric with the key (the proofs); fabric without a key
 * cannot prove anything: no shadow listener, no attempt. */
bool sov_xhost_nic_pairs(void);
/* The client's VI to `peer` and its HELLO; -ECONNREFUSED when that host
 * does not answer as a sovia host (then remembered: sov_xpeer_refused). */
int sov_xhost_connect(struct sov_conn *c, const struct sockaddr *local, const struct sockaddr *peer);
/* Whether a and b name one client end, as the server `own` sees it. */
bool sov_xhost_same_client(const struct sockaddr *own, const struct sockaddr *a,
                           const struct sockaddr *b);
/* Server, from accept(): the client's HELLO must prove the kernel
 * connection `fd` (its two ends); then our ACCEPT goes. 0 or -errno (the
 * VI is of no use then). */
int sov_xhost_accept(struct sov_conn *c, int fd);
/* A client's VI ended before the server's ACCEPT came: that host turned
 * our HELLO away (another key) or dropped the VI; it is not tried again
 * for a while (sov_xpeer_refused). */
void sov_xhost_turned_away(const struct sov_conn *c);
/* A PKT_XAUTH packet in receive buffer i (sov_handle_packet). */
void sov_xhost_packet(struct sov_conn *c, VIP_DESCRIPTOR *d, unsigned i);
/* May the peer's WAKEUP come now (no proof pending)? */
static inline bool sov_xhost_may_wake(const struct sov_conn *c)
{
    return c->xh == XH_NONE || c->xh == XH_CLIENT_OK || c->xh == XH_SERVER_OK;
}
/* The NIC's name (VipQueryNic: "shm", "fabric:tcp"), "" before sov_init. */
const char *sov_provider_name(void);
/* data.c: receive buffer i posted again (no ACK owed for it). */
int sov_conn_repost(struct sov_conn *c, unsigned i);
void sov_listen_stop(struct sov_sock *s);
/* sovia run with a key beside shm: the kernel connection from `peer` was
 * accepted; if it is another host's client, the listener's far side starts
 * (once), in its own thread where libfabric loads, for the next ones. */
void sov_listen_far(struct sov_sock *s, const struct sockaddr *peer);
void sov_listen_forked(struct sov_sock *s);
struct sov_conn *sov_accept_take(struct sov_sock *s, struct sockaddr_storage *peer,
                                 socklen_t *peer_len, bool nonblock, int *err);
bool sov_accept_ready(struct sov_sock *s);
/* sovia run, a ticketed listener: the client from `port` is awaited (on),
 * or no longer (then what came for it is dropped: it falls back). 0,
 * -ENOSPC (SOV_AWAITED_MAX awaited already) or -EINVAL. */
#define SOV_AWAITED_MAX 64
int sov_listen_await(struct sov_sock *s, uint16_t port, bool on);

/* data.c: the protocol engine (caller holds s->lock) */
int sov_progress(struct sov_sock *s); /* handles completed receives; count or -errno */
void sov_handle_packet(struct sov_sock *s, VIP_DESCRIPTOR *d);
int sov_conn_wakeup(struct sov_conn *c, VIP_DESCRIPTOR *d);
ssize_t sov_do_send(struct sov_sock *s, const struct iovec *iov, int iovcnt, int flags);
ssize_t sov_do_recv(struct sov_sock *s, const struct iovec *iov, int iovcnt, int flags);
size_t sov_readable(const struct sov_sock *s); /* unread in-band bytes (not a passed-over urgent byte) */
int sov_flush(struct sov_sock *s, bool may_block);
int sov_send_fin(struct sov_sock *s);
void sov_repost_deferred(struct sov_conn *c);
int sov_wait(struct sov_sock *s, uint64_t *spun_since); /* 0, -EINTR */
/* One turn of sov_wait; with `handled`, a POLL wait may handle the next
 * packet itself and says so there (a receive's wait). */
int sov_wait_turn(struct sov_sock *s, uint64_t *spun_since, bool *handled);

/* HANDLER and NOTIFY take a connection over once it is established
 * (sov_conn_attach_handling); a sovia run connection awaiting its pairing
 * has nobody but its callers to see the peer's WAKEUP. (Shared connections
 * get a record only with SINGLE handling: shared.c.) */
static inline bool sov_handled_elsewhere(const struct sov_sock *s, const struct sov_conn *c)
{
    return c->cfg.handling != SOV_SINGLE && !s->tp_waiting;
}
/* How long a poller spins before it sleeps (the process's wait mode:
 * UINT64_MAX for SOVIA_WAIT=poll, which always spins). */
uint64_t sov_poll_spin_ns(void);
/* spin.c: false while more threads are runnable than there are CPUs (a
 * spinner would take the CPU the thread it waits for needs). `now`: the
 * caller's sov_now_ns() (a clock read less per spinning round). */
bool sov_spin_pays(uint64_t now);
void sov_spin_init(void); /* at sov_init */

/* handler.c: HANDLER and NOTIFY strategies */
int sov_handling_start(void);
int sov_conn_attach_handling(struct sov_sock *s);
void sov_conn_detach_handling(struct sov_sock *s);
void sov_conn_handle_in_calls(struct sov_sock *s); /* at fork: SINGLE from now on */

/* close.c: the service thread (close thread + combining timer) */
void sov_close_connected(struct sov_sock *s);
void sov_timer_add(struct sov_sock *s);
void sov_timer_remove(struct sov_sock *s);
void sov_pairing_add(struct sov_sock *s);
void sov_pairing_remove(struct sov_sock *s);
void sov_conn_established(struct sov_sock *s);
void sov_atexit(void);
void sov_nudged(void *ctx, VIP_VI_HANDLE vi); /* VipxNicSetNudgeHandler's */
void sov_stat_serve_start(void); /* statsrv.c: answers `sovia stat` */
int sov_stat_fd(void);            /* its listening socket, or -1 */

/* poll.c */
short sov_sock_revents(struct sov_sock *s, short events);

#endif /* SOVIA_SOCK_H */
