/*
 * peer_map.c - fuzzes shm_peer_map, the check of everything a peer sends
 * at connect: the connection message's wake-up fields and its four
 * descriptors (kind, size, seals) with the ctl header inside.
 *
 * Input: the shm_msg bytes, then for each of the four descriptors a kind,
 * a size, a seal byte and its first bytes (the ctl header and live lines
 * for fd 0). On success every region the data path may later touch is
 * touched here, so a size check that lets a region run past its memfd
 * shows as SIGBUS; the values kept must be the validated ones, and no
 * descriptor may leak.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "peer_input.h"

static void touch_peer(const struct shm_peer *p, const struct shm_msg *m, size_t page)
{
    FZ_CHECK(p->depth && !(p->depth & (p->depth - 1)) && p->depth <= SHM_MAX_DEPTH);
    FZ_CHECK(p->mask == p->depth - 1 && p->reg_slots <= SHM_REG_SLOTS);
    FZ_CHECK(shm_ctl_size(p->depth, p->reg_slots, page) <= p->ctl_len);
    FZ_CHECK(p->rx_size == p->rx_len);
    FZ_CHECK(p->data_off >= sizeof(struct shm_rx) + (size_t)p->depth * sizeof(struct shm_cmpl));
    FZ_CHECK(p->data_off <= p->rx_size);
    /* The header we were given is the header in the mapping (read once). */
    FZ_CHECK(p->ctl->hdr.depth == p->depth && p->ctl->hdr.data_off == p->data_off);

    /* What the sender reads: every post slot and export entry. */
    volatile uint32_t sink = atomic_load(&p->ctl->live.posted);
    sink += atomic_load(&p->ctl->post[p->depth - 1].seq);
    const struct shm_reg_export *regs = (const struct shm_reg_export *)&p->ctl->post[p->depth];
    if (p->reg_slots)
        sink += atomic_load(&regs[p->reg_slots - 1].handle) + regs[p->reg_slots - 1].rx_off;
    /* What it writes: the last completion slot and the last data byte. */
    atomic_store(&p->rx->cmpl[p->depth - 1].seq, 1);
    if (p->data_off < p->rx_size)
        ((volatile uint8_t *)p->rx)[p->rx_size - 1] = 1;
    sink += atomic_load(p->wake_armed);
    if (m->wake_sock) {
        FZ_CHECK(p->wake_sock >= 0 && !p->word_map);
    } else {
        FZ_CHECK(p->wake_sock < 0 && p->wake_word);
        atomic_fetch_add(p->wake_word, 1);
    }
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz_in in = {data, size};
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    static struct shm_nic nic; /* the shared entries (socket mode) only */
    if (!nic.page) {
        nic.page = page;
        shm_shared_init(&nic);
    }
    shm_ring_socket(); /* made once per process, at a holder's first wake-up */
    int before = fz_count_fds();

    struct shm_msg m;
    int fds[4];
    fz_read_peer(&in, &m, fds);

    struct shm_peer peer;
    int rc = shm_peer_map(&peer, fds, &m, &nic);
    fz_trace("shm_peer_map: %d", rc);
    FZ_CHECK(rc == 0 || rc == -EPROTO || rc == -ENOMEM);
    if (rc == 0) {
        touch_peer(&peer, &m, page);
        /* The wake-up of a sleeping peer, as every send ends. */
        shm_wake_peer(&peer);
        shm_peer_unmap(&peer);
    }
    for (int i = 0; i < 4; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    FZ_CHECK(nic.nshared == 0); /* the last connection let go of them */
    FZ_CHECK(fz_count_fds() == before);
    return 0;
}
