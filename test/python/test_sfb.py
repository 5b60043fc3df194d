"""python/sfb in one process (world 1, explicit): the ctypes mirror of the C
structures matches their layout (job_layout prints it), a job updates the
attached numpy array in place exactly, and failures raise sfb.Error with the
library's message. Usage: test_sfb.py JOB_LAYOUT_EXE LIBSFB"""
import ctypes
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
os.environ["SFB_LIB"] = sys.argv[2]
import sfb  # noqa: E402

fails = 0


def check(what, ok, detail=""):
    global fails
    if not ok:
        fails += 1
        print("FAIL: %s %s" % (what, detail))


def raises(what, fn, text):
    try:
        fn()
    except sfb.Error as e:
        check(what, text in str(e) and e.code < 0, "message %r, code %d" % (str(e), e.code))
        return
    except ValueError as e:
        check(what, text in str(e), "message %r" % str(e))
        return
    check(what, False, "did not raise")


# layout: every size and offset the C compiler gives
out = subprocess.run([sys.argv[1]], capture_output=True, text=True, check=True).stdout
n = 0
for line in out.splitlines():
    name, value = line.split()
    struct, _, field = name.partition(".")
    cls = sfb.LAYOUT[struct]
    got = getattr(cls, field).offset if field else ctypes.sizeof(cls)
    check("layout " + name, got == int(value), "ctypes %d, C %s" % (got, value))
    n += 1
check("layout lines", n >= 20, str(n))

job = sfb.Job(rank=0, world=1)
check("rank/world", (job.rank, job.world) == (0, 1))
raises("wait before attach", lambda: job.wait(0), "no matrices attached")
A = np.zeros((2, 3), np.float32)
raises("attach float64", lambda: job.attach([np.zeros((2, 3))], max_s=2), "float32")
raises("attach engine", lambda: job.attach([A], max_s=2, engine="nope"), '"nope" is not an engine')
raises("attach engines", lambda: job.attach([A], max_s=2, engine="sfb,fms"),
       "names more engines than the 1 matrices")
# out-of-range integers: ctypes would wrap them silently (max_s=-1 became
# 4294967295, wait(2**64) clock 0): ValueError naming the argument instead
for what, kw, text in (("max_s -1", {"max_s": -1}, "attach: max_s: -1 is out of range 1..4294967295"),
                       ("max_s 2**32", {"max_s": 2**32}, "attach: max_s: 4294967296 is out of range"),
                       ("max_s float", {"max_s": 2.5}, "attach: max_s: expected an integer, got 2.5"),
                       ("staleness -2", {"max_s": 2, "staleness": -2}, "attach: staleness: -2 is out of range -1.."),
                       ("degree -1", {"max_s": 2, "degree": -1}, "attach: degree: -1 is out of range 0..4294967295"),
                       ("start_clock 2**63", {"max_s": 2, "start_clock": 2**63},
                        "attach: start_clock: 9223372036854775808 is out of range 0..9223372036854775807")):
    raises("attach " + what, lambda kw=kw: job.attach([A], **kw), text)
job.attach([A], max_s=2)
check("engines", job.engines == ["sfb"] and job.plan == "", "%s %r" % (job.engines, job.plan))
b = np.array([[1, 2], [3, 4]], np.float32)
c = np.array([[1, 0, 2], [0, 1, 1]], np.float32)
for t in range(2):
    (R,) = job.wait(t)
    check("wait returns the replica", R is A)
    job.publish(t, [(b, c, 0.5)])
check("update", np.array_equal(A, [[1, 3, 5], [2, 4, 8]]), str(A))
raises("publish before its wait", lambda: job.publish(2, [(b, c, 1.0)]),
       "clock 2 is due, after its wait")
raises("wait out of order", lambda: job.wait(5), "clock 5 out of order")
raises("wait 2**64", lambda: job.wait(2**64),
       "wait: clock: 18446744073709551616 is out of range -9223372036854775808..9223372036854775807")
raises("wait -2**63-1", lambda: job.wait(-2**63 - 1), "wait: clock: -9223372036854775809 is out of range")
raises("publish 2**64", lambda: job.publish(2**64, [(b, c, 1.0)]), "publish: clock: 18446744073709551616")
raises("drain 2**63", lambda: job.drain(2**63), "drain: last: 9223372036854775808 is out of range")
raises("finish -2**64", lambda: job.finish(-2**64), "finish: last: -18446744073709551616 is out of range")
raises("set_last_clock 2**63", lambda: job.set_last_clock(2**63), "set_last_clock: last: 9223372036854775808")
job.wait(2)
raises("publish shape", lambda: job.publish(2, [(b, np.ones((2, 4), np.float32), 1.0)]),
       "SF 0 is for 2 x 4, matrix 0 is 2 x 3")
raises("publish scale 1e39", lambda: job.publish(2, [(b, c, 1e39)]),
       "publish: the scale of matrix 0 at clock 2 is 1e+39, beyond float32")
raises("publish scale inf", lambda: job.publish(2, [(b, c, float("inf"))]),
       "sfb_job_publish: clock 2, matrix 0: scale is inf")
raises("publish b nan", lambda: job.publish(2, [(np.array([[1, np.nan], [3, 4]], np.float32), c, 1.0)]),
       "sfb_job_publish: clock 2, matrix 0: b[0][1] is nan")
raises("publish samples", lambda: job.publish(2, [(np.ones((3, 2), np.float32),
                                                   np.ones((3, 3), np.float32), 1.0)]),
       "3 samples, more than max_s 2")
check("allgather", job.allgather(b"abc") == [b"abc"])
job.agree("x=1\n")
job.finish(1)
check("stats", job.stats()["bytes_sent"] == 0)
job.close()
raises("closed", lambda: job.wait(3), "closed")
raises("bad world", lambda: sfb.Job(rank=3, world=2), "rank 3 of world 2")
raises("world -1", lambda: sfb.Job(world=-1), "Job: world: -1 is out of range 1..4294967295")
raises("world 2**32", lambda: sfb.Job(world=2**32), "Job: world: 4294967296 is out of range")
raises("world 2**31 (C)", lambda: sfb.Job(world=2**31), "world 2147483648: expected 1 .. 2147483647")
raises("rank -1", lambda: sfb.Job(rank=-1, world=2), "Job: rank: -1 is out of range 0..4294967295")

# dense_buffer (one worker: FMS reads it, the job keeps it for the next
# clock): an update written there is the replica's; once published the array
# is read-only; an SFB matrix's is refused
job = sfb.Job(rank=0, world=1)
W1, W2 = np.zeros((4, 3), np.float32), np.zeros((2, 5), np.float32)
job.attach([W1, W2], max_s=2, engine="fms,sfb")
raises("dense_buffer of an sfb matrix", lambda: job.dense_buffer(1), "carries factors only")
raises("dense_buffer m 2", lambda: job.dense_buffer(2), "dense_buffer: m: matrix 2, the job has 2")
for t in range(3):
    job.wait(t)
    buf = job.dense_buffer(0)
    check("dense_buffer shape", buf.shape == (4, 3) and buf.dtype == np.float32 and
          buf.flags.writeable, "%s %s" % (buf.shape, buf.flags))
    buf[...] = np.arange(12, dtype=np.float32).reshape(4, 3) + t
    job.publish_dense(t, 0, buf, 0.5)
    check("dense_buffer read-only after its publish", not buf.flags.writeable)
    job.publish_one(t, 1, np.ones((1, 2), np.float32), np.ones((1, 5), np.float32), 1.0)
job.finish(2)
want = 0.5 * (3 * np.arange(12, dtype=np.float32).reshape(4, 3) + 3)
check("dense_buffer updates", np.array_equal(W1, want) and np.all(W2 == 3), "%s %s" % (W1, W2))
job.close()

# two matrices, one per engine, and auto's choice with a given link
for engine, want in (("fms,sfb", ["fms", "sfb"]), ("auto", None)):
    job = sfb.Job(rank=0, world=1)
    W1, W2 = np.zeros((4, 3), np.float32), np.zeros((2, 5), np.float32)
    job.attach([W1, W2], max_s=2, engine=engine, link_gbps=10, latency_us=5)
    check(engine + ": engines", len(job.engines) == 2 and (want is None or job.engines == want),
          str(job.engines))
    check(engine + ": plan", (job.plan.count("\n") == 2 and "4x3" in job.plan) if want is None
          else job.plan == "", repr(job.plan))
    job.wait(0)
    job.publish(0, [(np.ones((1, 4), np.float32), np.ones((1, 3), np.float32), 1.0),
                    (np.ones((1, 2), np.float32), np.full((1, 5), 2, np.float32), 1.0)])
    check(engine + ": both updated", np.all(W1 == 1) and np.all(W2 == 2), "%s %s" % (W1, W2))
    job.finish(0)
    job.close()
print("%d failed" % fails)
sys.exit(1 if fails else 0)
