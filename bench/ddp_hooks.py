"""The compressed DDP baselines of bench/torch_vs_ddp.py: communication hooks
for torch.nn.parallel.DistributedDataParallel.

  fp16      torch's own fp16_compress_hook (Horovod's Compression.fp16): the
            bucket travels in float16, half the bytes
  powersgd  PowerSGD (Vogels, Karimireddy and Jaggi, NeurIPS 2019), carried
            here because Debian's torch 1.13 powerSGD_hook aborts inside
            gloo on this machine: each gradient of 2 or more dimensions
            (viewed as rows x the rest) is sent as two rank-r factors, with
            error feedback (what the approximation left out is added to the
            next step's gradient) and warm start (the previous step's Q
            starts the next power iteration); vectors, and matrices the
            factors would not shrink, are all-reduced as they are

Both run inside the hook (blocking all-reduces on the bucket's gradients,
which are views into its buffer) and hand DDP back the averaged buffer.
"""
import torch
import torch.distributed as dist


class PowerSGD:
    """DDP + PowerSGD's state: net.register_comm_hook(PowerSGD(world), powersgd_hook)."""

    def __init__(self, world, rank=4, seed=0):
        self.world, self.rank, self.seed = world, rank, seed
        self.state = {}  # per parameter: (Q of the last step, error feedback)

    def shape(self, g):
        """(rows, cols, r) of a gradient PowerSGD compresses, else None."""
        if g.dim() < 2:
            return None
        n, m = g.shape[0], g.numel() // g.shape[0]
        r = min(self.rank, n, m)
        return (n, m, r) if (n + m) * r < n * m else None

    def __call__(self, _state, bucket):
        grads, params = bucket.gradients(), bucket.parameters()
        plain = [g for g in grads if self.shape(g) is None]
        if plain:
            flat = torch.cat([g.reshape(-1) for g in plain])
            dist.all_reduce(flat)
            flat /= self.world
            o = 0
            for g in plain:
                g.copy_(flat[o:o + g.numel()].view_as(g))
                o += g.numel()
        mats = [(g, p) + self.shape(g) for g, p in zip(grads, params) if self.shape(g)]
        if mats:
            self.compress(mats)
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut

    def compress(self, mats):
        """One power iteration per matrix, the P's and the Q's each in one
        all-reduce: P = M Q (summed, then orthogonalized), Q = M^T P (the
        mean), M ~ P Q^T; M is the gradient plus the error left last step."""
        ms, ps = [], []
        for g, p, n, m, r in mats:
            if id(p) not in self.state:  # the same Q on every rank: one seed
                gen = torch.Generator().manual_seed(self.seed + len(self.state))
                self.state[id(p)] = (torch.randn(m, r, generator=gen), torch.zeros(n, m))
            q, err = self.state[id(p)]
            ms.append(g.view(n, m) + err)
            ps.append(ms[-1] @ q)
        flat = torch.cat([x.reshape(-1) for x in ps])
        dist.all_reduce(flat)
        o, phs = 0, []
        for g, p, n, m, r in mats:
            phs.append(torch.linalg.qr(flat[o:o + n * r].view(n, r))[0])
            o += n * r
        flat = torch.cat([(mat.t() @ ph).reshape(-1) for mat, ph in zip(ms, phs)])
        dist.all_reduce(flat)
        flat /= self.world
        o = 0
        for (g, p, n, m, r), mat, ph in zip(mats, ms, phs):
            q = flat[o:o + m * r].view(m, r).clone()
            o += m * r
            approx = ph @ q.t()  # the mean gradient, rank r
            self.state[id(p)] = (q, mat - approx)
            g.copy_(approx.view_as(g))


def powersgd_hook(state, bucket):
    """DDP's hook signature (a named function: DDP checks the name and the
    annotations of what it is given), state a PowerSGD."""
    return state(None, bucket)


def register(net, kind, world):
    """Registers hook `kind` ("fp16" or "powersgd") on DDP module net."""
    if kind == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        net.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif kind == "powersgd":
        net.register_comm_hook(PowerSGD(world), powersgd_hook)
    else:
        raise ValueError("ddp hook %r: expected fp16 or powersgd" % kind)


def formula_bytes(params, kind, world):
    """What one worker sends a step under hook `kind` (ring all-reduce:
    2 (P-1)/P of each all-reduced tensor)."""
    ring = 2.0 * (world - 1) / world
    if kind == "fp16":
        return ring * sum(p.numel() for p in params) * 2
    h, n = PowerSGD(world), 0
    for p in params:
        s = h.shape(p.detach())
        n += p.numel() if s is None else (s[0] + s[1]) * s[2]
    return ring * n * 4
