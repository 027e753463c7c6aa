/* seeds.h - building seed inputs (make_seeds.c and seeds_<target>.c). */
#ifndef SOVIA_TESTS_FUZZ_SEEDS_H
#define SOVIA_TESTS_FUZZ_SEEDS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct seed {
    uint8_t b[16384];
    size_t n;
};

void seed_put(struct seed *s, const void *p, size_t n);
void seed_u8(struct seed *s, uint8_t v);
void seed_u16(struct seed *s, uint16_t v);
void seed_u32(struct seed *s, uint32_t v);
void seed_u64(struct seed *s, uint64_t v);
void seed_write(const char *target, const char *name, const struct seed *s);

void seeds_peer_map(void);
void seeds_handshake(void);
void seeds_datapath(void);
void seeds_sovia_packet(void);

#endif
