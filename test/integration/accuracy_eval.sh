#!/usr/bin/env bash
# Runs an sfb training command, asserts its final test accuracy, then
# evaluates the model file it wrote with `sfb eval` on the same data and
# asserts that eval prints the same accuracy (the file re-creates the model).
# Usage: accuracy_eval.sh SFB MIN_PERCENT DATA ARGS...   (ARGS after `sfb`,
# without --data, which is DATA for both commands)
set -uo pipefail
SFB=$1; min=$2; data=$3; shift 3
out_dir=$(mktemp -d)
trap 'rm -rf "$out_dir"' EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
out=$(timeout 280 "$SFB" "$@" --data "$data" --out-dir "$out_dir" 2>&1); rc=$?
printf '%s\n' "$out" | tail -n 6
check "sfb exited with $rc" '[ $rc = 0 ]'
acc=$(printf '%s\n' "$out" | sed -n 's/^\(\[0\] \)\{0,1\}test accuracy \([0-9.]*\)%.*/\2/p' | tail -n 1)
check "a test accuracy is printed" '[ -n "$acc" ]'
check "test accuracy $acc% >= $min%" '[ -n "$acc" ] && awk "BEGIN{exit !($acc >= $min)}"'
ev=$(timeout 60 "$SFB" eval --model-file "$out_dir/model.sfb" --data "$data" 2>&1); rc=$?
printf '%s\n' "$ev"
check "sfb eval exited with $rc" '[ $rc = 0 ]'
check "sfb eval prints accuracy $acc%" '[ -n "$acc" ] && [[ "$ev" == *"accuracy $acc%"* ]]'
echo "$passes passed, $fails failed"
[ $fails = 0 ]
