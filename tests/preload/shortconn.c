/*
 * shortconn.c - sovia run leaves a client's connections to kernel TCP once
 * its last ones to the same destination were too short to repay carrying,
 * and learns again (src/sovia/shortconn.c; docs/SOCKETS.md, "Short
 * connections"). The default is on; the harness turns it off for the
 * other tests, this one turns it on first. The connections are made by a
 * child of the client role, whose exit record the role then reads.
 *
 *   - short_steps_aside: 40 connections of one exchange each: the first 4
 *     carried, the other 36 left to kernel TCP at once (kernel and short
 *     in the record), none fallen back, every echo right.
 *   - long_carried: 10 connections of 40 exchanges each (80 DATA
 *     packets): all carried.
 *   - learns_again: 4 short (carried), 255 short (kernel), the next one
 *     carried to learn (1 in 256) and long, so the 3 short ones after it
 *     are carried again: carried 8, kernel 255.
 */
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pharness.h"

struct plan {
    int conns;
    int long_at;  /* this connection (-1: none) has LONG exchanges */
    int short_xs; /* exchanges on the others */
    unsigned carried, kernel; /* the client's record must say */
};

#define LONG 40

static const struct plan plans[] = {
    {40, -1, 1, 4, 36},
    {10, -1, LONG, 10, 0},
    {263, 259, 1, 8, 255},
};
static const struct plan *cur;

static void echo_server(struct p_role *r)
{
    for (int i = 0; i < cur->conns; i++) {
        int fd = (int)SYS(accept(r->lfd, NULL, NULL));
        p_echo_serve(fd); /* until end of stream, then closes */
    }
}

static void connections(void *arg)
{
    int port = *(int *)arg;
    for (int i = 0; i < cur->conns; i++) {
        int fd = p_connect(port);
        int xs = i == cur->long_at ? LONG : cur->short_xs;
        for (int x = 0; x < xs; x++)
            p_exchange(fd, 16, (uint64_t)(i * 1000 + x));
        SYS(close(fd));
    }
}

static void client(struct p_role *r)
{
    struct p_stat s;
    if (!p_child_record(connections, &r->port, &s))
        return;
    p_log("client: carried %u kernel %u short %u fell_back %u", s.carried, s.kernel, s.short_,
          s.fell_back);
    if (s.carried != cur->carried || s.kernel != cur->kernel || s.short_ != cur->kernel ||
        s.fell_back != 0)
        FAILF("client: carried %u kernel %u short %u fell_back %u, want %u %u %u 0", s.carried,
              s.kernel, s.short_, s.fell_back, cur->carried, cur->kernel, cur->kernel);
}

int main(void)
{
    setenv("SOVIA_SHORT_CONNS", "1", 1); /* before p_init's default for the other tests */
    p_init("shortconn");
    const char *names[] = {"short_steps_aside", "long_carried", "learns_again"};
    for (int i = 0; i < 3; i++) {
        cur = &plans[i];
        p_case(names[i], echo_server, client, P_NO_STATS);
    }
    return p_done();
}
