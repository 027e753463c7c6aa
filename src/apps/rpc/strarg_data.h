/*
 * strarg_data.h - what the RPC client sends and the server checks: a
 * printable test pattern (an XDR string cannot hold NUL bytes) and the
 * 32-bit FNV-1a checksum STRARG_SUM returns. The integration test computes
 * both again in Python, so a change here must be made there too
 * (tests/apps/test_rpc.py).
 */
#ifndef STRARG_DATA_H
#define STRARG_DATA_H

#include <stddef.h>
#include <stdint.h>

/* Fills buf[0..len) with the pattern of (len, round) and writes a NUL at
 * buf[len]: byte i is '!' + (31 i + 7 len + 13 round) mod 94. */
void strarg_pattern(char *buf, size_t len, unsigned round);

/* FNV-1a, 32 bits, over len bytes. */
uint32_t strarg_fnv1a(const char *s, size_t len);

#endif
