"""Normalization by minibatch statistics in training mode is refused. A
BatchNorm layer in training mode (or with track_running_stats=False)
normalizes by its minibatch's mean and variance, and an InstanceNorm layer
with track_running_stats=True keeps running statistics averaged over its
minibatch: each rank sees only its share of the global minibatch, so the
outputs and gradients (BatchNorm) and the running statistics (both) would
differ from one process's on the whole minibatch, and the running
statistics would part between the ranks. So such a call on a layer of the
model raises sfb.UsageError, naming the layer and what to use instead,
with the layer's buffers as they were. In evaluation mode (running
statistics) both are exact and run, and so does an InstanceNorm that keeps
no running statistics (each sample's own: the default)."""
import torch
import torch.nn.functional as F

import sfb as _sfb

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
            for t in (m.weight, m.running_mean):
                if t is not None:
                    out[id(t)] = (m, "%s %s" % (type(m).__name__, name))
    return out


def _refuse(s, weight, running_mean):
    layer = next((s.batchnorms[id(t)] for t in (weight, running_mean)
                  if t is not None and id(t) in s.batchnorms), None)
    if layer is None:
        return
    m, name = layer
    if isinstance(m, torch.nn.modules.instancenorm._InstanceNorm):
        raise _sfb.UsageError(
            "sfb.torch: %s keeps running statistics averaged over its minibatch "
            "(track_running_stats=True, training mode): each rank sees only its share, so they "
            "would differ from one process's on the whole minibatch and part between the "
            "ranks. Make it with track_running_stats=False (each sample's own statistics, the "
            "default: exact), or call eval() on the layer" % name, param=name.split(" ", 1)[1])
    if m.training and m.track_running_stats and m.num_batches_tracked is not None:
        m.num_batches_tracked.sub_(1)  # (its forward counted this batch: undone)
    raise _sfb.UsageError(
        "sfb.torch: %s normalizes by the mean and variance of its minibatch (training "
        "mode): each rank sees only its share, so its outputs and gradients, and the "
        "running statistics it keeps, would differ from one process's on the whole "
        "minibatch (and the running statistics would part between the ranks). Use "
        "nn.GroupNorm or nn.LayerNorm (each sample's own statistics), or call eval() "
        "on the layer to normalize by its running statistics (as one process then "
        "does too)" % name, param=name.split(" ", 1)[1])


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """torch.nn.functional.batch_norm while a DistributedOptimizer lives."""
    from . import _capture
    if training and _capture._active is not None:
        _refuse(_capture._active, weight, running_mean)
    return _torch_batch_norm(input, running_mean, running_var, weight, bias, training,
                             momentum, eps)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """torch.nn.functional.instance_norm while a DistributedOptimizer lives."""
    from . import _capture
    if use_input_stats and running_mean is not None and _capture._active is not None:
        _refuse(_capture._active, weight, running_mean)
    return _torch_instance_norm(input, running_mean, running_var, weight, bias,
                                use_input_stats, momentum, eps)
