/*
 * shortconn.c - sovia run steps aside for connections too short to carry.
 *
 * Carrying a connection costs its setup (a VI each end, the rendezvous,
 * the pairing: about 0.3-0.5 ms of CPU on a 2-core host against kernel
 * TCP's 0.07) and repays it by each message after; a client that opens a
 * connection per request and exchanges a message or two on it (HTTP/1.0,
 * curl, pgbench -C, a proxy's backend connections) only pays. The brief's
 * rule is that sovia is never slower: so each client process remembers,
 * per destination (address and port), how many carried connections in a
 * row moved fewer than SHORT_PACKETS DATA packets; after SHORT_RUN of
 * them it leaves the next connections there to kernel TCP at once (no VI
 * request: the server's accept() finds none queued and pairs nothing),
 * carrying one in PROBE_EVERY to learn again (a long one clears the run).
 * SOVIA_SHORT_CONNS=0 carries every connection.
 *
 * The table is a few words updated with atomics alone (a lost update only
 * shifts a guess; nothing to hold across a fork or in a signal handler).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sock.h"
#include "transparent.h"

#define SLOTS 64
#define SHORT_PACKETS 64 /* DATA both ways: about the setup's cost in saved system calls */
#define SHORT_RUN 4
#define PROBE_EVERY 256

/* hash (32 bits) << 32 | run (8) << 16 | connects stepped aside since the last probe (16) */
static _Atomic uint64_t slots[SLOTS];
static atomic_int enabled = -1; /* -1: SOVIA_SHORT_CONNS not read yet */

static bool on(void)
{
    int e = atomic_load_explicit(&enabled, memory_order_relaxed);
    if (e < 0) {
        const char *v = getenv("SOVIA_SHORT_CONNS");
        e = !(v && strcmp(v, "0") == 0);
        atomic_store_explicit(&enabled, e, memory_order_relaxed);
    }
    return e != 0;
}

static uint32_t dest_hash(const struct sockaddr *to)
{
    const uint8_t *p;
    size_t n;
    uint16_t port = sov_addr_port(to);
    if (to->sa_family == AF_INET) {
        p = (const uint8_t *)&((const struct sockaddr_in *)to)->sin_addr;
        n = 4;
    } else {
        p = (const uint8_t *)&((const struct sockaddr_in6 *)to)->sin6_addr;
        n = 16;
    }
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    h = (h ^ (port & 0xff)) * 16777619u;
    h = (h ^ (port >> 8)) * 16777619u;
    return h | 1; /* 0 is an empty slot */
}

bool sov_tp_worth_carrying(const struct sockaddr *to)
{
    if (!on())
        return true;
    uint32_t h = dest_hash(to);
    _Atomic uint64_t *slot = &slots[h % SLOTS];
    uint64_t v = atomic_load_explicit(slot, memory_order_relaxed);
    if ((uint32_t)(v >> 32) != h || ((v >> 16) & 0xff) < SHORT_RUN)
        return true;
    unsigned aside = (unsigned)(v & 0xffff) + 1;
    bool probe = aside >= PROBE_EVERY;
    atomic_store_explicit(slot, (v & ~(uint64_t)0xffff) | (probe ? 0 : aside), memory_order_relaxed);
    return probe;
}

void sov_tp_note_carried(const struct sockaddr *to, uint64_t packets)
{
    if (!on() || (to->sa_family != AF_INET && to->sa_family != AF_INET6))
        return;
    uint32_t h = dest_hash(to);
    _Atomic uint64_t *slot = &slots[h % SLOTS];
    uint64_t v = atomic_load_explicit(slot, memory_order_relaxed);
    bool same = (uint32_t)(v >> 32) == h;
    unsigned run = same ? (unsigned)((v >> 16) & 0xff) : 0;
    run = packets < SHORT_PACKETS ? (run < 255 ? run + 1 : 255) : 0;
    uint64_t aside = same && run ? v & 0xffff : 0;
    atomic_store_explicit(slot, (uint64_t)h << 32 | (uint64_t)run << 16 | aside,
                          memory_order_relaxed);
}
