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
 *     in accept(); the accept must still get the connection.
 * Each case makes two connections, each echoing 256 KiB; the short side
 * holds the same descriptors after the second as after the first (the
 * first may leave sovia's per-process ones, made once).
 */
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pharness.h"

#define ECHO_BYTES (256u * 1024)
#define FD_LIMIT 64
#define SPARE_FDS 3

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n - 3; /* ".", ".." and the directory's own descriptor */
}

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

static void plain_server(struct p_role *r)
{
    for (int i = 0; i < 2; i++)
        p_echo_serve((int)SYS(accept(r->lfd, NULL, NULL)));
}

/* ---- the client short of descriptors ------------------------------------------ */

static void client_short_of_fds(struct p_role *r)
{
    leave_free_fds(SPARE_FDS);
    p_echo_check(p_connect(r->port), ECHO_BYTES, 777);
    int after_first = count_fds();
    p_echo_check(p_connect(r->port), ECHO_BYTES, 777);
    CHECK_EQ(count_fds(), after_first);
}

/* ---- the client short of file size --------------------------------------------- */

static void client_short_of_file_size(struct p_role *r)
{
    struct rlimit rl = {4096, RLIM_INFINITY};
    SYS(getrlimit(RLIMIT_FSIZE, &rl));
    rl.rlim_cur = 4096;
    SYS(setrlimit(RLIMIT_FSIZE, &rl));
    p_echo_check(p_connect(r->port), ECHO_BYTES, 777); /* a SIGXFSZ would have killed us here */
    int after_first = count_fds();
    p_echo_check(p_connect(r->port), ECHO_BYTES, 777);
    CHECK_EQ(count_fds(), after_first);
}

/* ---- the server short of descriptors ------------------------------------------- */

static void server_short_of_fds(struct p_role *r)
{
    leave_free_fds(SPARE_FDS);
    p_barrier(r); /* the client connects only now */
    p_echo_serve((int)SYS(accept(r->lfd, NULL, NULL)));
    int after_first = count_fds();
    p_echo_serve((int)SYS(accept(r->lfd, NULL, NULL)));
    CHECK_EQ(count_fds(), after_first);
}

static void client_after_barrier(struct p_role *r)
{
    p_barrier(r);
    p_echo_check(p_connect(r->port), ECHO_BYTES, 777);
    p_echo_check(p_connect(r->port), ECHO_BYTES, 777);
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
    return p_done();
}
