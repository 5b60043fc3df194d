#!/usr/bin/env bash
# A worker killed mid-run (SIGKILL): every other rank stops within 10 s with
# a non-zero status naming it — detected by the workers themselves (started
# with the env rendezvous, no launcher to clean up after them) — and
# `sfb run` exits non-zero naming the killed rank. Every message says each
# thing once and names no "rank -1" (shm reports a dead peer's receive as
# EIO naming nobody, with strerror(EIO) as its detail).
# Usage: kill_worker.sh SFB
set -uo pipefail
SFB=$1
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
job=(--data synth:k=4,d=20,n=4000,seed=1 --clocks 1000000 --debug-delay-ms 2 --eval-every 0 -q)
# Unthrottled, with 784 features: frames in flight when rank 2 dies (about
# half the runs see the EIO above).
busy_job=(--data synth:k=10,d=784,n=4000,seed=1 --clocks 1000000 --eval-every 0 -q)
said_once() { # $1: log file; no text said twice in a row (": X: X"), no "rank -1"
  ! grep -qE '(: [^:;]+)\1($|[:;])' "$1" && ! grep -q 'rank -1' "$1"
}

wait_started() { # until every metrics file has a line (training has begun)
  for _ in $(seq 600); do
    local ok=1
    for r in "$@"; do [ -s "$tmp/o/metrics.$r.jsonl" ] || ok=0; done
    [ $ok = 1 ] && return 0
    sleep 0.05
  done
  return 1
}

# 1. workers detect the death themselves. Run twice: as they are, and with
# every network thread stuck for good in any send to the dead rank (what
# libfabric's shm does when a process dies holding its region's lock): the
# watchdog must give the thread up and name the dead rank all the same.
survivors_name_rank2() { # $1: label; the rest: environment for the workers
  local label=$1; shift
  local wjob=("${job[@]}")
  [ "$label" = busy ] && wjob=("${busy_job[@]}")
  rm -rf "$tmp/o"; mkdir -p "$tmp/o"
  local port key w=()
  port=$(python3 "$(dirname "$0")/free_port.py")
  key=$(printf '%08x%08x' $RANDOM$RANDOM $RANDOM$RANDOM)
  for r in 0 1 2 3; do
    env "$@" SFB_RANK=$r SFB_WORLD_SIZE=4 SFB_RENDEZVOUS=127.0.0.1:$port SFB_JOB_KEY=$key \
      "$SFB" worker "${wjob[@]}" --metrics-out "$tmp/o/metrics.%r.jsonl" \
      --model-out "$tmp/o/m.sfb" >"$tmp/log.$r" 2>&1 &
    w+=($!); pids+=($!)
  done
  check "$label: workers started" "wait_started 0 1 2 3"
  kill -9 "${w[2]}"
  local t0 dt rc
  t0=$(date +%s.%N)
  for r in 0 1 3; do
    # bounded wait: a survivor still running after 15 s has failed the test
    for _ in $(seq 150); do kill -0 "${w[$r]}" 2>/dev/null || break; sleep 0.1; done
    kill -9 "${w[$r]}" 2>/dev/null
    wait "${w[$r]}"; rc=$?
    dt=$(echo "$(date +%s.%N) - $t0" | bc)
    check "$label: rank $r exits non-zero by itself (rc=$rc)" "[ $rc != 0 ] && [ $rc != 137 ]"
    check "$label: rank $r stops within 10 s (took $dt s)" "awk 'BEGIN{exit !($dt <= 10)}'"
    check "$label: rank $r names rank 2" "grep -q 'rank 2' '$tmp/log.$r'"
    check "$label: rank $r says each thing once" "said_once '$tmp/log.$r'"
  done
  grep -h "rank 2" "$tmp"/log.[013] | head -n 3
}
survivors_name_rank2 "plain" SFB_DEBUG_STALL_SEND_TO_DEAD=0
survivors_name_rank2 "stuck in libfabric" SFB_DEBUG_STALL_SEND_TO_DEAD=1
check "stuck in libfabric: a watchdog gave a thread up" "grep -q 'is given up' '$tmp'/log.[013]"
survivors_name_rank2 busy SFB_DEBUG_STALL_SEND_TO_DEAD=0

# 2. sfb run: the launcher names the killed rank
rm -rf "$tmp/o"; mkdir -p "$tmp/o"
"$SFB" run -n 4 "${busy_job[@]}" --out-dir "$tmp/o" >"$tmp/run.log" 2>&1 &
run=$!; pids+=($run)
check "sfb run started" "wait_started 0 1 2 3"
victim=$(pgrep -P $run | sort -n | sed -n 2p)   # the second worker forked: rank 1
kill -9 "$victim"
wait $run; rc=$?
check "sfb run exits non-zero (rc=$rc)" "[ $rc != 0 ]"
check "sfb run names the killed rank" "grep -q 'rank 1 killed by signal 9' '$tmp/run.log'"
check "sfb run: every rank says each thing once" "said_once '$tmp/run.log'"
tail -n 2 "$tmp/run.log"
check "no worker left behind" "! pgrep -f 'metrics.%r|$tmp/o' >/dev/null"
echo "$passes passed, $fails failed"
[ $fails = 0 ]
