"""The job API of an elastic job (Job(elastic=True)) from Python, under
`sfb launch --elastic -n 4`: rank 2 SIGKILLs itself as clock 10 begins; every
other rank's failed call names it (Job.lost() == 2), Job.shrink() goes on
with 3 renumbered ranks from the clock every survivor's replica holds whole
(9 or 10), and after the last clock every replica holds the same bytes.
Prints one line per survivor: "elastic rank R of W was F lost K next N hash H"."""
import hashlib
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import numpy as np  # noqa: E402
import sfb  # noqa: E402

job = sfb.Job(elastic=True)
first = job.rank
A = np.zeros((6, 5), np.float32)
job.attach([A], max_s=2)
rng = np.random.default_rng(first)
t, T, lost, nxt = 0, 40, -1, -1
while t < T:
    try:
        if first == 2 and t == 10:
            os.kill(os.getpid(), signal.SIGKILL)
        job.wait(t)
        b = rng.standard_normal((2, 6)).astype(np.float32)
        c = rng.standard_normal((2, 5)).astype(np.float32)
        job.publish(t, [(b, c, 0.1)])
        t += 1
    except sfb.Error:
        lost = job.lost()
        if lost < 0:
            raise
        nxt, src = job.shrink()
        t = nxt
job.finish(T - 1)
print("elastic rank %d of %d was %d lost %d next %d hash %s" %
      (job.rank, job.world, first, lost, nxt, hashlib.sha256(A.tobytes()).hexdigest()[:16]),
      flush=True)
