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
               "       sovia env [--profile P]   (then: eval \"$(sovia env)\")\n"
               "\n"
               "run: runs PROGRAM unmodified; its TCP connections to programs on this host\n"
               "that also run under sovia are carried by sovia, all others stay kernel TCP.\n"
               "env: prints the shell commands that put every program started from this\n"
               "shell under sovia (LD_PRELOAD and the profile), with no launcher at all.\n"
               "  latency     poll for messages (lowest latency; a core per waiting thread)\n"
               "  throughput  wide window, spin then sleep\n"
               "  balanced    spin briefly, then sleep (the default)\n"
               "SOVIA_* variables already set win over the profile (docs/SOCKETS.md).\n");
}

/* What each profile sets, unless the variable is set already. */
struct profile_var {
    const char *profile, *name, *value;
};

static const struct profile_var profile_vars[] = {
    {"latency", "SOVIA_WAIT", "poll"},
    {"throughput", "SOVIA_WAIT", "adaptive"},
    {"throughput", "SOVIA_WINDOW", "64"},
};

static bool known_profile(const char *p)
{
    return strcmp(p, "latency") == 0 || strcmp(p, "throughput") == 0 ||
           strcmp(p, "balanced") == 0;
}

/* Parses [--profile P] [--]; returns the index of the first other argument,
 * or -1 after printing usage (*status: the exit status). */
static int parse_options(int argc, char **argv, const char *cmd, const char **profile,
                         int *status)
{
    *profile = "balanced";
    int i = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return i + 1;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            *status = 0;
            return -1;
        }
        if (strcmp(argv[i], "--profile") == 0) {
            if (++i == argc) {
                *status = cli_usage_error(cmd, "--profile needs a value");
                return -1;
            }
            *profile = argv[i];
        } else if (strncmp(argv[i], "--profile=", 10) == 0) {
            *profile = argv[i] + 10;
        } else if (argv[i][0] == '-') {
            *status = cli_usage_error(cmd, "unknown option '%s'", argv[i]);
            return -1;
        } else {
            break;
        }
    }
    if (!known_profile(*profile)) {
        *status = cli_usage_error(cmd, "unknown profile '%s' (latency, throughput or balanced)",
                                  *profile);
        return -1;
    }
    return i;
}

int cli_run_environment(const char *profile, const char *cmd)
{
    for (size_t k = 0; k < sizeof profile_vars / sizeof profile_vars[0]; k++)
        if (strcmp(profile_vars[k].profile, profile) == 0)
            setenv(profile_vars[k].name, profile_vars[k].value, 0);
    char lib[PATH_MAX];
    if (cli_find_preload(lib, sizeof(lib)) != 0) {
        fprintf(stderr, "sovia %s: cannot find libsovia-preload.so (set SOVIA_PRELOAD)\n", cmd);
        return 1;
    }
    return cli_add_preload(lib) != 0;
}

int cmd_run(int argc, char **argv)
{
    const char *profile;
    int status = SOVIA_EXIT_USAGE;
    int i = parse_options(argc, argv, "run", &profile, &status);
    if (i < 0)
        return status;
    if (i >= argc) {
        usage(stderr);
        return SOVIA_EXIT_USAGE;
    }
    if (cli_run_environment(profile, "run") != 0)
        return 1;
    execvp(argv[i], argv + i);
    fprintf(stderr, "sovia run: %s: %s\n", argv[i], strerror(errno));
    return errno == ENOENT ? 127 : 126;
}

/* Prints one shell assignment, single-quoted. */
static void print_export(const char *name)
{
    const char *v = getenv(name);
    if (!v)
        return;
    printf("export %s='", name);
    for (; *v; v++)
        if (*v == '\'')
            fputs("'\\''", stdout);
        else
            putchar(*v);
    printf("'\n");
}

int cmd_env(int argc, char **argv)
{
    const char *profile;
    int status = SOVIA_EXIT_USAGE;
    int i = parse_options(argc, argv, "env", &profile, &status);
    if (i < 0)
        return status;
    if (i < argc)
        return cli_usage_error("env", "unexpected argument '%s'", argv[i]);
    if (cli_run_environment(profile, "env") != 0)
        return 1;
    print_export("LD_PRELOAD");
    print_export("ASAN_OPTIONS");
    for (size_t k = 0; k < sizeof profile_vars / sizeof profile_vars[0]; k++)
        if (strcmp(profile_vars[k].profile, profile) == 0)
            print_export(profile_vars[k].name);
    return 0;
}
