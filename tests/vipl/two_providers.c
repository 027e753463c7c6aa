/*
 * two_providers: one process uses the shm and the fabric provider at once
 * (sovia run across hosts carries same-host connections over shm and the
 * others over fabric: docs/VIPL.md, "Two providers in one process").
 *   - VipOpenNic("shm") and VipOpenNic("fabric:tcp") both succeed in one
 *     process and name their providers;
 *   - one discriminator listens on both NICs at once (each NIC has its
 *     own name space), and a client VI of each NIC connects to its own;
 *   - a VI of one NIC on the other's CQ (VIP_INVALID_PARAMETER), or with
 *     the other's ptag (VIP_INVALID_PTAG), is refused: objects never
 *     cross NICs;
 *   - both connections carry messages at the same time, each byte-exact,
 *     and each completion reaches only its own NIC's CQ;
 *   - one thread sleeps on both CQs with poll() (VipxCQPollFds of each,
 *     both armed, the shorter bound): a message on either is found within
 *     the bound, the other CQ stays empty; a shm message wakes the poll
 *     through the shm CQ's descriptor (the fabric CQ's bound, 10 ms with
 *     libfabric's tcp, only ends sleeps: manual progress).
 * Skipped (77) where libfabric's tcp provider cannot open.
 */
#include "harness.h"

#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>

#define MSG 3000
#define NMSG 64

enum { SHM, FAB, NNIC };
static const char *const names[NNIC] = {"shm", "fabric:tcp"};

struct side {
    VIP_NIC_HANDLE nic;
    VIP_PROTECTION_HANDLE tag;
    VIP_CQ_HANDLE cq; /* the server VI's receive CQ */
    VIP_VI_HANDLE srv, cli;
    h_mem sbuf, rbuf;
    h_descs sd, rd;
};

static struct side sides[NNIC];
static char srv_disc[64], cli_disc[2][64];

static void *accept_thread(void *arg)
{
    struct side *s = arg;
    h_accept(s->nic, s->srv, srv_disc, NULL);
    return NULL;
}

static void open_side(int k)
{
    struct side *s = &sides[k];
    VIP_RETURN r = VipOpenNic(names[k], &s->nic);
    if (k == FAB && r != VIP_SUCCESS) {
        printf("SKIP: VipOpenNic(\"%s\") returned %s (libfabric's tcp provider?)\n", names[k],
               VipxReturnString(r));
        exit(77);
    }
    CHECK_OK(r);
    VIP_NIC_ATTRIBUTES a;
    CHECK_OK(VipQueryNic(s->nic, &a));
    CHECK_MSG(strncmp(a.Name, names[k], strlen(names[k])) == 0, "NIC %d is %s", k, a.Name);
    s->tag = h_ptag(s->nic);
    CHECK_OK(VipCreateCQ(s->nic, 1024, &s->cq));
    s->sbuf = h_mem_alloc(s->nic, s->tag, (size_t)MSG * NMSG, 0);
    s->rbuf = h_mem_alloc(s->nic, s->tag, (size_t)MSG * NMSG, 0);
    s->sd = h_descs_alloc(s->nic, s->tag, NMSG);
    s->rd = h_descs_alloc(s->nic, s->tag, NMSG);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(s->tag, VIP_SERVICE_RELIABLE_DELIVERY);
    s->srv = h_vi(s->nic, &va, NULL, s->cq, NMSG, 0, 0);
    s->cli = h_vi(s->nic, &va, NULL, NULL, NMSG, 0, 0);
}

/* Objects of one NIC are refused on the other. */
static void no_crossing(void)
{
    VIP_VI_ATTRIBUTES va = h_vi_attrs(sides[SHM].tag, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE vi = NULL;
    CHECK_RET(VipCreateVi(sides[FAB].nic, &va, NULL, sides[SHM].cq, &vi), VIP_INVALID_PARAMETER);
    CHECK_RET(VipCreateVi(sides[SHM].nic, &va, NULL, sides[FAB].cq, &vi), VIP_INVALID_PARAMETER);
    /* The shm NIC's tag on a fabric VI. */
    CHECK_RET(VipCreateVi(sides[FAB].nic, &va, NULL, NULL, &vi), VIP_INVALID_PTAG);
}

static void connect_both(void)
{
    h_disc(srv_disc, sizeof(srv_disc));
    pthread_t t[NNIC];
    for (int k = 0; k < NNIC; k++) {
        h_disc(cli_disc[k], sizeof(cli_disc[k]));
        for (unsigned i = 0; i < NMSG; i++) /* before the accept: reliable VIs need them */
            h_post_recv1(sides[k].srv, &sides[k].rd, i, sides[k].rbuf.ptr + (size_t)i * MSG,
                         sides[k].rbuf.mh, MSG);
        CHECK_EQ(pthread_create(&t[k], NULL, accept_thread, &sides[k]), 0);
    }
    /* The same server discriminator on both NICs. */
    for (int k = 0; k < NNIC; k++)
        h_connect(sides[k].cli, cli_disc[k], srv_disc, NULL);
    for (int k = 0; k < NNIC; k++)
        CHECK_EQ(pthread_join(t[k], NULL), 0);
}

static void send_msg(int k, unsigned i)
{
    struct side *s = &sides[k];
    unsigned char *p = s->sbuf.ptr + (size_t)i * MSG;
    h_fill_random(p, MSG, (uint64_t)k * 1000 + i);
    h_post_send1(s->cli, &s->sd, i, p, s->sbuf.mh, MSG, VIP_CONTROL_IMMEDIATE,
                 (VIP_UINT32)(k * 1000 + i));
}

/* The next completion of side k's CQ: its own server VI, a receive, the
 * message i (immediate data and bytes). */
static void take(int k, unsigned i)
{
    struct side *s = &sides[k];
    VIP_VI_HANDLE vi = NULL;
    VIP_BOOLEAN recvq = VIP_FALSE;
    CHECK_OK(VipCQWait(s->cq, 5000, &vi, &recvq));
    CHECK(vi == s->srv && recvq == VIP_TRUE);
    VIP_DESCRIPTOR *d = NULL;
    CHECK_OK(VipRecvDone(s->srv, &d));
    CHECK(d == h_desc(&s->rd, i));
    CHECK_STATUS(d, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE | VIP_STATUS_IMMEDIATE);
    CHECK_EQ(d->CS.ImmediateData, k * 1000 + i);
    CHECK_EQ(d->CS.Length, MSG);
    CHECK_RANDOM(s->rbuf.ptr + (size_t)i * MSG, MSG, (uint64_t)k * 1000 + i);
}

static void both_at_once(void)
{
    for (unsigned i = 0; i < NMSG / 2; i++)
        for (int k = 0; k < NNIC; k++)
            send_msg(k, i);
    for (unsigned i = 0; i < NMSG / 2; i++)
        for (int k = 0; k < NNIC; k++)
            take(k, i);
    for (int k = 0; k < NNIC; k++) {
        VIP_VI_HANDLE vi;
        VIP_BOOLEAN rq;
        CHECK_RET(VipCQDone(sides[k].cq, &vi, &rq), VIP_NOT_DONE);
        for (unsigned i = 0; i < NMSG / 2; i++) /* the sends, done by now or soon */
            CHECK(h_send_done(sides[k].cli) == h_desc(&sides[k].sd, i));
    }
}

/* One poll() over both CQs' descriptors; a message on side k (sent by a
 * thread after a pause, so the poll sleeps first) wakes it. */
struct later {
    int k;
    unsigned i;
};

static void *send_later(void *arg)
{
    struct later *l = arg;
    h_sleep_ms(100);
    send_msg(l->k, l->i);
    return NULL;
}

static void one_sleep(int k, unsigned i)
{
    int fds[NNIC][2], bound[NNIC];
    struct pollfd p[2 * NNIC];
    int n = 0;
    for (int j = 0; j < NNIC; j++) { /* SHM first: p[0] is its CQ's descriptor */
        CHECK_OK(VipxCQPollFds(sides[j].cq, fds[j], &bound[j]));
        CHECK(fds[j][0] >= 0);
        CHECK_OK(VipxCQArm(sides[j].cq, VIP_TRUE));
        for (int f = 0; f < 2; f++)
            if (fds[j][f] >= 0)
                p[n++] = (struct pollfd){.fd = fds[j][f], .events = POLLIN};
    }
    struct later l = {k, i};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, send_later, &l), 0);
    double start = h_now_ms();
    bool woke = false, by_fd = false;
    /* Sleeps end at the shorter bound (a lost wake-up is retried, as the
     * sockets layer does); the completion must come within 5 s. */
    while (!woke && h_now_ms() - start < 5000) {
        int ms = bound[SHM] < 0 ? bound[FAB] : bound[FAB] < 0 ? bound[SHM]
                 : bound[SHM] < bound[FAB] ? bound[SHM] : bound[FAB];
        int r = poll(p, (nfds_t)n, ms < 0 ? 5000 : ms);
        CHECK(r >= 0);
        /* The shm CQ's own descriptor (its first: fds[SHM][0]). */
        by_fd = r > 0 && (p[0].revents & POLLIN);
        VIP_VI_HANDLE vi;
        VIP_BOOLEAN rq;
        /* Manual progress (libfabric's tcp): looking at the CQ moves it. */
        woke = VipCQDone(sides[k].cq, &vi, &rq) == VIP_SUCCESS;
        if (woke)
            CHECK(vi == sides[k].srv && rq == VIP_TRUE);
    }
    for (int j = 0; j < NNIC; j++)
        CHECK_OK(VipxCQArm(sides[j].cq, VIP_FALSE));
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_MSG(woke, "no completion on %s's CQ within 5 s", names[k]);
    double took = h_now_ms() - start;
    h_log("%s: woke after %.1f ms (bounds: shm %d, fabric %d ms)", names[k], took, bound[SHM],
          bound[FAB]);
    CHECK_MSG(took >= 90, "woke before the send (%.1f ms)", took);
    if (k == SHM)
        CHECK_MSG(by_fd, "the shm CQ's descriptor did not wake the poll");
    VIP_DESCRIPTOR *d = NULL;
    CHECK_OK(VipRecvDone(sides[k].srv, &d));
    CHECK(d == h_desc(&sides[k].rd, i));
    CHECK_RANDOM(sides[k].rbuf.ptr + (size_t)i * MSG, MSG, (uint64_t)k * 1000 + i);
    VIP_VI_HANDLE vi;
    VIP_BOOLEAN rq;
    CHECK_RET(VipCQDone(sides[1 - k].cq, &vi, &rq), VIP_NOT_DONE);
    CHECK(h_send_done(sides[k].cli) == h_desc(&sides[k].sd, i));
}

int main(void)
{
    h_init("two_providers", 60);
    for (int k = 0; k < NNIC; k++)
        open_side(k);
    no_crossing();
    connect_both();
    both_at_once();
    one_sleep(FAB, NMSG / 2);
    one_sleep(SHM, NMSG / 2);
    one_sleep(SHM, NMSG / 2 + 1);
    one_sleep(FAB, NMSG / 2 + 1);
    for (int k = 0; k < NNIC; k++) {
        h_vi_teardown(sides[k].cli);
        h_vi_teardown(sides[k].srv);
        CHECK_OK(VipDestroyCQ(sides[k].cq));
        h_descs_free(&sides[k].sd);
        h_descs_free(&sides[k].rd);
        h_mem_free(&sides[k].sbuf);
        h_mem_free(&sides[k].rbuf);
        CHECK_OK(VipDestroyPtag(sides[k].nic, sides[k].tag));
        CHECK_OK(VipCloseNic(sides[k].nic));
    }
    h_pass();
}
