#!/usr/bin/env bash
# The main job: sets up, builds, and shows sovia (native VI layer and the
# sockets layer) against kernel TCP, Unix sockets and UCX on this machine.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh"
sovia="${SOVIA_BUILD:-$top/build}/src/tools/sovia/sovia"

echo
echo "== one-way latency, 4-byte messages, microseconds (lower is better) =="
for t in limit vi sovia ucx vi-block sovia-adaptive tcp-poll tcp uds; do
  "$sovia" bench lat --transport "$t" --size 4 --iters 50000 || true
done
echo
echo "== bandwidth, 64 KiB messages, Gbit/s (higher is better) =="
for t in vi sovia ucx tcp uds; do
  "$sovia" bench bw --transport "$t" --size 64K --seconds 1 || true
done
echo
echo "== the papers' small-message combining: 64-byte sends, Gbit/s =="
"$sovia" bench bw --transport sovia --config SOVIA_DACKS --size 64 --seconds 1 || true
"$sovia" bench bw --transport sovia --config SOVIA_COMBINE --size 64 --seconds 1 || true
"$sovia" bench bw --transport tcp --size 64 --seconds 1 || true
echo
echo "== CPU used by a receiver waiting 1 s for a silent peer, % of a core =="
for t in vi vi-block sovia-adaptive tcp; do
  "$sovia" bench idle --transport "$t" --seconds 1 || true
done
