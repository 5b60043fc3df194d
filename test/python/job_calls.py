"""Ranks that make different collective calls (run under `sfb launch -n 3`).

1. Calls of the same shape: rank 1 in Job.agree (an allgather of 8-byte
   hashes first) while ranks 0 and 2 are in Job.allgather of 8 bytes, which
   used to pair rank 1's hash with the others' data in silence. Every rank
   must fail at once with sfb.MismatchError naming rank 1's call and rank
   0's; the channel stays in step: the next allgather pairs as it should,
   and a barrier against a broadcast is named the same way.
2. A rank that comes late: rank 1 in a 6 s step while ranks 0 and 2 are
   in Job.allgather with a bootstrap timeout of 2 s. Ranks 0 and 2 must
   fail after it, saying that no rank failed and why a rank may not come
   (sfb.Error, which the Job's context manager sends the peers as the job's
   abort, or the other's abort first: sfb.PeerError carrying it); rank 1
   with an sfb.PeerError carrying it.
3. Ranks waiting for each other: rank 0 in Job.allgather after clock 0
   while ranks 1 and 2 wait for its clock 1 (Job.wait(2) at staleness 0),
   which it never publishes. Their waits must fail at once (the bootstrap
   timeout is 30 s) with sfb.PeerError naming rank 0, its call and the
   clock, and rank 0's allgather with their abort.
4. An FMS owner's sums: rank 0 publishes each clock of a matrix on the
   parameter servers before the others' pushes are in, so the sums of its
   rows are formed only in its next wait. Every rank entering
   Job.allgather then (none waits) is a program that runs: the replicas
   hold every rank's update after the next wait. Rank 0 alone entering it
   while ranks 1 and 2 wait for the clock's sums is not: their waits must
   fail as in 3, though rank 0 has published the clock.
5. A child process that inherits a rank's environment (multiprocessing's
   spawn running the script's top level again, a subprocess) and opens a
   Job: it must fail at once with sfb.UsageError naming the rank and the
   process that joined as it, and the job go on (it used to join as that
   rank a second time, and the job broke).
6. Attaches that differ (a matrix's shape, the engine, `ordered` on one
   rank): every rank fails at once with sfb.MismatchError naming what and
   which rank (the frames used to be refused until the 300 s stall timeout,
   or the replicas drift apart in silence); an attach that agrees follows,
   and one clock gives every rank the sum of all ranks' updates.
7. Calls a library names (Job.calls_named: sfb.torch's allreduce() is
   allgathers): a rank in one where the others are in a barrier is named
   by that name, in the verdict and to the ranks waiting for its clock
   (case 3's rank 0 is in eval()); after the with, the call's own name."""
import os
import subprocess
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
    # a library's own name for its calls (Job.calls_named), inside its with only

    def metrics():
        with job.calls_named("metrics()"):
            job.allgather(b"%4d" % r)

    mine = metrics if r == 1 else job.barrier
    ok &= raises("barrier against a named call", mine, sfb.MismatchError,
                 "rank 1 is in metrics() where rank 0 is in barrier", 10)
    mine = (lambda: job.agree("x=1\n")) if r == 2 else job.barrier
    ok &= raises("barrier against agree after the with", mine, sfb.MismatchError,
                 "rank 2 is in agree where rank 0 is in barrier", 10)
    job.barrier()
    here = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "python")
    env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.run([sys.executable, "-c", "import sfb; sfb.Job()"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    want = "inherited the launcher's environment of rank %d from process %d" % (r, os.getpid())
    if child.returncode == 0 or want not in child.stderr or "sfb.UsageError" not in child.stderr:
        print("FAIL: a child of rank %d opening a Job: exit %d, %r" %
              (r, child.returncode, child.stderr[-400:]), flush=True)
        ok = False
    got = job.allgather(bytes([r + 7]) * 3)
    if got != [bytes([q + 7]) * 3 for q in range(P)]:
        print("FAIL: the allgather after a child's Job gave %r" % got, flush=True)
        ok = False
    # attaches that differ: every rank refused at once, nothing attached
    A = np.zeros((4, 6), np.float32)
    own = (lambda: job.attach([A, np.zeros((3, 2) if r == 1 else (2, 3), np.float32)], max_s=2))
    ok &= raises("attach of other shapes", own, sfb.MismatchError,
                 "rank 1 attaches matrix 1 as 3 x 2 where rank 0 has 2 x 3", 10)
    own = (lambda: job.attach([A], max_s=1, engine="fms" if r == 2 else "sfb"))
    ok &= raises("attach of another engine", own, sfb.MismatchError,
                 'engine: rank 0 has "sfb", rank 2 has "fms"', 10)
    own = (lambda: job.attach([A], max_s=1, ordered=r == 1))
    ok &= raises("attach ordered on one rank", own, sfb.MismatchError,
                 'ordered: rank 0 has "0", rank 1 has "1"', 10)
    job.attach([A], max_s=1, ordered=True)
    b, c = np.ones((1, 4), np.float32), np.ones((1, 6), np.float32)
    job.wait(0)
    job.publish(0, [(b, c, float(r + 1))])
    job.wait(1)
    if not np.array_equal(A, np.full_like(A, 6.0)):
        print("FAIL: rank %d's replica after the attach that agreed: %r" % (r, A), flush=True)
        ok = False
    job.finish(0)
print("ok calls: rank %d: different calls and attaches named on every rank, a child refused" %
      r if ok else
      "rank %d: case 1 failed" % r, flush=True)


def case(name, timeout_s, body, want, text, within_s):
    """body(job) in a job of its own must raise one of the classes want[rank]
    (exactly) within within_s of the job's start (its bootstrap and fabric
    not counted: seconds under ASan on a loaded machine), its message
    holding text, out of the Job's with (whose abort tells the peers, as a
    program's would)."""
    t0 = None
    try:
        with sfb.Job(peer_timeout_s=10, bootstrap_timeout_s=timeout_s) as job:
            t0 = time.monotonic()
            body(job)
        print("FAIL %s: rank %d's calls returned" % (name, r), flush=True)
        return False
    except sfb.Error as e:
        took = time.monotonic() - t0 if t0 is not None else 0.0
        if t0 is None or type(e) not in want[r] or text not in str(e) or took > within_s:
            print("FAIL %s: after %.1f s %s: %s" % (name, took, type(e).__name__, e), flush=True)
            return False
    print("ok %s: rank %d (%.1f s)" % (name, r, took), flush=True)
    return True


def late(job):
    if job.rank == 1:
        time.sleep(6)
    job.allgather(b"x")


def crossed(job):
    A = np.zeros((4, 6), np.float32)
    job.attach([A], max_s=1, engine="sfb")
    b, c = np.ones((1, 4), np.float32), np.ones((1, 6), np.float32)
    job.wait(0)
    job.publish(0, [(b, c, 1.0)])
    if job.rank == 0:  # never publishes clock 1
        with job.calls_named("eval()"):  # (the waiting ranks name it so)
            job.allgather(b"x")
    else:  # clock 2 needs every rank's clock 1
        job.wait(1)
        job.publish(1, [(b, c, 1.0)])
        job.wait(2)


def owner(job):
    A = np.zeros((6, 4), np.float32)
    job.attach([A], max_s=1, engine="fms")
    b, c = np.ones((1, 6), np.float32), np.ones((1, 4), np.float32)

    def publish(clock):
        if job.rank != 0:  # rank 0's publish finds no push of theirs in
            time.sleep(0.5)
        job.publish(clock, [(b, c, 1.0)])

    job.wait(0)
    publish(0)
    job.allgather(b"x")  # every rank: it pairs
    job.wait(1)  # rank 0 forms clock 0's sums here
    if not np.array_equal(A, np.full_like(A, 3.0)):
        raise AssertionError("rank %d: A after clock 0 is %r" % (job.rank, A))
    publish(1)
    if job.rank == 0:
        job.allgather(b"y")
    else:  # clock 2 needs clock 1's sums, rank 0's rows among them
        job.wait(2)


P, E = (sfb.PeerError,), (sfb.Error,)
# ranks 0 and 2 time out alike: each says it, or hears the other's abort first
ok &= case("late", 2, late, [E + P, P, E + P], "no rank has failed", 6 + 8)
# (crossed, owner: at once, where the old library waited out the 30 s
# bootstrap timeout)
ok &= case("crossed", 30, crossed, [P, P, P], "rank 0 is in eval()", 12)
ok &= case("owner", 30, owner, [P, P, P], "rank 0 is in allgather", 14)
sys.exit(0 if ok else 1)
