/*
 * peer_death: the peer process dies (docs/VIPL.md "Connections", last item).
 * Within 1 s the VI is ERROR, every posted receive completes with
 * DESC_FLUSHED_ERROR (in order), a thread blocked in VipRecvWait(VIP_INFINITE)
 * wakes, and the error handler gets VIP_ERROR_CONN_LOST. Three peers:
 *   1. SIGKILL, with a thread blocked in VipRecvWait and 4 receives posted;
 *   2. SIGKILL, watched by a polling consumer (VipRecvDone loop);
 *   3. a plain _exit(0) without closing anything.
 * The deadline is 1 s per the contract; DEADLINE_MS adds 250 ms for
 * scheduling noise on a loaded machine, and every measured time is printed.
 */
#include "harness.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define DEADLINE_MS 1250.0
#define NPEERS 3

static char srv[NPEERS][80], cli[NPEERS][80];

static void peer(int fd, void *arg)
{
    int which = (int)(intptr_t)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    h_mem buf = h_mem_alloc(nic, t, 4096, 0);
    h_descs d = h_descs_alloc(nic, t, 2);
    h_post_recv1(vi, &d, 0, buf.ptr, buf.mh, 4096);
    h_accept(nic, vi, srv[which], NULL);
    h_signal(fd, 'R');
    h_expect(fd, 'E'); /* peers 0 and 1 are killed while waiting here */
    _exit(0);
}

struct waiter {
    VIP_VI_HANDLE vi;
    atomic_int done;
    VIP_RETURN r;
    VIP_DESCRIPTOR *desc;
    double at;
};

static void *waiter_thread(void *arg)
{
    struct waiter *w = arg;
    w->r = VipRecvWait(w->vi, VIP_INFINITE, &w->desc);
    w->at = h_now_ms();
    atomic_store(&w->done, 1);
    return NULL;
}

struct side {
    VIP_VI_HANDLE vi;
    h_mem buf;
    h_descs d;
    unsigned nrecv;
};

static void open_side(struct side *s, VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE t, int which,
                      unsigned nrecv, h_peer *p)
{
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    s->vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    s->buf = h_mem_alloc(nic, t, 4096 * nrecv, 0);
    s->d = h_descs_alloc(nic, t, nrecv);
    s->nrecv = nrecv;
    for (unsigned i = 0; i < nrecv; i++)
        h_post_recv1(s->vi, &s->d, i, s->buf.ptr + 4096 * i, s->buf.mh, 4096);
    h_connect(s->vi, cli[which], srv[which], NULL);
    h_expect(p->fd, 'R');
    CHECK_EQ(h_vi_state(s->vi), VIP_STATE_CONNECTED);
}

static void close_side(struct side *s)
{
    h_vi_teardown(s->vi);
    h_mem_free(&s->buf);
    h_descs_free(&s->d);
}

/* Waits for ERROR and the CONN_LOST report; returns the later of the two times. */
static double wait_error_and_report(struct side *s, h_errlog *log, int errs, double t0,
                                    const char *what)
{
    double st_at = -1, cb_at = -1;
    VIP_ERROR_CODE code = VIP_ERROR_CATASTROPHIC;
    pthread_t thr;
    while (h_now_ms() - t0 < 3000 && (st_at < 0 || cb_at < 0)) {
        if (st_at < 0 && h_vi_state(s->vi) == VIP_STATE_ERROR)
            st_at = h_now_ms();
        if (cb_at < 0 && h_errlog_since(log, errs, s->vi, &code, &thr) > 0)
            cb_at = h_now_ms();
        h_sleep_ms(1);
    }
    CHECK_MSG(st_at >= 0, "%s: VI still %s 3 s after the peer died", what,
              h_state_str(h_vi_state(s->vi)));
    CHECK_MSG(cb_at >= 0, "%s: error handler not called within 3 s", what);
    CHECK_MSG(code == VIP_ERROR_CONN_LOST, "%s: error handler got %s, expected CONN_LOST", what,
              h_errcode_str(code));
    /* Asynchronous errors are reported on the provider's agent thread. */
    CHECK_MSG(!pthread_equal(thr, pthread_self()),
              "%s: CONN_LOST reported on the application's thread", what);
    h_log("%s: VI ERROR after %.0f ms, error handler after %.0f ms", what, st_at - t0,
          cb_at - t0);
    CHECK_MSG(st_at - t0 <= DEADLINE_MS, "%s: VI ERROR only after %.0f ms", what, st_at - t0);
    CHECK_MSG(cb_at - t0 <= DEADLINE_MS, "%s: CONN_LOST only after %.0f ms", what, cb_at - t0);
    return st_at > cb_at ? st_at : cb_at;
}

static void expect_flushed(struct side *s, unsigned from)
{
    for (unsigned i = from; i < s->nrecv; i++) {
        VIP_DESCRIPTOR *x = NULL;
        CHECK_OK(VipRecvDone(s->vi, &x));
        CHECK_MSG(x == h_desc(&s->d, i), "flushed receive %u out of order", i);
        CHECK_ERR_STATUS(x, VIP_STATUS_DESC_FLUSHED_ERROR, VIP_STATUS_OP_RECEIVE);
    }
    VIP_DESCRIPTOR *x;
    CHECK_RET(VipRecvDone(s->vi, &x), VIP_NOT_DONE);
    CHECK_BYTES(s->buf.ptr, s->buf.len, 0); /* h_mem_alloc zeroed it; nothing arrived */
}

int main(void)
{
    h_init("peer_death", 30);
    h_peer p[NPEERS];
    for (int i = 0; i < NPEERS; i++) {
        h_disc(srv[i], sizeof srv[i]);
        h_disc(cli[i], sizeof cli[i]);
    }
    for (int i = 0; i < NPEERS; i++)
        p[i] = h_fork(peer, (void *)(intptr_t)i);
    VIP_NIC_HANDLE nic = h_open_nic();
    static h_errlog log;
    h_errlog_install(nic, &log);
    VIP_PROTECTION_HANDLE t = h_ptag(nic);

    /* 1: SIGKILL while a thread is blocked in VipRecvWait(VIP_INFINITE). */
    struct side s;
    open_side(&s, nic, t, 0, 4, &p[0]);
    struct waiter w;
    w.vi = s.vi;
    atomic_init(&w.done, 0);
    w.r = VIP_SUCCESS;
    w.desc = NULL;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, waiter_thread, &w) == 0);
    h_sleep_ms(200);
    CHECK_MSG(!atomic_load(&w.done), "VipRecvWait(INFINITE) returned %s with nothing to report",
              VipxReturnString(w.r));
    int errs = h_errlog_count(&log);
    double t0 = h_now_ms();
    h_peer_kill(&p[0]);
    while (!atomic_load(&w.done) && h_now_ms() - t0 < 3000)
        h_sleep_ms(1);
    CHECK_MSG(atomic_load(&w.done), "the blocked VipRecvWait did not wake within 3 s");
    CHECK(pthread_join(th, NULL) == 0);
    h_log("SIGKILL: blocked waiter woke after %.0f ms with %s", w.at - t0,
          VipxReturnString(w.r));
    CHECK_MSG(w.at - t0 <= DEADLINE_MS, "the blocked waiter woke only after %.0f ms",
              w.at - t0);
    CHECK_MSG(w.r == VIP_SUCCESS, "the woken VipRecvWait returned %s, expected VIP_SUCCESS with "
              "the flushed descriptor", VipxReturnString(w.r));
    CHECK(w.desc == h_desc(&s.d, 0));
    CHECK_ERR_STATUS(w.desc, VIP_STATUS_DESC_FLUSHED_ERROR, VIP_STATUS_OP_RECEIVE);
    wait_error_and_report(&s, &log, errs, t0, "SIGKILL, blocked waiter");
    expect_flushed(&s, 1);
    close_side(&s);

    /* 2: SIGKILL seen by a polling consumer. */
    open_side(&s, nic, t, 1, 2, &p[1]);
    errs = h_errlog_count(&log);
    VIP_DESCRIPTOR *x = NULL;
    CHECK_RET(VipRecvDone(s.vi, &x), VIP_NOT_DONE);
    t0 = h_now_ms();
    h_peer_kill(&p[1]);
    VIP_RETURN r;
    while ((r = VipRecvDone(s.vi, &x)) == VIP_NOT_DONE && h_now_ms() - t0 < 3000) {
    }
    double seen = h_now_ms() - t0;
    CHECK_MSG(r == VIP_SUCCESS, "polling consumer: VipRecvDone still %s 3 s after SIGKILL",
              VipxReturnString(r));
    h_log("SIGKILL: polling consumer saw the flush after %.0f ms", seen);
    CHECK_MSG(seen <= DEADLINE_MS, "polling consumer saw the flush only after %.0f ms", seen);
    CHECK(x == h_desc(&s.d, 0));
    CHECK_ERR_STATUS(x, VIP_STATUS_DESC_FLUSHED_ERROR, VIP_STATUS_OP_RECEIVE);
    wait_error_and_report(&s, &log, errs, t0, "SIGKILL, polling consumer");
    expect_flushed(&s, 1);
    close_side(&s);

    /* 3: the peer simply exits, closing nothing. */
    open_side(&s, nic, t, 2, 2, &p[2]);
    errs = h_errlog_count(&log);
    h_signal(p[2].fd, 'E');
    h_peer_finish(&p[2]);
    t0 = h_now_ms();
    wait_error_and_report(&s, &log, errs, t0, "_exit(0)");
    expect_flushed(&s, 0);
    close_side(&s);

    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
