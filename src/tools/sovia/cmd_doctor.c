/*
 * cmd_doctor.c - `sovia doctor [--json]`: checks this machine and says,
 * check by check, what sovia will do here and why (doctor_system.c,
 * doctor_setup.c). Exit status: 0 all good, 1 works with warnings, 2 will
 * not carry (a usage error is 2 as well, said on stderr).
 */
#include "cli.h"
#include "doctor.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const status_name[] = {"ok", "off", "warn", "fail"};

static void usage(FILE *f)
{
    fprintf(f, "usage: sovia doctor [--json]\n"
               "\n"
               "Checks this machine and prints what sovia will do here and why, a line per\n"
               "check: the kernel features it uses (sealed memfds, pidfd, SCM_RIGHTS, Yama's\n"
               "ptrace_scope, TUN and BPF for lane and ksock), limits (open files,\n"
               "vm.max_map_count, memlock), cores against load, the providers (shm; fabric\n"
               "and libfabric's providers, loaded in a child), the preload, the\n"
               "configuration and SOVIA_* variables in force, the cluster key, and what\n"
               "crashed processes left. The first line sums it up.\n"
               "  --json  one JSON object: status, summary, and checks (name, status,\n"
               "          value, reason each)\n"
               "Exit status: 0 all good, 1 works with warnings, 2 will not carry.\n"
               "A check is ok, off (an optional feature unavailable), warn or fail.\n");
}

void doctor_add(struct doctor *d, const char *name, enum doctor_status s, const char *value,
                const char *reason_fmt, ...)
{
    if (d->n == sizeof d->c / sizeof d->c[0])
        return;
    struct doctor_check *c = &d->c[d->n++];
    snprintf(c->name, sizeof c->name, "%s", name);
    snprintf(c->value, sizeof c->value, "%s", value);
    c->status = s;
    va_list ap;
    va_start(ap, reason_fmt);
    vsnprintf(c->reason, sizeof c->reason, reason_fmt, ap);
    va_end(ap);
}

static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

int cmd_doctor(int argc, char **argv)
{
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--json") == 0)
            json = true;
        else
            return cli_usage_error("doctor", "unknown argument '%s'", argv[i]);
    }
    static struct doctor d;
    doctor_kernel(&d);
    doctor_limits(&d);
    doctor_providers(&d);
    doctor_environment(&d);
    doctor_leftovers(&d);

    size_t count[4] = {0};
    enum doctor_status worst = DOC_OK;
    for (size_t i = 0; i < d.n; i++) {
        count[d.c[i].status]++;
        if (d.c[i].status > worst)
            worst = d.c[i].status;
    }
    int rc = worst == DOC_FAIL ? 2 : worst == DOC_WARN ? 1 : 0;
    char summary[200];
    snprintf(summary, sizeof summary, "%s: %zu checks, %zu failed, %zu warnings, %zu off",
             rc == 2   ? "sovia will not carry connections here"
             : rc == 1 ? "sovia works here, with warnings"
                       : "sovia works here",
             d.n, count[DOC_FAIL], count[DOC_WARN], count[DOC_OFF]);
    if (json) {
        printf("{\"status\": %d, \"summary\": ", rc);
        json_string(summary);
        printf(", \"checks\": [");
        for (size_t i = 0; i < d.n; i++) {
            printf("%s\n  {\"name\": ", i ? "," : "");
            json_string(d.c[i].name);
            printf(", \"status\": \"%s\", \"value\": ", status_name[d.c[i].status]);
            json_string(d.c[i].value);
            printf(", \"reason\": ");
            json_string(d.c[i].reason);
            putchar('}');
        }
        printf("\n]}\n");
        return rc;
    }
    printf("sovia doctor: %s\n", summary);
    for (size_t i = 0; i < d.n; i++)
        printf("%-4s  %-14s %s\n      %s\n", status_name[d.c[i].status], d.c[i].name,
               d.c[i].value, d.c[i].reason);
    return rc;
}
