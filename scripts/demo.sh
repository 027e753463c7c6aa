#!/usr/bin/env bash
# The main job: sets up, builds, and shows sovia (native VI layer and the
# sockets layer) against kernel TCP, Unix sockets and UCX on this machine,
# then unmodified programs (sockperf, iperf3) over kernel TCP and under
# `sovia run`, and a short version of `sovia report`.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh"
sovia="${SOVIA_BUILD:-$top/build}/bin/sovia"

echo
echo "== this machine: what sovia will do here ('sovia doctor' for each check) =="
"$sovia" doctor | head -n 1 || true

echo
echo "== one-way latency, 4-byte messages, microseconds (lower is better) =="
for t in limit limit-shared vi sovia ucx vi-block sovia-adaptive tcp-poll tcp uds; do
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
echo
echo "== unmodified programs: kernel TCP, then both ends under 'sovia run' =="
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
port=$((20000 + RANDOM % 20000))
# One server/client pair of a program, plainly or under a `sovia run` prefix.
pair() { # label, prefix (empty: kernel TCP), server argv..., --, client argv...
  local label=$1 prefix=$2; shift 2
  local server=() client=()
  while [ "$1" != -- ]; do server+=("$1"); shift; done
  shift; client=("$@")
  port=$((port + 1))
  $prefix "${server[@]/PORT/$port}" >/dev/null 2>&1 &
  local spid=$!
  sleep 0.5
  printf '%-34s ' "$label"
  $prefix "${client[@]/PORT/$port}" 2>&1 | filter || echo "(failed)"
  kill "$spid" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
}
run_sovia="$sovia run --profile latency --"
# sockperf sizes its table of sent messages for --mps per second; sovia's
# ping-pong overflows the default ("_seqN > m_maxSequenceNo").
filter() { awk '/percentile 50.000/ {print $NF " us one-way (median)"; ok = 1}
                END {if (!ok) print "(no result)"}'; }
pair "sockperf ping-pong 16 B, tcp" "" sockperf server --tcp -i 127.0.0.1 -p PORT -- \
  sockperf ping-pong --tcp -i 127.0.0.1 -p PORT -m 16 -t 2 --mps 1000000
export SOVIA_STAT_LOG="$work/stat" # one line per process: was it carried?
pair "sockperf ping-pong 16 B, sovia" "$run_sovia" \
  sockperf server --tcp -i 127.0.0.1 -p PORT -- sockperf ping-pong --tcp -i 127.0.0.1 -p PORT -m 16 -t 2 --mps 1000000
filter() { awk '/receiver/ {print $(NF-2), $(NF-1); ok = 1} END {if (!ok) print "(no result)"}'; }
unset SOVIA_STAT_LOG
pair "iperf3, 64 KiB writes, tcp" "" iperf3 -s -1 -p PORT -- iperf3 -c 127.0.0.1 -p PORT -t 2 -l 64K
export SOVIA_STAT_LOG="$work/stat"
pair "iperf3, 64 KiB writes, sovia" "$sovia run --" \
  iperf3 -s -1 -p PORT -- iperf3 -c 127.0.0.1 -p PORT -t 2 -l 64K
unset SOVIA_STAT_LOG
if [ -f "$work/stat" ]; then
  echo "carried by sovia (SOVIA_STAT_LOG): $(grep -c '"carried": [1-9]' "$work/stat") of" \
    "$(wc -l < "$work/stat") processes"
fi
echo
echo "== the papers' experiments, short version ('sovia report --smoke'; the full"
echo "   report of a quiet run of this kind of machine is docs/results/REPORT.md) =="
"$sovia" report --smoke --quiet --out "$work/report"
sed -n '/^## Summary/,/^## /p' "$work/report/REPORT.md" | sed '1d;$d'
