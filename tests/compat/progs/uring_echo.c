/* An echo server and client that move their bytes through io_uring
 * (liburing), for tests/compat/test_io_uring.py. The sockets are made,
 * bound and listened on through libc, as liburing's users do. MODE says
 * what goes through the ring:
 *   ring      reads, writes and shutdown; accept and connect through libc
 *   ring-all  accept and connect too
 *   libc      nothing: the same program through libc alone (the peer an
 *             ordinary program would be)
 *
 *   uring_echo server PORT NCONN MODE
 *       serves NCONN connections one after the other, echoing each until
 *       its end of stream; prints "served N connections, B bytes".
 *   uring_echo client PORT NCONN SIZE MODE
 *       NCONN connections one after the other, each sends SIZE bytes of a
 *       per-connection pattern in 64 KiB chunks and checks each chunk's
 *       echo before the next, then shuts down and expects the end of
 *       stream; prints "ok N connections, B bytes".
 * Exit 0 on success, 1 with a message on stderr otherwise. */
#include <arpa/inet.h>
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHUNK (64 * 1024)

static struct io_uring ring;
static int data_by_ring; /* reads, writes, shutdown */
static int open_by_ring; /* accept, connect */

static void die(const char *what, int err)
{
  fprintf(stderr, "uring_echo: %s: %s\n", what, strerror(err));
  exit(1);
}

/* Submits the one prepared request and returns its result. */
static int complete(const char *what)
{
  int rc = io_uring_submit(&ring);
  if (rc != 1)
    die("io_uring_submit", rc < 0 ? -rc : EIO);
  struct io_uring_cqe *cqe;
  while ((rc = io_uring_wait_cqe(&ring, &cqe)) == -EINTR)
    ;
  if (rc < 0)
    die("io_uring_wait_cqe", -rc);
  int res = cqe->res;
  io_uring_cqe_seen(&ring, cqe);
  if (res < 0)
    die(what, -res);
  return res;
}

static struct io_uring_sqe *sqe_get(void)
{
  struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
  if (!sqe)
    die("io_uring_get_sqe", EBUSY);
  return sqe;
}

static int do_recv(int fd, void *buf, size_t len)
{
  if (data_by_ring) {
    io_uring_prep_recv(sqe_get(), fd, buf, len, 0);
    return complete("recv");
  }
  ssize_t n;
  while ((n = recv(fd, buf, len, 0)) < 0 && errno == EINTR)
    ;
  if (n < 0)
    die("recv", errno);
  return (int)n;
}

static void send_all(int fd, const unsigned char *buf, size_t len)
{
  while (len > 0) {
    ssize_t n;
    if (data_by_ring) {
      io_uring_prep_send(sqe_get(), fd, buf, len, MSG_NOSIGNAL);
      n = complete("send");
    } else if ((n = send(fd, buf, len, MSG_NOSIGNAL)) < 0) {
      if (errno == EINTR)
        continue;
      die("send", errno);
    }
    buf += n;
    len -= (size_t)n;
  }
}

static void do_shutdown(int fd)
{
  if (data_by_ring) {
    io_uring_prep_shutdown(sqe_get(), fd, SHUT_WR);
    complete("shutdown");
  } else if (shutdown(fd, SHUT_WR) < 0) {
    die("shutdown", errno);
  }
}

static struct sockaddr_in loopback(int port)
{
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return sa;
}

static int serve(int port, int nconn)
{
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  struct sockaddr_in sa = loopback(port);
  if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(ls, 16) < 0)
    die("listen", errno);
  static unsigned char buf[CHUNK];
  unsigned long long total = 0;
  for (int c = 0; c < nconn; c++) {
    int fd;
    if (open_by_ring) {
      io_uring_prep_accept(sqe_get(), ls, NULL, NULL, 0);
      fd = complete("accept");
    } else if ((fd = accept(ls, NULL, NULL)) < 0) {
      die("accept", errno);
    }
    int n;
    while ((n = do_recv(fd, buf, sizeof buf)) > 0) {
      send_all(fd, buf, (size_t)n);
      total += (unsigned long long)n;
    }
    close(fd);
  }
  printf("served %d connections, %llu bytes\n", nconn, total);
  return 0;
}

/* A per-connection pattern that repeats nowhere within a chunk. */
static void pattern(unsigned char *buf, size_t len, uint64_t *state)
{
  for (size_t i = 0; i < len; i++) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    buf[i] = (unsigned char)*state;
  }
}

static int client(int port, int nconn, long size)
{
  static unsigned char want[CHUNK], got[CHUNK];
  unsigned long long total = 0;
  for (int c = 0; c < nconn; c++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = loopback(port);
    if (fd < 0)
      die("socket", errno);
    if (open_by_ring) {
      io_uring_prep_connect(sqe_get(), fd, (struct sockaddr *)&sa, sizeof sa);
      complete("connect");
    } else if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
      die("connect", errno);
    }
    uint64_t state = 0x9e3779b97f4a7c15ull * (uint64_t)(c + 1);
    for (long off = 0; off < size;) {
      size_t len = size - off < CHUNK ? (size_t)(size - off) : CHUNK;
      pattern(want, len, &state);
      send_all(fd, want, len);
      for (size_t have = 0; have < len;) {
        int n = do_recv(fd, got + have, len - have);
        if (n == 0) {
          fprintf(stderr, "uring_echo: connection %d ended after %llu bytes\n", c,
                  (unsigned long long)(off + (long)have));
          return 1;
        }
        have += (size_t)n;
      }
      if (memcmp(want, got, len) != 0) {
        fprintf(stderr, "uring_echo: connection %d: echo differs in [%ld, %ld)\n", c, off,
                off + (long)len);
        return 1;
      }
      off += (long)len;
      total += len;
    }
    do_shutdown(fd);
    if (do_recv(fd, got, sizeof got) != 0) {
      fprintf(stderr, "uring_echo: connection %d: bytes after the echo\n", c);
      return 1;
    }
    close(fd);
  }
  printf("ok %d connections, %llu bytes\n", nconn, total);
  return 0;
}

int main(int argc, char **argv)
{
  int server = argc == 5 && strcmp(argv[1], "server") == 0;
  int cli = argc == 6 && strcmp(argv[1], "client") == 0;
  const char *mode = argv[argc - 1];
  data_by_ring = strcmp(mode, "ring") == 0 || strcmp(mode, "ring-all") == 0;
  open_by_ring = strcmp(mode, "ring-all") == 0;
  if ((!server && !cli) || (!data_by_ring && strcmp(mode, "libc") != 0)) {
    fprintf(stderr, "usage: uring_echo server PORT NCONN ring|ring-all|libc\n"
                    "       uring_echo client PORT NCONN SIZE ring|ring-all|libc\n");
    return 2;
  }
  int rc = io_uring_queue_init(8, &ring, 0);
  if (rc < 0)
    die("io_uring_queue_init", -rc);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (server)
    return serve(atoi(argv[2]), atoi(argv[3]));
  return client(atoi(argv[2]), atoi(argv[3]), atol(argv[4]));
}
