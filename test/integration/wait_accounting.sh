#!/usr/bin/env bash
# Under --flush clock a relay's publish waits until the frames it forwards at
# the clock's boundary have arrived: time spent on the network, which the
# metrics must count as wait_s, not apply_s (bench/scale.py and the
# simulator check derive the exchange time as period - compute - apply).
# 8 workers, halton, s = diameter - 1, every worker computing a random extra
# 0-20 ms a clock (--debug-delay-ms), so relays wait at boundaries. Per rank,
# over the clocks after the first 6, publish's duration (wall - t_publish,
# less its smallest) must be mostly wait (wait_s >= 0.5 x publish; summed
# over the ranks >= 0.7 x), and over all ranks it must not be apply (the
# ranks' apply_s <= 0.5 x their publish). A loaded machine (CI runs tests
# side by side) stretches one rank's publish by time it is not even
# scheduled, and apply_s also holds the applies of the clock's wait, so the
# tight bounds are on the sums; there must have been boundary waits at all
# (publish >= 20 ms summed over ranks).
# Usage: wait_accounting.sh SFB
set -uo pipefail
SFB=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
out=$(timeout 120 "$SFB" run -n 8 --topology halton --flush clock --staleness 2 \
      --data synth:k=10,d=100,n=8000,seed=2 --batch 16 --clocks 60 --eval-every 0 \
      --debug-delay-ms 20 --out-dir "$tmp" --model-out "$tmp/m.sfb" -q 2>&1)
rc=$?
if [ $rc != 0 ]; then printf '%s\n' "$out" | tail; echo "FAIL: sfb run exited $rc"; exit 1; fi
python3 - "$tmp" <<'PY'
import glob, json, sys
fails = 0
total = applied = waited = 0.0
for r in range(8):
    rows = [json.loads(l) for l in open(f"{sys.argv[1]}/metrics.{r}.jsonl")]
    cl = [x for x in rows if "t_publish" in x][6:]
    if len(cl) != 54:
        print(f"FAIL: rank {r}: {len(cl) + 6} clock rows, expected 60"); fails += 1; continue
    off = [x["wall"] - x["t_publish"] for x in cl]
    pub = sum(o - min(off) for o in off)
    wait = sum(x["wait_s"] for x in cl)
    apply = sum(x["apply_s"] for x in cl)
    total += pub
    applied += apply
    waited += wait
    ok = wait >= 0.5 * pub
    print(f"rank {r}: publish {1e3 * pub:.1f} ms, wait_s {1e3 * wait:.1f} ms, apply_s {1e3 * apply:.1f} ms"
          + ("" if ok else "  <- FAIL: publish's boundary wait not counted as a wait"))
    fails += not ok
if waited < 0.7 * total:
    print(f"FAIL: wait_s {1e3 * waited:.1f} ms over all ranks, less than 0.7 of their publish "
          f"{1e3 * total:.1f} ms: publish's boundary wait not counted as a wait"); fails += 1
if applied > 0.5 * total:
    print(f"FAIL: apply_s {1e3 * applied:.1f} ms over all ranks, more than half their publish "
          f"{1e3 * total:.1f} ms: publish's boundary wait counted as apply"); fails += 1
if total < 0.020:
    print(f"FAIL: publish took {1e3 * total:.1f} ms over all ranks: no boundary waits to account"); fails += 1
print(f"{0 if fails else 1} passed, {1 if fails else 0} failed")
sys.exit(1 if fails else 0)
PY
