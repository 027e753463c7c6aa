/*
 * handler.c - the papers' multi-threaded message-handling strategies, kept
 * to reproduce their comparison (seed 004, Fig. 5):
 *
 * HANDLER: one handler thread waits on the completion queue, handles each
 *   connection's packets and wakes the application thread.
 * NOTIFY:  a vipl notify callback per connection (run by a provider thread)
 *   does the same.
 *
 * Either way the application thread sleeps on the socket's condition
 * variable; the wake-up it pays for is the papers' Tsync.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>

#include "sock.h"

/* VI -> socket, for the handler thread (VIPL has no per-VI user context). */
#define MAP_SIZE 4096
struct map_entry {
    VIP_VI_HANDLE vi;
    struct sov_sock *s;
    struct map_entry *next;
};
static struct map_entry *map[MAP_SIZE];
static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t slot(VIP_VI_HANDLE vi)
{
    return ((uintptr_t)vi >> 6) % MAP_SIZE;
}

/* Handles everything completed on the socket's VI; caller holds s->lock. */
static void handle_all(struct sov_sock *s, VIP_DESCRIPTOR *first)
{
    VIP_DESCRIPTOR *d = first;
    if (d)
        sov_handle_packet(s, d);
    while (s->conn && VipRecvDone(s->conn->vi, &d) == VIP_SUCCESS)
        sov_handle_packet(s, d);
    sov_mig_step(s); /* our side of a migration the peer asked for (migrate.c) */
}

/* One per CQ: the process's own NIC's, and (sovia run with a cluster key)
 * the far NIC's, started by its first connection in HANDLER mode. */
static void *handler_thread(void *arg)
{
    VIP_CQ_HANDLE cq = *(VIP_CQ_HANDLE *)arg;
    for (;;) {
        VIP_VI_HANDLE vi;
        VIP_BOOLEAN recvq;
        if (VipCQWait(cq, 100, &vi, &recvq) != VIP_SUCCESS)
            continue;
        pthread_mutex_lock(&map_lock);
        struct map_entry *e = map[slot(vi)];
        while (e && e->vi != vi)
            e = e->next;
        struct sov_sock *s = e ? e->s : NULL;
        pthread_mutex_unlock(&map_lock);
        if (!s)
            continue;
        /* Sockets are recycled, never freed: if this one was closed (or
         * reused) meanwhile, its connection no longer has this VI. */
        sov_sock_lock(s);
        if (s->conn && s->conn->vi == vi && s->conn->cfg.handling == SOV_HANDLER)
            handle_all(s, NULL);
        sov_sock_unlock(s);
        sov_wake_waiters(s);
    }
    return NULL;
}

int sov_handling_start(void)
{
    pthread_mutex_lock(&sov_g.lock);
    int err = 0;
    if (sov_g.cfg.handling == SOV_HANDLER && !sov_g.handler_running) {
        err = VipxThreadCreate(&sov_g.handler_thread, NULL, handler_thread, &sov_g.cq) ? -EAGAIN
                                                                                       : 0;
        sov_g.handler_running = err == 0;
    }
    pthread_mutex_unlock(&sov_g.lock);
    return err;
}

static void notify_cb(VIP_PVOID ctx, VIP_NIC_HANDLE nic, VIP_VI_HANDLE vi, VIP_DESCRIPTOR *d)
{
    (void)nic;
    struct sov_sock *s = ctx;
    sov_sock_lock(s);
    if (s->conn && s->conn->vi == vi) {
        handle_all(s, d);
        if (!s->conn->reset)
            VipRecvNotify(vi, s, notify_cb); /* one-shot: ask for the next one */
    }
    sov_sock_unlock(s);
    sov_wake_waiters(s);
}

/* The far NIC's handler thread (a fork child has no far NIC: far.c). */
static pthread_once_t far_once = PTHREAD_ONCE_INIT;
static bool far_handler_running;

static void far_handler_start(void)
{
    pthread_t t;
    far_handler_running = VipxThreadCreate(&t, NULL, handler_thread, &sov_g.far.cq) == 0;
}

/* Called when a socket becomes connected (s->lock held). */
int sov_conn_attach_handling(struct sov_sock *s)
{
    struct sov_conn *c = s->conn;
    if (c->cfg.handling == SOV_NOTIFY)
        return VipRecvNotify(c->vi, s, notify_cb) == VIP_SUCCESS ? 0 : -ENOMEM;
    if (c->cfg.handling != SOV_HANDLER)
        return 0;
    if (c->far) {
        pthread_once(&far_once, far_handler_start);
        if (!far_handler_running) { /* handled in its callers' calls */
            c->cfg.handling = SOV_SINGLE;
            return 0;
        }
    }
    struct map_entry *e = malloc(sizeof(*e));
    if (!e)
        return -ENOMEM;
    e->vi = c->vi;
    e->s = s;
    pthread_mutex_lock(&map_lock);
    e->next = map[slot(c->vi)];
    map[slot(c->vi)] = e;
    pthread_mutex_unlock(&map_lock);
    /* Packets that completed before the VI was in the map had their CQ
     * entries taken by the handler thread, which found no socket: handle
     * them now (later ones reach the handler through the map). */
    handle_all(s, NULL);
    return 0;
}

/* Before the connection is destroyed (s->lock not held). */
void sov_conn_detach_handling(struct sov_sock *s)
{
    struct sov_conn *c = s->conn;
    if (!c || c->cfg.handling != SOV_HANDLER)
        return;
    pthread_mutex_lock(&map_lock);
    for (struct map_entry **p = &map[slot(c->vi)]; *p; p = &(*p)->next)
        if ((*p)->vi == c->vi) {
            struct map_entry *e = *p;
            *p = e->next;
            free(e);
            break;
        }
    pthread_mutex_unlock(&map_lock);
}

/* Before fork (s->lock held): a connection shared with the child is handled
 * by its callers from now on, in this process too. The handler thread took
 * packets off the queue whether or not this process was the one using the
 * connection (a parent waiting in system() while its child reads: the
 * peer's bytes went to the parent, and it reset), and out of the shared
 * record's sight; the child has no handler thread at all. */
void sov_conn_handle_in_calls(struct sov_sock *s)
{
    if (!s->conn || s->conn->cfg.handling != SOV_HANDLER)
        return;
    sov_conn_detach_handling(s);
    s->conn->cfg.handling = SOV_SINGLE;
}
