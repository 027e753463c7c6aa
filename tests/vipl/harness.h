/*
 * harness.h - shared helpers for the vipl semantics tests (tests/vipl/).
 *
 * Every test is one executable. A failed check prints file:line (and the
 * VIP_RETURN names for return-code checks), kills and reaps every peer
 * process the test forked and exits non-zero. A watchdog (alarm) kills a
 * test that hangs. Peers are forked processes that open their own NIC after
 * the fork; parent and peer talk over a socketpair (tokens and small data)
 * and the peer's verdict is its exit status.
 */
#ifndef SOVIA_TESTS_VIPL_HARNESS_H
#define SOVIA_TESTS_VIPL_HARNESS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include <vipl.h>
#include <vipl_ext.h>

/* ---- Test lifetime and failure reporting -------------------------------- */

/* Names the test, arms the watchdog (seconds) and makes stdout unbuffered. */
void h_init(const char *name, unsigned watchdog_seconds);

/* Prints "<role> file:line: message", cleans up peers, exits 1. */
__attribute__((noreturn, format(printf, 3, 4))) void h_fail(const char *file, int line,
                                                             const char *fmt, ...);
/* Progress message prefixed with the role ("parent" / "peer <n>"). */
__attribute__((format(printf, 1, 2))) void h_log(const char *fmt, ...);
/* Ends the test successfully: reaps peers (which must all have exited 0). */
__attribute__((noreturn)) void h_pass(void);

#define FAILF(...) h_fail(__FILE__, __LINE__, __VA_ARGS__)

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond))                                                                  \
            h_fail(__FILE__, __LINE__, "CHECK(%s) failed", #cond);                    \
    } while (0)

#define CHECK_MSG(cond, ...)                                                          \
    do {                                                                              \
        if (!(cond))                                                                  \
            h_fail(__FILE__, __LINE__, __VA_ARGS__);                                  \
    } while (0)

/* A VIP_RETURN check: prints both codes by name. */
#define CHECK_RET(expr, want)                                                         \
    do {                                                                              \
        VIP_RETURN h_r_ = (expr);                                                     \
        VIP_RETURN h_w_ = (want);                                                     \
        if (h_r_ != h_w_)                                                             \
            h_fail(__FILE__, __LINE__, "%s returned %s, expected %s", #expr,          \
                   VipxReturnString(h_r_), VipxReturnString(h_w_));                   \
    } while (0)

#define CHECK_OK(expr) CHECK_RET(expr, VIP_SUCCESS)

/* An expected failure whose exact code the contract does not state. */
#define CHECK_NOT_OK(expr)                                                            \
    do {                                                                              \
        VIP_RETURN h_r_ = (expr);                                                     \
        if (h_r_ == VIP_SUCCESS)                                                      \
            h_fail(__FILE__, __LINE__, "%s returned VIP_SUCCESS, expected an error",  \
                   #expr);                                                            \
    } while (0)

/* Integer equality, both values printed. */
#define CHECK_EQ(a, b)                                                                \
    do {                                                                              \
        unsigned long long h_a_ = (unsigned long long)(a);                            \
        unsigned long long h_b_ = (unsigned long long)(b);                            \
        if (h_a_ != h_b_)                                                             \
            h_fail(__FILE__, __LINE__, "%s == %s failed: %llu (0x%llx) != %llu (0x%llx)", \
                   #a, #b, h_a_, h_a_, h_b_, h_b_);                                   \
    } while (0)

/* Exact descriptor status. */
#define CHECK_STATUS(desc, want)                                                      \
    do {                                                                              \
        VIP_UINT32 h_s_ = (desc)->CS.Status;                                          \
        VIP_UINT32 h_w_ = (VIP_UINT32)(want);                                         \
        if (h_s_ != h_w_) {                                                           \
            char h_b1_[160], h_b2_[160];                                              \
            h_fail(__FILE__, __LINE__, "status of %s: 0x%08x [%s], expected 0x%08x [%s]", \
                   #desc, h_s_, h_status_str(h_s_, h_b1_, sizeof h_b1_), h_w_,        \
                   h_status_str(h_w_, h_b2_, sizeof h_b2_));                          \
        }                                                                             \
    } while (0)

/*
 * A completed-with-error status: DONE plus exactly the error bits `errbits`,
 * no IMMEDIATE bit, and an operation field that is either 0 or `op` (the
 * contract states the error bits, not whether the op field is filled in).
 */
#define CHECK_ERR_STATUS(desc, errbits, op)                                           \
    h_check_err_status(__FILE__, __LINE__, #desc, (desc), (errbits), (op))

void h_check_err_status(const char *file, int line, const char *what,
                        const VIP_DESCRIPTOR *desc, VIP_UINT32 errbits, VIP_UINT32 op);
/* "DONE|OP_RECEIVE|IMMEDIATE"-style rendering of a status word. */
const char *h_status_str(VIP_UINT32 status, char *buf, size_t len);
const char *h_state_str(VIP_VI_STATE state);
const char *h_errcode_str(VIP_ERROR_CODE code);

/* ---- Time ------------------------------------------------------------- */

double h_now_ms(void);            /* CLOCK_MONOTONIC in milliseconds */
void h_sleep_ms(unsigned ms);
double h_thread_cpu_ms(void);     /* CLOCK_THREAD_CPUTIME_ID */
double h_process_cpu_ms(void);    /* getrusage(RUSAGE_SELF) user + system */

/* ---- Peers (forked processes) ------------------------------------------ */

typedef struct {
    pid_t pid;
    int fd;       /* the parent's end of the socketpair */
    int index;
} h_peer;

/* Runs fn(fd, arg) in a forked child; the child exits 0 when fn returns. */
typedef void (*h_child_fn)(int fd, void *arg);
h_peer h_fork(h_child_fn fn, void *arg);

/* 1 in the forked child, 0 in the test's main process. */
int h_is_child(void);

/* Byte-exact transfer over the socketpair; fails on EOF or after 20 s. */
void h_xsend(int fd, const void *buf, size_t len);
void h_xrecv(int fd, void *buf, size_t len);
/* One-byte tokens to order the two processes. */
void h_signal(int fd, char token);
void h_expect(int fd, char token);

/* Waits (up to 20 s) for the peer's exit; its exit status must be 0. */
void h_peer_finish(h_peer *p);
/* SIGKILLs the peer and reaps it. */
void h_peer_kill(h_peer *p);
/* Reaps the peer (up to 20 s) and returns its raw wait status. */
int h_peer_reap(h_peer *p);

/* ---- NIC, addresses, connections --------------------------------------- */

#define H_MIB (1024UL * 1024UL)
#define H_NIC_MTU (4UL * H_MIB)

VIP_NIC_HANDLE h_open_nic(void);
VIP_PROTECTION_HANDLE h_ptag(VIP_NIC_HANDLE nic);

/* A discriminator unique to this process: "t-<pid>-<n>". */
void h_disc(char *buf, size_t len);
/* 127.0.0.1 + discriminator, malloc'd (free it). */
VIP_NET_ADDRESS *h_addr(const char *disc);
/* Room for any peer address (host 4 + discriminator 64). */
VIP_NET_ADDRESS *h_addr_room(void);
extern const VIP_UINT8 h_loopback[4];

/* Attributes: the given ptag and reliability, MaxTransferSize = 4 MiB. */
VIP_VI_ATTRIBUTES h_vi_attrs(VIP_PROTECTION_HANDLE ptag, VIP_RELIABILITY_LEVEL rel);
/* VipxCreateVi with the given queue depth / staging / arena (0 = default). */
VIP_VI_HANDLE h_vi(VIP_NIC_HANDLE nic, VIP_VI_ATTRIBUTES *attrs, VIP_CQ_HANDLE scq,
                   VIP_CQ_HANDLE rcq, VIP_ULONG depth, VIP_ULONG staging, VIP_ULONG arena);
VIP_VI_STATE h_vi_state(VIP_VI_HANDLE vi);
/* Polls the VI state until it equals `want` or timeout_ms passes; returns it. */
VIP_VI_STATE h_wait_state(VIP_VI_HANDLE vi, VIP_VI_STATE want, unsigned timeout_ms);

/* Cleanup only (asserts nothing about the contract beyond success): disconnects
 * a CONNECTED VI, dequeues every completed descriptor, destroys the VI. */
void h_vi_teardown(VIP_VI_HANDLE vi);

/* Server side: VipConnectWait(local disc, 20 s) + VipConnectAccept(vi). */
void h_accept(VIP_NIC_HANDLE nic, VIP_VI_HANDLE vi, const char *disc,
              VIP_VI_ATTRIBUTES *remote_attrs);
/* Client side: VipConnectRequest retried while VIP_NO_MATCH for up to 5 s;
 * returns the final code. */
VIP_RETURN h_connect_ret(VIP_VI_HANDLE vi, const char *local_disc, const char *remote_disc,
                         VIP_ULONG timeout_ms, VIP_VI_ATTRIBUTES *remote_attrs);
void h_connect(VIP_VI_HANDLE vi, const char *local_disc, const char *remote_disc,
               VIP_VI_ATTRIBUTES *remote_attrs);

/* ---- Registered memory and descriptors ---------------------------------- */

typedef struct {
    VIP_NIC_HANDLE nic;
    unsigned char *ptr;
    size_t len;
    VIP_MEM_HANDLE mh;
    int owned; /* ptr was allocated by h_mem_alloc */
} h_mem;

/* 64-byte aligned, zeroed, registered with ptag. */
h_mem h_mem_alloc(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE ptag, size_t len, int rdma_write);
/* Registers existing memory (e.g. part of a VI arena). */
h_mem h_mem_reg(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE ptag, void *ptr, size_t len,
                int rdma_write);
void h_mem_free(h_mem *m);

/* Descriptor slots: a control segment plus room for 22 segments. */
#define H_DESC_SLOT 384
#define H_DESC_MAX_SEGS 22

typedef struct {
    h_mem m;
    unsigned n;
} h_descs;

h_descs h_descs_alloc(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE ptag, unsigned n);
VIP_DESCRIPTOR *h_desc(h_descs *d, unsigned i);
void h_descs_free(h_descs *d);

/* Segment i of a descriptor (DS[i], addressed past the declared array). */
VIP_DESCRIPTOR_SEGMENT *h_seg(VIP_DESCRIPTOR *d, unsigned i);
/* Clears the descriptor and sets Control / ImmediateData. */
void h_desc_prep(VIP_DESCRIPTOR *d, VIP_UINT16 control, VIP_UINT32 imm);
/* Appends a local data segment; SegCount++ and CS.Length += len. */
void h_desc_add(VIP_DESCRIPTOR *d, const void *ptr, VIP_MEM_HANDLE mh, VIP_UINT32 len);
/* Sets DS[0] as the remote address segment of an RDMA write (SegCount = 1). */
void h_desc_remote(VIP_DESCRIPTOR *d, const void *raddr, VIP_MEM_HANDLE rh);

/* Posts a one-segment descriptor. */
void h_post_recv1(VIP_VI_HANDLE vi, h_descs *d, unsigned i, const void *buf,
                  VIP_MEM_HANDLE mh, VIP_UINT32 len);
void h_post_send1(VIP_VI_HANDLE vi, h_descs *d, unsigned i, const void *buf,
                  VIP_MEM_HANDLE mh, VIP_UINT32 len, VIP_UINT16 control, VIP_UINT32 imm);

/* Whether the tests run over the fabric provider (SOVIA_PROVIDER=fabric...):
 * its deviations from shm are docs/VIPL.md's "fabric" section. */
int h_fabric(void);
/* VipSendDone, which must succeed at once (sends complete inside VipPostSend);
 * over fabric VipSendWait (the provider completes sends after the post). */
VIP_DESCRIPTOR *h_send_done(VIP_VI_HANDLE vi);
/* VipRecvWait with a timeout that must not expire. */
VIP_DESCRIPTOR *h_recv_wait(VIP_VI_HANDLE vi, VIP_ULONG timeout_ms);

/* ---- Data ---------------------------------------------------------------- */

void h_fill_random(void *buf, size_t len, uint64_t seed);
/* Index of the first byte that differs from the pattern, or -1. */
long h_check_random(const void *buf, size_t len, uint64_t seed);
/* Index of the first byte != value, or -1. */
long h_check_byte(const void *buf, size_t len, unsigned char value);

#define CHECK_RANDOM(buf, len, seed)                                                  \
    do {                                                                              \
        long h_i_ = h_check_random((buf), (len), (seed));                             \
        if (h_i_ >= 0)                                                                \
            h_fail(__FILE__, __LINE__, "data mismatch in %s at byte %ld of %zu",      \
                   #buf, h_i_, (size_t)(len));                                        \
    } while (0)

#define CHECK_BYTES(buf, len, value)                                                  \
    do {                                                                              \
        long h_i_ = h_check_byte((buf), (len), (value));                              \
        if (h_i_ >= 0)                                                                \
            h_fail(__FILE__, __LINE__, "%s modified at byte %ld of %zu (0x%02x, expected 0x%02x)", \
                   #buf, h_i_, (size_t)(len), ((const unsigned char *)(buf))[h_i_],   \
                   (unsigned)(value));                                                \
    } while (0)

/* ---- Error handler recorder --------------------------------------------- */

#define H_ERRLOG_MAX 256

typedef struct {
    pthread_mutex_t mu;
    int count;
    VIP_ERROR_CODE code[H_ERRLOG_MAX];
    VIP_VI_HANDLE vi[H_ERRLOG_MAX];
    VIP_NIC_HANDLE nic[H_ERRLOG_MAX];
    pthread_t thread[H_ERRLOG_MAX];
} h_errlog;

/* Installs a recorder as the NIC's error handler. */
void h_errlog_install(VIP_NIC_HANDLE nic, h_errlog *log);
/* Waits until at least `count` errors were recorded; returns the count. */
int h_errlog_wait(h_errlog *log, int count, unsigned timeout_ms);
int h_errlog_count(h_errlog *log);
/* Entries recorded at index >= from for this VI; the first one's code and
 * thread are stored when the pointers are not NULL. */
int h_errlog_since(h_errlog *log, int from, VIP_VI_HANDLE vi, VIP_ERROR_CODE *code,
                   pthread_t *thread);
/* Number of recorded errors with this code (and this VI unless NULL). */
int h_errlog_find(h_errlog *log, VIP_ERROR_CODE code, VIP_VI_HANDLE vi);

#endif
