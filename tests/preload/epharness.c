/*
 * epharness.c - the epoll tests' shared helpers (epharness.h).
 */
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "epharness.h"

int add(int ep, int fd, uint32_t events, uint64_t tag)
{
    struct epoll_event ev = {.events = events, .data.u64 = tag};
    return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

int mod(int ep, int fd, uint32_t events, uint64_t tag)
{
    struct epoll_event ev = {.events = events, .data.u64 = tag};
    return epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
}


/* One epoll_wait (or epoll_pwait); checks no tag comes twice. */
struct seen wait_all(int ep, int timeout, bool pwait)
{
    struct epoll_event evs[8];
    memset(evs, 0, sizeof evs);
    int n = pwait ? epoll_pwait(ep, evs, 8, timeout, NULL) : epoll_wait(ep, evs, 8, timeout);
    CHECK(n >= 0);
    struct seen s = {.n = n};
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < i; j++)
            if (evs[j].data.u64 == evs[i].data.u64)
                FAILF("epoll_wait reported tag 0x%llx twice in one call",
                      (unsigned long long)evs[i].data.u64);
        if (evs[i].data.u64 == TAG_SOCK)
            s.sock = evs[i].events;
        else if (evs[i].data.u64 == TAG_PIPE)
            s.pipe = evs[i].events;
        else if (evs[i].data.u64 == TAG_INNER)
            s.inner = evs[i].events;
        else
            FAILF("epoll_wait reported an unknown tag 0x%llx",
                  (unsigned long long)evs[i].data.u64);
    }
    return s;
}

/* The events of `tag` in one wait (0 if not reported); *count: all events. */
uint32_t wait_tag(int ep, int timeout, uint64_t tag, int *count, bool pwait)
{
    struct seen s = wait_all(ep, timeout, pwait);
    if (count)
        *count = s.n;
    return tag == TAG_SOCK ? s.sock : tag == TAG_PIPE ? s.pipe : s.inner;
}

void feeder_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    for (;;) {
        long long cmd = p_get_int(r);
        if (cmd == 0) /* done */
            break;
        if (cmd == 1) /* 10 bytes on the socket */
            p_write_all(fd, "0123456789", 10);
        else if (cmd == 2) /* the pipe */
            p_put_int(r, 77);
        else if (cmd == 3)
            SYS(shutdown(fd, SHUT_WR));
        else
            FAILF("command %lld", cmd);
    }
    SYS(close(fd));
}
