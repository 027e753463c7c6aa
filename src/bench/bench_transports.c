/* bench_transports.c - the transport registry; adding one is one line. */
#include "bench_internal.h"

#include <string.h>

static const struct bench_transport *const transports[] = {
    &bench_transport_limit,       &bench_transport_limit_shared, &bench_transport_tcp,
    &bench_transport_tcp_nagle,   &bench_transport_tcp_poll,     &bench_transport_uds,
    &bench_transport_ksovia,      &bench_transport_lane,         &bench_transport_preload,
    &bench_transport_vi,          &bench_transport_vi_copy,      &bench_transport_vi_user,
    &bench_transport_vi_block,    &bench_transport_vi_notify,    &bench_transport_ucx,
    &bench_transport_sovia,       &bench_transport_sovia_block,  &bench_transport_sovia_adaptive,
};

#define NTRANSPORTS (sizeof transports / sizeof transports[0])

const struct bench_transport *bench_find_transport(const char *name)
{
    for (size_t i = 0; name && i < NTRANSPORTS; i++)
        if (strcmp(transports[i]->name, name) == 0)
            return transports[i];
    return NULL;
}

const char *const *bench_transport_names(void)
{
    static const char *names[NTRANSPORTS + 1];

    for (size_t i = 0; i < NTRANSPORTS; i++)
        names[i] = transports[i]->name;
    names[NTRANSPORTS] = NULL;
    return names;
}

const char *bench_transport_summary(const char *name)
{
    const struct bench_transport *t = bench_find_transport(name);
    return t ? t->summary : NULL;
}
