#!/usr/bin/env bash
# Replica health of the built-in trainer (`sfb run -n P`, Fashion-MNIST MLR,
# 300 clocks):
#  - --ordered, sfb and fms: every rank's replica (--model-out with %r) holds
#    the same bytes at the end (without it the own update applies at publish
#    and the peers' as they come: the replicas part in their last bits), and
#    rank 0 says "replicas: identical (6 checks)" with --check-every 50;
#  - SFB_DEBUG_FLIP=1:100:0:1234:30 flips one bit of rank 1's replica at
#    clock 100: the check of clock 100 names rank 1, matrix 0 and row 1,
#    repairs it from rank 0, and every final replica equals the clean run's,
#    byte for byte;
#  - the same flip with 2 ranks: no majority, every rank fails naming both;
#  - without --ordered (BSP) and at staleness 2: the end-of-run check
#    measures the drift (the same updates added in another order), below
#    1e-4; --ordered with staleness 2 is refused (exit 2).
# Usage: replicas.sh SFB
set -uo pipefail
SFB=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
run() { # NAME ARGS...: sfb run into $tmp/NAME (output NAME.out, models NAME/m.R.sfb)
  local name=$1; shift
  mkdir -p "$name"
  timeout 120 "$SFB" run --clocks 300 --out-dir "$name" --model-out "$name/m.%r.sfb" "$@" \
    >"$name.out" 2>&1
}
same() { # DIR_A DIR_B N: every replica of B equals A's rank 0 replica
  local r; for ((r = 0; r < $3; r++)); do cmp -s "$1/m.0.sfb" "$2/m.$r.sfb" || return 1; done
}

for sync in sfb fms; do
  run "clean_$sync" -n 4 --sync "$sync" --ordered --check-every 50; rc=$?
  check "$sync: exit 0 ($rc)" "[ $rc = 0 ]"
  check "$sync: the 4 replicas hold the same bytes" "same clean_$sync clean_$sync 4"
  check "$sync: rank 0 says replicas: identical (6 checks)" \
    "grep -q '^\[0\] .*replicas: identical (6 checks)' clean_$sync.out"
done
grep -h 'replicas:' clean_sfb.out

SFB_DEBUG_FLIP=1:100:0:1234:30 run flip -n 4 --ordered --check-every 50; rc=$?
grep -h 'replica\|FLIP' flip.out
check "flip: exit 0 ($rc)" "[ $rc = 0 ]"
check "flip: rank 1 names matrix 0, 1 row from row 1, repaired from rank 0" \
  "grep -q '^\[1\] .*clock 100: matrix 0 (10x785) of this rank differed from the majority.s in 1 row from row 1: repaired from rank 0' flip.out"
check "flip: rank 0 names rank 1" \
  "grep -q '^\[0\] .*clock 100: matrix 0 differs on rank 1 from the 3 others' flip.out"
check "flip: replicas identical after 1 repair" \
  "grep -q 'replicas: identical, after 1 repair (6 checks)' flip.out"
check "flip: every final replica equals the clean run's, byte for byte" "same clean_sfb flip 4"
check "flip: rank 1's metrics hold the repair" \
  "grep -q '\"event\":\"replica_repair\",\"rank\":1,\"clock\":100,\"matrix\":0,\"first_row\":1,\"rows\":1,\"from\":0' flip/metrics.1.jsonl"

SFB_DEBUG_FLIP=1:100 run split -n 2 --ordered --check-every 50; rc=$?
check "2 ranks, flipped: exit non-zero ($rc), no majority named on both ranks" \
  "[ $rc != 0 ] && [ \$(grep -c 'no majority to repair it from (rank 0: one replica; rank 1: another)' split.out) -ge 2 ]"

for mode in bsp ssp; do
  if [ $mode = ssp ]; then run $mode -n 4 --staleness 2; else run $mode -n 4; fi; rc=$?
  d=$(sed -n 's/.*drift \([^ ]*\) at most.*/\1/p' $mode.out | head -n 1)
  grep -h 'replicas:' $mode.out
  check "$mode unordered: exit 0 ($rc), the drift measured ($d) and below 1e-4" \
    "[ $rc = 0 ] && [ -n '$d' ] && awk 'BEGIN{exit !($d < 1e-4)}'"
done
run bad -n 2 --ordered --staleness 2; rc=$?
check "--ordered with --staleness 2: refused, exit 2 ($rc)" \
  "[ $rc = 2 ] && grep -q -- '--ordered applies under BSP' bad.out"

echo "$passes passed, $fails failed"
[ $fails = 0 ]
