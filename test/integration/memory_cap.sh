#!/usr/bin/env bash
# Under an address-space limit (ulimit -v) `sfb run` ends by itself with a
# message, and a signal stops it at any point of its start-up. Before:
# OpenBLAS, loaded with libsfb, maps a 128 MiB buffer for each of its
# threads and retries a failed mapping forever, so at 100-200 MB the
# launcher's fork waited for OpenBLAS's stuck thread (prefork handler) with
# SIGTERM blocked, and at 300 MB rank 0 spun in its first sgemm while the
# others waited; a SIGTERM during start-up could also run libinfinipath's
# handler, whose exit() deadlocked in libfabric's or OpenBLAS's destructor.
# Now: a clear error at start naming the limit and what is needed, exit 1;
# the CLI resets those handlers, so a signal stops it. Usage: memory_cap.sh SFB
set -uo pipefail
SFB=$1
tmp=$(mktemp -d)
trap 'pkill -9 -f "$tmp/" 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
now() { date +%s.%N; }
within() { awk "BEGIN{exit !($1 <= $2)}"; }
# (ldd's output read whole: under pipefail `ldd | grep -q` fails at random,
# grep leaving before ldd has written, which killed ldd with SIGPIPE)
if grep -q libasan <<<"$(ldd "$SFB" 2>/dev/null)"; then
  echo "skipped: ASan reserves terabytes of address space, no ulimit -v applies"; exit 77
fi
data=synth:k=10,d=200,n=2000
left() { pgrep -f "$tmp/$1" | wc -l; }

# 1. sfb run -n 2 at 100, 150, 200 and 300 MB: over within 30 s, exit 1,
# naming the limit and OpenBLAS's need; nothing left
for mb in 100 150 200 300; do
  t0=$(now)
  ( ulimit -v $((mb * 1000)); exec timeout -s KILL 40 "$SFB" run -n 2 --data $data --clocks 100 \
      --out-dir "$tmp/cap$mb" ) >"$tmp/cap$mb.out" 2>&1
  rc=$?
  dt=$(echo "$(now) - $t0" | bc)
  check "$mb MB: exit 1 (rc=$rc)" "[ $rc = 1 ]"
  check "$mb MB: over within 30 s ($dt s)" "within $dt 30"
  check "$mb MB: names the limit and the need" \
    "grep -Eq 'the address-space limit \(ulimit -v\) is [0-9]+ MiB and [0-9]+ MiB of it are mapped; OpenBLAS maps 128 MiB for each thread' '$tmp/cap$mb.out'"
  check "$mb MB: says what would do" "grep -Eq 'raise the limit to at least [0-9]+ MiB' '$tmp/cap$mb.out'"
  check "$mb MB: nothing left" "[ $(left cap$mb) = 0 ]"
  [ $rc = 1 ] || tail -5 "$tmp/cap$mb.out"
done

# 2. one worker of its own (an exec'd rank, world 1) under 250 MB: its own
# check at start, not a spin in its first sgemm
t0=$(now)
( ulimit -v 250000; exec env -u SFB_RANK timeout -s KILL 40 "$SFB" worker --data $data --clocks 5 \
    --out-dir "$tmp/w" ) >"$tmp/w.out" 2>&1
rc=$?; dt=$(echo "$(now) - $t0" | bc)
check "worker at 250 MB: exit 1 (rc=$rc)" "[ $rc = 1 ]"
check "worker at 250 MB: over within 30 s ($dt s)" "within $dt 30"
check "worker at 250 MB: names the limit" "grep -q 'sfb worker: error: cannot allocate BLAS' '$tmp/w.out'"

# 3. enough room: the job runs (the check refuses only what cannot work)
( ulimit -v 1000000; exec timeout -s KILL 60 "$SFB" run -n 2 --data $data --clocks 20 -q \
    --out-dir "$tmp/ok" ) >"$tmp/ok.out" 2>&1
rc=$?
check "1000 MB: the job runs (rc=$rc)" "[ $rc = 0 ]"
[ $rc = 0 ] || tail -5 "$tmp/ok.out"

# 4. SIGTERM at points of the start-up (loading, parsing, the BLAS check,
# libfabric's set-up, forking, the workers' rendezvous), with and without a
# limit: stopped within 5 s (by the signal, or by the error that came
# first), nothing left
for lim in unlimited 300000 1000000; do
  for d in 0.02 0.1 0.2 0.4 0.7 1.0; do
    tag="sig-$lim-$d"
    ( ulimit -v $lim; exec "$SFB" run -n 2 --data $data --clocks 100000 --debug-delay-ms 5 \
        --out-dir "$tmp/$tag" ) >"$tmp/$tag.out" 2>&1 &
    P=$!
    sleep $d
    kill -TERM $P 2>/dev/null
    t0=$(now)
    for _ in $(seq 200); do kill -0 $P 2>/dev/null || break; sleep 0.05; done
    dt=$(echo "$(now) - $t0" | bc)
    stopped=1; kill -0 $P 2>/dev/null && stopped=0
    kill -9 $P 2>/dev/null; wait $P; rc=$?
    check "$tag: stopped within 5 s (rc=$rc, $dt s)" "[ $stopped = 1 ] && within $dt 5 && [ $rc != 0 ]"
    sleep 0.2 # the workers' death signal (PR_SET_PDEATHSIG) is on its way
    check "$tag: nothing left" "[ $(left $tag) = 0 ]"
  done
done

echo "$passes passed, $fails failed"
[ $fails = 0 ]
