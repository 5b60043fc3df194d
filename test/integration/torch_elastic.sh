#!/usr/bin/env bash
# sfb.torch's elastic training (test/python/torch_elastic.py under
# `sfb launch --elastic`) against one process on the same global minibatches
# (sfb.torch.elastic.Batches: 2 epochs of 600 samples in batches of 48, Adam,
# two Linear layers by factors, a LayerNorm densely, a BatchNorm1d in
# training mode whose running statistics are compared too):
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
#    rank 3 before step 15) and --respawn 2: 4 ranks again; a death whose
#    survivors' sends hang in libfabric as on a lock the dead process held
#    in shm (SFB_DEBUG_STALL_SEND_TO_DEAD=1): their network threads given
#    up, the job goes on with 3; a death in the
#    last step with --respawn 1, the restarted copy asking to join 5 s
#    later: the launcher stops it once the job ended, 3 ranks end it.
#  - (long) examples/torch_elastic.py, 1 epoch of Fashion-MNIST: kill -9 of
#    rank 2 from outside mid-run, restarted: the test accuracy within 0.5
#    points of the uninterrupted run's.
# With a restart, each step sleeps 1 s while the job is short of ranks (a
# copy's start takes seconds, a step milliseconds), so the joins happen.
# Usage: torch_elastic.sh SFB RUN_PY TORCH_ELASTIC_PY [--long]
set -uo pipefail
SFB=$1; PY=$2; JOB=$3; LONG=0
[ "${4:-}" = --long ] && LONG=1
tmp=$(mktemp -d)
trap 'pkill -9 -P $$ 2>/dev/null; rm -rf "$tmp"' EXIT
"$PY" --check || exit 77
"$PY" --check torch || { echo "skipped: no torch (install python3-torch)"; exit 77; }
cd "$tmp" || exit 1
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }

"$PY" "$JOB" ref ref.npz >ref.out 2>&1 || { cat ref.out; echo "FAIL: the one-process run"; exit 1; }

# NAME RANKS DIE RESPAWN: a run; then its checks (the final world: ENDS ranks)
elastic() {
  local name=$1 n=$2 die=$3 respawn=$4 ends=$5 worlds=$6 extra=${7:-SFB_TEST=1}
  local wait=$n delay=0
  [ "$ends" -lt "$n" ] && wait=0 delay=5  # a restarted copy too late to join
  local args=(launch -n "$n" --elastic)
  [ "$respawn" -gt 0 ] && args+=(--respawn "$respawn")
  env "$extra" TORCH_ELASTIC_DIE=$die TORCH_ELASTIC_WAIT=$wait TORCH_ELASTIC_JOINER_DELAY=$delay \
    timeout 120 "$SFB" "${args[@]}" -- "$PY" "$JOB" elastic "$name.npz" \
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
  # the survivors' sends to the dead rank hang inside libfabric, as on a
  # lock the killed process held in shm: their network threads are given
  # up, and the job goes on all the same (a new fabric shares nothing)
  elastic stuck 4 2:7:bwd 0 3 '\[3\]' SFB_DEBUG_STALL_SEND_TO_DEAD=1
  check "stuck: the network threads were given up" "grep -q 'is given up' stuck.out"
  # the last step: the restarted copy cannot join before the end, and the
  # launcher stops it once the job ended
  elastic last 4 3:25:bwd 1 3 '\[3\]'
  check "last: the launcher stopped the copy that could not join" \
    "grep -q 'the job ended before rank 3.s restarted copy' last.out"
  # examples/torch_elastic.py (Fashion-MNIST, 1 epoch): kill -9 of rank 2
  # from outside once the run is under way, restarted: the test accuracy
  # within 0.5 points of the uninterrupted run's (the same global batches)
  EX=$(dirname "$JOB")/../../examples/torch_elastic.py
  exargs=(--epochs 1 --hidden 256,256)
  timeout 300 "$SFB" launch -n 4 --elastic -- "$PY" "$EX" "${exargs[@]}" >ex_clean.out 2>&1
  check "example: the uninterrupted run (rc=$?)" "grep -q '^\[0\] result' ex_clean.out"
  timeout 300 "$SFB" launch -n 4 --elastic --respawn 1 -- "$PY" "$EX" "${exargs[@]}" \
    >ex_kill.out 2>&1 &
  launcher=$!
  for _ in $(seq 1200); do grep -q "step 300/" ex_kill.out && break; sleep 0.1; done
  victim=""
  for p in $(pgrep -f "torch_elastic.py --epochs"); do
    tr '\0' '\n' </proc/"$p"/environ 2>/dev/null | grep -qx 'SFB_RANK=2' && victim=$p
  done
  [ -n "$victim" ] && kill -9 "$victim"
  wait $launcher
  rc=$?
  check "example: kill -9 of rank 2 (pid ${victim:-none}), exit 0 (rc=$rc)" "[ -n '$victim' ] && [ $rc = 0 ]"
  a=$(sed -n 's/.*result test_accuracy=\([0-9.]*\).*/\1/p' ex_clean.out)
  b=$(sed -n 's/.*result test_accuracy=\([0-9.]*\).* resets=\([0-9]*\).*/\1 \2/p' ex_kill.out)
  check "example: accuracy $b (resets) against $a uninterrupted" \
    "awk -v a='$a' -v b='${b% *}' -v r='${b#* }' 'BEGIN { exit !(a != \"\" && b != \"\" && r >= 1 && b > a - 0.005 && b < a + 0.005) }'"
  [ $fails = 0 ] || tail -20 ex_kill.out
fi
echo "torch_elastic: $passes passed, $fails failed"
[ $fails = 0 ]
