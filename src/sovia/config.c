/* config.c - defaults, the environment, the papers' configuration labels. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sock.h"

SOV_EXPORT void sov_config_defaults(struct sov_config *c)
{
    *c = (struct sov_config){
        .window = 32,
        .ack_threshold = 16,
        .copy_threshold = 2048,
        .mtu = 32768,
        .combine = true,
        .combine_ms = 100,
        .handling = SOV_SINGLE,
        .copy_mode = SOV_HYBRID,
        .wait_mode = SOV_WAIT_ADAPTIVE,
        .spin_us = 50,
    };
}

int sov_config_check(const struct sov_config *c)
{
    if (c->ack_threshold < 1 || c->ack_threshold > c->window || c->window > 1024 ||
        c->mtu < 256 || c->mtu > (4u << 20) || c->copy_threshold > c->mtu ||
        c->combine_ms < 1 || c->combine_ms > 60000 || c->spin_us > 1000000 ||
        (unsigned)c->handling > SOV_NOTIFY || (unsigned)c->copy_mode > SOV_REG ||
        (unsigned)c->wait_mode > SOV_WAIT_BLOCK)
        return -EINVAL;
    return 0;
}

/* Receive buffers per connection: w DATA, ceil(w/t) ACK packets, and
 * SOV_CTRL_BUFFERS (docs/PROTOCOL.md explains them). */
unsigned sov_recv_buffers(const struct sov_config *c)
{
    return c->window + (c->window + c->ack_threshold - 1) / c->ack_threshold + SOV_CTRL_BUFFERS;
}

struct label {
    const char *name;
    enum sov_handling handling;
    enum sov_copy_mode copy;
    unsigned w, t;
    bool combine;
};

/* Kim, Kim, Jung, ICS 2001, Table 4. */
static const struct label labels[] = {
    {"SOVIA_NOTIFY", SOV_NOTIFY, SOV_REG, 1, 1, false},
    {"SOVIA_HANDLER", SOV_HANDLER, SOV_REG, 1, 1, false},
    {"SOVIA_SINGLE", SOV_SINGLE, SOV_REG, 1, 1, false},
    {"SOVIA_REG", SOV_SINGLE, SOV_REG, 1, 1, false},
    {"SOVIA_COPY", SOV_SINGLE, SOV_COPY, 1, 1, false},
    {"SOVIA_HYBRID", SOV_SINGLE, SOV_HYBRID, 1, 1, false},
    {"SOVIA_BASE", SOV_SINGLE, SOV_HYBRID, 1, 1, false},
    {"SOVIA_FLOWCNTL", SOV_SINGLE, SOV_HYBRID, 32, 1, false},
    {"SOVIA_DACKS", SOV_SINGLE, SOV_HYBRID, 32, 16, false},
    {"SOVIA_COMBINE", SOV_SINGLE, SOV_HYBRID, 32, 16, true},
};

SOV_EXPORT int sov_config_label(struct sov_config *c, const char *label)
{
    for (size_t i = 0; label && i < sizeof(labels) / sizeof(labels[0]); i++)
        if (strcmp(labels[i].name, label) == 0) {
            c->handling = labels[i].handling;
            c->copy_mode = labels[i].copy;
            c->window = labels[i].w;
            c->ack_threshold = labels[i].t;
            c->combine = labels[i].combine;
            return 0;
        }
    errno = EINVAL;
    return -1;
}

static bool env_uint(const char *name, unsigned long max, unsigned long *out)
{
    const char *v = getenv(name);
    char *end;
    if (!v || !*v)
        return false;
    errno = 0;
    unsigned long x = strtoul(v, &end, 10);
    if (errno || *end || x > max)
        return false;
    *out = x;
    return true;
}

static int env_choice(const char *name, const char *const *names, int n)
{
    const char *v = getenv(name);
    for (int i = 0; v && i < n; i++)
        if (strcmp(v, names[i]) == 0)
            return i;
    return -1;
}

/* The environment over `c`; invalid values are ignored, and a combination
 * that fails the range check leaves `c` as it was. */
void sov_config_from_env(struct sov_config *c)
{
    struct sov_config e = *c;
    unsigned long x;
    const char *label = getenv("SOVIA_CONFIG");
    if (label)
        sov_config_label(&e, label);
    if (env_uint("SOVIA_WINDOW", 1024, &x))
        e.window = (unsigned)x;
    if (env_uint("SOVIA_ACK_THRESHOLD", 1024, &x))
        e.ack_threshold = (unsigned)x;
    if (env_uint("SOVIA_COPY_THRESHOLD", 4u << 20, &x))
        e.copy_threshold = x;
    if (env_uint("SOVIA_MTU", 4u << 20, &x))
        e.mtu = x;
    if (env_uint("SOVIA_COMBINE", 1, &x))
        e.combine = x != 0;
    if (env_uint("SOVIA_COMBINE_MS", 60000, &x))
        e.combine_ms = (unsigned)x;
    if (env_uint("SOVIA_SPIN_US", 1000000, &x))
        e.spin_us = (unsigned)x;
    static const char *const handling[] = {"single", "handler", "notify"};
    static const char *const copy[] = {"hybrid", "copy", "reg"};
    static const char *const wait[] = {"adaptive", "poll", "block"};
    int i;
    if ((i = env_choice("SOVIA_HANDLING", handling, 3)) >= 0)
        e.handling = (enum sov_handling)i;
    if ((i = env_choice("SOVIA_COPY_MODE", copy, 3)) >= 0)
        e.copy_mode = (enum sov_copy_mode)i;
    if ((i = env_choice("SOVIA_WAIT", wait, 3)) >= 0)
        e.wait_mode = (enum sov_wait_mode)i;
    if (sov_config_check(&e) == 0)
        *c = e;
}

SOV_EXPORT int sov_get_config(struct sov_config *c)
{
    int err = sov_init();
    if (err) {
        errno = -err;
        return -1;
    }
    pthread_mutex_lock(&sov_g.lock);
    *c = sov_g.cfg;
    pthread_mutex_unlock(&sov_g.lock);
    return 0;
}

SOV_EXPORT int sov_set_config(const struct sov_config *c)
{
    int err = sov_init();
    if (!err)
        err = sov_config_check(c);
    if (err) {
        errno = -err;
        return -1;
    }
    pthread_mutex_lock(&sov_g.lock);
    if (c->handling != sov_g.cfg.handling && atomic_load(&sov_g.sockets_created)) {
        pthread_mutex_unlock(&sov_g.lock);
        errno = EBUSY;
        return -1;
    }
    sov_g.cfg = *c;
    pthread_mutex_unlock(&sov_g.lock);
    return 0;
}
