/*
 * make_seeds.c - writes the hand-made seed inputs of each target into
 * corpus/<target>/seed-* (well-formed scenarios the fuzzer mutates from).
 * Run once when an input format changes: make_seeds <corpus dir>. The rest
 * of the committed corpus is what libFuzzer found and merged (fuzz.sh).
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seeds.h"

static const char *top;

void seed_write(const char *target, const char *name, const struct seed *s)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", top, target);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/%s/seed-%s", top, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(s->b, 1, s->n, f) != s->n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

void seed_put(struct seed *s, const void *p, size_t n)
{
    if (s->n + n > sizeof(s->b)) {
        fprintf(stderr, "seed too long\n");
        exit(1);
    }
    memcpy(s->b + s->n, p, n);
    s->n += n;
}

void seed_u8(struct seed *s, uint8_t v)
{
    seed_put(s, &v, 1);
}

void seed_u16(struct seed *s, uint16_t v)
{
    seed_u8(s, (uint8_t)v);
    seed_u8(s, (uint8_t)(v >> 8));
}

void seed_u32(struct seed *s, uint32_t v)
{
    seed_u16(s, (uint16_t)v);
    seed_u16(s, (uint16_t)(v >> 16));
}

void seed_u64(struct seed *s, uint64_t v)
{
    seed_u32(s, (uint32_t)v);
    seed_u32(s, (uint32_t)(v >> 32));
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    top = argv[1];
    seeds_peer_map();
    seeds_handshake();
    seeds_datapath();
    seeds_sovia_packet();
    return 0;
}
