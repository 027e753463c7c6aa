/*
 * shm_segment.c - creating, sealing and mapping the memfd segments, and
 * validating the peer's segments before we touch them.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "shm.h"

#define SEALS_COMMON (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

int shm_memfd(const char *name, size_t len)
{
    /* Growing a file past RLIMIT_FSIZE raises SIGXFSZ, whose default action
     * kills the process: a program that limits the files it writes must see
     * a failed connection, as a kernel socket would, not die of it. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && len > rl.rlim_cur)
        return -ENOMEM;
    int fd = vipl_fd_memfd(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    /* Reachable only through our fds anyway; keep the mode tight too. */
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)len) != 0) {
        int err = -errno;
        VipxFdClose(fd);
        return err;
    }
    return fd;
}

int shm_seal(int fd, bool owner_only)
{
    int seals = SEALS_COMMON | (owner_only ? F_SEAL_FUTURE_WRITE : 0);
    return fcntl(fd, F_ADD_SEALS, seals) == 0 ? 0 : -errno;
}

/* Maps `fd` read-write, at `at` if given (replacing what is there). */
void *shm_map_fixed(void *at, int fd, size_t len)
{
    void *p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | (at ? MAP_FIXED : 0), fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

static size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) & ~(to - 1);
}

/*
 * (Re)creates the VI's ctl and rx segments. On a reconnect the new memfds are
 * mapped over the old addresses, so the arena a consumer registered stays
 * where it was, while a former peer keeps only the old, orphaned memory.
 */
int shm_vi_segments_create(struct shm_vi *vi)
{
    size_t page = shm_nic(vi->core.nic)->page;
    size_t ctl_len = shm_ctl_size(vi->depth, SHM_REG_SLOTS, page);
    size_t head = sizeof(struct shm_rx) + (size_t)vi->depth * sizeof(struct shm_cmpl);
    size_t staging_off = round_up(head, SHM_LINE);
    size_t arena_off = round_up(staging_off + vi->staging_len, page);
    size_t rx_len = arena_off + round_up(vi->arena_len, page);
    if (rx_len > SHM_MAX_SEGMENT)
        return -ENOMEM;

    /* A reconnect keeps the layout the first creation chose. */
    bool merged = vi->ctl ? vi->merged : vi->inheritable;
    if (merged && ctl_len + rx_len > SHM_MAX_SEGMENT) /* the peer checks the file's size */
        return -ENOMEM;
    int ctl_fd = shm_memfd(merged ? "sovia-vi-ctlrx" : "sovia-vi-ctl", merged ? ctl_len + rx_len : ctl_len);
    if (ctl_fd < 0)
        return ctl_fd;
    int rx_fd = merged ? -1 : shm_memfd("sovia-vi-rx", rx_len);
    if (!merged && rx_fd < 0) {
        VipxFdClose(ctl_fd);
        return rx_fd;
    }
    struct shm_ctl *ctl = shm_map_fixed(vi->ctl, ctl_fd, merged ? ctl_len + rx_len : ctl_len);
    struct shm_rx *rx = !ctl     ? NULL
                        : merged ? (struct shm_rx *)((char *)ctl + ctl_len)
                                 : shm_map_fixed(vi->rx, rx_fd, rx_len);
    if (!ctl || !rx) {
        if (ctl && !vi->ctl)
            munmap(ctl, ctl_len);
        VipxFdClose(ctl_fd);
        if (rx_fd >= 0)
            VipxFdClose(rx_fd);
        return -ENOMEM;
    }
    ctl->hdr = (struct shm_ctl_header){
        .magic = SHM_MAGIC,
        .version = SHM_VERSION,
        .depth = vi->depth,
        .reg_slots = SHM_REG_SLOTS,
        .rx_size = (uint32_t)rx_len,
        .data_off = (uint32_t)staging_off,
        .staging_off = (uint32_t)staging_off,
        .staging_len = vi->staging_len,
        .arena_off = (uint32_t)arena_off,
        .arena_len = vi->arena_len,
        .max_transfer = (uint32_t)vi->core.attrs.MaxTransferSize,
    };
    int err = shm_seal(ctl_fd, !vi->inheritable && !merged);
    if (!err && !merged)
        err = shm_seal(rx_fd, false);
    if (err) {
        VipxFdClose(ctl_fd);
        if (rx_fd >= 0)
            VipxFdClose(rx_fd);
        return err;
    }
    if (vi->ctl_fd >= 0)
        VipxFdClose(vi->ctl_fd);
    if (vi->rx_fd >= 0)
        VipxFdClose(vi->rx_fd);
    /* A reconnect maps at the same addresses: rewriting the pointers would
     * race (harmlessly, but needlessly) with lock-free pollers. */
    if (vi->ctl != ctl)
        vi->ctl = ctl;
    if (vi->rx != rx)
        vi->rx = rx;
    vi->ctl_fd = ctl_fd;
    vi->rx_fd = rx_fd;
    vi->merged = merged;
    vi->ctl_len = ctl_len;
    vi->rx_len = rx_len;
    vi->staging_off = (uint32_t)staging_off;
    vi->arena_off = (uint32_t)arena_off;
    uint8_t *arena = vi->arena_len ? (uint8_t *)rx + arena_off : NULL;
    if (vi->arena != arena)
        vi->arena = arena;
    return 0;
}

void shm_vi_segments_destroy(struct shm_vi *vi)
{
    /* Merged: one mapping, one munmap (each is a TLB shootdown of the
     * process's other CPUs, at every connection's end). */
    if (vi->ctl && vi->merged && vi->rx)
        munmap(vi->ctl, vi->ctl_len + vi->rx_len);
    else {
        if (vi->ctl)
            munmap(vi->ctl, vi->ctl_len);
        if (vi->rx)
            munmap(vi->rx, vi->rx_len);
    }
    if (vi->ctl_fd >= 0)
        VipxFdClose(vi->ctl_fd);
    if (vi->rx_fd >= 0)
        VipxFdClose(vi->rx_fd);
    vi->ctl = NULL;
    vi->rx = NULL;
    vi->ctl_fd = vi->rx_fd = -1;
}

/* The size of a peer memfd carrying at least `seals`; 0 if it does not.
 * Only a shmem memfd: a hugetlbfs one can be sealed too, but its pages are
 * reserved from a pool the peer may have exhausted (SIGBUS on fault). */
static size_t sealed_size(int fd, int seals)
{
    int have = fcntl(fd, F_GET_SEALS);
    struct stat st;
    struct statfs fs;
    if (have < 0 || (have & seals) != seals || fstatfs(fd, &fs) != 0 ||
        fs.f_type != TMPFS_MAGIC || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_size <= 0 || (uint64_t)st.st_size > SHM_MAX_SEGMENT)
        return 0;
    return (size_t)st.st_size;
}

size_t shm_sealed_size(int fd)
{
    return sealed_size(fd, SEALS_COMMON);
}

static bool is_pow2(uint32_t x)
{
    return x && !(x & (x - 1));
}

/* Checks the peer's ctl header against the sizes we actually got. */
static bool peer_geometry_ok(const struct shm_ctl_header *h, size_t ctl_len, size_t rx_len,
                             size_t page)
{
    if (h->magic != SHM_MAGIC || h->version != SHM_VERSION || !is_pow2(h->depth) ||
        h->depth > SHM_MAX_DEPTH || h->reg_slots > SHM_REG_SLOTS)
        return false;
    if (shm_ctl_size(h->depth, h->reg_slots, page) > ctl_len)
        return false;
    size_t cmpl_end = sizeof(struct shm_rx) + (size_t)h->depth * sizeof(struct shm_cmpl);
    return h->rx_size == rx_len && h->data_off >= cmpl_end && h->data_off <= rx_len;
}

static void *map_peer(int fd, size_t len, int prot)
{
    void *p = mmap(NULL, len, prot, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* b is a or names the same file as a (-1: not there, as after an exec). */
static bool same_file(int a, int b)
{
    struct stat sa, sb;
    return b < 0 || a == b ||
           (fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
            sa.st_ino == sb.st_ino);
}

/* A wake-up socket must be a Unix datagram socket: sending to it with
 * MSG_DONTWAIT can never block, whatever the peer does to it. */
static bool is_wake_socket(int fd)
{
    int type = 0, domain = 0;
    socklen_t l1 = sizeof(type), l2 = sizeof(domain);
    return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l1) == 0 &&
           getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &l2) == 0 && type == SOCK_DGRAM &&
           domain == AF_UNIX;
}

/*
 * Maps the peer's segments from the fds it sent: ctl read-only, rx
 * read-write, the armed flag read-only, and by m->wake_sock: its futex
 * word page read-write (FUTEX), its wake-up socket, kept (SOCKET: fds[3]
 * is then taken, set to -1), or nothing (NAMED: the wake-up goes to the
 * CQ socket m->wake_id names; fds[3] is left to the caller). In socket
 * mode the armed page and the socket are the NIC's shared entries for
 * those files (shm_shared.c; fds[2] and fds[3] taken, set to -1). Every size and offset is checked against what the kernel says
 * the descriptors are; returns -EPROTO on anything inconsistent.
 */
int shm_peer_map(struct shm_peer *peer, int fds[4], const struct shm_msg *m,
                 struct shm_nic *snic)
{
    size_t page = snic->page;
    /* Read-only for us; whether the owner sealed them against its peers is
     * the owner's business (an inheritable VI does not). */
    bool sock = m->wake_sock == SHM_WAKE_SOCKET, futex = m->wake_sock == SHM_WAKE_FUTEX;
    size_t ctl_len = sealed_size(fds[0], SEALS_COMMON);
    size_t rx_len = m->rx_off ? 0 : sealed_size(fds[1], SEALS_COMMON);
    if (m->rx_off) { /* one memfd: fds[1] names it too (or is not there) */
        if (!same_file(fds[0], fds[1]) || m->rx_off % page || m->rx_off >= ctl_len)
            return -EPROTO;
        rx_len = ctl_len - m->rx_off;
        ctl_len = m->rx_off;
    }
    size_t armed_len = sealed_size(fds[2], SEALS_COMMON);
    size_t word_len = futex ? sealed_size(fds[3], SEALS_COMMON) : 0;
    bool wake_ok = sock    ? is_wake_socket(fds[3])
                   : futex ? word_len && !(m->word_off & 3) && (size_t)m->word_off + 4 <= word_len
                           : m->wake_sock == SHM_WAKE_NAMED && m->wake_id != 0;
    if (!ctl_len || !rx_len || !armed_len || !wake_ok || (m->armed_off & 3) ||
        (size_t)m->armed_off + 4 * (SHM_CQ_EPOCH + 1) > armed_len ||
        ctl_len < sizeof(struct shm_ctl))
        return -EPROTO;

    *peer = (struct shm_peer){.sock = -1, .pidfd = -1, .wake_sock = -1, .kept = {-1, -1, -1, -1},
                              .nic = snic};
    if (m->rx_off) {
        /* One file: one mapping, ctl made read-only in it, so the end of
         * the connection unmaps it in one call. */
        char *all = map_peer(fds[0], ctl_len + rx_len, PROT_READ | PROT_WRITE);
        if (all && mprotect(all, ctl_len, PROT_READ) != 0) {
            munmap(all, ctl_len + rx_len);
            all = NULL;
        }
        peer->ctl = (const struct shm_ctl *)all;
        peer->rx = all ? (struct shm_rx *)(all + ctl_len) : NULL;
        peer->merged = all != NULL;
    } else {
        peer->ctl = map_peer(fds[0], ctl_len, PROT_READ);
        peer->rx = map_peer(fds[1], rx_len, PROT_READ | PROT_WRITE);
    }
    peer->ctl_len = ctl_len;
    peer->rx_len = rx_len;
    peer->armed_len = armed_len;
    peer->wake_named = m->wake_sock == SHM_WAKE_NAMED ? m->wake_id : 0;
    if (sock) {
        /* Every connection to this peer CQ names the same two files. */
        peer->armed_sh = shm_shared_get(snic, &fds[2], armed_len, false);
        peer->sock_sh = peer->armed_sh ? shm_shared_get(snic, &fds[3], 0, false) : NULL;
        peer->armed_map = peer->armed_sh ? shm_shared_map(peer->armed_sh) : NULL;
        peer->wake_sock = peer->sock_sh ? shm_shared_fd(peer->sock_sh) : -1;
    } else {
        peer->armed_map = map_peer(fds[2], armed_len, PROT_READ);
    }
    if (futex) {
        peer->word_map = map_peer(fds[3], word_len, PROT_READ | PROT_WRITE);
        peer->word_len = word_len;
    }
    if (m->rx_off && fds[1] >= 0) { /* one descriptor of the file is enough */
        if (fds[1] != fds[0])
            VipxFdClose(fds[1]);
        fds[1] = -1;
    }
    if (!peer->ctl || !peer->rx || !peer->armed_map || (futex && !peer->word_map) ||
        (sock && peer->wake_sock < 0)) {
        shm_peer_unmap(peer);
        return -ENOMEM;
    }
    /* One copy of the header: the values we validate are the values we use. */
    struct shm_ctl_header h = peer->ctl->hdr;
    if (!peer_geometry_ok(&h, ctl_len, rx_len, page)) {
        shm_peer_unmap(peer);
        return -EPROTO;
    }
    peer->depth = h.depth;
    peer->mask = h.depth - 1;
    peer->reg_slots = h.reg_slots;
    peer->data_off = h.data_off;
    peer->rx_size = h.rx_size;
    peer->wake_armed = (const _Atomic uint32_t *)((const char *)peer->armed_map + m->armed_off);
    if (peer->word_map)
        peer->wake_word = (_Atomic uint32_t *)((char *)peer->word_map + m->word_off);
    return 0;
}

void shm_peer_unmap(struct shm_peer *peer)
{
    if (peer->merged)
        munmap((void *)peer->ctl, peer->ctl_len + peer->rx_len);
    else {
        if (peer->ctl)
            munmap((void *)peer->ctl, peer->ctl_len);
        if (peer->rx)
            munmap(peer->rx, peer->rx_len);
    }
    peer->merged = false;
    if (peer->armed_sh)
        shm_shared_put(peer->nic, peer->armed_sh);
    else if (peer->armed_map)
        munmap(peer->armed_map, peer->armed_len);
    if (peer->word_map)
        munmap(peer->word_map, peer->word_len);
    if (peer->sock_sh)
        shm_shared_put(peer->nic, peer->sock_sh);
    else if (peer->wake_sock >= 0)
        VipxFdClose(peer->wake_sock);
    if (peer->hint_sh)
        shm_shared_put(peer->nic, peer->hint_sh);
    peer->hint_sh = NULL;
    peer->hint_word = NULL;
    peer->hint_words = 0;
    peer->armed_sh = peer->sock_sh = NULL;
    for (int i = 0; i < 4; i++)
        if (peer->kept[i] >= 0)
            VipxFdClose(peer->kept[i]);
    memset(peer->kept, -1, sizeof(peer->kept));
    peer->ctl = NULL;
    peer->rx = NULL;
    peer->armed_map = peer->word_map = NULL;
    peer->wake_sock = -1;
}

/* Lets go of everything held for a peer: its mappings, its connection
 * socket and pidfd, and the structure. */
void shm_peer_free(struct shm_peer *peer)
{
    VipxFdClose(peer->sock);
    if (peer->pidfd >= 0)
        VipxFdClose(peer->pidfd);
    shm_peer_unmap(peer);
    free(peer);
}
