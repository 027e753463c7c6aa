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
  # openbsd-inetd starts a system-wide inetd serving ftpd on port 21; the FTP
  # test and report run their own private instances (src/apps/ftp/ftp_run.py).
  if [[ " ${missing[*]} " == *" openbsd-inetd "* ]]; then
    if [[ -d /run/systemd/system ]]; then
      $sudo systemctl disable --now inetd.service >/dev/null 2>&1 || true
    else
      $sudo invoke-rc.d openbsd-inetd stop >/dev/null 2>&1 || true
      $sudo update-rc.d openbsd-inetd disable >/dev/null 2>&1 || true
    fi
  fi
fi

cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE="${SOVIA_BUILD_TYPE:-RelWithDebInfo}" \
  -DSOVIA_SANITIZE="${SOVIA_SANITIZE:-}" >/dev/null
cmake --build "$build" -j"$(nproc)"
