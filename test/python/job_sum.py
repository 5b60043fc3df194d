"""A job of P ranks through python/sfb with exact arithmetic: rank r
publishes, every clock, factors whose update adds (r + 1) to every entry of
A (3 x 4). After finish every replica must hold exactly clocks * P(P+1)/2.
--fail-rank R --fail-clock T: rank R exits with status 3 at clock T
(through the Job's context manager, which tells the peers). --rank, --world
and --rendezvous join explicitly instead of through the environment."""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "python"))
import sfb  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--clocks", type=int, default=20)
ap.add_argument("--staleness", type=int, default=0)
ap.add_argument("--engine", default="sfb")
ap.add_argument("--bandwidth", type=float, default=0, help="egress budget, bytes/s")
ap.add_argument("--priority", default=None)
ap.add_argument("--fail-rank", type=int, default=-1)
ap.add_argument("--fail-clock", type=int, default=-1)
ap.add_argument("--rank", type=int, default=None, help="explicit rendezvous: this rank")
ap.add_argument("--world", type=int, default=None, help="explicit rendezvous: the world")
ap.add_argument("--rendezvous", default=None, help="explicit rendezvous: host:port")
args = ap.parse_args()

print("pid=%d" % os.getpid(), flush=True)
try:
    with sfb.Job(rank=args.rank, world=args.world, rendezvous=args.rendezvous,
                 peer_timeout_s=3, bandwidth=args.bandwidth) as job:
        A = np.zeros((3, 4), np.float32)
        job.attach([A], max_s=2, engine=args.engine, staleness=args.staleness,
                   priority=args.priority)
        b = np.full((2, 3), job.rank + 1, np.float32)
        c = np.full((2, 4), 0.5, np.float32)
        for t in range(args.clocks):
            job.wait(t)
            if job.rank == args.fail_rank and t == args.fail_clock:
                sys.exit(3)
            job.publish(t, [(b, c, 1.0)])
        job.finish(args.clocks - 1)
        want = args.clocks * job.world * (job.world + 1) / 2
        ok = bool(np.all(A == want))
        print("rank %d %s: A = %g everywhere (want %g)" %
              (job.rank, "ok" if ok else "WRONG", float(A[0, 0]), want), flush=True)
        sys.exit(0 if ok else 1)
except sfb.Error as e:
    print("sfb error: %s" % e, flush=True)
    sys.exit(1)
