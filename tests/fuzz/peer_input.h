/*
 * peer_input.h - what a peer sends at connect, read from fuzz input: the
 * connection message and its four descriptors. Shared by the peer_map and
 * handshake targets (and their seeds), so one corpus format serves both.
 *
 * Format: sizeof(struct shm_msg) bytes, then per descriptor: kind (u8, see
 * enum fz_fd_kind), size (u32), seal bits (u8, see fz_seals_of) and its
 * first bytes (PEER_INIT_CTL for fd 0, the ctl header and live lines;
 * PEER_INIT_OTHER for the others).
 */
#ifndef SOVIA_TESTS_FUZZ_PEER_INPUT_H
#define SOVIA_TESTS_FUZZ_PEER_INPUT_H

#include "fz.h"
#include "shm.h"

/* Sizes up to a little past the provider's segment limit. */
#define PEER_MAX_LEN ((size_t)SHM_MAX_SEGMENT + 3 * 4096)
#define PEER_INIT_CTL (sizeof(struct shm_ctl_header) + sizeof(struct shm_ctl_live))
#define PEER_INIT_OTHER 64

/* Reads the message and makes the descriptors (-1 where that failed). */
void fz_read_peer(struct fz_in *in, struct shm_msg *m, int fds[4]);

/* Seeds: a well-formed peer of the given depth; wake_sock selects a CQ-style
 * wake-up socket for fd 3. The message type is `type`. */
struct seed;
void seed_peer(struct seed *s, uint32_t depth, int wake_sock, uint16_t type);

#endif
