/*
 * fd_adopt: where the library's descriptors go (src/vipl/fdguard.c). The
 * high base comes from RLIMIT_NOFILE (three quarters of the soft limit, at
 * most 4096) and is read again at most every 100 ms, not at each adopted
 * descriptor (21 getrlimit calls per connection before):
 *   - an adopted descriptor lands at the base or above, and keeps its
 *     close-on-exec flag, set or not;
 *   - with the soft limit lowered since (the base read before is now above
 *     it), the next descriptor still lands high, under the new limit: the
 *     failed move reads the limit again at once;
 *   - with the limit raised again, after 100 ms the base follows it up;
 *   - VipxFdRoom counts ours once when the program's descriptors pass
 *     above them (its lowest free number is then beyond ours): under a
 *     soft limit of 6,000 with 200 of ours at 4096 and the program's
 *     numbers up to 4345, 10 more leave a quarter free (it said no
 *     before: 2 connections in 3 of 10,000 stayed on kernel TCP where
 *     they fitted); with 200 more of the program's they do not;
 *   - in both processes of 20 connected VI pairs, every descriptor the
 *     library holds is close-on-exec (the creators tell the move which
 *     flag the descriptor has instead of asking).
 */
#include "harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <vipl_ext.h>

#define NCONN 20

static char srv_disc[80], cli_disc[NCONN][80];

static void set_soft(rlim_t soft)
{
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    rl.rlim_cur = soft;
    CHECK_MSG(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit(%lu)", (unsigned long)soft);
}

static int adopt_null(bool cloexec)
{
    VipxFdCreateBegin();
    int fd = VipxFdAdopt(open("/dev/null", O_RDONLY | (cloexec ? O_CLOEXEC : 0)));
    VipxFdCreateEnd();
    CHECK(fd >= 0);
    int flags = fcntl(fd, F_GETFD);
    CHECK_MSG(flags >= 0 && !!(flags & FD_CLOEXEC) == cloexec, "fd %d flags %d, cloexec %d", fd,
              flags, cloexec);
    return fd;
}

static void limits(void)
{
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_max < 6000) {
        h_log("skipped the limit cases: hard RLIMIT_NOFILE %lu < 6000", (unsigned long)rl.rlim_max);
        return;
    }
    set_soft(6000); /* base 4096 */
    int a = adopt_null(true), b = adopt_null(false);
    h_log("limit 6000: adopted at %d and %d", a, b);
    CHECK_MSG(a >= 4096 && b >= 4096, "adopted at %d and %d, under 4096", a, b);
    CHECK_EQ(VipxFdClose(a), 0);
    CHECK_EQ(VipxFdClose(b), 0);

    set_soft(1000); /* base 750, at once */
    int c = adopt_null(true);
    h_log("limit lowered to 1000: adopted at %d", c);
    CHECK_MSG(c >= 750 && c < 1000, "adopted at %d, not in [750, 1000)", c);
    CHECK_EQ(VipxFdClose(c), 0);

    set_soft(6000); /* base 4096 again, within 100 ms */
    h_sleep_ms(150);
    int d = adopt_null(true);
    h_log("limit raised to 6000 again: adopted at %d", d);
    CHECK_MSG(d >= 4096, "adopted at %d, under 4096", d);
    CHECK_EQ(VipxFdClose(d), 0);
    set_soft(rl.rlim_cur);
}

/* Every descriptor the library holds is close-on-exec. */
static int open_fds(void)
{
    DIR *dir = opendir("/proc/self/fd");
    CHECK(dir != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL)
        n += e->d_name[0] != '.';
    closedir(dir);
    return n - 1; /* not the directory's own */
}

/* The program opens /dev/null until its newest descriptor is `upto`;
 * each one is kept in mine[]. */
static int mine[6000], nmine;

static int fill_upto(int upto)
{
    int fd;
    do {
        CHECK(nmine < 6000 && (fd = open("/dev/null", O_RDONLY)) >= 0);
        mine[nmine++] = fd;
    } while (fd < upto);
    return fd;
}

static void room(void)
{
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_max < 6000) {
        h_log("skipped the room case: hard RLIMIT_NOFILE %lu < 6000", (unsigned long)rl.rlim_max);
        return;
    }
    set_soft(6000); /* base 4096, a quarter is 1500 */
    h_sleep_ms(150);
    int own[200];
    for (int i = 0; i < 200; i++)
        own[i] = adopt_null(true);
    CHECK_MSG(own[0] >= 4096 && own[199] < 4296, "ours at %d..%d", own[0], own[199]);
    int last = fill_upto(4345);
    int n = open_fds();
    h_log("%d open (200 ours), the program's up to %d: room for 10 more: %d", n, last,
          VipxFdRoom(10));
    CHECK_MSG(n + 10 + 1500 <= 6000, "%d open", n);
    CHECK(VipxFdRoom(10));
    fill_upto(last + 200);
    n = open_fds();
    CHECK_MSG(n + 10 + 1500 > 6000, "%d open", n);
    CHECK(!VipxFdRoom(10));
    while (nmine)
        close(mine[--nmine]);
    for (int i = 0; i < 200; i++)
        CHECK_EQ(VipxFdClose(own[i]), 0);
    set_soft(rl.rlim_cur);
}

static void own_all_cloexec(const char *who)
{
    DIR *dir = opendir("/proc/self/fd");
    CHECK(dir != NULL);
    int own = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.' || fd == dirfd(dir) || !VipxFdIsOwn(fd))
            continue;
        own++;
        int flags = fcntl(fd, F_GETFD);
        CHECK_MSG(flags >= 0 && (flags & FD_CLOEXEC), "%s: own fd %d not close-on-exec", who, fd);
    }
    closedir(dir);
    h_log("%s: %d own descriptors, all close-on-exec", who, own);
    CHECK(own >= NCONN); /* a connection socket each at least */
}

static void peer(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_CQ_HANDLE cq = NULL;
    CHECK_OK(VipCreateCQ(nic, 2 * NCONN, &cq));
    VIP_VI_HANDLE vi[NCONN];
    for (int i = 0; i < NCONN; i++) {
        VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
        vi[i] = h_vi(nic, &va, NULL, cq, 0, 0, 0);
    }
    h_expect(fd, 'L');
    for (int i = 0; i < NCONN; i++)
        h_connect(vi[i], cli_disc[i], srv_disc, NULL);
    own_all_cloexec("client");
    h_signal(fd, 'C');
    h_expect(fd, 'X');
    for (int i = 0; i < NCONN; i++)
        h_vi_teardown(vi[i]);
    CHECK_OK(VipDestroyCQ(cq));
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
}

int main(void)
{
    h_init("fd_adopt", 60);
    limits();
    room();
    h_disc(srv_disc, sizeof srv_disc);
    for (int i = 0; i < NCONN; i++)
        h_disc(cli_disc[i], sizeof cli_disc[i]);
    h_peer p = h_fork(peer, NULL);
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_CQ_HANDLE cq = NULL;
    CHECK_OK(VipCreateCQ(nic, 2 * NCONN, &cq));
    VIP_NET_ADDRESS *la = h_addr(srv_disc);
    CHECK_OK(VipxListen(nic, la));
    VIP_VI_HANDLE vi[NCONN];
    for (int i = 0; i < NCONN; i++) {
        VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
        vi[i] = h_vi(nic, &va, NULL, cq, 0, 0, 0);
    }
    h_signal(p.fd, 'L');
    for (int i = 0; i < NCONN; i++) /* the client connects them in this order */
        h_accept(nic, vi[i], srv_disc, NULL);
    h_expect(p.fd, 'C');
    own_all_cloexec("server");
    h_signal(p.fd, 'X');
    for (int i = 0; i < NCONN; i++)
        h_vi_teardown(vi[i]);
    CHECK_OK(VipxUnlisten(nic, la));
    free(la);
    CHECK_OK(VipDestroyCQ(cq));
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    h_peer_finish(&p);
    return 0;
}
