/* seeds_data.c - seeds of the datapath target (formats in datapath.c). */
#include <stdio.h>

#include "seeds.h"
#include "shm.h"

enum { POSTED, SLOT, SLOT_GOOD, EXPORT, SEND, RDMA, RECV, CMPL, RECV_DONE, POKE };

/* Reliability index (0 unreliable, 1 reliable delivery), arena, RDMA write
 * on the victim and announced by the peer; depths as log2. */
static void cfg(struct seed *s, unsigned rel, int arena, int rdma, unsigned vlog, unsigned plog)
{
    seed_u8(s, (uint8_t)(rel | (arena ? 8 : 0) | (rdma ? 48 : 0)));
    seed_u8(s, (uint8_t)(vlog | plog << 3));
    seed_u8(s, 15); /* 4 KiB staging */
}

static void slot_good(struct seed *s, uint16_t off, uint16_t len)
{
    seed_u8(s, SLOT_GOOD);
    seed_u16(s, off);
    seed_u16(s, len);
}

static void send(struct seed *s, uint16_t len, uint8_t nseg, uint8_t imm)
{
    seed_u8(s, SEND);
    seed_u16(s, len);
    seed_u8(s, (uint8_t)(nseg - 1));
    seed_u8(s, imm);
    seed_u32(s, 0x1234);
}

static void cmpl(struct seed *s, uint32_t status, uint32_t length, uint32_t inline_len)
{
    seed_u8(s, CMPL);
    seed_u8(s, 1); /* the next slot, right sequence number */
    seed_u8(s, 0);
    seed_u32(s, 0);
    seed_u32(s, status);
    seed_u32(s, length);
    seed_u32(s, 77);
    seed_u32(s, inline_len);
    for (int i = 0; i < SHM_INLINE_MAX; i++)
        seed_u8(s, (uint8_t)(0xa0 + i));
}

static void recv(struct seed *s, uint8_t nseg, uint8_t arena_bits, uint32_t len)
{
    seed_u8(s, RECV);
    seed_u8(s, (uint8_t)(nseg - 1));
    seed_u8(s, arena_bits);
    for (unsigned i = 0; i < nseg; i++)
        seed_u32(s, (len - 1) | (i * 4096u) << 12);
}

void seeds_datapath(void)
{
    /* Peer depth 16: its data area starts at 64 + 16 * 64. */
    const uint32_t data_off = 64 + 16 * 64;
    struct seed s = {.n = 0};
    cfg(&s, 1, 0, 0, 4, 4);
    slot_good(&s, 0, 4096);
    send(&s, 1000, 3, 0);
    slot_good(&s, 4096, 100);
    send(&s, 20, 1, 1); /* inline */
    slot_good(&s, 0, 10);
    send(&s, 11, 1, 0); /* longer than the slot: length error */
    seed_write("datapath", "send", &s);

    s.n = 0;
    cfg(&s, 0, 0, 0, 4, 4);
    send(&s, 100, 1, 0); /* no slot: dropped */
    seed_u8(&s, SLOT);
    seed_u8(&s, 0);
    seed_u32(&s, 1);
    seed_u16(&s, 2);
    seed_u16(&s, 0);
    seed_u32(&s, 300);
    seed_u32(&s, data_off);
    seed_u32(&s, 100);
    seed_u32(&s, data_off + 1000);
    seed_u32(&s, 200);
    for (int i = 2; i < SHM_POST_SEGS; i++) {
        seed_u32(&s, 0);
        seed_u32(&s, 0);
    }
    seed_u8(&s, POSTED);
    seed_u32(&s, 1);
    send(&s, 250, 2, 0);
    seed_write("datapath", "slot", &s);

    s.n = 0;
    cfg(&s, 1, 1, 1, 2, 4);
    seed_u8(&s, EXPORT);
    seed_u8(&s, 3);
    seed_u32(&s, 0x100001);
    seed_u32(&s, 8192);
    seed_u64(&s, 0x7f0000001000ull);
    seed_u32(&s, data_off + 4096);
    seed_u8(&s, RDMA);
    seed_u32(&s, 0x100001);
    seed_u64(&s, 0x7f0000001010ull);
    seed_u16(&s, 500);
    seed_u8(&s, 0);
    slot_good(&s, 0, 64);
    seed_u8(&s, RDMA);
    seed_u32(&s, 0x100001);
    seed_u64(&s, 0x7f0000001000ull);
    seed_u16(&s, 8000);
    seed_u8(&s, 1); /* with immediate data: consumes the slot */
    seed_write("datapath", "rdma", &s);

    s.n = 0;
    cfg(&s, 1, 1, 0, 3, 3);
    recv(&s, 1, 0, 100);  /* staged */
    recv(&s, 2, 3, 300);  /* in the arena */
    recv(&s, 3, 2, 40);   /* mixed: staged */
    cmpl(&s, VIP_STATUS_OP_RECEIVE | VIP_STATUS_IMMEDIATE, 20, 20);
    seed_u8(&s, RECV_DONE);
    seed_u8(&s, POKE);
    seed_u16(&s, 128); /* the second staging reservation */
    seed_u8(&s, 8);
    seed_put(&s, "stagedxx", 8);
    cmpl(&s, VIP_STATUS_OP_RECEIVE, 600, 0);
    seed_u8(&s, RECV_DONE);
    cmpl(&s, VIP_STATUS_OP_RECEIVE, 100, 0);
    seed_u8(&s, RECV_DONE);
    seed_write("datapath", "recv", &s);

    s.n = 0;
    cfg(&s, 1, 1, 1, 3, 3);
    recv(&s, 1, 1, 64);
    cmpl(&s, VIP_STATUS_OP_REMOTE_RDMA_WRITE | VIP_STATUS_IMMEDIATE, 64, 0);
    seed_u8(&s, RECV_DONE);
    recv(&s, 1, 0, 64);
    cmpl(&s, VIP_STATUS_OP_RECEIVE | VIP_STATUS_LENGTH_ERROR, 0, 0);
    seed_u8(&s, RECV_DONE);
    seed_write("datapath", "recv-rdma", &s);
}
