/*
 * rpc_client.c - the client of the RPC experiment (seed 000 section 5.4):
 * an ordinary TI-RPC program, unaware of sovia. clnt_create(host, PROG,
 * VERS, "tcp") asks rpcbind for the server's port and connects over TCP,
 * so under `sovia run` that connection is the one sovia carries.
 *
 * usage: rpc_client [-P PROGRAM_NUMBER] HOST check SIZE...
 *        rpc_client [-P PROGRAM_NUMBER] HOST bench CALLS SIZE...
 *
 * check: one STRARG_NULL call ("null RESULT"), then for each size and
 *   rounds 0..2 the pattern of strarg_data.h sent to STRARG_LEN and
 *   STRARG_SUM: "SIZE ROUND LENGTH CHECKSUM" (what the server counted and
 *   summed; the test compares them with its own).
 * bench: for each size, warm-up calls (CALLS/10, and 50 ms at least) then
 *   CALLS timed calls on one connection, "SIZE MEAN_MICROSECONDS". Size 0 calls STRARG_NULL (the
 *   argument declared void, Fig. 10's x = 0), the others STRARG_LEN; every
 *   result is checked.
 * Exit 0, or 1 after an RPC error (clnt_perror's message on stderr).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "strarg.h"
#include "strarg_data.h"

#define CHECK_ROUNDS 3

static int parse_num(const char *s, unsigned long max, unsigned long *out)
{
    char *end;
    unsigned long v = strtoul(s, &end, 0);
    if (*s == '\0' || *end != '\0' || v > max)
        return -1;
    *out = v;
    return 0;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* One call of the procedure measured for `size`; 0 on the right result. */
static int call_once(CLIENT *cl, char *arg, size_t size)
{
    int *r = size == 0 ? strarg_null_1(NULL, cl) : strarg_len_1(&arg, cl);
    if (!r) {
        clnt_perror(cl, size == 0 ? "STRARG_NULL" : "STRARG_LEN");
        return -1;
    }
    if (*r != (int)size) {
        fprintf(stderr, "rpc_client: %zu-byte argument: result %d\n", size, *r);
        return -1;
    }
    return 0;
}

static int bench(CLIENT *cl, char *buf, unsigned long calls, const size_t *sizes, int n)
{
    for (int i = 0; i < n; i++) {
        strarg_pattern(buf, sizes[i], 0);
        /* Warm-up: CALLS/10 calls and at least 50 ms, so the scheduler has
         * placed both processes (the first size is slower otherwise). */
        double until = now_us() + 50000;
        for (unsigned long c = 0; c < calls / 10 + 1 || now_us() < until; c++)
            if (call_once(cl, buf, sizes[i]) < 0)
                return -1;
        double t0 = now_us();
        for (unsigned long c = 0; c < calls; c++)
            if (call_once(cl, buf, sizes[i]) < 0)
                return -1;
        printf("%zu %.3f\n", sizes[i], (now_us() - t0) / (double)calls);
        fflush(stdout);
    }
    return 0;
}

static int check(CLIENT *cl, char *buf, const size_t *sizes, int n)
{
    int *r = strarg_null_1(NULL, cl);
    if (!r) {
        clnt_perror(cl, "STRARG_NULL");
        return -1;
    }
    printf("null %d\n", *r);
    for (int i = 0; i < n; i++) {
        for (unsigned round = 0; round < CHECK_ROUNDS; round++) {
            strarg_pattern(buf, sizes[i], round);
            int *len = strarg_len_1(&buf, cl);
            if (!len) {
                clnt_perror(cl, "STRARG_LEN");
                return -1;
            }
            int length = *len; /* the stubs' results live in static storage */
            int *sum = strarg_sum_1(&buf, cl);
            if (!sum) {
                clnt_perror(cl, "STRARG_SUM");
                return -1;
            }
            printf("%zu %u %d %u\n", sizes[i], round, length, (unsigned)*sum);
        }
    }
    fflush(stdout);
    return 0;
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [-P PROGRAM_NUMBER] HOST check SIZE...\n"
            "       %s [-P PROGRAM_NUMBER] HOST bench CALLS SIZE...\n"
            "SIZE: 0..%d bytes\n",
            argv0, argv0, STRARG_MAX);
    exit(2);
}

int main(int argc, char **argv)
{
    unsigned long prog = STRARG_PROG, calls = 0;
    int opt;
    while ((opt = getopt(argc, argv, "P:")) != -1)
        if (opt != 'P' || parse_num(optarg, 0xffffffffUL, &prog) < 0 || prog == 0)
            usage(argv[0]);
    if (argc - optind < 3)
        usage(argv[0]);
    const char *host = argv[optind], *mode = argv[optind + 1];
    int first = optind + 2;
    int is_bench = strcmp(mode, "bench") == 0;
    if (!is_bench && strcmp(mode, "check") != 0)
        usage(argv[0]);
    if (is_bench && (parse_num(argv[first++], 1UL << 30, &calls) < 0 || calls == 0))
        usage(argv[0]);
    int n = argc - first;
    if (n < 1)
        usage(argv[0]);
    size_t sizes[n];
    for (int i = 0; i < n; i++) {
        unsigned long v;
        if (parse_num(argv[first + i], STRARG_MAX, &v) < 0)
            usage(argv[0]);
        sizes[i] = v;
    }

    CLIENT *cl = clnt_create(host, (rpcprog_t)prog, STRARG_VERS, "tcp");
    if (!cl) {
        clnt_pcreateerror(host);
        return 1;
    }
    static char buf[STRARG_MAX + 1];
    int rc = is_bench ? bench(cl, buf, calls, sizes, n) : check(cl, buf, sizes, n);
    clnt_destroy(cl);
    return rc < 0 ? 1 : 0;
}
