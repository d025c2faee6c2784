#!/usr/bin/env bash
# Build the libFuzzer targets (fuzz/, clang, ASan+UBSan) in their own build tree and run each in
# turn; exit 1 if any of them found a crash, a sanitizer report, a hang or an input over the
# memory limit.
#
# Usage: scripts/fuzz.sh [SECONDS] [-runs=N] [-FLAG=VALUE ...] [FORMAT ...]
#   SECONDS      time per target (default 60); with -runs=N, whichever comes first
#   -FLAG=VALUE  any other libFuzzer flag, passed to every target (-max_len=4096, -seed=1)
#   FORMAT       targets to run, by format (runtime_options, trace, ...; default: all of fuzz/)
# Environment:
#   FUZZ_BUILD_DIR  build tree (default <repo>/build-fuzz)
#   FUZZ_CXX        the clang++ to build with (default clang++)
#   JOBS            parallel build jobs (default 2)
# Each target reads its seeds from fuzz/corpus/<format>/ and keeps the inputs it finds in
# <build>/fuzz/corpus/<format>/ (a later run starts from them). A failing input is saved as
# <build>/fuzz/artifacts/<format>/crash-<sha1> (or timeout-, oom-, slow-unit-); replay it with
# <build>/fuzz/vtpu_fuzz_<format> FILE. Logs: <build>/fuzz/logs/<format>.log.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${FUZZ_BUILD_DIR:-$repo/build-fuzz}
seconds=60
flags=()
formats=()
for arg in "$@"; do
  case "$arg" in
    -h|--help) sed -n '2,19s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*=*) flags+=("$arg") ;;
    *[!0-9]*) formats+=("$arg") ;;
    *) seconds=$arg ;;
  esac
done
if ((${#formats[@]} == 0)); then
  for src in "$repo"/fuzz/*_fuzzer.cc; do
    name=$(basename "$src" _fuzzer.cc)
    formats+=("$name")
  done
fi
for f in "${formats[@]}"; do
  if [[ ! -f "$repo/fuzz/${f}_fuzzer.cc" ]]; then
    echo "fuzz: no target '$f' (expected one of: $(cd "$repo/fuzz" && ls ./*_fuzzer.cc \
      | sed 's|^\./||; s|_fuzzer\.cc$||' | tr '\n' ' '))" >&2
    exit 2
  fi
done

if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  launcher=()
  if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  # -O1 with line tables and without NDEBUG, as OSS-Fuzz builds: asserts stay on, and a report
  # names the source line.
  cmake -S "$repo" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -gline-tables-only" -DCMAKE_CXX_COMPILER="${FUZZ_CXX:-clang++}" \
    "${launcher[@]}" -DVTPU_FUZZ=ON -DVTPU_BUILD_TESTS=OFF -DVTPU_BUILD_BENCH=OFF \
    -DVTPU_BUILD_PYTHON=OFF >/dev/null
fi
targets=()
for f in "${formats[@]}"; do targets+=(--target "vtpu_fuzz_$f"); done
cmake --build "$build_dir" -j"${JOBS:-2}" "${targets[@]}"

failed=()
for f in "${formats[@]}"; do
  corpus=$build_dir/fuzz/corpus/$f
  artifacts=$build_dir/fuzz/artifacts/$f
  log=$build_dir/fuzz/logs/$f.log
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  # -timeout: one input running 10 s is a hang. -rss_limit_mb: the readers bound what they read.
  status=0
  "$build_dir/fuzz/vtpu_fuzz_$f" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "${flags[@]}" \
    "$corpus" "$repo/fuzz/corpus/$f" >"$log" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  if ((status != 0)); then
    failed+=("$f")
    echo "fuzz: $f FAILED (exit $status) after ${runs:-?} runs; see $log and $artifacts/"
    grep -m1 -E '^(==[0-9]+==ERROR|.*runtime error|.*deadly signal|.*Timeout|.*out-of-memory)' "$log" || true
  else
    echo "fuzz: $f ok: ${runs:-?} runs in ${secs:-$seconds} s, corpus $(ls "$corpus" | wc -l) files"
  fi
done
if ((${#failed[@]} > 0)); then
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
