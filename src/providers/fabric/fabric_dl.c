/*
 * fabric_dl.c - libfabric is loaded when a fabric NIC is first opened, not
 * linked into libvipl: every program under `sovia run` loads libvipl, and
 * libfabric would bring libibverbs, librdmacm, libpsm2, libnl and their
 * constructors into each of them. Only five of libfabric's functions are
 * called by name (the rest go through the objects' operation tables).
 */
#include <dlfcn.h>
#include <pthread.h>

#include "fabric.h"

static struct {
    int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
                   struct fi_info **);
    void (*freeinfo)(struct fi_info *);
    struct fi_info *(*dupinfo)(const struct fi_info *);
    int (*fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
    uint32_t (*version)(void);
} fi;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool loaded;

static void load(void)
{
    void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return;
    /* the versions of the symbols these headers were written for */
    fi.getinfo = (__typeof__(fi.getinfo))dlvsym(h, "fi_getinfo", "FABRIC_1.3");
    fi.freeinfo = (__typeof__(fi.freeinfo))dlvsym(h, "fi_freeinfo", "FABRIC_1.3");
    fi.dupinfo = (__typeof__(fi.dupinfo))dlvsym(h, "fi_dupinfo", "FABRIC_1.3");
    fi.fabric = (__typeof__(fi.fabric))dlvsym(h, "fi_fabric", "FABRIC_1.1");
    fi.version = (__typeof__(fi.version))dlvsym(h, "fi_version", "FABRIC_1.0");
    loaded = fi.getinfo && fi.freeinfo && fi.dupinfo && fi.fabric && fi.version;
}

bool fab_dl_load(void)
{
    pthread_once(&once, load);
    return loaded;
}

int fab_fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
                   const struct fi_info *hints, struct fi_info **info)
{
    return fi.getinfo(version, node, service, flags, hints, info);
}

void fab_fi_freeinfo(struct fi_info *info)
{
    fi.freeinfo(info);
}

struct fi_info *fab_fi_dupinfo(const struct fi_info *info)
{
    return fi.dupinfo(info);
}

int fab_fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
    return fi.fabric(attr, fabric, context);
}

uint32_t fab_fi_version(void)
{
    return fi.version();
}
