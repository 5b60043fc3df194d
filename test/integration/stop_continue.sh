#!/usr/bin/env bash
# A job stopped and continued (Ctrl-Z and fg, a debugger, Slurm's suspend,
# a paused VM) goes on: every rank's process SIGSTOPped for longer than the
# silence, stall and watchdog timeouts, then SIGCONTed, finishes with exit 0
# and the model, to the bit, of the same job run without a stop (--ordered),
# each rank saying it did not run (so the stop landed mid-job); before,
# every rank called a peer dead or silent. A single
# rank stopped as long is still a silent peer: the others fail naming it.
# Usage: stop_continue.sh SFB
set -uo pipefail
SFB=$1
tmp=$(mktemp -d)
cleanup() { pkill -9 -f "$tmp" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$tmp"; }
trap cleanup EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
# silence: 0.5 s × ranks per CPU (≥ 0.5 s); the late-check slack is 2 s: a
# 3 s stop is past both, and past the 2 s stall timeout
job=(-n 4 --data synth:k=4,d=20,n=4000,seed=1 --eval-every 0 --peer-timeout 0.5
     --stall-timeout 2 --ordered)

# $1 label, $2 which ranks to stop (all | one), then sfb run options
stop_run() {
  local label=$1 which=$2; shift 2
  timeout -k 5 60 "$SFB" run "${job[@]}" --out-dir "$tmp/$label" "$@" >"$tmp/$label.log" 2>&1 &
  local run=$! launcher="" workers=""
  for _ in $(seq 100); do # the launcher (timeout's child), its 4 workers up
    launcher=$(pgrep -P $run | head -1)
    [ -n "$launcher" ] && workers=$(pgrep -P "$launcher" | tr '\n' ' ')
    [ "$(echo $workers | wc -w)" = 4 ] && [ "$(grep -c 'up (bootstrap' "$tmp/$label.log")" = 4 ] && break
    sleep 0.1
  done
  sleep 0.5
  [ "$which" = one ] && workers=$(echo $workers | cut -d' ' -f3)
  kill -STOP $workers
  # meanwhile (the stopped job takes no CPU), the same job without a stop
  local ref=""
  if [ "$which" = all ]; then
    timeout 60 "$SFB" run "${job[@]}" "$@" --out-dir "$tmp/ref" -q >"$tmp/ref.log" 2>&1 &
    ref=$!
  fi
  sleep 3
  [ -n "$ref" ] && wait $ref
  kill -CONT $workers
  wait $run
}

stop_run all all --clocks 3000
rc=$?
check "all stopped: exits 0 (rc=$rc)" "[ $rc = 0 ]"
n=$(grep -c 'did not run for [3-9]\.[0-9] s (stopped and continued?)' "$tmp/all.log")
check "all stopped: each of the 4 ranks saw its stop ($n)" "[ $n = 4 ]"
check "all stopped: no rank called dead, silent or stalled" \
  "! grep -q 'dead or silent\|stalled\|stuck in libfabric' '$tmp/all.log'"
check "all stopped: the model of the job without a stop, to the bit" \
  "cmp -s '$tmp/all/model.sfb' '$tmp/ref/model.sfb'"
[ $rc = 0 ] || grep -m3 'error' "$tmp/all.log"

stop_run one one --clocks 100000
rc=$?
check "one stopped: exits 1 (rc=$rc)" "[ $rc = 1 ]"
check "one stopped: a peer names it dead or silent" "grep -q 'rank 2 is dead or silent' '$tmp/one.log'"
check "one stopped: rank 2 is not excused by the others" \
  "! grep -q 'rank [013] did not run' '$tmp/one.log'"
sleep 0.5
check "no worker left behind" "! pgrep -f -- '--out-dir $tmp' >/dev/null"

echo "stop_continue: $passes passed, $fails failed"
[ $fails = 0 ]
