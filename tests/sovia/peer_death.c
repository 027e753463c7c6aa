/*
 * peer_death: the peer process is SIGKILLed (docs/SOCKETS.md "Closing":
 * "The peer sees end of stream or ECONNRESET within 1 s in every case,
 * including SIGKILL"; "Data": "Peer reset or death: ECONNRESET (once; then
 * 0)").
 *  - recv: the local side is blocked in sov_recv when the peer dies; the
 *    call returns -1/ECONNRESET or 0 within 1 s (+250 ms slack);
 *  - send: blocked in sov_send with the window full (the peer never reads);
 *    the call returns -1 (ECONNRESET or EPIPE) or a short count followed
 *    by such an error, within 1 s;
 *  - idle: the peer dies while the local side is in no call; the next call
 *    returns at once.
 * Afterwards recv gives 0, send EPIPE (MSG_NOSIGNAL), sov_poll reports at
 * once, and nothing hangs. Run with the default configuration, the
 * SOVIA_HANDLER and SOVIA_NOTIFY labels and the blocking wait mode, with
 * the victim as server and as client.
 */
#include "sharness.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

enum op { OP_RECV, OP_SEND, OP_IDLE };

struct pdc {
    const char *name;
    const char *label;
    int wait_block;
    enum op op;
    int victim_client;
};

static const struct pdc cases[] = {
    {"recv", NULL, 0, OP_RECV, 0},
    {"recv_victim_client", NULL, 0, OP_RECV, 1},
    {"send", NULL, 0, OP_SEND, 0},
    {"send_victim_client", NULL, 0, OP_SEND, 1},
    {"idle", NULL, 0, OP_IDLE, 0},
    {"recv_handler", "SOVIA_HANDLER", 0, OP_RECV, 0},
    {"send_handler", "SOVIA_HANDLER", 0, OP_SEND, 0},
    {"recv_notify", "SOVIA_NOTIFY", 0, OP_RECV, 0},
    {"send_notify", "SOVIA_NOTIFY", 0, OP_SEND, 0},
    {"recv_waitblock", NULL, 1, OP_RECV, 0},
    {"send_waitblock", NULL, 1, OP_SEND, 1},
};

static void setup(const struct pdc *c)
{
    if (c->label)
        s_use_label(c->label);
    if (c->wait_block) {
        struct sov_config cfg;
        SYS(sov_get_config(&cfg));
        cfg.wait_mode = SOV_WAIT_BLOCK;
        SYS(sov_set_config(&cfg));
    }
}

static void victim(int chan, void *arg)
{
    const struct pdc *c = arg;
    setup(c);
    int fd;
    if (c->victim_client) {
        fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    } else {
        uint16_t port;
        int lfd = s_listener(AF_INET, &port, 1);
        s_put_u64(chan, port);
        fd = s_accept(lfd);
    }
    (void)fd;
    s_tok(chan, 'R');
    /* Never reads; waits here until killed. */
    s_want(chan, 'X');
    FAILF("the victim was not killed");
}

struct killer {
    pid_t pid;
    unsigned delay_ms;
    double at;
};

static void *killer_thread(void *arg)
{
    struct killer *k = arg;
    s_sleep_ms(k->delay_ms);
    k->at = s_now_ms();
    kill(k->pid, SIGKILL);
    return NULL;
}

static void after_checks(int fd, int reset_reported)
{
    char buf[64];
    s_guard(3000, "calls on a connection whose peer died");
    CHECK_EQ(SYS(sov_recv(fd, buf, sizeof buf, 0)), 0);
    CHECK_EQ(SYS(sov_recv(fd, buf, sizeof buf, MSG_DONTWAIT)), 0);
    if (reset_reported) {
        CHECK_ERR(sov_send(fd, "abc", 3, MSG_NOSIGNAL), EPIPE);
    } else {
        /* A reset not yet reported: ECONNRESET first (EPIPE if the death
         * was taken as a close). */
        CHECK_ERR2(sov_send(fd, "abc", 3, MSG_NOSIGNAL), ECONNRESET, EPIPE);
        CHECK_ERR(sov_send(fd, "abc", 3, MSG_NOSIGNAL), EPIPE);
    }
    CHECK_ERR(sov_send(fd, "abc", 3, MSG_NOSIGNAL | MSG_DONTWAIT), EPIPE);
    struct pollfd p = {fd, POLLIN | POLLOUT, 0};
    int r = (int)SYS(sov_poll(&p, 1, 1000));
    CHECK_MSG(r == 1, "sov_poll on a dead connection returned %d", r);
    CHECK_MSG(p.revents & POLLHUP, "sov_poll on a dead connection: revents 0x%x without POLLHUP",
              p.revents);
    CHECK_EQ(SYS(sov_close(fd)), 0);
    s_unguard();
}

static void observer(int chan, void *arg)
{
    const struct pdc *c = arg;
    setup(c);
    int fd;
    pid_t vpid;
    if (c->victim_client) {
        uint16_t port;
        int lfd = s_listener(AF_INET, &port, 1);
        s_put_u64(chan, port);
        vpid = (pid_t)s_get_u64(chan);
        fd = s_accept(lfd);
        SYS(sov_close(lfd));
    } else {
        uint16_t port = (uint16_t)s_get_u64(chan);
        vpid = (pid_t)s_get_u64(chan);
        fd = s_connect(AF_INET, port);
    }
    s_want(chan, 'R'); /* the victim has its end */
    struct killer k = {vpid, 300, 0};
    int reset_reported = 0;

    if (c->op == OP_IDLE) {
        k.at = s_now_ms();
        kill(vpid, SIGKILL);
        s_sleep_ms(100);
        char buf[16];
        double t0 = s_now_ms();
        s_guard(3000, "sov_recv after the peer died");
        errno = 0;
        ssize_t n = sov_recv(fd, buf, sizeof buf, 0);
        int e = errno;
        s_unguard();
        double t1 = s_now_ms();
        CHECK_MSG(n == 0 || (n == -1 && e == ECONNRESET),
                  "sov_recv after the peer's death returned %zd (errno %s)", n, s_errname(e));
        s_log("sov_recv returned %s %.1f ms after the kill (%.1f ms in the call)",
              n == 0 ? "0" : "ECONNRESET", t1 - k.at, t1 - t0);
        CHECK_MSG(t1 - k.at < S_DEADLINE_MS, "took %.0f ms after the kill", t1 - k.at);
        reset_reported = n == -1;
        after_checks(fd, reset_reported);
        return;
    }

    pthread_t th;
    CHECK(pthread_create(&th, NULL, killer_thread, &k) == 0);
    if (c->op == OP_RECV) {
        char buf[64];
        s_guard(5000, "sov_recv blocked when the peer was killed");
        errno = 0;
        ssize_t n = sov_recv(fd, buf, sizeof buf, 0);
        int e = errno;
        double t = s_now_ms();
        s_unguard();
        pthread_join(th, NULL);
        CHECK_MSG(t >= k.at, "sov_recv returned %zd (errno %s) before the peer was killed", n,
                  s_errname(e));
        CHECK_MSG(n == 0 || (n == -1 && e == ECONNRESET),
                  "blocked sov_recv when the peer died returned %zd (errno %s), expected "
                  "ECONNRESET or 0",
                  n, s_errname(e));
        s_log("blocked sov_recv returned %s %.1f ms after the kill", n == 0 ? "0" : "ECONNRESET",
              t - k.at);
        CHECK_MSG(t - k.at < S_DEADLINE_MS, "took %.0f ms after the kill", t - k.at);
        reset_reported = n == -1;
    } else {
        size_t len = 64u << 20;
        unsigned char *big = malloc(len);
        CHECK(big);
        memset(big, 0x5a, len);
        s_guard(5000, "sov_send blocked on a full window when the peer was killed");
        errno = 0;
        ssize_t n = sov_send(fd, big, len, MSG_NOSIGNAL);
        int e = errno;
        double t = s_now_ms();
        s_unguard();
        pthread_join(th, NULL);
        CHECK_MSG(t >= k.at, "sov_send of 64 MiB to a peer that never reads returned %zd "
                  "(errno %s) before the peer was killed", n, s_errname(e));
        CHECK_MSG((n == -1 && (e == ECONNRESET || e == EPIPE)) || (n > 0 && (size_t)n < len),
                  "blocked sov_send when the peer died returned %zd (errno %s), expected -1 "
                  "with ECONNRESET/EPIPE or a short count",
                  n, s_errname(e));
        s_log("blocked sov_send returned %zd (%s) %.1f ms after the kill", n,
              n < 0 ? s_errname(e) : "bytes", t - k.at);
        CHECK_MSG(t - k.at < S_DEADLINE_MS, "took %.0f ms after the kill", t - k.at);
        if (n > 0) {
            s_guard(3000, "sov_send after a short count");
            CHECK_ERR2(sov_send(fd, big, len, MSG_NOSIGNAL), ECONNRESET, EPIPE);
            s_unguard();
            reset_reported = 1;
        } else {
            reset_reported = e == ECONNRESET || e == EPIPE;
        }
        free(big);
    }
    after_checks(fd, reset_reported);
}

static void run_case(const struct pdc *c)
{
    int cv, co, v, o;
    if (c->victim_client) {
        o = s_spawn("observer", observer, (void *)c, &co);
        uint64_t port = s_get_u64(co);
        v = s_spawn("victim", victim, (void *)c, &cv);
        s_put_u64(cv, port);
        s_put_u64(co, (uint64_t)s_pid(v));
    } else {
        v = s_spawn("victim", victim, (void *)c, &cv);
        uint64_t port = s_get_u64(cv);
        o = s_spawn("observer", observer, (void *)c, &co);
        s_put_u64(co, port);
        s_put_u64(co, (uint64_t)s_pid(v));
    }
    (void)o;
    s_expect_kill(v);
    s_want(cv, 'R');
    s_tok(co, 'R');
    s_wait_all();
}

int main(void)
{
    s_init("peer_death", 110);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (s_case(cases[i].name))
            run_case(&cases[i]);
    s_pass();
}
