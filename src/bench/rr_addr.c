/* rr_addr.c - the listening addresses of `sovia bench rr` as the servers
 * report them: "pPORT" for 127.0.0.1:PORT, "uHEX" for an abstract AF_UNIX
 * name (autobound: nothing in the file system to leave behind). */
#include "rr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rr_addr rr_addr_loopback(int family)
{
    struct rr_addr a;

    memset(&a, 0, sizeof a);
    a.family = family;
    if (family == AF_UNIX) {
        struct sockaddr_un *u = (struct sockaddr_un *)&a.sa;
        u->sun_family = AF_UNIX;
        a.len = sizeof(sa_family_t); /* bind: the kernel picks an abstract name */
    } else {
        struct sockaddr_in *in = (struct sockaddr_in *)&a.sa;
        in->sin_family = AF_INET;
        in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.len = sizeof *in;
    }
    return a;
}

int rr_addr_format(const struct rr_addr *a, char *out, size_t outlen)
{
    if (a->family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&a->sa;
        int n = snprintf(out, outlen, "p%u", (unsigned)ntohs(in->sin_port));
        return n > 0 && (size_t)n < outlen ? 0 : -1;
    }
    const struct sockaddr_un *u = (const struct sockaddr_un *)&a->sa;
    size_t name = a->len > sizeof(sa_family_t) ? a->len - sizeof(sa_family_t) : 0;
    if (name == 0 || u->sun_path[0] != '\0' || 1 + 2 * name + 1 > outlen)
        return -1; /* only abstract names */
    out[0] = 'u';
    for (size_t i = 0; i < name; i++)
        snprintf(out + 1 + 2 * i, 3, "%02x", (unsigned char)u->sun_path[i]);
    return 0;
}

int rr_addr_parse(const char *text, struct rr_addr *a)
{
    char *end;

    if (text[0] == 'p') {
        unsigned long port;
        errno = 0;
        port = strtoul(text + 1, &end, 10);
        if (errno || end == text + 1 || *end || port == 0 || port > 65535)
            return -1;
        *a = rr_addr_loopback(AF_INET);
        ((struct sockaddr_in *)&a->sa)->sin_port = htons((uint16_t)port);
        return 0;
    }
    if (text[0] == 'u') {
        size_t hex = strlen(text + 1), name = hex / 2;
        struct sockaddr_un *u;
        if (hex == 0 || hex % 2 || name > sizeof u->sun_path)
            return -1;
        *a = rr_addr_loopback(AF_UNIX);
        u = (struct sockaddr_un *)&a->sa;
        for (size_t i = 0; i < name; i++) {
            char byte[3] = {text[1 + 2 * i], text[2 + 2 * i], '\0'};
            unsigned long v = strtoul(byte, &end, 16);
            if (*end)
                return -1;
            u->sun_path[i] = (char)v;
        }
        if (u->sun_path[0] != '\0')
            return -1;
        a->len = (socklen_t)(sizeof(sa_family_t) + name);
        return 0;
    }
    return -1;
}
