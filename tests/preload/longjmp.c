/*
 * longjmp: a signal handler that leaves a socket call with siglongjmp (as
 * iperf3's SIGINT handler and ftpd's SIGURG handler do) and the program
 * then uses the same socket again. Under `sovia run` the handler could run
 * while the call held the socket's lock, which then stayed held: the next
 * call on that socket spun for ever (programs/iperf3's interrupted client
 * hung about 1 run in 10). Now a handler due while a lock is held runs as
 * the lock is released (src/sovia/sock.h, sov_locks_held).
 *
 * The client streams 'a' bytes with blocking send() calls while a 200 us
 * interval timer's handler jumps out of them, JUMPS times; then it sends
 * 'Z' and closes. The server reads to the end: every byte is 'a' but the
 * last, 'Z' (how much of an interrupted send went out is unknown, as with
 * kernel sockets, but nothing else may appear), and the connection stays
 * carried.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "pharness.h"

#define JUMPS 300
#define PIECE (64u << 10)

static sigjmp_buf back;
static volatile sig_atomic_t armed;

static void on_alarm(int sig)
{
    (void)sig;
    if (armed)
        siglongjmp(back, 1);
}

static void reader_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    static char buf[1 << 16];
    unsigned long long total = 0;
    char last = 0;
    for (;;) {
        ssize_t n = SYS(read(fd, buf, sizeof buf));
        if (n == 0)
            break;
        for (ssize_t i = 0; i < n; i++) {
            if (last == 'Z')
                FAILF("byte %llu after the final 'Z'", total + (unsigned long long)i);
            if (buf[i] != 'a' && buf[i] != 'Z')
                FAILF("byte %llu is %#x, want 'a' or 'Z'", total + (unsigned long long)i,
                      (unsigned char)buf[i]);
            last = buf[i];
        }
        total += (unsigned long long)n;
    }
    CHECK_EQ(last, 'Z');
    p_log("received %llu bytes", total);
    SYS(close(fd));
}

static void jumping_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    static char piece[PIECE];
    memset(piece, 'a', sizeof piece);
    struct sigaction sa = {.sa_handler = on_alarm};
    sigemptyset(&sa.sa_mask);
    SYS(sigaction(SIGALRM, &sa, NULL));
    struct itimerval every = {{0, 200}, {0, 200}};
    SYS(setitimer(ITIMER_REAL, &every, NULL));
    volatile int jumps = 0;
    sigsetjmp(back, 1);
    armed = 0;
    while (jumps < JUMPS) {
        jumps++;
        armed = 1;
        for (;;) /* until the handler jumps out */
            p_write_all(fd, piece, sizeof piece);
    }
    armed = 0;
    struct itimerval off = {{0, 0}, {0, 0}};
    SYS(setitimer(ITIMER_REAL, &off, NULL));
    signal(SIGALRM, SIG_DFL);
    alarm(P_WATCHDOG_S); /* setitimer took the watchdog's timer */
    p_write_all(fd, "Z", 1);
    SYS(close(fd));
}

int main(void)
{
    p_init("longjmp");
    p_case("handler_jumps_out_of_send", reader_server, jumping_client, P_CARRIED);
    return p_done();
}
