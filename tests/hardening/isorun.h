/*
 * isorun.h - what isolation_run and cross_users share: plain-libc programs
 * (this executable in its `--prog` mode) started as a test user, or as
 * root, through the `sovia run` launcher, each with its own
 * SOVIA_STAT_LOG; the two users; and the setup that lets them run copies
 * of the programs (hcommon.h, hc_copy_make).
 *
 * Programs (iso_start):
 *   server PORT      echoes every connection on 127.0.0.1:PORT (0: the
 *                    kernel picks; the port comes back on the channel)
 *                    until 'Q', then answers how many it accepted;
 *   held PORT        the same, but accepts one connection per 'A' only;
 *   prefork UID      run as root: listens (port back on the channel), forks
 *                    a worker that becomes UID (its gid: UID's primary) and
 *                    echoes as `server` does; 'Q' ends both, then the
 *                    worker's accepted count and its pid come back;
 *   client PORT LP   connects from 127.0.0.1:LP (0: any) and echoes (see
 *                    iso_check_prompt), then 'E' echoes again, 'Q' ends.
 */
#ifndef SOVIA_TESTS_HARDENING_ISORUN_H
#define SOVIA_TESTS_HARDENING_ISORUN_H

#include <stdint.h>
#include <sys/types.h>

#include "hcommon.h"

#define ISO_PROMPT_MS 500.0 /* a connect or first echo that waited for the 1 s pairing timeout */

extern struct hc_user iso_a, iso_b; /* the test's two users */
extern const char *iso_sovia_cmd;   /* the copy the users run */

/* main() of a test: dispatches `--prog`, else makes the copies and the
 * users, runs logic() (as root, in a child) and removes everything. */
int iso_main(int argc, char **argv, const char *name, void (*logic)(void));

/* The user's SOVIA_STAT_LOG: a memfd it owns, mode 0600. */
int iso_user_log(const struct hc_user *u);
/* Starts `sovia run -- self --prog MODE ...` as u (NULL: root); its id. */
int iso_start(const char *role, const struct hc_user *u, int log, const char *mode,
              uint64_t arg1, uint64_t arg2, int *chan);
/* A client's connect() and first-echo times, checked against ISO_PROMPT_MS. */
void iso_check_prompt(int chan, const char *who);
/* Ends a program: 'Q', then its exit (and so its stat record). */
void iso_quit(int id, int chan);
/* Ends a server: 'Q', its accepted count (and, for prefork, the worker's
 * pid in *worker), its exit. */
uint64_t iso_stop_server(int id, int chan, pid_t *worker);
/* A port of 127.0.0.1 below the ephemeral range, free now. */
uint16_t iso_unused_port(void);
/* The abstract name of uid's shadow listener for a TCP port
 * ("sovia-vipl.<uid>.sovia" + the port, network order), with `extra`
 * bytes after it; its length. */
size_t iso_shadow_name(char *name, size_t cap, uid_t uid, uint16_t port, const void *extra,
                       size_t extra_len);
/* Neither user owns an entry of dir. */
void iso_check_not_owned(const char *dir);

#endif
