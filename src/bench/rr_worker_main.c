/* rr_worker_main.c - sovia-rr, the worker program `sovia bench rr` execs for
 * its libc transports (tcp, uds, and preload: this program under the
 * preload library). Plain libc: it links neither libsovia nor libvipl. */
#include "rr.h"


int main(int argc, char **argv)
{
    /* SOVIA_BENCH_RR_LOOP=poll: each thread's loop is poll(2), not epoll;
     * =oneshot: epoll with one-shot entries re-armed after each event. */
    return rr_worker_main(argc, argv, rr_libc_ops_chosen());
}
