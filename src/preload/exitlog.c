/*
 * exitlog.c - with SOVIA_STAT_LOG=FILE, each process run under sovia
 * appends one JSON line to FILE when it exits: how many connections sovia
 * carried, how many fell back to kernel TCP, and the bytes it moved. Tests
 * and scripts use it to prove a program's traffic really went over sovia.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"
#include "sock.h"

static void add_conn_bytes(struct sov_sock *s, bool closing, unsigned long long *sent,
                           unsigned long long *received)
{
    if (!sov_sock_trylock(s))
        return; /* busy in another thread: left out rather than waited for */
    if (s->conn && (closing || !s->dead)) {
        *sent += s->conn->stats.bytes_sent;
        *received += s->conn->stats.bytes_received;
    }
    sov_sock_unlock(s);
}

/* Bytes of the connections still open at exit, or still closing (a
 * destroyed one's were added to the totals when it went): an inetd service
 * exits with its socket open, and a close finishes in the service thread. */
static void live_bytes(unsigned long long *sent, unsigned long long *received)
{
    if (pthread_mutex_trylock(&sov_g.lock) == 0) {
        for (struct sov_sock *s = sov_g.closing; s; s = s->next_closing)
            add_conn_bytes(s, true, sent, received);
        pthread_mutex_unlock(&sov_g.lock);
    }
    struct sov_sock *seen[64];
    unsigned nseen = 0;
    for (int fd = 0, n = sov_table_limit(); fd < n; fd++) {
        struct sov_sock *s = sov_lookup(fd);
        bool again = false;
        for (unsigned i = 0; s && i < nseen && !again; i++)
            again = seen[i] == s; /* dup'ed: counted once */
        if (!s || again)
            continue;
        if (nseen < 64)
            seen[nseen++] = s;
        add_conn_bytes(s, false, sent, received);
    }
}

__attribute__((destructor)) static void write_exit_record(void)
{
    const char *path = getenv("SOVIA_STAT_LOG");
    unsigned carried = atomic_load(&sov_g.tp_paired), fell_back = atomic_load(&sov_g.tp_fell_back),
             kernel = atomic_load(&sov_g.tp_kernel);
    if (!path || !*path || carried + fell_back + kernel == 0)
        return; /* only processes that made or took TCP connections */
    unsigned long long sent = atomic_load(&sov_g.bytes_sent),
                       received = atomic_load(&sov_g.bytes_received);
    live_bytes(&sent, &received);
    char exe[256] = "?";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 1] = '\0';
    char line[512];
    int len = snprintf(line, sizeof(line),
                       "{\"pid\": %d, \"exe\": \"%s\", \"carried\": %u, \"fell_back\": %u, "
                       "\"kernel\": %u, \"redirected\": %u, \"bytes_sent\": %llu, "
                       "\"bytes_received\": %llu}\n",
                       (int)getpid(), exe, carried, fell_back, kernel,
                       atomic_load(&sov_g.tp_redirected), sent, received);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    if (len > 0 && real.write(fd, line, (size_t)len) < 0) {
        /* nothing to do at exit */
    }
    real.close(fd);
}
