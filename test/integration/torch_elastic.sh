#!/usr/bin/env bash
# sfb.torch's elastic training (test/python/torch_elastic.py under
# `sfb launch --elastic`) against one process on the same global minibatches
# (sfb.torch.elastic.Batches: 2 epochs of 600 samples in batches of 48, Adam,
# two Linear layers by factors and a LayerNorm densely):
#  - rank 2 SIGKILLs itself inside step 7's backward (its output layer's
#    factors already sent) and --respawn 1 restarts it: the 3 survivors go
#    on (step 7 done again by 3 ranks), the restarted process joins at a
#    later step (that step done again by 4): exit 0, 4 processes end with
#    the same parameters' CRC, the survivors saw worlds [3, 4], and the
#    parameters equal one process's within 1e-5 (relative, per tensor);
#  - what an elastic job refuses, with the reason (staleness > 0, a
#    collective before elastic.run, training outside it, join());
#  - (long) rank 0 dies before step 12's forward, no respawn: 3 ranks end
#    the job, the same checks; two deaths (rank 1 in step 5's backward,
#    rank 3 before step 15) and --respawn 2: 4 ranks again; a death in the
#    last step with --respawn 1, the restarted copy asking to join 5 s
#    later: the launcher stops it once the job ended, 3 ranks end it.
# With a restart, each step sleeps 1 s while the job is short of ranks (a
# copy's start takes seconds, a step milliseconds), so the joins happen.
# Usage: torch_elastic.sh SFB RUN_PY TORCH_ELASTIC_PY [--long]
set -uo pipefail
SFB=$1; PY=$2; JOB=$3; LONG=0
[ "${4:-}" = --long ] && LONG=1
tmp=$(mktemp -d)
trap 'pkill -9 -P $$ 2>/dev/null; rm -rf "$tmp"' EXIT
"$PY" --check || exit 77
"$PY" -c 'import torch' 2>/dev/null || { echo "skipped: no torch (install python3-torch)"; exit 77; }
cd "$tmp" || exit 1
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }

"$PY" "$JOB" ref ref.npz >ref.out 2>&1 || { cat ref.out; echo "FAIL: the one-process run"; exit 1; }

# NAME RANKS DIE RESPAWN: a run; then its checks (the final world: ENDS ranks)
elastic() {
  local name=$1 n=$2 die=$3 respawn=$4 ends=$5 worlds=$6
  local wait=$n delay=0
  [ "$ends" -lt "$n" ] && wait=0 delay=5  # a restarted copy too late to join
  local args=(launch -n "$n" --elastic)
  [ "$respawn" -gt 0 ] && args+=(--respawn "$respawn")
  TORCH_ELASTIC_DIE=$die TORCH_ELASTIC_WAIT=$wait TORCH_ELASTIC_JOINER_DELAY=$delay timeout 120 "$SFB" "${args[@]}" -- "$PY" "$JOB" elastic "$name.npz" \
    >"$name.out" 2>&1
  local rc=$?
  check "$name: exit 0 (rc=$rc)" "[ $rc = 0 ]"
  local lines; lines=$(grep -c "torch_elastic rank .* of $ends was" "$name.out")
  check "$name: $ends processes end the job ($lines)" "[ '$lines' = $ends ]"
  local crcs; crcs=$(sed -n 's/.*torch_elastic rank .* crc \([0-9a-f]*\).*/\1/p' "$name.out" | sort -u | wc -l)
  check "$name: every process the same parameters ($crcs CRCs)" "[ '$crcs' = 1 ]"
  check "$name: every process did the 26 steps" \
    "! grep 'torch_elastic rank' '$name.out' | grep -qv 'steps 26 '"
  check "$name: the survivors saw worlds $worlds" \
    "grep 'torch_elastic rank .* was [0-9]' '$name.out' | grep -q 'worlds $worlds'"
  check "$name: one process's parameters" "'$PY' '$JOB' compare ref.npz '$name.npz' >>'$name.out' 2>&1"
  [ $fails = 0 ] || tail -30 "$name.out"
}

elastic grow 4 2:7:bwd 1 4 '\[3, 4\]'
timeout 60 "$SFB" launch -n 1 --elastic -- "$PY" "$JOB" refusals >refusals.out 2>&1
check "refusals (rc=$?)" "grep -q 'torch_elastic refusals ok' refusals.out"
[ $fails = 0 ] || cat refusals.out
if [ $LONG = 1 ]; then
  elastic shrink0 4 0:12:fwd 0 3 '\[3\]'
  elastic twice 4 1:5:bwd,3:15:fwd 2 4 '\[3, 4, 3, 4\]'
  # the last step: the restarted copy cannot join before the end, and the
  # launcher stops it once the job ended
  elastic last 4 3:25:bwd 1 3 '\[3\]'
  check "last: the launcher stopped the copy that could not join" \
    "grep -q 'the job ended before rank 3.s restarted copy' last.out"
fi
echo "torch_elastic: $passes passed, $fails failed"
[ $fails = 0 ]
