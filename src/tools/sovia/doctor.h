/* doctor.h - `sovia doctor`'s checks (doctor_checks.c) and their results. */
#ifndef SOVIA_DOCTOR_H
#define SOVIA_DOCTOR_H

#include <stdbool.h>
#include <stddef.h>

/* OFF: an optional feature (sovia lane, ksock, fabric) is unavailable;
 * not a warning. The exit status: 2 with a FAIL, 1 with a WARN, else 0. */
enum doctor_status { DOC_OK, DOC_OFF, DOC_WARN, DOC_FAIL };

struct doctor_check {
    char name[24];
    enum doctor_status status;
    char value[160];
    char reason[400];
};

struct doctor {
    struct doctor_check c[64];
    size_t n;
};

/* Adds a result; the formats are snprintf's (value, then reason). */
void doctor_add(struct doctor *d, const char *name, enum doctor_status s, const char *value,
                const char *reason_fmt, ...) __attribute__((format(printf, 5, 6)));

void doctor_kernel(struct doctor *d);      /* memfd seals, pidfd, SCM_RIGHTS, Yama, TUN, BPF */
void doctor_limits(struct doctor *d);      /* RLIMIT_NOFILE, vm.max_map_count, memlock, cores */
void doctor_providers(struct doctor *d);   /* shm, fabric and libfabric's providers */
void doctor_environment(struct doctor *d); /* preload, SOVIA_* variables, cluster key */
void doctor_leftovers(struct doctor *d);   /* what crashed processes may have left */

#endif /* SOVIA_DOCTOR_H */
