#!/usr/bin/env bash
# Step time of `vtpu train mlp` against PyTorch DDP (gloo) on the same model,
# batch and data. See bench/ddp/README.md.
#
# Environment overrides:
#   PROCS="1 2 8"   core / process counts
#   STEPS=200       timed steps per run      WARMUP=20   untimed steps (torch)
#   BATCH=256       global batch             HIDDEN=128  hidden width
#   ROUNDS=1        repetitions; the table shows the median over rounds
#   PYTHON          interpreter with torch (default /usr/bin/python3)
#   BUILD_DIR       build tree (default <repo>/build)
#   VTPU_ARGS       extra arguments for `vtpu train mlp`
#   OUT_DIR         where raw outputs go (default <build>/bench-ddp/<timestamp>)
#   SKIP_BUILD=1    do not run scripts/build.sh first
#   TORCH_BLAS=openblas  BLAS for PyTorch: openblas (Debian's OpenBLAS, fetched
#                   by fetch-openblas.sh, not installed) or system (whatever
#                   libblas.so.3 is installed; netlib reference BLAS by default)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
read -r -a procs <<<"${PROCS:-1 2 8}"
steps=${STEPS:-200}
warmup=${WARMUP:-20}
batch=${BATCH:-256}
hidden=${HIDDEN:-128}
rounds=${ROUNDS:-1}
python=${PYTHON:-/usr/bin/python3}
build_dir=${BUILD_DIR:-$repo/build}
read -r -a vtpu_extra <<<"${VTPU_ARGS:-}"
vtpu="$build_dir/vtpu"
torch_script="$repo/bench/ddp/torch_ddp_mlp.py"
out_dir=${OUT_DIR:-$build_dir/bench-ddp/$(date +%Y%m%d-%H%M%S)}

if ! "$python" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
  echo "compare: $python cannot import torch with gloo; run scripts/install-deps.sh --bench" >&2
  exit 1
fi
if [[ -z "${SKIP_BUILD:-}" ]]; then
  mkdir -p "$build_dir"
  if ! BUILD_DIR="$build_dir" "$repo/scripts/build.sh" >"$build_dir/build.log" 2>&1; then
    echo "compare: build failed; last 30 lines of $build_dir/build.log:" >&2
    tail -n 30 "$build_dir/build.log" >&2
    exit 1
  fi
fi
"$repo/scripts/fetch-data.sh" >/dev/null
torch_env=()
case "${TORCH_BLAS:-openblas}" in
  openblas) torch_env=(env "LD_LIBRARY_PATH=$("$repo/bench/ddp/fetch-openblas.sh" "$build_dir/openblas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}") ;;
  system) ;;
  *) echo "compare: TORCH_BLAS must be openblas or system" >&2; exit 2 ;;
esac
[[ -x "$vtpu" ]] || echo "compare: $vtpu not found; vtpu columns will be n/a" >&2
mkdir -p "$out_dir"

# median_ms FILE: the median step time in ms of the JSON object in FILE (the whole
# output, or else its last line that is a JSON object with the key): vtpu's
# "median_step_seconds" x 1000, or the torch script's "median_step_ms".
median_ms() {
  "$python" - "$1" <<'PY' 2>/dev/null || echo n/a
import json, sys
text = open(sys.argv[1]).read()
candidates = [text] + text.splitlines()[::-1]
for c in candidates:
    try:
        obj = json.loads(c)
    except ValueError:
        continue
    if not isinstance(obj, dict):
        continue
    if isinstance(obj.get("median_step_seconds"), (int, float)):
        print(f'{1e3 * obj["median_step_seconds"]:.4f}')
        sys.exit(0)
    if isinstance(obj.get("median_step_ms"), (int, float)):
        print(f'{obj["median_step_ms"]:.4f}')
        sys.exit(0)
sys.exit(1)
PY
}

run_vtpu() {  # N ROUND
  local f="$out_dir/vtpu-n$1-r$2.json"
  if [[ -x "$vtpu" ]] && "$vtpu" train mlp --cores "$1" --batch "$batch" --hidden "$hidden" \
       --steps "$steps" --json "${vtpu_extra[@]}" >"$f" 2>"$f.err"; then
    median_ms "$f"
  else
    echo n/a
  fi
}

run_torch() {  # N ROUND
  local f="$out_dir/torch-n$1-r$2.json"
  if "${torch_env[@]}" "$python" "$torch_script" --procs "$1" --batch "$batch" --hidden "$hidden" \
       --steps "$steps" --warmup "$warmup" >"$f" 2>"$f.err"; then
    median_ms "$f"
  else
    echo n/a
  fi
}

# Interleave: for every round and every N run both, alternating which goes
# first, so slow phases of a shared machine hit both frameworks alike.
declare -A vt dd
for ((r = 1; r <= rounds; r++)); do
  for n in "${procs[@]}"; do
    if (((r + n) % 2)); then
      v=$(run_vtpu "$n" "$r"); t=$(run_torch "$n" "$r")
    else
      t=$(run_torch "$n" "$r"); v=$(run_vtpu "$n" "$r")
    fi
    vt[$n]+="$v "; dd[$n]+="$t "
    printf 'round %d/%d  N=%-3s vtpu %8s ms  ddp %8s ms\n' "$r" "$rounds" "$n" "$v" "$t" >&2
  done
done

# Median over rounds (ignoring n/a) and the table.
"$python" - "$batch" "$hidden" "$steps" "$out_dir" "${TORCH_BLAS:-openblas}" "${procs[@]}" <<PY
import statistics, sys
batch, hidden, steps, out_dir, blas, *procs = sys.argv[1:]
vt = {$(for n in "${procs[@]}"; do printf '"%s": "%s", ' "$n" "${vt[$n]}"; done)}
dd = {$(for n in "${procs[@]}"; do printf '"%s": "%s", ' "$n" "${dd[$n]}"; done)}
def med(s):
    xs = [float(x) for x in s.split() if x != "n/a"]
    return statistics.median(xs) if xs else None
fmt = lambda x: "n/a" if x is None else f"{x:.3f}"
print(f"batch {batch}, hidden {hidden}, {steps} timed steps; median step time in ms")
print(f"{'N':>4}  {'vtpu ms':>10}  {'ddp ms':>10}  {'speedup':>8}")
for n in procs:
    v, d = med(vt[n]), med(dd[n])
    sp = f"{d / v:.2f}x" if v and d else "n/a"
    print(f"{n:>4}  {fmt(v):>10}  {fmt(d):>10}  {sp:>8}")
print(f"speedup = ddp / vtpu; PyTorch BLAS: {blas}; raw outputs in {out_dir}")
PY
