/*
 * lane_tun.c - the TUN side of a LANE forwarder: enter the namespace, make
 * the device (IFF_TUN | IFF_NO_PI: bare IP frames), give it MTU, address and
 * netmask and bring it up, all with ioctls. The device is not persistent:
 * it goes away with the last descriptor, however the forwarder ends.
 */
#include "lane.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

int lane_enter_netns(const char *ns)
{
    char path[512];
    if (strchr(ns, '/'))
        snprintf(path, sizeof path, "%s", ns);
    else
        snprintf(path, sizeof path, "/run/netns/%s", ns);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
        fprintf(stderr, "sovia: entering network namespace %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

static int set_addr(int s, struct ifreq *ifr, unsigned long req, struct in_addr a)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr = a};
    memcpy(&ifr->ifr_addr, &sin, sizeof sin);
    return ioctl(s, req, ifr);
}

int lane_tun_open(const char *name, unsigned mtu, struct in_addr addr, unsigned prefix,
                  bool offload)
{
    struct ifreq ifr;
    const char *what = "open /dev/net/tun";
    int s = -1, fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);

    if (fd < 0)
        goto fail;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI | (offload ? IFF_VNET_HDR : 0);
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
    what = "TUNSETIFF";
    if (ioctl(fd, TUNSETIFF, &ifr) != 0)
        goto fail;
    /* The header stays the default struct virtio_net_hdr (10 bytes). */
    what = "TUNSETOFFLOAD";
    if (offload && ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6) != 0)
        goto fail;
    what = "socket";
    if ((s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
        goto fail;
    ifr.ifr_mtu = (int)mtu;
    what = "SIOCSIFMTU";
    if (ioctl(s, SIOCSIFMTU, &ifr) != 0)
        goto fail;
    what = "SIOCSIFADDR";
    if (set_addr(s, &ifr, SIOCSIFADDR, addr) != 0)
        goto fail;
    struct in_addr mask = {.s_addr = prefix ? htonl(~0u << (32 - prefix)) : 0};
    what = "SIOCSIFNETMASK";
    if (set_addr(s, &ifr, SIOCSIFNETMASK, mask) != 0)
        goto fail;
    what = "SIOCGIFFLAGS";
    if (ioctl(s, SIOCGIFFLAGS, &ifr) != 0)
        goto fail;
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    what = "SIOCSIFFLAGS";
    if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0)
        goto fail;
    close(s);
    return fd;
fail:
    fprintf(stderr, "sovia lane: %s: %s: %s\n", name, what, strerror(errno));
    if (s >= 0)
        close(s);
    if (fd >= 0)
        close(fd);
    return -1;
}
