/* pharness.c - see pharness.h. */
#include "pharness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char *test_name = "preload";
static const char *case_name = "";
static const char *role_name = "main";
static bool is_child;
static pid_t main_pid;
static char stat_path[64];
static int failed, passed, skipped;
static unsigned min_carried = 1;
static bool want_server_bytes;
static unsigned long long server_sent, server_received;
static bool kernel_mode; /* PRELOAD_TEST_KERNEL=1 */

static bool known_bugs_on(void)
{
    const char *run = getenv("PRELOAD_TEST_KNOWN_BUGS");
    return run && strcmp(run, "1") == 0;
}


/* ---- Reporting ---------------------------------------------------------------- */

const char *p_errname(int e)
{
    if (e == 0)
        return "0";
    const char *n = strerrorname_np(e);
    return n ? n : "E?";
}

static void vlog(const char *fmt, va_list ap)
{
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "[%s%s%s %s] ", test_name, case_name[0] ? "/" : "",
                     case_name, role_name);
    if (n < 0 || n >= (int)sizeof buf)
        n = 0;
    vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    size_t len = strlen(buf);
    if (len + 1 < sizeof buf)
        buf[len++] = '\n';
    /* one write per line: the roles share stdout */
    if (write(STDOUT_FILENO, buf, len) < 0) {
        /* nowhere to report */
    }
}

void p_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(fmt, ap);
    va_end(ap);
}

static void remove_stat_log(void)
{
    if (getpid() != main_pid || !stat_path[0])
        return;
    unlink(stat_path);
    stat_path[0] = '\0';
    /* the preload writes this process's own record after atexit handlers:
     * empty turns it off (unset, the path it kept would be used) */
    setenv("SOVIA_STAT_LOG", "", 1);
}

/* The main process killed by its watchdog or ctest: no stat log left behind.
 * Roles inherit the handler and just die of the signal. */
static void on_fatal(int sig)
{
    if (getpid() == main_pid && stat_path[0])
        unlink(stat_path);
    signal(sig, SIG_DFL);
    raise(sig);
}

void p_fail(const char *file, int line, const char *fmt, ...)
{
    char msg[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    p_log("FAIL %s:%d: %s", base ? base + 1 : file, line, msg);
    if (!is_child)
        remove_stat_log();
    exit(1);
}

long long p_sys(long long r, const char *what, const char *file, int line)
{
    if (r < 0)
        p_fail(file, line, "%s: %lld (errno %s)", what, r, p_errname(errno));
    return r;
}

/* ---- Lifetime ------------------------------------------------------------------ */

/* ThreadSanitizer's runtime must come after the preload in LD_PRELOAD
 * (tests/preload/CMakeLists.txt says why): a run in the other order fails
 * here rather than with a race report for every lock-protected access the
 * preload makes inside poll, select or epoll_wait. */
static void check_tsan_order(void)
{
#if defined(__SANITIZE_THREAD__)
    const char *lp = getenv("LD_PRELOAD");
    const char *pre = lp ? strstr(lp, "libsovia-preload") : NULL;
    const char *rt = lp ? strstr(lp, "libtsan") : NULL;
    if (pre && rt && rt < pre)
        FAILF("LD_PRELOAD=%s: libtsan ahead of libsovia-preload.so; ThreadSanitizer would "
              "not see the locks the preload takes inside its blocking-call interceptors",
              lp);
#endif
}

#if defined(__SANITIZE_THREAD__)
/* Weak: P_THREADED_FORK_CHILDREN in a test replaces it. */
__attribute__((weak)) const char *__tsan_default_options(void);
__attribute__((weak)) const char *__tsan_default_options(void)
{
    return P_TSAN_OPTIONS;
}
#endif

void p_threaded_fork_child(void)
{
#if defined(__SANITIZE_THREAD__)
    p_log("ThreadSanitizer: a child of a threaded process (die_after_fork=0): only the "
          "threads it starts are checked, not this one");
#endif
}

pid_t p_fork_holder(void)
{
    pid_t pid = (pid_t)SYS(fork());
    if (pid == 0) {
        p_child_safety();
        p_threaded_fork_child();
    }
    return pid;
}

bool p_preloaded(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return false;
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, "libsovia-preload") != NULL;
    fclose(f);
    return found;
}

void p_init(const char *test)
{
    test_name = test;
    main_pid = getpid();
    setvbuf(stdout, NULL, _IONBF, 0);
    kernel_mode = getenv("PRELOAD_TEST_KERNEL") && strcmp(getenv("PRELOAD_TEST_KERNEL"), "1") == 0;
    if (kernel_mode)
        p_log("PRELOAD_TEST_KERNEL=1: checking the expectations against kernel TCP "
              "(preload %s, stat records not checked)", p_preloaded() ? "loaded" : "not loaded");
    else if (!p_preloaded())
        FAILF("libsovia-preload.so is not loaded (LD_PRELOAD=%s): run through ctest",
              getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "(unset)");
    else
        check_tsan_order();
    /* not named *sovia*: tests/sovia/cleanup counts such files in /tmp */
    snprintf(stat_path, sizeof stat_path, "/tmp/preload-test-stat-XXXXXX");
    int fd = mkstemp(stat_path);
    if (fd < 0)
        FAILF("mkstemp: %s", p_errname(errno));
    close(fd);
    atexit(remove_stat_log);
    setenv("SOVIA_STAT_LOG", stat_path, 1);
    /* The cases count carried connections, many of them one exchange
     * long: sovia run's default would leave later ones to kernel TCP
     * (src/sovia/shortconn.c; preload/shortconn tests that, setting it
     * first). */
    setenv("SOVIA_SHORT_CONNS", "0", 0);
    int fatal[] = {SIGALRM, SIGTERM, SIGINT, SIGHUP};
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
        signal(fatal[i], on_fatal);
}

bool p_kernel_mode(void)
{
    return kernel_mode;
}

int p_done(void)
{
    p_log("%d passed, %d failed, %d skipped", passed, failed, skipped);
    remove_stat_log();
    return failed ? 1 : 0;
}

bool p_selected(const char *name)
{
    const char *only = getenv("PRELOAD_TEST_CASES");
    if (!only || !*only)
        return true;
    size_t n = strlen(name);
    for (const char *p = only; (p = strstr(p, name)) != NULL; p += n)
        if ((p == only || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
            return true;
    return false;
}

/* ---- Processes ---------------------------------------------------------------- */

void p_child_safety(void)
{
    is_child = true;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    alarm(P_WATCHDOG_S);
}

bool p_child_record(void (*fn)(void *), void *arg, struct p_stat *st)
{
    pid_t k = (pid_t)SYS(fork());
    if (k == 0) {
        p_child_safety();
        fn(arg);
        exit(0); /* its exit record (_exit writes none) */
    }
    int ws;
    SYS(waitpid(k, &ws, 0));
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    if (p_kernel_mode())
        return false;
    CHECK(p_stat_of(k, st));
    return true;
}

static void become_child(const char *role)
{
    role_name = role;
    p_child_safety();
}

pid_t p_fork(const char *role, void (*fn)(void *), void *arg)
{
    pid_t pid = fork();
    if (pid < 0)
        FAILF("fork: %s", p_errname(errno));
    if (pid == 0) {
        become_child(role);
        fn(arg);
        exit(0);
    }
    return pid;
}

static bool report_status(int st, const char *role)
{
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return true;
    if (WIFEXITED(st))
        p_log("%s exited with status %d", role, WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        p_log("%s killed by signal %d (%s)%s", role, WTERMSIG(st), strsignal(WTERMSIG(st)),
              WTERMSIG(st) == SIGALRM ? ": watchdog, it hung" : "");
    return false;
}

bool p_reap(pid_t pid, const char *role)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            p_log("waitpid(%s): %s", role, p_errname(errno));
            return false;
        }
    return report_status(st, role);
}

static void write_int(int fd, long long v)
{
    const char *p = (const char *)&v;
    size_t done = 0;
    while (done < sizeof v) {
        ssize_t n = write(fd, p + done, sizeof v - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            FAILF("channel write: %s", p_errname(errno));
        done += (size_t)n;
    }
}

static long long read_int(int fd)
{
    long long v;
    char *p = (char *)&v;
    size_t done = 0;
    while (done < sizeof v) {
        ssize_t n = read(fd, p + done, sizeof v - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0)
            FAILF("channel: the other role is gone");
        if (n < 0)
            FAILF("channel read: %s", p_errname(errno));
        done += (size_t)n;
    }
    return v;
}

void p_put_int(struct p_role *r, long long v)
{
    write_int(r->to_peer, v);
}

long long p_get_int(struct p_role *r)
{
    return read_int(r->from_peer);
}

void p_barrier(struct p_role *r)
{
    p_put_int(r, 0x5eed);
    CHECK_EQ(p_get_int(r), 0x5eed);
}

/* ---- Cases -------------------------------------------------------------------- */

struct launch {
    struct p_role r;
    p_role_fn fn;
    int flags;
    int close_a, close_b; /* the other role's pipe ends */
};

static void run_role(void *arg)
{
    struct launch *l = arg;
    close(l->close_a);
    close(l->close_b);
    if (strcmp(l->r.role, "server") == 0) {
        if (!(l->flags & (P_SERVER_PLAIN | P_SERVER_OWN_PORT))) {
            l->r.lfd = p_listener(&l->r.port);
            p_put_int(&l->r, l->r.port);
        }
    } else {
        l->r.port = (int)p_get_int(&l->r);
    }
    l->fn(&l->r);
}

static bool check_record(pid_t pid, const char *role, bool carried, bool kernel, bool fellback,
                         bool redirected, bool migrated)
{
    struct p_stat st;
    if (!p_stat_of(pid, &st)) {
        p_log("FAIL: %s (pid %d) wrote no SOVIA_STAT_LOG record", role, (int)pid);
        return false;
    }
    p_log("%s record: carried %u fell_back %u kernel %u redirected %u migrated %u sent %llu "
          "received %llu",
          role, st.carried, st.fell_back, st.kernel, st.redirected, st.migrated, st.bytes_sent,
          st.bytes_received);
    if (migrated && st.migrated < 1) {
        p_log("FAIL: %s: migrated %u, want >= 1", role, st.migrated);
        return false;
    }
    if (redirected && st.redirected != st.carried) {
        p_log("FAIL: %s: redirected %u, want every carried one (%u)", role, st.redirected,
              st.carried);
        return false;
    }
    if (!redirected && st.redirected) {
        p_log("FAIL: %s: redirected %u, want 0", role, st.redirected);
        return false;
    }
    if (carried && st.carried < min_carried) {
        p_log("FAIL: %s: connections not carried by sovia (carried %u, want >= %u)", role,
              st.carried, min_carried);
        return false;
    }
    if ((kernel || fellback) && st.carried != 0) {
        p_log("FAIL: %s: carried %u, want 0 (kernel TCP)", role, st.carried);
        return false;
    }
    if (kernel && st.kernel + st.fell_back < 1) {
        p_log("FAIL: %s: kernel %u fell_back %u, want a kernel connection", role, st.kernel,
              st.fell_back);
        return false;
    }
    if (fellback && st.fell_back < 1) {
        p_log("FAIL: %s: fell_back %u, want >= 1", role, st.fell_back);
        return false;
    }
    if (want_server_bytes && strcmp(role, "server") == 0 &&
        (st.bytes_sent != server_sent || st.bytes_received != server_received)) {
        p_log("FAIL: %s: sent %llu received %llu, want %llu and %llu", role, st.bytes_sent,
              st.bytes_received, server_sent, server_received);
        return false;
    }
    return true;
}

static bool check_no_record(pid_t pid, const char *role)
{
    struct p_stat st;
    if (p_stat_of(pid, &st)) {
        p_log("FAIL: %s (pid %d) wrote a record, want none (no preload, or no log)", role,
              (int)pid);
        return false;
    }
    return true;
}

void p_case(const char *name, p_role_fn server, p_role_fn client, int flags)
{
    if (!p_selected(name)) {
        min_carried = 1;
        want_server_bytes = false;
        return;
    }
    case_name = name;
    p_log("start");
    alarm(2 * P_WATCHDOG_S + 5);
    int s2c[2], c2s[2];
    if (pipe2(s2c, O_CLOEXEC) != 0 || pipe2(c2s, O_CLOEXEC) != 0)
        FAILF("pipe2: %s", p_errname(errno));
    struct launch ls = {.r = {.role = "server", .lfd = -1, .to_peer = s2c[1], .from_peer = c2s[0]},
                        .fn = server,
                        .flags = flags,
                        .close_a = s2c[0],
                        .close_b = c2s[1]};
    struct launch lc = {.r = {.role = "client", .lfd = -1, .to_peer = c2s[1], .from_peer = s2c[0]},
                        .fn = client,
                        .flags = flags,
                        .close_a = s2c[1],
                        .close_b = c2s[0]};
    pid_t ps = p_fork("server", run_role, &ls);
    pid_t pc = p_fork("client", run_role, &lc);
    close(s2c[0]);
    close(s2c[1]);
    close(c2s[0]);
    close(c2s[1]);
    bool ok = true, s_done = false, c_done = false;
    while (!s_done || !c_done) {
        int st;
        pid_t w = waitpid(-1, &st, 0);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            FAILF("waitpid: %s", p_errname(errno));
        }
        if (w != ps && w != pc)
            continue;
        bool good = report_status(st, w == ps ? "server" : "client");
        if (w == ps)
            s_done = true;
        else
            c_done = true;
        if (!good) {
            ok = false;
            if (!s_done)
                kill(ps, SIGKILL);
            if (!c_done)
                kill(pc, SIGKILL);
        }
    }
    if (ok && !(flags & P_NO_STATS) && !kernel_mode) {
        if (flags & P_SERVER_PLAIN)
            ok &= check_no_record(ps, "server");
        else if (flags & P_SERVER_OWN_PORT)
            ; /* the role checked its own process's */
        else if (flags & (P_CARRIED | P_SERVER_KERNEL))
            ok &= check_record(ps, "server", flags & P_CARRIED, flags & P_SERVER_KERNEL, false,
                               false, flags & P_MIGRATED);
        if (flags & P_CLIENT_PLAIN)
            ok &= check_no_record(pc, "client");
        else if (flags & (P_CARRIED | P_CLIENT_KERNEL | P_CLIENT_FELLBACK | P_CLIENT_REDIRECTED))
            ok &= check_record(pc, "client", flags & (P_CARRIED | P_CLIENT_REDIRECTED),
                               flags & P_CLIENT_KERNEL, flags & P_CLIENT_FELLBACK,
                               flags & P_CLIENT_REDIRECTED, flags & P_MIGRATED);
    }
    alarm(0);
    min_carried = 1;
    want_server_bytes = false;
    p_log("%s", ok ? "ok" : "FAILED");
    if (ok)
        passed++;
    else
        failed++;
    case_name = "";
}

void p_expect_carried(unsigned n)
{
    min_carried = n;
}

void p_expect_server_bytes(unsigned long long sent, unsigned long long received)
{
    want_server_bytes = true;
    server_sent = sent;
    server_received = received;
}

bool p_asan(void)
{
#ifdef __SANITIZE_ADDRESS__
    return true;
#else
    return false;
#endif
}

bool p_tsan(void)
{
#ifdef __SANITIZE_THREAD__
    return true;
#else
    return false;
#endif
}

void p_case_forking(const char *name, p_role_fn server, p_role_fn client, int expect)
{
    if (p_asan())
        p_case_skip(name, "ASan: forked children start threads");
    else
        p_case(name, server, client, expect);
}

void p_case_skip(const char *name, const char *why)
{
    if (!p_selected(name))
        return;
    case_name = name;
    p_log("SKIP: %s", why);
    case_name = "";
    min_carried = 1;
    want_server_bytes = false;
    skipped++;
}

void p_case_known_bug(const char *name, p_role_fn server, p_role_fn client, int flags,
                      const char *bug)
{
    if (!p_selected(name))
        return;
    if (known_bugs_on() || kernel_mode) {
        p_case(name, server, client, flags);
        return;
    }
    char why[1024];
    snprintf(why, sizeof why, "known bug (PRELOAD_TEST_KNOWN_BUGS=1 runs it): %s", bug);
    p_case_skip(name, why);
}

/* ---- Running without the preload --------------------------------------------- */

/* Re-executes this test as `what` of the current role: with or without
 * the preload, passing one extra argument (a descriptor number, say). */
__attribute__((noreturn)) static void exec_role(struct p_role *r, const char *what,
                                               bool preloaded, const char *extra)
{
    if (fcntl(r->to_peer, F_SETFD, 0) < 0 || fcntl(r->from_peer, F_SETFD, 0) < 0)
        FAILF("fcntl(F_SETFD): %s", p_errname(errno));
    char a_to[16], a_from[16], a_port[16];
    snprintf(a_to, sizeof a_to, "%d", r->to_peer);
    snprintf(a_from, sizeof a_from, "%d", r->from_peer);
    snprintf(a_port, sizeof a_port, "%d", r->port);
    char *argv[] = {(char *)test_name, preloaded ? "--again" : "--plain", (char *)what,
                    (char *)r->role, (char *)case_name, a_to, a_from, a_port,
                    (char *)(extra ? extra : ""), NULL};
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 1, sizeof(*env));
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (preloaded || strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
            env[k++] = environ[i];
    env[k] = NULL;
    execve("/proc/self/exe", argv, env);
    FAILF("execve: %s", p_errname(errno));
}

void p_exec_plain(struct p_role *r, const char *what)
{
    exec_role(r, what, false, NULL);
}

void p_exec_plain_extra(struct p_role *r, const char *what, const char *extra)
{
    exec_role(r, what, false, extra);
}

void p_exec_again(struct p_role *r, const char *what, const char *extra)
{
    exec_role(r, what, true, extra);
}

const char *p_plain_role(int argc, char **argv, struct p_role *r)
{
    return p_exec_role(argc, argv, r, NULL);
}

const char *p_exec_role(int argc, char **argv, struct p_role *r, const char **extra)
{
    if (argc != 9 || (strcmp(argv[1], "--plain") != 0 && strcmp(argv[1], "--again") != 0))
        return NULL;
    bool preloaded = strcmp(argv[1], "--again") == 0;
    kernel_mode = getenv("PRELOAD_TEST_KERNEL") && strcmp(getenv("PRELOAD_TEST_KERNEL"), "1") == 0;
    test_name = argv[0];
    role_name = argv[3];
    case_name = argv[4];
    is_child = true;
    main_pid = -1; /* never remove the stat log from here */
    setvbuf(stdout, NULL, _IONBF, 0);
    if (!preloaded && p_preloaded())
        FAILF("re-executed without LD_PRELOAD, but the preload is loaded");
    if (preloaded && !p_preloaded() && !kernel_mode)
        FAILF("re-executed with LD_PRELOAD, but the preload is not loaded");
    *r = (struct p_role){.role = argv[3],
                         .lfd = -1,
                         .to_peer = atoi(argv[5]),
                         .from_peer = atoi(argv[6]),
                         .port = atoi(argv[7])};
    if (extra)
        *extra = argv[8];
    /* the watchdog and the parent-death signal survive execve */
    return argv[2];
}

/* ---- Stat log ---------------------------------------------------------------------- */

static bool field(const char *line, const char *key, unsigned long long *v)
{
    char pat[40];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(line, pat);
    if (!p)
        return false;
    *v = strtoull(p + strlen(pat), NULL, 10);
    return true;
}

bool p_stat_of(pid_t pid, struct p_stat *st)
{
    /* the harness's own name first: a role may have cleared its environment */
    const char *path = stat_path[0] ? stat_path : getenv("SOVIA_STAT_LOG");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f)
        return false;
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long long v[7];
        if (!field(line, "pid", &v[0]) || (pid_t)v[0] != pid)
            continue;
        if (!field(line, "carried", &v[1]) || !field(line, "fell_back", &v[2]) ||
            !field(line, "kernel", &v[3]) || !field(line, "redirected", &v[4]) ||
            !field(line, "bytes_sent", &v[5]) || !field(line, "bytes_received", &v[6]))
            continue;
        unsigned long long sig, mig, sh;
        *st = (struct p_stat){(int)v[0], (unsigned)v[1], (unsigned)v[2], (unsigned)v[3],
                              (unsigned)v[4], v[5], v[6],
                              field(line, "signal", &sig) ? (int)sig : -1,
                              field(line, "migrated", &mig) ? (unsigned)mig : 0,
                              field(line, "short", &sh) ? (unsigned)sh : 0};
        found = true;
    }
    fclose(f);
    return found;
}

/* ---- Sockets ----------------------------------------------------------------- */

struct sockaddr_in p_loopback(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

int p_listener(int *port)
{
    int fd = (int)SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    int one = 1;
    SYS(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one));
    struct sockaddr_in a = p_loopback(0);
    /* bind(0) takes its port from the ephemeral range, whose half that it
     * scans other tests' connections can fill for a while (tens of
     * thousands in TIME_WAIT: EADDRINUSE in 29 forkstress runs of 30):
     * then a port below that range. */
    for (unsigned i = 0; bind(fd, (struct sockaddr *)&a, sizeof a) != 0; i++) {
        if (errno != EADDRINUSE || i == 2000)
            FAILF("bind: %s", p_errname(errno));
        a = p_loopback(20000 + (getpid() * 7 + (int)i * 13) % 12000);
    }
    SYS(listen(fd, 64));
    socklen_t len = sizeof a;
    SYS(getsockname(fd, (struct sockaddr *)&a, &len));
    *port = ntohs(a.sin_port);
    return fd;
}

int p_free_port(void)
{
    int fd = (int)SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    struct sockaddr_in a = p_loopback(0);
    SYS(bind(fd, (struct sockaddr *)&a, sizeof a));
    socklen_t len = sizeof a;
    SYS(getsockname(fd, (struct sockaddr *)&a, &len));
    close(fd);
    return ntohs(a.sin_port);
}

int p_connect(int port)
{
    int fd = (int)SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    struct sockaddr_in a = p_loopback(port);
    SYS(connect(fd, (struct sockaddr *)&a, sizeof a));
    return fd;
}

void p_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, p + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            FAILF("write(%d, %zu) after %zu bytes: %zd (errno %s)", fd, len - done, done, n,
                  p_errname(errno));
        done += (size_t)n;
    }
}

void p_read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t n = read(fd, p + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0)
            FAILF("read(%d): end of stream after %zu of %zu bytes", fd, done, len);
        if (n < 0)
            FAILF("read(%d) after %zu of %zu bytes: %s", fd, done, len, p_errname(errno));
        done += (size_t)n;
    }
}

/* ---- Data --------------------------------------------------------------------- */

void p_fill(void *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    unsigned char *p = buf;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)(x >> 24);
    }
}

#define P_ECHO_CHUNK 65536

void p_echo_serve(int fd)
{
    char *buf = malloc(P_ECHO_CHUNK);
    CHECK(buf != NULL);
    ssize_t n;
    while ((n = SYS(read(fd, buf, P_ECHO_CHUNK))) > 0)
        p_write_all(fd, buf, (size_t)n);
    free(buf);
    SYS(close(fd));
}

void p_exchange(int fd, size_t len, uint64_t seed)
{
    char *out = calloc(1, len + 1), *in = malloc(len + 1);
    CHECK(out && in);
    p_fill(out, len, seed);
    p_write_all(fd, out, len);
    p_read_all(fd, in, len);
    if (memcmp(in, out, len) != 0)
        FAILF("the echo of request %llu differs", (unsigned long long)seed);
    free(out);
    free(in);
}

void p_echo_check(int fd, size_t bytes, uint64_t seed)
{
    char *out = malloc(bytes ? bytes : 1), *in = malloc(P_ECHO_CHUNK);
    CHECK(out && in);
    p_fill(out, bytes, seed);
    for (size_t off = 0; off < bytes; off += P_ECHO_CHUNK) {
        size_t len = bytes - off < P_ECHO_CHUNK ? bytes - off : P_ECHO_CHUNK;
        p_write_all(fd, out + off, len);
        p_read_all(fd, in, len);
        if (memcmp(in, out + off, len) != 0)
            FAILF("echo differs in the chunk at %zu", off);
    }
    SYS(shutdown(fd, SHUT_WR));
    char c;
    CHECK_EQ(read(fd, &c, 1), 0);
    SYS(close(fd));
    free(out);
    free(in);
}

/* ---- What a process holds --------------------------------------------------- */

/* Entries of a /proc directory; with `memfds`, how many link to a memfd. */
static int proc_entries(const char *dir, int *memfds)
{
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        n++;
        char path[300], to[64];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ssize_t k = memfds ? readlink(path, to, sizeof to - 1) : -1;
        if (k > 0 && (to[k] = '\0', strncmp(to, "/memfd:", 7) == 0))
            (*memfds)++;
    }
    closedir(d);
    return n;
}

struct p_held p_held_now(void)
{
    struct p_held h = {0};
    h.fds = proc_entries("/proc/self/fd", &h.memfds);
    h.threads = proc_entries("/proc/self/task", NULL);
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    char line[512];
    while (fgets(line, sizeof line, f))
        h.maps += strstr(line, "/memfd:") != NULL;
    fclose(f);
    return h;
}

bool p_held_equal(const struct p_held *a, const struct p_held *b)
{
    return memcmp(a, b, sizeof *a) == 0;
}

uint64_t p_hash(uint64_t h, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

void p_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

double p_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int p_temp_file(size_t len, uint64_t seed)
{
    char path[] = "/tmp/preload-test-file-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        FAILF("mkstemp: %s", p_errname(errno));
    unlink(path);
    char *buf = malloc(len ? len : 1);
    CHECK(buf != NULL);
    p_fill(buf, len, seed);
    p_write_all(fd, buf, len);
    free(buf);
    SYS(lseek(fd, 0, SEEK_SET));
    return fd;
}
