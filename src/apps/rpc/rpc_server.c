/*
 * rpc_server.c - the server of the RPC experiment (seed 000 section 5.4):
 * an ordinary TI-RPC program, unaware of sovia. It creates a TCP transport
 * on an anonymous port, registers STRARG_PROG with rpcbind, prints
 * "ready prog 0x... port N" and serves until SIGINT or SIGTERM, then
 * unregisters and exits 0 (so a run under `sovia run` writes its exit
 * record).
 *
 * It stays in the foreground and single-process on purpose: a
 * connection under sovia cannot yet be shared across fork (issue 4).
 * Its loop is svc_run's (poll on svc_pollfd, then svc_getreq_poll) with a
 * stop flag, because svc_run itself never returns on a signal.
 *
 * usage: rpc_server [-P PROGRAM_NUMBER]
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rpc/rpc.h>

#include "strarg.h"
#include "strarg_svc.h"

static volatile sig_atomic_t stop_requested;

static void on_stop(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static int parse_prog(int argc, char **argv, rpcprog_t *prog)
{
    int opt;
    while ((opt = getopt(argc, argv, "P:")) != -1) {
        if (opt != 'P')
            return -1;
        char *end;
        unsigned long v = strtoul(optarg, &end, 0);
        if (*end != '\0' || v == 0 || v > 0xffffffffUL)
            return -1;
        *prog = (rpcprog_t)v;
    }
    return optind == argc ? 0 : -1;
}

/* The port the transport listens on (for the ready line). */
static int local_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -1;
}

int main(int argc, char **argv)
{
    rpcprog_t prog = STRARG_PROG;
    if (parse_prog(argc, argv, &prog) < 0) {
        fprintf(stderr, "usage: %s [-P PROGRAM_NUMBER]\n", argv[0]);
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop; /* no SA_RESTART: poll returns EINTR */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    struct netconfig *nconf = getnetconfigent("tcp");
    if (!nconf) {
        fprintf(stderr, "rpc_server: no \"tcp\" in /etc/netconfig\n");
        return 1;
    }
    SVCXPRT *xprt = svc_tli_create(RPC_ANYFD, nconf, NULL, 0, 0);
    if (!xprt) {
        fprintf(stderr, "rpc_server: cannot create a tcp transport\n");
        return 1;
    }
    rpcb_unset(prog, STRARG_VERS, NULL); /* a stale registration of a killed run */
    if (!svc_reg(xprt, prog, STRARG_VERS, strarg_prog_1, nconf)) {
        fprintf(stderr, "rpc_server: cannot register program 0x%lx with rpcbind\n",
                (unsigned long)prog);
        return 1;
    }
    freenetconfigent(nconf);
    printf("ready prog 0x%lx port %d\n", (unsigned long)prog, local_port(xprt->xp_fd));
    fflush(stdout);

    int rc = 0;
    while (!stop_requested) {
        int n = poll(svc_pollfd, (nfds_t)svc_max_pollfd, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            perror("rpc_server: poll");
            rc = 1;
            break;
        }
        svc_getreq_poll(svc_pollfd, n);
    }
    svc_unreg(prog, STRARG_VERS);
    return rc;
}
