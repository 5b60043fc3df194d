#!/usr/bin/env bash
# Stalls (src/comm/comm_stall.c): a rank that drops every SF frame it gets
# (SFB_DEBUG_DROP_SF_AT, an update lost in transit while every rank is alive
# and heart-beating) fails the job within the stall timeout, naming the
# rank whose published update never came, over full P2P and over the Halton
# overlay's relays; peers that compute longer than the timeout do not trip
# it, also under --ordered (an update held for a slow rank's is not lost);
# --stall-timeout 0 turns it off.
# Usage: stall.sh SFB
set -uo pipefail
SFB=$1
tmp=$(mktemp -d)
cleanup() { pkill -9 -f "$tmp" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
job=(--data synth:k=4,d=20,n=600,seed=1 --eval-every 0 -q)

lost() { # $1: label, $2: rank that drops, $3: the rank expected to report (regex), then sfb run options
  local label=$1 drop=$2 who=$3; shift 3
  local t0 dt rc
  t0=$(date +%s.%N)
  SFB_DEBUG_DROP_SF_AT=$drop timeout 60 "$SFB" run "${job[@]}" --clocks 1000 --stall-timeout 2 \
    --out-dir "$tmp/$label" "$@" >"$tmp/$label.log" 2>&1
  rc=$?
  dt=$(echo "$(date +%s.%N) - $t0" | bc)
  check "$label: exits 1 (rc=$rc)" "[ $rc = 1 ]"
  check "$label: within 20 s (took $dt s)" "awk 'BEGIN{exit !($dt <= 20)}'"
  check "$label: says stalled, naming the rank waiting ($who)" \
    "grep -q 'stalled: rank [0-9]* published clock [0-9]* [0-9.]* s ago; rank $who, waiting' '$tmp/$label.log'"
  check "$label: names the timeout" "grep -q -- '--stall-timeout 2 s' '$tmp/$label.log'"
  grep -m1 'stalled' "$tmp/$label.log"
}
# full P2P: only rank 1 lacks anything (the others have all it published)
lost full 1 1 -n 3
# halton: rank 3 relays nothing either, so whoever waits on its forwards may
# be the first to tell
lost halton 3 '[0-9]*' -n 6 --topology halton

# Peers computing up to 1.5 s a clock (seeded delays) while the timeout is
# 0.5 s: the job finishes, and some rank did wait past the timeout.
timeout 120 "$SFB" run "${job[@]}" -n 3 --clocks 5 --stall-timeout 0.5 --debug-delay-ms 1500 \
  --out-dir "$tmp/slow" >"$tmp/slow.log" 2>&1
rc=$?
check "slow peers: exits 0 (rc=$rc)" "[ $rc = 0 ]"
maxwait=$(python3 -c "
import json, glob
print(max(json.loads(l).get('wait_s', 0) for f in glob.glob('$tmp/slow/metrics.*.jsonl') for l in open(f)))")
check "slow peers: a wait outlasted the 0.5 s timeout (longest $maxwait s)" "awk 'BEGIN{exit !($maxwait > 0.5)}'"

# The same under --ordered, where a fast peer's update arrives whole and is
# held until the slow one's comes: held is not in transit, no stall.
timeout 120 "$SFB" run "${job[@]}" -n 3 --clocks 3 --stall-timeout 0.5 --debug-delay-ms 1500 \
  --ordered --out-dir "$tmp/slow_ordered" >"$tmp/slow_ordered.log" 2>&1
rc=$?
check "slow peers, --ordered: exits 0 (rc=$rc)" "[ $rc = 0 ]"
[ $rc = 0 ] || grep -m2 'stalled\|error' "$tmp/slow_ordered.log"

# --stall-timeout 0: no stall check; the lost update keeps the job waiting.
SFB_DEBUG_DROP_SF_AT=1 timeout 5 "$SFB" run "${job[@]}" -n 3 --clocks 1000 --stall-timeout 0 \
  --out-dir "$tmp/off" >"$tmp/off.log" 2>&1
rc=$?
check "--stall-timeout 0: still waiting after 5 s (rc=$rc)" "[ $rc = 124 ]"
check "--stall-timeout 0: no stall reported" "! grep -q stalled '$tmp/off.log'"
sleep 1
check "no worker left behind" "! pgrep -f '$tmp/off' >/dev/null"

echo "stall: $passes passed, $fails failed"
[ $fails = 0 ]
