/*
 * sovia.h - the sovia sockets layer: stream sockets over vipl.
 *
 * The calls mirror the BSD sockets API: a sovia socket is a file descriptor
 * (sov_socket returns one), errors are -1 with errno set to what kernel TCP
 * gives in the same case, and sov_poll waits on sovia sockets and ordinary
 * descriptors together. The protocol (docs/PROTOCOL.md) is the SOVIA
 * design: a sliding window of pre-posted receive buffers, delayed and
 * piggybacked ACKs, copy-or-register sends and small-message combining.
 */
#ifndef SOVIA_H
#define SOVIA_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The socket type: sov_socket(AF_INET or AF_INET6, SOCK_VIA, 0). It is not a
 * kernel socket type (the kernel's end below 11), so a stray socket() call
 * with it fails. SOCK_NONBLOCK and SOCK_CLOEXEC may be or'ed in. */
#define SOCK_VIA 12

int sov_socket(int domain, int type, int protocol);
int sov_bind(int fd, const struct sockaddr *addr, socklen_t addrlen);
int sov_listen(int fd, int backlog);
int sov_accept(int fd, struct sockaddr *addr, socklen_t *addrlen);
int sov_accept4(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags);
int sov_connect(int fd, const struct sockaddr *addr, socklen_t addrlen);
ssize_t sov_send(int fd, const void *buf, size_t len, int flags);
ssize_t sov_recv(int fd, void *buf, size_t len, int flags);
ssize_t sov_read(int fd, void *buf, size_t len);
ssize_t sov_write(int fd, const void *buf, size_t len);
ssize_t sov_readv(int fd, const struct iovec *iov, int iovcnt);
ssize_t sov_writev(int fd, const struct iovec *iov, int iovcnt);
int sov_shutdown(int fd, int how);
int sov_close(int fd);
int sov_getsockname(int fd, struct sockaddr *addr, socklen_t *addrlen);
int sov_getpeername(int fd, struct sockaddr *addr, socklen_t *addrlen);
int sov_setsockopt(int fd, int level, int optname, const void *optval, socklen_t optlen);
int sov_getsockopt(int fd, int level, int optname, void *optval, socklen_t *optlen);
/* F_GETFL / F_SETFL (O_NONBLOCK), F_GETFD / F_SETFD. */
int sov_fcntl(int fd, int cmd, ... /* int arg */);
/* Like poll(2) over sovia sockets and any other descriptors together. */
int sov_poll(struct pollfd *fds, nfds_t nfds, int timeout);
/* Whether fd is an open sovia socket. */
bool sov_is_socket(int fd);

/* ---- Configuration ------------------------------------------------------- */

/* Who handles incoming packets (the papers' message-handling strategies). */
enum sov_handling {
    SOV_SINGLE,  /* the application thread, inside sovia calls (default) */
    SOV_HANDLER, /* one handler thread over the completion queue */
    SOV_NOTIFY,  /* vipl notify callbacks, run by provider threads */
};

/* How outgoing data reaches the NIC. */
enum sov_copy_mode {
    SOV_HYBRID, /* copy below copy_threshold, register at or above (default) */
    SOV_COPY,   /* always copy into pre-registered buffers */
    SOV_REG,    /* always register the caller's buffer */
};

/* How a blocked call waits. */
enum sov_wait_mode {
    SOV_WAIT_ADAPTIVE, /* poll for spin_us, then sleep (default) */
    SOV_WAIT_POLL,     /* poll until done: lowest latency, a core per waiter */
    SOV_WAIT_BLOCK,    /* sleep at once: no CPU while waiting */
};

struct sov_config {
    unsigned window;        /* w: DATA packets in flight per connection (32) */
    unsigned ack_threshold; /* t: delayed ACKs before an ACK packet (16) */
    size_t copy_threshold;  /* HYBRID: copy below this many bytes (2048) */
    size_t mtu;             /* largest DATA packet; larger sends are chunked (32768) */
    bool combine;           /* combine small sends (true; TCP_NODELAY turns it off) */
    unsigned combine_ms;    /* flush combined data after this long (100) */
    enum sov_handling handling;
    enum sov_copy_mode copy_mode;
    enum sov_wait_mode wait_mode;
    unsigned spin_us; /* ADAPTIVE: how long to poll before sleeping (50) */
};

/* The built-in defaults (the papers' full configuration, SOVIA_COMBINE). */
void sov_config_defaults(struct sov_config *c);
/*
 * The configuration new sockets get: the defaults, then the SOVIA_CONFIG
 * label and the SOVIA_* variables of the environment (docs/SOCKETS.md),
 * then sov_set_config. Changes apply to sockets created afterwards; the
 * handling strategy can change only before the first socket (EBUSY).
 */
int sov_get_config(struct sov_config *c);
int sov_set_config(const struct sov_config *c);
/*
 * Applies one of the papers' configuration labels (Kim et al., ICS 2001,
 * Table 4) to *c: SOVIA_NOTIFY, SOVIA_HANDLER, SOVIA_SINGLE, SOVIA_REG,
 * SOVIA_COPY, SOVIA_HYBRID, SOVIA_BASE, SOVIA_FLOWCNTL, SOVIA_DACKS,
 * SOVIA_COMBINE. -1 with EINVAL for an unknown label.
 */
int sov_config_label(struct sov_config *c, const char *label);

/* ---- Statistics ----------------------------------------------------------- */

struct sov_stats {
    uint64_t bytes_sent, bytes_received;
    uint64_t data_packets_sent, data_packets_received;
    uint64_t ack_packets_sent, ack_packets_received;
    uint64_t acks_piggybacked; /* acknowledgements carried on DATA packets */
    uint64_t copied_sends, registered_sends;
    uint64_t combined_messages; /* sends merged into a larger DATA packet */
    uint64_t window_stalls;     /* times a sender waited for the window */
    unsigned window, credits;   /* w, and DATA packets the peer can take now */
    unsigned recv_buffers;      /* receive descriptors pre-posted (P) */
    size_t shm_bytes;           /* shared memory this end of the connection owns */
};

int sov_get_stats(int fd, struct sov_stats *stats);

#ifdef __cplusplus
}
#endif

#endif /* SOVIA_H */
