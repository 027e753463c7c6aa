/* strarg_data.c - the test pattern and checksum (see strarg_data.h). */
#include "strarg_data.h"

void strarg_pattern(char *buf, size_t len, unsigned round)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (char)('!' + (31 * i + 7 * len + 13 * (size_t)round) % 94);
    buf[len] = '\0';
}

uint32_t strarg_fnv1a(const char *s, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}
