/*
 * doctor_setup.c - `sovia doctor`'s checks of sovia itself: the providers
 * (each opened as a program would, in a child process so that libfabric's
 * load, ~0.25 s and a dozen libraries on Debian, stays out of this one),
 * the preload, the configuration the environment makes, the cluster key,
 * and what crashed processes may have left.
 */
#include "cli.h"
#include "doctor.h"
#include "sovia.h"
#include "vipl.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/fabric.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define CHILD_MS 5000

/* Runs fn in a child; what it writes (up to len - 1 bytes) in out.
 * The child's exit status, or -1 (it died, or ran past CHILD_MS). */
static int in_child(int (*fn)(int fd), char *out, size_t len)
{
    int p[2];
    out[0] = 0;
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        _exit(fn(p[1]));
    }
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        return -1;
    }
    size_t got = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        long left = CHILD_MS - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        struct pollfd pf = {p[0], POLLIN, 0};
        if (left <= 0 || poll(&pf, 1, (int)left) <= 0) {
            kill(pid, SIGKILL);
            break;
        }
        ssize_t n = read(p[0], out + got, len - 1 - got);
        if (n <= 0 || (got += (size_t)n) == len - 1)
            break;
    }
    out[got] = 0;
    close(p[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ---- Providers ----------------------------------------------------------- */

static int open_shm(int fd)
{
    VIP_NIC_HANDLE nic;
    VIP_RETURN r = VipOpenNic((const VIP_CHAR *)"shm", &nic);
    if (r != VIP_SUCCESS) {
        dprintf(fd, "VipOpenNic(\"shm\") returned %d", (int)r);
        return 1;
    }
    VipCloseNic(nic);
    return 0;
}

/* libfabric's providers, named once each, as fabric_dl.c loads it. */
static int fabric_providers(int fd)
{
    void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        dprintf(fd, "%s", dlerror());
        return 3;
    }
    __typeof__(fi_getinfo) *getinfo = (__typeof__(fi_getinfo) *)dlvsym(h, "fi_getinfo", "FABRIC_1.3");
    __typeof__(fi_freeinfo) *freeinfo = (__typeof__(fi_freeinfo) *)dlvsym(h, "fi_freeinfo", "FABRIC_1.3");
    struct fi_info *info = NULL;
    int rc;
    if (!getinfo || !freeinfo) {
        dprintf(fd, "libfabric.so.1 lacks fi_getinfo@FABRIC_1.3");
        return 3;
    }
    if ((rc = getinfo(FI_VERSION(1, 17), NULL, NULL, 0, NULL, &info)) != 0 || !info) {
        dprintf(fd, "fi_getinfo: no provider (%d)", rc);
        return 4;
    }
    char seen[1024] = "";
    size_t used = 0;
    for (struct fi_info *i = info; i; i = i->next) {
        const char *p = i->fabric_attr ? i->fabric_attr->prov_name : NULL;
        char word[80];
        if (!p)
            continue;
        snprintf(word, sizeof word, " %s ", p);
        size_t wl = strlen(word);
        if (strstr(seen, word) || used + wl >= sizeof seen)
            continue;
        memcpy(seen + used, word, wl + 1);
        used += wl - 1; /* the next word shares the space */
    }
    freeinfo(info);
    dprintf(fd, "%s", used ? seen + 1 : "");
    return 0;
}

static bool env_is(const char *name, const char *prefix)
{
    const char *v = getenv(name);
    return v && strncmp(v, prefix, strlen(prefix)) == 0;
}

void doctor_providers(struct doctor *d)
{
    char out[1024];
    if (in_child(open_shm, out, sizeof out) == 0)
        doctor_add(d, "shm", DOC_OK, "opens", "carries connections between processes of this host");
    else
        doctor_add(d, "shm", DOC_FAIL, out[0] ? out : "the child died",
                   "the shm provider does not open: nothing is carried");
    bool wanted = env_is("SOVIA_PROVIDER", "fabric") || env_is("SOVIA_VIPL_DEVICE", "fabric") ||
                  getenv("SOVIA_CLUSTER_KEY_FILE");
    int rc = in_child(fabric_providers, out, sizeof out);
    size_t l = strlen(out);
    if (l && out[l - 1] == ' ')
        out[l - 1] = 0;
    if (rc == 0)
        doctor_add(d, "fabric", DOC_OK, out,
                   "libfabric loads: VIs across hosts (SOVIA_PROVIDER=fabric, or a cluster key "
                   "with SOVIA_FAR_PROVIDER; docs/CLUSTER.md)");
    else
        doctor_add(d, "fabric", wanted ? DOC_FAIL : DOC_OFF, out[0] ? out : "the child died",
                   wanted ? "the environment asks for fabric, which does not load"
                          : "no fabric provider: this host's connections only (shm)");
}

/* ---- Preload, configuration, key ----------------------------------------- */

/* What the sockets layer makes of the environment, from its own start-up
 * (sov_get_config opens the NIC in force), in a child. */
static int effective_config(int fd)
{
    struct sov_config c;
    if (sov_get_config(&c) != 0) {
        dprintf(fd, "%s", strerror(errno));
        return 1;
    }
    return write(fd, &c, sizeof c) == (ssize_t)sizeof c ? 0 : 1;
}

/* What the libraries, the preload and the tool read. */
static const char *const known_vars[] = {
    "SOVIA_ACK_THRESHOLD", "SOVIA_CLUSTER_KEY_FILE", "SOVIA_COMBINE", "SOVIA_COMBINE_MS",
    "SOVIA_CONFIG", "SOVIA_COPY_MODE", "SOVIA_COPY_THRESHOLD", "SOVIA_FAR_PROVIDER",
    "SOVIA_HANDLING", "SOVIA_INHERIT", "SOVIA_MTU", "SOVIA_PAIR_TIMEOUT_MS", "SOVIA_PRELOAD",
    "SOVIA_PROVIDER", "SOVIA_PYTHON", "SOVIA_SHORT_CONNS", "SOVIA_SPIN_US", "SOVIA_STAT_LOG",
    "SOVIA_VIPL_DEVICE", "SOVIA_VIPL_HINTS", "SOVIA_VIPL_SPIN_US", "SOVIA_WAIT", "SOVIA_WINDOW",
    "SOVIA_XHOST_CONNECT_MS",
};
/* What the benchmarks, the report and the project's scripts read. */
static const char *const script_prefixes[] = {
    "SOVIA_BENCH_", "SOVIA_REPORT_", "SOVIA_FUZZ", "SOVIA_CLUSTER", "SOVIA_BUILD",
    "SOVIA_SANITIZE", "SOVIA_DEB_BUILD", "SOVIA_FIGURES_OUT", "SOVIA_APPS_DIR",
    "SOVIA_SOURCE_DIR", "SOVIA_COMPAT_BROKEN",
};

static bool read_by_scripts(const char *var)
{
    for (size_t k = 0; k < sizeof script_prefixes / sizeof *script_prefixes; k++)
        if (strncmp(var, script_prefixes[k], strlen(script_prefixes[k])) == 0)
            return true;
    return false;
}

/* A numeric variable whose value the configuration does not show was
 * ignored (not a number, out of range, or a combination that fails). */
static void check_number(struct doctor *d, const char *name, unsigned long have)
{
    const char *v = getenv(name);
    char *end;
    if (!v)
        return;
    unsigned long x = strtoul(v, &end, 10);
    if (!*v || *end || x != have)
        doctor_add(d, name, DOC_WARN, v, "ignored: the sockets layer uses %lu (docs/SOCKETS.md "
                   "gives the ranges; a combination out of range leaves the defaults)", have);
}

static void check_choice(struct doctor *d, const char *name, const char *const *names,
                         unsigned have)
{
    const char *v = getenv(name);
    if (v && strcmp(v, names[have]) != 0)
        doctor_add(d, name, DOC_WARN, v, "ignored: the sockets layer uses %s", names[have]);
}

static void configuration(struct doctor *d)
{
    struct sov_config c;
    char out[sizeof c + 256];
    int rc = in_child(effective_config, out, sizeof out);
    if (rc != 0) {
        doctor_add(d, "config", DOC_FAIL, out[0] ? out : "the child died",
                   "the sockets layer does not start with this environment: nothing is carried");
        return;
    }
    memcpy(&c, out, sizeof c);
    static const char *const handling[] = {"single", "handler", "notify"};
    static const char *const copy[] = {"hybrid", "copy", "reg"};
    static const char *const wait[] = {"adaptive", "poll", "block"};
    const char *profile = c.wait_mode == SOV_WAIT_POLL ? "latency"
                          : c.window == 64              ? "throughput"
                                                        : "balanced";
    char v[160];
    snprintf(v, sizeof v, "window %u, ack %u, mtu %zu, copy %s/%zu, wait %s/%u us, %s, "
             "combine %s", c.window, c.ack_threshold, c.mtu, copy[c.copy_mode],
             c.copy_threshold, wait[c.wait_mode], c.spin_us, handling[c.handling],
             c.combine ? "on" : "off");
    doctor_add(d, "config", DOC_OK, v, "what new sockets get here (like the %s profile; "
               "sovia run --profile sets it unless SOVIA_* says otherwise)", profile);
    check_number(d, "SOVIA_WINDOW", c.window);
    check_number(d, "SOVIA_ACK_THRESHOLD", c.ack_threshold);
    check_number(d, "SOVIA_MTU", c.mtu);
    check_number(d, "SOVIA_COPY_THRESHOLD", c.copy_threshold);
    check_number(d, "SOVIA_SPIN_US", c.spin_us);
    check_choice(d, "SOVIA_HANDLING", handling, c.handling);
    check_choice(d, "SOVIA_COPY_MODE", copy, c.copy_mode);
    check_choice(d, "SOVIA_WAIT", wait, c.wait_mode);
}

static void variables(struct doctor *d)
{
    char set[160] = "";
    size_t used = 0;
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "SOVIA_", 6) != 0)
            continue;
        size_t n = strcspn(*e, "=");
        bool known = false;
        for (size_t k = 0; k < sizeof known_vars / sizeof *known_vars && !known; k++)
            known = strlen(known_vars[k]) == n && strncmp(known_vars[k], *e, n) == 0;
        if (!known && read_by_scripts(*e))
            continue;
        if (!known) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(n < 63 ? n : 63), *e);
            doctor_add(d, "variable", DOC_WARN, name, "sovia reads no such variable (a typo?)");
        } else if (used + n + 2 < sizeof set) {
            used += (size_t)snprintf(set + used, sizeof set - used, "%s%.*s", used ? " " : "",
                                     (int)n, *e);
        }
    }
    doctor_add(d, "environment", DOC_OK, used ? set : "none",
               "SOVIA_* variables in force (docs/SOCKETS.md, sovia-config(5))");
}

static void cluster_key(struct doctor *d)
{
    const char *path = getenv("SOVIA_CLUSTER_KEY_FILE");
    struct stat st;
    if (!path || !*path) {
        doctor_add(d, "cluster_key", DOC_OK, "unset", "connections to other hosts stay kernel TCP");
        return;
    }
    /* The rules of xauth.c's loader: anything else and it refuses the key. */
    const char *why = NULL;
    if (lstat(path, &st) != 0)
        why = strerror(errno);
    else if (!S_ISREG(st.st_mode))
        why = "not a regular file";
    else if (st.st_uid != geteuid() || (st.st_mode & 077))
        why = "not yours alone (chmod 600, owned by this user)";
    else if (st.st_size < 16 || st.st_size > 4096)
        why = "not 16 to 4096 bytes";
    if (why)
        doctor_add(d, "cluster_key", DOC_WARN, path,
                   "refused (%s): connections to other hosts stay kernel TCP", why);
    else
        doctor_add(d, "cluster_key", DOC_OK, path,
                   "connections to hosts with the same key may be carried (docs/CLUSTER.md)");
}

void doctor_environment(struct doctor *d)
{
    char lib[4096];
    if (cli_find_preload(lib, sizeof lib) == 0)
        doctor_add(d, "preload", DOC_OK, lib, "what sovia run puts in LD_PRELOAD");
    else
        doctor_add(d, "preload", DOC_FAIL, "not found",
                   "libsovia-preload.so is neither beside this tool nor in $SOVIA_PRELOAD: "
                   "sovia run cannot carry anything");
    const char *ld = getenv("LD_PRELOAD");
    doctor_add(d, "this_shell", DOC_OK,
               ld && strstr(ld, "libsovia-preload") ? "under sovia" : "not under sovia",
               "programs started from here are carried only under sovia run or "
               "eval \"$(sovia env)\"");
    configuration(d);
    variables(d);
    cluster_key(d);
}

/* ---- Leftovers ----------------------------------------------------------- */

/* Entries of dir named prefix<pid>... whose pid no longer runs (the
 * ones of running processes are in use); their paths in out. */
static int find_dead(const char *dir, const char *prefix, char *out, size_t len)
{
    DIR *dh = opendir(dir);
    int n = 0;
    size_t used = strlen(out), pl = strlen(prefix);
    if (!dh)
        return 0;
    for (struct dirent *e; (e = readdir(dh));) {
        char *end, proc[32];
        if (strncmp(e->d_name, prefix, pl) != 0)
            continue;
        long pid = strtol(e->d_name + pl, &end, 10);
        snprintf(proc, sizeof proc, "/proc/%ld", pid);
        if (end == e->d_name + pl || pid <= 0 || access(proc, F_OK) == 0)
            continue;
        n++;
        if (used + strlen(dir) + strlen(e->d_name) + 3 < len)
            used += (size_t)snprintf(out + used, len - used, "%s%s/%s", used ? " " : "", dir,
                                     e->d_name);
    }
    closedir(dh);
    return n;
}

/* sovia ksock makes its cgroups beside the caller's (ksock_cgroup.c):
 * this process's cgroup v2 directory, or "" if none. */
static void own_cgroup(char *out, size_t len)
{
    char line[512];
    FILE *f = fopen("/proc/self/cgroup", "re");
    out[0] = 0;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "0::/", 4) == 0) {
            line[strcspn(line, "\n")] = 0;
            if (strcmp(line + 3, "/") != 0)
                snprintf(out, len, "/sys/fs/cgroup%s", line + 3);
        }
    if (f)
        fclose(f);
}

void doctor_leftovers(struct doctor *d)
{
    char found[160] = "", cg[600];
    own_cgroup(cg, sizeof cg);
    /* What the report's FTP runs (src/apps/ftp/ftp_run.py) and sovia ksock
     * make, each named with its maker's pid, and remove unless killed. */
    int n = find_dead("/dev/shm", "ftprun-", found, sizeof found) +
            find_dead("/run/netns", "sovia-ftp-a-", found, sizeof found) +
            find_dead("/run/netns", "sovia-ftp-b-", found, sizeof found) +
            find_dead("/sys/fs/cgroup", "sovia-ksock.", found, sizeof found) +
            (cg[0] ? find_dead(cg, "sovia-ksock.", found, sizeof found) : 0);
    if (n)
        doctor_add(d, "leftovers", DOC_WARN, found,
                   "%d left by processes that were killed: remove /dev/shm ones with rm -r, "
                   "namespaces with ip netns delete, cgroups with rmdir (the next sovia ksock "
                   "and report runs sweep their own)", n);
    else
        doctor_add(d, "leftovers", DOC_OK, "none",
                   "connections live in memfds and abstract sockets, which go with their "
                   "processes: a crash leaves nothing in /dev/shm or /tmp");
}
