#!/usr/bin/env bash
# Installs the Debian packages sovia needs (only the missing ones) and builds
# it. Environment: SOVIA_BUILD (build dir, default build), SOVIA_SANITIZE
# (e.g. address,undefined), SOVIA_BUILD_TYPE (default RelWithDebInfo).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${SOVIA_BUILD:-$top/build}

missing=()
while read -r pkg; do
  [[ -z "$pkg" || "$pkg" == \#* ]] && continue
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done < "$top/scripts/packages.txt"
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""; [[ $(id -u) -ne 0 ]] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE="${SOVIA_BUILD_TYPE:-RelWithDebInfo}" \
  -DSOVIA_SANITIZE="${SOVIA_SANITIZE:-}" >/dev/null
cmake --build "$build" -j"$(nproc)"
