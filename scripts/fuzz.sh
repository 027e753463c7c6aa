#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang and runs each for a
# bounded time, starting from its committed corpus (tests/fuzz/corpus/<target>/).
# Fails on any crash, sanitizer report, broken check, leak or hang; the
# failing input is kept under <build>/fuzz-artifacts/ and printed in hex.
#
# Environment: SOVIA_FUZZ_BUILD (build dir, default build-fuzz),
# SOVIA_FUZZ_SECONDS (per target, default 20), SOVIA_FUZZ_TARGETS (names,
# default all), SOVIA_FUZZ_MERGE=1 (merge what the run found into the
# committed corpus: for maintainers, after a long run).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${SOVIA_FUZZ_BUILD:-$top/build-fuzz}
secs=${SOVIA_FUZZ_SECONDS:-20}

CC=clang cmake -S "$top" -B "$build" -DSOVIA_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target fuzz_all -j"$(nproc)" >/dev/null

targets=${SOVIA_FUZZ_TARGETS:-$(cd "$top/tests/fuzz/corpus" && ls)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
artifacts="$build/fuzz-artifacts"
mkdir -p "$artifacts"
failed=0
for t in $targets; do
  mkdir -p "$work/$t"
  log="$work/$t.log"
  # -timeout: one input may take a few seconds (connection timeouts), not 30.
  if "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" -max_len=2048 -timeout=30 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/$t-" \
      "$work/$t" "$top/tests/fuzz/corpus/$t" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1)
    echo "fuzz: $t: ${runs:-?} runs, ${rate:-?}/s, $cov"
  else
    failed=1
    echo "fuzz: $t FAILED; the end of its log:"
    tail -60 "$log"
    for a in "$artifacts/$t"-*; do
      [[ -e "$a" ]] || continue
      echo "fuzz: input $a:"
      od -A d -t x1 "$a" | head -40
    done
  fi
  if [[ "${SOVIA_FUZZ_MERGE:-0}" == 1 ]]; then
    "$build/tests/fuzz/fuzz_$t" -merge=1 "$top/tests/fuzz/corpus/$t" "$work/$t" >/dev/null 2>&1
  fi
done
exit $failed
