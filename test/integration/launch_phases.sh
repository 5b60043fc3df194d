#!/usr/bin/env bash
# sfb run's set-up and teardown timeline (docs/formats.md: the setup and
# teardown events) with forked and with exec'd workers, and the sweep of
# dead processes' shm regions done once per host (by rank 0), not per rank.
# Usage: launch_phases.sh SFB
set -uo pipefail
SFB=$1
tmp=$(mktemp -d)
stale=
cleanup() { [ -n "$stale" ] && rm -f "$stale"; rm -rf "$tmp"; }
trap cleanup EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
job=(--data synth:k=4,d=20,n=2000,seed=1 --clocks 20 --eval-every 0 -v)

# a region left by a process that is gone (its pid: a shell that has exited)
dead=$(sh -c 'echo $$')
stale=/dev/shm/sfb_00000000deadbeef_9_$dead
: >"$stale"

for mode in fork exec; do
  ex=; [ $mode = exec ] && ex=1
  rm -rf "$tmp/o"
  SFB_LAUNCH_EXEC=$ex timeout 60 "$SFB" run -n 4 "${job[@]}" --out-dir "$tmp/o" >"$tmp/$mode.log" 2>&1
  rc=$?
  check "$mode: sfb run exits 0 (rc=$rc)" "[ $rc = 0 ]"
  sweeps=$(grep -c 'swept /dev/shm' "$tmp/$mode.log")
  check "$mode: one sweep of /dev/shm for the host, not one per rank ($sweeps)" "[ '$sweeps' = 1 ]"
  check "$mode: rank 0 swept" "grep -q '^\[0\] .*swept /dev/shm' '$tmp/$mode.log'"
  if [ $mode = fork ]; then
    # (by rank 0's sweep, or by another sfb job's on this host: not asserted who)
    check "fork: the dead process's region is removed" "[ ! -e '$stale' ]"
  fi
  check "$mode: the launcher logs when it reaped the last worker" \
    "grep -q 'launch: 4 workers forked in .* the last was reaped .* (CLOCK_MONOTONIC ' '$tmp/$mode.log'"
  reaped=$(sed -n 's/.*the last was reaped .*(CLOCK_MONOTONIC \([0-9.]*\)).*/\1/p' "$tmp/$mode.log")
  out=$(python3 - "$tmp/o" "$reaped" <<'PY'
import json, sys
d, reaped = sys.argv[1], float(sys.argv[2] or 0)
setup_keys = ["exec", "main", "bootstrap", "hosts", "fabric", "names", "ready", "data",
              "agree", "shapes", "engine", "first_clock"]
down_keys = ["drain", "flush", "bye", "final_barrier", "report", "close"]
bad = []
last = 0
for r in range(4):
    ev = [json.loads(l) for l in open(f"{d}/metrics.{r}.jsonl")]
    s = [e for e in ev if e.get("event") == "setup"]
    t = [e for e in ev if e.get("event") == "teardown"]
    summ = [e for e in ev if e.get("event") == "summary"]
    if len(s) != 1 or len(t) != 1 or len(summ) != 1:
        bad.append(f"rank {r}: {len(s)} setup, {len(t)} teardown, {len(summ)} summary events")
        continue
    s, t, summ = s[0], t[0], summ[0]
    if ev[-1] is not t: bad.append(f"rank {r}: teardown is not the last line")
    if s["origin"] != "launcher": bad.append(f"rank {r}: origin {s['origin']}")
    if list(s["phases"]) != setup_keys: bad.append(f"rank {r}: setup phases {list(s['phases'])}")
    if list(t["phases"]) != down_keys: bad.append(f"rank {r}: teardown phases {list(t['phases'])}")
    if not 0 < s["launch_s"] < 60: bad.append(f"rank {r}: launch_s {s['launch_s']}")
    if abs(sum(s["phases"].values()) - s["launch_s"]) > 1e-4:
        bad.append(f"rank {r}: setup phases add up to {sum(s['phases'].values())}, launch_s {s['launch_s']}")
    if abs(sum(t["phases"].values()) - t["teardown_s"]) > 1e-4:
        bad.append(f"rank {r}: teardown phases add up to {sum(t['phases'].values())}, teardown_s {t['teardown_s']}")
    if min(s["phases"].values()) < 0 or min(t["phases"].values()) < 0:
        bad.append(f"rank {r}: a negative phase")
    if abs(summ["launch_s"] - s["launch_s"]) > 1e-5: bad.append(f"rank {r}: summary launch_s differs")
    last = max(last, t["t_last_clock"] + t["teardown_s"])
if reaped and not reaped >= last: bad.append(f"reaped at {reaped} before a rank closed at {last}")
print("; ".join(bad) if bad else "ok")
PY
)
  check "$mode: setup/teardown events ($out)" "[ '$out' = ok ]"
done
check "exec'd workers are named sfb, forked ones 'sfb rank R'" \
  "! grep -q 'transport: libfabric initialised' '$tmp/exec.log' && grep -q 'transport: libfabric initialised' '$tmp/fork.log'"

echo "launch_phases: $passes passed, $fails failed"
[ $fails = 0 ] || { tail -n 30 "$tmp/fork.log"; exit 1; }
