/*
 * process.c - fork. The child inherits the parent's memory, so its view of
 * each connection is the parent's at the fork; sovia's threads do not
 * survive, and are restarted on demand. A shadow listener's accept queue
 * stays with the parent: a child accepting on the inherited socket pairs
 * nothing, and its clients fall back to kernel TCP (transparent.c).
 */
#include <pthread.h>
#include <unistd.h>

#include "preload.h"
#include "sock.h"

static void child_after_fork(void)
{
    listeners_after_fork_child();
    sov_after_fork_child();
}

__attribute__((constructor)) static void install_fork_handlers(void)
{
    pthread_atfork(NULL, NULL, child_after_fork);
}
