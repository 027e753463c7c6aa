/* hcommon.c - see hcommon.h. */
#include "hcommon.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <vipl_ext.h>

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

void hc_counts_check(const struct hc_counts *base, const struct hc_counts *now, const char *what)
{
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
