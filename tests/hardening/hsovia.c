/* hsovia.c - see hsovia.h. */
#include "hsovia.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hcommon.h"
#include "sovia/sharness.h"

static VIP_NET_ADDRESS *port_addr(uint16_t port)
{
    uint8_t disc[7] = {'s', 'o', 'v', 'i', 'a'};
    uint16_t p = htons(port);
    memcpy(disc + 5, &p, 2);
    return hc_addr_bytes(disc, sizeof disc);
}

VIP_RETURN hs_connect(struct hs *s, uint16_t local_port, uint16_t port)
{
    return hs_connect_with(s, local_port, port, -1);
}

VIP_RETURN hs_connect_with(struct hs *s, uint16_t local_port, uint16_t port, int token)
{
    return hs_connect_to(s, local_port, port, token, (uid_t)-1);
}

VIP_RETURN hs_connect_to(struct hs *s, uint16_t local_port, uint16_t port, int token, uid_t uid)
{
    memset(s, 0, sizeof *s);
    struct hp_opts o = {.mtu = HS_MTU, .nbufs = HS_NBUFS, .bufsz = HS_MTU};
    hp_open(&s->h, &o);
    CHECK(VipxViSetConnectToken(s->h.vi, token) == VIP_SUCCESS);
    CHECK(VipxViSetConnectUser(s->h.vi, uid) == VIP_SUCCESS);
    s->rx_cap = 1 << 20;
    s->rx = malloc(s->rx_cap);
    CHECK(s->rx != NULL);
    VIP_NET_ADDRESS *la = port_addr(local_port), *ra = port_addr(port);
    VIP_RETURN r = hp_connect(&s->h, la, ra, 5000);
    free(la);
    free(ra);
    return r;
}

void hs_close(struct hs *s)
{
    hp_close(&s->h);
    free(s->rx);
    s->rx = NULL;
}

uint32_t hs_raw(struct hs *s, uint32_t imm, const void *data, uint32_t len)
{
    uint32_t st = hp_send(&s->h, data, len, true, imm);
    if (st & VIP_STATUS_ERROR_MASK)
        s->broken = true;
    return st;
}

uint32_t hs_wakeup(struct hs *s)
{
    return hs_raw(s, HS_WAKEUP_IMM(HS_WINDOW, HS_NBUFS - HS_WINDOW - 2), NULL, 0);
}

/* One completed receive within ms: 1 handled, 0 nothing, -1 broken. */
static int take_one(struct hs *s, unsigned ms, uint32_t *imm_out)
{
    VIP_DESCRIPTOR *d = hp_recv(&s->h, ms);
    if (!d)
        return hp_state(&s->h) == VIP_STATE_CONNECTED ? 0 : -1;
    if (d->CS.Status & VIP_STATUS_ERROR_MASK) {
        s->broken = true;
        return -1;
    }
    unsigned i = hp_rindex(&s->h, d);
    uint32_t imm = d->CS.ImmediateData, len = d->CS.Length;
    *imm_out = imm;
    unsigned type = imm & 7, acks = (imm >> 8) & 0xffff;
    if (type == HS_WAKEUP) {
        s->peer_window = (imm >> 8) & 0xfff;
        unsigned slots = (imm >> 20) & 0xfff;
        s->credits = s->peer_window;
        s->ack_every = slots ? (HS_WINDOW + slots - 1) / slots : HS_WINDOW;
        hp_post_recv(&s->h, i);
        return 1;
    }
    s->credits += acks;
    if (type == HS_DATA) {
        if (s->rx_len + len <= s->rx_cap) {
            memcpy(s->rx + s->rx_len, hp_rbuf(&s->h, i), len);
            s->rx_len += len;
        }
        hp_post_recv(&s->h, i);
        if (++s->to_ack >= s->ack_every)
            hs_raw(s, HS_IMM(HS_ACK, s->to_ack), NULL, 0), s->to_ack = 0;
        return 1;
    }
    hp_post_recv(&s->h, i);
    if (type == HS_FIN) {
        s->peer_fin = true;
        hs_raw(s, HS_IMM(HS_FINACK, s->to_ack), NULL, 0);
        s->to_ack = 0;
    } else if (type == HS_FINACK) {
        s->fin_acked = true;
    }
    return 1;
}

int hs_await_wakeup(struct hs *s, unsigned ms)
{
    double end = s_now_ms() + ms;
    while (!s->peer_window && s_now_ms() < end) {
        uint32_t imm;
        if (take_one(s, 20, &imm) < 0)
            return 0;
    }
    return s->peer_window != 0;
}

int hs_pump(struct hs *s, unsigned ms)
{
    int n = 0;
    double end = s_now_ms() + ms;
    do {
        uint32_t imm;
        int r = take_one(s, 5, &imm);
        if (r < 0)
            break;
        n += r;
    } while (s_now_ms() < end);
    return n;
}

int hs_collect(struct hs *s, size_t n, unsigned ms)
{
    double end = s_now_ms() + ms;
    while (s->rx_len < n && s_now_ms() < end) {
        uint32_t imm;
        if (take_one(s, 10, &imm) < 0)
            break;
    }
    return s->rx_len >= n;
}

int hs_data(struct hs *s, const void *data, uint32_t len, unsigned ms)
{
    double end = s_now_ms() + ms;
    while (s->credits == 0 && s_now_ms() < end) {
        uint32_t imm;
        if (take_one(s, 5, &imm) < 0)
            return 0;
    }
    if (s->credits == 0)
        return 0;
    uint32_t st = hs_raw(s, HS_IMM(HS_DATA, s->to_ack), data, len);
    if (st & VIP_STATUS_ERROR_MASK)
        return 0;
    s->to_ack = 0;
    s->credits--;
    return 1;
}

bool hs_wait_broken(struct hs *s, unsigned ms)
{
    double end = s_now_ms() + ms;
    while (hp_state(&s->h) == VIP_STATE_CONNECTED && s_now_ms() < end) {
        uint32_t imm;
        take_one(s, 5, &imm); /* keep reposting: the victim's reset arrives as a notice */
    }
    return hp_state(&s->h) != VIP_STATE_CONNECTED;
}

/* ---- Moves ------------------------------------------------------------------------------ */

int hs_echo(struct hs *s, uint64_t seed, uint64_t *sent, uint64_t *echoed, size_t n, bool must)
{
    static uint8_t buf[HS_MTU];
    size_t start = s->rx_len;
    for (size_t done = 0; done < n;) {
        uint32_t k = (uint32_t)(n - done < HS_MTU ? n - done : HS_MTU);
        s_pattern_fill(buf, k, seed, *sent);
        if (!hs_data(s, buf, k, 2000)) {
            CHECK_MSG(!must, "honest DATA could not be sent (credits %u)", s->credits);
            return 0;
        }
        *sent += k;
        done += k;
        hs_pump(s, 0);
    }
    int all = hs_collect(s, start + n, 3000);
    size_t got = s->rx_len - start;
    long bad = s_pattern_check(s->rx + start, got, seed, *echoed);
    CHECK_MSG((all && bad < 0) || !must, "the echo: %zu of %zu bytes back, first wrong at %ld",
              got, n, bad);
    if (bad < 0)
        *echoed += got;
    return all && bad < 0;
}

void hs_random_packet(struct hs *s, uint64_t *rng, char *what, size_t what_len)
{
    static uint8_t buf[HS_MTU];
    uint32_t imm = hc_below(rng, 3)
                       ? HS_IMM(hc_below(rng, 8), hp_interesting(rng, 1) & 0xffff)
                       : hc_rand32(rng);
    uint32_t len = hc_below(rng, 2) ? 0 : 1 + hc_below(rng, HS_MTU);
    memset(buf, (int)(imm & 0xff), len);
    hs_raw(s, imm, buf, len);
    snprintf(what, what_len, "packet imm %#x len %u", imm, len);
}

static void *storm_thread(void *arg)
{
    struct hs_storm *st = arg;
    struct shm_peer *p = hp_peer(st->h);
    hp_foreign_begin();
    while (!atomic_load(&st->stop)) {
        switch (st->kind) {
        case HS_STORM_WAKE:
            hp_ring(st->h);
            break;
        case HS_STORM_ARENA: {
            uint32_t off = p->data_off + hc_below(&st->rng, p->rx_size - p->data_off);
            ((volatile uint8_t *)p->rx)[off] = (uint8_t)hc_rand32(&st->rng);
            break;
        }
        case HS_STORM_CTL:
            ((volatile uint8_t *)st->ctl)[hc_below(&st->rng, (uint32_t)st->ctl_len)] =
                (uint8_t)hc_rand32(&st->rng);
            break;
        case HS_STORM_ARMED:
            atomic_store(st->armed, st->value);
            break;
        }
        atomic_fetch_add(&st->writes, 1);
        if ((hc_rand32(&st->rng) & 63) == 0)
            usleep(50);
    }
    hp_foreign_end();
    return NULL;
}

int hs_storm_start(struct hs_storm *st, struct hp *h, enum hs_storm_kind kind, uint32_t value,
                   uint64_t seed)
{
    memset(st, 0, sizeof *st);
    st->h = h;
    st->kind = kind;
    st->value = value;
    st->rng = seed;
    if (kind == HS_STORM_CTL && !(st->ctl = hp_victim_ctl_writable(h, &st->ctl_len)))
        return -errno;
    if (kind == HS_STORM_ARMED && !(st->armed = hp_victim_armed_writable(h)))
        return -errno;
    CHECK(pthread_create(&st->thread, NULL, storm_thread, st) == 0);
    st->running = true;
    return 0;
}

unsigned long hs_storm_stop(struct hs_storm *st)
{
    if (st->running) {
        atomic_store(&st->stop, true);
        CHECK(pthread_join(st->thread, NULL) == 0);
        st->running = false;
    }
    return atomic_load(&st->writes);
}
