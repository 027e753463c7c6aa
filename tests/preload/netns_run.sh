#!/bin/sh
# Runs a preload test in a network namespace of its own (loopback up, an
# ephemeral port range of 500 ports), with LD_PRELOAD from
# NETNS_RUN_PRELOAD set for the test alone (not for unshare, sh or ip).
# Exit 77 (skipped) where no namespace can be made (not root).
if ! unshare -n true 2>/dev/null; then
    echo "skipped: cannot make a network namespace (unshare -n)"
    exit 77
fi
exec unshare -n sh -c '
    ip link set lo up || exit 1
    echo "40000 40499" > /proc/sys/net/ipv4/ip_local_port_range || exit 1
    LD_PRELOAD="$NETNS_RUN_PRELOAD" exec "$@"' netns_run "$@"
