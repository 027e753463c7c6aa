/*
 * process.c - fork. The sockets layer shares every connection between
 * parent and child (docs/SOCKETS.md, "Processes"); what is left here is the
 * preload's own state. A shadow listener's accept queue stays with the
 * parent: a child accepting on the inherited socket pairs nothing, and its
 * clients fall back to kernel TCP (transparent.c).
 */
#include <pthread.h>
#include <unistd.h>

#include "preload.h"
#include "sock.h"

static void child_after_fork(void)
{
    listeners_after_fork_child(); /* the sockets layer's own handlers do the rest */
}

__attribute__((constructor)) static void install_fork_handlers(void)
{
    pthread_atfork(NULL, NULL, child_after_fork);
}
