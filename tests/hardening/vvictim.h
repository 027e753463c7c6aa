/*
 * vvictim.h - the native vipl victim of hostile_vipl (tests/hardening/).
 *
 * The victim is an ordinary vipl server. It keeps one healthy connection
 * served by its own thread (an echo) and, round after round, accepts one
 * connection from the hostile peer and serves it until the connection
 * breaks, the test says stop, or a deadline passes. On the hostile
 * connection it answers commands carried in the immediate data:
 *   VC_ECHO  send the payload back (exercises the victim's send path,
 *            which reads the hostile peer's posted slots);
 *   VC_RDMA  RDMA-write `len` pattern bytes to the peer's (raddr, handle)
 *            (reads the peer's export table), then report the status;
 *   VC_END   the round is over.
 * Every wait has a timeout, and the victim records how far any wait ran
 * past it, what completed and how, and whether the canaries around its
 * private receive buffers are intact. The report goes to the test.
 */
#ifndef SOVIA_TESTS_HARDENING_VVICTIM_H
#define SOVIA_TESTS_HARDENING_VVICTIM_H

#include <stdint.h>

#define VC_ECHO 0x45434830u /* "ECH0" */
#define VC_RDMA 0x52444d41u /* "RDMA" */
#define VC_RDMA_DONE 0x52444d44u
#define VC_END 0x454e4421u

#define VV_MTU 4096u
#define VV_NRECV 8u   /* even: in the arena (zero copy); odd: private, staged */
#define VV_BUF 1024u
#define VV_ARENA (64u * 1024u)
#define VV_WAIT_MS 200u
#define VV_SLACK_MS 250.0

/* Round options for the victim. */
#define VV_NO_RDMA 1u     /* the hostile-facing VI lacks EnableRdmaWrite */
#define VV_NO_PREPOST 2u  /* post receives only once connected */

struct vv_rdma_cmd {
    uint64_t raddr;
    uint32_t handle;
    uint32_t len;
    uint64_t seed;
};

struct vv_report {
    int32_t accepted;     /* VipConnectAccept succeeded */
    int32_t msgs;         /* receives completed without error */
    int32_t errs;         /* receives completed with an error status */
    int32_t timeouts;     /* VipRecvWait timeouts */
    int32_t ended;        /* VC_END seen */
    int32_t final_state;  /* VIP_VI_STATE when the round ended */
    uint32_t err_status;  /* first error status (receive or send) */
    int32_t send_errs, rdma_ok, rdma_errs;
    int32_t bad_len;      /* completions claiming more bytes than could land */
    int32_t canary_bad;
    int32_t destroy_ok;   /* the VI could be destroyed afterwards */
    double max_over_ms;   /* worst wait beyond its timeout */
    uint64_t proto_errs;  /* VIPX_VI_STATS.PeerProtocolErrors */
};

/* Names of the test's discriminators (unique per run). */
struct vv_names {
    char victim_healthy[64]; /* the victim listens here for the healthy peer */
    char victim_round[48];   /* + round number: the hostile peer's rounds */
    char healthy[64];
    char hostile[48];
};

#define VV_QUIT UINT64_MAX /* on a role's channel: no more rounds / pings */

/* Roles (sharness s_fn). The victim: 'l' once listening; per round it
 * reads the round's flags, says 'r' when listening, serves, reads 's',
 * writes its struct vv_report; VV_QUIT ends it ('x' when done). The
 * healthy peer: per seed an echo checked byte-exact ('k'); VV_QUIT sends
 * VC_END ('h') and it closes on 'x'. */
void vv_victim(int chan, void *arg);
void vv_healthy(int chan, void *arg);

#endif
