"""SIGINT (Ctrl-C) in a Python program that uses sfb raises
KeyboardInterrupt, as in any Python program. "loaded": libsfb loaded (no
job); "job" (under `sfb launch`): a job's fabric open and one clock done.
Prints "ok KeyboardInterrupt ..." and exits 0 when it was one."""
import os
import signal
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "python"))
import sfb  # noqa: E402


def interrupted(label):
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(10)
    except KeyboardInterrupt:
        print("ok KeyboardInterrupt %s" % label, flush=True)
        return True
    print("FAIL: no KeyboardInterrupt %s" % label, flush=True)
    return False


if sys.argv[1] == "loaded":
    sfb.library()
    sys.exit(0 if interrupted("with libsfb loaded") else 1)
job = sfb.Job(peer_timeout_s=5)
A = np.zeros((2, 3), np.float32)
job.attach([A], max_s=1)
job.wait(0)
job.publish(0, [(np.ones((1, 2), np.float32), np.ones((1, 3), np.float32), 1.0)])
job.wait(1)
ok = interrupted("with the fabric open (A = %g)" % A[0, 0]) and A[0, 0] == job.world
sys.stdout.flush()
# every rank past wait(1) before any exits: a rank gone while another still
# waited for its clock-0 frame failed that one ("rank 1 died")
job.barrier()
os._exit(0 if ok else 1)  # (the interrupted job is not finished: no goodbye)
