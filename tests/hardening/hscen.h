/*
 * hscen.h - hostile rounds against an established sovia connection,
 * shared by the tests whose victims speak the sovia protocol
 * (hostile_sovia, hostile_run): a round's state, and the scenarios
 * that break one rule of docs/PROTOCOL.md or write the shared memory under
 * the connection. Each test brings its own establishment (r->setup), what
 * else a broken connection must show (r->after_break), extra random moves,
 * and its own expectations.
 */
#ifndef SOVIA_TESTS_HARDENING_HSCEN_H
#define SOVIA_TESTS_HARDENING_HSCEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hsovia.h"

struct hs_round {
    struct hs s;
    uint64_t rng;
    unsigned round;
    uint64_t sent, echoed; /* the stream over the VI, and how much came back exact */
    double violation_ms;   /* when the rule was broken (0: not yet) */
    double broke_ms;       /* our VI was broken this long after it (-1: not seen) */
    struct hs_storm storm; /* left running by hs_sc_storm until hs_round_end */
    /* The test's: connect and complete the handshake honestly. */
    void (*setup)(struct hs_round *r);
    /* The test's, or NULL: what it awaits after the VI broke. */
    void (*after_break)(struct hs_round *r);
    /* The test's, or NULL: one more kind of random move (hs_sc_random),
     * described in `what`. */
    void (*extra_move)(struct hs_round *r, char *what, size_t what_len);
};

/* A scenario: p holds its parameters. */
typedef void (*hs_scenario)(struct hs_round *r, const uint32_t p[2]);

void hs_round_init(struct hs_round *r, uint64_t rng, unsigned round);
/* hs_echo of the round's stream (the pattern seed is the round number). */
int hs_round_echo(struct hs_round *r, size_t n, bool must);
/* Sends the packet that breaks the rule, noting when. */
void hs_round_violate(struct hs_round *r, uint32_t imm, const void *data, uint32_t len);
/* After a violation: waits up to 1.5 s for our VI to break (r->broke_ms),
 * then r->after_break. */
void hs_round_await_break(struct hs_round *r);
/* r->broke_ms, or an upper bound if the VI broke since (-1: never broke). */
double hs_round_broke_ms(struct hs_round *r);
/* Stops a storm and closes the VI. */
void hs_round_end(struct hs_round *r);

/* ---- Scenarios on an established connection (they call r->setup) ---------------- */

/* After honest traffic, one packet with immediate data p[0] and a p[1]-byte
 * payload; p[1] == UINT32_MAX: type p[0] with acks one above what we owe. */
void hs_sc_packet(struct hs_round *r, const uint32_t p[2]);
/* An unsolicited FINACK (tolerated), then the echo goes on. */
void hs_sc_finack(struct hs_round *r, const uint32_t p[2]);
/* p[0] 1: a second FIN; 2: DATA after our FIN; 3: DATA with reserved bits. */
void hs_sc_odd(struct hs_round *r, const uint32_t p[2]);
/* DATA past the window the victim announced. */
void hs_sc_flood(struct hs_round *r, const uint32_t p[2]);
/* A completion of ours in the victim's next slot: status p[0], length p[1]. */
void hs_sc_cmpl(struct hs_round *r, const uint32_t p[2]);
/* Every receive slot we published lies about its sequence number. */
void hs_sc_post_lie(struct hs_round *r, const uint32_t p[2]);
/* A storm (enum hs_storm_kind p[0], value p[1]) during a long echo, which
 * must be byte-exact for the kinds that change no byte (WAKE, ARMED). */
void hs_sc_storm(struct hs_round *r, const uint32_t p[2]);
/* Up to 40 random steps: honest echoes, hs_random_packet, hp_random_write
 * and r->extra_move, until our VI breaks. */
void hs_sc_random(struct hs_round *r, const uint32_t p[2]);

#endif
