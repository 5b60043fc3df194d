#!/usr/bin/env bash
# `mpirun -n 4 sfb worker ...` with the tcp provider reaches the accuracy of
# the local run. Skipped (77) without mpirun.
# Usage: accuracy_mpirun.sh SFB MIN_PERCENT
set -uo pipefail
SFB=$1; min=$2
command -v mpirun >/dev/null || { echo "mpirun not found: skipped"; exit 77; }
extra=()
[ "$(id -u)" = 0 ] && extra+=(--allow-run-as-root)
exec "$(dirname "$0")/accuracy.sh" mpirun "$min" -n 4 --oversubscribe "${extra[@]}" \
  "$SFB" worker --model mlr --data fashion-mnist --staleness 2 --provider tcp -q
