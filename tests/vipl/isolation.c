/*
 * isolation: shared segments are memfds, not named files.
 *   - While two peer processes are connected (data exchanged both ways), every
 *     mapping of theirs whose name mentions sovia/vipl is a memfd (or the
 *     library / test binary itself), nothing is mapped from /dev/shm, at
 *     least one memfd is mapped, and no open fd points at /dev/shm or at a
 *     sovia/vipl-named file; no filesystem Unix socket carries the name.
 *   - After every test process is gone (one SIGKILLed while connected, one
 *     SIGKILLed holding an unconnected VI, the others exiting, one without
 *     closing anything), /dev/shm and /tmp hold no new sovia/vipl entry.
 * The parent never opens a NIC itself. Isolation from other users is out of
 * scope here.
 */
#include "harness.h"

#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

static char srv[80], cli[80];

static int named_ours(const char *s)
{
    char low[PATH_MAX];
    size_t n = strlen(s);
    if (n >= sizeof low)
        n = sizeof low - 1;
    for (size_t i = 0; i < n; i++)
        low[i] = (char)tolower((unsigned char)s[i]);
    low[n] = 0;
    return strstr(low, "sovia") || strstr(low, "vipl");
}

/* ---- peers ---------------------------------------------------------------------- */

/* A: server; B: client. Exchange one message each way, report, then wait. */
static void peer_conn(int fd, void *arg)
{
    int server = arg != NULL;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 256 * 1024);
    VIP_PVOID abase;
    VIP_ULONG alen;
    CHECK_OK(VipxViArena(vi, &abase, &alen));
    h_mem ar = h_mem_reg(nic, t, abase, 4096, 0);
    h_mem st = h_mem_alloc(nic, t, 8192, 0);
    h_descs d = h_descs_alloc(nic, t, 4);
    h_post_recv1(vi, &d, 0, ar.ptr, ar.mh, 4096);  /* arena receive */
    h_post_recv1(vi, &d, 1, st.ptr, st.mh, 4096);  /* staged receive */
    if (server)
        h_accept(nic, vi, srv, NULL);
    else
        h_connect(vi, cli, srv, NULL);
    h_signal(fd, 'c');
    h_expect(fd, 'g');
    for (unsigned i = 0; i < 2; i++) {
        h_fill_random(st.ptr + 4096, 1000, 10 + i + 2 * (unsigned)server);
        h_post_send1(vi, &d, 2, st.ptr + 4096, st.mh, 1000, 0, 0);
        CHECK_STATUS(h_send_done(vi), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
    }
    for (unsigned i = 0; i < 2; i++) {
        VIP_DESCRIPTOR *x = h_recv_wait(vi, 5000);
        CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE);
        CHECK_RANDOM(i ? st.ptr : ar.ptr, 1000, 10 + i + 2 * (unsigned)!server);
    }
    h_signal(fd, 'C');
    /* B is SIGKILLed here; A is told to finish once B is gone. */
    h_expect(fd, 'F');
    VIP_VI_STATE s = h_wait_state(vi, VIP_STATE_ERROR, 3000);
    CHECK_MSG(s == VIP_STATE_ERROR, "surviving peer's VI is %s after the other was killed",
              h_state_str(s));
    h_mem_free(&ar);
    h_vi_teardown(vi);
    h_mem_free(&st);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
}

/* C: an unconnected VI with an arena and registered memory; killed or _exit()s. */
static void peer_idle(int fd, void *arg)
{
    (void)arg;
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_UNRELIABLE);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 64 * 1024);
    VIP_PVOID abase;
    VIP_ULONG alen;
    CHECK_OK(VipxViArena(vi, &abase, &alen));
    h_mem ar = h_mem_reg(nic, t, abase, alen, 1);
    h_mem st = h_mem_alloc(nic, t, 4096, 0);
    (void)ar;
    (void)st;
    h_signal(fd, 'c');
    h_expect(fd, 'F');
    _exit(0); /* nothing closed */
}

/* ---- parent: inspection ------------------------------------------------------------ */

static int inspect_maps(pid_t pid, int connected)
{
    char path[64], exe[PATH_MAX];
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(path, exe, sizeof exe - 1);
    CHECK(n > 0);
    exe[n] = 0;
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot read %s", path);
    char line[PATH_MAX + 256];
    int memfds = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *name = strchr(line, '/');
        if (!name)
            continue; /* anonymous, [heap], [stack], ... */
        CHECK_MSG(strncmp(name, "/dev/shm/", 9) != 0, "pid %d maps a /dev/shm file: %s",
                  (int)pid, line);
        if (strncmp(name, "/memfd:", 7) == 0) {
            memfds++;
            continue;
        }
        if (!named_ours(name))
            continue;
        /* The only sovia/vipl-named files allowed: the library and the test itself. */
        const char *base = strrchr(name, '/') + 1;
        int is_lib = strncmp(base, "libvipl.so", 10) == 0;
        int is_exe = strcmp(name, exe) == 0;
        CHECK_MSG(is_lib || is_exe, "pid %d maps a sovia/vipl file that is not a memfd: %s",
                  (int)pid, line);
    }
    fclose(f);
    CHECK_MSG(memfds > 0 || !connected, "pid %d (connected, arena and staging in use) maps no memfd",
              (int)pid);
    return memfds;
}

static int inspect_fds(pid_t pid)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    DIR *dp = opendir(dir);
    CHECK_MSG(dp != NULL, "cannot list %s", dir);
    struct dirent *e;
    int memfds = 0;
    while ((e = readdir(dp)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char p[64 + 256], target[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        ssize_t n = readlink(p, target, sizeof target - 1);
        if (n <= 0)
            continue; /* closed meanwhile */
        target[n] = 0;
        CHECK_MSG(strncmp(target, "/dev/shm/", 9) != 0, "pid %d fd %s -> %s", (int)pid,
                  e->d_name, target);
        if (strncmp(target, "/memfd:", 7) == 0) {
            memfds++;
            continue;
        }
        CHECK_MSG(!(target[0] == '/' && named_ours(target)),
                  "pid %d fd %s is a sovia/vipl-named file: %s", (int)pid, e->d_name, target);
    }
    closedir(dp);
    return memfds;
}

static void inspect_unix_sockets(void)
{
    FILE *f = fopen("/proc/net/unix", "r");
    if (!f) {
        h_log("/proc/net/unix not readable; filesystem socket check skipped");
        return;
    }
    char line[PATH_MAX + 256];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *path = strchr(line, '/');
        if (path && named_ours(path))
            FAILF("a filesystem Unix socket carries the name: %s", path);
    }
    fclose(f);
}

/* Names under dir that mention sovia/vipl. */
struct names {
    int n;
    char name[256][256];
};

static void list_ours(const char *dir, struct names *out)
{
    out->n = 0;
    DIR *dp = opendir(dir);
    if (!dp)
        return;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL && out->n < 256)
        if (named_ours(e->d_name))
            snprintf(out->name[out->n++], sizeof out->name[0], "%s", e->d_name);
    closedir(dp);
}

static void check_no_new(const char *dir, const struct names *before)
{
    static struct names after;
    list_ours(dir, &after);
    for (int i = 0; i < after.n; i++) {
        int old = 0;
        for (int j = 0; j < before->n && !old; j++)
            old = strcmp(after.name[i], before->name[j]) == 0;
        CHECK_MSG(old, "%s/%s was left behind by the test's processes", dir, after.name[i]);
    }
}

int main(void)
{
    h_init("isolation", 30);
    static struct names shm_before, tmp_before;
    list_ours("/dev/shm", &shm_before);
    list_ours("/tmp", &tmp_before);
    for (int i = 0; i < tmp_before.n; i++)
        h_log("note: /tmp/%s existed before the test (ignored)", tmp_before.name[i]);

    h_disc(srv, sizeof srv);
    h_disc(cli, sizeof cli);
    h_peer a = h_fork(peer_conn, (void *)1);
    h_peer b = h_fork(peer_conn, NULL);
    h_peer c = h_fork(peer_idle, NULL);
    h_peer e = h_fork(peer_idle, NULL);
    h_expect(a.fd, 'c');
    h_expect(b.fd, 'c');
    h_expect(c.fd, 'c');
    h_expect(e.fd, 'c');
    h_signal(a.fd, 'g');
    h_signal(b.fd, 'g');
    h_expect(a.fd, 'C');
    h_expect(b.fd, 'C');

    pid_t pids[4] = {a.pid, b.pid, c.pid, e.pid};
    for (int i = 0; i < 4; i++) {
        int m = inspect_maps(pids[i], i < 2);
        int f = inspect_fds(pids[i]);
        h_log("peer %d: %d memfd mappings, %d memfd descriptors", i + 1, m, f);
    }
    inspect_unix_sockets();

    h_peer_kill(&b);  /* connected */
    h_peer_kill(&c);  /* unconnected, registered memory */
    h_signal(a.fd, 'F');
    h_signal(e.fd, 'F');
    h_peer_finish(&a);
    h_peer_finish(&e);

    check_no_new("/dev/shm", &shm_before);
    check_no_new("/tmp", &tmp_before);
    inspect_unix_sockets();
    h_pass();
}
