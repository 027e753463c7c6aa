/*
 * epset.h - an epoll set's carried entries, shared by epoll.c (the sets,
 * epoll_ctl, the scans) and epoll_wait.c (the waits).
 */
#ifndef SOVIA_PRELOAD_EPSET_H
#define SOVIA_PRELOAD_EPSET_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

enum kind { CARRIED, NESTED };

struct item {
    int fd;
    enum kind kind;
    uint32_t events;
    epoll_data_t data;
    bool disabled; /* EPOLLONESHOT fired */
    bool gone;     /* no longer carried, or the nested set closed: dropped after the scan */
    uint32_t last; /* readiness at the previous look (for edges) */
    uint64_t last_rx, last_tx;
    bool due;      /* in the set's due list: looked at in each scan */
    unsigned gen;  /* the scan that last met it in the due list */
};

struct epset {
    pthread_mutex_t lock;
    struct item *v;
    unsigned n, cap;
    /* v's index + 1 of each descriptor's entry (0: none), so that
     * epoll_ctl costs the same with 10 entries as with 10,000 (a server
     * re-arming one-shot entries calls it per event) */
    unsigned *at;
    unsigned at_cap;
    unsigned counted[2]; /* entries of each kind */
    unsigned cursor; /* where the next scan starts: ready entries take turns */
    atomic_uint ncarried, nnested;
    atomic_int nkernel;         /* kernel entries added through us (may overcount) */
    atomic_bool kernel_unknown; /* not seen created: it may hold any */
    atomic_bool is_epoll;       /* an epoll descriptor (the kernel said so) */
    atomic_uint turn;           /* even: carried entries first, odd: kernel ones */
    atomic_bool kernel_quiet;   /* the last look found the kernel set empty */
    atomic_bool kernel_owed;    /* a call returned at once without looking */
    _Atomic uint64_t kernel_seen_ns; /* when the kernel set was last looked at */
    atomic_int sleepers;        /* threads asleep on it */
    /* No futex sleep tried before (an entry did not fit: futex_hold) */
    _Atomic uint64_t futex_after_ns;
    /* Readiness hints (docs/ARCHITECTURE.md): a scan looks at the due
     * entries only (hinted, ready at the last look and level-triggered,
     * new, or not left to hints), and at every entry at least every
     * BACKSTOP_NS. due: their descriptors (stale ones skipped); spare:
     * room to put those reported last. */
    int *due, *spare;
    unsigned ndue, duecap, gen;
    uint64_t hint_cursor, full_ns, full_cost_ns;
    bool full_owed;
};

struct epset *eps_of(int epfd); /* the set of epfd, if any */
/* Locks a set to look into it (see epoll.c); false: not this time. */
bool eps_look_lock(struct epset *s, bool *busy);
void eps_look_unlock(struct epset *s);
/* Adds the ready carried and nested entries to out[n..max). */
int eps_scan(int epfd, struct epset *s, struct epoll_event *out, int n, int max, bool *pending);
bool eps_active(struct epset *s); /* holds a carried entry, or a set that does */
bool eps_placeholder(epoll_data_t d); /* one of our kernel entries' tags */
/* Folds events for `data` into an event already in out[0..n): true if done. */
bool eps_merge(struct epoll_event *out, int n, epoll_data_t data, uint32_t events);

#endif /* SOVIA_PRELOAD_EPSET_H */
