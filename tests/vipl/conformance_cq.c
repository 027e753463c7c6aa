/*
 * conformance_cq: several VIs on one completion queue.
 *
 * VIA 1.0: a CQ gathers the completions of the work queues attached to it;
 * VipCQDone/VipCQWait report, for each completed descriptor, its VI and
 * whether it was the receive queue, exactly once, in completion order
 * within each work queue; the consumer then takes the descriptor with
 * VipRecvDone/VipSendDone, which returns that queue's descriptors in
 * posting order. VipCQDone says VIP_NOT_DONE when nothing is pending.
 *
 * The receiver has NVI VIs whose receive queues share one CQ, each with a
 * ring of receives in malloc'd memory posted before connecting; the sender
 * has NVI VIs whose send queues share one CQ, and sends on them in a
 * scrambled order. Both sides account for every completion.
 */
#include "conformance.h"

#define NVI 4
#define NRECV 64
#define SIZE 8192

static char srv[NVI][80], cli[NVI][80];

/* The VI message m goes on. */
static unsigned vi_of(unsigned m)
{
    return (m * 7 + m / NVI) % NVI;
}

static void receiver(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE tag = h_ptag(nic);
    VIP_CQ_HANDLE cq = NULL;
    CHECK_OK(VipCreateCQ(nic, NVI * NRECV, &cq));
    VIP_VI_HANDLE vi[NVI];
    cf_descs d[NVI];
    cf_mem buf[NVI];
    for (unsigned v = 0; v < NVI; v++) {
        vi[v] = cf_vi(nic, tag, VIP_SERVICE_RELIABLE_DELIVERY, SIZE, VIP_FALSE, NULL, cq);
        d[v] = cf_descs_get(nic, tag, NRECV);
        buf[v] = cf_mem_get(nic, tag, (size_t)NRECV * SIZE, CF_MALLOC, 0);
        for (unsigned i = 0; i < NRECV; i++) {
            cf_fill(cf_desc(&d[v], i), VIP_CONTROL_OP_SENDRECV, buf[v].ptr + i * SIZE,
                    buf[v].mh, SIZE, 0);
            CHECK_OK(VipPostRecv(vi[v], cf_desc(&d[v], i), d[v].m.mh));
        }
    }
    VIP_VI_HANDLE got_vi;
    VIP_BOOLEAN recvq;
    CHECK_RET(VipCQDone(cq, &got_vi, &recvq), VIP_NOT_DONE);
    for (unsigned v = 0; v < NVI; v++)
        h_accept(nic, vi[v], srv[v], NULL);

    unsigned next[NVI] = {0}, total = 0;
    h_expect(fd, 's'); /* every message sent: each completion is pending now */
    while (total < NVI * NRECV) {
        VIP_RETURN r = VipCQWait(cq, 5000, &got_vi, &recvq);
        CHECK_MSG(r == VIP_SUCCESS, "completion %u: VipCQWait returned %s", total,
                  VipxReturnString(r));
        CHECK(recvq == VIP_TRUE);
        unsigned v = 0;
        while (v < NVI && vi[v] != got_vi)
            v++;
        CHECK_MSG(v < NVI, "VipCQWait named a VI that is not on this CQ");
        CHECK_MSG(next[v] < NRECV, "VI %u reported more than its %u receives", v, NRECV);
        VIP_DESCRIPTOR *x = NULL;
        CHECK_OK(VipRecvDone(got_vi, &x));
        CHECK_MSG(x == cf_desc(&d[v], next[v]), "VI %u: receive %u out of order", v, next[v]);
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
        CHECK_EQ(x->CS.Length, SIZE - next[v]);
        CHECK_RANDOM(buf[v].ptr + next[v] * SIZE, SIZE - next[v], v * 1000 + next[v]);
        next[v]++;
        total++;
    }
    /* Exactly once: nothing left on the CQ or on any queue. */
    CHECK_RET(VipCQDone(cq, &got_vi, &recvq), VIP_NOT_DONE);
    for (unsigned v = 0; v < NVI; v++) {
        VIP_DESCRIPTOR *x;
        CHECK_RET(VipRecvDone(vi[v], &x), VIP_NOT_DONE);
    }
    h_signal(fd, 'k');
    h_expect(fd, 'd');
    for (unsigned v = 0; v < NVI; v++) {
        (void)VipDisconnect(vi[v]);
        CHECK_OK(VipDestroyVi(vi[v]));
        cf_mem_put(&buf[v]);
        cf_mem_put(&d[v].m);
    }
    CHECK_OK(VipDestroyCQ(cq));
    CHECK_OK(VipDestroyPtag(nic, tag));
    CHECK_OK(VipCloseNic(nic));
}

int main(void)
{
    h_init("conformance_cq", 60);
    for (unsigned v = 0; v < NVI; v++) {
        h_disc(srv[v], sizeof srv[v]);
        h_disc(cli[v], sizeof cli[v]);
    }
    h_peer p = h_fork(receiver, NULL);
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE tag = h_ptag(nic);
    VIP_CQ_HANDLE cq = NULL;
    CHECK_OK(VipCreateCQ(nic, NVI * NRECV, &cq));
    VIP_VI_HANDLE vi[NVI];
    for (unsigned v = 0; v < NVI; v++)
        vi[v] = cf_vi(nic, tag, VIP_SERVICE_RELIABLE_DELIVERY, SIZE, VIP_FALSE, cq, NULL);
    for (unsigned v = 0; v < NVI; v++)
        h_connect(vi[v], cli[v], srv[v], NULL);
    cf_descs d = cf_descs_get(nic, tag, NVI * NRECV);
    cf_mem buf = cf_mem_get(nic, tag, (size_t)NVI * NRECV * SIZE, CF_MEMALIGN, 0);
    unsigned sent[NVI] = {0};
    VIP_DESCRIPTOR *order[NVI][NRECV];
    for (unsigned m = 0; m < NVI * NRECV; m++) {
        unsigned v = vi_of(m);
        if (sent[v] == NRECV) /* the scramble is not a permutation everywhere */
            for (v = 0; sent[v] == NRECV; v++)
                ;
        unsigned char *b = buf.ptr + (size_t)m * SIZE;
        h_fill_random(b, SIZE - sent[v], v * 1000 + sent[v]);
        VIP_DESCRIPTOR *x = cf_desc(&d, m);
        cf_fill(x, VIP_CONTROL_OP_SENDRECV, b, buf.mh, SIZE - sent[v], 0);
        CHECK_OK(VipPostSend(vi[v], x, d.m.mh));
        order[v][sent[v]++] = x;
    }
    /* Every send reported once by the CQ, then taken in posting order. */
    unsigned taken[NVI] = {0};
    for (unsigned m = 0; m < NVI * NRECV; m++) {
        VIP_VI_HANDLE got;
        VIP_BOOLEAN recvq;
        CHECK_OK(VipCQWait(cq, 5000, &got, &recvq));
        CHECK(recvq == VIP_FALSE);
        unsigned v = 0;
        while (v < NVI && vi[v] != got)
            v++;
        CHECK(v < NVI && taken[v] < NRECV);
        VIP_DESCRIPTOR *x = NULL;
        CHECK_OK(VipSendDone(got, &x));
        CHECK(x == order[v][taken[v]]);
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
        taken[v]++;
    }
    VIP_VI_HANDLE got;
    VIP_BOOLEAN recvq;
    CHECK_RET(VipCQDone(cq, &got, &recvq), VIP_NOT_DONE);
    h_signal(p.fd, 's');
    h_expect(p.fd, 'k');
    for (unsigned v = 0; v < NVI; v++)
        CHECK_OK(VipDisconnect(vi[v]));
    h_signal(p.fd, 'd');
    for (unsigned v = 0; v < NVI; v++)
        CHECK_OK(VipDestroyVi(vi[v]));
    cf_mem_put(&buf);
    cf_mem_put(&d.m);
    CHECK_OK(VipDestroyCQ(cq));
    CHECK_OK(VipDestroyPtag(nic, tag));
    h_peer_finish(&p);
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
