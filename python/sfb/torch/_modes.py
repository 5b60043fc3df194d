"""The modes (train() or eval()) of the modules whose forward differs by
mode. One process runs every sample of a step in one mode; ranks whose
modules are in different modes train as no process does (a validation on
rank 0 that left model.eval() on: no dropout there, dropout elsewhere),
silently under DDP. Every reduction's meta row carries a checksum of these
modules' modes; where the training ranks' differ, they exchange the modules
in eval() and fail naming the first that differs and the ranks on each side.

Which modules: torch's dropouts with p > 0 (Dropout, Dropout1d/2d/3d,
AlphaDropout, FeatureAlphaDropout), RReLU, recurrent layers' and attention's
dropout, and modules of the program's own (or a library's) whose forward
reads self.training, itself or in what it calls by name: its class's methods
and properties (a base class's forward through super()), functions of its
module, and the functions and comprehensions written inside them. torch's
other modules that read it compute the same function either way (a
transformer layer's fast path: rounding only); BatchNorm and InstanceNorm
are checked where they gather (_batchnorm).

torch's random modules' rates (a dropout's p, RReLU's bounds) travel in the
same checksum: one process has one rate, and a rate changed on some ranks
only (a schedule of the dropout stepped on rank 0) trains as none does."""
import functools
import inspect
import types
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from . import _env, _replicas


def rate(module):
    """A torch random module's rate as text (a dropout's p, RReLU's bounds;
    a recurrent stack's dropout only where it has layers to drop between),
    None for another module."""
    if isinstance(module, nn.modules.dropout._DropoutNd):
        return "p=%r" % float(module.p)
    if isinstance(module, nn.RReLU):
        return "lower=%r upper=%r" % (float(module.lower), float(module.upper))
    if isinstance(module, nn.RNNBase):
        return "dropout=%r" % float(module.dropout if module.num_layers > 1 else 0.0)
    if isinstance(module, nn.MultiheadAttention):
        return "dropout=%r" % float(module.dropout)
    return None


def matters(module):
    """Whether module computes another function in train() than in eval()."""
    if isinstance(module, nn.modules.dropout._DropoutNd):
        return module.p > 0
    if isinstance(module, nn.RReLU):
        return module.upper != module.lower
    if isinstance(module, nn.RNNBase):
        return module.dropout > 0 and module.num_layers > 1
    if isinstance(module, nn.MultiheadAttention):
        return module.dropout > 0
    return _reads_training(type(module))


def _torch_s(obj):
    return (getattr(obj, "__module__", None) or "").split(".")[0] == "torch"


@functools.lru_cache(maxsize=None)
def _reads_training(cls):
    """Whether cls's forward reads .training, in its own code or in the code
    it names: cls's methods and properties (over its bases, torch's left
    out), its module's functions, and the code objects inside each (nested
    functions, lambdas, comprehensions). By name, not by flow: a method named
    but not called counts too (at worst a module compared needlessly)."""
    if _torch_s(cls) or not callable(getattr(cls, "forward", None)):
        return False
    mro = [k for k in cls.__mro__ if not _torch_s(k) and k is not object]

    def functions(name, scope):  # (every class's that defines it: super() reaches them)
        found = [k.__dict__[name] for k in mro if name in k.__dict__] or [scope.get(name)]
        out = []
        for a in found:
            if isinstance(a, (staticmethod, classmethod)):
                a = a.__func__
            fs = [a.fget, a.fset] if isinstance(a, property) else [a]
            out += [f for f in fs if isinstance(f, types.FunctionType) and not _torch_s(f)]
        return out

    todo = functions("forward", {})
    seen = set()
    while todo and len(seen) < 256:  # (a bound: a large library's web of helpers)
        fn = todo.pop()
        codes = [fn.__code__]
        while codes:
            code = codes.pop()
            if code in seen:
                continue
            seen.add(code)
            if "training" in code.co_names:
                return True
            codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
            for name in code.co_names:
                todo += [f for f in functions(name, fn.__globals__) if f.__code__ not in seen]
    return False


def drawing(modules):
    """Those of modules that draw random numbers in their forward now (torch's
    dropouts and RReLU in train()), (name, module)."""
    return [(n, m) for n, m in modules if m.training and matters(m) and isinstance(
        m, (nn.modules.dropout._DropoutNd, nn.RReLU, nn.RNNBase, nn.MultiheadAttention))]


def of(model):
    """model's modules whose mode matters, or may (torch's random modules at
    any rate: a rate raised from 0 later), (name, module) in its order."""
    return [(n, m) for n, m in model.named_modules() if rate(m) is not None or matters(m)]


def _in_eval(module):
    """Whether module is in eval() where that changes its function."""
    return not module.training and matters(module)


def crc(modules):
    """A CRC32 of the modules' modes (where they matter) and rates."""
    modes = np.packbits(np.array([_in_eval(m) for _, m in modules], bool)).tobytes()
    rates = "\n".join(rate(m) or "" for _, m in modules).encode()
    return zlib.crc32(rates, zlib.crc32(modes))


def eval_text(modules, ran=None):
    """The modules' states as text, a line each (after a dot: the model
    itself is named ""): the name of each in eval() where that matters, the
    name and rate of each random module of torch's, and "ran" and the name
    of each in ran (ids of those that ran a forward with gradients since the
    last reduction; None: all)."""
    return "".join(("\n." + n if _in_eval(m) else "") +
                   ("\n.%s %s" % (n, rate(m)) if rate(m) is not None else "") +
                   ("\nran ." + n if ran is None or id(m) in ran else "")
                   for n, m in modules)


def mismatch(modules, texts, clock):
    """(message, ranks on one side, the others) where the ranks' modes or
    rates differ: texts, every rank's eval_text (None: not known, a rank not
    training; then the ranks are None too). The first module that differs
    is named, with the ranks on each side. A module that ran on no rank
    since the last reduction (a head used only to validate) changed nothing:
    (None, None, None) where only such differ."""
    hint = ("one process runs every sample of a step in one mode (a validation on some ranks "
            "that left model.eval() on? call model.train() after it, on every rank)")
    have = [] if texts is None else [set(t.split("\n")) for t in texts]
    for n, m in modules if have else ():
        if not any("ran ." + n in h for h in have):
            continue
        what = "%s (%s)" % (n or "the model", type(m).__name__)
        on = [q for q, h in enumerate(have) if "." + n in h]
        if 0 < len(on) < len(have):
            off = [q for q in range(len(have)) if q not in on]
            return ("at step %d the ranks' modules run in different modes: %s is in eval() on "
                    "%s and in train() on %s; %s" % (clock, what, _replicas._ranks(on),
                                                     _replicas._ranks(off), hint), on, off)
        rates = [next((line.split(" ", 1)[1] for line in h if line.startswith("." + n + " ")),
                      None) for h in have]
        if len(set(rates)) > 1:
            sides = {}
            for q, r in enumerate(rates):
                sides.setdefault(r, []).append(q)
            return ("at step %d the ranks' modules differ: %s has %s; one process has one rate "
                    "(a schedule of it stepped on some ranks only? step it on every rank)" %
                    (clock, what, " and ".join("%s on %s" % (r, _replicas._ranks(qs))
                                               for r, qs in sides.items())),
                    sides[rates[0]], [q for q in range(len(have)) if rates[q] != rates[0]])
    if have:
        return None, None, None
    return ("at step %d the ranks' modules run in different modes (train() or eval()) or at "
            "different rates: %s" % (clock, hint), None, None)


# (the functions that draw a mask an element or a sample: torch's own)
_DROPOUTS = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
             "feature_alpha_dropout")
_torch_dropouts = {name: getattr(F, name) for name in _DROPOUTS if hasattr(F, name)}
_torch_bernoulli = torch.bernoulli
_torch_tensor_bernoulli = {name: getattr(torch.Tensor, name) for name in ("bernoulli",
                                                                          "bernoulli_")}
_sink = None  # the DistributedOptimizer noting draws (intercept), or None


def _note(name, input, shape=None):
    """A mask drawn by name from torch's generator for the tensor input (a
    dropout's; a bernoulli's probabilities, or its shape and probability:
    _mask_key): the user's line noted in the sink's drew (the first 4 sites
    a step), and input in its drew_inputs' CRC-32s, until it has warned
    (the ranks' inputs alike: one process's masks where drawn alike,
    _Sync._tell_same_draws). shape: a bernoulli's mask's, in the sink's
    drew_shapes (the first 8: one that holds the step's samples is drawn
    per sample, whatever the inputs: holds_samples)."""
    s = _sink
    if s is None or s.told_draws:
        return
    if len(s.drew) < 4:
        s.drew.setdefault(_env._user_line(), name)
    if shape is not None and len(s.drew_shapes) < 8:
        s.drew_shapes.append(shape)
    if s.drew_inputs is None or s.drew_inputs[0] >= 0:
        try:
            crc = zlib.crc32(_env.memory(input))
        except (AttributeError, RuntimeError, TypeError):  # (None; a dtype numpy cannot hold)
            s.drew_inputs = (-1, -1)
            return
        s.drew_inputs = (crc, crc) if s.drew_inputs is None else (
            zlib.crc32(crc.to_bytes(4, "little"), s.drew_inputs[0]), s.drew_inputs[1])


def _dropout(name):
    torch_fn = _torch_dropouts[name]
    given = inspect.signature(torch_fn).parameters
    p0, training0 = given["p"].default, given["training"].default

    @functools.wraps(torch_fn)
    def dropout(input, *args, **kwargs):
        p = args[0] if args else kwargs.get("p", p0)
        training = args[1] if len(args) > 1 else kwargs.get("training", training0)
        # (a weight's dropout, DropConnect's, draws one mask for the whole
        # minibatch: one process's alike on every rank)
        if training and p > 0 and not isinstance(input, nn.Parameter):
            _note("F." + name, input)
        return torch_fn(input, *args, **kwargs)
    return dropout


def _mask_key(shape, p):
    """What a bernoulli's mask of shape is drawn from: its probabilities p
    (a tensor: its values), or the shape and the one probability (a
    number), as a tensor to hash: alike on every rank, the same mask."""
    if isinstance(p, torch.Tensor):
        return p
    return torch.tensor(list(shape) + [float(p)], dtype=torch.float64)


def holds_samples(shapes, samples):
    """Whether a mask of one of shapes may be drawn per sample of a step
    whose layers took samples rows (a dimension of more than one that
    divides them: (B, 1) where a layer took B rows or B * T tokens,
    LockedDropout's (1, B, H); leading ones that multiply to them: (B, T)
    flattened); every one where the samples are unknown (0). A mask over a
    vocabulary's rows, larger than the minibatch, holds none."""
    for shape in shapes:
        if not samples:
            return True
        run = 1
        for d in shape:
            run *= d
            if (d > 1 and samples % d == 0) or run == samples:
                return True
    return False


def _bernoulli(input, *args, generator=None, **kwargs):
    if generator is None and input.numel() > 1:
        p = args[0] if args else kwargs.get("p", input)
        _note("torch.bernoulli", _mask_key(input.shape, p), tuple(input.shape))
    return _torch_bernoulli(input, *args, generator=generator, **kwargs)


def _tensor_bernoulli(name):
    torch_fn = _torch_tensor_bernoulli[name]

    @functools.wraps(torch_fn)
    def bernoulli(self, *args, generator=None, **kwargs):
        if generator is None and self.numel() > 1:  # (one number: a draw per minibatch)
            # (bernoulli_ draws with p, 0.5 by default, whatever self holds;
            # bernoulli() with self's values as probabilities, unless given p)
            p = args[0] if args else kwargs.get("p", 0.5 if name == "bernoulli_" else self)
            _note(name, _mask_key(self.shape, p), tuple(self.shape))
        return torch_fn(self, *args, generator=generator, **kwargs)
    return bernoulli


_dropouts = {name: _dropout(name) for name in _torch_dropouts}
_tensor_bernoullis = {name: _tensor_bernoulli(name) for name in _torch_tensor_bernoulli}


def intercept(sync):
    """torch's functions that draw masks come here while sync (a
    DistributedOptimizer with a dict drew and a flag told_draws) lives;
    None: torch's own again."""
    global _sink
    _sink = sync
    on = sync is not None
    for name, fn in _dropouts.items():
        setattr(F, name, fn if on else _torch_dropouts[name])
    torch.bernoulli = _bernoulli if on else _torch_bernoulli
    for name, fn in _tensor_bernoullis.items():
        setattr(torch.Tensor, name, fn if on else _torch_tensor_bernoulli[name])
