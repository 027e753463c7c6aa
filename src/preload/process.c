/*
 * process.c - fork. The sockets layer shares every connection between
 * parent and child (docs/SOCKETS.md, "Processes"); what is left here is the
 * preload's own state. A shadow listener's accept queue stays with the
 * parent: a child accepting on the inherited socket pairs nothing, and its
 * clients fall back to kernel TCP (transparent.c). The child's exit record
 * starts from the connections it inherited (stats.c), written where the
 * parent's would be unless its environment says otherwise (exitlog.c).
 */
#include <pthread.h>
#include <unistd.h>

#include "preload.h"
#include "sock.h"

static void child_after_fork(void)
{
    listeners_after_fork_child(); /* the sockets layer's own handlers do the rest */
    epoll_after_fork_child();
    sov_tally_forked(); /* the child's exit record counts its own (stats.c) */
    exitlog_capture();
}

__attribute__((constructor)) static void install_fork_handlers(void)
{
    pthread_atfork(NULL, NULL, child_after_fork);
}
