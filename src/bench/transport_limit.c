/*
 * transport_limit.c - the floor: two processes hand cache lines back and
 * forth through a shared page, with nothing else on the path. Every other
 * transport is compared with this.
 *
 * `limit`: each process writes only its own line (its message, and how many
 * of the other's it has consumed); the other polls it. That is the least
 * any transport with a queue per direction (a VI, a TCP socket pair, UCX's
 * shared-memory transports) must move: one line per message.
 * `limit-shared`: both directions live in one line. A reply then rides on
 * the line that just brought the request, which this hardware moves about
 * twice as fast as two lines (measured on this machine: 0.06-0.10 us
 * against 0.13-0.15 us one way); no queue pair can do that, so it is
 * reported beside `limit`, not used as the floor (README, Transports).
 *
 * --size is accepted but only the line moves (LINE_PAYLOAD bytes per
 * direction, enough for the protocol's commands and flags).
 */
#include "bench_internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define LINE_PAYLOAD 24

/*
 * Per direction d: the producer bumps sent (release) after writing data;
 * the consumer bumps rcvd (release) once it has copied it out. The
 * producer may write again once rcvd caught up.
 *
 * The consumer publishes rcvd lazily, together with its next send or
 * before its next receive: a store right after the read would pull a line
 * away from the spinning peer and back again, tripling the cost of a
 * ping-pong, while a reply's stores go to the line in one go.
 */
struct limit_own_line { /* `limit`: line p is written by process p only */
    _Atomic uint32_t sent; /* of the direction p produces */
    _Atomic uint32_t rcvd; /* of the direction p consumes */
    unsigned char data[LINE_PAYLOAD];
    unsigned char pad[64 - 8 - LINE_PAYLOAD];
} __attribute__((aligned(64)));

struct limit_shared_line { /* `limit-shared`: everything in one line */
    _Atomic uint32_t sent[2];
    _Atomic uint32_t rcvd[2];
    unsigned char data[2][LINE_PAYLOAD];
} __attribute__((aligned(64)));

_Static_assert(sizeof(struct limit_own_line) == 64, "one cache line");
_Static_assert(sizeof(struct limit_shared_line) == 64, "one cache line");

/* This process's view, whichever the layout. */
struct limit_ep {
    _Atomic uint32_t *out_sent, *out_rcvd; /* the direction we produce */
    _Atomic uint32_t *in_sent, *in_rcvd;   /* the direction we consume */
    unsigned char *out_data, *in_data;
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

static void view_own_lines(struct limit_ep *ep, struct limit_own_line *l, int me)
{
    ep->out_sent = &l[me].sent;
    ep->out_data = l[me].data;
    ep->in_rcvd = &l[me].rcvd;
    ep->in_sent = &l[1 - me].sent;
    ep->in_data = l[1 - me].data;
    ep->out_rcvd = &l[1 - me].rcvd;
}

static void view_shared_line(struct limit_ep *ep, struct limit_shared_line *l, int out)
{
    ep->out_sent = &l->sent[out];
    ep->out_rcvd = &l->rcvd[out];
    ep->out_data = l->data[out];
    ep->in_sent = &l->sent[1 - out];
    ep->in_rcvd = &l->rcvd[1 - out];
    ep->in_data = l->data[1 - out];
}

static int setup(void *shared, enum bench_role role, size_t max_msg, bool one_line, void **out)
{
    struct limit_ep *ep = calloc(1, sizeof *ep);
    int me = role == BENCH_DRIVER ? 0 : 1;

    if (!ep)
        return -1;
    if (one_line)
        view_shared_line(ep, shared, me);
    else
        view_own_lines(ep, shared, me);
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

static int limit_setup(void *shared, enum bench_role role, size_t max_msg, void **out)
{
    return setup(shared, role, max_msg, false, out);
}

static int limit_shared_setup(void *shared, enum bench_role role, size_t max_msg, void **out)
{
    return setup(shared, role, max_msg, true, out);
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
        atomic_store_explicit(ep->in_rcvd, ep->rcvd, memory_order_release);
        ep->ack_pending = false;
    }
}

static int limit_send(void *p, size_t len)
{
    struct limit_ep *ep = p;
    unsigned spins = 0;

    publish_ack(ep);
    while (atomic_load_explicit(ep->out_rcvd, memory_order_acquire) != ep->sent)
        if (++spins == SPIN_CHECK) {
            spins = 0;
            if (!bench_peer_alive())
                return peer_gone();
        }
    (void)len;
    /* A constant length compiles to a few moves; a variable one calls
     * memcpy, which measurably slows this floor. Buffers hold >= a line. */
    memcpy(ep->out_data, ep->sbuf, LINE_PAYLOAD);
    atomic_store_explicit(ep->out_sent, ++ep->sent, memory_order_release);
    return 0;
}

static int limit_recv(void *p, size_t len, const void **data)
{
    struct limit_ep *ep = p;
    unsigned spins = 0;

    publish_ack(ep);
    while (atomic_load_explicit(ep->in_sent, memory_order_acquire) == ep->rcvd)
        if (++spins == SPIN_CHECK) {
            spins = 0;
            if (!bench_peer_alive())
                return peer_gone();
        }
    (void)len;
    memcpy(ep->rbuf, ep->in_data, LINE_PAYLOAD);
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
    .summary = "floor: one cache line per message, a line per direction (polling)",
    .polling = true,
    .prepare = limit_prepare,
    .setup = limit_setup,
    .send_buf = limit_send_buf,
    .send_msg = limit_send,
    .recv_msg = limit_recv,
    .teardown = limit_teardown,
    .release = limit_release,
};

const struct bench_transport bench_transport_limit_shared = {
    .name = "limit-shared",
    .summary = "one cache line carrying both directions (polling; below any queue pair)",
    .polling = true,
    .prepare = limit_prepare,
    .setup = limit_shared_setup,
    .send_buf = limit_send_buf,
    .send_msg = limit_send,
    .recv_msg = limit_recv,
    .teardown = limit_teardown,
    .release = limit_release,
};
