#!/usr/bin/env bash
# Configure (only when needed) and build vtpu.
#   BUILD_DIR         build tree (default <repo>/build)
#   CMAKE_BUILD_TYPE  build type (default Release)
#   JOBS              parallel build jobs (default 2)
# Arguments are build targets (default: everything), e.g. scripts/build.sh vtpu_cli
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$repo/build}
build_type=${CMAKE_BUILD_TYPE:-Release}

# Configure when there is no cache yet, or when the requested build type
# differs from the cached one. Otherwise `cmake --build` re-runs CMake itself
# whenever a CMakeLists.txt changed.
cached_type=""
if [[ -f "$build_dir/CMakeCache.txt" ]]; then
  cached_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
fi
if [[ ! -f "$build_dir/CMakeCache.txt" || ! -f "$build_dir/Makefile" && ! -f "$build_dir/build.ninja" \
      || "$cached_type" != "$build_type" ]]; then
  cmake -S "$repo" -B "$build_dir" -DCMAKE_BUILD_TYPE="$build_type"
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build_dir" -j"${JOBS:-2}" "${targets[@]}"
