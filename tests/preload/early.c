/*
 * early: bytes written before the pairing completes (docs/ARCHITECTURE.md,
 * "Transparent mode", step 5). Either end holds up to one packet, as a
 * kernel socket's send buffer would take it, and sends it as the first
 * DATA once paired, or on the kernel connection if the connection falls
 * back or closes first.
 *  - client_writes_before_accept: a non-blocking client writes before the
 *    server accept()s: send() takes the bytes at once and poll reports
 *    POLLOUT (it said EAGAIN while poll said POLLOUT: a send/poll loop
 *    spun until the accept);
 *  - client_writes_closes_before_accept: the client writes and closes
 *    before the accept: the server reads every byte, then end of stream
 *    (on the kernel connection: the client's VI went with its close);
 *  - greeting_unanswered_close: the server greets and closes while the
 *    client is stopped and cannot answer the pairing: the greeting goes to
 *    the kernel connection, where the resumed client reads it. (Both
 *    closes wrote those bytes after the kernel socket was closed: EBADF,
 *    and the peer read an empty stream.)
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pharness.h"

#define MSG "early bytes, before anyone accepted"
#define ACCEPT_DELAY_MS 100

/* ---- a non-blocking client writes before the accept ----------------------- */

/* Once the client says it has written (and maybe closed), accepts late
 * and reads MSG. */
static int accept_late_read(struct p_role *r)
{
    CHECK_EQ(p_get_int(r), 1);
    p_sleep_ms(ACCEPT_DELAY_MS);
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char buf[sizeof MSG - 1];
    p_read_all(fd, buf, sizeof buf);
    CHECK(memcmp(buf, MSG, sizeof buf) == 0);
    return fd;
}

static void late_accept_server(struct p_role *r)
{
    int fd = accept_late_read(r);
    p_write_all(fd, "ok", 2);
    SYS(close(fd));
}

static void nonblocking_early_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    SYS(fcntl(fd, F_SETFL, O_NONBLOCK));
    CHECK_EQ(send(fd, MSG, sizeof MSG - 1, 0), (long long)(sizeof MSG - 1));
    struct pollfd w = {.fd = fd, .events = POLLOUT};
    CHECK_EQ(poll(&w, 1, 0), 1);
    CHECK_EQ(w.revents, POLLOUT);
    p_put_int(r, 1);
    SYS(fcntl(fd, F_SETFL, 0));
    char buf[2];
    p_read_all(fd, buf, 2);
    CHECK(memcmp(buf, "ok", 2) == 0);
    SYS(close(fd));
}

/* ---- the client writes and closes before the accept ------------------------- */

static void read_to_end_server(struct p_role *r)
{
    int fd = accept_late_read(r);
    char c;
    CHECK_EQ(read(fd, &c, 1), 0);
    SYS(close(fd));
}

static void write_close_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    p_write_all(fd, MSG, sizeof MSG - 1);
    SYS(close(fd));
    p_put_int(r, 1);
}

/* ---- the server greets and closes; the client cannot answer ------------------ */

#define GREETING "421 too busy\r\n"

/* Until /proc says pid is stopped. */
static void await_stopped(pid_t pid)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    for (int i = 0; i < 5000; i++) {
        FILE *f = fopen(path, "r");
        CHECK(f != NULL);
        bool stopped = fgets(line, sizeof line, f) && strstr(line, ") T ");
        fclose(f);
        if (stopped)
            return;
        p_sleep_ms(1);
    }
    FAILF("pid %d did not stop", (int)pid);
}

static void greet_close_server(struct p_role *r)
{
    pid_t client = (pid_t)p_get_int(r);
    await_stopped(client);
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    p_write_all(fd, GREETING, sizeof GREETING - 1);
    SYS(close(fd));
    SYS(kill(client, SIGCONT));
}

static void stopped_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    p_put_int(r, getpid());
    raise(SIGSTOP); /* the whole process: no thread of it answers the pairing */
    char buf[sizeof GREETING - 1];
    p_read_all(fd, buf, sizeof buf);
    CHECK(memcmp(buf, GREETING, sizeof buf) == 0);
    char c;
    CHECK_EQ(read(fd, &c, 1), 0);
    SYS(close(fd));
}

int main(void)
{
    p_init("early");
    p_case("client_writes_before_accept", late_accept_server, nonblocking_early_client,
           P_CARRIED);
    p_case("client_writes_closes_before_accept", read_to_end_server, write_close_client,
           P_SERVER_KERNEL);
    p_case("greeting_unanswered_close", greet_close_server, stopped_client, P_CLIENT_FELLBACK);
    return p_done();
}
