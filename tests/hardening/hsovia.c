/* hsovia.c - see hsovia.h. */
#include "hsovia.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

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
    memset(s, 0, sizeof *s);
    struct hp_opts o = {.mtu = HS_MTU, .nbufs = HS_NBUFS, .bufsz = HS_MTU};
    hp_open(&s->h, &o);
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
