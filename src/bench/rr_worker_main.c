/* rr_worker_main.c - sovia-rr, the worker program `sovia bench rr` execs for
 * its libc transports (tcp, uds, and preload: this program under the
 * preload library). Plain libc: it links neither libsovia nor libvipl. */
#include "rr.h"

int main(int argc, char **argv)
{
    return rr_worker_main(argc, argv, &rr_libc_ops);
}
