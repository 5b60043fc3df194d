"""What a mean loss divides by. F.cross_entropy and F.nll_loss over class
indices with reduction="mean" divide by the targets they keep: not
ignore_index (a padding token, Hugging Face's -100 labels), each weighed by
its class's weight= (label smoothing too); the element-wise losses by their
elements (a weighted mse_loss or l1_loss, torch 2.6's, by the weights'
sum), kl_div's "batchmean" by the rows. One process on the global
minibatch divides by the whole batch's count; each rank divides by its
own, so the reduction gives one process's gradient only where it weighs
each rank by that count (set_samples). While a DistributedOptimizer lives
these calls come here: a call whose output reaches backward() adds its
count to the pass's (a hook on the output, so a forward with no backward
counts nothing) and the meta row carries it; optimizer._Sync warns where
the ranks' weights are not proportional to their counts."""
import functools
import inspect
import math
import re
import zlib

import torch
import torch.nn.functional as F
from torch.nn import _reduction

from . import _capture, _env, _grad_hooks

_torch_cross_entropy = F.cross_entropy
_torch_nll_loss = F.nll_loss
# (torch's own, by name: the element-wise losses' replacements, elementwise())
ELEMENTWISE = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
               "binary_cross_entropy_with_logits", "kl_div")
_torch_elementwise = {name: getattr(F, name) for name in ELEMENTWISE}
_eager = False  # the bookkeeping left out of torch.compile's graphs (keep_eager)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """F.cross_entropy while a DistributedOptimizer lives."""
    out = _torch_cross_entropy(input, target, weight, size_average, ignore_index, reduce,
                               reduction, label_smoothing)
    _watch(out, target, weight, ignore_index, size_average, reduce, reduction, "cross_entropy",
           label_smoothing)
    return out


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """F.nll_loss while a DistributedOptimizer lives."""
    out = _torch_nll_loss(input, target, weight, size_average, ignore_index, reduce, reduction)
    _watch(out, target, weight, ignore_index, size_average, reduce, reduction, "nll_loss")
    return out


def _watch(out, target, weight, ignore_index, size_average, reduce, reduction, name,
           smoothing=0.0):
    """cross_entropy's or nll_loss's mean, whose output may reach
    backward(): its divisor (the kept targets; over probabilities, the
    samples) and its settings (class weights, ignore_index, label
    smoothing) go to the pass when its gradient is formed there."""
    s = _capture._active
    if s is None or not out.requires_grad:
        return
    if _reduced(size_average, reduce, reduction) != "mean":
        return
    settings = lambda: crc(weight, ignore_index, smoothing)
    if target.is_floating_point():  # (probabilities as targets: by the samples)
        n = target.numel() // target.shape[1] if target.dim() > 1 else 1
        _hook(s, out, lambda: (float(n), n, ""), name, settings)
    else:
        _hook(s, out, lambda: count(target, weight, ignore_index), name, settings)


def _reduced(size_average, reduce, reduction):
    if size_average is not None or reduce is not None:
        return _reduction.legacy_get_string(size_average, reduce, emit_warning=False)
    return reduction


def _hook(s, out, counts, name, settings=None):
    """counts() -> (divisor, targets, how) and settings() (crc()) go to s's
    pass when out's gradient is formed in it (not inside
    torch.autograd.grad), with the head the loss reads (head())."""
    site = _env._user_line()
    through = head(s.names, out.grad_fn)

    def counted(grad):
        if not _capture._in_grad[0]:  # (torch.autograd.grad: no pass of the reduction's)
            s.loss_counted(*counts(), "%s (%s)" % (name, site) if site else name,
                           settings() if settings else 0, _number(grad), through)

    _grad_hooks._torch_register_hook(out, counted)
    try:  # (terms_of_root leaves it to the hook: a mark on the node itself)
        out.grad_fn.metadata[WATCHED] = True
    except (AttributeError, TypeError):
        pass


def head(names, loss):
    """The layer whose output the loss node loss reads (its parameters'
    module, named by names, {id(parameter): name}: "heads.2"), found through
    nodes that keep that output's rows; None where another node (branches
    added, a concatenation) comes first. Tells apart the calls of one line
    through other heads, a loop over the tasks a rank's share holds
    (sites_crc)."""
    try:
        node = loss.next_functions[0][0]
        for _ in range(12):
            if node is None:
                return None
            slot = getattr(node, "slot", None)  # (sfb's factor functions)
            if slot is not None:
                return _module(slot.name)
            inputs = []
            for n, _ in node.next_functions:
                p = n.next_functions[0][0] if _name(n) in _TRANSPOSED else n
                if _name(p) == "AccumulateGrad":
                    name = names.get(id(p.variable))
                    if name is not None:
                        return _module(name)
                elif n is not None:
                    inputs.append(n)
            if _name(node) not in _THROUGH or len(inputs) != 1:
                return None
            node = inputs[0]
    except (AttributeError, IndexError, RuntimeError, TypeError):
        pass
    return None


def heads_of_root(names, tensors, grad_tensors):
    """The heads (head()) of torch's losses that the loss backward() got
    adds up (each multiplied or divided by numbers or not), as {(loss's
    name, head)}: losses imported by name before the DistributedOptimizer
    replaced them, which its watch does not see."""
    root, found = _one_root(tensors, grad_tensors), set()
    todo = [root.grad_fn] if root is not None and root.grad_fn is not None else []
    try:
        for _ in range(64):
            if not todo:
                break
            node = todo.pop()
            name = _name(node)
            loss = _nll_name(node) if name in _NLL else _ELEMENTS.get(name)
            if node.metadata.get(WATCHED):  # (its hook names its head)
                continue
            if loss is not None:
                h = head(names, node)
                if h is not None:
                    found.add((loss, h))
            elif name in _PLUS or name == "NegBackward0" or name in _SCALED:
                todo += [n for n, _ in node.next_functions if n is not None]
    except (AttributeError, IndexError, RuntimeError, TypeError):
        pass
    return found


def _module(name):
    """A parameter's module: "heads.2" of "heads.2.weight"."""
    return name.rsplit(".", 1)[0] if name.endswith((".weight", ".bias")) else name


def _number(grad):
    """The gradient a mean loss got: the number the loss backward() got
    multiplies it by (1.0 for the loss itself; a scaler's scale, 1/K of an
    accumulation, a weight of the program's), or 1.0 where it is no finite
    nonzero number."""
    if not isinstance(grad, torch.Tensor) or grad.numel() != 1:
        return 1.0
    v = float(grad)
    return v if v != 0.0 and abs(v) < float("inf") else 1.0


def root_factor(tensors, grad_tensors):
    """The product of the numbers without gradient the loss backward() got
    multiplies what of_root reads by, on the way down from the root (a
    scaler's scale, a weight the program computed: loss * loss.detach()),
    and below a mean or sum of all its elements, the number each term is
    multiplied by ((loss_i * loss.detach()).mean()); divisions left out
    (of_root's): 1.0 where there is none or the graph reads otherwise."""
    root = _one_root(tensors, grad_tensors)
    if root is None:
        return 1.0
    node, f, below = root.grad_fn, 1.0, False
    try:
        for _ in range(16):
            name = _name(node)
            if name in ("MeanBackward0", "SumBackward0") and not below:
                # (a mean or sum of terms each multiplied by one number: by it)
                node, below = node.next_functions[0][0], True
                continue
            if name == "NegBackward0":
                node, f = node.next_functions[0][0], -f
                continue
            divides = _SCALED.get(name)
            if divides is None or (below and divides):
                break
            if below and _factor(node)[0] is None:
                break  # (terms weighed each its own: no one number)
            if divides:
                a, b = _sides(node)
                if b is not None:
                    break
                node = a
            else:
                value, node = _factor(node)
                if value is None or value != value or value == 0.0:
                    return 1.0
                f *= value
            if node is None:
                break
    except (RuntimeError, AttributeError, ValueError, TypeError, IndexError):
        return 1.0
    return f if abs(f) < float("inf") else 1.0


def elementwise(name):
    """F.<name>'s replacement while a DistributedOptimizer lives: the mean
    of an element-wise loss divides by its elements (a weighted mse_loss or
    l1_loss by the weights' sum; kl_div's "batchmean" by the rows)."""
    torch_fn = _torch_elementwise[name]
    sig = inspect.signature(torch_fn)

    @functools.wraps(torch_fn)
    def loss(*args, **kwargs):
        out = torch_fn(*args, **kwargs)
        _watch_elementwise(name, sig, out, args, kwargs)
        return out

    return loss


def _watch_elementwise(name, sig, out, args, kwargs):
    """elementwise()'s loss: a mean whose output may reach backward()."""
    s = _capture._active
    if s is None or not out.requires_grad or out.dim():
        return
    a = sig.bind(*args, **kwargs).arguments
    how = _reduced(a.get("size_average"), a.get("reduce"), a.get("reduction", "mean"))
    x, y, w = a["input"], a["target"], a.get("weight")
    pos = a.get("pos_weight")  # (per class: binary_cross_entropy_with_logits')
    settings = (lambda: crc(pos)) if pos is not None else None
    if how == "batchmean":
        n = x.shape[0] if x.dim() else 1
        _hook(s, out, lambda: (float(n), n, ""), name)
    elif how == "mean":
        n = torch.broadcast_shapes(x.shape, y.shape).numel()
        if w is not None and name in ("mse_loss", "l1_loss"):
            _hook(s, out, lambda: (float(w.sum()), n, "weight="), name)
        else:
            _hook(s, out, lambda: (float(n), n, ""), name, settings)


# what a loss's settings (crc()) hold, field by field, as the refusal names them
SETTINGS = ("class weights (weight=, pos_weight=)", "ignore_index", "label_smoothing")


def crc(weight, ignore_index=None, smoothing=None):
    """A loss's settings (SETTINGS) as nonzero checksums, one per field: its
    per-class weights' bytes (cross_entropy's and nll_loss's weight=, the
    binary cross entropy's pos_weight=), ignore_index and label_smoothing.
    One process has one loss: ranks whose checksums differ (class weights
    counted from each rank's shard) train on none."""
    w = 1
    if weight is not None:
        t = weight.detach().reshape(-1).cpu().contiguous()
        w = zlib.crc32(str(t.dtype).encode() + _env.memory(t).tobytes()) or 1
    return (w, zlib.crc32(repr(ignore_index).encode()) or 1,
            zlib.crc32(repr(smoothing).encode()) or 1)


def keep_eager(dynamo):
    """torch.compile (torch 2) traces a compiled function's loss into these
    replacements, and their bookkeeping (the user's frame, a hook) would
    stop it with a "Graph break" warning: where the program has loaded
    dynamo, the bookkeeping is a function dynamo leaves out without one
    (_env.keep_backward_eager)."""
    global _watch, _watch_elementwise, _eager
    if not _eager:
        _watch, _watch_elementwise = dynamo.disable(_watch), dynamo.disable(_watch_elementwise)
        _eager = True


def count(target, weight, ignore_index):
    """(what the mean divides by, the targets, what is dropped or weighed:
    "ignore_index=-100", "weight=", both or "")."""
    keep = target != ignore_index
    kept = int(keep.sum())
    how = ["ignore_index=%d" % ignore_index] if kept < target.numel() else []
    if weight is None:
        return float(kept), target.numel(), ", ".join(how)
    return float(weight[target[keep]].sum()), target.numel(), ", ".join(how + ["weight="])


REPLACED = {name: elementwise(name) for name in ELEMENTWISE}


BY_HAND = "by hand"  # (the how of a mean written by hand: of_root)
_SCALED = {"DivBackward0": True, "DivBackward1": True, "MulBackward0": False,
           "MulBackward1": False}  # (node: divides)
_NLL = ("NllLossBackward0", "NllLoss2DBackward0")
_ELEMENTS = {"MseLossBackward0": "mse_loss", "SmoothL1LossBackward0": "smooth_l1_loss",
             "HuberLossBackward0": "huber_loss",
             "BinaryCrossEntropyBackward0": "binary_cross_entropy",
             "BinaryCrossEntropyWithLogitsBackward0": "binary_cross_entropy_with_logits"}
# (torch's losses whose one node computes them whole, reduction saved: a sum
# over the samples with "sum", a term a sample (or element) with "none")
_FUSED = {"MultiMarginLossBackward0": "multi_margin_loss",
          "MultilabelMarginLossBackward0": "multilabel_margin_loss",
          "SoftMarginLossBackward0": "soft_margin_loss"}
_CTC = "CtcLossBackward0"  # (ctc_loss's per-sample losses: its reductions are nodes of their own)
SUMMED = "summed"  # (the how of a loss summed over its samples: of_root)
SUMMED_TIMES_WORLD = "summed, times the world's size"  # (one process's sum: of_root)
_RESHAPES = ("ViewBackward0", "ReshapeAliasBackward0", "UnsafeViewBackward0")
_VIEWS = _RESHAPES + ("TransposeBackward0", "PermuteBackward0")
# (nodes between a loss and the layer it reads that keep the layer's output
# rows: log-probabilities, views, selections, a temperature)
_THROUGH = frozenset(("LogSoftmaxBackward0", "SoftmaxBackward0", "SigmoidBackward0",
                      "CloneBackward0", "ToCopyBackward0", "IndexBackward0", "SliceBackward0",
                      "SelectBackward0", "SqueezeBackward0", "SqueezeBackward1",
                      "UnsqueezeBackward0") + _VIEWS) | set(_SCALED)
_TRANSPOSED = ("TBackward0", "TransposeBackward0", "PermuteBackward0")


def of_root(tensors, grad_tensors, world=1):
    """What the loss backward() got divides by, read from its graph where
    the calls _losses watches cannot see it: (divisor, targets, how, name)
    or None. A mean cross_entropy or nll_loss at the root (torch's own,
    imported by name before the DistributedOptimizer replaced it) divides
    by the weight of the targets it kept, as count() (name "cross_entropy"
    or "nll_loss"); an element-wise loss's mean by its elements. A mean
    written by hand (how BY_HAND, name None): the value a one-element root
    is divided by (a tensor, as (loss * mask).sum() / mask.sum(); a
    number), through divisions by more such values (the accumulation steps)
    and products with values without gradient (a scaler's scale: left out
    of the count), and the elements of a .mean() it ends in
    (loss[mask].mean()). A sum over the samples (reduction="sum", .sum(),
    sums of them): (0.0, 0, SUMMED, None), SUMMED_TIMES_WORLD where it is
    multiplied by the world's size (world > 1). None where it divides by
    something with a gradient or mixes means and sums, for several roots
    and for given gradients."""
    tensors = _one_root(tensors, grad_tensors)
    if tensors is None:
        return None
    node, divisor, divided = tensors.grad_fn, 1.0, False
    try:
        for _ in range(16):
            name = _name(node)
            if _of_one(node, name):  # (a one-element loss summed: the loss)
                node = node.next_functions[0][0]
                continue
            if name in _NLL and node._saved_reduction == 1:  # (a mean)
                return _nll_read(node)
            if name in _ELEMENTS and node._saved_reduction == 1:
                n = torch.broadcast_shapes(node._saved_self.shape,
                                           node._saved_target.shape).numel()
                return float(n), n, "", _ELEMENTS[name]
            if name == "NegBackward0":  # (a sign: -logp.gather(...)[mask].mean())
                node = node.next_functions[0][0]
                continue
            if name in _PLUS:  # (a number without gradient added: loss = 0.0; loss += ...)
                sides = [n for n, _ in node.next_functions if n is not None]
                if len(sides) != 1:
                    break
                node = sides[0]
                continue
            if name == "MeanBackward0" and not (  # (a mean of stacked sums: a sum's)
                    world > 1 and _stacked(node, name) and _summed(node, world) is not None):
                divisor *= _numel(node)
                return divisor, divisor, BY_HAND, None
            divides = _SCALED.get(name)
            if divides is None:
                break
            if divides:
                a, b = _sides(node)
                if b is not None:
                    return None
                value, node = _value(node._saved_other), a
            else:
                value, node = _factor(node)
            if value is None or value == 0.0 or value != value:
                return None
            if divides:  # (a product's factor: the same on every rank, as a scale)
                divisor, divided = divisor * value, True
            if node is None:
                return None
        if divided:
            return divisor, divisor, BY_HAND, None
        summed = _summed(tensors.grad_fn, world) if world > 1 else None
        if summed is not None:
            return 0.0, 0, SUMMED if summed == "sum" else SUMMED_TIMES_WORLD, None
    except (RuntimeError, AttributeError, ValueError, TypeError, IndexError):
        return None  # (a graph read otherwise than expected: nothing read)
    return None


_PLUS = ("AddBackward0", "SubBackward0", "AddBackward1", "SubBackward1", "RsubBackward1")
WATCHED = "sfb.torch watched"  # (the metadata key that marks a watched call's node)


def terms_of_root(tensors, grad_tensors):
    """The terms of a loss of several terms that of_root does not read, each
    multiplied by a number without gradient: torch's losses imported by
    name before the DistributedOptimizer replaced them (`from
    torch.nn.functional import cross_entropy`), as in `w * cross_entropy(a,
    y) + (1 - w) * mse_loss(b, z)`, and means by hand beside the others
    (FixMatch's `ce(x, y) + (ce_u * mask).sum() / mask.sum()`). Per term
    (divisor, targets, how, name, factor) as the watched calls count them:
    a mean cross_entropy, nll_loss or element-wise loss by its targets,
    factor the product of the numbers on its way from the root (signs and
    divisions included: the gradient a watched loss gets); a .mean() by its
    elements, a .sum() of what a layer computed divided by a number by that
    number (how BY_HAND, name None, factor the products). The calls _losses
    watches (their nodes marked WATCHED: their hooks count them) and
    penalties (terms that reach no layer: an L2 on the weights) are not
    read. None unless two or more terms are met so, one of them read here
    (a term read otherwise, a product of two terms: nothing read, as
    before)."""
    root = _one_root(tensors, grad_tensors)
    if root is None:
        return None
    out, skipped = [], [0, 0]
    try:
        if not _mean_terms(root.grad_fn, 1.0, None, 0, out, skipped) or \
                not out or len(out) + sum(skipped) < 2:
            return None
    except (RuntimeError, AttributeError, ValueError, TypeError, IndexError):
        return None  # (a graph read otherwise than expected: nothing read)
    return out


def _mean_terms(node, mul, div, depth, out, skipped):
    """terms_of_root's walk from node, what reaches it multiplied by mul and
    divided by div (None: by nothing): False where a term is none of those
    it reads (or the graph too deep or wide); skipped counts the watched
    terms and the penalties met."""
    if depth > 24 or len(out) > 32:
        return False
    if node.metadata.get(WATCHED):
        skipped[0] += 1
        return True
    name = _name(node)
    if name in ("AddBackward0", "SubBackward0"):
        (a, _), (b, _) = node.next_functions
        alpha = _value(getattr(node, "_saved_alpha", 1))
        sign = -alpha if name == "SubBackward0" else alpha
        # (a value without gradient added is no term)
        return ((a is None or _mean_terms(a, mul, div, depth + 1, out, skipped)) and
                (b is None or (sign is not None and sign != 0 and
                               _mean_terms(b, mul * sign, div, depth + 1, out, skipped))))
    if name == "NegBackward0":
        return _mean_terms(node.next_functions[0][0], -mul, div, depth + 1, out, skipped)
    divides = _SCALED.get(name)
    if divides is not None:
        if divides:
            a, b = _sides(node)
            value, inner = (None, None) if b is not None else (_value(node._saved_other), a)
        else:
            value, inner = _factor(node)
        if value is None or inner is None or value == 0.0 or value != value:
            return False
        return _mean_terms(inner, mul if divides else mul * value,
                           (div or 1.0) * value if divides else div, depth + 1, out, skipped)
    if name in _NLL and node._saved_reduction == 1:
        divisor, targets, how, loss = _nll_read(node)
        out.append((divisor, targets, how, loss, mul / (div or 1.0)))
        return True
    if name in _ELEMENTS and node._saved_reduction == 1:
        n = torch.broadcast_shapes(node._saved_self.shape, node._saved_target.shape).numel()
        out.append((float(n), n, "", _ELEMENTS[name], mul / (div or 1.0)))
        return True
    if (name in _NLL or name in _ELEMENTS or name in _FUSED) and node._saved_reduction == 2 \
            and div is not None and _reaches_layer(node.next_functions[0][0]):
        out.append((div, div, BY_HAND, None, mul))  # (F.mse_loss(..., reduction="sum") / n)
        return True
    inner = node.next_functions[0][0] if name in ("SumBackward0", "MeanBackward0") else node
    if inner is None or not _reaches_layer(inner):  # (a penalty on the weights: every rank's)
        skipped[1] += 1
        return True
    if name == "MeanBackward0":
        d = (div or 1.0) * _numel(node)
        out.append((d, d, BY_HAND, None, mul))
        return True
    if name == "SumBackward0" and div is not None:
        out.append((div, div, BY_HAND, None, mul))
        return True
    return False


def _name(node):
    """node's operation by its class name, a sum or mean along every
    dimension of its input but those of size 1 (l.sum(0) of per-sample
    losses, torch.sum(l, dim=0), a (N, 1) column's .sum(0), a mean over
    dims (0, 1) of a matrix) named as the sum or mean of all its elements,
    SumBackward0 and MeanBackward0."""
    name = type(node).__name__
    if name in ("SumBackward1", "MeanBackward1"):
        sizes, dims = _sizes(node), getattr(node, "_saved_dim", None)
        if sizes is not None and dims is not None:
            dims = set(d % max(len(sizes), 1) for d in dims)
            if all(n == 1 for d, n in enumerate(sizes) if d not in dims):
                return name[:-1] + "0"
    return name


def _numel(node):
    """The elements a mean node averages (torch 1.13's or 2's saved count;
    a mean along every dimension saves its input's sizes)."""
    numel = getattr(node, "_saved_self_numel", None)
    if numel is None:
        numel = getattr(node, "_saved_self_sym_numel", None)
    return int(numel) if numel is not None else math.prod(_sizes(node))


def _sizes(node):
    """The sizes of node's input as saved (torch 2's sym_ or 1.13's), as
    a tuple of ints; None where not saved."""
    sizes = getattr(node, "_saved_self_sym_sizes", None)
    if sizes is None:
        sizes = getattr(node, "_saved_self_sizes", None)
    return None if sizes is None else tuple(int(d) for d in sizes)


def _of_one(node, name):
    """Whether node sums or averages a tensor of one element (a loss of
    shape [1], divided by a count kept as torch.as_tensor([n])): the same
    number, no reduction."""
    if name not in ("SumBackward0", "MeanBackward0"):
        return False
    sizes = _sizes(node)
    return sizes is not None and all(d == 1 for d in sizes)  # (() too: a 0-dim's)


def _one_root(tensors, grad_tensors):
    """The one-element tensor backward() got, with a graph and no gradient
    given; None otherwise (several roots, gradient=)."""
    if isinstance(tensors, (list, tuple)):
        if len(tensors) != 1:
            return None
        tensors = tensors[0]
    if isinstance(grad_tensors, (list, tuple)):
        grad_tensors = grad_tensors[0] if len(grad_tensors) == 1 else grad_tensors
    if not isinstance(tensors, torch.Tensor) or grad_tensors is not None or \
            tensors.numel() != 1 or tensors.grad_fn is None:
        return None
    return tensors


def given_as_loss(tensors, grad_tensors):
    """backward(t, g) by hand with g one number c in every element (a
    per-sample loss's torch.ones_like(l): its sum; a full of 1/len(l): its
    mean) as the loss whose backward() is the same, for the readings
    (of_root, read_root and kin): (t.mean() where c is 1/t.numel(), t.sum()
    where c is 1, t.sum() * c otherwise; t, t * c for a 0-dimensional t,
    None): torch's pass still gets what backward() got. (tensors,
    grad_tensors) as given otherwise: several roots, a g that weighs the
    elements apart (read as before: nothing)."""
    t, g = tensors, grad_tensors
    if isinstance(t, (list, tuple)) and len(t) == 1:
        t = t[0]
    if isinstance(g, (list, tuple)) and len(g) == 1:
        g = g[0]
    if not isinstance(t, torch.Tensor) or not isinstance(g, torch.Tensor) or \
            t.grad_fn is None or g.requires_grad or g.numel() != t.numel() or \
            not t.numel() or not g.is_floating_point() or (t.dim() == 0) != (g.numel() == 1):
        return tensors, grad_tensors
    first = g.reshape(-1)[0]
    if g.numel() > 1 and not bool((g == first).all()):
        return tensors, grad_tensors
    c = float(first)
    if c != c or abs(c) == float("inf"):
        return tensors, grad_tensors
    with torch.enable_grad():
        if t.dim() == 0:
            return (t if c == 1.0 else t * c), None
        if abs(c * t.numel() - 1.0) <= 1e-6:
            return t.mean(), None
        return (t.sum() if c == 1.0 else t.sum() * c), None


def _reading(read):
    """read(root's node, world) as a reading of what backward() got: called
    with (tensors, grad_tensors, world), None for several roots, given
    gradients or a world of one, and for a graph read otherwise than
    expected."""
    @functools.wraps(read)
    def reading(tensors, grad_tensors, world):
        root = _one_root(tensors, grad_tensors)
        if root is None or world < 2:
            return None
        try:
            return read(root.grad_fn, world)
        except (RuntimeError, AttributeError, ValueError, TypeError, IndexError):
            return None  # (nothing read)
    return reading


def read_root(tensors, grad_tensors, world, kinds):
    """What the loss backward() got shows of kinds ("summed": summed_term,
    "picked": picked_sum, "shared": shared_divisor, "mixing": mixing,
    "standardized": standardized, "detached": detached, "task":
    task_mean, "world": times_world): {kind: what it found}, those found."""
    read = {"summed": summed_term, "picked": picked_sum, "shared": shared_divisor,
            "mixing": mixing, "standardized": standardized, "detached": detached,
            "task": task_mean, "world": times_world}
    found = ((kind, read[kind](tensors, grad_tensors, world)) for kind in kinds)
    return {kind: what for kind, what in found if what is not None}


# the elements of the last small sfb.torch.allreduce(op="sum") results, each
# with the user's line that called it (shared_divisor): {value: line}, the
# newest last
SHARED_SUMS = {}


def note_shared_sums(values, line):
    """sfb.torch.allreduce(op="sum") returned values (a small tensor's, as
    floats): a loss divided by one of them divides by a count every rank
    shares (shared_divisor)."""
    for v in values[:8]:
        if v == v and v != 0.0:
            SHARED_SUMS.pop(v, None)
            SHARED_SUMS[v] = line
    while len(SHARED_SUMS) > 32:
        del SHARED_SUMS[next(iter(SHARED_SUMS))]


@_reading
def shared_divisor(root, world):
    """A term of the loss backward() got that divides what a layer computed
    from this rank's samples by a count summed over the ranks (a value
    sfb.torch.allreduce(op="sum") returned: fairseq's `nll_loss(...,
    reduction="sum") / ntokens` over every rank's tokens), multiplied by no
    multiple of world: each rank's loss is its share of one process's mean
    over the union, whose gradient is the ranks' sum, world times their
    mean. (count, the allreduce's line) or None. A count averaged over the
    ranks (op="mean") is one process's mean already; a penalty on the
    weights (no layer reached) is every rank's alike."""
    if not SHARED_SUMS:
        return None
    terms = []
    _terms(root, (), 0, terms)
    for term, path in terms:
        by = next((v for op, v in path or () if op == "/" and v in SHARED_SUMS), None)
        if by is None or any(op == "*" and v >= world and v % world == 0 for op, v in path):
            continue
        if _reaches_layer(term) or any(f is not None and _reaches_layer(f)  # (a sum: what
                                       for f in _inputs(term)):          # it sums)
            return by, SHARED_SUMS[by]
    return None


@_reading
def summed_term(root, world):
    """A term summed over the samples beside others in the loss backward()
    got (a VAE's mean reconstruction loss plus its KL divergence's .sum(),
    a mean plus an L1 penalty on the activations): the ranks' mean holds
    1/world of one process's gradient of that term over the union of their
    minibatches, and no weighing of the ranks mends it. Its name (".sum()",
    'mse_loss(reduction="sum")'), or None: no such term, or it is multiplied
    by world (one process's sum) or by 0, divided by a value (a mean by
    hand), or reaches no layer through element-wise operations (a penalty
    on the weights, a sum over a minibatch statistic). A loss that is all
    sums is of_root's."""
    terms = []
    _terms(root, (), 0, terms)
    if len(terms) < 2:
        return None
    for term, path in terms:
        what = None if _scaled(path, world) else _sum_name(term)
        if what:
            return what
    return None


@_reading
def picked_sum(root, world):
    """A loss summed in Python over one sample (or one task) at a time:
    sum(ce(model(x[i:i + 1]), y[i:i + 1]) for i in ...), actor-critic's
    torch.stack(policy_losses).sum() over steps each a forward of one state,
    MAML's sum(ce(f(x_qry[i]), y_qry[i]) ...). Its terms (added, or
    torch.stack(terms).sum(), each multiplied by numbers or not, the whole
    too) come from forwards of their own, two or more (_forwards: terms that
    share a node but the parameters' are one forward's), each of one sample
    (its layers took one row, or one unbatched sample; three or more, their
    terms alike) or each a mean loss over one row of the same targets (a
    pick along their first dimension, each forward its own row: a task): a
    sum over the samples, the ranks''
    mean 1/world of one process's over the union. (the number of forwards,
    whether the sum is multiplied by the world's size: one process's sum),
    or None. A decoder's per-step terms share the hidden state (or one
    forward), targets in columns pick no row, terms divided by a count are
    a mean by hand."""
    numbers = _numbers(root)
    if numbers is None or any(divides or value == 0.0 for divides, value in numbers[0]):
        return None  # (divided by a value: a mean by hand)
    by_world, node = any(value == world for _, value in numbers[0]), numbers[1]
    terms = _addends(node)
    if terms is None or len(terms) < 2:
        return None
    forwards = _forwards(terms)
    if forwards is None or len(forwards) < 2:
        return None
    # (forwards of one sample each: three or more, their terms alike, as a loop
    # over the samples makes them; two (pix2pix's discriminator on a real and
    # a fake pair, a batch of one) or unlike ones (WGAN-GP's) are no such loop)
    # (each forward its own sample: an ensemble's members on one sample each are
    # no loop over the samples)
    kinds = set(tuple(sorted(_name(t) for t in group)) for group, _, _ in forwards)
    ones = len(forwards) >= 3 and len(kinds) == 1 and \
        len(set(at for _, _, at in forwards)) == len(forwards)
    rows, base = set(), None
    for group, one, _ in forwards:
        if one and ones:
            continue
        picked = set()
        for term in group:
            name = _name(term)
            if not ((name in _NLL or name in _ELEMENTS) and term._saved_reduction == 1):
                return None
            row = _row_of(term._saved_target)
            if row is None or (base is not None and row[0] is not base):
                return None
            base = row[0]
            picked.add(row[1])
        if len(picked) != 1 or picked & rows:
            return None
        rows |= picked
    return len(forwards), by_world


def _numbers(node, limit=8):
    """The numbers without gradient at the top of a loss, down from node
    through products, divisions and negations (a sign: -1) by them, at
    most limit: ([(whether it divides, the number)], the node below them),
    or None where a product or division is by a tensor with gradient or
    of more than one element."""
    out = []
    for _ in range(limit):
        name = _name(node)
        if name == "NegBackward0":
            out.append((False, -1.0))
            node = node.next_functions[0][0]
            continue
        if name not in _SCALED:
            break
        value, inner = _factor(node)
        if value is None or inner is None:
            return None
        out.append((_SCALED[name], value))
        node = inner
    return out, node


@_reading
def times_world(root, world):
    """The loss backward() got multiplied by the world's size at its top,
    through other numbers and divisions by them ((ce1 + ce2) / 2 *
    sfb.torch.size(): DINO's, SwAV's means of terms): True, else None."""
    numbers = _numbers(root)
    return True if numbers and any(not divides and value == world
                                   for divides, value in numbers[0]) else None


@_reading
def task_mean(root, world):
    """The whole loss backward() got is one task's mean: torch's mean loss
    (nll or element-wise) whose targets are one row of a tensor of them (a
    meta-batch's y_qry[i]; a sample's y[i:i + 1]), multiplied or divided by
    numbers or not: (the targets' tensor's id, the row, the numbers'
    product), else None. A step's passes of such rows, undivided, sum over
    the tasks across backward() calls (higher's MAML loop)."""
    numbers = _numbers(root)
    if numbers is None or any(value == 0.0 for _, value in numbers[0]):
        return None
    f, node = 1.0, numbers[1]
    for divides, value in numbers[0]:
        f = f / value if divides else f * value
    name = _name(node)
    if not ((name in _NLL or name in _ELEMENTS) and node._saved_reduction == 1):
        return None
    row = _row_of(node._saved_target)
    return None if row is None else (id(row[0]), row[1], f)


def _forwards(terms, limit=8192):
    """The terms grouped by the forwards they come from: terms whose graphs
    share a node (the parameters' aside) are one forward's. [(its terms,
    whether each of its layers took one sample: one row, or one unbatched
    sample, picked out, where (_picked's address))], or None where the
    graphs hold more than limit nodes."""
    owner, parent = {}, list(range(len(terms)))
    one = [None] * len(terms)  # (None: no layer met; True: each one sample's)
    picks = [None] * len(terms)  # (where a layer took a sample picked out: _picked)

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    walked = [0]
    for i, term in enumerate(terms):
        def visit(node, name):
            if name == "AccumulateGrad":
                return []
            j = owner.get(node)
            if j is not None:  # (met by an earlier term: one forward, walked)
                parent[find(j)] = find(i)
                return []
            owner[node] = i
            walked[0] += 1
            took = _one_sample(node, name)
            if took is not None:
                one[i] = took and one[i] is not False
                if took and picks[i] is None:
                    picks[i] = _picked(node, name)
            return [f for f, _ in node.next_functions]
        _walk(term, visit, limit)
        if walked[0] >= limit:
            return None
    groups = {}
    for i, term in enumerate(terms):
        group = groups.setdefault(find(i), [[], True, False, None])
        group[0].append(term)
        group[1] = group[1] and one[i] is not False
        group[2] = group[2] or one[i] is not None
        group[3] = group[3] if group[3] is not None else picks[i]
    return [(g, took and met and at is not None, at) for g, took, met, at in groups.values()]


def _one_sample(node, name):
    """Whether layer node took one sample (one row, or one unbatched
    sample: F.linear of a 1-D input multiplies it as one row); None for no
    layer, or a table's rows."""
    if name in FACTOR_NODES:
        return getattr(node, "one", None)
    if name in ("AddmmBackward0", "MmBackward0", "ConvolutionBackward0") and _layer(node, name):
        x = getattr(node, "_saved_mat1" if name == "AddmmBackward0" else
                    "_saved_self" if name == "MmBackward0" else "_saved_input", None)
        return x.shape[0] == 1 if isinstance(x, torch.Tensor) and x.dim() > 1 else None
    return None


def _picked(node, name):
    """Where layer node's input is one sample picked out (its address):
    unbatched (a 1-D state), an unbatched sample made a batch of one
    (unsqueeze(0)), or one row of a batch (x[i:i + 1], x[i][None]); None
    otherwise. A batch that holds one sample of its own (a rank's one env of
    a vectorized rollout, each step a mean over the envs) is none: one
    process's holds more."""
    try:
        x = node.saved_tensors[0] if name in FACTOR_NODES else getattr(
            node, "_saved_mat1" if name == "AddmmBackward0" else
            "_saved_self" if name == "MmBackward0" else "_saved_input", None)
    except (RuntimeError, IndexError, AttributeError):
        return None
    if not isinstance(x, torch.Tensor):
        return None
    base = x._base
    if x.dim() == 1 or base is not None and (base.shape == x.shape[1:] or (
            base.dim() == x.dim() and base.shape[1:] == x.shape[1:] and base.shape[0] > 1)):
        return x.data_ptr()
    return None


def _addends(node, limit=4096):
    """The terms a loss at node adds (a Python sum over a list, +=,
    torch.stack(terms).sum()), each through products by numbers without
    gradient and signs; None where one is divided by a value or there are
    more than limit."""
    out, todo = [], [node]
    while todo:
        node = todo.pop()
        if node is None:  # (a value without gradient added)
            continue
        name = _name(node)
        if name in ("AddBackward0", "SubBackward0", "NegBackward0"):
            todo.extend(f for f, _ in node.next_functions)
        elif name == "SumBackward0" and \
                _name(node.next_functions[0][0]) in ("StackBackward0", "CatBackward0"):
            todo.extend(f for f, _ in node.next_functions[0][0].next_functions)
        elif name in ("MulBackward0", "MulBackward1"):
            value, inner = _factor(node)
            if value is None or inner is None:
                return None
            todo.append(inner)
        elif name in _SCALED:
            return None
        else:
            out.append(node)
        if len(out) + len(todo) > limit:
            return None
    return out


def _row_of(t):
    """(the tensor t is a view of, the row it is) where t is one row of
    another tensor along its first dimension (y[i], y[i:i + 1], a view of
    one of them), else None."""
    base = t._base if isinstance(t, torch.Tensor) else None
    if base is None or base.dim() == 0 or base.stride(0) <= 0:
        return None
    offset = t.storage_offset() - base.storage_offset()
    row, within = divmod(offset, base.stride(0))
    if within or not 0 <= row < base.shape[0]:
        return None
    one = base[row]
    if tuple(t.shape) in (tuple(one.shape), (1,) + tuple(one.shape)) and \
            tuple(t.stride()[-one.dim():] if one.dim() else ()) == tuple(one.stride()):
        return base, row
    if t.numel() == one.numel() and t.is_contiguous() and one.is_contiguous():
        return base, row
    return None


def _terms(node, path, depth, out):
    """The terms the loss at node adds into out: (node, path), path the
    numbers without gradient on its way from the root, ("*", v) a product's
    factor, ("/", v) a divisor (v None: not one element); a graph too deep
    or wide to read: (None, None)."""
    if node is None:  # (a value without gradient added)
        return
    if depth > 24 or len(out) > 32:
        out.append((None, None))
        return
    name = _name(node)
    if name in ("AddBackward0", "SubBackward0", "NegBackward0") or _of_one(node, name):
        for f, _ in node.next_functions:
            _terms(f, path, depth + 1, out)
        return
    stacked = _stacked(node, name)
    if stacked:  # (torch.stack(losses).sum(), .mean(): each a term, the mean's 1/K a factor)
        sub = path if name == "SumBackward0" else path + (("*", 1.0 / len(stacked)),)
        for f in stacked:
            _terms(f, sub, depth + 1, out)
        return
    divides = _SCALED.get(name)
    if divides:
        a, b = _sides(node)
        if b is None:  # (by a value without gradient: a mean by hand)
            _terms(a, path + (("/", _value(node._saved_other)),), depth + 1, out)
            return
    elif divides is not None:
        value, inner = _factor(node)
        if value is not None and inner is not None:
            _terms(inner, path + (("*", value),), depth + 1, out)
            return
    out.append((node, path))


def _stacked(node, name):
    """The nodes of the one-element terms a .sum() or .mean() of a
    torch.stack of them reduces (torch.stack(losses).sum()), else None."""
    if name not in ("SumBackward0", "MeanBackward0"):
        return None
    inner = node.next_functions[0][0]
    if inner is None or _name(inner) != "StackBackward0":
        return None
    if _sizes(node) != (len(inner.next_functions),):
        return None  # (a stack of tensors of more than one element)
    return [f for f, _ in inner.next_functions]


def _scaled(path, world):
    """How a term's path (_terms) scales it: "divided" by a value (a mean
    by hand), else its outermost product "by 0" or "by the world"; "unread"
    for a graph not read; None: none of those."""
    if path is None:
        return "unread"
    if any(op == "/" for op, _ in path):
        return "divided"
    return next(("by 0" if v == 0.0 else "by the world" for _, v in path
                 if v == 0.0 or v == world), None)


# (nodes whose output keeps their input's samples apart: a sum through them
# to a layer sums over the samples; a BatchNorm's too, as sfb.torch makes its
# statistics the union's in training, _SyncBatchNorm's, and its running
# ones are every rank's in eval)
_ROWWISE = frozenset((
    "AddBackward0", "AddBackward1", "SubBackward0", "SubBackward1", "RsubBackward1",
    "MulBackward0", "MulBackward1", "DivBackward0", "DivBackward1", "NegBackward0",
    "PowBackward0", "PowBackward1", "ExpBackward0", "LogBackward0", "Log1PBackward0",
    "LogSigmoidBackward0", "CosBackward0", "SinBackward0", "ExpandBackward0", "BmmBackward0",
    "AbsBackward0", "SqrtBackward0", "RsqrtBackward0", "TanhBackward0", "SigmoidBackward0",
    "ReluBackward0", "GeluBackward0", "EluBackward0", "LeakyReluBackward0",
    "SoftplusBackward0", "SiluBackward0", "HardtanhBackward0", "ClampBackward1",
    "ClampMinBackward0", "ClampMaxBackward0", "NativeDropoutBackward0",
    "NativeLayerNormBackward0", "SumBackward1", "CloneBackward0", "ToCopyBackward0",
    "SliceBackward0", "SelectBackward0", "IndexBackward0", "CatBackward0", "StackBackward0",
    "SplitBackward0", "SplitWithSizesBackward0", "UnbindBackward0", "SqueezeBackward0",
    "SqueezeBackward1", "UnsqueezeBackward0", "TBackward0", "CopySlices",
    "IndexPutBackward0", "MaskedFillBackward0", "WhereBackward0", "NativeGroupNormBackward0",
    "NativeBatchNormBackward0", "_SyncBatchNormBackward",
    # (more element-wise functions: a pinball loss's torch.maximum, xlogy, erf, ...)
    "MaximumBackward0", "MinimumBackward0", "XlogyBackward0", "Expm1Backward0",
    "ReciprocalBackward0", "AtanBackward0", "Atan2Backward0", "AsinBackward0", "AcosBackward0",
    "TanBackward0", "ErfBackward0", "ErfcBackward0", "ErfinvBackward0", "CoshBackward0",
    "SinhBackward0", "LgammaBackward0", "DigammaBackward0", "PolygammaBackward0",
    "SgnBackward0", "SignBackward0", "Log2Backward0", "Log10Backward0", "Exp2Backward0",
    "LogitBackward0", "HypotBackward0", "ClampBackward0", "LogaddexpBackward0",
    "Logaddexp2Backward0", "SincBackward0", "FmodBackward0", "RemainderBackward0",
    "TruncBackward0", "RoundBackward0", "FloorBackward0", "CeilBackward0", "FracBackward0",
    "HardswishBackward0", "HardsigmoidBackward0", "MishBackward0", "CeluBackward0",
    "RreluWithNoiseBackward0", "ThresholdBackward0", "SoftshrinkBackward0",
    "HardshrinkBackward0", "PreluBackward0", "PreluKernelBackward0",
    # (resampling each sample's own positions: logits upsampled to the labels'
    # size, pooled, padded, shuffled into pixels)
    "PixelShuffleBackward0", "PixelUnshuffleBackward0", "ConstantPadNdBackward0") + _VIEWS +
    tuple("Upsample%s%dDBackward%d" % (kind, d, v) for kind in (
        "Nearest", "NearestExact", "Linear", "Bilinear", "Bicubic", "Trilinear")
        for d in (1, 2, 3) for v in (0, 1)) +
    tuple("%sPad%dDBackward0" % (kind, d) for kind in ("Reflection", "Replication")
          for d in (1, 2, 3)) +
    tuple("%s%dDBackward0" % (kind, d) for kind in (
        "MaxPool", "MaxPoolWithIndices", "AvgPool", "AdaptiveAvgPool", "AdaptiveMaxPool")
        for d in (1, 2, 3)) +
    ("MaxPool2DWithIndicesBackward0", "MaxPool3DWithIndicesBackward0"))
# (sfb's own layers and torch's: per-sample outputs of a model)
FACTOR_NODES = ("_LinearFactorsBackward", "_ConvFactorsBackward", "_RowsFactorsBackward")
_LAYERS = FACTOR_NODES + ("EmbeddingBackward0", "ConvolutionBackward0", "AddmmBackward0",
                          "MmBackward0")
_GATHER = "_AllGatherBackward"  # (sfb.torch.allgather's)
# (sfb.torch.allgather's rows and sfb.torch.allreduce's result: every rank's,
# the union's as one process computes it)
_UNION = (_GATHER, "_AllReduceBackward")


def _reaches_layer(node):
    """Whether node's output comes from a layer of the model (its weight a
    parameter) through operations that keep the samples apart."""
    return "layer" in _below(node)


def _walk(start, visit, limit, seen=None):
    """visit(node, name) on each node reached from start (a node or a list
    of them) once, depth first, at most limit nodes (seen: the nodes not to
    visit, those visited added): it returns the nodes to go on to (a list),
    or what the walk found, which ends it and is returned (None:
    nothing)."""
    seen = set() if seen is None else seen
    todo, limit = list(start) if isinstance(start, list) else [start], limit + len(seen)
    while todo and len(seen) < limit:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        more = visit(node, _name(node))
        if not isinstance(more, list):
            return more
        todo.extend(more)
    return None


def _inputs(node):
    """The nodes node's inputs come from (None: without gradient); a
    squared 2-norm's, its norm's (the squares it sums: _squared_norm)."""
    norm = _squared_norm(node)
    return [f for f, _ in (norm or node).next_functions]


# (2-norms: the norm's p as saved, by torch version)
_NORMS = {"NormBackward1": "_saved_p", "LinalgVectorNormBackward0": "_saved_ord"}


def _squared_norm(node):
    """The norm node where node squares a 2-norm (x.norm(2).pow(2),
    torch.linalg.vector_norm(x) ** 2): a sum of squares, which a norm alone
    is not (LightGCN's regularizer ||E_batch||² / B is a mean of per-sample
    terms). None otherwise."""
    if _name(node) != "PowBackward0" or getattr(node, "_saved_exponent", None) != 2:
        return None
    norm = node.next_functions[0][0]
    attr = _NORMS.get(_name(norm))
    return norm if attr and getattr(norm, attr, None) == 2 else None


def _below(node, limit=256, whole=False):
    """What node's output comes from through operations that keep the
    samples apart: {"layer"} a layer of the model's (its weight a
    parameter), "gathered" sfb.torch.allgather's rows of every rank.
    whole: not through a choice of one sample (z[i], z[i:i + 1]), below
    which the first dimension is no longer the samples."""
    found = set()

    def visit(node, name):
        if name == _GATHER:
            found.add("gathered")
            return []
        if whole and _picks_one(node, name):
            return []
        layer = _layer(node, name)
        if layer:
            if not _on_parameters(node, name):  # (a hypernetwork's over a parameter: none)
                found.add("layer")
            return []
        if layer is None:  # (a frozen layer: the samples go on into its input)
            return [node.next_functions[0 if name == "ConvolutionBackward0" else -2][0]]
        if _rowwise(node, name) or name == _CTC or \
                ((name in _NLL or name in _ELEMENTS or name in _FUSED) and
                 node._saved_reduction == 0):
            return _inputs(node)  # (a loss with reduction="none": one term a sample)
        return []
    _walk(node, visit, limit)
    return found


def _layer(node, name):
    """Whether node is a layer of the model: sfb's factor functions, an
    embedding, a convolution, or a product x @ W.T, x @ W (F.linear) or an
    nn.Bilinear whose weight is computed from parameters alone (a
    parameter; a cosine head's F.normalize(W), weight_norm's,
    spectral_norm's; a convolution's too); None for a convolution or
    product whose weight needs no gradient (frozen), False otherwise (x.T @
    y: a product of samples; a convolution by a whitening matrix of them)."""
    if name in ("AddmmBackward0", "MmBackward0"):
        w = node.next_functions[-1][0]
        if w is None:
            return None
        return _of_parameters(w)
    if name == "TrilinearBackward0":  # (nn.Bilinear's (x1, weight, x2))
        w = node.next_functions[1][0]
        return w is not None and _of_parameters(w)
    if name == "ConvolutionBackward0":  # (a weight from the samples is none: W-MSE's whitening)
        w = node.next_functions[1][0]
        return None if w is None else _of_parameters(w)
    return name in _LAYERS


# (a layer node's input side: its index in next_functions)
_INPUT = {"_LinearFactorsBackward": 0, "_ConvFactorsBackward": 0, "AddmmBackward0": 1,
          "MmBackward0": 0, "ConvolutionBackward0": 0}


def _on_parameters(node, name):
    """Whether layer node's input is computed from parameters alone (a
    hypernetwork's Linear over a learned embedding, a policy over a
    parameter): its output holds no sample."""
    i = _INPUT.get(name)
    if i is None:
        return False
    side = node.next_functions[i][0]
    return side is not None and bool(_of_parameters(side))


def _of_parameters(node, limit=64):
    """Whether node's output is computed from parameters alone: its graph
    (at most limit nodes) reaches a parameter and no layer over a tensor
    without gradient, product with one (the samples), embedding or gathered
    rows (the samples' side of a product). A product of parameters (LoRA's
    W + B @ A) is one, so is a hypernetwork's output."""
    found = []

    def visit(node, name):
        if name == "AccumulateGrad":
            found.append(True)
            return []
        more = [f for f, _ in node.next_functions]
        if name in ("AddmmBackward0", "MmBackward0"):
            return more if None not in more[-2:] else False
        if name in _INPUT:  # (a layer over parameters: a hypernetwork's, two layers deep)
            return more if more[_INPUT[name]] is not None else False
        if name in _LAYERS or name in _UNION:
            return False
        return more
    seen = set()
    if _walk(node, visit, limit, seen) is False or len(seen) >= limit:
        return False
    return bool(found)


@_reading
def mixing(root, world):
    """What combines the samples of the minibatch in the loss backward()
    got, above the model's layers: a product of two tensors computed from
    them (an in-batch similarity z1 @ z2.T, a covariance z.T @ z,
    torch.cdist, torch.einsum("nc,mc->nm", ...): a batch matrix product of
    one matrix), a division by a sum over them (a batch's Dice or F1), a
    statistic over them that no mean of per-sample terms is (a variance, a
    maximum, topk's hardest samples, a norm, a softmax across them) or a
    function that is not linear of a sum or mean over them (the square
    root of a mean squared error, a batch entropy's log of the mean
    prediction, a product of two means): each rank computes it over its
    own samples where one process does over the union. Its name, or None:
    none, a side gathered from every rank (sfb.torch.allgather) or without
    gradient (a queue of negatives, a count), or the world one."""
    below = set()  # (the nodes the statistics' walks saw: each walked once)
    function = []  # (a function of a sum or mean over the samples: named if nothing else is)

    def visit(node, name):
        if _stops(node, name):
            return []
        if name in ("MmBackward0", "CdistBackward0", "EuclideanDistBackward0", "BmmBackward0"):
            sides = [_below(f, whole=True) if f is not None else set() for f in _inputs(node)]
            if all(side == {"layer"} for side in sides) and (
                    name != "BmmBackward0" or len(node._saved_self) == 1 and
                    not any(_one_sample_batch(f) for f in _inputs(node))):
                return {"MmBackward0": "torch.mm: an in-batch similarity or a covariance over "
                                       "the samples",
                        "BmmBackward0": "torch.einsum or torch.bmm of one matrix product: an "
                                        "in-batch similarity or a covariance over the samples"
                        }.get(name, "torch.cdist: distances between the samples")
        if name == "DivBackward0" and _sums_samples(node.next_functions[1][0]):
            return "a division by a sum over the samples: a batch's Dice or F1"
        if name in _PAIRWISE and _pairs(node):
            return ("%s of every pair of samples, broadcast (z[:, None] against z[None]): a "
                    "kernel or distance over the minibatch" % _PAIRWISE[name])
        if name in _REORDERS and _reorders_first(node) and \
                _below(node.next_functions[0][0]) == {"layer"}:
            return ("%s along the samples: each sample paired with another of the "
                    "minibatch, as a negative from the next row or manifold mixup do"
                    % _REORDERS[name])
        stat = _statistic(node, name)
        if stat is not None and stat[1]:
            return stat[0]
        if not function and _nonlinear(node, name):
            stat = _walk(_inputs(node), statistic, 256, below)
            if stat:
                function.append(stat[0] if stat[1] else "%s of %s: a function of a batch "
                                "statistic" % (_op_name(name), stat[0]))
        return _inputs(node)

    def statistic(node, name):
        return [] if _stops(node, name) else _statistic(node, name) or _inputs(node)
    return _walk(root, visit, 512) or (function[0] if function else None)


@_reading
def detached(root, world):
    """A product, above the model's layers, of a sum or mean over the
    samples (through linear operations) by a tensor of several elements
    (up to 65536, dense) without gradient: an MoE's load-balancing loss,
    the mean router probability per expert times the fraction of the
    tokens each expert took. Linear in the samples, so one process's where that tensor is the
    same on every rank; computed from each rank's own samples it is not,
    which only the ranks' tensors tell: (the statistic's name, the tensor's
    CRC-32), or None."""
    def visit(node, name):
        if _stops(node, name):
            return []
        if name in ("MulBackward0", "DivBackward0"):
            a, b = _inputs(node)
            side = a if b is None else b if name == "MulBackward0" and a is None else None
            if side is not None:  # (x * t, t * x, x / t: t without gradient)
                t = node._saved_other if b is None else node._saved_self
                if isinstance(t, torch.Tensor) and 1 < t.numel() <= 1 << 16 and \
                        t.layout == torch.strided:  # (a few experts' fractions: read each pass)
                    stat = _walk(side, linear, 64)
                    if stat:
                        return stat, zlib.crc32(_env.memory(t))
        return _inputs(node)

    def linear(node, name):
        stat = _statistic(node, name)
        if stat is not None:
            return [] if stat[1] else stat[0]  # (one that mixes whatever follows: mixing's)
        return _inputs(node) if name in _LINEAR else []
    return _walk(root, visit, 512)


@_reading
def standardized(root, world):
    """A tensor without gradient in the loss, above the model's layers,
    normalized over this rank's samples (_normalized): a product's or a
    quotient's other side (PPO's advantages normalized per minibatch,
    (adv - adv.mean()) / adv.std(); per-sample weights w / w.sum(), L2RW's)
    or an element-wise loss's target (regression targets normalized per
    batch). One process normalizes over the union of the ranks'
    minibatches; where the set normalized lies within one rank (an
    episode's returns, one prompt's completions) it is one process's too,
    which the tensor does not tell. (what: "a factor" or "a target", how:
    _normalized's), or None."""
    def visit(node, name):
        if _stops(node, name):
            return []
        t, what, side = None, None, None
        if name in ("MulBackward0", "DivBackward0"):
            a, b = _sides(node)
            if b is None and a is not None:
                t, what, side = node._saved_other, "a factor", a
            elif name == "MulBackward0" and a is None and b is not None:
                t, what, side = node._saved_self, "a factor", b
        elif name in _ELEMENTS and node._saved_reduction != 0:
            t, what, side = node._saved_target, "a target", node.next_functions[0][0]
        how = _normalized(t) if isinstance(t, torch.Tensor) and not t.requires_grad else None
        if how and side is not None and _reaches_layer(side):  # (beside per-sample values:
            return what, how  # not an MoE's fractions beside a mean over the samples)
        return _inputs(node)
    return _walk(root, visit, 512)


_STANDARDIZED = "mean 0 and standard deviation 1"
_WEIGHTS = "weights summing to 1"


def _normalized(t):
    """How t (N rows of up to 64 columns, N >= 2) is normalized over its
    rows: _STANDARDIZED (N >= 4; mean 0 and torch's .std(), with N - 1, 1
    in each column) or _WEIGHTS (one column of non-negative weights, two or
    more of them nonzero, summing to 1); None. By chance, or normalized
    over a union they are a share of, that is not so."""
    if not t.is_floating_point() or t.layout != torch.strided or t.dim() not in (1, 2) or \
            t.shape[0] < 2 or t.numel() > 1 << 16 or (t.dim() == 2 and t.shape[1] > 64):
        return None
    v = t.detach().double()
    if t.shape[0] >= 4:
        mean, std = v.mean(0), v.std(0)
        if bool((mean.abs() <= 1e-4).all() and ((std - 1).abs() <= 1e-4).all()):
            return _STANDARDIZED
    v = v.reshape(-1) if v.dim() == 1 or v.shape[1] == 1 else None
    if v is not None and bool((v >= 0).all()) and int((v > 0).sum()) >= 2 and \
            abs(float(v.sum()) - 1.0) <= 1e-5:
        return _WEIGHTS
    return None


def _stops(node, name):
    """Whether a walk above the model's layers ends at node: a parameter,
    rows gathered from every rank or a sum over them (_UNION), a layer
    (frozen too)."""
    return name == "AccumulateGrad" or name in _UNION or _layer(node, name) is not False


# (reductions that combine the samples whatever is done with them: what)
_MIXES = {"VarBackward0": "a variance", "StdBackward0": "a standard deviation",
          "VarMeanBackward0": "a variance", "StdMeanBackward0": "a standard deviation",
          "AmaxBackward0": "a maximum", "AminBackward0": "a minimum",
          "MaxBackward0": "a maximum", "MaxBackward1": "a maximum",
          "MinBackward0": "a minimum", "MinBackward1": "a minimum",
          "MedianBackward0": "a median", "MedianBackward1": "a median",
          "KthvalueBackward0": "a k-th smallest", "SortBackward0": "a sort",
          "TopkBackward0": "topk (hard-example mining)", "LogsumexpBackward0": "a logsumexp",
          "NormBackward1": "a norm", "LinalgVectorNormBackward0": "a norm",
          "ProdBackward0": "a product", "ProdBackward1": "a product",
          "CumsumBackward0": "a cumulative sum", "CumprodBackward0": "a cumulative product",
          "LogcumsumexpBackward0": "a cumulative logsumexp",  # (a Cox model's risk sets)
          "CummaxBackward0": "a cumulative maximum", "CumminBackward0": "a cumulative minimum",
          "SoftmaxBackward0": "a softmax", "LogSoftmaxBackward0": "a log_softmax"}
_CUMULATIVE = ("CumsumBackward0", "CumprodBackward0", "LogcumsumexpBackward0",
               "CummaxBackward0", "CumminBackward0")
# (reductions that are linear: a mean of per-sample terms until something
# that is not linear is done with them)
_SUMS = {"SumBackward0": "a sum", "SumBackward1": "a sum", "NansumBackward0": "a sum",
         "MeanBackward0": "a mean", "MeanBackward1": "a mean"}
# (operations linear in each input: a function of a sum over the samples
# through them is still one)
_LINEAR = frozenset(_VIEWS + tuple(_SUMS) + (
    "AddBackward0", "AddBackward1", "SubBackward0", "SubBackward1", "RsubBackward1",
    "RsubBackward0", "NegBackward0", "MulBackward1", "DivBackward1", "CloneBackward0",
    "ToCopyBackward0", "SliceBackward0", "SelectBackward0", "IndexBackward0", "CatBackward0",
    "StackBackward0", "SplitBackward0", "SplitWithSizesBackward0", "UnbindBackward0",
    "SqueezeBackward0", "SqueezeBackward1", "UnsqueezeBackward0", "TBackward0",
    "ExpandBackward0", "RepeatBackward0", "FlipBackward0", "RollBackward0", "AliasBackward0",
    "AsStridedBackward0", "NanToNumBackward0", "CopySlices", "IndexPutBackward0",
    "MaskedFillBackward0", "WhereBackward0", "NativeDropoutBackward0", "GatherBackward0",
    "DiagonalBackward0", "TraceBackward0"))
# (products: linear where at most one side comes from the samples; the
# inputs that are multiplied, by their positions)
_PRODUCTS = {"MulBackward0": (0, 1), "DivBackward0": (0, 1), "MmBackward0": (0, 1),
             "BmmBackward0": (0, 1), "MvBackward0": (0, 1), "DotBackward0": (0, 1),
             "AddmmBackward0": (1, 2), "BaddbmmBackward0": (1, 2)}


def _statistic(node, name):
    """(what, whether it combines the samples whatever follows) where node
    reduces over the first dimension, the samples, of what a layer of the
    model computed from them, keeping them apart until there: a variance,
    a maximum (True); a sum, a mean, a mean loss (False: it is a sum of
    per-sample terms). None otherwise."""
    if name in _NLL or name in _ELEMENTS:
        if node._saved_reduction == 0:
            return None
        what = "%s's %s" % (_ELEMENTS.get(name) or _nll_name(node),
                            "mean" if node._saved_reduction == 1 else "sum")
        return (what, False) if _below(node.next_functions[0][0]) == {"layer"} else None
    norm = _squared_norm(node)
    if norm is not None:  # (a sum of squares)
        node, name = norm, _name(norm)
        what = "a squared norm"
        mixes = False
    else:
        what = _SUMS.get(name) or _MIXES.get(name)
        mixes = name in _MIXES
    if what is None or not _over_first(node, name):
        return None
    if _below(node.next_functions[0][0], whole=True) != {"layer"}:
        return None  # (over one sample's elements: a per-image Lovasz, an episode's classes)
    return what + " over the samples", mixes


def _picks_one(node, name):
    """Whether node takes one sample of its input: z[i] (a select along the
    first dimension) or z[i:i + 1]."""
    if name == "SelectBackward0":
        return _signed(node._saved_dim) == 0
    if name == "SliceBackward0" and _signed(node._saved_dim) == 0:
        start, end = _signed(node._saved_start), _signed(node._saved_end)
        return getattr(node, "_saved_step", 1) == 1 and 0 <= start and end - start == 1
    return False


# (reorderings of a tensor's rows: along the samples they pair each sample
# with another, which one process takes from the union)
_REORDERS = {"RollBackward0": "torch.roll", "FlipBackward0": "torch.flip"}


_PAIRWISE = {"SubBackward0": "a difference", "AddBackward0": "a sum",
             "MulBackward0": "a product", "DivBackward0": "a ratio"}


def _lifted(node, depth=6):
    """The dimension (0 or 1) the samples of a tensor a layer computed were
    moved past by an unsqueeze on the way to node (z[None], z.unsqueeze(0):
    0; z[:, None], z.unsqueeze(1): 1), through slices, masks and scaling
    (its first input: F.cosine_similarity's division by the norms); None
    otherwise."""
    for _ in range(depth):
        if node is None:
            return None
        name = _name(node)
        if name == "UnsqueezeBackward0" and _signed(node._saved_dim) in (0, 1):
            below = node.next_functions[0][0]
            return _signed(node._saved_dim) if below is not None and \
                _below(below, whole=True) == {"layer"} else None
        if name not in ("SliceBackward0", "ExpandBackward0", "MaskedFillBackward0",
                        "WhereBackward0") + _RESHAPES + tuple(_SCALED):
            return None
        node = node.next_functions[0][0]
    return None


def _pairs(node):
    """Whether an element-wise node combines a tensor of samples lifted to
    the second dimension with one lifted to the first: every pair of them
    (an MMD kernel, a pairwise distance by broadcasting)."""
    sides = [_lifted(f) for f in _inputs(node)]
    return len(sides) == 2 and sorted(d for d in sides if d is not None) == [0, 1]


def _reorders_first(node):
    """Whether a roll or flip node moves its input along the first
    dimension (a roll without dims: over the flattened tensor)."""
    dims = tuple(_signed(d) for d in node._saved_dims)
    return 0 in dims or (not dims and _name(node) == "RollBackward0")


def _over_first(node, name):
    """Whether reduction node reduces over its input's first dimension (a
    softmax across it: of a tensor with two or more)."""
    dims = getattr(node, "_saved_dim", None)
    if dims is None or dims == ():  # (over every dimension)
        return name not in _CUMULATIVE
    dims = [_signed(d) for d in (dims if isinstance(dims, tuple) else (dims,))]
    shape = _input_shape(node)
    ndim = None if shape is None else len(shape)
    if ndim == 2 and dims in ([1], [-1]) and shape[0] > 1 and \
            _lifted(node.next_functions[0][0]) == 0:
        # (along samples lifted to the second dimension, in rows of them:
        # z[None].expand(n, n) over a risk set; one row is one sample's classes)
        return True
    if all(d > 0 for d in dims):  # (other dimensions, counted from the first)
        return name in ("SoftmaxBackward0", "LogSoftmaxBackward0") and dims == [1] and \
            _one_row(node)
    if name in ("SoftmaxBackward0", "LogSoftmaxBackward0") and dims == [-1] and ndim == 2 and \
            _one_row(node):
        return True
    if name in ("SoftmaxBackward0", "LogSoftmaxBackward0") and (ndim or 0) < 2:
        # (a softmax over one sample's classes, or over the samples of scores
        # of shape (N, 1) squeezed: a ListNet over the whole minibatch)
        return _squeezed_scores(node.next_functions[0][0])
    return any(d == 0 or (ndim is not None and d + ndim == 0) for d in dims)


def _one_sample_batch(node):
    """Whether a batch-of-one product's operand node is one sample's (its
    batch dimension the samples' of a tensor of three or more dimensions,
    a minibatch of one: features.view(1, C, H * W) for a per-sample Gram
    matrix, through transposes), not samples made one batch (einsum's
    unsqueeze of an (N, C) tensor)."""
    for _ in range(4):
        name = _name(node) if node is not None else ""
        if name in ("TransposeBackward0", "PermuteBackward0", "TBackward0"):
            node = node.next_functions[0][0]
            continue
        if name not in _RESHAPES:
            return False
        sizes = _sizes(node)
        return sizes is not None and len(sizes) >= 3 and sizes[0] == 1
    return False


def _squeezed_scores(node):
    """Whether node makes one dimension of a tensor (N, 1) (a score per
    sample: squeeze, view(-1), [:, 0]), whose first dimension is the
    samples."""
    name = _name(node) if node is not None else ""
    if name not in ("SqueezeBackward0", "SqueezeBackward1", "SelectBackward0") + _RESHAPES:
        return False
    sizes = _sizes(node)
    if sizes is None or len(sizes) != 2 or sizes[1] != 1 or sizes[0] < 2:
        return False
    return name != "SelectBackward0" or _signed(node._saved_dim) == 1


def _one_row(node):
    """Whether softmax node's input (1, N) is scores (N, 1), a score per
    sample, made one row (view(1, -1), reshape, unsqueeze(0) of them
    squeezed): across the samples."""
    out = node._saved_result
    if out.dim() != 2 or out.shape[0] != 1 or out.shape[1] < 2:
        return False
    inner = node.next_functions[0][0]
    name = _name(inner) if inner is not None else ""
    if name in _RESHAPES:
        sizes = _sizes(inner)
        return sizes == (out.shape[1], 1) or \
            (sizes == (out.shape[1],) and _squeezed_scores(inner.next_functions[0][0]))
    # (not .t(): a sequence-first (T, 1) made batch-first, a pointer network's
    # scores of one sequence, reads the same)
    return name == "UnsqueezeBackward0" and _signed(inner._saved_dim) == 0 and \
        _squeezed_scores(inner.next_functions[0][0])  # (of (N,): scores (N, 1) squeezed)


def _signed(dim):
    """A dimension as saved in a backward node (a negative one as unsigned
    64 bits: -1 as 2**64 - 1) as given."""
    return dim - (1 << 64) if dim >= 1 << 63 else dim


def _input_shape(node):
    """The sizes of reduction node's input (None: not saved)."""
    sizes = _sizes(node)
    if sizes is not None:
        return tuple(int(d) for d in sizes)
    for attr in ("_saved_self", "_saved_result"):
        t = getattr(node, attr, None)
        if isinstance(t, torch.Tensor):
            return tuple(t.shape)
    return None



def _nonlinear(node, name):
    """Whether node's output is no linear function of an input computed
    from the samples: an operation outside _LINEAR, a product of two
    tensors that both come from them (not of one by a weight or a
    value)."""
    if name in _LINEAR:
        return False
    sides = _PRODUCTS.get(name)
    if sides is None:
        return True
    inputs = _inputs(node)
    return all(inputs[i] is not None and _from_samples(inputs[i]) for i in sides)


def _from_samples(node, limit=64):
    """Whether node's output comes from a layer of the model's outputs by
    any operations (not from parameters alone, nor gathered)."""
    def visit(node, name):
        if name == "AccumulateGrad" or name in _UNION:
            return []
        return True if _layer(node, name) is not False else _inputs(node)
    return bool(_walk(node, visit, limit))


def _op_name(name):
    """A backward node's operation, named for a warning ("torch.sqrt")."""
    op = re.sub(r"Backward\d*$", "", name)
    return {"Mul": "a product", "Div": "a division", "Pow": "a power"}.get(
        op, "torch." + re.sub(r"(?<!^)([A-Z])", r"_\1", op).lower())


def _sums_samples(node, limit=64):
    """Whether node (a denominator) holds a sum or mean over all of a
    tensor computed from the minibatch (not gathered)."""
    def visit(node, name):
        if name in ("SumBackward0", "MeanBackward0"):
            return True if _below(node.next_functions[0][0]) == {"layer"} else []
        return _inputs(node) if _rowwise(node, name) else []
    return bool(_walk(node, visit, limit))


# (operations along dimensions: they keep the samples apart where none of
# their dimensions is the first; node: its input's dimensions)
_ALONG = {"SoftmaxBackward0": lambda n: n._saved_result.dim(),
          "LogSoftmaxBackward0": lambda n: n._saved_result.dim(),
          "GatherBackward0": lambda n: n._saved_self.dim(),  # (Categorical.log_prob's)
          "MaxBackward0": lambda n: len(  # (x.max(dim); torch 2's sizes are sym_)
              getattr(n, "_saved_self_sizes", None) or n._saved_self_sym_sizes),
          "LogsumexpBackward0": lambda n: n._saved_self.dim(),
          "NormBackward1": lambda n: n._saved_self.dim(),
          "LinalgVectorNormBackward0": lambda n: n._saved_self.dim(),  # (torch 2's norm)
          "GluBackward0": lambda n: n._saved_self.dim(),
          "MeanBackward1": lambda n: len(  # (a mean per sample: a Dice over each image's pixels)
              getattr(n, "_saved_self_sizes", None) or n._saved_self_sym_sizes)}


def _rowwise(node, name):
    """Whether node's output keeps its input's samples apart: an operation
    of _ROWWISE, or one along dimensions other than the first (a softmax
    over the classes, a gather of each row's target, a norm per row)."""
    if name in _ROWWISE:
        return True
    ndim = _ALONG.get(name)
    if ndim is None:
        return False
    dims = node._saved_dim
    if dims is None:  # (over every dimension)
        return False
    dims = list(dims) if isinstance(dims, (tuple, list)) else [dims]
    n = ndim(node)
    return bool(dims) and n > 0 and all(_signed(d) % n != 0 for d in dims)


def _value(v):
    """A saved operand as a number (None: not one element)."""
    if isinstance(v, torch.Tensor):
        return float(v) if v.numel() == 1 else None
    return float(v)


def _sides(node):
    """A product's or a division's inputs' nodes (a, b): b None where the
    second operand has no gradient or is a number (MulBackward1 and
    DivBackward1, torch's own by a number, have one input)."""
    f = node.next_functions
    return f[0][0], f[1][0] if len(f) > 1 else None


def _factor(node):
    """A product node's factor without gradient and the node on its other
    side: (value, node); value None where it is no one-element value
    without gradient."""
    a, b = _sides(node)
    if _name(node) == "MulBackward1":  # (by a number)
        return _value(node._saved_other), a
    if (a is None) == (b is None):  # (both with gradients)
        return None, None
    return (_value(node._saved_other), a) if b is None else (_value(node._saved_self), b)


def _summed(node, world):
    """What the loss at node sums: "sum" where each of its terms (_terms)
    is a sum over the samples (_sum_name), "scaled" where each is also
    multiplied by world (the ranks' mean is then one process's sum), None
    where some term is no such sum (a mean, x.mean(0).sum(), a product of
    two terms) or some are so multiplied and others not (summed_term names
    one that is not: multiplying the whole loss would not mend it)."""
    terms = []
    _terms(node, (), 0, terms)
    scaled = [_scaled(path, world) for _, path in terms]
    if not terms or any(how in ("divided", "unread") or _sum_name(term) is None
                        for (term, _), how in zip(terms, scaled)):
        return None
    by_world = [how == "by the world" for how in scaled]
    return "scaled" if all(by_world) else None if any(by_world) else "sum"


def _sum_name(node):
    """A term's name where it is a sum over the samples: a loss with
    reduction="sum", a .sum() of what a layer computed from them or a
    squared norm over them; None otherwise."""
    name = _name(node)
    if (name in _NLL or name in _ELEMENTS or name in _FUSED) and node._saved_reduction == 2:
        return '%s(reduction="sum")' % (_ELEMENTS.get(name) or _FUSED.get(name) or
                                        _nll_name(node))
    if name == "SumBackward0" and _reaches_layer(node.next_functions[0][0]) and \
            not _weighed(node.next_functions[0][0]):
        return ".sum()"
    norm = _squared_norm(node)  # (a sum of squares: an embedding penalty, BPR's)
    if norm is not None and _over_first(norm, _name(norm)) and \
            _reaches_layer(norm.next_functions[0][0]):
        return "a squared norm (.norm() ** 2)"
    return None


def _weighed(node):
    """Whether node multiplies by weights without gradient that sum to 1
    over its rows ((cost * w).sum() with w = w / w.sum(): a weighted mean,
    no sum over the samples; standardized warns of them)."""
    if _name(node) != "MulBackward0":
        return False
    a, b = _sides(node)
    t = node._saved_other if b is None else node._saved_self if a is None else None
    return isinstance(t, torch.Tensor) and not t.requires_grad and _normalized(t) == _WEIGHTS \
        and _reaches_layer(a if b is None else b)


def _nll_read(node):
    """of_root's mean nll_loss node: the weight it kept, its targets and
    what it dropped or weighed, named cross_entropy where its input is a
    log_softmax's output."""
    target, weight = node._saved_target, node._saved_weight
    ignore = node._saved_ignore_index
    ignore = ignore - (1 << 64) if ignore >= 1 << 63 else ignore  # (saved unsigned)
    kept = int((target != ignore).sum())
    how = ["ignore_index=%d" % ignore] if kept < target.numel() else []
    if weight is not None:
        how.append("weight=")
    return float(node._saved_total_weight), target.numel(), ", ".join(how), _nll_name(node)


def _nll_name(node):
    """An nll_loss node's loss: cross_entropy where its input is a
    log_softmax's output."""
    source = node.next_functions[0][0]
    while _name(source) in _VIEWS:  # (cross_entropy over sequences: a view)
        source = source.next_functions[0][0]
    return "cross_entropy" if _name(source) == "LogSoftmaxBackward0" else "nll_loss"


def add_term(terms, site, divisor, settings=0):
    """The step's terms ((site, divisor, settings), ...), in the order of
    their first pass, with divisor added to site's: the same call on every
    pass (a micro-batch's) sums, another call (a second loss added to the
    first: BERT's masked tokens and next-sentence pairs) is a term of its
    own; settings, its crc() (0: none read)."""
    for i, (at, d, c) in enumerate(terms):
        if at == site:
            return terms[:i] + ((at, d + divisor, c or settings),) + terms[i + 1:]
    return terms + ((site, divisor, settings),)


def call_term(site, k, call=True):
    """The term of the k-th call (k > 1) of site in one backward pass, or the
    k-th term read from the root there: "cross_entropy (f.py:21, call k)",
    "given to backward() at f.py:9 (term k)"."""
    what = "call" if call else "term"
    m = re.match(r"^(.*) \(([^()]*)\)$", site)
    return "%s (%s, %s %d)" % (m.group(1), m.group(2), what, k) if m else \
        "%s (%s %d)" % (site, what, k)


def _call_site(term):
    """(a term's site without call_term's number, "call" or "term" where it
    had one, else None)."""
    m = re.search(r"(, | \()(call|term) \d+\)$", term)
    if not m:
        return term, None
    return term[:m.start()] + (")" if m.group(1) == ", " else ""), m.group(2)


def term_sites(terms, heads=()):
    """The terms' sites, each once, in order, with the calls (or the root's
    terms) each made in a pass (call_term's) and the heads they read
    (heads: (site, head()), ...): "cross_entropy (f.py:21) (5 calls a
    pass) through heads.0, heads.1"."""
    counts = {}
    for t in terms:
        site, what = _call_site(t[0])
        counts.setdefault(site, [0, "call"])[0] += 1
        if what:
            counts[site][1] = what
    through = {}
    for site, h in sorted(heads):
        through.setdefault(site, []).append(h)
    return ["%s%s%s" % (site, " (%d %ss a pass)" % (k, what) if k > 1 else "",
                        " through " + ", ".join(through[site]) if site in through else "")
            for site, (k, what) in counts.items()]


def sites_crc(terms, heads=()):
    """A CRC-32 of the terms' sites as a set, each call's and each pass's
    number left out (a loop's calls of one line, a rank's micro-batches, are
    one site), with the heads they read (heads: (site, head()), ...: a
    loop's calls through each task's head); 0 for no term. Ranks whose
    losses are made of other terms (a task's loss only where a rank's share
    holds that task) differ."""
    sites = set(_call_site(re.sub(r", pass \d+$", "", t[0]))[0] for t in terms)
    sites |= set("%s\t%s" % h for h in heads)
    return zlib.crc32("\n".join(sorted(sites)).encode()) if sites else 0


def settings_crc(terms):
    """(the terms whose settings were read, a checksum of theirs in order
    per field of SETTINGS)."""
    read = [c for _, _, c in terms if c]
    return len(read), tuple(zlib.crc32(b"".join(c[k].to_bytes(4, "little") for c in read))
                            for k in range(len(SETTINGS)))


def common_divisor(terms):
    """The divisor every term of the step shares (one term: its own), 0.0
    where they differ or there is none: micro-batches each a sum over one
    count of the whole step (HF's sum / num_items_in_batch) are one mean
    however many a rank has."""
    ds = [d for _, d, _ in terms]
    if not ds or ds[0] <= 0 or any(abs(d - ds[0]) > 1e-6 * ds[0] for d in ds):
        return 0.0
    return ds[0]


def shares(terms):
    """(the first term's share of the divisors, the sum of the shares'
    squares): the same on every rank where the terms' counts are in
    proportion from rank to rank; (-1, 0) for fewer than two terms."""
    total = sum(d for _, d, _ in terms)
    if len(terms) < 2 or total <= 0:
        return -1.0, 0.0
    return terms[0][1] / total, sum((d / total) ** 2 for _, d, _ in terms)
