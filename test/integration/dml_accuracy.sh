#!/usr/bin/env bash
# DML acceptance (issue 7): DML on Fashion-MNIST with a K = 64 projection,
# trained by P = 4 local workers under BSP with the defaults (10 epochs =
# 18750 clocks of a global minibatch of 32 pairs, λ = 30, lr 0.01 invsqrt),
# gives a k-NN (k = 5) accuracy under the learned metric ‖L(x − y)‖ above the
# one under the Euclidean ‖x − y‖ by more than MARGIN percentage points.
#
# Both accuracies come from `sfb eval` on the same model file and the same
# split: a seed-determined subset of the Fashion-MNIST test set, 2000 queries
# against 8000 references, raw [0, 1] pixels (L is applied to exactly the
# vectors the Euclidean baseline measures). Under BSP the P = 4 run gives,
# up to float rounding, the model of `sfb run -n 1` with a batch of 32: the
# result is deterministic for a seed up to that rounding (±0.05 points seen
# between repeated runs).
#
# Measured (learned / Euclidean, gap in points; this command, seeds 1-8):
#   1: 84.15 / 81.85 +2.30   2: 82.70 / 79.60 +3.10   3: 84.20 / 81.25 +2.95
#   4: 83.00 / 79.85 +3.15   5: 82.40 / 80.90 +1.50   6: 83.00 / 80.20 +2.80
#   7: 84.65 / 81.00 +3.65   8: 83.70 / 81.05 +2.65
# smallest gap 1.50, mean 2.76: the default margin 0.75 is half the
# smallest. With the old default λ = 1 the learned metric lost (77-80 % vs
# 81.85 % at seed 1). The run takes 10-13 s on a shared 2-core machine.
# Usage: dml_accuracy.sh SFB [MARGIN] [SEED]
set -uo pipefail
SFB=$1; margin=${2:-0.75}; seed=${3:-1}
tmp=$(mktemp -d)
pid=
cleanup() {
  # The run is the leader of its own process group: kill the launcher and
  # every worker it started, whatever state they are in.
  if [ -n "$pid" ]; then kill -9 -- -"$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }

t0=$(date +%s)
setsid timeout -k 5 120 "$SFB" run -n 4 --model dml --data fashion-mnist --proj-dim 64 --knn-k 5 \
  --seed "$seed" --staleness 0 --eval-every 0 -q --out-dir "$tmp/o" \
  >"$tmp/run.log" 2>&1 &
pid=$!
wait "$pid"; rc=$?
pid=
t1=$(date +%s)
tail -n 4 "$tmp/run.log"
[ $rc = 0 ] || fail "sfb run exited with $rc"
run_acc=$(sed -n 's/^\(\[0\] \)\{0,1\}test accuracy \([0-9.]*\)%.*/\2/p' "$tmp/run.log" | tail -n 1)

out=$(timeout -k 5 60 "$SFB" eval --model-file "$tmp/o/model.sfb" --data fashion-mnist 2>&1)
rc=$?
printf '%s\n' "$out"
[ $rc = 0 ] || fail "sfb eval exited with $rc"
read -r learned euclid < <(printf '%s\n' "$out" |
  sed -n 's/^k-NN accuracy: learned metric \([0-9.]*\)%, Euclidean \([0-9.]*\)%.*/\1 \2/p')
[ -n "${learned:-}" ] && [ -n "${euclid:-}" ] || fail "no k-NN accuracies printed"
echo "seed $seed: learned $learned%, Euclidean $euclid%, margin $margin points; run $((t1 - t0)) s"
# The baseline is a real k-NN result (not a broken evaluation that anything
# beats), and the run's own final evaluation agrees with the saved model's.
awk "BEGIN{exit !($euclid >= 75.0)}" || fail "Euclidean k-NN $euclid% < 75%: evaluation broken?"
[ "$run_acc" = "$learned" ] || fail "run reported $run_acc%, sfb eval of its model $learned%"
awk "BEGIN{exit !($learned > $euclid + $margin)}" ||
  fail "learned metric $learned% is not above Euclidean $euclid% + $margin"
echo "1 passed, 0 failed"
