/* hscen.c - see hscen.h. */
#include "hscen.h"

#include <stdlib.h>
#include <string.h>

#include "hcommon.h"
#include "sovia/sharness.h"

void hs_round_init(struct hs_round *r, uint64_t rng, unsigned round)
{
    memset(r, 0, sizeof *r);
    r->rng = rng;
    r->round = round;
    r->broke_ms = -1;
}

int hs_round_echo(struct hs_round *r, size_t n, bool must)
{
    return hs_echo(&r->s, r->round, &r->sent, &r->echoed, n, must);
}

void hs_round_violate(struct hs_round *r, uint32_t imm, const void *data, uint32_t len)
{
    r->violation_ms = s_now_ms();
    hs_raw(&r->s, imm, data, len);
}

void hs_round_await_break(struct hs_round *r)
{
    hs_wait_broken(&r->s, 1500);
    if (hp_state(&r->s.h) != VIP_STATE_CONNECTED)
        r->broke_ms = s_now_ms() - r->violation_ms;
    if (r->after_break)
        r->after_break(r);
}

double hs_round_broke_ms(struct hs_round *r)
{
    if (r->broke_ms < 0 && r->violation_ms > 0 && r->s.h.nic &&
        hp_state(&r->s.h) != VIP_STATE_CONNECTED)
        r->broke_ms = s_now_ms() - r->violation_ms;
    return r->broke_ms;
}

void hs_round_end(struct hs_round *r)
{
    hs_storm_stop(&r->storm);
    hs_close(&r->s);
}

/* ---- Scenarios ----------------------------------------------------------------------- */

void hs_sc_packet(struct hs_round *r, const uint32_t p[2])
{
    r->setup(r);
    hs_round_echo(r, 5000, true);
    uint32_t imm = p[0];
    if (p[1] == UINT32_MAX)
        imm = HS_IMM(imm & 7, r->s.to_ack + 1);
    uint8_t pay[64];
    memset(pay, 'x', sizeof pay);
    hs_round_violate(r, imm, pay, p[1] == UINT32_MAX ? 0 : p[1]);
    hs_round_await_break(r);
}

void hs_sc_finack(struct hs_round *r, const uint32_t p[2])
{
    (void)p;
    r->setup(r);
    hs_round_echo(r, 3000, true);
    hs_raw(&r->s, HS_IMM(HS_FINACK, 0), NULL, 0);
    hs_pump(&r->s, 100);
    hs_round_echo(r, 3000, false);
}

void hs_sc_odd(struct hs_round *r, const uint32_t p[2])
{
    r->setup(r);
    hs_round_echo(r, 3000, true);
    uint8_t pay[100];
    memset(pay, 'y', sizeof pay);
    if (p[0] != 3)
        hs_raw(&r->s, HS_IMM(HS_FIN, 0), NULL, 0);
    if (p[0] == 1)
        hs_round_violate(r, HS_IMM(HS_FIN, 0), NULL, 0);
    else if (p[0] == 2)
        hs_round_violate(r, HS_IMM(HS_DATA, 0), pay, sizeof pay);
    else
        hs_round_violate(r, HS_IMM(HS_DATA, 0) | 0xf8u | 0xab000000u, pay, sizeof pay);
    hs_round_await_break(r);
}

void hs_sc_flood(struct hs_round *r, const uint32_t p[2])
{
    (void)p;
    r->setup(r);
    hs_round_echo(r, 3000, true); /* established: the victim handles our packets */
    uint8_t buf[HS_MTU];
    memset(buf, 'z', sizeof buf);
    r->violation_ms = s_now_ms();
    for (unsigned i = 0; i < 200 && !r->s.broken; i++)
        hs_raw(&r->s, HS_IMM(HS_DATA, 0), buf, sizeof buf);
    hs_round_await_break(r);
    /* Either the victim's window check failed the connection, or (a victim
     * that kept reading and acknowledging) one of our sends found no
     * receive posted and our VI broke first: then the victim learns of it
     * at its next wait, and may read it as the peer's end (ENDED). */
    s_sleep_ms(400);
}

void hs_sc_cmpl(struct hs_round *r, const uint32_t p[2])
{
    r->setup(r);
    hs_round_echo(r, 2000, true);
    r->violation_ms = s_now_ms();
    hp_raw_complete(&r->s.h, hp_next_seq(&r->s.h), p[0], p[1], HS_IMM(HS_DATA, 0), 0, NULL);
    hs_round_await_break(r);
}

void hs_sc_post_lie(struct hs_round *r, const uint32_t p[2])
{
    (void)p;
    r->setup(r);
    hs_round_echo(r, 2000, true);
    struct shm_ctl *ctl = hp_own_ctl(&r->s.h);
    for (uint32_t i = 0; i < r->s.h.svi->depth; i++)
        atomic_fetch_add(&ctl->post[i].seq, 0x1000u);
    r->violation_ms = s_now_ms();
    uint8_t b[100] = {0};
    hs_data(&r->s, b, sizeof b, 1000); /* its echo meets the lie */
    hs_round_await_break(r);
}

void hs_sc_storm(struct hs_round *r, const uint32_t p[2])
{
    r->setup(r);
    int err = hs_storm_start(&r->storm, &r->s.h, (enum hs_storm_kind)p[0], p[1], r->rng);
    if (err)
        s_log("storm %u: the target is sealed (%s): nothing to write", p[0], s_errname(-err));
    hs_round_echo(r, 200000, p[0] == HS_STORM_WAKE || p[0] == HS_STORM_ARMED);
}

void hs_sc_random(struct hs_round *r, const uint32_t p[2])
{
    (void)p;
    r->setup(r);
    int verbose = getenv("HARDENING_VERBOSE") != NULL;
    unsigned moves = 0;
    char what[160];
    for (unsigned step = 0; step < 40 && !r->s.broken; step++) {
        uint32_t a = hc_below(&r->rng, 20);
        if (a < 8) {
            hs_round_echo(r, 1 + hc_below(&r->rng, 20000), false);
            continue;
        }
        if (a < 13)
            hs_random_packet(&r->s, &r->rng, what, sizeof what);
        else if (a < 17 || !r->extra_move)
            hp_random_write(&r->s.h, &r->rng, what, sizeof what);
        else
            r->extra_move(r, what, sizeof what);
        moves++;
        if (verbose)
            s_log("round %u step %u: %s", r->round, step, what);
        hs_pump(&r->s, 2);
    }
    s_log("random round %u: %u hostile moves", r->round, moves);
}
