/*
 * kill.c - under `sovia run`, one end of a carried connection dies at a
 * random point of connect, transfer or close, and the other end survives
 * it (issue 6, "Faults"; hardening/faults_kill makes the same checks
 * through sov_*, this test through the ordinary libc calls).
 *
 * Both roles of a case are long-lived survivors and take turns. In a
 * "client dies" iteration the client role forks a fresh client that
 * connects to the server role and dies, and the server role survives it;
 * in a "server dies" iteration the server role forks a fresh server (its
 * own listener; it closes the inherited one, as an accept-fork server
 * does) that the client role connects to, and which dies. The plans are
 * drawn in main before the case (seeded: HARDENING_SEED), so both roles
 * know each iteration: the phase (connect: during connect()/accept();
 * transfer: both ways; close: during shutdown()/close()) and the death:
 * SIGKILL from the other role after a random delay into the phase, raise
 * (SIGKILL) at a point of the phase, _exit(0) or exit(0) with everything
 * open (exit runs sovia's graceful close). In the transfer and close
 * phases the dying end first reads a byte of the survivor's stream, so the
 * connection is paired (carried by sovia) before the phase starts.
 *
 * The survivor waits in poll() on non-blocking sockets and checks:
 *   - a connection that existed ends (read 0, ECONNRESET, or EPIPE on a
 *     send) within 1 s of the death (+250 ms slack); a connect that never
 *     completed fails with ECONNREFUSED or ECONNRESET in that time;
 *   - every byte it read is the peer's pattern stream, in order (the
 *     dying end checks the survivor's stream likewise);
 *   - after all iterations it holds exactly the descriptors, memfds,
 *     memfd mappings and threads it held after the warm-up iterations;
 * and main checks that /dev/shm and /tmp gain no entry named sovia or
 * vipl. The stat records prove the connections were carried: a dying end
 * writes none (or one that does not count), but both survivors exit
 * normally and each must have carried at least the connections that were
 * paired before their transfer or close phase began.
 *
 * Cases: `deaths`, clients dying in transfer and close, servers in every
 * phase (20 deaths per survivor); `client_dies_connecting`, clients dying
 * in connect (10 per survivor; it found that a client dying between its
 * connect() and its answer to the WAKEUP left the server's accepted
 * socket pending for ever, fixed in sov_tp_settle).
 * HARDENING_SOAK=1 runs both SOAK_ROUNDS times, 50 and 10 deaths per
 * survivor (1200 deaths in all;
 * the rounds are cases because the harness gives a case 65 s).
 * HARDENING_VERBOSE=1 logs every iteration.
 */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pharness.h"

/* The dying ends are forked from roles that run sovia's threads. */
P_THREADED_FORK_CHILDREN

#define CHUNK 8192
#define DEADLINE_MS 1250 /* the end within 1 s of the death, +250 ms slack */
#define SHOW_MS 300      /* how long after the death a connection may still show */
#define MARK (-1LL)      /* from the dying end: the phase starts now */
#define WARMUPS 2
#define CI_PER_SURVIVOR 20
#define CONNECTING_PER_SURVIVOR 10 /* client_dies_connecting: clients die in connect */
#define SOAK_ROUNDS 10             /* HARDENING_SOAK=1: 10 x (100 + 20) deaths */
#define SOAK_PER_CASE 50
#define MAX_PLANS (WARMUPS + 2 * SOAK_PER_CASE)

enum phase { PH_CONNECT, PH_TRANSFER, PH_CLOSE, PH_N };
enum death { D_KILL, D_RAISE, D_UNDERSCORE_EXIT, D_EXIT, D_N };
static const char *const phase_name[PH_N] = {"connect", "transfer", "close"};
static const char *const death_name[D_N] = {"SIGKILL", "raise(SIGKILL)", "_exit", "exit"};

struct plan {
    bool client_dies;
    bool shut;          /* close phase: shutdown(SHUT_WR) before close() */
    enum phase phase;
    enum death death;
    unsigned delay_us;  /* D_KILL: how far into the phase */
    unsigned point;     /* the other deaths: at which point of the phase */
    uint64_t seed;      /* the dying end's stream; the survivor's is seed ^ 1 */
};

/* Drawn by main before each case; the forked roles read their copy. */
static struct plan plans[MAX_PLANS];
static unsigned nplans;

static char *describe(const struct plan *p, unsigned it)
{
    static char buf[160];
    snprintf(buf, sizeof buf, "iteration %u: %s dies (%s%s, %s, %u us / point %u)", it,
             p->client_dies ? "client" : "server", phase_name[p->phase],
             p->phase == PH_CLOSE && p->shut ? " with shutdown" : "", death_name[p->death],
             p->delay_us, p->point);
    return buf;
}

static bool verbose(void)
{
    const char *v = getenv("HARDENING_VERBOSE");
    return v && strcmp(v, "1") == 0;
}

/* ---- Pattern streams: any piece can be checked where it falls ---------------------- */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void pattern(uint8_t *out, size_t n, uint64_t seed, uint64_t off)
{
    uint64_t key = mix64(seed), word = 0;
    for (size_t i = 0; i < n; i++, off++) {
        if (i == 0 || (off & 7) == 0)
            word = mix64(key ^ (off >> 3));
        out[i] = (uint8_t)(word >> (8 * (off & 7)));
    }
}

static bool pattern_ok(const uint8_t *in, size_t n, uint64_t seed, uint64_t off)
{
    uint8_t want[CHUNK];
    pattern(want, n, seed, off);
    return memcmp(in, want, n) == 0;
}

/* ---- What a process holds --------------------------------------------------------- */

/* Once `still_ms` went by without a change (a connection closed just
 * before may still be going down on a service thread), or once it equals
 * *want; at most 3 s. */
static struct p_held held_after(const struct p_held *want, int still_ms)
{
    double end = p_now_ms() + 3000, since = p_now_ms();
    struct p_held h = p_held_now();
    while (p_now_ms() < end && !(want ? p_held_equal(&h, want) : p_now_ms() - since >= still_ms)) {
        p_sleep_ms(10);
        struct p_held again = p_held_now();
        if (!p_held_equal(&again, &h))
            since = p_now_ms();
        h = again;
    }
    return h;
}

/* ---- Files named like sovia's ----------------------------------------------------- */

#define MAX_NAMES 128
struct names {
    int n;
    char v[MAX_NAMES][256];
};

static bool sovia_named(const char *name)
{
    return strcasestr(name, "sovia") || strcasestr(name, "vipl");
}

static void list_sovia_named(const char *dir, struct names *out)
{
    out->n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d)) != NULL && out->n < MAX_NAMES;)
        if (sovia_named(e->d_name))
            snprintf(out->v[out->n++], sizeof out->v[0], "%s", e->d_name);
    if (d)
        closedir(d);
}

static void check_nothing_new(const char *dir, const struct names *before)
{
    static struct names after;
    list_sovia_named(dir, &after);
    for (int i = 0; i < after.n; i++) {
        bool old = false;
        for (int j = 0; j < before->n && !old; j++)
            old = strcmp(before->v[j], after.v[i]) == 0;
        if (!old)
            FAILF("%s/%s appeared during the test", dir, after.v[i]);
    }
}

/* ---- The end that dies (a fresh process forked by a role) --------------------------- */

struct dying {
    const struct plan *p;
    struct p_role *role; /* the forking role's: closed in the child */
    int link;            /* to the forking role: the port, MARK, the time of death */
};

static void to_killer(int link, long long v)
{
    struct p_role k = {.role = "link", .to_peer = link, .from_peer = -1};
    p_put_int(&k, v);
}

static long long now_us(void)
{
    return (long long)(p_now_ms() * 1000);
}

__attribute__((noreturn)) static void die_now(int link, const struct plan *p)
{
    to_killer(link, now_us()); /* the moment of death, the survivor's deadline starts */
    if (p->death == D_RAISE)
        raise(SIGKILL);
    if (p->death == D_UNDERSCORE_EXIT)
        _exit(0);
    exit(0);
}

/* Point `point` of the phase: the killer's cue (point 0), or the death. */
static void phase_point(int link, const struct plan *p, unsigned point)
{
    if (p->death == D_KILL) {
        if (point == 0)
            to_killer(link, MARK);
    } else if (point == p->point) {
        die_now(link, p);
    }
}

struct stream {
    int fd;
    uint64_t out, in;
    const struct plan *p;
};

/* Takes what there is of the survivor's stream, checking it; false at its
 * end or on an error. */
static bool take(struct stream *s, int flags)
{
    static uint8_t buf[CHUNK];
    ssize_t n = recv(s->fd, buf, CHUNK, flags);
    if (n < 0 && errno == EAGAIN)
        return true;
    if (n <= 0)
        return false;
    if (!pattern_ok(buf, (size_t)n, s->p->seed ^ 1, s->in))
        FAILF("the survivor's stream differs in the %zd bytes at %llu", n,
              (unsigned long long)s->in);
    s->in += (uint64_t)n;
    return true;
}

static bool give(struct stream *s)
{
    static uint8_t buf[CHUNK];
    pattern(buf, CHUNK, s->p->seed, s->out);
    ssize_t n = write(s->fd, buf, CHUNK);
    if (n > 0)
        s->out += (uint64_t)n;
    return n > 0 || errno == EAGAIN;
}

/* Both ways until the death (a point of the loop, or the killer's signal). */
static void transfer(struct stream *s, int link, unsigned first_point)
{
    double end = p_now_ms() + 3000;
    for (unsigned point = first_point; p_now_ms() < end; point++) {
        phase_point(link, s->p, point);
        if (!give(s) || !take(s, MSG_DONTWAIT))
            FAILF("the survivor's end went first (%s) after %llu bytes in, %llu out",
                  p_errname(errno), (unsigned long long)s->in, (unsigned long long)s->out);
    }
}

__attribute__((noreturn)) static void dying_end(void *arg)
{
    const struct dying *d = arg;
    const struct plan *p = d->p;
    p_threaded_fork_child();
    signal(SIGPIPE, SIG_IGN);
    close(d->role->to_peer);
    close(d->role->from_peer);
    if (d->role->lfd >= 0)
        SYS(close(d->role->lfd));
    int fd;
    if (p->client_dies) {
        fd = (int)SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        struct sockaddr_in a = p_loopback(d->role->port);
        if (p->phase == PH_CONNECT)
            phase_point(d->link, p, 0);
        SYS(connect(fd, (struct sockaddr *)&a, sizeof a));
    } else {
        int port, lfd = p_listener(&port);
        to_killer(d->link, port); /* the killer passes it on to the survivor */
        if (p->phase == PH_CONNECT)
            phase_point(d->link, p, 0);
        fd = (int)SYS(accept(lfd, NULL, NULL));
    }
    struct stream s = {.fd = fd, .p = p};
    if (p->phase == PH_CONNECT)
        phase_point(d->link, p, 1);
    else if (!take(&s, 0) || s.in == 0) /* paired, or fell back, before the phase */
        FAILF("no byte of the survivor's stream (%s)", p_errname(errno));
    SYS(fcntl(fd, F_SETFL, O_NONBLOCK));
    if (p->phase == PH_CLOSE) {
        phase_point(d->link, p, 0);
        if (p->shut)
            SYS(shutdown(fd, SHUT_WR));
        phase_point(d->link, p, 1);
        SYS(close(fd));
        phase_point(d->link, p, 2);
    } else {
        transfer(&s, d->link, p->phase == PH_CONNECT ? 2 : 0);
    }
    if (p->death == D_KILL) {
        p_sleep_ms(5000);
        FAILF("not killed");
    }
    die_now(d->link, p); /* the point was past the end of the phase */
}

/* ---- The killer: the role that forks the dying end --------------------------------- */

/* The dying end's next value; false if it went without sending one. */
static bool from_dying(int fd, long long *v)
{
    size_t done = 0;
    while (done < sizeof *v) {
        ssize_t n = read(fd, (char *)v + done, sizeof *v - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        done += (size_t)n;
    }
    return true;
}

static int reap(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            FAILF("waitpid: %s", p_errname(errno));
    return st;
}

static void kill_one(struct p_role *r, const struct plan *p, unsigned it)
{
    int lk[2];
    SYS(pipe2(lk, O_CLOEXEC));
    struct dying d = {.p = p, .role = r, .link = lk[1]};
    pid_t pid = p_fork(p->client_dies ? "dying-client" : "dying-server", dying_end, &d);
    SYS(close(lk[1]));
    long long v;
    bool got = true;
    if (!p->client_dies && (got = from_dying(lk[0], &v)))
        p_put_int(r, v); /* the port */
    if (!got || !from_dying(lk[0], &v))
        FAILF("%s: the dying end failed (status 0x%x)", describe(p, it), reap(pid));
    long long t = v;
    if (p->death == D_KILL) {
        CHECK_EQ(v, MARK);
        struct timespec ts = {0, (long)p->delay_us * 1000L};
        nanosleep(&ts, NULL);
        SYS(kill(pid, SIGKILL));
        t = now_us();
    }
    p_put_int(r, t);
    int st = reap(pid);
    bool by_kill = p->death == D_KILL || p->death == D_RAISE;
    if (by_kill ? !(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
                : !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
        FAILF("%s: the dying end ended with status 0x%x", describe(p, it), st);
    SYS(close(lk[0]));
}

/* ---- The survivor ---------------------------------------------------------------------- */

struct live {
    int fd;
    bool connecting, had_conn, ended;
    int err;            /* what ended it: 0 (end of stream) or an errno */
    double end_ms;
    uint64_t in, out;
    long long bad_at;   /* the first chunk not of the peer's stream, or -1 */
    uint64_t seed;
};

static void live_end(struct live *l, int err)
{
    l->ended = true;
    l->err = err;
    l->end_ms = p_now_ms();
}

/* The non-blocking connect's outcome, once poll says it has one: true if
 * the connection is up. */
static bool connect_done(struct live *l, short re)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (!(re & (POLLOUT | POLLERR | POLLHUP)))
        return false;
    l->connecting = false;
    SYS(getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &err, &len));
    l->had_conn = err == 0;
    if (err)
        live_end(l, err);
    return l->had_conn;
}

/* One poll round's work on the connection. */
static void live_step(struct live *l, short re)
{
    static uint8_t buf[CHUNK];
    if (l->ended || l->fd < 0 || !re || (l->connecting && !connect_done(l, re)))
        return;
    if (re & (POLLIN | POLLERR | POLLHUP)) {
        ssize_t n = read(l->fd, buf, CHUNK);
        if (n > 0) {
            if (l->bad_at < 0 && !pattern_ok(buf, (size_t)n, l->seed, l->in))
                l->bad_at = (long long)l->in;
            l->in += (uint64_t)n;
        } else if (n == 0 || errno != EAGAIN) {
            live_end(l, n == 0 ? 0 : errno);
            return;
        }
    }
    if (re & POLLOUT) {
        pattern(buf, CHUNK, l->seed ^ 1, l->out);
        ssize_t n = send(l->fd, buf, CHUNK, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0)
            l->out += (uint64_t)n;
        else if (n < 0 && errno != EAGAIN)
            live_end(l, errno);
    }
}

/* The client survivor's connect (non-blocking) to the dying server. */
static void live_connect(struct live *l, int port)
{
    l->fd = (int)SYS(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    struct sockaddr_in a = p_loopback(port);
    if (connect(l->fd, (struct sockaddr *)&a, sizeof a) == 0)
        l->had_conn = true;
    else if (errno == EINPROGRESS)
        l->connecting = true;
    else if (errno == ECONNREFUSED || errno == ECONNRESET)
        live_end(l, errno);
    else
        FAILF("connect: %s", p_errname(errno));
}

static void check_outcome(const struct plan *p, unsigned it, const struct live *l, double death)
{
    const char *what = describe(p, it);
    double after = l->ended ? l->end_ms - death : -1;
    if (verbose())
        p_log("%s: connection %s, ended %s %s after %.1f ms, %llu bytes in", what,
              l->had_conn ? "yes" : l->fd >= 0 ? "connecting" : "no", l->ended ? "with" : "not",
              p_errname(l->err), after, (unsigned long long)l->in);
    if (l->bad_at >= 0)
        FAILF("%s: the bytes read at %lld are not the peer's stream", what, l->bad_at);
    if (l->fd < 0 && !l->ended)
        return; /* the dying client never connected */
    if (!l->ended || after > DEADLINE_MS)
        FAILF("%s: the %s did not end within %d ms of the death (%s after %.0f ms)", what,
              l->had_conn ? "connection" : "connect", DEADLINE_MS, l->ended ? "ended" : "alive",
              l->ended ? after : p_now_ms() - death);
    if (l->had_conn && l->err != 0 && l->err != ECONNRESET && l->err != EPIPE)
        FAILF("%s: the connection ended with %s", what, p_errname(l->err));
    if (!l->had_conn && l->err != ECONNREFUSED && l->err != ECONNRESET)
        FAILF("%s: the connect failed with %s", what, p_errname(l->err));
}

/*
 * One iteration as the survivor: the connection (accepted from r->lfd, or
 * connected to the port the other role passes on) until the other role
 * says when the peer died, then up to SHOW_MS more for a connection still
 * to show and DEADLINE_MS for its end.
 */
static void survive_one(struct p_role *r, const struct plan *p, unsigned it)
{
    struct live l = {.fd = -1, .bad_at = -1, .seed = p->seed};
    if (!p->client_dies)
        live_connect(&l, (int)p_get_int(r));
    double death = -1;
    for (;;) {
        struct pollfd f[3] = {{r->from_peer, POLLIN, 0},
                              {p->client_dies ? r->lfd : -1, POLLIN, 0},
                              {-1, 0, 0}};
        if (l.fd >= 0 && !l.ended) {
            f[2].fd = l.fd;
            f[2].events = (short)(l.connecting ? POLLOUT : POLLIN | POLLOUT);
        }
        if (poll(f, 3, 20) < 0 && errno != EINTR)
            FAILF("poll: %s", p_errname(errno));
        if (f[1].revents & POLLIN) {
            int fd = accept4(r->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd >= 0 && l.fd >= 0)
                FAILF("%s: a second connection", describe(p, it));
            if (fd >= 0)
                l.fd = fd, l.had_conn = true;
            else if (errno != EAGAIN && errno != ECONNABORTED)
                FAILF("accept4: %s", p_errname(errno));
        }
        live_step(&l, f[2].revents);
        if (death < 0 && (f[0].revents & (POLLIN | POLLHUP)))
            death = (double)p_get_int(r) / 1000;
        double now = p_now_ms();
        if (death >= 0 && (l.ended || (l.fd < 0 && now > death + SHOW_MS) ||
                           now > death + DEADLINE_MS))
            break;
    }
    check_outcome(p, it, &l, death);
    if (l.fd >= 0) {
        struct linger lg = {1, 0}; /* the peer is gone: nothing to wait for */
        setsockopt(l.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        SYS(close(l.fd));
    }
}

/* ---- The roles: each survives the other's dying ends and kills its own ------------ */

static void log_tally(double ms);

static void kill_role(struct p_role *r)
{
    signal(SIGPIPE, SIG_IGN);
    bool server = strcmp(r->role, "server") == 0;
    if (server)
        SYS(fcntl(r->lfd, F_SETFL, O_NONBLOCK));
    struct p_held base = {0};
    double t0 = p_now_ms();
    for (unsigned i = 0; i < nplans; i++) {
        alarm(P_WATCHDOG_S);
        const struct plan *p = &plans[i];
        if (p->client_dies == server)
            survive_one(r, p, i);
        else
            kill_one(r, p, i);
        p_barrier(r);
        if (i == WARMUPS - 1) { /* every thread sovia starts lazily is up */
            base = held_after(NULL, 100);
            p_barrier(r); /* before the other role's next connection comes */
        }
    }
    struct p_held now = held_after(&base, 0);
    if (!p_held_equal(&base, &now))
        FAILF("after %u iterations: fds %d -> %d, memfds %d -> %d, memfd mappings %d -> %d, "
              "threads %d -> %d",
              nplans, base.fds, now.fds, base.memfds, now.memfds, base.maps, now.maps,
              base.threads, now.threads);
    if (server) {
        SYS(close(r->lfd));
        log_tally(p_now_ms() - t0);
    }
}

/* ---- Plans ------------------------------------------------------------------------------- */

static uint64_t next(uint64_t *rng)
{
    return mix64(*rng += 0x9e3779b97f4a7c15ull);
}

static unsigned below(uint64_t *rng, unsigned n)
{
    return (unsigned)(next(rng) % n);
}

/* A death in one of the phases `first`..`last`. */
static struct plan random_plan(uint64_t *rng, bool client_dies, enum phase first, enum phase last)
{
    static const unsigned max_us[PH_N] = {2000, 20000, 3000};
    static const unsigned points[PH_N] = {4, 40, 3};
    struct plan p = {.client_dies = client_dies};
    p.phase = (enum phase)(first + below(rng, last - first + 1));
    p.death = below(rng, 2) ? D_KILL : (enum death)(1 + below(rng, D_N - 1));
    p.delay_us = below(rng, max_us[p.phase]);
    p.point = below(rng, points[p.phase]);
    p.shut = below(rng, 2);
    p.seed = next(rng);
    return p;
}

/* Fills plans[] for one case: the warm-ups, then per_survivor deaths each
 * way, the clients' in the phases `cfirst`..`clast`. Returns how many
 * connections each survivor surely carried (paired before a transfer or
 * close phase began). */
static unsigned draw_plans(uint64_t *rng, unsigned per_survivor, enum phase cfirst,
                           enum phase clast)
{
    const struct plan warm = {.phase = PH_TRANSFER, .death = D_EXIT, .point = 5, .seed = 7};
    nplans = 0;
    plans[nplans] = warm;
    plans[nplans++].client_dies = true;
    plans[nplans++] = warm;
    for (unsigned i = 0; i < per_survivor; i++) {
        plans[nplans++] = random_plan(rng, true, cfirst, clast);
        plans[nplans++] = random_plan(rng, false, PH_CONNECT, PH_CLOSE);
    }
    unsigned paired[2] = {0, 0};
    for (unsigned i = 0; i < nplans; i++)
        paired[plans[i].client_dies] += plans[i].phase != PH_CONNECT;
    return paired[0] < paired[1] ? paired[0] : paired[1];
}

/* The server role's last words: what the case's deaths were. */
static void log_tally(double ms)
{
    unsigned n[2][PH_N][D_N] = {{{0}}};
    for (unsigned i = WARMUPS; i < nplans; i++)
        n[plans[i].client_dies][plans[i].phase][plans[i].death]++;
    p_log("%u deaths in %.1f s", nplans - WARMUPS, ms / 1000);
    for (int side = 1; side >= 0; side--)
        for (int ph = 0; ph < PH_N; ph++)
            if (n[side][ph][D_KILL] + n[side][ph][D_RAISE] + n[side][ph][D_UNDERSCORE_EXIT] +
                n[side][ph][D_EXIT])
                p_log("%s dies during %s: SIGKILL %u, raise(SIGKILL) %u, _exit %u, exit %u",
                      side ? "client" : "server", phase_name[ph], n[side][ph][D_KILL],
                      n[side][ph][D_RAISE], n[side][ph][D_UNDERSCORE_EXIT], n[side][ph][D_EXIT]);
}

static uint64_t seed_from_env(void)
{
    const char *e = getenv("HARDENING_SEED");
    uint64_t seed = e && *e ? strtoull(e, NULL, 0) : 20260601;
    p_log("seed %llu (HARDENING_SEED reproduces a run)", (unsigned long long)seed);
    return seed;
}

/* "base", or "base_N" for round N of the soak. */
static void case_name(char *buf, size_t len, const char *base, unsigned round)
{
    if (round)
        snprintf(buf, len, "%s_%u", base, round);
    else
        snprintf(buf, len, "%s", base);
}

int main(void)
{
    p_init("kill");
    const char *soak = getenv("HARDENING_SOAK");
    bool long_run = soak && strcmp(soak, "1") == 0;
    uint64_t rng = seed_from_env();
    static struct names shm_before, tmp_before;
    list_sovia_named("/dev/shm", &shm_before);
    list_sovia_named("/tmp", &tmp_before);
    for (unsigned round = 1; round <= (long_run ? SOAK_ROUNDS : 1); round++) {
        static char deaths[32], connecting[40];
        case_name(deaths, sizeof deaths, "deaths", long_run ? round : 0);
        case_name(connecting, sizeof connecting, "client_dies_connecting", long_run ? round : 0);
        /* Clients die in transfer and close here, servers in every phase. */
        p_expect_carried(draw_plans(&rng, long_run ? SOAK_PER_CASE : CI_PER_SURVIVOR,
                                    PH_TRANSFER, PH_CLOSE));
        p_case(deaths, kill_role, kill_role, P_CARRIED);
        p_expect_carried(draw_plans(&rng, CONNECTING_PER_SURVIVOR, PH_CONNECT, PH_CONNECT));
        p_case(connecting, kill_role, kill_role, P_CARRIED);
    }
    check_nothing_new("/dev/shm", &shm_before);
    check_nothing_new("/tmp", &tmp_before);
    return p_done();
}
