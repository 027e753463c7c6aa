/*
 * svictim.h - the sov_* victim of hostile_sovia (tests/hardening/).
 *
 * An ordinary non-blocking echo server on sov_poll: it echoes every
 * connection byte for byte, one of them the healthy client's, and in each
 * round one the hostile peer's. Every sov_poll has a 200 ms timeout and the
 * victim records how far any ran past it. Commands on its channel:
 *   'R' a round starts (the next connection accepted is the hostile one);
 *   'S' the round ends: the hostile connection, if still open, is reset
 *       (SO_LINGER {1, 0}) and the round's struct sv_report is written;
 *   'B' the resources held now are the baseline (after the first round);
 *   'Q' quit: every connection closed, resources back to the baseline.
 * The healthy connection failing fails the victim; other connections
 * accepted outside a round (a late client, a hostile peer whose handshake
 * completed after its round) are echoed too and may fail.
 */
#ifndef SOVIA_TESTS_HARDENING_SVICTIM_H
#define SOVIA_TESTS_HARDENING_SVICTIM_H

#include <stdint.h>

#define SV_WAIT_MS 200
#define SV_SLACK_MS 250.0

struct sv_report {
    int32_t accepted;      /* the hostile connection came out of sov_accept */
    int32_t err;           /* errno of the call that failed on it (0: none) */
    int32_t eof;           /* it read end of stream */
    int32_t extra_conns;   /* other connections accepted during the round */
    int64_t bytes_in, bytes_out;
    double max_over_ms;    /* worst sov_poll beyond its timeout, this round */
};

/* The victim role: writes its port (u64) first. */
void sv_victim(int chan, void *arg);

#endif
