#!/usr/bin/env bash
# OpenBLAS's kernels (src/factor/blas.c, src/cli/main.c): where OpenBLAS
# fell back to its generic kernels on a processor it does not know, the
# programs `sfb launch` starts and the workers of `sfb run` run those the
# processor has (OPENBLAS_CORETYPE set for them), and rank 0 says so; a set
# OPENBLAS_CORETYPE is the user's and stays; a process started otherwise
# is warned. Where OpenBLAS knows the processor, nothing changes.
# Usage: blas_kernels.sh SFB RUN_PY   (SFB_LIB: the libsfb to load)
set -uo pipefail
SFB=$1; PY=$2
tmp=$(mktemp -d)
cleanup() { pkill -9 -f "$tmp" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fails=0; passes=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
"$PY" --check || exit 77
export PYTHONPATH="$(cd "$(dirname "$0")/../../python" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
cat >"$tmp/k.py" <<'PYEOF'
import os, sfb
running, better = sfb.blas_kernels()
print("running=%s better=%s env=%s" % (running, better, os.environ.get("OPENBLAS_CORETYPE", "-")))
PYEOF
unset OPENBLAS_CORETYPE SFB_BLAS_FOUND
read -r running0 better0 _ < <("$PY" "$tmp/k.py" | tr ' ' '\n' | sed 's/.*=//' | tr '\n' ' ')
echo "this process: OpenBLAS runs $running0; better: $better0"
check "running kernel named ($running0)" "[ -n '$running0' ] && [ '$running0' != unknown ]"

# sfb launch: every rank runs the better kernels (or OpenBLAS's own, unchanged)
timeout 60 "$SFB" launch -n 2 -- "$PY" "$tmp/k.py" >"$tmp/launch.out" 2>&1; rc=$?
check "launch: exit 0 (rc=$rc)" "[ $rc = 0 ]"
if [ "$better0" != None ]; then want="running=$better0 better=None env=$better0"
else want="running=$running0 better=None env=-"; fi
for r in 0 1; do
  check "launch: rank $r: $want" "grep -qx '\[$r\] $want' '$tmp/launch.out'"
done

# the user's OPENBLAS_CORETYPE stays, even one naming the generic kernels
OPENBLAS_CORETYPE=Prescott timeout 60 "$SFB" launch -n 1 -- "$PY" "$tmp/k.py" \
  >"$tmp/kept.out" 2>&1; rc=$?
mine=$(OPENBLAS_CORETYPE=Prescott "$PY" "$tmp/k.py")
check "OPENBLAS_CORETYPE=Prescott kept: '$mine' (rc=$rc)" \
  "[ $rc = 0 ] && grep -qx '\[0\] $mine' '$tmp/kept.out' && grep -q 'env=Prescott' '$tmp/kept.out'"

# sfb run: rank 0 names the kernels sfb chose, and only when it chose them
job=(--data synth:k=4,d=20,n=400,seed=1 --clocks 4 --eval-every 0)
timeout 60 "$SFB" run -n 2 "${job[@]}" --out-dir "$tmp/run" >"$tmp/run.log" 2>&1; rc=$?
check "run: exit 0 (rc=$rc)" "[ $rc = 0 ]"
if [ "$better0" != None ]; then
  check "run: says it chose $better0 over $running0" \
    "grep -q 'OpenBLAS runs its $better0 kernels, chosen by sfb: OpenBLAS took this processor for a $running0' '$tmp/run.log'"
else
  check "run: says nothing of OpenBLAS" "! grep -q OpenBLAS '$tmp/run.log'"
fi
OPENBLAS_CORETYPE=$running0 timeout 60 "$SFB" run -n 2 "${job[@]}" --out-dir "$tmp/run2" \
  >"$tmp/run2.log" 2>&1; rc=$?
check "run, OPENBLAS_CORETYPE set: exit 0, says nothing of OpenBLAS (rc=$rc)" \
  "[ $rc = 0 ] && ! grep -q OpenBLAS '$tmp/run2.log'"

# a process not started by sfb: its job warns where the kernels are generic
"$PY" -c 'import sfb; sfb.Job().close()' >"$tmp/py.log" 2>&1; rc=$?
if [ "$better0" != None ]; then
  check "python job: warns, naming OPENBLAS_CORETYPE=$better0 (rc=$rc)" \
    "[ $rc = 0 ] && grep -q 'OpenBLAS runs its generic $running0 kernels.*OPENBLAS_CORETYPE=$better0' '$tmp/py.log'"
else
  check "python job: no warning (rc=$rc)" "[ $rc = 0 ] && ! grep -q OpenBLAS '$tmp/py.log'"
fi

echo "blas_kernels: $passes passed, $fails failed"
[ $fails = 0 ]
