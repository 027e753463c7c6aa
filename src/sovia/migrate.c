/*
 * migrate.c - a carried connection goes back to its kernel TCP socket in
 * mid-stream, under `sovia run` (docs/PROTOCOL.md, "Migration"): before
 * its process installs a seccomp filter, execs a program that will not
 * load sovia, or drives the socket other than through libc (io_uring).
 *
 * The kernel connection under a carried one is idle and in order, so the
 * two ends only have to agree where each direction's stream leaves the VI:
 *
 *   A (leaving)                          B (its peer, stays)
 *   MIG REQUEST after its last DATA  ->  its program's next bytes wait;
 *   (A's next bytes: kernel socket)  <-  MIG REQUEST, ACK after its last DATA
 *   MIG ACK                          ->
 *   DATA: B's bytes A had not read   ->  written to the kernel socket first
 *   MIG END                          ->  then its program's bytes, there
 *   written to the kernel first      <-  DATA: A's bytes B's program had
 *                                        not read (none after B's ACK)
 *   then A's program's, there        <-  MIG END
 *   drops the VI: a plain socket         drops the VI: its program reads
 *                                        the rest from the kernel socket
 *
 * B answers with a REQUEST of its own: every migration is a crossing, and
 * B's side moves at once, by whichever of its threads handles the socket
 * (sov_mig_step), not when its program leaves too, which A, gone by then,
 * could not serve (tests/model/README.md, 3.10). So no byte is lost,
 * doubled or reordered, and neither program notices.
 * A nudges B (VipxViNudge): B's threads answer within microseconds when
 * they sleep in sovia, its service thread when its program waits
 * elsewhere. Either end resets the connection if the other's next step
 * (ACK, END) does not come within MIGRATE_WAIT_NS.
 * B keeps the bytes A gave back in memory and writes them as the kernel
 * connection takes them: by its own calls and by the service thread, so
 * A's program, which reads them, is never waited for.
 *
 * A side of a shared connection (a record: several processes hold it) is
 * migrated by one holder; the others see the record say so and let go of
 * the VI. A B side with a record cannot hold the bytes given back where
 * its other holders see them: such a connection is reset instead.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sock.h"
#include "transparent.h"

/* How long either end waits for the other's next step of a migration
 * (the ACK, the END) before it resets the connection. */
#define MIGRATE_WAIT_NS 1000000000ull

static int post_mig(struct sov_conn *c, uint32_t sub)
{
    return sov_post_migrate(c, sub);
}

/* ---- B: the peer leaves ------------------------------------------------------------ */

/* Room for `more` bytes in the return buffer (bounded by what the peer
 * could have held: its window of our DATA, which is peer_window, not our
 * own window, plus our combined bytes). */
static bool ret_room(struct sov_conn *c, size_t more)
{
    size_t cap_max = (size_t)(c->peer_window + 1) * c->cfg.mtu;
    if (c->ret_len + more > cap_max)
        return false;
    if (c->ret_len + more <= c->ret_cap)
        return true;
    size_t cap = c->ret_cap ? c->ret_cap : c->cfg.mtu;
    while (cap < c->ret_len + more)
        cap *= 2;
    if (cap > cap_max)
        cap = cap_max;
    uint8_t *p = realloc(c->ret, cap);
    if (!p)
        return false;
    c->ret = p;
    c->ret_cap = cap;
    return true;
}

/* What our program combined goes behind what ret holds (and what a
 * leaving peer still gives back: ret_tail). False if it does not fit. */
static bool owe_combined(struct sov_conn *c)
{
    if (!c->clen)
        return true;
    if (!ret_room(c, c->clen))
        return false;
    memcpy(c->ret + c->ret_len, c->cbuf, c->clen);
    c->ret_len += c->clen;
    c->ret_tail += c->clen;
    c->clen = 0;
    return true;
}

/* Writes what is owed to the kernel connection, as far as it takes it now:
 * the system call itself (send() is the preload's). Only once nothing more
 * can come to go ahead of it: the peer's END came (before it, more of the
 * bytes it gives back may come, inserted before ret_tail), or ours went
 * with no REQUEST of the peer's. False on an error the kernel connection
 * reported (it is the stream's end now). */
bool sov_mig_push(struct sov_sock *s)
{
    struct sov_conn *c = s->conn;
    if (c->peer_mig != PMIG_ENDED && (c->peer_mig != PMIG_NONE || c->mig < MIG_ENDED))
        return true;
    while (c->ret_off < c->ret_len) {
        long r = syscall(SYS_sendto, s->fd, c->ret + c->ret_off, c->ret_len - c->ret_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT, NULL, 0);
        if (r > 0) {
            c->ret_off += (size_t)r;
            continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            return true;
        c->ret_off = c->ret_len; /* the kernel connection ended: nothing to deliver */
        return false;
    }
    c->ret_len = c->ret_off = c->ret_tail = 0;
    sov_mig_kernel_fin(s); /* our FIN, after the bytes before it */
    return true;
}

/* Our program shut down while the stream was carried: the kernel socket
 * gets its FIN once the send side is the kernel's (the preload's
 * shutdown() leaves it alone until then). */
void sov_mig_kernel_fin(struct sov_sock *s)
{
    struct sov_conn *c = s->conn;
    if (c && c->wr_shut && !c->kfin) {
        c->kfin = true;
        syscall(SYS_shutdown, s->fd, SHUT_WR);
    }
}

/* Our program closed the socket (lock held, its descriptor still open):
 * the close thread finishes the connection on a copy of the kernel
 * socket, so a peer that leaves afterwards still gets back what its
 * program had not read, on the kernel connection, then our FIN there
 * (tests/model/README.md, 3.11). Not for a close that resets. */
void sov_mig_keep_kernel(struct sov_sock *s, bool abortive)
{
    struct sov_conn *c = s->conn;
    if (abortive || s->fd_kept || !c || c->shared || c->reset || c->peer_gone || c->rx_bytes)
        return;
    int fd = VipxFdKeep(s->fd);
    if (fd < 0)
        return;
    s->fd = fd;
    s->fd_kept = true;
    /* Its last close is the service thread's, which must not linger
     * there (SO_LINGER is for the program's close: sov_close_connected). */
    struct linger off = {0, 0};
    if (s->linger.l_onoff)
        syscall(SYS_setsockopt, fd, SOL_SOCKET, SO_LINGER, &off, sizeof off);
}

/* A peer that asked and never ended (it died, or lies): reset, not a
 * sender waiting for ever. True if so. */
bool sov_mig_overdue(struct sov_conn *c)
{
    if (c->peer_mig != PMIG_ASKED || c->reset || sov_now_ns() <= c->mig_deadline_ns)
        return false;
    sov_conn_abort(c);
    return true;
}

/* Our send side is the kernel's now: the peer's END came and what it gave
 * back, with what we had combined, went out. */
bool sov_mig_send_ready(const struct sov_conn *c)
{
    return c->peer_mig == PMIG_ENDED && c->ret_len == 0;
}

/* The peer's REQUEST: its stream on the VI ended; ours ends with the ACK. */
static void peer_asks(struct sov_sock *s, struct sov_conn *c)
{
    /* A socket our program closed moves on its copy of the kernel socket
     * (sov_mig_keep_kernel), or resets without one; one shared with a
     * record cannot keep it where its other holders see it: reset
     * (docs/PROTOCOL.md). */
    if ((c->rec && c->mig == MIG_NONE) || !c->peer_window || c->peer_mig != PMIG_NONE ||
        !s->transparent || (s->app_closed && !s->fd_kept)) {
        sov_conn_abort(c);
        return;
    }
    c->peer_mig = PMIG_ASKED;
    c->mig_deadline_ns = sov_now_ns() + MIGRATE_WAIT_NS;
    /* Combined bytes come after everything sent on the VI: the returned
     * ones go first, so they wait in the same buffer, behind them. */
    if (!owe_combined(c)) {
        sov_conn_abort(c);
        return;
    }
    /* Our side goes too (3.10): our REQUEST before the ACK the peer waits
     * for, so it knows to wait for our END as well. */
    bool leaving = c->mig != MIG_NONE;
    if (!leaving && post_mig(c, MIG_REQUEST) == 0) {
        c->mig = MIG_ASKED;
        c->mig_auto = true;
    }
    if (c->mig == MIG_NONE || post_mig(c, MIG_ACK) != 0) {
        sov_conn_abort(c);
        return;
    }
    if (leaving) /* a peer that only answered: its service thread goes on */
        VipxViNudge(c->vi);
    if (!s->app_closed) /* a closed one: the close thread polls it */
        sov_mig_watch(s);
}

/* DATA after the peer's REQUEST: our own bytes it had not read, given back
 * in order, to go out on the kernel connection first (before our combined
 * bytes, which stand at the buffer's end). */
void sov_mig_returned(struct sov_sock *s, struct sov_conn *c, const uint8_t *p, uint32_t len)
{
    (void)s;
    if (!ret_room(c, len)) {
        sov_conn_abort(c);
        return;
    }
    size_t head = c->ret_len - c->ret_tail;
    memmove(c->ret + head + len, c->ret + head, c->ret_tail);
    memcpy(c->ret + head, p, len);
    c->ret_len += len;
}

/* ---- Both: the MIGRATE packet ------------------------------------------------------------ */

void sov_mig_packet(struct sov_sock *s, struct sov_conn *c, uint32_t imm, uint32_t len)
{
    uint32_t sub = (imm >> MIG_SUB_SHIFT) & MIG_SUB_MASK;
    if ((imm & MIG_RESERVED_MASK) || len) {
        sov_conn_abort(c);
        return;
    }
    switch (sub) {
    case MIG_REQUEST:
        peer_asks(s, c);
        return;
    case MIG_ACK: /* for our REQUEST: the peer sends no more DATA */
        if (c->mig != MIG_ASKED) {
            sov_conn_abort(c);
            return;
        }
        c->mig = MIG_RETURNING;
        return;
    case MIG_END:
        if (c->peer_mig != PMIG_ASKED) {
            sov_conn_abort(c);
            return;
        }
        c->peer_mig = PMIG_ENDED;
        c->ret_tail = 0; /* (ours counts itself: sov_migrate, sov_mig_step) */
        if (!sov_mig_push(s))
            c->ret_len = c->ret_off = 0;
        return;
    default:
        sov_conn_abort(c);
    }
}

/* ---- A: this end leaves ------------------------------------------------------------------ */

/* Waits until `done` says so: false at the deadline or when the connection
 * failed. */
static bool wait_for(struct sov_sock *s, bool (*done)(const struct sov_conn *), uint64_t end)
{
    uint64_t spun = 0;
    for (;;) {
        sov_progress(s);
        struct sov_conn *c = s->conn;
        if (!c || c->reset)
            return false;
        sov_mig_push(s); /* what we owe, once nothing more comes before it */
        if (done(c))
            return true;
        if (c->peer_gone || sov_now_ns() > end)
            return false;
        if (sov_wait(s, &spun) == -EBADF)
            return false;
    }
}

static bool acked(const struct sov_conn *c)
{
    return c->mig == MIG_RETURNING;
}

/* A crossing REQUEST of the peer's (both ends leaving at once) is served
 * here too: what it gives back, and what we had combined, must reach the
 * kernel connection before we go, since our process may not be there to
 * write it later. */
static bool peer_done(const struct sov_conn *c)
{
    return (c->peer_mig == PMIG_NONE && c->ret_len == 0) || sov_mig_send_ready(c);
}

/* Gives the peer back its bytes we have not read (what our program would
 * read next: an urgent byte passed over stays passed over), as DATA, as
 * far as our credits go. One buffer is read ahead (gb_len bytes in sbuf):
 * that frees a receive buffer, and short of a credit it acknowledges what
 * it owes: when the peer gives back too, it waits for a credit as we do,
 * and below ack_every neither would send one (tests/model/README.md, 3.9). */
static int give_back_some(struct sov_sock *s)
{
    struct sov_conn *c = s->conn;
    for (;;) {
        if (!c->gb_len) {
            sov_sends_out(c); /* sbuf free: nothing of ours in flight (fabric) */
            size_t n = sov_vi_take(s, c->sbuf, c->send_mtu);
            if (n == 0)
                return 0;
            c->taken -= (uint64_t)n; /* given back, not read: our program reads them later */
            c->gb_len = (uint32_t)n;
        }
        if (c->credits == 0) {
            sov_repost_deferred(c);
            /* Only when the peer has no credit and none is coming: every
             * one of its window is held here (unread, or reposted and owed;
             * none in flight either way). An ACK below ack_every breaks the
             * count of ACK packets the peer posted room for (P, PROTOCOL.md):
             * one at each turn of a handler thread that answers every packet
             * (SOVIA_HANDLING=handler) outran the peer's handling, which then
             * had no receive posted for the next (RECVQ_EMPTY: reset). With
             * the whole window held no such ACK of ours can be in flight, so
             * at most one is. */
            if (c->to_ack && c->rq_count + c->to_ack < c->cfg.window)
                return 0;
            if (c->to_ack && sov_conn_send_ctrl(c, PKT_ACK) != 0)
                return -ECONNRESET;
            return 0;
        }
        int rc = sov_post_packet(c, PKT_DATA, c->sbuf, c->gb_len, c->sbuf_mh);
        if (rc)
            return rc;
        c->credits--;
        c->gb_len = 0;
    }
}

/* Nothing more to give back. */
static bool given_back(const struct sov_sock *s)
{
    return !s->conn->gb_len && (!sov_readable(s) || s->rd_shut);
}

/* The leaving end's: all of it, waiting for credits until `end`. */
static int give_back(struct sov_sock *s, uint64_t end)
{
    uint64_t spun = 0;
    bool nudged = false;
    for (;;) {
        int rc = give_back_some(s);
        struct sov_conn *c = s->conn;
        if (rc || given_back(s))
            return rc;
        sov_progress(s);
        if (c->reset || sov_now_ns() > end)
            return -ECONNRESET;
        /* Our credits come from the peer's side moving, which its service
         * thread may do (its program waits elsewhere): once per wait. */
        if (c->credits == 0 && !nudged)
            VipxViNudge(c->vi);
        nudged = c->credits == 0;
        if (c->credits == 0 && sov_wait(s, &spun) == -EBADF)
            return -EBADF;
    }
}

/* The answering end's side (mig_auto), one step as far as it goes now:
 * after the peer's ACK, what our program had not read goes back, then our
 * END; once the peer's END came and what we owe went out, the stream is
 * the kernel's. Called after each sov_progress, in whichever thread
 * handles the socket (our program's, the service thread, the close
 * thread); never waits. Reset if it is not through by the deadline. */
void sov_mig_step(struct sov_sock *s)
{
    struct sov_conn *c = s->conn;
    if (!c || !c->mig_auto || c->reset || c->mig == MIG_DONE)
        return;
    if (c->mig < MIG_ENDED && sov_now_ns() > c->mig_deadline_ns) {
        sov_conn_abort(c);
        return;
    }
    if (c->mig == MIG_RETURNING) {
        if (give_back_some(s) != 0) {
            sov_conn_abort(c);
            return;
        }
        if (!given_back(s))
            return;
        if (post_mig(c, MIG_END) != 0) {
            sov_conn_abort(c);
            return;
        }
        c->mig = MIG_ENDED;
    }
    if (c->mig == MIG_ENDED) {
        if (!sov_mig_push(s))
            c->ret_len = c->ret_off = c->ret_tail = 0; /* the kernel connection ended */
        if (sov_mig_send_ready(c)) {
            c->mig = MIG_DONE;
            atomic_fetch_add(&sov_g.tp_migrated, 1); /* even if it is closed before it settles */
        }
    }
}

static bool answered(const struct sov_conn *c)
{
    return c->mig == MIG_DONE;
}

int sov_migrate(struct sov_sock *s)
{
    struct sov_conn *c = s->conn;
    if (!c || s->tp_waiting) {
        sov_tp_fall_back(s); /* nothing went over sovia yet */
        return 0;
    }
    uint64_t end = sov_now_ns() + MIGRATE_WAIT_NS;
    int rc = c->reset ? -ECONNRESET : 0;
    /* A peer that is gone (every process there closed) cannot take back
     * what our program has not read: those bytes go with the VI. */
    if (rc == 0 && c->peer_gone && sov_readable(s))
        rc = -ECONNRESET;
    /* We answered the peer's REQUEST before our program left (3.10): our
     * side is moving already (sov_mig_step, run by wait_for's progress). */
    if (rc == 0 && c->mig_auto) {
        if (!wait_for(s, answered, end))
            rc = -ECONNRESET;
        c = s->conn;
        if (rc == 0) {
            sov_tp_fall_back(s); /* counted migrated by sov_mig_step */
            return 0;
        }
    }
    if (rc == 0 && c->mig == MIG_NONE && !c->peer_gone) {
        /* What our program combined would need a credit, which may never
         * come (a peer leaving too, its window full, waits as we do): it
         * goes to the kernel socket instead, behind what a crossing peer
         * gives back (tests/model/README.md, 3.8). */
        if (!owe_combined(c))
            rc = -ECONNRESET;
        if (rc == 0)
            rc = post_mig(c, MIG_REQUEST);
        if (rc == 0) {
            c->mig = MIG_ASKED;
            VipxViNudge(c->vi); /* its program may wait elsewhere: its service thread answers */
        }
    }
    if (rc == 0 && !c->peer_gone) {
        if (!wait_for(s, acked, end))
            rc = -ECONNRESET;
        if (rc == 0)
            rc = give_back(s, end);
        c = s->conn;
        if (rc == 0)
            rc = post_mig(c, MIG_END);
        if (rc == 0) {
            c->mig = MIG_ENDED; /* the peer may drop the VI now: no loss */
            if (c->peer_mig == PMIG_ASKED)
                VipxViNudge(c->vi); /* its END may wait for credits our END gave */
        }
        if (rc == 0 && !wait_for(s, peer_done, end))
            rc = -ECONNRESET;
    }
    c = s->conn;
    if (rc == 0) {
        c->mig = MIG_DONE;
        atomic_fetch_add(&sov_g.tp_migrated, 1);
    } else if (c) {
        /* The two ends no longer agree on the stream: reset it for both.
         * A disconnect (connect to AF_UNSPEC) sends the kernel peer an RST
         * and leaves ECONNRESET for our program's next call: bytes were
         * lost, which a plain end of stream would hide. */
        sov_conn_abort(c);
        struct sockaddr unspec = {.sa_family = AF_UNSPEC};
        syscall(SYS_connect, s->fd, &unspec, sizeof unspec);
    }
    sov_tp_fall_back(s);
    return rc;
}

/* Another thread's send, shutdown or recv while sov_migrate, which sleeps
 * with the lock released, moves the connection: nothing may follow our
 * REQUEST on the VI (the peer would take DATA for its own bytes given
 * back, and resets at a FIN), and what a reader finds missing on the VI
 * is given back or comes on the kernel socket, not an end of stream. It
 * waits until the socket fell back: -EBADF then sends the caller to the
 * kernel socket (the preload's rule). A side that moves because the peer
 * asked (mig_auto) does not fall back at once: 0 once what was unread went
 * back, and the caller goes on to the kernel socket itself. */
int sov_mig_wait_ours(struct sov_sock *s, bool nonblock)
{
    uint64_t spun = 0;
    for (;;) {
        if (s->dead || !s->conn)
            return -EBADF;
        if (s->conn->mig_auto) { /* moved by whichever thread handles it */
            sov_progress(s);
            if (!s->conn || s->conn->reset)
                return -ECONNRESET;
            if (!sov_mig_answer_moving(s->conn))
                return 0;
        } else if (!sov_mig_ours_moving(s->conn)) {
            return -EBADF;
        }
        if (nonblock)
            return -EAGAIN;
        int rc = sov_wait(s, &spun);
        if (rc)
            return rc;
    }
}

/* ---- B: the calls of our program while the peer leaves -------------------------------- */

bool sov_mig_over(const struct sov_sock *s)
{
    const struct sov_conn *c = s->conn;
    if (!c)
        return false;
    return c->mig == MIG_DONE ||
           (c->peer_mig == PMIG_ENDED && c->ret_len == 0 && sov_readable(s) == 0);
}

/* The lock is released around a system call that may block, as a kernel
 * socket's caller would not hold up others using the same socket. */
static long unlocked_syscall(struct sov_sock *s, bool blocking, long nr, long a, long b, long c)
{
    if (!blocking)
        return syscall(nr, a, b, c);
    sov_sock_unlock(s);
    long r = syscall(nr, a, b, c);
    int err = errno;
    sov_sock_lock(s);
    errno = err;
    return r;
}

ssize_t sov_mig_send(struct sov_sock *s, const struct iovec *iov, int iovcnt, int flags)
{
    bool nonblock = s->nonblock || (flags & MSG_DONTWAIT);
    uint64_t spun = 0;
    for (;;) {
        sov_progress(s); /* its bytes back and its END, if they came */
        struct sov_conn *c = s->conn;
        if (!c || s->dead)
            return -EBADF;
        if (c->reset || sov_mig_overdue(c))
            return -ECONNRESET;
        sov_mig_push(s);
        if (sov_mig_send_ready(c))
            break;
        if (nonblock)
            return -EAGAIN;
        if (c->peer_mig != PMIG_ENDED) {
            int rc = sov_wait(s, &spun);
            if (rc)
                return rc;
        } else {
            struct pollfd p = {.fd = s->fd, .events = POLLOUT};
            struct timespec slice = {0, 100000000};
            if (unlocked_syscall(s, true, SYS_ppoll, (long)&p, 1, (long)&slice) < 0 &&
                errno == EINTR)
                return -EINTR;
        }
    }
    struct msghdr mh = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
    long n = unlocked_syscall(s, !nonblock, SYS_sendmsg, s->fd, (long)&mh,
                              flags | (nonblock ? MSG_DONTWAIT : 0));
    return n < 0 ? -errno : n;
}

ssize_t sov_mig_recv(struct sov_sock *s, const struct iovec *iov, int iovcnt, int flags,
                     size_t got)
{
    bool nonblock = s->nonblock || (flags & MSG_DONTWAIT);
    if (got && (!(flags & MSG_WAITALL) || (flags & MSG_PEEK)))
        return (ssize_t)got;
    /* What the VI gave fills the iovec's start; the kernel fills the rest. */
    struct iovec rest[iovcnt > 0 ? iovcnt : 1];
    int n = 0;
    size_t skip = got;
    for (int k = 0; k < iovcnt; k++) {
        if (skip >= iov[k].iov_len) {
            skip -= iov[k].iov_len;
            continue;
        }
        rest[n].iov_base = (uint8_t *)iov[k].iov_base + skip;
        rest[n++].iov_len = iov[k].iov_len - skip;
        skip = 0;
    }
    struct msghdr mh = {.msg_iov = rest, .msg_iovlen = (size_t)n};
    bool blocking = !nonblock && !got; /* after VI bytes: what is there now */
    long r = unlocked_syscall(s, blocking, SYS_recvmsg, s->fd, (long)&mh,
                              (flags & ~MSG_DONTWAIT) | (blocking ? 0 : MSG_DONTWAIT));
    if (r < 0)
        return got ? (ssize_t)got : -errno;
    return (ssize_t)got + r;
}

short sov_mig_revents(struct sov_sock *s, short r)
{
    struct sov_conn *c = s->conn;
    struct pollfd p = {.fd = s->fd, .events = POLLIN | POLLOUT | POLLRDHUP};
    struct timespec zero = {0, 0};
    if (syscall(SYS_ppoll, &p, 1, &zero, NULL, 0) < 0)
        p.revents = 0;
    r &= (short)~(POLLOUT | POLLWRNORM);
    if (sov_mig_answer_moving(c)) /* what is unread goes back: the kernel's */
        r &= (short)~(POLLIN | POLLRDNORM | POLLRDHUP);
    else if (!sov_readable(s) && (!c->peer_fin || c->mig_auto)) /* the rest: the kernel's */
        r |= p.revents & (POLLIN | POLLRDNORM | POLLRDHUP | POLLHUP | POLLERR);
    if (sov_mig_send_ready(c) && !c->wr_shut)
        r |= p.revents & (POLLOUT | POLLWRNORM | POLLERR);
    return r;
}

int sov_mig_shutdown_wr(struct sov_sock *s)
{
    struct sov_conn *c = s->conn;
    c->wr_shut = true; /* sov_mig_push shuts the kernel side after what it owes */
    if (sov_mig_send_ready(c))
        sov_mig_kernel_fin(s);
    return 0;
}

/* Called while a packet is handled: in the service thread's pass over the
 * timed sockets (holding sov_g.lock) the socket is timed already. */
void sov_mig_watch(struct sov_sock *s)
{
    s->migrating = true;
    if (!atomic_load(&s->timed))
        sov_timer_add(s);
}

/* ---- Every connection of the process ----------------------------------------------------- */

/* Migrates the carried connections `pick` selects; how many were reset. */
static int migrate_where(bool (*pick)(int fd, const struct sov_conn *c))
{
    int reset = 0;
    for (int fd = 0, n = sov_table_limit(); fd < n; fd++) {
        struct sov_sock *s = sov_lookup(fd);
        if (!s || !s->transparent || s->kind != SK_CONNECTED)
            continue;
        sov_sock_lock(s);
        if (s->dead || sov_lookup(fd) != s || !s->conn || !pick(fd, s->conn)) {
            sov_sock_unlock(s);
            continue;
        }
        reset += sov_migrate(s) != 0;
    }
    return reset;
}

static bool any(int fd, const struct sov_conn *c)
{
    (void)fd;
    (void)c;
    return true;
}

/* The system call itself: the preload's fcntl takes the socket's lock. */
static bool survives_exec(int fd, const struct sov_conn *c)
{
    (void)c;
    long fl = syscall(SYS_fcntl, fd, F_GETFD);
    return fl >= 0 && !(fl & FD_CLOEXEC);
}

/* Goes to the next image, which cannot take it as it is: its VI kept
 * nothing to map it there with, or it is on the far NIC (an endpoint of
 * libfabric's cannot be handed to another image). */
static bool survives_unexportable(int fd, const struct sov_conn *c)
{
    return (c->no_export || c->far) && survives_exec(fd, c);
}

/* On a fabric NIC (the far one, or the process's own with
 * SOVIA_PROVIDER=fabric): its endpoint is this process's, its progress
 * this process's threads', so no child can share it. */
static bool on_fabric(int fd, const struct sov_conn *c)
{
    (void)fd;
    return c->far || strncmp(sov_provider_name(), "fabric", 6) == 0;
}

int sov_tp_migrate_fabric(void)
{
    if (!atomic_load(&sov_g.far_open) && strncmp(sov_provider_name(), "fabric", 6) != 0)
        return 0; /* nothing to look at: the usual fork */
    return migrate_where(on_fabric);
}

int sov_tp_migrate_all(void)
{
    atomic_store(&sov_g.inert, true);
    return migrate_where(any);
}

int sov_tp_migrate_inherited(void)
{
    return migrate_where(survives_exec);
}

int sov_tp_migrate_unexportable(void)
{
    return migrate_where(survives_unexportable);
}
