/*
 * hcommon.h - helpers shared by the hardening tests: what a process holds
 * (descriptors, threads, memfds) to find leaks, files sovia-named in
 * /dev/shm and /tmp, and VI addresses on loopback.
 */
#ifndef SOVIA_TESTS_HARDENING_HCOMMON_H
#define SOVIA_TESTS_HARDENING_HCOMMON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <vipl.h>

/* ---- Known bugs -------------------------------------------------------------- */

/* A case that exposes a bug not fixed yet is skipped with the bug's text
 * unless HARDENING_TEST_KNOWN_BUGS=1 (then it runs and must pass). Returns
 * 1 to run the case. */
int hc_known_bug(const char *bug);
/* Whether HARDENING_TEST_KNOWN_BUGS=1. */
int hc_known_bugs_on(void);
/* s_case(name), and not a known bug that is skipped: 1 to run the case. */
int hc_run_case(const char *name, const char *bug);
/* Rounds of a random mode: HARDENING_ROUNDS, else `fallback`. */
unsigned hc_rounds(unsigned fallback);

/* ---- A deterministic generator (the random modes print their seed) ------ */

uint64_t hc_seed(const char *env_name, uint64_t fallback);
uint32_t hc_rand32(uint64_t *st);
uint32_t hc_below(uint64_t *st, uint32_t n); /* uniform in [0, n) */

/* ---- Resources of a process ---------------------------------------------- */

struct hc_counts {
    int fds;     /* entries of /proc/<pid>/fd */
    int memfds;  /* of which "/memfd:..." */
    int threads; /* entries of /proc/<pid>/task */
    int maps;    /* memfd mappings in /proc/<pid>/maps */
};

struct hc_counts hc_counts_of(pid_t pid);
struct hc_counts hc_counts_now(void);
/* Re-reads this process's counts until they equal *base or ms pass
 * (teardown may finish on background threads); returns the last. */
struct hc_counts hc_counts_settle(const struct hc_counts *base, unsigned ms);
/* Counts once they stood still for 100 ms (at most ms): a connection
 * closed just before may still be going down on the service thread. */
struct hc_counts hc_counts_stable(unsigned ms);
/* Fails with both sets of numbers unless equal. */
void hc_counts_check(const struct hc_counts *base, const struct hc_counts *now, const char *what);

/* ---- Files named like sovia's ------------------------------------------------ */

#define HC_MAX_NAMES 256
struct hc_names {
    int n;
    char name[HC_MAX_NAMES][256];
};

/* Entries of dir whose name contains "sovia" or "vipl" (any case). */
void hc_list_ours(const char *dir, struct hc_names *out);
/* Fails if dir holds such an entry that `before` did not. */
void hc_check_no_new(const char *dir, const struct hc_names *before);

/* ---- VI addresses -------------------------------------------------------------- */

/* 127.0.0.1 + the discriminator (malloc'd; free() it). */
VIP_NET_ADDRESS *hc_addr_bytes(const void *disc, unsigned len);
VIP_NET_ADDRESS *hc_addr(const char *disc);
/* Room for any peer address. */
VIP_NET_ADDRESS *hc_addr_room(void);
/* "<prefix>-<round>" */
void hc_round_disc(char *buf, size_t len, const char *prefix, unsigned round);

#endif
