#!/usr/bin/env bash
# bench/tcp_rounds.py (plain TCP in an overlay's pattern) on a 3-namespace
# cluster at 100 Mbit/s: it finishes, rank 0 reports its median round, and
# the round is no faster than the links allow (each rank sends 375 000 B a
# round: 30 ms at the rate; at least 15 ms however much bucket credit the
# links lend) and no slower than 2 s; nothing of the cluster is left behind.
# Skips (77) when not root or network namespaces are unavailable.
# Usage: tcp_rounds.sh NETNS_CLUSTER TCP_ROUNDS_PY
set -uo pipefail
NC=$1; PY=$2
. "$(dirname "$0")/netns_lib.sh"
timeout 120 "$NC" -n 3 --rate 100mbit --timeout 100 --out-dir "$tmp/c" --exec -- \
  env OFFS=1,2 SIZES=125000,250000 ROUNDS=12 python3 "$PY" >"$tmp/log" 2>&1
rc=$?
check [ $rc = 0 ]
ms=$(sed -n 's/.*median round \([0-9.]*\) ms over 12 rounds.*/\1/p' "$tmp/log")
[ -n "$ms" ] || { echo "FAIL: no median round in the output:"; tail -n 5 "$tmp/log"; fails=$((fails+1)); }
echo "median round: ${ms:-none} ms"
check awk -v m="${ms:-0}" 'BEGIN { exit !(m >= 15 && m <= 2000) }'
check leftover "$tmp/c"
echo "$passes passed, $fails failed"
[ $fails = 0 ]
