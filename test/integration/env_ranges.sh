#!/usr/bin/env bash
# Integers from the environment are read into their ranges: SFB_RANK=-1 of
# `sfb worker` (which read as an unsigned number named output files for four
# billion ranks, spinning at 100 % CPU), a rank beyond the world, a world of
# 0 or a non-number are refused at once, exit 2, naming the variable and the
# range; the same for the debug variables the workers read. On main these
# spun or ran on: every command has a fixed time bound here.
# Usage: env_ranges.sh SFB
set -uo pipefail
SFB=$1
tmp=$(mktemp -d)
trap 'pkill -9 -f "$tmp/" 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
data=synth:k=4,d=20,n=400,seed=1
# a port nothing listens on: a worker that got as far as the rendezvous
# would wait there, not exit 2
port=$(python3 "$(dirname "$0")/free_port.py" 2>/dev/null || echo 29611)

worker() { # RANK WORLD: runs `sfb worker` with that environment, 10 s at most
  env SFB_RANK="$1" SFB_WORLD_SIZE="$2" SFB_RENDEZVOUS=127.0.0.1:$port SFB_JOB_KEY=0x1234 \
    timeout -s KILL 10 "$SFB" worker --data $data --clocks 2 -q --out-dir "$tmp/out" \
    >"$tmp/w.out" 2>&1
}

for bad in -1 2 4294967295 18446744073709551616 x "" " 1" +1 1x; do
  worker "$bad" 2; rc=$?
  check "SFB_RANK='$bad': exit 2 (rc=$rc)" "[ $rc = 2 ]"
  check "SFB_RANK='$bad': named with its range" \
    "grep -qF 'SFB_RANK=\"$bad\": expected an integer in 0..1 (SFB_WORLD_SIZE is 2)' '$tmp/w.out'"
  [ $rc = 2 ] || cat "$tmp/w.out"
done
for bad in 0 -2 x "" 1048577; do
  worker 0 "$bad"; rc=$?
  check "SFB_WORLD_SIZE='$bad': exit 2 (rc=$rc)" "[ $rc = 2 ]"
  check "SFB_WORLD_SIZE='$bad': named with its range" \
    "grep -qF 'SFB_WORLD_SIZE=\"$bad\": expected an integer in 1..1048576' '$tmp/w.out'"
done
check "no output directory made by a refused worker" "[ ! -e '$tmp/out' ]"

# the largest rank of a world is a rank (the range is not off by one):
# it gets as far as the rendezvous, where rank 0 never comes
env SFB_RANK=1 SFB_WORLD_SIZE=2 SFB_RENDEZVOUS=127.0.0.1:$port SFB_JOB_KEY=0x1234 \
  timeout -s KILL 3 "$SFB" worker --data $data --clocks 2 -q --out-dir "$tmp/ok" >"$tmp/w.out" 2>&1
rc=$?
check "SFB_RANK=1 of 2 accepted (still waiting after 3 s: rc=$rc)" "[ $rc = 137 ]"

# debug variables read by the workers: a value outside the world is a
# usage error of the job (exit 2), not silently "no rank"
for bad in -1 2 x; do
  timeout -s KILL 60 env SFB_DEBUG_DROP_SF_AT="$bad" "$SFB" run -n 2 --data $data --clocks 2 -q \
    --out-dir "$tmp/d" >"$tmp/d.out" 2>&1; rc=$?
  check "SFB_DEBUG_DROP_SF_AT='$bad': exit 2 (rc=$rc)" "[ $rc = 2 ]"
  check "SFB_DEBUG_DROP_SF_AT='$bad': named with its range" \
    "grep -qF \"SFB_DEBUG_DROP_SF_AT='$bad': expected an integer in 0..1\" '$tmp/d.out'"
  [ $rc = 2 ] || cat "$tmp/d.out"
done
timeout -s KILL 60 env SFB_DEBUG_SAMPLE_AS=-1 "$SFB" run -n 1 --data $data --clocks 2 -q \
  --out-dir "$tmp/s" >"$tmp/s.out" 2>&1; rc=$?
check "SFB_DEBUG_SAMPLE_AS=-1: exit 2 (rc=$rc)" "[ $rc = 2 ]"
check "SFB_DEBUG_SAMPLE_AS=-1: named with its range" \
  "grep -qF \"SFB_DEBUG_SAMPLE_AS='-1': expected an integer in 1..4294967295\" '$tmp/s.out'"
# the rendezvous's own variables, read by every job-API rank
timeout -s KILL 20 env SFB_RENDEZVOUS_MAX_PENDING=-5 "$SFB" run -n 2 --data $data --clocks 2 -q \
  --out-dir "$tmp/m" >"$tmp/m.out" 2>&1; rc=$?
check "SFB_RENDEZVOUS_MAX_PENDING=-5: exit 2 (rc=$rc)" "[ $rc = 2 ]"
check "SFB_RENDEZVOUS_MAX_PENDING=-5: named with its range" \
  "grep -qF \"SFB_RENDEZVOUS_MAX_PENDING='-5': expected an integer in 1..65536\" '$tmp/m.out'"

echo "$passes passed, $fails failed"
[ $fails = 0 ]
