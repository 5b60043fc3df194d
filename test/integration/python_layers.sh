#!/usr/bin/env bash
# test/python/job_layers.py (Job.broadcast, publish_one, publish_dense, 260
# matrices, drain exact at staleness 0) on 3 ranks under `sfb launch`;
# skipped (77) without a python3 that has numpy, or under ASan.
# Usage: python_layers.sh SFB RUN_SH SCRIPT
set -u
SFB=$1; RUN=$2; SCRIPT=$3
"$RUN" --check || exit 77
exec timeout 100 "$SFB" launch -n 3 -- "$RUN" "$SCRIPT"
