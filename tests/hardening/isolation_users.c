/*
 * isolation_users: another user can neither reach nor read a user's sovia
 * endpoints (docs/ARCHITECTURE.md "Connections": abstract sockets with a
 * SO_PEERCRED check on both sides; statsrv.c for `sovia stat`).
 *
 * The test creates two system users A and B (useradd; skipped with a
 * message when not root or without useradd) and removes them afterwards.
 * A runs a vipl listener, a sovia listener and a live sovia connection.
 * Then, as B:
 *   - VipConnectRequest to A's discriminator: VIP_NO_MATCH (names carry the euid);
 *   - a raw connect to A's abstract name, with a well-formed REQUEST and four
 *     memfds: dropped (end of file, no byte, no descriptor back), and A's
 *     VipConnectWait sees no request;
 *   - sov_connect to A's port: ECONNREFUSED; a raw REQUEST to A's sovia
 *     listener name: dropped; a VipConnectRequest that dials A's name
 *     (VipxViSetConnectUser): refused, A's listener takes only A's;
 *   - a listener of A's that takes every user's requests
 *     (VipxListenAnyUser, as `sovia run` does): B's VI connects, A sees
 *     B's uid (VipxConnPeerUser, foreign), and 200 round trips in which
 *     each side sleeps at once on its completion queue (no spinning)
 *     arrive, each side woken by name through the VI's own armed word
 *     (a lost wake-up leaves a side asleep: no message within 2 s; the
 *     median round trip stays under 5 ms); a raw
 *     REQUEST asking A to wake B through a socket B gives: dropped (A
 *     would speak as A to whatever that socket reaches); eight requesters
 *     that connect and say nothing do not delay B's VI (< 500 ms);
 *   - A's statistics socket: closed without a byte; `sovia stat` run by B
 *     does not list A's process (run by A, it does);
 *   - /proc/<A>/fd/<n> (A's memfds), /proc/<A>/maps, /proc/<A>/mem,
 *     /proc/<A>/map_files: EACCES;
 *   - B binds the abstract name of a discriminator A will use (squatting):
 *     A cannot listen there (VIP_ERROR_RESOURCE: a denial of service the
 *     design accepts), and A's client that dials it refuses to talk to B's
 *     socket: VIP_NO_MATCH, and B receives no byte and no descriptor.
 * Also: every regular file (memfd) A's process has open or mapped has mode
 * 0600 (no group or other bits), and /dev/shm and /tmp gain no
 * sovia/vipl-named entry. A's own client still connects to A afterwards.
 * RDMA-write protection (wrong handle, wrong ptag, out of bounds, region or
 * VI not enabled; no byte touched) is tests/vipl/rdma_write.c's.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vipl_ext.h>

#include "hcommon.h"
#include "hpeer.h"
#include "shm.h"
#include "sovia/sharness.h"

static const char *sovia_cmd; /* the sovia command (argv[1] or HARDENING_SOVIA_CMD) */
static struct hc_user ua, ub;
static char disc_a[48], disc_squat[48], disc_any[48];

#define ROUND_TRIPS 200

/* A VI whose receives complete on a CQ and whose waits sleep at once. */
static void open_sleeper(struct hp *h)
{
    struct hp_opts o = {.mtu = 4096, .nbufs = 8, .bufsz = 4096, .cq = true};
    hp_open(h, &o);
    CHECK(VipxSetWaitSpin(h->nic, 0) == VIP_SUCCESS);
}

/* One message of 8 bytes, received (sleeping) within 2 s, its buffer
 * posted again; the value. */
static uint64_t take(struct hp *h)
{
    VIP_DESCRIPTOR *d = hp_recv(h, 2000);
    CHECK_MSG(d && !(d->CS.Status & VIP_STATUS_ERROR_MASK) && d->CS.Length == 8,
              "no message within 2 s (status %#x)", d ? (unsigned)d->CS.Status : 0u);
    unsigned i = hp_rindex(h, d);
    uint64_t v;
    memcpy(&v, hp_rbuf(h, i), 8);
    hp_post_recv(h, i);
    return v;
}

/* A, for 'Y': one request at the any-user discriminator; its requester's
 * uid, then the echo of ROUND_TRIPS messages. */
static void a_any_user(int chan)
{
    struct hp h;
    open_sleeper(&h);
    VIP_NIC_HANDLE nic = h.nic;
    VIP_NET_ADDRESS *la = hc_addr(disc_any), *ra = hc_addr_room();
    CHECK(VipxListenAnyUser(nic, la) == VIP_SUCCESS);
    s_tok(chan, 'y');
    VIP_VI_ATTRIBUTES rat;
    VIP_CONN_HANDLE ch;
    CHECK(VipConnectWait(nic, la, 5000, ra, &rat, &ch) == VIP_SUCCESS);
    uid_t uid;
    VIP_BOOLEAN foreign;
    CHECK(VipxConnPeerUser(ch, &uid, &foreign) == VIP_SUCCESS);
    s_put_u64(chan, uid);
    s_put_u64(chan, foreign);
    CHECK(VipConnectAccept(ch, h.vi) == VIP_SUCCESS);
    for (unsigned k = 0; k < ROUND_TRIPS; k++) {
        uint64_t v = take(&h);
        CHECK_EQ(hp_send(&h, &v, 8, false, 0) & VIP_STATUS_ERROR_MASK, 0);
    }
    CHECK(VipxUnlisten(nic, la) == VIP_SUCCESS);
    hp_close(&h);
    free(la);
    free(ra);
}

/* ---- User A ------------------------------------------------------------------------------------------ */

static VIP_NIC_HANDLE nic_open(void)
{
    VIP_NIC_HANDLE nic;
    CHECK(VipOpenNic(NULL, &nic) == VIP_SUCCESS);
    return nic;
}

static void a_server(int chan, void *arg)
{
    (void)arg;
    hc_become(&ua);
    VIP_NIC_HANDLE nic = nic_open();
    VIP_NET_ADDRESS *la = hc_addr(disc_a);
    CHECK(VipxListen(nic, la) == VIP_SUCCESS);
    /* A live sovia connection inside this process (segments, statistics). */
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 4);
    int cfd = s_connect(AF_INET, port);
    int sfd = s_accept(lfd);
    s_send_pattern(cfd, 1, 0, 100000, 0);
    s_recv_pattern(sfd, 1, 0, 100000);
    s_put_u64(chan, port);
    for (;;) {
        char cmd;
        s_get(chan, &cmd, 1);
        if (cmd == 'Q')
            break;
        if (cmd == 'W' || cmd == 'L') { /* wait for a request: none ('W') or A's own ('L') */
            VIP_NET_ADDRESS *ra = hc_addr_room();
            VIP_VI_ATTRIBUTES rat;
            VIP_CONN_HANDLE ch;
            if (cmd == 'W')
                s_tok(chan, 'w'); /* waiting from now on */
            VIP_RETURN r = VipConnectWait(nic, la, cmd == 'W' ? 2500 : 5000, ra, &rat, &ch);
            if (r == VIP_SUCCESS) {
                VIP_PROTECTION_HANDLE t;
                CHECK(VipCreatePtag(nic, &t) == VIP_SUCCESS);
                VIP_VI_ATTRIBUTES va = {.ReliabilityLevel = rat.ReliabilityLevel,
                                        .MaxTransferSize = 4096, .Ptag = t};
                VIP_VI_HANDLE vi;
                CHECK(VipCreateVi(nic, &va, NULL, NULL, &vi) == VIP_SUCCESS);
                r = VipConnectAccept(ch, vi);
                VipDisconnect(vi);
                CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
                CHECK(VipDestroyPtag(nic, t) == VIP_SUCCESS);
            }
            free(ra);
            s_put_u64(chan, (uint64_t)r);
        } else if (cmd == 'Y') { /* a listener for every user's requests */
            a_any_user(chan);
        } else if (cmd == 'S') { /* listen on the discriminator B squats */
            VIP_NET_ADDRESS *sa = hc_addr(disc_squat);
            s_put_u64(chan, (uint64_t)VipxListen(nic, sa));
            free(sa);
        }
    }
    SYS(sov_close(cfd));
    SYS(sov_close(sfd));
    SYS(sov_close(lfd));
    free(la);
    CHECK(VipCloseNic(nic) == VIP_SUCCESS);
}

/* A VipConnectRequest from `local` to `remote` of user uid ((uid_t)-1:
 * ours) on a fresh NIC and VI, torn down afterwards; the request's VIP_RETURN. */
static VIP_RETURN dial_user(const char *local, const char *remote, unsigned timeout_ms, uid_t uid)
{
    VIP_NIC_HANDLE nic = nic_open();
    VIP_PROTECTION_HANDLE t;
    CHECK(VipCreatePtag(nic, &t) == VIP_SUCCESS);
    VIP_VI_ATTRIBUTES va = {.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY,
                            .MaxTransferSize = 4096, .Ptag = t};
    VIP_VI_HANDLE vi;
    CHECK(VipCreateVi(nic, &va, NULL, NULL, &vi) == VIP_SUCCESS);
    CHECK(VipxViSetConnectUser(vi, uid) == VIP_SUCCESS);
    VIP_NET_ADDRESS *la = hc_addr(local), *ra = hc_addr(remote);
    VIP_VI_ATTRIBUTES rat;
    VIP_RETURN r = VipConnectRequest(vi, la, ra, timeout_ms, &rat);
    if (r == VIP_SUCCESS)
        VipDisconnect(vi);
    CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
    CHECK(VipDestroyPtag(nic, t) == VIP_SUCCESS);
    CHECK(VipCloseNic(nic) == VIP_SUCCESS);
    free(la);
    free(ra);
    return r;
}

static VIP_RETURN dial(const char *local, const char *remote, unsigned timeout_ms)
{
    return dial_user(local, remote, timeout_ms, (uid_t)-1);
}

/* A's client: connects to `disc` and reports the VIP_RETURN. */
static void a_client(int chan, void *arg)
{
    const char *disc = arg;
    hc_become(&ua);
    char mine[64];
    snprintf(mine, sizeof mine, "%s-c", disc);
    s_put_u64(chan, (uint64_t)dial(mine, disc, 3000));
}

/* ---- User B ------------------------------------------------------------------------------------------ */

struct b_args {
    pid_t a_pid;
    uint16_t a_port;
    int memfd_fds[16];
    int n_memfd_fds;
};

static void b_attacker(int chan, void *arg)
{
    struct b_args *ba = arg;
    hc_become(&ub);
    char name[160];

    /* vipl: the name B dials is B's own. */
    VIP_RETURN r = dial("b-local", disc_a, 2000);
    CHECK_MSG(r == VIP_NO_MATCH, "B's VipConnectRequest to A's discriminator: %s",
              VipxReturnString(r));

    /* Raw: A's listener's abstract name, a REQUEST with descriptors, while
     * A waits in VipConnectWait. */
    s_want(chan, 'g');
    snprintf(name, sizeof name, "sovia-vipl.%u.%s", (unsigned)ua.uid, disc_a);
    int s = hc_abstract_connect(name, strlen(name), SOCK_SEQPACKET);
    CHECK_MSG(s >= 0, "B cannot even reach A's listener name (%s): the test sees nothing",
              s_errname(errno));
    hc_send_request(s);
    hc_expect_dropped(s, "a REQUEST from B to A's vipl listener");
    close(s);

    /* vipl: dialling A's name (while A waits), B is dropped by A's listener. */
    r = dial_user("b-local", disc_a, 2000, ua.uid);
    CHECK_MSG(r == VIP_REJECT || r == VIP_NO_MATCH, "B's VipConnectRequest dialling A's listener: %s",
              VipxReturnString(r));


    /* sovia: B's sov_connect to A's port is refused; raw to its name, dropped. */
    int fd = s_socket(AF_INET, 0);
    struct sockaddr_in a;
    s_addr4(&a, ba->a_port);
    CHECK_ERR(sov_connect(fd, (struct sockaddr *)&a, sizeof a), ECONNREFUSED);
    SYS(sov_close(fd));
    uint16_t pn = htons(ba->a_port);
    int k = snprintf(name, sizeof name, "sovia-vipl.%u.sovia", (unsigned)ua.uid);
    memcpy(name + k, &pn, 2);
    name[k + 2] = 0;
    if (memchr(&pn, 0, 2) == NULL) { /* a port byte of 0 would end our C string */
        s = hc_abstract_connect(name, strlen(name), SOCK_SEQPACKET);
        CHECK_MSG(s >= 0, "B cannot reach A's sovia listener name (%s)", s_errname(errno));
        hc_send_request(s);
        hc_expect_dropped(s, "a REQUEST from B to A's sovia listener");
        close(s);
    }

    /* Statistics: A's socket says nothing to B; B's `sovia stat` lists nothing of A. */
    snprintf(name, sizeof name, "sovia-stat.%u.%d", (unsigned)ua.uid, (int)ba->a_pid);
    s = hc_abstract_connect(name, strlen(name), SOCK_STREAM);
    if (s >= 0) {
        hc_expect_dropped(s, "B asking A's statistics socket");
        close(s);
    } else {
        s_log("A's statistics socket is not up (%s); raw check skipped", s_errname(errno));
    }
    const char *out = hc_sovia_stat(sovia_cmd);
    if (out)
        CHECK_MSG(!hc_stat_lists_pid(out, ba->a_pid), "`sovia stat` run by B lists A's process");
    else
        s_log("SKIP: B cannot run %s (its directory is not open to other users)", sovia_cmd);

    /* /proc: A's descriptors, maps and memory are closed to B. */
    hc_check_proc_closed(ba->a_pid, ba->memfd_fds, ba->n_memfd_fds);

    /* A's listener for every user: B connects and both sleep on their CQs;
     * a raw request that would have A send to B's socket is dropped. */
    s_tok(chan, 'Y');
    s_want(chan, 'y');
    snprintf(name, sizeof name, "sovia-vipl.%u.%s", (unsigned)ua.uid, disc_any);
    s = hc_abstract_connect(name, strlen(name), SOCK_SEQPACKET);
    CHECK_MSG(s >= 0, "B cannot reach A's any-user listener (%s)", s_errname(errno));
    hc_send_request_waking(s, SHM_WAKE_SOCKET);
    hc_expect_dropped(s, "a REQUEST from B asking A to wake it through B's socket");
    close(s);
    /* Requesters that connect and say nothing hold nobody up (each used to
     * hold A's listener for 2 s, one after the other). */
    int silent[8];
    for (int i = 0; i < 8; i++)
        silent[i] = hc_abstract_connect(name, strlen(name), SOCK_SEQPACKET);
    struct hp h;
    open_sleeper(&h);
    CHECK(VipxViSetConnectUser(h.vi, ua.uid) == VIP_SUCCESS);
    VIP_NET_ADDRESS *hl = hc_addr("b-any"), *hr = hc_addr(disc_any);
    double t0 = s_now_ms();
    r = hp_connect(&h, hl, hr, 3000);
    CHECK_MSG(r == VIP_SUCCESS, "B to A's any-user listener, behind 8 silent requesters: %s",
              VipxReturnString(r));
    s_log("B's VI behind 8 silent requesters: connected in %.1f ms", s_now_ms() - t0);
    CHECK_MSG(s_now_ms() - t0 < 500, "B's VI waited %.0f ms behind requesters that say nothing",
              s_now_ms() - t0);
    for (int i = 0; i < 8; i++)
        close(silent[i]);
    double rt[ROUND_TRIPS];
    for (uint64_t k = 0; k < ROUND_TRIPS; k++) {
        double t0 = s_now_ms();
        CHECK_EQ(hp_send(&h, &k, 8, false, 0) & VIP_STATUS_ERROR_MASK, 0);
        CHECK_EQ(take(&h), k);
        rt[k] = s_now_ms() - t0;
    }
    for (int i = 1; i < ROUND_TRIPS; i++) /* insertion sort */
        for (int j = i; j > 0 && rt[j] < rt[j - 1]; j--) {
            double x = rt[j];
            rt[j] = rt[j - 1];
            rt[j - 1] = x;
        }
    s_log("B and A, sleeping on their CQs: round trip median %.3f ms, max %.3f ms",
          rt[ROUND_TRIPS / 2], rt[ROUND_TRIPS - 1]);
    CHECK_MSG(rt[ROUND_TRIPS / 2] < 5.0, "round trips between users take %.1f ms: wake-ups lost "
              "(each then waits for a sleep slice)", rt[ROUND_TRIPS / 2]);
    hp_close(&h);
    free(hl);
    free(hr);
    s_tok(chan, 'Y');

    /* Squatting: B takes the abstract name of a discriminator A will use. */
    snprintf(name, sizeof name, "sovia-vipl.%u.%s", (unsigned)ua.uid, disc_squat);
    int sq = hc_abstract_listen(name, strlen(name));
    s_tok(chan, '2'); /* A tries to listen there and its client dials it */
    s_want(chan, '3');
    int got = accept4(sq, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    CHECK_MSG(got >= 0, "A's client never reached the squatted name: the case tested nothing");
    hc_expect_dropped(got, "A's client meeting B's squatted name");
    close(got);
    close(sq);
}

/* ---- The test (as root) ----------------------------------------------------------------------------- */

static void logic(void)
{
    static struct hc_names shm_before, tmp_before;
    hc_list_ours("/dev/shm", &shm_before);
    hc_list_ours("/tmp", &tmp_before);

    int ac;
    int aid = s_spawn("user-a", a_server, NULL, &ac);
    struct b_args ba = {.a_pid = s_pid(aid)};
    ba.a_port = (uint16_t)s_get_u64(ac);
    ba.n_memfd_fds = hc_memfd_fds(ba.a_pid, ba.memfd_fds, 16);
    int modes = hc_check_memfd_modes(ba.a_pid);
    s_log("A (uid %u) holds %d memfd descriptors; %d memfd files checked for mode 0600",
          (unsigned)ua.uid, ba.n_memfd_fds, modes);
    CHECK_MSG(modes > 0, "A's process has no memfd to check");

    int bc;
    int bid = s_spawn("user-b", b_attacker, &ba, &bc);
    s_tok(ac, 'W');
    s_want(ac, 'w');
    s_tok(bc, 'g');
    VIP_RETURN r = (VIP_RETURN)s_get_u64(ac);
    CHECK_MSG(r == VIP_TIMEOUT, "A's VipConnectWait after B's request: %s (expected a timeout)",
              VipxReturnString(r));
    s_want(bc, 'Y'); /* B asks for A's any-user listener */
    s_tok(ac, 'Y');
    s_want(ac, 'y');
    s_tok(bc, 'y');
    uid_t who = (uid_t)s_get_u64(ac);
    bool foreign = s_get_u64(ac) != 0;
    s_log("A's any-user listener: a request of uid %u, foreign %d", (unsigned)who, foreign);
    CHECK_MSG(who == ub.uid && foreign, "VipxConnPeerUser: uid %u, foreign %d (want %u, 1)",
              (unsigned)who, foreign, (unsigned)ub.uid);
    s_want(bc, 'Y'); /* B is done */
    s_want(bc, '2');
    s_tok(ac, 'S');
    r = (VIP_RETURN)s_get_u64(ac);
    s_log("A listening on a discriminator B squats: %s", VipxReturnString(r));
    CHECK_MSG(r == VIP_ERROR_RESOURCE, "A listening on a squatted name: %s",
              VipxReturnString(r));
    int cc;
    int cid = s_spawn("user-a-client", a_client, disc_squat, &cc);
    r = (VIP_RETURN)s_get_u64(cc);
    s_reap(cid);
    close(cc);
    CHECK_MSG(r == VIP_NO_MATCH, "A's client dialing B's squatted name: %s",
              VipxReturnString(r));
    s_tok(bc, '3');
    s_reap(bid);
    close(bc);

    /* A still serves A. */
    s_tok(ac, 'L');
    cid = s_spawn("user-a-client", a_client, disc_a, &cc);
    VIP_RETURN rc = (VIP_RETURN)s_get_u64(cc);
    r = (VIP_RETURN)s_get_u64(ac);
    s_reap(cid);
    close(cc);
    CHECK_MSG(rc == VIP_SUCCESS && r == VIP_SUCCESS, "A's own client: %s / %s",
              VipxReturnString(rc), VipxReturnString(r));

    /* The stat control: A's own `sovia stat` does list A. */
    pid_t sp = fork();
    if (sp == 0) {
        hc_become(&ua);
        const char *out = hc_sovia_stat(sovia_cmd);
        _exit(!out ? 2 : hc_stat_lists_pid(out, ba.a_pid) ? 0 : 1);
    }
    int st = 0;
    CHECK(waitpid(sp, &st, 0) == sp && WIFEXITED(st));
    CHECK_MSG(WEXITSTATUS(st) != 1, "`sovia stat` run by A does not list A's process");

    s_tok(ac, 'Q');
    s_reap(aid);
    close(ac);
    hc_check_no_new("/dev/shm", &shm_before);
    hc_check_no_new("/tmp", &tmp_before);
}

int main(int argc, char **argv)
{
    s_init("isolation_users", 60);
    sovia_cmd = argc > 1 ? argv[1] : getenv("HARDENING_SOVIA_CMD");
    CHECK_MSG(sovia_cmd != NULL, "usage: %s SOVIA-COMMAND (or HARDENING_SOVIA_CMD)", argv[0]);
    snprintf(disc_a, sizeof disc_a, "iso-%d-a", (int)getpid());
    snprintf(disc_squat, sizeof disc_squat, "iso-%d-s", (int)getpid());
    snprintf(disc_any, sizeof disc_any, "iso-%d-y", (int)getpid());
    /* B runs a copy of the tool (hc_copy_make): the build may be closed to it. */
    static struct hc_copy copy;
    const char *files[] = {sovia_cmd};
    CHECK_MSG(hc_copy_make(&copy, files, 1) == 0, "cannot copy %s for the test users", sovia_cmd);
    sovia_cmd = copy.path[0];
    setenv("LD_LIBRARY_PATH", copy.dir, 1); /* before a RUNPATH the users cannot search */
    if (hc_users_make(&ua, &ub) != 0) {
        hc_copy_remove(&copy);
        s_pass();
    }
    int ok = hc_users_run(&ua, &ub, logic, 50);
    hc_copy_remove(&copy);
    CHECK_MSG(ok, "the isolation checks failed (messages above)");
    s_pass();
}
