#!/usr/bin/env bash
# Usage: check_failure.sh MPIEXEC NP PROGRAM MODE PATTERN
#
# Runs PROGRAM MODE on NP ranks under MPIEXEC and passes when the job ends
# by itself (within 20 s) with a non-zero status, exactly one line of its
# output matches the extended regex PATTERN, and at most one line is a
# "trainer: error:" line. Prints the job's output either way.
set -u
mpiexec=$1 np=$2 program=$3 mode=$4 pattern=$5

start=$SECONDS
output=$(timeout -k 5 20 "$mpiexec" --allow-run-as-root --oversubscribe \
  -np "$np" "$program" "$mode" 2>&1)
status=$?
elapsed=$((SECONDS - start))
printf '%s\n' "$output"
echo "-- $mode: exit status $status after ${elapsed}s"

fail() { echo "FAIL ($mode): $*"; exit 1; }
# timeout says 124 (or 137 once it had to kill); a killed rank also makes
# mpirun say 137, so the time tells a hang apart.
[[ $status -ne 124 && $elapsed -lt 20 ]] ||
  fail "the job hung: stopped by the timeout after ${elapsed}s"
[[ $status -ne 0 ]] || fail "the job exited with status 0"
matches=$(grep -cE -- "$pattern" <<<"$output")
[[ $matches -eq 1 ]] || fail "$matches lines match '$pattern', expected 1"
errors=$(grep -c "^trainer: error:" <<<"$output")
[[ $errors -le 1 ]] || fail "$errors 'trainer: error:' lines, expected at most 1"
echo "PASS ($mode)"
