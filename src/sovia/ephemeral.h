/*
 * ephemeral.h - a client port for sovia run's connect() (ephemeral.c).
 */
#ifndef SOVIA_EPHEMERAL_H
#define SOVIA_EPHEMERAL_H

#include <stdbool.h>
#include <stdint.h>

/* The host's ephemeral range and reserved ports (as the sysctls
 * ip_local_port_range and ip_local_reserved_ports write them). */
struct sov_ports {
    bool ok;
    uint16_t lo, hi;
    uint8_t reserved[65536 / 8];
};

/* 0, or -EINVAL (p->ok false) for text the kernel would not write. */
int sov_ports_parse(struct sov_ports *p, const char *range, const char *reserved);

/* Binds the unbound TCP socket fd (AF_INET or AF_INET6) to the wildcard
 * address and a port of p's range, not reserved, that no socket holds;
 * bind(0) when a few tries find none (or p is not ok, or the socket shares
 * ports). 0, or -1 with errno as bind() sets it. */
int sov_ports_bind(const struct sov_ports *p, int fd, int domain);

/* sov_ports_bind with this host's settings. */
int sov_bind_ephemeral(int fd, int domain);

#endif
