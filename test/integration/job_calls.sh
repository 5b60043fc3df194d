#!/usr/bin/env bash
# Ranks in different collective calls: test/python/job_calls.py on 3 ranks
# under `sfb launch` — named on every rank at once (sfb.MismatchError);
# ranks waiting for a clock of the rank in the collective, or for the sums
# it serves as an FMS owner and has not formed, fail at once; a
# rank in a long step is said for what it is at the bootstrap timeout;
# skipped (77) without a python3 that has numpy.
# Usage: job_calls.sh SFB RUN_SH SCRIPT
set -u
SFB=$1; RUN=$2; SCRIPT=$3
"$RUN" --check || exit 77
exec timeout 60 "$SFB" launch -n 3 -- "$RUN" "$SCRIPT"
