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
 * HARDENING_ROUNDS).
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
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hcommon.h"
#include "hsovia.h"
#include "sovia/sharness.h"
#include "svictim.h"

/* XP_ENDED: after the peer's FIN the victim reads end of stream, as a kernel
 * socket does (a reset after a FIN is not reported to the reader); the
 * violation that follows must still end the connection within 1 s. */
enum expect { XP_OK, XP_BREAK, XP_ENDED, XP_REFUSED, XP_ANY };
static const char *const expect_name[] = {"ok", "break", "ended", "refused", "any"};

struct hctx {
    struct hs s;
    uint64_t rng;
    unsigned round;
    uint64_t sent, echoed; /* stream bytes, and how many came back exact */
    double violation_ms;   /* when the rule was broken (0: not yet) */
};

struct scenario {
    const char *name;
    void (*run)(struct hctx *hc, const struct scenario *sc);
    enum expect expect;
    const char *bug;
    uint32_t p[2];
};

static uint16_t victim_port;

/* ---- Moves ------------------------------------------------------------------------------- */

static void connect_only(struct hctx *hc)
{
    uint16_t local = (uint16_t)(20000 + (getpid() * 7 + hc->round) % 20000);
    VIP_RETURN r = hs_connect(&hc->s, local, victim_port);
    CHECK_MSG(r == VIP_SUCCESS, "hostile connect: %s", VipxReturnString(r));
}

static void setup(struct hctx *hc)
{
    connect_only(hc);
    CHECK(!(hs_wakeup(&hc->s) & VIP_STATUS_ERROR_MASK));
    CHECK_MSG(hs_await_wakeup(&hc->s, 3000), "no WAKEUP from the victim");
}

/* Streams n pattern bytes and collects the echo; counts what came back exact. */
static void echo(struct hctx *hc, size_t n, bool must)
{
    static uint8_t buf[HS_MTU];
    size_t start = hc->s.rx_len;
    for (size_t done = 0; done < n;) {
        uint32_t k = (uint32_t)(n - done < HS_MTU ? n - done : HS_MTU);
        s_pattern_fill(buf, k, hc->round, hc->sent);
        if (!hs_data(&hc->s, buf, k, 2000)) {
            CHECK_MSG(!must, "honest DATA could not be sent (credits %u)", hc->s.credits);
            return;
        }
        hc->sent += k;
        done += k;
        hs_pump(&hc->s, 0);
    }
    int all = hs_collect(&hc->s, start + n, 3000);
    CHECK_MSG(all || !must, "the echo did not come back (%zu of %zu bytes)",
              hc->s.rx_len - start, n);
    size_t got = hc->s.rx_len - start;
    if (s_pattern_check(hc->s.rx + start, got, hc->round, hc->echoed) < 0)
        hc->echoed += got;
    else
        CHECK_MSG(!must, "the echo differs");
}

static void violate(struct hctx *hc, uint32_t imm, const void *data, uint32_t len)
{
    hc->violation_ms = s_now_ms();
    hs_raw(&hc->s, imm, data, len);
}

/* ---- Scenarios ------------------------------------------------------------------------------ */

static void sc_baseline(struct hctx *hc, const struct scenario *sc)
{
    (void)sc;
    setup(hc);
    echo(hc, 1, true);
    echo(hc, 100000, true);
    echo(hc, 4096, true);
}

/* After some honest traffic, one packet with immediate data p[0] (acks
 * field p[1] == 1: our true debt plus one) and a payload of p[1] bytes. */
static void sc_packet(struct hctx *hc, const struct scenario *sc)
{
    setup(hc);
    echo(hc, 5000, true);
    uint32_t imm = sc->p[0];
    if (sc->p[1] == UINT32_MAX) /* "acks = what we owe + 1" */
        imm = HS_IMM(imm & 7, hc->s.to_ack + 1);
    uint8_t pay[64];
    memset(pay, 'x', sizeof pay);
    uint32_t len = sc->p[1] == UINT32_MAX ? 0 : sc->p[1];
    violate(hc, imm, pay, len);
    hs_wait_broken(&hc->s, 1500);
}

/* The first packet breaks the handshake: p[0] is its immediate data. */
static void sc_first(struct hctx *hc, const struct scenario *sc)
{
    connect_only(hc);
    uint8_t pay[16] = "not a wakeup";
    violate(hc, sc->p[0], pay, sc->p[1]);
    hs_wait_broken(&hc->s, 1500);
}

/* An unsolicited FINACK: tolerated (docs/PROTOCOL.md), the echo goes on. */
static void sc_finack(struct hctx *hc, const struct scenario *sc)
{
    (void)sc;
    setup(hc);
    echo(hc, 3000, true);
    hs_raw(&hc->s, HS_IMM(HS_FINACK, 0), NULL, 0);
    hs_pump(&hc->s, 100);
    echo(hc, 3000, false);
}

/* Out-of-turn close packets and reserved bits: p[0] 1 a second FIN, 2 DATA
 * after the FIN, 3 DATA with reserved bits set. */
static void sc_odd(struct hctx *hc, const struct scenario *sc)
{
    setup(hc);
    echo(hc, 3000, true);
    uint8_t pay[100];
    memset(pay, 'y', sizeof pay);
    switch (sc->p[0]) {
    case 1:
        hs_raw(&hc->s, HS_IMM(HS_FIN, 0), NULL, 0);
        violate(hc, HS_IMM(HS_FIN, 0), NULL, 0);
        break;
    case 2:
        hs_raw(&hc->s, HS_IMM(HS_FIN, 0), NULL, 0);
        violate(hc, HS_IMM(HS_DATA, 0), pay, sizeof pay);
        break;
    default:
        violate(hc, HS_IMM(HS_DATA, 0) | 0xf8u | 0xab000000u, pay, sizeof pay);
        break;
    }
    hs_wait_broken(&hc->s, 1500);
}

/* DATA past the window, as fast as the victim's buffers allow. */
static void sc_flood(struct hctx *hc, const struct scenario *sc)
{
    (void)sc;
    setup(hc);
    echo(hc, 3000, true); /* accepted: the victim handles our packets */
    uint8_t buf[HS_MTU];
    memset(buf, 'z', sizeof buf);
    hc->violation_ms = s_now_ms();
    for (unsigned i = 0; i < 200 && !hc->s.broken; i++)
        hs_raw(&hc->s, HS_IMM(HS_DATA, 0), buf, sizeof buf);
    hs_wait_broken(&hc->s, 1500);
}

/* A completion of ours in the victim's next slot: p[0] status, p[1] length. */
static void sc_cmpl(struct hctx *hc, const struct scenario *sc)
{
    setup(hc);
    echo(hc, 2000, true);
    hc->violation_ms = s_now_ms();
    hp_raw_complete(&hc->s.h, hp_next_seq(&hc->s.h), sc->p[0], sc->p[1], HS_IMM(HS_DATA, 0), 0,
                    NULL);
    hs_wait_broken(&hc->s, 1500);
}

/* Every receive slot we published and the victim has not used lies about
 * its sequence number: the victim's next send to us must fail. */
static void sc_post_lie(struct hctx *hc, const struct scenario *sc)
{
    (void)sc;
    setup(hc);
    echo(hc, 2000, true);
    struct shm_ctl *ctl = hp_own_ctl(&hc->s.h);
    for (uint32_t i = 0; i < hc->s.h.svi->depth; i++)
        atomic_fetch_add(&ctl->post[i].seq, 0x1000u);
    hc->violation_ms = s_now_ms();
    uint8_t b[100] = {0};
    hs_data(&hc->s, b, sizeof b, 1000); /* its echo meets the lie */
    hs_wait_broken(&hc->s, 1500);
}

struct storm {
    struct hp *h;
    atomic_bool stop;
    int scribble;
    uint64_t rng;
};

static void *storm_thread(void *arg)
{
    struct storm *s = arg;
    struct shm_peer *p = hp_peer(s->h);
    while (!atomic_load(&s->stop)) {
        if (s->scribble) {
            uint32_t off = p->data_off + hc_below(&s->rng, p->rx_size - p->data_off);
            ((volatile uint8_t *)p->rx)[off] = (uint8_t)hc_rand32(&s->rng);
        } else {
            hp_ring(s->h);
        }
        if ((hc_rand32(&s->rng) & 63) == 0)
            usleep(50);
    }
    return NULL;
}

static void sc_storm(struct hctx *hc, const struct scenario *sc)
{
    setup(hc);
    struct storm st = {.h = &hc->s.h, .scribble = (int)sc->p[0], .rng = hc->rng};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, storm_thread, &st) == 0);
    echo(hc, 200000, !st.scribble);
    atomic_store(&st.stop, true);
    CHECK(pthread_join(t, NULL) == 0);
}

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

static void sc_silent(struct hctx *hc, const struct scenario *sc)
{
    (void)sc;
    connect_only(hc); /* and no WAKEUP */
    int ch;
    int id = s_spawn("late-client", late_client, NULL, &ch);
    double ms = s_get_f64(ch);
    s_reap(id);
    close(ch);
    s_log("a client connecting while a silent peer is being accepted took %.0f ms", ms);
    CHECK_MSG(ms < 1500, "a silent peer held up the listener: a connect took %.0f ms", ms);
}

static void sc_random(struct hctx *hc, const struct scenario *sc)
{
    (void)sc;
    setup(hc);
    int verbose = getenv("HARDENING_VERBOSE") != NULL;
    unsigned writes = 0;
    uint8_t buf[HS_MTU];
    for (unsigned step = 0; step < 40 && !hc->s.broken; step++) {
        uint32_t a = hc_below(&hc->rng, 10);
        if (a < 4) {
            echo(hc, 1 + hc_below(&hc->rng, 20000), false);
        } else if (a < 7) {
            uint32_t imm = hc_below(&hc->rng, 3) ? HS_IMM(hc_below(&hc->rng, 8),
                                                          hp_interesting(&hc->rng, 1) & 0xffff)
                                                 : hc_rand32(&hc->rng);
            uint32_t len = hc_below(&hc->rng, 2) ? 0 : 1 + hc_below(&hc->rng, HS_MTU);
            memset(buf, (int)step, len);
            hs_raw(&hc->s, imm, buf, len);
            writes++;
            if (verbose)
                s_log("round %u step %u: packet imm %#x len %u", hc->round, step, imm, len);
        } else {
            char what[160];
            hp_random_write(&hc->s.h, &hc->rng, what, sizeof what);
            writes++;
            if (verbose)
                s_log("round %u step %u: %s", hc->round, step, what);
        }
        hs_pump(&hc->s, 2);
    }
    s_log("random round %u: %u hostile moves", hc->round, writes);
}


static const struct scenario scenarios[] = {
    {"baseline", sc_baseline, XP_OK, NULL, {0}},
    {"type_0", sc_packet, XP_BREAK, NULL, {HS_IMM(0, 0), 0}},
    {"type_6", sc_packet, XP_BREAK, NULL, {HS_IMM(6, 0), 0}},
    {"type_7_payload", sc_packet, XP_BREAK, NULL, {HS_IMM(7, 0), 10}},
    {"ack_count_over", sc_packet, XP_BREAK, NULL, {HS_ACK, UINT32_MAX}},
    {"data_acks_max", sc_packet, XP_BREAK, NULL, {HS_IMM(HS_DATA, 0xffff), 10}},
    {"data_empty", sc_packet, XP_BREAK, NULL, {HS_IMM(HS_DATA, 0), 0}},
    {"wakeup_twice", sc_packet, XP_BREAK, NULL, {HS_WAKEUP_IMM(16, 22), 0}},
    {"first_wakeup_window_0", sc_first, XP_REFUSED, NULL, {HS_WAKEUP_IMM(0, 22), 0}},
    {"first_wakeup_window_huge", sc_first, XP_REFUSED, NULL, {HS_WAKEUP_IMM(4095, 22), 0}},
    {"first_wakeup_slots_0", sc_first, XP_REFUSED, NULL, {HS_WAKEUP_IMM(16, 0), 0}},
    {"first_wakeup_reserved", sc_first, XP_REFUSED, NULL, {HS_WAKEUP_IMM(16, 22) | 0x40u, 0}},
    {"first_packet_data", sc_first, XP_REFUSED, NULL, {HS_IMM(HS_DATA, 0), 10}},
    {"first_packet_ack", sc_first, XP_REFUSED, NULL, {HS_IMM(HS_ACK, 1), 0}},
    {"first_packet_fin", sc_first, XP_REFUSED, NULL, {HS_IMM(HS_FIN, 0), 0}},
    {"finack_unsolicited", sc_finack, XP_ANY, NULL, {0, 0}},
    {"fin_twice", sc_odd, XP_ENDED, NULL, {1, 0}},
    {"data_after_fin", sc_odd, XP_ENDED, NULL, {2, 0}},
    {"reserved_bits", sc_odd, XP_BREAK, NULL, {3, 0}},
    {"past_the_window", sc_flood, XP_BREAK, NULL, {0, 0}},
    {"cmpl_status_bits", sc_cmpl, XP_BREAK, NULL, {UINT32_MAX, 10}},
    {"cmpl_length_over", sc_cmpl, XP_BREAK, NULL,
     {VIP_STATUS_OP_RECEIVE | VIP_STATUS_IMMEDIATE, 32769}},
    {"post_slots_lie", sc_post_lie, XP_BREAK, NULL, {0, 0}},
    {"wake_storm", sc_storm, XP_OK, NULL, {0, 0}},
    {"arena_scribble", sc_storm, XP_ANY, NULL, {1, 0}},
    {"silent_peer", sc_silent, XP_ANY, NULL, {0, 0}},
};
#define NSCEN (sizeof scenarios / sizeof scenarios[0])
#define RANDOM_INDEX NSCEN
static const struct scenario random_scenario = {"random", sc_random, XP_ANY, NULL, {0, 0}};

/* ---- Roles ---------------------------------------------------------------------------------- */

static void hostile_role(int chan, void *arg)
{
    (void)arg;
    for (;;) {
        uint64_t idx = s_get_u64(chan);
        if (idx == UINT64_MAX)
            return;
        struct hctx hc = {0};
        hc.rng = s_get_u64(chan);
        hc.round = (unsigned)s_get_u64(chan);
        const struct scenario *sc = idx == RANDOM_INDEX ? &random_scenario : &scenarios[idx];
        sc->run(&hc, sc);
        double broke_ms = -1;
        if (hc.violation_ms > 0 && hp_state(&hc.s.h) != VIP_STATE_CONNECTED)
            broke_ms = s_now_ms() - hc.violation_ms; /* an upper bound */
        s_tok(chan, 'd');
        s_put_u64(chan, hc.sent);
        s_put_u64(chan, hc.echoed);
        s_put_f64(chan, broke_ms);
        s_want(chan, 'c');
        hs_close(&hc.s);
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
