/*
 * hostile_listener: a hostile listening side against a client under
 * `sovia run` (test_hardening_rvictim's probe: one echo of 5000 bytes,
 * reported). The hostile side listens on a kernel TCP port and on its
 * sovia discriminator as a shadow listener does, accepts the client's VI
 * and kernel connection, then sends REDIRECT (docs/PROTOCOL.md) where the
 * protocol forbids it:
 *  - redirect_twice: a second REDIRECT from the process the first one sent
 *    the client to. The client must not follow it (a chain of redirects
 *    could keep it hopping for ever): its connection falls back to the
 *    kernel, where the echo is exact;
 *  - redirect_nowhere: to a ticket nobody listens at: kernel TCP at once;
 *  - redirect_paired: after the pairing (our WAKEUP, the client's, its
 *    first DATA): a protocol violation, so the connection resets (the
 *    probe's echo fails) and our VI breaks within 1 s.
 * The probe's stat record says which happened (carried, fell back,
 * redirected).
 */
#include <arpa/inet.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hcommon.h"
#include "hrprog.h"
#include "hsovia.h"
#include "isorun.h"
#include "sovia/sharness.h"

/* docs/PROTOCOL.md, restated: type 6, the ticket in bits 3-31. */
#define REDIRECT_IMM(ticket) (6u | (uint32_t)(ticket) << 3)
#define PROBE_BYTES 5000

static int stat_log;

/* "sovia" + port, and for a ticket 'T' + its four bytes (docs/ARCHITECTURE.md). */
static VIP_NET_ADDRESS *listen_addr(uint16_t port, uint32_t ticket)
{
    uint8_t disc[12] = {'s', 'o', 'v', 'i', 'a'};
    uint16_t p = htons(port);
    memcpy(disc + 5, &p, 2);
    unsigned len = 7;
    if (ticket) {
        disc[len++] = 'T';
        memcpy(disc + len, &ticket, 4);
        len += 4;
    }
    return hc_addr_bytes(disc, len);
}

/* s opened as hs_connect_with does, listening at `at` instead. */
static void hs_listen(struct hs *s, const VIP_NET_ADDRESS *at)
{
    memset(s, 0, sizeof *s);
    struct hp_opts o = {.mtu = HS_MTU, .nbufs = HS_NBUFS, .bufsz = HS_MTU};
    hp_open(&s->h, &o);
    s->rx_cap = 1 << 20;
    s->rx = malloc(s->rx_cap);
    CHECK(s->rx != NULL);
    VIP_RETURN r = VipxListen(s->h.nic, (VIP_NET_ADDRESS *)at);
    CHECK_MSG(r == VIP_SUCCESS, "VipxListen: %s", VipxReturnString(r));
}

/* Accepts the next request at `at` within ms into s; false if none came. */
static bool hs_take(struct hs *s, const VIP_NET_ADDRESS *at, unsigned ms)
{
    VIP_NET_ADDRESS *remote = hc_addr_room();
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE ch;
    VIP_RETURN r = VipConnectWait(s->h.nic, (VIP_NET_ADDRESS *)at, ms, remote, &ra, &ch);
    free(remote);
    if (r == VIP_TIMEOUT)
        return false;
    CHECK_MSG(r == VIP_SUCCESS, "VipConnectWait: %s", VipxReturnString(r));
    int token = -1;
    CHECK(VipxConnToken(ch, &token) == VIP_SUCCESS);
    CHECK_MSG(token >= 0, "the client's request came without its kernel socket");
    VipxFdClose(token);
    CHECK(VipConnectAccept(ch, s->h.vi) == VIP_SUCCESS);
    return true;
}

/* A kernel TCP listener on 127.0.0.1 (sharness's s_listener is sovia's). */
static int kernel_listener(uint16_t *port)
{
    int fd = (int)SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    struct sockaddr_in a;
    s_addr4(&a, 0);
    SYS(bind(fd, (struct sockaddr *)&a, sizeof a));
    SYS(listen(fd, 4));
    socklen_t len = sizeof a;
    SYS(getsockname(fd, (struct sockaddr *)&a, &len));
    *port = ntohs(a.sin_port);
    return fd;
}

/* Echoes what the client sends on the kernel connection until its end. */
static size_t kernel_echo(int fd, unsigned ms)
{
    char buf[8192];
    size_t total = 0;
    double end = s_now_ms() + ms;
    for (;;) {
        int left = (int)(end - s_now_ms());
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return total;
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0)
            return total;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = send(fd, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
            if (w <= 0)
                return total;
            off += w;
        }
        total += (size_t)n;
    }
}

enum move { TWICE, NOWHERE, PAIRED };

static void run(enum move move)
{
    uint16_t port;
    int lfd = kernel_listener(&port);
    uint32_t t1 = 0x1234567u + (uint32_t)move, t2 = 0x7654321u + (uint32_t)move;
    VIP_NET_ADDRESS *a0 = listen_addr(port, 0), *a1 = listen_addr(port, t1),
                    *a2 = listen_addr(port, t2);
    struct hs s0, s1, s2;
    hs_listen(&s0, a0);
    hs_listen(&s1, a1);
    hs_listen(&s2, a2);
    int chan;
    /* The probe connects from this port (the claim names it): one nobody
     * holds now, not even in TIME_WAIT (a fixed pick was taken 1 run in
     * ~20 on a busy machine: "no VI from the client"). */
    uint16_t lport = iso_unused_port();
    int probe = hr_start("probe", "probe", port, lport, &chan);
    pid_t probe_pid = s_pid(probe);
    CHECK_MSG(hs_take(&s0, a0, 5000), "no VI from the client");
    int k = (int)SYS(accept(lfd, NULL, NULL));
    double t0 = s_now_ms();
    switch (move) {
    case TWICE:
        CHECK(!(hs_raw(&s0, REDIRECT_IMM(t1), NULL, 0) & VIP_STATUS_ERROR_MASK));
        CHECK_MSG(hs_take(&s1, a1, 3000), "the client did not follow the first REDIRECT");
        CHECK(!(hs_raw(&s1, REDIRECT_IMM(t2), NULL, 0) & VIP_STATUS_ERROR_MASK));
        CHECK_MSG(!hs_take(&s2, a2, 300), "the client followed a second REDIRECT");
        break;
    case NOWHERE:
        CHECK(!(hs_raw(&s0, REDIRECT_IMM(t1 ^ 0x55u), NULL, 0) & VIP_STATUS_ERROR_MASK));
        break;
    case PAIRED:
        CHECK(!(hs_wakeup(&s0) & VIP_STATUS_ERROR_MASK));
        CHECK_MSG(hs_await_wakeup(&s0, 3000), "the client did not answer our WAKEUP");
        /* Its first DATA: the client itself counts as paired (before, a
         * reset only sends it back to the kernel connection). */
        while (s0.rx_len == 0 && s_now_ms() - t0 < 3000)
            hs_pump(&s0, 10);
        CHECK_MSG(s0.rx_len > 0, "no DATA from the client after the pairing");
        hs_raw(&s0, REDIRECT_IMM(t1), NULL, 0);
        CHECK_MSG(!hs_take(&s1, a1, 300), "the client followed a REDIRECT after pairing");
        while (hp_state(&s0.h) == VIP_STATE_CONNECTED && s_now_ms() - t0 < 1000)
            hs_pump(&s0, 10);
        CHECK_MSG(hp_state(&s0.h) != VIP_STATE_CONNECTED,
                  "our VI still connected 1 s after the REDIRECT");
        break;
    }
    size_t echoed = kernel_echo(k, 3000);
    int32_t ok = 0;
    s_get(chan, &ok, sizeof ok);
    s_reap(probe);
    struct hr_stat st = hr_stat_of(stat_log, probe_pid);
    s_log("probe: echo %s, %zu bytes over the kernel in %.0f ms; carried %u fell_back %u "
          "redirected %u",
          ok ? "exact" : "failed", echoed, s_now_ms() - t0, st.carried, st.fell_back,
          st.redirected);
    if (move == PAIRED) {
        CHECK_MSG(!ok, "the probe's echo worked on a connection that broke the protocol");
        CHECK_EQ(st.carried, 1u);
    } else {
        CHECK_MSG(ok, "the probe's echo failed");
        CHECK_EQ(echoed, (size_t)PROBE_BYTES);
        CHECK_EQ(st.carried, 0u);
        CHECK_EQ(st.fell_back, 1u);
        CHECK_EQ(st.redirected, move == TWICE ? 1u : 0u);
    }
    close(k);
    close(lfd);
    hs_close(&s0);
    hs_close(&s1);
    hs_close(&s2);
    free(a0);
    free(a1);
    free(a2);
}

int main(void)
{
    s_init("hostile_listener", 60);
    stat_log = hr_stat_log();
    if (s_case("redirect_twice"))
        run(TWICE);
    if (s_case("redirect_nowhere"))
        run(NOWHERE);
    if (s_case("redirect_paired"))
        run(PAIRED);
    s_pass();
}
