/*
 * transparent.h - what the preload library of `sovia run` uses from the
 * sockets layer: sovia connections behind the program's kernel sockets.
 * Functions return 0 or a negative errno unless said otherwise.
 */
#ifndef SOVIA_TRANSPARENT_H
#define SOVIA_TRANSPARENT_H

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

struct sov_sock;

enum sov_tp_state { SOV_TP_PAIRED, SOV_TP_PENDING, SOV_TP_FELL_BACK };

/* The descriptors sovia keeps per carried connection under sovia run: the
 * connection socket, a pidfd of the peer, the peer CQ's wake socket, and
 * for exec both ends' ctl and rx memfds, the peer's armed page and word;
 * plus, while it is queued, the client's kernel socket (its token). */
#define SOV_TP_CONN_FDS 10
/* Whether one more connection leaves a quarter of the soft RLIMIT_NOFILE
 * free (VipxFdRoom): where it would not, sovia steps aside and the
 * connection stays on kernel TCP at once (docs/SOCKETS.md). */
bool sov_tp_fd_room(void);

/* SOVIA_PAIR_TIMEOUT_MS (1 s): how long a client waits for its pairing,
 * and a VI proven by the cluster key waits in an accept queue. */
uint64_t sov_tp_pair_timeout_ns(void);

/* sovia run across hosts is on (a fabric NIC and SOVIA_CLUSTER_KEY_FILE's
 * key, xhost.c): a connection to another host's address is tried too,
 * and every carried connection pairs through the cluster key's proofs. */
bool sov_tp_across_hosts(void);
/* ... beside shm (a key without SOVIA_PROVIDER=fabric): this host's peers
 * stay on shm and pair by token, other hosts' go over the far NIC. */
bool sov_tp_far_beside(void);
/* ... and `peer`'s host is worth a try: not one that refused lately (a
 * look-up: no VI is made for a host that does not run sovia). */
bool sov_tp_host_worth_trying(const struct sockaddr *peer);

/* Client: a tentative sovia connection from `local` (the kernel socket's
 * bound address) to `peer`, before the kernel connect. -ECONNREFUSED when
 * no sovia listener has that port, -EMFILE without sov_tp_fd_room. */
int sov_tp_connect(int fd, int domain, const struct sockaddr *local, const struct sockaddr *peer,
                   bool nonblock, struct sov_sock **out);
/* After the kernel connect succeeded: descriptor `fd` is now carried. */
int sov_tp_publish_client(struct sov_sock *s);
/* After it failed: drop the VI. */
void sov_tp_discard(struct sov_sock *s);

/* Server: a shadow listener for a listening kernel socket (NULL if sovia
 * cannot listen on that port); accept() pairs through it. With a ticket,
 * the listener where this process takes the clients the port's shadow
 * listener redirects to it (see sov_tp_claim). */
struct sov_sock *sov_tp_listen(int fd, int domain, const struct sockaddr *local, int backlog,
                               uint32_t ticket);
void sov_tp_unlisten(struct sov_sock *l);
/* In a forked child: lets go of the child's copies of what the parent's
 * queue holds (the clients' kernel sockets sent with their VIs). */
void sov_tp_listen_forked(struct sov_sock *l);
/* Pairs the accepted kernel socket `fd` with its client's VI; -ENOENT when
 * the client does not run sovia. `redirected`: sov_tp_claim said the
 * client is on its way to l (waits for it a little). */
int sov_tp_accept(struct sov_sock *l, int fd, const struct sockaddr *peer, bool nonblock,
                  bool redirected);
/* `fd` was accepted on a socket listening at `listening`, owned by user
 * `owner`, whose shadow listener is another process's (inherited over fork
 * or exec, or a port shared with SO_REUSEPORT; that process may run as
 * `owner` while this one does not): that process lets go of the VI the
 * client queued there. 1: it sent the client to this process's listener for
 * `ticket` (0: none); 0: it answered otherwise (the client falls back to
 * the kernel connection at once); -ECONNREFUSED when nobody shadows the
 * port (the caller may start its own shadow listener); another -errno
 * otherwise. */
int sov_tp_claim(int fd, const struct sockaddr *listening, uid_t owner, uint32_t ticket);
/* The ticketed listener t takes the redirected client from `client` (on)
 * until accept() paired it or gave up on it (off: a client that comes
 * later, or came and was not taken, falls back at once). 0 or -errno. */
int sov_tp_await(struct sov_sock *t, const struct sockaddr *client, bool on);

/* Where a connection stands (caller holds the socket's lock; PAIRED at
 * once unless it awaits pairing). SOV_TP_FELL_BACK: the socket was
 * unpublished and its lock released; the descriptor is plain kernel TCP
 * from then on. */
enum sov_tp_state sov_tp_settle(struct sov_sock *s);

/* An accepted connection is tentative until the client's WAKEUP answers
 * ours, which takes the client a moment; inetd forks and execs at once, and
 * a server that forks must not leave two processes pairing one VI. Waits
 * (up to the pairing timeout) for *sp, the socket at `fd`, to pair or fall
 * back. Called and returns with the lock held, *sp updated; false: it fell
 * back or the wait ran out (and the lock is gone). */
bool sov_tp_settle_wait(struct sov_sock **sp, int fd);

/* A socket not paired yet (a client before the accept, a server before the
 * client's answer) takes up to one packet of bytes at once, as a kernel
 * socket's send buffer would (caller holds the lock). The bytes taken, -EAGAIN when it holds all it can, or 0 when the
 * socket does not take early bytes. `whole` (a blocking send): all of
 * them or none, since a blocking send does not return short. */
ssize_t sov_tp_send_early(struct sov_sock *s, const struct iovec *iov, int iovcnt, bool whole);
/* True when such a socket has room for early bytes (it is writable). */
bool sov_tp_early_room(const struct sov_sock *s);
/* A server's close before its client answered: early bytes go to the
 * kernel socket too, and a client answering right now gets a graceful
 * close (lock held; released and taken again). Nothing for an abortive
 * close. */
void sov_tp_close_settle(struct sov_sock *s, bool abortive);

/* Before a shutdown with early bytes held: waits briefly for the client's
 * answer, else falls back (then the lock is released). */
enum sov_tp_state sov_tp_settle_soon(struct sov_sock *s);

/* Descriptor bookkeeping. */
int sov_tp_dup(int oldfd, int newfd);
bool sov_tp_forget(int fd); /* true: fd was one of several names, now dropped */
void sov_tp_set_nonblock(int fd, bool on);
/* fd was closed behind our back and its number reused: forget the old socket. */
void sov_tp_drop_stale(int fd);
/* Caller holds s->lock; returns with it released: s no longer carried. */
void sov_tp_fall_back(struct sov_sock *s);
/* Every connection this process carries goes back to its kernel socket in
 * mid-stream (migrate.c), and no new one is carried after: before a
 * seccomp filter, for instance. Returns how many had to be reset. */
int sov_tp_migrate_all(void);
/* Only those a new program image would get (descriptors without
 * FD_CLOEXEC): before an exec that will not load sovia. */
int sov_tp_migrate_inherited(void);
/* Those a next image would get but could not take as they are (their VI
 * forgot its export: the socket was close-on-exec when it paired, and the
 * program made a name that survives exec since; or they are on the far NIC,
 * far.c): before an exec that loads sovia. */
int sov_tp_migrate_unexportable(void);
/* Those on a fabric NIC, before fork: parent and child then share the
 * kernel socket, as without sovia (a libfabric endpoint cannot be shared). */
int sov_tp_migrate_fabric(void);
int sov_tp_unread(int fd, int *bytes);
/* The last sov_sendv/sov_recvv of this thread failed with EBADF because
 * the socket was closed while it waited (not because it fell back). */
bool sov_tp_closed_meanwhile(void);
/* shortconn.c: false when the last connections of this process to `to`
 * were too short to repay carrying (the caller leaves this one to kernel
 * TCP); sov_tp_note_carried tells it how long each carried one was. */
bool sov_tp_worth_carrying(const struct sockaddr *to);
void sov_tp_note_carried(const struct sockaddr *to, uint64_t packets);
/* SIOCATMARK: is the reader at the urgent mark (MSG_OOB)? */
int sov_tp_atmark(int fd, int *at);
/* The program named the owner of fd (F_SETOWN & co.): urgent data must
 * reach it as SIGURG while it does not look at the socket. */
void sov_tp_watch_owner(int fd);

#endif /* SOVIA_TRANSPARENT_H */
