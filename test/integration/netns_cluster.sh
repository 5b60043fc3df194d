#!/usr/bin/env bash
# The emulated cluster (scripts/netns-cluster): P = 3 namespaces on 100 Mbit/s
# links, tcp provider, env rendezvous. SFB and FMS jobs both finish, every
# worker writes its metrics, the two reach the same parameters (s = 0), FMS
# moves more bytes than SFB (at these shapes S·P < 2KD/(K+D)), and nothing of the cluster is left behind.
# Skips (77) when not root or network namespaces are unavailable.
# Usage: netns_cluster.sh NETNS_CLUSTER SFB MODEL_DIFF
set -uo pipefail
NC=$1; SFB=$2; DIFF=$3
. "$(dirname "$0")/netns_lib.sh"
args=(--model mlr --data synth:k=64,d=200,n=3000,seed=3 --batch 4 --clocks 40 --lr 0.5
      --staleness 0 --apply-early off --eval-every 0 -q)
for sync in sfb fms; do
  timeout 120 "$NC" -n 3 --rate 100mbit --sfb "$SFB" --timeout 100 --out-dir "$tmp/$sync" -- \
    "${args[@]}" --sync $sync --model-out "$tmp/$sync.sfb" >"$tmp/$sync.log" 2>&1 \
    || { echo "FAIL: netns-cluster --sync $sync"; tail -n 20 "$tmp/$sync.log"; exit 1; }
  for r in 0 1 2; do
    check grep -q '"event":"summary"' "$tmp/$sync/metrics.$r.jsonl"
    check grep -q 'provider tcp' "$tmp/$sync/worker.$r.log"
  done
done
check "$DIFF" "$tmp/fms.sfb" "$tmp/sfb.sfb" 1e-4
more_bytes() {
  python3 - "$tmp/sfb/metrics.0.jsonl" "$tmp/fms/metrics.0.jsonl" <<'PY'
import json, sys
b = [[json.loads(l) for l in open(f) if '"summary"' in l][0]["bytes_sent_per_clock"] for f in sys.argv[1:]]
print(f"bytes/clock sfb {b[0]:.0f}, fms {b[1]:.0f}")
sys.exit(0 if b[1] > b[0] > 0 else 1)
PY
}
check more_bytes
# a failing job still tears everything down and reports the failure
timeout 60 "$NC" -n 3 --rate 100mbit --sfb "$SFB" --timeout 30 --out-dir "$tmp/bad" -- \
  --model mlr --data synth:k=8,d=100,n=3000,seed=3 --lr -1 >/dev/null 2>&1
check [ $? != 0 ]
for d in sfb fms bad; do check leftover "$tmp/$d"; done
echo "$passes passed, $fails failed"
[ $fails = 0 ]
