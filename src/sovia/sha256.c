/*
 * sha256.c - SHA-256 and HMAC-SHA256 (sha256.h), from FIPS 180-4 sections
 * 4.1.2, 4.2.2, 5.1.1, 6.2 and RFC 2104.
 */
#include <string.h>

#include "sha256.h"

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t ror(uint32_t x, unsigned n)
{
    return x >> n | x << (32 - n);
}

static void block(uint32_t h[8], const uint8_t *p)
{
    uint32_t w[64];
    for (int t = 0; t < 16; t++)
        w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 |
               (uint32_t)p[4 * t + 2] << 8 | p[4 * t + 3];
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = ror(w[t - 15], 7) ^ ror(w[t - 15], 18) ^ w[t - 15] >> 3;
        uint32_t s1 = ror(w[t - 2], 17) ^ ror(w[t - 2], 19) ^ w[t - 2] >> 10;
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int t = 0; t < 64; t++) {
        uint32_t t1 = k + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t];
        uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += k;
}

void sov_sha256_init(struct sov_sha256 *c)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, iv, sizeof(iv));
    c->bytes = 0;
    c->buf_len = 0;
}

void sov_sha256_update(struct sov_sha256 *c, const void *data, size_t len)
{
    if (!len) /* data may be NULL then (memcpy's arguments may not) */
        return;
    const uint8_t *p = data;
    c->bytes += len;
    if (c->buf_len) {
        size_t n = SOV_SHA256_BLOCK - c->buf_len;
        if (n > len)
            n = len;
        memcpy(c->buf + c->buf_len, p, n);
        c->buf_len += n;
        p += n;
        len -= n;
        if (c->buf_len < SOV_SHA256_BLOCK)
            return;
        block(c->h, c->buf);
        c->buf_len = 0;
    }
    for (; len >= SOV_SHA256_BLOCK; p += SOV_SHA256_BLOCK, len -= SOV_SHA256_BLOCK)
        block(c->h, p);
    memcpy(c->buf, p, len);
    c->buf_len = len;
}

void sov_sha256_final(struct sov_sha256 *c, uint8_t out[SOV_SHA256_LEN])
{
    uint64_t bits = c->bytes * 8;
    /* 0x80, zeros up to 56 mod 64, then the length in bits, big-endian. */
    uint8_t pad[SOV_SHA256_BLOCK + 8] = {0x80};
    size_t n = (c->buf_len < 56 ? 56 : 120) - c->buf_len;
    for (int i = 0; i < 8; i++)
        pad[n + i] = (uint8_t)(bits >> (56 - 8 * i));
    sov_sha256_update(c, pad, n + 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(c->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)c->h[i];
    }
    memset(c, 0, sizeof(*c)); /* no key-derived state left behind */
}

void sov_hmac_sha256(const void *key, size_t key_len, const struct sov_part *parts, size_t n,
                     uint8_t out[SOV_SHA256_LEN])
{
    uint8_t k[SOV_SHA256_BLOCK] = {0}, pad[SOV_SHA256_BLOCK], inner[SOV_SHA256_LEN];
    struct sov_sha256 c;
    if (key_len > SOV_SHA256_BLOCK) {
        sov_sha256_init(&c);
        sov_sha256_update(&c, key, key_len);
        sov_sha256_final(&c, k);
    } else if (key_len) {
        memcpy(k, key, key_len);
    }
    for (int i = 0; i < SOV_SHA256_BLOCK; i++)
        pad[i] = k[i] ^ 0x36;
    sov_sha256_init(&c);
    sov_sha256_update(&c, pad, sizeof(pad));
    for (size_t i = 0; i < n; i++)
        sov_sha256_update(&c, parts[i].p, parts[i].len);
    sov_sha256_final(&c, inner);
    for (int i = 0; i < SOV_SHA256_BLOCK; i++)
        pad[i] = k[i] ^ 0x5c;
    sov_sha256_init(&c);
    sov_sha256_update(&c, pad, sizeof(pad));
    sov_sha256_update(&c, inner, sizeof(inner));
    sov_sha256_final(&c, out);
    /* The key's traces (the compiler may drop a plain memset of dead
     * memory; the barrier says the memory is still looked at). */
    memset(k, 0, sizeof(k));
    memset(pad, 0, sizeof(pad));
    memset(inner, 0, sizeof(inner));
    __asm__ __volatile__("" : : "r"(k), "r"(pad), "r"(inner) : "memory");
}
