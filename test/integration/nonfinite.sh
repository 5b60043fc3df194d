#!/usr/bin/env bash
# A rank of a Python job (python/sfb) publishes a non-finite factor at clock
# 3: a NaN in b (an infinite scale goes through the same functions, checked
# in test_job and test_broadcast). Before, publish took it, the
# publisher's replica turned NaN and every peer dropped the frame with a
# warning nobody saw, then hung until an outer timeout. Now:
#  - checked (every rank as shipped): publish raises sfb.Error naming the
#    clock and the matrix; every rank exits non-zero naming rank 2;
#  - hostile (rank 2 skips the check, SFB_DEBUG_PUBLISH_UNCHECKED=1): every
#    peer refuses the update, whether sent straight (full, 3 ranks) or
#    relayed (halton, 5 ranks; sfb/broadcast.c's view_frame checks the
#    scale where it checks the NaN); every rank exits non-zero and its
#    message
#    names rank 2 and clock 3; the refusal is also logged on stderr with the
#    rank prefix (the library's default log sink);
#  - fms (3 ranks, checked): publish_one on an FMS matrix, whose engine
#    checks the factors' product where it is the smaller pass: a NaN factor
#    refused in the same words, finite factors whose product overflows
#    float32 refused naming the product's number;
#  - die (4 ranks): rank 2's process ends while ranks 1 and 3 are stopped:
#    every survivor's error names rank 2 as its culprit;
# each within --peer-timeout (3 s) + 5 s of the publish.
# The ranks join by the environment rendezvous, started by hand: sfb launch
# would stop the others once one failed, before they could say why.
# Usage: nonfinite.sh SFB RUN_PY JOB_NONFINITE_PY [long]
# (long: the relayed cases, Halton on 5 ranks, and nothing else)
set -uo pipefail
SFB=$1; PY=$2; JOB=$3; PART=${4:-}
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
if ! "$PY" --check; then echo "skipped: no python3 with numpy"; exit 77; fi
within() { awk "BEGIN{exit !($1 <= $2)}"; }

# Each rank started by hand with the environment rendezvous (as sfb launch
# would), so that every rank exits by itself: sfb launch stops the others
# as soon as one fails, before they could say why.
run_case() { # NAME N ARGS...: N ranks; rank r's output in $tmp/NAME.r, exit status in rcs[r]
  local name=$1 n=$2; shift 2
  local port key=0x$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
  port=$("$PY" "$(dirname "$0")/free_port.py")
  local rp=()
  for r in $(seq 0 $((n - 1))); do
    SFB_RANK=$r SFB_WORLD_SIZE=$n SFB_RENDEZVOUS=127.0.0.1:$port SFB_JOB_KEY=$key \
      timeout -s KILL 60 "$PY" "$JOB" --bad-rank 2 --bad-clock 3 --peer-timeout 3 "$@" \
      >"$tmp/$name.$r" 2>&1 &
    rp+=($!); pids+=($!)
  done
  rcs=(); ends=()
  for r in $(seq 0 $((n - 1))); do
    wait "${rp[$r]}"; rcs[$r]=$?; ends[$r]=$(date +%s.%N)
  done
  t0=$(sed -n 's/^poisoned at //p' "$tmp/$name.2")
}

# (an infinite scale, refused at publish and by each peer, straight and
# relayed, by the functions that refuse a NaN: test_job's publish_nonfinite
# and test_broadcast's nonfinite_full and nonfinite_halton check it; not run
# here, for CI's time)
# (relayed over Halton, 5 ranks: suite long, nonfinite_long; test_broadcast's
# nonfinite_halton checks the relay's refusal in every run)
cfgs=("nan-full 3" "nan-fms 3 --engine fms" "overflow-fms 3 --engine fms --overflow")
[ "$PART" = long ] && cfgs=("nan-halton 5 --topology halton")
for cfg in "${cfgs[@]}"; do
  set -- $cfg
  name=$1; n=$2; shift 2
  modes="checked hostile"; [[ $name == *-fms ]] && modes=checked
  for mode in $modes; do
    extra=(); [ $mode = hostile ] && extra=(--hostile)
    run_case "$name-$mode" "$n" "$@" "${extra[@]}"
    f="$tmp/$name-$mode"
    check "$name $mode: rank 2 published" "[ -n '$t0' ]"
    for r in $(seq 0 $((n - 1))); do
      check "$name $mode: rank $r exits 1 (rc=${rcs[$r]})" "[ ${rcs[$r]} = 1 ]"
      dt=$(echo "${ends[$r]} - ${t0:-0}" | bc)
      echo "$name $mode: rank $r exited $dt s after the publish"
      check "$name $mode: rank $r over within 8 s of the publish ($dt s)" "within $dt 8"
      line=$(grep "^rank $r failed: " "$f.$r")
      check "$name $mode: rank $r failed" "[ -n \"\$line\" ]"
      check "$name $mode: rank $r names rank 2 and clock 3 ($line)" \
        "[[ \"\$line\" == *'rank 2'* && \"\$line\" == *'clock 3'* ]]"
      check "$name $mode: rank $r did not finish" "! grep -q '^rank $r done' '$f.$r'"
    done
    if [ $mode = checked ]; then
      what='b\[1\]\[2\] is nan'
      # fms: publish_one, its engine checking the factors' product (smaller
      # here): the same words for a NaN factor, the product's number named
      # where finite factors overflow
      [[ $name == overflow* ]] && what="the update's \[2\]\[0\] (scale 4 × bᵀc) overflows float32"
      fn=sfb_job_publish; [[ $name == *-fms ]] && fn=sfb_job_publish_one
      check "$name checked: publish refused it, naming clock, matrix and value" \
        "grep -q \"^rank 2 failed: $fn: clock 3, matrix 0: $what\" '$f.2'"
      for r in $(seq 0 $((n - 1))); do
        [ $r = 2 ] && continue
        check "$name checked: rank $r told by rank 2's abort" \
          "grep -q '^rank $r failed: rank 2 aborted the job: Error: $fn: clock 3' '$f.$r'"
      done
    else
      # each peer refused the update itself or heard of a peer's refusal;
      # a refusal is logged on stderr with the rank prefix (default sink)
      refused=0
      for r in $(seq 0 $((n - 1))); do
        [ $r = 2 ] && continue
        check "$name hostile: rank $r refused the update or was told" \
          "grep -Eq '^rank $r failed: (rank $r rejects the update rank 2 published at clock 3|rank [0-9]+ aborted the job: [A-Za-z]*Error: rank [0-9]+ rejects the update rank 2 published at clock 3)' '$f.$r'"
        grep -q "^sfb\[$r\]: error: rank $r rejects the update rank 2 published at clock 3 (matrix 0" "$f.$r" &&
          refused=$((refused + 1))
      done
      check "$name hostile: refusals logged with the rank prefix ($refused)" "[ $refused -ge 1 ]"
      check "$name hostile: rank 2 was told (an abort naming the refusal)" \
        "grep -Eq '^rank 2 failed: rank [0-9]+ aborted the job: [A-Za-z]*Error: rank [0-9]+ rejects the update rank 2 published at clock 3' '$f.2'"
    fi
    [ $fails = 0 ] || { echo "--- $name $mode"; head -20 "$f".*; }
  done
done

if [ "$PART" = long ]; then
  echo "$passes passed, $fails failed"
  [ $fails = 0 ]; exit
fi

# A rank's process ends (rank 2 of 4, at clock 3) while ranks 1 and 3 are
# stopped (SIGSTOP, 4 s): rank 0 alone finds the death and aborts the job.
# Ranks 1 and 3, woken, must name rank 2 as their error's culprit (rank 0
# tells them LOST before its ABORT), not rank 0, which only told them; their
# own checks, late on waking, blame nobody (sfb__gap), or find rank 2 gone
# themselves: either way rank 2 (without the LOST, 2 of 6 runs named rank 0).
port=$("$PY" "$(dirname "$0")/free_port.py")
key=0x$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
dp=()
for r in 0 1 2 3; do
  SFB_RANK=$r SFB_WORLD_SIZE=4 SFB_RENDEZVOUS=127.0.0.1:$port SFB_JOB_KEY=$key \
    "$PY" "$JOB" --bad-rank 2 --bad-clock 3 --die --clocks 400 --peer-timeout 30 \
    >"$tmp/die.$r" 2>&1 &
  dp+=($!); pids+=($!)
done
for _ in $(seq 3000); do grep -q '^poisoned at' "$tmp/die.2" && break; sleep 0.01; done
# run.sh execs python: the pids are the ranks' own
kill -STOP "${dp[1]}" "${dp[3]}"
sleep 4
kill -CONT "${dp[1]}" "${dp[3]}"
for r in 0 1 3; do
  for _ in $(seq 300); do kill -0 "${dp[$r]}" 2>/dev/null || break; sleep 0.1; done
  kill -9 "${dp[$r]}" 2>/dev/null
  wait "${dp[$r]}"; rc=$?
  check "die: rank $r exits 1 by itself within 30 s of waking (rc=$rc)" "[ $rc = 1 ]"
  check "die: rank $r names rank 2 as the culprit ($(grep -h 'failed' "$tmp/die.$r" | head -c 200))" \
    "grep -q '^rank $r culprit: 2\$' '$tmp/die.$r' && grep -q '^rank $r failed: .*rank 2' '$tmp/die.$r'"
done
wait "${dp[2]}" 2>/dev/null
[ $fails = 0 ] || head -n 5 "$tmp"/die.*

echo "$passes passed, $fails failed"
[ $fails = 0 ]
