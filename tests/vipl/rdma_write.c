/*
 * rdma_write: RDMA write and its memory protection (docs/VIPL.md "RDMA write
 * and memory protection", "Posting and completion").
 *
 * The peer (target) registers four regions and tells the parent where they
 * are: R0 (good: EnableRdmaWrite, the VI's ptag, inside the VI's arena),
 * R1 (another ptag), R2 (no EnableRdmaWrite), R3 (good, outside the arena:
 * the target's own memory, written by cross-memory attach). The
 * parent writes and then tells the peer what it must find (exact bytes, or
 * every canary intact; a consumed receive descriptor, or none).
 *
 * Connections: 0 unreliable, everything enabled (good writes, then every
 * protection error, then a good write again); 1 reliable (a protection error
 * moves both VIs to ERROR, VIP_ERROR_RDMAW_PROT locally); 2 the target VI
 * lacks EnableRdmaWrite; 3 the writing VI lacks it.
 */
#include "harness.h"

#include <string.h>

#define CANARY 0xCD
#define REG (64 * 1024)
#define NCONN 4

enum { C_DATA = 1, C_CANARY, C_RECV, C_NORECV, C_STATE, C_QUIT };

struct cmd {
    int op, region;
    uint32_t off, len, arg;
    uint64_t seed;
};

struct regions {
    uint64_t addr[4];
    VIP_MEM_HANDLE handle[4];
};

struct conn_cfg {
    VIP_RELIABILITY_LEVEL rel;
    VIP_BOOLEAN target_rdma, writer_rdma;
};

static const struct conn_cfg conns[NCONN] = {
    {VIP_SERVICE_UNRELIABLE, VIP_TRUE, VIP_TRUE},
    {VIP_SERVICE_RELIABLE_DELIVERY, VIP_TRUE, VIP_TRUE},
    {VIP_SERVICE_UNRELIABLE, VIP_FALSE, VIP_TRUE},
    {VIP_SERVICE_UNRELIABLE, VIP_TRUE, VIP_FALSE},
};

static char srv_disc[80], cli_disc[80];

/* ---- peer: the target --------------------------------------------------------- */

static void check_all_canaries(h_mem *r, h_mem *rb)
{
    for (int i = 0; i < 4; i++) {
        long bad = h_check_byte(r[i].ptr, REG, CANARY);
        CHECK_MSG(bad < 0, "region R%d modified at byte %ld", i, bad);
    }
    CHECK_BYTES(rb->ptr, rb->len, CANARY);
}

static void peer(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic), t2 = h_ptag(nic);
    h_descs d = h_descs_alloc(nic, t, 4);
    for (int c = 0; c < NCONN; c++) {
        VIP_VI_ATTRIBUTES va = h_vi_attrs(t, conns[c].rel);
        va.EnableRdmaWrite = conns[c].target_rdma;
        VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 4 * REG);
        VIP_PVOID abase;
        VIP_ULONG alen;
        CHECK_OK(VipxViArena(vi, &abase, &alen));
        CHECK(alen >= 4 * REG);
        unsigned char *a = abase;
        h_mem r[4];
        r[0] = h_mem_reg(nic, t, a, REG, 1);
        r[1] = h_mem_reg(nic, t2, a + REG, REG, 1);
        r[2] = h_mem_reg(nic, t, a + 2 * REG, REG, 0);
        r[3] = h_mem_alloc(nic, t, REG, 1);
        h_mem rb = h_mem_alloc(nic, t, 2 * 4096, 0); /* receive buffers (immediate data) */
        for (int i = 0; i < 4; i++)
            memset(r[i].ptr, CANARY, REG);
        memset(rb.ptr, CANARY, rb.len);
        h_post_recv1(vi, &d, 0, rb.ptr, rb.mh, 4096);
        h_post_recv1(vi, &d, 1, rb.ptr + 4096, rb.mh, 4096);
        unsigned next_recv = 0;

        char disc[100];
        snprintf(disc, sizeof disc, "%s-%d", srv_disc, c);
        h_accept(nic, vi, disc, NULL);
        struct regions info;
        for (int i = 0; i < 4; i++) {
            info.addr[i] = (uint64_t)(uintptr_t)r[i].ptr;
            info.handle[i] = r[i].mh;
        }
        h_xsend(fd, &info, sizeof info);

        for (;;) {
            struct cmd m;
            h_xrecv(fd, &m, sizeof m);
            if (m.op == C_QUIT)
                break;
            VIP_DESCRIPTOR *x;
            switch (m.op) {
            case C_DATA: {
                unsigned char *p = r[m.region].ptr;
                CHECK_RANDOM(p + m.off, m.len, m.seed);
                long bad = h_check_byte(p, m.off, CANARY);
                CHECK_MSG(bad < 0, "R%d: byte %ld before the written range modified", m.region,
                          bad);
                bad = h_check_byte(p + m.off + m.len, REG - m.off - m.len, CANARY);
                CHECK_MSG(bad < 0, "R%d: byte %ld after the written range modified", m.region,
                          (long)(m.off + m.len) + bad);
                memset(p + m.off, CANARY, m.len);
                check_all_canaries(r, &rb);
                break;
            }
            case C_CANARY:
                check_all_canaries(r, &rb);
                break;
            case C_RECV:
                x = h_recv_wait(vi, 5000);
                CHECK(x == h_desc(&d, next_recv));
                next_recv++;
                CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_REMOTE_RDMA_WRITE |
                                    VIP_STATUS_IMMEDIATE);
                CHECK_EQ(x->CS.Length, m.len);
                CHECK_EQ(x->CS.ImmediateData, m.arg);
                CHECK_BYTES(rb.ptr, rb.len, CANARY); /* the data went to the target */
                break;
            case C_NORECV:
                CHECK_RET(VipRecvDone(vi, &x), VIP_NOT_DONE);
                break;
            case C_STATE: {
                VIP_VI_STATE s = h_wait_state(vi, (VIP_VI_STATE)m.arg, 2000);
                CHECK_MSG(s == (VIP_VI_STATE)m.arg, "target VI is %s, expected %s",
                          h_state_str(s), h_state_str((VIP_VI_STATE)m.arg));
                break;
            }
            default:
                FAILF("bad command %d", m.op);
            }
            h_signal(fd, 'k');
        }
        for (int i = 0; i < 3; i++)
            h_mem_free(&r[i]);
        h_vi_teardown(vi);
        h_mem_free(&r[3]);
        h_mem_free(&rb);
    }
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipDestroyPtag(nic, t2));
    CHECK_OK(VipCloseNic(nic));
}

/* ---- parent: the writer ------------------------------------------------------------ */

static h_peer P;

static void cmd(int op, int region, uint32_t off, uint32_t len, uint64_t seed, uint32_t arg)
{
    struct cmd m;
    memset(&m, 0, sizeof m);
    m.op = op;
    m.region = region;
    m.off = off;
    m.len = len;
    m.seed = seed;
    m.arg = arg;
    h_xsend(P.fd, &m, sizeof m);
    if (op != C_QUIT)
        h_expect(P.fd, 'k');
}

struct writer {
    VIP_VI_HANDLE vi;
    h_descs d;
    h_mem src;
    struct regions reg;
};

/* Posts an RDMA write of `n` pieces (lengths in len[]) of pattern `seed` to
 * remote address raddr / handle rh; returns the completed descriptor. */
static VIP_DESCRIPTOR *write_(struct writer *w, uint64_t raddr, VIP_MEM_HANDLE rh,
                              const uint32_t *len, int n, uint64_t seed, int imm, uint32_t immval)
{
    uint32_t total = 0;
    for (int i = 0; i < n; i++)
        total += len[i];
    unsigned char msg[REG];
    CHECK(total <= sizeof msg);
    h_fill_random(msg, total, seed);
    VIP_DESCRIPTOR *x = h_desc(&w->d, 0);
    h_desc_prep(x, (VIP_UINT16)(VIP_CONTROL_OP_RDMAWRITE | (imm ? VIP_CONTROL_IMMEDIATE : 0)),
                immval);
    h_desc_remote(x, (const void *)(uintptr_t)raddr, rh);
    uint32_t pos = 0;
    for (int i = 0; i < n; i++) {
        /* Scatter the source pieces around the source buffer. */
        unsigned char *where = w->src.ptr + (size_t)(n - 1 - i) * (w->src.len / (size_t)n);
        memcpy(where, msg + pos, len[i]);
        h_desc_add(x, where, w->src.mh, len[i]);
        pos += len[i];
    }
    CHECK_OK(VipPostSend(w->vi, x, w->d.m.mh));
    VIP_DESCRIPTOR *y = h_send_done(w->vi);
    CHECK(y == x);
    return x;
}

static VIP_DESCRIPTOR *write1(struct writer *w, int region, int64_t off, uint32_t len,
                              uint64_t seed)
{
    return write_(w, w->reg.addr[region] + (uint64_t)off, w->reg.handle[region], &len, 1, seed,
                  0, 0);
}

static void expect_prot(VIP_DESCRIPTOR *x, const char *what)
{
    VIP_UINT32 s = x->CS.Status;
    char b[160];
    CHECK_MSG((s & ~(VIP_UINT32)VIP_STATUS_OP_MASK) == (VIP_STATUS_DONE | VIP_STATUS_RDMA_PROT_ERROR) &&
                  ((s & VIP_STATUS_OP_MASK) == 0 ||
                   (s & VIP_STATUS_OP_MASK) == VIP_STATUS_OP_RDMA_WRITE),
              "%s: status 0x%x [%s], expected DONE|RDMA_PROT_ERROR", what, s,
              h_status_str(s, b, sizeof b));
}

static void writer_open(struct writer *w, VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE t, int c)
{
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, conns[c].rel);
    va.EnableRdmaWrite = conns[c].writer_rdma;
    w->vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    w->d = h_descs_alloc(nic, t, 2);
    w->src = h_mem_alloc(nic, t, 2 * REG, 0);
    char sdisc[100], cdisc[100];
    snprintf(sdisc, sizeof sdisc, "%s-%d", srv_disc, c);
    snprintf(cdisc, sizeof cdisc, "%s-%d", cli_disc, c);
    h_connect(w->vi, cdisc, sdisc, NULL);
    h_xrecv(P.fd, &w->reg, sizeof w->reg);
}

static void writer_close(struct writer *w)
{
    cmd(C_QUIT, 0, 0, 0, 0, 0);
    h_vi_teardown(w->vi);
    h_descs_free(&w->d);
    h_mem_free(&w->src);
}

static void conn0(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE t)
{
    h_log("connection 0: unreliable, RDMA write enabled on both sides");
    struct writer w;
    writer_open(&w, nic, t, 0);
    VIP_DESCRIPTOR *x;

    /* Good writes: exact bytes, no receive consumed. */
    x = write1(&w, 0, 0, 1000, 1);
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RDMA_WRITE);
    cmd(C_DATA, 0, 0, 1000, 1, 0);
    cmd(C_NORECV, 0, 0, 0, 0, 0);

    static const uint32_t pieces[3] = {700, 1, 5000};
    x = write_(&w, w.reg.addr[0] + 12345, w.reg.handle[0], pieces, 3, 2, 0, 0);
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RDMA_WRITE);
    cmd(C_DATA, 0, 12345, 5701, 2, 0);

    x = write1(&w, 0, 0, REG, 3); /* the whole region */
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RDMA_WRITE);
    cmd(C_DATA, 0, 0, REG, 3, 0);
    cmd(C_NORECV, 0, 0, 0, 0, 0);

    /* With immediate data: one receive descriptor is consumed. */
    uint32_t l = 2048;
    x = write_(&w, w.reg.addr[0] + 4096, w.reg.handle[0], &l, 1, 4, 1, 0xCAFEBABEu);
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RDMA_WRITE);
    cmd(C_DATA, 0, 4096, 2048, 4, 0);
    cmd(C_RECV, 0, 0, 2048, 0, 0xCAFEBABEu);
    cmd(C_NORECV, 0, 0, 0, 0, 0);

    /* A region of the target's own memory, outside its arena, is a target
     * as good as one inside (with and without immediate data). */
    x = write1(&w, 3, 100, 1000, 11);
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RDMA_WRITE);
    cmd(C_DATA, 3, 100, 1000, 11, 0);
    l = REG;
    x = write_(&w, w.reg.addr[3], w.reg.handle[3], &l, 1, 14, 1, 0xFEEDu);
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RDMA_WRITE);
    cmd(C_DATA, 3, 0, REG, 14, 0);
    cmd(C_RECV, 0, 0, REG, 0, 0xFEEDu);
    cmd(C_NORECV, 0, 0, 0, 0, 0);

    /* Protection errors: nothing moves, the VI stays usable. */
    VIPX_VI_STATS st;
    CHECK_OK(VipxQueryViStats(w.vi, &st));
    VIP_UINT64 writes = st.RdmaWrites;
    uint32_t len100 = 100;
    expect_prot(write_(&w, w.reg.addr[0], w.reg.handle[0] ^ 0x5A5A5A5Au, &len100, 1, 5, 0, 0),
                "unknown remote handle");
    cmd(C_CANARY, 0, 0, 0, 0, 0);
    expect_prot(write_(&w, w.reg.addr[0], 0, &len100, 1, 5, 0, 0), "remote handle 0");
    cmd(C_CANARY, 0, 0, 0, 0, 0);
    expect_prot(write1(&w, 1, 0, 100, 6), "region with another ptag");
    cmd(C_CANARY, 0, 0, 0, 0, 0);
    expect_prot(write1(&w, 0, REG - 100, 200, 7), "write running past the region's end");
    cmd(C_CANARY, 0, 0, 0, 0, 0);
    expect_prot(write1(&w, 0, -64, 100, 8), "write starting before the region");
    cmd(C_CANARY, 0, 0, 0, 0, 0);
    expect_prot(write_(&w, w.reg.addr[1], w.reg.handle[0], &len100, 1, 9, 0, 0),
                "address of another region under R0's handle");
    cmd(C_CANARY, 0, 0, 0, 0, 0);
    expect_prot(write1(&w, 2, 0, 100, 10), "region without EnableRdmaWrite");
    cmd(C_CANARY, 0, 0, 0, 0, 0);
    expect_prot(write1(&w, 3, REG - 100, 200, 13),
                "write running past the end of a region outside the arena");
    cmd(C_CANARY, 0, 0, 0, 0, 0);

    /* An RDMA write without its address segment is a format error. */
    x = h_desc(&w.d, 1);
    h_desc_prep(x, VIP_CONTROL_OP_RDMAWRITE, 0);
    CHECK_OK(VipPostSend(w.vi, x, w.d.m.mh));
    CHECK(h_send_done(w.vi) == x);
    CHECK_ERR_STATUS(x, VIP_STATUS_FORMAT_ERROR, VIP_STATUS_OP_RDMA_WRITE);
    cmd(C_CANARY, 0, 0, 0, 0, 0);
    cmd(C_NORECV, 0, 0, 0, 0, 0);

    CHECK_OK(VipxQueryViStats(w.vi, &st));
    CHECK_EQ(st.RdmaWrites, writes);
    CHECK_EQ(h_vi_state(w.vi), VIP_STATE_CONNECTED);
    cmd(C_STATE, 0, 0, 0, 0, VIP_STATE_CONNECTED);

    /* Still usable. */
    x = write1(&w, 0, 640, 3000, 12);
    CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RDMA_WRITE);
    cmd(C_DATA, 0, 640, 3000, 12, 0);
    CHECK_OK(VipxQueryViStats(w.vi, &st));
    CHECK_EQ(st.RdmaWrites, writes + 1);
    writer_close(&w);
}

static void conn1(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE t, h_errlog *log)
{
    h_log("connection 1: reliable");
    struct writer w;
    writer_open(&w, nic, t, 1);
    int errs = h_errlog_count(log);
    uint32_t len100 = 100;
    expect_prot(write_(&w, w.reg.addr[0], w.reg.handle[0] ^ 0x5A5A5A5Au, &len100, 1, 20, 0, 0),
                "reliable: unknown remote handle");
    CHECK_EQ(h_vi_state(w.vi), VIP_STATE_ERROR);
    VIP_ERROR_CODE code = VIP_ERROR_CATASTROPHIC;
    pthread_t thr;
    int n = h_errlog_since(log, errs, w.vi, &code, &thr);
    CHECK_MSG(n == 1, "%d error handler calls, expected 1", n);
    CHECK_MSG(code == VIP_ERROR_RDMAW_PROT, "error handler got %s, expected RDMAW_PROT",
              h_errcode_str(code));
    CHECK_MSG(pthread_equal(thr, pthread_self()), "error handler not on the posting thread");
    cmd(C_CANARY, 0, 0, 0, 0, 0);
    cmd(C_STATE, 0, 0, 0, 0, VIP_STATE_ERROR);
    writer_close(&w);
}

static void conn_disabled(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE t, int c)
{
    h_log("connection %d: %s VI without EnableRdmaWrite", c, c == 2 ? "target" : "writing");
    struct writer w;
    writer_open(&w, nic, t, c);
    expect_prot(write1(&w, 0, 0, 100, 30), c == 2 ? "target VI without EnableRdmaWrite"
                                                  : "writing VI without EnableRdmaWrite");
    cmd(C_CANARY, 0, 0, 0, 0, 0);
    cmd(C_NORECV, 0, 0, 0, 0, 0);
    writer_close(&w);
}

int main(void)
{
    h_init("rdma_write", 30);
    h_disc(srv_disc, sizeof srv_disc);
    h_disc(cli_disc, sizeof cli_disc);
    P = h_fork(peer, NULL);
    VIP_NIC_HANDLE nic = h_open_nic();
    static h_errlog log;
    h_errlog_install(nic, &log);
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    conn0(nic, t);
    conn1(nic, t, &log);
    conn_disabled(nic, t, 2);
    conn_disabled(nic, t, 3);
    h_peer_finish(&P);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
