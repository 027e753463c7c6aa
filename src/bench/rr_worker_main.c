/* rr_worker_main.c - sovia-rr, the worker program `sovia bench rr` execs for
 * its libc transports (tcp, uds, and preload: this program under the
 * preload library). Plain libc: it links neither libsovia nor libvipl. */
#include "rr.h"

#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    /* SOVIA_BENCH_RR_LOOP=poll: each thread's loop is poll(2), not epoll. */
    const char *loop = getenv("SOVIA_BENCH_RR_LOOP");
    bool poll_loop = loop && strcmp(loop, "poll") == 0;
    return rr_worker_main(argc, argv, poll_loop ? &rr_libc_poll_ops : &rr_libc_ops);
}
