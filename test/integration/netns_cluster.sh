#!/usr/bin/env bash
# The emulated cluster (scripts/netns-cluster): P = 3 namespaces on 100 Mbit/s
# links, tcp provider, env rendezvous. SFB and FMS jobs both finish, every
# worker writes its metrics, the two reach the same parameters (s = 0), FMS
# moves more bytes than SFB (at these shapes S·P < 2KD/(K+D)), the NICs
# queue as asked (--egress fair: an HTB class and filter per peer; fifo: a
# token bucket), --tcp-cc sets every namespace's TCP congestion control,
# --cores-per-host binds each host's worker to CPUs of its own, and nothing
# of the cluster is left behind.
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
# The NIC of rank 1: fair, one class per peer (ranks 0 and 2, not itself),
# each capped at the link rate, and a filter sending the peer's address to it.
nic() { # egress
  timeout 60 "$NC" -n 3 --rate 100mbit --egress "$1" --exec --out-dir "$tmp/nic-$1" -- \
    sh -c 'tc qdisc show dev eth0; tc class show dev eth0; tc filter show dev eth0' >/dev/null 2>&1
}
check nic fair
log=$tmp/nic-fair/worker.1.log
check grep -q '^qdisc htb 1: root' "$log"
check [ "$(grep -c '^class htb 1:1[02] parent 1:1 .*ceil 100Mbit' "$log")" = 2 ]
check grep -q 'match 0a4d0001/ffffffff' "$log"
check grep -q 'match 0a4d0003/ffffffff' "$log"
check [ "$(grep -c 'match 0a4d0002/ffffffff' "$log")" = 0 ]
check grep -q '"egress":"fair"' "$tmp/nic-fair/cluster.json"
check nic fifo
check grep -q '^qdisc tbf .* root .*rate 100Mbit' "$tmp/nic-fifo/worker.1.log"
check [ "$(grep -c '^class htb' "$tmp/nic-fifo/worker.1.log")" = 0 ]
# --tcp-cc: every namespace's TCP runs it (reno: built into every kernel),
# cluster.json says so; without it the host's own; an unknown one refused
timeout 60 "$NC" -n 2 --tcp-cc reno --exec --out-dir "$tmp/cc" -- \
  sysctl -n net.ipv4.tcp_congestion_control >/dev/null 2>&1
check grep -qx reno "$tmp/cc/worker.0.log"
check grep -qx reno "$tmp/cc/worker.1.log"
check grep -q '"tcp_cc":"reno"' "$tmp/cc/cluster.json"
check grep -q "\"tcp_cc\":\"$(sysctl -n net.ipv4.tcp_congestion_control)\"" "$tmp/nic-fair/cluster.json"
timeout 10 "$NC" -n 2 --tcp-cc no-such-cc --exec -- true >"$tmp/bad-cc.log" 2>&1
check [ $? = 2 ]
check grep -q "tcp-cc no-such-cc is not available here (available: .*reno" "$tmp/bad-cc.log"
# one the namespaces may not take (available, not allowed) is refused by name
# at once (the host's allowed list narrowed for the run, then restored)
allowed=$(sysctl -n net.ipv4.tcp_allowed_congestion_control)
for cc in $(sysctl -n net.ipv4.tcp_available_congestion_control); do
  case " reno $(sysctl -n net.ipv4.tcp_congestion_control) " in *" $cc "*) continue ;; esac
  trap 'sysctl -qw net.ipv4.tcp_allowed_congestion_control="$allowed"; rm -rf "$tmp"' EXIT
  sysctl -qw net.ipv4.tcp_allowed_congestion_control="$(for a in $allowed; do
    [ "$a" = "$cc" ] || printf '%s ' "$a"; done)"
  timeout 10 "$NC" -n 2 --tcp-cc "$cc" --exec -- true >"$tmp/restricted-cc.log" 2>&1
  rc=$?
  sysctl -qw net.ipv4.tcp_allowed_congestion_control="$allowed"
  check [ $rc = 2 ]
  check grep -q "tcp-cc $cc is not allowed in a network namespace here" "$tmp/restricted-cc.log"
  break
done
# --cores-per-host: rank r's worker on the r-th CPU of those given (one
# each where there are two), cluster.json says so; more than there are
# refused, naming the count
ncpu=$(nproc)
if [ "$ncpu" -ge 2 ]; then
  timeout 60 "$NC" -n 2 --cores-per-host 1 --exec --out-dir "$tmp/cores" -- \
    sh -c 'grep Cpus_allowed_list /proc/self/status' >/dev/null 2>&1
  read -r c0 c1 < <(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0))[:2])')
  check grep -qP "^Cpus_allowed_list:\t$c0\$" "$tmp/cores/worker.0.log"
  check grep -qP "^Cpus_allowed_list:\t$c1\$" "$tmp/cores/worker.1.log"
  check grep -q '"cores_per_host":1' "$tmp/cores/cluster.json"
fi
check grep -q '"cores_per_host":0' "$tmp/nic-fair/cluster.json"
timeout 10 "$NC" -n 2 --cores-per-host "$ncpu" --exec -- true >"$tmp/bad-cores.log" 2>&1
check [ $? = 2 ]
check grep -q "cores-per-host $ncpu needs $((2 * ncpu)) CPUs for 2 hosts; this machine gives $ncpu" \
  "$tmp/bad-cores.log"
timeout 10 "$NC" -n 3 --egress sideways -- x >"$tmp/bad-egress.log" 2>&1
check [ $? = 2 ]
check grep -q "egress must be fair or fifo" "$tmp/bad-egress.log"
# a failing job still tears everything down and reports the failure
timeout 60 "$NC" -n 3 --rate 100mbit --sfb "$SFB" --timeout 30 --out-dir "$tmp/bad" -- \
  --model mlr --data synth:k=8,d=100,n=3000,seed=3 --lr -1 >/dev/null 2>&1
check [ $? != 0 ]
for d in sfb fms bad nic-fair nic-fifo cc; do check leftover "$tmp/$d"; done
[ "$ncpu" -ge 2 ] && check leftover "$tmp/cores"
echo "$passes passed, $fails failed"
[ $fails = 0 ]
