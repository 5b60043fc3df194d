"""Layers whose outputs depend on how far a minibatch is padded: a
bidirectional recurrent layer on unpacked sequences (its backward direction
starts in the padding), a recurrent layer's final state on them (h_n, an
LSTM's c_n: the state after the padding), attention without a
key_padding_mask or an attn_mask (every query attends to the padding too)
and a BatchNorm over positions in training (its statistics count the padded
ones, masked or not: _batchnorm), each over a minibatch of two or more sequences (one sequence is not
padded). One process pads the union of the ranks' minibatches to its
longest sequence, each rank its own to its own longest: where those
lengths differ from rank to rank such a layer computes on each rank what
no one process computes. While a DistributedOptimizer lives, such a
layer's output whose gradient is formed in a backward pass adds its
sequence length to the step's (_Sync.padded, the meta row; a validation
forward without backward adds nothing), and optimizer._Sync warns where
the ranks' lengths differ."""
import inspect

import torch
import torch.nn.functional as F

from . import _capture, _grad_hooks

NONE = (0, ())  # _Sync.padded: (the step's longest such sequence, the layers' kinds)
_torch_mha = F.multi_head_attention_forward
_mha_params = inspect.signature(_torch_mha)


def watch(out, kind, steps, batch):
    """out, a layer's output over `batch` sequences of `steps` (kind: what
    it is, for the warning): counted when its gradient is formed in a
    backward pass (not inside torch.autograd.grad)."""
    s = _capture._active
    if s is None or batch < 2 or not isinstance(out, torch.Tensor) or not out.requires_grad:
        return

    def counted(grad):
        if not _capture._in_grad[0]:
            most, kinds = s.padded
            s.padded = (max(most, int(steps)), kinds if kind in kinds else kinds + (kind,))

    _grad_hooks._torch_register_hook(out, counted)


def multi_head_attention_forward(*args, **kwargs):
    """F.multi_head_attention_forward while a DistributedOptimizer lives:
    attention over keys with neither mask is watched (watch)."""
    out = _torch_mha(*args, **kwargs)
    if _capture._active is not None and torch.is_grad_enabled():
        try:
            a = _mha_params.bind(*args, **kwargs).arguments
        except TypeError:  # (torch took what its signature does not say: not watched)
            return out
        if a.get("key_padding_mask") is None and a.get("attn_mask") is None and \
                not a.get("is_causal", False):
            key = a["key"]
            watch(out[0], "attention without a key_padding_mask", key.shape[0],
                  key.shape[1] if key.dim() == 3 else 1)
    return out
