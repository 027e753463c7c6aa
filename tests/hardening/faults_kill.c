/*
 * faults_kill: one end of a sov_* connection dies at a random point during
 * connect, transfer or close (docs/SOCKETS.md "Closing", docs/PROTOCOL.md
 * "Peer death"), and the other end survives it.
 *
 * Two long-lived survivors: a server whose clients die, and a client whose
 * servers die. Each iteration (seeded: HARDENING_SEED) spawns a fresh
 * process for the end that dies, picks the phase (connect, transfer both
 * ways, close) and how it dies: SIGKILL from outside after a random delay
 * (microseconds into the phase), SIGKILL raised by itself at a point of the
 * phase, _exit(0) with everything open, or exit(0) with everything open
 * (sovia's atexit close runs). The survivor waits in sov_poll with
 * non-blocking sockets and checks:
 *   - a connection that existed reports end of stream or ECONNRESET (EPIPE
 *     on a send after the peer's FIN; ECONNREFUSED for a connect that never
 *     completed) within 1 s of the death (+250 ms slack);
 *   - every byte it read before is the peer's pattern stream, in order;
 *   - after all iterations it holds exactly the descriptors, memfds,
 *     memfd mappings and threads it held after the warm-up iteration;
 * and /dev/shm and /tmp gain no sovia/vipl-named entry. CI runs 20
 * iterations per survivor; HARDENING_SOAK=1 runs 500 each (1000 in all).
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hcommon.h"
#include "sovia/sharness.h"

enum phase { PH_CONNECT, PH_TRANSFER, PH_CLOSE, PH_N };
enum death { D_KILL_OUTSIDE, D_KILL_SELF, D_UNDERSCORE_EXIT, D_EXIT, D_N };
static const char *const phase_name[] = {"connect", "transfer", "close"};
static const char *const death_name[] = {"SIGKILL", "raise(SIGKILL)", "_exit", "exit"};

struct plan {
    uint32_t phase, death, delay_us, point;
    uint64_t seed;
    uint16_t port; /* the survivor server's (when the client dies) */
};

/* What the survivor saw of one iteration. */
struct outcome {
    int32_t had_conn;
    int32_t err;      /* 0: end of stream; else the errno that ended it */
    int32_t bad_data; /* bytes that were not the peer's stream */
    double end_ms;    /* when it saw the end (CLOCK_MONOTONIC) */
    uint64_t bytes;
};

#define CHUNK 8192



/* ---- The end that dies ------------------------------------------------------------------ */

static void die(int chan, const struct plan *p)
{
    s_put_f64(chan, s_now_ms()); /* the moment of death, for the survivor's deadline */
    switch (p->death) {
    case D_KILL_SELF:
        raise(SIGKILL);
        break;
    case D_UNDERSCORE_EXIT:
        _exit(0);
    default:
        exit(0);
    }
}

/* Marks the start of the phase; dies here if this is the planned point. */
static void phase_point(int chan, const struct plan *p, uint32_t point)
{
    if (p->death == D_KILL_OUTSIDE) {
        if (point == 0)
            s_tok(chan, 'p'); /* the test kills us delay_us from now */
        return;
    }
    if (point == p->point)
        die(chan, p);
}

/* Traffic both ways until killed (or 3 s): our stream out, theirs checked in. */
static void transfer(int fd, int chan, const struct plan *p, uint32_t first_point)
{
    static uint8_t buf[CHUNK];
    uint64_t out = 0, in = 0;
    uint32_t point = first_point;
    double end = s_now_ms() + 3000;
    while (s_now_ms() < end) {
        phase_point(chan, p, point++);
        s_pattern_fill(buf, CHUNK, p->seed, out);
        ssize_t w = sov_send(fd, buf, CHUNK, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0)
            out += (uint64_t)w;
        ssize_t n = sov_recv(fd, buf, CHUNK, MSG_DONTWAIT);
        if (n > 0) {
            CHECK(s_pattern_check(buf, (size_t)n, p->seed ^ 1, in) < 0);
            in += (uint64_t)n;
        }
        if ((w < 0 && errno != EAGAIN) || n == 0 || (n < 0 && errno != EAGAIN))
            break; /* the survivor went first: nothing more to do */
    }
}

static void dying_client(int chan, void *arg)
{
    struct plan p = *(struct plan *)arg;
    s_ignore_sigpipe();
    int fd = s_socket(AF_INET, 0);
    struct sockaddr_in a;
    s_addr4(&a, p.port);
    if (p.phase == PH_CONNECT)
        phase_point(chan, &p, 0);
    if (sov_connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        _exit(0); /* killed survivor? no: the test kills only us */
    if (p.phase == PH_CONNECT)
        phase_point(chan, &p, 1);
    SYS(sov_fcntl(fd, F_SETFL, O_NONBLOCK));
    if (p.phase == PH_TRANSFER || p.phase == PH_CONNECT)
        transfer(fd, chan, &p, p.phase == PH_TRANSFER ? 0 : 2);
    uint8_t b[1000];
    s_pattern_fill(b, sizeof b, p.seed, 0);
    if (p.phase == PH_CLOSE) {
        phase_point(chan, &p, 0);
        SYS(sov_close(fd));
        phase_point(chan, &p, 1);
    }
    s_sleep_ms(3000); /* to be killed */
    phase_point(chan, &p, 9999);
}

/*
 * A listener on a free port. Port 0 reserves a port among sovia's, but a
 * `sovia run` program of the same user (other tests on this machine) may
 * listen on the same number through its kernel socket's shadow listener,
 * which reserves nothing: then listen says EADDRINUSE, and another port
 * is tried.
 */
static int listener_retry(uint16_t *port)
{
    for (int tries = 0;; tries++) {
        int fd = s_socket(AF_INET, 0);
        struct sockaddr_in a;
        s_addr4(&a, 0);
        SYS(sov_bind(fd, (struct sockaddr *)&a, sizeof a));
        if (sov_listen(fd, 4) == 0) {
            *port = s_local_port(fd);
            return fd;
        }
        CHECK_MSG(errno == EADDRINUSE && tries < 10, "sov_listen: %s", s_errname(errno));
        SYS(sov_close(fd));
    }
}

static void dying_server(int chan, void *arg)
{
    struct plan p = *(struct plan *)arg;
    s_ignore_sigpipe();
    uint16_t port;
    int lfd = listener_retry(&port);
    s_put_u64(chan, port);
    if (p.phase == PH_CONNECT)
        phase_point(chan, &p, 0);
    int fd = sov_accept(lfd, NULL, NULL);
    CHECK(fd >= 0);
    if (p.phase == PH_CONNECT)
        phase_point(chan, &p, 1);
    SYS(sov_fcntl(fd, F_SETFL, O_NONBLOCK));
    if (p.phase == PH_TRANSFER || p.phase == PH_CONNECT)
        transfer(fd, chan, &p, p.phase == PH_TRANSFER ? 0 : 2);
    if (p.phase == PH_CLOSE) {
        phase_point(chan, &p, 0);
        SYS(sov_close(fd));
        phase_point(chan, &p, 1);
    }
    s_sleep_ms(3000);
    phase_point(chan, &p, 9999);
}

/* ---- Survivors ------------------------------------------------------------------------------- */

struct live {
    int fd;
    bool connecting;
    uint64_t in, out;
    uint64_t seed;
    struct outcome oc;
    bool ended;
};

static void live_end(struct live *l, int err)
{
    if (l->ended)
        return;
    l->ended = true;
    l->oc.err = err;
    l->oc.end_ms = s_now_ms();
}

/* One sov_poll round on the connection: reads (checking the stream),
 * writes ours, notes the end. */
static void live_step(struct live *l, short re)
{
    static uint8_t buf[CHUNK];
    if (l->ended || l->fd < 0)
        return;
    if (l->connecting) {
        if (!(re & (POLLOUT | POLLERR | POLLHUP)))
            return;
        int e = 0;
        socklen_t el = sizeof e;
        SYS(sov_getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &e, &el));
        l->connecting = false;
        if (e) {
            live_end(l, e);
            return;
        }
        l->oc.had_conn = 1;
    }
    if (re & (POLLIN | POLLERR | POLLHUP)) {
        ssize_t n = sov_recv(l->fd, buf, CHUNK, MSG_DONTWAIT);
        if (n > 0) {
            if (s_pattern_check(buf, (size_t)n, l->seed, l->in) >= 0)
                l->oc.bad_data++;
            l->in += (uint64_t)n;
        } else if (n == 0) {
            live_end(l, 0);
            return;
        } else if (errno != EAGAIN) {
            live_end(l, errno);
            return;
        }
    }
    if (re & POLLOUT) {
        s_pattern_fill(buf, CHUNK, l->seed ^ 1, l->out);
        ssize_t w = sov_send(l->fd, buf, CHUNK, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0)
            l->out += (uint64_t)w;
        else if (w < 0 && errno != EAGAIN)
            live_end(l, errno);
    }
}

static void live_close(struct live *l)
{
    if (l->fd >= 0) {
        struct linger lg = {1, 0}; /* nothing to wait for: the peer is gone */
        sov_setsockopt(l->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        SYS(sov_close(l->fd));
    }
    l->fd = -1;
}

/*
 * Serves one iteration: the connection (accepted from lfd, or connected to
 * `port` when lfd < 0) until the test says the peer died at time T ('K'
 * and T), then up to 300 ms more for a connection still to show, and up to
 * 1.25 s after T for its end. Writes the outcome.
 */
static void survive_one(int chan, int lfd, uint16_t port, uint64_t seed)
{
    struct live l = {.fd = -1, .seed = seed};
    if (lfd < 0) {
        l.fd = s_socket(AF_INET, SOCK_NONBLOCK);
        struct sockaddr_in a;
        s_addr4(&a, port);
        int r = sov_connect(l.fd, (struct sockaddr *)&a, sizeof a);
        CHECK_MSG(r == 0 || errno == EINPROGRESS || errno == ECONNREFUSED, "sov_connect: %s",
                  s_errname(errno));
        if (r != 0 && errno == ECONNREFUSED)
            live_end(&l, ECONNREFUSED);
        l.connecting = r != 0 && errno == EINPROGRESS;
        l.oc.had_conn = r == 0;
    }
    double killed = -1;
    for (;;) {
        struct pollfd p[3] = {{chan, POLLIN, 0}, {lfd, POLLIN, 0}, {l.fd, 0, 0}};
        if (l.fd >= 0 && !l.ended)
            p[2].events = (short)(l.connecting ? POLLOUT : (POLLIN | POLLOUT));
        else
            p[2].fd = -1;
        int n = sov_poll(p, 3, 20);
        CHECK_MSG(n >= 0, "sov_poll: %s", s_errname(errno));
        if (p[1].revents & POLLIN) {
            int fd = sov_accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
            if (fd >= 0) {
                CHECK_MSG(l.fd < 0, "a second connection in one iteration");
                l.fd = fd;
                l.oc.had_conn = 1;
            }
        }
        live_step(&l, p[2].revents);
        if (p[0].revents & POLLIN) {
            s_want(chan, 'K');
            killed = s_get_f64(chan);
        }
        if (killed < 0)
            continue;
        double now = s_now_ms();
        if (l.ended || (l.fd < 0 && now > killed + 300) || now > killed + S_DEADLINE_MS)
            break;
    }
    if (!l.ended && l.fd >= 0)
        l.oc.end_ms = -1; /* alive past the deadline */
    l.oc.bytes = l.in;
    live_close(&l);
    s_put(chan, &l.oc, sizeof l.oc);
}

static void survivor(int chan, bool server)
{
    s_ignore_sigpipe();
    int lfd = -1;
    if (server) {
        uint16_t port;
        lfd = s_listener(AF_INET, &port, 16);
        SYS(sov_fcntl(lfd, F_SETFL, O_NONBLOCK));
        s_put_u64(chan, port);
    }
    struct hc_counts base = {0};
    for (;;) {
        char cmd;
        s_get(chan, &cmd, 1);
        if (cmd == 'Q')
            break;
        if (cmd == 'B') { /* after the warm-up: every lazy thread is up */
            base = hc_counts_stable(3000);
            s_tok(chan, 'b');
            continue;
        }
        uint64_t seed = s_get_u64(chan);
        uint16_t port = server ? 0 : (uint16_t)s_get_u64(chan);
        survive_one(chan, lfd, port, seed);
    }
    struct hc_counts now = hc_counts_settle(&base, 3000);
    const char *what = server ? "server survivor after every iteration"
                              : "client survivor after every iteration";
    hc_counts_check(&base, &now, what);
    if (lfd >= 0)
        SYS(sov_close(lfd));
    s_tok(chan, 'q');
}

static void survivor_server(int chan, void *arg)
{
    (void)arg;
    survivor(chan, true);
}

static void survivor_client(int chan, void *arg)
{
    (void)arg;
    survivor(chan, false);
}

/* ---- The test --------------------------------------------------------------------------------- */

static int srv_chan, cli_chan;
static uint16_t srv_port;
static unsigned counts[2][PH_N][D_N];

static struct plan random_plan(uint64_t *rng)
{
    struct plan p = {0};
    p.phase = hc_below(rng, PH_N);
    p.death = hc_below(rng, 10) < 5 ? D_KILL_OUTSIDE : 1 + hc_below(rng, D_N - 1);
    static const uint32_t max_us[PH_N] = {2000, 20000, 3000};
    static const uint32_t points[PH_N] = {4, 40, 2};
    p.delay_us = hc_below(rng, max_us[p.phase]);
    p.point = hc_below(rng, points[p.phase]);
    p.seed = s_rand(rng);
    return p;
}

/* One death: `client_dies` picks which end. */
static void run_iteration(struct plan p, bool client_dies, unsigned it)
{
    int schan = client_dies ? srv_chan : cli_chan;
    int dchan, id;
    s_tok(schan, 'I');
    s_put_u64(schan, p.seed);
    if (client_dies) {
        p.port = srv_port;
        id = s_spawn("dying-client", dying_client, &p, &dchan);
    } else {
        id = s_spawn("dying-server", dying_server, &p, &dchan);
        s_put_u64(schan, s_get_u64(dchan)); /* the survivor connects to it */
    }
    double t;
    if (p.death == D_KILL_OUTSIDE) {
        s_want(dchan, 'p');
        struct timespec ts = {0, (long)p.delay_us * 1000L};
        nanosleep(&ts, NULL);
        s_kill(id);
        t = s_now_ms();
    } else {
        t = s_get_f64(dchan);
        if (p.death == D_KILL_SELF)
            s_expect_kill(id);
    }
    s_tok(schan, 'K');
    s_put_f64(schan, t);
    struct outcome oc;
    s_get(schan, &oc, sizeof oc);
    s_reap(id);
    close(dchan);
    counts[client_dies][p.phase][p.death]++;
    const char *who = client_dies ? "client" : "server";
    if (getenv("HARDENING_VERBOSE") || oc.bad_data || (oc.had_conn && oc.end_ms < 0))
        s_log("iteration %u: %s dies (%s, %s, %u us / point %u): survivor had a connection %d, "
              "ended %s after %.1f ms, %llu bytes",
              it, who, phase_name[p.phase], death_name[p.death], p.delay_us, p.point,
              oc.had_conn, s_errname(oc.err), oc.end_ms > 0 ? oc.end_ms - t : -1.0,
              (unsigned long long)oc.bytes);
    CHECK_MSG(oc.bad_data == 0, "iteration %u: the survivor read bytes not of the stream", it);
    if (oc.had_conn) {
        CHECK_MSG(oc.end_ms >= 0, "iteration %u (%s dies, %s, %s): the survivor's connection "
                  "did not end within 1 s", it, who, phase_name[p.phase], death_name[p.death]);
        CHECK_MSG(oc.end_ms - t <= S_DEADLINE_MS, "iteration %u: the end came %.0f ms after the "
                  "death", it, oc.end_ms - t);
        CHECK_MSG(oc.err == 0 || oc.err == ECONNRESET || oc.err == EPIPE,
                  "iteration %u: the survivor's connection ended with %s", it,
                  s_errname(oc.err));
    } else {
        /* Not EPIPE: a connect is not a stream that ended. */
        CHECK_MSG(oc.err == 0 || oc.err == ECONNREFUSED || oc.err == ECONNRESET,
                  "iteration %u: the survivor's connect failed with %s", it, s_errname(oc.err));
    }
}

int main(void)
{
    const char *soak = getenv("HARDENING_SOAK");
    bool long_run = soak && strcmp(soak, "1") == 0;
    s_init("faults_kill", long_run ? 3600 : 110);
    static struct hc_names shm_before, tmp_before;
    hc_list_ours("/dev/shm", &shm_before);
    hc_list_ours("/tmp", &tmp_before);

    s_spawn("survivor-server", survivor_server, NULL, &srv_chan);
    srv_port = (uint16_t)s_get_u64(srv_chan);
    s_spawn("survivor-client", survivor_client, NULL, &cli_chan);

    /* Warm-up: a clean death each way brings up what sovia starts lazily. */
    struct plan warm = {.phase = PH_TRANSFER, .death = D_EXIT, .point = 5, .seed = 7};
    run_iteration(warm, true, 0);
    run_iteration(warm, false, 0);
    s_tok(srv_chan, 'B');
    s_tok(cli_chan, 'B');
    s_want(srv_chan, 'b');
    s_want(cli_chan, 'b');

    uint64_t rng = hc_seed("HARDENING_SEED", 20261122);
    unsigned n = long_run ? 500 : 20;
    double t0 = s_now_ms();
    for (unsigned i = 1; i <= n; i++) {
        run_iteration(random_plan(&rng), true, i);
        run_iteration(random_plan(&rng), false, i);
    }
    s_log("%u deaths in %.1f s", 2 * n, (s_now_ms() - t0) / 1000);
    for (int side = 1; side >= 0; side--)
        for (int ph = 0; ph < PH_N; ph++)
            s_log("%s dies during %s: SIGKILL %u, raise(SIGKILL) %u, _exit %u, exit %u",
                  side ? "client" : "server", phase_name[ph], counts[side][ph][0],
                  counts[side][ph][1], counts[side][ph][2], counts[side][ph][3]);
    s_tok(srv_chan, 'Q');
    s_want(srv_chan, 'q');
    s_tok(cli_chan, 'Q');
    s_want(cli_chan, 'q');
    s_wait_all();
    hc_check_no_new("/dev/shm", &shm_before);
    hc_check_no_new("/tmp", &tmp_before);
    s_pass();
}
