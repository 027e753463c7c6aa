/*
 * sha256.h - SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the
 * cluster key's proofs (xauth.c). Written here: sovia links no crypto
 * library, and needs only these two.
 */
#ifndef SOVIA_SHA256_H
#define SOVIA_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SOV_SHA256_LEN 32
#define SOV_SHA256_BLOCK 64

struct sov_sha256 {
    uint32_t h[8];
    uint64_t bytes; /* hashed so far */
    uint8_t buf[SOV_SHA256_BLOCK];
    size_t buf_len;
};

void sov_sha256_init(struct sov_sha256 *c);
void sov_sha256_update(struct sov_sha256 *c, const void *data, size_t len);
void sov_sha256_final(struct sov_sha256 *c, uint8_t out[SOV_SHA256_LEN]);

/* HMAC-SHA256 over the concatenation of `n` parts (a key longer than a
 * block is hashed first, as RFC 2104 says). */
struct sov_part {
    const void *p;
    size_t len;
};
void sov_hmac_sha256(const void *key, size_t key_len, const struct sov_part *parts, size_t n,
                     uint8_t out[SOV_SHA256_LEN]);

#endif
