"""The job API of an elastic job (Job(elastic=True)) from Python, under
`sfb launch --elastic --respawn 1 -n 4`: rank 2 SIGKILLs itself as clock 10
begins; every other rank's failed call names it (Job.lost() == 2) and
Job.shrink() goes on with 3 renumbered ranks from the clock every survivor's
replica holds whole (9 or 10). The launcher restarts the dead copy; it joins
(Job.joined() gives its clock and max_s) at one of the members' Job.grow()
calls, every 5 clocks, and after the last clock the 4 replicas hold the same
bytes. Prints one line per process: "elastic rank R of W was F lost K next N
joined J hash H" (F: the rank it started as, -1 for the joiner; J: the clock
it joined at, or -1)."""
import hashlib
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import numpy as np  # noqa: E402
import sfb  # noqa: E402

TEXT = "job_elastic.py: one 6 x 5 matrix, max_s 2"
job = sfb.Job(elastic=True, join_text=TEXT)
joined = job.joined()
first = -1 if joined else job.rank
A = np.zeros((6, 5), np.float32)
t, T, lost, nxt = 0, 120, -1, -1
if joined:
    t, max_s, _ = joined
    job.attach([A], max_s=max_s, start_clock=t)
else:
    job.attach([A], max_s=2)
rng = np.random.default_rng(1000 + first)
while t < T:
    try:
        if first == 2 and t == 10:
            os.kill(os.getpid(), signal.SIGKILL)
        job.wait(t)
        if t % 5 == 0 and not (joined and t == joined[0]):
            job.grow(t, TEXT)
        b = rng.standard_normal((2, 6)).astype(np.float32)
        c = rng.standard_normal((2, 5)).astype(np.float32)
        job.publish(t, [(b, c, 0.01)])
        time.sleep(0.02)  # time for the restarted copy to come
        t += 1
    except sfb.Error:
        lost = job.lost()
        if lost < 0:
            raise
        nxt, src = job.shrink()
        t = nxt
job.finish(T - 1)
print("elastic rank %d of %d was %d lost %d next %d joined %d hash %s" %
      (job.rank, job.world, first, lost, nxt, joined[0] if joined else -1,
       hashlib.sha256(A.tobytes()).hexdigest()[:16]), flush=True)
