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
 *     listener name: dropped;
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
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hcommon.h"
#include "shm.h" /* the connection messages, to forge a REQUEST */
#include "sovia/sharness.h"

static const char *sovia_cmd; /* the sovia command (argv[1] or HARDENING_SOVIA_CMD) */
static char name_a[32], name_b[32];
static uid_t uid_a, uid_b;
static gid_t gid_a, gid_b;
static char disc_a[48], disc_squat[48];

/* ---- Users -------------------------------------------------------------------------------------- */

static int run_quiet(char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int add_user(const char *name, uid_t *uid, gid_t *gid)
{
    char *argv[] = {"/usr/sbin/useradd", "--system", "--no-create-home", "--shell",
                    "/usr/sbin/nologin", (char *)name, NULL};
    if (run_quiet(argv) != 0)
        return -1;
    struct passwd *pw = getpwnam(name);
    if (!pw)
        return -1;
    *uid = pw->pw_uid;
    *gid = pw->pw_gid;
    return 0;
}

static void del_user(const char *name)
{
    char *argv[] = {"/usr/sbin/userdel", (char *)name, NULL};
    run_quiet(argv);
}

/* In a forked role: become the user for good (and stay inspectable and
 * killable as an ordinary process of that user is). */
static void become(uid_t uid, gid_t gid)
{
    CHECK(setgroups(0, NULL) == 0);
    CHECK(setgid(gid) == 0);
    CHECK(setuid(uid) == 0);
    CHECK(geteuid() == uid && getuid() == uid);
    prctl(PR_SET_DUMPABLE, 1);         /* /proc/<pid> owned by the user, as usual */
    prctl(PR_SET_PDEATHSIG, SIGKILL);  /* cleared by the credential change */
}

/* ---- User A ------------------------------------------------------------------------------------------ */

static VIP_NIC_HANDLE nic_open(void)
{
    VIP_NIC_HANDLE nic;
    CHECK(VipOpenNic(NULL, &nic) == VIP_SUCCESS);
    return nic;
}

/* Modes of every regular file the process has open or mapped. */
static int check_file_modes(pid_t pid)
{
    int n = 0;
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char p[400], target[256] = "";
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        ssize_t k = readlink(p, target, sizeof target - 1);
        target[k > 0 ? k : 0] = 0;
        if (strncmp(target, "/memfd:", 7) != 0)
            continue; /* the program's own files (none here but the binary's) */
        CHECK_MSG(!(st.st_mode & 077), "fd %s (%s) has mode %o", e->d_name, target,
                  (unsigned)(st.st_mode & 0777));
        n++;
    }
    closedir(d);
    snprintf(dir, sizeof dir, "/proc/%d/map_files", (int)pid);
    d = opendir(dir);
    CHECK(d != NULL);
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char p[400], target[256] = "";
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        ssize_t k = readlink(p, target, sizeof target - 1);
        target[k > 0 ? k : 0] = 0;
        struct stat st;
        if (strncmp(target, "/memfd:", 7) != 0 || stat(p, &st) != 0)
            continue;
        CHECK_MSG(!(st.st_mode & 077), "mapping %s (%s) has mode %o", e->d_name, target,
                  (unsigned)(st.st_mode & 0777));
        n++;
    }
    closedir(d);
    return n;
}

static void a_server(int chan, void *arg)
{
    (void)arg;
    become(uid_a, gid_a);
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

/* A VipConnectRequest from `local` to `remote` on a fresh NIC and VI,
 * torn down afterwards; the request's VIP_RETURN. */
static VIP_RETURN dial(const char *local, const char *remote, unsigned timeout_ms)
{
    VIP_NIC_HANDLE nic = nic_open();
    VIP_PROTECTION_HANDLE t;
    CHECK(VipCreatePtag(nic, &t) == VIP_SUCCESS);
    VIP_VI_ATTRIBUTES va = {.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY,
                            .MaxTransferSize = 4096, .Ptag = t};
    VIP_VI_HANDLE vi;
    CHECK(VipCreateVi(nic, &va, NULL, NULL, &vi) == VIP_SUCCESS);
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

/* A's client: connects to `disc` and reports the VIP_RETURN. */
static void a_client(int chan, void *arg)
{
    const char *disc = arg;
    become(uid_a, gid_a);
    char mine[64];
    snprintf(mine, sizeof mine, "%s-c", disc);
    s_put_u64(chan, (uint64_t)dial(mine, disc, 3000));
}

/* ---- User B ------------------------------------------------------------------------------------------ */

/* A connect to an abstract Unix name (SOCK_SEQPACKET or SOCK_STREAM); -1 with errno. */
static int abstract_connect(const char *name, int type)
{
    int s = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
    CHECK(s >= 0);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    size_t n = strlen(name);
    memcpy(sun.sun_path + 1, name, n);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
    if (connect(s, (struct sockaddr *)&sun, len) != 0) {
        int e = errno;
        close(s);
        errno = e;
        return -1;
    }
    return s;
}

/* Waits for what the other side sends: 0 (end of file / reset) is the
 * expected answer; a byte or a descriptor fails. */
static void expect_dropped(int s, const char *what)
{
    struct pollfd p = {s, POLLIN, 0};
    CHECK_MSG(poll(&p, 1, 3000) == 1, "%s: no answer at all within 3 s", what);
    char buf[512];
    union {
        char c[CMSG_SPACE(sizeof(int) * 8)];
        struct cmsghdr align;
    } u;
    struct iovec iov = {buf, sizeof buf};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.c,
                        .msg_controllen = sizeof u.c};
    ssize_t n = recvmsg(s, &mh, MSG_DONTWAIT);
    CHECK_MSG(n == 0 || (n < 0 && errno == ECONNRESET), "%s: got %zd bytes (%s)", what, n,
              n < 0 ? s_errname(errno) : "data");
    /* (On an error the kernel leaves msg_controllen as we set it.) */
    CHECK_MSG(n < 0 || mh.msg_controllen == 0, "%s: descriptors were passed", what);
}

/* A well-formed REQUEST carrying four sealed memfds of our own. */
static void send_request(int s)
{
    int fds[4];
    for (int i = 0; i < 4; i++) {
        fds[i] = memfd_create("b-seg", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        CHECK(fds[i] >= 0 && ftruncate(fds[i], 65536) == 0);
        CHECK(fcntl(fds[i], F_ADD_SEALS,
                    F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL | (i == 0 || i == 2 ? F_SEAL_FUTURE_WRITE : 0)) == 0);
    }
    struct shm_msg m = {.magic = SHM_MAGIC, .version = SHM_VERSION, .type = SHM_MSG_REQUEST,
                        .reliability = VIP_SERVICE_RELIABLE_DELIVERY, .max_transfer = 4096,
                        .host_len = 4, .disc_len = 3};
    memcpy(m.addr, "\x7f\0\0\x01" "bbb", 7);
    union {
        char c[CMSG_SPACE(sizeof(int) * 4)];
        struct cmsghdr align;
    } u;
    struct iovec iov = {&m, sizeof m};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.c,
                        .msg_controllen = sizeof u.c};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(c), fds, sizeof fds);
    /* The send may fail once A has dropped us: also a refusal. */
    ssize_t n = sendmsg(s, &mh, MSG_NOSIGNAL);
    (void)n;
    for (int i = 0; i < 4; i++)
        close(fds[i]);
}

/* `sovia stat --json` as the current user; 1 if its output names pid. */
static int stat_lists(pid_t pid, int *ran)
{
    int pfd[2];
    CHECK(pipe2(pfd, O_CLOEXEC) == 0);
    pid_t c = fork();
    if (c == 0) {
        dup2(pfd[1], 1);
        execl(sovia_cmd, "sovia", "stat", "--json", (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    static char out[1 << 16];
    size_t len = 0;
    ssize_t n;
    while (len < sizeof out - 1 && (n = read(pfd[0], out + len, sizeof out - 1 - len)) > 0)
        len += (size_t)n;
    out[len] = 0;
    close(pfd[0]);
    int st = 0;
    CHECK(waitpid(c, &st, 0) == c);
    *ran = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    char key[48];
    snprintf(key, sizeof key, "\"pid\": %d,", (int)pid);
    return strstr(out, key) != NULL;
}

struct b_args {
    pid_t a_pid;
    uint16_t a_port;
    int memfd_fds[16];
    int n_memfd_fds;
};

static void b_attacker(int chan, void *arg)
{
    struct b_args *ba = arg;
    become(uid_b, gid_b);
    char name[160];

    /* vipl: the name B dials is B's own. */
    VIP_RETURN r = dial("b-local", disc_a, 2000);
    CHECK_MSG(r == VIP_NO_MATCH, "B's VipConnectRequest to A's discriminator: %s",
              VipxReturnString(r));

    /* Raw: A's listener's abstract name, a REQUEST with descriptors, while
     * A waits in VipConnectWait. */
    s_want(chan, 'g');
    snprintf(name, sizeof name, "sovia-vipl.%u.%s", (unsigned)uid_a, disc_a);
    int s = abstract_connect(name, SOCK_SEQPACKET);
    CHECK_MSG(s >= 0, "B cannot even reach A's listener name (%s): the test sees nothing",
              s_errname(errno));
    send_request(s);
    expect_dropped(s, "a REQUEST from B to A's vipl listener");
    close(s);

    /* sovia: B's sov_connect to A's port is refused; raw to its name, dropped. */
    int fd = s_socket(AF_INET, 0);
    struct sockaddr_in a;
    s_addr4(&a, ba->a_port);
    CHECK_ERR(sov_connect(fd, (struct sockaddr *)&a, sizeof a), ECONNREFUSED);
    SYS(sov_close(fd));
    uint16_t pn = htons(ba->a_port);
    int k = snprintf(name, sizeof name, "sovia-vipl.%u.sovia", (unsigned)uid_a);
    memcpy(name + k, &pn, 2);
    name[k + 2] = 0;
    if (memchr(&pn, 0, 2) == NULL) { /* a port byte of 0 would end our C string */
        s = abstract_connect(name, SOCK_SEQPACKET);
        CHECK_MSG(s >= 0, "B cannot reach A's sovia listener name (%s)", s_errname(errno));
        send_request(s);
        expect_dropped(s, "a REQUEST from B to A's sovia listener");
        close(s);
    }

    /* Statistics: A's socket says nothing to B; B's `sovia stat` lists nothing of A. */
    snprintf(name, sizeof name, "sovia-stat.%u.%d", (unsigned)uid_a, (int)ba->a_pid);
    s = abstract_connect(name, SOCK_STREAM);
    if (s >= 0) {
        expect_dropped(s, "B asking A's statistics socket");
        close(s);
    } else {
        s_log("A's statistics socket is not up (%s); raw check skipped", s_errname(errno));
    }
    int ran = 0;
    int listed = stat_lists(ba->a_pid, &ran);
    if (ran)
        CHECK_MSG(!listed, "`sovia stat` run by B lists A's process");
    else
        s_log("SKIP: B cannot run %s (its directory is not open to other users)", sovia_cmd);

    /* /proc: A's descriptors, maps and memory are closed to B. */
    for (int i = 0; i < ba->n_memfd_fds; i++) {
        snprintf(name, sizeof name, "/proc/%d/fd/%d", (int)ba->a_pid, ba->memfd_fds[i]);
        errno = 0;
        int f = open(name, O_RDWR);
        CHECK_MSG(f < 0 && errno == EACCES, "B opening A's memfd %s: %s", name,
                  f >= 0 ? "opened" : s_errname(errno));
    }
    static const char *const files[] = {"maps", "mem", "map_files/", "fd/"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(name, sizeof name, "/proc/%d/%s", (int)ba->a_pid, files[i]);
        errno = 0;
        int f = open(name, O_RDONLY | (files[i][strlen(files[i]) - 1] == '/' ? O_DIRECTORY : 0));
        CHECK_MSG(f < 0 && errno == EACCES, "B opening %s: %s", name,
                  f >= 0 ? "opened" : s_errname(errno));
    }

    /* Squatting: B takes the abstract name of a discriminator A will use. */
    int sq = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(name, sizeof name, "sovia-vipl.%u.%s", (unsigned)uid_a, disc_squat);
    memcpy(sun.sun_path + 1, name, strlen(name));
    CHECK(bind(sq, (struct sockaddr *)&sun,
               (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name))) == 0);
    CHECK(listen(sq, 4) == 0);
    s_tok(chan, '2'); /* A tries to listen there and its client dials it */
    s_want(chan, '3');
    int got = accept4(sq, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    CHECK_MSG(got >= 0, "A's client never reached the squatted name: the case tested nothing");
    expect_dropped(got, "A's client meeting B's squatted name");
    close(got);
    close(sq);
}

/* ---- The test (as root) ----------------------------------------------------------------------------- */

static int memfd_fds_of(pid_t pid, int *out, int max)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
        char p[400], target[256];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        ssize_t k = readlink(p, target, sizeof target - 1);
        if (k > 0 && (target[k] = 0, strncmp(target, "/memfd:", 7) == 0))
            out[n++] = atoi(e->d_name);
    }
    closedir(d);
    return n;
}

static void logic(int chan, void *arg)
{
    (void)chan;
    (void)arg;
    static struct hc_names shm_before, tmp_before;
    hc_list_ours("/dev/shm", &shm_before);
    hc_list_ours("/tmp", &tmp_before);

    int ac;
    int aid = s_spawn("user-a", a_server, NULL, &ac);
    struct b_args ba = {.a_pid = s_pid(aid)};
    ba.a_port = (uint16_t)s_get_u64(ac);
    ba.n_memfd_fds = memfd_fds_of(ba.a_pid, ba.memfd_fds, 16);
    int modes = check_file_modes(ba.a_pid);
    s_log("A (uid %u) holds %d memfd descriptors; %d memfd files checked for mode 0600",
          (unsigned)uid_a, ba.n_memfd_fds, modes);
    CHECK_MSG(modes > 0, "A's process has no memfd to check");

    int bc;
    int bid = s_spawn("user-b", b_attacker, &ba, &bc);
    s_tok(ac, 'W');
    s_want(ac, 'w');
    s_tok(bc, 'g');
    VIP_RETURN r = (VIP_RETURN)s_get_u64(ac);
    CHECK_MSG(r == VIP_TIMEOUT, "A's VipConnectWait after B's request: %s (expected a timeout)",
              VipxReturnString(r));
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
        become(uid_a, gid_a);
        int ran = 0;
        int listed = stat_lists(ba.a_pid, &ran);
        _exit(!ran ? 2 : listed ? 0 : 1);
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
    if (geteuid() != 0 || access("/usr/sbin/useradd", X_OK) != 0) {
        s_log("SKIP: needs root and useradd to create two users (euid %u)", (unsigned)geteuid());
        s_pass();
    }
    alarm(0); /* our own deadline below: the users must be removed whatever happens */
    snprintf(name_a, sizeof name_a, "hrda%05d", (int)(getpid() % 100000));
    snprintf(name_b, sizeof name_b, "hrdb%05d", (int)(getpid() % 100000));
    snprintf(disc_a, sizeof disc_a, "iso-%d-a", (int)getpid());
    snprintf(disc_squat, sizeof disc_squat, "iso-%d-s", (int)getpid());
    if (add_user(name_a, &uid_a, &gid_a) != 0) {
        s_log("SKIP: useradd %s failed", name_a);
        s_pass();
    }
    if (add_user(name_b, &uid_b, &gid_b) != 0) {
        del_user(name_a);
        s_log("SKIP: useradd %s failed", name_b);
        s_pass();
    }
    s_log("users %s (uid %u) and %s (uid %u)", name_a, (unsigned)uid_a, name_b,
          (unsigned)uid_b);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(50);
        logic(-1, NULL);
        s_wait_all();
        _exit(0);
    }
    int st = 0;
    double end = s_now_ms() + 55000;
    pid_t w = 0;
    while ((w = waitpid(pid, &st, WNOHANG)) == 0 && s_now_ms() < end)
        s_sleep_ms(20);
    if (w == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    del_user(name_a);
    del_user(name_b);
    CHECK_MSG(!getpwnam(name_a) && !getpwnam(name_b), "userdel left a user behind");
    CHECK_MSG(w == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "the isolation checks failed (messages above)");
    s_pass();
}
