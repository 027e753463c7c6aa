/*
 * hostile_vipl: a hostile peer against a native vipl program.
 *
 * Three processes: the victim (vvictim.c: a vipl server with one healthy
 * connection served by its own thread), the healthy peer, and the hostile
 * peer (hpeer.c), which connects through the real shm provider once per
 * round and then writes what a peer can write: the victim's completion
 * slots (sequence numbers, status bits, lengths, inline lengths), the
 * victim's wake-up word and data areas, its own posted count and posted
 * slots (sequence numbers, segment counts, offsets, lengths, totals), its
 * own RDMA-write export table, and its own segment header before connecting;
 * and it tries to make the victim's read-only segments writable.
 *
 * Each named round states what the victim must see: the corruption goes
 * unnoticed (OK), it is a protocol violation that fails that connection
 * only (BREAK: the VI in ERROR with an error status), it only delays (the
 * victim's waits time out, and the connection works afterwards), or the
 * connection is refused. The random rounds (seeded: HARDENING_SEED,
 * HARDENING_ROUNDS) mix honest traffic with writes to every field.
 * Always: the victim never crashes (nor trips ASan/UBSan in sanitizer
 * builds), no wait runs more than 250 ms past its timeout, the canaries
 * around its private receive buffers are intact, no completion claims more
 * bytes than could have landed, every hostile VI can be destroyed, the
 * healthy connection echoes byte-exactly after every round, and when all
 * is over the victim holds the descriptors, memfds, mappings and threads
 * it held before the first round.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hcommon.h"
#include "hpeer.h"
#include "sovia/sharness.h"
#include "vvictim.h"

enum expect { XP_OK, XP_BREAK, XP_TIMEOUT, XP_REFUSED, XP_ANY };
static const char *const expect_name[] = {"ok", "break", "timeout", "refused", "any"};

struct hctx;
struct scenario {
    const char *name;
    void (*run)(struct hctx *hc, const struct scenario *sc);
    enum expect expect;
    unsigned vflags;
    const char *bug; /* known bug: skipped unless HARDENING_TEST_KNOWN_BUGS=1 */
    uint32_t p[3];
};

struct hctx {
    struct hp h;
    uint64_t rng;
    unsigned round;
    const struct vv_names *nm;
};

static struct vv_names names;

/* ---- The hostile peer's moves ---------------------------------------------------------- */

static const struct hp_opts default_opts = {
    .mtu = VV_MTU, .nbufs = 8, .bufsz = VV_BUF, .rdma_len = 4096, .rdma = true};

static VIP_RETURN hx_connect(struct hctx *hc, const struct hp_opts *o, bool open)
{
    if (open)
        hp_open(&hc->h, o);
    char ld[64], rd[64];
    hc_round_disc(ld, sizeof ld, hc->nm->hostile, hc->round);
    hc_round_disc(rd, sizeof rd, hc->nm->victim_round, hc->round);
    VIP_NET_ADDRESS *la = hc_addr(ld), *ra = hc_addr(rd);
    VIP_RETURN r = hp_connect(&hc->h, la, ra, 5000);
    free(la);
    free(ra);
    return r;
}

static void hx_open_connect(struct hctx *hc, const struct hp_opts *o)
{
    VIP_RETURN r = hx_connect(hc, o, true);
    CHECK_MSG(r == VIP_SUCCESS, "hostile connect: %s", VipxReturnString(r));
}

/* A message from the victim, copied out before its buffer is reposted. */
struct answer {
    uint32_t len;
    uint8_t data[VV_BUF];
};

/* The victim's answer to a request: the next completed receive with
 * immediate data `imm`; 0 if none came within ms or the VI broke. */
static int hx_answer(struct hctx *hc, uint32_t imm, unsigned ms, struct answer *a)
{
    double end = s_now_ms() + ms;
    while (s_now_ms() < end) {
        VIP_DESCRIPTOR *d = hp_recv(&hc->h, 50);
        if (!d) {
            if (hp_state(&hc->h) != VIP_STATE_CONNECTED)
                return 0;
            continue;
        }
        if (d->CS.Status & VIP_STATUS_ERROR_MASK)
            return 0;
        unsigned i = hp_rindex(&hc->h, d);
        bool match = d->CS.ImmediateData == imm && d->CS.Length <= VV_BUF;
        if (match) {
            a->len = d->CS.Length;
            memcpy(a->data, hp_rbuf(&hc->h, i), a->len);
        }
        hp_post_recv(&hc->h, i);
        if (match)
            return 1;
    }
    return 0;
}

/* An echo request of len pattern bytes; 1 if it came back exact. With
 * repost false the receive buffer it used stays consumed. */
static int hx_echo(struct hctx *hc, uint32_t len, uint64_t seed, bool repost)
{
    uint8_t buf[VV_BUF];
    s_pattern_fill(buf, len, seed, 0);
    uint32_t st = hp_send(&hc->h, buf, len, true, VC_ECHO);
    if (st & VIP_STATUS_ERROR_MASK)
        return 0;
    if (!repost) { /* take the answer by hand, keep the buffer */
        VIP_DESCRIPTOR *d = hp_recv(&hc->h, 1000);
        return d && !(d->CS.Status & VIP_STATUS_ERROR_MASK) && d->CS.Length == len &&
               s_pattern_check(hp_rbuf(&hc->h, hp_rindex(&hc->h, d)), len, seed, 0) < 0;
    }
    static struct answer a;
    return hx_answer(hc, VC_ECHO, 1000, &a) && a.len == len &&
           s_pattern_check(a.data, len, seed, 0) < 0;
}

/* Asks the victim to RDMA-write len bytes at raddr/handle; returns the
 * victim's status (UINT32_MAX if no answer came). */
static uint32_t hx_rdma(struct hctx *hc, uint64_t raddr, VIP_MEM_HANDLE rh, uint32_t len,
                        uint64_t seed)
{
    struct vv_rdma_cmd c = {.raddr = raddr, .handle = rh, .len = len, .seed = seed};
    if (hp_send(&hc->h, &c, sizeof c, true, VC_RDMA) & VIP_STATUS_ERROR_MASK)
        return UINT32_MAX;
    static struct answer a;
    uint32_t st = UINT32_MAX;
    if (hx_answer(hc, VC_RDMA_DONE, 1000, &a) && a.len == sizeof st)
        memcpy(&st, a.data, sizeof st);
    return st;
}

/* Waits for the victim to break the connection (our VI goes to ERROR). */
static void hx_wait_broken(struct hctx *hc, unsigned ms)
{
    double end = s_now_ms() + ms;
    while (hp_state(&hc->h) == VIP_STATE_CONNECTED && s_now_ms() < end)
        s_sleep_ms(2);
}

static void hx_end(struct hctx *hc)
{
    if (hp_state(&hc->h) == VIP_STATE_CONNECTED)
        hp_send(&hc->h, NULL, 0, true, VC_END);
}

/* ---- Scenarios ---------------------------------------------------------------------------- */

static void sc_baseline(struct hctx *hc, const struct scenario *sc)
{
    (void)sc;
    hx_open_connect(hc, &default_opts);
    static const uint32_t sizes[] = {1, 31, 32, 33, 1000, VV_BUF};
    for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        CHECK_MSG(hx_echo(hc, sizes[i], 100 + i, true), "honest echo of %u bytes failed",
                  sizes[i]);
    memset(hc->h.rdma, 0, hc->h.rdma_len);
    uint32_t st = hx_rdma(hc, (uintptr_t)hc->h.rdma + 100, hc->h.rdma_mh, 1000, 77);
    CHECK_MSG(st == (VIP_STATUS_DONE | VIP_STATUS_OP_RDMA_WRITE), "honest RDMA: %#x", st);
    CHECK(s_pattern_check(hc->h.rdma + 100, 1000, 77, 0) < 0);
    hx_end(hc);
}

/* A completion of our choosing in the victim's next slot: p = status, length, inline_len. */
static void sc_cmpl(struct hctx *hc, const struct scenario *sc)
{
    hx_open_connect(hc, &default_opts);
    CHECK(hx_echo(hc, 64, 1, true));
    uint8_t junk[SHM_INLINE_MAX];
    memset(junk, 0x5a, sizeof junk);
    hp_raw_complete(&hc->h, hp_next_seq(&hc->h), sc->p[0], sc->p[1], VC_ECHO, sc->p[2], junk);
    hx_wait_broken(hc, 1500);
}

/* A sequence number the victim does not expect: nothing happens (its waits
 * time out), and an honest message in that slot afterwards works. */
static void sc_cmpl_seq(struct hctx *hc, const struct scenario *sc)
{
    (void)sc;
    hx_open_connect(hc, &default_opts);
    CHECK(hx_echo(hc, 64, 1, true));
    hp_raw_complete(&hc->h, hp_next_seq(&hc->h) + 7, VIP_STATUS_OP_RECEIVE | VIP_STATUS_IMMEDIATE,
                    16, VC_ECHO, 16, "0123456789abcdef");
    s_sleep_ms(3 * VV_WAIT_MS + 100);
    CHECK_MSG(hx_echo(hc, 200, 2, true), "echo after a stray sequence number failed");
    hx_end(hc);
}

/* The victim sends into our posted slots; p[0] says which lie we tell. */
enum post_lie { PL_POSTED_OVER, PL_POSTED_BACK, PL_POSTED_AHEAD, PL_SEQ, PL_NSEG, PL_NSEG0,
                PL_OFF_LOW, PL_OFF_CMPL, PL_OFF_HIGH, PL_LEN_WRAP, PL_TOTAL };

static void sc_post(struct hctx *hc, const struct scenario *sc)
{
    struct hp_opts o = default_opts;
    o.nbufs = 2; /* the victim uses both up: it must re-read `posted` next */
    hx_open_connect(hc, &o);
    CHECK(hx_echo(hc, 100, 1, false));
    CHECK(hx_echo(hc, 100, 2, false));
    struct shm_ctl *ctl = hp_own_ctl(&hc->h);
    uint32_t used = hc->h.svi->rq_published; /* all consumed by the victim */
    uint32_t depth = hc->h.svi->depth, rx = (uint32_t)hc->h.svi->rx_len;
    struct shm_post *p = &ctl->post[used & (depth - 1)];
    switch ((enum post_lie)sc->p[0]) {
    case PL_POSTED_OVER:
        atomic_store(&ctl->live.posted, used + depth + 1);
        break;
    case PL_POSTED_BACK:
        atomic_store(&ctl->live.posted, used - 1);
        break;
    case PL_POSTED_AHEAD:
        atomic_store(&ctl->live.posted, used + 1); /* slot never filled */
        break;
    default:
        hp_post_recv(&hc->h, 0); /* publishes slot `used`; then we lie in it */
        switch ((enum post_lie)sc->p[0]) {
        case PL_SEQ:
            atomic_store(&p->seq, used + 2);
            break;
        case PL_NSEG:
            p->nseg = SHM_POST_SEGS + 1;
            break;
        case PL_NSEG0:
            p->nseg = 0;
            p->total = 0;
            break;
        case PL_OFF_LOW:
            p->seg[0].off = 0; /* the wake-up word and the completion slots */
            break;
        case PL_OFF_CMPL:
            p->seg[0].off = hc->h.svi->staging_off - 64;
            break;
        case PL_OFF_HIGH:
            p->seg[0].off = rx - 16;
            break;
        case PL_LEN_WRAP:
            p->seg[0].len = UINT32_MAX;
            p->total = UINT32_MAX;
            break;
        default:
            p->total += 1;
            break;
        }
    }
    uint8_t buf[100];
    s_pattern_fill(buf, sizeof buf, 3, 0);
    hp_send(&hc->h, buf, sizeof buf, true, VC_ECHO); /* the victim's echo meets the lie */
    hx_wait_broken(hc, 1500);
}

/* The victim RDMA-writes through our export table; p[0] says which lie. */
enum export_lie { XL_LEN_HUGE, XL_RXOFF_LOW, XL_RXOFF_HIGH, XL_HANDLE };

static void sc_export(struct hctx *hc, const struct scenario *sc)
{
    hx_open_connect(hc, &default_opts);
    uint64_t base = (uintptr_t)hc->h.rdma;
    CHECK(hx_rdma(hc, base, hc->h.rdma_mh, 512, 5) ==
          (VIP_STATUS_DONE | VIP_STATUS_OP_RDMA_WRITE));
    struct shm_reg_export *x = hp_own_export(&hc->h);
    CHECK_MSG(x != NULL, "our RDMA region is not in the export table");
    uint64_t raddr = base;
    uint32_t rx = (uint32_t)hc->h.svi->rx_len;
    switch ((enum export_lie)sc->p[0]) {
    case XL_LEN_HUGE:
        x->len = UINT32_MAX;
        raddr = base + 2ull * rx; /* past the end of our rx segment */
        break;
    case XL_RXOFF_LOW:
        x->rx_off = 0; /* our wake-up word and completion slots */
        break;
    case XL_RXOFF_HIGH:
        x->rx_off = rx - 100;
        break;
    case XL_HANDLE:
        atomic_store(&x->handle, hc->h.rdma_mh ^ 0x40u);
        break;
    }
    hx_rdma(hc, raddr, hc->h.rdma_mh, 1000, 6);
    hx_wait_broken(hc, 1500);
}

/* A thread of ours keeps doing `what` to the shared memory during traffic. */
struct storm {
    struct hctx *hc;
    atomic_bool stop;
    int what; /* 0 ring, 1 scribble data area, 2 flip export fields */
    uint64_t rng;
};

static void *storm_thread(void *arg)
{
    struct storm *s = arg;
    struct shm_peer *p = hp_peer(&s->hc->h);
    hp_foreign_begin();
    while (!atomic_load(&s->stop)) {
        if (s->what == 0) {
            hp_ring(&s->hc->h);
        } else if (s->what == 1) {
            uint32_t off = p->data_off + hc_below(&s->rng, p->rx_size - p->data_off);
            ((volatile uint8_t *)p->rx)[off] = (uint8_t)hc_rand32(&s->rng);
        } else {
            struct shm_reg_export *x = hp_own_export(&s->hc->h);
            if (x) {
                x->len = hp_interesting(&s->rng, x->len);
                x->rx_off = hp_interesting(&s->rng, x->rx_off);
            }
        }
        if ((hc_rand32(&s->rng) & 63) == 0)
            usleep(50);
    }
    hp_foreign_end();
    return NULL;
}

static void sc_storm(struct hctx *hc, const struct scenario *sc)
{
    hx_open_connect(hc, &default_opts);
    struct storm s = {.hc = hc, .what = (int)sc->p[0], .rng = hc->rng};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, storm_thread, &s) == 0);
    for (unsigned i = 0; i < 20; i++) {
        if (s.what == 2) {
            hx_rdma(hc, (uintptr_t)hc->h.rdma, hc->h.rdma_mh, 256, i);
        } else {
            int ok = hx_echo(hc, 1 + (uint32_t)(s_mix64(i) % VV_BUF), i, true);
            /* Scribbled data may come back changed; a wake-up storm changes nothing. */
            CHECK_MSG(ok || s.what == 1, "echo %u failed during the wake-up storm", i);
        }
        if (hp_state(&hc->h) != VIP_STATE_CONNECTED)
            break;
        s_sleep_ms(10);
    }
    atomic_store(&s.stop, true);
    CHECK(pthread_join(t, NULL) == 0);
    hx_end(hc);
}

static void sc_armed_stuck(struct hctx *hc, const struct scenario *sc)
{
    (void)sc;
    hx_open_connect(hc, &default_opts);
    atomic_store(&hp_own_ctl(&hc->h)->live.recv_armed, UINT32_MAX);
    for (unsigned i = 0; i < 10; i++)
        CHECK(hx_echo(hc, 300, i, true));
    hx_end(hc);
}

/* What the victim owns and we only read: its ctl segment and its wake-up
 * "armed" flag are sealed against writable mappings (F_SEAL_FUTURE_WRITE),
 * so we cannot make our read-only mappings writable. */
static void sc_sealed(struct hctx *hc, const struct scenario *sc)
{
    (void)sc;
    hx_open_connect(hc, &default_opts);
    struct shm_peer *p = hp_peer(&hc->h);
    errno = 0;
    CHECK_MSG(mprotect((void *)p->ctl, p->ctl_len, PROT_READ | PROT_WRITE) != 0 &&
                  errno == EACCES,
              "the victim's ctl segment could be made writable (%s)", s_errname(errno));
    errno = 0;
    CHECK_MSG(mprotect(p->armed_map, p->armed_len, PROT_READ | PROT_WRITE) != 0 &&
                  errno == EACCES,
              "the victim's armed flag could be made writable (%s)", s_errname(errno));
    CHECK(hx_echo(hc, 100, 1, true));
    hx_end(hc);
}

/* Our segment header, written before we connect: p[0] = field, p[1] = value
 * (value 0 with field rx_size / data_off: relative, see below). */
enum hdr_field { HF_MAGIC, HF_VERSION, HF_DEPTH, HF_REG_SLOTS, HF_RX_SIZE, HF_DATA_OFF_LOW,
                 HF_DATA_OFF_HIGH };

static void sc_geometry(struct hctx *hc, const struct scenario *sc)
{
    hp_open(&hc->h, &default_opts);
    struct shm_ctl_header *hd = &hp_own_ctl(&hc->h)->hdr;
    switch ((enum hdr_field)sc->p[0]) {
    case HF_MAGIC:
        hd->magic ^= 1;
        break;
    case HF_VERSION:
        hd->version = SHM_VERSION + 1;
        break;
    case HF_DEPTH:
        hd->depth = sc->p[1];
        break;
    case HF_REG_SLOTS:
        hd->reg_slots = SHM_REG_SLOTS + 1;
        break;
    case HF_RX_SIZE:
        hd->rx_size += 4096;
        break;
    case HF_DATA_OFF_LOW:
        hd->data_off = 64; /* over the completion slots */
        break;
    case HF_DATA_OFF_HIGH:
        hd->data_off = hd->rx_size + 64;
        break;
    }
    if (hx_connect(hc, &default_opts, false) == VIP_SUCCESS) {
        hx_end(hc);
        hx_wait_broken(hc, 1500);
    }
}

/* Honest traffic with random writes to every field in between. */
static void sc_random(struct hctx *hc, const struct scenario *sc)
{
    (void)sc;
    hx_open_connect(hc, &default_opts);
    int verbose = getenv("HARDENING_VERBOSE") != NULL;
    unsigned writes = 0;
    for (unsigned step = 0; step < 40 && hp_state(&hc->h) == VIP_STATE_CONNECTED; step++) {
        uint32_t a = hc_below(&hc->rng, 10);
        if (a < 5) {
            hx_echo(hc, 1 + hc_below(&hc->rng, VV_BUF), step, true);
        } else if (a == 5) {
            hx_rdma(hc, (uintptr_t)hc->h.rdma + hc_below(&hc->rng, 2048), hc->h.rdma_mh,
                    1 + hc_below(&hc->rng, 2048), step);
        } else {
            char what[160];
            hp_random_write(&hc->h, &hc->rng, what, sizeof what);
            writes++;
            if (verbose)
                s_log("round %u step %u: %s", hc->round, step, what);
        }
    }
    hx_end(hc);
    s_log("random round %u: %u writes", hc->round, writes);
}


static const struct scenario scenarios[] = {
    {"baseline", sc_baseline, XP_OK, 0, NULL, {0}},
    {"cmpl_seq_stray", sc_cmpl_seq, XP_TIMEOUT, 0, NULL, {0}},
    {"cmpl_status_all_bits", sc_cmpl, XP_BREAK, 0, NULL, {UINT32_MAX, 16, 0}},
    {"cmpl_status_done_bit", sc_cmpl, XP_BREAK, 0, NULL,
     {VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE, 16, 0}},
    {"cmpl_status_op_send", sc_cmpl, XP_BREAK, 0, NULL, {VIP_STATUS_IMMEDIATE, 16, 0}},
    {"cmpl_status_op_rdma_read", sc_cmpl, XP_BREAK, 0, NULL, {VIP_STATUS_OP_RDMA_READ, 16, 0}},
    {"cmpl_status_error_bit", sc_cmpl, XP_BREAK, 0, NULL,
     {VIP_STATUS_OP_RECEIVE | VIP_STATUS_TRANSPORT_ERROR, 16, 0}},
    {"cmpl_length_over", sc_cmpl, XP_BREAK, 0, NULL, {VIP_STATUS_OP_RECEIVE, VV_BUF + 1, 0}},
    {"cmpl_length_huge", sc_cmpl, XP_BREAK, 0, NULL, {VIP_STATUS_OP_RECEIVE, UINT32_MAX, 0}},
    {"cmpl_inline_mismatch", sc_cmpl, XP_BREAK, 0, NULL, {VIP_STATUS_OP_RECEIVE, 10, 11}},
    {"cmpl_inline_over", sc_cmpl, XP_BREAK, 0, NULL,
     {VIP_STATUS_OP_RECEIVE, SHM_INLINE_MAX + 8, SHM_INLINE_MAX + 8}},
    {"cmpl_length_error", sc_cmpl, XP_BREAK, 0, NULL,
     {VIP_STATUS_OP_RECEIVE | VIP_STATUS_LENGTH_ERROR, 0, 0}},
    {"cmpl_rdma_length_huge", sc_cmpl, XP_BREAK, 0, NULL,
     {VIP_STATUS_OP_REMOTE_RDMA_WRITE | VIP_STATUS_IMMEDIATE, UINT32_MAX, 0}},
    {"cmpl_rdma_not_enabled", sc_cmpl, XP_BREAK, VV_NO_RDMA, NULL,
     {VIP_STATUS_OP_REMOTE_RDMA_WRITE | VIP_STATUS_IMMEDIATE, 100, 0}},
    {"posted_over_depth", sc_post, XP_BREAK, 0, NULL, {PL_POSTED_OVER}},
    {"posted_backwards", sc_post, XP_BREAK, 0, NULL, {PL_POSTED_BACK}},
    {"posted_unfilled_slot", sc_post, XP_BREAK, 0, NULL, {PL_POSTED_AHEAD}},
    {"post_seq", sc_post, XP_BREAK, 0, NULL, {PL_SEQ}},
    {"post_nseg_over", sc_post, XP_BREAK, 0, NULL, {PL_NSEG}},
    {"post_nseg_zero", sc_post, XP_BREAK, 0, NULL, {PL_NSEG0}},
    {"post_off_wake_word", sc_post, XP_BREAK, 0, NULL, {PL_OFF_LOW}},
    {"post_off_cmpl_slots", sc_post, XP_BREAK, 0, NULL, {PL_OFF_CMPL}},
    {"post_off_past_end", sc_post, XP_BREAK, 0, NULL, {PL_OFF_HIGH}},
    {"post_len_wrap", sc_post, XP_BREAK, 0, NULL, {PL_LEN_WRAP}},
    {"post_total_mismatch", sc_post, XP_BREAK, 0, NULL, {PL_TOTAL}},
    {"export_len_huge", sc_export, XP_BREAK, 0, NULL, {XL_LEN_HUGE}},
    {"export_rx_off_cmpl", sc_export, XP_BREAK, 0, NULL, {XL_RXOFF_LOW}},
    {"export_rx_off_past_end", sc_export, XP_BREAK, 0, NULL, {XL_RXOFF_HIGH}},
    {"export_handle_changed", sc_export, XP_BREAK, 0, NULL, {XL_HANDLE}},
    {"wake_storm", sc_storm, XP_OK, 0, NULL, {0}},
    {"data_scribble", sc_storm, XP_OK, 0, NULL, {1}},
    {"export_flip_race", sc_storm, XP_ANY, 0, NULL, {2}},
    {"armed_stuck", sc_armed_stuck, XP_OK, 0, NULL, {0}},
    {"victim_ctl_sealed", sc_sealed, XP_OK, 0, NULL, {0}},
    {"hdr_magic", sc_geometry, XP_REFUSED, VV_NO_PREPOST, NULL, {HF_MAGIC}},
    {"hdr_version", sc_geometry, XP_REFUSED, VV_NO_PREPOST, NULL, {HF_VERSION}},
    {"hdr_depth_not_pow2", sc_geometry, XP_REFUSED, VV_NO_PREPOST, NULL, {HF_DEPTH, 24}},
    {"hdr_depth_huge", sc_geometry, XP_REFUSED, VV_NO_PREPOST, NULL, {HF_DEPTH, 8192}},
    {"hdr_depth_shrunk", sc_geometry, XP_ANY, VV_NO_PREPOST, NULL, {HF_DEPTH, 2}},
    {"hdr_reg_slots", sc_geometry, XP_REFUSED, VV_NO_PREPOST, NULL, {HF_REG_SLOTS}},
    {"hdr_rx_size", sc_geometry, XP_REFUSED, VV_NO_PREPOST, NULL, {HF_RX_SIZE}},
    {"hdr_data_off_low", sc_geometry, XP_REFUSED, VV_NO_PREPOST, NULL, {HF_DATA_OFF_LOW}},
    {"hdr_data_off_high", sc_geometry, XP_REFUSED, VV_NO_PREPOST, NULL, {HF_DATA_OFF_HIGH}},
    {"hdr_magic_preposted", sc_geometry, XP_REFUSED, 0, NULL, {HF_MAGIC}},
};
#define NSCEN (sizeof scenarios / sizeof scenarios[0])
#define RANDOM_INDEX NSCEN
static const struct scenario random_scenario = {"random", sc_random, XP_ANY, 0, NULL, {0}};

/* ---- Hostile role ----------------------------------------------------------------------------- */

static void hostile_role(int chan, void *arg)
{
    (void)arg;
    for (;;) {
        uint64_t idx = s_get_u64(chan);
        if (idx == VV_QUIT)
            return;
        struct hctx hc = {.nm = &names};
        hc.rng = s_get_u64(chan);
        hc.round = (unsigned)s_get_u64(chan);
        const struct scenario *sc = idx == RANDOM_INDEX ? &random_scenario : &scenarios[idx];
        sc->run(&hc, sc);
        s_tok(chan, 'd');
        s_want(chan, 'c');
        hp_close(&hc.h);
        s_tok(chan, 'e');
    }
}

/* ---- The test ------------------------------------------------------------------------------------ */

static int vchan, gchan, hchan;
static unsigned round_no;

static void ping_healthy(uint64_t seed)
{
    s_put_u64(gchan, seed);
    s_want(gchan, 'k');
}

static void run_round(uint64_t idx, const struct scenario *sc, uint64_t seed)
{
    s_put_u64(vchan, sc->vflags);
    s_want(vchan, 'r');
    s_put_u64(hchan, idx);
    s_put_u64(hchan, seed);
    s_put_u64(hchan, round_no);
    s_want(hchan, 'd');
    s_tok(vchan, 's');
    struct vv_report r;
    s_get(vchan, &r, sizeof r);
    s_tok(hchan, 'c');
    s_want(hchan, 'e');
    s_log("%s (expect %s): accepted %d, msgs %d, errs %d, timeouts %d, send errs %d, rdma "
          "ok/err %d/%d, state %d, status %#x, protocol errors %llu, worst overrun %.1f ms",
          sc->name, expect_name[sc->expect], r.accepted, r.msgs, r.errs, r.timeouts,
          r.send_errs, r.rdma_ok, r.rdma_errs, r.final_state, r.err_status,
          (unsigned long long)r.proto_errs, r.max_over_ms);
    CHECK_MSG(r.max_over_ms <= VV_SLACK_MS, "%s: a victim wait ran %.0f ms past its timeout",
              sc->name, r.max_over_ms);
    CHECK_MSG(r.canary_bad == 0, "%s: the victim's canaries were overwritten", sc->name);
    CHECK_MSG(r.destroy_ok, "%s: the victim could not destroy the hostile VI", sc->name);
    CHECK_MSG(r.bad_len == 0,
              "%s: the victim got %d completions claiming more bytes than could land",
              sc->name, r.bad_len);
    switch (sc->expect) {
    case XP_OK:
        CHECK_MSG(r.accepted && r.ended && r.final_state == VIP_STATE_CONNECTED &&
                      r.errs + r.send_errs + r.rdma_errs == 0 && r.proto_errs == 0,
                  "%s: the connection should have stayed healthy", sc->name);
        break;
    case XP_BREAK:
        CHECK_MSG(r.accepted && r.final_state == VIP_STATE_ERROR &&
                      r.errs + r.send_errs + r.rdma_errs + r.bad_len >= 1,
                  "%s: the victim should have failed this connection", sc->name);
        break;
    case XP_TIMEOUT:
        CHECK_MSG(r.accepted && r.timeouts >= 1 && r.ended && r.errs == 0 &&
                      r.final_state == VIP_STATE_CONNECTED,
                  "%s: the victim should have waited (and timed out) and gone on", sc->name);
        break;
    case XP_REFUSED:
        CHECK_MSG(!r.accepted, "%s: the victim accepted a peer with a bad segment header",
                  sc->name);
        break;
    case XP_ANY:
        break;
    }
    ping_healthy(0x9000 + round_no);
    round_no++;
}

int main(void)
{
    s_init("hostile_vipl", 170);
    pid_t me = getpid();
    snprintf(names.victim_healthy, sizeof names.victim_healthy, "hv-%d-vh", (int)me);
    snprintf(names.victim_round, sizeof names.victim_round, "hv-%d-vr", (int)me);
    snprintf(names.healthy, sizeof names.healthy, "hv-%d-h", (int)me);
    snprintf(names.hostile, sizeof names.hostile, "hv-%d-x", (int)me);

    s_spawn("victim", vv_victim, &names, &vchan);
    s_want(vchan, 'l');
    s_spawn("healthy", vv_healthy, &names, &gchan);
    s_spawn("hostile", hostile_role, NULL, &hchan);
    ping_healthy(1);

    for (uint64_t i = 0; i < NSCEN; i++)
        if (hc_run_case(scenarios[i].name, scenarios[i].bug))
            run_round(i, &scenarios[i], 1000 + i);
    if (s_case("random")) {
        uint64_t seed = hc_seed("HARDENING_SEED", 20261122);
        unsigned rounds = hc_rounds(30);
        for (unsigned k = 0; k < rounds; k++)
            run_round(RANDOM_INDEX, &random_scenario, s_mix64(seed + k));
    }

    s_put_u64(hchan, VV_QUIT);
    s_put_u64(gchan, VV_QUIT);
    s_want(gchan, 'h');
    s_put_u64(vchan, VV_QUIT);
    s_want(vchan, 'x');
    s_tok(gchan, 'x');
    s_pass();
}
