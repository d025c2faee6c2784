#!/usr/bin/env bash
# Install deps, build, fetch the dataset and run the test suite.
# Extra arguments go to ctest, e.g. scripts/test.sh -R collectives
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$repo/build}
export BUILD_DIR=$build_dir

"$repo/scripts/install-deps.sh"
"$repo/scripts/build.sh"
"$repo/scripts/fetch-data.sh"
ctest --test-dir "$build_dir" --output-on-failure -j2 "$@"

# The whole suite (no ctest arguments) also runs every fuzz target briefly under libFuzzer, in
# its own clang build (build-fuzz/; docs/FUZZING.md): its seeds, then up to 2000 mutated inputs or
# 10 s each. VTPU_TEST_FUZZ=0 skips it. The GCC build's fuzz.* tests above replay the seeds.
if (($# == 0)) && [[ "${VTPU_TEST_FUZZ:-1}" != 0 ]]; then
  "$repo/scripts/fuzz.sh" 10 -runs=2000
fi
