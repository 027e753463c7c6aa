/*
 * transport_limit.c - the floor: two processes hand one 64-byte cache line
 * back and forth through a shared page. Nothing can move a message between
 * two cores faster, so every other transport is compared with this.
 * --size is accepted but only the line moves (up to 24 payload bytes per
 * direction, enough for the protocol's commands and flags).
 */
#include "bench_internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define LINE_PAYLOAD 24

/*
 * Per direction d: the producer bumps sent[d] (release) after writing
 * data[d]; the consumer bumps rcvd[d] (release) once it has copied it out.
 * The producer may write again once rcvd[d] caught up. All in one line.
 *
 * The consumer publishes rcvd lazily, together with its next send or
 * before its next receive: a store right after the read would pull the
 * line away from the spinning peer and back again, tripling the cost of a
 * ping-pong, while a reply's stores go to the line in one go.
 */
struct limit_line {
    _Atomic uint32_t sent[2];
    _Atomic uint32_t rcvd[2];
    unsigned char data[2][LINE_PAYLOAD];
} __attribute__((aligned(64)));

_Static_assert(sizeof(struct limit_line) == 64, "one cache line");

struct limit_ep {
    struct limit_line *line;
    int out; /* direction this process produces */
    uint32_t sent, rcvd;
    bool ack_pending; /* rcvd not yet published */
    unsigned char *sbuf, *rbuf;
};

/* Spins this long between checks that the peer still exists. */
#define SPIN_CHECK (1u << 20)

static int limit_prepare(const struct bench_params *p, size_t max_msg, void **shared)
{
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    (void)p;
    (void)max_msg;
    if (page == MAP_FAILED) {
        perror("limit: mmap");
        return -1;
    }
    *shared = page;
    return 0;
}

static int limit_setup(void *shared, enum bench_role role, size_t max_msg, void **out)
{
    struct limit_ep *ep = calloc(1, sizeof *ep);

    if (!ep)
        return -1;
    ep->line = shared;
    ep->out = role == BENCH_DRIVER ? 0 : 1;
    /* The caller may fill the whole message even though only a line moves. */
    if (max_msg < LINE_PAYLOAD)
        max_msg = LINE_PAYLOAD;
    ep->sbuf = calloc(1, max_msg);
    ep->rbuf = calloc(1, max_msg);
    if (!ep->sbuf || !ep->rbuf) {
        free(ep->sbuf);
        free(ep->rbuf);
        free(ep);
        return -1;
    }
    *out = ep;
    return 0;
}

static void *limit_send_buf(void *p)
{
    return ((struct limit_ep *)p)->sbuf;
}

static int peer_gone(void)
{
    fprintf(stderr, "limit: peer process exited\n");
    return -1;
}

static void publish_ack(struct limit_ep *ep)
{
    if (ep->ack_pending) {
        atomic_store_explicit(&ep->line->rcvd[1 - ep->out], ep->rcvd, memory_order_release);
        ep->ack_pending = false;
    }
}

static int limit_send(void *p, size_t len)
{
    struct limit_ep *ep = p;
    struct limit_line *l = ep->line;
    unsigned spins = 0;

    publish_ack(ep);
    while (atomic_load_explicit(&l->rcvd[ep->out], memory_order_acquire) != ep->sent)
        if (++spins == SPIN_CHECK) {
            spins = 0;
            if (!bench_peer_alive())
                return peer_gone();
        }
    (void)len;
    /* A constant length compiles to a few moves; a variable one calls
     * memcpy, which measurably slows this floor. Buffers hold >= a line. */
    memcpy(l->data[ep->out], ep->sbuf, LINE_PAYLOAD);
    atomic_store_explicit(&l->sent[ep->out], ++ep->sent, memory_order_release);
    return 0;
}

static int limit_recv(void *p, size_t len, const void **data)
{
    struct limit_ep *ep = p;
    struct limit_line *l = ep->line;
    int in = 1 - ep->out;
    unsigned spins = 0;

    publish_ack(ep);
    while (atomic_load_explicit(&l->sent[in], memory_order_acquire) == ep->rcvd)
        if (++spins == SPIN_CHECK) {
            spins = 0;
            if (!bench_peer_alive())
                return peer_gone();
        }
    (void)len;
    memcpy(ep->rbuf, l->data[in], LINE_PAYLOAD);
    ep->rcvd++;
    ep->ack_pending = true;
    *data = ep->rbuf;
    return 0;
}

static int limit_teardown(void *p)
{
    struct limit_ep *ep = p;

    free(ep->sbuf);
    free(ep->rbuf);
    free(ep);
    return 0;
}

static void limit_release(void *shared)
{
    munmap(shared, 4096);
}

const struct bench_transport bench_transport_limit = {
    .name = "limit",
    .summary = "floor: one cache line ping-pong through shared memory (polling)",
    .polling = true,
    .prepare = limit_prepare,
    .setup = limit_setup,
    .send_buf = limit_send_buf,
    .send_msg = limit_send,
    .recv_msg = limit_recv,
    .teardown = limit_teardown,
    .release = limit_release,
};
