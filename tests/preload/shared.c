/*
 * shared.c - one carried connection used by several processes, as kernel
 * sockets allow after fork (issue 4, "Process semantics"):
 *  - alternate_fork: the parent and a series of forked children take turns
 *    (each writes a request and reads its reply; some children end with
 *    exit, some with _exit, which skips the sockets layer's exit);
 *  - alternate_exec: as a shell's `exec 3<>/dev/tcp/...` followed by
 *    `head -c N <&3` and its own reads and writes: children exec head(1)
 *    on the connection while the parent writes and reads between them
 *    (before records, the parent read head's bytes again and lost others);
 *  - split_directions: the parent writes a stream while its child reads
 *    the echo at the same time (rlogin's pattern);
 *  - concurrent_readers: parent and child read one stream at once; every
 *    byte goes to exactly one of them (count and sum of the bytes);
 *  - concurrent_writers: parent and child write 64-byte records at once;
 *    the server gets every record of each, whole and in each one's order;
 *  - early_writers: a client writes, forks, its child writes, the parent
 *    writes again, all before the server accepts; the server reads the
 *    three in that order (bytes held until the pairing are the
 *    connection's, not one process's: the child's were lost before);
 *  - killed_holder: the child holding the connection is killed (SIGKILL,
 *    left a zombie): the parent's record goes within 2 s, back to the
 *    private fast path (before, it stayed on the record for good);
 *  - peer_left_stale: a forking server (rsync's daemon) writes its last
 *    bytes and closes, which ends a shared connection without a FIN (the
 *    peer sees every holder there gone); the client holder that reads them
 *    next had not seen the other holder's last section, and loads the
 *    record into a VI already failed: it reads the bytes, then the end
 *    (before, "record is inconsistent" and ECONNRESET: rsync's exit 10).
 * Every case is byte-exact and must stay carried. PRELOAD_TEST_KERNEL=1
 * checks the same expectations on kernel TCP.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pharness.h"

/* Forked children serve an inherited connection with the sockets layer's
 * threads. */
P_THREADED_FORK_CHILDREN

#define ROUNDS 24
#define REQ 48
#define STREAM (8u << 20)
#define RECORD 64
#define RECORDS 4000

static void echo_server(struct p_role *r)
{
    p_echo_serve((int)SYS(accept(r->lfd, NULL, NULL)));
}

static void exchange(int fd, int i)
{
    p_exchange(fd, REQ, (uint64_t)i);
}

static void wait_ok(pid_t pid)
{
    int st;
    CHECK_EQ(SYS(waitpid(pid, &st, 0)), pid);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 0);
}

static void end_stream(int fd)
{
    SYS(shutdown(fd, SHUT_WR));
    char c;
    CHECK_EQ(read(fd, &c, 1), 0);
    SYS(close(fd));
}

/* ---- Taking turns ---------------------------------------------------------- */

static void alternate_fork_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    for (int i = 0; i < ROUNDS; i++) {
        if (i % 2 == 0) {
            exchange(fd, i);
            continue;
        }
        pid_t pid = p_fork_holder();
        if (pid == 0) {
            exchange(fd, i);
            if (i % 4 == 1)
                _exit(0); /* the sockets layer never hears of this one's end */
            exit(0);
        }
        wait_ok(pid);
    }
    end_stream(fd);
}

/* head(1) reads exactly REQ bytes of the connection (its stdin) and writes
 * them to the pipe. */
static void head_reads_reply(int fd, int i)
{
    char out[REQ], in[REQ];
    p_fill(out, sizeof out, (uint64_t)i);
    p_write_all(fd, out, sizeof out);
    int pipefd[2];
    SYS(pipe(pipefd));
    pid_t pid = p_fork_holder();
    if (pid == 0) {
        SYS(dup2(fd, 0));
        SYS(dup2(pipefd[1], 1));
        char count[16];
        snprintf(count, sizeof count, "%d", REQ);
        execlp("head", "head", "-c", count, (char *)NULL);
        FAILF("exec head");
    }
    SYS(close(pipefd[1]));
    p_read_all(pipefd[0], in, sizeof in);
    char extra;
    CHECK_EQ(read(pipefd[0], &extra, 1), 0);
    SYS(close(pipefd[0]));
    wait_ok(pid);
    if (memcmp(in, out, sizeof out) != 0)
        FAILF("round %d: what head read differs", i);
}

static void alternate_exec_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    for (int i = 0; i < ROUNDS / 2; i++) {
        exchange(fd, 2 * i);
        head_reads_reply(fd, 2 * i + 1);
    }
    exchange(fd, ROUNDS);
    end_stream(fd);
}

/* ---- At the same time ---------------------------------------------------------- */

static void split_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    pid_t pid = p_fork_holder();
    if (pid == 0) { /* reads the whole echo */
        char *want = malloc(STREAM), *got = malloc(STREAM);
        CHECK(want && got);
        p_fill(want, STREAM, 7);
        p_read_all(fd, got, STREAM);
        if (memcmp(got, want, STREAM) != 0)
            FAILF("the echo read by the child differs");
        char c;
        CHECK_EQ(read(fd, &c, 1), 0);
        exit(0);
    }
    char *out = malloc(STREAM);
    CHECK(out != NULL);
    p_fill(out, STREAM, 7);
    p_write_all(fd, out, STREAM);
    SYS(shutdown(fd, SHUT_WR));
    wait_ok(pid);
    SYS(close(fd));
}

/* Writes RECORDS records in bursts (so that both readers wait, and both
 * get some), then closes. */
static void record_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char rec[RECORD];
    for (int i = 0; i < RECORDS; i++) {
        p_fill(rec, sizeof rec, (uint64_t)i);
        p_write_all(fd, rec, sizeof rec);
        if (i % 100 == 99)
            p_sleep_ms(1);
    }
    SYS(close(fd));
}

static uint64_t stream_sum(void)
{
    uint64_t sum = 0;
    char rec[RECORD];
    for (int i = 0; i < RECORDS; i++) {
        p_fill(rec, sizeof rec, (uint64_t)i);
        for (int k = 0; k < RECORD; k++)
            sum += (unsigned char)rec[k];
    }
    return sum;
}

/* Reads to the end of stream: how many bytes, and their sum. */
static void read_to_end(int fd, uint64_t *count, uint64_t *sum)
{
    char buf[RECORD];
    ssize_t n;
    *count = *sum = 0;
    while ((n = SYS(read(fd, buf, sizeof buf))) > 0) {
        *count += (uint64_t)n;
        for (ssize_t k = 0; k < n; k++)
            *sum += (unsigned char)buf[k];
    }
}

static void readers_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    int report[2];
    SYS(pipe(report));
    pid_t pid = p_fork_holder();
    if (pid == 0) {
        uint64_t got[2];
        read_to_end(fd, &got[0], &got[1]);
        p_write_all(report[1], got, sizeof got);
        exit(0);
    }
    uint64_t mine[2], child[2];
    read_to_end(fd, &mine[0], &mine[1]);
    p_read_all(report[0], child, sizeof child);
    wait_ok(pid);
    p_log("parent read %llu bytes, child %llu", (unsigned long long)mine[0],
          (unsigned long long)child[0]);
    CHECK_EQ(mine[0] + child[0], (uint64_t)RECORDS * RECORD);
    CHECK(mine[1] + child[1] == stream_sum());
    SYS(close(fd));
}

/* Records of writer w: w, its sequence number, then p_fill bytes. */
static void make_record(char *rec, int w, int i)
{
    p_fill(rec, RECORD, (uint64_t)(w * RECORDS + i));
    rec[0] = (char)w;
    memcpy(rec + 1, &i, sizeof i);
}

static void records_check_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    int next[2] = {0, 0};
    char rec[RECORD], want[RECORD];
    for (int n = 0; n < 2 * RECORDS; n++) {
        p_read_all(fd, rec, sizeof rec);
        int w = rec[0];
        CHECK(w == 0 || w == 1);
        make_record(want, w, next[w]);
        if (memcmp(rec, want, sizeof rec) != 0)
            FAILF("record %d of writer %d is not the next one", next[w], w);
        next[w]++;
    }
    char c;
    CHECK_EQ(read(fd, &c, 1), 0);
    SYS(close(fd));
}

static void writers_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    pid_t pid = p_fork_holder();
    int w = pid == 0;
    char rec[RECORD];
    for (int i = 0; i < RECORDS; i++) {
        make_record(rec, w, i);
        p_write_all(fd, rec, sizeof rec);
    }
    if (w)
        exit(0);
    wait_ok(pid);
    SYS(shutdown(fd, SHUT_WR));
    SYS(close(fd));
}

/* ---- Bytes written before the server accepted ---------------------------------- */

#define EARLY_PART 300

static void early_server(struct p_role *r)
{
    CHECK_EQ(p_get_int(r), 1); /* all three parts written */
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char got[3 * EARLY_PART], want[3 * EARLY_PART];
    p_fill(want, sizeof want, 77);
    p_read_all(fd, got, sizeof got);
    for (int part = 0; part < 3; part++)
        if (memcmp(got + part * EARLY_PART, want + part * EARLY_PART, EARLY_PART) != 0)
            FAILF("part %d of the bytes written before the accept differs", part);
    char c;
    CHECK_EQ(read(fd, &c, 1), 0);
    SYS(close(fd));
}

static void early_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    char data[3 * EARLY_PART];
    p_fill(data, sizeof data, 77);
    p_write_all(fd, data, EARLY_PART);
    int to_parent[2], to_child[2];
    SYS(pipe(to_parent));
    SYS(pipe(to_child));
    pid_t pid = p_fork_holder();
    if (pid == 0) {
        SYS(close(to_parent[0]));
        SYS(close(to_child[1]));
        p_write_all(fd, data + EARLY_PART, EARLY_PART);
        p_write_all(to_parent[1], "x", 1);
        char c;
        CHECK_EQ(read(to_child[0], &c, 1), 1); /* stays a holder until the end */
        exit(0);
    }
    SYS(close(to_parent[1]));
    SYS(close(to_child[0]));
    char c;
    if (read(to_parent[0], &c, 1) != 1) {
        wait_ok(pid); /* says how the child ended */
        FAILF("the child ended before it wrote");
    }
    p_write_all(fd, data + 2 * EARLY_PART, EARLY_PART);
    p_put_int(r, 1);
    p_write_all(to_child[1], "y", 1);
    wait_ok(pid);
    SYS(shutdown(fd, SHUT_WR));
    SYS(close(fd));
}

/* ---- A holder gone without a word (SIGKILL) ---------------------------------- */

/* Does this process map a shared connection's record (docs/ARCHITECTURE.md,
 * "Fork": a memfd named sovia-shared)? */
static bool record_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "re");
    CHECK(f != NULL);
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, "sovia-shared") != NULL;
    fclose(f);
    return found;
}

static void killed_holder_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    exchange(fd, 0);
    int born[2];
    SYS(pipe(born));
    pid_t pid = p_fork_holder();
    if (pid == 0) {
        SYS(write(born[1], "b", 1)); /* past fork(): its handlers ran */
        for (;;)
            pause(); /* holds the connection, never uses it */
    }
    char b;
    CHECK_EQ(read(born[0], &b, 1), 1);
    exchange(fd, 1);
    bool sovia = !p_kernel_mode();
    if (sovia && !record_mapped())
        FAILF("no record while the child holds the connection");
    SYS(kill(pid, SIGKILL)); /* not waited for yet: a zombie */
    int i = 2;
    for (double t0 = p_now_ms(); sovia && record_mapped() && p_now_ms() - t0 < 2000; i++) {
        exchange(fd, i);
        p_sleep_ms(1);
    }
    if (sovia && record_mapped())
        FAILF("the record stayed 2 s after the other holder was killed");
    for (int k = 0; k < ROUNDS; k++)
        exchange(fd, i + k);
    int st;
    CHECK_EQ(SYS(waitpid(pid, &st, 0)), pid);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    end_stream(fd);
}

/* ---- The peer leaves while a holder's copy is stale ----------------------------- */

#define LAST_SEED 99

static void leaving_server(struct p_role *r)
{
    int fd = (int)SYS(accept(r->lfd, NULL, NULL));
    char buf[REQ];
    p_read_all(fd, buf, sizeof buf);
    p_write_all(fd, buf, sizeof buf);
    pid_t pid = p_fork_holder(); /* a forking daemon: the connection is shared */
    if (pid == 0)
        _exit(0);
    wait_ok(pid);
    p_read_all(fd, buf, sizeof buf); /* the client's child's round */
    p_write_all(fd, buf, sizeof buf);
    CHECK_EQ(p_get_int(r), 1);
    p_fill(buf, sizeof buf, LAST_SEED);
    p_write_all(fd, buf, sizeof buf);
    SYS(close(fd));
    p_put_int(r, 1);
}

static void stale_client(struct p_role *r)
{
    int fd = p_connect(r->port);
    exchange(fd, 0);
    int done[2], go[2];
    SYS(pipe(done));
    SYS(pipe(go));
    pid_t pid = p_fork_holder();
    if (pid == 0) {
        exchange(fd, 1); /* the parent's copy is stale from here on */
        SYS(write(done[1], "d", 1));
        char c;
        CHECK_EQ(read(go[0], &c, 1), 1);
        CHECK_EQ(SYS(read(fd, &c, 1)), 0); /* the parent took the last bytes */
        exit(0);
    }
    char c;
    if (read(done[0], &c, 1) != 1) {
        wait_ok(pid);
        FAILF("the child ended before its round");
    }
    p_put_int(r, 1);
    CHECK_EQ(p_get_int(r), 1);
    p_sleep_ms(100); /* our agent thread hears the server's end (microseconds) */
    char got[REQ], want[REQ];
    p_fill(want, sizeof want, LAST_SEED);
    p_read_all(fd, got, sizeof got);
    if (memcmp(got, want, sizeof got) != 0)
        FAILF("the server's last bytes differ");
    SYS(write(go[1], "g", 1)); /* the child reads next: the end, not these again */
    wait_ok(pid);
    CHECK_EQ(SYS(read(fd, &c, 1)), 0);
    SYS(close(fd));
}

int main(void)
{
    p_init("shared");
    p_case("alternate_fork", echo_server, alternate_fork_client, P_CARRIED);
    p_case("alternate_exec", echo_server, alternate_exec_client, P_CARRIED);
    p_case_forking("split_directions", echo_server, split_client, P_CARRIED);
    p_case_forking("concurrent_readers", record_server, readers_client, P_CARRIED);
    p_case_forking("concurrent_writers", records_check_server, writers_client, P_CARRIED);
    p_case_forking("early_writers", early_server, early_client, P_CARRIED);
    p_case_forking("killed_holder", echo_server, killed_holder_client, P_CARRIED);
    p_case_forking("peer_left_stale", leaving_server, stale_client, P_CARRIED);
    return p_done();
}
