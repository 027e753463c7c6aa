/*
 * hcommon.h - helpers shared by the hardening tests: what a process holds
 * (descriptors, threads, memfds) to find leaks, files sovia-named in
 * /dev/shm and /tmp, VI addresses on loopback, and for the isolation tests
 * two users, their processes' memfds, raw abstract-socket probes and
 * `sovia stat`.
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

/* ---- Two users (the isolation tests; root only) --------------------------- */

struct hc_user {
    char name[32];
    uid_t uid;
    gid_t gid;
};

/* Creates two system users (useradd, no home) named "hrda<pid>" and
 * "hrdb<pid>". 0 on success; -1 after logging why not (not root, no
 * useradd, useradd failed): the caller skips the test. */
int hc_users_make(struct hc_user *a, struct hc_user *b);
/* Runs logic() in a forked child that must exit 0 within `seconds`
 * (killed after), then ends any process the two users still have and
 * removes them, whatever happened. 1 if logic() succeeded. */
int hc_users_run(const struct hc_user *a, const struct hc_user *b, void (*logic)(void),
                 unsigned seconds);
/* In a forked role: become the user for good (and stay inspectable and
 * killable as an ordinary process of that user is). */
void hc_become(const struct hc_user *u);

/* Fails unless every memfd process pid has open or mapped has mode 0600
 * (no group or other bits); returns how many it checked. */
int hc_check_memfd_modes(pid_t pid);
/* The descriptor numbers of pid's memfds (at most max). */
int hc_memfd_fds(pid_t pid, int *out, int max);

/* Run by another user: pid's memfds (their numbers read before, as root,
 * with hc_memfd_fds), /proc/<pid>/maps, mem, map_files/ and fd/ cannot be
 * opened (EACCES); fails otherwise. */
void hc_check_proc_closed(pid_t pid, const int *memfds, int n);

/* Binds the abstract Unix SOCK_SEQPACKET name of len bytes (squatting it)
 * and listens; the socket. */
int hc_abstract_listen(const void *name, size_t len);
/* A connect to the abstract Unix name of len bytes (SOCK_SEQPACKET or
 * SOCK_STREAM); -1 with errno. */
int hc_abstract_connect(const void *name, size_t len, int type);
/* Waits for what the other side of s sends: end of file or a reset is
 * the expected answer; a byte or a descriptor, or nothing within 3 s, fails. */
void hc_expect_dropped(int s, const char *what);
/* Sends on s a well-formed shm REQUEST carrying four sealed memfds of our own. */
void hc_send_request(int s);
/* The same, asking to be woken as enum shm_wake_mode says (SOCKET: the
 * fourth descriptor is a datagram socket of ours). */
void hc_send_request_waking(int s, unsigned wake_mode);

/* Runs argv (execvp) with its standard output into out (at most cap - 1
 * bytes, NUL-terminated); its wait status (127 exit: it did not start). */
int hc_capture(char *const argv[], char *out, size_t cap);

/* `sovia stat --json` run by the current user: its output (in a static
 * buffer), or NULL if it did not run or failed (e.g. the user may not
 * execute sovia_cmd). */
const char *hc_sovia_stat(const char *sovia_cmd);
/* Whether that output lists a connection of process pid. */
int hc_stat_lists_pid(const char *out, pid_t pid);

/* ---- Programs the test users can run -------------------------------------------- */

#define HC_COPY_MAX 4
struct hc_copy {
    char dir[32];                  /* "/tmp/isorun-XXXXXX"; "" when there is none */
    char path[HC_COPY_MAX][4096];  /* the copy of each file given, same base name */
};

/* A build tree may lie under a directory other users cannot traverse (a
 * CI clone under /root), and the test users must run its programs: copies
 * the n files (executables or libraries) into a fresh directory
 * /tmp/isorun-XXXXXX (mode 0755, root's, so they cannot change it; a name
 * the /tmp checks do not count), each under its base name, with every
 * shared library they load (ldd) that is not the system's or that others
 * cannot reach, under its soname. The programs run from there need
 * LD_LIBRARY_PATH=c->dir: the loader skips a RUNPATH it cannot search.
 * 0 on success; -1 after logging why, with nothing left behind. */
int hc_copy_make(struct hc_copy *c, const char *const *files, int n);
/* Removes the directory and all in it (nothing if there is none). */
void hc_copy_remove(struct hc_copy *c);

#endif
