#!/usr/bin/env bash
# Passes when a job fails, and fails when it succeeds or hangs: expect_job_failure.sh SECONDS
# COMMAND [ARGS...] exits 0 when COMMAND exits non-zero within SECONDS, 1 when it exits 0 or is
# still running then (it is killed), and 77 (skip) when COMMAND skips. For fault tests whose
# success is the MPI job ending with an error instead of hanging (tests/CMakeLists.txt).
set -uo pipefail
limit=$1
shift
start=$(date +%s%N)
timeout --kill-after=5 "$limit" "$@"
rc=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
if ((rc == 77)); then
  exit 77
elif ((rc == 124 || rc == 137 && elapsed_ms >= limit * 1000)); then
  echo "FAIL: the job was still running after ${limit} s (expected it to end with an error)"
  exit 1
elif ((rc == 0)); then
  echo "FAIL: the job exited 0 after ${elapsed_ms} ms (expected a non-zero exit)"
  exit 1
fi
echo "PASS: the job exited ${rc} after ${elapsed_ms} ms (expected non-zero within ${limit} s)"
