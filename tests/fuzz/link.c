/* link.c - see link.h. */
#include "link.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define PEER_STAGING 4096u
#define PEER_ARENA 16384u

static struct {
    VIP_NIC_HANDLE nic;
    VIP_PROTECTION_HANDLE ptag;
    VIP_NET_ADDRESS *addr;
    char disc[64];
    size_t page;
} env;

static const uint8_t loopback[4] = {127, 0, 0, 1};

void fz_link_init(VIP_NIC_HANDLE *nic, VIP_PROTECTION_HANDLE *ptag)
{
    if (env.nic) {
        *nic = env.nic;
        *ptag = env.ptag;
        return;
    }
    env.page = (size_t)sysconf(_SC_PAGESIZE);
    FZ_CHECK(VipOpenNic(NULL, &env.nic) == VIP_SUCCESS);
    FZ_CHECK(VipCreatePtag(env.nic, &env.ptag) == VIP_SUCCESS);
    fz_disc(env.disc, sizeof(env.disc), "link");
    env.addr = VipxAllocNetAddress(loopback, 4, env.disc, (VIP_UINT16)strlen(env.disc));
    FZ_CHECK(env.addr && VipxListen(env.nic, env.addr) == VIP_SUCCESS);
    *nic = env.nic;
    *ptag = env.ptag;
}

void fz_link_peer_geometry(uint32_t depth, size_t *ctl_len, size_t *rx_len, uint32_t *data_off)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t head = sizeof(struct shm_rx) + (size_t)depth * sizeof(struct shm_cmpl);
    size_t staging_off = (head + SHM_LINE - 1) & ~(size_t)(SHM_LINE - 1);
    size_t arena_off = (staging_off + PEER_STAGING + page - 1) & ~(page - 1);
    *ctl_len = shm_ctl_size(depth, SHM_REG_SLOTS, page);
    *rx_len = arena_off + PEER_ARENA;
    *data_off = (uint32_t)staging_off;
}

static void *map_fd(int fd, size_t len, int prot)
{
    void *p = mmap(NULL, len, prot, MAP_SHARED, fd, 0);
    FZ_CHECK(p != MAP_FAILED);
    return p;
}

static size_t fd_size(int fd)
{
    off_t end = lseek(fd, 0, SEEK_END);
    FZ_CHECK(end > 0);
    return (size_t)end;
}

/* The peer's segments, sealed as the provider seals its own. */
static void make_peer(struct fz_link *l, const struct fz_link_cfg *cfg, int fds[2])
{
    fz_link_peer_geometry(cfg->peer_depth, &l->ctl_len, &l->rx_len, &l->data_off);
    l->depth = cfg->peer_depth;
    int common = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    fds[0] = fz_memfd(l->ctl_len, NULL, 0, 0);
    fds[1] = fz_memfd(l->rx_len, NULL, 0, 0);
    FZ_CHECK(fds[0] >= 0 && fds[1] >= 0);
    /* Mapped writable before F_SEAL_FUTURE_WRITE: the harness keeps writing. */
    l->ctl = map_fd(fds[0], l->ctl_len, PROT_READ | PROT_WRITE);
    l->rx = map_fd(fds[1], l->rx_len, PROT_READ | PROT_WRITE);
    l->ctl->hdr = (struct shm_ctl_header){
        .magic = SHM_MAGIC,
        .version = SHM_VERSION,
        .depth = cfg->peer_depth,
        .reg_slots = SHM_REG_SLOTS,
        .rx_size = (uint32_t)l->rx_len,
        .data_off = l->data_off,
        .staging_off = l->data_off,
        .staging_len = PEER_STAGING,
        .arena_off = (uint32_t)(l->rx_len - PEER_ARENA),
        .arena_len = PEER_ARENA,
        .max_transfer = 32768,
    };
    FZ_CHECK(fcntl(fds[0], F_ADD_SEALS, common | F_SEAL_FUTURE_WRITE) == 0);
    FZ_CHECK(fcntl(fds[1], F_ADD_SEALS, common) == 0);
}

static void send_request(int sock, const struct fz_link_cfg *cfg, const int fds[2])
{
    struct shm_msg m = {
        .magic = SHM_MAGIC,
        .version = SHM_VERSION,
        .type = SHM_MSG_REQUEST,
        .reliability = cfg->reliability,
        .rdma_write = cfg->peer_rdma_write,
        .max_transfer = 32768,
        .armed_off = (uint32_t)offsetof(struct shm_ctl, live.recv_armed),
        .word_off = (uint32_t)offsetof(struct shm_rx, live.wake_seq),
        .host_len = 4,
        .disc_len = 4,
        .addr = {127, 0, 0, 1, 'p', 'e', 'e', 'r'},
    };
    int four[4] = {fds[0], fds[1], fds[0], fds[1]};
    FZ_CHECK(fz_send_fds(sock, &m, sizeof(m), four, 4) == (ssize_t)sizeof(m));
}

/* The victim's ACCEPT: maps its ctl (read-only) and rx, closes the rest. */
static void take_accept(struct fz_link *l)
{
    struct shm_msg m;
    int fds[4], n;
    FZ_CHECK(fz_recv_fds(l->sock, &m, sizeof(m), fds, 4, &n, 5000) == (ssize_t)sizeof(m));
    FZ_CHECK(m.type == SHM_MSG_ACCEPT && n == 4);
    l->vctl_len = fd_size(fds[0]);
    l->vrx_len = fd_size(fds[1]);
    l->vctl = map_fd(fds[0], l->vctl_len, PROT_READ);
    l->vrx = map_fd(fds[1], l->vrx_len, PROT_READ | PROT_WRITE);
    for (int i = 0; i < 4; i++)
        close(fds[i]);
}

void fz_link_open(struct fz_link *l, const struct fz_link_cfg *cfg)
{
    memset(l, 0, sizeof(*l));
    fz_link_init(&l->nic, &l->ptag);
    VIP_VI_ATTRIBUTES va = {.ReliabilityLevel = cfg->reliability,
                            .MaxTransferSize = 32768,
                            .Ptag = env.ptag,
                            .EnableRdmaWrite = cfg->rdma_write};
    VIPX_VI_CONFIG vc = {.QueueDepth = cfg->depth,
                         .StagingBytes = cfg->staging,
                         .ArenaBytes = cfg->arena};
    FZ_CHECK(VipxCreateVi(env.nic, &va, NULL, NULL, &vc, &l->vi) == VIP_SUCCESS);

    int fds[2];
    make_peer(l, cfg, fds);
    struct sockaddr_un sun;
    socklen_t len = fz_vipl_sockaddr(&sun, env.disc);
    l->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    FZ_CHECK(l->sock >= 0 && connect(l->sock, (struct sockaddr *)&sun, len) == 0);
    send_request(l->sock, cfg, fds);
    close(fds[0]);
    close(fds[1]);

    union {
        VIP_NET_ADDRESS a;
        uint8_t room[sizeof(VIP_NET_ADDRESS) + 16 + VIPL_MAX_DISC];
    } remote;
    VIP_CONN_HANDLE conn;
    VIP_VI_ATTRIBUTES ra;
    FZ_CHECK(VipConnectWait(env.nic, env.addr, 5000, &remote.a, &ra, &conn) == VIP_SUCCESS);
    FZ_CHECK(VipConnectAccept(conn, l->vi) == VIP_SUCCESS);
    take_accept(l);
}

void fz_link_close(struct fz_link *l)
{
    VIP_VI_STATE st;
    VIP_VI_ATTRIBUTES va;
    VIP_BOOLEAN sq, rq;
    FZ_CHECK(VipQueryVi(l->vi, &st, &va, &sq, &rq) == VIP_SUCCESS);
    if (st == VIP_STATE_CONNECTED || st == VIP_STATE_ERROR)
        FZ_CHECK(VipDisconnect(l->vi) == VIP_SUCCESS);
    VIP_DESCRIPTOR *d;
    while (VipSendDone(l->vi, &d) == VIP_SUCCESS || VipRecvDone(l->vi, &d) == VIP_SUCCESS)
        ;
    FZ_CHECK(VipDestroyVi(l->vi) == VIP_SUCCESS);
    close(l->sock);
    munmap(l->ctl, l->ctl_len);
    munmap(l->rx, l->rx_len);
    munmap((void *)l->vctl, l->vctl_len);
    munmap(l->vrx, l->vrx_len);
}
