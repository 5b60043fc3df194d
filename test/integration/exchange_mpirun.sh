#!/usr/bin/env bash
# The transport exchange launched by mpirun (PMIx bootstrap), P = 2 and 4,
# shm and tcp. Skipped (77) without mpirun.
set -uo pipefail
EX=$1
command -v mpirun >/dev/null || { echo "mpirun not found: skipped"; exit 77; }
extra=()
[ "$(id -u)" = 0 ] && extra+=(--allow-run-as-root)
fails=0; passes=0
for p in shm tcp; do
  for n in 2 4; do
    if timeout 100 mpirun -n $n --oversubscribe "${extra[@]}" --mca btl self,tcp "$EX" --provider $p --bad; then
      passes=$((passes+1))
    else
      echo "FAIL: mpirun -n $n exchange --provider $p"; fails=$((fails+1))
    fi
  done
done
echo "$passes passed, $fails failed"
[ $fails = 0 ]
