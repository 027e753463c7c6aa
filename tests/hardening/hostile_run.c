/*
 * hostile_run: a hostile peer against a program under `sovia run`.
 *
 * The victim (rvictim.c) is a plain libc echo server on poll(), started
 * by `sovia run` (libsovia-preload.so): it makes no sov_* call. Its
 * healthy client is a plain libc program under `sovia run` too, so the
 * healthy connection is carried by sovia and shares with the hostile one
 * all that a process has once: the completion queue and its armed page,
 * the service thread, the shadow listener, the wait paths. (A kernel TCP
 * client would only show that the kernel path, which sovia leaves alone,
 * survives.) The stat records of both programs prove the healthy
 * connection was carried and the hostile ones paired or fell back.
 *
 * The hostile peer (this executable; not preloaded) establishes as a
 * `sovia run` client does (docs/TRANSPARENT.md, "Transparent mode"), by
 * hand: it binds a kernel TCP socket, connects a VI from that port to the
 * victim's shadow listener ("sovia" + port: hsovia.c), connects the
 * kernel socket, and answers the WAKEUP the victim's accept() sends. Each
 * round it then breaks the establishment (a bad answer, data first, no
 * answer, a VI for another port, a VI and no kernel connection, a VI
 * squatting another client's port), or one rule of docs/PROTOCOL.md once
 * paired, or writes the shared memory (completion slots, its posted
 * slots, the victim's arena and wake-up, and, since `sovia run` leaves
 * them unsealed, the victim's ctl segment and its CQ's armed word), or
 * its kernel socket (bytes, shutdown), or all of it at random
 * (HARDENING_SEED, HARDENING_ROUNDS); hscen.c has the moves it shares
 * with hostile_sovia.
 *
 * What a kernel-socket program must see, per expectation:
 *   ok        the echo is byte-exact, over sovia only (no byte on the
 *             kernel connection either way);
 *   break     the peer broke the protocol of a paired connection: the
 *             program's recv or send fails with ECONNRESET, as after a
 *             TCP reset (EPROTO is no error a TCP socket gives), within
 *             1 s; the peer's VI is broken and its kernel socket sees the
 *             program's close within 1 s;
 *   ended     the same after the peer's FIN: the program has read end of
 *             stream (a kernel socket reports no reset after a FIN to its
 *             reader), or ECONNRESET if the reset came first;
 *   fallback  the establishment broke: the program notices nothing, the
 *             VI is dropped within 1 s, and the connection goes on over
 *             kernel TCP, byte-exact;
 *   kernel    never paired (no VI for that port): plain TCP, byte-exact;
 *   none      nothing to accept (a VI without a kernel connection);
 *   silent    accepted, and nothing comes (a peer that never answers);
 *   no hijack a VI that claimed another client's port first gets nothing
 *             of that client's connection, whose echo is byte-exact;
 *   any       whatever happens to that connection.
 * Always: the victim never crashes (nor trips the sanitizers), no poll of
 * it runs 250 ms past its timeout and none of its socket calls (all
 * non-blocking, or a close that resets) takes 250 ms, the healthy
 * client's echo is byte-exact during every round (while the hostile
 * connection is still there), and after every round the victim holds the
 * descriptors, memfds, mappings and threads it held after the first one.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hcommon.h"
#include "hrprog.h"
#include "isorun.h"
#include "hscen.h"
#include "rvictim.h"
#include "sovia/sharness.h"
#include "svictim.h"

enum expect {
    XP_OK,
    XP_BREAK,
    XP_ENDED,
    XP_FALLBACK,
    XP_KERNEL,
    XP_NONE,
    XP_SILENT,
    XP_SQUAT,
    XP_ANY
};
static const char *const expect_name[] = {"ok",     "break",  "ended",     "fallback", "kernel",
                                          "none",   "silent", "no hijack", "any"};

/* What the hostile peer saw in a round, for the test's checks. */
struct hr_result {
    uint64_t sent, echoed;   /* over the VI */
    uint64_t ksent, kechoed; /* over its kernel socket */
    uint64_t kjunk;          /* bytes that came on the kernel socket unasked */
    double broke_ms;         /* VI broken this long after the violation (-1: not) */
    double kend_ms;          /* kernel socket ended this long after it (-1: not) */
    int32_t got_wakeup;      /* the victim's accept() paired our VI */
    int32_t probe_ok;        /* port_squat: the other client's echo was exact */
};

struct hctx {
    struct hs_round r; /* first: hscen's scenarios get &hc->r */
    int kfd;
    uint16_t kport;
    struct hr_result res;
};

static struct hctx *ctx(struct hs_round *r)
{
    return (struct hctx *)r;
}

struct scenario {
    const char *name;
    hs_scenario run;
    enum expect expect;
    const char *bug;
    uint32_t p[2];
};

static uint16_t victim_port;

/* ---- The kernel socket ------------------------------------------------------------------ */

static struct sockaddr_in loopback(uint16_t port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

/* A TCP socket bound to an ephemeral port of 127.0.0.1, as the preload's
 * connect() binds one before it connects the VI. */
static void kernel_socket(struct hctx *hc)
{
    hc->kfd = SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    struct sockaddr_in a = loopback(0);
    socklen_t al = sizeof a;
    SYS(bind(hc->kfd, (struct sockaddr *)&a, sizeof a));
    SYS(getsockname(hc->kfd, (struct sockaddr *)&a, &al));
    hc->kport = ntohs(a.sin_port);
}

static void kernel_connect(struct hctx *hc)
{
    struct sockaddr_in a = loopback(victim_port);
    SYS(connect(hc->kfd, (struct sockaddr *)&a, sizeof a));
    SYS(fcntl(hc->kfd, F_SETFL, O_NONBLOCK));
}

/* Reads what the kernel socket has (counted as junk); 1 once it ended
 * (end of stream or reset). */
static int kernel_drain(struct hctx *hc)
{
    uint8_t b[4096];
    for (;;) {
        ssize_t n = recv(hc->kfd, b, sizeof b, MSG_DONTWAIT);
        if (n > 0) {
            hc->res.kjunk += (uint64_t)n;
            continue;
        }
        return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    }
}

/* After a paired connection broke: the program must close it (r->after_break). */
static void kernel_wait_end(struct hs_round *r)
{
    struct hctx *hc = ctx(r);
    double end = s_now_ms() + 1500;
    while (s_now_ms() < end) {
        if (kernel_drain(hc)) {
            hc->res.kend_ms = s_now_ms() - r->violation_ms;
            return;
        }
        struct pollfd p = {hc->kfd, POLLIN, 0};
        poll(&p, 1, 5);
    }
}

/* n pattern bytes over the kernel socket and their echo. */
static void tcp_echo(struct hctx *hc, size_t n, bool must)
{
    static uint8_t buf[16384];
    struct hr_result *x = &hc->res;
    uint64_t seed = 1000 + hc->r.round, to_send = x->ksent + n, to_get = x->kechoed + n;
    double end = s_now_ms() + 3000;
    while (x->kechoed < to_get && s_now_ms() < end) {
        struct pollfd p = {hc->kfd, (short)(POLLIN | (x->ksent < to_send ? POLLOUT : 0)), 0};
        poll(&p, 1, 10);
        if (x->ksent < to_send && (p.revents & POLLOUT)) {
            size_t k = to_send - x->ksent < sizeof buf ? to_send - x->ksent : sizeof buf;
            s_pattern_fill(buf, k, seed, x->ksent);
            ssize_t w = send(hc->kfd, buf, k, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0)
                x->ksent += (uint64_t)w;
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t g = recv(hc->kfd, buf, sizeof buf, MSG_DONTWAIT);
            if (g == 0 || (g < 0 && errno != EAGAIN))
                break;
            if (g > 0 && s_pattern_check(buf, (size_t)g, seed, x->kechoed) >= 0)
                break;
            if (g > 0)
                x->kechoed += (uint64_t)g;
        }
    }
    CHECK_MSG(x->kechoed == to_get || !must, "the kernel TCP echo: %llu of %zu bytes back",
              (unsigned long long)(n - (to_get - x->kechoed)), n);
}

/* ---- The establishment ---------------------------------------------------------------------- */

/* Our VI from local_port, with `token` as a `sovia run` client sends its
 * kernel socket. */
static void vi_connect(struct hctx *hc, uint16_t local_port, int token)
{
    VIP_RETURN r = hs_connect_with(&hc->r.s, local_port, victim_port, token);
    CHECK_MSG(r == VIP_SUCCESS, "hostile VI connect: %s", VipxReturnString(r));
}

static void await_victim_wakeup(struct hctx *hc)
{
    CHECK_MSG(hs_await_wakeup(&hc->r.s, 3000), "no WAKEUP from the victim's accept()");
    hc->res.got_wakeup = 1;
}

/* The whole establishment, honest (r->setup). */
static void pair(struct hs_round *r)
{
    struct hctx *hc = ctx(r);
    kernel_socket(hc);
    vi_connect(hc, hc->kport, hc->kfd);
    kernel_connect(hc);
    await_victim_wakeup(hc);
    CHECK(!(hs_wakeup(&r->s) & VIP_STATUS_ERROR_MASK));
}

/* Kernel-socket moves for the random mode (r->extra_move), and writes of
 * what `sovia run` leaves unsealed. */
static void kernel_move(struct hs_round *r, char *what, size_t len)
{
    struct hctx *hc = ctx(r);
    uint32_t a = hc_below(&r->rng, 4);
    if (a == 0) {
        size_t n;
        uint8_t *ctl = hp_victim_ctl_writable(&r->s.h, &n);
        uint32_t off = ctl ? hc_below(&r->rng, (uint32_t)n) : 0;
        if (ctl)
            ctl[off] = (uint8_t)hc_rand32(&r->rng);
        snprintf(what, len, "victim ctl byte %#x %s", off, ctl ? "written" : "sealed");
    } else if (a == 1) {
        _Atomic uint32_t *armed = hp_victim_armed_writable(&r->s.h);
        uint32_t v = hp_interesting(&r->rng, 1);
        if (armed)
            atomic_store(armed, v);
        snprintf(what, len, "victim CQ armed = %#x%s", v, armed ? "" : " (sealed)");
    } else if (a == 2) {
        uint8_t junk[512];
        memset(junk, 'K', sizeof junk);
        ssize_t w = send(hc->kfd, junk, sizeof junk, MSG_NOSIGNAL | MSG_DONTWAIT);
        snprintf(what, len, "kernel socket: %zd junk bytes", w);
    } else {
        shutdown(hc->kfd, SHUT_WR);
        snprintf(what, len, "kernel socket: shutdown(SHUT_WR)");
    }
}

/* ---- Scenarios of the establishment ------------------------------------------------------- */

static void sc_baseline(struct hs_round *r, const uint32_t p[2])
{
    (void)p;
    pair(r);
    hs_round_echo(r, 1, true);
    hs_round_echo(r, 100000, true);
    hs_round_echo(r, 4096, true);
    kernel_drain(ctx(r));
}

/* Our WAKEUP before the victim's (before the kernel connect even). */
static void sc_wakeup_early(struct hs_round *r, const uint32_t p[2])
{
    (void)p;
    struct hctx *hc = ctx(r);
    kernel_socket(hc);
    vi_connect(hc, hc->kport, hc->kfd);
    CHECK(!(hs_wakeup(&r->s) & VIP_STATUS_ERROR_MASK));
    kernel_connect(hc);
    await_victim_wakeup(hc);
    hs_round_echo(r, 20000, true);
    kernel_drain(hc);
}

/* The victim's WAKEUP is answered by p[0] (payload p[1] bytes), or p[0]
 * goes before the kernel connect when p[1] == UINT32_MAX. */
static void sc_answer(struct hs_round *r, const uint32_t p[2])
{
    struct hctx *hc = ctx(r);
    uint8_t pay[16] = "not a wakeup";
    bool early = p[1] == UINT32_MAX;
    uint32_t len = early ? 10 : p[1];
    kernel_socket(hc);
    vi_connect(hc, hc->kport, hc->kfd);
    if (early)
        hs_round_violate(r, p[0], pay, len);
    kernel_connect(hc);
    if (!early) {
        await_victim_wakeup(hc);
        hs_round_violate(r, p[0], pay, len);
    }
    r->after_break = NULL; /* the kernel connection goes on */
    hs_round_await_break(r);
    tcp_echo(hc, 30000, false);
}

/* The victim's WAKEUP is never answered; p[0]: we speak on TCP instead. */
static void sc_no_answer(struct hs_round *r, const uint32_t p[2])
{
    struct hctx *hc = ctx(r);
    kernel_socket(hc);
    vi_connect(hc, hc->kport, hc->kfd);
    kernel_connect(hc);
    await_victim_wakeup(hc);
    r->violation_ms = s_now_ms();
    if (p[0]) {
        tcp_echo(hc, 5000, false);
        r->after_break = NULL;
        hs_round_await_break(r);
    } else {
        hs_pump(&r->s, 300);
    }
}

/* A VI and no kernel connection. */
static void sc_orphan_vi(struct hs_round *r, const uint32_t p[2])
{
    (void)p;
    struct hctx *hc = ctx(r);
    kernel_socket(hc); /* bound, never connected: its port is ours */
    vi_connect(hc, hc->kport, hc->kfd);
    hs_pump(&r->s, 300);
}

/* A VI from one port, the kernel connection from another. */
static void sc_port_mismatch(struct hs_round *r, const uint32_t p[2])
{
    (void)p;
    struct hctx *hc = ctx(r);
    kernel_socket(hc);
    vi_connect(hc, (uint16_t)(hc->kport == 65535 ? 49152 : hc->kport + 1), hc->kfd);
    kernel_connect(hc);
    tcp_echo(hc, 30000, false);
    hc->res.got_wakeup = hs_pump(&r->s, 50) > 0 || r->s.peer_window;
}

/* Another client's port claimed first: the victim's accept() must not
 * give that client's connection to our VI. The token we send: p[0] 0
 * none, 1 a UDP socket with that connection's very addresses. */
static void sc_port_squat(struct hs_round *r, const uint32_t p[2])
{
    struct hctx *hc = ctx(r);
    /* A free port the other client binds: below the ephemeral range, where
     * nobody else's connect() takes it meanwhile (bind(0)'s port was taken
     * between our close and the probe's bind about 1 run in 7 under load:
     * 'probe: Address already in use'). */
    uint16_t port = iso_unused_port();
    if (p[0] == 1) { /* TCP and UDP ports are apart: this one binds beside it */
        hc->kfd = SYS(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
        struct sockaddr_in own = loopback(port), to = loopback(victim_port);
        SYS(bind(hc->kfd, (struct sockaddr *)&own, sizeof own));
        SYS(connect(hc->kfd, (struct sockaddr *)&to, sizeof to));
    }
    vi_connect(hc, port, hc->kfd);
    int chan;
    int id = hr_start("probe", "probe", victim_port, port, &chan);
    hc->res.got_wakeup = hs_await_wakeup(&r->s, 2500);
    if (hc->res.got_wakeup) /* take the connection over, as an attacker would */
        hs_wakeup(&r->s);
    s_get(chan, &hc->res.probe_ok, sizeof hc->res.probe_ok);
    s_reap(id);
    close(chan);
}

/* Once paired: bytes on the kernel connection (p[0] == 0), or its write
 * side shut (1). sovia carries the stream; the kernel connection takes no
 * part in it, and the echo goes on byte-exact. */
static void sc_kernel(struct hs_round *r, const uint32_t p[2])
{
    struct hctx *hc = ctx(r);
    pair(r);
    hs_round_echo(r, 3000, true);
    if (p[0] == 0) {
        uint8_t junk[3000];
        memset(junk, 'J', sizeof junk);
        CHECK(send(hc->kfd, junk, sizeof junk, MSG_NOSIGNAL) == (ssize_t)sizeof junk);
    } else {
        SYS(shutdown(hc->kfd, SHUT_WR));
    }
    s_sleep_ms(20);
    hs_round_echo(r, 20000, true);
    kernel_drain(hc);
}

static const struct scenario scenarios[] = {
    {"baseline", sc_baseline, XP_OK, NULL, {0, 0}},
    {"wakeup_early", sc_wakeup_early, XP_OK, NULL, {0, 0}},
    {"answer_window_0", sc_answer, XP_FALLBACK, NULL, {HS_WAKEUP_IMM(0, 22), 0}},
    {"answer_window_huge", sc_answer, XP_FALLBACK, NULL, {HS_WAKEUP_IMM(4095, 22), 0}},
    {"answer_slots_0", sc_answer, XP_FALLBACK, NULL, {HS_WAKEUP_IMM(16, 0), 0}},
    {"answer_reserved", sc_answer, XP_FALLBACK, NULL, {HS_WAKEUP_IMM(16, 22) | 0x40u, 0}},
    {"answer_data", sc_answer, XP_FALLBACK, NULL, {HS_IMM(HS_DATA, 0), 10}},
    {"answer_ack", sc_answer, XP_FALLBACK, NULL, {HS_IMM(HS_ACK, 1), 0}},
    {"answer_fin", sc_answer, XP_FALLBACK, NULL, {HS_IMM(HS_FIN, 0), 0}},
    {"data_before_accept", sc_answer, XP_FALLBACK, NULL, {HS_IMM(HS_DATA, 0), UINT32_MAX}},
    {"no_answer", sc_no_answer, XP_SILENT, NULL, {0, 0}},
    {"tcp_instead_of_answer", sc_no_answer, XP_FALLBACK, NULL, {1, 0}},
    {"orphan_vi", sc_orphan_vi, XP_NONE, NULL, {0, 0}},
    {"port_mismatch", sc_port_mismatch, XP_KERNEL, NULL, {0, 0}},
    {"port_squat", sc_port_squat, XP_SQUAT, NULL, {0, 0}},
    {"port_squat_udp_token", sc_port_squat, XP_SQUAT, NULL, {1, 0}},
    {"type_0", hs_sc_packet, XP_BREAK, NULL, {HS_IMM(0, 0), 0}},
    {"type_6", hs_sc_packet, XP_BREAK, NULL, {HS_IMM(6, 0), 0}},
    /* REDIRECT (a ticket) is for a `sovia run` client before its pairing only. */
    {"redirect_to_server", hs_sc_packet, XP_BREAK, NULL, {6u | 12345u << 3, 0}},
    /* The urgent flag (bit 3) is DATA's only. */
    {"urgent_flag_on_fin", hs_sc_packet, XP_BREAK, NULL, {HS_IMM(HS_FIN, 0) | 8u, 0}},
    {"type_7_payload", hs_sc_packet, XP_BREAK, NULL, {HS_IMM(7, 0), 10}},
    /* MIGRATE (type 7): an ACK or END nobody asked for, an unknown step,
     * a reserved bit; a REQUEST never ended resets within a second. */
    {"migrate_ack_unasked", hs_sc_packet, XP_BREAK, NULL, {HS_IMM(7, 0) | 1u << 3, 0}},
    {"migrate_end_unasked", hs_sc_packet, XP_BREAK, NULL, {HS_IMM(7, 0) | 2u << 3, 0}},
    {"migrate_step_3", hs_sc_packet, XP_BREAK, NULL, {HS_IMM(7, 0) | 3u << 3, 0}},
    {"migrate_reserved", hs_sc_packet, XP_BREAK, NULL, {HS_IMM(7, 0) | 0x20u, 0}},
    {"migrate_never_ends", hs_sc_packet, XP_BREAK, NULL, {HS_IMM(7, 0), 0}},
    {"ack_count_over", hs_sc_packet, XP_BREAK, NULL, {HS_ACK, UINT32_MAX}},
    {"data_acks_max", hs_sc_packet, XP_BREAK, NULL, {HS_IMM(HS_DATA, 0xffff), 10}},
    {"data_empty", hs_sc_packet, XP_BREAK, NULL, {HS_IMM(HS_DATA, 0), 0}},
    {"wakeup_twice", hs_sc_packet, XP_BREAK, NULL, {HS_WAKEUP_IMM(16, 22), 0}},
    {"reserved_bits", hs_sc_odd, XP_BREAK, NULL, {3, 0}},
    {"past_the_window", hs_sc_flood, XP_ENDED, NULL, {0, 0}},
    {"fin_twice", hs_sc_odd, XP_ENDED, NULL, {1, 0}},
    {"data_after_fin", hs_sc_odd, XP_ENDED, NULL, {2, 0}},
    {"finack_unsolicited", hs_sc_finack, XP_ANY, NULL, {0, 0}},
    {"cmpl_status_bits", hs_sc_cmpl, XP_BREAK, NULL, {UINT32_MAX, 10}},
    {"cmpl_length_over", hs_sc_cmpl, XP_BREAK, NULL,
     {VIP_STATUS_OP_RECEIVE | VIP_STATUS_IMMEDIATE, 32769}},
    {"post_slots_lie", hs_sc_post_lie, XP_BREAK, NULL, {0, 0}},
    {"wake_storm", hs_sc_storm, XP_OK, NULL, {HS_STORM_WAKE, 0}},
    {"arena_scribble", hs_sc_storm, XP_ANY, NULL, {HS_STORM_ARENA, 0}},
    {"victim_ctl_scribble", hs_sc_storm, XP_ANY, NULL, {HS_STORM_CTL, 0}},
    {"cq_armed_zero", hs_sc_storm, XP_OK, NULL, {HS_STORM_ARMED, 0}},
    {"cq_armed_max", hs_sc_storm, XP_OK, NULL, {HS_STORM_ARMED, UINT32_MAX}},
    {"kernel_bytes", sc_kernel, XP_OK, NULL, {0, 0}},
    {"kernel_shutdown", sc_kernel, XP_OK, NULL, {1, 0}},
};
#define NSCEN (sizeof scenarios / sizeof scenarios[0])
#define RANDOM_INDEX NSCEN
static const struct scenario random_scenario = {"random", hs_sc_random, XP_ANY, NULL, {0, 0}};

/* ---- The hostile role ---------------------------------------------------------------------- */

static void hostile_role(int chan, void *arg)
{
    (void)arg;
    for (;;) {
        uint64_t idx = s_get_u64(chan);
        if (idx == UINT64_MAX)
            return;
        struct hctx hc = {.kfd = -1, .res = {.kend_ms = -1}};
        uint64_t rng = s_get_u64(chan);
        hs_round_init(&hc.r, rng, (unsigned)s_get_u64(chan));
        hc.r.setup = pair;
        hc.r.after_break = kernel_wait_end;
        hc.r.extra_move = kernel_move;
        const struct scenario *sc = idx == RANDOM_INDEX ? &random_scenario : &scenarios[idx];
        sc->run(&hc.r, sc->p);
        hc.res.sent = hc.r.sent;
        hc.res.echoed = hc.r.echoed;
        hc.res.broke_ms = hs_round_broke_ms(&hc.r);
        s_tok(chan, 'd');
        s_put(chan, &hc.res, sizeof hc.res);
        s_want(chan, 'c'); /* the healthy echo ran, the victim ended the round */
        hs_round_end(&hc.r);
        if (hc.kfd >= 0)
            SYS(close(hc.kfd));
        s_tok(chan, 'e');
    }
}

/* ---- The test ----------------------------------------------------------------------------- */

static int vchan, gchan, hchan, victim_id, healthy_id;
static unsigned round_no;
static unsigned want_paired, want_fell_back, want_kernel; /* the victim's stat record */
static struct hc_counts base; /* the victim's resources after the first round */
static bool have_base;

static void check_round(const struct scenario *sc, const struct rv_report *rv,
                        const struct hr_result *h)
{
    const char *n = sc->name;
    const struct sv_report *v = &rv->sv;
    CHECK_MSG(v->max_over_ms <= SV_SLACK_MS, "%s: a victim poll ran %.0f ms past its timeout", n,
              v->max_over_ms);
    CHECK_MSG(rv->max_call_ms <= SV_SLACK_MS, "%s: a socket call of the victim took %.0f ms", n,
              rv->max_call_ms);
    bool broke = h->broke_ms >= 0 && h->broke_ms <= S_DEADLINE_MS;
    bool closed = h->kend_ms >= 0 && h->kend_ms <= S_DEADLINE_MS;
    switch (sc->expect) {
    case XP_OK:
        CHECK_MSG(h->got_wakeup && v->accepted && v->err == 0 && !v->eof &&
                      v->bytes_in == (int64_t)h->sent && v->bytes_out == (int64_t)h->sent &&
                      h->echoed == h->sent && h->sent > 0,
                  "%s: the connection should have echoed everything over sovia", n);
        CHECK_MSG(h->kjunk == 0 && h->ksent == 0, "%s: %llu bytes came over kernel TCP", n,
                  (unsigned long long)h->kjunk);
        want_paired++;
        break;
    case XP_BREAK:
    case XP_ENDED:
        if (sc->expect == XP_BREAK)
            CHECK_MSG(v->accepted && v->err == ECONNRESET,
                      "%s: the program should have seen ECONNRESET, not %s", n,
                      s_errname(v->err));
        else
            CHECK_MSG(v->accepted && (v->eof || v->err == ECONNRESET),
                      "%s: the program should have read end of stream (or ECONNRESET), not %s",
                      n, s_errname(v->err));
        CHECK_MSG(broke, "%s: the VI was not failed within 1 s", n);
        CHECK_MSG(closed, "%s: the program did not close the kernel connection within 1 s", n);
        want_paired++;
        break;
    case XP_FALLBACK:
    case XP_KERNEL:
        CHECK_MSG(v->accepted && v->err == 0 && !v->eof && h->ksent > 0 &&
                      h->kechoed == h->ksent && v->bytes_in == (int64_t)h->ksent &&
                      v->bytes_out == (int64_t)h->ksent,
                  "%s: the connection should have gone on over kernel TCP", n);
        if (sc->expect == XP_FALLBACK) {
            CHECK_MSG(broke, "%s: the victim kept the VI (not dropped within 1 s)", n);
            want_fell_back++;
        } else {
            CHECK_MSG(!h->got_wakeup, "%s: the victim paired a VI of another port", n);
            want_kernel++;
        }
        break;
    case XP_NONE:
        CHECK_MSG(!v->accepted, "%s: the victim accepted a connection", n);
        break;
    case XP_SILENT:
        CHECK_MSG(v->accepted && v->err == 0 && !v->eof && v->bytes_in == 0,
                  "%s: a connection that says nothing should stay quiet", n);
        break;
    case XP_SQUAT:
        CHECK_MSG(!h->got_wakeup,
                  "%s: the victim paired another client's connection with the squatter's VI", n);
        CHECK_MSG(h->probe_ok, "%s: the other client's echo failed", n);
        break;
    case XP_ANY:
        break;
    }
}

/* The victim's resources, from outside: once they equal *want (at most ms),
 * or, with no want, once they stood still for 100 ms. */
static struct hc_counts victim_counts(const struct hc_counts *want, unsigned ms)
{
    pid_t pid = s_pid(victim_id);
    double end = s_now_ms() + ms, since = s_now_ms();
    struct hc_counts last = hc_counts_of(pid);
    for (;;) {
        bool done = want ? !memcmp(&last, want, sizeof last) : s_now_ms() - since >= 100;
        if (done || s_now_ms() >= end)
            return last;
        s_sleep_ms(10);
        struct hc_counts now = hc_counts_of(pid);
        if (memcmp(&now, &last, sizeof now)) {
            last = now;
            since = s_now_ms();
        }
    }
}

/* After a round the victim holds what it held after the first one (a VI
 * left queued at the shadow listener goes within 0.5 s of its client). */
static void check_resources(const struct scenario *sc)
{
    if (!have_base)
        return;
    struct hc_counts now = victim_counts(&base, 1000);
    char what[96];
    snprintf(what, sizeof what, "victim after %s (round %u)", sc->name, round_no);
    hc_counts_check(&base, &now, what);
}

static void run_round(uint64_t idx, const struct scenario *sc, uint64_t seed)
{
    s_tok(vchan, 'R');
    s_put_u64(hchan, idx);
    s_put_u64(hchan, seed);
    s_put_u64(hchan, round_no);
    s_want(hchan, 'd');
    struct hr_result h;
    s_get(hchan, &h, sizeof h);
    s_put_u64(gchan, 0x7000 + round_no); /* with the hostile connection still there */
    s_want(gchan, 'k');
    s_tok(vchan, 'S');
    struct rv_report rv;
    s_get(vchan, &rv, sizeof rv);
    const struct sv_report v = rv.sv;
    s_tok(hchan, 'c');
    s_want(hchan, 'e');
    s_log("%s (expect %s): accepted %d, error %s, eof %d, in/out %lld/%lld; hostile: wakeup %d, "
          "vi sent/echoed %llu/%llu, tcp sent/echoed %llu/%llu, tcp junk %llu, vi broken after "
          "%.0f ms, tcp ended after %.0f ms; worst overrun %.1f ms, longest call %.1f ms",
          sc->name, expect_name[sc->expect], v.accepted, s_errname(v.err), v.eof,
          (long long)v.bytes_in, (long long)v.bytes_out, h.got_wakeup,
          (unsigned long long)h.sent, (unsigned long long)h.echoed, (unsigned long long)h.ksent,
          (unsigned long long)h.kechoed, (unsigned long long)h.kjunk, h.broke_ms, h.kend_ms,
          v.max_over_ms, rv.max_call_ms);
    check_round(sc, &rv, &h);
    check_resources(sc);
    round_no++;
}

int main(void)
{
    s_init("hostile_run", 170);
    int stat_log = hr_stat_log();
    victim_id = hr_start("victim", "server", 0, 0, &vchan);
    victim_port = (uint16_t)s_get_u64(vchan);
    healthy_id = hr_start("healthy", "client", victim_port, 0, &gchan);
    s_spawn("hostile", hostile_role, NULL, &hchan);
    s_put_u64(gchan, 1);
    s_want(gchan, 'k');

    /* The first round also brings up all that sovia starts lazily; the
     * victim's resources after it are the baseline. */
    if (s_case("baseline"))
        run_round(0, &scenarios[0], 1);
    base = victim_counts(NULL, 3000);
    have_base = true;
    for (uint64_t i = 1; i < NSCEN; i++)
        if (hc_run_case(scenarios[i].name, scenarios[i].bug))
            run_round(i, &scenarios[i], 2000 + i);
    if (s_case("random")) {
        uint64_t seed = hc_seed("HARDENING_SEED", 20261205);
        unsigned rounds = hc_rounds(60);
        for (unsigned k = 0; k < rounds; k++)
            run_round(RANDOM_INDEX, &random_scenario, s_mix64(seed + k));
    }
    s_put_u64(hchan, UINT64_MAX);
    s_tok(vchan, 'Q');
    s_want(vchan, 'q');
    struct hc_counts now = victim_counts(&base, 3000);
    hc_counts_check(&base, &now, "victim after all hostile rounds");
    s_put_u64(gchan, RV_QUIT);
    s_want(gchan, 'c');
    s_tok(vchan, 'c');
    pid_t vpid = s_pid(victim_id), gpid = s_pid(healthy_id);
    s_reap(victim_id);
    s_reap(healthy_id);

    struct hr_stat g = hr_stat_of(stat_log, gpid), v = hr_stat_of(stat_log, vpid);
    s_log("stat records: healthy carried %u fell_back %u kernel %u; victim carried %u (want >= "
          "%u) fell_back %u (>= %u) kernel %u (>= %u)",
          g.carried, g.fell_back, g.kernel, v.carried, 1 + want_paired, v.fell_back,
          want_fell_back, v.kernel, want_kernel);
    CHECK_MSG(g.carried == 1 && g.fell_back == 0 && g.kernel == 0,
              "the healthy connection was not carried by sovia");
    CHECK_MSG(v.carried >= 1 + want_paired && v.fell_back >= want_fell_back &&
                  v.kernel >= want_kernel,
              "the victim's connections were not paired / fell back as expected");
    s_pass();
}
