#!/usr/bin/env bash
# After `sfb launch` or `sfb run` returns, nothing it started is left: not
# the ranks, not their children (`cmd &`, `sh -c`), not descendants that
# left the rank's process group (setsid, a double fork), not those that
# ignore SIGTERM (SIGKILL after the grace period); whether the job
# succeeded, failed or was interrupted. Before, only each rank's own pid was
# signalled, and `sleep` kept running with parent pid 1. Each rank runs a
# marker command line (`sleep 77.7NNN`, unique to this run), looked for with
# pgrep once the launcher has returned. Usage: launch_tree.sh SFB
set -uo pipefail
SFB=$1
tmp=$(mktemp -d)
M="77.7$$"            # the marker: `sleep $M`
trap 'pkill -9 -f "sleep $M" 2>/dev/null; pkill -9 -f "$tmp/" 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
now() { date +%s.%N; }
within() { awk "BEGIN{exit !($1 <= $2)}"; }
left() { pgrep -f "sleep $M" | wc -l; }

# NAME RC BOUND CMD: sfb launch -n 2 -- sh -c CMD; exit status RC within
# BOUND s, then no marker process left (looked for at once: nothing may be
# on its way out)
launch_case() {
  local name=$1 want=$2 bound=$3 cmd=$4 t0 dt rc n
  t0=$(now)
  timeout -s KILL 60 "$SFB" launch -n 2 -- sh -c "$cmd" >"$tmp/$name.out" 2>&1; rc=$?
  dt=$(echo "$(now) - $t0" | bc)
  n=$(left)
  check "$name: exit $want (rc=$rc)" "[ $rc = $want ]"
  check "$name: over within $bound s ($dt s)" "within $dt $bound"
  check "$name: nothing left ($n marker processes)" "[ $n = 0 ]"
  [ "$n" = 0 ] || { ps -o pid,ppid,pgid,sid,stat,cmd -p "$(pgrep -d, -f "sleep $M")"; pkill -9 -f "sleep $M"; }
}

# the issue's case: rank 1 fails, rank 0's sh is stopped; its sleep too
launch_case failed-rank 1 8 "if [ \$SFB_RANK = 1 ]; then sleep 1; exit 4; fi; sleep $M"
# every rank succeeds, leaving a background child
launch_case background 0 8 "sleep $M & exit 0"
# a child in a session of its own (out of the rank's process group)
launch_case setsid 0 8 "setsid sleep $M & sleep 0.3; exit 0"
# a double fork: reparented (to the launcher, its subreaper), in the group
launch_case double-fork 0 8 "(sleep $M &); exit 0"
# a daemon: its own session, stdio closed (holds none of the launcher's pipes)
launch_case daemon 0 8 "setsid sh -c 'sleep $M & sleep $M' </dev/null >/dev/null 2>&1 & sleep 0.3"
# SIGTERM ignored by a failing job's rank and so by its children: SIGKILL
# after the 3 s grace period
launch_case ignores-term 1 10 "if [ \$SFB_RANK = 1 ]; then sleep 1; exit 4; fi; trap '' TERM; sleep $M & sleep $M"
# the same in a session of their own, after a successful job
launch_case setsid-ignores-term 0 10 \
  "setsid sh -c \"trap '' TERM; sleep $M & sleep $M\" </dev/null >/dev/null 2>&1 & sleep 0.3; exit 0"
check "ignores-term: the failure is reported" \
  "grep -q 'launch failed: rank 1 exited with status 4' '$tmp/ignores-term.out'"

# a signal to the launcher: forwarded to the ranks' groups; what left them stopped too
"$SFB" launch -n 2 -- sh -c "setsid sleep $M & sleep $M & echo up; wait" >"$tmp/sig.out" 2>&1 &
L=$!
for _ in $(seq 100); do [ "$(grep -c up "$tmp/sig.out")" = 2 ] && break; sleep 0.05; done
t0=$(now)
kill -TERM $L
for _ in $(seq 100); do kill -0 $L 2>/dev/null || break; sleep 0.1; done
wait $L; rc=$?
dt=$(echo "$(now) - $t0" | bc); n=$(left)
check "signal: exit 143 (rc=$rc)" "[ $rc = 143 ]"
check "signal: over within 8 s ($dt s)" "within $dt 8"
check "signal: nothing left ($n)" "[ $n = 0 ]"

# sfb run: forked workers, none left after a run, nor after an interrupted one
data=synth:k=4,d=20,n=400,seed=1
timeout -s KILL 60 "$SFB" run -n 2 --data $data --clocks 4 -q --out-dir "$tmp/run" >"$tmp/run.out" 2>&1
rc=$?
check "sfb run: exit 0 (rc=$rc)" "[ $rc = 0 ]"
check "sfb run: no worker left" "! pgrep -f '$tmp/run' >/dev/null"
"$SFB" run -n 2 --data $data --clocks 100000 --debug-delay-ms 20 -q --out-dir "$tmp/run2" \
  >"$tmp/run2.out" 2>&1 &
L=$!
for _ in $(seq 200); do [ "$(pgrep -f "$tmp/run2" | wc -l)" -ge 3 ] && break; sleep 0.05; done
sleep 1
kill -TERM $L
for _ in $(seq 100); do kill -0 $L 2>/dev/null || break; sleep 0.1; done
wait $L; rc=$?
check "sfb run interrupted: exit 143 (rc=$rc)" "[ $rc = 143 ]"
check "sfb run interrupted: no worker left" "! pgrep -f '$tmp/run2' >/dev/null"

echo "$passes passed, $fails failed"
[ $fails = 0 ]
