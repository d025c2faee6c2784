#!/usr/bin/env bash
# vtpu's all_reduce against OpenMPI's MPI_Allreduce on this machine, side by side in one run
# (issue 4's targets). For each N in $CORES it runs `vtpu bench collectives` and
# `mpirun -np N vtpu_mpi_allreduce_bench` over the same sizes (f32 sum, out of place, the same
# timing method: median over calls of the slowest rank), then prints size, vtpu busbw, MPI busbw
# and their ratio; then the 8-byte all_reduce latency on 2 cores (both) and vtpu's time over the
# memory-traffic bound at 8 MiB on 8 cores.
#
# Usage: bench/collectives/compare.sh [BUILD_DIR]       (default: build)
# Environment: CORES="2 4 8" MIN_BYTES=64K MAX_BYTES=32M ITERS=20 WARMUP=5 LATENCY_ITERS=2000
# Needs MPI: scripts/install-deps.sh, then rebuild (CMake builds the MPI program when it
# finds MPI).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
vtpu=$build/vtpu
mpi_bench=$build/bench/vtpu_mpi_allreduce_bench
CORES=${CORES:-"2 4 8"}
MIN_BYTES=${MIN_BYTES:-64K}
MAX_BYTES=${MAX_BYTES:-32M}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
LATENCY_ITERS=${LATENCY_ITERS:-2000}

for f in "$vtpu" "$mpi_bench"; do
  if [[ ! -x $f ]]; then
    echo "compare.sh: $f not found; build first (MPI program: scripts/install-deps.sh)" >&2
    exit 1
  fi
done
command -v mpirun >/dev/null || { echo "compare.sh: mpirun not found (scripts/install-deps.sh)" >&2; exit 1; }

mpirun_args=(--oversubscribe --mca btl_base_warn_component_unused 0)
((EUID == 0)) && mpirun_args+=(--allow-run-as-root)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Rows "bytes busbw" from each program's table (comment and header lines skipped).
vtpu_rows() { awk '$1 ~ /^[0-9]+$/ {print $1, $9, $11, $12}' "$1"; }
mpi_rows() { awk '$1 ~ /^[0-9]+$/ {print $1, $7, $8}' "$1"; }

echo "# $(date -u +%FT%TZ)  $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# all_reduce f32 sum, out of place, $WARMUP warmup + $ITERS timed calls; time = median over"
echo "# calls of the slowest rank; busbw = algbw * 2(n-1)/n; ratio = vtpu busbw / MPI busbw"
printf '%3s %12s %13s %13s %8s %9s\n' N "size(B)" "vtpu_busbw" "mpi_busbw" ratio ">=3x"
for n in $CORES; do
  # Interleaved: MPI first, then vtpu, per N, so both see the same stretch of machine load.
  mpirun "${mpirun_args[@]}" -np "$n" "$mpi_bench" --min-bytes "$MIN_BYTES" \
    --max-bytes "$MAX_BYTES" --iters "$ITERS" --warmup "$WARMUP" >"$tmp/mpi_$n.txt"
  "$vtpu" bench collectives --cores "$n" --op all_reduce --min-bytes "$MIN_BYTES" \
    --max-bytes "$MAX_BYTES" --iters "$ITERS" --warmup "$WARMUP" >"$tmp/vtpu_$n.txt"
  join <(vtpu_rows "$tmp/vtpu_$n.txt" | sort -k1,1) <(mpi_rows "$tmp/mpi_$n.txt" | sort -k1,1) |
    sort -n -k1,1 |
    awk -v n="$n" '{ r = $5 > 0 ? $2 / $5 : 0;
      printf "%3d %12d %13.3f %13.3f %8.2f %9s%s\n", n, $1, $2, $5, r, (r >= 3 ? "yes" : "no"),
             ($4 != "ok" || $6 != 0 ? "  CHECK FAILED" : "") }'
  if [[ $n == 8 ]]; then
    grep -E '^ +8388608 ' "$tmp/vtpu_$n.txt" >"$tmp/bound.txt" || true
  fi
done

echo
echo "# 8-byte all_reduce on 2 cores, median over $LATENCY_ITERS calls (target: vtpu <= 5 us)"
mpirun "${mpirun_args[@]}" -np 2 "$mpi_bench" --min-bytes 8 --max-bytes 8 \
  --iters "$LATENCY_ITERS" --warmup 100 >"$tmp/mpi_lat.txt"
"$vtpu" bench collectives --cores 2 --min-bytes 8 --max-bytes 8 --iters "$LATENCY_ITERS" \
  --warmup 100 >"$tmp/vtpu_lat.txt"
awk '$1 == 8 {printf "vtpu   %8.2f us\n", $7}' "$tmp/vtpu_lat.txt"
awk '$1 == 8 {printf "OpenMPI %7.2f us\n", $5}' "$tmp/mpi_lat.txt"

if [[ -s $tmp/bound.txt ]]; then
  echo
  echo "# 8 MiB all_reduce on 8 cores: time over the DRAM bound 2*N*S / memcpy bandwidth"
  echo "# (target <= 3)"
  grep 'memcpy bandwidth' "$tmp/vtpu_8.txt" | sed 's/^# //'
  awk '{printf "time %.1f us, dram_bound %.1f us, time/dram_bound %.2f\n", $7, $10, $11}' "$tmp/bound.txt"
fi
