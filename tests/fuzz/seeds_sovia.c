/* seeds_sovia.c - seeds of the sovia_packet target (format in sovia_packet.c). */
#include <stdio.h>

#include "seeds.h"

enum { RAW, GOOD, RECV, SEND, SHUTDOWN };
enum { DATA = 1, ACK, WAKEUP, FIN, FINACK };

static int client; /* the mode byte of every seed */

static void first(struct seed *s, uint32_t imm)
{
    seed_u8(s, (uint8_t)client);
    seed_u32(s, imm);
    seed_u16(s, 0);
}

static void op16(struct seed *s, uint8_t op, uint16_t n, uint8_t flags)
{
    seed_u8(s, op);
    seed_u16(s, n);
    if (op == RECV)
        seed_u8(s, flags);
}

static void good(struct seed *s, uint8_t type_index, uint16_t len)
{
    seed_u8(s, GOOD);
    seed_u8(s, type_index); /* 0 DATA, 1 ACK, 2 FIN, 3 FINACK */
    seed_u16(s, (uint16_t)(len - 1));
}

static void raw(struct seed *s, uint32_t imm, uint16_t len)
{
    seed_u8(s, RAW);
    seed_u32(s, imm);
    seed_u16(s, len);
}

static void name(char *buf, size_t len, const char *what)
{
    snprintf(buf, len, "%s-%s", client ? "client" : "server", what);
}

static void seeds_mode(void)
{
    const uint32_t wakeup = WAKEUP | 4u << 8 | 2u << 20;
    char n[64];
    struct seed s = {.n = 0};
    first(&s, wakeup);
    good(&s, 0, 100);
    op16(&s, RECV, 49, 0);
    op16(&s, RECV, 99, 1); /* peek */
    op16(&s, RECV, 99, 0);
    op16(&s, SEND, 4999, 0);
    good(&s, 1, 1);
    good(&s, 0, 4096);
    op16(&s, SEND, 99, 0);
    op16(&s, RECV, 8000, 2);
    good(&s, 2, 1);
    op16(&s, RECV, 10, 0);
    seed_u8(&s, SHUTDOWN);
    good(&s, 3, 1);
    name(n, sizeof(n), "stream");
    seed_write("sovia_packet", n, &s);

    /* Both roles: a client must fail too (once a hang, fuzz-found). */
    s.n = 0;
    first(&s, DATA);
    name(n, sizeof(n), "no-wakeup");
    seed_write("sovia_packet", n, &s);

    s.n = 0;
    first(&s, WAKEUP | 2000u << 8 | 1u << 20);
    name(n, sizeof(n), "big-window");
    seed_write("sovia_packet", n, &s);

    s.n = 0;
    first(&s, wakeup);
    raw(&s, DATA | 100u << 8, 10); /* acknowledges what was never sent */
    op16(&s, RECV, 10, 0);
    op16(&s, SEND, 10, 0);
    name(n, sizeof(n), "bad-acks");
    seed_write("sovia_packet", n, &s);

    s.n = 0;
    first(&s, wakeup);
    raw(&s, wakeup, 0);
    op16(&s, RECV, 10, 0);
    name(n, sizeof(n), "second-wakeup");
    seed_write("sovia_packet", n, &s);

    s.n = 0;
    first(&s, wakeup);
    raw(&s, DATA, 0); /* empty DATA */
    raw(&s, 7, 0);    /* unknown type */
    op16(&s, RECV, 10, 0);
    name(n, sizeof(n), "bad-type");
    seed_write("sovia_packet", n, &s);

    s.n = 0;
    first(&s, wakeup);
    for (int i = 0; i < 6; i++)
        good(&s, 0, 1000); /* more than the window */
    op16(&s, RECV, 8191, 2);
    name(n, sizeof(n), "overrun");
    seed_write("sovia_packet", n, &s);
}

void seeds_sovia_packet(void)
{
    for (client = 0; client < 2; client++)
        seeds_mode();
}
