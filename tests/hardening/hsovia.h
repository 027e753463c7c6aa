/*
 * hsovia.h - the hostile peer speaking the sovia protocol (docs/PROTOCOL.md)
 * by hand over a raw vipl VI (hpeer.h): it connects to a sovia listener's
 * discriminator ("sovia" + port), sends its WAKEUP, keeps the window and
 * the delayed acknowledgements honestly when asked to, and can put any
 * immediate data (type, acks, reserved bits) on any packet it sends.
 */
#ifndef SOVIA_TESTS_HARDENING_HSOVIA_H
#define SOVIA_TESTS_HARDENING_HSOVIA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <pthread.h>
#include <stdatomic.h>

#include "hpeer.h"

/* The packet types and fields of docs/PROTOCOL.md, restated: the test
 * must not take them from the implementation it checks. */
enum { HS_DATA = 1, HS_ACK = 2, HS_WAKEUP = 3, HS_FIN = 4, HS_FINACK = 5 };
#define HS_IMM(type, acks) ((uint32_t)(type) | (uint32_t)(acks) << 8)
#define HS_WAKEUP_IMM(w, slots) ((uint32_t)HS_WAKEUP | (uint32_t)(w) << 8 | (uint32_t)(slots) << 20)

#define HS_MTU 4096u   /* our MaxTransferSize: the victim sends us at most this */
#define HS_WINDOW 16u  /* DATA buffers we announce */
#define HS_NBUFS 40u   /* receive buffers we post: window + room for control packets */

struct hs {
    struct hp h;
    unsigned credits;    /* DATA packets the victim can take (from its WAKEUP and ACKs) */
    unsigned peer_window;
    unsigned to_ack;     /* victim DATA buffers we reposted and not yet acknowledged */
    unsigned ack_every;  /* ACK pacing for the victim's buffers */
    bool peer_fin, fin_acked, broken;
    /* Stream bytes the victim sent us, for checking an echo. */
    uint8_t *rx;
    size_t rx_len, rx_cap;
};

/* Opens the VI and connects to 127.0.0.1:port as if from local_port.
 * VIP_SUCCESS or the connect's error. */
VIP_RETURN hs_connect(struct hs *s, uint16_t local_port, uint16_t port);
/* The same, with `token` sent along (VipxViSetConnectToken; -1: none), as
 * a `sovia run` client sends its kernel socket. */
VIP_RETURN hs_connect_with(struct hs *s, uint16_t local_port, uint16_t port, int token);
/* The same, to the shadow listener of user `uid` ((uid_t)-1: ours). */
VIP_RETURN hs_connect_to(struct hs *s, uint16_t local_port, uint16_t port, int token, uid_t uid);
void hs_close(struct hs *s);

/* Sends one packet with exactly this immediate data and payload. Returns
 * the send's status; error bits mean our VI broke. */
uint32_t hs_raw(struct hs *s, uint32_t imm, const void *data, uint32_t len);
/* The honest WAKEUP (our window, and buffers for ACK packets). */
uint32_t hs_wakeup(struct hs *s);
/* Waits for the victim's WAKEUP (its window becomes our credits). 1 on success. */
int hs_await_wakeup(struct hs *s, unsigned ms);
/* Honest DATA: waits up to ms for credit, piggybacks what we owe. 1 if sent. */
int hs_data(struct hs *s, const void *data, uint32_t len, unsigned ms);
/* Handles what arrives within ms (DATA into rx, ACK credits, FIN, FINACK),
 * reposting and acknowledging honestly. Returns the packets handled. */
int hs_pump(struct hs *s, unsigned ms);
/* Pumps until at least n stream bytes arrived or ms passed; 1 if they did. */
int hs_collect(struct hs *s, size_t n, unsigned ms);
/* Waits until our VI leaves CONNECTED (the victim broke the connection). */
bool hs_wait_broken(struct hs *s, unsigned ms);

/* ---- Moves of the hostile tests ---------------------------------------------------- */

/* Streams n bytes of the pattern stream `seed` from position *sent (honest
 * DATA) and collects the echo, checked from position *echoed; *sent and
 * *echoed advance by what went and what came back exact. must: anything
 * short of a byte-exact echo fails the test. 1 if it all came back. */
int hs_echo(struct hs *s, uint64_t seed, uint64_t *sent, uint64_t *echoed, size_t n, bool must);

/* A packet of random immediate data (a real type with an interesting acks
 * count two times in three) and a random payload, or none. Described in
 * `what`. */
void hs_random_packet(struct hs *s, uint64_t *rng, char *what, size_t what_len);

/* A thread that keeps writing one thing of the victim's until stopped. */
enum hs_storm_kind {
    HS_STORM_WAKE,  /* rings its wake-up */
    HS_STORM_ARENA, /* random bytes anywhere in its data area (staging, arena) */
    HS_STORM_CTL,   /* random bytes anywhere in its ctl segment (sovia run) */
    HS_STORM_ARMED, /* keeps its CQ's armed word at `value` (sovia run) */
};

struct hs_storm {
    struct hp *h;
    enum hs_storm_kind kind;
    uint32_t value;
    uint64_t rng;
    uint8_t *ctl;
    size_t ctl_len;
    _Atomic uint32_t *armed;
    atomic_bool stop;
    atomic_ulong writes;
    pthread_t thread;
    bool running;
};

/* 0, or -errno when the target cannot be made writable (sealed). */
int hs_storm_start(struct hs_storm *st, struct hp *h, enum hs_storm_kind kind, uint32_t value,
                   uint64_t seed);
/* Stops it (if running); returns the writes it made. */
unsigned long hs_storm_stop(struct hs_storm *st);

#endif
