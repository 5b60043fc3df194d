#!/usr/bin/env bash
# examples/mlr_numpy.py under `sfb launch -n 4`: rank 0's result line says a
# test accuracy of at least 0.84, world 4, and that every rank's final replica
# (gathered after the drain) is within 1e-3 of rank 0's (the same updates,
# summed in another order), while the parameters are of order 1.
# Usage: mlr_numpy.sh SFB RUN_PY MLR_NUMPY_PY
set -uo pipefail
SFB=$1; PY=$2; EXAMPLE=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
"$PY" --check || exit 77
# python/sfb finds this build's libsfb next to the example's tree
timeout 150 "$SFB" launch -n 4 -- "$PY" "$EXAMPLE" >"$tmp/out" 2>&1; rc=$?
tail -n 4 "$tmp/out"
line=$(grep '^\[0\] result ' "$tmp/out")
val() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
acc=$(val test_accuracy); diff=$(val max_abs_diff); amax=$(val max_abs_param); world=$(val world)
check "exit 0 (rc=$rc)" "[ $rc = 0 ]"
check "a result line" "[ -n '$line' ]"
check "world 4 ($world)" "[ '$world' = 4 ]"
check "test accuracy >= 0.84 ($acc)" "awk 'BEGIN{exit !(\"$acc\" + 0 >= 0.84)}'"
check "replicas within 1e-3 of rank 0's ($diff)" "awk 'BEGIN{exit !(\"$diff\" != \"\" && \"$diff\" + 0 <= 1e-3)}'"
check "parameters of order 1 ($amax)" "awk 'BEGIN{exit !(\"$amax\" + 0 >= 0.5)}'"
echo "$passes passed, $fails failed"
[ $fails = 0 ]
