/*
 * fz.h - shared pieces of the fuzz targets (tests/fuzz/).
 *
 * Every target is one LLVMFuzzerTestOneInput(data, size) that plays a
 * hostile peer against real provider or sockets-layer code. The same
 * function runs under libFuzzer (clang, -DSOVIA_FUZZ=ON) and, in every
 * build, under replay.c, which feeds it the committed corpus as a CTest.
 *
 * Inputs are read with a cursor that yields zeros once the bytes run out,
 * so every input, however short, is a complete scenario.
 */
#ifndef SOVIA_TESTS_FUZZ_FZ_H
#define SOVIA_TESTS_FUZZ_FZ_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- Reading the input --------------------------------------------------- */

struct fz_in {
    const uint8_t *p;
    size_t n;
};

static inline uint8_t fz_u8(struct fz_in *in)
{
    if (!in->n)
        return 0;
    in->n--;
    return *in->p++;
}

static inline uint16_t fz_u16(struct fz_in *in)
{
    uint16_t v = fz_u8(in);
    return (uint16_t)(v | fz_u8(in) << 8);
}

static inline uint32_t fz_u32(struct fz_in *in)
{
    uint32_t v = fz_u16(in);
    return v | (uint32_t)fz_u16(in) << 16;
}

static inline uint64_t fz_u64(struct fz_in *in)
{
    uint64_t v = fz_u32(in);
    return v | (uint64_t)fz_u32(in) << 32;
}

/* Copies len bytes (zeros past the end of the input). */
static inline void fz_bytes(struct fz_in *in, void *dst, size_t len)
{
    size_t k = len < in->n ? len : in->n;
    memcpy(dst, in->p, k);
    memset((uint8_t *)dst + k, 0, len - k);
    in->p += k;
    in->n -= k;
}

/* ---- Checks ----------------------------------------------------------------- */

/* A broken expectation: prints it and aborts, which libFuzzer reports as a
 * crash (with the input saved) and the replay test as a failure. */
__attribute__((noreturn)) void fz_fail(const char *file, int line, const char *what);

#define FZ_CHECK(cond)                                                                   \
    do {                                                                                 \
        if (!(cond))                                                                     \
            fz_fail(__FILE__, __LINE__, #cond);                                          \
    } while (0)

/* Prints when FZ_TRACE is set in the environment: what an input did. */
__attribute__((format(printf, 1, 2))) void fz_trace(const char *fmt, ...);

/* Open descriptors of the process (to catch leaks per input). */
int fz_count_fds(void);

/* ---- Building the descriptors a peer sends ------------------------------ */

/* What a hostile peer can pass where a memfd is expected. */
enum fz_fd_kind {
    FZ_FD_MEMFD,  /* sealed as asked */
    FZ_FD_PIPE,   /* read end of a pipe */
    FZ_FD_DGRAM,  /* Unix datagram socket */
    FZ_FD_STREAM, /* Unix stream socket */
    FZ_FD_DEVNULL,
    FZ_FD_KINDS
};

/* Seal bits as one byte: bit 0 SEAL, 1 SHRINK, 2 GROW, 3 WRITE, 4 FUTURE_WRITE. */
int fz_seals_of(uint8_t bits);

/*
 * A memfd of `len` bytes starting with `init` (init_len bytes), sealed with
 * `seals` (F_SEAL_*; the contents are written first, so even a WRITE seal
 * keeps them). Returns the fd or -1.
 */
int fz_memfd(size_t len, const void *init, size_t init_len, int seals);

/* A descriptor of the given kind; a memfd as fz_memfd. -1 on failure. */
int fz_make_fd(enum fz_fd_kind kind, size_t len, const void *init, size_t init_len, int seals);

/* The abstract socket address a vipl listener uses for `disc`. */
socklen_t fz_vipl_sockaddr(struct sockaddr_un *sun, const char *disc);

/* poll() that goes on after a signal (libFuzzer's timeout timer interrupts
 * sleeps every few seconds) until timeout_ms in all have passed. */
struct pollfd;
int fz_poll(struct pollfd *pfd, unsigned n, int timeout_ms);
/* The same around another poll function (sov_poll). */
int fz_poll_with(int (*fn)(struct pollfd *, unsigned long, int), struct pollfd *pfd,
                 unsigned n, int timeout_ms);

/* One message of `len` bytes with n (<= 8) descriptors (SCM_RIGHTS).
 * Returns what sendmsg returns. */
ssize_t fz_send_fds(int sock, const void *buf, size_t len, const int *fds, int n);
/* Waits up to timeout_ms for one message; keeps up to `max` of its
 * descriptors in fds (closing the others) and sets *nfds to how many were
 * kept. Returns the bytes received, or -1. */
ssize_t fz_recv_fds(int sock, void *buf, size_t len, int *fds, int max, int *nfds,
                    int timeout_ms);

/* "fz-<pid>-<tag>": a discriminator no other process uses. */
void fz_disc(char *buf, size_t len, const char *tag);

#endif
