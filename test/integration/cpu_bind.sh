#!/usr/bin/env bash
# --cpu-bind (src/comm/comm_open.c bind_cpu): with more ranks on the host
# than CPUs, auto binds every thread of rank i (local index) to the i-th
# allowed CPU mod their count, read back from /proc while the job runs; with
# no more ranks than CPUs auto leaves them unbound; cpu binds always, none
# never; a launcher's narrower mask (taskset) is respected; a bad value is a
# usage error.
# Usage: cpu_bind.sh SFB
set -uo pipefail
SFB=$1
tmp=$(mktemp -d)
bg=""
cleanup() { [ -n "$bg" ] && kill -9 "$bg" 2>/dev/null; pkill -9 -f "$tmp" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
job=(--data synth:k=4,d=20,n=600,seed=1 --eval-every 0 -q)

mapfile -t allowed < <(python3 -c "import os; print('\n'.join(map(str, sorted(os.sched_getaffinity(0)))))")
ncpu=${#allowed[@]}
expect() { # P [cpu list]: the CPUs ranks 0..P-1 get, sorted
  local P=$1; shift; local -a set=("$@")
  for ((i = 0; i < P; i++)); do echo "${set[i % ${#set[@]}]}"; done | sort -n | tr '\n' ' '
}
bound() { # log: the CPUs the log says ranks were bound to, sorted
  sed -n 's/.*comm: rank [0-9]* bound to CPU \([0-9]*\) .*/\1/p' "$1" | sort -n | tr '\n' ' '
}
short() { # label P [sfb run options]: a short job, its log
  local label=$1 P=$2; shift 2
  timeout 60 "$SFB" run -n "$P" "${job[@]}" --clocks 5 -v --out-dir "$tmp/$label" "$@" \
    >"$tmp/$label.log" 2>&1
}

# 1. auto, more ranks than CPUs, read back from /proc while it runs
P=$((ncpu + 1))
if [ "$P" -le 9 ]; then
  timeout 60 "$SFB" run -n "$P" "${job[@]}" --clocks 1000000 --debug-delay-ms 2 -v \
    --out-dir "$tmp/live" >"$tmp/live.log" 2>&1 &
  bg=$!
  for _ in $(seq 300); do
    n=0; for ((r = 0; r < P; r++)); do [ -s "$tmp/live/metrics.$r.jsonl" ] && n=$((n + 1)); done
    [ "$n" = "$P" ] && break
    sleep 0.1
  done
  got=""; multi=0
  for w in $(pgrep -P "$(pgrep -P "$bg" | head -1)"); do # timeout > sfb run > workers
    cpus=$(cat /proc/"$w"/task/*/status 2>/dev/null | sed -n 's/^Cpus_allowed_list:\s*//p' | sort -u)
    [ "$(echo "$cpus" | wc -l)" = 1 ] || multi=1 # every thread of a rank on the same CPU
    got="$got$cpus"$'\n'
  done
  got=$(echo -n "$got" | sort -n | tr '\n' ' ')
  kill -TERM "$bg" 2>/dev/null; wait "$bg" 2>/dev/null; bg=""
  want=$(expect "$P" "${allowed[@]}")
  check "auto, $P ranks on $ncpu CPUs: workers' threads bound to [$want] (got [$got])" "[ '$got' = '$want' ]"
  check "auto: all threads of a rank on one CPU" "[ $multi = 0 ]"
  check "auto: the log agrees ([$(bound "$tmp/live.log")])" "[ '$(bound "$tmp/live.log")' = '$want' ]"
else
  echo "skip: $ncpu CPUs (the /proc case needs at most 8)"
fi

# 2. auto with no more ranks than CPUs: unbound; cpu: bound anyway; none: never
P=$((ncpu < 4 ? ncpu : 4))
short fit "$P"
check "auto, $P ranks on $ncpu CPUs: exit 0" "[ $? = 0 ]"
check "auto, $P ranks on $ncpu CPUs: nobody bound" "! grep -q 'bound to CPU' '$tmp/fit.log'"
short cpu "$P" --cpu-bind cpu
check "cpu: bound to [$(expect "$P" "${allowed[@]}")]" "[ '$(bound "$tmp/cpu.log")' = '$(expect "$P" "${allowed[@]}")' ]"
check "cpu: progress stays spin ($P ranks, $ncpu CPUs)" "! grep -q 'progress block' '$tmp/cpu.log'"
short none 3 --cpu-bind none
check "none: exit 0" "[ $? = 0 ]"
check "none: nobody bound" "! grep -q 'bound to CPU' '$tmp/none.log'"

# 3. the launcher's mask: under taskset to the last allowed CPU, 2 ranks
#    outnumber it and both land there
last=${allowed[ncpu - 1]}
taskset -c "$last" "$SFB" run -n 2 "${job[@]}" --clocks 5 -v --out-dir "$tmp/ts" >"$tmp/ts.log" 2>&1
check "taskset -c $last: exit 0" "[ $? = 0 ]"
check "taskset -c $last: both ranks on CPU $last ([$(bound "$tmp/ts.log")])" "[ '$(bound "$tmp/ts.log")' = '$last $last ' ]"

# 4. a bad value
"$SFB" run -n 2 "${job[@]}" --clocks 5 --cpu-bind core --out-dir "$tmp/bad" >"$tmp/bad.log" 2>&1
rc=$?
check "--cpu-bind core: exit 2 (rc=$rc)" "[ $rc = 2 ]"
check "--cpu-bind core: names the option and the choices" "grep -q 'cpu-bind' '$tmp/bad.log' && grep -q 'auto, none or cpu' '$tmp/bad.log'"
sleep 0.5
check "no worker left behind" "! pgrep -f '$tmp' >/dev/null"

echo "cpu_bind: $passes passed, $fails failed"
[ $fails = 0 ]
