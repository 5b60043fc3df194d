"""Convolutions by factors, where that pays. A convolution's weight
gradient is a sum of outer products too: one per output position of each
sample, the output gradient there (out channels) and the input patch it saw
(in channels x kernel, im2col's column), S = B·H_out·W_out samples. Those
factors are worth sending only when they are smaller than what the dense
engine moves for the weight: S·(K + D) < 2·K·D / P floats (K = out
channels, D = in channels x kernel + 1), since the factors' apply (P GEMMs)
never costs less than the dense path's one. That is decided at the layer's
first training call; a convolution that fails it (most do: S is large)
runs torch's own operator and goes densely, and the plan says why. One that
passes is a matrix K x D like a Linear's, and the cost model then chooses
its engine.

Only 1-D and 2-D convolutions with groups = 1 and numeric padding, at
staleness 0, are considered; the rest go densely."""
import torch
import torch.nn.functional as F

from . import _env

_torch_conv1d = F.conv1d
_torch_conv2d = F.conv2d


def _tuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


class _ConvFactors(torch.autograd.Function):
    """A convolution whose backward gives the input's gradient only and
    hands the layer's factors (output gradients at each position, the input
    patches) to sfb."""

    @staticmethod
    def forward(ctx, x, weight, bias, token, slot, geom):
        from ._capture import autocast_inputs
        x, weight, bias = autocast_inputs(x, weight, bias)
        ctx.save_for_backward(x, weight)
        ctx.slot, ctx.geom = slot, geom
        ctx.one = x.dim() == weight.dim() and x.shape[0] == 1  # (one sample: _losses.picked_sum)
        op = _torch_conv1d if weight.dim() == 3 else _torch_conv2d
        return op(x, weight, bias, *geom)

    @staticmethod
    def backward(ctx, go):
        from ._capture import forming
        t0 = _env.clock()
        x, weight = ctx.saved_tensors
        stride, padding, dilation = ctx.geom
        slot = ctx.slot
        gx = None
        want_w, want_b = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        if forming(slot):  # a first-step autograd.grad() asks for the weight's: torch's
            return tuple(torch.ops.aten.convolution_backward(
                go, x, weight, [weight.shape[0]] if want_b else None, list(stride),
                list(padding), list(dilation), False, [0] * len(stride), 1,
                [ctx.needs_input_grad[0], want_w, want_b])) + (None, None, None)
        if ctx.needs_input_grad[0]:
            gx = torch.ops.aten.convolution_backward(
                go, x, weight, None, list(stride), list(padding), list(dilation), False,
                [0] * len(stride), 1, [True, False, False])[0]
        go = go.detach()
        if weight.dim() == 3:  # 1-D: one row of positions
            go, x = go.unsqueeze(2), x.unsqueeze(2)
            kernel, stride = (1,) + tuple(weight.shape[2:]), (1,) + tuple(stride)
            padding, dilation = (0,) + tuple(padding), (1,) + tuple(dilation)
        else:
            kernel = tuple(weight.shape[2:])
        b = go.permute(0, 2, 3, 1).reshape(-1, slot.rows)  # sample (n, h, w): its K
        c = None
        if want_w:  # im2col: (N, C·kh·kw, L) -> (N·L, C·kh·kw), the weight's flattening
            c = F.unfold(x.detach(), kernel, dilation, padding, stride)
            c = c.transpose(1, 2).reshape(-1, slot.inputs)
        slot.sync.take(slot, b, c, want_w, want_b)
        if slot.sync.timeline:
            slot.sync.span("backward " + slot.name, t0)
        return gx, None, None, torch.zeros(1), None, None


def _conv(dims, input, weight, bias, stride, padding, dilation, groups):
    from . import _capture
    torch_op = _torch_conv1d if dims == 1 else _torch_conv2d
    s = _capture._active
    if s is None or not torch.is_grad_enabled() or weight.dim() != dims + 2 or \
            _capture.transformed():
        return torch_op(input, weight, bias, stride, padding, dilation, groups)
    if groups != 1 or isinstance(padding, str):
        s.note_conv_dense(weight, "factors are for groups=1 and numeric padding; this has %s" %
                          ("groups=%d" % groups if groups != 1 else "padding=%r" % (padding,)))
        return torch_op(input, weight, bias, stride, padding, dilation, groups)
    geom = (_tuple(stride, dims), _tuple(padding, dims), _tuple(dilation, dims))
    slot = s.conv_slot_for(weight, bias, lambda: _positions(input, weight, geom))
    if slot is None:
        return torch_op(input, weight, bias, stride, padding, dilation, groups)
    if input.dim() == dims + 1:  # (one unbatched sample: a batch of one, as torch runs it)
        return _ConvFactors.apply(input.unsqueeze(0), weight, bias, slot.token, slot,
                                  geom).squeeze(0)
    return _ConvFactors.apply(input, weight, bias, slot.token, slot, geom)


def _positions(input, weight, geom):
    """Output positions over the batch (S) of this call."""
    stride, padding, dilation = geom
    n = input.shape[0] if input.dim() == weight.dim() else 1
    S = n
    for i, k in enumerate(weight.shape[2:]):
        size = input.shape[-len(stride) + i]
        S *= max(0, (size + 2 * padding[i] - dilation[i] * (k - 1) - 1) // stride[i] + 1)
    return S


def pays(S, K, D, world):
    """(True, "") when factors of S samples of a K x D matrix are smaller
    than the dense engine's bytes for it, else (False, the reason)."""
    factors = 4.0 * S * (K + D)
    dense = 4.0 * 2 * K * D / max(world, 1)
    if factors < dense:
        return True, ""
    return False, "factors of %d samples, %s a rank, above the servers' %s" % (
        S, _mb(factors), _mb(dense))


def _mb(n):
    return "%.3g MB" % (n / 1e6) if n >= 1e5 else "%.3g KB" % (n / 1e3)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """torch.nn.functional.conv1d while a DistributedOptimizer lives."""
    return _conv(1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """torch.nn.functional.conv2d while a DistributedOptimizer lives."""
    return _conv(2, input, weight, bias, stride, padding, dilation, groups)
