"""Ranks that make different collective calls (run under `sfb launch -n 3`).

1. Calls of the same shape: rank 1 in Job.agree (an allgather of 8-byte
   hashes first) while ranks 0 and 2 are in Job.allgather of 8 bytes, which
   used to pair rank 1's hash with the others' data in silence. Every rank
   must fail at once with sfb.MismatchError naming rank 1's call and rank
   0's; the channel stays in step: the next allgather pairs as it should,
   and a barrier against a broadcast is named the same way.
2. A rank that does not come: rank 0 in Job.allgather after clock 0 while
   ranks 1 and 2 wait for its clock 1 (Job.wait(2) at staleness 0), which
   it never publishes. Every rank must fail within the bootstrap timeout (3 s) plus
   a margin, the message saying that no rank failed and why a rank may not
   come: rank 0's sfb.Error, which the Job's context manager sends its peers
   as the job's abort, and theirs an sfb.PeerError carrying it."""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "python"))
import sfb  # noqa: E402


def raises(what, call, error, text, within_s):
    """call() raises error (no other) within within_s, its message holding text."""
    t0 = time.monotonic()
    try:
        call()
    except error as e:
        took = time.monotonic() - t0
        if text not in str(e):
            print("FAIL %s: %r lacks %r" % (what, str(e), text), flush=True)
            return False
        if took > within_s:
            print("FAIL %s: raised after %.1f s, bound %g s" % (what, took, within_s), flush=True)
            return False
        return True
    print("FAIL %s: %s not raised" % (what, error.__name__), flush=True)
    return False


ok = True
with sfb.Job(peer_timeout_s=10, bootstrap_timeout_s=30) as job:
    r, P = job.rank, job.world
    assert P == 3, "run under sfb launch -n 3"
    mine = (lambda: job.agree("lr=0.1\n")) if r == 1 else (lambda: job.allgather(b"%8d" % r))
    ok &= raises("allgather against agree", mine, sfb.MismatchError,
                 "rank 1 is in agree where rank 0 is in allgather", 10)
    got = job.allgather(bytes([r]) * 4)
    if got != [bytes([q]) * 4 for q in range(P)]:
        print("FAIL: the allgather after a refused one gave %r" % got, flush=True)
        ok = False
    mine = (lambda: job.broadcast(0, bytearray(16))) if r == 2 else job.barrier
    ok &= raises("barrier against broadcast", mine, sfb.MismatchError,
                 "rank 2 is in broadcast where rank 0 is in barrier", 10)
    job.barrier()
print("ok calls: rank %d: different calls named on every rank" % r if ok else
      "rank %d: case 1 failed" % r, flush=True)

hint = "no rank has failed"
t0 = time.monotonic()
try:
    with sfb.Job(peer_timeout_s=10, bootstrap_timeout_s=3) as job:
        A = np.zeros((4, 6), np.float32)
        job.attach([A], max_s=1, engine="sfb")
        b, c = np.ones((1, 4), np.float32), np.ones((1, 6), np.float32)
        job.wait(0)
        job.publish(0, [(b, c, 1.0)])
        t0 = time.monotonic()
        if r == 0:  # never publishes clock 1
            job.allgather(b"x")
        else:  # clock 2 needs every rank's clock 1
            job.wait(1)
            job.publish(1, [(b, c, 1.0)])
            job.wait(2)
        print("FAIL allgather against wait: rank %d's call returned" % r, flush=True)
        ok = False
except sfb.Error as e:  # out of the with: its abort told the peers why (as a program's would)
    took = time.monotonic() - t0
    want = sfb.PeerError if r else sfb.Error
    if type(e) is not want or hint not in str(e) or took > 3 + 10:
        print("FAIL allgather against wait: after %.1f s %s: %s" % (took, type(e).__name__, e),
              flush=True)
        ok = False
print("ok stuck: rank %d: the timeout says why" % r if ok else "rank %d: failed" % r, flush=True)
sys.exit(0 if ok else 1)
