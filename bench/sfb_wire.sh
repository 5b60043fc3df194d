#!/usr/bin/env bash
# bench/sfb_wire: bytes SFB puts on the wire per clock, measured by the
# transport's counters (everything sent: SF frames, headers, heartbeats),
# divided by the formula payload (P−1)·S·(K+D)·4. K = D = 1024 (D includes
# MLR's bias column), S = 32, P = 4. Fails if the ratio exceeds 1.02.
# Usage: sfb_wire.sh SFB [--quick]
set -uo pipefail
SFB=$1; quick=${2:-}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [ "$quick" = --quick ]; then data="synth:k=16,d=15,n=2048,seed=1"; clocks=8
else data="synth:k=1024,d=1023,n=8192,seed=1"; clocks=40; fi
"$SFB" run -n 4 --data "$data" --batch 32 --clocks $clocks --eval-every 0 -q --lr 0.1 \
  --out-dir "$tmp" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
python3 - "$quick" "$tmp"/metrics.*.jsonl <<'PY'
import json, sys
quick = sys.argv[1] == "--quick"
ratios = []
for path in sys.argv[2:]:
    for line in open(path):
        r = json.loads(line)
        if r.get("event") == "summary":
            ratios.append((r["rank"], r["bytes_sent_per_clock"], r["formula_bytes_per_clock"]))
print("# name        size               ranks  bytes/clock  formula  ratio")
worst = 0
for rank, got, want in sorted(ratios):
    worst = max(worst, got / want)
    print(f"sfb_wire      rank {rank}             1      {got:.0f}  {want:.0f}  {got / want:.4f}")
print(f"sfb_wire measured/formula (worst rank) = {worst:.4f}  (goal <= 1.02)")
sys.exit(0 if quick or worst <= 1.02 else 1)
PY
