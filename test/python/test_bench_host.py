"""The benchmarks' host settings (bench/cluster_run.py): the steady heap's
GLIBC_TUNABLES, and --pause-damon on a stand-in for the kernel's DAMON
directory: the running kdamonds off for the run, on again when it ends
(normally, on an exception, on SIGTERM), those that were off left off, the
report's line saying which; allreduce_vs_gloo's warm-up, 64 MiB of tensor
(3 to 64 operations) unless --warmup says; FMS's chunk grid as the byte
formulas see it."""
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import unittest

BENCH = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "bench")
sys.path.insert(0, BENCH)
import allreduce_vs_gloo  # noqa: E402
import cluster_run  # noqa: E402


def fake_damon(root, states):
    os.makedirs(root)
    with open(os.path.join(root, "nr_kdamonds"), "w") as f:
        f.write("%d\n" % len(states))
    for i, s in enumerate(states):
        os.makedirs(os.path.join(root, str(i)))
        with open(os.path.join(root, str(i), "state"), "w") as f:
            f.write(s + "\n")


def states(root):
    out = []
    for i in range(len([n for n in os.listdir(root) if n.isdigit()])):
        with open(os.path.join(root, str(i), "state")) as f:
            out.append(f.read().strip())
    return out


class Host(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = os.path.join(self.tmp.name, "kdamonds")

    def tearDown(self):
        self.tmp.cleanup()

    def run_bench(self, body, states_, wait_for=None):
        """A process that pauses DAMON under root, waits until the states
        in the run are read, then runs body."""
        fake_damon(self.root, states_)
        code = textwrap.dedent("""
            import sys, time
            sys.path.insert(0, %r)
            import cluster_run
            print(cluster_run.damon(True, root=%r), flush=True)
            sys.stdin.readline()
        """ % (BENCH, self.root)) + textwrap.dedent(body)
        p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline()
            during = states(self.root)
            if wait_for:
                wait_for(p)
            out, err = p.communicate("go\n", timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        return line, during, p.returncode, err

    def test_heap(self):
        self.assertIn("glibc.malloc.mmap_max=0", cluster_run.STEADY_HEAP.split(":"))
        self.assertIn("glibc.malloc.mmap_threshold=33554432", cluster_run.STEADY_HEAP.split(":"))

    def test_report_without_pause(self):
        self.assertIn("not in this kernel", cluster_run.damon(False, root=self.root))
        fake_damon(self.root, ["off"])
        self.assertIn(": off", cluster_run.damon(False, root=self.root))
        with open(os.path.join(self.root, "0", "state"), "w") as f:
            f.write("on\n")
        line = cluster_run.damon(False, root=self.root)
        self.assertIn("on, 1 kdamond", line)
        self.assertEqual(states(self.root), ["on"])  # only read

    def test_pause_and_resume(self):
        line, during, rc, err = self.run_bench("", ["on", "off", "on"])
        self.assertEqual(rc, 0, err)
        self.assertIn("paused for the run (2 kdamonds", line)
        self.assertEqual(during, ["off", "off", "off"])
        self.assertEqual(states(self.root), ["on", "off", "on"])

    def test_resume_after_exception(self):
        line, during, rc, err = self.run_bench("raise RuntimeError('bench failed')", ["on"])
        self.assertEqual(rc, 1)
        self.assertIn("bench failed", err)
        self.assertEqual(during, ["off"])
        self.assertEqual(states(self.root), ["on"])

    def test_resume_after_sigterm(self):
        line, during, rc, err = self.run_bench("", ["on"],
                                               wait_for=lambda p: p.send_signal(signal.SIGTERM))
        self.assertEqual(rc, 128 + signal.SIGTERM, err)
        self.assertEqual(during, ["off"])
        self.assertEqual(states(self.root), ["on"])


class WarmUp(unittest.TestCase):
    def ops(self, size, warmup=None):
        return allreduce_vs_gloo.warmup_ops(type("A", (), {"warmup": warmup}), size)

    def test_default_covers_64_mib(self):
        # 0.25 MiB: 256 operations' worth, capped at 64; 4 MiB: 16; 16 MiB: 4;
        # 64 MiB and up: at least 3
        self.assertEqual([self.ops(n) for n in (65536, 1048576, 4194304, 16781312, 1 << 26)],
                         [64, 16, 4, 3, 3])
        self.assertEqual(self.ops(1), 64)

    def test_explicit_warmup_wins(self):
        self.assertEqual([self.ops(65536, 0), self.ops(16781312, 10)], [0, 10])


class ChunkGrid(unittest.TestCase):
    """The benches' mirror of sfb/fms.c's chunk grid: test_fms's cases."""

    def test_cases(self):
        rows = cluster_run.fms_chunk_rows
        self.assertEqual([rows(4096, 4097, 4), rows(1024, 4096, 4), rows(4096, 4096, 4),
                          rows(256, 4096, 4), rows(384, 4096, 4), rows(10, 2 << 20, 4),
                          rows(4096, 4096, 1), rows(0, 4096, 4)],
                         [205, 64, 256, 64, 48, 1, 256, 1])
        self.assertEqual([rows(1000, 4, 2, 16), rows(41, 4, 4, 32), rows(9, 4, 4, 32)], [1, 2, 1])


if __name__ == "__main__":
    unittest.main(verbosity=2)
