/*
 * run_fallback: under `sovia run` (libsovia-preload.so in LD_PRELOAD), a
 * connection to a local server that does not run sovia falls back to
 * kernel TCP and keeps nothing of sovia (docs/ARCHITECTURE.md,
 * "Transparent mode": no listener answers -> plain TCP).
 *
 * The server is a child that makes its socket calls as raw system calls,
 * so the preload never sees its listener (as a program not run under
 * sovia). The client connects 50 times; each connection carries one
 * byte each way over TCP. Afterwards the client holds exactly the
 * descriptors and memfd mappings it held after the first connection.
 * Stand-alone (no sovia library linked): the preload brings sovia.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(c)                                                                          \
    do {                                                                                  \
        if (!(c)) {                                                                       \
            fprintf(stderr, "[run_fallback] FAIL %s:%d: CHECK(%s) (errno %d)\n", __FILE__,  \
                    __LINE__, #c, errno);                                                 \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#define ROUNDS 50

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the listing's own descriptor */
}

static int count_memfd_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, "/memfd:") != NULL;
    fclose(f);
    return n;
}

/* Accepts and answers one byte per connection, with raw system calls. */
static void server(int lfd)
{
    alarm(30);
    for (int i = 0; i <= ROUNDS; i++) {
        int c = (int)syscall(SYS_accept4, lfd, NULL, NULL, 0);
        CHECK(c >= 0);
        char b;
        CHECK(syscall(SYS_read, c, &b, 1) == 1);
        b ^= 0x5a;
        CHECK(syscall(SYS_write, c, &b, 1) == 1);
        syscall(SYS_close, c);
    }
    _exit(0);
}

static void one(uint16_t port, int i)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    char b = (char)i;
    CHECK(write(fd, &b, 1) == 1);
    CHECK(read(fd, &b, 1) == 1);
    CHECK(b == (char)(i ^ 0x5a));
    CHECK(close(fd) == 0);
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    alarm(60);
    if (!getenv("LD_PRELOAD") || !strstr(getenv("LD_PRELOAD"), "preload"))
        printf("[run_fallback] note: not under the preload: checking kernel TCP only\n");
    int lfd = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM, 0);
    CHECK(lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(syscall(SYS_bind, lfd, &a, sizeof a) == 0);
    socklen_t al = sizeof a;
    CHECK(syscall(SYS_getsockname, lfd, &a, &al) == 0);
    CHECK(syscall(SYS_listen, lfd, 64) == 0);
    uint16_t port = ntohs(a.sin_port);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        server(lfd);
    syscall(SYS_close, lfd);
    one(port, 0); /* sovia is up now (NIC, threads) */
    int fds = count_fds(), maps = count_memfd_maps();
    for (int i = 1; i <= ROUNDS; i++)
        one(port, i);
    int fds2 = count_fds(), maps2 = count_memfd_maps();
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    printf("[run_fallback] %d fallback connections: descriptors %d -> %d, memfd mappings %d -> "
           "%d\n", ROUNDS, fds, fds2, maps, maps2);
    CHECK(fds2 == fds);
    CHECK(maps2 == maps);
    printf("[run_fallback] PASS\n");
    return 0;
}
