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
  # openbsd-inetd, nginx-light, lighttpd, memcached, openssh-server and
  # rsync would start system-wide services (ftpd on port 21, web servers on
  # port 80, memcached on 11211, sshd on 22, an rsync daemon; nginx's
  # install fails if port 80 is taken); the tests and the report run their
  # own private instances (src/apps/ftp/ftp_run.py, tests/programs/
  # test_nginx.py, test_lighttpd.py, test_memcached.py, test_exit_records.py,
  # tests/compat/test_openssh.py, test_rsync.py). A temporary policy-rc.d
  # keeps them from starting, unless the host has its own.
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee $policy >/dev/null
    $sudo chmod 755 $policy
    own_policy=1
  fi
  rc=0
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
  ((own_policy)) && $sudo rm -f $policy
  ((rc == 0)) || exit $rc
  # package, systemd unit, init script: stopped and disabled all the same
  # (a host policy may have let them start).
  for svc in openbsd-inetd:inetd:openbsd-inetd nginx-light:nginx:nginx \
             lighttpd:lighttpd:lighttpd \
             memcached:memcached:memcached openssh-server:ssh:ssh rsync:rsync:rsync; do
    IFS=: read -r pkg unit script <<<"$svc"
    [[ " ${missing[*]} " == *" $pkg "* ]] || continue
    if [[ -d /run/systemd/system ]]; then
      $sudo systemctl disable --now "$unit.service" >/dev/null 2>&1 || true
    else
      $sudo invoke-rc.d "$script" stop >/dev/null 2>&1 || true
      $sudo update-rc.d "$script" disable >/dev/null 2>&1 || true
    fi
  done
fi

cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE="${SOVIA_BUILD_TYPE:-RelWithDebInfo}" \
  -DSOVIA_SANITIZE="${SOVIA_SANITIZE:-}" >/dev/null
cmake --build "$build" -j"$(nproc)"
