"""Collectives for a training script: broadcasts of parameters, objects
and optimizer state, a small allreduce for metrics, and a differentiable
allgather (contrastive losses over the global batch)."""
import numpy as np
import torch

import sfb as _sfb

from . import _env
from ._env import _abort_on_error


def _need():
    """The job, for a collective of the script's: in an elastic job not
    before elastic.run (a process joining later would not call it)."""
    job = _env._need()
    if job.elastic and not _env._runs:
        raise _sfb.UsageError(
            "sfb.torch: a collective before sfb.torch.elastic.run in an elastic job: a process "
            "that joins later would not take part in it. elastic.run brings every rank to rank "
            "0's parameters and optimizer state at its start (no broadcast_parameters needed); "
            "call collectives inside the training function or after run returns")
    return job


def _named(name):
    """fn's collectives carry `name` where ranks made different calls
    ("rank 1 is in allgather_object() where rank 0 is in barrier()"), not
    the job's calls it makes (broadcasts, allgathers); an error tells the
    peers (_abort_on_error)."""
    def wrap(fn):
        @_abort_on_error
        def named(*a, **k):
            job = _env._job
            if job is None:
                return fn(*a, **k)
            with job.calls_named(name):
                return fn(*a, **k)
        named.__name__, named.__doc__ = fn.__name__, fn.__doc__
        return named
    return wrap


def _named_tensors(params):
    """(name, tensor) pairs of a state_dict, named_parameters() or a list."""
    if isinstance(params, dict):
        return list(params.items())
    out = []
    for i, p in enumerate(params):
        out.append(p if isinstance(p, tuple) else ("#%d" % i, p))
    return out


def refuse_uninitialized(named, where):
    """sfb.UsageError naming the first tensor of (name, tensor) pairs that a
    lazy module (nn.LazyLinear, nn.LazyConv2d, nn.LazyBatchNorm1d, ...) has
    not shaped yet: it has no shape or values to send or synchronize until
    its first forward (DDP refuses it too)."""
    for n, t in named:
        if torch.nn.parameter.is_lazy(t):
            raise _sfb.UsageError(
                "%s: %s is not initialized yet (a lazy module's, nn.LazyLinear or the like, "
                "shaped by its first forward): run one forward on a batch of the data's shape on "
                "every rank first, then sft.broadcast_parameters and the DistributedOptimizer"
                % (where, n))


def _root(job, root_rank, where):
    """root_rank, a rank of the job (a job of one too: a wrong root shows
    before the program meets more ranks), else sfb.UsageError."""
    if isinstance(root_rank, bool) or not isinstance(root_rank, (int, np.integer)) or \
            not 0 <= root_rank < job.world:
        raise _sfb.UsageError("%s: root_rank %r: expected a rank, 0 to %d" %
                              (where, root_rank, job.world - 1))
    return int(root_rank)


@_named("broadcast_parameters()")
def broadcast_parameters(params, root_rank=0):
    """Makes every rank's tensors equal to root_rank's (collective), in
    place: a state_dict, model.named_parameters() or a list of tensors. Every
    rank must pass the same names, shapes and dtypes.

    params: a dict of tensors, (name, tensor) pairs or tensors; root_rank:
    the rank whose values every rank takes. Raises sfb.MismatchError naming
    the first name, shape or dtype that differs between ranks, sfb.PeerError
    when a rank fails."""
    job = _need()
    root_rank = _root(job, root_rank, "broadcast_parameters")
    named = _named_tensors(params)
    refuse_uninitialized(named, "broadcast_parameters")
    job.agree("".join("%s=%s:%s:%s\n" % (n, tuple(t.shape), t.dtype, "sparse, %d stored" %
                                            t._nnz() if t.layout == torch.sparse_coo else
                                            t.layout) for n, t in named))
    if job.world == 1 or not named:
        return
    sparse = [t for _, t in named if t.layout != torch.strided]  # (a graph's adjacency buffer)
    if sparse:
        _broadcast_sparse(job, root_rank, sparse)
        named = [(n, t) for n, t in named if t.layout == torch.strided]
    sizes = [t.numel() * t.element_size() for _, t in named]
    buf = np.empty(sum(sizes), np.uint8)
    if job.rank == root_rank:
        o = 0
        for (_, t), n in zip(named, sizes):
            buf[o:o + n] = _env.memory(t)
            o += n
    job.broadcast(root_rank, buf)
    if job.rank != root_rank:
        o = 0
        with torch.no_grad():
            for (_, t), n in zip(named, sizes):
                src = torch.from_numpy(buf[o:o + n]).view(t.dtype).view(t.shape)
                t.copy_(src)
                o += n


def _broadcast_sparse(job, root, tensors):
    """root's sparse COO tensors' indices and values copied into every
    rank's, in place (a state_dict's detached alias shares them; copy_
    would give the alias its own), as many stored on every rank (agreed:
    broadcast_parameters). Other sparse layouts: refused (collective)."""
    for t in tensors:
        if t.layout != torch.sparse_coo:
            raise _sfb.UsageError("broadcast_parameters: a tensor of layout %s: expected dense "
                                  "or sparse COO ones" % t.layout)
    parts = [p for t in tensors for p in (t._indices(), t._values())]
    sizes = [p.numel() * p.element_size() for p in parts]
    buf = np.empty(sum(sizes) + len(tensors), np.uint8)  # (then each one's coalesced flag)
    if job.rank == root:
        o = 0
        for p, n in zip(parts, sizes):
            buf[o:o + n] = _env.memory(p)
            o += n
        buf[o:] = [t.is_coalesced() for t in tensors]
    job.broadcast(root, buf)
    if job.rank != root:
        o = 0
        with torch.no_grad():
            for p, n in zip(parts, sizes):
                p.copy_(torch.from_numpy(buf[o:o + n]).view(p.dtype).view(p.shape))
                o += n
            for t, c in zip(tensors, buf[o:]):
                t._coalesced_(bool(c))


_BLOB = 1 << 19  # bytes of one rank in one allgather (the bootstrap's limit is 1 MiB)


def allgather_bytes(job, data):
    """Every rank's bytes (of any length), in rank order (collective)."""
    lens = [int(np.frombuffer(b, np.int64)[0])
            for b in job.allgather(np.array([len(data)], np.int64).tobytes())]
    top = max(lens)
    data = bytes(data).ljust(top, b"\0")
    parts = [bytearray() for _ in lens]
    for o in range(0, top, _BLOB):
        for part, got in zip(parts, job.allgather(data[o:o + _BLOB])):
            part += got
    return [bytes(part[:n]) for part, n in zip(parts, lens)]


@_named("barrier()")
def barrier():
    """Returns once every rank has called it (collective; DDP's
    dist.barrier()): rank 0 prepares the data or writes a checkpoint, the
    others wait to read it. Raises sfb.PeerError when a rank fails or does
    not come (the bootstrap's timeout), sfb.MismatchError naming both calls
    when a rank makes another collective call there."""
    _need().barrier()


@_named("broadcast_object()")
def broadcast_object(obj, root_rank=0):
    """root_rank's picklable object on every rank (collective): returns it
    (root_rank gets its own object back, the others an unpickled copy).
    Raises sfb.PeerError when a rank fails."""
    import pickle
    job = _need()
    root_rank = _root(job, root_rank, "broadcast_object")
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


@_named("allgather_object()")
def allgather_object(obj):
    """Every rank's picklable object, in rank order (collective; DDP's
    all_gather_object): each rank's predictions or counts of a validation,
    for a metric over all of them. This rank's entry is obj itself, the
    others' unpickled copies; any size (a broadcast_object from each rank:
    an allgather takes at most 1 MiB). Raises sfb.PeerError when a rank
    fails."""
    return [broadcast_object(obj, q) for q in range(_need().world)]


@_named("broadcast_optimizer_state()")
def broadcast_optimizer_state(optimizer, root_rank=0):
    """Loads root_rank's optimizer state (momentum buffers, steps) on every
    rank (collective), e.g. after rank 0 alone read a checkpoint. optimizer:
    a torch.optim optimizer (a DistributedOptimizer before its first step).
    Raises sfb.PeerError when a rank fails."""
    _root(_need(), root_rank, "broadcast_optimizer_state")
    state = broadcast_object(optimizer.state_dict(), root_rank)
    if _need().rank != root_rank:
        optimizer.load_state_dict(state)


_HEAD = 96  # bytes of a header: a rank's shape (allreduce), dtype and trailing shape (allgather)


@_named("allreduce()")
def allreduce(tensor, op="mean"):
    """The sum or mean over ranks of a small tensor (at most 1 MiB: metrics
    such as a test accuracy, a statistic of the global batch; not
    gradients), as a new tensor of its shape and dtype, the same bits on
    every rank (summed in rank order, in float64). op: "mean" or "sum".
    Differentiable (torch.distributed.nn.all_reduce's rule): where tensor
    requires a gradient and the result feeds the loss (a mean prediction
    over the global batch, Barlow Twins' cross-correlation summed over the
    ranks), backward() gives each rank's tensor the sum over the ranks of
    the result's gradient (times 1/P for the mean), so the loss trains as
    one process's on the union; every rank must then run the backward
    through it, in the same order as the others'. Raises sfb.UsageError
    for another op or a larger tensor, sfb.MismatchError where the ranks'
    shapes differ, sfb.PeerError when a rank fails."""
    if op not in ("sum", "mean"):
        raise _sfb.UsageError("allreduce: op %r: expected 'sum' or 'mean'" % (op,))
    t = torch.as_tensor(tensor)
    if torch.is_grad_enabled() and t.requires_grad:
        out = _AllReduce.apply(t, op)
    else:
        out = _reduce(_need(), t, op)
    if op == "sum" and _env._job.world > 1 and out.numel() <= 8:  # (a count a loss may divide by)
        from . import _losses
        _losses.note_shared_sums(out.detach().double().view(-1).tolist(), _env._user_line())
    return out


def _reduce(job, t, op):
    """allreduce's sum or mean of t over the ranks (collective)."""
    size = t.numel() * t.element_size()  # (its own bytes: summed in float64, twice a float32's)
    if size > (1 << 20):
        raise _sfb.UsageError(
            "allreduce: a %s tensor of %d bytes, more than 1 MiB (it travels over the "
            "bootstrap's sockets, for statistics and counts): for a matrix over the samples, "
            "gather their rows instead (sfb.torch.allgather, its gradient one process's too)" %
            ("x".join(map(str, t.shape)), size))
    a = t.detach().to(torch.float64).contiguous().view(-1).numpy()
    # (its shape first: tensors of other shapes would be summed by position)
    head = str(tuple(t.shape)).encode()
    if len(head) > _HEAD:
        raise _sfb.UsageError("allreduce: a tensor of %d dimensions" % t.dim())
    parts = allgather_bytes(job, head.ljust(_HEAD, b" ") + a.tobytes())
    for q, b in enumerate(parts):
        if b[:_HEAD] != parts[0][:_HEAD]:
            raise _sfb.MismatchError(
                -(4096 + 2), "allreduce: rank 0 passes a tensor of shape %s, rank %d %s (every "
                "rank passes one shape: the sum is taken element by element)" %
                (parts[0][:_HEAD].decode().strip(), q, b[:_HEAD].decode().strip()), q)
    total = np.zeros_like(a)
    for p in parts:  # rank order: the same sum on every rank
        total += np.frombuffer(p[_HEAD:], np.float64)
    if op == "mean":
        total /= job.world
    return torch.from_numpy(total).view(t.shape).to(t.dtype)


def _gather_rows(job, t, what, weight=1.0):
    """Every rank's rows of t (dim 0 may differ, the rest and the dtype
    must not), in rank order, as tensors of t's dtype, and every rank's
    weight (collective)."""
    head = ("%s %s" % (str(t.dtype).replace("torch.", ""),
                       "x".join(map(str, t.shape[1:])) or "-")).encode()
    if len(head) > _HEAD:
        raise _sfb.UsageError("%s: a tensor of %d dimensions" % (what, t.dim()))
    data = head.ljust(_HEAD, b" ") + np.float64(weight).tobytes() + \
        _env.memory(t).tobytes()
    parts = allgather_bytes(job, data)
    for q, b in enumerate(parts):
        if b[:_HEAD] != parts[0][:_HEAD]:
            raise _sfb.MismatchError(
                -(4096 + 2), "%s: rank 0 passes %s rows, rank %d %s (the ranks' tensors may "
                "differ in their first dimension only)" % (what, parts[0][:_HEAD].decode().strip(),
                                                            q, b[:_HEAD].decode().strip()), q)
    at = _HEAD + 8
    rows = [torch.frombuffer(bytearray(b[at:]), dtype=torch.uint8).view(t.dtype)
            .view((-1,) + tuple(t.shape[1:])) if len(b) > at else
            t.new_empty((0,) + tuple(t.shape[1:])) for b in parts]
    return rows, [float(np.frombuffer(b[_HEAD:at], np.float64)[0]) for b in parts]


class _AllGather(torch.autograd.Function):
    """allgather's operator. Backward gives each rank the sum over the ranks
    of the gradient of its rows (Horovod's, torch.distributed.nn's), each
    rank's scaled by its weight over this rank's (opt.set_samples): the
    reduction weighs the whole gradient of a rank by that rank's weight,
    and a term that came from rank r's loss must weigh as rank r's."""

    @staticmethod
    def forward(ctx, t):
        job = _need()
        parts, _ = _gather_rows(job, t, "allgather")
        ctx.rows = [len(p) for p in parts]
        ctx.rank = job.rank
        return torch.cat(parts)

    @staticmethod
    @_abort_on_error  # (inside autograd: the peers learn of an error here)
    def backward(ctx, grad):
        lo, n = sum(ctx.rows[:ctx.rank]), ctx.rows[ctx.rank]
        return _weighed_sum(_need(), grad, "allgather", lo, n).to(grad.dtype)


def _weighed_sum(job, grad, name, lo, n):
    """The backward of name's result (collective): the sum over the ranks
    of rows lo:lo + n of each rank's gradient grad (the ranks' may differ
    in their first dimension only), in float64, each rank's scaled by its
    weight over this rank's (opt.set_samples): the reduction weighs the
    whole gradient of a rank by that rank's weight, and a term that came
    from rank r's loss must weigh as rank r's."""
    sync = _env._optimizer
    mine = sync.my_weight if sync is not None else 1.0
    with job.calls_named("%s()'s backward" % name):
        grads, weights = _gather_rows(job, grad, "%s's backward" % name, mine)
    if n and not mine > 0:
        raise _sfb.UsageError(
            "%s's backward: this rank's rows (%d) weigh %r in the reduction "
            "(opt.set_samples): the gradient the other ranks' losses give them would be "
            "lost" % (name, n, mine), rank=job.rank)
    total = grad.new_zeros((n,) + tuple(grad.shape[1:]), dtype=torch.float64)
    for g, w in zip(grads, weights):  # rank order: the same sum on every rank
        if w:
            total += g[lo:lo + n].double() * (w / mine if n else 0.0)
    return total


class _AllReduce(torch.autograd.Function):
    """allreduce's operator for a tensor with gradient. Backward gives each
    rank the sum over the ranks of the result's gradient (_weighed_sum),
    times 1/P for the mean."""

    @staticmethod
    def forward(ctx, t, op):
        ctx.op = op
        return _env.unviewed(_reduce(_need(), t, op))

    @staticmethod
    @_abort_on_error  # (inside autograd: the peers learn of an error here)
    def backward(ctx, grad):
        job = _need()
        total = _weighed_sum(job, grad.reshape(1, -1), "allreduce", 0, 1)
        if ctx.op == "mean":
            total /= job.world
        return total.view(grad.shape).to(grad.dtype), None


@_named("allgather()")
def allgather(tensor):
    """Every rank's tensor concatenated along the first dimension in rank
    order (collective; Horovod's hvd.allgather, DDP's
    torch.distributed.nn.all_gather), differentiable: where the result
    feeds the loss, backward() gives each rank's tensor the sum over the
    ranks of its rows' gradients, so a contrastive loss over the global
    batch (CLIP's, SimCLR's negatives from every rank) trains as one process
    on the union. Every rank must run the backward through it, in the same
    order as the others' gathers. The ranks' tensors may differ in their
    first dimension only; each travels by the bootstrap's allgather (for
    embeddings and metrics, not for parameters).

    Raises sfb.UsageError for a tensor that is not a CPU tensor of at least
    one dimension, sfb.MismatchError naming the rank whose dtype or trailing
    shape differs from rank 0's, sfb.PeerError when a rank fails."""
    if not torch.is_tensor(tensor) or tensor.dim() == 0 or tensor.is_cuda:
        raise _sfb.UsageError("allgather: expected a CPU tensor of at least one dimension, "
                              "got %s" % ("shape %s" % (tuple(tensor.shape),)
                                          if torch.is_tensor(tensor) else type(tensor).__name__))
    return _AllGather.apply(tensor)
