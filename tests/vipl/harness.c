/* harness.c - see harness.h. */
#include "harness.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define H_MAX_PEERS 16
#define H_IO_TIMEOUT_MS 20000
#define H_REAP_TIMEOUT_MS 20000

const VIP_UINT8 h_loopback[4] = {127, 0, 0, 1};

static const char *h_name = "test";
static unsigned h_watchdog_s = 30;
static int h_child_index; /* 0: the test's main process */
static pid_t h_main_pid;
static unsigned h_disc_counter;
static int h_nic_opened;

static struct {
    pid_t pid;
    int fd;
    int reaped;
} h_peers[H_MAX_PEERS];
static int h_npeers;

/* ---- Reporting ----------------------------------------------------------- */

static void h_vprefix(FILE *f)
{
    if (h_child_index)
        fprintf(f, "[%s peer %d] ", h_name, h_child_index);
    else
        fprintf(f, "[%s] ", h_name);
}

void h_log(const char *fmt, ...)
{
    va_list ap;
    h_vprefix(stdout);
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
}

static void h_describe_status(pid_t pid, int st)
{
    if (WIFEXITED(st))
        fprintf(stderr, "[%s] peer pid %d exited with status %d\n", h_name, (int)pid,
                WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        fprintf(stderr, "[%s] peer pid %d killed by signal %d\n", h_name, (int)pid,
                WTERMSIG(st));
}

/* Kills and reaps every live peer; safe to call on any failure path. */
static void h_kill_peers(int report)
{
    for (int i = 0; i < h_npeers; i++) {
        if (h_peers[i].reaped)
            continue;
        int st = 0;
        /* Give a peer that already failed a moment to finish its report. */
        pid_t r = 0;
        for (int k = 0; k < 20 && r == 0; k++) {
            r = waitpid(h_peers[i].pid, &st, WNOHANG);
            if (r == 0) {
                struct timespec ts = {0, 5 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
        if (r == 0) {
            kill(h_peers[i].pid, SIGKILL);
            r = waitpid(h_peers[i].pid, &st, 0);
        }
        if (r == h_peers[i].pid && report)
            h_describe_status(h_peers[i].pid, st);
        h_peers[i].reaped = 1;
    }
}

void h_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    h_vprefix(stderr);
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    if (!h_child_index)
        h_kill_peers(1);
    _exit(1);
}

void h_pass(void)
{
    for (int i = 0; i < h_npeers; i++) {
        if (!h_peers[i].reaped) {
            h_peer p = {h_peers[i].pid, h_peers[i].fd, i + 1};
            h_peer_finish(&p);
        }
    }
    h_log("PASS");
    exit(0);
}

static void h_watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "watchdog: test did not finish in time, killing it\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    if (!h_child_index)
        for (int i = 0; i < h_npeers; i++)
            if (!h_peers[i].reaped)
                kill(h_peers[i].pid, SIGKILL);
    _exit(2);
}

static void h_arm_watchdog(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h_watchdog;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    alarm(h_watchdog_s);
}

void h_init(const char *name, unsigned watchdog_seconds)
{
    h_name = name;
    h_watchdog_s = watchdog_seconds ? watchdog_seconds : 30;
    h_main_pid = getpid();
    setvbuf(stdout, NULL, _IONBF, 0);
    setvbuf(stderr, NULL, _IONBF, 0);
    h_arm_watchdog();
}

int h_is_child(void)
{
    return h_child_index != 0;
}

static void h_append(char *buf, size_t len, size_t *n, const char *word)
{
    if (*n + 1 >= len)
        return;
    int w = snprintf(buf + *n, len - *n, "%s%s", *n ? "|" : "", word);
    if (w > 0)
        *n = *n + (size_t)w < len ? *n + (size_t)w : len - 1;
}

const char *h_status_str(VIP_UINT32 s, char *buf, size_t len)
{
    static const struct {
        VIP_UINT32 bit;
        const char *name;
    } bits[] = {
        {VIP_STATUS_DONE, "DONE"},
        {VIP_STATUS_FORMAT_ERROR, "FORMAT_ERROR"},
        {VIP_STATUS_PROTECTION_ERROR, "PROTECTION_ERROR"},
        {VIP_STATUS_LENGTH_ERROR, "LENGTH_ERROR"},
        {VIP_STATUS_PARTIAL_ERROR, "PARTIAL_ERROR"},
        {VIP_STATUS_DESC_FLUSHED_ERROR, "DESC_FLUSHED_ERROR"},
        {VIP_STATUS_TRANSPORT_ERROR, "TRANSPORT_ERROR"},
        {VIP_STATUS_RDMA_PROT_ERROR, "RDMA_PROT_ERROR"},
        {VIP_STATUS_REMOTE_DESC_ERROR, "REMOTE_DESC_ERROR"},
        {VIP_STATUS_IMMEDIATE, "IMMEDIATE"},
    };
    static const char *ops[] = {"OP_SEND", "OP_RECEIVE", "OP_RDMA_WRITE",
                                "OP_REMOTE_RDMA_WRITE", "OP_RDMA_READ", "OP_5", "OP_6",
                                "OP_7"};
    size_t n = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++)
        if (s & bits[i].bit)
            h_append(buf, len, &n, bits[i].name);
    h_append(buf, len, &n, ops[(s & VIP_STATUS_OP_MASK) >> 16]);
    if (s & VIP_STATUS_RESERVED)
        h_append(buf, len, &n, "RESERVED-BITS");
    return buf;
}

void h_check_err_status(const char *file, int line, const char *what,
                        const VIP_DESCRIPTOR *desc, VIP_UINT32 errbits, VIP_UINT32 op)
{
    VIP_UINT32 s = desc->CS.Status;
    VIP_UINT32 want = VIP_STATUS_DONE | errbits;
    VIP_UINT32 sop = s & VIP_STATUS_OP_MASK;
    if ((s & ~(VIP_UINT32)VIP_STATUS_OP_MASK) != want || (sop != 0 && sop != op)) {
        char b1[160], b2[160];
        h_fail(file, line, "status of %s: 0x%08x [%s], expected DONE|%s (op field 0 or %s)",
               what, s, h_status_str(s, b1, sizeof b1), h_status_str(errbits, b2, sizeof b2),
               op == VIP_STATUS_OP_RECEIVE ? "OP_RECEIVE"
               : op == VIP_STATUS_OP_RDMA_WRITE ? "OP_RDMA_WRITE"
               : op == VIP_STATUS_OP_REMOTE_RDMA_WRITE ? "OP_REMOTE_RDMA_WRITE"
                                                       : "OP_SEND");
    }
}

const char *h_state_str(VIP_VI_STATE st)
{
    switch (st) {
    case VIP_STATE_IDLE: return "IDLE";
    case VIP_STATE_CONNECTED: return "CONNECTED";
    case VIP_STATE_CONNECT_PENDING: return "CONNECT_PENDING";
    case VIP_STATE_ERROR: return "ERROR";
    }
    return "?";
}

const char *h_errcode_str(VIP_ERROR_CODE c)
{
    static const char *names[] = {
        "POST_DESC",  "CONN_LOST",  "RECVQ_EMPTY",  "VI_OVERRUN",      "RDMAW_PROT",
        "RDMAW_DATA", "RDMAW_ABORT", "RDMAR_PROT", "COMP_PROT", "RDMA_TRANSPORT",
        "CATASTROPHIC"};
    if ((unsigned)c < sizeof names / sizeof names[0])
        return names[c];
    return "?";
}

/* ---- Time ------------------------------------------------------------------ */

static double ts_ms(const struct timespec *ts)
{
    return (double)ts->tv_sec * 1000.0 + (double)ts->tv_nsec / 1e6;
}

double h_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts_ms(&ts);
}

void h_sleep_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

double h_thread_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts_ms(&ts);
}

double h_process_cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000.0 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000.0;
}

/* ---- Peers --------------------------------------------------------------- */

h_peer h_fork(h_child_fn fn, void *arg)
{
    CHECK_MSG(!h_child_index, "h_fork called in a peer");
    CHECK_MSG(!h_nic_opened, "fork peers before opening a NIC in the parent");
    CHECK(h_npeers < H_MAX_PEERS);
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        h_child_index = h_npeers + 1;
        for (int i = 0; i < h_npeers; i++)
            if (!h_peers[i].reaped)
                close(h_peers[i].fd);
        h_npeers = 0;
        close(sv[0]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != h_main_pid)
            _exit(3);
        h_arm_watchdog();
        fn(sv[1], arg);
        close(sv[1]);
        exit(0);
    }
    close(sv[1]);
    h_peers[h_npeers].pid = pid;
    h_peers[h_npeers].fd = sv[0];
    h_peers[h_npeers].reaped = 0;
    h_npeers++;
    h_peer p = {pid, sv[0], h_npeers};
    return p;
}

static int h_poll(int fd, short ev)
{
    struct pollfd pfd = {fd, ev, 0};
    for (;;) {
        int r = poll(&pfd, 1, H_IO_TIMEOUT_MS);
        if (r < 0 && errno == EINTR)
            continue;
        return r;
    }
}

void h_xsend(int fd, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    while (len) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        CHECK_MSG(w > 0, "sending to the %s failed: %s", h_child_index ? "parent" : "peer",
                  strerror(errno));
        p += w;
        len -= (size_t)w;
    }
}

void h_xrecv(int fd, void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len) {
        int r = h_poll(fd, POLLIN);
        CHECK_MSG(r > 0, "no message from the %s within %d ms",
                  h_child_index ? "parent" : "peer", H_IO_TIMEOUT_MS);
        ssize_t n = recv(fd, p, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        CHECK_MSG(n > 0, "the %s went away (%s)", h_child_index ? "parent" : "peer",
                  n == 0 ? "EOF" : strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

void h_signal(int fd, char token)
{
    h_xsend(fd, &token, 1);
}

void h_expect(int fd, char token)
{
    char got = 0;
    h_xrecv(fd, &got, 1);
    CHECK_MSG(got == token, "sync: got token '%c', expected '%c'", got, token);
}

static int h_peer_slot(const h_peer *p)
{
    for (int i = 0; i < h_npeers; i++)
        if (h_peers[i].pid == p->pid)
            return i;
    FAILF("unknown peer pid %d", (int)p->pid);
}

int h_peer_reap(h_peer *p)
{
    int slot = h_peer_slot(p);
    CHECK_MSG(!h_peers[slot].reaped, "peer %d reaped twice", p->index);
    double t0 = h_now_ms();
    int st = 0;
    for (;;) {
        pid_t r = waitpid(p->pid, &st, WNOHANG);
        if (r == p->pid)
            break;
        CHECK_MSG(r == 0, "waitpid: %s", strerror(errno));
        if (h_now_ms() - t0 > H_REAP_TIMEOUT_MS)
            FAILF("peer %d (pid %d) did not exit within %d ms", p->index, (int)p->pid,
                  H_REAP_TIMEOUT_MS);
        h_sleep_ms(5);
    }
    h_peers[slot].reaped = 1;
    close(h_peers[slot].fd);
    return st;
}

void h_peer_finish(h_peer *p)
{
    int st = h_peer_reap(p);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "peer %d failed (%s %d); see its messages above", p->index,
              WIFEXITED(st) ? "exit status" : "signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

void h_peer_kill(h_peer *p)
{
    kill(p->pid, SIGKILL);
    int st = h_peer_reap(p);
    CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
              "peer %d was expected to die of SIGKILL but %s %d", p->index,
              WIFEXITED(st) ? "exited with status" : "died of signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

/* ---- NIC, addresses, connections ---------------------------------------- */

VIP_NIC_HANDLE h_open_nic(void)
{
    VIP_NIC_HANDLE nic = NULL;
    h_nic_opened = 1;
    CHECK_OK(VipOpenNic(NULL, &nic));
    CHECK(nic != NULL);
    return nic;
}

VIP_PROTECTION_HANDLE h_ptag(VIP_NIC_HANDLE nic)
{
    VIP_PROTECTION_HANDLE t = NULL;
    CHECK_OK(VipCreatePtag(nic, &t));
    return t;
}

void h_disc(char *buf, size_t len)
{
    int n = snprintf(buf, len, "t-%d-%u", (int)getpid(), h_disc_counter++);
    CHECK(n > 0 && (size_t)n < len);
}

VIP_NET_ADDRESS *h_addr(const char *disc)
{
    VIP_NET_ADDRESS *a =
        VipxAllocNetAddress(h_loopback, 4, disc, (VIP_UINT16)strlen(disc));
    CHECK_MSG(a != NULL, "VipxAllocNetAddress(127.0.0.1, \"%s\") returned NULL", disc);
    CHECK_EQ(a->HostAddressLen, 4);
    CHECK_EQ(a->DiscriminatorLen, strlen(disc));
    CHECK(memcmp(a->HostAddress, h_loopback, 4) == 0);
    CHECK(memcmp(a->HostAddress + 4, disc, strlen(disc)) == 0);
    return a;
}

VIP_NET_ADDRESS *h_addr_room(void)
{
    VIP_NET_ADDRESS *a = calloc(1, sizeof(VIP_NET_ADDRESS) + 4 + 64 + 16);
    CHECK(a != NULL);
    a->HostAddressLen = 4;
    a->DiscriminatorLen = 64;
    return a;
}

VIP_VI_ATTRIBUTES h_vi_attrs(VIP_PROTECTION_HANDLE ptag, VIP_RELIABILITY_LEVEL rel)
{
    VIP_VI_ATTRIBUTES a;
    memset(&a, 0, sizeof a);
    a.ReliabilityLevel = rel;
    a.MaxTransferSize = H_NIC_MTU;
    a.QoS = NULL;
    a.Ptag = ptag;
    a.EnableRdmaWrite = VIP_FALSE;
    a.EnableRdmaRead = VIP_FALSE;
    return a;
}

VIP_VI_HANDLE h_vi(VIP_NIC_HANDLE nic, VIP_VI_ATTRIBUTES *attrs, VIP_CQ_HANDLE scq,
                   VIP_CQ_HANDLE rcq, VIP_ULONG depth, VIP_ULONG staging, VIP_ULONG arena)
{
    VIPX_VI_CONFIG cfg = {.QueueDepth = depth, .StagingBytes = staging, .ArenaBytes = arena};
    VIP_VI_HANDLE vi = NULL;
    CHECK_OK(VipxCreateVi(nic, attrs, scq, rcq, &cfg, &vi));
    CHECK(vi != NULL);
    return vi;
}

VIP_VI_STATE h_vi_state(VIP_VI_HANDLE vi)
{
    VIP_VI_STATE st;
    VIP_VI_ATTRIBUTES a;
    VIP_BOOLEAN se, re;
    CHECK_OK(VipQueryVi(vi, &st, &a, &se, &re));
    return st;
}

VIP_VI_STATE h_wait_state(VIP_VI_HANDLE vi, VIP_VI_STATE want, unsigned timeout_ms)
{
    double t0 = h_now_ms();
    VIP_VI_STATE st;
    while ((st = h_vi_state(vi)) != want && h_now_ms() - t0 < timeout_ms)
        h_sleep_ms(2);
    return st;
}

void h_vi_teardown(VIP_VI_HANDLE vi)
{
    VIP_VI_STATE st = h_vi_state(vi);
    if (st == VIP_STATE_CONNECTED)
        CHECK_OK(VipDisconnect(vi));
    VIP_DESCRIPTOR *x;
    double t0 = h_now_ms();
    for (;;) {
        while (VipRecvDone(vi, &x) == VIP_SUCCESS) {
        }
        while (VipSendDone(vi, &x) == VIP_SUCCESS) {
        }
        VIP_RETURN r = VipDestroyVi(vi);
        if (r == VIP_SUCCESS)
            return;
        CHECK_MSG(h_now_ms() - t0 < 2000, "VipDestroyVi during cleanup: %s (VI %s)",
                  VipxReturnString(r), h_state_str(h_vi_state(vi)));
        h_sleep_ms(5);
    }
}

void h_accept(VIP_NIC_HANDLE nic, VIP_VI_HANDLE vi, const char *disc,
              VIP_VI_ATTRIBUTES *remote_attrs)
{
    VIP_NET_ADDRESS *local = h_addr(disc);
    VIP_NET_ADDRESS *remote = h_addr_room();
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn = NULL;
    CHECK_OK(VipConnectWait(nic, local, 20000, remote, &ra, &conn));
    CHECK_OK(VipConnectAccept(conn, vi));
    if (remote_attrs)
        *remote_attrs = ra;
    free(local);
    free(remote);
}

VIP_RETURN h_connect_ret(VIP_VI_HANDLE vi, const char *local_disc, const char *remote_disc,
                         VIP_ULONG timeout_ms, VIP_VI_ATTRIBUTES *remote_attrs)
{
    VIP_NET_ADDRESS *local = h_addr(local_disc);
    VIP_NET_ADDRESS *remote = h_addr(remote_disc);
    VIP_VI_ATTRIBUTES ra;
    VIP_RETURN r;
    double t0 = h_now_ms();
    for (;;) {
        r = VipConnectRequest(vi, local, remote, timeout_ms, &ra);
        if (r != VIP_NO_MATCH || h_now_ms() - t0 > 5000)
            break;
        h_sleep_ms(10);
    }
    if (r == VIP_SUCCESS && remote_attrs)
        *remote_attrs = ra;
    free(local);
    free(remote);
    return r;
}

void h_connect(VIP_VI_HANDLE vi, const char *local_disc, const char *remote_disc,
               VIP_VI_ATTRIBUTES *remote_attrs)
{
    CHECK_OK(h_connect_ret(vi, local_disc, remote_disc, 10000, remote_attrs));
}

/* ---- Memory and descriptors --------------------------------------------- */

h_mem h_mem_reg(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE ptag, void *ptr, size_t len,
                int rdma_write)
{
    h_mem m;
    memset(&m, 0, sizeof m);
    m.nic = nic;
    m.ptr = ptr;
    m.len = len;
    VIP_MEM_ATTRIBUTES a = {ptag, rdma_write ? VIP_TRUE : VIP_FALSE, VIP_FALSE};
    CHECK_OK(VipRegisterMem(nic, ptr, len, &a, &m.mh));
    return m;
}

h_mem h_mem_alloc(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE ptag, size_t len, int rdma_write)
{
    size_t rounded = (len + 63) & ~(size_t)63;
    if (rounded == 0)
        rounded = 64;
    void *p = aligned_alloc(64, rounded);
    CHECK(p != NULL);
    memset(p, 0, rounded);
    h_mem m = h_mem_reg(nic, ptag, p, rounded, rdma_write);
    m.owned = 1;
    return m;
}

void h_mem_free(h_mem *m)
{
    if (!m->ptr)
        return;
    CHECK_OK(VipDeregisterMem(m->nic, m->ptr, m->mh));
    if (m->owned)
        free(m->ptr);
    m->ptr = NULL;
}

h_descs h_descs_alloc(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE ptag, unsigned n)
{
    h_descs d;
    d.m = h_mem_alloc(nic, ptag, (size_t)n * H_DESC_SLOT, 0);
    d.n = n;
    return d;
}

VIP_DESCRIPTOR *h_desc(h_descs *d, unsigned i)
{
    CHECK_MSG(i < d->n, "descriptor index %u out of %u", i, d->n);
    return (VIP_DESCRIPTOR *)(void *)(d->m.ptr + (size_t)i * H_DESC_SLOT);
}

void h_descs_free(h_descs *d)
{
    h_mem_free(&d->m);
}

VIP_DESCRIPTOR_SEGMENT *h_seg(VIP_DESCRIPTOR *d, unsigned i)
{
    CHECK(i < H_DESC_MAX_SEGS);
    return (VIP_DESCRIPTOR_SEGMENT *)(void *)((unsigned char *)d + offsetof(VIP_DESCRIPTOR, DS)) + i;
}

void h_desc_prep(VIP_DESCRIPTOR *d, VIP_UINT16 control, VIP_UINT32 imm)
{
    memset(d, 0, H_DESC_SLOT);
    d->CS.Control = control;
    d->CS.ImmediateData = imm;
}

void h_desc_add(VIP_DESCRIPTOR *d, const void *ptr, VIP_MEM_HANDLE mh, VIP_UINT32 len)
{
    VIP_DESCRIPTOR_SEGMENT *s = h_seg(d, d->CS.SegCount);
    s->Local.Data.AddressBits = (VIP_UINT64)(uintptr_t)ptr;
    s->Local.Handle = mh;
    s->Local.Length = len;
    d->CS.SegCount++;
    d->CS.Length += len;
}

void h_desc_remote(VIP_DESCRIPTOR *d, const void *raddr, VIP_MEM_HANDLE rh)
{
    CHECK(d->CS.SegCount == 0);
    VIP_DESCRIPTOR_SEGMENT *s = h_seg(d, 0);
    s->Remote.Data.AddressBits = (VIP_UINT64)(uintptr_t)raddr;
    s->Remote.Handle = rh;
    s->Remote.Reserved = 0;
    d->CS.SegCount = 1;
}

void h_post_recv1(VIP_VI_HANDLE vi, h_descs *d, unsigned i, const void *buf,
                  VIP_MEM_HANDLE mh, VIP_UINT32 len)
{
    VIP_DESCRIPTOR *x = h_desc(d, i);
    h_desc_prep(x, 0, 0);
    h_desc_add(x, buf, mh, len);
    CHECK_OK(VipPostRecv(vi, x, d->m.mh));
}

void h_post_send1(VIP_VI_HANDLE vi, h_descs *d, unsigned i, const void *buf,
                  VIP_MEM_HANDLE mh, VIP_UINT32 len, VIP_UINT16 control, VIP_UINT32 imm)
{
    VIP_DESCRIPTOR *x = h_desc(d, i);
    h_desc_prep(x, control, imm);
    h_desc_add(x, buf, mh, len);
    CHECK_OK(VipPostSend(vi, x, d->m.mh));
}

int h_fabric(void)
{
    const char *d = getenv("SOVIA_PROVIDER");
    if (!d || !*d)
        d = getenv("SOVIA_VIPL_DEVICE"); /* its older name */
    return d && strncmp(d, "fabric", 6) == 0;
}

VIP_DESCRIPTOR *h_send_done(VIP_VI_HANDLE vi)
{
    VIP_DESCRIPTOR *x = NULL;
    /* fabric: a send completes when the provider has sent it, after the post. */
    if (h_fabric())
        CHECK_OK(VipSendWait(vi, 5000, &x));
    else
        CHECK_OK(VipSendDone(vi, &x));
    CHECK(x != NULL);
    return x;
}

VIP_DESCRIPTOR *h_recv_wait(VIP_VI_HANDLE vi, VIP_ULONG timeout_ms)
{
    VIP_DESCRIPTOR *x = NULL;
    CHECK_OK(VipRecvWait(vi, timeout_ms, &x));
    CHECK(x != NULL);
    return x;
}

/* ---- Data ------------------------------------------------------------------ */

static uint64_t h_mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static unsigned char h_pattern_byte(uint64_t seed, size_t i, uint64_t *word, size_t *wi)
{
    if (i / 8 != *wi || i == 0) {
        *wi = i / 8;
        *word = h_mix(seed * 0x100000001B3ULL + *wi);
    }
    return (unsigned char)(*word >> (8 * (i % 8)));
}

void h_fill_random(void *buf, size_t len, uint64_t seed)
{
    unsigned char *p = buf;
    uint64_t w = 0;
    size_t wi = (size_t)-1;
    for (size_t i = 0; i < len; i++)
        p[i] = h_pattern_byte(seed, i, &w, &wi);
}

long h_check_random(const void *buf, size_t len, uint64_t seed)
{
    const unsigned char *p = buf;
    uint64_t w = 0;
    size_t wi = (size_t)-1;
    for (size_t i = 0; i < len; i++)
        if (p[i] != h_pattern_byte(seed, i, &w, &wi))
            return (long)i;
    return -1;
}

long h_check_byte(const void *buf, size_t len, unsigned char value)
{
    const unsigned char *p = buf;
    for (size_t i = 0; i < len; i++)
        if (p[i] != value)
            return (long)i;
    return -1;
}

/* ---- Error handler recorder ------------------------------------------------ */

static void h_errlog_handler(VIP_PVOID ctx, VIP_ERROR_DESCRIPTOR *ed)
{
    h_errlog *log = ctx;
    pthread_mutex_lock(&log->mu);
    if (log->count < H_ERRLOG_MAX) {
        log->code[log->count] = ed->ErrorCode;
        log->vi[log->count] = ed->ViHandle;
        log->nic[log->count] = ed->NicHandle;
        log->thread[log->count] = pthread_self();
    }
    log->count++;
    pthread_mutex_unlock(&log->mu);
}

void h_errlog_install(VIP_NIC_HANDLE nic, h_errlog *log)
{
    memset(log, 0, sizeof *log);
    pthread_mutex_init(&log->mu, NULL);
    CHECK_OK(VipErrorCallback(nic, log, h_errlog_handler));
}

int h_errlog_count(h_errlog *log)
{
    pthread_mutex_lock(&log->mu);
    int n = log->count;
    pthread_mutex_unlock(&log->mu);
    return n;
}

int h_errlog_wait(h_errlog *log, int count, unsigned timeout_ms)
{
    double t0 = h_now_ms();
    int n;
    while ((n = h_errlog_count(log)) < count && h_now_ms() - t0 < timeout_ms)
        h_sleep_ms(2);
    return n;
}

int h_errlog_find(h_errlog *log, VIP_ERROR_CODE code, VIP_VI_HANDLE vi)
{
    int found = 0;
    pthread_mutex_lock(&log->mu);
    for (int i = 0; i < log->count && i < H_ERRLOG_MAX; i++)
        if (log->code[i] == code && (vi == NULL || log->vi[i] == vi))
            found++;
    pthread_mutex_unlock(&log->mu);
    return found;
}

int h_errlog_since(h_errlog *log, int from, VIP_VI_HANDLE vi, VIP_ERROR_CODE *code,
                   pthread_t *thread)
{
    int n = 0;
    pthread_mutex_lock(&log->mu);
    for (int i = from; i < log->count && i < H_ERRLOG_MAX; i++) {
        if (log->vi[i] != vi)
            continue;
        if (n == 0 && code)
            *code = log->code[i];
        if (n == 0 && thread)
            *thread = log->thread[i];
        n++;
    }
    pthread_mutex_unlock(&log->mu);
    return n;
}
