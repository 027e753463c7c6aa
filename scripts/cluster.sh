#!/bin/bash
# cluster.sh - a test cluster on one machine: N "hosts", each a network
# namespace with one interface (eth0) and its own address, joined by veth
# pairs to a bridge that lives in a namespace of its own (the "switch"),
# so nothing is added to, or changed in, the namespace this runs in.
# docs/CLUSTER.md says how to use it and how to do the same on real hosts.
#
#   cluster.sh up N            make hosts 1..N (N <= 32)
#   cluster.sh addr I [6]      host I's IPv4 (or, with 6, IPv6) address
#   cluster.sh exec I CMD...   run CMD in host I (as `ip netns exec`)
#   cluster.sh down            kill what runs in the hosts, remove everything
#   cluster.sh run N [-t SECONDS] CMD...
#                              up N, CMD here (with SOVIA_CLUSTER and
#                              SOVIA_CLUSTER_ADDRS / _ADDRS6, the hosts'
#                              addresses in order, in its environment), down
#                              however it ends; CMD is killed after SECONDS
#                              (default 600). Exit status: CMD's; 77 (skip)
#                              where namespaces cannot be made here.
#
# SOVIA_CLUSTER names the cluster (default "sovia", for run "r" + its pid;
# [a-z][a-z0-9]{0,8}), so several can exist at once: namespaces NAME-1..NAME-N and NAME-sw, the
# bridge and the switch ends of the pairs inside NAME-sw. Addresses: a
# 10.213.K.0/24 (K from the name, the first one not on this host's
# interfaces or routes) and fd53:6f76:6961:K::/64. Needs root.
set -euo pipefail

if [[ ${1:-} == run ]]; then
    NAME=${SOVIA_CLUSTER:-r$$}
else
    NAME=${SOVIA_CLUSTER:-sovia}
fi
MAX_HOSTS=32
die() { echo "cluster.sh: $*" >&2; exit 2; }

[[ $NAME =~ ^[a-z][a-z0-9]{0,8}$ ]] || die "SOVIA_CLUSTER must match [a-z][a-z0-9]{0,8}: '$NAME'"
SW="$NAME-sw"

need_root() {
    [[ $(id -u) == 0 ]] || die "needs root (network namespaces)"
    command -v ip >/dev/null || die "needs ip (iproute2)"
}

hosts() { # the numbers of this cluster's hosts, one a line
    ip netns list | awk -v p="$NAME-" 'index($1, p) == 1 { s = substr($1, length(p) + 1); if (s ~ /^[0-9]+$/) print s }' | sort -n
}

# The third octet: from the name, the first whose /24 is nowhere on this
# host (addresses or routes of the namespace we run in) nor in another
# cluster's hosts.
pick_octet() {
    local used k i
    used="$(ip -o -4 addr show; ip -4 route show table all 2>/dev/null)"
    for ns in $(ip netns list | awk '{print $1}'); do
        used+=$'\n'"$(ip -n "$ns" -o -4 addr show 2>/dev/null || true)"
    done
    k=$(( $(printf '%s' "$NAME" | cksum | cut -d' ' -f1) % 256 ))
    for ((i = 0; i < 256; i++)); do
        if ! grep -q "10\.213\.$k\." <<<"$used"; then
            echo "$k"
            return 0
        fi
        k=$(( (k + 1) % 256 ))
    done
    die "no free 10.213.K.0/24"
}

cmd_down() {
    need_root
    local ns
    for ns in $(hosts | sed "s/^/$NAME-/") "$SW"; do
        ip netns list | awk '{print $1}' | grep -qx "$ns" || continue
        # A process inside would keep the namespace's interfaces alive.
        local pids
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
}

cmd_up() {
    need_root
    local n=${1:-}
    [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= MAX_HOSTS)) || die "up N: N from 1 to $MAX_HOSTS"
    if ip netns list | awk '{print $1}' | grep -qx "$SW"; then
        die "cluster '$NAME' is up already (cluster.sh down, or another SOVIA_CLUSTER)"
    fi
    local k
    k=$(pick_octet)
    trap 'cmd_down' ERR # a half-made cluster goes
    ip netns add "$SW"
    ip -n "$SW" link add br0 type bridge
    ip -n "$SW" link set br0 up
    local i ns
    for ((i = 1; i <= n; i++)); do
        ns="$NAME-$i"
        ip netns add "$ns"
        ip link add "p$i" netns "$SW" type veth peer name eth0 netns "$ns"
        ip -n "$SW" link set "p$i" master br0 up
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "10.213.$k.$i/24" dev eth0
        ip -n "$ns" addr add "fd53:6f76:6961:$k::$i/64" dev eth0 nodad
        ip -n "$ns" link set eth0 up
    done
    trap - ERR
}

cmd_addr() {
    local i=${1:-} fam=${2:-4}
    [[ $i =~ ^[0-9]+$ ]] || die "addr I [6]"
    ip -n "$NAME-$i" -o "-$fam" addr show dev eth0 scope global |
        awk '{ split($4, a, "/"); print a[1]; exit }'
}

cmd_exec() {
    local i=${1:-}
    [[ $i =~ ^[0-9]+$ ]] || die "exec I CMD..."
    shift
    (($# > 0)) || die "exec I CMD..."
    exec ip netns exec "$NAME-$i" "$@"
}

stop_child() {
    if [[ -n ${CHILD:-} ]]; then
        kill -TERM "$CHILD" 2>/dev/null || true
        wait "$CHILD" 2>/dev/null || true
    fi
}

cmd_run() {
    local n=${1:-} limit=600
    shift || true
    if [[ ${1:-} == -t ]]; then
        [[ ${2:-} =~ ^[0-9]+$ ]] || die "run N -t SECONDS CMD..."
        limit=$2
        shift 2
    fi
    (($# > 0)) || die "run N [-t SECONDS] CMD..."
    CHILD=""
    # On a signal the command goes first (timeout passes it on), then the
    # cluster (EXIT). The command runs in the background so that the
    # traps run at once, not when it has finished.
    trap 'cmd_down' EXIT
    trap 'stop_child; exit 130' INT
    trap 'stop_child; exit 143' TERM
    trap 'stop_child; exit 129' HUP
    if [[ $(id -u) != 0 ]] || ! command -v ip >/dev/null; then
        echo "cluster.sh: skipped: network namespaces need root and iproute2" >&2
        exit 77
    fi
    if ! ip netns add "$NAME-probe" 2>/dev/null; then
        echo "cluster.sh: skipped: cannot make a network namespace here" >&2
        exit 77
    fi
    ip netns del "$NAME-probe"
    cmd_up "$n"
    local addrs="" addrs6="" i
    for ((i = 1; i <= n; i++)); do
        addrs+="${addrs:+ }$(cmd_addr "$i")"
        addrs6+="${addrs6:+ }$(cmd_addr "$i" 6)"
    done
    local rc=0
    SOVIA_CLUSTER="$NAME" SOVIA_CLUSTER_ADDRS="$addrs" SOVIA_CLUSTER_ADDRS6="$addrs6" \
        timeout -k 5 "$limit" "$@" &
    CHILD=$!
    wait "$CHILD" || rc=$?
    CHILD=""
    exit "$rc"
}

case "${1:-}" in
up) shift; cmd_up "$@" ;;
down) cmd_down ;;
addr) shift; cmd_addr "$@" ;;
exec) shift; cmd_exec "$@" ;;
run) shift; cmd_run "$@" ;;
*) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
