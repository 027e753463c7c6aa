/*
 * listener.h - a listening socket's connection thread and accept queue
 * (conn.c), shared with the pairing of sovia run's connections (pair.c).
 */
#ifndef SOVIA_LISTENER_H
#define SOVIA_LISTENER_H

#include "sock.h"

#define SOV_ESTABLISHING_ANY 0x10000u
#define SOV_GAVE_UP_MAX 32

struct pending {
    struct sov_conn *conn;
    struct sockaddr_storage peer;
    socklen_t peer_len;
    int token; /* sovia run: the client's kernel socket, sent with its VI (-1: none) */
    uid_t uid;    /* the client's user */
    bool foreign; /* another user than we are (its token is an epoll instance) */
    /* The client's request named no port (its kernel connect picks one, as
     * for any client): sov_pending_port learns it from the token; one
     * whose token does not hold an accepted connection is another's. */
    bool unbound;
    /* Another user's unbound one: the socket its epoll token watches
     * (sov_token_target, looked up once; UINT64_MAX: none), compared with
     * the accepted connection's client socket before the full proof. */
    uint64_t target_ino;
    /* sovia run, a VI that proves itself by the cluster key (xhost.c):
     * when the queue drops it if no accept() took it (0: never). Its
     * client gives up at its pairing timeout; a hostile one that never
     * makes its kernel connection would hold the slot for ever. */
    uint64_t expires_ns;
};

/* The client port of a queued VI: the one its request named, or, for an
 * unbound one, its token's own port once its kernel connect gave it one
 * (noted in p->peer; 0 until then, or for a token that is not a socket:
 * any accepted connection may be its). Caller holds the wait_lock. */
uint16_t sov_pending_port(struct pending *p);

/*
 * A connection accepted whose client has not sent its WAKEUP yet. The
 * connection thread keeps these aside instead of waiting for each in turn:
 * one client that connects and says nothing must not hold up the others
 * (kernel TCP completes their handshakes meanwhile). Like a half-open TCP
 * connection, it is not in the accept queue until its WAKEUP came.
 */
struct establishing {
    struct pending p;
    uint64_t deadline_ns;
};

/* A connection thread: the listener's own NIC's, or the far NIC's (far.c:
 * the same port shadowed on the fabric NIC beside shm, for clients on other
 * hosts; started when the first such client's kernel connection is
 * accepted, sov_listen_far, and it opens the far NIC first, so no program
 * call waits for libfabric and a program whose peers are all on this host
 * never loads it). */
struct sov_lside {
    struct sov_listener *l;
    bool far;
    bool started; /* its thread runs */
    pthread_t thread;
    VIP_NET_ADDRESS *remote; /* the thread's buffer (here: reachable from a fork child) */
    struct establishing *est; /* the thread's (cap entries; here for the same reason) */
};

struct sov_listener {
    struct sov_sock *s;
    VIP_NET_ADDRESS *addr;
    atomic_bool stop;
    struct sov_config cfg;
    int domain;
    struct pending *q; /* accept queue (under s->wait_lock) */
    unsigned head, count, cap;
    /* sovia run: connections wait in the queue, unpaired, until accept()
     * matches one with the kernel connection of the same client port. */
    bool transparent;
    /* A VI being accepted by the thread: its client port (0: none;
     * SOV_ESTABLISHING_ANY: an unbound client's, which any may be). */
    uint32_t establishing_port;
    /* With SOV_ESTABLISHING_ANY, that VI's token when it is our user's
     * socket (-1: another user's): an accept() waits for the VI only if
     * the token's port is its client's (a plain client's accept() need not
     * wait for another connection's VI). Under s->wait_lock; the thread
     * closes it only after clearing establishing_port. */
    int establishing_token;
    /* Requests the thread began or queued (under s->wait_lock): an
     * accept() waiting for a VI sees the thread move on. */
    uint32_t handled;
    pid_t owner; /* the process whose connection thread serves it */
    struct sov_lside side[2]; /* [0]: sov_g.nic's; [1]: the far NIC's, if started */
    /* side[1] is allocated and waits to start (sov_listen_far; under
     * s->wait_lock once the listener is published). */
    bool far_wanted;
    /* A ticketed listener (sovia run, step 6) takes only the clients this
     * process claimed and still waits for in accept(): their ports (under
     * s->wait_lock). Any other, one whose accept() gave up on it, say, is
     * refused at once instead of waiting there for its pairing timeout. */
    bool ticketed;
    uint16_t awaited[SOV_AWAITED_MAX];
    unsigned nawaited;
    /* sovia run: client ports whose accept() found no VI queued, arriving
     * or waiting to be taken (under s->wait_lock). A non-blocking
     * client's request may still be between the provider and this
     * thread's mark (establishing_port) then: the thread refuses such a
     * VI when it comes, and its client falls back at once instead of
     * waiting for a pairing that will not come (sov_gave_up_take). */
    struct sov_gave_up {
        uint16_t port;
        uint64_t at_ns;
    } gave_up[SOV_GAVE_UP_MAX];
    unsigned gave_up_next;
};

/* The port a token socket has now (0: none yet, or no such socket). */
uint16_t sov_token_port(int token);
/* accept() gave up on `port` (caller holds the wait_lock). */
void sov_gave_up_note(struct sov_listener *l, uint16_t port);
/* True (once) when accept() gave up lately on `port`, or with port 0 on
 * the port of `token` (our user's client socket; -1: none). */
bool sov_gave_up_take(struct sov_listener *l, uint16_t port, int token);

void sov_pending_drop(struct pending *p);
/* Takes entry i out of the accept queue, keeping the order (caller holds
 * the socket's wait_lock). */
struct pending sov_queue_take(struct sov_listener *l, unsigned i);
bool sov_queued_conn_broken(struct sov_conn *c);
int sov_map_connect_error(VIP_RETURN r);
VIP_VI_ATTRIBUTES sov_conn_attrs(const struct sov_config *cfg);

#endif /* SOVIA_LISTENER_H */
