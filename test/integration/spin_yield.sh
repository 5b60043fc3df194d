#!/usr/bin/env bash
# The yielding pthread_spin_lock (src/launch/spin_yield.h) lives outside
# libsfb: in a worker of `sfb run` libfabric's calls bind to the sfb
# executable's (LD_DEBUG=bindings, glibc's loader), in any other program that
# `sfb launch` starts to the preloaded libsfb-spin-yield.so; and the launcher
# turns yielding on (SFB_SPIN_YIELD=1, the preload for exec'd ranks) exactly
# when the host runs more ranks than it may use CPUs, or as SFB_SPIN_YIELD
# forces. Jobs finish either way.
# Usage: spin_yield.sh SFB JOB_EXE (examples/job.c, linked to libsfb only)
set -uo pipefail
SFB=$1; JOB=$2
tmp=$(mktemp -d)
cleanup() { pkill -9 -f "$tmp" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
job=(--data synth:k=4,d=20,n=600,seed=1 --eval-every 0 -q --clocks 5)
ncpu=$(python3 -c "import os; print(len(os.sched_getaffinity(0)))")
bindings() { # LD_DEBUG output files [of processes running PROGRAM] -> the objects libfabric's pthread_spin_lock binds to
  local files=("$1".*)
  [ $# -gt 1 ] && mapfile -t files < <(grep -l "binding file $2 \[0\]" "$1".* 2>/dev/null)
  cat "${files[@]}" 2>/dev/null | sed -n 's/.*binding file [^ ]*libfabric\.so[^ ]* \[0\] to \([^ ]*\) \[0\]: normal symbol .pthread_spin_lock.*/\1/p' | sort -u | tr '\n' ' '
}

# 1. a forked worker of sfb run: libfabric binds pthread_spin_lock to the sfb executable
LD_DEBUG=bindings LD_DEBUG_OUTPUT="$tmp/bind" timeout 60 "$SFB" run -n 2 "${job[@]}" \
  --out-dir "$tmp/bind-run" >"$tmp/bind.log" 2>&1
check "LD_DEBUG job exits 0" "[ $? = 0 ]"
b=$(bindings "$tmp/bind")
check "sfb run: libfabric's pthread_spin_lock binds to the sfb executable only ([$b])" \
  "[ '$b' = '$(readlink -f "$SFB") ' ] || [ '$b' = '$SFB ' ]"

# 2. what the launcher hands its ranks
envs() { # label P [env...]: each rank's SFB_SPIN_YIELD and preload, sorted and unique
  local label=$1 P=$2; shift 2
  env "$@" timeout 60 "$SFB" launch -n "$P" -- sh -c 'echo "y=${SFB_SPIN_YIELD:-} p=${LD_PRELOAD:-}"' \
    >"$tmp/$label.log" 2>&1 || echo "launch failed" >>"$tmp/$label.log"
  sed 's/^\[[0-9]*\] //; s|p=/[^ ]*/libsfb-spin-yield.so$|p=PRELOAD|' "$tmp/$label.log" | sort -u | tr '\n' ' '
}
P=$((ncpu + 1))
got=$(envs over "$P" -u SFB_SPIN_YIELD -u LD_PRELOAD)
check "$P ranks on $ncpu CPUs: every rank yields, preloaded ([$got])" "[ '$got' = 'y=1 p=PRELOAD ' ]"
got=$(envs over-off "$P" -u LD_PRELOAD SFB_SPIN_YIELD=0)
check "SFB_SPIN_YIELD=0: no rank yields ([$got])" "[ '$got' = 'y=0 p= ' ]"
got=$(envs fits 1 -u SFB_SPIN_YIELD -u LD_PRELOAD)
check "1 rank on $ncpu CPUs: spin ([$got])" "[ '$got' = 'y= p= ' ]"
got=$(envs fits-on 1 -u LD_PRELOAD SFB_SPIN_YIELD=1)
check "SFB_SPIN_YIELD=1: yield, preloaded ([$got])" "[ '$got' = 'y=1 p=PRELOAD ' ]"
got=$(envs keep 1 SFB_SPIN_YIELD=1 LD_PRELOAD=libm.so.6)
check "a caller's LD_PRELOAD is kept, the preload added ([$got])" "[[ '$got' == 'y=1 p=libm.so.6 /'*'/libsfb-spin-yield.so ' ]]"

# 3. a program linked to libsfb (not sfb) under sfb launch, yielding: its
#    libfabric binds to the preloaded library, and the job is right
SFB_SPIN_YIELD=1 LD_DEBUG=bindings LD_DEBUG_OUTPUT="$tmp/pre" timeout 60 "$SFB" launch -n 3 -- "$JOB" \
  >"$tmp/pre.log" 2>&1
check "preloaded job exits 0" "[ $? = 0 ]"
b=$(bindings "$tmp/pre" "$JOB")
check "job.c: libfabric's pthread_spin_lock binds to libsfb-spin-yield.so ([$b])" \
  "[[ '$b' == */libsfb-spin-yield.so' ' ]]"
check "job.c: every rank right" "[ \$(grep -c 'every entry is 60' '$tmp/pre.log') = 3 ]"

# 4. oversubscribed sfb run (forked workers): the launcher says it, the job ends
env -u SFB_SPIN_YIELD timeout 60 "$SFB" run -n "$P" "${job[@]}" -v --out-dir "$tmp/run-over" >"$tmp/run-over.log" 2>&1
check "sfb run -n $P: exit 0" "[ $? = 0 ]"
check "sfb run -n $P: spin locks yield" "grep -q 'launch: $P ranks on $ncpu CPUs: spin locks yield' '$tmp/run-over.log'"

echo "spin_yield: $passes passed, $fails failed"
[ $fails = 0 ]
