"""The per-layer job API through python/sfb on P ranks (`sfb launch -n P`):
Job.broadcast (a numpy array in place, zero-copy, and a bytearray) starts
every replica alike; then 260 matrices, engine "sfb,fms" alternating, are
published one at a time in each rank's own order (publish_one for SFB
matrices, publish_dense for FMS ones); after drain(t) at staleness 0 every
replica holds exactly the updates through t, and after finish the exact sum
of all. Bad arguments raise ValueError naming the argument."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "python"))
import sfb  # noqa: E402

N, CLOCKS = 260, 6
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL: " + what, flush=True)


def shape(m):
    return (1 + m % 4, 1 + (m * 5) % 7)


def update(r, m, t):
    """Rank r's dense update of matrix m at clock t (small integers: exact)."""
    rows, cols = shape(m)
    b = (1 + (np.arange(rows) + m) % 3).astype(np.float32)[None, :]  # 1 x rows
    c = (1 + (np.arange(cols) + r) % 2).astype(np.float32)[None, :]  # 1 x cols
    return b, c, float(1 + t % 3)


with sfb.Job(peer_timeout_s=5) as job:
    r, P = job.rank, job.world
    # the start: rank P-1's values everywhere, through one flat array
    sizes = [shape(m)[0] * shape(m)[1] for m in range(N)]
    flat = np.full(sum(sizes), np.nan if r != P - 1 else 0, np.float32)
    if r == P - 1:
        flat[:] = np.arange(flat.size) % 7
    out = job.broadcast(P - 1, flat)
    check(out is flat and np.array_equal(flat, np.arange(flat.size) % 7),
          "broadcast of a numpy array in place")
    raw = bytearray(b"x" * 3000001) if r == 0 else bytearray(3000001)
    check(job.broadcast(0, raw) is raw and raw == bytearray(b"x" * 3000001),
          "broadcast of a bytearray (3 chunks)")
    try:
        job.broadcast(0, np.zeros((4, 4), np.float32)[:, :2])
        check(False, "a non-contiguous array is refused")
    except ValueError as e:
        check("broadcast: data" in str(e), "ValueError names data: %s" % e)
    mats, at = [], 0
    for m in range(N):
        mats.append(flat[at:at + sizes[m]].reshape(shape(m)).copy())
        at += sizes[m]
    start = [a.copy() for a in mats]
    job.attach(mats, max_s=1, engine=",".join("sfb" if m % 2 == 0 else "fms" for m in range(N)),
               staleness=0, apply_early=False)
    check(job.engines[:2] == ["sfb", "fms"], "engines %s" % job.engines[:2])

    def want(last):
        out = [a.copy() for a in start]
        for t in range(last + 1):
            for q in range(P):
                for m in range(N):
                    b, c, s = update(q, m, t)
                    out[m] += s * b.T @ c
        return out

    rng = np.random.default_rng(r)
    for t in range(CLOCKS):
        job.wait(t)
        if t == 0:  # before anything of the clock is published
            for bad, name in ((np.zeros(shape(1), np.float64), "float64"),
                              (np.zeros((9, 9), np.float32), "shape"),
                              (np.zeros(shape(1)[::-1], np.float32).T, "order")):
                try:
                    job.publish_dense(t, 1, bad)
                    check(False, "publish_dense refuses a %s delta" % name)
                except ValueError as e:
                    check("publish_dense: delta" in str(e), "ValueError names delta: %s" % e)
            try:
                job.publish_dense(t, 0, np.zeros(shape(0), np.float32))
                check(False, "publish_dense on an sfb matrix is refused")
            except sfb.Error as e:
                check("carries factors only" in str(e), str(e))
        for m in rng.permutation(N):
            m = int(m)
            b, c, s = update(r, m, t)
            if m % 2:
                job.publish_dense(t, m, np.ascontiguousarray(b.T @ c), scale=s)
            else:
                job.publish_one(t, m, b, c, s)
            if t == 0 and m == 1:
                try:
                    job.publish_one(t, 1, b, c, s)
                    check(False, "a second publish of matrix 1 is refused")
                except sfb.Error as e:
                    check("matrix 1 is published twice in clock 0" in str(e), str(e))
        if t % 2 == 1:
            job.drain(t)
            w = want(t)
            bad = sum(int(not np.array_equal(mats[m], w[m])) for m in range(N))
            check(bad == 0, "after drain(%d): %d matrices differ from the updates through %d"
                  % (t, bad, t))
    job.finish(CLOCKS - 1)
    w = want(CLOCKS - 1)
    bad = sum(int(not np.array_equal(mats[m], w[m])) for m in range(N))
    check(bad == 0, "after finish: %d matrices differ from the exact sum" % bad)
    print("rank %d: %s" % (r, "ok" if not fails else "%d failed" % len(fails)), flush=True)
    sys.exit(1 if fails else 0)
