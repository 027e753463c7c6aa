/*
 * cmd_lane.c - `sovia lane up|down`: LANE, IP over VI (docs/LANE.md).
 * `up` forks one forwarder per namespace (src/lane/) and stays in the
 * foreground until SIGTERM/SIGINT, `sovia lane down`, or either forwarder's
 * end; the forwarders die with it (PR_SET_PDEATHSIG). Their TUN devices are
 * not persistent, so nothing is left behind however they end.
 */
#include "cli.h"
#include "lane.h"

#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop_sig;

static void on_signal(int sig)
{
    stop_sig = sig;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: sovia lane up --ns A --ns B --addr ADDR_A/P,ADDR_B/P [--dev NAME] [--mtu N]\n"
               "                [--offload]\n"
               "       sovia lane down --ns A --ns B [--dev NAME]\n"
               "\n"
               "LANE (seed 003's LAN emulation): kernel TCP/IP between two network namespaces\n"
               "over a VI. `up` makes a TUN device NAME (default " LANE_DEFAULT_DEV ") in each\n"
               "namespace with its address, joins the two by an unreliable VI of the shm\n"
               "provider (one IP frame, up to the MTU, per message) and forwards until it\n"
               "gets SIGTERM or SIGINT, a device is deleted (`down`), or a forwarder ends.\n"
               "It prints 'lane up' on stdout once both devices are up. Needs root.\n"
               "  --ns NS     a namespace (a name under /run/netns, or a path); twice\n"
               "  --addr A,B  the two sides' IPv4 addresses with prefix length\n"
               "  --dev NAME  the device's name in both namespaces\n"
               "  --mtu N     the devices' MTU, %u..%u (default %u; 1500 with --offload)\n"
               "  --offload   IFF_VNET_HDR with checksum and TSO offloads: a TCP segment\n"
               "              of up to 64 KB crosses as one message whatever the MTU\n"
               "`down` deletes the devices (with `ip`); the forwarders then end.\n",
            LANE_MIN_MTU, LANE_MAX_MTU, LANE_DEFAULT_MTU);
}

static int parse_addr(const char *s, struct lane_side *side)
{
    char buf[64];
    char *slash, *end;
    snprintf(buf, sizeof buf, "%s", s);
    if (!(slash = strchr(buf, '/')))
        return -1;
    *slash = '\0';
    unsigned long p = strtoul(slash + 1, &end, 10);
    if (*end || end == slash + 1 || p < 1 || p > 30 || inet_pton(AF_INET, buf, &side->addr) != 1)
        return -1;
    side->prefix = (unsigned)p;
    return 0;
}

static int lane_up(struct lane_config *cfg, struct lane_side sides[2])
{
    struct sigaction sa = {.sa_handler = on_signal};
    struct lane_pair lp;

    sigemptyset(&sa.sa_mask);
    /* No SA_RESTART: waitpid returns, and the forwarders are told to stop. */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    if (lane_pair_start(&lp, cfg, sides) != 0)
        return 1;
    printf("lane up: %s in %s and %s, MTU %u\n", cfg->dev, sides[0].ns, sides[1].ns, cfg->mtu);
    fflush(stdout);
    return lane_pair_wait(&lp, &stop_sig) == 0 ? 0 : 1;
}

static int lane_down(const char *dev, const char *ns[2])
{
    int deleted = 0;
    for (int i = 0; i < 2; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            execlp("ip", "ip", "-n", ns[i], "link", "del", dev, (char *)NULL);
            perror("sovia lane: ip");
            _exit(127);
        }
        int st;
        if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0)
            deleted++;
    }
    return deleted > 0 ? 0 : 1;
}

int cmd_lane(int argc, char **argv)
{
    struct lane_config cfg = {.dev = LANE_DEFAULT_DEV, .mtu = LANE_DEFAULT_MTU};
    struct lane_side sides[2];
    const char *ns[2] = {NULL, NULL}, *addr = NULL;
    int nns = 0;
    bool mtu_set = false;

    memset(sides, 0, sizeof sides);
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? SOVIA_EXIT_USAGE : 0;
    }
    bool up = strcmp(argv[1], "up") == 0;
    if (!up && strcmp(argv[1], "down") != 0)
        return cli_usage_error("lane", "unknown subcommand '%s' (up or down)", argv[1]);
    for (int i = 2; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(o, "--offload") == 0) {
            cfg.offload = true;
            if (!mtu_set)
                cfg.mtu = 1500;
            continue;
        }
        if (!v)
            return cli_usage_error("lane", "%s needs a value", o);
        i++;
        if (strcmp(o, "--ns") == 0) {
            if (nns == 2)
                return cli_usage_error("lane", "--ns twice, no more");
            ns[nns++] = v;
        } else if (strcmp(o, "--addr") == 0) {
            addr = v;
        } else if (strcmp(o, "--dev") == 0) {
            if (!*v || strlen(v) >= 16 || strchr(v, '/') || strchr(v, ' '))
                return cli_usage_error("lane", "bad device name '%s'", v);
            cfg.dev = v;
        } else if (strcmp(o, "--mtu") == 0) {
            uint64_t m;
            if (!cli_parse_u64(v, &m) || m < LANE_MIN_MTU || m > LANE_MAX_MTU)
                return cli_usage_error("lane", "--mtu must be %u..%u", LANE_MIN_MTU, LANE_MAX_MTU);
            cfg.mtu = (unsigned)m;
            mtu_set = true;
        } else {
            return cli_usage_error("lane", "unknown option '%s'", o);
        }
    }
    if (nns != 2)
        return cli_usage_error("lane", "give two namespaces (--ns A --ns B)");
    if (!up)
        return lane_down(cfg.dev, ns);
    if (!addr)
        return cli_usage_error("lane", "--addr A/P,B/P is needed");
    char a0[64];
    const char *comma = strchr(addr, ',');
    if (!comma || (size_t)(comma - addr) >= sizeof a0)
        return cli_usage_error("lane", "--addr wants two addresses: A/P,B/P");
    memcpy(a0, addr, (size_t)(comma - addr));
    a0[comma - addr] = '\0';
    if (parse_addr(a0, &sides[0]) != 0 || parse_addr(comma + 1, &sides[1]) != 0)
        return cli_usage_error("lane", "bad address in '%s' (IPv4/prefix 1..30)", addr);
    sides[0].ns = ns[0];
    sides[1].ns = ns[1];
    return lane_up(&cfg, sides);
}
