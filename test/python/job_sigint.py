"""SIGINT (Ctrl-C) in a Python program that uses sfb raises
KeyboardInterrupt, as in any Python program. "loaded": libsfb loaded (no
job); "job" (under `sfb launch`): a job's fabric open and one clock done.
Prints "ok KeyboardInterrupt ..." and exits 0 when it was one.

"fork" (under `sfb launch`, the shm provider): with the job's fabric open,
a forked multiprocessing.Process ended by terminate() (SIGTERM, as
Pool.terminate() and a DataLoader's shutdown end theirs): the rank's
shared-memory region must still be there (libfabric's handlers, inherited,
unlinked it) and the job must go on. Prints "ok forked worker ..."."""
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
def regions():
    """This process's shm regions (transport_shm.c: sfb_<key>_<rank>_<pid>)."""
    tail = "_%d" % os.getpid()
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith("sfb_") and n.endswith(tail))


job = sfb.Job(peer_timeout_s=5)
A = np.zeros((2, 3), np.float32)
job.attach([A], max_s=1)
job.wait(0)
job.publish(0, [(np.ones((1, 2), np.float32), np.ones((1, 3), np.float32), 1.0)])
job.wait(1)
if sys.argv[1] == "fork":
    import multiprocessing
    mine = regions()
    worker = multiprocessing.get_context("fork").Process(target=time.sleep, args=(30,))
    worker.start()
    time.sleep(0.2)
    worker.terminate()
    worker.join()
    left = regions()
    job.publish(1, [(np.ones((1, 2), np.float32), np.ones((1, 3), np.float32), 1.0)])
    job.wait(2)
    ok = mine and left == mine and worker.exitcode == -signal.SIGTERM and A[0, 0] == 2 * job.world
    print("%s forked worker ended by SIGTERM (%s): regions %s before, %s after; A = %g" % (
        "ok" if ok else "FAIL:", worker.exitcode, mine, left, A[0, 0]), flush=True)
else:
    ok = interrupted("with the fabric open (A = %g)" % A[0, 0]) and A[0, 0] == job.world
sys.stdout.flush()
# every rank past wait(1) before any exits: a rank gone while another still
# waited for its clock-0 frame failed that one ("rank 1 died")
job.barrier()
os._exit(0 if ok else 1)  # (the interrupted job is not finished: no goodbye)
