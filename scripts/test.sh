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
exec ctest --test-dir "$build_dir" --output-on-failure -j2 "$@"
