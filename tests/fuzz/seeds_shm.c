/* seeds_shm.c - seeds of the connection-time targets (peer_map, handshake). */
#include <stddef.h>
#include <stdio.h>

#include "peer_input.h"
#include "seeds.h"

#define PAGE 4096u
#define SEALS_RW 0x07u  /* SEAL | SHRINK | GROW */
#define SEALS_RO 0x17u  /* and FUTURE_WRITE */

static void fd_spec(struct seed *s, enum fz_fd_kind kind, uint32_t len, uint8_t seals,
                    const void *init, size_t init_len, size_t room)
{
    uint8_t buf[PEER_INIT_CTL] = {0};
    memcpy(buf, init, init_len);
    seed_u8(s, (uint8_t)kind);
    seed_u32(s, len);
    seed_u8(s, seals);
    seed_put(s, buf, room);
}

/* The geometry shm_vi_segments_create gives a VI of this depth and a
 * 64 KiB staging area, 64 KiB arena. */
void seed_peer(struct seed *s, uint32_t depth, int wake_sock, uint16_t type)
{
    uint32_t ctl_len = (uint32_t)shm_ctl_size(depth, SHM_REG_SLOTS, PAGE);
    uint32_t head = (uint32_t)(sizeof(struct shm_rx) + depth * sizeof(struct shm_cmpl));
    uint32_t staging_off = (head + SHM_LINE - 1) & ~(SHM_LINE - 1);
    uint32_t arena_off = (staging_off + 65536 + PAGE - 1) & ~(PAGE - 1);
    uint32_t rx_len = arena_off + 65536;
    struct shm_msg m = {
        .magic = SHM_MAGIC,
        .version = SHM_VERSION,
        .type = type,
        .reliability = VIP_SERVICE_RELIABLE_DELIVERY,
        .max_transfer = 32768,
        .wake_sock = (uint32_t)wake_sock,
        .host_len = 4,
        .disc_len = 5,
        .addr = {127, 0, 0, 1, 's', 'e', 'e', 'd', '1'},
    };
    if (!wake_sock) {
        m.armed_off = (uint32_t)offsetof(struct shm_ctl, live.recv_armed);
        m.word_off = (uint32_t)offsetof(struct shm_rx, live.wake_seq);
    }
    seed_put(s, &m, sizeof(m));
    uint8_t ctl[PEER_INIT_CTL] = {0};
    struct shm_ctl_header *h = (struct shm_ctl_header *)ctl;
    *h = (struct shm_ctl_header){
        .magic = SHM_MAGIC,
        .version = SHM_VERSION,
        .depth = depth,
        .reg_slots = SHM_REG_SLOTS,
        .rx_size = rx_len,
        .data_off = staging_off,
        .staging_off = staging_off,
        .staging_len = 65536,
        .arena_off = arena_off,
        .arena_len = 65536,
        .max_transfer = 32768,
    };
    fd_spec(s, FZ_FD_MEMFD, ctl_len, SEALS_RO, ctl, sizeof(ctl), PEER_INIT_CTL);
    fd_spec(s, FZ_FD_MEMFD, rx_len, SEALS_RW, NULL, 0, PEER_INIT_OTHER);
    if (wake_sock) {
        fd_spec(s, FZ_FD_MEMFD, PAGE, SEALS_RO, NULL, 0, PEER_INIT_OTHER);
        fd_spec(s, FZ_FD_DGRAM, 0, 0, NULL, 0, PEER_INIT_OTHER);
    } else {
        fd_spec(s, FZ_FD_MEMFD, ctl_len, SEALS_RO, ctl, sizeof(ctl), PEER_INIT_OTHER);
        fd_spec(s, FZ_FD_MEMFD, rx_len, SEALS_RW, NULL, 0, PEER_INIT_OTHER);
    }
}

void seeds_peer_map(void)
{
    static const uint32_t depths[] = {1, 16, 256, 4096};
    for (int w = 0; w < 2; w++)
        for (unsigned i = 0; i < sizeof(depths) / sizeof(depths[0]); i++) {
            struct seed s = {.n = 0};
            char name[32];
            seed_peer(&s, depths[i], w, SHM_MSG_REQUEST);
            snprintf(name, sizeof(name), "depth%u%s", depths[i], w ? "-sock" : "");
            seed_write("peer_map", name, &s);
        }
}

/* mode, victim reliability (index 1: reliable delivery, as the peer's),
 * whole message, four descriptors, then the peer. */
void seeds_handshake(void)
{
    for (int mode = 0; mode < 2; mode++)
        for (int w = 0; w < 2; w++) {
            struct seed s = {.n = 0};
            char name[32];
            seed_u8(&s, (uint8_t)mode);
            seed_u8(&s, 1);
            seed_u8(&s, 0);
            seed_u8(&s, 4);
            seed_peer(&s, 16, w, mode ? SHM_MSG_ACCEPT : SHM_MSG_REQUEST);
            snprintf(name, sizeof(name), "%s%s", mode ? "client" : "server", w ? "-sock" : "");
            seed_write("handshake", name, &s);
        }
}
