#!/usr/bin/env bash
# The main job: sets up, builds, and shows sovia's VI layer against kernel TCP
# and UCX on this machine.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh"
sovia="${SOVIA_BUILD:-$top/build}/src/tools/sovia/sovia"

echo
echo "== one-way latency, 4-byte messages (lower is better) =="
for t in limit vi ucx vi-block tcp-poll tcp uds; do
  "$sovia" bench lat --transport "$t" --size 4 --iters 50000 || true
done
echo
echo "== bandwidth, 64 KiB messages (higher is better) =="
for t in vi ucx tcp uds; do
  "$sovia" bench bw --transport "$t" --size 64K --seconds 1 || true
done
