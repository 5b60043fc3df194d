#!/usr/bin/env python3
"""Stragglers: what stale-synchronous parallelism buys the fast workers.

P = 4 workers (sfb run, local), MLR on synth: data, one rank slowed by a
factor (--debug-slow-rank/--debug-slow-factor: after its real compute it
sleeps (factor - 1) times as long), the same job at s = 0 (BSP) and s = 3.
For each run it reports the throughput of the *other* ranks:

  run      their samples / the time they took to compute all their clocks
           (first t_begin to last t_publish; the final drain excluded),
  steady   their samples/s over the middle half of the clocks,
  pace     one of them against the slow rank (1.00: held to its speed),

and the ratios s=3 / s=0 measured in the same invocation. Then the same with
transient stragglers instead (every rank sleeps a random 0..--jitter-ms ms
per clock), the case SSP is made for.

Usage: bench/straggler.py [--sfb PATH] [--smoke] [--clocks C] [--factor F]
         [--k K] [--d D] [--batch S] [--jitter-ms MS] [--out DIR] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKERS = 4


def load(path):
    clocks = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "event" not in r and "clock" in r:
                clocks.append(r)
    return clocks


def run(a, out, staleness, slow):
    cmd = [a.sfb, "run", "-n", str(WORKERS),
           "--data", f"synth:k={a.k},d={a.d},n={max(4 * a.batch * a.clocks, 20000)},seed=3",
           "--batch", str(a.batch), "--clocks", str(a.clocks), "--staleness", str(staleness),
           "--eval-every", "0", "-q", "--out-dir", out, "--model-out", os.path.join(out, "m.%r.sfb")]
    if slow:
        cmd += ["--debug-slow-rank", str(WORKERS - 1), "--debug-slow-factor", str(a.factor)]
    else:
        cmd += ["--debug-delay-ms", str(a.jitter_ms)]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-3000:])
        raise SystemExit(f"straggler: sfb run exited {p.returncode}: {' '.join(cmd)}")
    per = [load(os.path.join(out, f"metrics.{r}.jsonl")) for r in range(WORKERS)]
    if any(len(c) != a.clocks for c in per):
        raise SystemExit(f"straggler: a worker did not log {a.clocks} clocks in {out}")
    fast = range(WORKERS - 1) if slow else range(WORKERS)
    run_rate = steady = 0.0
    lo, hi = a.clocks // 4, 3 * a.clocks // 4
    for r in fast:
        c = per[r]
        run_rate += a.batch * a.clocks / (c[-1]["t_publish"] - c[0]["t_begin"])
        steady += a.batch * (hi - lo) / (c[hi]["t_begin"] - c[lo]["t_begin"])
    wait = sum(x["wait_s"] for r in fast for x in per[r]) / len(fast)
    slow_rank = per[WORKERS - 1]
    slow_rate = a.batch * a.clocks / (slow_rank[-1]["t_publish"] - slow_rank[0]["t_begin"])
    # a fast rank's pace against the slow rank's in the same run: 1.0 means
    # the fast ranks were held to the slow rank's speed
    pace = run_rate / len(fast) / slow_rate
    return {"run": run_rate, "steady": steady, "wait_s": wait, "slow_rank": slow_rate, "pace": pace}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sfb", default=os.path.join(ROOT, "build", "src", "cli", "sfb"))
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--clocks", type=int, default=200)
    ap.add_argument("--factor", type=float, default=3.0)
    ap.add_argument("--k", type=int, default=128)
    ap.add_argument("--d", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--jitter-ms", type=float, default=20.0)
    ap.add_argument("--out", default=os.path.join("bench-out", "straggler"))
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.smoke:
        a.clocks, a.k, a.d, a.batch, a.jitter_ms, a.repeat = 24, 10, 64, 8, 4.0, 1
    if not os.access(a.sfb, os.X_OK):
        raise SystemExit(f"straggler: {a.sfb} is not an executable (build first)")

    runs = {}
    for case, slow in (("slow", True), ("jitter", False)):
        for i in range(a.repeat):
            for st in (0, 3):
                runs.setdefault((case, st), []).append(
                    run(a, os.path.join(a.out, f"{case}-s{st}-{i}"), st, slow))

    def med(case, st, key):
        return statistics.median(r[key] for r in runs[(case, st)])

    what = {"slow": f"rank {WORKERS - 1} {a.factor:g}x slower",
            "jitter": f"random 0..{a.jitter_ms:g} ms per clock on every rank"}
    print(f"P = {WORKERS}, MLR synth K = {a.k}, D = {a.d}, S = {a.batch}, {a.clocks} clocks, "
          f"medians of {a.repeat}")
    print(f"{'case':<42} {'s':>2} {'run samples/s':>14} {'steady':>10} {'wait s':>8} "
          f"{'pace vs rank ' + str(WORKERS - 1):>17}")
    report = {}
    for case in ("slow", "jitter"):
        for st in (0, 3):
            print(f"{what[case]:<42} {st:>2} {med(case, st, 'run'):>14.0f} "
                  f"{med(case, st, 'steady'):>10.0f} {med(case, st, 'wait_s'):>8.2f} "
                  f"{med(case, st, 'pace'):>17.2f}")
        # ratio per repetition (s = 0 and s = 3 ran back to back), then the median
        ratio = {k: statistics.median(r3[k] / r0[k] for r0, r3 in
                                      zip(runs[(case, 0)], runs[(case, 3)]))
                 for k in ("run", "steady")}
        print(f"{'  ratio s=3 / s=0 (other ranks)':<42}    {ratio['run']:>14.2f} {ratio['steady']:>10.2f}")
        report[case] = {"s0": runs[(case, 0)], "s3": runs[(case, 3)], "ratio": ratio}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
