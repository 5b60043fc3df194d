#!/usr/bin/env bash
# Job.attach(ordered=True): test/python/job_ordered.py on 4 ranks under
# `sfb launch` — replicas bit-identical after every engine (sfb over full
# and Halton, in parts, fms, a per-matrix mix, a replan halfway; a larger
# max_s halfway, "+", beside some); skipped (77) without a
# python3 that has numpy, or under ASan.
# Usage: job_ordered.sh SFB RUN_SH SCRIPT
set -u
SFB=$1; RUN=$2; SCRIPT=$3
"$RUN" --check || exit 77
exec timeout 120 "$SFB" launch -n 4 -- "$RUN" "$SCRIPT" sfb sfb:halton+ sfb:full:magnitude fms+ \
  fms,sfb,fms,sfb,fms,sfb "sfb,fms,sfb,fms,sfb,fms>fms,sfb,fms,sfb,fms,sfb:halton+"
