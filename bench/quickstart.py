#!/usr/bin/env python3
"""The quick start's scaling on one host: the README's job (MLR on
Fashion-MNIST, sfb, s = 2, 10 epochs = 18,750 clocks whatever P) with
P = 1, 2 and 4 local workers, run alternately, each R times.

For every P it reports the per-clock time (the training wall time of rank
0's summary over its clocks; data loading and launch excluded), the
median over the rounds, and its ratio to P = 1 measured in the same run.
With --before OLD_SFB (a build of an older commit) it alternates the two
binaries too and adds their columns, for before/after tables measured
under the same load. Exit 1 when P = 2 costs more than 2x P = 1 or P = 4
more than 3x (not with --smoke); 77 (skipped) without the data set
(Debian's dataset-fashion-mnist).

Usage: bench/quickstart.py [--sfb PATH] [--before OLD_SFB] [--rounds R]
         [--workers 1,2,4] [--smoke] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = "/usr/share/datasets/fashion-mnist"
GATES = {2: 2.0, 4: 3.0}


def per_clock_us(sfb, n, out, smoke):
    cmd = [sfb, "run", "-n", str(n), "--model", "mlr", "--data", "fashion-mnist", "--sync", "sfb",
           "--staleness", "2", "-q", "--out-dir", out]
    if smoke:
        cmd += ["--clocks", "300", "--eval-every", "0"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-3000:])
        raise SystemExit(f"quickstart: sfb run exited {p.returncode}: {' '.join(cmd)}")
    with open(os.path.join(out, "metrics.0.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("event") == "summary":
                return 1e6 * r["wall"] / r["clocks"]
    raise SystemExit(f"quickstart: no summary in {out}/metrics.0.jsonl")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sfb", default=os.path.join(ROOT, "build", "src", "cli", "sfb"))
    ap.add_argument("--before", help="an older sfb binary, run alternately with --sfb")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--smoke", action="store_true", help="300 clocks, one round, no gate")
    ap.add_argument("--json", help="write the medians here")
    a = ap.parse_args()
    if not os.path.isdir(DATA):
        print(f"quickstart: {DATA} not installed (dataset-fashion-mnist): skipped")
        return 77
    workers = [int(x) for x in a.workers.split(",")]
    if workers[0] != 1:
        raise SystemExit("quickstart: --workers must start with 1 (the ratios' base)")
    rounds = 1 if a.smoke else a.rounds
    builds = [("sfb", a.sfb)] + ([("before", a.before)] if a.before else [])
    got = {(b, n): [] for b, _ in builds for n in workers}
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            for n in workers:
                for b, exe in builds:
                    us = per_clock_us(exe, n, os.path.join(tmp, f"{b}-{n}-{i}"), a.smoke)
                    got[(b, n)].append(us)
                    print(f"# round {i + 1}/{rounds} {b} -n {n}: {us:.1f} us a clock", flush=True)
    med = {k: statistics.median(v) for k, v in got.items()}
    cols = "".join(f"  {b}_us  {b}_ratio" for b, _ in builds)
    print(f"# P{cols}  (per clock, median of {rounds}; load average {load0:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end)")
    ok = True
    for n in workers:
        row = f"quickstart/P={n}"
        for b, _ in builds:
            ratio = med[(b, n)] / med[(b, 1)]
            row += f"  {med[(b, n)]:.1f}  {ratio:.2f}"
        gate = GATES.get(n)
        ratio = med[("sfb", n)] / med[("sfb", 1)]
        if gate and ratio > gate:
            row += f"  ABOVE {gate:.0f}x"
            ok = False
        print(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({f"{b}/{n}": med[(b, n)] for b, n in med}, f, indent=1)
    if a.smoke:
        print("verdict: smoke (no gate)")
        return 0
    print("verdict: " + ("OK" if ok else "FAIL (P = 2 above 2x or P = 4 above 3x the time a "
                                          "clock of P = 1)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
