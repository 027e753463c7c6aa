/* svictim.c - the sov_* echo victim; see svictim.h. */
#include "svictim.h"

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hcommon.h"
#include "sovia/sharness.h"

#define MAXC 8
#define BUF (256u * 1024u)

enum role { HEALTHY, HOSTILE, EXTRA }; /* EXTRA: another client during a round */

struct conn {
    int fd;
    enum role role;
    uint8_t *out; /* bytes read and not yet echoed */
    size_t out_len;
};

static struct conn conns[MAXC];
static int nconns;
static struct sv_report rep;
static bool in_round;

static void drop(int k)
{
    free(conns[k].out);
    conns[k] = conns[--nconns];
}

/* Closes connection k; all but the healthy one are reset, so nothing
 * lingers waiting for a peer that may never answer. */
static void close_conn(int k)
{
    if (conns[k].role != HEALTHY) {
        struct linger l = {1, 0};
        sov_setsockopt(conns[k].fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    SYS(sov_close(conns[k].fd));
    drop(k);
}

/* Records a failed call on connection k; 1 when it is finished. */
static int failed(int k, const char *what)
{
    int e = errno;
    if (e == EAGAIN)
        return 0;
    CHECK_MSG(conns[k].role != HEALTHY, "healthy connection: %s failed with %s", what,
              s_errname(e));
    if (conns[k].role == HOSTILE && !rep.err)
        rep.err = e;
    close_conn(k);
    return 1;
}

/* Echoes what is pending; returns 1 if the connection was closed. */
static int flush_out(int k)
{
    struct conn *c = &conns[k];
    while (c->out_len) {
        ssize_t w = sov_send(c->fd, c->out, c->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0)
            return failed(k, "sov_send");
        if (c->role == HOSTILE)
            rep.bytes_out += w;
        memmove(c->out, c->out + w, c->out_len - (size_t)w);
        c->out_len -= (size_t)w;
    }
    return 0;
}

static int read_in(int k)
{
    struct conn *c = &conns[k];
    if (c->out_len == BUF)
        return 0; /* echo first */
    ssize_t n = sov_recv(c->fd, c->out + c->out_len, BUF - c->out_len, MSG_DONTWAIT);
    if (n < 0)
        return failed(k, "sov_recv");
    if (n == 0) {
        CHECK_MSG(c->role != HEALTHY, "healthy connection: unexpected end of stream");
        if (c->role == HOSTILE)
            rep.eof = 1;
        close_conn(k);
        return 1;
    }
    if (c->role == HOSTILE)
        rep.bytes_in += n;
    c->out_len += (size_t)n;
    return flush_out(k);
}

static void add_conn(int fd, enum role role)
{
    CHECK(nconns < MAXC);
    conns[nconns] = (struct conn){.fd = fd, .role = role, .out = malloc(BUF)};
    CHECK(conns[nconns].out != NULL);
    nconns++;
}

static int hostile_index(void)
{
    for (int k = 0; k < nconns; k++)
        if (conns[k].role == HOSTILE)
            return k;
    return -1;
}

void sv_victim(int chan, void *arg)
{
    (void)arg;
    s_ignore_sigpipe();
    uint16_t port;
    int lfd = s_listener(AF_INET, &port, 16);
    s_put_u64(chan, port);
    int hfd = s_accept(lfd); /* the healthy client connects first */
    SYS(sov_fcntl(lfd, F_SETFL, O_NONBLOCK));
    SYS(sov_fcntl(hfd, F_SETFL, O_NONBLOCK));
    add_conn(hfd, HEALTHY);
    struct hc_counts base = {0};
    for (;;) {
        struct pollfd p[MAXC + 2];
        p[0] = (struct pollfd){chan, POLLIN, 0};
        p[1] = (struct pollfd){lfd, POLLIN, 0};
        for (int k = 0; k < nconns; k++)
            p[2 + k] = (struct pollfd){conns[k].fd,
                                       (short)(POLLIN | (conns[k].out_len ? POLLOUT : 0)), 0};
        int nfds = 2 + nconns;
        double t0 = s_now_ms();
        int n = sov_poll(p, (nfds_t)nfds, SV_WAIT_MS);
        double over = s_now_ms() - t0 - SV_WAIT_MS;
        CHECK_MSG(n >= 0, "sov_poll: %s", s_errname(errno));
        if (over > rep.max_over_ms)
            rep.max_over_ms = over;
        /* The channel first: a round's 'R' is there before its connection can
         * be. (sov_poll may return a ready sovia socket from a spin round
         * without asking the kernel about the others: ask again.) */
        struct pollfd cp = {chan, POLLIN, 0};
        if (poll(&cp, 1, 0) == 1)
            p[0].revents |= cp.revents;
        if (p[0].revents & POLLIN) {
            char cmd;
            s_get(chan, &cmd, 1);
            if (getenv("HARDENING_VERBOSE"))
                s_log("command %c", cmd);
            if (cmd == 'R') {
                rep = (struct sv_report){0};
                in_round = true;
            } else if (cmd == 'S') {
                /* What the hostile connection has to say first (an error
                 * sov_poll has just found), then it goes. */
                int k = hostile_index();
                if (k >= 0 && !read_in(k))
                    close_conn(hostile_index());
                in_round = false;
                s_put(chan, &rep, sizeof rep);
            } else if (cmd == 'B') {
                base = hc_counts_stable(3000);
                s_tok(chan, 'b');
            } else if (cmd == 'Q') {
                break;
            }
            continue; /* the table may have changed: poll again */
        }
        /* Connections (the table is rebuilt after any change). */
        for (int k = nconns - 1; k >= 0; k--) {
            short re = p[2 + k].revents;
            if (!re)
                continue;
            if ((re & POLLOUT) && flush_out(k))
                continue;
            if (re & (POLLIN | POLLERR | POLLHUP))
                read_in(k);
        }
        if (p[1].revents & POLLIN) {
            int fd = sov_accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
            if (fd >= 0) {
                bool hostile = in_round && !rep.accepted;
                if (hostile)
                    rep.accepted = 1;
                else
                    rep.extra_conns++;
                if (getenv("HARDENING_VERBOSE"))
                    s_log("accepted fd %d as %s", fd, hostile ? "hostile" : "extra");
                add_conn(fd, hostile ? HOSTILE : EXTRA);
            } else {
                CHECK_MSG(errno == EAGAIN, "sov_accept4: %s", s_errname(errno));
            }
        }
    }
    /* Connections still queued (a hostile peer that got through its
     * handshake after its round ended) and the extra ones go too. */
    for (double end = s_now_ms() + 200; s_now_ms() < end; s_sleep_ms(10)) {
        int fd;
        while ((fd = sov_accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0)
            add_conn(fd, EXTRA);
    }
    for (int k = nconns - 1; k >= 0; k--)
        if (conns[k].role != HEALTHY)
            close_conn(k);
    struct hc_counts now = hc_counts_settle(&base, 3000);
    hc_counts_check(&base, &now, "victim after all hostile rounds");
    s_tok(chan, 'q');
    s_want(chan, 'c'); /* the healthy client closed */
    SYS(sov_fcntl(hfd, F_SETFL, 0));
    s_recv_eof(hfd);
    SYS(sov_close(hfd));
    SYS(sov_close(lfd));
}
