/*
 * isorun.c - the programs and setup isolation_run and cross_users share
 * (isorun.h).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "isorun.h"
#include "sovia/sharness.h"

#define SKIP_CODE 77            /* CTest's SKIP_RETURN_CODE for these tests */
#define ECHO_BYTES (256 * 1024) /* per echo, in CHUNK round trips */
#define CHUNK 16384
#define MAX_CONNS 8

#if defined(__SANITIZE_THREAD__)
/* The prefork program's worker is a forked child that starts threads (its
 * claim, its ticketed listener), which ThreadSanitizer kills by default
 * (die_after_fork); as tests/preload/pharness.h's P_THREADED_FORK_CHILDREN. */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
    return "atexit_sleep_ms=50:die_after_fork=0";
}
#endif

struct hc_user iso_a, iso_b;
const char *iso_sovia_cmd;
static char self[PATH_MAX];
static struct hc_copy copy; /* what the users run */

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

static int listen_on(uint16_t port)
{
    int lfd = SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    int on = 1;
    SYS(setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on));
    struct sockaddr_in a = loopback(port);
    socklen_t al = sizeof a;
    SYS(bind(lfd, (struct sockaddr *)&a, sizeof a));
    SYS(getsockname(lfd, (struct sockaddr *)&a, &al));
    SYS(listen(lfd, 16));
    return lfd;
}

static uint16_t port_of(int lfd)
{
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    SYS(getsockname(lfd, (struct sockaddr *)&a, &al));
    return ntohs(a.sin_port);
}

/* Echoes every connection on lfd until the channel speaks 'Q' (held: one
 * accept per 'A'); how many it accepted. */
static uint64_t serve(int chan, int lfd, int held)
{
    struct pollfd p[2 + MAX_CONNS] = {{chan, POLLIN, 0}, {lfd, held ? 0 : POLLIN, 0}};
    nfds_t n = 2;
    uint64_t accepted = 0;
    static uint8_t buf[65536];
    for (;;) {
        if (poll(p, n, -1) < 0) {
            CHECK_MSG(errno == EINTR, "poll: %s", s_errname(errno));
            continue;
        }
        if (p[0].revents) {
            char cmd;
            s_get(chan, &cmd, 1);
            if (cmd == 'Q')
                break;
            CHECK_MSG(cmd == 'A' && held, "unknown command %c", cmd);
            p[1].revents = POLLIN; /* the held client is in the backlog */
        }
        if ((p[1].revents & POLLIN) && n < 2 + MAX_CONNS) {
            int c = SYS(accept4(lfd, NULL, NULL, SOCK_CLOEXEC));
            p[n++] = (struct pollfd){c, POLLIN, 0};
            accepted++;
            if (held)
                s_tok(chan, 'a');
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
        p[0].revents = p[1].revents = 0;
    }
    for (nfds_t i = 2; i < n; i++)
        SYS(close(p[i].fd));
    return accepted;
}

static void prog_server(int chan, uint16_t port, int held)
{
    int lfd = listen_on(port);
    s_put_u64(chan, port_of(lfd));
    uint64_t accepted = serve(chan, lfd, held);
    SYS(close(lfd));
    s_put_u64(chan, accepted);
}

/* A prefork server started as root: the master listens, a worker that
 * becomes uid accepts and echoes (as nginx's workers run as nobody). */
static void prog_prefork(int chan, uid_t uid)
{
    CHECK_MSG(geteuid() == 0, "the prefork server must start as root");
    struct passwd *pw = getpwuid(uid);
    CHECK_MSG(pw, "no user %u", (unsigned)uid);
    int lfd = listen_on(0);
    s_put_u64(chan, port_of(lfd));
    pid_t w = SYS(fork());
    if (w == 0) {
        CHECK(setgroups(0, NULL) == 0);
        CHECK(setgid(pw->pw_gid) == 0);
        CHECK(setuid(uid) == 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        uint64_t accepted = serve(chan, lfd, 0);
        s_put_u64(chan, accepted);
        s_put_u64(chan, (uint64_t)getpid());
        exit(0); /* the worker's own record */
    }
    int st; /* the master keeps its listening socket, as nginx's does */
    SYS(waitpid(w, &st, 0));
    SYS(close(lfd));
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the worker ended with status %#x", st);
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

/* Connects to the server at port (from lport, 0: any) and echoes; reports
 * the connect() time and the time until the first echo came back; then 'E'
 * echoes again (answering its duration) and 'Q' closes and ends. */
static void prog_client(int chan, uint16_t port, uint16_t lport)
{
    int fd = SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (lport) {
        int on = 1;
        SYS(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on));
        struct sockaddr_in me = loopback(lport);
        SYS(bind(fd, (struct sockaddr *)&me, sizeof me));
    }
    struct sockaddr_in a = loopback(port);
    double t0 = s_now_ms();
    CHECK_MSG(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect to port %u: %s",
              (unsigned)port, s_errname(errno));
    double connect_ms = s_now_ms() - t0;
    s_tok(chan, 'c'); /* connected (a held server accepts after this) */
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

/* self --prog MODE CHAN ROLE ARG1 ARG2 */
static int prog_main(int argc, char **argv)
{
    static char name[64];
    snprintf(name, sizeof name, "isorun %s", argc > 4 ? argv[4] : "?");
    s_init(name, 30);
    CHECK_MSG(argc == 7, "usage: %s --prog MODE CHAN ROLE ARG1 ARG2", argv[0]);
    CHECK_MSG(preloaded(), "libsovia-preload.so does not interpose connect() (LD_PRELOAD=%s)",
              getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "(unset)");
    int chan = atoi(argv[3]);
    unsigned long a1 = strtoul(argv[5], NULL, 10), a2 = strtoul(argv[6], NULL, 10);
    const char *mode = argv[2];
    CHECK_MSG(geteuid() != 0 || (strcmp(mode, "server") != 0 && strcmp(mode, "held") != 0),
              "%s runs as root, not as a test user", mode);
    if (strcmp(mode, "server") == 0 || strcmp(mode, "held") == 0)
        prog_server(chan, (uint16_t)a1, strcmp(mode, "held") == 0);
    else if (strcmp(mode, "prefork") == 0)
        prog_prefork(chan, (uid_t)a1);
    else if (strcmp(mode, "client") == 0)
        prog_client(chan, (uint16_t)a1, (uint16_t)a2);
    else
        FAILF("unknown program %s", mode);
    return 0; /* exit() writes the SOVIA_STAT_LOG record */
}

/* ---- Starting them as A, B or root ----------------------------------------------------- */

struct prog {
    const struct hc_user *user;
    int log;
    const char *mode, *role;
    uint64_t a1, a2;
};

int iso_user_log(const struct hc_user *u)
{
    int fd = (int)SYS(memfd_create("iso-run-stat", MFD_CLOEXEC));
    SYS(fchown(fd, u->uid, u->gid));
    SYS(fchmod(fd, 0600));
    return fd;
}

static void prog_role(int chan, void *arg)
{
    const struct prog *p = arg;
    if (p->user)
        hc_become(p->user);
    SYS(fcntl(chan, F_SETFD, 0));
    SYS(fcntl(p->log, F_SETFD, 0));
    char c[16], a1[24], a2[24], log[48];
    snprintf(c, sizeof c, "%d", chan);
    snprintf(a1, sizeof a1, "%llu", (unsigned long long)p->a1);
    snprintf(a2, sizeof a2, "%llu", (unsigned long long)p->a2);
    snprintf(log, sizeof log, "/proc/self/fd/%d", p->log);
    setenv("SOVIA_STAT_LOG", log, 1);
    char *argv[] = {(char *)iso_sovia_cmd, "run", "--", self, "--prog", (char *)p->mode, c,
                    (char *)p->role, a1, a2, NULL};
    execv(iso_sovia_cmd, argv);
    FAILF("exec %s: %s", iso_sovia_cmd, s_errname(errno));
}

/* The `sovia run` launcher execs the program: the role's pid is the program's. */
int iso_start(const char *role, const struct hc_user *u, int log, const char *mode,
              uint64_t arg1, uint64_t arg2, int *chan)
{
    struct prog p = {u, log, mode, role, arg1, arg2}; /* the forked role reads its copy */
    return s_spawn(role, prog_role, &p, chan);
}

void iso_check_prompt(int chan, const char *who)
{
    s_want(chan, 'c');
    double connect_ms = s_get_f64(chan), first_ms = s_get_f64(chan);
    s_log("%s: connect() %.1f ms, first echo %.1f ms", who, connect_ms, first_ms);
    CHECK_MSG(connect_ms < ISO_PROMPT_MS, "%s: connect() took %.0f ms (a pairing timeout?)", who,
              connect_ms);
    CHECK_MSG(first_ms < ISO_PROMPT_MS,
              "%s: the first echo came after %.0f ms (a pairing timeout?)", who, first_ms);
}

void iso_quit(int id, int chan)
{
    s_tok(chan, 'Q');
    s_reap(id);
    close(chan);
}

uint64_t iso_stop_server(int id, int chan, pid_t *worker)
{
    s_tok(chan, 'Q');
    uint64_t accepted = s_get_u64(chan);
    if (worker)
        *worker = (pid_t)s_get_u64(chan);
    s_reap(id);
    close(chan);
    return accepted;
}

uint16_t iso_unused_port(void)
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

size_t iso_shadow_name(char *name, size_t cap, uid_t uid, uint16_t port, const void *extra,
                       size_t extra_len)
{
    int k = snprintf(name, cap, "sovia-vipl.%u.sovia", (unsigned)uid);
    CHECK(k > 0 && (size_t)k + 2 + extra_len <= cap);
    uint16_t pn = htons(port);
    memcpy(name + k, &pn, 2);
    if (extra_len)
        memcpy(name + k + 2, extra, extra_len);
    return (size_t)k + 2 + extra_len;
}

void iso_check_not_owned(const char *dir)
{
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot list %s", dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        CHECK_MSG(st.st_uid != iso_a.uid && st.st_uid != iso_b.uid,
                  "%s/%s (mode %o) belongs to %s", dir, e->d_name, (unsigned)(st.st_mode & 0777),
                  st.st_uid == iso_a.uid ? iso_a.name : iso_b.name);
    }
    closedir(d);
}

/* Where `sovia run` finds its preload: the LD_PRELOAD entry `sovia env`
 * prints that names libsovia-preload.so (a sanitizer runtime may precede
 * it). 1 if found. */
static int find_preload(char *out, size_t cap)
{
    char buf[8192];
    char *argv[] = {(char *)iso_sovia_cmd, "env", NULL};
    int st = hc_capture(argv, buf, sizeof buf);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s env: status %#x", iso_sovia_cmd, st);
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

int iso_main(int argc, char **argv, const char *name, void (*logic)(void))
{
    if (argc > 1 && strcmp(argv[1], "--prog") == 0)
        return prog_main(argc, argv);
    s_init(name, 60);
    iso_sovia_cmd = argc > 1 ? argv[1] : getenv("HARDENING_SOVIA_CMD");
    CHECK_MSG(iso_sovia_cmd != NULL, "usage: %s SOVIA-COMMAND (or HARDENING_SOVIA_CMD)", argv[0]);
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    CHECK(n > 0);
    exe[n] = 0;
    char preload[PATH_MAX];
    CHECK_MSG(find_preload(preload, sizeof preload), "no libsovia-preload.so beside %s",
              iso_sovia_cmd);
    /* The users run copies (hcommon.h, hc_copy_make): the build directory
     * may be closed to them. Always, so the test runs the same everywhere. */
    const char *files[] = {exe, iso_sovia_cmd, preload};
    CHECK_MSG(hc_copy_make(&copy, files, 3) == 0, "cannot copy the programs for the test users");
    snprintf(self, sizeof self, "%s", copy.path[0]);
    iso_sovia_cmd = copy.path[1];
    setenv("SOVIA_PRELOAD", copy.path[2], 1); /* `sovia run` looks beside itself, then in the build */
    char libs[PATH_MAX + 64];
    const char *old = getenv("LD_LIBRARY_PATH");
    snprintf(libs, sizeof libs, "%s%s%s", copy.dir, old && *old ? ":" : "", old ? old : "");
    setenv("LD_LIBRARY_PATH", libs, 1); /* before a RUNPATH the users cannot search */
    s_log("the users run copies in %s", copy.dir);
    if (hc_users_make(&iso_a, &iso_b) != 0) {
        hc_copy_remove(&copy);
        return SKIP_CODE;
    }
    int ok = hc_users_run(&iso_a, &iso_b, logic, 40);
    hc_copy_remove(&copy);
    CHECK_MSG(ok, "the checks failed (messages above)");
    s_pass();
}
