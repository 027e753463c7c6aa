/*
 * desc_errors: descriptor format and protection errors (docs/VIPL.md
 * "Posting and completion"). Each bad descriptor is posted on the send queue
 * and on the receive queue; the post succeeds and the descriptor completes
 * DONE plus the stated error bit, no byte moves (canaries on both sides), an
 * unreliable VI stays usable, a reliable VI moves to ERROR and its error
 * handler gets VIP_ERROR_POST_DESC (on the posting thread for send errors,
 * which are found while posting).
 *
 * When a bad receive completes is not stated (at post, or when a message
 * meets it): the test accepts both, sending the peer's message only if the
 * descriptor is still pending after 300 ms.
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

#define CANARY 0xCD
#define PAGE 4096
#define BIG (8 * PAGE)

static const struct dcase {
    const char *name;
    int on_send; /* also posted on the send queue */
    VIP_UINT32 bit;
} cases[] = {
    {"SegCount 17", 1, VIP_STATUS_FORMAT_ERROR},
    {"reserved control bit 0x0010", 1, VIP_STATUS_FORMAT_ERROR},
    {"reserved control bit 0x8000", 1, VIP_STATUS_FORMAT_ERROR},
    {"RDMA read", 1, VIP_STATUS_FORMAT_ERROR},
    {"RDMA write on a receive queue", 0, VIP_STATUS_FORMAT_ERROR},
    {"unknown data segment handle", 1, VIP_STATUS_PROTECTION_ERROR},
    {"stale data segment handle", 1, VIP_STATUS_PROTECTION_ERROR},
    {"segment running past the end of its region", 1, VIP_STATUS_PROTECTION_ERROR},
    {"segment inside another region than its handle's", 1, VIP_STATUS_PROTECTION_ERROR},
    {"region registered with another ptag", 1, VIP_STATUS_PROTECTION_ERROR},
    {"descriptor memory handle not covering the descriptor", 1, VIP_STATUS_PROTECTION_ERROR},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static char srv_u[80], cli_u[80], srv_r[80], cli_r[80];

/* Memory of the side that posts bad descriptors. */
struct ctx {
    VIP_NIC_HANDLE nic;
    VIP_PROTECTION_HANDLE t, t2;
    unsigned char *big;     /* BIG bytes; regions below live inside it */
    h_mem A, B, P;          /* A: big+1 page, 2 pages; B: big+4 pages; P: big+6, ptag t2 */
    VIP_MEM_HANDLE stale;   /* was registered for big[0, PAGE) */
    h_descs d;
};

static void ctx_init(struct ctx *c, VIP_NIC_HANDLE nic)
{
    c->nic = nic;
    c->t = h_ptag(nic);
    c->t2 = h_ptag(nic);
    c->big = aligned_alloc(64, BIG);
    CHECK(c->big != NULL);
    memset(c->big, CANARY, BIG);
    h_mem s = h_mem_reg(nic, c->t, c->big, PAGE, 0);
    c->stale = s.mh;
    h_mem_free(&s);
    c->A = h_mem_reg(nic, c->t, c->big + PAGE, 2 * PAGE, 0);
    c->B = h_mem_reg(nic, c->t, c->big + 4 * PAGE, PAGE, 0);
    c->P = h_mem_reg(nic, c->t2, c->big + 6 * PAGE, PAGE, 0);
    c->d = h_descs_alloc(nic, c->t, 8);
}

static void ctx_free(struct ctx *c)
{
    h_mem_free(&c->A);
    h_mem_free(&c->B);
    h_mem_free(&c->P);
    h_descs_free(&c->d);
    free(c->big);
    CHECK_OK(VipDestroyPtag(c->nic, c->t));
    CHECK_OK(VipDestroyPtag(c->nic, c->t2));
}

/* Builds bad descriptor k in slot 0; returns the memory handle to post it with. */
static VIP_MEM_HANDLE build(struct ctx *c, int k, VIP_DESCRIPTOR **out)
{
    VIP_DESCRIPTOR *x = h_desc(&c->d, 0);
    VIP_MEM_HANDLE dh = c->d.m.mh;
    *out = x;
    switch (k) {
    case 0:
        h_desc_prep(x, 0, 0);
        for (int j = 0; j < 17; j++)
            h_desc_add(x, c->A.ptr + 64 * j, c->A.mh, 60);
        break;
    case 1:
    case 2:
        h_desc_prep(x, k == 1 ? 0x0010 : 0x8000, 0);
        h_desc_add(x, c->A.ptr, c->A.mh, 1000);
        break;
    case 3:
    case 4:
        h_desc_prep(x, k == 3 ? VIP_CONTROL_OP_RDMAREAD : VIP_CONTROL_OP_RDMAWRITE, 0);
        h_desc_remote(x, c->B.ptr, c->B.mh);
        h_desc_add(x, c->A.ptr, c->A.mh, 1000);
        break;
    case 5:
        h_desc_prep(x, 0, 0);
        h_desc_add(x, c->A.ptr, 0x7FFF1234u, 1000);
        break;
    case 6:
        h_desc_prep(x, 0, 0);
        h_desc_add(x, c->big, c->stale, 1000);
        break;
    case 7:
        h_desc_prep(x, 0, 0);
        h_desc_add(x, c->A.ptr + c->A.len - 100, c->A.mh, 1000);
        break;
    case 8:
        h_desc_prep(x, 0, 0);
        h_desc_add(x, c->B.ptr, c->A.mh, 1000);
        break;
    case 9:
        h_desc_prep(x, 0, 0);
        h_desc_add(x, c->P.ptr, c->P.mh, 1000);
        break;
    case 10:
        h_desc_prep(x, 0, 0);
        h_desc_add(x, c->A.ptr, c->A.mh, 1000);
        dh = c->A.mh;
        break;
    default:
        FAILF("no case %d", k);
    }
    return dh;
}

static void check_bad(const VIP_DESCRIPTOR *x, int k, const char *queue)
{
    VIP_UINT32 s = x->CS.Status;
    VIP_UINT32 want = VIP_STATUS_DONE | cases[k].bit;
    char b1[160], b2[160];
    CHECK_MSG((s & ~(VIP_UINT32)VIP_STATUS_OP_MASK) == want,
              "%s on the %s queue: status 0x%x [%s], expected [%s]", cases[k].name, queue, s,
              h_status_str(s, b1, sizeof b1), h_status_str(want, b2, sizeof b2));
}

/* Waits for the bad receive; asks the peer for a message if it is still pending. */
static VIP_DESCRIPTOR *complete_bad_recv(VIP_VI_HANDLE vi, int fd)
{
    VIP_DESCRIPTOR *x = NULL;
    if (VipRecvWait(vi, 300, &x) == VIP_SUCCESS) {
        h_signal(fd, 'N');
        return x;
    }
    h_signal(fd, 'M');
    h_expect(fd, 'D');
    return h_recv_wait(vi, 2000);
}

/* Peer side of complete_bad_recv: 'M' sends 500 bytes of pattern 300 + k,
 * 'N' sends nothing; returns 0 on 'G' (end of the receive-side cases). */
static int maybe_send(int fd, VIP_VI_HANDLE vi, h_descs *d, h_mem *src, int k)
{
    char what = 0;
    h_xrecv(fd, &what, 1);
    if (what == 'G')
        return 0;
    if (what == 'M') {
        h_fill_random(src->ptr, 500, 300 + k);
        h_post_send1(vi, d, 1, src->ptr, src->mh, 500, 0, 0);
        VIP_DESCRIPTOR *x = h_send_done(vi);
        char b[160];
        h_log("case %d: message towards the bad receive completed %s", k,
              h_status_str(x->CS.Status, b, sizeof b));
        h_signal(fd, 'D');
    } else {
        CHECK(what == 'N');
    }
    return 1;
}

/* ---- peer U: unreliable, one connection for all cases -------------------------- */

static void peer_u(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_UNRELIABLE);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 64 * 1024);
    VIP_PVOID abase;
    VIP_ULONG alen;
    CHECK_OK(VipxViArena(vi, &abase, &alen));
    h_mem ar = h_mem_reg(nic, t, abase, alen, 0);
    h_mem src = h_mem_alloc(nic, t, 4096, 0);
    h_descs d = h_descs_alloc(nic, t, 4);
    memset(ar.ptr, CANARY, alen);

    h_post_recv1(vi, &d, 0, ar.ptr, ar.mh, PAGE);
    h_accept(nic, vi, srv_u, NULL);
    h_signal(fd, 'R');

    /* Send-side cases, then one good 16-byte message: the only thing to arrive. */
    h_expect(fd, 'S');
    VIP_DESCRIPTOR *x = h_recv_wait(vi, 5000);
    CHECK(x == h_desc(&d, 0));
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
    CHECK_EQ(x->CS.Length, 16);
    CHECK_RANDOM(ar.ptr, 16, 99);
    CHECK_BYTES(ar.ptr + 16, alen - 16, CANARY);
    CHECK_RET(VipRecvDone(vi, &x), VIP_NOT_DONE);
    VIPX_VI_STATS st;
    CHECK_OK(VipxQueryViStats(vi, &st));
    CHECK_EQ(st.RecvsCompleted, 1);
    CHECK_EQ(st.BytesReceived, 16);
    h_signal(fd, 'V');

    /* Receive-side cases: the parent may ask for a message per step. */
    for (int k = 0; maybe_send(fd, vi, &d, &src, k); k++) {
    }

    /* Still usable: the parent posted a good receive. */
    h_fill_random(src.ptr, 700, 777);
    h_post_send1(vi, &d, 1, src.ptr, src.mh, 700, 0, 0);
    CHECK_STATUS(h_send_done(vi), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);

    h_expect(fd, 'Q');
    h_mem_free(&ar);
    h_vi_teardown(vi);
    h_mem_free(&src);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
}

/* ---- peer R: reliable, one connection per case ----------------------------------- */

static void peer_r(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    h_mem src = h_mem_alloc(nic, t, 4096, 0);
    h_descs d = h_descs_alloc(nic, t, 4);
    for (int round = 0;; round++) {
        char kind = 0;
        h_xrecv(fd, &kind, 1);
        if (kind == 'X')
            break;
        int k = 0;
        h_xrecv(fd, &k, sizeof k);
        VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
        VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 64 * 1024);
        VIP_PVOID abase;
        VIP_ULONG alen;
        CHECK_OK(VipxViArena(vi, &abase, &alen));
        h_mem ar = h_mem_reg(nic, t, abase, alen, 0);
        memset(ar.ptr, CANARY, alen);
        if (kind == 's')
            h_post_recv1(vi, &d, 0, ar.ptr, ar.mh, PAGE);
        char disc[100];
        snprintf(disc, sizeof disc, "%s-%d", srv_r, round);
        h_accept(nic, vi, disc, NULL);
        h_signal(fd, 'R');
        if (kind == 's') {
            h_expect(fd, 'S');
            VIP_DESCRIPTOR *x;
            if (VipRecvDone(vi, &x) == VIP_SUCCESS)
                CHECK_MSG(x->CS.Status & VIP_STATUS_DESC_FLUSHED_ERROR,
                          "case %d: a bad send completed the peer's receive (status 0x%x)", k,
                          x->CS.Status);
            CHECK_BYTES(ar.ptr, alen, CANARY);
        } else {
            maybe_send(fd, vi, &d, &src, k);
        }
        h_signal(fd, 'V');
        h_expect(fd, 'E');
        h_mem_free(&ar);
        h_vi_teardown(vi);
    }
    h_mem_free(&src);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
}

/* ---- parent ----------------------------------------------------------------------- */

static void run_unreliable(h_peer *p, VIP_NIC_HANDLE nic, h_errlog *log)
{
    h_log("unreliable VI");
    struct ctx c;
    ctx_init(&c, nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(c.t, VIP_SERVICE_UNRELIABLE);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    h_connect(vi, cli_u, srv_u, NULL);
    h_expect(p->fd, 'R');
    int errs = h_errlog_count(log);

    h_fill_random(c.big, BIG, 5);
    for (int k = 0; k < NCASES; k++) {
        if (!cases[k].on_send)
            continue;
        VIP_DESCRIPTOR *x;
        VIP_MEM_HANDLE dh = build(&c, k, &x);
        CHECK_OK(VipPostSend(vi, x, dh));
        VIP_DESCRIPTOR *y = h_send_done(vi);
        CHECK(y == x);
        check_bad(x, k, "send");
        CHECK_EQ(h_vi_state(vi), VIP_STATE_CONNECTED);
        CHECK_EQ(h_errlog_count(log), errs);
    }
    CHECK_RANDOM(c.big, BIG, 5); /* the sender's memory is not touched either */
    h_fill_random(c.A.ptr, 16, 99);
    h_post_send1(vi, &c.d, 1, c.A.ptr, c.A.mh, 16, 0, 0);
    CHECK_STATUS(h_send_done(vi), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
    h_signal(p->fd, 'S');
    h_expect(p->fd, 'V');

    /* In order: a bad receive behind a pending good one is not reported first. */
    int step = 0;
    memset(c.big, CANARY, BIG);
    h_post_recv1(vi, &c.d, 3, c.B.ptr, c.B.mh, PAGE);
    VIP_DESCRIPTOR *bad;
    VIP_MEM_HANDLE bdh = build(&c, 0, &bad);
    CHECK_OK(VipPostRecv(vi, bad, bdh));
    VIP_DESCRIPTOR *x = NULL;
    CHECK_RET(VipRecvDone(vi, &x), VIP_NOT_DONE);
    CHECK_RET(VipRecvWait(vi, 200, &x), VIP_TIMEOUT);
    h_signal(p->fd, 'M');
    h_expect(p->fd, 'D');
    x = h_recv_wait(vi, 2000);
    CHECK_MSG(x == h_desc(&c.d, 3), "the good receive posted first did not complete first");
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
    CHECK_EQ(x->CS.Length, 500);
    CHECK_RANDOM(c.B.ptr, 500, 300 + step);
    step++;
    x = complete_bad_recv(vi, p->fd);
    step++;
    CHECK(x == bad);
    check_bad(x, 0, "receive (behind a good one)");
    CHECK_BYTES(c.A.ptr, c.A.len, CANARY);

    for (int k = 0; k < NCASES; k++, step++) {
        memset(c.big, CANARY, BIG);
        VIP_MEM_HANDLE dh = build(&c, k, &x);
        CHECK_OK(VipPostRecv(vi, x, dh));
        VIP_DESCRIPTOR *y = complete_bad_recv(vi, p->fd);
        CHECK(y == x);
        check_bad(x, k, "receive");
        CHECK_BYTES(c.big, BIG, CANARY);
        CHECK_EQ(h_vi_state(vi), VIP_STATE_CONNECTED);
        CHECK_EQ(h_errlog_count(log), errs);
    }

    memset(c.big, CANARY, BIG);
    h_post_recv1(vi, &c.d, 2, c.A.ptr, c.A.mh, PAGE);
    h_signal(p->fd, 'G');
    x = h_recv_wait(vi, 5000);
    CHECK(x == h_desc(&c.d, 2));
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
    CHECK_EQ(x->CS.Length, 700);
    CHECK_RANDOM(c.A.ptr, 700, 777);
    CHECK_BYTES(c.A.ptr + 700, PAGE - 700, CANARY);

    h_signal(p->fd, 'Q');
    h_peer_finish(p);
    h_vi_teardown(vi);
    ctx_free(&c);
}

static void run_reliable(h_peer *p, VIP_NIC_HANDLE nic, h_errlog *log)
{
    h_log("reliable VIs");
    struct ctx c;
    ctx_init(&c, nic);
    int round = 0;
    for (int side = 0; side < 2; side++) {
        for (int k = 0; k < NCASES; k++) {
            if (side == 0 && !cases[k].on_send)
                continue;
            char kind = side == 0 ? 's' : 'r';
            h_xsend(p->fd, &kind, 1);
            h_xsend(p->fd, &k, sizeof k);
            VIP_VI_ATTRIBUTES va = h_vi_attrs(c.t, VIP_SERVICE_RELIABLE_DELIVERY);
            VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
            char sdisc[100], cdisc[100];
            snprintf(sdisc, sizeof sdisc, "%s-%d", srv_r, round);
            snprintf(cdisc, sizeof cdisc, "%s-%d", cli_r, round);
            round++;
            h_connect(vi, cdisc, sdisc, NULL);
            h_expect(p->fd, 'R');
            int errs = h_errlog_count(log);
            VIP_DESCRIPTOR *x, *y;
            VIP_MEM_HANDLE dh;
            VIP_ERROR_CODE code = VIP_ERROR_CATASTROPHIC;
            pthread_t thr;
            if (side == 0) {
                h_fill_random(c.big, BIG, 6);
                dh = build(&c, k, &x);
                CHECK_OK(VipPostSend(vi, x, dh));
                y = h_send_done(vi);
                CHECK(y == x);
                check_bad(x, k, "send");
                int n = h_errlog_since(log, errs, vi, &code, &thr);
                CHECK_MSG(n == 1, "%s: %d error handler calls when the post returned, expected 1",
                          cases[k].name, n);
                CHECK_MSG(pthread_equal(thr, pthread_self()),
                          "%s: error handler not on the posting thread", cases[k].name);
                CHECK_RANDOM(c.big, BIG, 6);
                h_signal(p->fd, 'S');
            } else {
                memset(c.big, CANARY, BIG);
                dh = build(&c, k, &x);
                CHECK_OK(VipPostRecv(vi, x, dh));
                y = complete_bad_recv(vi, p->fd);
                CHECK(y == x);
                check_bad(x, k, "receive");
                CHECK_BYTES(c.big, BIG, CANARY);
                double t0 = h_now_ms();
                while (h_errlog_since(log, errs, vi, &code, NULL) == 0 && h_now_ms() - t0 < 2000)
                    h_sleep_ms(2);
                CHECK_MSG(h_errlog_since(log, errs, vi, &code, NULL) >= 1,
                          "%s: error handler not called", cases[k].name);
            }
            CHECK_MSG(code == VIP_ERROR_POST_DESC, "%s: error handler got %s", cases[k].name,
                      h_errcode_str(code));
            VIP_VI_STATE s = h_wait_state(vi, VIP_STATE_ERROR, 2000);
            CHECK_MSG(s == VIP_STATE_ERROR, "%s: VI is %s, expected ERROR", cases[k].name,
                      h_state_str(s));
            h_expect(p->fd, 'V');
            h_signal(p->fd, 'E');
            h_vi_teardown(vi);
        }
    }
    h_signal(p->fd, 'X');
    h_peer_finish(p);
    ctx_free(&c);
}

int main(void)
{
    h_init("desc_errors", 60);
    h_disc(srv_u, sizeof srv_u);
    h_disc(cli_u, sizeof cli_u);
    h_disc(srv_r, sizeof srv_r);
    h_disc(cli_r, sizeof cli_r);
    h_peer pu = h_fork(peer_u, NULL);
    h_peer pr = h_fork(peer_r, NULL);
    VIP_NIC_HANDLE nic = h_open_nic();
    static h_errlog log;
    h_errlog_install(nic, &log);
    run_unreliable(&pu, nic, &log);
    run_reliable(&pr, nic, &log);
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
