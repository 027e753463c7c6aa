/*
 * many.c - many carried connections between two processes under a soft
 * RLIMIT_NOFILE (issue 21): the client opens the case's connections in
 * batches, each verified by an exchange, and both sides check that every
 * one was carried (the exit records) and count the descriptors sovia holds
 * for them beyond the program's own socket.
 *
 *   - held_under_limit: 2,000 under a soft limit of 16,384. sovia keeps a
 *     connection on kernel TCP once it would leave less than a quarter of
 *     the limit free (VipxFdRoom), so this carries them all only if sovia
 *     spends few descriptors per connection; it checks at most 3 (the memfd
 *     of its segments, the peer's, the connection socket; the client's
 *     close-on-exec sockets keep 1) and a constant per process. Before, each end's ctl and rx were two memfds, and each
 *     connection held its own pidfd of the peer process and its own copies
 *     of the peer's CQ armed page and wake-up socket: 6.7 per connection,
 *     and about 1,700 of the 2,000 were carried.
 *   - no_fds_per_conn (known bug, issue 21 item 1): 500 connections may
 *     cost the process at most its 500 sockets and 16 descriptors of
 *     sovia's, whatever the count.
 *   - low_limit (known bug, issue 21 item 1): under a soft limit of 256 a
 *     program holds 200 connections over kernel TCP; under sovia run it
 *     must hold as many, every one carried. Today sovia carries a few
 *     dozen (1 to 3 descriptors each, and a quarter of the limit kept
 *     free), the rest go to kernel TCP, and the descriptors run out
 *     before 200.
 * (The server accepts without SOCK_CLOEXEC: its sockets could go to a next
 * image, so its VIs keep both memfds; the client's are close-on-exec.)
 * The limit is never raised above the hard one: where the hard limit is
 * lower the case is skipped, with the reason.
 */
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pharness.h"

#define BATCH 50
#define SOVIA_PER_PROCESS 32
#define OWN_FDS_BUG                                                                   \
    "issue 21 item 1: sovia holds descriptors of its own per carried connection (the "  \
    "connection socket; for a socket that survives exec, its segments' memfd and the "  \
    "peer's too)"

/* The running case: inherited by both roles. */
static struct {
    int nconn;
    rlim_t soft_limit;
    int per_conn;    /* sovia's descriptors per connection, beyond the program's socket */
    int per_process; /* and per process */
} cfg;

static void lower_limit(void)
{
    struct rlimit rl;
    SYS(getrlimit(RLIMIT_NOFILE, &rl));
    rl.rlim_cur = cfg.soft_limit;
    SYS(setrlimit(RLIMIT_NOFILE, &rl));
}

/* What sovia holds beyond the program's sockets, against the bound. */
static void check_held(const char *who, const struct p_held *before)
{
    struct p_held now = p_held_now();
    int extra = now.fds - before->fds - cfg.nconn;
    int most = cfg.per_conn * cfg.nconn + cfg.per_process;
    p_log("%s: %d descriptors for %d connections: %.2f of sovia's per connection, "
          "%d memfd mappings",
          who, now.fds - before->fds, cfg.nconn, (double)extra / cfg.nconn,
          now.maps - before->maps);
    if (extra > most)
        FAILF("%s: sovia holds %d descriptors for %d connections (at most %d)", who, extra,
              cfg.nconn, most);
}

static void server(struct p_role *r)
{
    int *fds = calloc((size_t)cfg.nconn, sizeof(int));
    CHECK(fds != NULL);
    lower_limit();
    struct p_held before = p_held_now();
    for (int i = 0; i < cfg.nconn; i++) {
        fds[i] = (int)SYS(accept(r->lfd, NULL, NULL));
        if (i % BATCH == BATCH - 1 || i == cfg.nconn - 1)
            p_barrier(r);
    }
    /* One request on each, in the client's order, echoed. */
    for (int i = 0; i < cfg.nconn; i++) {
        char b[16];
        p_read_all(fds[i], b, sizeof b);
        p_write_all(fds[i], b, sizeof b);
    }
    p_barrier(r); /* every answer read */
    check_held("server", &before);
    p_barrier(r);
    for (int i = 0; i < cfg.nconn; i++) {
        char c;
        CHECK_EQ(read(fds[i], &c, 1), 0);
        SYS(close(fds[i]));
    }
    free(fds);
}

static void client(struct p_role *r)
{
    int *fds = calloc((size_t)cfg.nconn, sizeof(int));
    CHECK(fds != NULL);
    lower_limit();
    struct p_held before = p_held_now();
    /* In batches: the listener's backlog is 64. */
    for (int i = 0; i < cfg.nconn; i++) {
        fds[i] = p_connect(r->port);
        if (i % BATCH == BATCH - 1 || i == cfg.nconn - 1)
            p_barrier(r);
    }
    for (int i = 0; i < cfg.nconn; i++)
        p_exchange(fds[i], 16, (uint64_t)i);
    p_barrier(r);
    check_held("client", &before);
    p_barrier(r);
    for (int i = 0; i < cfg.nconn; i++)
        SYS(close(fds[i]));
    free(fds);
}

/* The case with these figures, every connection carried. */
static void run(const char *name, int nconn, rlim_t soft_limit, int per_conn, int per_process,
                const char *bug)
{
    struct rlimit rl;
    char why[96];

    if (!p_selected(name))
        return;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_max < soft_limit) {
        snprintf(why, sizeof why, "the hard RLIMIT_NOFILE is below %llu",
                 (unsigned long long)soft_limit);
        p_case_skip(name, why);
        return;
    }
    cfg.nconn = nconn;
    cfg.soft_limit = soft_limit;
    cfg.per_conn = per_conn;
    cfg.per_process = per_process;
    p_expect_carried((unsigned)nconn);
    if (bug)
        p_case_known_bug(name, server, client, P_CARRIED, bug);
    else
        p_case(name, server, client, P_CARRIED);
}

int main(void)
{
    /* A batch of connections waits for the server's accepts, which take
     * over the default 1 s to answer under ThreadSanitizer on a busy
     * machine: a client whose pairing times out stays on kernel TCP by
     * design (preload/fallback), which is not what this case measures.
     * Read at the first connection, in both roles. */
    setenv("SOVIA_PAIR_TIMEOUT_MS", "30000", 0);
    p_init("many");
    run("held_under_limit", 2000, 16384, 3, SOVIA_PER_PROCESS, NULL);
    run("no_fds_per_conn", 500, 16384, 0, 16, OWN_FDS_BUG);
    run("low_limit", 200, 256, 0, 16, OWN_FDS_BUG);
    return p_done();
}
