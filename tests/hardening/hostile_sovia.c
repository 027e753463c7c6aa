/*
 * hostile_sovia: a hostile peer against a sov_* program.
 *
 * The victim (svictim.c) is a non-blocking echo server on sov_poll with one
 * healthy client connected for the whole test. Each round the hostile peer
 * (hsovia.c over hpeer.c: the real shm provider, the sovia protocol spoken
 * by hand) connects to the victim's port and breaks one rule of
 * docs/PROTOCOL.md through the immediate data of real sends (unknown packet
 * types, acknowledgement counts above what was sent, empty DATA, a second
 * WAKEUP, a bad or missing first WAKEUP, FIN/FINACK out of turn, reserved
 * bits, sending past the window), or corrupts the shared memory under the
 * connection (completion slots, its posted slots, the wake-up socket, the
 * victim's arena), or does all of it at random (HARDENING_SEED,
 * HARDENING_ROUNDS). The moves on an established connection are hscen.c's,
 * shared with hostile_run.
 *
 * Each round states what the victim must see: nothing wrong (the echo is
 * byte-exact), the connection failing with ECONNRESET or EPROTO (and the
 * hostile peer's VI broken within 1 s), or, for a broken handshake, no
 * connection accepted at all (or one that fails at once).
 * Always: the victim never crashes (nor trips the sanitizers), no sov_poll
 * runs 250 ms past its timeout, the healthy client's echo is byte-exact
 * after every round, and at the end the victim holds the descriptors,
 * memfds, mappings and threads it held after the first round.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hcommon.h"
#include "hscen.h"
#include "sovia/sharness.h"
#include "svictim.h"

/* XP_ENDED: after the peer's FIN the victim reads end of stream, as a kernel
 * socket does (a reset after a FIN is not reported to the reader); the
 * violation that follows must still end the connection within 1 s. */
enum expect { XP_OK, XP_BREAK, XP_ENDED, XP_REFUSED, XP_ANY };
static const char *const expect_name[] = {"ok", "break", "ended", "refused", "any"};

struct scenario {
    const char *name;
    hs_scenario run;
    enum expect expect;
    const char *bug;
    uint32_t p[2];
};

static uint16_t victim_port;

/* ---- Moves ------------------------------------------------------------------------------- */

static void connect_only(struct hs_round *r)
{
    uint16_t local = (uint16_t)(20000 + (getpid() * 7 + r->round) % 20000);
    VIP_RETURN rc = hs_connect(&r->s, local, victim_port);
    CHECK_MSG(rc == VIP_SUCCESS, "hostile connect: %s", VipxReturnString(rc));
}

/* The sov_* handshake (r->setup): our WAKEUP, then the victim's. */
static void setup(struct hs_round *r)
{
    connect_only(r);
    CHECK(!(hs_wakeup(&r->s) & VIP_STATUS_ERROR_MASK));
    CHECK_MSG(hs_await_wakeup(&r->s, 3000), "no WAKEUP from the victim");
}

/* ---- Scenarios ------------------------------------------------------------------------------ */

static void sc_baseline(struct hs_round *r, const uint32_t p[2])
{
    (void)p;
    setup(r);
    hs_round_echo(r, 1, true);
    hs_round_echo(r, 100000, true);
    hs_round_echo(r, 4096, true);
}

/* The first packet breaks the handshake: p[0] is its immediate data. */
static void sc_first(struct hs_round *r, const uint32_t p[2])
{
    connect_only(r);
    uint8_t pay[16] = "not a wakeup";
    hs_round_violate(r, p[0], pay, p[1]);
    hs_round_await_break(r);
}

#ifdef __SANITIZE_THREAD__
/* sc_silent forks this client from the hostile role, whose sockets layer
 * runs threads; ThreadSanitizer kills such a child when it starts threads
 * of its own unless told otherwise (TSAN_OPTIONS still adds to this). */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
    return "die_after_fork=0";
}
#endif

/* Connects and says nothing: the victim's listener must go on accepting. */
static void late_client(int chan, void *arg)
{
    (void)arg;
    double t0 = s_now_ms();
    int fd = s_connect(AF_INET, victim_port);
    s_put_f64(chan, s_now_ms() - t0);
    s_send_pattern(fd, 5, 0, 1000, 0);
    s_recv_pattern(fd, 5, 0, 1000);
    SYS(sov_close(fd));
}

static void sc_silent(struct hs_round *r, const uint32_t p[2])
{
    (void)p;
    connect_only(r); /* and no WAKEUP */
    int ch;
    int id = s_spawn("late-client", late_client, NULL, &ch);
    double ms = s_get_f64(ch);
    s_reap(id);
    close(ch);
    s_log("a client connecting while a silent peer is being accepted took %.0f ms", ms);
    CHECK_MSG(ms < 1500, "a silent peer held up the listener: a connect took %.0f ms", ms);
}

static const struct scenario scenarios[] = {
    {"baseline", sc_baseline, XP_OK, NULL, {0}},
    {"type_0", hs_sc_packet, XP_BREAK, NULL, {HS_IMM(0, 0), 0}},
    {"type_6", hs_sc_packet, XP_BREAK, NULL, {HS_IMM(6, 0), 0}},
    /* REDIRECT (a ticket) is for a `sovia run` client before its pairing only. */
    {"redirect_to_server", hs_sc_packet, XP_BREAK, NULL, {6u | 12345u << 3, 0}},
    /* The urgent flag (bit 3) is DATA's only. */
    {"urgent_flag_on_fin", hs_sc_packet, XP_BREAK, NULL, {HS_IMM(HS_FIN, 0) | 8u, 0}},
    {"type_7_payload", hs_sc_packet, XP_BREAK, NULL, {HS_IMM(7, 0), 10}},
    {"ack_count_over", hs_sc_packet, XP_BREAK, NULL, {HS_ACK, UINT32_MAX}},
    {"data_acks_max", hs_sc_packet, XP_BREAK, NULL, {HS_IMM(HS_DATA, 0xffff), 10}},
    {"data_empty", hs_sc_packet, XP_BREAK, NULL, {HS_IMM(HS_DATA, 0), 0}},
    {"wakeup_twice", hs_sc_packet, XP_BREAK, NULL, {HS_WAKEUP_IMM(16, 22), 0}},
    {"first_wakeup_window_0", sc_first, XP_REFUSED, NULL, {HS_WAKEUP_IMM(0, 22), 0}},
    {"first_wakeup_window_huge", sc_first, XP_REFUSED, NULL, {HS_WAKEUP_IMM(4095, 22), 0}},
    {"first_wakeup_slots_0", sc_first, XP_REFUSED, NULL, {HS_WAKEUP_IMM(16, 0), 0}},
    {"first_wakeup_reserved", sc_first, XP_REFUSED, NULL, {HS_WAKEUP_IMM(16, 22) | 0x40u, 0}},
    {"first_packet_data", sc_first, XP_REFUSED, NULL, {HS_IMM(HS_DATA, 0), 10}},
    {"first_packet_ack", sc_first, XP_REFUSED, NULL, {HS_IMM(HS_ACK, 1), 0}},
    {"first_packet_fin", sc_first, XP_REFUSED, NULL, {HS_IMM(HS_FIN, 0), 0}},
    {"finack_unsolicited", hs_sc_finack, XP_ANY, NULL, {0, 0}},
    {"fin_twice", hs_sc_odd, XP_ENDED, NULL, {1, 0}},
    {"data_after_fin", hs_sc_odd, XP_ENDED, NULL, {2, 0}},
    {"reserved_bits", hs_sc_odd, XP_BREAK, NULL, {3, 0}},
    {"past_the_window", hs_sc_flood, XP_ENDED, NULL, {0, 0}},
    {"cmpl_status_bits", hs_sc_cmpl, XP_BREAK, NULL, {UINT32_MAX, 10}},
    {"cmpl_length_over", hs_sc_cmpl, XP_BREAK, NULL,
     {VIP_STATUS_OP_RECEIVE | VIP_STATUS_IMMEDIATE, 32769}},
    {"post_slots_lie", hs_sc_post_lie, XP_BREAK, NULL, {0, 0}},
    {"wake_storm", hs_sc_storm, XP_OK, NULL, {HS_STORM_WAKE, 0}},
    {"arena_scribble", hs_sc_storm, XP_ANY, NULL, {HS_STORM_ARENA, 0}},
    {"silent_peer", sc_silent, XP_ANY, NULL, {0, 0}},
};
#define NSCEN (sizeof scenarios / sizeof scenarios[0])
#define RANDOM_INDEX NSCEN
static const struct scenario random_scenario = {"random", hs_sc_random, XP_ANY, NULL, {0, 0}};

/* ---- Roles ---------------------------------------------------------------------------------- */

static void hostile_role(int chan, void *arg)
{
    (void)arg;
    for (;;) {
        uint64_t idx = s_get_u64(chan);
        if (idx == UINT64_MAX)
            return;
        struct hs_round r;
        uint64_t rng = s_get_u64(chan);
        hs_round_init(&r, rng, (unsigned)s_get_u64(chan));
        r.setup = setup;
        const struct scenario *sc = idx == RANDOM_INDEX ? &random_scenario : &scenarios[idx];
        sc->run(&r, sc->p);
        double broke_ms = hs_round_broke_ms(&r);
        s_tok(chan, 'd');
        s_put_u64(chan, r.sent);
        s_put_u64(chan, r.echoed);
        s_put_f64(chan, broke_ms);
        s_want(chan, 'c');
        hs_round_end(&r);
        s_tok(chan, 'e');
    }
}

static void healthy_role(int chan, void *arg)
{
    (void)arg;
    int fd = s_connect(AF_INET, victim_port);
    uint64_t pos = 0;
    for (;;) {
        uint64_t seed = s_get_u64(chan);
        if (seed == UINT64_MAX)
            break;
        size_t len = 1 + (size_t)(s_mix64(seed) % 200000);
        s_guard(3000, "the healthy client's echo");
        s_send_pattern(fd, 42, pos, len, 0);
        s_recv_pattern(fd, 42, pos, len);
        s_unguard();
        pos += len;
        s_tok(chan, 'k');
    }
    SYS(sov_close(fd));
    s_tok(chan, 'c');
}

/* ---- The test ------------------------------------------------------------------------------------- */

static int vchan, gchan, hchan;
static unsigned round_no;

static void run_round(uint64_t idx, const struct scenario *sc, uint64_t seed)
{
    s_tok(vchan, 'R');
    s_put_u64(hchan, idx);
    s_put_u64(hchan, seed);
    s_put_u64(hchan, round_no);
    s_want(hchan, 'd');
    uint64_t sent = s_get_u64(hchan), echoed = s_get_u64(hchan);
    double broke_ms = s_get_f64(hchan);
    s_tok(vchan, 'S');
    struct sv_report r;
    s_get(vchan, &r, sizeof r);
    s_tok(hchan, 'c');
    s_want(hchan, 'e');
    s_log("%s (expect %s): accepted %d, error %s, eof %d, in/out %lld/%lld, hostile sent/echoed "
          "%llu/%llu, broken after %.0f ms, worst overrun %.1f ms",
          sc->name, expect_name[sc->expect], r.accepted, s_errname(r.err), r.eof,
          (long long)r.bytes_in, (long long)r.bytes_out, (unsigned long long)sent,
          (unsigned long long)echoed, broke_ms, r.max_over_ms);
    CHECK_MSG(r.max_over_ms <= SV_SLACK_MS, "%s: a victim sov_poll ran %.0f ms past its timeout",
              sc->name, r.max_over_ms);
    switch (sc->expect) {
    case XP_OK:
        CHECK_MSG(r.accepted && r.err == 0 && !r.eof && r.bytes_in == (int64_t)sent &&
                      r.bytes_out == (int64_t)sent && echoed == sent,
                  "%s: the connection should have echoed everything", sc->name);
        break;
    case XP_BREAK:
        CHECK_MSG(r.accepted && (r.err == ECONNRESET || r.err == EPROTO),
                  "%s: the victim should have seen ECONNRESET or EPROTO", sc->name);
        CHECK_MSG(broke_ms >= 0 && broke_ms <= S_DEADLINE_MS,
                  "%s: the connection was not failed within 1 s", sc->name);
        break;
    case XP_ENDED:
        CHECK_MSG(r.accepted && (r.eof || r.err == ECONNRESET || r.err == EPROTO),
                  "%s: the victim should have seen the end of the stream or an error", sc->name);
        CHECK_MSG(broke_ms >= 0 && broke_ms <= S_DEADLINE_MS,
                  "%s: the connection was not ended within 1 s", sc->name);
        break;
    case XP_REFUSED: /* not accepted, or accepted and failed at its first packet */
        CHECK_MSG(!r.accepted || r.err == ECONNRESET || r.err == EPROTO,
                  "%s: the victim accepted a peer that broke the handshake", sc->name);
        CHECK_MSG(broke_ms >= 0 && broke_ms <= S_DEADLINE_MS,
                  "%s: the connection was not dropped within 1 s", sc->name);
        break;
    case XP_ANY:
        break;
    }
    s_put_u64(gchan, 0x7000 + round_no);
    s_want(gchan, 'k');
    round_no++;
}

int main(void)
{
    s_init("hostile_sovia", 170);
    s_spawn("victim", sv_victim, NULL, &vchan);
    victim_port = (uint16_t)s_get_u64(vchan);
    s_spawn("healthy", healthy_role, NULL, &gchan);
    s_spawn("hostile", hostile_role, NULL, &hchan);
    s_put_u64(gchan, 1);
    s_want(gchan, 'k');

    /* The first round also brings up every thread sovia starts lazily;
     * the victim's resources after it are the baseline for the end. */
    if (s_case("baseline")) {
        run_round(0, &scenarios[0], 1);
    }
    s_tok(vchan, 'B');
    s_want(vchan, 'b');
    for (uint64_t i = 1; i < NSCEN; i++)
        if (hc_run_case(scenarios[i].name, scenarios[i].bug))
            run_round(i, &scenarios[i], 2000 + i);
    if (s_case("random")) {
        uint64_t seed = hc_seed("HARDENING_SEED", 20261122);
        unsigned rounds = hc_rounds(30);
        for (unsigned k = 0; k < rounds; k++)
            run_round(RANDOM_INDEX, &random_scenario, s_mix64(seed + k));
    }
    s_put_u64(hchan, UINT64_MAX);
    s_tok(vchan, 'Q');
    s_want(vchan, 'q');
    s_put_u64(gchan, UINT64_MAX);
    s_want(gchan, 'c');
    s_tok(vchan, 'c');
    s_pass();
}
