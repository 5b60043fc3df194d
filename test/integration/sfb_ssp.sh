#!/usr/bin/env bash
# SSP proof: 4 workers with random injected compute delays, s in {0, 1, 3}
# (and the topology given as $3, default full). The metrics of every worker
# must show the SSP guarantee at every clock (ssp_check.py).
# With MODEL_DIFF set (test/integration/model_diff), the replicas of every
# run must also end identical (<= 1e-5: rounding of arrival-dependent
# groupings, see sfb_bsp.sh; a lost or doubled update is far larger).
# Further arguments are passed to every run (e.g. a --bandwidth budget);
# with PRIORITIES set ("fifo relative magnitude"), the run of the i-th s
# gets --priority of the i-th word; with EXPECT_BUDGET set, every rank's
# summary must show its --bandwidth budget holding its sends back.
# Usage: sfb_ssp.sh SFB SSP_CHECK [TOPOLOGY [FLAGS...]]
set -uo pipefail
SFB=$1; CHECK=$2; topo=${3:-full}; shift $(( $# < 3 ? $# : 3 ))
read -r -a prios <<<"${PRIORITIES:-}"
i=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
for s in 0 1 3; do
  extra=("$@")
  if [ ${#prios[@]} -gt 0 ]; then extra+=(--priority "${prios[$i]}"); fi
  i=$((i+1))
  out=$(timeout 100 "$SFB" run -n 4 --data synth:k=6,d=40,n=4000,seed=2 --batch 8 --clocks 40 \
        --staleness $s --debug-delay-ms 15 --topology "$topo" --eval-every 0 -q \
        --out-dir "$tmp/s$s" --model-out "$tmp/s$s/m.%r.sfb" "${extra[@]}" 2>&1)
  rc=$?
  if [ $rc != 0 ]; then echo "FAIL: run with s=$s ${extra[*]} exited $rc"; printf '%s\n' "$out" | tail; fails=$((fails+1)); continue; fi
  python3 "$CHECK" $s "$tmp"/s$s/metrics.*.jsonl | tail -n 3 || fails=$((fails+1))
  if [ -n "${MODEL_DIFF:-}" ]; then
    for r in 1 2 3; do
      "$MODEL_DIFF" "$tmp/s$s/m.0.sfb" "$tmp/s$s/m.$r.sfb" 1e-5 >/dev/null \
        || { echo "FAIL: s=$s replica $r differs from replica 0"; fails=$((fails+1)); }
    done
  fi
  if [ -n "${EXPECT_BUDGET:-}" ]; then # the budget held every rank's sends back
    python3 - "$tmp"/s$s/metrics.*.jsonl <<'PY' || fails=$((fails+1))
import json, sys
for path in sys.argv[1:]:
    s = [json.loads(l) for l in open(path) if '"summary"' in l][0]
    if not s["budget_held_s"] > 0.2 * s["wall"]:
        sys.exit(f"FAIL: {path}: the budget held sends {s['budget_held_s']} s of {s['wall']} s")
PY
  fi
  # the delays make workers drift apart: with s > 0 some updates arrive stale
done
echo "$((3 - fails)) passed, $fails failed"
[ $fails = 0 ]
