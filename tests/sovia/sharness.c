/* sharness.c - see sharness.h. */
#include "sharness.h"

#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_MAX_PROCS 1100
#define S_CHAN_TIMEOUT_MS 30000

_Thread_local long long s_rv;

static const char *s_name = "test";
static const char *s_rolename = "main";
static const char *s_casename = "";
static unsigned s_watchdog_s = 60;
static int s_child;

static struct {
    pid_t pid;
    const char *role;
    int chan; /* parent's end, or -1 */
    int reaped;
    int expect_kill;
} *s_procs;
static int s_nprocs;

/* ---- Reporting ----------------------------------------------------------- */

const char *s_role(void)
{
    return s_rolename;
}

const char *s_errname(int e)
{
    if (e == 0)
        return "0";
    const char *n = strerrorname_np(e);
    return n ? n : "E?";
}

void s_log(const char *fmt, ...)
{
    char buf[1024];
    int n = 0;
    if (s_casename[0])
        n = snprintf(buf, sizeof buf, "[%s/%s %s] ", s_name, s_casename, s_rolename);
    else
        n = snprintf(buf, sizeof buf, "[%s %s] ", s_name, s_rolename);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof buf)
        n += vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf - 1)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(1, buf, (size_t)n); /* one write: lines of processes don't mix */
    (void)w;
}

static void s_kill_procs(int report)
{
    for (int i = 0; i < s_nprocs; i++) {
        if (s_procs[i].reaped)
            continue;
        int st = 0;
        pid_t r = 0;
        /* A role that already failed gets a moment to finish its report. */
        for (int k = 0; k < 20 && r == 0; k++) {
            r = waitpid(s_procs[i].pid, &st, WNOHANG);
            if (r == 0)
                s_sleep_ms(5);
        }
        if (r == 0) {
            kill(s_procs[i].pid, SIGKILL);
            r = waitpid(s_procs[i].pid, &st, 0);
        }
        s_procs[i].reaped = 1;
        if (r == s_procs[i].pid && report) {
            if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
                fprintf(stderr, "[%s] role %s (pid %d) exited with status %d\n", s_name,
                        s_procs[i].role, (int)s_procs[i].pid, WEXITSTATUS(st));
            else if (WIFSIGNALED(st) && WTERMSIG(st) != SIGKILL)
                fprintf(stderr, "[%s] role %s (pid %d) died of signal %d (%s)\n", s_name,
                        s_procs[i].role, (int)s_procs[i].pid, WTERMSIG(st),
                        strsignal(WTERMSIG(st)));
        }
    }
}

void s_fail(const char *file, int line, const char *fmt, ...)
{
    char buf[2048];
    int n = 0;
    if (s_casename[0])
        n = snprintf(buf, sizeof buf, "[%s/%s %s] FAIL %s:%d: ", s_name, s_casename,
                     s_rolename, file, line);
    else
        n = snprintf(buf, sizeof buf, "[%s %s] FAIL %s:%d: ", s_name, s_rolename, file, line);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof buf)
        n += vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf - 1)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
    s_kill_procs(1);
    _exit(1);
}

void s_pass(void)
{
    s_wait_all();
    s_casename = "";
    s_log("PASS");
    exit(0);
}

static void s_watchdog(int sig)
{
    (void)sig;
    char buf[256];
    int n = snprintf(buf, sizeof buf,
                     "[%s/%s %s] FAIL watchdog: not finished within %u s, killing it\n",
                     s_name, s_casename, s_rolename, s_watchdog_s);
    ssize_t w = write(2, buf, n > 0 ? (size_t)n : 0);
    (void)w;
    for (int i = 0; i < s_nprocs; i++)
        if (!s_procs[i].reaped)
            kill(s_procs[i].pid, SIGKILL);
    _exit(2);
}

static void s_arm_watchdog(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_watchdog;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    alarm(s_watchdog_s);
}

void s_init(const char *name, unsigned watchdog_seconds)
{
    s_name = name;
    s_watchdog_s = watchdog_seconds ? watchdog_seconds : 60;
    setvbuf(stdout, NULL, _IONBF, 0);
    setvbuf(stderr, NULL, _IONBF, 0);
    s_procs = calloc(S_MAX_PROCS, sizeof *s_procs);
    if (!s_procs)
        abort();
    s_arm_watchdog();
}

int s_case(const char *name)
{
    /* Kept in a copy: callers pass names they format on their stack. */
    static char name_copy[128];
    const char *only = getenv("SOVIA_TEST_CASES");
    s_casename = "";
    if (only && *only) {
        size_t n = strlen(name);
        const char *p = only;
        int found = 0;
        while (*p && !found) {
            const char *e = strchr(p, ',');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            found = len == n && strncmp(p, name, n) == 0;
            p = e ? e + 1 : p + len;
        }
        if (!found)
            return 0;
    }
    snprintf(name_copy, sizeof name_copy, "%s", name);
    s_casename = name_copy;
    s_log("case %s", s_casename);
    return 1;
}

int s_is_child(void)
{
    return s_child;
}

long long s_sys_check(long long r, int err, const char *what, const char *file, int line)
{
    if (r < 0)
        s_fail(file, line, "%s returned %lld (errno %s: %s)", what, r, s_errname(err),
               strerror(err));
    return r;
}

/* ---- Time -------------------------------------------------------------------- */

double s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

void s_sleep_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static timer_t s_guard_timer;
static pid_t s_guard_owner;
static const char *volatile s_guard_what;
static volatile unsigned s_guard_ms;

static void s_guard_fire(int sig)
{
    (void)sig;
    char buf[384];
    int n = snprintf(buf, sizeof buf, "[%s/%s %s] FAIL guard expired: %s did not return within %u ms\n",
                     s_name, s_casename, s_rolename, s_guard_what ? s_guard_what : "?",
                     s_guard_ms);
    ssize_t w = write(2, buf, n > 0 ? (size_t)n : 0);
    (void)w;
    for (int i = 0; i < s_nprocs; i++)
        if (!s_procs[i].reaped)
            kill(s_procs[i].pid, SIGKILL);
    _exit(1);
}

void s_guard(unsigned ms, const char *what)
{
    if (s_guard_owner != getpid()) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = s_guard_fire;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGRTMIN + 3, &sa, NULL);
        struct sigevent sev;
        memset(&sev, 0, sizeof sev);
        sev.sigev_notify = SIGEV_SIGNAL;
        sev.sigev_signo = SIGRTMIN + 3;
        CHECK_MSG(timer_create(CLOCK_MONOTONIC, &sev, &s_guard_timer) == 0,
                  "timer_create: %s", strerror(errno));
        s_guard_owner = getpid();
    }
    s_guard_what = what;
    s_guard_ms = ms;
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    its.it_value.tv_sec = ms / 1000;
    its.it_value.tv_nsec = (long)(ms % 1000) * 1000000L;
    CHECK(timer_settime(s_guard_timer, 0, &its, NULL) == 0);
}

void s_unguard(void)
{
    if (s_guard_owner != getpid())
        return;
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    CHECK(timer_settime(s_guard_timer, 0, &its, NULL) == 0);
}

/* ---- Processes ------------------------------------------------------------- */

static void s_child_setup(const char *role, pid_t parent, int keep_fd, int close_fd)
{
    s_child = 1;
    s_rolename = role;
    for (int i = 0; i < s_nprocs; i++)
        if (!s_procs[i].reaped && s_procs[i].chan >= 0)
            close(s_procs[i].chan);
    s_nprocs = 0;
    if (close_fd >= 0 && close_fd != keep_fd)
        close(close_fd);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(3);
    s_arm_watchdog();
}

static int s_register(const char *role, pid_t pid, int chan)
{
    CHECK_MSG(s_nprocs < S_MAX_PROCS, "too many roles");
    int id = s_nprocs++;
    s_procs[id].pid = pid;
    s_procs[id].role = role;
    s_procs[id].chan = chan;
    s_procs[id].reaped = 0;
    s_procs[id].expect_kill = 0;
    return id;
}

int s_spawn(const char *role, s_fn fn, void *arg, int *parent_chan)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    pid_t parent = getpid();
    pid_t pid = fork();
    CHECK_MSG(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        s_child_setup(role, parent, sv[1], sv[0]);
        fn(sv[1], arg);
        close(sv[1]);
        exit(0);
    }
    close(sv[1]);
    if (parent_chan) {
        *parent_chan = sv[0];
        return s_register(role, pid, sv[0]);
    }
    close(sv[0]);
    return s_register(role, pid, -1);
}

void s_spawn_pair(const char *role_a, s_fn fa, const char *role_b, s_fn fb, void *arg)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    pid_t parent = getpid();
    pid_t a = fork();
    CHECK_MSG(a >= 0, "fork: %s", strerror(errno));
    if (a == 0) {
        s_child_setup(role_a, parent, sv[0], sv[1]);
        fa(sv[0], arg);
        close(sv[0]);
        exit(0);
    }
    s_register(role_a, a, -1);
    pid_t b = fork();
    CHECK_MSG(b >= 0, "fork: %s", strerror(errno));
    if (b == 0) {
        s_child_setup(role_b, parent, sv[1], sv[0]);
        fb(sv[1], arg);
        close(sv[1]);
        exit(0);
    }
    s_register(role_b, b, -1);
    close(sv[0]);
    close(sv[1]);
}

void s_run_pair(const char *role_a, s_fn fa, const char *role_b, s_fn fb, void *arg)
{
    s_spawn_pair(role_a, fa, role_b, fb, arg);
    s_wait_all();
}

void s_run_solo(const char *role, s_fn fn, void *arg)
{
    s_spawn(role, fn, arg, NULL);
    s_wait_all();
}

pid_t s_pid(int id)
{
    CHECK(id >= 0 && id < s_nprocs);
    return s_procs[id].pid;
}

void s_expect_kill(int id)
{
    CHECK(id >= 0 && id < s_nprocs);
    s_procs[id].expect_kill = 1;
}

void s_kill(int id)
{
    s_expect_kill(id);
    kill(s_procs[id].pid, SIGKILL);
}

static void s_check_status(int i, int st)
{
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (s_procs[i].expect_kill && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
        ok = 1;
    if (!ok) {
        if (WIFEXITED(st))
            FAILF("role %s (pid %d) failed with exit status %d (its messages are above)",
                  s_procs[i].role, (int)s_procs[i].pid, WEXITSTATUS(st));
        FAILF("role %s (pid %d) died of signal %d (%s)", s_procs[i].role, (int)s_procs[i].pid,
              WTERMSIG(st), strsignal(WTERMSIG(st)));
    }
}

void s_reap(int id)
{
    CHECK(id >= 0 && id < s_nprocs && !s_procs[id].reaped);
    double t0 = s_now_ms();
    int st = 0;
    for (;;) {
        pid_t r = waitpid(s_procs[id].pid, &st, WNOHANG);
        if (r == s_procs[id].pid)
            break;
        CHECK_MSG(r == 0, "waitpid(%d): %s", (int)s_procs[id].pid, strerror(errno));
        CHECK_MSG(s_now_ms() - t0 < 20000, "role %s (pid %d) did not exit within 20 s",
                  s_procs[id].role, (int)s_procs[id].pid);
        s_sleep_ms(1);
    }
    s_procs[id].reaped = 1;
    if (s_procs[id].chan >= 0)
        close(s_procs[id].chan);
    s_check_status(id, st);
}

void s_wait_all(void)
{
    for (;;) {
        int left = 0;
        for (int i = 0; i < s_nprocs; i++) {
            if (s_procs[i].reaped)
                continue;
            int st = 0;
            pid_t r = waitpid(s_procs[i].pid, &st, WNOHANG);
            if (r == 0) {
                left++;
                continue;
            }
            CHECK_MSG(r == s_procs[i].pid, "waitpid(%d): %s", (int)s_procs[i].pid,
                      strerror(errno));
            s_procs[i].reaped = 1;
            if (s_procs[i].chan >= 0)
                close(s_procs[i].chan);
            s_check_status(i, st);
        }
        if (!left)
            break;
        s_sleep_ms(2);
    }
    /* Forget reaped roles so a test can run many cases. */
    s_nprocs = 0;
}

/* ---- Channel ----------------------------------------------------------------- */

void s_put(int chan, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    while (len) {
        ssize_t w = send(chan, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        CHECK_MSG(w > 0, "channel send failed: %s", strerror(errno));
        p += w;
        len -= (size_t)w;
    }
}

void s_get(int chan, void *buf, size_t len)
{
    unsigned char *p = buf;
    double t0 = s_now_ms();
    while (len) {
        struct pollfd pfd = {chan, POLLIN, 0};
        int r = poll(&pfd, 1, 200);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0) {
            CHECK_MSG(s_now_ms() - t0 < S_CHAN_TIMEOUT_MS,
                      "no message on the channel within %d ms", S_CHAN_TIMEOUT_MS);
            continue;
        }
        ssize_t n = recv(chan, p, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        CHECK_MSG(n > 0, "the other role went away (%s)", n == 0 ? "EOF" : strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

void s_put_u64(int chan, uint64_t v)
{
    s_put(chan, &v, sizeof v);
}

uint64_t s_get_u64(int chan)
{
    uint64_t v;
    s_get(chan, &v, sizeof v);
    return v;
}

void s_put_f64(int chan, double v)
{
    s_put(chan, &v, sizeof v);
}

double s_get_f64(int chan)
{
    double v;
    s_get(chan, &v, sizeof v);
    return v;
}

void s_tok(int chan, char token)
{
    s_put(chan, &token, 1);
}

void s_want(int chan, char token)
{
    char got = 0;
    s_get(chan, &got, 1);
    CHECK_MSG(got == token, "sync: got token '%c', expected '%c'", got, token);
}

/* ---- Sockets --------------------------------------------------------------- */

void s_addr4(struct sockaddr_in *a, uint16_t port)
{
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

void s_addr6(struct sockaddr_in6 *a, uint16_t port)
{
    memset(a, 0, sizeof *a);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    a->sin6_addr = in6addr_loopback;
}

int s_socket(int family, int extra_type)
{
    return (int)SYS(sov_socket(family, SOCK_VIA | extra_type, 0));
}

static void s_bind_loop(int fd, int family, uint16_t port)
{
    if (family == AF_INET6) {
        struct sockaddr_in6 a;
        s_addr6(&a, port);
        SYS(sov_bind(fd, (struct sockaddr *)&a, sizeof a));
    } else {
        struct sockaddr_in a;
        s_addr4(&a, port);
        SYS(sov_bind(fd, (struct sockaddr *)&a, sizeof a));
    }
}

int s_listener(int family, uint16_t *port, int backlog)
{
    int fd = s_socket(family, 0);
    s_bind_loop(fd, family, 0);
    SYS(sov_listen(fd, backlog));
    *port = s_local_port(fd);
    CHECK_MSG(*port != 0, "listening socket has port 0");
    return fd;
}

int s_connect(int family, uint16_t port)
{
    int fd = s_socket(family, 0);
    if (family == AF_INET6) {
        struct sockaddr_in6 a;
        s_addr6(&a, port);
        SYS(sov_connect(fd, (struct sockaddr *)&a, sizeof a));
    } else {
        struct sockaddr_in a;
        s_addr4(&a, port);
        SYS(sov_connect(fd, (struct sockaddr *)&a, sizeof a));
    }
    return fd;
}

int s_accept(int lfd)
{
    return (int)SYS(sov_accept(lfd, NULL, NULL));
}

static uint16_t s_port_of(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    CHECK_EQ(ss->ss_family, AF_INET);
    return ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

uint16_t s_local_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    memset(&ss, 0, sizeof ss);
    SYS(sov_getsockname(fd, (struct sockaddr *)&ss, &len));
    return s_port_of(&ss);
}

uint16_t s_peer_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    memset(&ss, 0, sizeof ss);
    SYS(sov_getpeername(fd, (struct sockaddr *)&ss, &len));
    return s_port_of(&ss);
}

void s_send_all(int fd, const void *buf, size_t len, int flags)
{
    const unsigned char *p = buf;
    size_t done = 0;
    while (done < len) {
        errno = 0;
        ssize_t w = sov_send(fd, p + done, len - done, flags);
        CHECK_MSG(w > 0, "sov_send(%zu bytes) at %zu of %zu returned %zd (errno %s)",
                  len - done, done, len, w, s_errname(errno));
        CHECK_MSG((size_t)w <= len - done, "sov_send returned %zd > %zu", w, len - done);
        done += (size_t)w;
    }
}

void s_recv_all(int fd, void *buf, size_t len)
{
    unsigned char *p = buf;
    size_t done = 0;
    while (done < len) {
        errno = 0;
        ssize_t n = sov_recv(fd, p + done, len - done, 0);
        CHECK_MSG(n > 0, "sov_recv at byte %zu of %zu returned %zd (errno %s)", done, len, n,
                  n < 0 ? s_errname(errno) : "-");
        CHECK_MSG((size_t)n <= len - done, "sov_recv returned %zd > %zu", n, len - done);
        done += (size_t)n;
    }
}

void s_recv_eof(int fd)
{
    char c;
    errno = 0;
    ssize_t n = sov_recv(fd, &c, 1, 0);
    CHECK_MSG(n == 0, "expected end of stream (0), sov_recv returned %zd (errno %s)", n,
              n < 0 ? s_errname(errno) : "-");
}

void s_send_pattern(int fd, uint64_t seed, uint64_t pos, size_t len, int flags)
{
    size_t chunk = len < 65536 ? len : 65536;
    unsigned char *buf = malloc(chunk ? chunk : 1);
    CHECK(buf != NULL);
    size_t done = 0;
    while (done < len) {
        size_t n = len - done < chunk ? len - done : chunk;
        s_pattern_fill(buf, n, seed, pos + done);
        s_send_all(fd, buf, n, flags);
        done += n;
    }
    free(buf);
}

void s_recv_pattern(int fd, uint64_t seed, uint64_t pos, size_t len)
{
    size_t chunk = 65536;
    unsigned char *buf = malloc(chunk);
    CHECK(buf != NULL);
    size_t done = 0;
    while (done < len) {
        size_t want = len - done < chunk ? len - done : chunk;
        errno = 0;
        ssize_t n = sov_recv(fd, buf, want, 0);
        CHECK_MSG(n > 0, "sov_recv at byte %zu of %zu returned %zd (errno %s)", done, len, n,
                  n < 0 ? s_errname(errno) : "-");
        CHECK_MSG((size_t)n <= want, "sov_recv returned %zd > %zu", n, want);
        long bad = s_pattern_check(buf, (size_t)n, seed, pos + done);
        CHECK_MSG(bad < 0, "data mismatch at stream byte %llu: got 0x%02x, expected 0x%02x",
                  (unsigned long long)(pos + done + (size_t)bad), buf[bad],
                  s_pattern_byte(seed, pos + done + (size_t)bad));
        done += (size_t)n;
    }
    free(buf);
}

void s_use_label(const char *label)
{
    struct sov_config c;
    SYS(sov_get_config(&c));
    SYS(sov_config_label(&c, label));
    SYS(sov_set_config(&c));
}

void s_raise_nofile(unsigned long want)
{
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_cur >= want)
        return;
    CHECK_MSG(rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want,
              "RLIMIT_NOFILE hard limit %llu < %lu", (unsigned long long)rl.rlim_max, want);
    rl.rlim_cur = want;
    CHECK_MSG(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit: %s", strerror(errno));
}

void s_ignore_sigpipe(void)
{
    signal(SIGPIPE, SIG_IGN);
}

/* ---- Data -------------------------------------------------------------------- */

uint64_t s_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

uint64_t s_rand(uint64_t *state)
{
    *state += 0x9e3779b97f4a7c15ULL;
    uint64_t x = *state;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

uint64_t s_rand_range(uint64_t *state, uint64_t lo, uint64_t hi)
{
    if (hi <= lo)
        return lo;
    return lo + s_rand(state) % (hi - lo + 1);
}

uint64_t s_rand_log(uint64_t *state, uint64_t lo, uint64_t hi)
{
    if (hi <= lo)
        return lo;
    /* A power-of-two scale chosen uniformly, then a size uniform below it. */
    unsigned bits = 64u - (unsigned)__builtin_clzll(hi);
    unsigned k = (unsigned)(s_rand(state) % (bits + 1));
    uint64_t cap = k >= 63 ? hi : ((uint64_t)1 << k);
    if (cap > hi)
        cap = hi;
    if (cap < lo)
        cap = lo;
    return s_rand_range(state, lo, cap);
}

static inline uint64_t s_pattern_word(uint64_t seed, uint64_t w)
{
    return s_mix64(w ^ (seed * 0xd6e8feb86659fd93ULL));
}

unsigned char s_pattern_byte(uint64_t seed, uint64_t p)
{
    return (unsigned char)(s_pattern_word(seed, p >> 3) >> (8 * (p & 7)));
}

void s_pattern_fill(void *buf, size_t len, uint64_t seed, uint64_t pos)
{
    unsigned char *b = buf;
    size_t i = 0;
    while (i < len && ((pos + i) & 7)) {
        b[i] = s_pattern_byte(seed, pos + i);
        i++;
    }
    for (; i + 8 <= len; i += 8) {
        uint64_t w = s_pattern_word(seed, (pos + i) >> 3);
        for (int k = 0; k < 8; k++)
            b[i + (size_t)k] = (unsigned char)(w >> (8 * k));
    }
    for (; i < len; i++)
        b[i] = s_pattern_byte(seed, pos + i);
}

long s_pattern_check(const void *buf, size_t len, uint64_t seed, uint64_t pos)
{
    const unsigned char *b = buf;
    unsigned char tmp[4096];
    size_t off = 0;
    while (off < len) {
        size_t n = len - off < sizeof tmp ? len - off : sizeof tmp;
        s_pattern_fill(tmp, n, seed, pos + off);
        if (memcmp(tmp, b + off, n) != 0) {
            for (size_t i = 0; i < n; i++)
                if (tmp[i] != b[off + i])
                    return (long)(off + i);
        }
        off += n;
    }
    return -1;
}

#define S_FNV_OFFSET 0xcbf29ce484222325ULL
#define S_FNV_PRIME 0x100000001b3ULL

void s_hash_init(s_hash *h)
{
    memset(h, 0, sizeof *h);
    h->h = S_FNV_OFFSET;
}

static inline uint64_t s_hash_word(uint64_t h, uint64_t w)
{
    h ^= w;
    h *= S_FNV_PRIME;
    return h ^ (h >> 29);
}

void s_hash_update(s_hash *h, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    h->total += len;
    while (len && h->ntail) {
        h->tail[h->ntail++] = *p++;
        len--;
        if (h->ntail == 8) {
            uint64_t w;
            memcpy(&w, h->tail, 8);
            h->h = s_hash_word(h->h, w);
            h->ntail = 0;
        }
    }
    uint64_t hv = h->h;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        hv = s_hash_word(hv, w);
        p += 8;
        len -= 8;
    }
    h->h = hv;
    while (len) {
        h->tail[h->ntail++] = *p++;
        len--;
    }
}

uint64_t s_hash_final(const s_hash *h)
{
    uint64_t hv = h->h;
    for (unsigned i = 0; i < h->ntail; i++) {
        hv ^= h->tail[i];
        hv *= S_FNV_PRIME;
    }
    return s_mix64(hv ^ h->total);
}
