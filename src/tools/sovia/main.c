/*
 * main.c - the sovia tool: `sovia <command> [args]`. Each command lives in
 * its own cmd_*.c; adding one is a line in the table below.
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

char **cli_argv;


static const struct sovia_command commands[] = {
    {"bench", "measure latency and bandwidth: vipl against the floor, sockets and UCX",
     cmd_bench},
    {"run", "run an unmodified program with its TCP connections carried by sovia", cmd_run},
    {"env", "print the shell settings that run every program under sovia", cmd_env},
    {"stat", "list your live sovia connections (like ss)", cmd_stat},
    {"ksock", "run a program with KSOVIA: BPF carries its loopback TCP past TCP/IP", cmd_ksock},
    {"lane", "IP over VI: kernel TCP/IP between two network namespaces over a VI", cmd_lane},
    {"report", "run the papers' experiments; write REPORT.md, plots, results.json", cmd_report},
    {"doctor", "check this machine: what sovia will do here and why", cmd_doctor},
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: sovia <command> [options]\n"
               "\n"
               "sovia is the command-line tool of the sovia user-level sockets layer.\n"
               "\n"
               "commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n"
               "Run 'sovia <command> --help' for a command's options.\n"
               "Options: -h, --help  this text;  --version  print the version.\n");
}

int main(int argc, char **argv)
{
    cli_argv = argv;
    if (argc < 2) {
        usage(stderr);
        return SOVIA_EXIT_USAGE;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("sovia %s\n", SOVIA_VERSION);
        return 0;
    }
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    if (argv[1][0] == '-')
        fprintf(stderr, "sovia: unknown option '%s'\n", argv[1]);
    else
        fprintf(stderr, "sovia: unknown command '%s'\n", argv[1]);
    fprintf(stderr, "Run 'sovia --help' for the list of commands.\n");
    return SOVIA_EXIT_USAGE;
}
