"""The compressed DDP baselines of the benchmarks (bench/ddp_hooks.py), in a
gloo group of one process: PowerSGD gives back a gradient of rank <= r
exactly, its error feedback loses nothing over the steps (what was sent plus
what is left equals the gradients' sum), vectors and matrices it would not
shrink pass as they are, and the byte formula counts what it sends."""
import os
import socket
import sys
import unittest

try:
    import torch
    import torch.distributed as dist
except ImportError:
    print("skipped: no torch (install python3-torch)", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "bench"))
import ddp_hooks  # noqa: E402


class Bucket:
    """The part of DDP's GradBucket the hook reads: flat buffer, gradient
    views into it, their parameters."""

    def __init__(self, params):
        self.params = params
        self.buf = torch.zeros(sum(p.numel() for p in params))
        self.grads, o = [], 0
        for p in params:
            self.grads.append(self.buf[o:o + p.numel()].view(p.shape))
            o += p.numel()

    def buffer(self):
        return self.buf

    def gradients(self):
        return self.grads

    def parameters(self):
        return self.params


def low_rank(n, m, r, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, r, generator=g) @ torch.randn(r, m, generator=g)


class PowerSGDHook(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=0,
                                world_size=1)

    @classmethod
    def tearDownClass(cls):
        dist.destroy_process_group()

    def test_low_rank_exact(self):
        w, v = torch.nn.Parameter(torch.zeros(16, 12)), torch.nn.Parameter(torch.zeros(5))
        b = Bucket([w, v])
        g, vec = low_rank(16, 12, 3, 1), torch.arange(5.0)
        b.grads[0].copy_(g)
        b.grads[1].copy_(vec)
        out = ddp_hooks.PowerSGD(1, rank=4)(None, b).wait()
        self.assertIs(out, b.buf)
        self.assertLess((b.grads[0] - g).abs().max().item(), 1e-4 * g.abs().max().item())
        self.assertTrue(torch.equal(b.grads[1], vec))

    def test_error_feedback_loses_nothing(self):
        w = torch.nn.Parameter(torch.zeros(20, 18))
        hook = ddp_hooks.PowerSGD(1, rank=2)
        g = torch.randn(20, 18, generator=torch.Generator().manual_seed(2))  # full rank
        sent = torch.zeros(20, 18)
        for step in range(6):
            b = Bucket([w])
            b.grads[0].copy_(g)
            hook(None, b)
            approx = b.grads[0].clone()
            self.assertGreater((approx - g).abs().max().item(), 1e-3)  # compressed: not g
            sent += approx
        err = hook.state[id(w)][1]
        self.assertLess((sent + err - 6 * g).abs().max().item(), 1e-3)
        # warm start: the stored Q is the last step's, not the seed's
        q0 = torch.randn(18, 2, generator=torch.Generator().manual_seed(0))
        self.assertFalse(torch.allclose(hook.state[id(w)][0], q0))

    def test_incompressible_passes(self):
        w = torch.nn.Parameter(torch.zeros(3, 2))  # (3 + 2)·2 >= 3·2: sent whole
        b = Bucket([w])
        g = torch.randn(3, 2, generator=torch.Generator().manual_seed(4))
        b.grads[0].copy_(g)
        ddp_hooks.PowerSGD(1, rank=2)(None, b)
        self.assertTrue(torch.equal(b.grads[0], g))

    def test_formula(self):
        ps = [torch.zeros(16, 12), torch.zeros(5), torch.zeros(8, 3, 2, 2)]
        # P = 4: ring 2·3/4; PowerSGD rank 4: (16 + 12)·4 + 5 + (8 + 12)·4 numbers
        self.assertEqual(ddp_hooks.formula_bytes(ps, "powersgd", 4), 1.5 * (112 + 5 + 80) * 4)
        self.assertEqual(ddp_hooks.formula_bytes(ps, "fp16", 4), 1.5 * (192 + 5 + 96) * 2)


if __name__ == "__main__":
    unittest.main()
