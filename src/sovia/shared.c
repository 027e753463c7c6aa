/*
 * shared.c - one connection used by several processes (docs/SOCKETS.md,
 * "Processes"), as after fork with kernel sockets: a shell that hands its
 * /dev/tcp descriptor to one command after another, a parent and child
 * that both write, a server whose children read one request each.
 *
 * Each holder keeps its own copy of the protocol state and of its VI's
 * private queue view, so the state at rest lives in a record every holder
 * maps (a memfd, created before the fork, passed on across exec). A
 * section of the socket's lock is then also a section of the record's:
 * entering loads the record over our copy if another holder changed it
 * since we last saw it; leaving saves ours and bumps the version if it
 * changed. The record's lock holds a pid and thread id, so a holder that
 * died inside a section (the process, or only that thread: a seccomp
 * filter) is noticed; its half-done changes cannot be trusted, and the
 * connection is reset for everyone.
 *
 * Once every other holder has let go, the last one drops the record and
 * goes back to its private fast path. Holders that leave without closing
 * (SIGKILL, _exit) are counted down too: each holder's pid sits in the
 * record, and a section looks for pids gone every REAP_NS. A holder clears
 * its own pid before it counts itself down, and a survivor counts one down
 * only if it clears the pid itself, so none is counted twice. A child
 * adds its pid in its fork handler: one killed before it ran that (within
 * microseconds of the fork), holders beyond REC_PIDS, or a fork that
 * failed after it counted, are never counted down: the survivors stay on
 * the record, slower but correct.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sock.h"

#define REC_MAGIC 0x53565352u /* "SVSR" */

/* The state a connection leaves for its next user. Compared as bytes to
 * tell whether a section changed anything: keep it free of padding. */
struct rec_state {
    uint32_t credits, to_ack;
    uint32_t rq_count, nposted;
    /* Set when the connection pairs, which may be after the fork (a sovia
     * run client that forks before its server accepted). */
    uint32_t peer_window, ack_every;
    uint64_t rq_off, rx_bytes, send_mtu;
    uint64_t urg_ahead; /* the urgent mark (MSG_OOB) */
    uint8_t wr_shut, fin_acked, peer_fin, peer_gone;
    uint8_t reset, reset_told, rd_shut, vi_saved;
    uint8_t tentative, urg, urg_valid, urg_byte;
    uint32_t early_len; /* bytes held in the early area until the pairing */
    uint8_t mig, peer_mig, pad[6]; /* migrate.c (a peer's: never with a record) */
    VIPX_STATE vi;
};

_Static_assert(sizeof(struct rec_state) == 80 + sizeof(VIPX_STATE), "no padding");

#define REC_PIDS 16
#define REAP_NS 10000000u

struct sov_rec {
    uint32_t magic;
    uint32_t nrecv; /* the connection's geometry, fixed */
    /* 0, or who is inside a section: pid (high half) and thread id. */
    _Atomic uint64_t owner;
    _Atomic uint32_t holders; /* processes holding the connection */
    _Atomic uint32_t version; /* bumped by every section that changed it */
    uint32_t reserved[2];
    _Atomic int32_t pids[REC_PIDS]; /* the holders' (0: a free slot) */
    struct rec_state st;
    /* 2 words per unread buffer (index, length), then the arena offset of
     * each posted receive: 3 * nrecv words at most. Then the early area: a
     * client's bytes written before its server accepted (one MTU), which
     * must leave first whichever holder sees the pairing. */
    uint32_t words[];
};

static size_t words_size(const struct sov_conn *c)
{
    return 3 * (size_t)c->nrecv * sizeof(uint32_t);
}

static size_t rec_size(const struct sov_conn *c)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t n = sizeof(struct sov_rec) + words_size(c) + c->cfg.mtu;
    return (n + page - 1) & ~(page - 1);
}

static uint8_t *early_area(const struct sov_conn *c)
{
    return (uint8_t *)c->rec->words + words_size(c);
}

/* ---- The record's lock ------------------------------------------------------ */

/* A zombie is gone too: it holds nothing, and its parent may never wait
 * for it. */
static bool pid_gone(int32_t pid)
{
    if (pid <= 0)
        return false;
    if (kill(pid, 0) != 0)
        return errno == ESRCH;
    char path[32], buf[96];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    VipxFdCreateBegin(); /* one of ours: safe from the program's stale close() */
    int fd = VipxFdAdopt(open(path, O_RDONLY | O_CLOEXEC));
    VipxFdCreateEnd();
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    VipxFdClose(fd);
    buf[n > 0 ? n : 0] = '\0';
    const char *end = strrchr(buf, ')'); /* the name may hold anything */
    return end && end[1] == ' ' && (end[2] == 'Z' || end[2] == 'X');
}

/* The thread inside a section is gone: its process, or only it (killed by
 * a seccomp filter). Another thread of ours can only be inside while we
 * hold the socket's lock if it died there. */
static bool holder_gone(uint64_t held)
{
    int32_t pid = (int32_t)(held >> 32), tid = (int32_t)(uint32_t)held;
    if (pid == (int32_t)sov_g.pid)
        return VipxThreadGone(tid);
    if (pid_gone(pid)) /* the leader's end too: a zombie */
        return true;
    int err = errno;
    bool gone = tid != pid && syscall(SYS_tgkill, pid, tid, 0) != 0 && errno == ESRCH;
    errno = err;
    return gone;
}

/* False: the holder died inside its section (we hold the lock now). */
static bool rec_lock(struct sov_rec *r)
{
    /* The pid kept by the fork handler: no system call per section. */
    uint64_t me = (uint64_t)(uint32_t)sov_g.pid << 32 | (uint32_t)sov_tid();
    for (unsigned spins = 0;; spins++) {
        uint64_t held = 0;
        if (atomic_compare_exchange_weak_explicit(&r->owner, &held, me, memory_order_acquire,
                                                  memory_order_relaxed))
            return true;
        /* Sections are short; another process is the usual holder. */
        if (spins < 64)
            continue;
        if (spins < 1024) {
            sched_yield();
            continue;
        }
        if ((spins & 255) == 0 && (held == me || holder_gone(held)) &&
            atomic_compare_exchange_strong(&r->owner, &held, me))
            return held == me; /* a section of ours that never ended: ours again */
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}

static void rec_unlock(struct sov_rec *r)
{
    atomic_store_explicit(&r->owner, 0, memory_order_release);
}

/* ---- Saving and loading ------------------------------------------------------ */

/* Our copy, as the next user must see it. Returns the words written. */
static size_t save(struct sov_sock *s, struct sov_conn *c, struct rec_state *st, uint32_t *words)
{
    sov_repost_deferred(c); /* the record knows no held-back buffer */
    sov_sends_settle(c);    /* none of ours left in flight for the next holder */
    memset(st, 0, sizeof(*st));
    size_t n = 0;
    for (unsigned k = 0; k < c->rq_count; k++) {
        unsigned i = c->recvq[(c->rq_head + k) % (c->nrecv + 1)];
        words[n++] = i;
        words[n++] = c->rdesc[i].CS.Length;
    }
    VIP_ULONG offs[c->nrecv];
    VIP_ULONG nposted = c->nrecv;
    if (!c->reset && VipxViSyncSave(c->vi, &st->vi, offs, &nposted) == VIP_SUCCESS) {
        st->vi_saved = 1;
        st->nposted = (uint32_t)nposted;
        for (VIP_ULONG k = 0; k < nposted; k++)
            words[n++] = (uint32_t)offs[k];
    }
    st->credits = c->credits;
    st->to_ack = c->to_ack;
    st->peer_window = c->peer_window;
    st->ack_every = c->ack_every;
    st->send_mtu = c->send_mtu;
    st->tentative = c->tentative;
    st->rq_count = c->rq_count;
    st->rq_off = c->rq_off;
    st->rx_bytes = c->rx_bytes;
    st->wr_shut = c->wr_shut;
    st->fin_acked = c->fin_acked;
    st->peer_fin = c->peer_fin;
    st->peer_gone = c->peer_gone;
    st->reset = c->reset;
    st->reset_told = c->reset_told;
    st->rd_shut = s->rd_shut;
    st->early_len = c->early_len;
    st->mig = c->mig;
    st->peer_mig = c->peer_mig;
    st->urg = c->urg;
    st->urg_valid = c->urg_valid;
    st->urg_byte = c->urg_byte;
    st->urg_ahead = c->urg ? c->urg_ahead : 0;
    return n;
}

/* Written by another process of this program, not by the peer; checked
 * all the same, as a bad value would index our arena. */
static bool record_sane(const struct sov_conn *c, const struct sov_rec *r)
{
    const struct rec_state *st = &r->st;
    if (r->magic != REC_MAGIC || r->nrecv != c->nrecv || st->rq_count > c->nrecv ||
        st->nposted > c->nrecv - st->rq_count || st->peer_window > 1024 ||
        st->credits > st->peer_window || st->send_mtu > c->cfg.mtu ||
        st->early_len > c->cfg.mtu || (st->urg && st->urg_ahead >= st->rx_bytes) ||
        st->mig > MIG_DONE || st->peer_mig > PMIG_ENDED ||
        (st->peer_mig != PMIG_NONE && st->mig == MIG_NONE))
        return false;
    uint64_t unread = 0;
    for (unsigned k = 0; k < st->rq_count; k++) {
        uint32_t i = r->words[2 * k], len = r->words[2 * k + 1];
        if (i >= c->nrecv || len == 0 || len > c->cfg.mtu)
            return false;
        unread += len;
    }
    if (st->rq_count ? st->rq_off >= r->words[1] : st->rq_off != 0)
        return false;
    for (unsigned k = 0; k < st->nposted; k++) {
        uint32_t off = r->words[2 * st->rq_count + k];
        if (off % c->cfg.mtu || off / c->cfg.mtu >= c->nrecv)
            return false;
    }
    return unread - st->rq_off == st->rx_bytes;
}

/* The record over our copy. False: the connection cannot go on here. */
static bool load(struct sov_sock *s, struct sov_conn *c, const struct sov_rec *r)
{
    if (!record_sane(c, r))
        return false;
    const struct rec_state *st = &r->st;
    if (st->mig == MIG_DONE) {
        /* Another holder moved the stream to the kernel socket (migrate.c):
         * nothing of the VI matters any more (it may have failed since, as
         * the peer let it go); the socket falls back at its next settle. */
        c->mig = MIG_DONE;
        return true;
    }
    VIP_DESCRIPTOR *d;
    while (VipSendDone(c->vi, &d) == VIP_SUCCESS)
        c->s_reaped++;
    c->deferred = -1;
    if (st->vi_saved && !c->reset) {
        if (VipxViSyncLoad(c->vi, &st->vi) != VIP_SUCCESS)
            return false;
        for (unsigned k = 0; k < st->nposted; k++) {
            unsigned i = r->words[2 * st->rq_count + k] / (unsigned)c->cfg.mtu;
            if (VipxViImportRecv(c->vi, sov_rdesc_reset(c, i), c->desc_mh) != VIP_SUCCESS)
                return false;
        }
    }
    c->rq_head = 0;
    c->rq_count = st->rq_count;
    for (unsigned k = 0; k < st->rq_count; k++) {
        c->recvq[k] = r->words[2 * k];
        c->rdesc[c->recvq[k]].CS.Length = r->words[2 * k + 1];
    }
    c->rq_off = st->rq_off;
    c->rx_bytes = st->rx_bytes;
    c->credits = st->credits;
    c->to_ack = st->to_ack;
    c->peer_window = st->peer_window;
    c->ack_every = st->ack_every;
    c->send_mtu = st->send_mtu;
    c->tentative = st->tentative;
    c->wr_shut = st->wr_shut;
    c->fin_acked = st->fin_acked;
    c->peer_fin = st->peer_fin;
    c->peer_gone = st->peer_gone;
    c->reset_told = st->reset_told;
    c->early_len = st->early_len;
    c->mig = st->mig;
    c->peer_mig = st->peer_mig;
    c->urg = st->urg;
    c->urg_valid = st->urg_valid;
    c->urg_byte = st->urg_byte;
    c->urg_ahead = st->urg_ahead;
    s->rd_shut = st->rd_shut;
    if (st->reset && !c->reset)
        sov_conn_abort(c);
    return true;
}

/* Leaves our copy in the record if it differs; the caller holds its lock. */
static void publish(struct sov_sock *s, struct sov_conn *c, struct sov_rec *r)
{
    struct rec_state st;
    uint32_t words[3 * c->nrecv + 1];
    size_t n = save(s, c, &st, words);
    if (memcmp(&st, &r->st, sizeof(st)) != 0 ||
        memcmp(words, r->words, n * sizeof(words[0])) != 0) {
        memcpy(r->words, words, n * sizeof(words[0]));
        r->st = st;
        atomic_fetch_add_explicit(&r->version, 1, memory_order_release);
    }
    c->rec_seen = atomic_load_explicit(&r->version, memory_order_relaxed);
}

/* ---- Sections ------------------------------------------------------------------ */

/* The early bytes move into the record (they may have been written before
 * the fork), or back out of it. */
static void early_to_record(struct sov_conn *c)
{
    uint8_t *area = early_area(c);
    if (c->early_len)
        memcpy(area, c->early, c->early_len);
    free(c->early);
    c->early = area;
}

/* False (no memory): they stay in the record, and the record stays. */
static bool early_from_record(struct sov_conn *c)
{
    if (!c->early_len) {
        c->early = NULL;
        return true;
    }
    uint8_t *own = malloc(c->cfg.mtu);
    if (!own)
        return false;
    memcpy(own, c->early, c->early_len);
    c->early = own;
    return true;
}

bool sov_shared_own_early(struct sov_conn *c)
{
    return !c->rec || c->early != early_area(c) || early_from_record(c);
}

static void unmap(struct sov_conn *c)
{
    if (c->early == early_area(c)) { /* a holder letting go: the others keep them */
        c->early = NULL;
        c->early_len = 0;
    }
    munmap(c->rec, c->rec_len);
    VipxFdClose(c->rec_fd);
    c->rec = NULL;
    c->rec_fd = -1;
}

/* ---- Holders ------------------------------------------------------------------ */

static void pid_add(struct sov_rec *r, int32_t pid)
{
    for (unsigned i = 0; i < REC_PIDS; i++) {
        int32_t free_slot = 0;
        if (atomic_compare_exchange_strong(&r->pids[i], &free_slot, pid))
            return;
    }
}

static void pid_clear(struct sov_rec *r, int32_t pid)
{
    for (unsigned i = 0; i < REC_PIDS; i++) {
        int32_t was = pid;
        if (atomic_compare_exchange_strong(&r->pids[i], &was, 0))
            return;
    }
}

/* Counts down the holders that left without a word (caller holds the
 * record's lock, so it is not one of them). */
static void reap_holders(struct sov_rec *r)
{
    for (unsigned i = 0; i < REC_PIDS; i++) {
        int32_t pid = atomic_load(&r->pids[i]);
        if (pid > 0 && pid != (int32_t)sov_g.pid && pid_gone(pid) &&
            atomic_compare_exchange_strong(&r->pids[i], &pid, 0))
            atomic_fetch_sub(&r->holders, 1);
    }
}

bool sov_shared_others(struct sov_conn *c)
{
    if (!c->rec)
        return false;
    reap_holders(c->rec);
    return atomic_load(&c->rec->holders) > 1;
}

void sov_shared_enter(struct sov_sock *s)
{
    struct sov_conn *c = s->conn;
    struct sov_rec *r = c->rec;
    bool intact = rec_lock(r);
    s->rec_entered = c;
    if (!intact) {
        /* What the dead holder left half done cannot be trusted. */
        r->st.reset = 1;
        atomic_fetch_add(&r->version, 1);
        if (!c->reset)
            sov_conn_abort(c);
        c->rec_seen = atomic_load(&r->version);
    } else if (atomic_load_explicit(&r->version, memory_order_acquire) != c->rec_seen) {
        if (!load(s, c, r)) {
            fprintf(stderr, "sovia: a shared connection's record is inconsistent; reset\n");
            if (!c->reset)
                sov_conn_abort(c);
        }
        c->rec_seen = atomic_load_explicit(&r->version, memory_order_relaxed);
    }
    /* The clock once every 64 sections: a section is a fraction of a µs. */
    if (atomic_load(&r->holders) > 1 && (++c->rec_sections & 63) == 0) {
        uint64_t now = sov_now_ns();
        if (now - c->rec_reaped_ns > REAP_NS) {
            c->rec_reaped_ns = now;
            reap_holders(r);
        }
    }
    if (atomic_load(&r->holders) <= 1 && early_from_record(c)) {
        /* Everyone else let go: our copy is the connection again. */
        s->rec_entered = NULL;
        rec_unlock(r);
        unmap(c);
    }
}

void sov_shared_leave(struct sov_sock *s)
{
    struct sov_conn *c = s->rec_entered;
    s->rec_entered = NULL;
    if (!c->rec)
        return;
    publish(s, c, c->rec);
    rec_unlock(c->rec);
}

/* ---- Records come and go ------------------------------------------------------------ */

/* Caller holds s->lock (not a section: there is no record yet), with the
 * connection's held-back bytes sent. */
int sov_shared_begin(struct sov_sock *s, unsigned holders)
{
    struct sov_conn *c = s->conn;
    /* A handler thread or notify callback takes packets off the queue
     * outside the socket's lock, so out of the record's sight. */
    if (c->cfg.handling != SOV_SINGLE)
        return -ENOTSUP;
    size_t len = rec_size(c);
    VipxFdCreateBegin();
    int fd = VipxFdAdopt(memfd_create("sovia-shared", MFD_CLOEXEC));
    VipxFdCreateEnd();
    if (fd < 0)
        return -errno;
    void *p = MAP_FAILED;
    if (fchmod(fd, 0600) == 0 && ftruncate(fd, (off_t)len) == 0)
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int err = -errno;
        VipxFdClose(fd);
        return err;
    }
    struct sov_rec *r = p;
    r->magic = REC_MAGIC;
    r->nrecv = c->nrecv;
    atomic_store(&r->holders, holders);
    atomic_store(&r->version, 1);
    pid_add(r, (int32_t)sov_g.pid); /* the child adds itself (sov_shared_forked) */
    c->rec = r;
    c->rec_fd = fd;
    c->rec_len = len;
    early_to_record(c);
    publish(s, c, r);
    return 0;
}

/* An inherited record (exec): checked, then ours. Takes fd. */
int sov_shared_attach(struct sov_conn *c, int fd)
{
    size_t len = rec_size(c);
    struct stat sb;
    void *p = MAP_FAILED;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (size_t)sb.st_size == len)
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    struct sov_rec *r = p;
    if (p == MAP_FAILED || r->magic != REC_MAGIC || r->nrecv != c->nrecv) {
        if (p != MAP_FAILED)
            munmap(p, len);
        VipxFdClose(fd);
        return -EPROTO;
    }
    c->rec = r;
    c->rec_fd = fd;
    c->rec_len = len;
    c->rec_seen = 0; /* load it at the first section */
    c->early_len = 0;
    early_to_record(c);
    return 0;
}

/* This process lets go of the connection (outside any section of it). */
void sov_shared_drop(struct sov_conn *c)
{
    if (!c->rec)
        return;
    pid_clear(c->rec, (int32_t)sov_g.pid); /* first: see reap_holders */
    atomic_fetch_sub(&c->rec->holders, 1);
    unmap(c);
}

/* One more process holds the connection (a fork under way). */
void sov_shared_fork(struct sov_conn *c)
{
    if (c->rec && !c->rec_forking)
        atomic_fetch_add(&c->rec->holders, 1);
    c->rec_forking = true;
}

void sov_shared_forked(bool child)
{
    for (int fd = 0, n = sov_table_limit(); fd < n; fd++) {
        struct sov_sock *s = sov_lookup(fd);
        if (!s || !s->conn)
            continue;
        if (child && s->conn->rec && s->conn->rec_forking) /* once per connection */
            pid_add(s->conn->rec, (int32_t)sov_g.pid);
        s->conn->rec_forking = false;
    }
}
