/*
 * xauth.h - sovia run across hosts: the cluster key and the proofs that
 * bind a fabric connection to one kernel TCP connection (docs/SECURITY.md,
 * "Across hosts"). Functions return 0 or a negative errno.
 *
 * Three messages, each at most 48 bytes (a verbs connect's private data):
 *   HELLO   client -> server  "SXH1" cnonce tag(H)     36 bytes
 *   ACCEPT  server -> client  "SXA1" snonce tag(A)     36 bytes
 *   CONFIRM client -> server  "SXC1" tag(C)            20 bytes
 * tag(X) = HMAC-SHA256(key, label X tuple cnonce [snonce]), its first 16
 * bytes; tuple = the TCP connection's two ends as the server sees them.
 * HELLO lets the server turn away a host without the key before it does
 * anything else; ACCEPT proves the server holds the key, fresh for this
 * client's nonce; CONFIRM proves the client, fresh for the server's
 * nonce (a HELLO seen on the wire and replayed gets no further).
 */
#ifndef SOVIA_XAUTH_H
#define SOVIA_XAUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define SOV_XAUTH_NONCE 16
#define SOV_XAUTH_TAG 16
#define SOV_XAUTH_HELLO_LEN (4 + SOV_XAUTH_NONCE + SOV_XAUTH_TAG)
#define SOV_XAUTH_ACCEPT_LEN (4 + SOV_XAUTH_NONCE + SOV_XAUTH_TAG)
#define SOV_XAUTH_CONFIRM_LEN (4 + SOV_XAUTH_TAG)
/* Key files hold 16 to 4096 bytes (random bytes: `head -c 32
 * /dev/urandom`); a key longer than 64 bytes is kept as its SHA-256, as
 * HMAC would use it. */
#define SOV_XAUTH_KEY_MIN 16
#define SOV_XAUTH_KEY_MAX 4096

struct sov_xkey {
    uint8_t k[64];
    size_t len;
};

/* The key in `path`: a regular file (not a link) of this effective user,
 * that no group or other user may read or write (-EACCES otherwise, as
 * MUNGE refuses a key others can read), of SOV_XAUTH_KEY_MIN to _MAX bytes
 * (-EINVAL). */
int sov_xkey_load(const char *path, struct sov_xkey *key);
/* SOVIA_CLUSTER_KEY_FILE's key; -ENOKEY when it is unset or empty
 * (cross-host carrying is off: there is no default path), else as
 * sov_xkey_load (-ENOENT: it names no file). */
int sov_xkey_from_env(struct sov_xkey *key);
void sov_xkey_wipe(struct sov_xkey *key);

/* The TCP connection's ends as the server sees them: its own address and
 * its peer's (AF_INET or AF_INET6; IPv4 as IPv4-mapped IPv6, so both
 * spellings of one connection give one tuple). -EAFNOSUPPORT otherwise. */
struct sov_xtuple {
    uint8_t b[36]; /* server address, port, client address, port */
};
int sov_xtuple(const struct sockaddr *server, const struct sockaddr *client,
               struct sov_xtuple *t);

/* Client: a fresh nonce (getrandom) and the HELLO carrying it. */
int sov_xauth_hello(const struct sov_xkey *key, const struct sov_xtuple *t,
                    uint8_t cnonce[SOV_XAUTH_NONCE], uint8_t msg[SOV_XAUTH_HELLO_LEN]);
/* Server: a peer's HELLO. -EPROTO: not a HELLO (length, magic); -EACCES:
 * its tag is not this key's for this tuple. On 0, *cnonce is the client's. */
int sov_xauth_hello_check(const struct sov_xkey *key, const struct sov_xtuple *t,
                          const void *msg, size_t len, uint8_t cnonce[SOV_XAUTH_NONCE]);
/* Server: a fresh nonce and the ACCEPT for the client's nonce. */
int sov_xauth_accept(const struct sov_xkey *key, const struct sov_xtuple *t,
                     const uint8_t cnonce[SOV_XAUTH_NONCE], uint8_t snonce[SOV_XAUTH_NONCE],
                     uint8_t msg[SOV_XAUTH_ACCEPT_LEN]);
/* Client: the server's ACCEPT for our nonce (-EPROTO, -EACCES as above). */
int sov_xauth_accept_check(const struct sov_xkey *key, const struct sov_xtuple *t,
                           const uint8_t cnonce[SOV_XAUTH_NONCE], const void *msg, size_t len,
                           uint8_t snonce[SOV_XAUTH_NONCE]);
/* Client: the CONFIRM for both nonces; server: checks it. */
void sov_xauth_confirm(const struct sov_xkey *key, const struct sov_xtuple *t,
                       const uint8_t cnonce[SOV_XAUTH_NONCE],
                       const uint8_t snonce[SOV_XAUTH_NONCE],
                       uint8_t msg[SOV_XAUTH_CONFIRM_LEN]);
int sov_xauth_confirm_check(const struct sov_xkey *key, const struct sov_xtuple *t,
                            const uint8_t cnonce[SOV_XAUTH_NONCE],
                            const uint8_t snonce[SOV_XAUTH_NONCE], const void *msg, size_t len);

/* Hosts that did not answer as sovia hosts (refused, failed the proof or
 * timed out): a connect to one of them does not try fabric again for a
 * while, so it costs a table look-up, not a round trip: SOV_XPEER_FORGET_NS
 * for one that said no or did not answer, and for one where nobody
 * listened at the fabric port (`nobody`) SOV_XPEER_FIRST_NS, doubled at
 * each refusal up to SOV_XPEER_FORGET_NS (a sovia listener there opens its
 * fabric side only when a first client from another host comes). At most
 * SOV_XPEER_MAX remembered (the one free again soonest goes). Thread-safe. */
#define SOV_XPEER_MAX 256
#define SOV_XPEER_FORGET_NS (60ull * 1000000000u)
#define SOV_XPEER_FIRST_NS (1000000000ull)
bool sov_xpeer_refusing(const struct sockaddr *host, uint64_t now_ns);
void sov_xpeer_refused(const struct sockaddr *host, uint64_t now_ns, bool nobody);
void sov_xpeer_answered(const struct sockaddr *host); /* it runs sovia after all */

#endif
