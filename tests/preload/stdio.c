/*
 * stdio.c - stdio streams on a carried socket: fdopen(sock, "r+") and a
 * pair of fdopen streams (a dup for writing), fprintf + fflush against
 * fgets on the other side (the line protocol of the seed paper's Fig. 3),
 * fileno, fread/fwrite of a large buffer, fscanf, getc/ungetc, fclose
 * flushing and closing the socket.
 */
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pharness.h"

#define LINES 500

static void lines_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    int wfd = (int)SYS(dup(fd));
    FILE *in = fdopen(fd, "r");
    FILE *out = fdopen(wfd, "w");
    CHECK(in != NULL && out != NULL);
    CHECK_EQ(fileno(in), fd);
    CHECK_EQ(fileno(out), wfd);
    char line[256];
    for (int i = 0; i < LINES; i++) {
        CHECK(fgets(line, sizeof line, in) != NULL);
        int n = -1;
        char word[32];
        CHECK_EQ(sscanf(line, "request %d %31s", &n, word), 2);
        CHECK_EQ(n, i);
        CHECK(strcmp(word, "please") == 0);
        CHECK(fprintf(out, "reply %d to \"%.*s\"\n", i * 3, (int)strlen(line) - 1, line) > 0);
        CHECK_EQ(fflush(out), 0);
    }
    /* fscanf and getc/ungetc on the same stream */
    int a = 0, b = 0;
    CHECK_EQ(fscanf(in, "sum %d %d", &a, &b), 2);
    CHECK_EQ(getc(in), '\n');
    CHECK(fprintf(out, "%d\n", a + b) > 0);
    CHECK_EQ(fflush(out), 0);
    int c = getc(in);
    CHECK_EQ(c, 'Z');
    CHECK_EQ(ungetc(c, in), 'Z');
    CHECK_EQ(getc(in), 'Z');
    CHECK_EQ(getc(in), '\n');
    /* the client closes its stream: end of file here */
    CHECK(fgets(line, sizeof line, in) == NULL);
    CHECK(feof(in));
    CHECK(!ferror(in));
    CHECK_EQ(fclose(out), 0);
    CHECK_EQ(fclose(in), 0);
}

static void lines_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    /* One "r+" stream: output, fflush, then input is allowed (ISO C). */
    FILE *f = fdopen(fd, "r+");
    CHECK(f != NULL);
    CHECK_EQ(fileno(f), fd);
    char line[256], want[256];
    CHECK(fprintf(f, "request %d please\n", 0) > 0);
    CHECK_EQ(fflush(f), 0);
    CHECK(fgets(line, sizeof line, f) != NULL);
    CHECK(strcmp(line, "reply 0 to \"request 0 please\"\n") == 0);
    /* Input then output would need a file positioning call, which a socket
     * cannot do: from here a second stream on a dup writes, as programs do. */
    int wfd = (int)SYS(dup(fd));
    FILE *out = fdopen(wfd, "w");
    CHECK(out != NULL);
    CHECK_EQ(fileno(out), wfd);
    for (int i = 1; i < LINES; i++) {
        CHECK(fprintf(out, "request %d please\n", i) > 0);
        CHECK_EQ(fflush(out), 0);
        CHECK(fgets(line, sizeof line, f) != NULL);
        snprintf(want, sizeof want, "reply %d to \"request %d please\"\n", i * 3, i);
        if (strcmp(line, want) != 0)
            FAILF("line %d: \"%s\", want \"%s\"", i, line, want);
    }
    CHECK(fprintf(out, "sum %d %d\n", 20, 22) > 0);
    CHECK_EQ(fflush(out), 0);
    CHECK(fgets(line, sizeof line, f) != NULL);
    CHECK(strcmp(line, "42\n") == 0);
    CHECK(fputs("Z\n", out) >= 0);
    CHECK_EQ(fclose(out), 0); /* flushes; the socket stays open under fd */
    CHECK_EQ(fclose(f), 0);   /* the last name: the server reads end of file */
}

/* ---- a large binary transfer through fwrite/fread ---------------------------- */

#define BLOB (3u << 20)

static void blob_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    FILE *in = fdopen(fd, "r");
    CHECK(in != NULL);
    char *got = malloc(BLOB), *want = malloc(BLOB);
    CHECK(got && want);
    p_fill(want, BLOB, 31);
    size_t done = 0;
    while (done < BLOB) { /* odd-sized reads */
        size_t chunk = BLOB - done < 7777 ? BLOB - done : 7777;
        size_t n = fread(got + done, 1, chunk, in);
        CHECK(n > 0);
        done += n;
    }
    CHECK(memcmp(got, want, BLOB) == 0);
    CHECK_EQ(fread(got, 1, 1, in), 0);
    CHECK(feof(in));
    CHECK_EQ(fclose(in), 0);
    free(got);
    free(want);
}

static void blob_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    FILE *out = fdopen(fd, "w");
    CHECK(out != NULL);
    static char buf[1 << 16];
    CHECK_EQ(setvbuf(out, buf, _IOFBF, sizeof buf), 0);
    char *data = malloc(BLOB);
    CHECK(data != NULL);
    p_fill(data, BLOB, 31);
    size_t done = 0;
    while (done < BLOB) {
        size_t chunk = BLOB - done < 12345 ? BLOB - done : 12345;
        CHECK_EQ(fwrite(data + done, 1, chunk, out), chunk);
        done += chunk;
    }
    /* no fflush: fclose writes the rest */
    CHECK_EQ(fclose(out), 0);
    free(data);
}

int main(void)
{
    p_init("stdio");
    p_case("lines", lines_server, lines_client, P_CARRIED);
    p_case("fwrite_fread", blob_server, blob_client, P_CARRIED);
    return p_done();
}
