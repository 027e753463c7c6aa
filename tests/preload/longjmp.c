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
 *
 * handler_jumps_out_of_sleep: the handler jumps out of an epoll_wait that
 * sleeps on a carried socket (the preload's sleep, which a handler ends by
 * writing the thread's doorbell); the next epoll_wait with nothing to
 * report must sleep its 300 ms, not spin on that write (it used 300 ms of
 * CPU before).
 */
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/resource.h>
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

static void idle_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    p_barrier(r); /* the client has slept */
    p_write_all(fd, "x", 1);
    char b;
    CHECK_EQ(SYS(read(fd, &b, 1)), 0);
    SYS(close(fd));
}

static double cpu_ms(void)
{
    struct rusage ru;
    SYS(getrusage(RUSAGE_THREAD, &ru));
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

static void sleeping_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    int ep = (int)SYS(epoll_create1(EPOLL_CLOEXEC));
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd}, out;
    SYS(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
    struct sigaction sa = {.sa_handler = on_alarm};
    sigemptyset(&sa.sa_mask);
    SYS(sigaction(SIGALRM, &sa, NULL));
    struct itimerval once = {{0, 0}, {0, 100000}};
    if (sigsetjmp(back, 1) == 0) {
        armed = 1;
        SYS(setitimer(ITIMER_REAL, &once, NULL));
        epoll_wait(ep, &out, 1, 5000); /* the handler jumps out of it */
        FAILF("epoll_wait returned before the handler jumped out");
    }
    armed = 0;
    signal(SIGALRM, SIG_DFL);
    alarm(P_WATCHDOG_S); /* setitimer took the watchdog's timer */
    double t0 = p_now_ms(), c0 = cpu_ms();
    CHECK_EQ(SYS(epoll_wait(ep, &out, 1, 300)), 0);
    double wall = p_now_ms() - t0, cpu = cpu_ms() - c0;
    p_log("epoll_wait(300 ms) after the jump: %.0f ms, %.1f ms of CPU", wall, cpu);
    if (wall < 250)
        FAILF("epoll_wait(300) returned after %.0f ms", wall);
    if (cpu >= 100)
        FAILF("epoll_wait(300) spun: %.0f ms of CPU", cpu);
    p_barrier(r);
    CHECK_EQ(SYS(epoll_wait(ep, &out, 1, 5000)), 1);
    char b;
    CHECK_EQ(SYS(read(fd, &b, 1)), 1);
    SYS(close(ep));
    SYS(close(fd));
}

int main(void)
{
    p_init("longjmp");
    p_case("handler_jumps_out_of_send", reader_server, jumping_client, P_CARRIED);
    p_case("handler_jumps_out_of_sleep", idle_server, sleeping_client, P_CARRIED);
    return p_done();
}
