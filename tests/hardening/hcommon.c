/* hcommon.c - see hcommon.h. */
#include "hcommon.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vipl_ext.h>

#include "shm.h" /* the connection messages, to forge a REQUEST */
#include "sovia/sharness.h"


int hc_known_bugs_on(void)
{
    const char *run = getenv("HARDENING_TEST_KNOWN_BUGS");
    return run && strcmp(run, "1") == 0;
}

int hc_known_bug(const char *bug)
{
    if (hc_known_bugs_on())
        return 1;
    s_log("SKIP (known bug; HARDENING_TEST_KNOWN_BUGS=1 runs it): %s", bug);
    return 0;
}

int hc_run_case(const char *name, const char *bug)
{
    return s_case(name) && (!bug || hc_known_bug(bug));
}

unsigned hc_rounds(unsigned fallback)
{
    const char *e = getenv("HARDENING_ROUNDS");
    return e && *e ? (unsigned)strtoul(e, NULL, 0) : fallback;
}

uint64_t hc_seed(const char *env_name, uint64_t fallback)
{
    const char *e = getenv(env_name);
    uint64_t seed = e && *e ? strtoull(e, NULL, 0) : fallback;
    s_log("seed %llu (set %s to reproduce another run)", (unsigned long long)seed, env_name);
    return seed;
}

uint32_t hc_rand32(uint64_t *st)
{
    return (uint32_t)(s_rand(st) >> 16);
}

uint32_t hc_below(uint64_t *st, uint32_t n)
{
    return n ? (uint32_t)(s_rand(st) % n) : 0;
}

static int count_dir(const char *path, const char *link_prefix, int *matching)
{
    DIR *d = opendir(path);
    CHECK_MSG(d != NULL, "cannot list %s", path);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        n++;
        if (link_prefix) {
            char p[512], target[512];
            snprintf(p, sizeof p, "%s/%s", path, e->d_name);
            ssize_t k = readlink(p, target, sizeof target - 1);
            if (k > 0) {
                target[k] = 0;
                if (strncmp(target, link_prefix, strlen(link_prefix)) == 0)
                    (*matching)++;
            }
        }
    }
    closedir(d);
    return n;
}

struct hc_counts hc_counts_of(pid_t pid)
{
    struct hc_counts c = {0};
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    c.fds = count_dir(path, "/memfd:", &c.memfds);
    /* opendir itself holds one descriptor while listing our own */
    if (pid == getpid())
        c.fds--;
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    c.threads = count_dir(path, NULL, NULL);
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot read %s", path);
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strstr(line, "/memfd:"))
            c.maps++;
    fclose(f);
    return c;
}

struct hc_counts hc_counts_now(void)
{
    return hc_counts_of(getpid());
}

static int same(const struct hc_counts *a, const struct hc_counts *b)
{
    return a->fds == b->fds && a->memfds == b->memfds && a->threads == b->threads &&
           a->maps == b->maps;
}

struct hc_counts hc_counts_settle(const struct hc_counts *base, unsigned ms)
{
    double end = s_now_ms() + ms;
    struct hc_counts now = hc_counts_now();
    while (!same(base, &now) && s_now_ms() < end) {
        s_sleep_ms(10);
        now = hc_counts_now();
    }
    return now;
}

struct hc_counts hc_counts_stable(unsigned ms)
{
    double end = s_now_ms() + ms;
    struct hc_counts last = hc_counts_now();
    double since = s_now_ms();
    while (s_now_ms() - since < 100 && s_now_ms() < end) {
        s_sleep_ms(10);
        struct hc_counts now = hc_counts_now();
        if (!same(&now, &last)) {
            last = now;
            since = s_now_ms();
        }
    }
    return last;
}

/* What each descriptor is (and, for sockets, their names), to say what leaked. */
static void log_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char p[300], target[256] = "?";
        snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(p, target, sizeof target - 1);
        target[k > 0 ? k : 1] = 0;
        s_log("  fd %s -> %s", e->d_name, target);
    }
    closedir(d);
}

void hc_counts_check(const struct hc_counts *base, const struct hc_counts *now, const char *what)
{
    if (!same(base, now))
        log_fds();
    CHECK_MSG(same(base, now),
              "%s: leak: fds %d -> %d, memfd fds %d -> %d, threads %d -> %d, memfd mappings "
              "%d -> %d",
              what, base->fds, now->fds, base->memfds, now->memfds, base->threads,
              now->threads, base->maps, now->maps);
}

static int named_ours(const char *s)
{
    char low[256];
    size_t i = 0;
    for (; s[i] && i < sizeof low - 1; i++)
        low[i] = (char)tolower((unsigned char)s[i]);
    low[i] = 0;
    return strstr(low, "sovia") || strstr(low, "vipl");
}

void hc_list_ours(const char *dir, struct hc_names *out)
{
    out->n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && out->n < HC_MAX_NAMES)
        if (named_ours(e->d_name))
            snprintf(out->name[out->n++], sizeof out->name[0], "%s", e->d_name);
    closedir(d);
}

void hc_check_no_new(const char *dir, const struct hc_names *before)
{
    static struct hc_names after;
    hc_list_ours(dir, &after);
    for (int i = 0; i < after.n; i++) {
        int old = 0;
        for (int j = 0; j < before->n && !old; j++)
            old = strcmp(after.name[i], before->name[j]) == 0;
        CHECK_MSG(old, "%s/%s was left behind", dir, after.name[i]);
    }
}

VIP_NET_ADDRESS *hc_addr_bytes(const void *disc, unsigned len)
{
    static const VIP_UINT8 lo[4] = {127, 0, 0, 1};
    VIP_NET_ADDRESS *a = VipxAllocNetAddress(lo, 4, disc, (VIP_UINT16)len);
    CHECK(a != NULL);
    return a;
}

VIP_NET_ADDRESS *hc_addr(const char *disc)
{
    return hc_addr_bytes(disc, (unsigned)strlen(disc));
}

VIP_NET_ADDRESS *hc_addr_room(void)
{
    VIP_NET_ADDRESS *a = calloc(1, sizeof(VIP_NET_ADDRESS) + 16 + 64);
    CHECK(a != NULL);
    return a;
}

void hc_round_disc(char *buf, size_t len, const char *prefix, unsigned round)
{
    snprintf(buf, len, "%s-%u", prefix, round);
}

/* ---- Two users ------------------------------------------------------------------ */

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

static int add_user(struct hc_user *u)
{
    char *argv[] = {"/usr/sbin/useradd", "--system", "--no-create-home", "--shell",
                    "/usr/sbin/nologin", u->name, NULL};
    if (run_quiet(argv) != 0)
        return -1;
    struct passwd *pw = getpwnam(u->name);
    if (!pw)
        return -1;
    u->uid = pw->pw_uid;
    u->gid = pw->pw_gid;
    return 0;
}

static void del_user(const struct hc_user *u)
{
    char *argv[] = {"/usr/sbin/userdel", (char *)u->name, NULL};
    run_quiet(argv);
}

int hc_users_make(struct hc_user *a, struct hc_user *b)
{
    alarm(0); /* hc_users_run's deadline instead: the users must be removed whatever happens */
    if (geteuid() != 0 || access("/usr/sbin/useradd", X_OK) != 0) {
        s_log("SKIP: needs root and useradd to create two users (euid %u)", (unsigned)geteuid());
        return -1;
    }
    snprintf(a->name, sizeof a->name, "hrda%05d", (int)(getpid() % 100000));
    snprintf(b->name, sizeof b->name, "hrdb%05d", (int)(getpid() % 100000));
    if (add_user(a) != 0) {
        s_log("SKIP: useradd %s failed", a->name);
        return -1;
    }
    if (add_user(b) != 0) {
        del_user(a);
        s_log("SKIP: useradd %s failed", b->name);
        return -1;
    }
    s_log("users %s (uid %u) and %s (uid %u)", a->name, (unsigned)a->uid, b->name,
          (unsigned)b->uid);
    return 0;
}

/* SIGKILLs every process of uid (the users are the test's own: all they
 * run was started by it) and waits until none is left, at most 2 s:
 * userdel refuses a user with processes. */
static void end_processes_of(uid_t uid)
{
    double end = s_now_ms() + 2000;
    for (;;) {
        int left = 0;
        DIR *d = opendir("/proc");
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            struct stat st;
            char p[300];
            if (!isdigit((unsigned char)e->d_name[0]))
                continue;
            snprintf(p, sizeof p, "/proc/%s", e->d_name);
            if (stat(p, &st) == 0 && st.st_uid == uid) {
                kill((pid_t)atoi(e->d_name), SIGKILL);
                left++;
            }
        }
        if (d)
            closedir(d);
        if (!left || s_now_ms() > end)
            return;
        s_sleep_ms(20);
    }
}

int hc_users_run(const struct hc_user *a, const struct hc_user *b, void (*logic)(void),
                 unsigned seconds)
{
    pid_t pid = fork();
    if (pid == 0) {
        alarm(seconds);
        logic();
        s_wait_all();
        _exit(0);
    }
    int st = 0;
    double end = s_now_ms() + seconds * 1000.0 + 5000;
    pid_t w = 0;
    while ((w = waitpid(pid, &st, WNOHANG)) == 0 && s_now_ms() < end)
        s_sleep_ms(20);
    if (w == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    end_processes_of(a->uid);
    end_processes_of(b->uid);
    del_user(a);
    del_user(b);
    CHECK_MSG(!getpwnam(a->name) && !getpwnam(b->name), "userdel left a user behind");
    return w == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

void hc_become(const struct hc_user *u)
{
    CHECK(setgroups(0, NULL) == 0);
    CHECK(setgid(u->gid) == 0);
    CHECK(setuid(u->uid) == 0);
    CHECK(geteuid() == u->uid && getuid() == u->uid);
    prctl(PR_SET_DUMPABLE, 1);         /* /proc/<pid> owned by the user, as usual */
    prctl(PR_SET_PDEATHSIG, SIGKILL);  /* cleared by the credential change */
}

/* ---- Another user's view of a process ---------------------------------------------- */

int hc_check_memfd_modes(pid_t pid)
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
            continue; /* the program's own files */
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

int hc_memfd_fds(pid_t pid, int *out, int max)
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

void hc_check_proc_closed(pid_t pid, const int *memfds, int n)
{
    char name[160];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "/proc/%d/fd/%d", (int)pid, memfds[i]);
        errno = 0;
        int f = open(name, O_RDWR);
        CHECK_MSG(f < 0 && errno == EACCES, "opening another user's memfd %s: %s", name,
                  f >= 0 ? "opened" : s_errname(errno));
    }
    static const char *const files[] = {"maps", "mem", "map_files/", "fd/"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(name, sizeof name, "/proc/%d/%s", (int)pid, files[i]);
        errno = 0;
        int f = open(name, O_RDONLY | (files[i][strlen(files[i]) - 1] == '/' ? O_DIRECTORY : 0));
        CHECK_MSG(f < 0 && errno == EACCES, "opening another user's %s: %s", name,
                  f >= 0 ? "opened" : s_errname(errno));
    }
}

/* ---- Raw probes of abstract names ---------------------------------------------------- */

static socklen_t abstract_name(struct sockaddr_un *sun, const void *name, size_t len)
{
    *sun = (struct sockaddr_un){.sun_family = AF_UNIX};
    CHECK(len < sizeof sun->sun_path);
    memcpy(sun->sun_path + 1, name, len);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
}

int hc_abstract_listen(const void *name, size_t len)
{
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    CHECK(s >= 0);
    struct sockaddr_un sun;
    socklen_t slen = abstract_name(&sun, name, len);
    CHECK_MSG(bind(s, (struct sockaddr *)&sun, slen) == 0, "binding an abstract name: %s",
              s_errname(errno));
    CHECK(listen(s, 4) == 0);
    return s;
}

int hc_abstract_connect(const void *name, size_t len, int type)
{
    int s = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
    CHECK(s >= 0);
    struct sockaddr_un sun;
    socklen_t slen = abstract_name(&sun, name, len);
    if (connect(s, (struct sockaddr *)&sun, slen) != 0) {
        int e = errno;
        close(s);
        errno = e;
        return -1;
    }
    return s;
}

void hc_expect_dropped(int s, const char *what)
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

void hc_send_request(int s)
{
    hc_send_request_waking(s, SHM_WAKE_FUTEX);
}

void hc_send_request_waking(int s, unsigned wake_mode)
{
    int fds[4];
    for (int i = 0; i < 4; i++) {
        fds[i] = memfd_create("b-seg", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        CHECK(fds[i] >= 0 && ftruncate(fds[i], 65536) == 0);
        CHECK(fcntl(fds[i], F_ADD_SEALS,
                    F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL | (i == 0 || i == 2 ? F_SEAL_FUTURE_WRITE : 0)) == 0);
    }
    if (wake_mode == SHM_WAKE_SOCKET) { /* a socket of ours, for the listener to send to */
        int sv[2];
        CHECK(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) == 0);
        close(fds[3]);
        close(sv[1]);
        fds[3] = sv[0];
    }
    struct shm_msg m = {.magic = SHM_MAGIC, .version = SHM_VERSION, .type = SHM_MSG_REQUEST,
                        .reliability = VIP_SERVICE_RELIABLE_DELIVERY, .max_transfer = 4096,
                        .wake_sock = wake_mode, .host_len = 4, .disc_len = 3};
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
    /* The send may fail once the listener has dropped us: also a refusal. */
    ssize_t n = sendmsg(s, &mh, MSG_NOSIGNAL);
    (void)n;
    for (int i = 0; i < 4; i++)
        close(fds[i]);
}

/* ---- sovia stat ------------------------------------------------------------------------ */

int hc_capture(char *const argv[], char *out, size_t cap)
{
    int pfd[2];
    CHECK(pipe2(pfd, O_CLOEXEC) == 0);
    pid_t c = fork();
    CHECK(c >= 0);
    if (c == 0) {
        dup2(pfd[1], 1);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(pfd[1]);
    size_t len = 0;
    ssize_t n;
    while (len < cap - 1 && (n = read(pfd[0], out + len, cap - 1 - len)) > 0)
        len += (size_t)n;
    out[len] = 0;
    close(pfd[0]);
    int st = 0;
    CHECK(waitpid(c, &st, 0) == c);
    return st;
}

const char *hc_sovia_stat(const char *sovia_cmd)
{
    static char out[1 << 16];
    char *argv[] = {(char *)sovia_cmd, "stat", "--json", NULL};
    int st = hc_capture(argv, out, sizeof out);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? out : NULL;
}

int hc_stat_lists_pid(const char *out, pid_t pid)
{
    char key[48];
    snprintf(key, sizeof key, "\"pid\": %d,", (int)pid);
    return strstr(out, key) != NULL;
}

/* ---- Programs the test users can run --------------------------------------------- */

/* Whether other users can reach and read path (each directory above it
 * searchable by others, the file readable and executable by others). */
static int open_to_others(const char *path)
{
    char p[PATH_MAX];
    struct stat st;
    if (!realpath(path, p) || stat(p, &st) != 0 || (st.st_mode & 05) != 05)
        return 0;
    for (char *slash = strrchr(p, '/'); slash && slash != p; slash = strrchr(p, '/')) {
        *slash = 0;
        if (stat(p, &st) != 0 || !(st.st_mode & S_IXOTH))
            return 0;
    }
    return 1;
}

/* Copies file src to dir/name, mode 0755 (the name may be taken: then
 * nothing, the first copy stands). 0, or -1 after logging why. */
static int copy_file(const char *src, const char *dir, const char *name, char *out, size_t cap)
{
    if ((size_t)snprintf(out, cap, "%s/%s", dir, name) >= cap) {
        s_log("%s/%s: name too long", dir, name);
        return -1;
    }
    int in = open(src, O_RDONLY | O_CLOEXEC);
    int to = in < 0 ? -1 : open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
    if (to < 0 && in >= 0 && errno == EEXIST) {
        close(in);
        return 0;
    }
    int ok = in >= 0 && to >= 0 && fchmod(to, 0755) == 0; /* whatever the umask */
    char buf[65536];
    ssize_t r = 0;
    while (ok && (r = read(in, buf, sizeof buf)) != 0) {
        if (r < 0 && errno == EINTR)
            continue;
        for (ssize_t w = 0, k; ok && r > 0 && w < r; w += k > 0 ? k : 0)
            ok = (k = write(to, buf + w, (size_t)(r - w))) > 0 || errno == EINTR;
        ok = ok && r > 0;
    }
    int err = errno;
    if (in >= 0)
        close(in);
    if (to >= 0 && close(to) != 0)
        ok = 0;
    if (!ok)
        s_log("copying %s to %s: %s", src, out, s_errname(err));
    return ok ? 0 : -1;
}

/* The libraries `ldd file` resolves ("soname => path (address)"), copied
 * into dir unless they are the system's and others can reach them. */
static int copy_libraries(const char *file, const char *dir)
{
    static char out[1 << 14];
    char *argv[] = {"ldd", (char *)file, NULL};
    int st = hc_capture(argv, out, sizeof out);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        s_log("ldd %s failed (status %#x)", file, st);
        return -1;
    }
    for (char *save = NULL, *line = strtok_r(out, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char name[256], path[PATH_MAX], copy[PATH_MAX];
        if (sscanf(line, " %255s => %4095s", name, path) != 2 || path[0] != '/')
            continue; /* the vDSO, the loader, "not found" */
        int system = strncmp(path, "/lib/", 5) == 0 || strncmp(path, "/lib64/", 7) == 0 ||
                     strncmp(path, "/usr/", 5) == 0;
        if ((!system || !open_to_others(path)) &&
            copy_file(path, dir, name, copy, sizeof copy) != 0)
            return -1;
    }
    return 0;
}

int hc_copy_make(struct hc_copy *c, const char *const *files, int n)
{
    CHECK(n <= HC_COPY_MAX);
    snprintf(c->dir, sizeof c->dir, "/tmp/isorun-XXXXXX");
    if (!mkdtemp(c->dir)) {
        s_log("mkdtemp %s: %s", c->dir, s_errname(errno));
        c->dir[0] = 0;
        return -1;
    }
    int ok = chmod(c->dir, 0755) == 0;
    for (int i = 0; ok && i < n; i++) {
        const char *base = strrchr(files[i], '/');
        ok = copy_file(files[i], c->dir, base ? base + 1 : files[i], c->path[i],
                       sizeof c->path[i]) == 0 &&
             copy_libraries(files[i], c->dir) == 0;
    }
    if (!ok) {
        hc_copy_remove(c);
        return -1;
    }
    return 0;
}

void hc_copy_remove(struct hc_copy *c)
{
    if (!c->dir[0])
        return;
    DIR *d = opendir(c->dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            unlinkat(dirfd(d), e->d_name, 0);
    if (d)
        closedir(d);
    if (rmdir(c->dir) != 0)
        s_log("rmdir %s: %s (left behind)", c->dir, s_errname(errno));
    c->dir[0] = 0;
}
