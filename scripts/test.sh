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

# The fuzz.* tests above replay each fuzz target's seeds. VTPU_TEST_FUZZ=1 also runs every target
# under libFuzzer (docs/FUZZING.md): its seeds, then up to 2000 mutated inputs or 10 s each. Off
# by default: its clang ASan+UBSan build of the libraries (build-fuzz/) costs as much CPU as a
# second build of them when ccache has none of it.
if (($# == 0)) && [[ "${VTPU_TEST_FUZZ:-0}" == 1 ]]; then
  "$repo/scripts/fuzz.sh" 10 -runs=2000
fi
