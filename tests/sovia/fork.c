/*
 * fork: docs/SOCKETS.md "Processes". After fork() parent and child hold the
 * connection, as with kernel sockets; the stream ends when the last holder
 * closes or exits.
 *  - accept-fork-serve: the parent closes its copy right after the fork;
 *    the child serves 2 MB byte-exactly, and its close is the peer's EOF;
 *  - the child exits without using the connection: the parent keeps
 *    serving, and the peer reads EOF (not ECONNRESET) after the parent's
 *    close;
 *  - the parent exits while the child serves: the peer must not take the
 *    creator's death for the end of the connection.
 */
#include "sharness.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define ECHO_BYTES (2u << 20)
#define CHUNK 65536

/* Echoes `total` bytes back, chunk by chunk. */
static void echo(int fd, size_t total)
{
    static char buf[CHUNK];
    for (size_t done = 0; done < total;) {
        ssize_t n = SYS(sov_recv(fd, buf, sizeof buf, 0));
        CHECK_MSG(n > 0, "end of stream after %zu of %zu echoed bytes", done, total);
        s_send_all(fd, buf, (size_t)n, 0);
        done += (size_t)n;
    }
}

/* The client side of an echo: sends the pattern and checks what comes back. */
static void echo_client(int fd, uint64_t seed, size_t total)
{
    for (size_t pos = 0; pos < total; pos += CHUNK) {
        size_t n = total - pos < CHUNK ? total - pos : CHUNK;
        s_send_pattern(fd, seed, pos, n, 0);
        s_recv_pattern(fd, seed, pos, n);
    }
}

static void check_eof_within_deadline(int fd)
{
    double t0 = s_now_ms();
    s_recv_eof(fd);
    double dt = s_now_ms() - t0;
    CHECK_MSG(dt < S_DEADLINE_MS, "end of stream %.0f ms after the last holder closed", dt);
}

static void serving_child(int chan, void *arg)
{
    (void)chan;
    int fd = *(int *)arg;
    echo(fd, ECHO_BYTES);
    CHECK_EQ(SYS(sov_close(fd)), 0);
}

static void server_accept_fork_serve(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 4);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    int child = s_spawn("server-child", serving_child, &fd, NULL);
    CHECK_EQ(SYS(sov_close(fd)), 0); /* the parent's copy only */
    CHECK_EQ(SYS(sov_close(lfd)), 0);
    s_reap(child);
}

static void client_echo_then_eof(int chan, void *arg)
{
    (void)arg;
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    echo_client(fd, 11, ECHO_BYTES);
    check_eof_within_deadline(fd);
    CHECK_EQ(SYS(sov_close(fd)), 0);
}

static void idle_child(int chan, void *arg)
{
    (void)chan;
    (void)arg; /* exits with the connection open: sovia's exit handling runs */
}

static void server_child_exits(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 4);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    s_reap(s_spawn("idle-child", idle_child, NULL, NULL));
    echo(fd, ECHO_BYTES);
    CHECK_EQ(SYS(sov_close(fd)), 0);
    CHECK_EQ(SYS(sov_close(lfd)), 0);
}

static void server_parent_exits(int chan, void *arg)
{
    (void)arg;
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 4);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* Outlives the parent (an orphan: it reports through the peer). */
        s_sleep_ms(200);
        echo(fd, ECHO_BYTES);
        sov_close(fd);
        exit(0);
    }
    /* The creator of the connection goes; nothing is closed explicitly. */
}

static void client_waits_then_echo(int chan, void *arg)
{
    (void)arg;
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    s_sleep_ms(400); /* the server's creator has exited by now */
    echo_client(fd, 13, ECHO_BYTES);
    check_eof_within_deadline(fd);
    CHECK_EQ(SYS(sov_close(fd)), 0);
}

/* The children these cases fork start threads (the provider's agent) in a
 * child of a threaded parent. The sanitizers cannot follow that: GCC 12's
 * AddressSanitizer does not lock its allocator around fork() (such a child
 * hangs at its next allocation or in the leak check), ThreadSanitizer
 * refuses to start the thread. The plain build runs them. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ASAN_FORK_HAZARD 1
#else
#define ASAN_FORK_HAZARD 0
#endif

int main(void)
{
    s_init("fork", 60);
    if (ASAN_FORK_HAZARD) {
        s_log("SKIP: sanitizer builds (threads started in a child of a threaded parent)");
        s_pass();
    }
    if (s_case("accept_fork_serve"))
        s_run_pair("server", server_accept_fork_serve, "client", client_echo_then_eof, NULL);
    if (s_case("child_exits"))
        s_run_pair("server", server_child_exits, "client", client_echo_then_eof, NULL);
    if (s_case("parent_exits"))
        s_run_pair("server", server_parent_exits, "client", client_waits_then_echo, NULL);
    s_pass();
}
