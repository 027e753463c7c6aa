/*
 * cmd_run.c - `sovia run [--profile P] [--] PROGRAM ARGS...`: runs an
 * unmodified program with libsovia-preload.so in LD_PRELOAD, so its TCP
 * connections to sovia peers on this host are carried by sovia.
 */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: sovia run [--profile latency|throughput|balanced] [--] PROGRAM [ARGS...]\n"
               "\n"
               "Runs PROGRAM unmodified; its TCP connections to programs on this host that\n"
               "also run under sovia are carried by sovia, all others stay kernel TCP.\n"
               "  latency     poll for messages (lowest latency; a core per waiting thread)\n"
               "  throughput  combine small writes, wide window, spin then sleep\n"
               "  balanced    spin briefly, then sleep (the default)\n"
               "SOVIA_* variables already set win over the profile (docs/SOCKETS.md).\n");
}

static void set_default(const char *name, const char *value)
{
    setenv(name, value, 0);
}

int cmd_run(int argc, char **argv)
{
    const char *profile = "balanced";
    int i = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--profile") == 0) {
            if (++i == argc)
                return cli_usage_error("run", "--profile needs a value");
            profile = argv[i];
            continue;
        }
        if (strncmp(argv[i], "--profile=", 10) == 0) {
            profile = argv[i] + 10;
            continue;
        }
        if (argv[i][0] == '-')
            return cli_usage_error("run", "unknown option '%s'", argv[i]);
        break;
    }
    if (i >= argc) {
        usage(stderr);
        return SOVIA_EXIT_USAGE;
    }
    if (strcmp(profile, "latency") == 0) {
        set_default("SOVIA_WAIT", "poll");
        set_default("SOVIA_COMBINE", "0");
    } else if (strcmp(profile, "throughput") == 0) {
        set_default("SOVIA_WAIT", "adaptive");
        set_default("SOVIA_WINDOW", "64");
    } else if (strcmp(profile, "balanced") != 0) {
        return cli_usage_error("run", "unknown profile '%s' (latency, throughput or balanced)",
                               profile);
    }
    char lib[PATH_MAX];
    if (cli_find_preload(lib, sizeof(lib)) != 0) {
        fprintf(stderr, "sovia run: cannot find libsovia-preload.so (set SOVIA_PRELOAD)\n");
        return 1;
    }
    if (cli_add_preload(lib) != 0)
        return 1;
    execvp(argv[i], argv + i);
    fprintf(stderr, "sovia run: %s: %s\n", argv[i], strerror(errno));
    return errno == ENOENT ? 127 : 126;
}
