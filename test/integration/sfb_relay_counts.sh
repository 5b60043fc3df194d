#!/usr/bin/env bash
# Runtime traffic against `sfb topo`'s prediction, P = 8 and 16, halton:
#  * --flush clock: from clock diameter−1 on (the pipeline is full), every
#    rank sends per clock exactly messages_per_node data messages and
#    bytes_per_node bytes (heartbeats excluded: data_msgs / data_bytes);
#  * --flush eager: over the run every rank sends exactly P−1 frames per
#    clock (bytes = frames·B + 64·bundles), in between links_used and P−1
#    messages per clock on average: the bounds `sfb topo --json` states
#    (eager_bounds).
# B, the SF frame size, is read from clock 0 of the clock-flushed run (own
# frames only, sent bare); the eager run has the same shapes.
# Usage: sfb_relay_counts.sh SFB
set -uo pipefail
SFB=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0; passes=0; clocks=8
for P in 8 16; do
  diam=$("$SFB" topo --nodes $P --topology halton --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["diameter"])')
  for flush in clock eager; do
    d="$tmp/$flush.$P"
    s=0; [ $flush = clock ] && s=$((diam - 1))
    if ! timeout 100 "$SFB" run -n $P --data synth:k=3,d=8,n=$((P * 64)),seed=5 --batch 4 \
         --clocks $clocks --staleness $s --topology halton --flush $flush --eval-every 0 -q \
         --out-dir "$d" >/dev/null 2>"$tmp/err"; then
      echo "FAIL: P=$P $flush: run failed"; tail -5 "$tmp/err"; fails=$((fails+1)); continue
    fi
    # clock mode sends clock 0's own frames at boundary 0, after the frame
    # was queued (an eager rank's clock-0 row may come before its own send)
    [ $flush = clock ] && B=$(python3 -c 'import json,sys
c=[json.loads(l) for l in open(sys.argv[1]) if l.startswith("{\"rank\"")][0]
print(c["data_bytes"] // c["data_msgs"])' "$d/metrics.0.jsonl")
    "$SFB" topo --nodes $P --topology halton --flush $flush --sf-bytes "$B" --json > "$d/topo.json"
    if python3 - "$P" "$clocks" "$flush" "$d" "$B" <<'PY'
import json, sys
P, clocks, flush, d, B = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
topo = json.load(open(f"{d}/topo.json"))
bad = 0
for r in range(P):
    lines = [json.loads(l) for l in open(f"{d}/metrics.{r}.jsonl")]
    cl = [x for x in lines if "clock" in x and "data_msgs" in x]
    relay = [x for x in lines if x.get("event") == "relay"][0]
    if flush == "clock":
        for x in cl:
            if x["clock"] < topo["diameter"] - 1: continue
            got = (x["data_msgs"], x["data_bytes"])
            want = (topo["messages_per_node"], topo["bytes_per_node"])
            if got != want:
                print(f"rank {r} clock {x['clock']}: (msgs, bytes) {got}, sfb topo {want}"); bad += 1
    else:
        eb = topo["eager_bounds"]  # what `sfb topo` states a run must stay within
        frames, rem = divmod(relay["data_bytes"] - topo["bundle_header"] * relay["bundles"], B)
        per_clock = relay["data_msgs"] / clocks
        if rem or frames != eb["frames_per_node"] * clocks:
            print(f"rank {r}: {frames} frames (+{rem} B), want {eb['frames_per_node'] * clocks}"); bad += 1
        lo, hi = eb["messages_per_node_min"], eb["messages_per_node_max"]
        if not lo <= per_clock <= hi:
            print(f"rank {r}: {per_clock} msgs/clock outside [{lo}, {hi}]"); bad += 1
    if r == 0:
        total = sum(x["data_msgs"] for x in cl)
        print(f"P={P} {flush}: B={B}, rank 0 sent {total / clocks:.2f} msgs/clock "
              f"(sfb topo: {topo['messages_per_node']}), "
              f"{sum(x['data_bytes'] for x in cl) / clocks:.0f} B/clock "
              f"(sfb topo: {topo['bytes_per_node']})")
sys.exit(1 if bad else 0)
PY
    then passes=$((passes+1)); else echo "FAIL: P=$P $flush"; fails=$((fails+1)); fi
  done
done
# --flush clock moves a frame one hop per clock: SSP with s < diameter−1
# would deadlock, so it is refused with the reason.
out=$(timeout 30 "$SFB" run -n 8 --data synth:k=3,d=8,n=400 --clocks 2 --topology halton \
      --flush clock --staleness 0 --eval-every 0 -q --out-dir "$tmp/refuse" 2>&1)
if [ $? != 0 ] && printf '%s' "$out" | grep -q "staleness >= diameter - 1"; then
  passes=$((passes+1)); else echo "FAIL: --flush clock with s=0 not refused: $out"; fails=$((fails+1)); fi
echo "$passes passed, $fails failed"
[ $fails = 0 ]
