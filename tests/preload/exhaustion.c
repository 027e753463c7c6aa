/*
 * exhaustion.c - under `sovia run`, a process short of descriptors or of
 * file size for a connection's segments still connects and accepts: sovia
 * cannot carry the connection, so it stays on kernel TCP, byte-exact, with
 * no error the program would not have seen without sovia, and nothing of
 * sovia left behind (issue 6: "under sovia run new connections fall back to
 * kernel TCP"; the sov_* side is hardening/exhaustion).
 *
 *   - client_out_of_descriptors: the client fills every free descriptor
 *     number below a lowered RLIMIT_NOFILE but SPARE_FDS; its socket takes
 *     one, sovia's connection (which needs 8 at its peak) cannot be made;
 *   - client_file_size_limit: RLIMIT_FSIZE below a segment's size (a memfd
 *     is a file: sovia must neither grow it, which raises SIGXFSZ, nor carry
 *     the connection);
 *   - server_out_of_descriptors: the same shortage at the server, whose
 *     service threads answer the client's request while the program waits
 *     in accept(); the accept must still get the connection;
 *   - server_keeps_room: a server whose soft RLIMIT_NOFILE (256) holds its
 *     40 connections but not sovia's descriptors for each (10) accepts
 *     them only after the client connected them all, as memcached under a
 *     load tool does: every accept() succeeds and every connection echoes,
 *     some carried and the rest on kernel TCP. Before, the connections
 *     waiting in the shadow listener's queue took every free descriptor
 *     and the program's accept() failed with EMFILE.
 * Each case makes two connections, each echoing 256 KiB; the short side
 * holds the same descriptors, memfds, memfd mappings and threads after the
 * second as after the first (the first may leave sovia's per-process ones,
 * made once).
 */
#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pharness.h"

#define ECHO_BYTES (256u * 1024)
#define FD_LIMIT 64
#define SPARE_FDS 3

/* Lowers RLIMIT_NOFILE to FD_LIMIT and fills the free numbers below it but
 * `spare`, with /dev/null. sovia's own descriptors sit at high numbers
 * (above 3/4 of the old limit): beyond the new limit, still valid. */
static void leave_free_fds(int spare)
{
    struct rlimit rl;
    SYS(getrlimit(RLIMIT_NOFILE, &rl));
    rl.rlim_cur = FD_LIMIT;
    SYS(setrlimit(RLIMIT_NOFILE, &rl));
    int free_below = 0;
    for (int fd = 0; fd < FD_LIMIT; fd++)
        if (fcntl(fd, F_GETFD) < 0)
            free_below++;
    for (int i = 0; i < free_below - spare; i++)
        SYS(open("/dev/null", O_RDONLY | O_CLOEXEC));
}

/* One echo connection, as the client or the server. */
static void echo_once(struct p_role *r, bool server)
{
    if (server)
        p_echo_serve((int)SYS(accept(r->lfd, NULL, NULL)));
    else
        p_echo_check(p_connect(r->port), ECHO_BYTES, 777);
}

/* What the process holds once sovia's threads are done with the closed
 * connections (the peer process's shared entries and pidfd go with the
 * last connection to it, a moment after close): two looks 20 ms apart
 * agree, within a second. */
static struct p_held held_settled(void)
{
    struct p_held a = p_held_now(), b;
    for (int i = 0; i < 50; i++) {
        usleep(20000);
        b = p_held_now();
        if (p_held_equal(&a, &b))
            break;
        a = b;
    }
    return a;
}

/* Two echo connections; the short side (`check`) holds after the second
 * what it held after the first. */
static void echo_twice(struct p_role *r, bool server, bool check)
{
    echo_once(r, server);
    struct p_held after_first = check ? held_settled() : p_held_now();
    echo_once(r, server);
    struct p_held now = check ? held_settled() : p_held_now();
    if (check && !p_held_equal(&after_first, &now))
        FAILF("fds %d -> %d, memfds %d -> %d, memfd mappings %d -> %d, threads %d -> %d",
              after_first.fds, now.fds, after_first.memfds, now.memfds, after_first.maps,
              now.maps, after_first.threads, now.threads);
}

static void plain_server(struct p_role *r)
{
    echo_twice(r, true, false);
}

/* ---- the client short of descriptors ------------------------------------------ */

static void client_short_of_fds(struct p_role *r)
{
    leave_free_fds(SPARE_FDS);
    echo_twice(r, false, true);
}

/* ---- the client short of file size --------------------------------------------- */

static void client_short_of_file_size(struct p_role *r)
{
    struct rlimit rl;
    SYS(getrlimit(RLIMIT_FSIZE, &rl));
    rl.rlim_cur = 4096;
    SYS(setrlimit(RLIMIT_FSIZE, &rl));
    echo_twice(r, false, true); /* a SIGXFSZ would kill us here */
}

/* ---- the server short of descriptors ------------------------------------------- */

static void server_short_of_fds(struct p_role *r)
{
    leave_free_fds(SPARE_FDS);
    p_barrier(r); /* the client connects only now */
    echo_twice(r, true, true);
}

static void client_after_barrier(struct p_role *r)
{
    p_barrier(r);
    echo_twice(r, false, false);
}

/* ---- the server keeps room for the program's own descriptors --------------------- */

#define ROOM_LIMIT 256
#define ROOM_CONNS 40
#define ROOM_MSG 64

static void server_keeps_room(struct p_role *r)
{
    struct rlimit rl;
    SYS(getrlimit(RLIMIT_NOFILE, &rl));
    rl.rlim_cur = ROOM_LIMIT;
    SYS(setrlimit(RLIMIT_NOFILE, &rl));
    p_barrier(r); /* the client connects them all */
    p_barrier(r);
    int fds[ROOM_CONNS];
    for (int i = 0; i < ROOM_CONNS; i++)
        fds[i] = (int)SYS(accept(r->lfd, NULL, NULL));
    for (int i = 0; i < ROOM_CONNS; i++) {
        char buf[ROOM_MSG];
        p_read_all(fds[i], buf, sizeof(buf));
        p_write_all(fds[i], buf, sizeof(buf));
        SYS(close(fds[i]));
    }
}

static void client_many(struct p_role *r)
{
    p_barrier(r);
    int fds[ROOM_CONNS];
    for (int i = 0; i < ROOM_CONNS; i++)
        fds[i] = p_connect(r->port);
    p_barrier(r);
    for (int i = 0; i < ROOM_CONNS; i++) {
        char out[ROOM_MSG], in[ROOM_MSG];
        p_fill(out, sizeof(out), 100u + (uint64_t)i);
        p_write_all(fds[i], out, sizeof(out));
        p_read_all(fds[i], in, sizeof(in));
        if (memcmp(in, out, sizeof(in)) != 0)
            FAILF("connection %d: the echo differs", i);
        SYS(close(fds[i]));
    }
}

int main(void)
{
    p_init("exhaustion");
    p_case("client_out_of_descriptors", plain_server, client_short_of_fds,
           P_CLIENT_KERNEL | P_SERVER_KERNEL);
    p_case("client_file_size_limit", plain_server, client_short_of_file_size,
           P_CLIENT_KERNEL | P_SERVER_KERNEL);
    p_case("server_out_of_descriptors", server_short_of_fds, client_after_barrier,
           P_CLIENT_KERNEL | P_SERVER_KERNEL);
    p_case("server_keeps_room", server_keeps_room, client_many, P_CARRIED);
    return p_done();
}
