"""Losses whose mean divides by what the data holds. F.cross_entropy and
F.nll_loss over class indices with reduction="mean" divide by the targets
they keep: not ignore_index (a padding token, Hugging Face's -100 labels),
each weighed by its class's weight= (label smoothing too). One process on
the global minibatch divides by the whole batch's count; each rank divides
by its own, so the reduction gives one process's gradient only where it
weighs each rank by that count (set_samples). While a DistributedOptimizer
lives these calls come here: a call whose output reaches backward() adds
its count to the pass's (a hook on the output, so a forward with no
backward counts nothing) and the meta row carries it; optimizer._Sync
warns where the ranks' weights are not proportional to their counts."""
import torch.nn.functional as F
from torch.nn import _reduction

from . import _capture, _env, _grad_hooks

_torch_cross_entropy = F.cross_entropy
_torch_nll_loss = F.nll_loss


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """F.cross_entropy while a DistributedOptimizer lives."""
    out = _torch_cross_entropy(input, target, weight, size_average, ignore_index, reduce,
                               reduction, label_smoothing)
    _watch(out, target, weight, ignore_index, size_average, reduce, reduction)
    return out


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """F.nll_loss while a DistributedOptimizer lives."""
    out = _torch_nll_loss(input, target, weight, size_average, ignore_index, reduce, reduction)
    _watch(out, target, weight, ignore_index, size_average, reduce, reduction)
    return out


def _watch(out, target, weight, ignore_index, size_average, reduce, reduction):
    """A mean over class indices whose output may reach backward(): its
    count goes to the pass when its gradient is formed there."""
    s = _capture._active
    if s is None or not out.requires_grad or target.is_floating_point():
        return  # (probabilities as targets: the mean divides by the samples)
    if size_average is not None or reduce is not None:
        reduction = _reduction.legacy_get_string(size_average, reduce, emit_warning=False)
    if reduction != "mean":
        return
    site = _env._user_line()

    def counted(grad):
        if not _capture._in_grad[0]:  # (torch.autograd.grad: no pass of the reduction's)
            s.loss_counted(*count(target, weight, ignore_index), site)

    _grad_hooks._torch_register_hook(out, counted)


def count(target, weight, ignore_index):
    """(what the mean divides by, the targets, what is dropped or weighed:
    "ignore_index=-100", "weight=", both or "")."""
    keep = target != ignore_index
    kept = int(keep.sum())
    how = ["ignore_index=%d" % ignore_index] if kept < target.numel() else []
    if weight is None:
        return float(kept), target.numel(), ", ".join(how)
    return float(weight[target[keep]].sum()), target.numel(), ", ".join(how + ["weight="])
