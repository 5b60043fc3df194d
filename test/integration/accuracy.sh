#!/usr/bin/env bash
# Runs an sfb training command and asserts the final test accuracy.
# Usage: accuracy.sh SFB MIN_PERCENT ARGS...
set -uo pipefail
SFB=$1; min=$2; shift 2
out_dir=$(mktemp -d)
trap 'rm -rf "$out_dir"' EXIT
out=$(timeout 280 "$SFB" "$@" --out-dir "$out_dir" 2>&1); rc=$?
printf '%s\n' "$out" | tail -n 8
if [ $rc != 0 ]; then echo "FAIL: sfb exited with $rc"; echo "0 passed, 1 failed"; exit 1; fi
acc=$(printf '%s\n' "$out" | sed -n 's/^\(\[0\] \)\{0,1\}test accuracy \([0-9.]*\)%.*/\2/p' | tail -n 1)
if [ -z "$acc" ]; then echo "FAIL: no test accuracy printed"; echo "0 passed, 1 failed"; exit 1; fi
if awk "BEGIN{exit !($acc >= $min)}"; then
  echo "test accuracy $acc% >= $min%"; echo "1 passed, 0 failed"
else
  echo "FAIL: test accuracy $acc% < $min%"; echo "0 passed, 1 failed"; exit 1
fi
