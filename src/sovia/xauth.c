/*
 * xauth.c - the cluster key, the proofs of xauth.h, and the hosts that
 * refused (docs/SECURITY.md, "Across hosts").
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sha256.h"
#include "xauth.h"

/* Binds every tag to this protocol and version: a tag of some other use
 * of the same key never passes for one of ours. */
static const char LABEL[] = "sovia cross-host 1";

void sov_xkey_wipe(struct sov_xkey *key)
{
    memset(key, 0, sizeof(*key));
    __asm__ __volatile__("" : : "r"(key) : "memory");
}

int sov_xkey_load(const char *path, struct sov_xkey *key)
{
    /* O_NONBLOCK: a FIFO put in the key's place must not hang us. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return -errno;
    struct stat st;
    int err = 0;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) != 0)
        err = -errno;
    else if (!S_ISREG(st.st_mode))
        err = -EINVAL;
    else if (st.st_uid != geteuid() || (st.st_mode & 077))
        err = -EACCES;
    else if (st.st_size < SOV_XAUTH_KEY_MIN || st.st_size > SOV_XAUTH_KEY_MAX)
        err = -EINVAL;
    else if (!(buf = malloc((size_t)st.st_size + 1)))
        err = -ENOMEM;
    size_t len = 0;
    while (!err) { /* to the end: the size may change under us */
        ssize_t r = read(fd, buf + len, (size_t)st.st_size + 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            err = -errno;
        else if (r == 0)
            break;
        else if ((len += (size_t)r) > (size_t)st.st_size)
            err = -EINVAL;
    }
    close(fd);
    if (!err && len < SOV_XAUTH_KEY_MIN)
        err = -EINVAL;
    if (!err) {
        memset(key, 0, sizeof(*key));
        if (len > sizeof(key->k)) {
            struct sov_sha256 c;
            sov_sha256_init(&c);
            sov_sha256_update(&c, buf, len);
            sov_sha256_final(&c, key->k);
            key->len = SOV_SHA256_LEN;
        } else {
            memcpy(key->k, buf, len);
            key->len = len;
        }
    }
    if (buf) {
        memset(buf, 0, (size_t)st.st_size + 1);
        __asm__ __volatile__("" : : "r"(buf) : "memory");
        free(buf);
    }
    return err;
}

int sov_xkey_from_env(struct sov_xkey *key)
{
    const char *path = getenv("SOVIA_CLUSTER_KEY_FILE");
    if (!path || !*path)
        return -ENOKEY; /* off; a path set to no file is -ENOENT, said */
    return sov_xkey_load(path, key);
}

static int put_end(uint8_t *b, const struct sockaddr *a)
{
    if (a->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)a;
        memset(b, 0, 10);
        b[10] = b[11] = 0xff;
        memcpy(b + 12, &in->sin_addr, 4);
        memcpy(b + 16, &in->sin_port, 2);
        return 0;
    }
    if (a->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)a;
        memcpy(b, &in6->sin6_addr, 16);
        memcpy(b + 16, &in6->sin6_port, 2);
        return 0;
    }
    return -EAFNOSUPPORT;
}

int sov_xtuple(const struct sockaddr *server, const struct sockaddr *client, struct sov_xtuple *t)
{
    int err = put_end(t->b, server);
    return err ? err : put_end(t->b + 18, client);
}

/* tag = HMAC(key, LABEL kind tuple cnonce [snonce]), cut to 16 bytes. */
static void tag(const struct sov_xkey *key, char kind, const struct sov_xtuple *t,
                const uint8_t *cnonce, const uint8_t *snonce, uint8_t out[SOV_XAUTH_TAG])
{
    struct sov_part parts[] = {
        {LABEL, sizeof(LABEL)}, {&kind, 1},  {t->b, sizeof(t->b)},
        {cnonce, SOV_XAUTH_NONCE}, {snonce, snonce ? SOV_XAUTH_NONCE : 0},
    };
    uint8_t mac[SOV_SHA256_LEN];
    sov_hmac_sha256(key->k, key->len, parts, 5, mac);
    memcpy(out, mac, SOV_XAUTH_TAG);
    memset(mac, 0, sizeof(mac));
}

/* In constant time: how long it took says nothing of where they differ. */
static bool same(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint8_t d = 0;
    for (size_t i = 0; i < n; i++)
        d |= a[i] ^ b[i];
    return d == 0;
}

static int nonce(uint8_t out[SOV_XAUTH_NONCE])
{
    for (;;) {
        ssize_t r = getrandom(out, SOV_XAUTH_NONCE, 0);
        if (r == SOV_XAUTH_NONCE)
            return 0;
        if (r >= 0 || errno != EINTR)
            return r < 0 ? -errno : -EIO;
    }
}

static const uint8_t M_HELLO[4] = {'S', 'X', 'H', '1'}, M_ACCEPT[4] = {'S', 'X', 'A', '1'},
                     M_CONFIRM[4] = {'S', 'X', 'C', '1'};

/* HELLO (cnonce NULL: the fresh nonce is the client's) or ACCEPT (the
 * fresh nonce is the server's, for the client's cnonce): magic, nonce, tag. */
static int make_nonced(const struct sov_xkey *key, const struct sov_xtuple *t, char kind,
                       const uint8_t magic[4], const uint8_t *cnonce,
                       uint8_t fresh[SOV_XAUTH_NONCE], uint8_t *msg)
{
    int err = nonce(fresh);
    if (err)
        return err;
    memcpy(msg, magic, 4);
    memcpy(msg + 4, fresh, SOV_XAUTH_NONCE);
    tag(key, kind, t, cnonce ? cnonce : fresh, cnonce ? fresh : NULL, msg + 4 + SOV_XAUTH_NONCE);
    return 0;
}

/* A peer's HELLO or ACCEPT (as make_nonced): its nonce into *out when its
 * tag is ours. */
static int check_nonced(const struct sov_xkey *key, const struct sov_xtuple *t, char kind,
                        const uint8_t magic[4], const uint8_t *cnonce, const void *msg,
                        size_t len, uint8_t out[SOV_XAUTH_NONCE])
{
    const uint8_t *m = msg;
    if (!m || len != 4 + SOV_XAUTH_NONCE + SOV_XAUTH_TAG || memcmp(m, magic, 4) != 0)
        return -EPROTO;
    uint8_t n[SOV_XAUTH_NONCE], expect[SOV_XAUTH_TAG];
    memcpy(n, m + 4, SOV_XAUTH_NONCE);
    tag(key, kind, t, cnonce ? cnonce : n, cnonce ? n : NULL, expect);
    if (!same(m + 4 + SOV_XAUTH_NONCE, expect, SOV_XAUTH_TAG))
        return -EACCES;
    memcpy(out, n, SOV_XAUTH_NONCE);
    return 0;
}

int sov_xauth_hello(const struct sov_xkey *key, const struct sov_xtuple *t,
                    uint8_t cnonce[SOV_XAUTH_NONCE], uint8_t msg[SOV_XAUTH_HELLO_LEN])
{
    return make_nonced(key, t, 'H', M_HELLO, NULL, cnonce, msg);
}

int sov_xauth_hello_check(const struct sov_xkey *key, const struct sov_xtuple *t,
                          const void *msg, size_t len, uint8_t cnonce[SOV_XAUTH_NONCE])
{
    return check_nonced(key, t, 'H', M_HELLO, NULL, msg, len, cnonce);
}

int sov_xauth_accept(const struct sov_xkey *key, const struct sov_xtuple *t,
                     const uint8_t cnonce[SOV_XAUTH_NONCE], uint8_t snonce[SOV_XAUTH_NONCE],
                     uint8_t msg[SOV_XAUTH_ACCEPT_LEN])
{
    return make_nonced(key, t, 'A', M_ACCEPT, cnonce, snonce, msg);
}

int sov_xauth_accept_check(const struct sov_xkey *key, const struct sov_xtuple *t,
                           const uint8_t cnonce[SOV_XAUTH_NONCE], const void *msg, size_t len,
                           uint8_t snonce[SOV_XAUTH_NONCE])
{
    return check_nonced(key, t, 'A', M_ACCEPT, cnonce, msg, len, snonce);
}

void sov_xauth_confirm(const struct sov_xkey *key, const struct sov_xtuple *t,
                       const uint8_t cnonce[SOV_XAUTH_NONCE],
                       const uint8_t snonce[SOV_XAUTH_NONCE], uint8_t msg[SOV_XAUTH_CONFIRM_LEN])
{
    memcpy(msg, M_CONFIRM, 4);
    tag(key, 'C', t, cnonce, snonce, msg + 4);
}

int sov_xauth_confirm_check(const struct sov_xkey *key, const struct sov_xtuple *t,
                            const uint8_t cnonce[SOV_XAUTH_NONCE],
                            const uint8_t snonce[SOV_XAUTH_NONCE], const void *msg, size_t len)
{
    const uint8_t *m = msg;
    if (!m || len != SOV_XAUTH_CONFIRM_LEN || memcmp(m, M_CONFIRM, 4) != 0)
        return -EPROTO;
    uint8_t expect[SOV_XAUTH_TAG];
    tag(key, 'C', t, cnonce, snonce, expect);
    return same(m + 4, expect, SOV_XAUTH_TAG) ? 0 : -EACCES;
}

/* ---- Hosts that refused ------------------------------------------------------ */

static struct {
    pthread_mutex_t lock;
    struct xpeer {
        uint8_t addr[16];
        uint64_t until_ns; /* refusing until then */
        uint64_t hold_ns;  /* 0: a free entry; else its last hold */
    } e[SOV_XPEER_MAX];
} xpeers = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The host's address, IPv4 as IPv4-mapped; false for another family. */
static bool host_key(const struct sockaddr *a, uint8_t out[16])
{
    uint8_t b[18];
    if (put_end(b, a) != 0)
        return false;
    memcpy(out, b, 16);
    return true;
}

static struct xpeer *find(const uint8_t addr[16])
{
    for (unsigned i = 0; i < SOV_XPEER_MAX; i++)
        if (xpeers.e[i].hold_ns && memcmp(xpeers.e[i].addr, addr, 16) == 0)
            return &xpeers.e[i];
    return NULL;
}

bool sov_xpeer_refusing(const struct sockaddr *host, uint64_t now_ns)
{
    uint8_t k[16];
    if (!host_key(host, k))
        return false;
    pthread_mutex_lock(&xpeers.lock);
    struct xpeer *p = find(k);
    /* Past its hold the next connect tries again; the entry stays for
     * its hold, which the next refusal doubles. */
    bool refusing = p && now_ns < p->until_ns;
    pthread_mutex_unlock(&xpeers.lock);
    return refusing;
}

void sov_xpeer_refused(const struct sockaddr *host, uint64_t now_ns, bool nobody)
{
    uint8_t k[16];
    if (!host_key(host, k))
        return;
    pthread_mutex_lock(&xpeers.lock);
    struct xpeer *p = find(k);
    if (!p) { /* a free one (hold 0), else the one free again soonest */
        p = &xpeers.e[0];
        for (unsigned i = 1; i < SOV_XPEER_MAX && p->hold_ns; i++)
            if (!xpeers.e[i].hold_ns || xpeers.e[i].until_ns < p->until_ns)
                p = &xpeers.e[i];
        memcpy(p->addr, k, 16);
        p->hold_ns = 0;
    }
    /* Nobody listened at its fabric port: the host may not run sovia, or
     * its listener's far side has not started yet (it starts when a first
     * client from another host comes, conn.c): held a second, then twice
     * as long each time, up to the minute of a host that said no. */
    uint64_t hold = !nobody ? SOV_XPEER_FORGET_NS
                    : p->hold_ns ? 2 * p->hold_ns : SOV_XPEER_FIRST_NS;
    p->hold_ns = hold < SOV_XPEER_FORGET_NS ? hold : SOV_XPEER_FORGET_NS;
    p->until_ns = now_ns + p->hold_ns;
    pthread_mutex_unlock(&xpeers.lock);
}

void sov_xpeer_answered(const struct sockaddr *host)
{
    uint8_t k[16];
    if (!host_key(host, k))
        return;
    pthread_mutex_lock(&xpeers.lock);
    struct xpeer *p = find(k);
    if (p)
        *p = (struct xpeer){0};
    pthread_mutex_unlock(&xpeers.lock);
}
