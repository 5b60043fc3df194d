"""Ordered apply (Job.attach(ordered=True)): replicas that start equal stay
bit-identical whatever the order in which frames arrive. Every rank publishes
random factors (dense and sparse c, several samples) for 6 matrices each
clock, in a rank-dependent order with random pauses, under each engine and
topology given; after the last clock (drained) every rank's replica bytes
must equal rank 0's, and the replicas must equal the float64 sum of every
rank's updates within float32 rounding (so the ordering loses nothing).
A CASE "A>B" replans from engines A to B halfway (Job.replan), after
checking that misplaced, "auto" and rank-dependent replans are refused on
every rank with nothing changed; the replicas must then hold every update
exactly as without one, and the job's byte counters carry on. A CASE
ending in "+" raises the job's max_s halfway (Job.set_max_s: a publish of
more samples refused before, ranks that disagree refused on every rank) and
publishes up to twice the samples after it. FMS matrices
go on odd clocks through Job.dense_buffer (the update written into the job's
buffer, sent from there; the array read-only once published), on even ones
copied from the caller's array; an SFB matrix's dense_buffer is refused.
Usage (under sfb launch -n P): job_ordered.py [--clocks T] CASE... where a
CASE is ENGINE[:TOPOLOGY[:PRIORITY]][+], e.g. sfb sfb:halton fms auto
sfb,fms>fms,sfb sfb:halton+."""
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
grown_at = None  # the clock after which a "+" case's max_s is 2 S


def factors(rank, t, m):
    """Rank's factors of matrix m at clock t: the same on every rank that
    computes them (the reference), different for every (rank, t, m)."""
    rows, cols = SHAPES[m]
    g = np.random.default_rng(1000003 * rank + 1009 * t + m)
    s = 1 + (rank + t + m) % (2 * S if grown_at is not None and t > grown_at else S)
    b = g.standard_normal((s, rows)).astype(np.float32)
    c = g.standard_normal((s, cols)).astype(np.float32)
    if m % 2:  # a sparse c: the codec sends it as CSR
        c[g.random((s, cols)) < 0.9] = 0
    return b, c, np.float32(0.1 + 0.01 * rank)


def refused(what, call, error):
    """call() raises error, naming what."""
    try:
        call()
    except error:
        return True
    print("FAIL: %s was not refused" % what, flush=True)
    return False


def replan(job, t, engine):
    """Bad replans refused with nothing changed, then the replan to engine."""
    before = list(job.engines)
    ok = refused("a replan of a clock not the last published",
                 lambda: job.replan(t - 1, engine), sfb.UsageError)
    ok &= refused("an auto replan", lambda: job.replan(t, "auto"), sfb.UsageError)
    mine = ["sfb", "fms"][job.rank % 2]  # ranks disagree: every rank hears it
    ok &= refused("ranks replanning differently", lambda: job.replan(t, mine), sfb.MismatchError)
    if job.engines != before:
        print("FAIL: a refused replan changed the engines to %s" % job.engines, flush=True)
        ok = False
    sent = job.stats()["data_bytes"]
    job.replan(t, engine)
    want = engine.split(",")
    if job.engines != (want * len(job.engines) if len(want) == 1 else want):
        print("FAIL: engines %s after a replan to %s" % (job.engines, engine), flush=True)
        ok = False
    return ok, sent


def set_max_s(job, t):
    """Bad bounds refused on every rank, then 2 S."""
    ok = refused("a lower max_s", lambda: job.set_max_s(t, S - 1), sfb.UsageError)
    ok &= refused("ranks raising max_s differently",
                  lambda: job.set_max_s(t, 2 * S + job.rank % 2), sfb.MismatchError)
    job.set_max_s(t, 2 * S)
    return ok


def case(text):
    global grown_at
    grow = text.endswith("+")
    text = text.rstrip("+")
    grown_at = None
    engine, topology, priority = (text.split(":") + [None, None])[:3]
    engine, after = (engine.split(">") + [None])[:2]
    ok, sent = True, 0
    with sfb.Job(peer_timeout_s=10) as job:
        P, r = job.world, job.rank
        mats = [np.zeros(sh, np.float32) for sh in SHAPES]
        job.attach(mats, max_s=S, engine=engine, topology=topology, priority=priority,
                   ordered=True, link_gbps=1.0, latency_us=50.0)
        g = np.random.default_rng(77 + r)
        for t in range(args.clocks):
            job.wait(t)
            if grow and t == args.clocks // 2:  # (nothing published)
                big = [np.ones((S + 1, n), np.float32) for n in SHAPES[0]]
                ok &= refused("an SF of more than max_s samples",
                              lambda: job.publish_one(t, 0, big[0], big[1], 1.0), sfb.Error)
            order = list(range(len(SHAPES)))
            g.shuffle(order)
            for m in order:
                b, c, scale = factors(r, t, m)
                if job.engines[m] == "sfb":
                    if t == 0:
                        ok &= refused("dense_buffer of an sfb matrix",
                                      lambda: job.dense_buffer(m), sfb.UsageError)
                    job.publish_one(t, m, b, c, scale)
                elif t % 2:  # in the job's buffer: sent from there
                    buf = job.dense_buffer(m)
                    if job.dense_buffer(m).ctypes.data != buf.ctypes.data:
                        print("FAIL: dense_buffer(%d) moved before its publish" % m, flush=True)
                        ok = False
                    np.multiply(b.T @ c, scale, out=buf)
                    job.publish_dense(t, m, buf)
                    # the job's memory now: a write into it fails loudly
                    ok &= refused("a write into a published dense_buffer",
                                  lambda: buf.__setitem__((0, 0), 1.0), ValueError)
                else:
                    job.publish_dense(t, m, np.ascontiguousarray(b.T @ c), scale)
                if g.random() < 0.3:
                    time.sleep(0.002 * g.random())
            if after and t == args.clocks // 2:
                replanned, sent = replan(job, t, after)
                ok &= replanned
            if grow and t == args.clocks // 2:
                ok &= set_max_s(job, t)
                grown_at = t
        job.drain(args.clocks - 1)
        if after and job.stats()["data_bytes"] <= sent:
            print("FAIL %s: data_bytes %d after the replan, %d before" %
                  (text, job.stats()["data_bytes"], sent), flush=True)
            ok = False
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
    if not ok:
        return False
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
