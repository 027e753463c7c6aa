/*
 * epharness.h - what the epoll tests (epoll.c, epoll_nested.c) share: tags,
 * epoll_ctl shorthands, one wait's events by tag, and the feeder server.
 */
#ifndef EPHARNESS_H
#define EPHARNESS_H

#include <stdbool.h>
#include <stdint.h>

#include "pharness.h"

#define TAG_SOCK 0x50c4ull
#define TAG_PIPE 0x919eull
#define TAG_INNER 0x1223ull

int add(int ep, int fd, uint32_t events, uint64_t tag);
int mod(int ep, int fd, uint32_t events, uint64_t tag);

/* What one epoll_wait reported, by tag. */
struct seen {
    int n;
    uint32_t sock, pipe, inner;
};

/* One epoll_wait (or epoll_pwait); checks no tag comes twice. */
struct seen wait_all(int ep, int timeout, bool pwait);
/* The events of `tag` in one wait (0 if not reported); *count: all events. */
uint32_t wait_tag(int ep, int timeout, uint64_t tag, int *count, bool pwait);

/* Accepts one connection and obeys the client: 1 sends 10 bytes on the
 * socket, 2 writes the pipe, 3 shuts the socket's sending side, 0 ends. */
void feeder_server(struct p_role *r);

#endif
