/*
 * isolation_run: isolation_users under `sovia run`. Another user's
 * programs neither pair with, nor reach, nor read a user's programs that
 * run under the preload (docs/ARCHITECTURE.md "Transparent mode": the
 * shadow listener's abstract name carries the euid, SO_PEERCRED on both
 * sides; statsrv.c for `sovia stat`).
 *
 * The test creates two system users A and B (useradd; skipped, exit 77,
 * when not root or without useradd) and removes them afterwards. They run
 * copies of this executable, the sovia tool, its preload and the build's
 * libraries in a temporary directory (hc_copy_make): the build tree may be
 * closed to them (a CI clone under /root). The programs are this executable in
 * a program mode (`--prog`): plain libc calls only (socket, bind, listen,
 * accept4, connect, poll, send, recv, close), started as A or B through
 * `sovia run`, each with its own user's SOVIA_STAT_LOG.
 *   - A's echo server on 127.0.0.1; A's own client (the control) is carried
 *     by sovia; B's client connects and echoes byte-exactly over kernel
 *     TCP, and neither its connect() nor its first echo waits for anything
 *     like the 1 s pairing timeout (< 500 ms each). The stat records say:
 *     A's client carried; B's client carried 0, fell back 0, kernel 1; A's
 *     server carried exactly 1 (A's) and kernel 1 (B's).
 *   - As B (a raw process, not preloaded): a REQUEST with descriptors to
 *     the abstract name of A's shadow listener ("sovia-vipl.<uid A>.sovia"
 *     + the port, network order): dropped, no byte, no descriptor back;
 *     A's programs' statistics sockets: closed without a byte; `sovia
 *     stat` lists neither A's programs nor A's port (run by A, it lists
 *     both, with the port); /proc/<A>/fd/<memfd>, maps, mem, map_files,
 *     fd: EACCES. Afterwards A's carried connection still echoes.
 *   - Squatting: B binds the shadow-listener name of a port before A's
 *     server listens there. A's server still serves (kernel TCP); A's
 *     client to it is not delayed (< 500 ms), echoes byte-exactly and is not
 *     carried; the dials that reach B's name (A's client's, and the one
 *     A's server's accept() makes to have the port's shadow listener let
 *     go of the client's VI) bring no byte and no descriptor (above all
 *     not a kernel socket, which a genuine shadow listener receives as the
 *     connection's token).
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
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hcommon.h"
#include "hrprog.h"
#include "sovia/sharness.h"

#define SKIP_CODE 77           /* CTest's SKIP_RETURN_CODE for this test */
#define ECHO_BYTES (256 * 1024) /* per echo, in CHUNK round trips */
#define CHUNK 16384
#define PROMPT_MS 500.0 /* a connect or first echo that waited for the 1 s pairing timeout */
#define MAX_CONNS 8

static const char *sovia_cmd;
static char self[PATH_MAX];
static struct hc_user ua, ub;
static struct hc_copy copy; /* what ua and ub run (main) */

/* ---- The programs: plain libc, run by `sovia run` ------------------------------------- */

static struct sockaddr_in loopback(uint16_t port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static void send_all(int fd, const uint8_t *p, size_t len)
{
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        CHECK_MSG(n > 0 || (n < 0 && errno == EINTR), "send: %s", s_errname(errno));
        if (n > 0)
            p += n, len -= (size_t)n;
    }
}

/* Echoes every connection on 127.0.0.1:port (0: the kernel picks) until
 * 'Q' on the channel; then answers how many it accepted. */
static void prog_server(int chan, uint16_t port)
{
    int lfd = SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    int on = 1;
    SYS(setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on));
    struct sockaddr_in a = loopback(port);
    socklen_t al = sizeof a;
    SYS(bind(lfd, (struct sockaddr *)&a, sizeof a));
    SYS(getsockname(lfd, (struct sockaddr *)&a, &al));
    SYS(listen(lfd, 16));
    s_put_u64(chan, ntohs(a.sin_port));
    struct pollfd p[2 + MAX_CONNS] = {{chan, POLLIN, 0}, {lfd, POLLIN, 0}};
    nfds_t n = 2;
    uint64_t accepted = 0;
    static uint8_t buf[65536];
    for (;;) {
        if (poll(p, n, -1) < 0) {
            CHECK_MSG(errno == EINTR, "poll: %s", s_errname(errno));
            continue;
        }
        if (p[0].revents)
            break; /* 'Q' (or the test went) */
        if ((p[1].revents & POLLIN) && n < 2 + MAX_CONNS) {
            int c = SYS(accept4(lfd, NULL, NULL, SOCK_CLOEXEC));
            p[n++] = (struct pollfd){c, POLLIN, 0};
            accepted++;
        }
        for (nfds_t i = 2; i < n; i++) {
            if (!p[i].revents)
                continue;
            ssize_t r = recv(p[i].fd, buf, sizeof buf, 0);
            if (r > 0) {
                send_all(p[i].fd, buf, (size_t)r);
                continue;
            }
            CHECK_MSG(r == 0, "recv: %s", s_errname(errno));
            SYS(close(p[i].fd));
            p[i--] = p[--n];
        }
    }
    s_want(chan, 'Q');
    for (nfds_t i = 2; i < n; i++)
        SYS(close(p[i].fd));
    SYS(close(lfd));
    s_put_u64(chan, accepted);
}

/* ECHO_BYTES of stream `seed` through the echo server, checked byte for
 * byte; the time until the first chunk came back. */
static double echo(int fd, uint64_t seed, double since_ms)
{
    static uint8_t out[CHUNK], in[CHUNK];
    double first = 0;
    for (uint64_t pos = 0; pos < ECHO_BYTES; pos += CHUNK) {
        s_pattern_fill(out, CHUNK, seed, pos);
        send_all(fd, out, CHUNK);
        for (size_t got = 0; got < CHUNK;) {
            ssize_t r = recv(fd, in + got, CHUNK - got, 0);
            CHECK_MSG(r > 0 || (r < 0 && errno == EINTR), "echo: recv after %llu bytes: %s",
                      (unsigned long long)(pos + got), r == 0 ? "end of stream" : s_errname(errno));
            got += r > 0 ? (size_t)r : 0;
        }
        long bad = s_pattern_check(in, CHUNK, seed, pos);
        CHECK_MSG(bad < 0, "echo: byte %llu differs", (unsigned long long)(pos + (uint64_t)bad));
        if (pos == 0)
            first = s_now_ms() - since_ms;
    }
    return first;
}

/* Connects to the server at port and echoes; reports the connect() time
 * and the time until the first echo came back; then 'E' echoes again
 * (answering its duration) and 'Q' closes and ends. */
static void prog_client(int chan, uint16_t port)
{
    int fd = SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    struct sockaddr_in a = loopback(port);
    double t0 = s_now_ms();
    CHECK_MSG(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect to port %u: %s",
              (unsigned)port, s_errname(errno));
    double connect_ms = s_now_ms() - t0;
    uint64_t seed = (uint64_t)getpid();
    double first_ms = echo(fd, seed, t0);
    s_put_f64(chan, connect_ms);
    s_put_f64(chan, first_ms);
    for (;;) {
        char cmd;
        s_get(chan, &cmd, 1);
        if (cmd == 'Q')
            break;
        CHECK_MSG(cmd == 'E', "unknown command %c", cmd);
        double t = s_now_ms();
        echo(fd, ++seed, t);
        s_put_f64(chan, s_now_ms() - t);
    }
    SYS(close(fd));
}

/* Whether connect() is the preload's (so this program runs under sovia). */
static int preloaded(void)
{
    Dl_info di;
    void *f = dlsym(RTLD_DEFAULT, "connect");
    return f && dladdr(f, &di) && di.dli_fname && strstr(di.dli_fname, "sovia-preload");
}

/* self --prog server|client CHAN ROLE PORT */
static int prog_main(int argc, char **argv)
{
    static char name[64];
    snprintf(name, sizeof name, "isolation_run %s", argc > 4 ? argv[4] : "?");
    s_init(name, 30);
    CHECK_MSG(argc == 6, "usage: %s --prog server|client CHAN ROLE PORT", argv[0]);
    CHECK_MSG(preloaded(), "libsovia-preload.so does not interpose connect() (LD_PRELOAD=%s)",
              getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "(unset)");
    CHECK_MSG(geteuid() != 0, "runs as root, not as a test user");
    int chan = atoi(argv[3]);
    uint16_t port = (uint16_t)atoi(argv[5]);
    if (strcmp(argv[2], "server") == 0)
        prog_server(chan, port);
    else if (strcmp(argv[2], "client") == 0)
        prog_client(chan, port);
    else
        FAILF("unknown program %s", argv[2]);
    return 0; /* exit() writes the SOVIA_STAT_LOG record */
}

/* ---- Starting them as A or B ---------------------------------------------------------- */

struct prog {
    const struct hc_user *user;
    int log;
    const char *mode, *role;
    uint16_t port;
};

/* Each user's SOVIA_STAT_LOG: a memfd the user owns, mode 0600, like the
 * file the preload would create (so it passes the mode check as well). */
static int user_log(const struct hc_user *u)
{
    int fd = (int)SYS(memfd_create("iso-run-stat", MFD_CLOEXEC));
    SYS(fchown(fd, u->uid, u->gid));
    SYS(fchmod(fd, 0600));
    return fd;
}

static void prog_role(int chan, void *arg)
{
    const struct prog *p = arg;
    hc_become(p->user);
    SYS(fcntl(chan, F_SETFD, 0));
    SYS(fcntl(p->log, F_SETFD, 0));
    char c[16], port[16], log[48];
    snprintf(c, sizeof c, "%d", chan);
    snprintf(port, sizeof port, "%u", (unsigned)p->port);
    snprintf(log, sizeof log, "/proc/self/fd/%d", p->log);
    setenv("SOVIA_STAT_LOG", log, 1);
    char *argv[] = {(char *)sovia_cmd, "run", "--", self, "--prog", (char *)p->mode, c,
                    (char *)p->role, port, NULL};
    execv(sovia_cmd, argv);
    FAILF("exec %s: %s", sovia_cmd, s_errname(errno));
}

/* The `sovia run` launcher execs the program: the role's pid is the program's. */
static int start(const char *role, const struct hc_user *u, int log, const char *mode,
                 uint16_t port, int *chan)
{
    struct prog p = {u, log, mode, role, port}; /* the forked role reads its copy */
    return s_spawn(role, prog_role, &p, chan);
}

/* A client's connect() and first-echo times, checked against PROMPT_MS. */
static void check_prompt(int chan, const char *who)
{
    double connect_ms = s_get_f64(chan), first_ms = s_get_f64(chan);
    s_log("%s: connect() %.1f ms, first echo %.1f ms", who, connect_ms, first_ms);
    CHECK_MSG(connect_ms < PROMPT_MS, "%s: connect() took %.0f ms (a pairing timeout?)", who,
              connect_ms);
    CHECK_MSG(first_ms < PROMPT_MS, "%s: the first echo came after %.0f ms (a pairing timeout?)",
              who, first_ms);
}

/* Ends a program: 'Q', then its exit (and so its stat record). */
static void quit(int id, int chan)
{
    s_tok(chan, 'Q');
    s_reap(id);
    close(chan);
}

/* ---- B's probes --------------------------------------------------------------------------- */

struct b_args {
    uint16_t port; /* A's server's */
    pid_t pid[2];  /* A's server and client */
    int memfds[2][32];
    int n_memfds[2];
};

/* The abstract name of uid's shadow listener for a TCP port: the shm
 * provider's "sovia-vipl.<euid>." and the sockets layer's discriminator,
 * "sovia" and the port in network order (src/sovia/addr.c). Its length. */
static size_t shadow_name(char *name, size_t cap, uid_t uid, uint16_t port)
{
    int k = snprintf(name, cap, "sovia-vipl.%u.sovia", (unsigned)uid);
    CHECK(k > 0 && (size_t)k + 2 <= cap);
    uint16_t pn = htons(port);
    memcpy(name + k, &pn, 2);
    return (size_t)k + 2;
}

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
    size_t len = shadow_name(name, sizeof name, ua.uid, ba->port);
    int s = hc_abstract_connect(name, len, SOCK_SEQPACKET);
    CHECK_MSG(s >= 0, "B cannot even reach the name of A's shadow listener (%s): a wrong name, "
              "the case would test nothing", s_errname(errno));
    hc_send_request(s);
    hc_expect_dropped(s, "a REQUEST from B to A's shadow listener");
    close(s);

    for (int i = 0; i < 2; i++) {
        snprintf(name, sizeof name, "sovia-stat.%u.%d", (unsigned)ua.uid, (int)ba->pid[i]);
        s = hc_abstract_connect(name, strlen(name), SOCK_STREAM);
        CHECK_MSG(s >= 0, "the statistics socket of A's program %d is not up (%s)",
                  (int)ba->pid[i], s_errname(errno));
        hc_expect_dropped(s, "B asking the statistics socket of A's program");
        close(s);
    }
    const char *out = hc_sovia_stat(sovia_cmd);
    CHECK_MSG(out != NULL, "`sovia stat` failed for B");
    for (int i = 0; i < 2; i++)
        CHECK_MSG(!hc_stat_lists_pid(out, ba->pid[i]), "`sovia stat` run by B lists A's "
                  "program %d:\n%s", (int)ba->pid[i], out);
    CHECK_MSG(!shows_port(out, ba->port), "`sovia stat` run by B shows a connection to A's "
              "port:\n%s", out);

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
    const char *out = hc_sovia_stat(sovia_cmd);
    CHECK_MSG(out != NULL, "`sovia stat` failed for A");
    for (int i = 0; i < 2; i++)
        CHECK_MSG(hc_stat_lists_pid(out, ba->pid[i]), "`sovia stat` run by A does not list "
                  "A's program %d:\n%s", (int)ba->pid[i], out);
    CHECK_MSG(shows_port(out, ba->port), "`sovia stat` run by A does not show the connection "
              "to port %u:\n%s", (unsigned)ba->port, out);
}

/* B squats the shadow-listener name of A's port (argument), then takes
 * every connection that reaches it: none may bring a byte or a descriptor.
 * Answers how many came from A's client (its pid comes with 'd') and how
 * many from elsewhere (A's server, whose accept() asks the port's shadow
 * listener to let go of the client's VI). */
static void b_squat(int chan, void *arg)
{
    hc_become(&ub);
    char name[96];
    int sq = hc_abstract_listen(name, shadow_name(name, sizeof name, ua.uid,
                                                   *(const uint16_t *)arg));
    SYS(fcntl(sq, F_SETFL, O_NONBLOCK));
    s_tok(chan, 's');
    s_want(chan, 'd'); /* A's server listened there and A's client connected */
    pid_t client = (pid_t)s_get_u64(chan);
    uint64_t n[2] = {0, 0};
    int got;
    while ((got = accept4(sq, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        struct ucred cr;
        socklen_t cl = sizeof cr;
        SYS(getsockopt(got, SOL_SOCKET, SO_PEERCRED, &cr, &cl));
        hc_expect_dropped(got, "a dial of A's reaching B's squatted shadow name");
        close(got);
        n[cr.pid != client]++;
    }
    CHECK_MSG(errno == EAGAIN, "accept: %s", s_errname(errno));
    close(sq);
    s_put(chan, n, sizeof n);
}

/* ---- The test (as root) ---------------------------------------------------------------------- */

/* A port of 127.0.0.1 below the ephemeral range, free now (no connect()
 * is given it meanwhile). */
static uint16_t unused_port(void)
{
    for (unsigned i = 0; i < 2000; i++) {
        uint16_t port = (uint16_t)(20000 + (getpid() * 7 + i * 13) % 12000);
        int s = SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        struct sockaddr_in a = loopback(port);
        int ok = bind(s, (struct sockaddr *)&a, sizeof a) == 0;
        close(s);
        if (ok)
            return port;
    }
    FAILF("no free port between 20000 and 32000");
}

/* Neither user owns an entry of dir: both are new, so anything they own
 * there their programs made. */
static void check_not_owned(const char *dir)
{
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot list %s", dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        CHECK_MSG(st.st_uid != ua.uid && st.st_uid != ub.uid, "%s/%s (mode %o) belongs to %s",
                  dir, e->d_name, (unsigned)(st.st_mode & 0777),
                  st.st_uid == ua.uid ? ua.name : ub.name);
    }
    closedir(d);
}

/* A's server, A's client (carried) and B's client (kernel TCP); B's probes. */
static void main_case(int log_a, int log_b)
{
    int sc, ac, bc;
    int sid = start("a-server", &ua, log_a, "server", 0, &sc);
    uint16_t port = (uint16_t)s_get_u64(sc);
    int aid = start("a-client", &ua, log_a, "client", port, &ac);
    check_prompt(ac, "A's client");
    int bid = start("b-client", &ub, log_b, "client", port, &bc);
    check_prompt(bc, "B's client");

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
    quit(aid, ac);
    quit(bid, bc);
    s_tok(sc, 'Q');
    uint64_t accepted = s_get_u64(sc);
    s_reap(sid);
    close(sc);
    CHECK_MSG(accepted == 2, "A's server accepted %llu connections, not 2",
              (unsigned long long)accepted);
    struct hr_stat sa = hr_stat_of(log_a, a_pid), sb = hr_stat_of(log_b, b_pid),
                   ss = hr_stat_of(log_a, srv_pid);
    s_log("records: A's client carried %u fell back %u kernel %u; B's client %u %u %u; A's "
          "server %u %u %u", sa.carried, sa.fell_back, sa.kernel, sb.carried, sb.fell_back,
          sb.kernel, ss.carried, ss.fell_back, ss.kernel);
    CHECK_MSG(sa.carried == 1, "A's own client was not carried (the control)");
    CHECK_MSG(sb.carried == 0 && sb.fell_back == 0 && sb.kernel == 1,
              "B's client to A's server: carried %u, fell back %u, kernel %u (want 0, 0, 1)",
              sb.carried, sb.fell_back, sb.kernel);
    CHECK_MSG(ss.carried == 1 && ss.fell_back == 0 && ss.kernel == 1,
              "A's server: carried %u, fell back %u, kernel %u (want 1: A's, 0, 1: B's)",
              ss.carried, ss.fell_back, ss.kernel);
}

/* B squats the shadow name of a port; A's server and client there. */
static void squat_case(int log_a)
{
    uint16_t port = unused_port();
    int bq;
    int qid = s_spawn("b-squat", b_squat, &port, &bq);
    s_want(bq, 's');
    int sc, ac;
    int sid = start("a-server-squatted", &ua, log_a, "server", port, &sc);
    CHECK_EQ(s_get_u64(sc), port);
    int aid = start("a-client-squatted", &ua, log_a, "client", port, &ac);
    check_prompt(ac, "A's client of a squatted port");
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
    CHECK_MSG(dials[0] > 0, "A's client did not dial B's squatted name: the case tested nothing");
    quit(aid, ac);
    s_tok(sc, 'Q');
    CHECK_EQ(s_get_u64(sc), 1);
    s_reap(sid);
    close(sc);
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
    int log_a = user_log(&ua), log_b = user_log(&ub);
    if (s_case("main"))
        main_case(log_a, log_b);
    if (s_case("squat"))
        squat_case(log_a);
    close(log_a);
    close(log_b);
    check_not_owned("/tmp");
    check_not_owned("/dev/shm");
    hc_check_no_new("/dev/shm", &shm_before);
    hc_check_no_new("/tmp", &tmp_before);
}

/* Where `sovia run` finds its preload: the LD_PRELOAD entry `sovia env`
 * prints that names libsovia-preload.so (a sanitizer runtime may precede
 * it). 1 if found. */
static int find_preload(char *out, size_t cap)
{
    char buf[8192];
    char *argv[] = {(char *)sovia_cmd, "env", NULL};
    int st = hc_capture(argv, buf, sizeof buf);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s env: status %#x", sovia_cmd, st);
    char *v = strstr(buf, "export LD_PRELOAD='");
    if (!v)
        return 0;
    v += strlen("export LD_PRELOAD='");
    v[strcspn(v, "'\n")] = 0;
    for (char *save = NULL, *e = strtok_r(v, ":", &save); e; e = strtok_r(NULL, ":", &save)) {
        const char *base = strrchr(e, '/');
        if (base && strcmp(base, "/libsovia-preload.so") == 0 && strlen(e) < cap) {
            strcpy(out, e);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--prog") == 0)
        return prog_main(argc, argv);
    s_init("isolation_run", 60);
    sovia_cmd = argc > 1 ? argv[1] : getenv("HARDENING_SOVIA_CMD");
    CHECK_MSG(sovia_cmd != NULL, "usage: %s SOVIA-COMMAND (or HARDENING_SOVIA_CMD)", argv[0]);
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    CHECK(n > 0);
    exe[n] = 0;
    char preload[PATH_MAX];
    CHECK_MSG(find_preload(preload, sizeof preload), "no libsovia-preload.so beside %s", sovia_cmd);
    /* The users run copies (hcommon.h, hc_copy_make): the build directory
     * may be closed to them. Always, so the test runs the same everywhere. */
    const char *files[] = {exe, sovia_cmd, preload};
    CHECK_MSG(hc_copy_make(&copy, files, 3) == 0, "cannot copy the programs for the test users");
    snprintf(self, sizeof self, "%s", copy.path[0]);
    sovia_cmd = copy.path[1];
    setenv("SOVIA_PRELOAD", copy.path[2], 1); /* `sovia run` looks beside itself, then in the build */
    char libs[PATH_MAX + 64];
    const char *old = getenv("LD_LIBRARY_PATH");
    snprintf(libs, sizeof libs, "%s%s%s", copy.dir, old && *old ? ":" : "", old ? old : "");
    setenv("LD_LIBRARY_PATH", libs, 1); /* before a RUNPATH the users cannot search */
    s_log("the users run copies in %s", copy.dir);
    if (hc_users_make(&ua, &ub) != 0) {
        hc_copy_remove(&copy);
        return SKIP_CODE;
    }
    int ok = hc_users_run(&ua, &ub, logic, 40);
    hc_copy_remove(&copy);
    CHECK_MSG(ok, "the isolation checks failed (messages above)");
    s_pass();
}
