#!/usr/bin/env bash
# Runs a test program under `mpirun -np NP` on this machine's loopback, as CTest's distributed
# tests do: run_mpi.sh NP PROGRAM [ARGS...]. Exits 77 (CTest's skip code here) when MPI is not
# installed or vtpu was built without it (PROGRAM is then "-").
set -euo pipefail
np=$1
shift
if [[ "${1:-}" == "-" ]]; then
  echo "skipped: vtpu was built without MPI (install libopenmpi-dev: scripts/install-deps.sh)"
  exit 77
fi
if ! command -v mpirun >/dev/null; then
  echo "skipped: mpirun not found (install openmpi-bin: scripts/install-deps.sh)"
  exit 77
fi
flags=(--oversubscribe --bind-to none -np "$np")
# OpenMPI refuses to start as root unless told; CI containers run as root.
[[ $(id -u) -eq 0 ]] && flags=(--allow-run-as-root "${flags[@]}")
exec mpirun "${flags[@]}" "$@"
