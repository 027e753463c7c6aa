/* hrprog.c - see hrprog.h. */
#include "hrprog.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sovia/sharness.h"

int hr_stat_log(void)
{
    int fd = SYS(memfd_create("hostile-run-stat", 0)); /* inherited by the programs */
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    setenv("SOVIA_STAT_LOG", path, 1);
    return fd;
}

struct prog {
    const char *mode;
    char arg[2][16];
};

static void prog_role(int chan, void *arg)
{
    const struct prog *p = arg;
    const char *sovia = getenv("HARDENING_SOVIA_CMD"), *rv = getenv("HARDENING_RVICTIM");
    CHECK_MSG(sovia && rv, "HARDENING_SOVIA_CMD or HARDENING_RVICTIM unset: run through ctest");
    int fl = fcntl(chan, F_GETFD);
    CHECK(fl >= 0 && fcntl(chan, F_SETFD, fl & ~FD_CLOEXEC) == 0);
    char c[16];
    snprintf(c, sizeof c, "%d", chan);
    char *argv[] = {(char *)sovia,
                    "run",
                    "--",
                    (char *)rv,
                    (char *)p->mode,
                    c,
                    p->arg[0][0] ? (char *)p->arg[0] : NULL,
                    p->arg[1][0] ? (char *)p->arg[1] : NULL,
                    NULL};
    execv(sovia, argv);
    FAILF("exec %s: %s", sovia, strerror(errno));
}

int hr_start(const char *role, const char *mode, unsigned a, unsigned b, int *chan)
{
    static struct prog p; /* read by the forked child */
    p = (struct prog){.mode = mode};
    if (a)
        snprintf(p.arg[0], sizeof p.arg[0], "%u", a);
    if (b)
        snprintf(p.arg[1], sizeof p.arg[1], "%u", b);
    return s_spawn(role, prog_role, &p, chan);
}

struct hr_stat hr_stat_of(int log, pid_t pid)
{
    static char buf[16384];
    ssize_t n = pread(log, buf, sizeof buf - 1, 0);
    CHECK(n >= 0);
    buf[n] = 0;
    char key[32];
    snprintf(key, sizeof key, "{\"pid\": %d,", (int)pid);
    const char *line = strstr(buf, key);
    CHECK_MSG(line, "no SOVIA_STAT_LOG record of pid %d in: %s", (int)pid, buf);
    const char *names[4] = {"\"carried\": ", "\"fell_back\": ", "\"kernel\": ",
                            "\"redirected\": "};
    unsigned v[4];
    for (int i = 0; i < 4; i++) {
        const char *f = strstr(line, names[i]);
        CHECK(f);
        v[i] = (unsigned)strtoul(f + strlen(names[i]), NULL, 10);
    }
    return (struct hr_stat){v[0], v[1], v[2], v[3]};
}
