#!/usr/bin/env bash
# vtpu's all_reduce across processes against OpenMPI's MPI_Allreduce on this machine, side by side
# in one run, in the same ranks: vtpu with 2 processes x 4 cores against `mpirun -np 8`, and 2
# processes x 1 core against `mpirun -np 2` (f32 sum, out of place, the same timing method:
# median over calls of the slowest rank; distributed_allreduce_bench.cc, mpi_allreduce_bench.cc).
# The two programs alternate ROUNDS times (the order flips every round), so that both see the same
# stretch of machine load; each size's ratio vtpu busbw / MPI busbw is taken round by round, and
# the table gives the median busbw of each and the median and lowest of the per-round ratios,
# against the targets: >= 1.0 for 2 x 4 at every size, >= 0.8 for 2 x 1 from 1 MiB.
#
# Usage: bench/mpi/compare.sh [BUILD_DIR]       (default: build)
# Environment: ROUNDS=3 MIN_BYTES=64K MAX_BYTES=32M ITERS=20 WARMUP=5 ALGORITHM=auto
#              VTPU_ARGS="" (more distributed_allreduce_bench options, e.g. --slot-bytes 256K)
#              PAIRS="2x4 2x1" (which comparisons: processes x cores per process)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
vtpu_bench=$build/bench/vtpu_distributed_allreduce_bench
mpi_bench=$build/bench/vtpu_mpi_allreduce_bench
ROUNDS=${ROUNDS:-3}
MIN_BYTES=${MIN_BYTES:-64K}
MAX_BYTES=${MAX_BYTES:-32M}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
ALGORITHM=${ALGORITHM:-auto}
read -r -a vtpu_extra <<<"${VTPU_ARGS:-}"

for f in "$vtpu_bench" "$mpi_bench"; do
  if [[ ! -x $f ]]; then
    echo "compare.sh: $f not found; build the targets vtpu_distributed_allreduce_bench and" \
      "vtpu_mpi_allreduce_bench first (they need MPI: scripts/install-deps.sh)" >&2
    exit 1
  fi
done
command -v mpirun >/dev/null || { echo "compare.sh: mpirun not found (scripts/install-deps.sh)" >&2; exit 1; }

# --bind-to none: OpenMPI would bind each process to one CPU, and vtpu's cores of a process to it.
mpirun_args=(--oversubscribe --bind-to none --mca btl_base_warn_component_unused 0)
((EUID == 0)) && mpirun_args+=(--allow-run-as-root)
sweep=(--min-bytes "$MIN_BYTES" --max-bytes "$MAX_BYTES" --iters "$ITERS" --warmup "$WARMUP")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run_vtpu() {  # processes cores_per_process output
  mpirun "${mpirun_args[@]}" -np "$1" "$vtpu_bench" --cores-per-process "$2" \
    --algorithm "$ALGORITHM" "${vtpu_extra[@]}" "${sweep[@]}" >"$3"
}
run_mpi() {  # ranks output
  mpirun "${mpirun_args[@]}" -np "$1" "$mpi_bench" "${sweep[@]}" >"$2"
}

# The pairs: "processes cores_per_process mpi_ranks target min_bytes_of_target".
pairs=()
for p in ${PAIRS:-2x4 2x1}; do
  case $p in
    2x4) pairs+=("2 4 8 1.0 0") ;;
    2x1) pairs+=("2 1 2 0.8 1048576") ;;
    *) echo "compare.sh: PAIRS has '$p' (expected 2x4 or 2x1)" >&2; exit 2 ;;
  esac
done
for ((r = 1; r <= ROUNDS; ++r)); do
  for pair in "${pairs[@]}"; do
    read -r np k ranks _ _ <<<"$pair"
    if ((r % 2)); then
      run_mpi "$ranks" "$tmp/mpi_${np}x${k}_$r.txt"
      run_vtpu "$np" "$k" "$tmp/vtpu_${np}x${k}_$r.txt"
    else
      run_vtpu "$np" "$k" "$tmp/vtpu_${np}x${k}_$r.txt"
      run_mpi "$ranks" "$tmp/mpi_${np}x${k}_$r.txt"
    fi
  done
done

echo "# $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $ROUNDS rounds, alternating"
echo "# all_reduce f32 sum, out of place, $WARMUP warmup + $ITERS timed calls; busbw in GB/s"
echo "# (median over rounds); ratio = vtpu busbw / MPI busbw per round: median and lowest"
printf '%-16s %12s %11s %11s %8s %8s %7s %s\n' vtpu_vs_mpi "size(B)" vtpu_busbw mpi_busbw \
  ratio min_ratio target met
status=0
for pair in "${pairs[@]}"; do
  read -r np k ranks target from <<<"$pair"
  # Lines "round bytes busbw wrong" of every round of each program.
  for impl in vtpu mpi; do
    for ((r = 1; r <= ROUNDS; ++r)); do
      awk -v r="$r" '$1 ~ /^[0-9]+$/ {print r, $1, $7, $8}' "$tmp/${impl}_${np}x${k}_$r.txt"
    done >"$tmp/$impl.rows"
  done
  join -j1 <(awk '{print $1 "_" $2, $3, $4}' "$tmp/vtpu.rows" | sort) \
    <(awk '{print $1 "_" $2, $3, $4}' "$tmp/mpi.rows" | sort) |
    tr '_' ' ' | sort -k2,2n -k1,1n |
    awk -v label="${np}x${k} vs -np $ranks" -v target="$target" -v from="$from" '
      function median(a, n,   i, j, t) {
        for (i = 2; i <= n; ++i) for (j = i; j > 1 && a[j - 1] > a[j]; --j) {
          t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
      }
      function flush(   m, met) {
        if (n == 0) return
        m = median(ratio, n)
        met = bytes < from ? "-" : (m >= target ? "yes" : "NO")
        if (met == "NO") bad = 1
        printf "%-16s %12d %11.3f %11.3f %8.2f %8.2f %7s %s%s\n", label, bytes, median(vb, n),
               median(mb, n), m, lo, ">=" target, met, (wrong ? "  CHECK FAILED" : "")
        n = 0; wrong = 0
      }
      { if ($2 != bytes) { flush(); bytes = $2; lo = 1e30 }
        ++n; vb[n] = $3; mb[n] = $5; ratio[n] = $5 > 0 ? $3 / $5 : 0
        if (ratio[n] < lo) lo = ratio[n]
        if ($4 != 0 || $6 != 0) wrong = 1 }
      END { flush(); exit bad }' || status=1
done
exit "$status"
