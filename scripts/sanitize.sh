#!/usr/bin/env bash
# Builds the whole tree with a sanitizer and runs the suite under it; any report fails the run.
#   scripts/sanitize.sh address|thread [ctest args...]   e.g. scripts/sanitize.sh thread -L memory
#   address  ASan + UBSan (-DVTPU_SANITIZE=address), build tree <repo>/build-asan
#   thread   TSan (-DVTPU_SANITIZE=thread), build tree <repo>/build-tsan
#   BUILD_DIR  build tree instead of the above;  JOBS  parallel build jobs (default 2)
#   TARGETS    space-separated targets to build instead of everything (with a ctest -R/-L filter)
#
# What the suite needs under each (docs/TRAINING.md, "Sanitizers and soak"):
# - Python tests: the interpreter is not instrumented, so python/CMakeLists.txt preloads the
#   sanitizer runtime (and libstdc++) into pytest and gives it the suppressions as a file.
# - MPI tests (label distributed, the mpirun CLI tests too): Debian's OpenMPI is not
#   instrumented. Under ASan they run, with the leak check off (tests/CMakeLists.txt: OpenMPI's
#   allocations at MPI_Init and in the components it unloads show as leaks at exit whatever the
#   test does). Under TSan they are left out: OpenMPI's shared-memory transport and progress
#   thread synchronise in code TSan cannot see, so every exchange would look like a race; vtpu's
#   own cross-process code (MpiLink) is covered by these tests under ASan and by the one-process
#   tests of the same collectives under TSan.
set -euo pipefail

usage() {
  echo "usage: scripts/sanitize.sh address|thread [ctest args...]" >&2
  exit 2
}
[[ $# -ge 1 ]] || usage
mode=$1
shift
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case $mode in
  address) build_dir=${BUILD_DIR:-$repo/build-asan} ;;
  thread) build_dir=${BUILD_DIR:-$repo/build-tsan} ;;
  *)
    echo "sanitize.sh: sanitizer '$mode' (expected address or thread)" >&2
    usage
    ;;
esac

launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S "$repo" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DVTPU_SANITIZE="$mode" "${launcher[@]}"
targets=()
for t in ${TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build_dir" -j"${JOBS:-2}" "${targets[@]}"
"$repo/scripts/fetch-data.sh"

# Stop at the first report, with a non-zero exit (UBSan already stops: -fno-sanitize-recover).
# A test's own ENVIRONMENT (python, distributed) replaces these variables for that test; it
# keeps the same stop-at-first-report settings (python/CMakeLists.txt, tests/CMakeLists.txt).
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:exitcode=66:second_deadlock_stack=1}
excluded=()
if [[ $mode == thread ]]; then excluded=(-LE distributed); fi  # uninstrumented OpenMPI (above)
exec ctest --test-dir "$build_dir" --output-on-failure -j"${JOBS:-2}" "${excluded[@]}" "$@"
