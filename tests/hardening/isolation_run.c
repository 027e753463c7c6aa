/*
 * isolation_run: isolation_users under `sovia run`. Another user's
 * programs neither reach nor read a user's programs that run under the
 * preload, except through the connections they make to them, which sovia
 * carries as it does the user's own (docs/SECURITY.md, "Another user";
 * cross_users tests those connections; statsrv.c for `sovia stat`).
 *
 * The test creates two system users A and B (useradd; skipped, exit 77,
 * when not root or without useradd) and removes them afterwards. They run
 * copies of this executable, the sovia tool, its preload and the build's
 * libraries in a temporary directory (isorun.h). The programs are plain
 * libc calls, started as A or B through `sovia run`, each with its own
 * user's SOVIA_STAT_LOG.
 *   - A's echo server on 127.0.0.1; A's client and B's client connect and
 *     echo byte-exactly, both carried by sovia, without waiting for
 *     anything like the 1 s pairing timeout (< 500 ms each).
 *   - As B (a raw process, not preloaded): A's programs' statistics
 *     sockets: closed without a byte; `sovia stat` lists neither A's
 *     programs nor A's port (run by A, it lists both, with the port);
 *     /proc/<A>/fd/<memfd>, maps, mem, map_files, fd: EACCES. Afterwards
 *     A's carried connection still echoes.
 *   - Squatting: B binds the shadow-listener name of a port before A's
 *     server listens there. A's server still serves (kernel TCP); A's
 *     client to it is not delayed (< 500 ms), echoes byte-exactly and is not
 *     carried; the dials that reach B's name (A's client's, and the one
 *     A's server's accept() makes to have the port's shadow listener let
 *     go of the client's VI) bring no byte and no descriptor (above all
 *     not a kernel socket, which a genuine shadow listener receives as the
 *     connection's token).
 *   - squat_full: the same, but B keeps its squatting socket's backlog full
 *     (connections of its own it never accepts): A's client does not wait
 *     for room there either (< 500 ms; it waited the 1 s request timeout).
 * Also: every memfd A's programs have open or mapped has mode 0600, no
 * entry of /tmp or /dev/shm belongs to A or B afterwards, and none named
 * like sovia's appeared.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hrprog.h"
#include "isorun.h"
#include "sovia/sharness.h"

#define ua iso_a
#define ub iso_b

/* ---- B's probes --------------------------------------------------------------------------- */

struct b_args {
    uint16_t port; /* A's server's */
    pid_t pid[2];  /* A's server and client */
    int memfds[2][32];
    int n_memfds[2];
};

/* Whether `sovia stat --json` output shows a connection with an end at port. */
static int shows_port(const char *out, uint16_t port)
{
    char key[16];
    snprintf(key, sizeof key, ":%u\"", (unsigned)port);
    return strstr(out, key) != NULL;
}

static void b_probe(int chan, void *arg)
{
    (void)chan;
    const struct b_args *ba = arg;
    hc_become(&ub);
    char name[96];
    int s;
    for (int i = 0; i < 2; i++) {
        snprintf(name, sizeof name, "sovia-stat.%u.%d", (unsigned)ua.uid, (int)ba->pid[i]);
        s = hc_abstract_connect(name, strlen(name), SOCK_STREAM);
        CHECK_MSG(s >= 0, "the statistics socket of A's program %d is not up (%s)",
                  (int)ba->pid[i], s_errname(errno));
        hc_expect_dropped(s, "B asking the statistics socket of A's program");
        close(s);
    }
    const char *out = hc_sovia_stat(iso_sovia_cmd);
    CHECK_MSG(out != NULL, "`sovia stat` failed for B");
    for (int i = 0; i < 2; i++)
        CHECK_MSG(!hc_stat_lists_pid(out, ba->pid[i]), "`sovia stat` run by B lists A's "
                  "program %d:\n%s", (int)ba->pid[i], out);
    /* (B's own client's connection to A's port is B's to see.) */

    for (int i = 0; i < 2; i++)
        hc_check_proc_closed(ba->pid[i], ba->memfds[i], ba->n_memfds[i]);
}

/* `sovia stat` run by A lists both of A's programs and their port (the
 * control: what B must not see is there to see). */
static void a_stat(int chan, void *arg)
{
    (void)chan;
    const struct b_args *ba = arg;
    hc_become(&ua);
    const char *out = hc_sovia_stat(iso_sovia_cmd);
    CHECK_MSG(out != NULL, "`sovia stat` failed for A");
    for (int i = 0; i < 2; i++)
        CHECK_MSG(hc_stat_lists_pid(out, ba->pid[i]), "`sovia stat` run by A does not list "
                  "A's program %d:\n%s", (int)ba->pid[i], out);
    CHECK_MSG(shows_port(out, ba->port), "`sovia stat` run by A does not show the connection "
              "to port %u:\n%s", (unsigned)ba->port, out);
}

struct squat {
    uint16_t port;
    bool full; /* keep the squatting socket's backlog full */
};

/* Fills the backlog of the listening socket `name` with connections of
 * our own, never accepted; how many (in mine). */
static int fill_backlog(const char *name, size_t len, int *mine, int max)
{
    int n = 0;
    for (; n < max; n++) {
        int c = SYS(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        struct sockaddr_un sun = {.sun_family = AF_UNIX};
        memcpy(sun.sun_path + 1, name, len);
        if (connect(c, (struct sockaddr *)&sun,
                    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len)) != 0) {
            CHECK_MSG(errno == EAGAIN, "filling the backlog: %s", s_errname(errno));
            close(c);
            return n;
        }
        mine[n] = c;
    }
    FAILF("the squatting socket's backlog never filled");
}

/* B squats the shadow-listener name of A's port, then takes every
 * connection that reaches it: none may bring a byte or a descriptor.
 * Answers how many came from A's client (its pid comes with 'd') and how
 * many from elsewhere (A's server, whose accept() asks the port's shadow
 * listener to let go of the client's VI). With `full`, its backlog is kept
 * full (connections of B's own) until then. */
static void b_squat(int chan, void *arg)
{
    const struct squat *sq_args = arg;
    hc_become(&ub);
    char name[96];
    size_t len = iso_shadow_name(name, sizeof name, ua.uid, sq_args->port, NULL, 0);
    int sq = hc_abstract_listen(name, len);
    int mine[16], nmine = sq_args->full ? fill_backlog(name, len, mine, 16) : 0;
    s_tok(chan, 's');
    s_want(chan, 'd'); /* A's server listened there and A's client connected */
    pid_t client = (pid_t)s_get_u64(chan);
    for (int i = 0; i < nmine; i++)
        close(mine[i]);
    SYS(fcntl(sq, F_SETFL, O_NONBLOCK));
    uint64_t n[2] = {0, 0};
    int got;
    while ((got = accept4(sq, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        struct ucred cr;
        socklen_t cl = sizeof cr;
        SYS(getsockopt(got, SOL_SOCKET, SO_PEERCRED, &cr, &cl));
        if (cr.pid != getpid()) {
            hc_expect_dropped(got, "a dial of A's reaching B's squatted shadow name");
            n[cr.pid != client]++;
        }
        close(got);
    }
    CHECK_MSG(errno == EAGAIN, "accept: %s", s_errname(errno));
    close(sq);
    s_put(chan, n, sizeof n);
}

/* ---- The test (as root) ---------------------------------------------------------------------- */

/* A's server, A's client and B's client (both carried); B's probes. */
static void main_case(int log_a, int log_b)
{
    int sc, ac, bc;
    int sid = iso_start("a-server", &ua, log_a, "server", 0, 0, &sc);
    uint16_t port = (uint16_t)s_get_u64(sc);
    int aid = iso_start("a-client", &ua, log_a, "client", port, 0, &ac);
    iso_check_prompt(ac, "A's client");
    int bid = iso_start("b-client", &ub, log_b, "client", port, 0, &bc);
    iso_check_prompt(bc, "B's client");

    struct b_args ba = {.port = port, .pid = {s_pid(sid), s_pid(aid)}};
    int modes = 0;
    for (int i = 0; i < 2; i++) {
        ba.n_memfds[i] = hc_memfd_fds(ba.pid[i], ba.memfds[i], 32);
        modes += hc_check_memfd_modes(ba.pid[i]);
    }
    s_log("A's server (port %u) and client hold %d and %d memfds; %d memfd files checked for "
          "mode 0600", (unsigned)port, ba.n_memfds[0], ba.n_memfds[1], modes);
    CHECK_MSG(ba.n_memfds[0] > 0 && ba.n_memfds[1] > 0, "A's programs hold no memfd: not carried?");
    s_reap(s_spawn("b-probe", b_probe, &ba, NULL));
    s_reap(s_spawn("a-stat", a_stat, &ba, NULL));
    s_tok(ac, 'E');
    s_log("A's carried connection after B's probes: echo in %.1f ms", s_get_f64(ac));

    pid_t a_pid = s_pid(aid), b_pid = s_pid(bid), srv_pid = s_pid(sid);
    iso_quit(aid, ac);
    iso_quit(bid, bc);
    uint64_t accepted = iso_stop_server(sid, sc, NULL);
    CHECK_MSG(accepted == 2, "A's server accepted %llu connections, not 2",
              (unsigned long long)accepted);
    struct hr_stat sa = hr_stat_of(log_a, a_pid), sb = hr_stat_of(log_b, b_pid),
                   ss = hr_stat_of(log_a, srv_pid);
    s_log("records: A's client carried %u fell back %u kernel %u; B's client %u %u %u; A's "
          "server %u %u %u", sa.carried, sa.fell_back, sa.kernel, sb.carried, sb.fell_back,
          sb.kernel, ss.carried, ss.fell_back, ss.kernel);
    CHECK_MSG(sa.carried == 1, "A's own client was not carried (the control)");
    CHECK_MSG(sb.carried == 1 && sb.fell_back == 0 && sb.kernel == 0,
              "B's client to A's server: carried %u, fell back %u, kernel %u (want 1, 0, 0)",
              sb.carried, sb.fell_back, sb.kernel);
    CHECK_MSG(ss.carried == 2 && ss.fell_back == 0 && ss.kernel == 0,
              "A's server: carried %u, fell back %u, kernel %u (want 2: A's and B's, 0, 0)",
              ss.carried, ss.fell_back, ss.kernel);
}

/* B squats the shadow name of a port; A's server and client there. With
 * `full`, B's squatting socket has no room: A's client does not wait for
 * any (it never reaches B). */
static void squat_case(int log_a, bool full)
{
    struct squat sq = {iso_unused_port(), full};
    uint16_t port = sq.port;
    int bq;
    int qid = s_spawn("b-squat", b_squat, &sq, &bq);
    s_want(bq, 's');
    int sc, ac;
    int sid = iso_start("a-server-squatted", &ua, log_a, "server", port, 0, &sc);
    CHECK_EQ(s_get_u64(sc), port);
    int aid = iso_start("a-client-squatted", &ua, log_a, "client", port, 0, &ac);
    iso_check_prompt(ac, "A's client of a squatted port");
    pid_t a_pid = s_pid(aid);
    s_tok(bq, 'd');
    s_put_u64(bq, (uint64_t)a_pid);
    uint64_t dials[2];
    s_get(bq, dials, sizeof dials);
    s_reap(qid);
    close(bq);
    s_log("B's squatted shadow name (port %u): %llu dials from A's client, %llu from elsewhere; "
          "no byte, no descriptor", (unsigned)port, (unsigned long long)dials[0],
          (unsigned long long)dials[1]);
    CHECK_MSG(full || dials[0] > 0,
              "A's client did not dial B's squatted name: the case tested nothing");
    iso_quit(aid, ac);
    CHECK_EQ(iso_stop_server(sid, sc, NULL), 1);
    /* (The server, without a shadow listener, counts no connection: no record.) */
    struct hr_stat sa = hr_stat_of(log_a, a_pid);
    s_log("record: A's client carried %u fell back %u kernel %u", sa.carried, sa.fell_back,
          sa.kernel);
    CHECK_MSG(sa.carried == 0 && sa.kernel + sa.fell_back == 1,
              "A's client of the squatted port: carried %u, fell back %u, kernel %u", sa.carried,
              sa.fell_back, sa.kernel);
}

static void logic(void)
{
    static struct hc_names shm_before, tmp_before;
    hc_list_ours("/dev/shm", &shm_before);
    hc_list_ours("/tmp", &tmp_before);
    int log_a = iso_user_log(&ua), log_b = iso_user_log(&ub);
    if (s_case("main"))
        main_case(log_a, log_b);
    if (s_case("squat"))
        squat_case(log_a, false);
    if (s_case("squat_full"))
        squat_case(log_a, true);
    close(log_a);
    close(log_b);
    iso_check_not_owned("/tmp");
    iso_check_not_owned("/dev/shm");
    hc_check_no_new("/dev/shm", &shm_before);
    hc_check_no_new("/tmp", &tmp_before);
}

int main(int argc, char **argv)
{
    return iso_main(argc, argv, "isolation_run", logic);
}
