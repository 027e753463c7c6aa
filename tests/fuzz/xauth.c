/*
 * xauth.c - fuzzes the checks of sovia run's cross-host proofs
 * (src/sovia/xauth.c): HELLO, ACCEPT and CONFIRM as a host without the
 * key would send them.
 *
 * Input: which message (u8 mod 3: HELLO, ACCEPT, CONFIRM), then its bytes.
 * The key (bytes 0..31), the tuple (10.0.0.1:5000 server, 10.0.0.2:40000
 * client) and our nonces (0x11 client, 0x22 server) are fixed.
 *
 * Checks: every answer is 0, -EPROTO or -EACCES; an accepted message has
 * its exact length and magic, the nonce given back is the message's, a
 * CONFIRM accepted is the one sov_xauth_confirm makes, and the same
 * message with any one tag bit changed is refused.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>

#include "fz.h"
#include "xauth.h"

static void fail(const char *what)
{
    fprintf(stderr, "xauth: %s\n", what);
    abort();
}

static int check(int which, const struct sov_xkey *k, const struct sov_xtuple *t,
                 const uint8_t *cn, const uint8_t *sn, const uint8_t *m, size_t len,
                 uint8_t out[SOV_XAUTH_NONCE])
{
    if (which == 0)
        return sov_xauth_hello_check(k, t, m, len, out);
    if (which == 1)
        return sov_xauth_accept_check(k, t, cn, m, len, out);
    return sov_xauth_confirm_check(k, t, cn, sn, m, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size)
        return 0;
    int which = data[0] % 3;
    const uint8_t *m = data + 1;
    size_t len = size - 1;
    struct sov_xkey k = {.len = 32};
    for (int i = 0; i < 32; i++)
        k.k[i] = (uint8_t)i;
    struct sockaddr_in s = {.sin_family = AF_INET, .sin_port = htons(5000)};
    struct sockaddr_in c = {.sin_family = AF_INET, .sin_port = htons(40000)};
    inet_pton(AF_INET, "10.0.0.1", &s.sin_addr);
    inet_pton(AF_INET, "10.0.0.2", &c.sin_addr);
    struct sov_xtuple t;
    if (sov_xtuple((struct sockaddr *)&s, (struct sockaddr *)&c, &t) != 0)
        fail("tuple");
    uint8_t cn[SOV_XAUTH_NONCE], sn[SOV_XAUTH_NONCE], out[SOV_XAUTH_NONCE];
    memset(cn, 0x11, sizeof(cn));
    memset(sn, 0x22, sizeof(sn));
    int r = check(which, &k, &t, cn, sn, m, len, out);
    if (r != 0 && r != -EPROTO && r != -EACCES)
        fail("an answer other than 0, EPROTO, EACCES");
    if (r)
        return 0;
    static const char magic[3][5] = {"SXH1", "SXA1", "SXC1"};
    size_t want = which == 2 ? SOV_XAUTH_CONFIRM_LEN : SOV_XAUTH_HELLO_LEN;
    if (len != want || memcmp(m, magic[which], 4) != 0)
        fail("accepted a message of another length or magic");
    if (which < 2 && memcmp(out, m + 4, SOV_XAUTH_NONCE) != 0)
        fail("the nonce given back is not the message's");
    if (which == 2) {
        uint8_t mine[SOV_XAUTH_CONFIRM_LEN];
        sov_xauth_confirm(&k, &t, cn, sn, mine);
        if (memcmp(mine, m, len) != 0)
            fail("accepted a CONFIRM that is not ours");
    }
    uint8_t copy[SOV_XAUTH_HELLO_LEN];
    memcpy(copy, m, len);
    for (size_t bit = 0; bit < 8 * SOV_XAUTH_TAG; bit++) {
        copy[len - SOV_XAUTH_TAG + bit / 8] ^= (uint8_t)(1u << bit % 8);
        if (check(which, &k, &t, cn, sn, copy, len, out) != -EACCES)
            fail("a tag with one bit changed passed");
        copy[len - SOV_XAUTH_TAG + bit / 8] ^= (uint8_t)(1u << bit % 8);
    }
    return 0;
}
