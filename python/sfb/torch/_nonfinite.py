"""Gradients that are not finite. One process whose gradient holds an inf or
a NaN (a float16 loss scaled past its range, a loss that blew up) has a
.grad that is not finite there: torch.amp.GradScaler then skips the step
and lowers its scale, a loop that checks clip_grad_norm_'s result skips it,
or the parameters turn NaN. The library publishes finite numbers only
(network input is untrusted; "nothing was published", -ERANGE): a rank
whose gradient of a matrix is not finite publishes nothing of it instead
and its meta row says so (NONFINITE in the parameter's column), and after
the reduction every rank sets such a parameter's .grad to NaN, whole — one
process's is inf or NaN where that rank's samples reached, finite
elsewhere. So every rank sees a gradient that is not finite where one
process would, the same bits on every rank, and decides as it does."""
import errno

import numpy as np
import torch

import sfb as _sfb

NONFINITE = 2.0  # a parameter's meta column: a gradient here, not finite


def finite(t):
    """Whether tensor t (sparse too) holds finite numbers only."""
    if t.is_sparse:
        t = t.coalesce().values()
    return bool(torch.isfinite(t).all())


def of_grads(params):
    """Those of params whose .grad is not finite."""
    return [p for p in params if p is not None and p.grad is not None and not finite(p.grad)]


def of_factors(slot, b, c):
    """The parameters of slot whose gradient factors (b, c) make not finite:
    b (the output gradients) the weight's and the bias's, c (the inputs)
    the weight's (a table's c, its one-hot rows, is finite)."""
    if not np.isfinite(b).all():
        return [p for p in (slot.weight, slot.bias) if p is not None]
    if isinstance(c, np.ndarray) and not np.isfinite(c).all():
        return [slot.weight]
    return []


def refused(e):
    """Whether e is the library's refusal of a number that is not finite."""
    return type(e) is _sfb.Error and e.code == -errno.ERANGE


def staleness_error(name, clock, staleness):
    return _sfb.UsageError(
        "sfb.torch: %s's update at step %d holds a number that is not finite on this rank: at "
        "staleness %d updates are added to every replica as they come, and one that is not "
        "finite would ruin them (nothing was sent); at staleness 0 such a gradient reaches "
        "every rank as NaN, as a GradScaler needs" % (name, clock, staleness), param=name)


def nan_grads(params, handed):
    """.grad NaN, whole, for each of params (a sparse .grad: its values, in
    place); handed (the wrapper's record of the .grad it set) keeps up."""
    nan = float("nan")
    for p in params:
        if p.grad is None:
            p.grad = torch.full_like(p, nan)
        elif p.grad.is_sparse:
            p.grad._values().fill_(nan)
        else:
            p.grad.fill_(nan)
        handed[id(p)] = p.grad
