#!/usr/bin/env bash
# Debian's python3-torch is built with BLAS_INFO=generic and, unless an
# optimized BLAS is installed, links the netlib reference libblas.so.3, which
# makes its matmuls ~10x slower than they need to be. This extracts Debian's
# single-threaded OpenBLAS (libopenblas0-serial) into a cache directory,
# without installing it, and prints the directory to put on LD_LIBRARY_PATH.
#
# Usage: bench/ddp/fetch-openblas.sh [CACHE_DIR]   (default <repo>/build/openblas)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${1:-${BUILD_DIR:-$repo/build}/openblas}
libdir="$cache/usr/lib/x86_64-linux-gnu/openblas-serial"

if [[ -f "$libdir/libblas.so.3" ]]; then
  echo "$libdir"
  exit 0
fi

tmp=$(mktemp -d /tmp/vtpu-openblas.XXXXXX)
trap 'rm -rf -- "$tmp"' EXIT
chmod 0777 "$tmp"  # apt-get download runs as the _apt user when invoked as root
download() { (cd "$tmp" && apt-get download -qq libopenblas0-serial) >"$tmp/apt.log" 2>&1; }
if ! download; then
  if ((EUID == 0)); then apt-get update -qq; elif command -v sudo >/dev/null 2>&1; then sudo apt-get update -qq; fi
  download || { cat "$tmp/apt.log" >&2; echo "fetch-openblas: cannot download libopenblas0-serial" >&2; exit 1; }
fi
debs=("$tmp"/libopenblas0-serial_*.deb)
mkdir -p "$tmp/x"
dpkg-deb -x "${debs[0]}" "$tmp/x"
[[ -f "$tmp/x/usr/lib/x86_64-linux-gnu/openblas-serial/libblas.so.3" ]] \
  || { echo "fetch-openblas: libblas.so.3 not in ${debs[0]##*/} (not x86_64?)" >&2; exit 1; }
mkdir -p "$(dirname "$cache")"
rm -rf -- "$cache.part"
mv -- "$tmp/x" "$cache.part"
rm -rf -- "$cache"
mv -- "$cache.part" "$cache"
echo "$libdir"
