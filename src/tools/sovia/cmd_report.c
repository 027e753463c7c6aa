/*
 * cmd_report.c - `sovia report`: runs the papers' experiments and writes
 * REPORT.md, plots and results.json. That work is orchestration and
 * plotting, done by a Python package (src/tools/report, installed as
 * share/sovia/report); this command finds the package and execs python3
 * on it, telling it which sovia binary to measure.
 */
#include "cli.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What makes a directory the package: python3 DIR runs this file. */
#define REPORT_ENTRY "__main__.py"

static int is_package(const char *dir)
{
    char entry[PATH_MAX];

    if ((size_t)snprintf(entry, sizeof entry, "%s/%s", dir, REPORT_ENTRY) >= sizeof entry)
        return 0;
    return access(entry, R_OK) == 0;
}

/* The package: $SOVIA_REPORT_DIR, beside an installed tool
 * (bin/../share/sovia/report), or the source tree this tool was built from. */
static int find_package(const char *exe, char *out, size_t len)
{
    const char *env = getenv("SOVIA_REPORT_DIR");

    if (env && *env) {
        snprintf(out, len, "%s", env);
        return is_package(out) ? 0 : -1;
    }
    if (*exe) {
        char copy[PATH_MAX];
        snprintf(copy, sizeof copy, "%s", exe);
        snprintf(out, len, "%s/%s/sovia/report", dirname(copy), SOVIA_BIN_TO_DATA);
        if (is_package(out))
            return 0;
    }
    snprintf(out, len, "%s", SOVIA_REPORT_SRC_DIR);
    return is_package(out) ? 0 : -1;
}

int cmd_report(int argc, char **argv)
{
    char exe[PATH_MAX] = "", pkg[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *python = getenv("SOVIA_PYTHON");
    char **args;

    exe[n > 0 ? n : 0] = '\0';
    if (find_package(exe, pkg, sizeof pkg) != 0) {
        fprintf(stderr, "sovia report: cannot find the report package (%s); "
                        "set SOVIA_REPORT_DIR\n", pkg);
        return 1;
    }
    /* The report measures this very binary, wherever PATH points. */
    if (*exe)
        setenv("SOVIA_REPORT_SOVIA", exe, 1);
    if (!python || !*python)
        python = "python3";
    args = calloc((size_t)argc + 2, sizeof *args);
    if (!args) {
        perror("sovia report");
        return 1;
    }
    args[0] = (char *)python;
    args[1] = pkg;
    for (int i = 1; i < argc; i++)
        args[i + 1] = argv[i];
    execvp(python, args);
    fprintf(stderr, "sovia report: cannot run %s: %s (set SOVIA_PYTHON)\n", python,
            strerror(errno));
    free(args);
    return 1;
}
