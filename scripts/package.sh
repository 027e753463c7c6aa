#!/usr/bin/env bash
# Builds the Debian packages sovia and libsovia-dev (cmake/package.cmake)
# in a build directory of their own, installed under /usr, and prints how
# to install them. Environment: SOVIA_DEB_BUILD (default build-deb).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${SOVIA_DEB_BUILD:-$top/build-deb}
cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
  -DBUILD_TESTING=OFF >/dev/null
cmake --build "$build" -j"$(nproc)"
(cd "$build" && cpack -G DEB >/dev/null)
echo "packages:"
ls "$build"/*.deb
echo "install: sudo apt install $build/sovia_*.deb [$build/libsovia-dev_*.deb]"
