#!/usr/bin/env bash
# libsfb's pthread_spin_lock (src/net/spin_yield.h): libfabric's calls bind
# to it in a worker (LD_DEBUG=bindings, glibc's loader), and the transport
# turns yielding on exactly when the host runs more ranks than the process
# may use CPUs, or as SFB_SPIN_YIELD forces; the jobs finish either way.
# Usage: spin_yield.sh SFB
set -uo pipefail
SFB=$1
tmp=$(mktemp -d)
cleanup() { pkill -9 -f "$tmp" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
job=(--data synth:k=4,d=20,n=600,seed=1 --eval-every 0 -q --clocks 5)
ncpu=$(python3 -c "import os; print(len(os.sched_getaffinity(0)))")
run() { # label P [env...]: a short job with debug logging; its exit status
  local label=$1 P=$2; shift 2
  env "$@" timeout 60 "$SFB" run -n "$P" "${job[@]}" -v --out-dir "$tmp/$label" >"$tmp/$label.log" 2>&1
}
policy() { # log: "yield" / "spin" per rank, sorted and unique
  sed -n 's/.*transport: progress .*, spin locks \([a-z]*\)$/\1/p' "$1" | sort -u | tr '\n' ' '
}

# 1. a worker's libfabric binds pthread_spin_lock to libsfb
LD_DEBUG=bindings LD_DEBUG_OUTPUT="$tmp/bind" timeout 60 "$SFB" run -n 2 "${job[@]}" \
  --out-dir "$tmp/bind-run" >"$tmp/bind.log" 2>&1
check "LD_DEBUG job exits 0" "[ $? = 0 ]"
bound=$(cat "$tmp"/bind.* 2>/dev/null | grep -c 'libfabric\.so[^ ]* \[0\] to [^ ]*libsfb\.so[^ ]* \[0\]: normal symbol .pthread_spin_lock.')
check "libfabric's pthread_spin_lock binds to libsfb (got $bound bindings)" "[ '$bound' -ge 1 ]"

# 2. oversubscribed: yield; SFB_SPIN_YIELD=0 turns it off
P=$((ncpu + 1))
run over "$P"; rc=$?
check "$P ranks on $ncpu CPUs: exit 0" "[ $rc = 0 ]"
check "$P ranks on $ncpu CPUs: every rank yields ([$(policy "$tmp/over.log")])" "[ '$(policy "$tmp/over.log")' = 'yield ' ]"
check "every rank logged its policy" "[ \$(grep -c 'spin locks' '$tmp/over.log') = $P ]"
run over-off "$P" SFB_SPIN_YIELD=0; rc=$?
check "SFB_SPIN_YIELD=0: exit 0" "[ $rc = 0 ]"
check "SFB_SPIN_YIELD=0: every rank spins ([$(policy "$tmp/over-off.log")])" "[ '$(policy "$tmp/over-off.log")' = 'spin ' ]"

# 3. not oversubscribed: spin; SFB_SPIN_YIELD=1 turns it on
if [ "$ncpu" -ge 2 ]; then
  run fits 2; rc=$?
  check "2 ranks on $ncpu CPUs: exit 0" "[ $rc = 0 ]"
  check "2 ranks on $ncpu CPUs: spin ([$(policy "$tmp/fits.log")])" "[ '$(policy "$tmp/fits.log")' = 'spin ' ]"
  run fits-on 2 SFB_SPIN_YIELD=1; rc=$?
  check "SFB_SPIN_YIELD=1: exit 0" "[ $rc = 0 ]"
  check "SFB_SPIN_YIELD=1: yield ([$(policy "$tmp/fits-on.log")])" "[ '$(policy "$tmp/fits-on.log")' = 'yield ' ]"
fi

echo "spin_yield: $passes passed, $fails failed"
[ $fails = 0 ]
