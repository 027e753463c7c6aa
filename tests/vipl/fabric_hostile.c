/*
 * fabric_hostile: a peer that speaks libfabric but not our protocol, driven
 * directly (no vipl on its side). Whatever it sends fails its connection
 * only; the process and the listener live on (docs/VIPL.md, fabric).
 *   1. connect private data that is not ours (bad magic, too short, a
 *      listener fingerprint of another discriminator): refused, and the
 *      same listener then accepts a well-formed request;
 *   2. remote CQ data of an unknown kind, a send-kind with a length field,
 *      a write notice that carries bytes, a write notice longer than any
 *      transfer: the receive completes with TRANSPORT_ERROR, the VI turns
 *      ERROR with VIP_ERROR_CONN_LOST, PeerProtocolErrors counts 1;
 *   3. an acceptor whose accept data is not ours: VipConnectRequest fails
 *      and the VI stays IDLE.
 * Runs over fabric only (label fabric).
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric_cm.h"

struct raw {
    struct fi_info *info;
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_eq *eq;
    struct fid_cq *cq;
    struct fid_ep *ep;
    struct fid_pep *pep;
};

static struct fi_info *raw_info(const char *disc, bool source)
{
    struct fi_info *h = fi_allocinfo(), *info = NULL;
    CHECK(h != NULL);
    h->ep_attr->type = FI_EP_MSG;
    h->caps = FI_MSG;
    h->fabric_attr->prov_name = strdup("tcp");
    char port[8];
    snprintf(port, sizeof port, "%u", fab_disc_port((const uint8_t *)disc, strlen(disc)));
    CHECK_EQ(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", port, source ? FI_SOURCE : 0, h, &info), 0);
    fi_freeinfo(h);
    return info;
}

static void raw_open(struct raw *r, const char *disc, bool source)
{
    memset(r, 0, sizeof *r);
    r->info = raw_info(disc, source);
    struct fi_eq_attr ea = {.size = 16, .wait_obj = FI_WAIT_UNSPEC};
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_DATA, .size = 64};
    CHECK_EQ(fi_fabric(r->info->fabric_attr, &r->fab, NULL), 0);
    CHECK_EQ(fi_eq_open(r->fab, &ea, &r->eq, NULL), 0);
    if (source)
        return;
    CHECK_EQ(fi_domain(r->fab, r->info, &r->dom, NULL), 0);
    CHECK_EQ(fi_cq_open(r->dom, &ca, &r->cq, NULL), 0);
}

static void raw_ep(struct raw *r, struct fi_info *info)
{
    CHECK_EQ(fi_endpoint(r->dom, info, &r->ep, NULL), 0);
    CHECK_EQ(fi_ep_bind(r->ep, &r->eq->fid, 0), 0);
    CHECK_EQ(fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV), 0);
    CHECK_EQ(fi_enable(r->ep), 0);
}

static void raw_close(struct raw *r)
{
    if (r->ep)
        fi_close(&r->ep->fid);
    if (r->pep)
        fi_close(&r->pep->fid);
    if (r->cq)
        fi_close(&r->cq->fid);
    if (r->dom)
        fi_close(&r->dom->fid);
    if (r->eq)
        fi_close(&r->eq->fid);
    if (r->fab)
        fi_close(&r->fab->fid);
    fi_freeinfo(r->info);
}

/* FI_CONNECTED (1), refused (0), anything else fails. */
static int raw_connect(struct raw *r, const void *pd, size_t len)
{
    raw_ep(r, r->info);
    CHECK_EQ(fi_connect(r->ep, r->info->dest_addr, pd, len), 0);
    union {
        struct fi_eq_cm_entry e;
        char b[512];
    } u;
    uint32_t ev;
    ssize_t n = fi_eq_sread(r->eq, &ev, &u, sizeof u, 5000, 0);
    if (n == -FI_EAVAIL) {
        struct fi_eq_err_entry err = {0};
        fi_eq_readerr(r->eq, &err, 0);
        CHECK_EQ(err.err, FI_ECONNREFUSED);
        fi_close(&r->ep->fid);
        r->ep = NULL;
        return 0;
    }
    CHECK_MSG(n > 0 && ev == FI_CONNECTED, "connect: %zd, event %u", n, ev);
    return 1;
}

static void raw_senddata(struct raw *r, size_t len, uint64_t data)
{
    static char buf[64];
    CHECK_EQ(fi_senddata(r->ep, buf, len, NULL, data, 0, NULL), 0);
    struct fi_cq_data_entry e;
    double t0 = h_now_ms();
    ssize_t n;
    while ((n = fi_cq_read(r->cq, &e, 1)) == -FI_EAGAIN && h_now_ms() - t0 < 5000)
        ;
    CHECK_EQ(n, 1);
}

static char srv_cm[80], srv_data[8][80], srv_acc[80], cli[80];
enum { NDATA = 4 };

static VIP_VI_ATTRIBUTES good_attrs(void)
{
    VIP_VI_ATTRIBUTES a = {.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY,
                           .MaxTransferSize = 65536};
    return a;
}

/* The hostile side: a raw libfabric process. */
static void peer(int fd, void *arg)
{
    (void)arg;
    struct raw r;
    struct fab_cm m;
    VIP_VI_ATTRIBUTES a = good_attrs();
    /* 1: three bad requests, then a good one. */
    h_expect(fd, 'L');
    raw_open(&r, srv_cm, false);
    uint8_t junk[48];
    memset(junk, 0x5a, sizeof junk);
    CHECK_EQ(raw_connect(&r, junk, sizeof junk), 0);
    fab_cm_build(&m, FAB_CM_REQUEST, &a, fab_disc_fp((const uint8_t *)srv_cm, strlen(srv_cm)),
                 (const uint8_t *)cli, strlen(cli));
    CHECK_EQ(raw_connect(&r, &m, 10), 0); /* cut short */
    fab_cm_build(&m, FAB_CM_REQUEST, &a, fab_disc_fp((const uint8_t *)"other", 5),
                 (const uint8_t *)cli, strlen(cli));
    CHECK_EQ(raw_connect(&r, &m, sizeof m), 0); /* meant for another discriminator */
    fab_cm_build(&m, FAB_CM_REQUEST, &a, fab_disc_fp((const uint8_t *)srv_cm, strlen(srv_cm)),
                 (const uint8_t *)cli, strlen(cli));
    CHECK_EQ(raw_connect(&r, &m, sizeof m), 1);
    h_signal(fd, 'C');
    h_expect(fd, 'N');
    raw_close(&r);

    /* 2: bad remote CQ data on good connections. */
    static const uint64_t bad[NDATA][2] = {
        {0x7full << 56, 0},                       /* unknown kind */
        {FAB_DATA(FAB_DATA_SEND, 5, 1), 0},       /* a send with a length field */
        {FAB_DATA(FAB_DATA_RDMA_IMM, 8, 1), 8},   /* a notice with bytes */
        {FAB_DATA(FAB_DATA_RDMA_IMM, 0xffffff, 1), 0}, /* longer than any transfer */
    };
    for (int i = 0; i < NDATA; i++) {
        h_expect(fd, 'L');
        raw_open(&r, srv_data[i], false);
        fab_cm_build(&m, FAB_CM_REQUEST, &a,
                     fab_disc_fp((const uint8_t *)srv_data[i], strlen(srv_data[i])),
                     (const uint8_t *)cli, strlen(cli));
        CHECK_EQ(raw_connect(&r, &m, sizeof m), 1);
        raw_senddata(&r, bad[i][1], bad[i][0]);
        h_expect(fd, 'N');
        raw_close(&r);
    }

    /* 3: a listener that accepts with data that is not ours. */
    raw_open(&r, srv_acc, true);
    CHECK_EQ(fi_passive_ep(r.fab, r.info, &r.pep, NULL), 0);
    CHECK_EQ(fi_pep_bind(r.pep, &r.eq->fid, 0), 0);
    CHECK_EQ(fi_listen(r.pep), 0);
    h_signal(fd, 'A');
    union {
        struct fi_eq_cm_entry e;
        char b[512];
    } u;
    uint32_t ev;
    CHECK(fi_eq_sread(r.eq, &ev, &u, sizeof u, 5000, 0) > 0 && ev == FI_CONNREQ);
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_DATA, .size = 64};
    CHECK_EQ(fi_domain(r.fab, u.e.info, &r.dom, NULL), 0);
    CHECK_EQ(fi_cq_open(r.dom, &ca, &r.cq, NULL), 0);
    raw_ep(&r, u.e.info);
    CHECK_EQ(fi_accept(r.ep, junk, sizeof junk), 0);
    fi_freeinfo(u.e.info);
    fi_eq_sread(r.eq, &ev, &u, sizeof u, 5000, 0); /* drives the handshake (manual progress) */
    h_expect(fd, 'N');
    raw_close(&r);
}

int main(void)
{
    h_init("fabric_hostile", 60);
    CHECK_MSG(h_fabric(), "runs over the fabric provider only (SOVIA_PROVIDER=fabric:tcp)");
    h_disc(srv_cm, sizeof srv_cm);
    h_disc(srv_acc, sizeof srv_acc);
    h_disc(cli, sizeof cli);
    for (int i = 0; i < NDATA; i++)
        h_disc(srv_data[i], sizeof srv_data[i]);
    h_peer p = h_fork(peer, NULL);
    VIP_NIC_HANDLE nic = h_open_nic();
    h_errlog log;
    h_errlog_install(nic, &log);
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = good_attrs();
    va.Ptag = t;
    h_mem buf = h_mem_alloc(nic, t, 4096, 0);
    h_descs d = h_descs_alloc(nic, t, 2);

    /* 1 */
    VIP_NET_ADDRESS *local = h_addr(srv_cm), *remote = h_addr_room();
    CHECK_OK(VipxListen(nic, local));
    h_signal(p.fd, 'L');
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    VIP_CONN_HANDLE conn;
    VIP_VI_ATTRIBUTES ra;
    CHECK_OK(VipConnectWait(nic, local, 10000, remote, &ra, &conn)); /* the good one */
    CHECK_EQ(ra.MaxTransferSize, 65536);
    CHECK_EQ(remote->DiscriminatorLen, strlen(cli));
    CHECK_OK(VipConnectAccept(conn, vi));
    h_expect(p.fd, 'C');
    h_signal(p.fd, 'N');
    h_vi_teardown(vi);
    CHECK_OK(VipxUnlisten(nic, local));
    free(local);
    h_log("bad connect data refused, the listener accepted the good request after");

    /* 2 */
    for (int i = 0; i < NDATA; i++) {
        vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
        h_post_recv1(vi, &d, 0, buf.ptr, buf.mh, 4096);
        int errs = h_errlog_count(&log);
        local = h_addr(srv_data[i]);
        CHECK_OK(VipxListen(nic, local));
        h_signal(p.fd, 'L');
        CHECK_OK(VipConnectWait(nic, local, 10000, remote, &ra, &conn));
        CHECK_OK(VipConnectAccept(conn, vi));
        VIP_DESCRIPTOR *x = h_recv_wait(vi, 5000);
        CHECK_ERR_STATUS(x, VIP_STATUS_TRANSPORT_ERROR, VIP_STATUS_OP_RECEIVE);
        CHECK_EQ(h_wait_state(vi, VIP_STATE_ERROR, 1250), VIP_STATE_ERROR);
        VIP_ERROR_CODE code;
        CHECK_EQ(h_errlog_since(&log, errs, vi, &code, NULL), 1);
        CHECK_EQ(code, VIP_ERROR_CONN_LOST);
        VIPX_VI_STATS st;
        CHECK_OK(VipxQueryViStats(vi, &st));
        CHECK_EQ(st.PeerProtocolErrors, 1);
        h_signal(p.fd, 'N');
        h_vi_teardown(vi);
        CHECK_OK(VipxUnlisten(nic, local));
        free(local);
        h_log("bad remote CQ data %d: that VI failed, CONN_LOST", i);
    }

    /* 3 */
    h_expect(p.fd, 'A');
    vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    double t0 = h_now_ms();
    VIP_RETURN r = h_connect_ret(vi, cli, srv_acc, 5000, &ra);
    CHECK_MSG(r != VIP_SUCCESS && r != VIP_TIMEOUT, "an accept with foreign data: %s",
              VipxReturnString(r));
    CHECK_MSG(h_now_ms() - t0 < 2000, "refusing a foreign accept took %.0f ms", h_now_ms() - t0);
    CHECK_EQ(h_vi_state(vi), VIP_STATE_IDLE);
    h_log("foreign accept data: VipConnectRequest %s, VI IDLE", VipxReturnString(r));
    h_signal(p.fd, 'N');
    h_peer_finish(&p);
    h_vi_teardown(vi);
    free(remote);
    h_mem_free(&buf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
