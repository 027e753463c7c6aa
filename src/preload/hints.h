/*
 * hints.h - the peers' readiness hints, for the preload's epoll (hints.c).
 */
#ifndef SOVIA_PRELOAD_HINTS_H
#define SOVIA_PRELOAD_HINTS_H

#include <stdbool.h>
#include <stdint.h>

struct sov_sock;

/* Calls fn for the descriptor of each socket hinted since *cursor (one may
 * come more than once, or be closed or reused since: a reason to look, no
 * more), and moves the cursor on. false: the caller must look at every
 * entry (the log overran its cursor, or there are no hints). */
bool hints_take(uint64_t *cursor, void (*fn)(void *arg, int fd), void *arg);

/* May the carried socket s, under descriptor fd, be left to the hints
 * until its next one? (Its lock held, paired.) Names it for them first, so
 * that the look that follows sees what came before any hint is lost. */
bool hints_cover(struct sov_sock *s, int fd);

void hints_after_fork_child(void);

#endif /* SOVIA_PRELOAD_HINTS_H */
