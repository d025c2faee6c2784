#!/usr/bin/env bash
# Soak: 8 cores churn allocations near full with automatic defragmentation while they all-reduce,
# for SECONDS (default 600), checking every live buffer's checksum after each compaction
# (`vtpu stress soak`, docs/STRESS.md). Exits non-zero on any checksum mismatch, lost buffer or
# wrong all-reduce.
#   scripts/soak.sh [SECONDS] [vtpu stress soak options...]   e.g. scripts/soak.sh 600 --json
#   BUILD_DIR  build tree (default <repo>/build); vtpu is built there first
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$repo/build}
export BUILD_DIR=$build_dir

seconds=600
if [[ $# -gt 0 && $1 != -* ]]; then
  seconds=$1
  shift
fi
if ! [[ $seconds =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  echo "soak.sh: SECONDS '$seconds' is not a number of seconds (expected e.g. 600)" >&2
  exit 2
fi

"$repo/scripts/build.sh" vtpu_cli >&2
exec "$build_dir/vtpu" stress soak --seconds "$seconds" "$@"
