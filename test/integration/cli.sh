#!/usr/bin/env bash
# End-to-end checks of the sfb command: usage errors, a short training run on
# synthetic data, the outputs it writes, and sfb eval on good and bad files.
# Usage: cli.sh SFB_BINARY
set -uo pipefail
SFB=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0; passes=0

check() { # name, condition
  if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1 ($2)"; fails=$((fails+1)); fi
}
run() { # captures exit code and combined output of a command
  out=$("$@" 2>&1); rc=$?
}

run "$SFB" --version
check version '[ $rc = 0 ] && [[ "$out" == "sfb "[0-9]* ]]'
run "$SFB" run --help
check run-help '[ $rc = 0 ] && [[ "$out" == *"--batch"* ]] && [[ "$out" == *"--staleness"* ]]'
for c in worker eval; do
  run "$SFB" $c --help
  check "$c-help" '[ $rc = 0 ] && [[ "$out" == *usage* ]]'
done
run "$SFB" frobnicate
check unknown-command '[ $rc = 2 ] && [[ "$out" == *"unknown command"* ]]'
run "$SFB" run --bogus
check unknown-option '[ $rc = 2 ] && [[ "$out" == *"--bogus"* ]]'
run "$SFB" run --epochs 2 --clocks 5
check contradictory '[ $rc = 2 ] && [[ "$out" == *"contradict"* ]]'
run "$SFB" run --batch 0
check batch-zero '[ $rc = 2 ] && [[ "$out" == *"--batch"* ]]'
run "$SFB" run --lr abc
check lr-nan '[ $rc = 2 ] && [[ "$out" == *"--lr"* ]]'
run "$SFB" run --model nope
check bad-model '[ $rc = 2 ] && [[ "$out" == *"unknown model"* ]]'
run "$SFB" run --degree 3
check degree-needs-overlay '[ $rc = 2 ] && [[ "$out" == *"--topology"* ]]'
run "$SFB" worker -n 2
check worker-no-n '[ $rc = 2 ]'
run "$SFB" run --batch
check missing-value '[ $rc = 2 ] && [[ "$out" == *"needs a value"* ]]'

# A malformed libsvm file: the error names file:line.
printf '1 1:0.5 2:1\n0 3:1 2:0.5\n' > "$tmp/bad.libsvm"
run "$SFB" run -n 1 --data "$tmp/bad.libsvm" --out-dir "$tmp/o1" -q
check bad-data '[ $rc = 1 ] && [[ "$out" == *"bad.libsvm:2:"* ]]'

# Train on synthetic data; outputs land where sfb says.
data="synth:k=4,d=30,n=4000,density=1,seed=5"
run "$SFB" run -n 1 --data "$data" --epochs 3 --batch 16 --lr 0.5 --out-dir "$tmp/out" -q
check train '[ $rc = 0 ]'
check model-printed '[[ "$out" == *"model:   $tmp/out/model.sfb"* ]]'
check metrics-printed '[[ "$out" == *"metrics: $tmp/out/metrics.0.jsonl"* ]]'
check model-file '[ -s "$tmp/out/model.sfb" ]'
acc=$(sed -n 's/^\(\[0\] \)\{0,1\}test accuracy \([0-9.]*\)%.*/\2/p' <<<"$out")
check accuracy '[ -n "$acc" ] && awk "BEGIN{exit !($acc >= 80)}"'
# one metrics line per clock: 3 epochs of 4000/16 clocks, plus eval and summary events
clocks=$(grep -c '"clock":' "$tmp/out/metrics.0.jsonl" | tr -d ' ')
check metrics-lines '[ "$(grep -c "\"compute_s\"" "$tmp/out/metrics.0.jsonl")" = 750 ]'
check metrics-evals '[ "$(grep -c "\"event\":\"eval\"" "$tmp/out/metrics.0.jsonl")" = 3 ]'

run "$SFB" eval --model-file "$tmp/out/model.sfb" --data "$data"
check eval '[ $rc = 0 ] && [[ "$out" == *"accuracy $acc%"* ]]'

# A corrupted model file is refused with a clear error.
cp "$tmp/out/model.sfb" "$tmp/bad.sfb"
printf '\x55' | dd of="$tmp/bad.sfb" bs=1 seek=100 conv=notrunc status=none
run "$SFB" eval --model-file "$tmp/bad.sfb" --data "$data"
check eval-corrupt '[ $rc = 1 ] && [[ "$out" == *checksum* ]]'
head -c 50 "$tmp/out/model.sfb" > "$tmp/short.sfb"
run "$SFB" eval --model-file "$tmp/short.sfb" --data "$data"
check eval-truncated '[ $rc = 1 ] && [[ "$out" == *truncated* ]]'
run "$SFB" eval --model-file "$tmp/out/model.sfb"
check eval-needs-data '[ $rc = 2 ]'

# The other models train from the command line and evaluate their own way.
run "$SFB" run -n 1 --model sc --data synth:k=3,d=16,n=800,seed=2 --dict-size 8 --clocks 50 \
  --out-dir "$tmp/sc" -q
check sc-train '[ $rc = 0 ] && [[ "$out" == *"test loss"* ]]'
run "$SFB" eval --model-file "$tmp/sc/model.sfb" --data synth:k=3,d=16,n=800,seed=2
check sc-eval '[ $rc = 0 ] && [[ "$out" == *"reconstruction error"* ]]'
run "$SFB" run -n 1 --model dml --data synth:k=3,d=16,n=800,seed=2 --rank 4 --clocks 50 \
  --out-dir "$tmp/dml" -q
check dml-train '[ $rc = 0 ] && [[ "$out" == *"test accuracy"* ]]'
run "$SFB" eval --model-file "$tmp/dml/model.sfb" --data synth:k=3,d=16,n=800,seed=2
check dml-eval '[ $rc = 0 ] && [[ "$out" == *"k-NN accuracy: learned metric"* ]]'
run "$SFB" run --rank 0
check rank-zero '[ $rc = 2 ] && [[ "$out" == *"--rank"* ]]'

echo "$passes passed, $fails failed"
[ $fails = 0 ]
