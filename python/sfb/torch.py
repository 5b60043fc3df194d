"""sfb.torch — PyTorch models trained by sufficient factor broadcasting.

Every `nn.Linear` of a model is synchronized by its sufficient factors (the
output gradients and the inputs of the layer, the bias as a column of ones),
every other parameter (convolutions, norms, embeddings) by a dense engine,
after the conventions of Horovod and BlueFog:

    import sfb.torch as sft
    sft.init()                               # sfb launch, mpirun/srun (PMIx), SFB_* or torchrun env
    sft.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                   model=model, sync="auto")
    for x, y in loader:                      # each rank its own shard
        opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    print(opt.plan)                          # one line per matrix: engine and why
    sft.shutdown()                           # every update applied everywhere

How (docs/torch.md): at staleness 0 the job's replicas are gradient
buffers, one per Linear (out x in+1) and one for all dense parameters; each
step every rank adds its factors (scaled 1/P) and its dense gradients, the
job applies every rank's, and the wrapped optimizer steps on that mean
gradient, identically on every rank (momentum, weight decay, Adam: any
torch.optim optimizer). A layer's factors leave during the backward pass, as
soon as its last backward call produced them. With staleness > 0 the
replicas are the parameters themselves and updates are added as they come
(stale synchronous parallel): exact only for plain SGD, which is checked.
"""

import os
import socket
import threading
import zlib

import numpy as np
import torch
import torch.nn.functional as F

import sfb as _sfb

__all__ = ["init", "rank", "size", "local_size", "shutdown", "is_initialized", "stats",
           "broadcast_parameters", "broadcast_object", "broadcast_optimizer_state",
           "allreduce", "DistributedOptimizer", "Error"]

Error = _sfb.Error

_job = None          # the process's sfb.Job
_local_size = 1      # ranks on this host
_optimizer = None    # the one DistributedOptimizer of the job (its _Sync)
_final_stats = None  # the last job's counters at its end (stats())


def _launcher_args():
    """Job() arguments from torchrun's environment when no sfb launcher
    (sfb launch / SFB_RANK, PMIx) set one up: RANK, WORLD_SIZE, and rank 0
    listening at MASTER_ADDR on MASTER_PORT + 1 (torchrun's agent may hold
    MASTER_PORT itself: its store under the static rendezvous; and a script
    may open torch.distributed there). SFB_RENDEZVOUS overrides it."""
    if "SFB_RANK" in os.environ or "PMIX_RANK" in os.environ:
        return {}
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        world = int(os.environ["WORLD_SIZE"])
        rdv = os.environ.get("SFB_RENDEZVOUS")
        if not rdv and world > 1:
            if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
                raise ValueError("sfb.torch.init: RANK and WORLD_SIZE are set (torchrun) but not "
                                 "MASTER_ADDR and MASTER_PORT, nor SFB_RENDEZVOUS")
            rdv = "%s:%d" % (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]) + 1)
        return {"rank": int(os.environ["RANK"]), "world": world, "rendezvous": rdv}
    return {}


def init(**job_args):
    """Joins the job (collective): under `sfb launch`, mpirun/srun (PMIx),
    the SFB_* environment, torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT,
    or alone. Keyword arguments go to sfb.Job (rank, world, rendezvous,
    provider, peer_timeout_s, ...). Unless OMP_NUM_THREADS is set, torch's
    and OpenBLAS's threads are this process's share of the CPUs it may use
    among the ranks of its host. Calling it again is a no-op."""
    global _job, _local_size
    if _job is not None:
        return
    args = _launcher_args()
    args.update(job_args)
    job = _sfb.Job(**args)
    host = socket.gethostname().encode()[:63].ljust(64, b"\0")
    _local_size = sum(h == host for h in job.allgather(host)) if job.world > 1 else 1
    if "OMP_NUM_THREADS" not in os.environ:
        share = max(1, len(os.sched_getaffinity(0)) // _local_size)
        torch.set_num_threads(share)
        # OpenBLAS (libsfb's reconstruction, and torch's matmuls where it
        # calls BLAS) keeps its own pool, by default a thread per core in
        # every process: busy-waiting threads of P processes on one host
        _sfb.library().sfb_set_blas_threads(share)
    _job = job


def is_initialized():
    return _job is not None


def _need():
    if _job is None:
        raise RuntimeError("sfb.torch: call sfb.torch.init() first")
    return _job


def rank():
    return _need().rank


def size():
    return _need().world


def local_size():
    """Ranks of this job on this host."""
    _need()
    return _local_size


def shutdown():
    """The orderly end (collective): every update applied on every rank, the
    replicas identical; then the job is left. Call it on every rank after the
    last step. Without it, peers see this rank leave."""
    global _job, _optimizer, _final_stats
    if _job is None:
        return
    try:
        if _optimizer is not None:
            _optimizer.finish()
        else:
            _job.finish(-1)
        _final_stats = _job.stats()
    except BaseException:
        _job.abort("sfb.torch.shutdown failed")
        raise
    finally:
        if _optimizer is not None:
            _optimizer.release()  # the model's layers as they were, its parameters kept
        _job.close()
        _job, _optimizer = None, None


def stats():
    """The job's counters (bytes and messages sent and received, the engines'
    data messages and bytes, ...: sfb.Job.stats); after shutdown, those at
    the end of the last job (every update sent)."""
    if _job is not None:
        return _job.stats()
    if _final_stats is None:
        raise RuntimeError("sfb.torch: call sfb.torch.init() first")
    return dict(_final_stats)


def _abort_on_error(fn):
    """Runs fn; on an exception tells the peers this rank failed (so they
    stop at once naming it, rather than waiting for its heartbeat to end)."""
    def wrapped(*a, **k):
        try:
            return fn(*a, **k)
        except BaseException as e:
            if _job is not None:
                _job.abort("%s: %s" % (type(e).__name__, e))
            raise
    wrapped.__name__, wrapped.__doc__ = fn.__name__, fn.__doc__
    return wrapped


def _named_tensors(params):
    """(name, tensor) pairs of a state_dict, named_parameters() or a list."""
    if isinstance(params, dict):
        return list(params.items())
    out = []
    for i, p in enumerate(params):
        out.append(p if isinstance(p, tuple) else ("#%d" % i, p))
    return out


@_abort_on_error
def broadcast_parameters(params, root_rank=0):
    """Makes every rank's tensors equal to root_rank's (collective), in
    place: a state_dict, model.named_parameters() or a list of tensors. Every
    rank must pass the same names, shapes and dtypes (a clear error names the
    first that differs)."""
    job = _need()
    named = _named_tensors(params)
    job.agree("".join("%s=%s:%s\n" % (n, tuple(t.shape), t.dtype) for n, t in named))
    if job.world == 1 or not named:
        return
    sizes = [t.numel() * t.element_size() for _, t in named]
    buf = np.empty(sum(sizes), np.uint8)
    if job.rank == root_rank:
        o = 0
        for (_, t), n in zip(named, sizes):
            buf[o:o + n] = t.detach().contiguous().view(-1).view(torch.uint8).numpy()
            o += n
    job.broadcast(root_rank, buf)
    if job.rank != root_rank:
        o = 0
        with torch.no_grad():
            for (_, t), n in zip(named, sizes):
                src = torch.from_numpy(buf[o:o + n]).view(t.dtype).view(t.shape)
                t.copy_(src)
                o += n


@_abort_on_error
def broadcast_object(obj, root_rank=0):
    """root_rank's picklable object on every rank (collective)."""
    import pickle
    job = _need()
    if job.world == 1:
        return obj
    data = pickle.dumps(obj) if job.rank == root_rank else b""
    n = np.array([len(data)], np.uint64)
    job.broadcast(root_rank, n)
    buf = np.frombuffer(bytearray(data), np.uint8) if job.rank == root_rank else \
        np.empty(int(n[0]), np.uint8)
    if len(buf):
        job.broadcast(root_rank, buf)
    return obj if job.rank == root_rank else pickle.loads(buf.tobytes())


def broadcast_optimizer_state(optimizer, root_rank=0):
    """Loads root_rank's optimizer state (momentum buffers, steps) on every
    rank (collective), e.g. after rank 0 alone read a checkpoint."""
    state = broadcast_object(optimizer.state_dict(), root_rank)
    if _need().rank != root_rank:
        optimizer.load_state_dict(state)


@_abort_on_error
def allreduce(tensor, op="mean"):
    """The sum or mean over ranks of a small tensor (at most 1 MiB; for
    metrics such as a test accuracy, not gradients), as a new tensor."""
    job = _need()
    if op not in ("sum", "mean"):
        raise ValueError("allreduce: op %r: expected 'sum' or 'mean'" % (op,))
    t = torch.as_tensor(tensor)
    a = t.detach().to(torch.float64).contiguous().view(-1).numpy()
    if a.nbytes * 1 > (1 << 20):
        raise ValueError("allreduce: %d bytes, more than 1 MiB" % a.nbytes)
    parts = job.allgather(a.tobytes())
    total = np.zeros_like(a)
    for p in parts:  # rank order: the same sum on every rank
        total += np.frombuffer(p, np.float64)
    if op == "mean":
        total /= job.world
    return torch.from_numpy(total).view(t.shape).to(t.dtype)


# ---- the optimizer --------------------------------------------------------

class _Linear:
    """One nn.Linear: one matrix of the job (out x in, +1 column for the bias)."""

    def __init__(self, sync, name, module, index):
        self.sync, self.name, self.module, self.index = sync, name, module, index
        self.weight, self.bias = module.weight, module.bias
        self.rows, self.inputs = module.weight.shape
        self.cols = self.inputs + (1 if self.bias is not None else 0)
        self.buf = None        # the replica (numpy rows x cols)
        self.cbuf = None       # c with the bias's ones column, kept across steps
        self.reset()

    def reset(self):
        self.fwd = self.bwd = 0
        self.go, self.x = [], []
        self.published = False

    @property
    def label(self):
        return "%s (%dx%d%s)" % (self.name, self.rows, self.inputs,
                                 "+bias" if self.bias is not None else "")

    def samples(self):
        return sum(g.shape[0] for g in self.go)

    def factors(self):
        """(b, c): s x rows and s x cols, float32 C-contiguous numpy."""
        if not self.go:  # unused this step: one sample of zeros adds nothing
            return (np.zeros((1, self.rows), np.float32), np.zeros((1, self.cols), np.float32))
        b = self.go[0] if len(self.go) == 1 else torch.cat(self.go)
        s = b.shape[0]
        if self.bias is None:
            c = self.x[0] if len(self.x) == 1 else torch.cat(self.x)
        else:
            # the inputs straight into a buffer kept across steps (publish
            # copies what it sends), whose ones column is set once
            if self.cbuf is None or self.cbuf.shape[0] < s:
                self.cbuf = torch.ones((s, self.cols), dtype=torch.float32)
            c, o = self.cbuf[:s], 0
            for x in self.x:
                c[o:o + x.shape[0], :self.inputs].copy_(x)
                o += x.shape[0]
        return b.contiguous().numpy(), c.contiguous().numpy()


class _LinearFactors(torch.autograd.Function):
    """F.linear whose backward gives the input's gradient only and hands the
    layer's sufficient factors (output gradients, inputs) to sfb: the dense
    weight gradient is never formed here."""

    @staticmethod
    def forward(ctx, x, weight, bias, slot):
        ctx.save_for_backward(x, weight)
        ctx.slot = slot
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, go):
        x, weight = ctx.saved_tensors
        gx = go.matmul(weight) if ctx.needs_input_grad[0] else None
        slot = ctx.slot
        slot.sync.take(slot, go.reshape(-1, slot.rows), x.detach().reshape(-1, slot.inputs))
        return gx, None, None, None


def _linear_forward(module, x):
    slot = module._sfb_slot
    if torch.is_grad_enabled() and slot.sync.capturing:
        slot.fwd += 1
        return _LinearFactors.apply(x, module.weight, module.bias, slot)
    return F.linear(x, module.weight, module.bias)


def _plain_sgd(opt):
    """None when opt's updates add up as they come (plain SGD), else why not."""
    if type(opt) is not torch.optim.SGD:
        return "%s keeps a state per parameter" % type(opt).__name__
    for g in opt.param_groups:
        for k in ("momentum", "weight_decay"):
            if g.get(k, 0):
                return "SGD with %s=%g" % (k, g[k])
        for k in ("nesterov", "maximize"):
            if g.get(k, False):
                return "SGD with %s=True" % k
    return None


class _Sync:
    """What a DistributedOptimizer adds to its optimizer: the matrices, the
    job's clock, the factor capture."""

    def __init__(self, opt, model, sync, staleness, backward_passes_per_step, max_samples,
                 overlap, attach_args):
        job = _need()
        self.opt, self.job, self.model = opt, job, model
        if sync not in ("auto", "sfb", "fms"):
            raise ValueError("DistributedOptimizer: sync %r: expected 'auto', 'sfb' or 'fms'" %
                             (sync,))
        if not isinstance(staleness, int) or staleness < -1:
            raise ValueError("DistributedOptimizer: staleness %r: expected an integer >= 0, or "
                             "-1 (asynchronous)" % (staleness,))
        if not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
            raise ValueError("DistributedOptimizer: backward_passes_per_step %r: expected an "
                             "integer >= 1" % (backward_passes_per_step,))
        if max_samples is not None and (not isinstance(max_samples, int) or max_samples < 1):
            raise ValueError("DistributedOptimizer: max_samples %r: expected an integer >= 1" %
                             (max_samples,))
        self.sync, self.staleness = sync, staleness
        self.passes_per_step = backward_passes_per_step
        self.max_samples, self.overlap, self.attach_args = max_samples, overlap, attach_args
        self.additive = staleness != 0  # replicas are the parameters
        if self.additive:
            why = _plain_sgd(opt)
            if why:
                raise ValueError("DistributedOptimizer: staleness %d adds every rank's update to "
                                 "the parameters as it comes, exact only for plain torch.optim."
                                 "SGD (no momentum, weight decay, nesterov or maximize); %s "
                                 "would differ between ranks. Use staleness=0 (any optimizer) "
                                 "or plain SGD" % (staleness, why))
        self.thread = threading.get_ident()
        self._collect(model)
        self.clock = 0          # the clock of the step being computed
        self.attached = False
        self.passes = 0         # forward passes (with grad) this step
        self.synced = False     # synchronize() ran this step
        self.capturing = True
        self.plan = ""
        self.last_stats = None

    # -- which parameter goes where

    def _collect(self, model):
        names = {id(p): n for n, p in model.named_parameters()}
        in_opt = {}
        for gi, g in enumerate(self.opt.param_groups):
            for p in g["params"]:
                if id(p) not in names:
                    raise ValueError("DistributedOptimizer: parameter %d of the optimizer's "
                                     "param_groups[%d] (shape %s) is not a parameter of the "
                                     "model" % (len(in_opt), gi, tuple(p.shape)))
                in_opt[id(p)] = g
        for n, p in model.named_parameters():
            if p.requires_grad and id(p) not in in_opt:
                raise ValueError("DistributedOptimizer: model parameter %s requires a gradient "
                                 "but the optimizer does not know it (add it to the optimizer, "
                                 "or set requires_grad=False to freeze it)" % n)
            if p.requires_grad and p.dtype != torch.float32:
                raise ValueError("DistributedOptimizer: parameter %s is %s: sfb synchronizes "
                                 "float32 parameters (model.float())" % (n, p.dtype))
            if p.requires_grad and p.device.type != "cpu":
                raise ValueError("DistributedOptimizer: parameter %s is on %s: sfb.torch "
                                 "trains on the CPU" % (n, p.device))
        self.group_of = in_opt
        self.linears, covered = [], set()
        for mname, m in model.named_modules():
            if not isinstance(m, torch.nn.Linear) or not m.weight.requires_grad:
                continue
            if m.bias is not None and not m.bias.requires_grad:
                continue  # a frozen bias: weight and bias go the dense way
            if hasattr(m, "_sfb_slot"):
                raise ValueError("DistributedOptimizer: %s is already synchronized by another "
                                 "DistributedOptimizer (one per job)" % (mname or "the model"))
            slot = _Linear(self, mname or "linear", m, len(self.linears))
            if self.additive and m.bias is not None and \
                    in_opt[id(m.weight)]["lr"] != in_opt[id(m.bias)]["lr"]:
                raise ValueError("DistributedOptimizer: %s.weight and .bias have different "
                                 "learning rates, which staleness > 0 cannot apply as one "
                                 "update" % slot.name)
            self.linears.append(slot)
            covered.add(id(m.weight))
            if m.bias is not None:
                covered.add(id(m.bias))
        self.dense = [(n, p) for n, p in model.named_parameters()
                      if p.requires_grad and id(p) not in covered]
        self.dense_n = sum(p.numel() for _, p in self.dense)
        self.dense_buf = None
        for slot in self.linears:
            slot.module._sfb_slot = slot
            slot.module.forward = _linear_forward.__get__(slot.module)
        # forward passes, to know the last backward pass of a step
        self.hook = model.register_forward_pre_hook(self._count_pass)

    def _count_pass(self, module, inputs):
        if torch.is_grad_enabled():
            self.passes += 1

    def release(self):
        self.hook.remove()
        for slot in self.linears:
            if getattr(slot.module, "_sfb_slot", None) is slot:
                del slot.module.forward
                del slot.module._sfb_slot

    # -- capture, during backward

    def take(self, slot, go, x):
        if slot.published:
            raise RuntimeError("sfb.torch: %s received a gradient after its factors of step %d "
                               "left (a backward pass after the last of the step's %d?)" %
                               (slot.name, self.clock, self.passes_per_step))
        slot.go.append(go.detach())
        slot.x.append(x)
        slot.bwd += 1
        if (self.overlap and self.attached and slot.bwd == slot.fwd and
                self.passes >= self.passes_per_step and threading.get_ident() == self.thread):
            try:
                self._publish_linear(slot)
            except BaseException as e:  # raised out of backward(): tell the peers
                self.job.abort("%s: %s" % (type(e).__name__, e))
                raise

    # -- the job

    def _scale(self, slot_or_group):
        if not self.additive:
            return 1.0 / self.job.world
        return -self.group_of[id(slot_or_group.weight)]["lr"] / self.job.world

    def _publish_linear(self, slot):
        b, c = slot.factors()
        if b.shape[0] > self.max_s:
            raise ValueError("sfb.torch: %s has %d samples at step %d, more than the %d it was "
                             "attached with (the first step's; pass max_samples= to "
                             "DistributedOptimizer)" % (slot.name, b.shape[0], self.clock,
                                                        self.max_s))
        self.job.publish_one(self.clock, slot.index, b, c, self._scale(slot))
        slot.published = True
        slot.go, slot.x = [], []

    def _dense_shape(self):
        n = self.dense_n
        cols = max(1, min(4096, -(-n // 64)))
        return -(-n // cols), cols

    def _publish_dense(self):
        stage = self.dense_stage
        o = 0
        missing = 0
        for name, p in self.dense:
            k = p.numel()
            if p.grad is None:
                stage[o:o + k] = 0
                missing += 1
            elif self.additive:
                np.multiply(p.grad.detach().reshape(-1).numpy(),
                            np.float32(-self.group_of[id(p)]["lr"] / self.job.world),
                            out=stage[o:o + k])
            else:
                stage[o:o + k] = p.grad.detach().reshape(-1).numpy()
            o += k
        scale = 1.0 if self.additive else 1.0 / self.job.world
        self.job.publish_dense(self.clock, len(self.linears),
                               stage.reshape(self.dense_buf.shape), scale)
        return missing

    def _attach(self):
        """The first step: the shapes and the first step's samples are known."""
        job = self.job
        s = max([slot.samples() for slot in self.linears] + [1])
        self.max_s = self.max_samples or s
        for slot in self.linears:
            if slot.samples() > self.max_s:
                raise ValueError("sfb.torch: %s has %d samples, more than max_samples %d" %
                                 (slot.name, slot.samples(), self.max_s))
        mats, engines = [], []
        with torch.no_grad():
            for slot in self.linears:
                slot.buf = np.zeros((slot.rows, slot.cols), np.float32)
                if self.additive:  # the parameters live in the replica
                    slot.buf[:, :slot.inputs] = slot.weight.detach().numpy()
                    if slot.bias is not None:
                        slot.buf[:, slot.inputs] = slot.bias.detach().numpy()
                mats.append(slot.buf)
                engines.append(self.sync)
            if self.dense:
                self.dense_buf = np.zeros(self._dense_shape(), np.float32)
                self.dense_stage = np.zeros(self.dense_buf.size, np.float32)
                flat = self.dense_buf.reshape(-1)
                if self.additive:
                    o = 0
                    for _, p in self.dense:
                        flat[o:o + p.numel()] = p.detach().reshape(-1).numpy()
                        o += p.numel()
                mats.append(self.dense_buf)
                engines.append("fms")  # dense gradients: the engine that carries them
        # every rank the same shapes and the same start (clear errors, not
        # rejected frames later)
        lines = ["%s=%dx%d\n" % (slot.name, slot.rows, slot.cols) for slot in self.linears]
        lines += ["%s=%s\n" % (n, tuple(p.shape)) for n, p in self.dense]
        job.agree("".join(lines))
        crc = 0
        for _, p in self.model.named_parameters():
            crc = zlib.crc32(p.detach().contiguous().numpy().tobytes(), crc)
        try:
            job.agree("parameters_crc32=%08x\n" % crc)
        except _sfb.Error as e:
            raise _sfb.Error(e.code, "sfb.torch: the ranks start from different parameters (%s): "
                             "call sfb.torch.broadcast_parameters(model.state_dict()) before "
                             "training" % e) from None
        job.attach(mats, max_s=self.max_s, engine=",".join(engines),
                   staleness=self.staleness, start_clock=self.clock, **self.attach_args)
        if self.additive:
            with torch.no_grad():
                for slot in self.linears:
                    w = torch.from_numpy(slot.buf)
                    slot.weight.data = w[:, :slot.inputs]
                    if slot.bias is not None:
                        slot.bias.data = w[:, slot.inputs]
                o = 0
                flat = torch.from_numpy(self.dense_buf.reshape(-1)) if self.dense else None
                for _, p in self.dense:
                    p.data = flat[o:o + p.numel()].view(p.shape)
                    o += p.numel()
        self.attached = True
        self.plan = self._describe(job)
        job.wait(self.clock)

    def _describe(self, job):
        auto = {}
        for line in job.plan.splitlines():
            parts = line.split()
            if len(parts) > 1 and parts[0] == "matrix" and parts[1].isdigit():
                why = line.split(":", 1)[1].strip() if ":" in line else line
                auto[int(parts[1])] = why.rsplit(" -> ", 1)[0]
        out = []
        for slot in self.linears:
            eng = job.engines[slot.index]
            why = "auto: " + auto[slot.index] if slot.index in auto else \
                "sync=%r" % self.sync
            out.append("%s: %s (%s)" % (slot.label, eng, why))
        if self.dense:
            names = [n for n, _ in self.dense]
            shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
            out.append("dense (%d tensors, %d values: %s): %s (dense gradients)" %
                       (len(names), self.dense_n, shown, job.engines[len(self.linears)]))
        return "\n".join(out)

    def synchronize(self):
        """Publishes what is left of this step, applies every rank's updates
        and (staleness 0) sets each parameter's .grad to the mean gradient."""
        if self.synced:
            return
        if threading.get_ident() != self.thread:
            raise RuntimeError("sfb.torch: step() from another thread than the one that made "
                               "the DistributedOptimizer")
        got = any(slot.go or slot.published for slot in self.linears) or \
            any(p.grad is not None for _, p in self.dense)
        if not got:
            raise RuntimeError("sfb.torch: step() without backward(): no gradient since step %d" %
                               (self.clock - 1) if self.clock else
                               "sfb.torch: step() without backward(): no gradient yet")
        for slot in self.linears:
            for p in (slot.weight, slot.bias):
                if p is not None and p.grad is not None:
                    raise RuntimeError("sfb.torch: %s received a dense gradient: its weight or "
                                       "bias was used outside the layer's own forward (F.linear "
                                       "on it, or a tied weight), which sfb.torch cannot "
                                       "synchronize by factors" % slot.name)
            if slot.bwd != slot.fwd:
                raise RuntimeError("sfb.torch: %s ran %d forward passes with gradients but "
                                   "%d backward this step" % (slot.name, slot.fwd, slot.bwd))
        if not self.attached:
            self._attach()
        for slot in self.linears:
            if not slot.published:
                self._publish_linear(slot)
        if self.dense:
            self._publish_dense()
        if not self.additive:
            self.job.drain(self.clock)
            for slot in self.linears:
                g = torch.from_numpy(slot.buf)
                slot.weight.grad = g[:, :slot.inputs]
                if slot.bias is not None:
                    slot.bias.grad = g[:, slot.inputs]
            if self.dense:
                flat = torch.from_numpy(self.dense_buf.reshape(-1))
                o = 0
                for _, p in self.dense:
                    p.grad = flat[o:o + p.numel()].view(p.shape)
                    o += p.numel()
        self.synced = True

    def end_step(self):
        """After the optimizer's step: zero the gradient buffers, next clock,
        its SSP gate (staleness 0: returns at once)."""
        if not self.additive:
            for slot in self.linears:
                slot.buf.fill(0)
            if self.dense:
                self.dense_buf.fill(0)
        for slot in self.linears:
            slot.weight.grad = None
            if slot.bias is not None:
                slot.bias.grad = None
            slot.reset()
        for _, p in self.dense:
            p.grad = None
        self.passes = 0
        self.synced = False
        self.clock += 1
        self.job.wait(self.clock)

    def finish(self):
        self.job.finish(self.clock - 1 if self.attached else -1)


class _DistributedOptimizer:
    """Methods of the optimizer class DistributedOptimizer derives."""

    def __init__(self, opt, sync_state):
        # the wrapped optimizer's groups, defaults and state (momentum
        # buffers of a resumed optimizer included)
        super(self.__class__, self).__init__(opt.param_groups)
        self.defaults = opt.defaults
        self.state = opt.state
        self._sfb = sync_state

    @_abort_on_error
    def synchronize(self):
        """Applies every rank's gradients of this step to .grad now (collective),
        e.g. to clip them before step(); step() then only steps."""
        self._sfb.synchronize()

    @_abort_on_error
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("sfb.torch: step(closure) is not supported (the closure would run "
                             "a second forward and backward within one step)")
        s = self._sfb
        s.synchronize()
        loss = None
        if not s.additive:
            loss = super(self.__class__, self).step()
        s.end_step()
        return loss

    def zero_grad(self, set_to_none=True):
        super(self.__class__, self).zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        d = super(self.__class__, self).state_dict()
        d["sfb"] = {"clock": self._sfb.clock, "staleness": self._sfb.staleness}
        return d

    def load_state_dict(self, state_dict):
        """The optimizer's state and the job's clock: training resumes at the
        checkpoint's step (before the first step only)."""
        state_dict = dict(state_dict)
        info = state_dict.pop("sfb", None)
        super(self.__class__, self).load_state_dict(state_dict)
        if info is not None:
            if self._sfb.attached:
                raise RuntimeError("sfb.torch: load_state_dict after the first step; load the "
                                   "checkpoint before training")
            self._sfb.clock = int(info["clock"])

    @property
    def plan(self):
        """One line per matrix: the parameters, the engine and why (after the
        first step)."""
        return self._sfb.plan or "(not attached yet: the plan is made at the first step)"

    @property
    def clock(self):
        """The job's clock: steps taken (a resumed run's count from its checkpoint)."""
        return self._sfb.clock


def DistributedOptimizer(optimizer, model, sync="auto", staleness=0, backward_passes_per_step=1,
                         max_samples=None, overlap=True, **attach_args):
    """Wraps a torch.optim optimizer so that each step applies the mean of
    every rank's gradients (staleness 0), or every rank's updates within the
    SSP bound (staleness > 0, plain SGD only). The result is an instance of
    the optimizer's own class (schedulers work on it).

    model: the module whose parameters the optimizer holds; its nn.Linear
      layers are synchronized by their sufficient factors, the rest densely.
    sync: "auto" (per Linear the engine the cost model predicts faster),
      "sfb" (factors) or "fms" (full matrices through sharded servers).
    backward_passes_per_step: backward passes whose gradients add up before
      one step (gradient accumulation).
    max_samples: the most samples (rows of a layer's input, over the calls
      and passes of one step) any Linear sees in a step; default: the first
      step's.
    overlap: a layer's factors leave during the backward pass (True) or all
      at step().
    Further keyword arguments go to sfb.Job.attach (topology, degree,
    link_gbps, latency_us, priority, ...)."""
    global _optimizer
    if _optimizer is not None:
        raise RuntimeError("sfb.torch: one DistributedOptimizer per job (this one has one)")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError("DistributedOptimizer: %r is not a torch.optim.Optimizer" % (optimizer,))
    if not isinstance(model, torch.nn.Module):
        raise TypeError("DistributedOptimizer: model=%r is not a torch.nn.Module" % (model,))
    state = _Sync(optimizer, model, sync, staleness, backward_passes_per_step, max_samples,
                  overlap, attach_args)
    methods = {k: v for k, v in _DistributedOptimizer.__dict__.items()
               if k not in ("__dict__", "__weakref__")}
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), methods)
    _optimizer = state
    return cls(optimizer, state)
