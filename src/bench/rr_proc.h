/*
 * rr_proc.h - the bench's side of its worker processes (rr_proc.c), shared
 * by `sovia bench rr` (rr_run.c) and `conns`/`connrate` (conn_run.c).
 */
#ifndef SOVIA_RR_PROC_H
#define SOVIA_RR_PROC_H

#include <stdbool.h>
#include <sys/types.h>

struct rr_proc {
    pid_t pid;
    int ctl, res; /* our ends: its fd 0 and fd 1 */
};

/* Starts a worker whose fd 0 reads pr->ctl and fd 1 writes pr->res: argv
 * exec'd from `worker`, or forked(ctx, pr) run in the forked child (its
 * result is the exit status). The worker dies with this process. 0 or -1. */
int rr_proc_spawn(struct rr_proc *pr, const char *worker, char **argv,
                  int (*forked)(void *ctx, const struct rr_proc *self), void *ctx);
/* Reads exactly len bytes (or a line, if line: its '\n' becomes '\0')
 * before the deadline (bench_now() seconds); -1 with errno (EPIPE: exited). */
ssize_t rr_read_by(int fd, void *buf, size_t len, bool line, double deadline);
/* "sovia bench MODE: WHO I: WHAT: errno" on stderr; returns -1. */
int rr_report_error(const char *mode, const char *who, int i, const char *what);
/* Closes the pipes and waits for the worker (killed at once unless ok);
 * -1 if it exited with a nonzero status. */
int rr_proc_reap(struct rr_proc *pr, const char *mode, const char *who, int i, bool ok);
int rr_count_cpus(void);     /* CPUs this process may run on */
double rr_children_cpu_s(void); /* user + system of the reaped children */

#endif /* SOVIA_RR_PROC_H */
