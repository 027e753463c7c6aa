/*
 * many_conns: scale.
 *  - thousand: one client process opens 1000 connections to one server
 *    process, all open at once; each sends its index and reads the echo;
 *    then all are closed. The server sees 1000 distinct peers (address and
 *    port) and every index exactly once, then end of stream on each.
 *  - echo64: 64 client processes at once, each streaming its own 4 MiB
 *    pattern (seeded by its index) to a threaded echo server and verifying
 *    the echoed stream byte-exact.
 * Both run with the default configuration.
 */
#include "sharness.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define NCONN 1000
#define NCLIENTS 64
#define ECHO_BYTES (4u * 1024u * 1024u)

/* ---- thousand --------------------------------------------------------------- */

static void k_server(int chan, void *arg)
{
    (void)arg;
    s_raise_nofile(16384);
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 1024);
    s_put_u64(chan, port);
    static int fds[NCONN];
    static uint16_t peer_port[NCONN];
    static unsigned char seen_port[65536];
    static unsigned char seen_idx[NCONN];
    double t0 = s_now_ms();
    for (int i = 0; i < NCONN; i++) {
        struct sockaddr_in a;
        socklen_t alen = sizeof a;
        errno = 0;
        fds[i] = sov_accept(lfd, (struct sockaddr *)&a, &alen);
        CHECK_MSG(fds[i] >= 0, "accept of connection %d returned %d (errno %s)", i, fds[i],
                  s_errname(errno));
        CHECK_EQ(alen, sizeof a);
        CHECK_EQ(a.sin_family, AF_INET);
        CHECK_EQ(a.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
        peer_port[i] = ntohs(a.sin_port);
        CHECK_MSG(!seen_port[peer_port[i]], "connection %d: peer port %u seen twice", i,
                  peer_port[i]);
        seen_port[peer_port[i]] = 1;
        CHECK_EQ(s_peer_port(fds[i]), peer_port[i]);
    }
    s_log("accepted %d connections from %d distinct peers in %.0f ms", NCONN, NCONN,
          s_now_ms() - t0);
    for (int i = 0; i < NCONN; i++) {
        uint32_t idx;
        s_recv_all(fds[i], &idx, sizeof idx);
        CHECK_MSG(idx < NCONN, "connection %d sent index %u", i, idx);
        CHECK_MSG(!seen_idx[idx], "index %u arrived twice", idx);
        seen_idx[idx] = 1;
        uint32_t echo = idx ^ 0xa5a5a5a5u;
        s_send_all(fds[i], &echo, sizeof echo, 0);
    }
    s_log("every index 0..%d came once", NCONN - 1);
    for (int i = 0; i < NCONN; i++) {
        s_guard(10000, "sov_recv waiting for end of stream");
        s_recv_eof(fds[i]);
        s_unguard();
        SYS(sov_close(fds[i]));
    }
    SYS(sov_close(lfd));
    s_log("all %d closed after %.0f ms", NCONN, s_now_ms() - t0);
}

static void k_client(int chan, void *arg)
{
    (void)arg;
    s_raise_nofile(16384);
    uint16_t port = (uint16_t)s_get_u64(chan);
    static int fds[NCONN];
    static unsigned char seen_port[65536];
    double t0 = s_now_ms();
    struct sockaddr_in a;
    s_addr4(&a, port);
    for (int i = 0; i < NCONN; i++) {
        fds[i] = s_socket(AF_INET, 0);
        errno = 0;
        int r = sov_connect(fds[i], (struct sockaddr *)&a, sizeof a);
        CHECK_MSG(r == 0, "connect %d of %d returned %d (errno %s)", i, NCONN, r,
                  s_errname(errno));
        uint16_t lp = s_local_port(fds[i]);
        CHECK_MSG(!seen_port[lp], "connection %d got local port %u twice", i, lp);
        seen_port[lp] = 1;
    }
    s_log("%d connections open after %.0f ms", NCONN, s_now_ms() - t0);
    for (int i = 0; i < NCONN; i++) {
        uint32_t idx = (uint32_t)i;
        s_send_all(fds[i], &idx, sizeof idx, 0);
    }
    for (int i = 0; i < NCONN; i++) {
        uint32_t echo;
        s_guard(10000, "sov_recv of an echo");
        s_recv_all(fds[i], &echo, sizeof echo);
        s_unguard();
        CHECK_MSG(echo == ((uint32_t)i ^ 0xa5a5a5a5u), "connection %d: echo 0x%08x", i, echo);
    }
    for (int i = 0; i < NCONN; i++)
        SYS(sov_close(fds[i]));
    s_log("done after %.0f ms", s_now_ms() - t0);
}

/* ---- echo64 --------------------------------------------------------------------- */

static void *echo_thread(void *arg)
{
    int fd = (int)(intptr_t)arg;
    unsigned char *buf = malloc(65536);
    CHECK(buf);
    for (;;) {
        errno = 0;
        ssize_t n = sov_recv(fd, buf, 65536, 0);
        CHECK_MSG(n >= 0, "echo: sov_recv returned %zd (errno %s)", n, s_errname(errno));
        if (n == 0)
            break;
        s_send_all(fd, buf, (size_t)n, 0);
    }
    SYS(sov_close(fd));
    free(buf);
    return NULL;
}

static void e_server(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, NCLIENTS);
    s_put_u64(chan, port);
    pthread_t th[NCLIENTS];
    for (int i = 0; i < NCLIENTS; i++) {
        int fd = s_accept(lfd);
        CHECK(pthread_create(&th[i], NULL, echo_thread, (void *)(intptr_t)fd) == 0);
    }
    for (int i = 0; i < NCLIENTS; i++)
        pthread_join(th[i], NULL);
    SYS(sov_close(lfd));
}

static void e_client(int chan, void *arg)
{
    int index = (int)(intptr_t)arg;
    uint16_t port = (uint16_t)s_get_u64(chan);
    int fd = s_connect(AF_INET, port);
    uint64_t seed = 1000 + (uint64_t)index;
    uint64_t rng = seed * 31 + 7;
    unsigned char *out = malloc(131072), *in = malloc(131072);
    CHECK(out && in);
    size_t pos = 0;
    while (pos < ECHO_BYTES) {
        size_t n = (size_t)s_rand_range(&rng, 1, 131072);
        if (n > ECHO_BYTES - pos)
            n = ECHO_BYTES - pos;
        s_pattern_fill(out, n, seed, pos);
        s_send_all(fd, out, n, 0);
        s_recv_all(fd, in, n);
        if (memcmp(in, out, n) != 0) {
            size_t i = 0;
            while (in[i] == out[i])
                i++;
            FAILF("client %d: echoed byte %zu is 0x%02x, expected 0x%02x", index, pos + i,
                  in[i], out[i]);
        }
        pos += n;
    }
    SYS(sov_shutdown(fd, SHUT_WR));
    s_guard(10000, "sov_recv for the echo server's end of stream");
    s_recv_eof(fd);
    s_unguard();
    SYS(sov_close(fd));
    free(out);
    free(in);
}

int main(void)
{
    s_init("many_conns", 110);
    if (s_case("thousand"))
        s_run_pair("server", k_server, "client", k_client, NULL);
    if (s_case("echo64")) {
        int sc;
        s_spawn("server", e_server, NULL, &sc);
        uint64_t port = s_get_u64(sc);
        static char names[NCLIENTS][32]; /* role names must outlive the spawn */
        for (int i = 0; i < NCLIENTS; i++) {
            snprintf(names[i], sizeof names[i], "client %d", i);
            int cc;
            s_spawn(names[i], e_client, (void *)(intptr_t)i, &cc);
            s_put_u64(cc, port);
        }
        double t0 = s_now_ms();
        s_wait_all();
        s_log("%d clients x %u MiB echoed in %.0f ms", NCLIENTS, ECHO_BYTES >> 20,
              s_now_ms() - t0);
    }
    s_pass();
}
