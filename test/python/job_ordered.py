"""Ordered apply (Job.attach(ordered=True)): replicas that start equal stay
bit-identical whatever the order in which frames arrive. Every rank publishes
random factors (dense and sparse c, several samples) for 6 matrices each
clock, in a rank-dependent order with random pauses, under each engine and
topology given; after the last clock (drained) every rank's replica bytes
must equal rank 0's, and the replicas must equal the float64 sum of every
rank's updates within float32 rounding (so the ordering loses nothing).
Usage (under sfb launch -n P): job_ordered.py [--clocks T] CASE... where a
CASE is ENGINE[:TOPOLOGY[:PRIORITY]], e.g. sfb sfb:halton fms auto."""
import argparse
import hashlib
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "python"))
import sfb  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--clocks", type=int, default=12)
ap.add_argument("cases", nargs="+")
args = ap.parse_args()

SHAPES = [(7, 5), (64, 33), (3, 200), (40, 40), (1, 9), (25, 16)]
S = 6


def factors(rank, t, m):
    """Rank's factors of matrix m at clock t: the same on every rank that
    computes them (the reference), different for every (rank, t, m)."""
    rows, cols = SHAPES[m]
    g = np.random.default_rng(1000003 * rank + 1009 * t + m)
    s = 1 + (rank + t + m) % S
    b = g.standard_normal((s, rows)).astype(np.float32)
    c = g.standard_normal((s, cols)).astype(np.float32)
    if m % 2:  # a sparse c: the codec sends it as CSR
        c[g.random((s, cols)) < 0.9] = 0
    return b, c, np.float32(0.1 + 0.01 * rank)


def case(text):
    engine, topology, priority = (text.split(":") + [None, None])[:3]
    with sfb.Job(peer_timeout_s=10) as job:
        P, r = job.world, job.rank
        mats = [np.zeros(sh, np.float32) for sh in SHAPES]
        job.attach(mats, max_s=S, engine=engine, topology=topology, priority=priority,
                   ordered=True, link_gbps=1.0, latency_us=50.0)
        g = np.random.default_rng(77 + r)
        for t in range(args.clocks):
            job.wait(t)
            order = list(range(len(SHAPES)))
            g.shuffle(order)
            for m in order:
                b, c, scale = factors(r, t, m)
                if job.engines[m] == "sfb":
                    job.publish_one(t, m, b, c, scale)
                else:
                    job.publish_dense(t, m, np.ascontiguousarray(b.T @ c), scale)
                if g.random() < 0.3:
                    time.sleep(0.002 * g.random())
        job.drain(args.clocks - 1)
        digest = hashlib.sha256(b"".join(m.tobytes() for m in mats)).digest()
        everyone = job.allgather(digest)
        differ = [q for q, d in enumerate(everyone) if d != everyone[0]]
        worst = 0.0
        for m, A in enumerate(mats):
            ref = np.zeros(SHAPES[m], np.float64)
            for t in range(args.clocks):
                for q in range(P):
                    b, c, scale = factors(q, t, m)
                    ref += float(scale) * (b.astype(np.float64).T @ c.astype(np.float64))
            worst = max(worst, float(np.abs(A - ref).max() / max(np.abs(ref).max(), 1e-30)))
        job.finish(args.clocks - 1)
    if differ:
        print("FAIL %s: rank %d: the replicas of ranks %s differ from rank 0's bytes" %
              (text, r, differ), flush=True)
        return False
    if worst > 1e-5:
        print("FAIL %s: rank %d: replicas differ from the sum of the updates by %.3g" %
              (text, r, worst), flush=True)
        return False
    print("ok %s: replicas bit-identical on %d ranks (engines %s), %.2g from the exact sum" %
          (text, P, ",".join(job.engines), worst), flush=True)
    return True


ok = all([case(c) for c in args.cases])
sys.exit(0 if ok else 1)
