#!/usr/bin/env bash
# Runs the compat suite ROUNDS times (default 20) under load: two busy
# processes of its own (killed by pid at the end, however it ends), as
# issue 20's figure asks ("every program correct in both modes in 20 of
# 20 runs under load"). Not a test: a check to run by hand.
#   tests/compat/soak.sh [BUILD_DIR] [ROUNDS] [ctest args, e.g. -R ssh]
# Each round's output is kept in BUILD_DIR/compat-soak/round-N.log; a
# table of failures per test follows the rounds.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$top/build}
rounds=${2:-20}
shift $(( $# < 2 ? $# : 2 ))
out=$build/compat-soak
mkdir -p "$out"
rm -f "$out"/round-*.log # an earlier run's rounds would count in the table
busy=()
run=""
trap 'for p in "${busy[@]}" $run; do kill "$p" 2>/dev/null || true; done' EXIT
trap 'exit 130' INT TERM
for _ in 1 2; do
  sh -c 'while :; do :; done' &
  busy+=($!)
done
for ((r = 1; r <= rounds; r++)); do
  start=$SECONDS
  ctest --test-dir "$build" -L compat --output-on-failure "$@" >"$out/round-$r.log" 2>&1 &
  run=$!
  wait "$run" || true
  run=""
  echo "round $r: $((SECONDS - start)) s, $(grep -c 'Failed\|Timeout' "$out/round-$r.log" || true) failed," \
       "load $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "failures per test over $rounds rounds:"
cat "$out"/round-*.log | grep -E '^ *[0-9]+/[0-9]+ Test +#' |
  awk '{name=$4; total[name]++; if ($0 !~ /Passed/) bad[name]++}
       END {for (n in total) printf "  %-22s %d of %d\n", n, bad[n]+0, total[n]}' | sort
