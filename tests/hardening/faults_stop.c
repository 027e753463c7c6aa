/*
 * faults_stop: the receiver is stopped (SIGSTOP) while the sender streams
 * (docs/SOCKETS.md "Data": sov_send blocks while the window is full;
 * docs/ARCHITECTURE.md "Waiting": no CPU while blocked).
 *
 * A sender streams a pattern with blocking sov_send calls of 256 KiB to a
 * receiver that reads a little and is then stopped. Once the sender's
 * progress (a counter in shared memory) has stood still for 300 ms, the
 * window is full and the sender is blocked; over the next second the test
 * checks from /proc/<pid>/stat (utime + stime) that the sender used less
 * than 5% of a CPU, and that its progress did not move. Then the receiver
 * continues, reads everything and checks it byte for byte, and the sender
 * finishes. This is a behaviour check (the sender sleeps instead of
 * spinning), not a performance measurement: a spinning sender uses ~100%.
 * Cases: the BLOCK wait mode, ADAPTIVE (spins spin_us, then sleeps), and
 * ADAPTIVE with the HANDLER strategy (the handler thread sleeps too). The
 * POLL mode spins by design and is only logged, as a control.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sovia/sharness.h"

#define TOTAL (48u * 1024u * 1024u)
#define PIECE (256u * 1024u)

struct shared {
    _Atomic uint64_t sent;
};

struct cfgcase {
    const char *name;
    enum sov_wait_mode wait;
    enum sov_handling handling;
    int assert_cpu;
};

static const struct cfgcase cases[] = {
    {"block", SOV_WAIT_BLOCK, SOV_SINGLE, 1},
    {"adaptive", SOV_WAIT_ADAPTIVE, SOV_SINGLE, 1},
    {"adaptive_handler", SOV_WAIT_ADAPTIVE, SOV_HANDLER, 1},
    {"poll_control", SOV_WAIT_POLL, SOV_SINGLE, 0},
};

static struct shared *sh;
static const struct cfgcase *cur;

static void configure(void)
{
    struct sov_config c;
    SYS(sov_get_config(&c));
    c.wait_mode = cur->wait;
    c.handling = cur->handling;
    SYS(sov_set_config(&c));
}

static void receiver(int chan, void *arg)
{
    (void)arg;
    configure();
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 1);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    s_recv_pattern(fd, 9, 0, PIECE); /* connected and streaming; now stop us */
    s_tok(chan, 'r');
    s_want(chan, 'g'); /* after SIGCONT */
    s_recv_pattern(fd, 9, PIECE, TOTAL - PIECE);
    s_recv_eof(fd);
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
}

static void sender(int chan, void *arg)
{
    (void)arg;
    configure();
    uint16_t port = (uint16_t)s_get_u64(chan);
    int fd = s_connect(AF_INET, port);
    uint8_t *buf = malloc(PIECE);
    CHECK(buf != NULL);
    for (uint64_t pos = 0; pos < TOTAL; pos += PIECE) {
        s_pattern_fill(buf, PIECE, 9, pos);
        s_send_all(fd, buf, PIECE, 0);
        atomic_store(&sh->sent, pos + PIECE);
    }
    free(buf);
    SYS(sov_close(fd));
}

/* utime + stime of a process, in ms. */
static double cpu_ms(pid_t pid)
{
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot read %s", path);
    CHECK(fgets(line, sizeof line, f) != NULL);
    fclose(f);
    /* Fields after the command name (which may hold spaces): state is the
     * 3rd field; utime and stime are the 14th and 15th. */
    char *p = strrchr(line, ')');
    CHECK(p != NULL);
    unsigned long ut = 0, st = 0;
    CHECK(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2);
    return (double)(ut + st) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

static void run_case(void)
{
    atomic_store(&sh->sent, 0);
    int rc_chan, sc_chan;
    int rid = s_spawn("receiver", receiver, NULL, &rc_chan);
    uint64_t port = s_get_u64(rc_chan);
    int sid = s_spawn("sender", sender, NULL, &sc_chan);
    s_put_u64(sc_chan, port);
    s_want(rc_chan, 'r');
    pid_t rpid = s_pid(rid);
    CHECK(kill(rpid, SIGSTOP) == 0);
    /* Blocked: no progress for 300 ms (the window is full). */
    uint64_t last = atomic_load(&sh->sent);
    double still = s_now_ms(), t_end = s_now_ms() + 10000;
    while (s_now_ms() - still < 300) {
        CHECK_MSG(s_now_ms() < t_end, "the sender never stopped: %llu bytes sent to a stopped "
                  "receiver", (unsigned long long)atomic_load(&sh->sent));
        s_sleep_ms(20);
        uint64_t now = atomic_load(&sh->sent);
        if (now != last) {
            last = now;
            still = s_now_ms();
        }
    }
    CHECK_MSG(last < TOTAL, "the sender finished while the receiver was stopped");
    pid_t spid = s_pid(sid);
    double c0 = cpu_ms(spid), w0 = s_now_ms();
    s_sleep_ms(1000);
    double c1 = cpu_ms(spid), w1 = s_now_ms();
    double pct = 100.0 * (c1 - c0) / (w1 - w0);
    s_log("sender blocked at %llu bytes: %.1f%% of a CPU over %.0f ms (%.0f ms CPU)",
          (unsigned long long)last, pct, w1 - w0, c1 - c0);
    CHECK_MSG(atomic_load(&sh->sent) == last, "the sender made progress while the receiver "
              "was stopped");
    if (cur->assert_cpu)
        CHECK_MSG(pct < 5.0, "a sender blocked on the window used %.1f%% of a CPU", pct);
    CHECK(kill(rpid, SIGCONT) == 0);
    s_tok(rc_chan, 'g');
    s_wait_all();
    close(rc_chan);
    close(sc_chan);
}

int main(void)
{
    s_init("faults_stop", 100);
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cur = &cases[i];
        if (s_case(cur->name))
            run_case();
    }
    s_pass();
}
