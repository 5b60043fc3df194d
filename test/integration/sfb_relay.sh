#!/usr/bin/env bash
# Relays deliver exactly once: for every P given and both overlays, a few
# clocks on a tiny synth model; every rank's "relay" summary must show
# exactly `clocks` updates applied from every other origin (none lost, none
# twice, none from itself), and every replica must equal rank 0's.
# Usage: sfb_relay.sh SFB MODEL_DIFF P...
set -uo pipefail
SFB=$1; DIFF=$2; shift 2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
clocks=3; fails=0; passes=0
for P in "$@"; do
  for topo in halton halton-classic; do
    d="$tmp/$topo.$P"
    if ! timeout 60 "$SFB" run -n "$P" --data synth:k=3,d=8,n=$((P * 40)),seed=3 --batch 2 \
         --clocks $clocks --topology "$topo" --eval-every 0 -q --model-out "$d/m.%r.sfb" \
         --out-dir "$d" >/dev/null 2>"$tmp/err"; then
      echo "FAIL: P=$P $topo: run failed"; tail -5 "$tmp/err"; fails=$((fails+1)); continue
    fi
    ok=1
    if ! python3 - "$P" "$clocks" "$d" <<'PY'
import json, sys
P, clocks, d = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
bad = 0
for r in range(P):
    ev = [json.loads(l) for l in open(f"{d}/metrics.{r}.jsonl") if '"relay"' in l]
    if len(ev) != 1:
        print(f"rank {r}: no relay summary"); bad += 1; continue
    got = ev[0]["applied_per_origin"]
    want = [0 if o == r else clocks for o in range(P)]
    if got != want:
        print(f"rank {r}: applied per origin {got}, want {want}"); bad += 1
sys.exit(1 if bad else 0)
PY
    then ok=0; fi
    for ((r = 1; r < P; r++)); do
      "$DIFF" "$d/m.0.sfb" "$d/m.$r.sfb" 1e-6 >/dev/null || { echo "replica $r differs"; ok=0; }
    done
    if [ $ok = 1 ]; then passes=$((passes+1)); else echo "FAIL: P=$P $topo"; fails=$((fails+1)); fi
    rm -rf "$d"
  done
done
echo "$passes passed, $fails failed"
[ $fails = 0 ]
