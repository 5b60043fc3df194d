#!/usr/bin/env python3
"""Proves the SSP guarantee from the metrics of a run.

usage: ssp_check.py STALENESS METRICS_FILE...

For every worker and every clock t it checks
  1. min_applied >= t - s - 1 (model-state guarantee: every origin's updates
     with clock <= t-s-1 were applied before clock t was computed), and
  2. bounded clock difference: when a worker began computing clock t (t_begin,
     CLOCK_MONOTONIC, shared by the processes of one host), every other worker
     had already finished clock t - s - 1 (t_publish: it was at clock t - s or
     later), so no worker ran more than s clocks ahead of the slowest.
Prints "N passed, N failed" and exits non-zero on any violation.
"""
import bisect
import json
import sys

s = int(sys.argv[1])
starts = {}  # rank -> t_begin by clock
pubs = {}  # rank -> t_publish by clock
minapp = {}
for path in sys.argv[2:]:
    for line in open(path):
        # only the per-clock lines are needed here (events, such as eval,
        # are valid JSON too: a value that is not a number is written null)
        if line.startswith('{"event"'):
            continue
        r = json.loads(line)
        starts.setdefault(r["rank"], {})[r["clock"]] = r["t_begin"]
        pubs.setdefault(r["rank"], {})[r["clock"]] = r["t_publish"]
        minapp.setdefault(r["rank"], {})[r["clock"]] = r["min_applied"]

fail = checks = 0
ranks = sorted(starts)
clocks = {rk: sorted(starts[rk]) for rk in ranks}
for rk in ranks:
    for t in clocks[rk]:
        checks += 1
        if s >= 0 and minapp[rk][t] < t - s - 1:
            fail += 1
            print(f"FAIL rank {rk} clock {t}: min applied {minapp[rk][t]} < {t - s - 1}")
if s >= 0:
    for rk in ranks:
        for t in clocks[rk]:
            tb = starts[rk][t]
            for other in ranks:
                if other == rk:
                    continue
                checks += 1
                need = t - s - 1
                if need < 0:
                    continue
                done = pubs[other].get(need)
                if done is None or done > tb:
                    fail += 1
                    print(f"FAIL rank {rk} began clock {t} at {tb:.6f} before rank {other} "
                          f"finished clock {need} ({done})")
print(f"ssp s={s}: {len(ranks)} workers, {sum(len(c) for c in clocks.values())} clocks checked")
print(f"{checks - fail} passed, {fail} failed")
sys.exit(1 if fail or not ranks else 0)
