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
# `sfb --help` lists every subcommand (one table lists and dispatches them):
# each listed name runs its own --help, and the known ones are all there.
run "$SFB" --help
listed=$(awk '/^commands:/ { on = 1; next } on && /^$/ { exit } on && /^  [a-z]/ { print $1 }' <<<"$out")
check help-lists-commands '[ $rc = 0 ] && [ "$(echo $listed)" = "run worker launch eval topo timeline" ]'
for c in $listed; do
  run "$SFB" $c --help
  check "$c-help" '[ $rc = 0 ] && [[ "$out" == *usage* ]]'
done
run "$SFB" frobnicate
check unknown-command '[ $rc = 2 ] && [[ "$out" == *"unknown command \"frobnicate\""* ]] && [[ "$out" != *"did you mean"* ]]'
run "$SFB" lanch -n 2
check typo-command '[ $rc = 2 ] && [[ "$out" == *"unknown command \"lanch\"; did you mean launch?"* ]]'
run "$SFB" --versio
check typo-version '[ $rc = 2 ] && [[ "$out" == *"did you mean --version?"* ]]'
# `sfb help CMD` is `sfb CMD --help`
run "$SFB" help eval
check help-command '[ $rc = 0 ] && [[ "$out" == "usage: sfb eval"* ]]'
run "$SFB" help frobnicate
check help-unknown '[ $rc = 2 ] && [[ "$out" == *"unknown command \"frobnicate\""* ]]'
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
check worker-no-n '[ $rc = 2 ] && [[ "$out" == *"-n is an option of \`sfb run\`"* ]]'
run "$SFB" worker --help
check worker-help-no-n '[ $rc = 0 ] && [[ "$out" != *"--nprocs"* ]] && [[ "$out" == *"--staleness"* ]]'
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
# one worker opens no transport: a provider asked for is said to go unused
run "$SFB" run -n 1 --data "$data" --clocks 3 --provider verbs --out-dir "$tmp/o2" -q
check one-worker-provider '[ $rc = 0 ] && [[ "$out" == *"one worker: no transport is opened, so provider verbs is not used"* ]]'

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
run "$SFB" run -n 1 --model dml --data synth:k=3,d=16,n=800,seed=2 --proj-dim 4 --clocks 50 \
  --out-dir "$tmp/dml" -q
check dml-train '[ $rc = 0 ] && [[ "$out" == *"test accuracy"* ]]'
run "$SFB" eval --model-file "$tmp/dml/model.sfb" --data synth:k=3,d=16,n=800,seed=2
check dml-eval '[ $rc = 0 ] && [[ "$out" == *"k-NN accuracy: learned metric"* ]]'
run "$SFB" run --proj-dim 0
check proj-dim-zero '[ $rc = 2 ] && [[ "$out" == *"--proj-dim"* ]]'

# mlp (issue 16): a two-hidden-layer network trains, its model file keeps
# the hidden sizes, so sfb eval re-creates the network and prints the
# accuracy the run printed; --hidden's bad lists are usage errors naming the
# option and the element.
run "$SFB" run -n 1 --model mlp --hidden 16,8 --data synth:k=3,d=16,n=800,seed=2 --clocks 50 \
  --out-dir "$tmp/mlp" -q
mlp_acc=$(printf '%s\n' "$out" | sed -n 's/.*test accuracy \([0-9.]*%\).*/\1/p')
check mlp-train '[ $rc = 0 ] && [ -n "$mlp_acc" ]'
run "$SFB" eval --model-file "$tmp/mlp/model.sfb" --data synth:k=3,d=16,n=800,seed=2
check mlp-eval '[ $rc = 0 ] && [[ "$out" == *"(mlp, 16 features, 3 classes, clock 50)"* ]] && [[ "$out" == *"accuracy $mlp_acc"* ]]'
for bad in '0|value 1 "0" is not an integer in 1..65536' \
           '|"": value 1 "" is not an integer' \
           '1024,,5|"1024,,5": value 2 "" is not an integer' \
           '1,2,3,4|"1,2,3,4" has more than 3 values' \
           '64,abc|value 2 "abc" is not an integer'; do
  run "$SFB" run --model mlp --hidden "${bad%%|*}"
  check "hidden-${bad%%|*}" '[ $rc = 2 ] && [[ "$out" == *"sfb run: --hidden: "* ]] && [[ "$out" == *"${bad#*|}"* ]]'
done

# Long options match their exact names only: a misspelling or an
# abbreviation is a usage error that names the closest option (issue 13).
run "$SFB" run --stalenes 2 --clocks 1
check abbrev-run '[ $rc = 2 ] && [[ "$out" == *"unknown option \"--stalenes\"; did you mean --staleness?"* ]]'
run "$SFB" worker --stal 2
check abbrev-worker '[ $rc = 2 ] && [[ "$out" == *"did you mean --staleness?"* ]]'
run "$SFB" run --out-d "$tmp/never"
check abbrev-out-dir '[ $rc = 2 ] && [[ "$out" == *"did you mean --out-dir?"* ]] && [ ! -e "$tmp/never" ]'
run "$SFB" eval --model "$tmp/x.sfb" --data synth
check abbrev-eval '[ $rc = 2 ] && [[ "$out" == *"did you mean --model-file?"* ]]'
run "$SFB" topo --node 4
check abbrev-topo '[ $rc = 2 ] && [[ "$out" == *"did you mean --nodes?"* ]]'
run "$SFB" topo --nodes 4 --jsn
check typo-topo '[ $rc = 2 ] && [[ "$out" == *"did you mean --json?"* ]]'
run "$SFB" run --quiet=1
check flag-with-value '[ $rc = 2 ] && [[ "$out" == *"--quiet takes no value"* ]]'
run "$SFB" run -- --clocks 1
check after-dashdash '[ $rc = 2 ] && [[ "$out" == *"unexpected argument \"--clocks\""* ]]'

# Settings that contradict each other are refused when parsed, once, with
# exit 2, before any worker starts (no "[r]" lines).
sd="synth:k=3,d=8,n=400,seed=1"
run timeout 60 "$SFB" run -n 8 --topology halton --flush clock --staleness 0 --data "$sd" --clocks 5 --out-dir "$tmp/never"
check flush-clock-diameter '[ $rc = 2 ] && [[ "$out" == *"--staleness >= diameter - 1 = 1"* ]] && [ "$(grep -c diameter <<<"$out")" = 1 ] && [[ "$out" != *"[0]"* ]] && [ ! -e "$tmp/never" ]'
run timeout 60 "$SFB" run -n 8 --topology halton --flush clock --staleness 1 --data "$sd" --clocks 4 --out-dir "$tmp/fc" -q
check flush-clock-enough '[ $rc = 0 ]'
run "$SFB" run -n 2 --topology halton --flush clock --staleness -1 --clocks 1
check flush-clock-async '[ $rc = 2 ] && [[ "$out" == *"bounded staleness"* ]]'
run "$SFB" worker --topology halton --flush clock --staleness 49 --clocks 1
check flush-clock-worker '[ $rc = 2 ] && [[ "$out" == *"bounded staleness"* ]]'
run "$SFB" run -n 2 --sync fms --topology halton --clocks 1
check fms-overlay '[ $rc = 2 ] && [[ "$out" == *"applies to --sync sfb"* ]]'
run "$SFB" run --checkpoint-every 5 --topology halton --flush clock --staleness 2 --clocks 10
check checkpoint-flush-clock '[ $rc = 2 ] && [[ "$out" == *"need --flush eager"* ]]'
run "$SFB" run -n 2 --debug-slow-rank 2 --clocks 1
check slow-rank-range '[ $rc = 2 ] && [[ "$out" == *"--debug-slow-rank 2"* ]]'

# One option table per subcommand (issue 15): a bad value names the option
# and the value, with what would do; the names of models, engines and
# topologies, and each model's own options, come from their registries.
run "$SFB" run --sync nope
check sync-bad '[ $rc = 2 ] && [[ "$out" == *"--sync: \"nope\" is not sfb, fms, auto, or one engine per matrix (sfb,fms)"* ]]'
run "$SFB" run --topology ring
check topology-bad '[ $rc = 2 ] && [[ "$out" == *"--topology: \"ring\" is not full, halton or halton-classic"* ]]'
run "$SFB" worker --index-base 2
check enum-bad '[ $rc = 2 ] && [[ "$out" == *"--index-base: \"2\" is not auto, 0 or 1"* ]]'
run "$SFB" run --lr-decay 1.5
check range-bad '[ $rc = 2 ] && [[ "$out" == *"--lr-decay: \"1.5\" is not a number in (0, 1]"* ]]'
run "$SFB" run --knn-k 101
check model-option-range '[ $rc = 2 ] && [[ "$out" == *"--knn-k: \"101\" is not an integer in 1..100"* ]]'
run "$SFB" run --dict-size=
check model-option-empty '[ $rc = 2 ] && [[ "$out" == *"--dict-size: \"\" is not an integer in 1..1048576"* ]]'
run "$SFB" run --help
check help-from-registries '[ $rc = 0 ] && [[ "$out" == *"--proj-dim K           dml: projection dimension (default 64)"* ]] && [[ "$out" == *"--dict-size K          sc: dictionary atoms (default 128)"* ]] && [[ "$out" == *"fms: full matrices"* ]] && [[ "$out" == *"(default mlr 0, dml 30, sc 0.1, mlp 0)"* ]] && [[ "$out" == *"--topology NAME        full, halton, halton-classic (default full)"* ]]'
run "$SFB" eval --split both --model-file x --data y
check eval-split-bad '[ $rc = 2 ] && [[ "$out" == *"--split: \"both\" is not test or train"* ]]'
run "$SFB" eval --patches 0 --model-file x --data y
check eval-patches-bad '[ $rc = 2 ] && [[ "$out" == *"--patches: \"0\" is not a positive integer"* ]]'
run "$SFB" topo --nodes 4 --degree 0
check topo-degree-bad '[ $rc = 2 ] && [[ "$out" == *"sfb topo: --degree: \"0\" is not an integer in 1..16777216"* ]]'
run "$SFB" topo --nodes 4 --topology ring
check topo-topology-bad '[ $rc = 2 ] && [[ "$out" == *"--topology: unknown '"'ring'"' (full, halton, halton-classic)"* ]]'
run "$SFB" topo --help
check topo-help '[ $rc = 0 ] && [[ "$out" == *"  --link-gbps G          egress bandwidth"* ]] && [[ "$out" == *"Model: each node"* ]]'
# Managed communication (issue 17): a budget is a rate with its unit,
# positive; one too small for a clock's frame within the peer timeout is a
# usage error the workers find (exit 2 from sfb run too); --priority names
# its policies.
run "$SFB" run --bandwidth 0
check bandwidth-zero '[ $rc = 2 ] && [[ "$out" == *"--bandwidth: \"0\" is not a positive rate"* ]]'
run "$SFB" run --bandwidth 5furlongs
check bandwidth-unit '[ $rc = 2 ] && [[ "$out" == *"--bandwidth: \"5furlongs\" is not a rate such as 200mbit, 1gbit or 25MB/s"* ]]'
run "$SFB" run --bandwidth 200mbps
check bandwidth-ambiguous '[ $rc = 2 ] && [[ "$out" == *"write 200mbit or 25MB/s"* ]]'
run "$SFB" run --priority largest
check priority-bad '[ $rc = 2 ] && [[ "$out" == *"--priority: \"largest\" is not fifo, magnitude or relative"* ]]'
run timeout 60 "$SFB" run -n 2 --bandwidth 100bit --data "$sd" --clocks 2 --out-dir "$tmp/bw" -q
check bandwidth-below-frame '[ $rc = 2 ] && [[ "$out" == *"one clock'"'"'s factors to one peer"* ]] && [[ "$out" == *"longer than the peer timeout"* ]]'
run timeout 60 "$SFB" run -n 2 --bandwidth 2mbit --priority magnitude --data "$sd" --clocks 4 --out-dir "$tmp/bwok" -q
check bandwidth-ok '[ $rc = 0 ] && [[ "$out" == *"bandwidth budget 2 Mbit/s per worker"* ]]'

# The workers `sfb run` forks get its options as the parser read them, so
# -n inside a cluster of short options does not reach them (it did: "sfb
# worker: unknown option -n").
run timeout 60 "$SFB" run -qn2 --data "$sd" --clocks 2 --out-dir "$tmp/cluster"
check cluster-n '[ $rc = 0 ] && [[ "$out" == *"with 2 workers"* ]] && [ -s "$tmp/cluster/metrics.1.jsonl" ]'
run timeout 60 "$SFB" run --nprocs=2 --staleness -1 --lr=0.5 -q --data "$sd" --clocks 2 --out-dir "$tmp/canon"
check canonical-argv '[ $rc = 0 ] && [[ "$out" == *"with 2 workers"* ]]'

# A worker outside any launcher says once that it runs alone.
run env -u SFB_RANK -u SFB_WORLD_SIZE timeout 60 "$SFB" worker --data "$sd" --clocks 2 --out-dir "$tmp/alone" -q
check worker-alone '[ $rc = 0 ] && [ "$(grep -c "running as a single worker" <<<"$out")" = 1 ]'
run timeout 60 "$SFB" run -n 1 --data "$sd" --clocks 2 --out-dir "$tmp/alone1" -q
check run-not-alone '[ $rc = 0 ] && [[ "$out" != *"single worker"* ]]'

# A provider libfabric does not have: said in words, with those it has.
run timeout 60 "$SFB" run -n 2 --provider nosuchprov --data "$sd" --clocks 2 --out-dir "$tmp/prov" -q
check provider-missing '[ $rc = 1 ] && [[ "$out" == *"provider \"nosuchprov\" is not available on this host"* ]] && [[ "$out" == *"shm"* ]] && [[ "$out" != *"No data available"* ]]'

# sfb eval names the file it evaluated (a libsvm file has no splits).
awk 'BEGIN{srand(3); for(i=0;i<300;i++){c=i%3; printf "%d %d:1 %d:%.3f\n", c, c+1, 4, rand()}}' > "$tmp/ev.svm"
run timeout 60 "$SFB" run -n 1 --data "$tmp/ev.svm" --clocks 20 --out-dir "$tmp/ev" -q
check eval-file-train '[ $rc = 0 ]'
run "$SFB" eval --model-file "$tmp/ev/model.sfb" --data "$tmp/ev.svm"
check eval-file-label '[ $rc = 0 ] && [[ "$out" == *"$tmp/ev.svm: 300 samples"* ]] && [[ "$out" != *"train split"* ]]'
run "$SFB" eval --model-file "$tmp/ev/model.sfb" --data "$tmp/ev.svm" --test-data "$tmp/ev.svm"
check eval-test-file-label '[ $rc = 0 ] && [[ "$out" == *"$tmp/ev.svm: 300 samples"* ]]'
run "$SFB" eval --model-file "$tmp/out/model.sfb" --data "$data"
check eval-split-label '[ $rc = 0 ] && [[ "$out" == *"test split of $data: "* ]]'

# Output paths (issue 18): checked before the first clock, exit 2 naming
# the option, nothing written.
run "$SFB" run -n 2 --data "$sd" --clocks 2 --metrics-out "$tmp/m.jsonl" --out-dir "$tmp/never"
check metrics-no-r '[ $rc = 2 ] && [[ "$out" == *"--metrics-out"* ]] && [[ "$out" == *"%r"* ]] && [ ! -e "$tmp/m.jsonl" ]'
run env SFB_RANK=0 SFB_WORLD_SIZE=2 SFB_RENDEZVOUS=127.0.0.1:1 timeout 20 "$SFB" worker --data "$sd" --clocks 2 --metrics-out "$tmp/m.jsonl"
check metrics-no-r-worker '[ $rc = 2 ] && [[ "$out" == *"all 2 workers"* ]]'
long="$tmp/$(printf 'd/%.0s' $(seq 2045))"
run "$SFB" run -n 2 --data "$sd" --clocks 2 --out-dir "$long"
check long-out-dir '[ $rc = 2 ] && [[ "$out" == *"--out-dir: the "*" path would be "*" bytes long"* ]] && [ ! -e "$tmp/d" ]'
run "$SFB" run -n 1 --data "$sd" --clocks 2 --metrics-out "$long/m.%r"
check long-metrics-out '[ $rc = 2 ] && [[ "$out" == *"--metrics-out: the metrics path"* ]]'
run timeout 60 "$SFB" run -n 2 --data "$sd" --clocks 2 --model-out "$tmp/nodir/model.sfb" --out-dir "$tmp/o-nodir"
check model-out-no-dir '[ $rc = 2 ] && [[ "$out" == *"--model-out: the directory $tmp/nodir does not exist"* ]] && [[ "$out" != *trained* ]] && [ ! -e "$tmp/o-nodir" ]'
run "$SFB" run -n 1 --data "$sd" --clocks 2 --metrics-out "$tmp/nodir/m.%r.jsonl" --out-dir "$tmp/o-nodir"
check metrics-out-no-dir '[ $rc = 2 ] && [[ "$out" == *"--metrics-out: the directory $tmp/nodir does not exist"* ]]'
# ...but a --model-out inside the --out-dir that sfb creates is fine.
run timeout 60 "$SFB" run -n 1 --data "$sd" --clocks 2 --out-dir "$tmp/fresh" --model-out "$tmp/fresh/m.sfb" -q
check model-out-in-out-dir '[ $rc = 0 ] && [ -s "$tmp/fresh/m.sfb" ] && [ -s "$tmp/fresh/metrics.0.jsonl" ]'
touch "$tmp/afile"
run "$SFB" run -n 1 --data "$sd" --clocks 4 --checkpoint-every 2 --checkpoint-dir "$tmp/afile/ck" --out-dir "$tmp/o-nodir"
check checkpoint-dir-under-file '[ $rc = 2 ] && [[ "$out" == *"--checkpoint-dir: $tmp/afile is not a directory"* ]]'
run "$SFB" run -n 1 --data "$sd" --clocks 2 --out-dir "$tmp/afile"
check out-dir-is-file '[ $rc = 2 ] && [[ "$out" == *"--out-dir: $tmp/afile is not a directory"* ]]'
mkdir -p "$tmp/ro"; chmod 500 "$tmp/ro"
if [ ! -w "$tmp/ro" ]; then  # root may write anywhere
  run "$SFB" run -n 1 --data "$sd" --clocks 2 --model-out "$tmp/ro/m.sfb" --out-dir "$tmp/o-nodir"
  check model-out-read-only '[ $rc = 2 ] && [[ "$out" == *"--model-out: cannot write in $tmp/ro"* ]]'
fi
chmod 700 "$tmp/ro"

# Under PMIx the world is known only once the worker has joined: the
# library refuses a shared metrics file there (every rank, before training).
if command -v mpirun >/dev/null; then
  mx=(); [ "$(id -u)" = 0 ] && mx+=(--allow-run-as-root)
  run timeout 90 mpirun -n 2 --oversubscribe "${mx[@]}" "$SFB" worker --data "$sd" --clocks 2 \
    --metrics-out "$tmp/shared.jsonl" --model-out "$tmp/pmix-m.sfb" -q
  check pmix-metrics-no-r '[ $rc != 0 ] && [ $rc != 124 ] && [[ "$out" == *"\"$tmp/shared.jsonl\" has no %r, so all 2 workers"* ]] && [ ! -e "$tmp/pmix-m.sfb" ]'
fi

# A FIFO as model file, data or metrics file is refused at once, not
# waited on forever (timeout's 124 would mean it blocked).
mkfifo "$tmp/fifo.sfb" "$tmp/fifo.svm" "$tmp/fifo.jsonl"
run timeout 20 "$SFB" eval --model-file "$tmp/fifo.sfb" --data "$sd"
check fifo-model '[ $rc = 1 ] && [[ "$out" == *"$tmp/fifo.sfb: not a regular file but a FIFO"* ]]'
run timeout 30 "$SFB" run -n 1 --data "$tmp/fifo.svm" --clocks 2 --out-dir "$tmp/o-fifo" -q
check fifo-data '[ $rc = 1 ] && [[ "$out" == *"$tmp/fifo.svm: not a regular file but a FIFO"* ]]'
run timeout 30 "$SFB" run -n 1 --data "$sd" --clocks 2 --metrics-out "$tmp/fifo.jsonl" -q
check fifo-metrics '[ $rc = 2 ] && [[ "$out" == *"--metrics-out: $tmp/fifo.jsonl is a FIFO"* ]]'

# libfabric loads where a transport opens: one worker opens none, so the
# launcher preloads it (for its forked workers to inherit) only for two or more
small=(--model mlr --data synth:k=4,d=20,n=400,seed=3 --clocks 3 -v)
run "$SFB" run -n 1 "${small[@]}" --out-dir "$tmp/lf1"
check one-worker-no-libfabric '[ $rc = 0 ] && [[ "$out" != *"libfabric initialised"* ]]'
run "$SFB" run -n 2 "${small[@]}" --out-dir "$tmp/lf2"
check two-workers-preload '[ $rc = 0 ] && [[ "$out" == *"libfabric initialised"* ]]'

echo "$passes passed, $fails failed"
[ $fails = 0 ]
