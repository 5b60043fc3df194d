"""Batch normalization in training mode is refused. A BatchNorm layer that
normalizes by its minibatch's mean and variance (training mode, or
track_running_stats=False) sees only this rank's share of the global
minibatch: its outputs and gradients, and the running statistics it keeps,
would differ from one process's on the whole minibatch, and the running
statistics would part between the ranks. So such a call on a layer of the
model raises sfb.UsageError, naming the layer and what to use instead, with
the layer's buffers as they were. In
evaluation mode (running statistics) a BatchNorm layer is exact and runs."""
import torch.nn.functional as F

import sfb as _sfb

_torch_batch_norm = F.batch_norm


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """torch.nn.functional.batch_norm while a DistributedOptimizer lives."""
    from . import _capture
    s = _capture._active
    if training and s is not None:
        layer = next((s.batchnorms[id(t)] for t in (weight, running_mean)
                      if t is not None and id(t) in s.batchnorms), None)
        if layer is not None:
            m, name = layer
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
    return _torch_batch_norm(input, running_mean, running_var, weight, bias, training,
                             momentum, eps)
