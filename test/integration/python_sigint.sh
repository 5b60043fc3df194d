#!/usr/bin/env bash
# Ctrl-C in a Python program that uses sfb is a KeyboardInterrupt (its
# except and finally blocks run), with libsfb loaded and with a job's fabric
# open: libfabric, loaded when the first transport needs it
# (src/transport/fi_lazy.c), leaves the process's signal dispositions as it
# found them (the constructors of libinfinipath and libpsm2, which it pulls
# in, install handlers that exit(1)). And a process that opens no fabric
# does not load libfabric at all.
# Usage: python_sigint.sh SFB RUN_PY JOB_SIGINT_PY
set -uo pipefail
SFB=$1; PY=$2; JOB=$3
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
"$PY" --check || exit 77
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

timeout 60 "$PY" "$JOB" loaded >"$tmp/loaded" 2>&1; rc=$?
cat "$tmp/loaded"
check "libsfb loaded: SIGINT is a KeyboardInterrupt (rc=$rc)" \
  "[ $rc = 0 ] && grep -q '^ok KeyboardInterrupt with libsfb loaded' '$tmp/loaded'"
timeout 60 "$SFB" launch -n 2 -- "$PY" "$JOB" job >"$tmp/job" 2>&1; rc=$?
cat "$tmp/job"
check "a job's fabric open: SIGINT is a KeyboardInterrupt on both ranks (rc=$rc)" \
  "[ $rc = 0 ] && [ \$(grep -c '^\[[01]\] ok KeyboardInterrupt with the fabric open (A = 2)' '$tmp/job') = 2 ]"
timeout 60 "$SFB" launch -n 2 -- "$PY" "$JOB" fork >"$tmp/fork" 2>&1; rc=$?
cat "$tmp/fork"
check "a forked worker ended by SIGTERM (terminate()) leaves its parent's shm region and job (rc=$rc)" \
  "[ $rc = 0 ] && [ \$(grep -c '^\[[01]\] ok forked worker ended by SIGTERM (-15): regions \[.sfb_.*A = 4' '$tmp/fork') = 2 ]"
LD_DEBUG=files "$SFB" --version >"$tmp/version" 2>&1; rc=$?
check "sfb --version loads no libfabric (rc=$rc)" \
  "[ $rc = 0 ] && grep -q 'sfb ' '$tmp/version' && ! grep -q 'libfabric' '$tmp/version'"

echo "$passes passed, $fails failed"
[ $fails = 0 ]
