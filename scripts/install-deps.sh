#!/usr/bin/env bash
# Install the Debian packages needed to build and test vtpu. Idempotent: when
# everything is already installed it prints one line and never touches apt.
# libprotobuf-dev + protobuf-compiler build the pprof profile.proto (memory/);
# golang-go provides `go tool pprof`, which the memory profile tests run. pybind11-dev,
# python3-dev, python3-numpy and python3-pytest build and test the Python package (python/).
# libopenmpi-dev and openmpi-bin (Debian's OpenMPI) build the distributed runtime (distributed/)
# and run its tests under mpirun. clang and libclang-rt-dev (libFuzzer, the sanitizer runtimes)
# build the fuzz targets (fuzz/, scripts/fuzz.sh).
#
# Usage: scripts/install-deps.sh [--bench] [--chromium]
#   --bench     also install python3-torch (PyTorch DDP comparison, bench/ddp/)
#   --chromium  also install chromium (scripts/screenshot-html.sh; CI does not need it)
#   --mpi       accepted for older callers; OpenMPI is always installed now
set -euo pipefail

pkgs=(build-essential cmake g++ libtbb-dev libboost-dev nlohmann-json3-dev
      libgtest-dev libgmock-dev libbenchmark-dev libeigen3-dev libcli11-dev
      zlib1g-dev libprotobuf-dev protobuf-compiler golang-go jq
      pybind11-dev python3-dev python3-numpy python3-pytest libopenmpi-dev openmpi-bin
      clang libclang-rt-dev)

for arg in "$@"; do
  case "$arg" in
    --bench) pkgs+=(python3-torch) ;;
    --mpi) ;;
    --chromium) pkgs+=(chromium) ;;
    -h|--help) sed -n '2,15s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "install-deps: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "install-deps: dpkg-query not found; this script supports Debian/Ubuntu only" >&2
  exit 1
fi

# One dpkg-query call for all packages; unknown packages print nothing, so
# collect the installed ones and diff.
installed=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "${pkgs[@]}" 2>/dev/null \
            | awk '$2 == "ii" {print $1}' || true)
missing=()
for p in "${pkgs[@]}"; do
  grep -qxF -- "$p" <<<"$installed" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#pkgs[@]} packages already installed"
  exit 0
fi

if ((EUID == 0)); then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "install-deps: missing packages: ${missing[*]}" >&2
  echo "install-deps: not root and sudo is not available; install them as root:" >&2
  echo "  apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
