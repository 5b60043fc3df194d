#!/usr/bin/env bash
# 64 workers on one host, with default flags (so the progress policy and the
# liveness rule are chosen automatically: on a host with fewer CPUs than 64,
# ranks block instead of spinning and silence alone does not fail a job whose
# processes are all alive). The run must exit 0, every worker must have
# written its summary, and the metrics of every worker must prove SSP
# (ssp_check.py, staleness 0).
# Usage: scale64.sh SFB SSP_CHECK [P]
set -uo pipefail
SFB=$1; CHECK=$2; P=${3:-64}
tmp=$(mktemp -d)
cleanup() {
  [ -n "${run:-}" ] && kill -TERM "$run" 2>/dev/null && wait "$run" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
timeout -k 10 280 "$SFB" run -n "$P" --topology halton --data synth:k=10,d=100,n=20000,seed=1 \
  --clocks 100 --eval-every 0 -q --out-dir "$tmp/o" >"$tmp/run.log" 2>&1 &
run=$!
wait "$run"; rc=$?; run=
fails=0
if [ $rc != 0 ]; then echo "FAIL: sfb run -n $P exited $rc"; tail -n 20 "$tmp/run.log"; exit 1; fi
if grep -q "dead or silent" "$tmp/run.log"; then echo "FAIL: a rank was called dead or silent"; fails=1; fi
n=$(grep -l '"event":"summary"' "$tmp"/o/metrics.*.jsonl 2>/dev/null | wc -l)
[ "$n" = "$P" ] || { echo "FAIL: $n of $P workers wrote a summary"; fails=1; }
python3 "$CHECK" 0 "$tmp"/o/metrics.*.jsonl | tail -n 3 || fails=1
wall=$(grep -h '"event":"summary"' "$tmp/o/metrics.0.jsonl" | sed 's/.*"wall":\([0-9.e+-]*\).*/\1/')
echo "P=$P: 100 clocks in ${wall} s (rank 0)"
[ $fails = 0 ]
