"""Normalization by minibatch statistics, synchronized: a BatchNorm layer in
training mode (or with track_running_stats=False) normalizes by its
minibatch's mean and variance, and each rank sees only its share of the
global minibatch. While a DistributedOptimizer lives, F.batch_norm with
batch statistics is SyncBatchNorm's: in forward every rank's count, mean
and sum of squared deviations per channel are gathered (one small
allgather) and combined in rank order into the global minibatch's, which
every rank normalizes by and keeps in its running statistics (the unbiased
variance of the global minibatch); in backward the sums of the output
gradient and of its product with the centred input are gathered (a second
allgather), weighted as the reduction weighs each rank's gradient (the
weights of opt.set_samples), so the input gradients are one process's on
the union of the ranks' minibatches. In evaluation mode (running
statistics) nothing is gathered.

Refused with the reason (sfb.UsageError, the layer's buffers untouched): a
BatchNorm in training mode at staleness > 0 (the ranks would wait for each
other in every forward) or inside opt.join() (a rank out of data stops
calling the layer while the others wait for its statistics); an
InstanceNorm with track_running_stats=True in training mode (running
statistics averaged over its minibatch). An InstanceNorm without running
statistics (each sample's own: the default) is exact and runs as it is."""
import math
import warnings
import weakref

import numpy as np
import torch
import torch.nn.functional as F

import sfb as _sfb

from . import _env
from ._env import _JOIN_HINT

_torch_batch_norm = F.batch_norm
_torch_instance_norm = F.instance_norm


def layers(model):
    """{id of a weight or running mean: (module, "Kind name")} of the
    model's layers whose training-mode statistics are their minibatch's."""
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) or (
                isinstance(m, torch.nn.modules.instancenorm._InstanceNorm) and
                m.track_running_stats):
            # (not m.weight: a parametrized one is computed at every read)
            for t in (m._parameters.get("weight"), m.running_mean):
                if t is not None:
                    out[id(t)] = (m, "%s %s" % (type(m).__name__, name))
    return out


def _layer(s, weight, running_mean):
    """(module, "Kind name") of the model's layer these tensors are, or None."""
    return next((s.batchnorms[id(t)] for t in (weight, running_mean)
                 if t is not None and id(t) in s.batchnorms), None)


def _undo_count(layer):
    m = layer[0] if layer else None
    if m is not None and m.training and m.track_running_stats and \
            m.num_batches_tracked is not None:
        m.num_batches_tracked.sub_(1)  # (its forward counted this batch: undone)


def _refuse_instance(name):
    raise _sfb.UsageError(
        "sfb.torch: %s keeps running statistics averaged over its minibatch "
        "(track_running_stats=True, training mode): each rank sees only its share, so they "
        "would differ from one process's on the whole minibatch and part between the "
        "ranks. Make it with track_running_stats=False (each sample's own statistics, the "
        "default: exact), or call eval() on the layer" % name, param=name.split(" ", 1)[1])


def _refuse_batch(layer, why):
    _undo_count(layer)
    name = layer[1] if layer else OUTSIDE
    raise _sfb.UsageError(
        "sfb.torch: %s normalizes by the mean and variance of its minibatch (training mode), "
        "which sfb.torch gathers from every rank in each forward and backward; %s. Use "
        "nn.GroupNorm or nn.LayerNorm (each sample's own statistics), or call eval() on the "
        "layer to normalize by its running statistics" % (name, why),
        param=name.split(" ", 1)[1] if layer else None)


def _refuse_twice(name):
    """A gradient with a graph (create_graph=True) through a BatchNorm whose
    statistics are gathered: its second derivative is not carried."""
    raise _sfb.UsageError(
        "sfb.torch: %s normalizes by the mean and variance of every rank's minibatch "
        "(training mode), and a gradient taken through it with create_graph=True (a gradient "
        "penalty's torch.autograd.grad, MAML's inner loop) would be differentiated again: "
        "the second derivative of statistics gathered from every rank is not carried, where "
        "one process's is exact. Call eval() on the layer for that pass (its running "
        "statistics), or use nn.GroupNorm or nn.LayerNorm (each sample's own statistics)" %
        name, param=None if name == OUTSIDE else name.split(" ", 1)[1])


# (a BatchNorm that is none of the job's models' layers: F.batch_norm's, an
# AveragedModel's, gathered as theirs)
OUTSIDE = "F.batch_norm outside the job's models"
_OUTSIDE_HINT = (
    "a BatchNorm in training mode gathers every rank's statistics while a "
    "DistributedOptimizer lives, one outside the job's models too (an AveragedModel's, SWA's "
    "update_bn): run it on every rank (each on its share of the data: the statistics of "
    "their union, as one process's over all of it), or on one rank after sft.shutdown()")
_HINT = ("every rank must run each BatchNorm layer in training mode in the same order in "
         "every forward, as under SyncBatchNorm (one without running statistics gathers in "
         "eval() too); a forward on some ranks only, such as a validation on rank 0, runs in "
         "model.eval()")


# The name of the collectives of training, where a rank is in another call
# (an sft.allreduce() on some ranks only): one for the statistics' gathers
# and the step's reduction, whose tags tell where each rank is (_mismatch).
TRAINING_CALLS = "a training step"


def _tag(s, what):
    """128 bytes saying where this rank is: "<step> <phase> <layer>"."""
    return ("%d %s" % (s.clock, what)).encode()[:128].ljust(128, b"\0")


def _where(tag):
    """(step, what) a tag says: what is "reduction", "shutdown" or
    "<phase> <layer>"."""
    return tuple((tag.rstrip(b"\0").decode(errors="replace").split(" ", 1) + [""])[:2])


def _at(tag):
    """Where a tag says its rank was: "step 3's reduction" or
    "BatchNorm2d 2's forward statistics at step 3"."""
    step, what = _where(tag)
    if what == "reduction":
        return "step %s's reduction" % step
    if what == "shutdown":
        return "shutdown() after step %s" % step
    phase, _, name = what.partition(" ")
    if name == OUTSIDE:
        return "the %s statistics of %s at step %s" % (phase, name, step)
    return "%s's %s statistics at step %s" % (name, phase, step)


def _mismatch(s, tag, e):
    """sfb.MismatchError naming where each rank was, after a gather whose
    lengths differed (every rank failed at that same collective, which left
    the channel usable: a second gather of the 128-byte tags tells)."""
    try:
        with s.job.calls_named(TRAINING_CALLS):
            parts = s.job.allgather(tag)
    except _sfb.Error:
        return type(e)(e.code, "sfb.torch: at %s: %s: %s" % (_at(tag), e, _HINT), e.rank)
    me = s.job.rank
    q = next((q for q, p in enumerate(parts) if p != tag), e.rank)
    tags = {me: tag, q: parts[q]}
    left = next((r for r, t in tags.items() if _where(t)[1] == "shutdown"), None)
    if left is not None:  # (as the reduction's own check says it)
        other = q if left == me else me
        outside = _where(tags[other])[1].endswith(OUTSIDE)
        return _sfb.PeerError(
            -(4096 + 5), "sfb.torch: rank %d called shutdown() while rank %d was at %s (%s)" % (
                left, other, _at(tags[other]), _OUTSIDE_HINT if outside else _JOIN_HINT), left)
    fewer = next((r for r, t in tags.items() if _where(t)[1] == "reduction"), None)
    return _sfb.MismatchError(
        -(4096 + 9), "sfb.torch: rank %d was at %s while rank %d was at %s: %s%s" % (
            me, _at(tag), q, _at(parts[q]), _HINT,
            "" if fewer is None else "; rank %d ran fewer of them in training mode in this "
            "step (model.eval() left on after validating on some ranks only?)" % fewer), q)


def meet(s, leaving=False):
    """Collective, first in each step's reduction when the model has a
    BatchNorm layer (and in shutdown()'s last one: leaving): a rank that ran
    fewer of them in training mode in this step (model.eval() left on after
    validating on some ranks only), or left, would leave the others waiting
    in a gather for its statistics until the bootstrap timeout; this
    gather, the length of no statistics gather, fails every rank at once
    instead (sfb.MismatchError)."""
    tag = _tag(s, "shutdown" if leaving else "reduction")
    try:
        s.job.allgather(tag)
    except _sfb.MismatchError as e:
        raise _mismatch(s, tag, e) from None


def _gather(s, name, phase, values):
    """Every rank's float64 values (rank order) for this call; each rank must
    be at the same layer and phase of the same step, else MismatchError."""
    tag = _tag(s, "%s %s" % (phase, name))
    mine = tag + np.ascontiguousarray(values, np.float64).tobytes()
    job = s.job
    try:
        with job.calls_named(TRAINING_CALLS):
            parts = job.allgather(mine) if job.world > 1 else [mine]
    except _sfb.MismatchError as e:
        raise _mismatch(s, tag, e) from None
    except _sfb.Error as e:
        raise type(e)(e.code, "sfb.torch: %s's %s statistics at step %d: %s (%s)" % (
            name, phase, s.clock, e, _HINT), e.rank) from None
    for q, p in enumerate(parts):
        if p[:128] != tag:
            raise _sfb.MismatchError(-(4096 + 9), "sfb.torch: rank %d was at %s while rank %d "
                                     "was at %s: %s" % (job.rank, _at(tag), q, _at(p[:128]),
                                                        _HINT), q)
    return [np.frombuffer(p[128:], np.float64) for p in parts]


class _SyncBatchNorm(torch.autograd.Function):
    """F.batch_norm with batch statistics over every rank's minibatch."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, momentum, eps, s, name):
        C = x.shape[1]
        shape = [1, C] + [1] * (x.dim() - 2)
        dims = [0] + list(range(2, x.dim()))
        xf = x.float()
        n = xf.numel() // C if C else 0
        if n:
            mean_q = xf.mean(dims)
            m2_q = (xf - mean_q.view(shape)).pow(2).sum(dims)
        else:
            mean_q = m2_q = torch.zeros(C)
        parts = _gather(s, name, "forward", np.concatenate(
            [[n], mean_q.double().numpy(), m2_q.double().numpy()]))
        total, mean, m2 = 0.0, np.zeros(C), np.zeros(C)
        for p in parts:  # Chan et al.'s pairwise combination, in rank order
            nq = p[0]
            if nq == 0:
                continue
            delta = p[1:1 + C] - mean
            t = total + nq
            mean += delta * (nq / t)
            m2 += p[1 + C:] + delta * delta * (total * nq / t)
            total = t
        if total == 1:
            raise ValueError("Expected more than 1 value per channel when training, got %d "
                             "over the ranks (input size %s on this one)" %
                             (int(total), list(x.shape)))
        mean32 = torch.from_numpy(mean).float()  # (no value on any rank: an empty output and
        invstd = torch.from_numpy(1.0 / np.sqrt(m2 / max(total, 1.0) + eps)).float()  # the
        # statistics as they were, as torch's own on an empty minibatch)
        y = (xf - mean32.view(shape)) * invstd.view(shape)
        if weight is not None:
            y = y * weight.view(shape)
        if bias is not None:
            y = y + bias.view(shape)
        if running_mean is not None and total:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(mean32, alpha=momentum)
                running_var.mul_(1 - momentum).add_(
                    torch.from_numpy(m2 / (total - 1)).float(), alpha=momentum)
        ctx.save_for_backward(xf, weight, mean32, invstd)
        ctx.s, ctx.name, ctx.total, ctx.n, ctx.shape, ctx.dims = s, name, total, n, shape, dims
        ctx.dtype = x.dtype
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        if torch.is_grad_enabled():  # (create_graph=True: a second derivative to come)
            _refuse_twice(ctx.name)
        xf, weight, mean32, invstd = ctx.saved_tensors
        s, shape, dims = ctx.s, ctx.shape, ctx.dims
        C = xf.shape[1]
        dyf = dy.float()
        xmu = xf - mean32.view(shape)
        if ctx.n:
            sum_dy = dyf.sum(dims)
            sum_dy_xmu = (dyf * xmu).sum(dims)
        else:
            sum_dy = sum_dy_xmu = torch.zeros(C)
        w = s.reduction_weight
        parts = _gather(s, ctx.name, "backward", np.concatenate(
            [[w], sum_dy.double().numpy(), sum_dy_xmu.double().numpy()]))
        total_w, g_dy, g_dyxmu = 0.0, np.zeros(C), np.zeros(C)
        for p in parts:  # rank order: the same sums on every rank
            total_w += p[0]
        if total_w > 0:
            for p in parts:
                g_dy += p[0] / total_w * p[1:1 + C]
                g_dyxmu += p[0] / total_w * p[1 + C:]
        grad_x = None
        if ctx.needs_input_grad[0]:
            if w > 0 and total_w > 0 and ctx.n:
                # ∂L/∂x of L = Σ_q α_q loss_q (α_q = w_q / Σw, what the reduction
                # forms), divided by this rank's α_q: its gradient is weighed by it
                k = 1.0 / (ctx.total * (w / total_w))
                inv = invstd.view(shape)
                scale = inv * weight.view(shape) if weight is not None else inv
                grad_x = (dyf - torch.from_numpy(g_dy * k).float().view(shape) -
                          xmu * (inv * inv) * torch.from_numpy(g_dyxmu * k).float().view(shape)
                          ) * scale
            else:
                grad_x = torch.zeros_like(xf)
            grad_x = grad_x.to(ctx.dtype)
        grad_w = sum_dy_xmu * invstd if weight is not None and ctx.needs_input_grad[1] else None
        grad_b = sum_dy if ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b, None, None, None, None, None, None


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """torch.nn.functional.batch_norm while a DistributedOptimizer lives:
    with batch statistics (training), every rank's (_SyncBatchNorm)."""
    from . import _capture
    s = _capture._active
    if not training or s is None:
        return _torch_batch_norm(input, running_mean, running_var, weight, bias, training,
                                 momentum, eps)
    layer = _layer(s, weight, running_mean)
    if _capture.transformed():  # (functorch's vmap or grad: no autograd.Function there)
        _tell_transformed(s, layer)
        return _torch_batch_norm(input, running_mean, running_var, weight, bias, training,
                                 momentum, eps)
    if layer is None and _within_one(input):  # (no samples to gather: each rank's own is exact)
        return _torch_batch_norm(input, running_mean, running_var, weight, bias, training,
                                 momentum, eps)
    if s.additive:
        _refuse_batch(layer, "at staleness %d the ranks would wait for each other in every "
                      "forward: use staleness=0" % s.staleness)
    if s.in_join:
        _refuse_batch(layer, "inside opt.join() a rank whose data ran out stops calling "
                      "it while the others wait for its statistics: give the ranks equal "
                      "batches (or drop the last uneven ones) and train outside join()")
    if input.dim() < 2:
        raise ValueError("batch_norm: expected an input of at least 2 dimensions, got %s" %
                         list(input.shape))
    name = layer[1] if layer else OUTSIDE
    if _ghost(s, layer, input) and not s.told_ghost:
        s.told_ghost = True
        if s.job.rank == 0 and s.job.world > 1:
            warnings.warn(
                "sfb.torch: %s normalizes chunks of one tensor's rows in turn (ghost batch "
                "normalization, virtual batches: x.chunk(k) as TabNet's): sfb.torch gathers "
                "each call's statistics from every rank, so a virtual batch here is chunk i of "
                "every rank's rows, where one process's virtual batches are chunks of the "
                "global minibatch: not one process's. One BatchNorm call over the whole "
                "minibatch is (or nn.GroupNorm, nn.LayerNorm: each sample's own statistics); "
                "chunks that are whole sets of their own (two augmented views concatenated, "
                "then normalized apart) are one process's: then filter this warning. One chunk "
                "of the whole (x.chunk(1): this rank's share no larger than a virtual batch) is "
                "normalized with every rank's as one batch, where one process's minibatch, P "
                "times larger, is several virtual batches" % name,
                stacklevel=_env._user_stacklevel())
    out = _SyncBatchNorm.apply(input, weight, bias, running_mean, running_var,
                               0.0 if momentum is None else momentum, eps, s, name)
    if input.dim() > 2:  # (its statistics count every position: a sequence's padded ones)
        from . import _padding
        _padding.watch(out, "a BatchNorm over positions", math.prod(input.shape[2:]),
                       input.shape[0])
    return out


def _tell_transformed(s, layer):
    """A BatchNorm in training mode inside functorch's transforms runs as
    torch's own, on what each rank gives it: rank 0 warns once."""
    if s.told_transformed or s.job.rank != 0 or s.job.world < 2:
        return
    s.told_transformed = True
    warnings.warn(
        "sfb.torch: %s runs in training mode inside functorch's transforms (vmap, grad), "
        "where sfb.torch cannot gather its statistics: each vmapped slice is normalized by "
        "its own, on each rank. That is one process's where every slice is a whole set of "
        "its own (a MAML task's support set vmapped over the tasks), not where a slice is "
        "this rank's share of the minibatch (an ensemble vmapped over its members' "
        "parameters): there use nn.GroupNorm or nn.LayerNorm, or run the members as modules; "
        "filter this warning where the slices are whole sets" % (
            layer[1] if layer else OUTSIDE), stacklevel=_env._user_stacklevel())


def _within_one(input):
    """Whether a batch_norm's input of one row holds no samples in its
    first dimension to gather over: a parameter's view (timm's StdConv2d
    standardizes its weight by F.batch_norm(w.reshape(1, out, -1), ...,
    training=True)), or a batch x (b, c, ...) viewed (1, b * c, ...) (an
    instance normalization by batch_norm, MUNIT's AdaIN: each channel one
    sample's); the same on every rank whatever its b."""
    base = input._base
    if base is None or input.dim() < 2 or input.shape[0] != 1:
        return False
    if isinstance(base, torch.nn.Parameter):
        return True
    return base.dim() == input.dim() and base.shape[0] * base.shape[1] == input.shape[1] and \
        base.shape[2:] == input.shape[2:]


def _ghost(s, layer, input):
    """Whether input is the chunk of a tensor's rows next to the one the
    layer normalized last in this step (x.chunk(k) along the samples:
    ghost batch normalization, or micro-batches in turn; minibatches
    sliced from one tensor step after step are none), noting where it
    ends for the next call; or the one chunk of them all (x.chunk(1): a
    rank's share no larger than a virtual batch, where one process's
    minibatch is several)."""
    base = input._base
    if layer is None or base is None or base.dim() != input.dim() or \
            base.shape[1:] != input.shape[1:] or base.shape[0] < input.shape[0]:
        return False
    if base.shape[0] == input.shape[0]:
        return input.grad_fn is not None and \
            type(input.grad_fn).__name__ in ("SplitBackward0", "SplitWithSizesBackward0")
    last = s.bn_chunks.get(id(layer[0]))
    at = input.storage_offset()
    s.bn_chunks[id(layer[0])] = (weakref.ref(base), s.steps, at + input.shape[0] * input.stride(0))
    return last is not None and last[0]() is base and last[1:] == (s.steps, at)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """torch.nn.functional.instance_norm while a DistributedOptimizer lives."""
    from . import _capture
    s = _capture._active
    if use_input_stats and running_mean is not None and s is not None:
        layer = _layer(s, weight, running_mean)
        if layer is not None:
            _refuse_instance(layer[1])
    return _torch_instance_norm(input, running_mean, running_var, weight, bias,
                                use_input_stats, momentum, eps)
