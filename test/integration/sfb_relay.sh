#!/usr/bin/env bash
# Relays deliver exactly once: for every P given and both overlays, a few
# clocks on a tiny synth model; every rank's "relay" summary must show
# exactly `clocks` updates applied from every other origin (none lost, none
# twice, none from itself), and every replica must equal rank 0's. Jobs run
# one at a time: two concurrent shm jobs on one host can fail to open the
# transport (EBUSY from the shm provider).
# Usage: sfb_relay.sh SFB MODEL_DIFF P...
set -uo pipefail
SFB=$1; DIFF=$2; shift 2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
clocks=3; fails=0; passes=0
one() { # P TOPOLOGY: 0 when the job delivered exactly once
  local P=$1 topo=$2 d="$tmp/$2.$1" ok=1 r
  if ! timeout 60 "$SFB" run -n "$P" --data synth:k=3,d=8,n=$((P * 40)),seed=3 --batch 2 \
       --clocks $clocks --topology "$topo" --eval-every 0 -q --model-out "$d/m.%r.sfb" \
       --out-dir "$d" >/dev/null 2>"$d.err"; then
    echo "P=$P $topo: run failed"; tail -5 "$d.err"; return 1
  fi
  python3 - "$P" "$clocks" "$d" <<'PY' || ok=0
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
  # every replica against rank 0's, in one model_diff (one line per replica)
  local reps=() out
  for ((r = 1; r < P; r++)); do reps+=("$d/m.$r.sfb"); done
  if ! out=$("$DIFF" "$d/m.0.sfb" "${reps[@]}" 1e-6 2>&1); then
    echo "P=$P $topo: a replica differs from rank 0's:"; printf '%s\n' "$out"; ok=0
  fi
  rm -rf "$d"
  [ $ok = 1 ]
}
for P in "$@"; do
  for topo in halton halton-classic; do
    if one "$P" $topo; then passes=$((passes+1)); else fails=$((fails+1)); fi
  done
done
echo "$passes passed, $fails failed"
[ $fails = 0 ]
