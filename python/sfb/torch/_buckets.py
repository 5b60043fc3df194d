"""The parameters that go densely, in buckets (DDP's): backward order, about
bucket_cap_mb each (DistributedOptimizer's), every bucket one of the job's matrices (the FMS engine,
a pipelined reduce-scatter + all-gather). At staleness 0 a bucket leaves as
soon as backward has accumulated the gradient of each of its parameters
that needs one (a hook on the parameter's gradient accumulator), while the
layers below still compute; what is not ready then leaves at the end of
the pass."""
import numpy as np
import torch

def matrix_shape(n):
    """The 2-D matrix of n numbers: rows of up to 4096 (FMS splits rows
    among its servers: at least 64 rows when n allows)."""
    cols = max(1, min(4096, -(-n // 64)))
    return -(-n // cols), cols


def _dense(grad):
    """A .grad as a dense tensor (an embedding's sparse one at staleness > 0)."""
    return grad.detach().to_dense() if grad.is_sparse else grad.detach()


class Bucket:
    """Some dense parameters in one of the job's matrices."""

    def __init__(self, params):
        self.params = params  # [(name, p)], in backward order
        self.n = sum(p.numel() for _, p in params)
        self.buf = np.zeros(matrix_shape(self.n), np.float32)  # the job's matrix
        self.flat = torch.from_numpy(self.buf.reshape(-1))
        self.grads = None  # .grad tensors handed out where a parameter had none
        self.index = None  # the matrix's index in the job
        self.published = False
        self.ready = set()  # ids of parameters whose gradient this pass accumulated

    def views(self):
        """(name, p, offset, numel) of each parameter."""
        o = 0
        for name, p in self.params:
            yield name, p, o, p.numel()
            o += p.numel()

    def all_ready(self):
        return all(id(p) in self.ready for _, p in self.params if p.requires_grad)

    def stage_update(self, out, lr_of, additive, training, world):
        """This rank's update of the clock in out (the job's dense buffer of
        the bucket's matrix, which it is sent from): each .grad (zeros for a
        parameter without one, or a rank not training), at staleness > 0
        times -lr / world."""
        stage = out.reshape(-1)
        for _, p, o, k in self.views():
            if p.grad is None or not training:
                stage[o:o + k] = 0
            elif additive:
                np.multiply(_dense(p.grad).reshape(-1).numpy(),
                            np.float32(-lr_of(p) / world), out=stage[o:o + k])
            else:
                stage[o:o + k] = _dense(p.grad).reshape(-1).numpy()
        stage[self.n:] = 0
        return out

    def adopt_parameters(self):
        """Staleness > 0: the replica holds the parameters, which become views
        of it."""
        for _, p, o, k in self.views():
            self.buf.reshape(-1)[o:o + k] = p.detach().reshape(-1).numpy()
        for _, p, o, k in self.views():
            p.data = self.flat[o:o + k].view(p.shape)

    def set_grads(self, present, inv):
        """Staleness 0, after the clock: each parameter some rank gave a
        gradient gets .grad = inv * the sum (into its .grad tensor, or a view
        of the bucket's own); the matrix is zeroed for the next clock."""
        if self.grads is None:
            self.grads = torch.zeros(self.n)
        for _, p, o, k in self.views():
            if present(p):
                src = self.flat[o:o + k].view(p.shape)
                if p.grad is not None:
                    torch.mul(src, float(inv), out=p.grad)
                else:
                    view = self.grads[o:o + k].view(p.shape)
                    torch.mul(src, float(inv), out=view)
                    p.grad = view
        self.buf.fill(0)
        self.published = False
        self.ready.clear()


def plan(dense, cap):
    """The buckets of the dense parameters (model order): backward order
    (the reverse), each up to cap bytes (a larger parameter alone)."""
    buckets, cur, size = [], [], 0
    for name, p in reversed(dense):
        b = p.numel() * 4
        if cur and size + b > cap:
            buckets.append(Bucket(cur))
            cur, size = [], 0
        cur.append((name, p))
        size += b
    if cur:
        buckets.append(Bucket(cur))
    return buckets


def accumulator(p):
    """p's gradient accumulator (the autograd node that adds into p.grad):
    its hooks run once a pass, after the addition. Keep it referenced.
    (Made with gradients on: the first reduction runs inside backward's
    end-of-pass callback, where they are off.)"""
    with torch.enable_grad():
        return p.expand_as(p).grad_fn.next_functions[0][0]
