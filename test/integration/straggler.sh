#!/usr/bin/env bash
# A straggler must not break the job: 4 workers, rank 3 computing 3x slower
# (--debug-slow-rank/--debug-slow-factor), s = 3. The run completes, every
# worker logs every clock, the SSP guarantee held at every clock on every
# worker (ssp_check.py), the fast workers really ran ahead of the slow one
# (some update applied stale), all replicas end identical (<= 1e-5 relative:
# the same updates summed in different orders), and the model is
# as good as the same job without the straggler (within 1.5 points).
# Usage: straggler.sh SFB MODEL_DIFF SSP_CHECK
set -uo pipefail
SFB=$1; MODEL_DIFF=$2; CHECK=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
# compute must dominate for the slowdown to show (with tiny shapes a 3x
# slower compute is a few microseconds): K = 32, D = 1024, S = 64
common=(run -n 4 --data synth:k=32,d=1024,n=8000,seed=2 --batch 64 --clocks 150 --staleness 3
        --eval-every 0)
for case in slow plain; do
  extra=()
  [ $case = slow ] && extra=(--debug-slow-rank 3 --debug-slow-factor 3)
  out=$(timeout 120 "$SFB" "${common[@]}" "${extra[@]}" --out-dir "$tmp/$case" \
        --model-out "$tmp/$case/m.%r.sfb" 2>&1)
  rc=$?
  if [ $rc != 0 ]; then fail "$case run exited $rc"; printf '%s\n' "$out" | tail; continue; fi
  acc=$(printf '%s\n' "$out" | sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p' | tail -1)
  [ -n "$acc" ] || { fail "$case run printed no test accuracy"; continue; }
  eval "acc_$case=$acc"
done
[ $fails = 0 ] || { echo "0 passed, $fails failed"; exit 1; }

for r in 0 1 2 3; do
  n=$(grep -c '"t_begin"' "$tmp/slow/metrics.$r.jsonl")
  [ "$n" = 150 ] || fail "rank $r logged $n clocks, expected 150"
done
python3 "$CHECK" 3 "$tmp"/slow/metrics.*.jsonl | tail -n 2 || fail "SSP guarantee violated"
stale=$(python3 - "$tmp"/slow/metrics.0.jsonl <<'PY'
import json, sys
print(max(json.loads(l).get("staleness", 0) for l in open(sys.argv[1]) if '"t_begin"' in l))
PY
)
[ "${stale:-0}" -ge 1 ] || fail "rank 0 never ran ahead of the slow rank (max staleness $stale)"
[ "${stale:-0}" -le 3 ] || fail "rank 0 applied an update $stale clocks stale (> s = 3)"
for r in 1 2 3; do
  "$MODEL_DIFF" "$tmp/slow/m.0.sfb" "$tmp/slow/m.$r.sfb" 1e-5 \
    || fail "replica $r differs from replica 0 after the straggler run"
done
echo "test accuracy: with straggler $acc_slow%, without $acc_plain%; max staleness seen $stale"
awk -v a="$acc_slow" -v b="$acc_plain" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1.5) }' \
  || fail "accuracy with the straggler $acc_slow% is not within 1.5 points of $acc_plain%"
echo "$((7 - fails)) passed, $fails failed"
[ $fails = 0 ]
