#!/usr/bin/env bash
# The emulated cluster at 16 hosts (scripts/netns-cluster -n 16, 100 Mbit/s
# links, tcp): halton with --flush clock and full with eager flushing both
# finish; every rank applied every other origin's update of every clock; the
# clock-flushed run's data messages per rank and clock equal what `sfb topo`
# predicts (one bundle per used link, steady clocks); a job whose rank 9
# fails still tears all 16 namespaces down and reports that rank; nothing of
# the cluster is left behind (its own namespaces and bridge, named in its
# cluster.json). Skips (77) when not root or no network
# namespaces.
# Usage: netns_cluster_16.sh NETNS_CLUSTER SFB
set -uo pipefail
NC=$1; SFB=$2
. "$(dirname "$0")/netns_lib.sh"
P=16 CLOCKS=12
args=(--model mlr --data synth:k=4,d=50,n=800,seed=5 --batch 2 --clocks $CLOCKS --eval-every 0 -q
      --peer-timeout 60)
run() { # name, extra worker args...
  local name=$1; shift
  timeout 500 "$NC" -n $P --rate 100mbit --sfb "$SFB" --timeout 450 --out-dir "$tmp/$name" -- \
    "${args[@]}" "$@" >"$tmp/$name.log" 2>&1 \
    || { echo "FAIL: netns-cluster -n $P $*"; tail -n 20 "$tmp/$name.log"; return 1; }
}
check run halton --topology halton --flush clock --staleness 2
check run full --topology full
# every rank: a summary, the tcp provider, every other origin applied through clock CLOCKS-1
applied_all() { # dir
  python3 - "$1" $P $CLOCKS <<'PY'
import json, sys
d, P, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
bad = []
for r in range(P):
    ev = [json.loads(l) for l in open(f"{d}/metrics.{r}.jsonl") if '"event"' in l]
    s = [e for e in ev if e["event"] == "summary"]
    if not s or s[0]["clocks"] != T:
        bad.append(f"rank {r}: no summary of {T} clocks")
    relay = [e for e in ev if e["event"] == "relay"]
    if relay:
        a = relay[0]["applied_per_origin"]
        if any(a[o] != T for o in range(P) if o != r):
            bad.append(f"rank {r}: applied per origin {a}")
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
PY
}
check applied_all "$tmp/halton"
check applied_all "$tmp/full"
for r in 0 9 15; do check grep -q 'provider tcp' "$tmp/halton/worker.$r.log"; done
# --flush clock: after the first `diameter` clocks every rank sends exactly
# one bundle per used link per clock: sfb topo's messages_per_node
counts_match() {
  python3 - "$tmp/halton" $P "$SFB" <<'PY'
import json, subprocess, sys
d, P, sfb = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t = json.loads(subprocess.run([sfb, "topo", "--json", "--nodes", str(P), "--topology", "halton",
                               "--flush", "clock"], stdout=subprocess.PIPE, text=True, check=True).stdout)
want, diam = t["messages_per_node"], t["diameter"]
got = set()
for r in range(P):
    rows = [json.loads(l) for l in open(f"{d}/metrics.{r}.jsonl") if l.startswith('{"rank"')]
    got |= {x["data_msgs"] for x in rows[diam:-diam]}
print(f"data messages per rank and steady clock: {sorted(got)}, sfb topo: {want}")
sys.exit(0 if got == {want} else 1)
PY
}
check counts_match
# a failing rank: the job fails naming it and the namespaces still go
timeout 120 "$NC" -n $P --rate 100mbit --sfb "$SFB" --timeout 60 --out-dir "$tmp/bad" --exec -- \
  sh -c '[ "$SFB_RANK" != 9 ] || exit 3' >"$tmp/bad.log" 2>&1
check [ $? = 3 ]
check grep -q 'rank 9 exited 3' "$tmp/bad.log"
for d in halton full bad; do check leftover "$tmp/$d"; done
echo "$passes passed, $fails failed"
[ $fails = 0 ]
