"""The user's gradient hooks on the parameters sfb.torch reduces
(`Tensor.register_hook`: a mask, a scale, a clamp, a logger such as a
gradient-histogram watcher). One process runs them on each backward pass's
gradient of the whole minibatch; under sfb.torch a Linear's gradient is
never formed as a tensor of its own (factors) and a dense parameter's is
this rank's only. So they are moved off the parameter at each forward with
gradients (sfb's own hooks stay), run at the reduction on the pass's reduced
gradient — what one process's hook sees — and put back. While moved, each
leaves a placeholder under its key that does nothing (_held): a handle's
remove() takes that away, so a hook removed between the forward and the
reduction is neither run nor put back, as one process would not run it.
Tensor.register_hook on such a parameter while a DistributedOptimizer
lives moves the new hook at once (one registered between a forward and its
backward(), or inside the forward). Refused where the reduced gradient is
not one pass's: backward_passes_per_step > 1, staleness > 0."""
import torch

import sfb as _sfb

_torch_register_hook = torch.Tensor.register_hook


def register_hook(tensor, hook):
    """Tensor.register_hook while a DistributedOptimizer lives."""
    handle = _torch_register_hook(tensor, hook)
    from . import _capture, _env
    s = _capture._active
    if s is not None and id(tensor) in s.group_of:
        s.user_hooks.adopt(s, tensor, handle.id)
    elif s is not None and tensor.grad_fn is not None:
        on_activations(s, "a gradient hook on a tensor computed at %s" % _env._user_line())
    return handle


def on_activations(sync, what):
    """Warns once (rank 0) that `what`, a hook on the gradient of what the
    model computed (an activation: Tensor.register_hook on it, a module's
    backward hook), runs on this rank's gradient, P times one process's."""
    if sync.told_activations or sync.job.world < 2:
        return
    sync.told_activations = True
    if sync.job.rank != 0:
        return
    import warnings
    from . import _env
    P = sync.job.world
    warnings.warn(
        "sfb.torch: %s runs on this rank's gradient: each rank's mean loss averages over its own "
        "samples, so the gradient it sees is %d times one process's over the union (minibatches "
        "of one size). One that scales it or masks it trains as one process; one that clamps "
        "it, normalizes it or takes its sign trains otherwise (clamp at %d times the bound: "
        "what one process's clamp does), and one that records it sees %d times one process's "
        "values (times this rank's own batch size, as K-FAC scales them, they are one "
        "process's per-sample gradients). (Hooks on parameters run at the reduction, on one "
        "process's gradient.)" % (what, P, P, P), stacklevel=_env._user_stacklevel())


def _held(grad):
    """A moved hook's place on its parameter (leaves the gradient alone)."""
    return None


DRAWS_WATCHED = 32  # (the reductions whose hooks are watched for random draws: Hooks.run)


class Hooks:
    def __init__(self):
        self.moved = {}  # id(p): (p, [(key, fn)...]) until the reduction
        self.base = {}   # id(p): p.grad when the pass began (a copy), or None
        self.told_draws = False  # the hooks' random draws warned of (run)
        self.runs = 0  # the reductions whose hooks run watched for draws (at most DRAWS_WATCHED)

    def stash(self, sync):
        """A forward with gradients begins: the user's hooks off the
        parameters sfb reduces."""
        own = None
        for name, p in sync.model_params:
            d = p._backward_hooks
            if not d or id(p) not in sync.group_of:
                continue
            if own is None:
                own = {h.id for h in sync.hooks}
            mine = [(k, fn) for k, fn in d.items() if k not in own and fn is not _held]
            if not mine:
                continue
            _refuse(sync, name)
            self._move(p, mine)

    def adopt(self, sync, p, key):
        """A hook just registered on p (a parameter sfb reduces): moved now."""
        _refuse(sync, sync.names.get(id(p), "a parameter"))
        self._move(p, [(key, p._backward_hooks[key])])

    def _move(self, p, hooks):
        """hooks ((key, fn) of p's) off p until the reduction, _held in their place."""
        for k, _ in hooks:
            p._backward_hooks[k] = _held
        self.moved.setdefault(id(p), (p, []))[1].extend(hooks)

    def pass_begins(self):
        """The pass's first gradient: each hooked parameter's .grad before it."""
        self.base = {i: (p.grad.detach().clone() if p.grad is not None else None)
                     for i, (p, _) in self.moved.items()}

    def run(self, present, rank=0):
        """After the reduction: each hooked parameter that got a gradient
        has its hooks run, in order, on the pass's reduced gradient (.grad
        less what it held before the pass), as one process runs them. The
        order is the forward's, not backward's: where the hooks of two
        parameters or more draw from torch's generator (gradient noise),
        each gets other numbers than one process's: rank 0 warns once (the
        generator's state compared around each parameter's hooks in the
        first DRAWS_WATCHED reductions that run hooks: a copy of 5 KB each)."""
        drew, watch = [], not self.told_draws and self.runs < DRAWS_WATCHED
        self.runs += watch
        for i, (p, hooks) in self.moved.items():
            if p.grad is None or not present(p):
                continue
            before = self.base.get(i)
            g = p.grad - before if before is not None else p.grad.clone()
            state = torch.random.get_rng_state() if watch else None
            for k, fn in hooks:
                if p._backward_hooks is None or p._backward_hooks.get(k) is not _held:
                    continue  # (its handle removed since the forward)
                out = fn(g)
                if out is not None:
                    g = out
            if state is not None and not torch.equal(state, torch.random.get_rng_state()):
                drew.append(p)
            if before is not None:
                g = before + g
            if p.grad.is_sparse or g.is_sparse:
                p.grad = g
            else:
                p.grad.copy_(g)
        self.restore()
        if len(drew) > 1:
            self.told_draws = True
            if rank == 0:
                import warnings
                from . import _env
                warnings.warn(
                    "sfb.torch: the gradient hooks of %d parameters drew random numbers from "
                    "torch's generator (gradient noise): sfb.torch runs them at the reduction in "
                    "the order the forward met the parameters, where one process runs them in "
                    "backward's order, so each parameter gets other draws than one process's. "
                    "Draw from a torch.Generator of each parameter's own (seeded alike on every "
                    "rank), or add the noise to .grad before step() in a fixed order" % len(drew),
                    stacklevel=_env._user_stacklevel())

    def restore(self):
        """The hooks back on their parameters (a step dropped, the end)."""
        for p, hooks in self.moved.values():
            if p._backward_hooks is None:
                continue
            for k, fn in hooks:
                if p._backward_hooks.get(k) is _held:
                    p._backward_hooks[k] = fn
        self.moved, self.base = {}, {}


def _refuse(sync, name):
    """A gradient hook where the reduced gradient is not one pass's."""
    if sync.additive or sync.passes_per_step > 1:
        raise _sfb.UsageError(
            "sfb.torch: %s has a gradient hook (Tensor.register_hook), which one "
            "process runs on each backward pass's gradient: %s, sfb.torch holds no such "
            "gradient to run it on. Change .grad after backward() instead%s" %
            (name, "at staleness %d each rank's update is applied as it comes" %
             sync.staleness if sync.additive else
             "with backward_passes_per_step=%d the passes are reduced together" %
             sync.passes_per_step,
             "" if sync.additive else " (it holds every rank's mean then)"),
            param=name)
