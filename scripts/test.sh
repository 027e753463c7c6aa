#!/usr/bin/env bash
# The test command: sets up and builds if needed, then runs the whole suite.
# Extra arguments go to ctest (e.g. -L vipl, -R connect).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh"
ctest --test-dir "${SOVIA_BUILD:-$top/build}" --output-on-failure --timeout 300 "$@"
