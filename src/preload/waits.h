/*
 * waits.h - what the preload's waits share: poll/select (poll.c), epoll
 * (epoll.c) and the signal-handler count (signal.c).
 */
#ifndef SOVIA_PRELOAD_WAITS_H
#define SOVIA_PRELOAD_WAITS_H

#include <stdatomic.h>
#include <stdbool.h>

/* signal.c: the calling thread's count of signal handlers run. */
const _Atomic unsigned *preload_signal_count(void);
bool preload_dozing(int fd);
/* Of those, the handlers installed without SA_RESTART. */
const _Atomic unsigned *preload_interrupt_count(void);

/* epoll.c: is fd an epoll set with carried entries (its own, or in a set
 * nested in it)? */
bool epoll_active(int fd);

#endif /* SOVIA_PRELOAD_WAITS_H */
