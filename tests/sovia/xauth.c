/*
 * xauth: the cluster key and proofs of sovia run across hosts
 * (src/sovia/xauth.c, sha256.c; docs/SECURITY.md "Across hosts").
 *  - SHA-256 (FIPS 180-2 examples, and lengths around the padding's
 *    edges) and HMAC-SHA256 (RFC 4231 cases 1, 2, 3, 6, 7), whole and fed
 *    in pieces;
 *  - the wire format, pinned by a tag computed elsewhere (Python's hmac);
 *  - a HELLO/ACCEPT/CONFIRM round; another key, another tuple (each end
 *    and each port), a changed byte anywhere, a short, long or mistyped
 *    message, and a replayed HELLO's session (new server nonce) all fail,
 *    with EACCES (tag) or EPROTO (shape);
 *  - IPv4 and its IPv4-mapped IPv6 spelling are one tuple;
 *  - the key file: 0600 of ours loads; readable or writable by group or
 *    others, a link, a directory, too short or too long: refused; no
 *    SOVIA_CLUSTER_KEY_FILE (or an empty one): ENOKEY, one that names no
 *    file: ENOENT; a key over 64 bytes acts as its hash;
 *  - hosts that refused: remembered, forgotten after the delay or when
 *    they answer, the oldest replaced when the table is full; threads
 *    using the table at once.
 */
#include "sharness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../src/sovia/sha256.h"
#include "../../src/sovia/xauth.h"

static void hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

#define CHECK_HEX(bytes, n, want)                                                     \
    do {                                                                              \
        char h_[2 * 64 + 1];                                                          \
        hex(bytes, n, h_);                                                            \
        CHECK_MSG(strcmp(h_, want) == 0, "got %s, want %s", h_, want);                \
    } while (0)

static void sha(const void *p, size_t len, size_t piece, uint8_t out[32])
{
    struct sov_sha256 c;
    sov_sha256_init(&c);
    for (size_t off = 0; off < len; off += piece)
        sov_sha256_update(&c, (const uint8_t *)p + off, len - off < piece ? len - off : piece);
    sov_sha256_final(&c, out);
}

static void sha_vectors(void)
{
    static const struct {
        const char *msg, *want;
    } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    uint8_t out[32];
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        for (size_t piece = 1; piece <= 65; piece += 7) {
            sha(v[i].msg, strlen(v[i].msg), piece, out);
            CHECK_HEX(out, 32, v[i].want);
        }
    /* Around the padding's edges (one block or two for the length):
     * 'a' repeated, digests from Python's hashlib. */
    static const struct {
        size_t len;
        const char *want;
    } edge[] = {
        {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
        {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
        {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
        {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
        {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
        {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
    };
    char as[120];
    memset(as, 'a', sizeof(as));
    for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++)
        for (size_t piece = 1; piece <= 121; piece += 15) {
            sha(as, edge[i].len, piece, out);
            CHECK_HEX(out, 32, edge[i].want);
        }
    size_t n = 1000000;
    char *a = malloc(n);
    CHECK(a);
    memset(a, 'a', n);
    static const size_t pieces[] = {1000000, 64, 63, 65, 1, 4096};
    for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
        sha(a, n, pieces[i], out);
        CHECK_HEX(out, 32, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    }
    free(a);
}

static void hmac_vectors(void)
{
    uint8_t k20[20], kaa[131], d50[50], out[32];
    memset(k20, 0x0b, sizeof(k20));
    struct sov_part p1 = {"Hi There", 8};
    sov_hmac_sha256(k20, 20, &p1, 1, out);
    CHECK_HEX(out, 32, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    /* In two parts: the same as one. */
    struct sov_part p2[] = {{"what do ya ", 11}, {"want for nothing?", 17}};
    sov_hmac_sha256("Jefe", 4, p2, 2, out);
    CHECK_HEX(out, 32, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    memset(kaa, 0xaa, sizeof(kaa));
    memset(d50, 0xdd, sizeof(d50));
    struct sov_part p3 = {d50, 50};
    sov_hmac_sha256(kaa, 20, &p3, 1, out);
    CHECK_HEX(out, 32, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
    const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    struct sov_part p6 = {m6, strlen(m6)};
    sov_hmac_sha256(kaa, 131, &p6, 1, out);
    CHECK_HEX(out, 32, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    const char *m7 = "This is a test using a larger than block-size key and a larger than "
                     "block-size data. The key needs to be hashed before being used by the "
                     "HMAC algorithm.";
    struct sov_part p7 = {m7, strlen(m7)};
    sov_hmac_sha256(kaa, 131, &p7, 1, out);
    CHECK_HEX(out, 32, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

static struct sockaddr_in in4(const char *ip, uint16_t port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    CHECK_EQ(inet_pton(AF_INET, ip, &a.sin_addr), 1);
    return a;
}

static struct sockaddr_in6 in6(const char *ip, uint16_t port)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
    CHECK_EQ(inet_pton(AF_INET6, ip, &a.sin6_addr), 1);
    return a;
}

static struct sov_xtuple tuple4(const char *sip, uint16_t sport, const char *cip, uint16_t cport)
{
    struct sockaddr_in s = in4(sip, sport), c = in4(cip, cport);
    struct sov_xtuple t;
    CHECK_EQ(sov_xtuple((struct sockaddr *)&s, (struct sockaddr *)&c, &t), 0);
    return t;
}

static struct sov_xkey key_of(uint8_t first)
{
    struct sov_xkey k = {.len = 32};
    for (int i = 0; i < 32; i++)
        k.k[i] = (uint8_t)(first + i);
    return k;
}

/* The tag computed by Python's hmac over the layout xauth.h describes:
 * HMAC(bytes(range(32)), b"sovia cross-host 1\0" b"C" tuple 0x11*16
 * 0x22*16)[:16], tuple 10.0.0.1:5000 (server), 10.0.0.2:40000 (client). */
static void wire_format(void)
{
    struct sov_xkey k = key_of(0);
    struct sov_xtuple t = tuple4("10.0.0.1", 5000, "10.0.0.2", 40000);
    uint8_t cn[16], sn[16], msg[SOV_XAUTH_CONFIRM_LEN];
    memset(cn, 0x11, 16);
    memset(sn, 0x22, 16);
    sov_xauth_confirm(&k, &t, cn, sn, msg);
    CHECK(memcmp(msg, "SXC1", 4) == 0);
    CHECK_HEX(msg + 4, 16, "d67418a0a6cd0a41c7a94a0b481bd415");
    CHECK(SOV_XAUTH_HELLO_LEN <= 48 && SOV_XAUTH_ACCEPT_LEN <= 48);
}

/* One session, both ends' views; 0 when every step passed, else the
 * first step's error (1: HELLO, 2: ACCEPT, 3: CONFIRM, times 1000). */
static int session(const struct sov_xkey *ck, const struct sov_xtuple *ct, const struct sov_xkey *sk,
                   const struct sov_xtuple *st)
{
    uint8_t cn[16], scn[16], sn[16], csn[16];
    uint8_t hello[SOV_XAUTH_HELLO_LEN], acc[SOV_XAUTH_ACCEPT_LEN], conf[SOV_XAUTH_CONFIRM_LEN];
    CHECK_EQ(sov_xauth_hello(ck, ct, cn, hello), 0);
    int err = sov_xauth_hello_check(sk, st, hello, sizeof(hello), scn);
    if (err)
        return 1000 - err;
    CHECK(memcmp(cn, scn, 16) == 0);
    CHECK_EQ(sov_xauth_accept(sk, st, scn, sn, acc), 0);
    if ((err = sov_xauth_accept_check(ck, ct, cn, acc, sizeof(acc), csn)) != 0)
        return 2000 - err;
    CHECK(memcmp(sn, csn, 16) == 0);
    sov_xauth_confirm(ck, ct, cn, csn, conf);
    if ((err = sov_xauth_confirm_check(sk, st, scn, sn, conf, sizeof(conf))) != 0)
        return 3000 - err;
    return 0;
}

static void rounds(void)
{
    struct sov_xkey k = key_of(1), other = key_of(2);
    struct sov_xtuple t = tuple4("10.213.1.2", 8080, "10.213.1.1", 43210);
    CHECK_EQ(session(&k, &t, &k, &t), 0);
    /* Nonces are fresh: two HELLOs for one tuple differ. */
    uint8_t n1[16], n2[16], h1[SOV_XAUTH_HELLO_LEN], h2[SOV_XAUTH_HELLO_LEN];
    CHECK_EQ(sov_xauth_hello(&k, &t, n1, h1), 0);
    CHECK_EQ(sov_xauth_hello(&k, &t, n2, h2), 0);
    CHECK(memcmp(n1, n2, 16) != 0 && memcmp(h1, h2, sizeof(h1)) != 0);
    /* Another key: the server turns the HELLO away. */
    CHECK_EQ(session(&other, &t, &k, &t), 1000 + EACCES);
    CHECK_EQ(session(&k, &t, &other, &t), 1000 + EACCES);
    /* Another tuple: each end, each port. */
    struct sov_xtuple ts[] = {
        tuple4("10.213.1.3", 8080, "10.213.1.1", 43210),
        tuple4("10.213.1.2", 8081, "10.213.1.1", 43210),
        tuple4("10.213.1.2", 8080, "10.213.1.9", 43210),
        tuple4("10.213.1.2", 8080, "10.213.1.1", 43211),
        tuple4("10.213.1.1", 43210, "10.213.1.2", 8080), /* the ends swapped */
    };
    for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++)
        CHECK_EQ(session(&k, &t, &k, &ts[i]), 1000 + EACCES);
    /* IPv4 and IPv4-mapped IPv6 are one connection. */
    struct sockaddr_in6 s6 = in6("::ffff:10.213.1.2", 8080), c6 = in6("::ffff:10.213.1.1", 43210);
    struct sov_xtuple t6;
    CHECK_EQ(sov_xtuple((struct sockaddr *)&s6, (struct sockaddr *)&c6, &t6), 0);
    CHECK_EQ(session(&k, &t, &k, &t6), 0);
    struct sockaddr_un_like {
        sa_family_t f;
        char rest[30];
    } unix_ = {.f = AF_UNIX};
    CHECK_EQ(sov_xtuple((struct sockaddr *)&unix_, (struct sockaddr *)&c6, &t6), -EAFNOSUPPORT);
}

/* Every byte of each message changed, and every wrong length. */
static void tampered(void)
{
    struct sov_xkey k = key_of(7);
    struct sov_xtuple t = tuple4("10.213.1.2", 8080, "10.213.1.1", 43210);
    uint8_t cn[16], sn[16], out[16], hello[SOV_XAUTH_HELLO_LEN + 1], acc[SOV_XAUTH_ACCEPT_LEN + 1],
        conf[SOV_XAUTH_CONFIRM_LEN + 1];
    CHECK_EQ(sov_xauth_hello(&k, &t, cn, hello), 0);
    CHECK_EQ(sov_xauth_accept(&k, &t, cn, sn, acc), 0);
    sov_xauth_confirm(&k, &t, cn, sn, conf);
    for (size_t i = 0; i < SOV_XAUTH_HELLO_LEN; i++) {
        hello[i] ^= 0x01;
        CHECK_EQ(sov_xauth_hello_check(&k, &t, hello, SOV_XAUTH_HELLO_LEN, out),
                 i < 4 ? -EPROTO : -EACCES);
        hello[i] ^= 0x01;
        acc[i] ^= 0x80;
        CHECK_EQ(sov_xauth_accept_check(&k, &t, cn, acc, SOV_XAUTH_ACCEPT_LEN, out),
                 i < 4 ? -EPROTO : -EACCES);
        acc[i] ^= 0x80;
    }
    for (size_t i = 0; i < SOV_XAUTH_CONFIRM_LEN; i++) {
        conf[i] ^= 0x40;
        CHECK_EQ(sov_xauth_confirm_check(&k, &t, cn, sn, conf, SOV_XAUTH_CONFIRM_LEN),
                 i < 4 ? -EPROTO : -EACCES);
        conf[i] ^= 0x40;
    }
    for (size_t len = 0; len <= SOV_XAUTH_HELLO_LEN + 1; len++) {
        int want = len == SOV_XAUTH_HELLO_LEN ? 0 : -EPROTO;
        CHECK_EQ(sov_xauth_hello_check(&k, &t, hello, len, out), want);
        CHECK_EQ(sov_xauth_accept_check(&k, &t, cn, acc, len, out), want);
        CHECK_EQ(sov_xauth_confirm_check(&k, &t, cn, sn, conf, len),
                 len == SOV_XAUTH_CONFIRM_LEN ? 0 : -EPROTO);
    }
    CHECK_EQ(sov_xauth_hello_check(&k, &t, NULL, SOV_XAUTH_HELLO_LEN, out), -EPROTO);
    /* One message for another: each is refused by its magic. */
    CHECK_EQ(sov_xauth_hello_check(&k, &t, acc, SOV_XAUTH_HELLO_LEN, out), -EPROTO);
    CHECK_EQ(sov_xauth_accept_check(&k, &t, cn, hello, SOV_XAUTH_ACCEPT_LEN, out), -EPROTO);
}

/* A HELLO recorded and sent again passes (it is only a first filter), but
 * the session it starts has a new server nonce: the recorded CONFIRM does
 * not finish it, nor does one for another client nonce. */
static void replay(void)
{
    struct sov_xkey k = key_of(9);
    struct sov_xtuple t = tuple4("10.213.1.2", 8080, "10.213.1.1", 43210);
    uint8_t cn[16], scn[16], sn1[16], sn2[16], hello[SOV_XAUTH_HELLO_LEN],
        acc[SOV_XAUTH_ACCEPT_LEN], conf[SOV_XAUTH_CONFIRM_LEN];
    CHECK_EQ(sov_xauth_hello(&k, &t, cn, hello), 0);
    CHECK_EQ(sov_xauth_hello_check(&k, &t, hello, sizeof(hello), scn), 0);
    CHECK_EQ(sov_xauth_accept(&k, &t, scn, sn1, acc), 0);
    sov_xauth_confirm(&k, &t, cn, sn1, conf);
    CHECK_EQ(sov_xauth_confirm_check(&k, &t, scn, sn1, conf, sizeof(conf)), 0);
    /* The replay. */
    CHECK_EQ(sov_xauth_hello_check(&k, &t, hello, sizeof(hello), scn), 0);
    CHECK_EQ(sov_xauth_accept(&k, &t, scn, sn2, acc), 0);
    CHECK(memcmp(sn1, sn2, 16) != 0);
    CHECK_EQ(sov_xauth_confirm_check(&k, &t, scn, sn2, conf, sizeof(conf)), -EACCES);
    /* An ACCEPT for another client's nonce does not pass at this client. */
    uint8_t cn2[16], out[16];
    memcpy(cn2, cn, 16);
    cn2[15] ^= 1;
    CHECK_EQ(sov_xauth_accept(&k, &t, cn2, sn2, acc), 0);
    CHECK_EQ(sov_xauth_accept_check(&k, &t, cn, acc, sizeof(acc), out), -EACCES);
}

static char dir[] = "/tmp/sovia-xauth-XXXXXX";

/* Two at a time (symlink's arguments): each call takes the other buffer. */
static char *path_in_dir(const char *name)
{
    static char p[2][128];
    static unsigned next;
    char *out = p[next++ % 2];
    snprintf(out, sizeof(p[0]), "%s/%s", dir, name);
    return out;
}

static void write_key(const char *name, size_t len, mode_t mode)
{
    char *p = path_in_dir(name);
    int fd = (int)SYS(open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    uint8_t b[5000];
    for (size_t i = 0; i < sizeof(b); i++)
        b[i] = (uint8_t)(i * 7 + 3);
    CHECK(len <= sizeof(b));
    CHECK_EQ(write(fd, b, len), (long long)len);
    SYS(fchmod(fd, mode));
    SYS(close(fd));
}

static const char *const names[] = {"good", "ro", "open", "short", "long", "big", "link", "theirs"};

static void remove_dir(void)
{
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        unlink(path_in_dir(names[i]));
    rmdir(path_in_dir("sub"));
    rmdir(dir);
}

static void key_file_checks(void);

/* The checks run in a child: a failed one ends it at once (_exit), and
 * this process still removes the folder, so nothing is left in /tmp. */
static void key_file(void)
{
    CHECK(mkdtemp(dir));
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        key_file_checks();
        _exit(0);
    }
    int st = 0;
    pid_t w;
    while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
        ;
    remove_dir();
    CHECK_EQ(w, pid);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the key file checks failed (status 0x%x)",
              (unsigned)st);
}

static void key_file_checks(void)
{
    struct sov_xkey k;
    write_key("good", 32, 0600);
    CHECK_EQ(sov_xkey_load(path_in_dir("good"), &k), 0);
    CHECK_EQ(k.len, 32);
    CHECK_EQ(k.k[0], 3);
    CHECK_EQ(k.k[31], (uint8_t)(31 * 7 + 3));
    write_key("ro", 16, 0400);
    CHECK_EQ(sov_xkey_load(path_in_dir("ro"), &k), 0);
    static const mode_t open_modes[] = {0640, 0604, 0620, 0602, 0660, 0644, 0610};
    for (size_t i = 0; i < sizeof(open_modes) / sizeof(open_modes[0]); i++) {
        write_key("open", 32, open_modes[i]);
        CHECK_MSG(sov_xkey_load(path_in_dir("open"), &k) == -EACCES, "mode %o loaded",
                  (unsigned)open_modes[i]);
    }
    write_key("short", SOV_XAUTH_KEY_MIN - 1, 0600);
    CHECK_EQ(sov_xkey_load(path_in_dir("short"), &k), -EINVAL);
    write_key("long", SOV_XAUTH_KEY_MAX + 1, 0600);
    CHECK_EQ(sov_xkey_load(path_in_dir("long"), &k), -EINVAL);
    /* Over 64 bytes: kept as its hash, as HMAC uses it (same tags). */
    write_key("big", 100, 0600);
    struct sov_xkey big;
    CHECK_EQ(sov_xkey_load(path_in_dir("big"), &big), 0);
    CHECK_EQ(big.len, 32);
    uint8_t raw[100], m1[32], m2[32];
    for (size_t i = 0; i < sizeof(raw); i++)
        raw[i] = (uint8_t)(i * 7 + 3);
    struct sov_part p = {"x", 1};
    sov_hmac_sha256(raw, sizeof(raw), &p, 1, m1);
    sov_hmac_sha256(big.k, big.len, &p, 1, m2);
    CHECK(memcmp(m1, m2, 32) == 0);
    SYS(symlink(path_in_dir("good"), path_in_dir("link")));
    CHECK_EQ(sov_xkey_load(path_in_dir("link"), &k), -ELOOP);
    SYS(mkdir(path_in_dir("sub"), 0700));
    CHECK_EQ(sov_xkey_load(path_in_dir("sub"), &k), -EINVAL);
    CHECK_EQ(sov_xkey_load(path_in_dir("absent"), &k), -ENOENT);
    SYS(unsetenv("SOVIA_CLUSTER_KEY_FILE"));
    CHECK_EQ(sov_xkey_from_env(&k), -ENOKEY);
    SYS(setenv("SOVIA_CLUSTER_KEY_FILE", "", 1));
    CHECK_EQ(sov_xkey_from_env(&k), -ENOKEY);
    /* Set, but to no file (a typo): an error of its own, said on stderr. */
    SYS(setenv("SOVIA_CLUSTER_KEY_FILE", path_in_dir("absent"), 1));
    CHECK_EQ(sov_xkey_from_env(&k), -ENOENT);
    SYS(setenv("SOVIA_CLUSTER_KEY_FILE", path_in_dir("good"), 1));
    memset(&k, 0, sizeof(k));
    CHECK_EQ(sov_xkey_from_env(&k), 0);
    CHECK_EQ(k.len, 32);
    sov_xkey_wipe(&k);
    CHECK_EQ(k.len, 0);
    /* Another user's file, even 0600: only as root can we make one. */
    if (geteuid() == 0) {
        write_key("theirs", 32, 0600);
        SYS(chown(path_in_dir("theirs"), 65534, 65534));
        CHECK_EQ(sov_xkey_load(path_in_dir("theirs"), &k), -EACCES);
        SYS(unlink(path_in_dir("theirs")));
    }
}

static void refused_hosts(void)
{
    struct sockaddr_in a = in4("10.213.1.2", 80), a2 = in4("10.213.1.2", 443),
                       b = in4("10.213.1.3", 80);
    struct sockaddr_in6 a6 = in6("::ffff:10.213.1.2", 1);
    uint64_t t0 = 1000;
    CHECK(!sov_xpeer_refusing((struct sockaddr *)&a, t0));
    sov_xpeer_refused((struct sockaddr *)&a, t0, false);
    /* The host, whatever the port or spelling. */
    CHECK(sov_xpeer_refusing((struct sockaddr *)&a, t0 + 1));
    CHECK(sov_xpeer_refusing((struct sockaddr *)&a2, t0 + 1));
    CHECK(sov_xpeer_refusing((struct sockaddr *)&a6, t0 + 1));
    CHECK(!sov_xpeer_refusing((struct sockaddr *)&b, t0 + 1));
    CHECK(sov_xpeer_refusing((struct sockaddr *)&a, t0 + SOV_XPEER_FORGET_NS - 1));
    CHECK(!sov_xpeer_refusing((struct sockaddr *)&a, t0 + SOV_XPEER_FORGET_NS));
    sov_xpeer_refused((struct sockaddr *)&a, t0, false);
    sov_xpeer_answered((struct sockaddr *)&a2);
    CHECK(!sov_xpeer_refusing((struct sockaddr *)&a, t0 + 1));
    /* Nobody listened at its fabric port: a second, then twice as long at
     * each refusal, up to the minute; an answer starts it over. */
    uint64_t t = t0, hold = SOV_XPEER_FIRST_NS;
    for (int i = 0; i < 10; i++) {
        sov_xpeer_refused((struct sockaddr *)&a, t, true);
        CHECK(sov_xpeer_refusing((struct sockaddr *)&a, t + hold - 1));
        CHECK(!sov_xpeer_refusing((struct sockaddr *)&a, t + hold));
        t += hold;
        hold = 2 * hold < SOV_XPEER_FORGET_NS ? 2 * hold : SOV_XPEER_FORGET_NS;
    }
    CHECK_EQ(hold, SOV_XPEER_FORGET_NS);
    sov_xpeer_answered((struct sockaddr *)&a);
    sov_xpeer_refused((struct sockaddr *)&a, t, true);
    CHECK(!sov_xpeer_refusing((struct sockaddr *)&a, t + SOV_XPEER_FIRST_NS));
    sov_xpeer_answered((struct sockaddr *)&a);
    /* Full: the oldest goes, the newer stay. */
    for (unsigned i = 0; i <= SOV_XPEER_MAX; i++) {
        struct sockaddr_in h = in4("10.214.0.0", 80);
        h.sin_addr.s_addr = htonl(ntohl(h.sin_addr.s_addr) + i);
        sov_xpeer_refused((struct sockaddr *)&h, t0 + i, false);
    }
    struct sockaddr_in first = in4("10.214.0.0", 80), second = in4("10.214.0.1", 80),
                       last = in4("10.214.0.0", 80);
    last.sin_addr.s_addr = htonl(ntohl(last.sin_addr.s_addr) + SOV_XPEER_MAX);
    CHECK(!sov_xpeer_refusing((struct sockaddr *)&first, t0 + SOV_XPEER_MAX));
    CHECK(sov_xpeer_refusing((struct sockaddr *)&second, t0 + SOV_XPEER_MAX));
    CHECK(sov_xpeer_refusing((struct sockaddr *)&last, t0 + SOV_XPEER_MAX));
}

/* Threads noting, asking and forgetting hosts at once (TSan's case). */
static void *churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    for (unsigned i = 0; i < 20000; i++) {
        struct sockaddr_in h = in4("10.215.0.0", 80);
        h.sin_addr.s_addr = htonl(ntohl(h.sin_addr.s_addr) + (i * 7 + seed) % 300);
        if (i % 3 == 0)
            sov_xpeer_refused((struct sockaddr *)&h, i, i % 2);
        else if (i % 3 == 1)
            (void)sov_xpeer_refusing((struct sockaddr *)&h, i);
        else
            sov_xpeer_answered((struct sockaddr *)&h);
    }
    return NULL;
}

static void refused_threads(void)
{
    pthread_t t[4];
    for (uintptr_t i = 0; i < 4; i++)
        CHECK_EQ(pthread_create(&t[i], NULL, churn, (void *)i), 0);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(pthread_join(t[i], NULL), 0);
    struct sockaddr_in h = in4("10.216.0.1", 80);
    sov_xpeer_refused((struct sockaddr *)&h, 5, true);
    CHECK(sov_xpeer_refusing((struct sockaddr *)&h, 6));
}

int main(void)
{
    s_init("xauth", 60);
    if (s_case("sha256"))
        sha_vectors();
    if (s_case("hmac"))
        hmac_vectors();
    if (s_case("wire_format"))
        wire_format();
    if (s_case("rounds"))
        rounds();
    if (s_case("tampered"))
        tampered();
    if (s_case("replay"))
        replay();
    if (s_case("key_file"))
        key_file();
    if (s_case("refused_hosts"))
        refused_hosts();
    if (s_case("refused_threads"))
        refused_threads();
    s_pass();
}
