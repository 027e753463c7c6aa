/*
 * exhaustion: sov_* calls when the process runs out of descriptors or of
 * memory for a connection's segments. They fail with the errno a kernel
 * socket gives for the same shortage (EMFILE for descriptors, ENOMEM or
 * ENOBUFS for memory), nothing crashes, a failed call leaves nothing
 * behind (descriptors, memfds, mappings, threads as before the call), the
 * other end is not disturbed, and once the shortage is over the same
 * process connects again.
 *   - sockets: sov_socket until RLIMIT_NOFILE (soft = hard) is reached: EMFILE;
 *   - connect: for each budget of 1..12 descriptors left, a connect either
 *     works (byte-exact echo) or fails with EMFILE/ENOMEM/ENOBUFS and leaks
 *     nothing; at least one budget fails and the largest works;
 *   - accept: a server with no descriptor left refuses the client
 *     (ECONNREFUSED at the client, at once); with descriptors freed it
 *     accepts the next client;
 *   - file size limit: RLIMIT_FSIZE below a segment's size makes the connect
 *     fail (a memfd is a file: growing it past the limit raises SIGXFSZ);
 *   - address space: RLIMIT_AS just above what the process maps makes the
 *     connect fail with ENOMEM/ENOBUFS; raised again, it works (not in
 *     AddressSanitizer builds, which need terabytes of address space).
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hcommon.h"
#include "sovia/sharness.h"

#if defined(__SANITIZE_ADDRESS__)
#define ASAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN_BUILD 1
#endif
#endif

static uint16_t port;

static int shortage_errno(int e)
{
    return e == EMFILE || e == ENFILE || e == ENOMEM || e == ENOBUFS;
}

static void set_nofile(rlim_t n)
{
    struct rlimit rl = {n, n};
    SYS(setrlimit(RLIMIT_NOFILE, &rl));
}

/* ---- An echo server (poll loop) ------------------------------------------------------------ */

#define MAXC 64

static void echo_server(int chan, void *arg)
{
    int spare = arg ? 20 : 0; /* descriptors held back, freed on 'F' */
    int held[64], nheld = 0;
    uint16_t p;
    int lfd = s_listener(AF_INET, &p, 64);
    SYS(sov_fcntl(lfd, F_SETFL, O_NONBLOCK));
    s_put_u64(chan, p);
    int fds[MAXC], n = 0;
    if (spare) { /* no descriptor left but the ones we hold */
        struct hc_counts c = hc_counts_now();
        for (; nheld < spare; nheld++)
            held[nheld] = SYS(open("/dev/null", O_RDONLY | O_CLOEXEC));
        set_nofile((rlim_t)c.fds + (rlim_t)spare);
        /* The limit bounds descriptor numbers, not their count: fill the
         * holes below it too, so that not one is left. */
        int fd;
        while (nheld < 64 && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
            held[nheld++] = fd;
        CHECK_MSG(nheld < 64 && errno == EMFILE, "could not run out of descriptors");
        s_tok(chan, 'h');
    }
    for (;;) {
        struct pollfd pf[MAXC + 2] = {{chan, POLLIN, 0}, {lfd, POLLIN, 0}};
        for (int i = 0; i < n; i++)
            pf[2 + i] = (struct pollfd){fds[i], POLLIN, 0};
        CHECK(sov_poll(pf, (nfds_t)(2 + n), 100) >= 0);
        for (int i = n - 1; i >= 0; i--) {
            if (!pf[2 + i].revents)
                continue;
            char buf[4096];
            ssize_t r = sov_recv(fds[i], buf, sizeof buf, MSG_DONTWAIT);
            if (r > 0) {
                s_send_all(fds[i], buf, (size_t)r, MSG_NOSIGNAL);
            } else if (r == 0 || errno != EAGAIN) {
                SYS(sov_close(fds[i]));
                fds[i] = fds[--n];
            }
        }
        if (pf[1].revents & POLLIN) {
            int fd = sov_accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
            if (fd >= 0 && n < MAXC)
                fds[n++] = fd;
            else if (fd >= 0)
                SYS(sov_close(fd));
            else
                CHECK_MSG(errno == EAGAIN || shortage_errno(errno), "sov_accept4: %s",
                          s_errname(errno));
        }
        if (pf[0].revents & POLLIN) {
            char c;
            s_get(chan, &c, 1);
            if (c == 'Q')
                break;
            if (c == 'F') {
                for (int i = 0; i < nheld; i++)
                    close(held[i]);
                nheld = spare = 0;
                s_tok(chan, 'f');
            }
        }
    }
    for (int i = 0; i < n; i++)
        SYS(sov_close(fds[i]));
    SYS(sov_close(lfd));
}

/* A connect to the echo server and one echo; returns 0 or the errno. */
static int try_connect_echo(void)
{
    int fd = sov_socket(AF_INET, SOCK_VIA, 0);
    if (fd < 0)
        return errno;
    struct sockaddr_in a;
    s_addr4(&a, port);
    int err = 0;
    s_guard(5000, "a connect under a shortage");
    if (sov_connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        err = errno;
    } else {
        s_send_pattern(fd, 3, 0, 5000, MSG_NOSIGNAL);
        s_recv_pattern(fd, 3, 0, 5000);
    }
    s_unguard();
    SYS(sov_close(fd));
    return err;
}

/* ---- Cases ------------------------------------------------------------------------------------ */

static void c_sockets(int chan, void *arg)
{
    (void)chan;
    (void)arg;
    SYS(sov_close(s_socket(AF_INET, 0))); /* sovia's own descriptors are open now */
    struct hc_counts before = hc_counts_now();
    set_nofile((rlim_t)before.fds + 8);
    /* sovia's own descriptors are high (above the limit now), so up to 8
     * plus their count may fit under it */
    int fds[64], n = 0;
    for (;;) {
        errno = 0;
        int fd = sov_socket(AF_INET, SOCK_VIA, 0);
        if (fd < 0) {
            CHECK_MSG(errno == EMFILE, "sov_socket at the descriptor limit: %s",
                      s_errname(errno));
            break;
        }
        CHECK(n < 64);
        fds[n++] = fd;
    }
    /* The limit bounds descriptor numbers, not their count: gaps below it
     * are filled first, so 8 is the least we get. */
    CHECK_MSG(n >= 8, "%d sockets with 8 descriptors to spare", n);
    for (int i = 0; i < n; i++)
        SYS(sov_close(fds[i]));
    struct hc_counts after = hc_counts_settle(&before, 2000);
    hc_counts_check(&before, &after, "after sov_socket hit EMFILE");
}

/* In a fresh process: connect with `budget` descriptors to spare. Writes
 * the result (0 or errno). */
static void c_connect_budget(int chan, void *arg)
{
    unsigned budget = (unsigned)(uintptr_t)arg;
    CHECK(try_connect_echo() == 0); /* warm: every lazily started thread is up */
    /* The limit bounds descriptor numbers, and sovia keeps its own high:
     * fill the holes below the highest, so that exactly `budget` numbers
     * are left under the limit. */
    int top = 0;
    for (int fd = 0; fd < 65536; fd++)
        if (fcntl(fd, F_GETFD) >= 0)
            top = fd;
    for (int fd = 0; fd < top; fd++)
        if (fcntl(fd, F_GETFD) < 0)
            CHECK(open("/dev/null", O_RDONLY | O_CLOEXEC) >= 0);
    struct hc_counts before = hc_counts_stable(2000);
    set_nofile((rlim_t)top + 1 + budget);
    int err = try_connect_echo();
    CHECK_MSG(err == 0 || shortage_errno(err) || err == EMFILE,
              "connect with %u descriptors to spare: %s", budget, s_errname(err));
    struct hc_counts after = hc_counts_settle(&before, 3000);
    hc_counts_check(&before, &after, err ? "after a connect failed for lack of descriptors"
                                         : "after a connect and close");
    s_put_u64(chan, (uint64_t)err);
}

static void c_fsize(int chan, void *arg)
{
    (void)arg;
    CHECK(try_connect_echo() == 0);
    struct hc_counts before = hc_counts_stable(2000);
    struct rlimit rl = {64 * 1024, RLIM_INFINITY};
    SYS(setrlimit(RLIMIT_FSIZE, &rl));
    int err = try_connect_echo();
    CHECK_MSG(shortage_errno(err), "connect with RLIMIT_FSIZE 64 KiB: %s", s_errname(err));
    struct hc_counts after = hc_counts_settle(&before, 3000);
    hc_counts_check(&before, &after, "after a connect failed for RLIMIT_FSIZE");
    rl.rlim_cur = RLIM_INFINITY;
    SYS(setrlimit(RLIMIT_FSIZE, &rl));
    CHECK(try_connect_echo() == 0);
    s_tok(chan, 'd');
}

#ifndef ASAN_BUILD
static size_t vm_size(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    CHECK(f != NULL);
    unsigned long pages = 0;
    CHECK(fscanf(f, "%lu", &pages) == 1);
    fclose(f);
    return pages * (size_t)sysconf(_SC_PAGESIZE);
}

static void c_address_space(int chan, void *arg)
{
    (void)arg;
    CHECK(try_connect_echo() == 0);
    struct hc_counts before = hc_counts_stable(2000);
    struct rlimit old;
    SYS(getrlimit(RLIMIT_AS, &old));
    struct rlimit rl = {vm_size() + 256 * 1024, old.rlim_max};
    SYS(setrlimit(RLIMIT_AS, &rl));
    int err = try_connect_echo();
    SYS(setrlimit(RLIMIT_AS, &old));
    CHECK_MSG(err == ENOMEM || err == ENOBUFS, "connect with no address space left: %s",
              s_errname(err));
    struct hc_counts after = hc_counts_settle(&before, 3000);
    hc_counts_check(&before, &after, "after a connect failed for address space");
    CHECK(try_connect_echo() == 0);
    s_tok(chan, 'd');
}
#endif

/* A client whose connect must be refused at once. */
static void c_refused_client(int chan, void *arg)
{
    (void)arg;
    double t0 = s_now_ms();
    int err = try_connect_echo();
    s_put_u64(chan, (uint64_t)err);
    s_put_f64(chan, s_now_ms() - t0);
}


/* One role in a fresh process (the echo server keeps running meanwhile). */
static void run_solo_chan(const char *role, s_fn fn, void *arg, uint64_t *out)
{
    int ch;
    int id = s_spawn(role, fn, arg, &ch);
    if (out)
        *out = s_get_u64(ch);
    else
        s_want(ch, 'd');
    s_reap(id);
    close(ch);
}

int main(void)
{
    s_init("exhaustion", 110);
    int srv_chan;
    int srv = s_spawn("echo-server", echo_server, NULL, &srv_chan);
    port = (uint16_t)s_get_u64(srv_chan);

    if (s_case("sockets")) {
        int id = s_spawn("client", c_sockets, NULL, NULL);
        s_reap(id);
    }

    if (hc_run_case("connect_budget", NULL)) {
        int failed = 0;
        uint64_t last = 1;
        for (unsigned b = 1; b <= 12; b++) {
            run_solo_chan("client", c_connect_budget, (void *)(uintptr_t)b, &last);
            s_log("%u descriptors to spare: connect %s", b, last ? s_errname((int)last) : "works");
            failed += last != 0;
        }
        CHECK_MSG(failed > 0, "no budget was too small: the case tested nothing");
        CHECK_MSG(last == 0, "12 spare descriptors are not enough for a connection");
    }

    if (s_case("accept")) {
        int full_chan;
        int full = s_spawn("full-server", echo_server, (void *)1, &full_chan);
        uint16_t saved = port;
        port = (uint16_t)s_get_u64(full_chan);
        s_want(full_chan, 'h');
        int ch;
        uint64_t err;
        for (int k = 0; k < 3; k++) {
            int id = s_spawn("client", c_refused_client, NULL, &ch);
            err = s_get_u64(ch);
            double ms = s_get_f64(ch);
            s_reap(id);
            close(ch);
            s_log("client of a server out of descriptors: %s after %.0f ms",
                  err ? s_errname((int)err) : "connected", ms);
            CHECK_MSG(err == ECONNREFUSED || err == ECONNRESET,
                      "connect to a server out of descriptors: %s", s_errname((int)err));
            CHECK_MSG(ms < 2000, "refusing took %.0f ms", ms);
        }
        s_tok(full_chan, 'F');
        s_want(full_chan, 'f');
        int id = s_spawn("client", c_refused_client, NULL, &ch);
        err = s_get_u64(ch);
        s_get_f64(ch);
        s_reap(id);
        close(ch);
        CHECK_MSG(err == 0, "connect after the server freed descriptors: %s",
                  s_errname((int)err));
        s_tok(full_chan, 'Q');
        s_reap(full);
        close(full_chan);
        port = saved;
    }

    if (hc_run_case("file_size", NULL))
        run_solo_chan("client", c_fsize, NULL, NULL);

    if (s_case("address_space")) {
#ifdef ASAN_BUILD
        s_log("SKIP: AddressSanitizer reserves terabytes of address space; RLIMIT_AS cannot "
              "be used in this build");
#else
        run_solo_chan("client", c_address_space, NULL, NULL);
#endif
    }

    s_tok(srv_chan, 'Q');
    s_reap(srv);
    s_pass();
}
