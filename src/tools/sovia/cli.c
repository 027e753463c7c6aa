/* cli.c - argument parsing helpers shared by the subcommands. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

bool cli_parse_u64(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;

    if (!s || *s < '0' || *s > '9') /* strtoull would accept "-1" and " 1" */
        return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

bool cli_parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v, mul = 1;

    if (!s || *s < '0' || *s > '9')
        return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno)
        return false;
    if (*end == 'K' || *end == 'k')
        mul = 1024;
    else if (*end == 'M' || *end == 'm')
        mul = 1024 * 1024;
    if (mul != 1)
        end++;
    if (*end || v > SIZE_MAX / mul)
        return false;
    *out = (size_t)(v * mul);
    return true;
}

bool cli_parse_seconds(const char *s, double *out)
{
    char *end;
    double v;

    if (!s || !*s)
        return false;
    errno = 0;
    v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v <= 0)
        return false;
    *out = v;
    return true;
}

int cli_usage_error(const char *where, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "sovia %s: ", where);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    return SOVIA_EXIT_USAGE;
}
