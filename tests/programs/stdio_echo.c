/*
 * stdio_echo.c - line echo over a TCP socket through stdio, in the style of
 * the seed paper's Fig. 3: each side fdopen()s its connected socket (one
 * stream to read, one on a dup() to write), reads lines with fgets() and
 * writes them with fprintf(). The program test runs it under `sovia run`.
 *
 *   stdio_echo server PORT
 *       accepts one connection on 127.0.0.1:PORT, answers each line L with
 *       "echo L"; at end of input answers "done N" (N lines), prints
 *       "server: N lines" and exits 0.
 *   stdio_echo client PORT LINES
 *       sends LINES lines of varying length (up to ~3 KB), reading each
 *       answer before the next line, then half-closes; checks every answer
 *       and the final "done LINES", prints "client: LINES lines ok" and
 *       exits 0 (1 on any mismatch or error).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define LINE_MAX_LEN 8192

static int die(const char *what)
{
    fprintf(stderr, "stdio_echo: %s: %s\n", what, strerror(errno));
    return 1;
}

static struct sockaddr_in loopback(int port)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

/* Streams over a connected socket: one to read it, one (on a dup) to
 * write it, so each fclose closes its own descriptor. */
static int open_streams(int fd, FILE **in, FILE **out)
{
    int wfd = dup(fd);
    if (wfd < 0)
        return -1;
    *in = fdopen(fd, "r");
    *out = fdopen(wfd, "w");
    return *in && *out ? 0 : -1;
}

/* Line i: its number and a body of (i * 37) % 3000 letters. */
static void make_line(char *buf, size_t len, int i)
{
    int n = snprintf(buf, len, "line %d ", i);
    int body = (i * 37) % 3000;
    for (int k = 0; k < body && (size_t)n + 2 < len; k++)
        buf[n++] = (char)('a' + (i + k) % 26);
    buf[n++] = '\n';
    buf[n] = '\0';
}

static int server(int port)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    if (l < 0)
        return die("socket");
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = loopback(port);
    if (bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 4) != 0)
        return die("bind/listen");
    int fd = accept(l, NULL, NULL);
    if (fd < 0)
        return die("accept");
    close(l);
    FILE *in, *out;
    if (open_streams(fd, &in, &out) != 0)
        return die("fdopen");
    static char line[LINE_MAX_LEN];
    int n = 0;
    while (fgets(line, sizeof(line), in)) {
        fprintf(out, "echo %s", line);
        if (fflush(out) != 0)
            return die("fflush");
        n++;
    }
    if (ferror(in))
        return die("fgets");
    fprintf(out, "done %d\n", n);
    if (fclose(out) != 0)
        return die("fclose");
    fclose(in);
    printf("server: %d lines\n", n);
    return 0;
}

static int client(int port, int lines)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return die("socket");
    struct sockaddr_in a = loopback(port);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        return die("connect");
    FILE *in, *out;
    if (open_streams(fd, &in, &out) != 0)
        return die("fdopen");
    static char line[LINE_MAX_LEN], want[LINE_MAX_LEN + 8], got[LINE_MAX_LEN + 8];
    for (int i = 0; i < lines; i++) {
        make_line(line, sizeof(line), i);
        fprintf(out, "%s", line);
        if (fflush(out) != 0)
            return die("fflush");
        snprintf(want, sizeof(want), "echo %s", line);
        if (!fgets(got, sizeof(got), in)) {
            fprintf(stderr, "stdio_echo: line %d: no answer (%s)\n", i,
                    ferror(in) ? strerror(errno) : "end of file");
            return 1;
        }
        if (strcmp(got, want) != 0) {
            fprintf(stderr, "stdio_echo: line %d: answer differs (%zu bytes, want %zu)\n", i,
                    strlen(got), strlen(want));
            return 1;
        }
    }
    /* Half-close: the server sees end of input, answers "done N". */
    if (shutdown(fileno(out), SHUT_WR) != 0)
        return die("shutdown");
    snprintf(want, sizeof(want), "done %d\n", lines);
    if (!fgets(got, sizeof(got), in) || strcmp(got, want) != 0) {
        fprintf(stderr, "stdio_echo: no \"done %d\" at the end\n", lines);
        return 1;
    }
    if (fgets(got, sizeof(got), in)) {
        fprintf(stderr, "stdio_echo: data after \"done\"\n");
        return 1;
    }
    fclose(out);
    fclose(in);
    printf("client: %d lines ok\n", lines);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "server") == 0)
        return server(atoi(argv[2]));
    if (argc == 4 && strcmp(argv[1], "client") == 0)
        return client(atoi(argv[2]), atoi(argv[3]));
    fprintf(stderr, "usage: stdio_echo server PORT | stdio_echo client PORT LINES\n");
    return 2;
}
