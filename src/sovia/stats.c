/* stats.c - per-socket statistics. */
#include <errno.h>

#include "sock.h"

SOV_EXPORT int sov_get_stats(int fd, struct sov_stats *stats)
{
    if (!stats) {
        errno = EFAULT;
        return -1;
    }
    struct sov_sock *s = sov_acquire(fd);
    if (!s)
        return -1;
    if (s->conn) {
        sov_progress(s);
        *stats = s->conn->stats;
        stats->credits = s->conn->credits;
    } else {
        *stats = (struct sov_stats){.window = s->cfg.window,
                                    .recv_buffers = sov_recv_buffers(&s->cfg)};
    }
    sov_release(s);
    return 0;
}
