/* cli.h - what the sovia subcommands share: the command table entry and
 * argument parsing helpers. */
#ifndef SOVIA_CLI_H
#define SOVIA_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Exit code for bad usage, shared by every subcommand. */
#define SOVIA_EXIT_USAGE 2

struct sovia_command {
    const char *name;
    const char *summary;
    /* argv[0] is the subcommand's name; returns the process exit code. */
    int (*run)(int argc, char **argv);
};

int cmd_bench(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_env(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_ksock(int argc, char **argv);
int cmd_lane(int argc, char **argv);
int cmd_doctor(int argc, char **argv);

/* Byte counts: decimal digits with an optional K or M suffix (1K = 1024). */
bool cli_parse_size(const char *s, size_t *out);
bool cli_parse_u64(const char *s, uint64_t *out);
bool cli_parse_seconds(const char *s, double *out);

/* libsovia-preload.so: $SOVIA_PRELOAD, bin/../lib, or the build tree.
 * 0 and the path in `out`, or -1. */
int cli_find_preload(char *out, size_t len);
/* Puts `lib` first in LD_PRELOAD (for the programs exec'd next). */
int cli_add_preload(const char *lib);
/* What `sovia run --profile P` sets (the profile's variables unless set,
 * LD_PRELOAD), in this process's environment for the programs it execs
 * next. cmd names the subcommand in messages. 0, or 1 after a message. */
int cli_run_environment(const char *profile, const char *cmd);
/* A helper program of the tool (libexec/sovia/NAME beside an installed
 * tool, or the build tree's). 0 and the path in `out`, or -1. */
int cli_find_helper(const char *name, char *out, size_t len);
/* The whole command line (for re-executing the tool). */
extern char **cli_argv;

/* Prints "sovia <where>: <message>" on stderr and returns SOVIA_EXIT_USAGE. */
int cli_usage_error(const char *where, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif /* SOVIA_CLI_H */
