/*
 * rvictim.h - the victim of hostile_run and its clients: plain libc
 * programs (socket, bind, listen, accept4, poll, recv, send, close; no
 * sov_* call, nothing of sovia linked) in one executable,
 * test_hardening_rvictim, which hostile_run starts under `sovia run`.
 *
 *   rvictim server CHAN         the echo server (rvictim.c)
 *   rvictim client CHAN PORT    the healthy client (rclient.c)
 *   rvictim probe CHAN PORT LP  one echo from local port LP, reported
 *
 * CHAN is an inherited descriptor of a socketpair to the test.
 *
 * The server echoes every connection byte for byte with non-blocking
 * sockets and poll(), each poll with a 200 ms timeout (it records how far
 * any ran past it, and how long its longest socket call took). Its
 * commands (one byte each) are svictim.h's: 'R' a round starts (the next
 * connection accepted is the round's), 'S' it ends (that connection, if
 * still open, is reset with SO_LINGER {1, 0}, and the round's struct
 * rv_report is written), 'Q' quit (every other connection
 * is reset; 'q' answers), then 'c' once the healthy client closed (the
 * server reads its end of stream and exits 0). The healthy connection
 * failing in any way fails the server (exit 1).
 *
 * The healthy client reads u64 seeds: each one an echo of a pattern
 * stream checked byte-exact within 3 s ('k' answers); RV_QUIT closes it
 * ('c' answers). The probe does one such echo from a given local port and
 * writes an int32 (1: exact, 0: not) instead of failing.
 */
#ifndef SOVIA_TESTS_HARDENING_RVICTIM_H
#define SOVIA_TESTS_HARDENING_RVICTIM_H

#include <stddef.h>
#include <stdint.h>

#include "svictim.h" /* the commands and struct sv_report */

#define RV_QUIT UINT64_MAX
#define RV_ECHO_MS 3000

/* The server's report of a round: svictim.h's, and the longest socket
 * call it made (accept4, recv, send, setsockopt, close: all non-blocking,
 * or a close that resets, so none may wait). */
struct rv_report {
    struct sv_report sv;
    double max_call_ms;
};

/* ---- In the rvictim executable ------------------------------------------------ */

__attribute__((noreturn, format(printf, 1, 2))) void rv_fail(const char *fmt, ...);
__attribute__((format(printf, 1, 2))) void rv_log(const char *fmt, ...);
#define RV_CHECK(cond, ...)                                                           \
    do {                                                                              \
        if (!(cond))                                                                  \
            rv_fail(__VA_ARGS__);                                                     \
    } while (0)

double rv_now_ms(void);
/* The channel (blocking; its end fails the program). */
void rv_put(int chan, const void *buf, size_t len);
void rv_get(int chan, void *buf, size_t len);
/* One byte of the pattern stream `seed` at position pos. */
uint8_t rv_pattern(uint64_t seed, uint64_t pos);

int rv_server(int chan);
int rv_client(int chan, uint16_t port);
int rv_probe(int chan, uint16_t port, uint16_t local_port);

#endif
