/* peer_input.c - see peer_input.h. */
#include "peer_input.h"

#include <unistd.h>

void fz_read_peer(struct fz_in *in, struct shm_msg *m, int fds[4])
{
    fz_bytes(in, m, sizeof(*m));
    for (int i = 0; i < 4; i++) {
        enum fz_fd_kind kind = (enum fz_fd_kind)(fz_u8(in) % FZ_FD_KINDS);
        size_t len = fz_u32(in) % PEER_MAX_LEN;
        int seals = fz_seals_of(fz_u8(in));
        uint8_t init[PEER_INIT_CTL];
        size_t init_len = i == 0 ? PEER_INIT_CTL : PEER_INIT_OTHER;
        fz_bytes(in, init, init_len);
        fds[i] = fz_make_fd(kind, len, init, init_len, seals);
    }
}
