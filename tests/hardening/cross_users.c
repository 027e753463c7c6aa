/*
 * cross_users: connections between programs of different users under
 * `sovia run` are carried, and give the other user nothing the TCP
 * connection itself would not (docs/SECURITY.md, "Another user"; the
 * mechanism: docs/TRANSPARENT.md, "Transparent mode", "Users").
 *
 * Two system users A and B (isorun.h; skipped, exit 77, when not root),
 * plain-libc programs started through `sovia run`:
 *   both_ways  A's client of B's server and B's client of A's server are
 *              carried, byte-exact, with no wait (< 500 ms to connect and to
 *              the first echo); neither side holds a descriptor of the
 *              other's sockets (its kernel socket, its completion queue's
 *              wake-up socket) nor maps any of its memory but that
 *              connection's two ring segments (sovia-vi-ctl, sovia-vi-rx; under
 *              sovia run both in one memfd, sovia-vi-ctlrx).
 *              The same check between A's own client and server finds A's
 *              completion-queue socket shared (the control: it sees what it
 *              looks for).
 *   prefork    a server started as root whose worker becomes B (nginx as
 *              root with `user nobody`): clients of A, B and root are
 *              carried through the worker, each redirected, with no wait;
 *              the worker holds nothing of A's or root's but rings (not
 *              under AddressSanitizer: a forked child starting threads).
 *   impersonate  B connects a VI to A's shadow listener naming the client
 *              port of A's client, before that client, with B's own kernel
 *              connection to the port as its token: A's server pairs A's
 *              client (carried, byte-exact) and B's VI gets no packet.
 *   claim      B claims A's client's connection (naming it, with a ticket
 *              whose address B itself listens at, under A's name, and B's
 *              own connection to the port as the token) while it waits for
 *              A's server: refused; A's client is paired by A's server, and
 *              nothing reaches B's ticket address.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hrprog.h"
#include "hsovia.h"
#include "isorun.h"
#include "sovia/sharness.h"

#define MAX_HELD 1024

/* ---- What a process holds of another's -------------------------------------------- */

enum held_kind { HELD_SOCKET, HELD_RING, HELD_OTHER_MEMFD };

struct held {
    int n;
    struct {
        unsigned long ino;
        enum held_kind kind;
        char name[48];
    } e[MAX_HELD];
};

static void held_add(struct held *h, unsigned long ino, enum held_kind kind, const char *name)
{
    for (int i = 0; i < h->n; i++)
        if (h->e[i].ino == ino && (h->e[i].kind == HELD_SOCKET) == (kind == HELD_SOCKET))
            return;
    CHECK(h->n < MAX_HELD);
    h->e[h->n].ino = ino;
    h->e[h->n].kind = kind;
    /* A name cut to fit is only for the messages (a copy, not snprintf:
     * GCC's -Wformat-truncation fails Release builds on that). */
    size_t len = strnlen(name, sizeof h->e[h->n].name - 1);
    memcpy(h->e[h->n].name, name, len);
    h->e[h->n].name[len] = 0;
    h->n++;
}

static enum held_kind memfd_kind(const char *name)
{
    /* sovia-vi-ctl, and sovia-vi-ctlrx (an inheritable VI's one memfd). */
    return strncmp(name, "/memfd:sovia-vi-ctl", 19) == 0 || strncmp(name, "/memfd:sovia-vi-rx", 18) == 0
               ? HELD_RING
               : HELD_OTHER_MEMFD;
}

/* sovia's memfds only (the test gives each user's programs one log). */
static bool sovia_memfd(const char *name)
{
    return strncmp(name, "/memfd:sovia-", 13) == 0;
}

/* The sockets and memfds process pid has open, and the memfds it maps
 * (read as root). */
static void held_of(pid_t pid, struct held *h)
{
    h->n = 0;
    char dir[64], path[PATH_MAX], link[PATH_MAX];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    CHECK_MSG(d, "cannot list %s", dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ssize_t n = readlink(path, link, sizeof link - 1);
        if (n <= 0)
            continue;
        link[n] = 0;
        unsigned long ino;
        struct stat st;
        if (sscanf(link, "socket:[%lu]", &ino) == 1)
            held_add(h, ino, HELD_SOCKET, link);
        else if (sovia_memfd(link) && stat(path, &st) == 0)
            held_add(h, (unsigned long)st.st_ino, memfd_kind(link), link);
    }
    closedir(d);
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    CHECK_MSG(f, "cannot read %s", path);
    char line[PATH_MAX + 128];
    while (fgets(line, sizeof line, f)) {
        unsigned long ino;
        char name[PATH_MAX];
        if (sscanf(line, "%*s %*s %*s %*s %lu %4095s", &ino, name) == 2 && sovia_memfd(name))
            held_add(h, ino, memfd_kind(name), name);
    }
    fclose(f);
}

/* How many of owner's sockets and non-ring memfds process `other` holds
 * or maps (each logged); *rings: how many of owner's ring segments. */
static int shared_beyond_rings(pid_t owner, pid_t other, int *rings)
{
    static struct held ho, hx;
    held_of(owner, &ho);
    held_of(other, &hx);
    int bad = 0;
    *rings = 0;
    for (int i = 0; i < hx.n; i++)
        for (int j = 0; j < ho.n; j++) {
            if (hx.e[i].ino != ho.e[j].ino ||
                (hx.e[i].kind == HELD_SOCKET) != (ho.e[j].kind == HELD_SOCKET))
                continue;
            if (ho.e[j].kind == HELD_RING) {
                ++*rings;
            } else {
                s_log("process %d holds %s of process %d", (int)other, ho.e[j].name, (int)owner);
                bad++;
            }
        }
    return bad;
}

/* Nothing of the client's reaches the server of another user but rings,
 * and the other way round; some rings do (carried). */
static void check_only_rings(pid_t client, pid_t server, const char *what)
{
    int r1, r2;
    int bad = shared_beyond_rings(client, server, &r1) + shared_beyond_rings(server, client, &r2);
    s_log("%s: %d and %d ring segments shared, nothing else", what, r1, r2);
    CHECK_MSG(bad == 0, "%s: %d sockets or other memory of one user held by the other", what,
              bad);
    CHECK_MSG(r1 > 0 && r2 > 0, "%s: no ring shared (%d, %d): not carried?", what, r1, r2);
}

/* ---- The cases (as root) ------------------------------------------------------------------- */

static void check_carried(int log, pid_t pid, const char *who, unsigned redirected)
{
    struct hr_stat st = hr_stat_of(log, pid);
    s_log("%s: carried %u fell back %u kernel %u redirected %u", who, st.carried, st.fell_back,
          st.kernel, st.redirected);
    CHECK_MSG(st.carried == 1 && st.fell_back == 0 && st.kernel == 0 &&
                  st.redirected == redirected,
              "%s: carried %u, fell back %u, kernel %u, redirected %u (want 1, 0, 0, %u)", who,
              st.carried, st.fell_back, st.kernel, st.redirected, redirected);
}

static void both_ways(int log_a, int log_b)
{
    int asc, bsc, ac, bc, ac2;
    int as = iso_start("a-server", &iso_a, log_a, "server", 0, 0, &asc);
    int bs = iso_start("b-server", &iso_b, log_b, "server", 0, 0, &bsc);
    uint16_t aport = (uint16_t)s_get_u64(asc), bport = (uint16_t)s_get_u64(bsc);
    int bcl = iso_start("b-client-of-a", &iso_b, log_b, "client", aport, 0, &bc);
    iso_check_prompt(bc, "B's client of A's server");
    int acl = iso_start("a-client-of-b", &iso_a, log_a, "client", bport, 0, &ac);
    iso_check_prompt(ac, "A's client of B's server");
    int acl2 = iso_start("a-client-of-a", &iso_a, log_a, "client", aport, 0, &ac2);
    iso_check_prompt(ac2, "A's client of A's server");

    check_only_rings(s_pid(bcl), s_pid(as), "B's client and A's server");
    check_only_rings(s_pid(acl), s_pid(bs), "A's client and B's server");
    int rings, same = shared_beyond_rings(s_pid(acl2), s_pid(as), &rings);
    s_log("control, A's client and A's server (one user): %d sockets or other memory shared", same);
    CHECK_MSG(same > 0, "the same user's server holds nothing of its client's but rings: the "
              "check would not see a completion queue's socket");

    s_tok(bc, 'E');
    s_log("B's client of A's server echoes again in %.1f ms", s_get_f64(bc));
    pid_t pids[3] = {s_pid(bcl), s_pid(acl), s_pid(acl2)}, spids[2] = {s_pid(as), s_pid(bs)};
    iso_quit(bcl, bc);
    iso_quit(acl, ac);
    iso_quit(acl2, ac2);
    CHECK_EQ(iso_stop_server(as, asc, NULL), 2);
    CHECK_EQ(iso_stop_server(bs, bsc, NULL), 1);
    check_carried(log_b, pids[0], "B's client of A's server", 0);
    check_carried(log_a, pids[1], "A's client of B's server", 0);
    check_carried(log_a, pids[2], "A's client of A's server", 0);
    struct hr_stat sa = hr_stat_of(log_a, spids[0]), sb = hr_stat_of(log_b, spids[1]);
    CHECK_MSG(sa.carried == 2 && sa.kernel == 0 && sb.carried == 1 && sb.kernel == 0,
              "servers: A's carried %u kernel %u (want 2, 0), B's carried %u kernel %u (want 1, 0)",
              sa.carried, sa.kernel, sb.carried, sb.kernel);
}

static void prefork(int log_a, int log_b, int log_root)
{
    int sc, ac, bc, rc;
    /* The server's record is written by root, its worker's by B. */
    int sid = iso_start("root-prefork", NULL, log_b, "prefork", iso_b.uid, 0, &sc);
    uint16_t port = (uint16_t)s_get_u64(sc);
    int aid = iso_start("a-client", &iso_a, log_a, "client", port, 0, &ac);
    iso_check_prompt(ac, "A's client of the worker (B)");
    int bid = iso_start("b-client", &iso_b, log_b, "client", port, 0, &bc);
    iso_check_prompt(bc, "B's client of the worker (B)");
    int rid = iso_start("root-client", NULL, log_root, "client", port, 0, &rc);
    iso_check_prompt(rc, "root's client of the worker (B)");

    /* The worker: the server's only child. */
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)s_pid(sid), (int)s_pid(sid));
    FILE *f = fopen(path, "r");
    CHECK_MSG(f && fgets(buf, sizeof buf, f), "cannot read %s", path);
    fclose(f);
    pid_t worker = (pid_t)atoi(buf);
    CHECK_MSG(worker > 0, "no worker in %s", path);
    check_only_rings(s_pid(aid), worker, "A's client and the worker (B)");
    check_only_rings(s_pid(rid), worker, "root's client and the worker (B)");

    pid_t pids[3] = {s_pid(aid), s_pid(bid), s_pid(rid)};
    iso_quit(aid, ac);
    iso_quit(bid, bc);
    iso_quit(rid, rc);
    pid_t wpid;
    CHECK_EQ(iso_stop_server(sid, sc, &wpid), 3);
    CHECK_EQ(wpid, worker);
    check_carried(log_a, pids[0], "A's client", 1);
    check_carried(log_b, pids[1], "B's client", 1);
    check_carried(log_root, pids[2], "root's client", 1);
    /* (The master took no connection: it writes no record.) */
    struct hr_stat w = hr_stat_of(log_b, worker);
    s_log("the worker: carried %u fell back %u kernel %u", w.carried, w.fell_back, w.kernel);
    CHECK_MSG(w.carried == 3 && w.kernel == 0 && w.fell_back == 0,
              "the worker carried %u, kernel %u, fell back %u (want 3, 0, 0)", w.carried,
              w.kernel, w.fell_back);
}

/* A kernel connection of B's own to 127.0.0.1:port. */
static int b_connection(uint16_t port)
{
    int fd = SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    SYS(connect(fd, (struct sockaddr *)&to, sizeof to));
    return fd;
}

struct impostor {
    uint16_t port, lport;
};

/* B: a VI to A's port naming A's client's port, B's connection as token;
 * then no packet may come, and the VI ends when A's server drops it. */
static void b_impostor(int chan, void *arg)
{
    const struct impostor *im = arg;
    hc_become(&iso_b);
    int own = b_connection(im->port);
    struct hs s;
    VIP_RETURN r = hs_connect_to(&s, im->lport, im->port, own, iso_a.uid);
    s_log("B's VI naming A's client's port: %s", VipxReturnString(r));
    s_tok(chan, 'v');
    s_want(chan, 'p'); /* A's server paired A's client */
    if (r == VIP_SUCCESS) {
        CHECK_MSG(!hs_await_wakeup(&s, 300), "A's server sent its WAKEUP to B's impostor VI");
        CHECK_MSG(s.rx_len == 0, "B's impostor VI received %zu bytes", s.rx_len);
        CHECK_MSG(hs_wait_broken(&s, 2000), "A's server kept B's impostor VI");
        hs_close(&s);
    }
    close(own);
}

static void impersonate(int log_a)
{
    uint16_t lport = iso_unused_port();
    int sc, ac, bc;
    int sid = iso_start("a-server-held", &iso_a, log_a, "held", 0, 0, &sc);
    struct impostor im = {(uint16_t)s_get_u64(sc), lport};
    int bid = s_spawn("b-impostor", b_impostor, &im, &bc);
    s_want(bc, 'v');
    s_tok(sc, 'A'); /* B's own kernel connection (kernel TCP) */
    s_want(sc, 'a');
    int aid = iso_start("a-client", &iso_a, log_a, "client", im.port, lport, &ac);
    s_want(ac, 'c');
    s_tok(sc, 'A'); /* A's client: paired with A's client's VI only */
    s_want(sc, 'a');
    double connect_ms = s_get_f64(ac), first_ms = s_get_f64(ac);
    s_log("A's client: connect() %.1f ms, first echo %.1f ms", connect_ms, first_ms);
    s_tok(bc, 'p');
    s_reap(bid);
    close(bc);
    pid_t a_pid = s_pid(aid);
    iso_quit(aid, ac);
    CHECK_EQ(iso_stop_server(sid, sc, NULL), 2);
    check_carried(log_a, a_pid, "A's client (B's impostor VI queued before it)", 0);
}

struct claimer {
    uint16_t port, lport;
    uint32_t ticket;
};

/* B: squats the address A's client would be redirected to for `ticket`,
 * then claims A's client's connection with that ticket and B's own
 * connection to the port as token: refused. Answers how many dials
 * reached the squatted ticket address. */
static void b_claimer(int chan, void *arg)
{
    const struct claimer *cl = arg;
    hc_become(&iso_b);
    char name[96];
    uint8_t t[5] = {'T'};
    memcpy(t + 1, &cl->ticket, 4);
    int sq = hc_abstract_listen(name, iso_shadow_name(name, sizeof name, iso_a.uid, cl->port, t, 5));
    SYS(fcntl(sq, F_SETFL, O_NONBLOCK));
    int own = b_connection(cl->port);
    /* A claim's address (src/sovia/addr.c): the server end, then 'C', the
     * ticket, the client's port and address. */
    uint8_t disc[5 + 2 + 1 + 4 + 2 + 4] = {'s', 'o', 'v', 'i', 'a'};
    uint16_t p = htons(cl->port), lp = htons(cl->lport);
    uint32_t lo = htonl(INADDR_LOOPBACK);
    memcpy(disc + 5, &p, 2);
    disc[7] = 'C';
    memcpy(disc + 8, &cl->ticket, 4);
    memcpy(disc + 12, &lp, 2);
    memcpy(disc + 14, &lo, 4);
    VIP_NET_ADDRESS *from = hc_addr_bytes(disc, sizeof disc);
    uint8_t to_disc[7] = {'s', 'o', 'v', 'i', 'a'};
    memcpy(to_disc + 5, &p, 2);
    VIP_NET_ADDRESS *to = hc_addr_bytes(to_disc, sizeof to_disc);
    struct hp h;
    struct hp_opts o = {.mtu = 4096, .nbufs = 1, .bufsz = 4096};
    hp_open(&h, &o);
    CHECK(VipxViSetConnectToken(h.vi, own) == VIP_SUCCESS);
    CHECK(VipxViSetConnectUser(h.vi, iso_a.uid) == VIP_SUCCESS);
    VIP_RETURN r = hp_connect(&h, from, to, 2000);
    s_log("B's claim of A's client's connection: %s", VipxReturnString(r));
    CHECK_MSG(r == VIP_REJECT, "B's claim of A's client's connection: %s, not refused",
              VipxReturnString(r));
    hp_close(&h);
    free(from);
    free(to);
    s_tok(chan, 'k');
    s_want(chan, 'p');
    uint64_t dials = 0;
    int got;
    while ((got = accept4(sq, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        hc_expect_dropped(got, "a dial of A's client reaching B's squatted ticket address");
        close(got);
        dials++;
    }
    close(sq);
    close(own);
    s_put_u64(chan, dials);
}

static void claim(int log_a)
{
    struct claimer cl = {.lport = iso_unused_port(), .ticket = 0x01234567};
    int sc, ac, bc;
    int sid = iso_start("a-server-held", &iso_a, log_a, "held", 0, 0, &sc);
    cl.port = (uint16_t)s_get_u64(sc);
    int aid = iso_start("a-client", &iso_a, log_a, "client", cl.port, cl.lport, &ac);
    s_want(ac, 'c'); /* its VI waits at A's shadow listener */
    int bid = s_spawn("b-claimer", b_claimer, &cl, &bc);
    s_want(bc, 'k');
    s_tok(sc, 'A'); /* A's client (first in the backlog) */
    s_want(sc, 'a');
    double connect_ms = s_get_f64(ac), first_ms = s_get_f64(ac);
    s_log("A's client: connect() %.1f ms, first echo %.1f ms", connect_ms, first_ms);
    s_tok(bc, 'p');
    uint64_t dials = s_get_u64(bc);
    s_reap(bid);
    close(bc);
    CHECK_MSG(dials == 0, "%llu dials reached B's squatted ticket address",
              (unsigned long long)dials);
    pid_t a_pid = s_pid(aid);
    iso_quit(aid, ac);
    s_tok(sc, 'A'); /* B's own connection */
    s_want(sc, 'a');
    CHECK_EQ(iso_stop_server(sid, sc, NULL), 2);
    check_carried(log_a, a_pid, "A's client (B claimed its connection)", 0);
}

static bool asan_build(void)
{
#if defined(__SANITIZE_ADDRESS__)
    return true;
#else
    return false;
#endif
}

static void logic(void)
{
    static struct hc_names shm_before, tmp_before;
    hc_list_ours("/dev/shm", &shm_before);
    hc_list_ours("/tmp", &tmp_before);
    int log_a = iso_user_log(&iso_a), log_b = iso_user_log(&iso_b);
    struct hc_user root = {"root", 0, 0};
    int log_root = iso_user_log(&root);
    if (s_case("both_ways"))
        both_ways(log_a, log_b);
    if (s_case("prefork")) {
        /* The worker is a forked child that starts threads (its claim, its
         * ticketed listener): tests/preload/prefork.c says why not here. */
        if (asan_build())
            s_log("SKIP prefork: AddressSanitizer's allocator is not fork-safe with threads");
        else
            prefork(log_a, log_b, log_root);
    }
    if (s_case("impersonate"))
        impersonate(log_a);
    if (s_case("claim"))
        claim(log_a);
    close(log_a);
    close(log_b);
    close(log_root);
    iso_check_not_owned("/tmp");
    iso_check_not_owned("/dev/shm");
    hc_check_no_new("/dev/shm", &shm_before);
    hc_check_no_new("/tmp", &tmp_before);
}

int main(int argc, char **argv)
{
    return iso_main(argc, argv, "cross_users", logic);
}
