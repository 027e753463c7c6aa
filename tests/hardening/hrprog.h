/*
 * hrprog.h - programs under `sovia run` for hostile_run: test_hardening_rvictim
 * (rvictim.h) started through the `sovia` launcher as sharness roles, and
 * the records they leave in SOVIA_STAT_LOG.
 */
#ifndef SOVIA_TESTS_HARDENING_HRPROG_H
#define SOVIA_TESTS_HARDENING_HRPROG_H

#include <sys/types.h>

/* Points SOVIA_STAT_LOG, for the programs started from now on, at a memfd
 * (through /proc/self/fd: no file is left behind); returns it. */
int hr_stat_log(void);
/* A role that becomes `sovia run -- rvictim MODE CHAN [A [B]]` (0: left
 * out); the launcher execs the program, so the role's pid is the
 * program's. Needs HARDENING_SOVIA_CMD and HARDENING_RVICTIM. */
int hr_start(const char *role, const char *mode, unsigned a, unsigned b, int *chan);

struct hr_stat {
    unsigned carried, fell_back, kernel, redirected;
};
/* The record pid wrote at its exit into the log; fails if none. */
struct hr_stat hr_stat_of(int log, pid_t pid);

#endif
