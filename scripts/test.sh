#!/usr/bin/env bash
# Install deps, build, fetch the dataset and run the test suite; then, when no ctest arguments
# were given, the collectives and runtime tests again under ThreadSanitizer and every fuzz target
# briefly under libFuzzer.
# Extra arguments go to ctest, e.g. scripts/test.sh -R collectives
#   VTPU_CI_TSAN=0   skip the TSan step (its own build tree, <repo>/build-tsan or TSAN_BUILD_DIR)
#   VTPU_TEST_FUZZ=0 skip the fuzz step (its own build tree, <repo>/build-fuzz or FUZZ_BUILD_DIR)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$repo/build}
export BUILD_DIR=$build_dir

"$repo/scripts/install-deps.sh"
"$repo/scripts/build.sh"
"$repo/scripts/fetch-data.sh"
status=0
ctest --test-dir "$build_dir" --output-on-failure -j2 "$@" || status=$?

# The concurrent core of vtpu under TSan, within the CI's time: only the two folders' tests are
# built (vtpu_tests_<folder>), and run (label). scripts/sanitize.sh thread runs everything.
if [[ ${VTPU_CI_TSAN:-1} != 0 && $# -eq 0 ]]; then
  echo "test.sh: the collectives and runtime tests under TSan (VTPU_CI_TSAN=0 skips this)"
  BUILD_DIR=${TSAN_BUILD_DIR:-$repo/build-tsan} TARGETS="vtpu_tests_collectives vtpu_tests_runtime" \
    "$repo/scripts/sanitize.sh" thread -L '^(collectives|runtime)$' || status=$?
fi

# The fuzz.* tests above only replay each target's seeds; here every target mutates them under
# libFuzzer with ASan+UBSan (docs/FUZZING.md), up to 2000 inputs or 10 s each.
if [[ ${VTPU_TEST_FUZZ:-1} != 0 && $# -eq 0 ]]; then
  echo "test.sh: every fuzz target briefly under libFuzzer (VTPU_TEST_FUZZ=0 skips this)"
  "$repo/scripts/fuzz.sh" 10 -runs=2000 || status=$?
fi
exit "$status"
