/*
 * wait: blocking completion waits (docs/VIPL.md "Waiting"): VipRecvWait /
 * VipSendWait / VipCQWait time out with VIP_TIMEOUT after about their
 * timeout, wake when the peer's message arrives, and sleep in the kernel
 * while blocked: a waiter blocked for ~1 s must use well under 100 ms of CPU
 * (its own thread, and the whole process including provider threads).
 */
#include "harness.h"

static char srv[80], cli[80];

static void peer(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    h_mem buf = h_mem_alloc(nic, t, 8192, 0);
    h_descs d = h_descs_alloc(nic, t, 2);
    h_post_recv1(vi, &d, 1, buf.ptr + 4096, buf.mh, 4096); /* for the parent's one send */
    h_accept(nic, vi, srv, NULL);
    for (;;) {
        char c = 0;
        h_xrecv(fd, &c, 1);
        if (c == 'Q')
            break;
        /* 'S': send after 300 ms; 'L': send after 1000 ms. */
        h_sleep_ms(c == 'L' ? 1000 : 300);
        h_fill_random(buf.ptr, 100, (uint64_t)c);
        h_post_send1(vi, &d, 0, buf.ptr, buf.mh, 100, 0, 0);
        CHECK_STATUS(h_send_done(vi), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
    }
    h_vi_teardown(vi);
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
}

struct cpu {
    double wall, thread, process;
};

static struct cpu cpu_now(void)
{
    struct cpu c = {h_now_ms(), h_thread_cpu_ms(), h_process_cpu_ms()};
    return c;
}

/* Asserts the blocked period used < 100 ms of CPU in this thread and process. */
static void check_cpu(const char *what, struct cpu a, struct cpu b)
{
    double wall = b.wall - a.wall, th = b.thread - a.thread, pr = b.process - a.process;
    h_log("%s: blocked %.0f ms, thread CPU %.1f ms, process CPU %.1f ms", what, wall, th, pr);
    CHECK_MSG(th < 100, "%s: the waiting thread used %.1f ms CPU in %.0f ms (busy wait?)", what,
              th, wall);
    CHECK_MSG(pr < 100, "%s: the process used %.1f ms CPU in %.0f ms (busy wait?)", what, pr,
              wall);
}

static void recv_msg(h_descs *d, h_mem *buf, char c)
{
    VIP_DESCRIPTOR *x = h_desc(d, 0);
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
    CHECK_EQ(x->CS.Length, 100);
    CHECK_RANDOM(buf->ptr, 100, (uint64_t)c);
}

int main(void)
{
    h_init("wait", 30);
    h_disc(srv, sizeof srv);
    h_disc(cli, sizeof cli);
    h_peer p = h_fork(peer, NULL);
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    h_mem buf = h_mem_alloc(nic, t, 4096, 0);
    h_descs d = h_descs_alloc(nic, t, 2);
    h_connect(vi, cli, srv, NULL);
    VIP_DESCRIPTOR *x = NULL;

    /* Timeouts on empty queues. */
    double t0 = h_now_ms();
    CHECK_RET(VipRecvWait(vi, 300, &x), VIP_TIMEOUT);
    double el = h_now_ms() - t0;
    CHECK_MSG(el >= 250 && el < 3000, "VipRecvWait(300 ms) returned after %.0f ms", el);
    t0 = h_now_ms();
    CHECK_RET(VipSendWait(vi, 300, &x), VIP_TIMEOUT);
    el = h_now_ms() - t0;
    CHECK_MSG(el >= 250 && el < 3000, "VipSendWait(300 ms) returned after %.0f ms", el);

    /* A posted receive that nobody fills also times out. */
    h_post_recv1(vi, &d, 0, buf.ptr, buf.mh, 4096);
    struct cpu a = cpu_now();
    CHECK_RET(VipRecvWait(vi, 1000, &x), VIP_TIMEOUT);
    struct cpu b = cpu_now();
    CHECK_MSG(b.wall - a.wall >= 950, "VipRecvWait(1000 ms) returned after %.0f ms",
              b.wall - a.wall);
    check_cpu("VipRecvWait timing out after 1 s", a, b);

    /* Woken by the peer's message (sent 300 ms after the signal). */
    h_signal(p.fd, 'S');
    t0 = h_now_ms();
    x = h_recv_wait(vi, 10000);
    el = h_now_ms() - t0;
    h_log("VipRecvWait woke after %.0f ms (message sent after 300 ms)", el);
    CHECK(x == h_desc(&d, 0));
    CHECK_MSG(el >= 200, "VipRecvWait returned after %.0f ms, before the message was sent", el);
    recv_msg(&d, &buf, 'S');

    /* VIP_INFINITE, woken after ~1 s: no CPU burnt meanwhile. */
    h_post_recv1(vi, &d, 0, buf.ptr, buf.mh, 4096);
    h_signal(p.fd, 'L');
    a = cpu_now();
    x = h_recv_wait(vi, VIP_INFINITE);
    b = cpu_now();
    CHECK(x == h_desc(&d, 0));
    recv_msg(&d, &buf, 'L');
    CHECK_MSG(b.wall - a.wall >= 800, "VipRecvWait(INFINITE) returned after %.0f ms",
              b.wall - a.wall);
    check_cpu("VipRecvWait(VIP_INFINITE) woken after 1 s", a, b);

    /* A send is complete when posted: VipSendWait returns it at once. */
    h_post_send1(vi, &d, 1, buf.ptr, buf.mh, 0, 0, 0);
    x = NULL;
    CHECK_OK(VipSendWait(vi, 0, &x));
    CHECK(x == h_desc(&d, 1));
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_SEND);

    /* VipCQWait. */
    VIP_CQ_HANDLE cq = NULL;
    CHECK_OK(VipCreateCQ(nic, 16, &cq));
    VIP_VI_HANDLE v;
    VIP_BOOLEAN rq;
    a = cpu_now();
    CHECK_RET(VipCQWait(cq, 1000, &v, &rq), VIP_TIMEOUT);
    b = cpu_now();
    CHECK_MSG(b.wall - a.wall >= 950, "VipCQWait(1000 ms) returned after %.0f ms",
              b.wall - a.wall);
    check_cpu("VipCQWait timing out after 1 s", a, b);
    CHECK_OK(VipDestroyCQ(cq));

    h_signal(p.fd, 'Q');
    h_peer_finish(&p);
    h_vi_teardown(vi);
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
