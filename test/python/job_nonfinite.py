"""One rank of a job publishes a non-finite factor at one clock: a NaN in b,
or an infinite scale; with --engine fms, publish_one, whose engine checks
the factors' product (--overflow: finite factors whose product overflows
float32). Checked (the default): publish refuses it with
sfb.Error naming the clock and the matrix. --hostile: this rank skips the
check (SFB_DEBUG_PUBLISH_UNCHECKED=1, as a broken or hostile peer would),
and every peer must refuse the update and fail the job naming this rank and
the clock. --die: the bad rank's process ends at the bad clock. Every rank
prints "rank R failed: MESSAGE" and "rank R culprit: K" (the error's rank),
or "rank R done", and exits 1 on a failure. The publishing rank prints "poisoned at T" (time.time())
just before it publishes. Usage: job_nonfinite.py --bad-rank R --bad-clock C
[--scale | --overflow] [--hostile] [--topology halton] [--engine fms]
[--peer-timeout S]"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "python"))

ap = argparse.ArgumentParser()
ap.add_argument("--bad-rank", type=int, required=True)
ap.add_argument("--bad-clock", type=int, required=True)
ap.add_argument("--clocks", type=int, default=8)
ap.add_argument("--scale", action="store_true", help="an infinite scale instead of a NaN in b")
ap.add_argument("--overflow", action="store_true",
                help="finite factors whose product overflows float32")
ap.add_argument("--hostile", action="store_true", help="the bad rank skips publish's check")
ap.add_argument("--engine", default="sfb", help="sfb, or fms (publish_one: the product checked)")
ap.add_argument("--die", action="store_true",
                help="the bad rank's process ends at the bad clock without a word")
ap.add_argument("--topology", default=None)
ap.add_argument("--peer-timeout", type=float, default=3)
args = ap.parse_args()

rank = int(os.environ.get("SFB_RANK", "0"))
if args.hostile and rank == args.bad_rank:
    os.environ["SFB_DEBUG_PUBLISH_UNCHECKED"] = "1"
import sfb  # noqa: E402  (after the environment is set)

try:
    with sfb.Job(peer_timeout_s=args.peer_timeout) as job:
        A = np.zeros((3, 4), np.float32)
        job.attach([A], max_s=2, topology=args.topology, engine=args.engine)
        for t in range(args.clocks):
            job.wait(t)
            b = np.full((2, 3), job.rank + 1, np.float32)
            c = np.full((2, 4), 0.5, np.float32)
            scale = 1.0
            if job.rank == args.bad_rank and t == args.bad_clock:
                if args.die:
                    print("poisoned at %.6f" % time.time(), flush=True)
                    os._exit(0)
                if args.scale:
                    scale = float("inf")
                elif args.overflow:  # 4 x (3e38 x 0.5 + ...) in row 2 of the product
                    b[1, 2], scale = 3e38, 4.0
                else:
                    b[1, 2] = np.nan
                print("poisoned at %.6f" % time.time(), flush=True)
            if args.engine == "fms":
                job.publish_one(t, 0, b, c, scale)
            else:
                job.publish(t, [(b, c, scale)])
        job.finish(args.clocks - 1)
        print("rank %d done" % job.rank, flush=True)
except sfb.Error as e:
    print("rank %d failed: %s" % (rank, e), flush=True)
    print("rank %d culprit: %s" % (rank, getattr(e, "rank", None)), flush=True)
    sys.exit(1)
