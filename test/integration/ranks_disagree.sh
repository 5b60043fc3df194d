#!/usr/bin/env bash
# Ranks that disagree fail fast and say why, every wait is bounded, and
# signals are reported as signals (issue 18).
#
#  1. Start-up agreement: two workers (env rendezvous, no launcher) that
#     differ in one must-agree setting both exit 1 within 20 s, and both
#     name the field with both values (the same verdict on every rank); a
#     rank that cannot load its data is named by the other.
#  2. The runtime's own bounds, with the agreement skipped
#     (SFB_DEBUG_SKIP_AGREE=1): a peer that finished earlier ends the wait
#     for a clock it will never send, naming it; a peer's frames of another
#     shape end the job instead of being dropped while waiting.
#  3. Signals: a worker killed by SIGTERM / SIGSEGV is reported by `sfb run`
#     as "killed by signal N (SIGxxx)", not "exited with status 1" after a
#     library's backtrace; `sfb run` itself interrupted exits 128 + N.
# Usage: ranks_disagree.sh SFB
set -uo pipefail
SFB=$1
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fails=0; passes=0
last_logs=()   # shown when a check fails
check() {
  if eval "$2"; then passes=$((passes+1)); return; fi
  echo "FAIL: $1"; fails=$((fails+1))
  for f in "${last_logs[@]}"; do echo "--- $f"; grep -v ': info: ' "$f" | cut -c1-300 | head -n 5; done
}
base="--data synth:k=4,d=20,n=400,seed=1 --clocks 20"

# pair NAME "ARGS OF RANK 0" "ARGS OF RANK 1": runs both (30 s hard limit),
# sets rc0 rc1 (137: killed by the limit) and dt (seconds until both ended);
# logs in $tmp/NAME.0 and $tmp/NAME.1.
pair() {
  local name=$1 port key t0 r p=()
  port=$(python3 "$(dirname "$0")/free_port.py")
  key=$(printf '%08x%08x' $RANDOM$RANDOM $RANDOM$RANDOM)
  t0=$(date +%s.%N)
  for r in 0 1; do
    local a=$2; [ $r = 1 ] && a=$3
    # shellcheck disable=SC2086
    SFB_RANK=$r SFB_WORLD_SIZE=2 SFB_RENDEZVOUS=127.0.0.1:$port SFB_JOB_KEY=$key \
      timeout -s KILL 30 "$SFB" worker $a --eval-every 0 -q --out-dir "$tmp/o.$name.$r" \
      >"$tmp/$name.$r" 2>&1 &
    p+=($!); pids+=($!)
  done
  wait "${p[0]}"; rc0=$?
  wait "${p[1]}"; rc1=$?
  dt=$(echo "$(date +%s.%N) - $t0" | bc)
  last_logs=("$tmp/$name.0" "$tmp/$name.1")
}

# both ranks exit 1 within 20 s, each log holding the text
both_say() { # name text
  [ "$rc0" = 1 ] && [ "$rc1" = 1 ] && awk "BEGIN{exit !($dt <= 20)}" &&
    grep -qF -- "$2" "$tmp/$1.0" && grep -qF -- "$2" "$tmp/$1.1"
}

# 1. start-up agreement: one case per kind of setting
agree_case() { # name "rank 1's extra args" "expected text"
  pair "$1" "$base" "$base $2"
  check "$1: both ranks exit 1 within 20 s naming it (rc $rc0/$rc1, $dt s)" "both_say $1 '$3'"
  [ "${VERBOSE:-}" ] && tail -n 1 "$tmp/$1.0"
}
agree_case shape "--data synth:k=4,d=30,n=400,seed=1" 'features: rank 0 has "20", rank 1 has "30"'
agree_case model "--model dml" 'model: rank 0 has "mlr", rank 1 has "dml"'
agree_case batch "--batch 8" 'batch: rank 0 has "16", rank 1 has "8"'
agree_case clocks "--clocks 10" 'clocks: rank 0 has "20", rank 1 has "10"'
agree_case lr "--lr 0.5" 'lr: rank 0 has "1", rank 1 has "0.5"'
agree_case seed "--seed 7" 'seed: rank 0 has "1", rank 1 has "7"'
agree_case topology "--topology halton" 'topology: rank 0 has "full", rank 1 has "halton"'
agree_case staleness "--staleness 2" 'staleness: rank 0 has "0", rank 1 has "2"'
# the provider: compared before the transport would fail on it
pair provider "$base --provider tcp" "$base --provider shm"
check "provider: both ranks exit 1 within 20 s naming it (rc $rc0/$rc1, $dt s)" \
  "both_say provider 'provider: rank 0 has \"tcp\", rank 1 has \"shm\"'"
check "provider: no bare address error" "! grep -q fi_av_insert $tmp/provider.0 $tmp/provider.1"
# several fields at once: every one named
pair many "$base" "$base --lr 0.5 --clocks 10"
check "many: both fields named" "both_say many 'lr: rank 0 has \"1\", rank 1 has \"0.5\"; clocks: rank 0 has \"20\", rank 1 has \"10\"'"
# --epochs 1 and the same number of clocks agree (the length is compared in clocks)
pair epochs "--data synth:k=4,d=20,n=400,seed=1 --epochs 2" "--data synth:k=4,d=20,n=400,seed=1 --clocks 24"
check "epochs 2 = clocks 24 agree and train (rc $rc0/$rc1)" "[ $rc0 = 0 ] && [ $rc1 = 0 ]"

# a rank that cannot load its data: the other leaves the comparison naming why
pair noload "$base" "--data $tmp/missing.libsvm --clocks 20"
check "missing data on rank 1: both exit 1 within 20 s (rc $rc0/$rc1, $dt s)" \
  "[ $rc0 = 1 ] && [ $rc1 = 1 ] && awk 'BEGIN{exit !($dt <= 20)}'"
check "missing data on rank 1: rank 0 names rank 1's reason" \
  "grep -q 'training failed: rank 1 aborted the job: rank 1: .*missing.libsvm' $tmp/noload.0"

# 2. the runtime's bounds without the start-up comparison
export SFB_DEBUG_SKIP_AGREE=1
pair finished "$base" "--data synth:k=4,d=20,n=400,seed=1 --clocks 10"
check "finished peer: rank 0 exits 1 within 20 s (rc $rc0, $dt s)" \
  "[ $rc0 = 1 ] && awk 'BEGIN{exit !($dt <= 20)}'"
check "finished peer: rank 0 names rank 1's last clock and the one it waits for" \
  "grep -qF 'rank 1 finished at clock 9; rank 0 waits for its clock 10' $tmp/finished.0"
check "finished peer: rank 1 exits non-zero by itself (rc $rc1)" "[ $rc1 != 0 ] && [ $rc1 != 137 ]"
# on an overlay the early rank says BYE only to the peers it talked with;
# the others learn its last clock from the last-clock flag of its frames,
# relayed like the factors (8 ranks, halton: most pairs never talk)
group_early() {
  local port key t0 r a p=()
  port=$(python3 "$(dirname "$0")/free_port.py")
  key=$(printf '%08x%08x' $RANDOM$RANDOM $RANDOM$RANDOM)
  t0=$(date +%s.%N)
  for r in 0 1 2 3 4 5 6 7; do
    a="$base --topology halton"; [ $r = 5 ] && a="$a --clocks 10"
    # shellcheck disable=SC2086
    SFB_RANK=$r SFB_WORLD_SIZE=8 SFB_RENDEZVOUS=127.0.0.1:$port SFB_JOB_KEY=$key \
      timeout -s KILL 40 "$SFB" worker $a --eval-every 0 -q --out-dir "$tmp/o.early.$r" \
      >"$tmp/early.$r" 2>&1 &
    p+=($!); pids+=($!)
  done
  early_rc=()
  for r in 0 1 2 3 4 5 6 7; do wait "${p[$r]}"; early_rc+=($?); done
  dt=$(echo "$(date +%s.%N) - $t0" | bc)
  last_logs=("$tmp/early.0" "$tmp/early.1" "$tmp/early.3")
}
group_early
check "finished peer on halton: all 8 ranks exit 1 within 30 s (rc ${early_rc[*]}, $dt s)" \
  "[ \"${early_rc[*]}\" = '1 1 1 1 1 1 1 1' ] && awk 'BEGIN{exit !($dt <= 30)}'"
check "finished peer on halton: every other rank names rank 5's last clock" \
  "! for r in 0 1 2 3 4 6 7; do grep -q 'rank 5 finished at clock 9' $tmp/early.\$r || echo \$r; done | grep -q ."
for a in "--data synth:k=4,d=30,n=400,seed=1" "--model dml" "--batch 32"; do
  pair rejected "$base" "$base $a"
  check "frames of another shape ($a): both exit 1 within 20 s (rc $rc0/$rc1, $dt s)" \
    "[ $rc0 = 1 ] && [ $rc1 = 1 ] && awk 'BEGIN{exit !($dt <= 20)}'"
  check "frames of another shape ($a): both name the rejected updates" \
    "grep -q 'cannot apply the updates of rank' $tmp/rejected.0 &&
     grep -q 'cannot apply the updates of rank' $tmp/rejected.1"
done
unset SFB_DEBUG_SKIP_AGREE

# 3. signals
wait_started() { # until every metrics file has a line (training has begun)
  for _ in $(seq 600); do
    [ -s "$tmp/r/metrics.0.jsonl" ] && [ -s "$tmp/r/metrics.1.jsonl" ] && return 0
    sleep 0.05
  done
  return 1
}
# waits for pid at most 30 s (then kills it: rc 137), sets rc
bounded_wait() {
  for _ in $(seq 300); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$1" 2>/dev/null
  wait "$1"; rc=$?
}
job=(--data synth:k=4,d=20,n=4000,seed=1 --clocks 1000000 --debug-delay-ms 2 --eval-every 0 -q)
for sig in TERM SEGV; do
  rm -rf "$tmp/r"
  "$SFB" run -n 2 "${job[@]}" --out-dir "$tmp/r" >"$tmp/run.$sig" 2>&1 &
  run=$!; pids+=($run); last_logs=("$tmp/run.$sig")
  check "kill -$sig: sfb run started" wait_started
  victim=$(pgrep -P $run | sort -n | sed -n 2p)   # the second worker forked: rank 1
  kill -$sig "$victim"
  bounded_wait $run
  n=$(kill -l $sig)
  check "kill -$sig: sfb run exits 1 (rc=$rc)" "[ $rc = 1 ]"
  check "kill -$sig: sfb run reports the signal" \
    "grep -qF 'rank 1 killed by signal $n (SIG$sig)' $tmp/run.$sig"
  check "kill -$sig: no library backtrace" "! grep -q 'terminated with signal' $tmp/run.$sig"
done
for sig in TERM INT; do
  rm -rf "$tmp/r"
  "$SFB" run -n 2 "${job[@]}" --out-dir "$tmp/r" >"$tmp/stop.$sig" 2>&1 &
  run=$!; pids+=($run); last_logs=("$tmp/stop.$sig")
  check "sfb run -$sig: started" wait_started
  kill -$sig $run
  bounded_wait $run
  n=$(kill -l $sig)
  check "sfb run stopped by SIG$sig exits 128 + $n (rc=$rc)" "[ $rc = $((128 + n)) ]"
  check "sfb run stopped by SIG$sig says so" "grep -qF 'interrupted by signal $n (SIG$sig)' $tmp/stop.$sig"
done
last_logs=()
check "no worker left behind" "! pgrep -f '$tmp/' >/dev/null"
echo "$passes passed, $fails failed"
[ $fails = 0 ]
