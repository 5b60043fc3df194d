#!/usr/bin/env bash
# examples/job.c (the program docs/api.md shows) as one process and as a
# job of three ranks under `sfb launch`: each rank checks its replica itself
# and prints the value it holds. Usage: example_job.sh SFB JOB_EXE
set -uo pipefail
SFB=$1; JOB=$2
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
out=$(timeout 30 env -u SFB_RANK "$JOB" 2>&1); rc=$?
check "one process: exit 0 (rc=$rc)" "[ $rc = 0 ]"
check "one process: 10 everywhere ($out)" "grep -qx 'rank 0 of 1: every entry is 10' <<<\"\$out\""
out=$(timeout 50 "$SFB" launch -n 3 -- "$JOB" 2>&1); rc=$?
echo "$out"
check "3 ranks: exit 0 (rc=$rc)" "[ $rc = 0 ]"
for r in 0 1 2; do
  check "rank $r: 60 everywhere" "grep -qx '\[$r\] rank $r of 3: every entry is 60' <<<\"\$out\""
done
echo "$passes passed, $fails failed"
[ $fails = 0 ]
