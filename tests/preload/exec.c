/*
 * exec: a carried connection inherited across exec keeps working in the new
 * program, with no byte lost or repeated (docs/ARCHITECTURE.md,
 * "Transparent mode").
 *  - the server reads part of what the client sent, execs itself, and the
 *    new image reads the rest, a 1 MiB stream the client keeps sending
 *    meanwhile, and answers;
 *  - inetd style: accept, fork, the child puts the socket on stdin and
 *    stdout, closes every other descriptor (closefrom) and execs an echo
 *    program that uses stdio; the parent closes its copy;
 *  - an exec that fails leaves the connection as it was;
 *  - several connections from one client process: the provider holds the
 *    client's CQ armed page and wake-up socket once for all of them, so
 *    every connection's export names the same two descriptors; the new
 *    image takes them once, and every connection still wakes its peer
 *    (the client sleeps between exchanges) and moves its bytes;
 *  - a socket accepted close-on-exec keeps no memfd for a next image (issue
 *    21: two descriptors per connection fewer); the program clears
 *    FD_CLOEXEC and execs all the same: the connection goes back to kernel
 *    TCP first (migrate.c), and the new image reads the rest of the stream
 *    there, no byte lost or repeated: with the client waiting for the new
 *    image before it streams, and with it streaming during the move
 *    (cloexec_exec_while_peer_sends); plain_exec_while_peer_sends streams
 *    the same way while the server execs a program without sovia. Before,
 *    the client's send, waiting for a credit when the server asked to
 *    leave, took the credits the move brought (the server's ACKs for the
 *    bytes it gave back) and went on with DATA on the VI after its own
 *    ACK, or after both ENDs: the server reset the connection, or those
 *    bytes went nowhere and both hung (5 to 7 runs in 12, ~30 ms).
 */
#include "pharness.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

P_THREADED_FORK_CHILDREN /* inetd_fork_dup2_exec */

#define STREAM (1u << 20)
#define ANSWER (256u << 10)

static void send_pattern(int fd, size_t len, uint64_t seed)
{
    static char buf[65536];
    for (size_t done = 0; done < len;) {
        size_t n = len - done < sizeof buf ? len - done : sizeof buf;
        p_fill(buf, n, seed + done);
        p_write_all(fd, buf, n);
        done += n;
    }
}

static void recv_pattern(int fd, size_t len, uint64_t seed)
{
    static char buf[65536], want[65536];
    for (size_t done = 0; done < len;) {
        size_t n = len - done < sizeof buf ? len - done : sizeof buf;
        p_read_all(fd, buf, n);
        p_fill(want, n, seed + done);
        if (memcmp(buf, want, n) != 0)
            FAILF("stream differs in bytes %zu..%zu", done, done + n);
        done += n;
    }
}

/* ---- the new image continues the stream ------------------------------- */

static void exec_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char head[3];
    p_read_all(fd, head, 3); /* "abc" of "abcdef": "def" stays unread */
    CHECK(memcmp(head, "abc", 3) == 0);
    char arg[16];
    snprintf(arg, sizeof arg, "%d", fd);
    p_exec_again(r, "continue", arg);
}

static int continue_after_exec(struct p_role *r, const char *arg)
{
    int fd = atoi(arg);
    char tail[3];
    p_read_all(fd, tail, 3);
    CHECK(memcmp(tail, "def", 3) == 0);
    recv_pattern(fd, STREAM, 7);
    send_pattern(fd, ANSWER, 9);
    SYS(close(fd));
    p_barrier(r);
    return 0;
}

/* A client's stream out and the server's answer, then the end. */
static void stream_and_answer(struct p_role *r, int fd, uint64_t out, uint64_t in)
{
    send_pattern(fd, STREAM, out);
    recv_pattern(fd, ANSWER, in);
    char c;
    CHECK_EQ(read(fd, &c, 1), 0);
    SYS(close(fd));
    p_barrier(r);
}

static void exec_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    p_write_all(fd, "abcdef", 6);
    stream_and_answer(r, fd, 7, 9); /* much of it while the server execs */
}

static int count_memfds(const char *name);

static bool client_waits;

static void cloexec_server(struct p_role *r)
{
    int fd = (int)SYS(accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC));
    char head[3];
    p_read_all(fd, head, 3); /* paired by now: the VI let go of its memfds */
    CHECK(memcmp(head, "abc", 3) == 0);
    if (!p_kernel_mode())
        CHECK_EQ(count_memfds("sovia-vi-"), 0);
    SYS(fcntl(fd, F_SETFD, 0));
    char arg[16];
    snprintf(arg, sizeof arg, "%d", fd);
    p_exec_again(r, client_waits ? "continue-quiet" : "continue", arg);
}

/* The same stream, the server exec'ing a program without sovia. */
static void plain_exec_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char head[3];
    p_read_all(fd, head, 3);
    CHECK(memcmp(head, "abc", 3) == 0);
    char arg[16];
    snprintf(arg, sizeof arg, "%d", fd);
    p_exec_plain_extra(r, "continue", arg);
}

/* The new image says it runs before the stream comes. */
static int continue_quiet(struct p_role *r, const char *arg)
{
    p_put_int(r, 1);
    return continue_after_exec(r, arg);
}

static void quiet_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    p_write_all(fd, "abcdef", 6);
    CHECK_EQ(p_get_int(r), 1);
    stream_and_answer(r, fd, 7, 9);
}

/* ---- several connections to one peer process across exec ---------------- */

#define NSEVERAL 4

/* Descriptors of this process naming a memfd called `name`. */
static int count_memfds(const char *name)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;
    CHECK(d != NULL);
    while ((e = readdir(d))) {
        char path[300], target[256];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, target, sizeof target - 1);
        if (len > 0) {
            target[len] = '\0';
            n += strncmp(target, "/memfd:", 7) == 0 && strstr(target, name) != NULL;
        }
    }
    closedir(d);
    return n;
}

static void several_server(struct p_role *r)
{
    char arg[64] = "";
    for (int i = 0; i < NSEVERAL; i++) {
        int fd = (int)SYS(accept(r->lfd, NULL, NULL));
        char c;
        p_read_all(fd, &c, 1);
        CHECK_EQ(c, 'a' + i);
        snprintf(arg + strlen(arg), sizeof arg - strlen(arg), "%s%d", i ? "," : "", fd);
    }
    p_exec_again(r, "several", arg);
}

static int several_after_exec(struct p_role *r, const char *arg)
{
    int fds[NSEVERAL];
    const char *p = arg;
    for (int i = 0; i < NSEVERAL; i++) {
        fds[i] = atoi(p);
        p = strchr(p, ',');
        CHECK(p != NULL || i == NSEVERAL - 1);
        p = p ? p + 1 : p;
    }
    /* Ours and the client's: one each, whatever the connections. */
    int armed = count_memfds("sovia-cq-armed");
    if (armed != 2)
        FAILF("%d descriptors of CQ armed pages after exec, want 2", armed);
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < NSEVERAL; i++) {
            char b[64];
            p_read_all(fds[i], b, sizeof b);
            p_write_all(fds[i], b, sizeof b);
        }
    for (int i = 0; i < NSEVERAL; i++) {
        char c;
        CHECK_EQ(read(fds[i], &c, 1), 0);
        SYS(close(fds[i]));
    }
    p_barrier(r);
    return 0;
}

static void several_client(struct p_role *r)
{
    int fds[NSEVERAL];
    for (int i = 0; i < NSEVERAL; i++) {
        fds[i] = p_connect(r->port);
        char c = (char)('a' + i);
        p_write_all(fds[i], &c, 1);
    }
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < NSEVERAL; i++) {
            p_sleep_ms(20); /* the server sleeps: each send must wake it */
            p_exchange(fds[i], 64, (uint64_t)(round * NSEVERAL + i));
        }
    for (int i = 0; i < NSEVERAL; i++)
        SYS(close(fds[i]));
    p_barrier(r);
}

/* ---- inetd: accept, fork, dup2 onto stdin/stdout, exec ------------------- */

static void inetd_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        p_child_safety();
        p_threaded_fork_child();
        SYS(dup2(fd, 0));
        SYS(dup2(fd, 1));
        /* As inetd: everything else goes (sovia's own descriptors must
         * survive it), then the service is exec'd. */
        closefrom(3);
        char *argv[] = {"exec-test", "--again", "stdin-echo", "server", "inetd", "-1", "-1",
                        "0", "", NULL};
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    SYS(close(fd)); /* the parent's copy only */
    CHECK(p_reap(pid, "inetd child"));
    struct p_stat st; /* the echo program carried it, through exec */
    if (!p_kernel_mode()) {
        CHECK(p_stat_of(pid, &st));
        CHECK_EQ(st.carried, 1);
    }
    p_barrier(r);
}

/* The service: echoes stdin to stdout until end of stream, through stdio
 * as ftpd does (glibc's stdin and stdout, which no preload sees, must have
 * been replaced by streams over the carried socket). */
static int stdin_echo(void)
{
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) {
        CHECK_EQ(fwrite(buf, 1, n, stdout), n);
        CHECK_EQ(fflush(stdout), 0);
    }
    CHECK(feof(stdin) && !ferror(stdin));
    return 0;
}

static void inetd_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    send_pattern(fd, 100000, 3);
    SYS(shutdown(fd, SHUT_WR));
    recv_pattern(fd, 100000, 3);
    char c;
    CHECK_EQ(read(fd, &c, 1), 0); /* the echo exited: the last holder */
    SYS(close(fd));
    p_barrier(r);
}

/* ---- a failed exec changes nothing ------------------------------------------ */

static void failed_exec_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char *argv[] = {"nothing", NULL};
    CHECK_ERR(execv("/nonexistent/program", argv), ENOENT);
    recv_pattern(fd, STREAM, 5);
    send_pattern(fd, ANSWER, 6);
    SYS(close(fd));
    p_barrier(r);
}

static void failed_exec_client(struct p_role *r)
{
    stream_and_answer(r, p_connect(r->port), 5, 6);
}

int main(int argc, char **argv)
{
    struct p_role again;
    const char *extra = NULL;
    const char *what = p_exec_role(argc, argv, &again, &extra);
    if (what && strcmp(what, "continue") == 0)
        return continue_after_exec(&again, extra);
    if (what && strcmp(what, "continue-quiet") == 0)
        return continue_quiet(&again, extra);
    if (what && strcmp(what, "several") == 0)
        return several_after_exec(&again, extra);
    if (what && strcmp(what, "stdin-echo") == 0)
        return stdin_echo();
    if (what)
        FAILF("unknown re-executed role %s", what);

    p_init("exec");
    p_case("new_image_continues_stream", exec_server, exec_client, P_CARRIED);
    /* The inetd child's record counts the connection (P_NO_STATS: the
     * harness checks the server role's pid, the parent). */
    p_case("inetd_fork_dup2_exec", inetd_server, inetd_client, P_NO_STATS);
    /* The new image's record counts no carried connection: it got a kernel
     * socket (the client's and the bytes are the proof). */
    client_waits = true;
    p_case("cloexec_socket_migrates_at_exec", cloexec_server, quiet_client, P_NO_STATS);
    client_waits = false;
    p_case("cloexec_exec_while_peer_sends", cloexec_server, exec_client, P_NO_STATS);
    p_case("plain_exec_while_peer_sends", plain_exec_server, exec_client, P_NO_STATS);
    p_case("failed_exec_keeps_connection", failed_exec_server, failed_exec_client, P_CARRIED);
    p_expect_carried(NSEVERAL);
    p_case("several_connections_one_peer", several_server, several_client, P_CARRIED);
    return p_done();
}
