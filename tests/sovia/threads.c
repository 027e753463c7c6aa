/*
 * threads: sovia sockets used from several threads of one process.
 *  - duplex: one thread sends while another receives on the same socket,
 *    both ends, 64 MiB each way, byte-exact;
 *  - wake_recv / wake_accept / wake_poll: a thread blocked in sov_recv,
 *    sov_accept or sov_poll(-1) wakes when the peer sends / connects, and
 *    sov_recv with 0 when the peer closes;
 *  - eintr: a thread blocked in sov_recv, sov_accept, sov_poll or sov_send
 *    (full window) gets -1/EINTR when signalled (pthread_kill) with a
 *    handler installed without SA_RESTART, and also with SA_RESTART
 *    (docs/SOCKETS.md: "sovia calls are not restarted, whatever SA_RESTART
 *    says"); the socket still works afterwards.
 * Every case also runs under the SOVIA_HANDLER and SOVIA_NOTIFY labels and
 * the blocking and polling wait modes (issue 20: a call spinning in
 * SOVIA_WAIT=poll, or waiting for the handler thread or a notify callback,
 * never saw the handler run and stayed blocked: eintr_*_SOVIA_HANDLER,
 * _SOVIA_NOTIFY and _waitpoll failed, 'still blocked 3 s').
 */
#include "sharness.h"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

struct variant {
    const char *label;
    enum sov_wait_mode wait; /* SOV_WAIT_ADAPTIVE: the default */
    unsigned duplex_mib;
};

/* (Polling: two spinning processes on a loaded 2-core machine are slow.) */
static const struct variant variants[] = {
    {NULL, SOV_WAIT_ADAPTIVE, 64},
    {"SOVIA_HANDLER", SOV_WAIT_ADAPTIVE, 16},
    {"SOVIA_NOTIFY", SOV_WAIT_ADAPTIVE, 16},
    {NULL, SOV_WAIT_BLOCK, 32},
    {NULL, SOV_WAIT_POLL, 4},
};

static const struct variant *cur;

static void setup(void)
{
    if (cur->label)
        s_use_label(cur->label);
    if (cur->wait != SOV_WAIT_ADAPTIVE) {
        struct sov_config c;
        SYS(sov_get_config(&c));
        c.wait_mode = cur->wait;
        SYS(sov_set_config(&c));
    }
}

static int serve_one(int chan, int *lfd_out)
{
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 4);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    if (lfd_out)
        *lfd_out = lfd;
    else
        SYS(sov_close(lfd));
    return fd;
}

/* ---- duplex ------------------------------------------------------------------ */

struct sender {
    int fd;
    uint64_t seed, bytes;
};

static void *sender_thread(void *arg)
{
    struct sender *s = arg;
    unsigned char *buf = malloc(200000);
    CHECK(buf);
    uint64_t rng = s->seed, pos = 0;
    while (pos < s->bytes) {
        size_t n = (size_t)s_rand_log(&rng, 1, 200000);
        if (n > s->bytes - pos)
            n = (size_t)(s->bytes - pos);
        s_pattern_fill(buf, n, s->seed, pos);
        s_send_all(s->fd, buf, n, MSG_NOSIGNAL);
        pos += n;
    }
    SYS(sov_shutdown(s->fd, SHUT_WR));
    free(buf);
    return NULL;
}

static void duplex_side(int fd, uint64_t out_seed, uint64_t in_seed)
{
    uint64_t bytes = (uint64_t)cur->duplex_mib << 20;
    struct sender snd = {fd, out_seed, bytes};
    pthread_t th;
    double t0 = s_now_ms();
    CHECK(pthread_create(&th, NULL, sender_thread, &snd) == 0);
    /* This thread receives: random read sizes, every byte checked. */
    unsigned char *buf = malloc(200000);
    CHECK(buf);
    uint64_t rng = in_seed ^ 0x55, pos = 0;
    for (;;) {
        size_t n = (size_t)s_rand_log(&rng, 1, 200000);
        errno = 0;
        ssize_t r = sov_recv(fd, buf, n, 0);
        CHECK_MSG(r >= 0, "sov_recv at byte %llu returned %zd (errno %s)",
                  (unsigned long long)pos, r, s_errname(errno));
        if (r == 0)
            break;
        long bad = s_pattern_check(buf, (size_t)r, in_seed, pos);
        CHECK_MSG(bad < 0, "stream byte %llu: got 0x%02x, expected 0x%02x",
                  (unsigned long long)(pos + (uint64_t)bad), buf[bad],
                  s_pattern_byte(in_seed, pos + (uint64_t)bad));
        pos += (uint64_t)r;
    }
    CHECK_MSG(pos == bytes, "received %llu bytes, expected %llu", (unsigned long long)pos,
              (unsigned long long)bytes);
    pthread_join(th, NULL);
    double ms = s_now_ms() - t0;
    s_log("%u MiB each way in %.0f ms (%.0f MB/s each way)", cur->duplex_mib, ms,
          (double)bytes / 1e3 / (ms > 0 ? ms : 1));
    free(buf);
}

static void duplex_server(int chan, void *arg)
{
    (void)arg;
    setup();
    int fd = serve_one(chan, NULL);
    duplex_side(fd, 81, 82);
    s_tok(chan, 'd');
    SYS(sov_close(fd));
}

static void duplex_client(int chan, void *arg)
{
    (void)arg;
    setup();
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    duplex_side(fd, 82, 81);
    s_want(chan, 'd');
    SYS(sov_close(fd));
}

/* ---- a call in another thread ------------------------------------------------- */

enum op { OP_RECV, OP_ACCEPT, OP_POLL, OP_SEND };

struct call {
    int fd;
    enum op op;
    size_t len;
    void *buf;
    ssize_t ret;
    int err;
    short revents;
    atomic_int started, done;
    double t_done;
    pthread_t th;
};

static void *call_thread(void *arg)
{
    struct call *c = arg;
    atomic_store(&c->started, 1);
    errno = 0;
    switch (c->op) {
    case OP_RECV:
        c->ret = sov_recv(c->fd, c->buf, c->len, 0);
        break;
    case OP_ACCEPT:
        c->ret = sov_accept(c->fd, NULL, NULL);
        break;
    case OP_POLL: {
        struct pollfd p = {c->fd, POLLIN, 0};
        c->ret = sov_poll(&p, 1, -1);
        c->revents = p.revents;
        break;
    }
    case OP_SEND:
        c->ret = sov_send(c->fd, c->buf, c->len, MSG_NOSIGNAL);
        break;
    }
    c->err = errno;
    c->t_done = s_now_ms();
    atomic_store(&c->done, 1);
    return NULL;
}

static void call_start(struct call *c, int fd, enum op op, void *buf, size_t len)
{
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->op = op;
    c->buf = buf;
    c->len = len;
    CHECK(pthread_create(&c->th, NULL, call_thread, c) == 0);
    while (!atomic_load(&c->started))
        s_sleep_ms(1);
    /* It must block. */
    s_sleep_ms(200);
    CHECK_MSG(!atomic_load(&c->done), "the call returned %zd (errno %s) instead of blocking",
              c->ret, s_errname(c->err));
}

static void call_join(struct call *c, unsigned timeout_ms, const char *what)
{
    double t0 = s_now_ms();
    while (!atomic_load(&c->done)) {
        CHECK_MSG(s_now_ms() - t0 < timeout_ms, "%s: the blocked call did not return within %u ms",
                  what, timeout_ms);
        s_sleep_ms(1);
    }
    pthread_join(c->th, NULL);
}

/* ---- wake ------------------------------------------------------------------ */

static void wake_server(int chan, void *arg)
{
    (void)arg;
    setup();
    int lfd;
    int fd = serve_one(chan, &lfd);
    char buf[64];
    struct call c;

    /* sov_recv woken by data. */
    call_start(&c, fd, OP_RECV, buf, sizeof buf);
    s_tok(chan, 's');
    double sent_at = s_get_f64(chan);
    call_join(&c, 5000, "sov_recv waiting for data");
    CHECK_MSG(c.ret >= 1 && c.ret <= 10, "woken sov_recv returned %zd (errno %s)", c.ret,
              s_errname(c.err));
    s_log("sov_recv woke %.2f ms after the peer's send", c.t_done - sent_at);
    size_t got = (size_t)c.ret;
    if (got < 10)
        s_recv_all(fd, buf + got, 10 - got);
    CHECK(memcmp(buf, "0123456789", 10) == 0);

    /* sov_poll(-1) woken by data. */
    call_start(&c, fd, OP_POLL, NULL, 0);
    s_tok(chan, 'p');
    call_join(&c, 5000, "sov_poll(-1) waiting for data");
    CHECK_MSG(c.ret == 1 && (c.revents & POLLIN), "woken sov_poll returned %zd revents 0x%x",
              c.ret, c.revents);
    s_recv_all(fd, buf, 3);
    CHECK(memcmp(buf, "abc", 3) == 0);

    /* sov_accept woken by a connection. */
    call_start(&c, lfd, OP_ACCEPT, NULL, 0);
    s_tok(chan, 'a');
    call_join(&c, 5000, "sov_accept waiting for a connection");
    CHECK_MSG(c.ret >= 0, "woken sov_accept returned %zd (errno %s)", c.ret, s_errname(c.err));
    int fd2 = (int)c.ret;
    s_recv_all(fd2, buf, 2);
    CHECK(memcmp(buf, "c2", 2) == 0);

    /* sov_recv woken by the peer's close: 0. */
    call_start(&c, fd, OP_RECV, buf, sizeof buf);
    s_tok(chan, 'c');
    call_join(&c, 5000, "sov_recv waiting when the peer closes");
    CHECK_MSG(c.ret == 0, "sov_recv woken by the peer's close returned %zd (errno %s), "
              "expected 0", c.ret, s_errname(c.err));
    s_recv_eof(fd2);
    SYS(sov_close(fd));
    SYS(sov_close(fd2));
    SYS(sov_close(lfd));
}

static void wake_client(int chan, void *arg)
{
    (void)arg;
    setup();
    uint16_t port = (uint16_t)s_get_u64(chan);
    int fd = s_connect(AF_INET, port);
    int one = 1;
    SYS(sov_setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
    s_want(chan, 's');
    s_put_f64(chan, s_now_ms());
    s_send_all(fd, "0123456789", 10, 0);
    s_want(chan, 'p');
    s_send_all(fd, "abc", 3, 0);
    s_want(chan, 'a');
    int fd2 = s_connect(AF_INET, port);
    s_send_all(fd2, "c2", 2, 0);
    s_want(chan, 'c');
    SYS(sov_close(fd));
    SYS(sov_close(fd2));
}

/* ---- EINTR ----------------------------------------------------------------------- */

static atomic_int handled;
static void on_usr1(int sig)
{
    (void)sig;
    atomic_fetch_add(&handled, 1);
}

static void install(int restart)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
}

/* Signals the blocked thread (again every 200 ms, in case a signal came
 * before the call blocked) until it returns; the call must say EINTR. */
static void interrupt(struct call *c, const char *what, int restart)
{
    int before = atomic_load(&handled);
    double t0 = s_now_ms();
    int sent = 0;
    while (!atomic_load(&c->done)) {
        CHECK_MSG(s_now_ms() - t0 < 3000, "%s (%s): still blocked 3 s after %d signals", what,
                  restart ? "SA_RESTART" : "no SA_RESTART", sent);
        pthread_kill(c->th, SIGUSR1);
        sent++;
        for (int i = 0; i < 200 && !atomic_load(&c->done); i++)
            s_sleep_ms(1);
    }
    pthread_join(c->th, NULL);
    CHECK_MSG(atomic_load(&handled) > before, "%s: the handler did not run", what);
    CHECK_MSG(c->ret == -1 && c->err == EINTR,
              "%s interrupted by a signal (%s): returned %zd (errno %s), expected -1/EINTR",
              what, restart ? "SA_RESTART" : "no SA_RESTART", c->ret, s_errname(c->err));
    s_log("%s: EINTR after %d signal(s) (%s)", what, sent, restart ? "SA_RESTART" : "no SA_RESTART");
}

static enum op eintr_op;

static void eintr_server(int chan, void *arg)
{
    (void)arg;
    setup();
    int lfd;
    int fd = serve_one(chan, &lfd);
    char buf[64];
    struct call c;
    if (eintr_op != OP_SEND) {
        for (int restart = 0; restart < 2; restart++) {
            install(restart);
            if (eintr_op == OP_RECV) {
                call_start(&c, fd, OP_RECV, buf, sizeof buf);
                interrupt(&c, "sov_recv", restart);
            } else if (eintr_op == OP_ACCEPT) {
                call_start(&c, lfd, OP_ACCEPT, NULL, 0);
                interrupt(&c, "sov_accept", restart);
            } else {
                call_start(&c, fd, OP_POLL, NULL, 0);
                interrupt(&c, "sov_poll", restart);
            }
        }
        /* The socket still works. */
        s_tok(chan, 'd');
        s_guard(5000, "sov_recv after EINTR");
        s_recv_all(fd, buf, 5);
        s_unguard();
        CHECK(memcmp(buf, "after", 5) == 0);
        s_recv_eof(fd);
        SYS(sov_close(fd));
        SYS(sov_close(lfd));
        return;
    }
    /* A send blocked on a full window (the peer does not read). */
    int one = 1;
    SYS(sov_setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
    size_t chunk = 65536;
    unsigned char *big = malloc(chunk);
    CHECK(big);
    uint64_t queued = 0;
    for (;;) {
        s_pattern_fill(big, chunk, 90, queued);
        errno = 0;
        ssize_t w = sov_send(fd, big, chunk, MSG_DONTWAIT);
        if (w == -1 && errno == EAGAIN)
            break;
        CHECK_MSG(w > 0, "send: %zd (%s)", w, s_errname(errno));
        queued += (uint64_t)w;
        CHECK(queued < (256u << 20));
    }
    s_pattern_fill(big, chunk, 90, queued);
    for (int restart = 0; restart < 2; restart++) {
        install(restart);
        call_start(&c, fd, OP_SEND, big, chunk);
        interrupt(&c, "sov_send on a full window", restart);
    }
    s_put_u64(chan, queued);
    /* Now the peer reads: the same bytes go through. */
    s_guard(10000, "sov_send after EINTR");
    s_send_all(fd, big, chunk, 0);
    s_unguard();
    s_want(chan, 'r');
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
    free(big);
}

static void eintr_client(int chan, void *arg)
{
    (void)arg;
    setup();
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    if (eintr_op != OP_SEND) {
        s_want(chan, 'd');
        s_send_all(fd, "after", 5, 0);
        SYS(sov_close(fd));
        return;
    }
    uint64_t queued = s_get_u64(chan);
    s_recv_pattern(fd, 90, 0, (size_t)queued + 65536);
    s_tok(chan, 'r');
    s_recv_eof(fd);
    SYS(sov_close(fd));
}

/* ---- duplex from one thread (a control for duplex): non-blocking + sov_poll --- */

static void duplex1_side(int fd, uint64_t out_seed, uint64_t in_seed)
{
    uint64_t bytes = (uint64_t)cur->duplex_mib << 20;
    int fl = (int)SYS(sov_fcntl(fd, F_GETFL));
    SYS(sov_fcntl(fd, F_SETFL, fl | O_NONBLOCK));
    unsigned char *out = malloc(200000), *in = malloc(200000);
    CHECK(out && in);
    uint64_t wrng = out_seed, rrng = in_seed ^ 0x55, wpos = 0, rpos = 0;
    size_t wlen = 0, woff = 0;
    int shut = 0, eof = 0;
    double t0 = s_now_ms();
    while (!eof || !shut) {
        struct pollfd p = {fd, (short)((eof ? 0 : POLLIN) | (shut ? 0 : POLLOUT)), 0};
        s_guard(10000, "sov_poll in a duplex loop");
        SYS(sov_poll(&p, 1, 5000));
        s_unguard();
        CHECK_MSG(p.revents, "no progress for 5 s (sent %llu, received %llu)",
                  (unsigned long long)wpos, (unsigned long long)rpos);
        CHECK_MSG(!(p.revents & (POLLERR | POLLHUP)) || (p.revents & POLLIN),
                  "revents 0x%x", p.revents);
        if (!shut && (p.revents & POLLOUT)) {
            if (woff == wlen) {
                wlen = (size_t)s_rand_log(&wrng, 1, 200000);
                if (wlen > bytes - wpos)
                    wlen = (size_t)(bytes - wpos);
                s_pattern_fill(out, wlen, out_seed, wpos);
                woff = 0;
            }
            errno = 0;
            ssize_t w = sov_send(fd, out + woff, wlen - woff, MSG_NOSIGNAL);
            CHECK_MSG(w > 0 || (w == -1 && errno == EAGAIN), "send: %zd (%s)", w,
                      s_errname(errno));
            if (w > 0) {
                woff += (size_t)w;
                wpos += (uint64_t)w;
            }
            if (wpos == bytes) {
                SYS(sov_shutdown(fd, SHUT_WR));
                shut = 1;
            }
        }
        if (!eof && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
            size_t n = (size_t)s_rand_log(&rrng, 1, 200000);
            errno = 0;
            ssize_t r = sov_recv(fd, in, n, 0);
            CHECK_MSG(r >= 0 || errno == EAGAIN, "sov_recv at byte %llu: %s",
                      (unsigned long long)rpos, s_errname(errno));
            if (r == 0) {
                eof = 1;
            } else if (r > 0) {
                long bad = s_pattern_check(in, (size_t)r, in_seed, rpos);
                CHECK_MSG(bad < 0, "stream byte %llu: got 0x%02x, expected 0x%02x",
                          (unsigned long long)(rpos + (uint64_t)bad), in[bad],
                          s_pattern_byte(in_seed, rpos + (uint64_t)bad));
                rpos += (uint64_t)r;
            }
        }
    }
    CHECK_EQ(rpos, bytes);
    double ms = s_now_ms() - t0;
    s_log("one thread: %u MiB each way in %.0f ms", cur->duplex_mib, ms);
    SYS(sov_fcntl(fd, F_SETFL, fl));
    free(out);
    free(in);
}

static void duplex1_server(int chan, void *arg)
{
    (void)arg;
    setup();
    int fd = serve_one(chan, NULL);
    duplex1_side(fd, 81, 82);
    s_tok(chan, 'd');
    SYS(sov_close(fd));
}

static void duplex1_client(int chan, void *arg)
{
    (void)arg;
    setup();
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    duplex1_side(fd, 82, 81);
    s_want(chan, 'd');
    SYS(sov_close(fd));
}

int main(void)
{
    s_init("threads", 110);
    cur = &variants[0];
    if (s_case("duplex_one_thread_default"))
        s_run_pair("server", duplex1_server, "client", duplex1_client, NULL);
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        cur = &variants[i];
        const char *v = cur->label                      ? cur->label
                        : cur->wait == SOV_WAIT_BLOCK ? "waitblock"
                        : cur->wait == SOV_WAIT_POLL  ? "waitpoll"
                                                      : "default";
        char nm[64];
        snprintf(nm, sizeof nm, "duplex_%s", v);
        if (s_case(nm))
            s_run_pair("server", duplex_server, "client", duplex_client, NULL);
        snprintf(nm, sizeof nm, "wake_%s", v);
        if (s_case(nm))
            s_run_pair("server", wake_server, "client", wake_client, NULL);
        static const struct {
            const char *name;
            enum op op;
        } eintr_cases[] = {{"eintr_recv", OP_RECV},
                           {"eintr_accept", OP_ACCEPT},
                           {"eintr_poll", OP_POLL},
                           {"eintr_send", OP_SEND}};
        for (size_t k = 0; k < 4; k++) {
            eintr_op = eintr_cases[k].op;
            if (i == 0)
                snprintf(nm, sizeof nm, "%s", eintr_cases[k].name);
            else
                snprintf(nm, sizeof nm, "%s_%s", eintr_cases[k].name, v);
            if (s_case(nm))
                s_run_pair("server", eintr_server, "client", eintr_client, NULL);
        }
    }
    s_pass();
}
