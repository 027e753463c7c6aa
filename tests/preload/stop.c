/*
 * stop.c - under `sovia run`, the receiver of a carried connection is
 * stopped (SIGSTOP) while the sender streams, and the sender waits on the
 * window without burning CPU (issue 6, "Faults"; hardening/faults_stop
 * makes the same checks through sov_*, this test through the ordinary
 * libc calls).
 *
 * The client role streams a pattern with send() to the server role, which
 * reads the first piece and is then stopped by a monitor process (forked
 * by the client role before it connects, so it holds no connection):
 *   - once the sender's progress (bytes send() accepted, a counter in
 *     shared memory) has stood still for 300 ms, the window is full and the
 *     sender is waiting: in send() (blocking socket), or in poll(POLLOUT)
 *     after send() said EAGAIN (O_NONBLOCK);
 *   - over the next second the sender process used less than 5% of a CPU
 *     (/proc/<pid>/stat utime + stime, all its threads: sovia's service
 *     and handler threads count) and neither its progress nor its poll()
 *     moved (a POLLOUT while the window is full would be a false report);
 *   - then SIGCONT: the receiver reads everything and checks it byte for
 *     byte, poll() reports exactly POLLOUT again, and the sender finishes;
 *   - both roles' SOVIA_STAT_LOG records show the connection carried (on
 *     kernel TCP the test would prove nothing about sovia).
 * This is a behaviour check (the sender sleeps instead of spinning), not a
 * performance measurement: a spinning sender uses ~100%.
 *
 * Cases, by the environment the preload reads (docs/SOCKETS.md,
 * "Configuration"): SOVIA_WAIT=block; adaptive (the default, also under
 * `sovia run --profile throughput`), which spins SOVIA_SPIN_US then
 * sleeps; adaptive with SOVIA_HANDLING=handler (the handler thread sleeps
 * too); the O_NONBLOCK sender in adaptive and in block. SOVIA_WAIT=poll
 * (`--profile latency`) spins by design: `poll_control` only logs its CPU
 * use.
 * PRELOAD_TEST_KERNEL=1 checks the same expectations against kernel TCP.
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pharness.h"

/* Far more than sovia's window (w x MTU = 1 MiB by default) and than what
 * loopback TCP buffers for a receiver that stopped reading early. */
#define TOTAL (48u * 1024u * 1024u)
#define PIECE (256u * 1024u)
#define STAMP 4096u      /* every STAMP bytes the stream holds its own offset */
#define STILL_MS 300     /* no progress for this long: the window is full */
#define STILL_LIMIT_MS 10000
#define MEASURE_MS 1000
#define MAX_CPU_PCT 5.0
#define POLL_LIMIT_MS 10000
#define READY 0x52454459 /* receiver -> monitor: the first piece is in */
#define GO 0x474f        /* monitor -> receiver: continued, read on */

struct stop_case {
    const char *name;
    const char *wait;     /* SOVIA_WAIT */
    const char *handling; /* SOVIA_HANDLING */
    bool nonblocking;     /* O_NONBLOCK sender: EAGAIN, then poll(POLLOUT) */
    bool assert_cpu;      /* false: the POLL control, logged only */
};

static const struct stop_case cases[] = {
    {"block", "block", "single", false, true},
    {"adaptive", "adaptive", "single", false, true},
    {"adaptive_handler", "adaptive", "handler", false, true},
    {"nonblocking", "adaptive", "single", true, true},
    {"nonblocking_block", "block", "single", true, true},
    {"poll_control", "poll", "single", false, false},
};

/* Where the sender is, as the monitor sees it. */
enum { IN_OTHER, IN_SEND, IN_POLL };

/* Written by the sender, read by the monitor (MAP_SHARED, made by main). */
struct progress {
    _Atomic uint64_t sent;   /* bytes send() accepted */
    _Atomic int where;
    _Atomic unsigned eagains; /* sends that said EAGAIN */
    _Atomic unsigned polls;   /* poll() calls that returned */
};

static struct progress *sh;
static const struct stop_case *cur;

/* ---- The stream ------------------------------------------------------------------ */

/* The piece at stream offset `pos`: one fixed random block, with the
 * stream offset written over it every STAMP bytes, so that a lost, doubled
 * or misplaced packet shows as well as a changed byte (and the check costs
 * a memcmp, not a generator run, even under the sanitizers). */
static void piece_at(uint8_t *out, uint64_t pos)
{
    static uint8_t base[PIECE];
    static bool made;
    if (!made) {
        p_fill(base, PIECE, 0x570b);
        made = true;
    }
    memcpy(out, base, PIECE);
    for (uint64_t off = 0; off < PIECE; off += STAMP) {
        uint64_t at = pos + off;
        memcpy(out + off, &at, sizeof at);
    }
}

static void read_piece(int fd, uint64_t pos, uint8_t *in, uint8_t *want)
{
    p_read_all(fd, in, PIECE);
    piece_at(want, pos);
    if (memcmp(in, want, PIECE) != 0) {
        size_t i = 0;
        while (in[i] == want[i])
            i++;
        FAILF("the stream differs at byte %llu: 0x%02x, want 0x%02x",
              (unsigned long long)(pos + i), in[i], want[i]);
    }
}

/* ---- /proc -------------------------------------------------------------------------- */

/* A process's state letter and its CPU time so far (utime + stime, ms). */
static char proc_state(pid_t pid, double *cpu_ms)
{
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        FAILF("%s: %s", path, p_errname(errno));
    bool got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    /* The command name may hold spaces and parentheses: fields count from
     * the last ')'. After it: state (3), ..., utime (14), stime (15). */
    char *p = got ? strrchr(line, ')') : NULL;
    char state = 0;
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &state, &ut,
                     &st) != 3)
        FAILF("%s: cannot parse \"%s\"", path, line);
    if (cpu_ms)
        *cpu_ms = (double)(ut + st) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
    return state;
}

/* ---- The monitor (forked by the client role before it connects) ----------------- */

static pid_t receiver_pid;
static bool monitor_done;

/* A monitor that fails leaves no stopped receiver behind: it kills it, the
 * harness then ends the case at once instead of at the watchdog. */
static void monitor_exit(void)
{
    if (receiver_pid > 0 && !monitor_done)
        kill(receiver_pid, SIGKILL);
}

/* The sender's progress once it stood still for STILL_MS. */
static uint64_t wait_still(void)
{
    uint64_t last = atomic_load(&sh->sent);
    double still = p_now_ms(), end = still + STILL_LIMIT_MS;
    while (p_now_ms() - still < STILL_MS) {
        if (p_now_ms() > end)
            FAILF("the sender never stopped: %llu bytes sent to a stopped receiver",
                  (unsigned long long)atomic_load(&sh->sent));
        p_sleep_ms(20);
        uint64_t now = atomic_load(&sh->sent);
        if (now != last) {
            last = now;
            still = p_now_ms();
        }
    }
    return last;
}

static void monitor(void *arg)
{
    struct p_role *r = arg;
    pid_t spid = getppid();
    receiver_pid = (pid_t)p_get_int(r);
    atexit(monitor_exit);
    CHECK_EQ(p_get_int(r), READY);
    SYS(kill(receiver_pid, SIGSTOP));
    double end = p_now_ms() + 1000;
    while (proc_state(receiver_pid, NULL) != 'T') {
        if (p_now_ms() > end)
            FAILF("the receiver (pid %d) did not stop", (int)receiver_pid);
        p_sleep_ms(1);
    }
    uint64_t last = wait_still();
    if (last >= TOTAL)
        FAILF("the sender finished while the receiver was stopped");
    int want = cur->nonblocking ? IN_POLL : IN_SEND;
    if (atomic_load(&sh->where) != want)
        FAILF("the sender stood still at %llu bytes outside %s", (unsigned long long)last,
              cur->nonblocking ? "poll()" : "send()");
    unsigned eagains = atomic_load(&sh->eagains), polls = atomic_load(&sh->polls);
    if (cur->nonblocking && eagains == 0)
        FAILF("the non-blocking sender is in poll() but send() never said EAGAIN");
    double c0, c1, w0 = p_now_ms();
    proc_state(spid, &c0);
    p_sleep_ms(MEASURE_MS);
    proc_state(spid, &c1);
    double w1 = p_now_ms(), pct = 100.0 * (c1 - c0) / (w1 - w0);
    p_log("sender waiting in %s at %llu bytes (%u EAGAIN): %.1f%% of a CPU over %.0f ms "
          "(%.0f ms CPU)%s",
          cur->nonblocking ? "poll" : "send", (unsigned long long)last, eagains, pct, w1 - w0,
          c1 - c0, cur->assert_cpu ? "" : ", not asserted (the POLL mode spins by design)");
    if (atomic_load(&sh->sent) != last)
        FAILF("the sender made progress while the receiver was stopped: %llu -> %llu bytes",
              (unsigned long long)last, (unsigned long long)atomic_load(&sh->sent));
    if (cur->assert_cpu && pct >= MAX_CPU_PCT)
        FAILF("a sender waiting on the window used %.1f%% of a CPU (want < %.0f%%)", pct,
              MAX_CPU_PCT);
    /* Up to the SIGCONT: poll() never returned, the sender never left. */
    if (atomic_load(&sh->polls) != polls || atomic_load(&sh->where) != want)
        FAILF("the sender %s while the receiver was stopped (%u poll returns, %u EAGAIN)",
              cur->nonblocking ? "left poll()" : "left send()", atomic_load(&sh->polls) - polls,
              atomic_load(&sh->eagains) - eagains);
    SYS(kill(receiver_pid, SIGCONT));
    monitor_done = true;
    p_put_int(r, GO);
}

/* ---- The roles ---------------------------------------------------------------------- */

static void receiver(struct p_role *r)
{
    p_put_int(r, getpid());
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    uint8_t *in = malloc(PIECE), *want = malloc(PIECE);
    CHECK(in && want);
    read_piece(fd, 0, in, want);
    p_put_int(r, READY); /* the monitor stops us now */
    CHECK_EQ(p_get_int(r), GO);
    for (uint64_t pos = PIECE; pos < TOTAL; pos += PIECE)
        read_piece(fd, pos, in, want);
    char c;
    CHECK_EQ(read(fd, &c, 1), 0);
    SYS(close(fd));
    SYS(close(r->lfd));
    free(in);
    free(want);
}

/* After EAGAIN: poll() until the socket takes bytes again. (Before the
 * pairing completes, send() says EAGAIN while poll() reports POLLOUT, so
 * the first sends may go round this loop many times: not what this test
 * looks at, and the count the monitor logs includes them.) */
static void wait_writable(int fd)
{
    atomic_fetch_add(&sh->eagains, 1);
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    atomic_store(&sh->where, IN_POLL);
    int n = poll(&p, 1, POLL_LIMIT_MS);
    int err = errno;
    atomic_store(&sh->where, IN_OTHER);
    atomic_fetch_add(&sh->polls, 1);
    errno = err;
    if (n < 0)
        FAILF("poll(POLLOUT): %s", p_errname(errno));
    if (n == 0)
        FAILF("poll(POLLOUT) timed out after %d ms at %llu bytes", POLL_LIMIT_MS,
              (unsigned long long)atomic_load(&sh->sent));
    if (p.revents != POLLOUT)
        FAILF("poll(POLLOUT): revents 0x%x, want POLLOUT (0x%x)", (unsigned)p.revents,
              (unsigned)POLLOUT);
}

static void sender(struct p_role *r)
{
    pid_t mon = p_fork("monitor", monitor, r); /* reads and writes r's pipes from now on */
    int fd = p_connect(r->port);
    if (cur->nonblocking)
        SYS(fcntl(fd, F_SETFL, (int)SYS(fcntl(fd, F_GETFL)) | O_NONBLOCK));
    uint8_t *buf = malloc(PIECE);
    CHECK(buf != NULL);
    for (uint64_t pos = 0; pos < TOTAL; pos += PIECE) {
        piece_at(buf, pos);
        for (size_t done = 0; done < PIECE;) {
            atomic_store(&sh->where, IN_SEND);
            ssize_t n = send(fd, buf + done, PIECE - done, MSG_NOSIGNAL);
            int err = errno;
            atomic_store(&sh->where, IN_OTHER);
            if (n > 0) {
                done += (size_t)n;
                atomic_fetch_add(&sh->sent, (uint64_t)n);
            } else if (n < 0 && err == EAGAIN && cur->nonblocking) {
                wait_writable(fd);
            } else {
                FAILF("send at %llu bytes: %zd (%s)%s", (unsigned long long)(pos + done), n,
                      p_errname(err), err == ECONNRESET || err == EPIPE
                                          ? "; a failing monitor kills the receiver" : "");
            }
        }
    }
    SYS(close(fd));
    free(buf);
    if (!p_reap(mon, "monitor"))
        FAILF("the monitor failed");
}

int main(void)
{
    p_init("stop");
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cur = &cases[i];
        /* Read by each role's sovia at its first socket call (after the fork). */
        setenv("SOVIA_WAIT", cur->wait, 1);
        setenv("SOVIA_HANDLING", cur->handling, 1);
        atomic_store(&sh->sent, 0);
        atomic_store(&sh->where, IN_OTHER);
        atomic_store(&sh->eagains, 0);
        atomic_store(&sh->polls, 0);
        p_case(cur->name, receiver, sender, P_CARRIED);
    }
    munmap(sh, sizeof *sh);
    return p_done();
}
