/*
 * handshake.c - fuzzes the connection handshake as a hostile peer speaks
 * it, through the public VIPL calls: the message parsing and checks
 * (recv_msg, request_ok), the remote address and attributes handed to the
 * consumer, and mapping the peer's descriptors (attach_peer).
 *
 * Input: mode (u8: even = the victim is the server, odd = the client),
 * reliability of the victim's VI (u8), bytes of the message actually sent
 * (u8: 0 = all of it), descriptors sent (u8 % 6: up to 5; a request's fifth
 * is its connection token, an accept's is one too many),
 * then the peer as peer_input.h reads it. A connection that succeeds sends
 * two messages (inline and copied) into the peer's slots and disconnects.
 * The victim must never crash, must report a sane address, and must not
 * leak a descriptor.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "peer_input.h"

static const VIP_RELIABILITY_LEVEL levels[] = {
    VIP_SERVICE_UNRELIABLE, VIP_SERVICE_RELIABLE_DELIVERY, VIP_SERVICE_RELIABLE_RECEPTION};

static struct {
    VIP_NIC_HANDLE nic;
    VIP_PROTECTION_HANDLE ptag;
    VIP_NET_ADDRESS *srv;    /* the victim listens here */
    VIP_NET_ADDRESS *self;   /* the victim's address as a client */
    VIP_NET_ADDRESS *peer;   /* the fake listener the victim dials */
    VIP_NET_ADDRESS *remote; /* room for any remote address */
    char srv_disc[64], peer_disc[64];
    int lsock; /* the fake listener */
    uint8_t *buf;
    VIP_MEM_HANDLE buf_mh;
    VIP_DESCRIPTOR *desc;
    VIP_MEM_HANDLE desc_mh;
} g;

static const uint8_t loopback[4] = {127, 0, 0, 1};

static void setup(void)
{
    FZ_CHECK(VipOpenNic(NULL, &g.nic) == VIP_SUCCESS);
    FZ_CHECK(VipCreatePtag(g.nic, &g.ptag) == VIP_SUCCESS);
    fz_disc(g.srv_disc, sizeof(g.srv_disc), "hs");
    fz_disc(g.peer_disc, sizeof(g.peer_disc), "hc");
    g.srv = VipxAllocNetAddress(loopback, 4, g.srv_disc, (VIP_UINT16)strlen(g.srv_disc));
    g.peer = VipxAllocNetAddress(loopback, 4, g.peer_disc, (VIP_UINT16)strlen(g.peer_disc));
    g.self = VipxAllocNetAddress(loopback, 4, "fz-self", 7);
    g.remote = calloc(1, sizeof(VIP_NET_ADDRESS) + 16 + VIPL_MAX_DISC);
    FZ_CHECK(g.srv && g.peer && g.self && g.remote);
    FZ_CHECK(VipxListen(g.nic, g.srv) == VIP_SUCCESS);

    struct sockaddr_un sun;
    socklen_t len = fz_vipl_sockaddr(&sun, g.peer_disc);
    g.lsock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    FZ_CHECK(g.lsock >= 0 && bind(g.lsock, (struct sockaddr *)&sun, len) == 0 &&
             listen(g.lsock, 4) == 0);

    VIP_MEM_ATTRIBUTES ma = {.Ptag = g.ptag};
    g.buf = aligned_alloc(64, 4096);
    g.desc = aligned_alloc(64, 4096);
    FZ_CHECK(g.buf && g.desc);
    memset(g.buf, 0x5a, 4096);
    FZ_CHECK(VipRegisterMem(g.nic, g.buf, 4096, &ma, &g.buf_mh) == VIP_SUCCESS);
    FZ_CHECK(VipRegisterMem(g.nic, g.desc, 4096, &ma, &g.desc_mh) == VIP_SUCCESS);
}

/* Sends the message (its first `mlen` bytes) with `nfds` descriptors: a
 * fifth one repeats the first, a missing one (-1) is sent as stdin. */
static void send_peer_msg(int sock, const struct shm_msg *m, size_t mlen, const int *fds,
                          int nfds)
{
    int list[5];
    for (int i = 0; i < nfds; i++)
        list[i] = fds[i < 4 ? i : 0] >= 0 ? fds[i < 4 ? i : 0] : 0;
    FZ_CHECK(fz_send_fds(sock, m, mlen, list, nfds) == (ssize_t)mlen);
}

/* Reads the victim's message and closes whatever descriptors came with it. */
static void drain_victim_msg(int sock)
{
    struct shm_msg m;
    int n;
    fz_recv_fds(sock, &m, sizeof(m), NULL, 0, &n, 5000);
}

/* What a consumer does first on a new connection: send. Sends complete at
 * once; against a peer with no valid slot they fail, never crash. */
static void exercise(VIP_VI_HANDLE vi)
{
    static const uint32_t lens[] = {8, 200};
    for (unsigned i = 0; i < 2; i++) {
        memset(g.desc, 0, sizeof(*g.desc));
        g.desc->CS.Control = VIP_CONTROL_OP_SENDRECV;
        g.desc->CS.SegCount = 1;
        g.desc->CS.Length = lens[i];
        g.desc->DS[0].Local.Data.Address = g.buf;
        g.desc->DS[0].Local.Handle = g.buf_mh;
        g.desc->DS[0].Local.Length = lens[i];
        if (VipPostSend(vi, g.desc, g.desc_mh) == VIP_SUCCESS) {
            VIP_DESCRIPTOR *d;
            FZ_CHECK(VipSendDone(vi, &d) == VIP_SUCCESS && d == g.desc);
            FZ_CHECK(d->CS.Status & VIP_STATUS_DONE);
            fz_trace("send %u bytes: status 0x%x", lens[i], d->CS.Status);
        }
    }
}

static void check_remote(const VIP_NET_ADDRESS *a)
{
    FZ_CHECK(a->HostAddressLen <= 16 && a->DiscriminatorLen >= 1 &&
             a->DiscriminatorLen <= VIPL_MAX_DISC);
}

static void victim_server(const struct shm_msg *m, size_t mlen, const int *fds, int nfds,
                          VIP_VI_HANDLE vi)
{
    struct sockaddr_un sun;
    socklen_t len = fz_vipl_sockaddr(&sun, g.srv_disc);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    FZ_CHECK(s >= 0 && connect(s, (struct sockaddr *)&sun, len) == 0);
    send_peer_msg(s, m, mlen, fds, nfds);
    VIP_CONN_HANDLE conn;
    VIP_VI_ATTRIBUTES ra;
    VIP_RETURN r = VipConnectWait(g.nic, g.srv, 0, g.remote, &ra, &conn);
    fz_trace("server: VipConnectWait %s", VipxReturnString(r));
    if (r == VIP_SUCCESS) {
        check_remote(g.remote);
        FZ_CHECK(ra.ReliabilityLevel == m->reliability);
        r = VipConnectAccept(conn, vi);
        fz_trace("server: VipConnectAccept %s", VipxReturnString(r));
        if (r == VIP_SUCCESS) {
            drain_victim_msg(s);
            exercise(vi);
        }
    } else {
        FZ_CHECK(r == VIP_TIMEOUT);
    }
    close(s);
}

struct client_job {
    VIP_VI_HANDLE vi;
    VIP_RETURN r;
    VIP_VI_ATTRIBUTES ra;
};

static void *client_thread(void *arg)
{
    struct client_job *j = arg;
    j->r = VipConnectRequest(j->vi, g.self, g.peer, 5000, &j->ra);
    return NULL;
}

static void victim_client(const struct shm_msg *m, size_t mlen, const int *fds, int nfds,
                          VIP_VI_HANDLE vi)
{
    struct client_job j = {.vi = vi};
    pthread_t t;
    FZ_CHECK(pthread_create(&t, NULL, client_thread, &j) == 0);
    struct pollfd pfd = {.fd = g.lsock, .events = POLLIN};
    FZ_CHECK(fz_poll(&pfd, 1, 5000) == 1);
    int s = accept4(g.lsock, NULL, NULL, SOCK_CLOEXEC);
    FZ_CHECK(s >= 0);
    drain_victim_msg(s); /* the request and the victim's descriptors */
    send_peer_msg(s, m, mlen, fds, nfds);
    pthread_join(t, NULL);
    fz_trace("client: VipConnectRequest %s", VipxReturnString(j.r));
    if (j.r == VIP_SUCCESS)
        exercise(vi);
    else
        FZ_CHECK(j.r == VIP_REJECT || j.r == VIP_ERROR_RESOURCE);
    close(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g.nic)
        setup();
    struct fz_in in = {data, size};
    int before = fz_count_fds();
    uint8_t mode = fz_u8(&in);
    VIP_VI_ATTRIBUTES va = {.ReliabilityLevel = levels[fz_u8(&in) % 3],
                            .MaxTransferSize = 32768,
                            .Ptag = g.ptag};
    size_t mlen = fz_u8(&in) % (sizeof(struct shm_msg) + 1);
    if (mlen == 0)
        mlen = sizeof(struct shm_msg);
    int nfds = fz_u8(&in) % 6;
    struct shm_msg m;
    int fds[4];
    fz_read_peer(&in, &m, fds);

    VIP_VI_HANDLE vi;
    VIPX_VI_CONFIG vc = {.QueueDepth = 16, .StagingBytes = 65536, .ArenaBytes = 65536};
    FZ_CHECK(VipxCreateVi(g.nic, &va, NULL, NULL, &vc, &vi) == VIP_SUCCESS);
    if (mode & 1)
        victim_client(&m, mlen, fds, nfds, vi);
    else
        victim_server(&m, mlen, fds, nfds, vi);

    VIP_VI_STATE st;
    VIP_BOOLEAN sq, rq;
    FZ_CHECK(VipQueryVi(vi, &st, &va, &sq, &rq) == VIP_SUCCESS);
    if (st == VIP_STATE_CONNECTED || st == VIP_STATE_ERROR)
        FZ_CHECK(VipDisconnect(vi) == VIP_SUCCESS);
    VIP_DESCRIPTOR *d;
    while (VipSendDone(vi, &d) == VIP_SUCCESS)
        ;
    FZ_CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
    for (int i = 0; i < 4; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    FZ_CHECK(fz_count_fds() == before);
    return 0;
}
