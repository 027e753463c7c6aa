/* cli.c - what the subcommands share: argument parsing, finding the preload. */
#include "cli.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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

#define PRELOAD_NAME "libsovia-preload.so"

/* Where the preload library is: $SOVIA_PRELOAD, beside an installed tool
 * (bin/../lib), or in the build tree this tool came from. */
int cli_find_preload(char *out, size_t len)
{
    const char *env = getenv("SOVIA_PRELOAD");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return access(out, R_OK) == 0 ? 0 : -1;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *dir = dirname(exe);
        snprintf(out, len, "%s/%s/%s", dir, SOVIA_BIN_TO_LIB, PRELOAD_NAME);
        if (access(out, R_OK) == 0)
            return 0;
    }
    snprintf(out, len, "%s/%s", SOVIA_BUILD_PRELOAD_DIR, PRELOAD_NAME);
    return access(out, R_OK) == 0 ? 0 : -1;
}

int cli_add_preload(const char *lib)
{
    const char *old = getenv("LD_PRELOAD");
    const char *runtime = SOVIA_SANITIZER_RUNTIME; /* "" unless a sanitizer build */
    char *value = NULL;
    if (*runtime) /* programs are not instrumented: their leaks are not ours */
        setenv("ASAN_OPTIONS", "detect_leaks=0", 0);
    const char *sep = *runtime ? ":" : "", *rest = old && *old ? ":" : "";
    int n = SOVIA_SANITIZER_RUNTIME_LAST /* ThreadSanitizer: after the preload */
                ? asprintf(&value, "%s%s%s%s%s", lib, sep, runtime, rest, old ? old : "")
                : asprintf(&value, "%s%s%s%s%s", runtime, sep, lib, rest, old ? old : "");
    if (n < 0)
        return -1;
    setenv("LD_PRELOAD", value, 1);
    free(value);
    return 0;
}

int cli_find_helper(const char *name, char *out, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        snprintf(out, len, "%s/%s/%s", dirname(exe), SOVIA_BIN_TO_LIBEXEC, name);
        if (access(out, X_OK) == 0)
            return 0;
    }
    snprintf(out, len, "%s/%s", SOVIA_BUILD_LIBEXEC_DIR, name);
    return access(out, X_OK) == 0 ? 0 : -1;
}
