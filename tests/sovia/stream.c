/*
 * stream: "a byte stream, in order, nothing lost or duplicated, whatever the
 * sizes of the writes and reads" (docs/SOCKETS.md "Data"). The writer sends
 * random sizes (1 B .. 300 KB, log-uniform, through sov_send / sov_write /
 * sov_writev), the reader reads independent random sizes (sov_recv /
 * sov_read / sov_readv / MSG_WAITALL); every byte is compared with the
 * pattern stream (sentinel bytes at fixed positions included) and both sides
 * hash the stream and compare. Blocking sends must send everything.
 *
 * Runs: the default configuration over 1 GiB, each of the labels
 * SOVIA_BASE, SOVIA_FLOWCNTL, SOVIA_DACKS, SOVIA_COMBINE, SOVIA_COPY,
 * SOVIA_REG over 64 MiB, and SOVIA_HANDLER, SOVIA_NOTIFY over 16 MiB, each
 * label applied with sov_config_label + sov_set_config in both processes
 * before any socket. MB/s is printed for information only.
 */
#include "sharness.h"

#include <stdlib.h>
#include <unistd.h>

#define MIB (1024ULL * 1024ULL)
#define MAX_IO (300 * 1000)

struct run {
    const char *label; /* NULL: the default configuration */
    uint64_t bytes;
    uint64_t seed;
};

static const struct run runs[] = {
    {NULL, 1024 * MIB, 101},
    {"SOVIA_BASE", 64 * MIB, 102},
    {"SOVIA_FLOWCNTL", 64 * MIB, 103},
    {"SOVIA_DACKS", 64 * MIB, 104},
    {"SOVIA_COMBINE", 64 * MIB, 105},
    {"SOVIA_COPY", 64 * MIB, 106},
    {"SOVIA_REG", 64 * MIB, 107},
    {"SOVIA_HANDLER", 16 * MIB, 108},
    {"SOVIA_NOTIFY", 16 * MIB, 109},
};

#define NSENT 16
static uint64_t sentinel_pos[NSENT];

static void sentinels_init(uint64_t total)
{
    const uint64_t fixed[] = {0, 1, 7, 8, 4095, 4096, 32767, 32768, 32769, MIB - 1, MIB};
    size_t k = 0;
    for (; k < sizeof fixed / sizeof fixed[0]; k++)
        sentinel_pos[k] = fixed[k] < total ? fixed[k] : total - 1;
    sentinel_pos[k++] = total / 3 + 5;
    sentinel_pos[k++] = total / 2;
    sentinel_pos[k++] = total - 300001;
    sentinel_pos[k++] = total - 2;
    sentinel_pos[k++] = total - 1;
}

static unsigned char sentinel_val(int i)
{
    return (unsigned char)(0xa5 ^ (i * 37));
}

/* The stream: the pattern, with sentinel values at the sentinel positions. */
static void stream_fill(unsigned char *buf, size_t len, uint64_t seed, uint64_t pos)
{
    s_pattern_fill(buf, len, seed, pos);
    for (int i = 0; i < NSENT; i++)
        if (sentinel_pos[i] >= pos && sentinel_pos[i] < pos + len)
            buf[sentinel_pos[i] - pos] = sentinel_val(i);
}

static void apply(const struct run *r)
{
    if (r->label)
        s_use_label(r->label);
}

static void print_stats(int fd, const char *who)
{
    struct sov_stats st;
    if (sov_get_stats(fd, &st) != 0) {
        s_log("%s: sov_get_stats failed (%s)", who, s_errname(errno));
        return;
    }
    s_log("%s stats: sent %llu B in %llu DATA, received %llu B in %llu DATA, ACK sent %llu "
          "recv %llu piggybacked %llu, copied %llu registered %llu combined %llu stalls %llu, "
          "w %u credits %u P %u shm %zu",
          who, (unsigned long long)st.bytes_sent, (unsigned long long)st.data_packets_sent,
          (unsigned long long)st.bytes_received, (unsigned long long)st.data_packets_received,
          (unsigned long long)st.ack_packets_sent, (unsigned long long)st.ack_packets_received,
          (unsigned long long)st.acks_piggybacked, (unsigned long long)st.copied_sends,
          (unsigned long long)st.registered_sends, (unsigned long long)st.combined_messages,
          (unsigned long long)st.window_stalls, st.window, st.credits, st.recv_buffers,
          st.shm_bytes);
}

static void writer(int chan, void *arg)
{
    const struct run *r = arg;
    apply(r);
    sentinels_init(r->bytes);
    int fd = s_connect(AF_INET, (uint16_t)s_get_u64(chan));
    unsigned char *buf = malloc(MAX_IO);
    CHECK(buf);
    uint64_t rng = r->seed * 7919 + 1;
    s_hash h;
    s_hash_init(&h);
    uint64_t pos = 0, calls = 0;
    double t0 = s_now_ms();
    while (pos < r->bytes) {
        size_t n = (size_t)s_rand_log(&rng, 1, MAX_IO);
        if (n > r->bytes - pos)
            n = (size_t)(r->bytes - pos);
        stream_fill(buf, n, r->seed, pos);
        s_hash_update(&h, buf, n);
        ssize_t w;
        unsigned how = (unsigned)(s_rand(&rng) % 3);
        errno = 0;
        if (how == 0) {
            w = sov_send(fd, buf, n, 0);
        } else if (how == 1) {
            w = sov_write(fd, buf, n);
        } else {
            size_t a = (size_t)s_rand_range(&rng, 0, n);
            size_t b = (size_t)s_rand_range(&rng, a, n);
            struct iovec iov[3] = {{buf, a}, {buf + a, b - a}, {buf + b, n - b}};
            w = sov_writev(fd, iov, 3);
        }
        CHECK_MSG(w == (ssize_t)n,
                  "blocking %s of %zu bytes at stream byte %llu returned %zd (errno %s); "
                  "a blocking send sends everything",
                  how == 0 ? "sov_send" : how == 1 ? "sov_write" : "sov_writev", n,
                  (unsigned long long)pos, w, w < 0 ? s_errname(errno) : "-");
        pos += n;
        calls++;
    }
    double ms = s_now_ms() - t0;
    SYS(sov_shutdown(fd, SHUT_WR));
    s_put_u64(chan, pos);
    s_put_u64(chan, s_hash_final(&h));
    s_log("wrote %llu bytes in %llu calls, %.0f MB/s", (unsigned long long)pos,
          (unsigned long long)calls, (double)pos / 1e3 / (ms > 0 ? ms : 1));
    s_want(chan, 'D');
    print_stats(fd, "writer");
    SYS(sov_close(fd));
    free(buf);
}

static void reader(int chan, void *arg)
{
    const struct run *r = arg;
    apply(r);
    sentinels_init(r->bytes);
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 1);
    s_put_u64(chan, port);
    int fd = s_accept(lfd);
    unsigned char *buf = malloc(MAX_IO), *want = malloc(MAX_IO);
    CHECK(buf && want);
    uint64_t rng = r->seed * 104729 + 3;
    s_hash h;
    s_hash_init(&h);
    uint64_t pos = 0, calls = 0;
    int sentinels_seen = 0, must_eof = 0;
    double t0 = s_now_ms();
    for (;;) {
        size_t n = (size_t)s_rand_log(&rng, 1, MAX_IO);
        unsigned how = (unsigned)(s_rand(&rng) % 8);
        ssize_t got;
        errno = 0;
        if (how <= 2) {
            got = sov_recv(fd, buf, n, 0);
        } else if (how <= 4) {
            got = sov_read(fd, buf, n);
        } else if (how <= 6) {
            size_t a = (size_t)s_rand_range(&rng, 0, n);
            struct iovec iov[2] = {{buf, a}, {buf + a, n - a}};
            got = sov_readv(fd, iov, 2);
        } else {
            got = sov_recv(fd, buf, n, MSG_WAITALL);
        }
        CHECK_MSG(got >= 0, "read call %llu (%zu bytes) at stream byte %llu returned %zd "
                  "(errno %s)", (unsigned long long)calls, n, (unsigned long long)pos, got,
                  s_errname(errno));
        CHECK_MSG((size_t)got <= n, "read of %zu returned %zd", n, got);
        calls++;
        if (got == 0)
            break;
        CHECK_MSG(!must_eof, "MSG_WAITALL returned short before the end of the stream, "
                  "then %zd more bytes came at stream byte %llu", got, (unsigned long long)pos);
        if (how == 7 && (size_t)got < n)
            must_eof = 1;
        CHECK_MSG(pos + (uint64_t)got <= r->bytes, "received more than the %llu bytes sent",
                  (unsigned long long)r->bytes);
        stream_fill(want, (size_t)got, r->seed, pos);
        if (memcmp(want, buf, (size_t)got) != 0) {
            size_t i = 0;
            while (buf[i] == want[i])
                i++;
            long d = s_pattern_check(buf + i, (size_t)got - i, r->seed, pos + i);
            FAILF("stream byte %llu: got 0x%02x, expected 0x%02x (read call %llu of %zu "
                  "bytes returned %zd; the mismatch is %zu bytes into it)%s",
                  (unsigned long long)(pos + i), buf[i], want[i], (unsigned long long)calls,
                  n, got, i, d < 0 ? " [the rest of that read matches the pattern]" : "");
        }
        for (int k = 0; k < NSENT; k++)
            if (sentinel_pos[k] >= pos && sentinel_pos[k] < pos + (uint64_t)got &&
                buf[sentinel_pos[k] - pos] == sentinel_val(k))
                sentinels_seen++;
        s_hash_update(&h, buf, (size_t)got);
        pos += (uint64_t)got;
    }
    double ms = s_now_ms() - t0;
    uint64_t sent = s_get_u64(chan), hash = s_get_u64(chan);
    CHECK_MSG(pos == sent, "received %llu bytes before end of stream, the writer sent %llu",
              (unsigned long long)pos, (unsigned long long)sent);
    CHECK_MSG(s_hash_final(&h) == hash, "stream hash mismatch: reader %016llx writer %016llx",
              (unsigned long long)s_hash_final(&h), (unsigned long long)hash);
    /* Distinct sentinel positions (small streams may map some onto one byte). */
    int distinct = 0;
    for (int k = 0; k < NSENT; k++) {
        int dup = 0;
        for (int j = 0; j < k; j++)
            dup |= sentinel_pos[j] == sentinel_pos[k];
        distinct += !dup;
    }
    CHECK_MSG(sentinels_seen >= distinct, "saw %d of %d sentinel bytes", sentinels_seen,
              distinct);
    /* End of stream stays. */
    s_recv_eof(fd);
    s_log("read %llu bytes in %llu calls, %.0f MB/s, hash %016llx", (unsigned long long)pos,
          (unsigned long long)calls, (double)pos / 1e3 / (ms > 0 ? ms : 1),
          (unsigned long long)hash);
    print_stats(fd, "reader");
    s_tok(chan, 'D');
    s_recv_eof(fd);
    SYS(sov_close(fd));
    SYS(sov_close(lfd));
    free(buf);
    free(want);
}

int main(void)
{
    s_init("stream", 110);
    /* STREAM_MAX_MIB caps each run (a second pass over another way of
     * waiting, tests/sovia/CMakeLists.txt, within the watchdog's time). */
    const char *cap_env = getenv("STREAM_MAX_MIB");
    uint64_t cap = cap_env ? strtoull(cap_env, NULL, 10) * MIB : 0;
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        struct run r = runs[i];
        if (cap && r.bytes > cap)
            r.bytes = cap;
        char name[64];
        snprintf(name, sizeof name, "%s_%lluMiB", r.label ? r.label : "default",
                 (unsigned long long)(r.bytes / MIB));
        if (s_case(name))
            s_run_pair("reader", reader, "writer", writer, &r);
    }
    s_pass();
}
