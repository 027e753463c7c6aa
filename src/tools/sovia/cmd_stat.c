/*
 * cmd_stat.c - `sovia stat [--json]`: the calling user's live sovia
 * connections, like ss(8).
 *
 * Every process with sovia connections answers on the abstract Unix socket
 * "sovia-stat.<euid>.<pid>" (src/sovia/statsrv.c describes the answer).
 * The listening ones of our effective uid are found in /proc/net/unix; the
 * server's SO_PEERCRED must show our uid and the pid its name claims (an
 * abstract name can be bound by anyone), and an unresponsive server is
 * skipped after a timeout.
 */
#include "cli.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#define ACCEPTCON 0x00010000u        /* __SO_ACCEPTCON in /proc/net/unix: listening */
#define MAX_ANSWER (64u << 20)       /* bytes read from one process at most */
#define TIMEOUT_S 2                  /* per process: connect and read */
#define NFIELDS 14
#define NREQUIRED 13 /* an older library's answer has no provider */

enum { F_FD, F_LOCAL, F_PEER, F_STATE, F_TXB, F_RXB, F_TXP, F_RXP, F_WINDOW, F_CREDITS, F_WAIT,
       F_HANDLING, F_MODE, F_PROVIDER };

struct row {
    long pid;
    char comm[64];
    char *f[NFIELDS]; /* point into the process's answer */
};

struct rows {
    struct row *v;
    size_t n, cap;
    char **answers; /* to free */
    size_t nanswers;
};

static void usage(FILE *f)
{
    fprintf(f, "usage: sovia stat [--json]\n"
               "\n"
               "Lists your live sovia connections (those of processes with your effective\n"
               "user id): process, descriptor, local and peer address, state, DATA bytes\n"
               "and packets each way, window (credits/w) and wait mode. Programs under\n"
               "'sovia run' show their kernel sockets' addresses.\n"
               "  --json     a JSON array of objects instead of the table\n"
               "  -h, --help this text\n");
}

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* The pids of our uid's stat servers, ascending; -1 if /proc/net/unix is unreadable. */
static long find_servers(long **out)
{
    FILE *f = fopen("/proc/net/unix", "re");
    if (!f)
        return -1;
    char prefix[64];
    int plen = snprintf(prefix, sizeof(prefix), "@sovia-stat.%u.", (unsigned)geteuid());
    long *pids = NULL;
    size_t n = 0, cap = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, f)) > 0) {
        if (line[len - 1] == '\n')
            line[--len] = '\0';
        unsigned flags, type, st;
        unsigned long inode;
        int off = 0;
        if (sscanf(line, "%*x: %*x %*x %x %x %x %lu %n", &flags, &type, &st, &inode, &off) != 4 ||
            off == 0 || !(flags & ACCEPTCON) || strncmp(line + off, prefix, (size_t)plen) != 0)
            continue;
        const char *p = line + off + plen;
        char *end;
        errno = 0;
        long pid = strtol(p, &end, 10);
        if (*p < '0' || *p > '9' || *end || errno || pid <= 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            long *np = realloc(pids, cap * sizeof(*pids));
            if (!np)
                break;
            pids = np;
        }
        pids[n++] = pid;
    }
    free(line);
    fclose(f);
    if (n)
        qsort(pids, n, sizeof(*pids), cmp_long);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (m == 0 || pids[m - 1] != pids[i])
            pids[m++] = pids[i];
    *out = pids;
    return (long)m;
}

/* The whole answer of process `pid`'s server, NUL-terminated; NULL if it
 * is gone, not ours, or does not answer in time. */
static char *query(long pid)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    struct timeval tv = {TIMEOUT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)); /* bounds connect() too */
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "sovia-stat.%u.%ld",
                     (unsigned)geteuid(), pid);
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    struct ucred cr;
    socklen_t crlen = sizeof(cr);
    if (connect(fd, (struct sockaddr *)&a, alen) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) != 0 || crlen != sizeof(cr) ||
        cr.uid != geteuid() || (long)cr.pid != pid) {
        close(fd);
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (cap - len < 4096) {
            if (cap >= MAX_ANSWER)
                break;
            cap = cap ? cap * 2 : 16384;
            char *nb = realloc(buf, cap + 1);
            if (!nb)
                break;
            buf = nb;
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r > 0) {
            len += (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) { /* timed out: an incomplete answer is no answer */
            free(buf);
            buf = NULL;
        }
        break;
    }
    close(fd);
    if (buf)
        buf[len] = '\0';
    return buf;
}

static void read_comm(long pid, char *out, size_t n)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
    FILE *f = fopen(path, "re");
    out[0] = '\0';
    if (f) {
        if (!fgets(out, (int)n, f))
            out[0] = '\0';
        fclose(f);
    }
    out[strcspn(out, "\n")] = '\0';
    if (!out[0])
        snprintf(out, n, "?");
}

static bool add_row(struct rows *r, const struct row *row)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        struct row *nv = realloc(r->v, cap * sizeof(*nv));
        if (!nv)
            return false;
        r->v = nv;
        r->cap = cap;
    }
    r->v[r->n++] = *row;
    return true;
}

static bool is_number(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* Splits one process's answer into rows; lines that do not parse are skipped. */
static void parse_answer(struct rows *r, long pid, const char *comm, char *buf)
{
    char *save = NULL;
    char *line = strtok_r(buf, "\n", &save);
    if (!line || strncmp(line, "sovia-stat ", 11) != 0)
        return;
    while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
        struct row row = {.pid = pid};
        snprintf(row.comm, sizeof(row.comm), "%s", comm);
        int k = 0;
        for (char *p = line; k < NFIELDS && p; k++) {
            row.f[k] = p;
            p = strchr(p, '\t');
            if (p)
                *p++ = '\0';
        }
        if (k < NREQUIRED)
            continue;
        if (k < NFIELDS)
            row.f[F_PROVIDER] = "?";
        static const int numeric[] = {F_FD, F_TXB, F_RXB, F_TXP, F_RXP, F_WINDOW, F_CREDITS};
        bool ok = true;
        for (size_t i = 0; i < sizeof(numeric) / sizeof(numeric[0]); i++)
            ok = ok && is_number(row.f[numeric[i]]);
        if (ok)
            add_row(r, &row);
    }
}

/* ---- Output ---------------------------------------------------------------- */

/* Whether s is valid UTF-8 (then JSON may carry it as it is). */
static bool valid_utf8(const unsigned char *s)
{
    while (*s) {
        unsigned c = *s, more = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2
                                                : (c & 0xf8) == 0xf0 ? 3 : 4;
        if (more == 4 || (more == 1 && c < 0xc2))
            return false;
        s++;
        for (unsigned i = 0; i < more; i++, s++)
            if ((*s & 0xc0) != 0x80)
                return false;
    }
    return true;
}

static void json_string(const char *s)
{
    bool utf8 = valid_utf8((const unsigned char *)s);
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            printf("\\u%04x", *p);
        else if (*p >= 0x80 && !utf8)
            putchar('?');
        else
            putchar(*p);
    }
    putchar('"');
}

static void print_json(const struct rows *r)
{
    if (r->n == 0) {
        printf("[]\n");
        return;
    }
    printf("[\n");
    for (size_t i = 0; i < r->n; i++) {
        char *const *f = r->v[i].f;
        printf("  {\"pid\": %ld, \"command\": ", r->v[i].pid);
        json_string(r->v[i].comm);
        printf(", \"fd\": %s, \"local\": ", f[F_FD]);
        json_string(f[F_LOCAL]);
        printf(", \"peer\": ");
        json_string(f[F_PEER]);
        printf(", \"state\": ");
        json_string(f[F_STATE]);
        printf(", \"tx_bytes\": %s, \"rx_bytes\": %s, \"tx_packets\": %s, \"rx_packets\": %s, "
               "\"window\": %s, \"credits\": %s, \"wait\": ",
               f[F_TXB], f[F_RXB], f[F_TXP], f[F_RXP], f[F_WINDOW], f[F_CREDITS]);
        json_string(f[F_WAIT]);
        printf(", \"handling\": ");
        json_string(f[F_HANDLING]);
        printf(", \"transparent\": %s, \"provider\": ",
               strcmp(f[F_MODE], "run") == 0 ? "true" : "false");
        json_string(f[F_PROVIDER]);
        printf("}%s\n", i + 1 < r->n ? "," : "");
    }
    printf("]\n");
}

enum { C_PID, C_COMMAND, C_FD, C_LOCAL, C_PEER, C_STATE, C_TXB, C_RXB, C_TXP, C_RXP, C_WINDOW,
       C_WAIT, C_PROVIDER, NCOLS };

static const char *const headers[NCOLS] = {"PID",      "COMMAND",  "FD",      "LOCAL",
                                           "PEER",     "STATE",    "TX-BYTES", "RX-BYTES",
                                           "TX-PKTS",  "RX-PKTS",  "WINDOW",  "WAIT",
                                           "PROVIDER"};
static const bool right[NCOLS] = {[C_PID] = true, [C_FD] = true,  [C_TXB] = true,
                                  [C_RXB] = true, [C_TXP] = true, [C_RXP] = true,
                                  [C_WINDOW] = true};

/* The table's cells of one row; pid, window (credits/w) and comm are written here. */
static void cells(const struct row *row, const char *cell[NCOLS], char pid[24], char window[48],
                  char comm[64])
{
    snprintf(pid, 24, "%ld", row->pid);
    snprintf(window, 48, "%s/%s", row->f[F_CREDITS], row->f[F_WINDOW]);
    snprintf(comm, 64, "%s", row->comm);
    for (char *p = comm; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            *p = '?';
    cell[C_PID] = pid;
    cell[C_COMMAND] = comm;
    cell[C_FD] = row->f[F_FD];
    cell[C_LOCAL] = row->f[F_LOCAL];
    cell[C_PEER] = row->f[F_PEER];
    cell[C_STATE] = row->f[F_STATE];
    cell[C_TXB] = row->f[F_TXB];
    cell[C_RXB] = row->f[F_RXB];
    cell[C_TXP] = row->f[F_TXP];
    cell[C_RXP] = row->f[F_RXP];
    cell[C_WINDOW] = window;
    cell[C_WAIT] = row->f[F_WAIT];
    cell[C_PROVIDER] = row->f[F_PROVIDER];
}

static void print_line(const char *const cell[NCOLS], const size_t width[NCOLS])
{
    for (int c = 0; c < NCOLS; c++) {
        const char *sep = c + 1 < NCOLS ? "  " : "\n";
        if (c + 1 == NCOLS)
            printf("%s%s", cell[c], sep);
        else
            printf(right[c] ? "%*s%s" : "%-*s%s", (int)width[c], cell[c], sep);
    }
}

static void print_table(const struct rows *r)
{
    size_t width[NCOLS];
    for (int c = 0; c < NCOLS; c++)
        width[c] = strlen(headers[c]);
    for (size_t i = 0; i < r->n; i++) {
        const char *cell[NCOLS];
        char pid[24], window[48], comm[64];
        cells(&r->v[i], cell, pid, window, comm);
        for (int c = 0; c < NCOLS; c++)
            if (strlen(cell[c]) > width[c])
                width[c] = strlen(cell[c]);
    }
    print_line(headers, width);
    for (size_t i = 0; i < r->n; i++) {
        const char *cell[NCOLS];
        char pid[24], window[48], comm[64];
        cells(&r->v[i], cell, pid, window, comm);
        print_line(cell, width);
    }
}

int cmd_stat(int argc, char **argv)
{
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
            continue;
        }
        if (argv[i][0] == '-')
            return cli_usage_error("stat", "unknown option '%s'", argv[i]);
        return cli_usage_error("stat", "unexpected argument '%s'", argv[i]);
    }
    long *pids = NULL;
    long npids = find_servers(&pids);
    if (npids < 0) {
        fprintf(stderr, "sovia stat: cannot read /proc/net/unix: %s\n", strerror(errno));
        return 1;
    }
    struct rows r = {0};
    r.answers = calloc((size_t)npids + 1, sizeof(*r.answers));
    for (long i = 0; r.answers && i < npids; i++) {
        char *answer = query(pids[i]);
        if (!answer)
            continue;
        r.answers[r.nanswers++] = answer;
        char comm[64];
        read_comm(pids[i], comm, sizeof(comm));
        parse_answer(&r, pids[i], comm, answer);
    }
    if (json)
        print_json(&r);
    else
        print_table(&r);
    for (size_t i = 0; i < r.nanswers; i++)
        free(r.answers[i]);
    free(r.answers);
    free(r.v);
    free(pids);
    return fflush(stdout) == 0 ? 0 : 1;
}
