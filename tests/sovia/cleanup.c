/*
 * cleanup: processes that go away with connections open leave nothing
 * behind (docs/SOCKETS.md "Closing", docs/ARCHITECTURE.md: memfd segments
 * and abstract sockets only).
 *
 * A server has one connection to each of three clients: client 1 returns
 * from main (exit(0), sovia's exit handling runs) without closing, client 2
 * calls _exit(0) without closing, client 3 is SIGKILLed in the middle of
 * streaming data while it also holds a listening socket. For each, the
 * server is blocked reading that connection when the client goes, and its
 * call returns 0 or ECONNRESET within 1 s (+250 ms); later calls do not
 * hang. The killed client's listening port is refused and can be bound
 * again. Afterwards no new entry whose name contains "sovia" or "vipl"
 * (any case) exists in /dev/shm or /tmp (entries that were there before the
 * test - other builds - are listed and ignored).
 */
#include "sharness.h"

#include <ctype.h>
#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#define MAXNAMES 256

struct names {
    int n;
    char *v[MAXNAMES];
};

static int matches(const char *name)
{
    char low[256];
    size_t i = 0;
    for (; name[i] && i < sizeof low - 1; i++)
        low[i] = (char)tolower((unsigned char)name[i]);
    low[i] = 0;
    return strstr(low, "sovia") || strstr(low, "vipl");
}

static void scan_dirs(struct names *out)
{
    static const char *dirs[] = {"/dev/shm", "/tmp"};
    out->n = 0;
    for (int d = 0; d < 2; d++) {
        DIR *dir = opendir(dirs[d]);
        if (!dir)
            continue;
        struct dirent *e;
        while ((e = readdir(dir)) != NULL) {
            if (!matches(e->d_name) || out->n >= MAXNAMES)
                continue;
            char path[512];
            snprintf(path, sizeof path, "%s/%s", dirs[d], e->d_name);
            out->v[out->n++] = strdup(path);
        }
        closedir(dir);
    }
}

static int in(const struct names *s, const char *p)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->v[i], p) == 0)
            return 1;
    return 0;
}

/* ---- roles ------------------------------------------------------------------ */

static void server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 8);
    s_put_u64(chan, port);
    int conn[4] = {-1, -1, -1, -1};
    for (int k = 0; k < 3; k++) {
        int fd = s_accept(lfd);
        char id;
        s_recv_all(fd, &id, 1);
        CHECK(id >= '1' && id <= '3' && conn[id - '0'] < 0);
        conn[id - '0'] = fd;
    }
    uint16_t dead_port = (uint16_t)s_get_u64(chan);
    static const char *how[4] = {"", "exit(0) with the connection open",
                                 "_exit(0) with the connection open", "SIGKILL while streaming"};
    unsigned char *buf = malloc(65536);
    CHECK(buf);
    for (int i = 1; i <= 3; i++) {
        s_tok(chan, 'b');
        s_guard(5000, "sov_recv when the peer went away");
        uint64_t got = 0;
        ssize_t n;
        int e;
        do {
            errno = 0;
            n = sov_recv(conn[i], buf, 65536, 0);
            e = errno;
            if (n > 0) {
                CHECK_MSG(i == 3, "client %d sent %zd unexpected bytes", i, n);
                got += (uint64_t)n;
            }
        } while (n > 0);
        double t = s_now_ms();
        s_unguard();
        double at = s_get_f64(chan);
        CHECK_MSG(n == 0 || (n == -1 && e == ECONNRESET),
                  "client %d (%s): sov_recv returned %zd (errno %s), expected 0 or ECONNRESET", i,
                  how[i], n, s_errname(e));
        s_log("client %d (%s): sov_recv returned %s %.1f ms later%s", i, how[i],
              n == 0 ? "0" : "ECONNRESET", t - at, i == 3 ? " (after the streamed data)" : "");
        CHECK_MSG(t - at < S_DEADLINE_MS, "client %d (%s): %.0f ms until the error", i, how[i],
                  t - at);
        if (i == 3)
            CHECK_MSG(got > 0, "client 3 streamed nothing before it was killed");
        s_guard(3000, "sov_recv / sov_send after the peer went away");
        CHECK_EQ(SYS(sov_recv(conn[i], buf, 16, 0)), 0);
        /* A first send after a graceful close may still be taken (as TCP);
         * it must not hang, and must not succeed for long. */
        errno = 0;
        ssize_t w = sov_send(conn[i], "x", 1, MSG_NOSIGNAL);
        CHECK_MSG(w == 1 || (w == -1 && (errno == EPIPE || errno == ECONNRESET)),
                  "client %d: sov_send after the peer went away returned %zd (errno %s)", i, w,
                  s_errname(errno));
        if (w == 1) {
            double t1 = s_now_ms();
            for (;;) {
                errno = 0;
                w = sov_send(conn[i], "x", 1, MSG_NOSIGNAL);
                if (w == -1)
                    break;
                CHECK_MSG(s_now_ms() - t1 < S_DEADLINE_MS,
                          "client %d went away, sends still succeed after %.0f ms", i,
                          s_now_ms() - t1);
                s_sleep_ms(10);
            }
            CHECK_MSG(errno == EPIPE || errno == ECONNRESET, "sov_send: %s", s_errname(errno));
        }
        SYS(sov_close(conn[i]));
        s_unguard();
    }
    free(buf);
    /* The killed process is gone (the main process reaped it before sending
     * the time read above): its listener refuses, and its port is free. */
    int fd = s_socket(AF_INET, 0);
    struct sockaddr_in a;
    s_addr4(&a, dead_port);
    s_guard(3000, "sov_connect to a killed process's listening port");
    CHECK_ERR(sov_connect(fd, (struct sockaddr *)&a, sizeof a), ECONNREFUSED);
    s_unguard();
    int b = s_socket(AF_INET, 0);
    CHECK_MSG(sov_bind(b, (struct sockaddr *)&a, sizeof a) == 0,
              "binding the killed listener's port %u: %s", dead_port, s_errname(errno));
    SYS(sov_close(b));
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
}

static void client(int chan, void *arg)
{
    int id = (int)(intptr_t)arg;
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    char c = (char)('0' + id);
    s_send_all(fd, &c, 1, 0);
    if (id == 3) {
        uint16_t lport;
        int lfd = s_listener(AF_INET, &lport, 4);
        (void)lfd;
        s_put_u64(chan, lport);
        /* Stream until killed (blocks on the window until the server reads). */
        unsigned char *buf = malloc(65536);
        CHECK(buf);
        uint64_t pos = 0;
        for (;;) {
            s_pattern_fill(buf, 65536, 3, pos);
            s_send_all(fd, buf, 65536, MSG_NOSIGNAL);
            pos += 65536;
        }
    }
    s_want(chan, 'x');
    if (id == 2)
        _exit(0);
    exit(0); /* id 1: sovia's exit handling closes the connection */
}

int main(void)
{
    s_init("cleanup", 60);
    struct names before, after;
    scan_dirs(&before);
    for (int i = 0; i < before.n; i++)
        s_log("present before the test (ignored): %s", before.v[i]);

    if (s_case("exit_exit_kill")) {
        int cs, cc[4];
        int sid = s_spawn("server", server, NULL, &cs);
        (void)sid;
        uint64_t port = s_get_u64(cs);
        int ids[4];
        static const char *roles[4] = {"", "client 1 (exit)", "client 2 (_exit)",
                                       "client 3 (SIGKILL)"};
        for (int i = 1; i <= 3; i++) {
            ids[i] = s_spawn(roles[i], client, (void *)(intptr_t)i, &cc[i]);
            s_put_u64(cc[i], port);
        }
        s_put_u64(cs, s_get_u64(cc[3]));
        for (int i = 1; i <= 3; i++) {
            s_want(cs, 'b');
            s_sleep_ms(100);
            double t = s_now_ms();
            if (i == 3) {
                s_kill(ids[3]);
                /* The server checks the dead listener's port once the
                 * process is gone (reaped), as it would for kernel TCP. */
                s_reap(ids[3]);
            } else {
                s_tok(cc[i], 'x');
            }
            s_put_f64(cs, t);
        }
        s_wait_all();
    }

    scan_dirs(&after);
    int fresh = 0;
    for (int i = 0; i < after.n; i++)
        if (!in(&before, after.v[i])) {
            fprintf(stderr, "[cleanup] left behind: %s\n", after.v[i]);
            fresh++;
        }
    CHECK_MSG(fresh == 0, "%d new file(s) named *sovia* or *vipl* in /dev/shm or /tmp", fresh);
    for (int i = 0; i < before.n; i++)
        free(before.v[i]);
    for (int i = 0; i < after.n; i++)
        free(after.v[i]);
    s_log("no new *sovia* / *vipl* entries in /dev/shm or /tmp");
    s_pass();
}
