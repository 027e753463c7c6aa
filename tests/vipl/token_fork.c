/*
 * token_fork: a connect token (include/vipl_ext.h VipxViSetConnectToken)
 * is the requester's socket. A child the receiving process forks closes
 * its copy at once (src/vipl/fdguard.c): when the receiving process then
 * closes the token, the requester's socket has no other holder and its
 * peer reads end of file. Both while the token is still in the connection
 * handle at the fork and after VipxConnToken took it. Before, the child
 * kept the socket open as long as it lived (under sovia run, a prefork
 * server's worker forked while the master's listener held a client's
 * kernel socket: the client's close() sent no FIN).
 * Peer: requests with one end of a socketpair as token and watches the
 * other end.
 */
#include "harness.h"

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUNDS 2
#define EOF_MS 2000

static char disc[80];

static void peer_requester(int fd, void *arg)
{
    (void)arg;
    h_expect(fd, 'l'); /* listening */
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    for (int round = 0; round < ROUNDS; round++) {
        int sv[2];
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
        CHECK_OK(VipxViSetConnectToken(vi, sv[0]));
        CHECK(close(sv[0]) == 0); /* the VI's copy goes with its request */
        char local[80];
        h_disc(local, sizeof local);
        VIP_RETURN r = h_connect_ret(vi, local, disc, 5000, NULL);
        CHECK_MSG(r == VIP_REJECT, "request: %s, expected VIP_REJECT", VipxReturnString(r));
        /* The listening process closed its copy; its child must hold none. */
        struct pollfd p = {.fd = sv[1], .events = POLLIN};
        double t0 = h_now_ms();
        int rc = poll(&p, 1, EOF_MS);
        char b;
        CHECK_MSG(rc == 1 && read(sv[1], &b, 1) == 0,
                  "round %d: no end of file %d ms after the listener closed the token (a "
                  "forked child holds it)",
                  round, EOF_MS);
        h_log("round %d: end of file after %.1f ms", round, h_now_ms() - t0);
        close(sv[1]);
        h_vi_teardown(vi);
        h_signal(fd, 'n');
    }
}

/* A child that only lives on, as a prefork server's worker would. */
static pid_t idle_child(void)
{
    pid_t c = fork();
    CHECK(c >= 0);
    if (c == 0) {
        sleep(30);
        _exit(0);
    }
    return c;
}

int main(void)
{
    h_init("token_fork", 60);
    h_disc(disc, sizeof disc);
    h_peer peer = h_fork(peer_requester, NULL);
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_NET_ADDRESS *addr = h_addr(disc);
    CHECK_OK(VipxListen(nic, addr));
    h_signal(peer.fd, 'l');
    VIP_NET_ADDRESS *remote = h_addr_room();
    for (int round = 0; round < ROUNDS; round++) {
        VIP_CONN_HANDLE ch;
        VIP_VI_ATTRIBUTES ra;
        CHECK_OK(VipConnectWait(nic, addr, 20000, remote, &ra, &ch));
        int token = -1;
        pid_t child;
        if (round == 0) { /* forked with the token in the handle */
            child = idle_child();
            CHECK_OK(VipxConnToken(ch, &token));
        } else { /* forked after the token was taken */
            CHECK_OK(VipxConnToken(ch, &token));
            child = idle_child();
        }
        CHECK(token >= 0);
        CHECK_OK(VipConnectReject(ch));
        CHECK(VipxFdClose(token) == 0);
        h_expect(peer.fd, 'n');
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
    h_peer_finish(&peer);
    CHECK_OK(VipxUnlisten(nic, addr));
    free(addr);
    free(remote);
    h_pass();
}
