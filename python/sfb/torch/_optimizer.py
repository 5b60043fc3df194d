"""The optimizer: the job's matrices, the reduction at the end of backward
(staleness 0) or the additive updates (staleness > 0), join and leave, and
DistributedOptimizer, the wrapper of a torch.optim optimizer."""
import ast
import re
import threading
import time
import warnings
import weakref
import zlib

import numpy as np
import torch

import sfb as _sfb

from . import _env, _grad_hooks
from ._env import _JOIN_HINT, WorldChanged, _abort_on_error, _raise_hinted
from ._capture import _NO_LOSSES, _Linear, _Passes, _intercept, _row_range
from ._embedding import _Rows
from . import (_autoplan, _batchnorm, _buckets, _conv, _losses, _modes, _nonfinite, _overflow,
               _padding, _renorm, _replicas)
from ._collectives import (allgather_bytes, broadcast_object, broadcast_parameters,
                           refuse_uninitialized)

# A rank's state in a clock (the meta matrix's state column)
_TRAINING, _JOINED, _LEAVING = 0, 1, 2


def _name_pairs(text):
    """The (weight, bias) name pairs another rank sent (their repr: literals
    only, read as such)."""
    return [tuple(p) for p in ast.literal_eval(text)] if text else []


def _allgather_text(job, text):
    """Every rank's text (of any length), in rank order (collective)."""
    return [b.decode() for b in allgather_bytes(job, text.encode())]


def _plain_sgd(opt):
    """None when opt's updates add up as they come (plain SGD), else why not."""
    if type(opt) is not torch.optim.SGD:
        return "%s keeps a state per parameter" % type(opt).__name__
    for g in opt.param_groups:
        for k in ("momentum", "weight_decay"):
            if g.get(k, 0):
                return "SGD with %s=%g" % (k, g[k])
        for k in ("nesterov", "maximize"):
            if g.get(k, False):
                return "SGD with %s=True" % k
    return None


def _crc_tensors(tensors, crc=0):
    """A CRC-32 of the tensors' bytes, read in place (any dtype: a frozen
    bfloat16 base model's too)."""
    for t in tensors:
        crc = zlib.crc32(_env.memory(t), crc)
    return crc


def _state_crc(opts):
    """A CRC32 of the optimizers' state: its tensors' bytes and its other
    values (a step count), per parameter in the groups' order (o.state, as
    every torch.optim.Optimizer keeps it: a class whose state_dict() is its
    own, Lookahead's "fast_state"/"slow_state", has it too)."""
    sts = [o.state.get(p) or {} for o in opts for g in o.param_groups for p in g["params"]]
    state = [v for s in sts for v in s.values() if torch.is_tensor(v)]
    scalars = [_repr(v) for s in sts for v in s.values() if not torch.is_tensor(v)]
    return _crc_tensors(state, zlib.crc32(repr(scalars).encode()))


# the reductions after which the parameters feeding the job's models from
# outside it are compared across ranks (_check_foreign): one optimizer step
# of most loops in, and later
FOREIGN_CLOCKS = (4, 32)
# reductions with no step of the wrapped optimizer before rank 0 says so once
NO_STEP_CLOCKS = 32
# sfb.Job.attach's keyword arguments a DistributedOptimizer passes on (the
# rest it sets itself)
ATTACH_ARGS = ("topology", "degree", "link_gbps", "latency_us", "priority", "apply_early")
# what a rank loaded since the last reduction (after the first step): the
# meta row's bits (then every rank's parameters are compared)
LOADED_OPTIMIZER, LOADED_MODEL = 1, 2


def _tensors(x):
    """The tensors in a forward's inputs (nested tuples, lists, dicts)."""
    if torch.is_tensor(x):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


def _settings(sync, staleness, backward_passes_per_step, max_samples, overlap, attach_args,
              check_every, factor_dtype, bucket_cap_mb, dense_dtype, trial_steps):
    """A DistributedOptimizer's settings, which every one of a job shares."""
    return dict(sync=sync, staleness=staleness, backward_passes_per_step=backward_passes_per_step,
                max_samples=max_samples, overlap=overlap, check_every=check_every,
                factor_dtype=factor_dtype, bucket_cap_mb=bucket_cap_mb, dense_dtype=dense_dtype,
                trial_steps=trial_steps, **attach_args)


def _ordinal(i):
    return ("first", "second", "third")[i] if i < 3 else "%dth" % (i + 1)


def _repr(v):
    """repr(v) without the addresses of objects (a function kept in a param
    group, VICReg's LARS filters; a projector kept in an optimizer's state,
    GaLore's): the same on every rank for the same program."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(v))


def _hyper_crc(opts):
    """A checksum of the optimizers' hyperparameters (every group's, the
    parameters left out): ranks must step with the same."""
    text = repr([sorted((k, _repr(v)) for k, v in g.items() if k != "params")
                 for o in opts for g in o.param_groups])
    return zlib.crc32(text.encode())


def _hyper_lines(opts):
    """The hyperparameters _hyper_crc sums, as job.agree's "key=value" lines
    ("lr of param group 0=0.1"), to name the one that differs."""
    lines = []
    for i, o in enumerate(opts):
        for j, g in enumerate(o.param_groups):
            where = "param group %d" % j if len(opts) == 1 else \
                "optimizer %d's param group %d" % (i, j)
            lines += ["%s of %s=%s\n" % (k, where, v.replace("\n", " "))
                      for k, v in sorted((k, _repr(v)) for k, v in g.items() if k != "params")]
    return lines


class _Models(torch.nn.Module):
    """The models of a job's DistributedOptimizers, as one module: each
    under its class's name (model<i> where two share one), so that a
    parameter's name says whose it is. Never called: sfb hooks each model."""

    def __init__(self, models):
        super().__init__()
        kinds = [_Loose.NAME if isinstance(m, _Loose) else type(m).__name__ for m in models]
        for i, (kind, m) in enumerate(zip(kinds, models)):
            self.add_module(kind if kinds.count(kind) == 1 else "model%d" % i, m)


class _Loose(torch.nn.Module):
    """The tensors an optimizer holds outside its model — a loss's own
    parameters (a metric-learning head, a learnable temperature, the
    weights of multi-task losses), nn.Parameters or plain leaves — as a
    member of the job's models, each named by its place in the optimizer
    (param_groups[g][i]): synchronized densely as one process steps them.
    Never called."""
    NAME = "optimizer"

    def __init__(self, named):
        super().__init__()
        for n, p in named:
            self._parameters[n] = p  # (not register_parameter: a plain leaf too)


def _with_loose(optimizer, model):
    """model, or a _Models of it and the optimizer's tensors outside it."""
    inside = set(id(p) for p in model.parameters())
    loose, seen = [], set()
    for gi, g in enumerate(optimizer.param_groups):
        for i, p in enumerate(g["params"]):
            if id(p) not in inside and id(p) not in seen:
                seen.add(id(p))
                loose.append(("param_groups[%d][%d]" % (gi, i), p))
    if not loose:
        return model
    return _Models(_members(model) + [_Loose(loose)])


def _members(model):
    """The models that run forward: a _Models' members, or the model."""
    return list(model.children()) if isinstance(model, _Models) else [model]


def _num(v):
    """A count as the warnings show it: an integer where it is one (to
    float32's rounding of a share times a count), else six digits."""
    r = round(v)
    return "%d" % r if abs(v - r) <= 1e-5 * max(1.0, abs(v)) else "%.6g" % v


def _listed(values, show=lambda q, v: "rank %d %s" % (q, _num(v) if v == v else "-")):
    """show(rank, value) of the first 8 values, joined (", ..." past them);
    by default "rank q count" ("-": none)."""
    return ", ".join(show(q, v) for q, v in enumerate(values[:8])) + (
        ", ..." if len(values) > 8 else "")


META_FIXED = 49  # the meta row's columns after the parameters' and before the layers'
# the loss's root is read (_losses.read_root) at every step up to this clock,
# then at every READ_EVERY-th: a reading's cost grows with the loss's graph
# (on rank 0 ~14 µs an MLP's cross entropy, 0.7–2.6 ms a loss of 12–90 terms)
READ_ALL, READ_EVERY = 8, 16


class _Sync(_Passes):
    """What a DistributedOptimizer adds to its optimizer: the matrices, the
    job's clock, the factor capture, the reduction at the end of backward."""

    def __init__(self, opts, model, sync, staleness, backward_passes_per_step, max_samples,
                 overlap, attach_args, check_every=100, factor_dtype="f32", bucket_cap_mb=4,
                 dense_dtype="f32", trial_steps=10):
        job = _env._need()
        _env.keep_backward_eager()
        # the optimizers (each DistributedOptimizer's, in the order made)
        # and the model holding their parameters (several: a _Models)
        self.opts, self.job, self.model = list(opts), job, model
        # what every DistributedOptimizer of the job must pass alike
        self.settings = _settings(sync, staleness, backward_passes_per_step, max_samples, overlap,
                                  attach_args, check_every, factor_dtype, bucket_cap_mb,
                                  dense_dtype, trial_steps)
        U = _sfb.UsageError
        unknown = sorted(set(attach_args) - set(ATTACH_ARGS))
        if unknown:
            raise TypeError("DistributedOptimizer() got an unexpected keyword argument %r (besides "
                            "its own it takes sfb.Job.attach's %s)" %
                            (unknown[0], ", ".join(ATTACH_ARGS)))
        if sync not in ("auto", "sfb", "fms"):
            raise U("DistributedOptimizer: sync %r: expected 'auto', 'sfb' or 'fms'" % (sync,))
        if not isinstance(overlap, bool):
            raise U("DistributedOptimizer: overlap %r: expected True or False" % (overlap,))
        if factor_dtype not in ("f32", "bf16"):
            raise U("DistributedOptimizer: factor_dtype %r: expected 'f32' or 'bf16'" %
                    (factor_dtype,))
        self.factor_dtype = factor_dtype
        if dense_dtype not in ("f32", "bf16"):
            raise U("DistributedOptimizer: dense_dtype %r: expected 'f32' or 'bf16'" %
                    (dense_dtype,))
        self.dense_dtype = dense_dtype
        if isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float)) or \
                not bucket_cap_mb > 0 or not np.isfinite(bucket_cap_mb):
            raise U("DistributedOptimizer: bucket_cap_mb %r: expected a number > 0" %
                    (bucket_cap_mb,))
        self.bucket_bytes = max(1, int(bucket_cap_mb * (1 << 20)))
        if not isinstance(staleness, int) or staleness < -1:
            raise U("DistributedOptimizer: staleness %r: expected an integer >= 0, or -1 "
                    "(asynchronous)" % (staleness,))
        if not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
            raise U("DistributedOptimizer: backward_passes_per_step %r: expected an integer "
                    ">= 1" % (backward_passes_per_step,))
        if max_samples is not None and (not isinstance(max_samples, int) or max_samples < 1):
            raise U("DistributedOptimizer: max_samples %r: expected an integer >= 1" %
                    (max_samples,))
        if not isinstance(trial_steps, int) or isinstance(trial_steps, bool) or trial_steps < 0:
            raise U("DistributedOptimizer: trial_steps %r: expected an integer >= 0 (0: the "
                    "cost model's plan, unmeasured)" % (trial_steps,))
        self.trial_steps, self.trials = trial_steps, None
        self.trial_all = False  # tests: measure every layer, whatever the predictions
        self.step_ms, self.last_end, self.step_samples = 0.0, None, 0
        self.sync, self.staleness = sync, staleness
        self.passes_per_step = backward_passes_per_step
        self.max_samples, self.overlap, self.attach_args = max_samples, overlap, attach_args
        self.additive = staleness != 0  # replicas are the parameters
        self.elastic = job.elastic
        if self.elastic and staleness != 0:
            raise U("DistributedOptimizer: an elastic job runs at staleness 0 (not %d): under "
                    "SSP the survivors of a death hold different updates, none of them a state "
                    "every update is in or out of whole" % staleness)
        self.in_run = False     # inside sfb.torch.elastic.run (an elastic job trains there)
        self.in_join = False    # inside opt.join()
        if self.additive:
            why = _plain_sgd(self.opts[0])
            if why:
                raise U("DistributedOptimizer: staleness %d adds every rank's update to the "
                        "parameters as it comes, exact only for plain torch.optim.SGD (no "
                        "momentum, weight decay, nesterov or maximize): %s, which would differ "
                        "between ranks. Use staleness=0 (any optimizer) or plain SGD" %
                        (staleness, why))
        self.thread = threading.get_ident()
        self.clock = 0          # the job's clock: reductions done (a resumed run's count)
        self.extra = 0          # of them, those no rank trained in (join()'s last, shutdown's)
        self.attached = False
        self.passes = 0         # backward passes of the step in progress
        self.pass_hit = False   # the pass in progress reached a parameter
        self.cb_queued = False  # its end-of-pass callback is queued
        self.in_backward = False  # torch.autograd.backward runs (a nested one: _capture)
        self.nested_pass = False  # the pass in progress ran a backward inside it
        self.synced = False     # this step's gradients reduced (.grad holds the mean)
        self.stepped_clock = False  # several optimizers: one stepped on the reduction's .grad
        self.grads = False      # a backward pass since the last step()
        self.weight = None      # this rank's weight in the next reduction (set_samples)
        self.losses = _NO_LOSSES  # the step's mean losses over kept targets (_losses)
        self.loss_factors = []  # their (how, the number backward()'s loss multiplies it by,
        #                          divisor)
        self.loss_heads = frozenset()  # their (site, head) (_losses.head(): sites_crc)
        self.padded = _padding.NONE  # the step's layers that depend on the padding (_padding)
        self.told_padding = False  # the padded-apart warning given
        self.mode_modules = None  # the modules whose forward differs by mode (_modes)
        self.mode_ids = frozenset()  # their ids (the global forward pre-hook looks them up)
        self.mode_ran = None      # ids of those that ran a forward with gradients since the
        #                           last reduction (None: not yet watched, all count)
        self.draw_ran = set()     # ids of those that ran a forward with gradients since the
        #                           last reduction, watched from the start (_tell_same_draws)
        self.draw_ids = frozenset(id(m) for _, m in _modes.of(model))  # (their ids now)
        self.step_ran = set()     # draw_ran of the step reduced last
        self.drew = {}            # masks drawn by functions since the last reduction
        #                           (_modes.intercept): {the user's file:line: function}
        self.step_drew = {}       # drew of the step reduced last
        self.drew_inputs = None   # CRC-32s of the tensors masks were drawn for since the last
        #                           reduction, (all of them, the first), None: none, (-1, -1):
        #                           one not hashed (_modes._note)
        self.drew_shapes = []     # the shapes of the bernoulli masks among them (the first 8)
        self.nonfinite = set()    # ids of the parameters whose gradient here was not finite
        self.told_draws = False   # the generators' states compared (_tell_same_draws)
        self.pass_losses = []   # the pass's, counted at its end if it reached the job's
        #                         parameters
        self.pass_hand = None   # what the pass's root divides by: [(divisor, ...)] (of_root)
        self.pass_heads = frozenset()  # the heads its losses read ((site, head): heads_of_root)
        self.pass_terms = []    # the root's terms the watched calls are not (terms_of_root)
        self.pass_read = {}     # what the pass's root shows (_losses.read_root: rank 0's
        #                         kinds, every rank's "detached"), kind: (what, the line)
        self.read_step = False  # the loss's root was read in this step (unread's kinds)
        self.pass_reading = False  # this backward pass's root is read
        self.read_next = False  # read it in the next step whatever the clock (_tell_factors)
        self.step_read = {}     # the same, of the step's passes that reached the job's
        #                         parameters (the first of each kind)
        self.told_mixing = False  # the samples-mixing loss's warning given
        self.told_detached = False  # the ranks' factors without gradient compared apart
        self.told_standardized = False  # a tensor normalized over the rank's samples told
        self.between = None     # .grad versions at a step's pass end before its last (Passes)
        self.told_between = False  # a .grad changed between a step's passes told
        self.losses_cb = False  # _losses_end queued
        self.versions = {}      # staleness > 0: dense .grad versions at the end of backward
        self.state = _TRAINING
        self.steps = 0          # the wrapped optimizer's steps through this wrapper
        self.stepped_opts = (0.0, 0.0)  # (a checksum of which of self.opts stepped, in
        #                                  order, below 2**24; the last one's index + 1)
        self.stepped = (0, 0)   # (clock, extra) after the last of them (an elastic job's state)
        self.most_samples = 0   # the most samples of a step over all ranks (an elastic attach)
        self.overflow = _overflow.Overflow()  # updates of more samples than the job's bound
        self.grown_at = None    # the clock whose reduction raised the bound last
        self.loaded = 0         # load_state_dict since the last reduction (after the
        #                         first): LOADED_OPTIMIZER | LOADED_MODEL
        self.last_trainer = 0   # join(): the lowest rank training in the last clock any did
        self.uneven = False     # join(): ranks trained while others had joined
        self.told_unequal = False  # the unequal minibatches' warning given
        self.step_tasks = []    # the optimizer step's passes read as one task's mean each
        #                         (_losses.task_mean): ((targets' id, row, factor), line)
        self.bn_chunks = {}     # a BatchNorm's id: (a weakref to its last input's base,
        #                         the step it came in, where its rows end: _batchnorm)
        self.told_ghost = False  # the ghost batch normalization's warning given
        self.told_transformed = False  # a BatchNorm inside functorch's transforms told
        self.replicas = _replicas.Checks(check_every)
        self.timeline = job.timeline_on()  # spans of the training timeline (SFB_TIMELINE)
        self.tl_fwd, self.tl_end_fwd = {}, None
        self.all_training = True  # the last reduction: every rank trained in it
        self.kept = {}          # per parameter the dense .grad tensor kept across steps
        self.handed = {}        # per parameter the .grad this wrapper set last
        self.stepped_grads = {}  # per factor-carried parameter the .grad stepped on last (weak)
        self.user_hooks = _grad_hooks.Hooks()  # the user's gradient hooks, run at the reduction
        self.fused_ids = set()  # parameters of slots whose dense gradient torch formed (fused)
        self._collect(model)
        # an elastic job's BatchNorm running statistics after the last step:
        # a dropped step's forward updated them, its rerun must not again
        self.bn_kept = None
        self._keep_bn()

    # -- which parameter goes where

    def _collect(self, model):
        U = _sfb.UsageError
        names = {id(p): n for n, p in model.named_parameters()}
        self.names = names
        in_opt = {}
        for oi, o in enumerate(self.opts):
            for gi, g in enumerate(o.param_groups):
                for p in g["params"]:
                    if id(p) not in names:
                        raise U("DistributedOptimizer: parameter %d of the %soptimizer's "
                                "param_groups[%d] (shape %s) is not a parameter of the model" %
                                (len(in_opt), "%s " % _ordinal(oi) if len(self.opts) > 1 else "",
                                 gi, tuple(p.shape)))
                    in_opt[id(p)] = g
        # a parameter no optimizer of the job holds: refused at the first
        # forward with gradients if it needs one then (another optimizer over
        # the same model, wrapped next, may hold it: an embedding's SparseAdam
        # beside the rest's Adam)
        refuse_uninitialized(list(model.named_parameters()) + list(model.named_buffers()),
                             "DistributedOptimizer")
        self.unheld = [(n, p) for n, p in model.named_parameters() if id(p) not in in_opt]
        for n, p in model.named_parameters():
            if id(p) in in_opt and p.dtype != torch.float32:
                raise U("DistributedOptimizer: parameter %s is %s: sfb synchronizes float32 "
                        "parameters (%s)" % (n, p.dtype, "keep a complex weight as a float32 "
                                             "one of its real and imaginary parts, torch."
                                             "view_as_complex(w) in forward"
                                             if p.is_complex() else "model.float()"), param=n)
            if id(p) in in_opt and p.device.type != "cpu":
                raise U("DistributedOptimizer: parameter %s is on %s: sfb.torch trains on the "
                        "CPU" % (n, p.device), param=n)
        self.group_of = in_opt
        self.held_ids = frozenset(in_opt)  # (the parameters the optimizers held: check_held)
        self.held_counts = {}  # per optimizer's id: (its groups, its parameters) last checked
        # the model's layers normalizing by minibatch statistics (_batchnorm)
        self.batchnorms = _batchnorm.layers(model)
        # the slots (one matrix each: _Linear, _Rows), a weight's _Linear,
        # its _Rows, and the parameters the slots cover
        self.linears, self.by_weight, self.rows_of, self.covered = [], {}, {}, set()
        self.renorms = _renorm.Renorms(self)  # max_norm tables' rows
        # a parameter kept dense: why (the plan's words: a convolution's
        # shape, a weight used other than by factors in the first step)
        self.dense_why = {}
        self.dense_label = {}  # its plan line's name (a weight's with its bias: the layer's)
        self.mixed = set()    # before the first reduction: covered parameters used densely too
        self.model_params = list(model.named_parameters())
        # what each parameter of the job is (a backward pass checks it stayed so)
        self.held = [(n, p, p.shape) for n, p in self.model_params if id(p) in in_opt]
        for mname, m in model.named_modules():
            # (the parameters themselves, never m.weight: a weight of
            # torch.nn.utils.parametrize is computed at every read, and a
            # spectral norm's read advances its power iteration)
            w = m._parameters.get("weight") if isinstance(m, torch.nn.Linear) else None
            if w is None or id(w) not in in_opt or \
                    id(w) in self.covered:  # (a weight shared by two modules: once)
                continue
            b = m._parameters.get("bias")
            self._new_slot(w, b if b is not None and id(b) in in_opt else None, mname or "linear")
        # a dense parameter's gradient tells the end of a backward pass too;
        # hooks go on when a parameter needs a gradient (frozen ones later)
        self.hooks, self.dense_into = [], []
        self.buckets = []       # the dense parameters' matrices (_buckets), at the first reduction
        self.acc_hooked = {}    # per dense parameter its gradient accumulator, hooked
        self.accumulators = {}  # per parameter its gradient accumulator (_capture._accumulating)
        self.unhooked = [p for _, p in self.model_params if id(p) in in_opt]
        self._hook_new()
        # parameters outside the job that a model's input reaches through
        # autograd (another model's, its optimizer not wrapped): checked for
        # replicas that part (_check_foreign)
        self.foreign = {}
        self.graphs = False  # a forward with gradients reached a model (its slots' functions)
        self.told_activations = False  # warned of a hook on an activation's gradient
        for m in _members(model):
            if isinstance(m, torch.jit.ScriptModule):
                raise U("DistributedOptimizer: model is a TorchScript module (torch.jit.script "
                        "or torch.jit.trace): sfb.torch follows a model through its Python "
                        "forward (a forward hook, its layers' F.linear calls), which TorchScript "
                        "runs without. Wrap the nn.Module and script it after training; a "
                        "scripted part inside a Python module trains (its parameters densely)")
        # the models whose forward begins a step's work (_forward_begins),
        # and every module of theirs: a load_state_dict after the first step
        # makes the next reduction compare the parameters (a load on some
        # ranks only); seen by torch's global hooks (_capture._intercept)
        self.member_ids = frozenset(id(m) for m in _members(model))  # (held: self.model)
        self.modules = weakref.WeakSet(model.modules())
        self.tl_labels = weakref.WeakKeyDictionary()  # the timeline's modules: their names
        if self.timeline:
            self._timeline_hooks(model)
        _intercept(self)

    def module_forward(self, module, inputs):
        """Any module's forward begins (torch's global pre-hook)."""
        if id(module) in self.member_ids:
            self._forward_begins(module, inputs)
        if (id(module) in self.mode_ids or id(module) in self.draw_ids) and \
                torch.is_grad_enabled():
            self.draw_ran.add(id(module))
            if self.mode_ran is not None and id(module) in self.mode_ids:
                self.mode_ran.add(id(module))
        if self.tl_labels:
            label = self.tl_labels.get(module)
            if label is not None:
                self.tl_fwd[label] = time.time()

    def module_forward_done(self, module):
        """Any module's forward ended (a timeline's global hook)."""
        label = self.tl_labels.get(module)
        if label is None:
            return
        t0 = self.tl_fwd.pop(label, None)
        if t0 is not None:
            self.span("forward " + label, t0)
        if id(module) in self.member_ids and torch.is_grad_enabled():
            self.tl_end_fwd = time.time()

    def module_loads(self, module):
        """Any module's load_state_dict: after the first step a load into
        the model (or a part) makes the next reduction compare the
        parameters, every rank's (a model loaded on some ranks only fails
        every rank, naming the parameter); at staleness > 0 refused, before
        anything is loaded. A copy's (an EMA's) is not the model's."""
        if not self.attached or module not in self.modules:
            return
        if self.additive:
            raise _sfb.UsageError(
                "sfb.torch: the model's load_state_dict after the first step at staleness %d "
                "(each rank's updates still on their way, added to whatever the parameters "
                "hold when they come); load the checkpoint before training, or use "
                "staleness=0" % self.staleness)
        self.loaded |= LOADED_MODEL

    def _check_module_hooks(self):
        """The first forward with gradients: a module's backward hook
        (register_full_backward_hook, register_backward_hook) sees this
        rank's gradients of its inputs and outputs (_grad_hooks.on_activations)."""
        for name, m in self.model.named_modules():
            if m._backward_hooks:
                _grad_hooks.on_activations(self, "the backward hook of module %s" % (
                    name or type(m).__name__))
                return
        if getattr(torch.nn.modules.module, "_global_backward_hooks", None):
            _grad_hooks.on_activations(self, "a global module backward hook")

    def _forward_begins(self, model, inputs):
        """A model's forward pre-hook: hooks on parameters that need them;
        in the first steps, the parameters outside the job that the inputs'
        autograd graphs lead to (a generator's, feeding a discriminator)."""
        self._hook_new()
        if not torch.is_grad_enabled():
            return
        if not self.graphs:
            self._check_unheld()
            self._check_module_hooks()
            self._check_scripted_norms()
        self.user_hooks.stash(self)
        self.graphs = True
        if self.clock <= FOREIGN_CLOCKS[-1]:
            self.note_foreign(_tensors(inputs), "feed %s's forward and get gradients through "
                              "it" % type(model).__name__)

    def loss_foreign(self, tensors):
        """backward()'s roots, in the first steps: note_foreign, where the
        pass reaches the job's parameters (not an inner loop's on copies of
        a model, Reptile's, each rank's own)."""
        if self.clock <= FOREIGN_CLOCKS[-1]:  # (the models' own: the replica checks')
            found = {}
            if self.note_foreign(tensors, "are in the loss given to backward() past the job's "
                                 "models (a discriminator's, a loss's own parameter) and get "
                                 "gradients from it",
                                 frozenset(id(p) for p in self.model.parameters()), found):
                for k, v in found.items():
                    self.foreign.setdefault(k, v)

    def note_foreign(self, tensors, where, skip=frozenset(), into=None):
        """In the first steps: the parameters outside the job that tensors'
        autograd graphs lead to (where: how they meet the job), compared
        across the ranks at FOREIGN_CLOCKS (_check_foreign): a model's
        inputs (a generator's parameters, feeding a discriminator), the
        loss backward() gets (a discriminator's past the generator, a
        loss's own parameter). into: where to note them (self.foreign).
        Returns whether the graphs reach a parameter of the job's."""
        into = self.foreign if into is None else into
        stack = [t.grad_fn for t in tensors if t.grad_fn is not None]
        seen, reached = set(), False
        while stack and len(seen) < 20000:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            v = getattr(node, "variable", None)  # an AccumulateGrad: its leaf
            if v is not None and id(v) in self.group_of or \
                    type(node).__name__ in _losses.FACTOR_NODES:
                reached = True
            elif isinstance(v, torch.nn.Parameter) and v.requires_grad and id(v) not in skip:
                into.setdefault(id(v), (v, where))
            stack.extend(n for n, _ in node.next_functions)
        return reached

    def _check_scripted_norms(self):
        """The first forward with gradients: a BatchNorm in training mode
        inside a TorchScript part of the model normalizes by each rank's own
        statistics there (sfb.torch gathers them in Python's F.batch_norm,
        which TorchScript runs without): refused, naming it."""
        for name, m in self.model.named_modules():
            kind = getattr(m, "original_name", "")
            if isinstance(m, torch.jit.ScriptModule) and m.training and \
                    kind in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm"):
                raise _sfb.UsageError(
                    "DistributedOptimizer: %s %s is inside a TorchScript part of the model "
                    "(torch.jit.script or torch.jit.trace) and in training mode: there it "
                    "normalizes by each rank's own statistics, where one process's are the "
                    "whole minibatch's (sfb.torch gathers every rank's only in Python "
                    "modules). Leave that part a Python module and script the model after "
                    "training, put the BatchNorm in eval(), or use nn.GroupNorm or "
                    "nn.LayerNorm" % (kind, name), param=name)

    def _check_unheld(self):
        """The first forward with gradients (every DistributedOptimizer of
        the job made): a model parameter that needs a gradient and that no
        optimizer holds would train on nothing, or on each rank's own
        gradient by an optimizer that is not wrapped: refused."""
        for n, p in self.unheld:
            if p.requires_grad:
                raise _sfb.UsageError(
                    "DistributedOptimizer: model parameter %s requires a gradient but no "
                    "optimizer of the job holds it (add it to the optimizer, or to another "
                    "one wrapped in a DistributedOptimizer too, over the same model or the "
                    "part of it that optimizer holds; or set requires_grad=False to freeze "
                    "it)" % n, param=n)

    def _check_foreign(self):
        """At FOREIGN_CLOCKS (collective: every rank reduces then): the
        parameters outside the job that feed its models, or that the loss
        reaches past them, must be the same on every rank; an optimizer
        that is not a DistributedOptimizer stepping them on each rank's own
        gradients parts them, silently: refused."""
        found = sorted(self.foreign.values(),  # (the largest first: the same order on every rank)
                       key=lambda vm: (-vm[0].numel(), tuple(vm[0].shape), vm[1]))
        mine = np.array([len(found), _crc_tensors([v for v, _ in found])], np.int64).tobytes()
        records = self.job.allgather(mine)
        if not found or any(r[:8] != mine[:8] for r in records) or \
                all(r == mine for r in records):
            return
        differ = [q for q, r in enumerate(records) if r != records[0]]
        shapes = ", ".join("x".join(map(str, v.shape)) or "one number"
                           for v, _ in found[:4]) + \
            (", ..." if len(found) > 4 else "")
        raise _sfb.UsageError(
            "sfb.torch: parameters outside the job (%d: %s) %s, and they differ between "
            "rank 0 and rank %d at step %d: an "
            "optimizer that is not a DistributedOptimizer steps them on each rank's own "
            "gradients. Wrap that optimizer too (sfb.torch.DistributedOptimizer(opt, "
            "model=its_model): one per model and optimizer), add them to a wrapped optimizer, "
            "or freeze them" %
            (len(found), shapes, found[0][1], differ[0], self.clock))

    # -- the training timeline's spans (SFB_TIMELINE; docs/performance.md)

    def span(self, name, t0):
        """A span from t0 (time.time()) to now on the timeline's user track."""
        if self.timeline:
            self.job.timeline_span(name, t0 * 1e6, time.time() * 1e6, self.clock)

    def _timeline_hooks(self, model):
        """forward NAME per leaf module and per model (module_forward,
        module_forward_done); a model's forward end starts the backward
        span."""
        tops = _members(model)
        for name, m in model.named_modules():
            if m is model and isinstance(model, _Models):
                continue
            if any(m is t for t in tops) or not any(True for _ in m.children()):
                self.tl_labels[m] = name or "model"

    def _new_slot(self, weight, bias, name=None):
        """weight (and its bias) from now on by factors."""
        if self.additive and bias is not None and \
                self.group_of[id(weight)]["lr"] != self.group_of[id(bias)]["lr"]:
            raise _sfb.UsageError("DistributedOptimizer: %s and %s have different learning rates, "
                                  "which staleness > 0 cannot apply as one update" %
                                  (self.names[id(weight)], self.names[id(bias)]),
                                  param=self.names[id(weight)])
        slot = _Linear(self, name or self.names[id(weight)], weight, bias, len(self.linears))
        slot.of_module = name is not None  # an nn.Linear's (else met in F.linear)
        self.linears.append(slot)
        self.by_weight[id(weight)] = slot
        self.covered.add(id(weight))
        if bias is not None:
            self.covered.add(id(bias))
        return slot

    def slot_for(self, weight, bias):
        """(slot, r0) for F.linear(x, weight, bias), or None (torch's own
        F.linear: a weight sfb carries densely, or another bias). weight is a
        slot's weight (r0 None) or a range of its rows from r0 on (the split
        in_proj_weight of cross-attention), bias the slot's bias or the same
        range of it, or a bias that needs no gradient. Before the first
        reduction, a 2-D parameter of the optimizer met here for the first
        time becomes a slot (nn.MultiheadAttention's projections, F.linear in
        a user's module)."""
        r0 = None
        base, bias_base = weight, bias
        if weight._base is not None and id(weight) not in self.by_weight:
            base = weight._base
            r0 = _row_range(weight, base)
            if r0 is None:
                return None
            if bias is not None and bias._base is not None:
                bias_base = bias._base
                if _row_range(bias, bias_base) != r0 or bias.shape[0] != weight.shape[0]:
                    return None
        slot = self.by_weight.get(id(base))
        if slot is None or slot.weight is not base:
            if self.attached or not self._eligible(base, bias_base):
                return None
            slot = self._new_slot(base, bias_base if bias_base is not None and
                                  id(bias_base) in self.group_of else None)
        if not (bias_base is slot.bias or (slot.bias is None and
                                           (bias is None or not bias.requires_grad))):
            return None
        if base.requires_grad or (slot.bias is not None and slot.bias.requires_grad):
            return slot, r0
        return None

    def rows_for(self, weight):
        """The _Rows of an embedding weight F.embedding / F.embedding_bag
        looks up, or None (torch's own: a weight that needs no gradient, one
        sfb carries densely). Before the first reduction, a 2-D parameter of
        the optimizer met here for the first time becomes one, at staleness
        0 (staleness > 0 carries tables densely)."""
        slot = self.rows_of.get(id(weight))
        if slot is None:
            if self.attached or self.additive or id(weight) not in self.group_of or \
                    weight.dim() != 2 or weight._base is not None or id(weight) in self.dense_why:
                return None
            slot = self._new_rows(weight)
        return slot if weight.requires_grad else None

    def _new_rows(self, weight, name=None):
        slot = _Rows(self, name or self.names[id(weight)], weight, len(self.linears))
        self.linears.append(slot)
        self.rows_of[id(weight)] = slot
        self.covered.add(id(weight))
        return slot

    def conv_slot_for(self, weight, bias, positions):
        """The slot of a convolution's weight, or None (torch's own: it goes
        densely). Before the first reduction (staleness 0), a weight of the
        optimizer met here for the first time becomes one if its factors
        (positions() samples) are smaller than the dense engine's bytes;
        else it is remembered as dense, with the reason."""
        slot = self.by_weight.get(id(weight))
        if slot is None:
            if self.attached or self.additive or id(weight) in self.dense_why or \
                    not self._eligible(weight, bias, dims=(3, 4)):
                return None
            keep_bias = bias is not None and id(bias) in self.group_of
            ok, why = _conv.pays(positions(), weight.shape[0],
                                 weight[0].numel() + (1 if keep_bias else 0), self.job.world)
            if not ok:
                self.dense_why[id(weight)] = why
                return None
            slot = self._new_slot(weight, bias if keep_bias else None)
        if not (bias is slot.bias or (slot.bias is None and (bias is None or
                                                             not bias.requires_grad))):
            return None
        if weight.requires_grad or (slot.bias is not None and slot.bias.requires_grad):
            return slot
        return None

    def fused(self, pairs):
        """A recurrent operator on these (weight, bias) matrices: True when
        every one is a slot that goes by FMS this clock (staleness 0, after
        the first reduction). Then torch's fused operator runs and forms
        their dense gradients, which the slots publish (slot.dense) instead
        of factors: the same sum, at one process's cost of the recurrence."""
        if not self.attached or self.additive:
            return False
        slots = []
        for w, b in pairs:
            slot = self.by_weight.get(id(w))
            if slot is None or slot.weight is not w or slot.kind != "linear" or \
                    self.job.engines[slot.index] != "fms" or \
                    not (b is slot.bias or (slot.bias is None and (b is None or
                                                                   not b.requires_grad))):
                return False
            slots.append(slot)
        for slot in slots:
            slot.dense = True
            self.fused_ids.update(id(p) for p in (slot.weight, slot.bias) if p is not None)
        return True

    def note_conv_dense(self, weight, why):
        """A convolution's weight goes densely, for the plan's reason."""
        if not self.attached and id(weight) in self.group_of and id(weight) not in self.by_weight:
            self.dense_why.setdefault(id(weight), why)

    def _eligible(self, weight, bias, dims=(2,)):
        g = self.group_of
        if id(weight) not in g or id(weight) in self.by_weight or weight.dim() not in dims or \
                id(weight) in self.dense_why:
            return False
        if bias is None or (id(bias) not in g and not bias.requires_grad):
            return True
        return id(bias) in g and id(bias) not in self.covered and bias.dim() == 1 and \
            bias.shape[0] == weight.shape[0] and id(bias) not in self.dense_why

    def _agree_slots(self):
        """Every rank the slots any rank found in its first forward (F.linear
        on a parameter), in the model's order after the nn.Linear ones."""
        job, names = self.job, self.names
        found = [(names[id(s.weight)], names[id(s.bias)] if s.bias is not None else "", s.kind)
                 for s in self.linears]
        union = set(found)
        for text in _allgather_text(job, repr(sorted(found))):
            union |= set(_name_pairs(text))
        by_name = dict(self.model_params)
        for w, b, kind in sorted(union - set(found)):
            if w not in by_name or (b and b not in by_name):
                raise _sfb.MismatchError(-(4096 + 9), "sfb.torch: another rank's model has the "
                                         "parameter %s, this one's not" % (w if w not in by_name
                                                                            else b))
            if kind == "rows":
                self._new_rows(by_name[w])
            else:
                self._new_slot(by_name[w], by_name[b] if b else None)
        order = {id(p): i for i, (_, p) in enumerate(self.model_params)}
        first = [s for s in self.linears if s.of_module]
        rest = sorted((s for s in self.linears if not s.of_module),
                      key=lambda s: (order[id(s.weight)], s.kind))
        self.linears = first + rest
        for i, slot in enumerate(self.linears):
            slot.index = i

    def _unslot_mixed(self):
        """The first reduction, after _agree_slots: a weight or bias carried
        by factors (or a table's rows) that also had a dense gradient in the
        first step on any rank (a penalty on the weights in the loss, a
        transposed or column use, double backward, a convolution that went
        densely on another rank's batch) goes densely from now on, as torch
        computes it: its slot is dropped, and the step's factors become its
        dense .grad, added to what the other uses gave it."""
        def left(p):  # a .grad that was there before (not zeros): part of its gradient
            g = p.grad
            return g is not None and not self._ours(p) and \
                bool((g._values() if g.is_sparse else g).any())
        # (a convolution judged dense by its positions on this rank's first batch,
        #  by factors on another's: marked, for the plan's reason)
        mine = sorted(self.names[id(p)] + ("\tpositions" if id(p) in self.dense_why else "")
                      for slot in self.linears for p in (slot.weight, slot.bias)
                      if p is not None and (id(p) in self.mixed or left(p)))
        lines = set(mine)
        for text in _allgather_text(self.job, "\n".join(mine)):
            lines |= set(n for n in text.split("\n") if n)
        union = set(n.split("\t")[0] for n in lines)
        apart = set(n.split("\t")[0] for n in lines if n.endswith("\tpositions"))
        self.mixed = set()
        if not union:
            return
        why = ("a dense gradient besides its factors in the first step: a penalty on it, a "
               "transposed use, double backward, torch.autograd.grad with respect to it, "
               "another module using it with its own bias")
        why_apart = ("judged apart by the ranks' first batches: densely where that batch's "
                     "positions made factors cost more, by factors elsewhere")
        for slot in [s for s in self.linears
                     if any(p is not None and self.names[id(p)] in union
                            for p in (s.weight, s.bias))]:
            with torch.no_grad():
                for p, g in slot.local_grads():
                    if p.grad is None:
                        p.grad = g
                    elif p.grad.is_sparse:
                        p.grad = p.grad + g
                    else:
                        p.grad.add_(g)
            slot.hook.remove()
            self.linears.remove(slot)
            if self.by_weight.get(id(slot.weight)) is slot:
                del self.by_weight[id(slot.weight)]
            if self.rows_of.get(id(slot.weight)) is slot:
                del self.rows_of[id(slot.weight)]
            for p in (slot.weight, slot.bias):
                if p is not None:
                    self.dense_why[id(p)] = why_apart if self.names[id(slot.weight)] in apart \
                        else why
            self.dense_label[id(slot.weight)] = slot.label
            if slot.bias is not None:
                self.dense_label[id(slot.bias)] = None  # (the weight's line says it)
        for i, slot in enumerate(self.linears):
            slot.index = i
        self.covered = set(id(p) for s in self.linears for p in (s.weight, s.bias)
                           if p is not None)

    def _layout(self):
        """The dense parameters and the presence columns, once the slots are
        settled (the first reduction)."""
        # every parameter the optimizer holds is synchronized, frozen or not
        # (it may be unfrozen later); the rest stay outside
        self.dense = self._dense_now()
        self.dense_n = sum(p.numel() for _, p in self.dense)
        self.buckets = []
        self.params, seen = [], set()
        for slot in self.linears:  # (a tied weight: in two slots, once here)
            for p in (slot.weight, slot.bias):
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    self.params.append((self.names[id(p)], p))
        self.params += self.dense

    # -- the job

    def _publish_linear(self, slot):
        """slot's part of the clock; where a number of it is not finite,
        nothing, its parameters marked (_nonfinite)."""
        try:
            self._publish_slot(slot)
        except _sfb.Error as e:
            if not _nonfinite.refused(e):
                raise
            if slot.dense:
                bad = _nonfinite.of_grads((slot.weight, slot.bias))
            else:
                bad = _nonfinite.of_factors(slot, *slot.factors())
            self._not_finite(e, slot.name, bad)
            if slot.dense:
                zeros = self.job.dense_buffer(slot.index)
                zeros.fill(0)
                self.job.publish_dense(self.clock, slot.index, zeros, self.reduction_weight)
                slot.was_dense = True
            else:
                self.job.publish_one(self.clock, slot.index, *slot.nothing(), 1.0)
                slot.caps = []
            slot.published = True

    def _not_finite(self, e, name, bad):
        """The library refused a part that is not finite (e): bad, the
        parameters it makes so, marked for the meta row; e again where there
        are none (scale x numbers past float32) or at staleness > 0."""
        if not bad:
            raise e
        if self.additive:
            raise _nonfinite.staleness_error(name, self.clock, self.staleness) from None
        self.nonfinite.update(id(p) for p in bad)

    def _publish_slot(self, slot):
        samples = slot.samples()
        self.step_samples = max(self.step_samples, samples)
        slot.counted = samples  # (the meta row's, for the unequal minibatches' warning)
        if slot.dense:  # (staleness 0: fused)
            self.job.publish_dense(self.clock, slot.index,
                                   slot.dense_grad(self.job.dense_buffer(slot.index)),
                                   self.reduction_weight)
            slot.published = slot.was_dense = True
            return
        if samples:
            slot.was_dense = False
        if samples > self.max_s:
            self._keep_overflow(slot, samples)
            return
        b, c = slot.factors()
        if self.additive:
            scale = -self.group_of[id(slot.weight)]["lr"] / self.job.world
        else:  # (joined or leaving: zeros)
            scale = self.reduction_weight
        self.job.publish_one(self.clock, slot.index, b, c, scale)
        slot.published = True
        slot.caps = []

    def _keep_overflow(self, slot, samples):
        """More samples than the job's bound (a longer sequence): the update
        waits for the reduction (_overflow), one sample of zeros goes now."""
        U = _sfb.UsageError
        what = "lookups" if slot.kind == "rows" else "samples"
        if self.additive:
            raise U("sfb.torch: %s has %d %s at step %d, more than the %d it was attached with "
                    "(the first step's largest over the ranks): at staleness %d each update is "
                    "applied as it comes, within that bound; pass DistributedOptimizer "
                    "max_samples=, at least %d: the most a layer takes in one step (a sequence "
                    "model's: minibatch x longest sequence)" % (
                        slot.name, samples, what, self.clock, self.max_s, self.staleness,
                        samples), param=slot.name)
        if samples > _overflow.MOST:
            raise U("sfb.torch: %s has %d %s at step %d, more than the %d one step may carry: "
                    "use smaller minibatches" % (slot.name, samples, what, self.clock,
                                                 _overflow.MOST), param=slot.name)
        b, c = slot.factors()
        self.overflow.keep(self.linears.index(slot), slot, b, c, self.reduction_weight,
                           self.clock)
        self.job.publish_one(self.clock, slot.index, *slot.nothing(), 1.0)
        slot.published = True
        slot.caps = []

    def _publish_bucket(self, b):
        stage = b.stage_update(self.job.dense_buffer(b.index),
                               lambda p: self.group_of[id(p)]["lr"], self.additive,
                               self.state == _TRAINING, self.job.world)
        scale = 1.0 if self.additive else self.reduction_weight
        try:
            self.job.publish_dense(self.clock, b.index, stage, scale)
        except _sfb.Error as e:
            if not _nonfinite.refused(e):
                raise
            self._not_finite(e, b.params[0][0], _nonfinite.of_grads(p for _, p in b.params))
            stage.fill(0)  # (nothing was published: the same buffer, zeros)
            self.job.publish_dense(self.clock, b.index, stage, scale)
        b.published = True

    def dense_ready(self, p, bucket):
        """p's gradient of this pass is in p.grad (its accumulator's hook):
        in the step's last pass, p's bucket leaves once all of it is."""
        if bucket.published and self.nested_pass:  # (a second gradient, after it left)
            self._reentrant_late(self.names[id(p)])
            return
        if not (self.overlap and self.attached and not self.additive and
                self.state == _TRAINING and self.passes == self.passes_per_step - 1 and
                threading.get_ident() == self.thread) or bucket.published:
            return
        bucket.ready.add(id(p))
        if bucket.all_ready():
            try:
                self._publish_bucket(bucket)
            except BaseException as e:  # raised out of backward(): tell the peers
                self.fail_in_backward(e)

    def _hook_buckets(self):
        """Each dense parameter that needs a gradient: its accumulator's hook
        (kept: the node lives as long as the reference)."""
        for b in self.buckets:
            for _, p in b.params:
                if p.requires_grad and id(p) not in self.acc_hooked:
                    acc = _buckets.accumulator(p)
                    self.hooks.append(acc.register_hook(
                        lambda *_, p=p: self.dense_ready(p, self.bucket_of[id(p)])))
                    self.acc_hooked[id(p)] = acc

    def _meta_row(self):
        """This rank's row of the clock's meta matrix: per parameter whether
        it has a gradient here, the rank's weight, its state, the wrapped
        optimizer's steps and hyperparameters' checksum (16-bit halves:
        exact in float32), the step's time and samples, the processes
        waiting to join, the frozen parameters' checksum, the rows its
        max_norm lookups changed (_renorm), whether set_samples was called,
        what was loaded since the last reduction (LOADED_*) and the
        optimizer state's checksum, what the mean losses over kept targets
        divided by and their targets (_losses), the checksum of the modes of
        the modules whose forward differs by mode (_modes), until the first
        reduction where every rank trains the torch generator's state's and
        the tensors the step's dropouts drew for (all of them, the first),
        the loss's terms' shares of
        those divisors (_losses.shares), the longest sequence a layer that
        depends on the padding ran on (_padding), the losses' settings
        (their class weights, ignore_index, label_smoothing: how many were
        read and their checksums, field by field), whether the loss
        multiplies a statistic over the samples by a tensor without gradient
        and that tensor's checksum (_losses.detached), the number the mean losses are
        multiplied by in the loss backward() got (their divisor over their
        divisor each divided by its gradient: 1 for the losses themselves),
        the divisor all the terms share (_losses.common_divisor), the number
        torch's mean losses alone are multiplied by (_own_mean_scale),
        whether set_samples(0) drops a loss that divides by a count, which
        of several optimizers stepped (a checksum of their order, the last),
        the least and most weight a target of the losses gets (_per_target),
        each layer's samples."""
        row = np.zeros((1, self.meta_cols), np.float32)
        if self.state == _TRAINING:
            for i, (_, p) in enumerate(self.params):
                row[0, i] = 1.0 if p.grad is not None else 0.0
            for slot in self.linears:
                i = self.param_index[id(slot.weight)]
                row[0, i] = max(row[0, i], 1.0 if slot.used_w else 0.0)
                if slot.bias is not None:
                    row[0, i + 1] = max(row[0, i + 1], 1.0 if slot.used_b else 0.0)
            for pid in self.nonfinite:
                row[0, self.param_index[pid]] = _nonfinite.NONFINITE
            row[0, self.n_params] = self.my_weight
        crc = _hyper_crc(self.opts)
        n = self.n_params
        row[0, n + 1:n + 7] = [self.state, self.steps % (1 << 24), crc & 0xFFFF, crc >> 16,
                               self.step_ms, self.step_samples]
        if self.elastic and self.job.rank == 0:  # processes waiting to join (rank 0 listens)
            row[0, n + 7] = self.job.join_poll(_env._join_text)
        frozen = zlib.crc32(np.packbits([p.requires_grad for _, p in self.params]).tobytes())
        row[0, n + 8:n + 10] = [frozen & 0xFFFF, frozen >> 16]
        row[0, n + 10] = min(self.renorms.pending(), 1 << 24)
        row[0, n + 11] = 1.0 if self.weight is not None else 0.0  # (set_samples called)
        row[0, n + 12] = self.loaded  # (what was loaded since the last reduction)
        if self.loaded & LOADED_OPTIMIZER:  # (an optimizer state: which)
            crc = _state_crc(self.opts)
            row[0, n + 13:n + 15] = [crc & 0xFFFF, crc >> 16]
        row[0, n + 15:n + 17] = self.losses[:2]
        if self.mode_modules is None:
            self.mode_modules = _modes.of(self.model)
            self.mode_ids = frozenset(id(m) for _, m in self.mode_modules)
        crc = _modes.crc(self.mode_modules)
        row[0, n + 17:n + 19] = [crc & 0xFFFF, crc >> 16]
        if not self.told_draws:  # (until a reduction where every rank trains)
            crc = zlib.crc32(torch.random.get_rng_state().numpy().tobytes())
            row[0, n + 19:n + 21] = [crc & 0xFFFF, crc >> 16]
            if self.drew_inputs is not None and self.drew_inputs[0] >= 0 and not \
                    _modes.holds_samples(self.drew_shapes, self.step_samples):  # (drawn for what)
                every, first = self.drew_inputs
                row[0, n + 36:n + 41] = [1.0, every & 0xFFFF, every >> 16, first & 0xFFFF,
                                         first >> 16]
        row[0, n + 21:n + 23] = _losses.shares(self.losses[4])
        row[0, n + 23] = min(self.padded[0], _overflow.MOST)
        read, crcs = _losses.settings_crc(self.losses[4])
        row[0, n + 24] = min(read, _overflow.MOST)
        for k, crc in enumerate(crcs):  # (the class weights' at n + 25, the others' past n + 30)
            at = n + 25 if k == 0 else n + 29 + 2 * k
            row[0, at:at + 2] = [crc & 0xFFFF, crc >> 16]
        if "detached" in self.step_read:  # (a statistic's factor without gradient)
            crc = self.step_read["detached"][0][1]
            row[0, n + 27:n + 30] = [1.0, crc & 0xFFFF, crc >> 16]
        d, folded = self.losses[0], self.losses[5]
        row[0, n + 30] = d / folded if d and folded else 1.0  # (the number the losses are scaled by)
        row[0, n + 35] = _losses.common_divisor(self.losses[4])
        row[0, n + 41] = self._own_mean_scale()
        # (set_samples(0) while the loss divides by a count: its gradient dropped)
        row[0, n + 42] = 1.0 if self.weight == 0 and self.losses[0] > 0 else 0.0
        row[0, n + 43:n + 45] = self.stepped_opts  # (which optimizers stepped: _check_meta)
        row[0, n + 45:n + 47] = self._per_target(row[0, n])
        crc = _losses.sites_crc(self.losses[4], self.loss_heads)  # (_tell_term_sets)
        row[0, n + 47:n + 49] = [crc & 0xFFFF, crc >> 16]
        row[0, n + META_FIXED:] = [min(slot.counted, _overflow.MOST) for slot in self.linears]
        return row

    def _attach(self):
        """The first reduction: the shapes and the first step's samples are known."""
        job = self.job
        self._check_unheld()  # (a model whose forward sfb did not see: its parts called)
        self._agree_slots()
        self._unslot_mixed()
        self._layout()
        # (max_norm: the first forward's rows, before the parameters agree)
        self.renorms.at_reduction(self.clock, job.world > 1)
        mine = max([slot.samples() for slot in self.linears] + [1])
        # every rank the same shapes, clock, settings and start (clear
        # errors naming both ranks' values, not rejected frames or a hang)
        lines = ["%s=%dx%d %s\n" % (slot.name, slot.rows, slot.cols, slot.kind)
                 for slot in self.linears]
        lines += ["%s=%s\n" % (n, tuple(p.shape)) for n, p in self.dense]
        lines += ["clock=%d\n" % self.clock, "staleness=%d\n" % self.staleness,
                  "backward_passes_per_step=%d\n" % self.passes_per_step,
                  "sync=%s\n" % self.sync, "factor_dtype=%s\n" % self.factor_dtype,
                  "dense_dtype=%s\n" % self.dense_dtype,
                  "bucket_cap_bytes=%d\n" % self.bucket_bytes, "trial_steps=%d\n" % self.trial_steps,
                  "max_samples=%s\n" % self.max_samples,  # (the engines sync="auto" picks)
                  "check_every=%s\n" % self.replicas.every,  # (the replica checks' collectives)
                  "optimizer=%s\n" % "+".join(type(o).__name__ for o in self.opts)]
        job.agree("".join(lines))
        try:
            job.agree("parameters_crc32=%08x\n" % _crc_tensors(
                [p for _, p in self.model.named_parameters()]))
        except _sfb.Error as e:
            raise _sfb.MismatchError(e.code, "sfb.torch: the ranks start from different "
                                     "parameters (%s)%s" % (e, self._apart_at_start()),
                                     e.rank) from None
        try:
            job.agree("optimizer_hyperparameters_crc32=%08x\noptimizer_state_crc32=%08x\n" %
                      (_hyper_crc(self.opts), _state_crc(self.opts)))
        except _sfb.Error as e:
            raise _sfb.MismatchError(e.code, "sfb.torch: the ranks' optimizers differ (%s): "
                                     "every rank must load the same optimizer state "
                                     "(sfb.torch.broadcast_optimizer_state) and use the same "
                                     "settings" % e, e.rank) from None
        counts = [int(np.frombuffer(b, np.int64)[0])
                  for b in job.allgather(np.array([mine], np.int64).tobytes())]
        # (an elastic job attaching again: its steps' shares of the largest
        # step so far, whatever this step holds; more later: _overflow)
        self.max_s = min(max(counts + [self.max_samples or 1,
                                       -(-self.most_samples // job.world)]), _overflow.MOST)
        self.overflow = _overflow.Overflow()
        mats, engines, nnz, dtypes, dense_dtypes = [], [], [], [], []
        with torch.no_grad():
            for slot in self.linears:
                slot.buf = np.zeros((slot.rows, slot.cols), np.float32)
                if self.additive:  # the parameters live in the replica
                    slot.buf[:, :slot.inputs] = slot.weight.detach().numpy()
                    if slot.bias is not None:
                        slot.buf[:, slot.inputs] = slot.bias.detach().numpy()
                mats.append(slot.buf)
                engines.append(self.sync)
                nnz.append(self.max_s if slot.kind == "rows" else 0)
                dtypes.append(self.factor_dtype)
                dense_dtypes.append(self.dense_dtype)  # (if FMS carries it)
            self.buckets = _buckets.plan(self.dense, self.bucket_bytes)
            self.bucket_of = {id(p): b for b in self.buckets for _, p in b.params}
            for b in self.buckets:
                b.index = len(mats)
                mats.append(b.buf)
                engines.append("fms")  # dense gradients: the engine that carries them
                nnz.append(0)
                dtypes.append("f32")
                dense_dtypes.append(self.dense_dtype)
            if not self.additive:
                self.n_params = len(self.params)
                self.param_index = {id(p): i for i, (_, p) in enumerate(self.params)}
                self.meta_cols = self.n_params + META_FIXED + len(self.linears)
                self.meta = np.zeros((job.world, self.meta_cols), np.float32)
                self.meta_b = np.zeros((1, job.world), np.float32)
                self.meta_b[0, job.rank] = 1.0
                self.meta_index = len(mats)
                mats.append(self.meta)
                engines.append("sfb")
                nnz.append(0)
                dtypes.append("f32")  # integers (steps, checksums) bf16 could not hold
                dense_dtypes.append("f32")
        job.attach(mats, max_s=self.max_s, engine=",".join(engines),
                   staleness=self.staleness, start_clock=self.clock,
                   ordered=not self.additive, sf_nnz=nnz, factor_dtype=dtypes,
                   dense_dtype=dense_dtypes, reattach=self.elastic,
                   **self.attach_args)
        if self.additive:
            with torch.no_grad():
                for slot in self.linears:
                    w = torch.from_numpy(slot.buf)
                    slot.weight.data = w[:, :slot.inputs]
                    if slot.bias is not None:
                        slot.bias.data = w[:, slot.inputs]
                for b in self.buckets:
                    b.adopt_parameters()
        self.attached = True
        self._hook_buckets()
        if self.sync == "auto" and not self.additive and job.world > 1:
            self.trials = _autoplan.Trials(self.trial_steps, self.linears, job.engines, job.plan,
                                           self.trial_all)
        job.wait(self.clock)

    def _describe(self, job):
        auto = {}
        for line in job.plan.splitlines():
            parts = line.split()
            if len(parts) > 1 and parts[0] == "matrix" and parts[1].isdigit():
                why = line.split(":", 1)[1].strip() if ":" in line else line
                auto[int(parts[1])] = why.rsplit(" -> ", 1)[0]
        out = []
        for slot in self.linears:
            eng = job.engines[slot.index]
            why = "auto: " + auto[slot.index] if slot.index in auto else \
                "sync=%r" % self.sync
            if self.trials:
                why += self.trials.describe(slot.index)
            if eng == "sfb" and job.factor_dtypes[slot.index] == "bf16":
                why = "bf16 factors; " + why
            if eng == "fms" and job.dense_dtypes[slot.index] == "bf16":
                why = "bf16 rows; " + why
            if eng == "fms" and slot.was_dense:
                why = "dense gradient of torch's fused operator; " + why
            out.append("%s: %s (%s)" % (slot.label, eng, why))
        for n, p in self.model_params:
            if id(p) in self.dense_why and id(p) not in self.covered:
                label = self.dense_label.get(id(p), "%s (%dx%d, conv %s)" % (
                    n, p.shape[0], p[0].numel(), "x".join(map(str, p.shape[2:]))))
                if label:
                    out.append("%s: dense (%s)" % (label, self.dense_why[id(p)]))
        if self.dense:
            names = [n for n, _ in self.dense]
            shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
            nb = len(self.buckets)
            out.append("dense (%d tensors, %d values: %s): %s (dense gradients%s, %d bucket%s%s)"
                       % (len(names), self.dense_n, shown, job.engines[self.buckets[0].index],
                          " in bf16" if self.dense_dtype == "bf16" else "", nb,
                          "s" if nb > 1 else "",
                          (", each leaving" if nb > 1 else ", leaving") +
                          " once backward has filled it"
                          if self.overlap and not self.additive else ""))
        return "\n".join(out)

    def _publish_all(self):
        """Every matrix of this clock that has not left yet."""
        if self.additive:  # the learning rates as they are now (schedulers, load_state_dict)
            self.group_of = {id(p): g for o in self.opts for g in o.param_groups
                             for p in g["params"]}
        if not self.attached:
            self._attach()
        for slot in self.linears:
            if not slot.published:
                if self.state != _TRAINING:
                    slot.caps = []
                self._publish_linear(slot)
        for b in self.buckets:
            if not b.published:
                self._publish_bucket(b)

    @property
    def my_weight(self):
        return 1.0 if self.weight is None else float(self.weight)

    @property
    def reduction_weight(self):
        """This rank's weight in the clock's reduction (0 when joined or leaving)."""
        return self.my_weight if self.state == _TRAINING else 0.0

    def reduce(self):
        """Staleness 0, once a step (the end of its last backward pass, or
        step()/synchronize() for a step without one): publishes what is left,
        applies every rank's contributions in rank order, and sets each
        parameter's .grad to their weighted mean (None where no rank gave it
        one). Returns the meta matrix's rows. Its collectives are named so
        where a rank is in another (sft.allreduce() on some ranks only)."""
        with self.job.calls_named(_batchnorm.TRAINING_CALLS):
            return self._reduce()

    def _reduce(self):
        job = self.job
        t_reduce = time.time()
        if self.elastic and not self.in_run and self.state == _TRAINING:
            raise _sfb.UsageError(
                "sfb.torch: an elastic job (sfb launch --elastic) trains inside "
                "sfb.torch.elastic.run, which goes on when a rank dies or one joins; "
                "see docs/torch.md, \"Elastic training\"")
        if self.batchnorms and job.world > 1:
            _batchnorm.meet(self, leaving=self.state == _LEAVING)
        self._publish_all()
        self.meta.fill(0)  # every row comes from its rank this clock
        job.publish_one(self.clock, self.meta_index, self.meta_b, self._meta_row(), 1.0)
        self.loaded = 0
        job.drain(self.clock)
        end = time.perf_counter()
        meta = self.meta.astype(np.float64)
        self._check_meta(meta)
        self.mode_ran = set()  # (the next step's forwards)
        self.step_ran, self.draw_ran = self.draw_ran, set()
        self.step_drew, self.drew, self.drew_inputs = self.drew, {}, None
        self.drew_shapes = []
        self.last_meta = meta
        self.renorms.at_reduction(self.clock, meta[:, self.n_params + 10].any())
        if meta[:, self.n_params + 12].any() and \
                all(int(q) == _TRAINING for q in meta[:, self.n_params + 1]):
            # a checkpoint loaded again (the optimizer's or the model's): the
            # model's parameters, every rank's
            self.replicas.check(self, self.steps, list(self.params), repair=False)
        if self.clock in FOREIGN_CLOCKS and job.world > 1:
            self._check_foreign()
        # the replica checks of the last step (every rank took it: _check_meta)
        states = [int(meta[q, self.n_params + 1]) for q in range(job.world)]
        self.replicas.at_reduction(self, self.attached and len(set(states)) == 1 and
                                   states[0] in (_TRAINING, _LEAVING))
        if self.clock + 1 >= NO_STEP_CLOCKS and states == [_TRAINING] * job.world and \
                not meta[:, self.n_params + 2].any():
            # (no step of the wrapped optimizer on any rank in 32 reductions:
            # the checks by the reductions, from the 32nd on)
            self.replicas.without_steps(self, self.clock + 1)
        self.most_samples = max(self.most_samples, int(meta[:, self.n_params + 6].sum()))
        waiting = int(meta[0, self.n_params + 7])
        if self.elastic and waiting and self.state == _TRAINING:
            # every rank the same step: this one is dropped, elastic.run takes them in
            raise WorldChanged("sfb.torch: step %d: %d process%s waiting to join" % (
                self.clock, waiting, "es" if waiting > 1 else ""))
        was_training, self.all_training = self.all_training, all(q == _TRAINING for q in states)
        if not self.told_unequal:
            self._tell_unequal(meta)
        if not self.told_padding:
            self._tell_padding(meta)
        if "mixing" in self.step_read and not self.told_mixing:
            self._tell_mixing()
        if "standardized" in self.step_read and not self.told_standardized:
            self._tell_standardized()
        if not self.told_detached:
            self._tell_detached(meta, states)
        if not self.told_draws and self.all_training:
            self._tell_same_draws(meta)
        if _TRAINING in states:
            self.last_trainer = states.index(_TRAINING)
            self.uneven |= _JOINED in states
        need = int(meta[:, self.n_params + 6].max())
        if need > self.max_s:  # a layer's update waited (_overflow): every rank's now
            t_over = time.time()
            self.overflow.exchange(job, self.linears, allgather_bytes)
        most = meta[:, :self.n_params].max(axis=0)  # (per parameter: 0, 1 or NONFINITE)
        present = most > 0
        total = 0.0
        for q in range(job.world):  # rank order: the same sum on every rank
            total += meta[q, self.n_params]
        inv = np.float32(1.0 / total) if total > 0 else np.float32(0.0)
        with torch.no_grad():
            for slot in self.linears:
                slot.grads(present, inv)
                slot.reset()
            self.fused_ids.clear()
            for b in self.buckets:
                b.set_grads(lambda p: present[self.param_index[id(p)]], inv)
            # (some rank's gradient of them was not finite)
            _nonfinite.nan_grads((self.params[i][1] for i in
                                  np.flatnonzero(most == _nonfinite.NONFINITE)), self.handed)
            self.nonfinite.clear()
            self.user_hooks.run(lambda p: present[self.param_index[id(p)]], job.rank)
        for slot in self.linears:
            slot.token.grad = None
        self.passes = 0
        self.weight = None
        self.losses, self.padded, self.step_read = _NO_LOSSES, _padding.NONE, {}
        self.loss_factors, self.loss_heads = [], frozenset()
        self.read_step = False
        self.synced = True
        if need > self.max_s:  # (before any replan: the same order on every rank)
            self.max_s = min(max(need, int(self.max_s * _overflow.HEADROOM)), _overflow.MOST)
            job.set_max_s(self.clock, self.max_s)
            self.grown_at = self.clock
            self.span("samples past the bound", t_over)
        self.span("reduce", t_reduce)
        self._measure(meta, end, was_training)
        self.clock += 1
        if self.clock == NO_STEP_CLOCKS and not self.steps and job.rank == 0:
            self._tell_no_step()
        job.wait(self.clock)
        return meta

    def _tell_no_step(self):
        """A warning (rank 0) when the job's first NO_STEP_CLOCKS reductions
        saw no step of the wrapped optimizer (SAM's first_step/second_step
        step a base optimizer of their own; gradients accumulated over
        reductions): the replica checks follow the reductions then."""
        warnings.warn(
            "sfb.torch: %d gradient reductions (backward passes) and no step() of the "
            "DistributedOptimizer yet, so the replica checks follow the reductions (and "
            "shutdown() compares the parameters once more). An update of the program's own "
            "(SAM's first_step and second_step, p.data.add_(p.grad, alpha=-lr) as pytorch/"
            "examples' word_language_model writes it) trains on the reduced gradients as one "
            "process would: filter this warning; if you accumulate gradients over several "
            "backward passes, backward_passes_per_step=k reduces once per k passes" %
            self.clock, stacklevel=_env._user_stacklevel())

    def _tell_unequal(self, meta):
        """A warning (rank 0, once) where the reduction does not weigh the
        ranks' gradients as one process's mean loss over the union of their
        minibatches would. Where a mean loss that _losses reads reached
        backward(), by what it divided: the weights must be proportional to
        it (each rank's targets, those it kept: ignore_index, class weights;
        elements), unless no target was dropped or weighed and some rank
        called set_samples (the program's choice: set_samples(1) keeps DDP's
        rule). Otherwise, where every rank trained and no rank called
        set_samples, by the layers' counts: minibatches of other sizes,
        except where some layer took the same count on every rank (the
        minibatch, where others took the padded tokens or a router's share).
        A loss summed over the samples is told apart (_tell_summed), one
        multiplied by the world's size is one process's sum at any sizes."""
        n = self.n_params
        chose = meta[:, n + 11].any()
        if self.step_tasks and not chose and self._tell_tasks():
            return
        if self.losses[2] == _losses.SUMMED_TIMES_WORLD:  # (one process's sum, any sizes)
            return
        if self.losses[2] == _losses.SUMMED and not chose:
            self._tell_summed()
            return
        picked = self.step_read.get("picked")
        if picked and picked[0][1]:  # (a Python sum over the samples times the world: one
            self.told_unequal = True  # process's sum at any sizes, every rank read it)
            return
        if self._tell_mean_times_world(meta):
            return
        if meta[:, n + 42].any():
            self._tell_dropped(meta)
            return
        if "summed" in self.step_read and not chose:
            self._tell_summed_term()
            return
        if "picked" in self.step_read and not chose:
            self._tell_picked()
            return
        if "shared" in self.step_read and not chose:
            self._tell_shared()
            return
        if not chose and self._tell_term_sets(meta):
            return
        if self._one_divisor(meta) or self._alike_targets(meta):
            return
        shares = meta[meta[:, n + 21] >= 0, n + 21:n + 23]
        if len(shares) and not chose and not np.allclose(shares, shares[0], rtol=1e-5,
                                                         atol=1e-7):
            # (set_samples: the program's weights, its terms per-image means averaged
            # over each rank's images, or each term's sum over its count over the ranks)
            self._tell_terms(meta)
            return
        if self._tell_factors(meta, chose) is not False:
            return
        if meta[:, n + 16].any():
            self._tell_loss_counts(meta, chose)
            return
        counts = [int(c) for c in meta[:, n + 6]]
        if not self.all_training or min(counts) == max(counts) or chose:
            return
        each = meta[:, n + META_FIXED:]
        if ((each.min(axis=0) > 0) & (each.min(axis=0) == each.max(axis=0))).any():
            return
        self.told_unequal = True
        if self.job.rank == 0:
            warnings.warn(
                "sfb.torch: at step %d the ranks' minibatches differ in size (the most samples "
                "one of their layers took: %s) and no rank called opt.set_samples(n): each "
                "rank's gradient weighs 1 (DDP's rule), where one process's mean loss over "
                "their union weighs each rank by its samples. Call opt.set_samples(n) before "
                "backward() with the count this rank's loss averages over (samples, or tokens); "
                "set_samples(1) on every rank keeps DDP's rule" %
                (self.clock, _listed(counts)),
                stacklevel=_env._user_stacklevel())

    def _tell_padding(self, meta):
        """A warning (rank 0, once) where layers whose outputs depend on how
        far a minibatch is padded (_padding) ran on sequences of other
        lengths on other ranks: one process pads the union to the longest."""
        steps = meta[:, self.n_params + 23]
        ran = steps[steps > 0]
        if not len(ran) or ran.min() == ran.max():
            return
        self.told_padding = True
        if self.job.rank != 0:
            return
        kinds = self.padded[1]
        warnings.warn(
            "sfb.torch: at step %d the ranks' sequences are padded to different lengths (%s) "
            "and %s ran on them: its outputs depend on how far a minibatch is padded (a "
            "bidirectional layer's backward direction starts in the padding; attention "
            "without a mask attends to it; a BatchNorm's statistics count the padded "
            "positions), so one process, padding the union to %d, would compute others. Pack "
            "the sequences (nn.utils.rnn.pack_padded_sequence), give attention its "
            "key_padding_mask, or pad every rank to one length" % (
                self.clock,
                _listed(steps, lambda q, v: "rank %d %s" % (q, int(v) if v else "-")),
                " and ".join(kinds) if kinds else "a layer that depends on the padding",
                int(ran.max())),
            stacklevel=_env._user_stacklevel())

    def _tell_same_draws(self, meta):
        """The first reduction where every rank trains: where every rank's
        torch generator was in the same state (one seed everywhere) and the
        model has modules that draw in training, each rank drew the same
        dropout masks for its share as the others, where one process draws
        for every sample apart: rank 0 warns once, naming those that ran (a
        dropout the model holds and does not call draws nothing: the next
        step's reduction looks again). Masks drawn by functions (F.dropout,
        bernoulli_: _modes.intercept) are named where no module drew. Where
        every dropout drew for the same tensors on every rank (a model every
        rank runs whole), one seed is one process's masks and nothing is
        said, while generators apart are warned of."""
        n = self.n_params
        drawing = [(name, m) for name, m in _modes.drawing(self.mode_modules)
                   if id(m) in self.step_ran]
        # (every rank decides alike: its own model's modules, its own draws)
        if not drawing and not self.step_drew:
            return
        self.told_draws = True
        if self.job.world == 1 or self.job.rank != 0:
            return
        same_state = (meta[:, n + 19:n + 21] == meta[0, n + 19:n + 21]).all()
        # (the tensors the masks were drawn for, the same on every rank: a model
        # every rank runs whole, a full-graph GCN taking each rank's share of the
        # nodes' losses, a mask over an embedding's rows as AWD-LSTM's; known
        # where every mask went through F.dropout's and its tensor was hashed, or
        # through a bernoulli's of a shape that holds no step's samples:
        # _modes._note). The same masks over all of them are one process's; each
        # rank's own over the first already are not.
        hashed = all(isinstance(m, (torch.nn.modules.dropout._DropoutNd,
                                    torch.nn.MultiheadAttention))
                     for _, m in drawing) and meta[:, n + 36].all()
        alike = lambda a, b: hashed and (meta[:, a:b] == meta[0, a:b]).all()
        same_inputs = alike(n + 37, n + 39) if same_state else alike(n + 39, n + 41)
        if same_state == same_inputs:
            return
        names = (["%s (%s)" % (name or "the model", type(m).__name__) for name, m in drawing] or
                 ["%s at %s" % (fn, line) if line else fn for line, fn in self.step_drew.items()])
        shown = ", ".join(names[:3]) + (" and %d more" % (len(names) - 3) if len(names) > 3
                                        else "")
        if same_inputs:
            warnings.warn(
                "sfb.torch: at step %d %s drew masks for the same tensors on every rank (a "
                "model every rank runs whole, a full-graph network taking each rank's share of "
                "the nodes' losses, a mask over a layer's rows) from generators in different "
                "states, so each rank dropped other elements, where one process draws one "
                "mask: seed every rank alike "
                "(torch.manual_seed(seed), the same on every rank) and keep their draws in "
                "step" % (self.clock, shown), stacklevel=_env._user_stacklevel())
            return
        warnings.warn(
            "sfb.torch: at step %d every rank's torch random generator was in the same state, so "
            "%s drew the same masks for each rank's share of the minibatch, where one process "
            "draws for every sample apart: seed each rank apart once the model is built and "
            "broadcast, torch.manual_seed(seed + sfb.torch.rank())" % (self.clock, shown),
            stacklevel=_env._user_stacklevel())

    def unread(self):
        """The kinds of _losses.read_root still to look for: not warned of
        yet, nor found in this step (but a task's mean: every pass's);
        rank 0's, and every rank's Python sums
        over the samples (times the world: no warning of a mean times it,
        the same on every rank) and factors without gradient (compared
        across the ranks: _tell_detached). None
        but at the first READ_ALL steps and every READ_EVERY-th."""
        if self.clock >= READ_ALL and self.clock % READ_EVERY and not self.read_next:
            return []  # (every rank reads at the same steps: _tell_detached compares them)
        kinds = (("task", self.told_unequal), ("summed", self.told_unequal),
                 ("shared", self.told_unequal), ("mixing", self.told_mixing),
                 ("standardized", self.told_standardized), ("picked", self.told_unequal),
                 ("world", self.told_unequal),
                 ("detached", self.told_detached))[0 if self.job.rank == 0 else 5:]
        return [k for k, told in kinds if not told and (k == "task" or k not in self.step_read)]

    def _tell_detached(self, meta, states):
        """Where rank 0's loss multiplies a statistic over the samples by a
        tensor without gradient (_losses.detached) and a training rank's
        differs from it: computed from each rank's own samples (an MoE's
        fraction of the tokens each expert took), where one process
        computes it once over the union. Every rank decides alike from the
        meta rows; rank 0 warns once."""
        n = self.n_params
        found = [q for q in range(self.job.world) if states[q] == _TRAINING and meta[q, n + 27]]
        if 0 not in found or all((meta[q, n + 28:n + 30] == meta[0, n + 28:n + 30]).all()
                                 for q in found):
            return
        self.told_detached = True
        if self.job.rank != 0:
            return
        (what, _), line = self.step_read["detached"]
        warnings.warn(
            "sfb.torch: at step %d the loss given to backward() at %s multiplies %s by a tensor "
            "without gradient that differs from rank to rank (computed from each rank's own "
            "samples, as an MoE's fraction of the tokens each expert took), where one process "
            "computes it once over the union of the ranks' minibatches. Compute it over the "
            "union before the product: sfb.torch.allreduce(counts, op=\"sum\") of the counts it "
            "comes from (the same bits on every rank; its mean over equal minibatches), or "
            "from the rows gathered by sfb.torch.allgather" % (
                self.clock, line, what),
            stacklevel=_env._user_stacklevel())

    def _tell_mixing(self):
        """Rank 0's loss combines the samples of its own minibatch
        (_losses.mixing): one process combines every sample of the union."""
        self.told_mixing = True
        what, line = self.step_read["mixing"]
        warnings.warn(
            "sfb.torch: at step %d the loss given to backward() at %s combines the samples of "
            "this rank's minibatch (%s), so it is no mean of per-sample terms: one process "
            "computes it over the union of the ranks' minibatches, each rank here over its own. "
            "Gather every rank's rows first (sfb.torch.allgather, differentiable: this rank's "
            "rows against the gathered ones), as torch.distributed.nn.all_gather would under "
            "DDP, or make the loss a mean over the samples (rows that are the same on every "
            "rank, negatives drawn alike for the whole batch, a full graph every rank runs "
            "whole, are no samples: gather none of them, and filter this warning)" %
            (self.clock, line, what),
            stacklevel=_env._user_stacklevel())

    def _tell_standardized(self):
        """Rank 0's loss holds a tensor without gradient normalized over its
        own samples (_losses.standardized): one process normalizes over the
        union of the ranks' minibatches."""
        self.told_standardized = True
        (what, how), line = self.step_read["standardized"]
        fix = ("take the weights' sum over the ranks, w / sfb.torch.allreduce(w.sum(), "
               "op=\"sum\"), and multiply the loss by sfb.torch.size()"
               if how == _losses._WEIGHTS else
               "take the moments over the ranks: n = sfb.torch.allreduce(torch.tensor("
               "float(len(a))), op=\"sum\"), mean = sfb.torch.allreduce(a.sum(), op=\"sum\") "
               "/ n, var = sfb.torch.allreduce(((a - mean) ** 2).sum(), op=\"sum\") / (n - 1)")
        warnings.warn(
            "sfb.torch: at step %d the loss given to backward() at %s has %s without gradient "
            "normalized over this rank's minibatch (%s over its samples: PPO's advantages, "
            "(adv - adv.mean()) / adv.std(); targets standardized per batch; per-sample "
            "weights w / w.sum()), where one process normalizes over the union of the ranks' "
            "minibatches: %s. Where the set normalized lies within one rank (one episode's "
            "returns, one prompt's completions), it is one process's: filter this warning" %
            (self.clock, line, what, how, fix), stacklevel=_env._user_stacklevel())

    def _tell_summed_term(self):
        """_tell_unequal where rank 0's loss adds a term summed over the
        samples to others (_losses.summed_term) and no rank called
        set_samples: the ranks' mean holds 1/world of one process's
        gradient of that term."""
        self.told_unequal = True
        term, line = self.step_read["summed"]
        warnings.warn(
            "sfb.torch: at step %d the loss given to backward() at %s adds a term summed over "
            "the samples (%s) to the others: one process's gradient of that sum over the union "
            "of the ranks' minibatches is the sum of the ranks' gradients of it, %d times what "
            ".grad holds (the ranks' mean, DDP's rule), while the other terms are one "
            "process's. Multiply that term by sfb.torch.size(), or average it over the samples "
            "(divide it by their count); set_samples(1) on every rank keeps DDP's rule "
            "without this warning" % (self.clock, line, term, self.job.world),
            stacklevel=_env._user_stacklevel())

    def _tell_tasks(self):
        """_tell_unequal where the backward() passes of one optimizer step
        each gave rank 0's one task's mean loss (_losses.task_mean), rows
        apart of the same targets, undivided: a sum over the tasks across
        the passes, whose gradient over the union is the ranks' sum. True
        where it warned."""
        tasks = [t for t, _ in self.step_tasks]
        if len(tasks) < 2 or len(set(t[0] for t in tasks)) != 1 or \
                len(set(t[1] for t in tasks)) != len(tasks) or \
                any(abs(t[2] - 1.0) > 1e-6 for t in tasks):
            return False
        self.told_unequal = True
        warnings.warn(
            "sfb.torch: at step %d the backward() passes of one optimizer step (at %s) each "
            "give one task's mean loss, one row of the same targets each (a meta-batch's "
            "y_qry[i], as higher's MAML loop calls backward() per task), summed into .grad: a "
            "sum over the tasks, so one process's gradient over the union of the ranks' tasks "
            "is the sum of the ranks' gradients, %d times the mean that .grad holds (DDP's "
            "rule). Divide each task's loss by the number of tasks (a mean, with "
            "opt.set_samples(tasks) where their number differs by rank) or multiply it by "
            "sfb.torch.size(); set_samples(1) on every rank keeps DDP's rule without this "
            "warning" % (self.clock, self.step_tasks[-1][1], self.job.world),
            stacklevel=_env._user_stacklevel())
        return True

    def _tell_picked(self):
        """_tell_unequal where rank 0's loss sums the losses of forwards of
        one sample (or task) each (_losses.picked_sum), and no
        rank called set_samples: a sum over the samples, whose gradient over
        the union is the ranks' sum."""
        self.told_unequal = True
        if self.job.rank != 0:
            return
        (k, _), line = self.step_read["picked"]
        warnings.warn(
            "sfb.torch: at step %d the loss given to backward() at %s sums the losses of %d "
            "forwards, one sample each (model(x[i:i + 1]), a 1-D state) or one row of the "
            "same targets each (a task's y_qry[i]), as a Python loop over the minibatch does: "
            "a sum over the samples, so one process's gradient over the union of the ranks' "
            "minibatches is the sum of the ranks' gradients, %d times the mean that .grad "
            "holds (DDP's rule). Average the terms (torch.stack(terms).mean(), with "
            "opt.set_samples(len(terms)) where their number differs by rank) or multiply the "
            "sum by sfb.torch.size(); set_samples(1) on every rank keeps DDP's rule without "
            "this warning (forwards of one sample's views, not of samples, are one process's: "
            "filter it)" % (self.clock, line, k, self.job.world),
            stacklevel=_env._user_stacklevel())

    def _tell_summed(self):
        """_tell_unequal where the loss backward() got sums over the samples
        (_losses.of_root) and no rank called set_samples: one process's
        gradient of a sum over the union is the ranks' sum, world times
        their mean."""
        self.told_unequal = True
        if self.job.rank != 0:
            return
        P = self.job.world
        warnings.warn(
            "sfb.torch: at step %d the loss %s is a sum over the samples (reduction=\"sum\", "
            ".sum()): one process's gradient of a sum over the union of the ranks' minibatches "
            "is the sum of the ranks' gradients, %d times the mean that .grad holds (DDP's "
            "rule). Multiply the loss by sfb.torch.size() (or average it: a mean, with "
            "opt.set_samples(n)); set_samples(1) on every rank keeps DDP's rule without this "
            "warning (.grad rescaled before step(), as fairseq's multiply_grads(size() / "
            "all ranks' tokens), is right with it)" % (self.clock, self.losses[3], P),
            stacklevel=_env._user_stacklevel())

    def _tell_dropped(self, meta):
        """_tell_unequal where a rank called set_samples(0) while its loss
        divides by a count (a sum over all anchors divided by
        num_pos.clamp(min=1), a rank without positives): its gradient is
        left out of the reduction, where one process's loss over the union
        counts its terms."""
        self.told_unequal = True
        if self.job.rank != 0:
            return
        n = self.n_params
        ranks = [q for q in range(self.job.world) if meta[q, n + 42]]
        warnings.warn(
            "sfb.torch: at step %d rank%s %s called set_samples(0) while %s loss divides by "
            "%s: %s gradient is left out of the reduction, where one process's loss over the "
            "union of the ranks' minibatches keeps its terms (RetinaNet's focal loss of the "
            "negatives over num_pos.clamp(min=1) on a rank without positives). Where a rank's "
            "count can be 0 while its loss is not, no weight per rank is one process's: divide "
            "the loss's sum by sfb.torch.allreduce(count, op=\"sum\") and multiply it by "
            "sfb.torch.size(), with set_samples(1) on every rank (or none)" % (
                self.clock, "s" if len(ranks) > 1 else "", ", ".join(map(str, ranks)),
                "their" if len(ranks) > 1 else "its",
                _listed([float(meta[q, n + 15]) for q in ranks],
                        lambda i, v: "%s (rank %d)" % (_num(v), ranks[i])),
                "their" if len(ranks) > 1 else "its"),
            stacklevel=_env._user_stacklevel())

    def _per_target(self, weight):
        """(least, most) of what a target of the step's mean losses weighs in
        the reduction, this rank's weight times each term's factor over its
        divisor ((0, 0): none): where every rank's are one number, the
        reduction is a mean over every target of the union, weighed alike
        (tasks of a meta-batch as many as each rank's data gives, each a
        mean over its own targets, their mean weighed by set_samples)."""
        each = [f / d for _, f, d in self.loss_factors if d > 0]
        if not each or weight <= 0:
            return 0.0, 0.0
        return weight * min(each), weight * max(each)

    def _alike_targets(self, meta):
        """Whether every target of every rank's losses weighs alike in the
        reduction (_per_target): one mean over the union's targets."""
        n = self.n_params
        has = (meta[:, n + 15] > 0) & (meta[:, n] > 0)
        each = meta[has, n + 45:n + 47]
        return bool(has.sum() > 1 and (each > 0).all() and
                    np.allclose(each, each[0, 0], rtol=1e-5, atol=0.0))

    def _own_mean_scale(self):
        """The number the step's losses are multiplied by (times the passes
        per step: a micro-batch's loss divided by them) where every one is
        one of torch's means, each over this rank's own targets, all by the
        same number; else 0.0. Micro-batches' losses not divided by the
        passes are unknown (0.0): the program may scale .grad after them
        (learn2learn's meta-batch: p.grad *= 1 / tasks), which the loss
        does not show."""
        raw = [f for how, f, _ in self.loss_factors if how != _losses.BY_HAND]
        fs = [f * self.passes_per_step for f in raw]
        if not fs or len(fs) != len(self.loss_factors) or (
                self.passes_per_step > 1 and all(abs(f - 1.0) < 1e-6 for f in raw)):
            return 0.0
        if "world" in self.step_read:  # (multiplied by the world's size at the top: a
            # mean of terms times it, (ce1 + ce2) / 2 * sfb.torch.size())
            return float(self.job.world)
        if any(abs(f - fs[0]) > 1e-6 * abs(fs[0]) for f in fs):
            return 0.0
        return fs[0]

    def _tell_mean_times_world(self, meta):
        """_tell_unequal where every rank's losses are torch's means over its
        own targets multiplied by the world's size (_own_mean_scale): one
        process's size() is 1, and the reduction already averages the ranks'
        means, so .grad is world times one process's. A sum divided by a
        count over all ranks and multiplied by the size (HF's, fairseq's) is
        a mean by hand: not this. True where it warned (rank 0) or would
        have (the same on every rank: the meta row's)."""
        n, P = self.n_params, self.job.world
        has = meta[:, n + 15] > 0
        if P < 2 or not has.any() or not np.allclose(meta[has, n + 41], P, rtol=1e-5, atol=0.0):
            return False
        self.told_unequal = True
        if self.job.rank == 0:
            warnings.warn(
                "sfb.torch: at step %d the loss given to backward() is a mean (%s, over this "
                "rank's own targets) multiplied by %d, the world's size: .grad already holds "
                "the mean over every rank's samples (DDP's rule), so it is %d times one "
                "process's, whose size() is 1. A mean needs no scaling; multiplying by "
                "sfb.torch.size() is for a sum divided by a count over all ranks (HF's "
                "sum / num_items_in_batch); a loss weight that only happens to equal the world's "
                "size is one process's too" % (self.clock, self.losses[3] or "torch's", P, P),
                stacklevel=_env._user_stacklevel())
        return True

    def _tell_shared(self):
        """_tell_unequal where rank 0's loss divides by a count summed over
        the ranks (_losses.shared_divisor) and no rank called set_samples:
        one process's gradient of that mean is the ranks' sum, world times
        their mean."""
        self.told_unequal = True
        if self.job.rank != 0:
            return
        (count, at), line = self.step_read["shared"]
        warnings.warn(
            "sfb.torch: at step %d the loss given to backward() at %s divides by %s, a count "
            "summed over the ranks (sfb.torch.allreduce(op=\"sum\")%s): each rank's loss is "
            "its share of one process's mean over the union of the ranks' minibatches, whose "
            "gradient is the sum of the ranks' gradients, %d times the mean that .grad holds "
            "(DDP's rule). Multiply the loss by sfb.torch.size() (as with DDP), or divide by "
            "this rank's own count (with opt.set_samples(n) where the ranks' counts differ); "
            "set_samples(1) on every rank keeps DDP's rule without this warning" %
            (self.clock, line, _num(count), " at %s" % at if at else "", self.job.world),
            stacklevel=_env._user_stacklevel())

    def _one_divisor(self, meta):
        """Whether every term of every rank's losses divides by one number
        and is multiplied by the world's size, and the reduction weighs the
        ranks alike: HF's sum / num_items_in_batch * world over micro-batches
        as many as each rank's data gives. The ranks' mean is then one sum
        over their union divided by one count, one process's, however many
        terms each rank's loss has. (Means over each micro-batch's own count,
        not so scaled, stay terms: the terms' warning.)"""
        n = self.n_params
        has = meta[:, n + 15] > 0
        if has.sum() < 2:
            return False
        common, scale, w = meta[has, n + 35], meta[has, n + 30], meta[has, n]
        return bool(common[0] > 0 and np.allclose(common, common[0], rtol=1e-5, atol=0.0) and
                    np.allclose(scale, self.job.world, rtol=1e-5, atol=0.0) and
                    np.allclose(w, w[0], rtol=1e-5, atol=0.0))

    def _tell_term_sets(self, meta):
        """_tell_unequal where the ranks' losses are made of other terms (a
        task's mean only where a rank's share holds that task, an exit's
        only where samples reached it): one process adds each term's mean
        over the union, the reduction averages each rank's own sum, so a
        term some ranks lack weighs less. True where it warned (rank 0) or
        would have: the ranks whose losses have terms compare the sets of
        their sites (the meta row's)."""
        n = self.n_params
        has = meta[:, n + 15] > 0
        crcs = meta[has, n + 47:n + 49]
        if len(crcs) < 2 or (crcs == crcs[0]).all():
            return False
        self.told_unequal = True
        if self.job.rank != 0:
            return True
        apart = [q for q in range(self.job.world)
                 if has[q] and (meta[q, n + 47:n + 49] != meta[0, n + 47:n + 49]).any()]
        warnings.warn(
            "sfb.torch: at step %d the ranks' losses are made of different terms: rank 0's of "
            "%s, rank%s %s of others (a term only where a rank's minibatch holds its task, its "
            "class or its exit). One process adds each term's mean over the union of the ranks' "
            "minibatches, while the reduction averages each rank's own sum of terms, so a term "
            "some ranks lack weighs less than one process's. Divide each term's sum by its "
            "count over all ranks (sfb.torch.allreduce of the counts, op=\"sum\"; a term a rank "
            "lacks adds 0), multiply the loss by sfb.torch.size() and call opt.set_samples(1) "
            "on every rank" % (self.clock, ", ".join(_losses.term_sites(self.losses[4],
                                                               self.loss_heads)) or
                               "none", "s" if len(apart) > 1 else "",
                               ", ".join(map(str, apart))),
            stacklevel=_env._user_stacklevel())
        return True

    def _tell_terms(self, meta):
        """_tell_unequal where the loss's terms (mean losses of other calls
        added in one step) divide by counts not in proportion from rank to
        rank: no one weight per rank gives one process's mean of each."""
        self.told_unequal = True
        if self.job.rank != 0:
            return
        n, terms = self.n_params, self.losses[4]
        d = meta[:, n + 15].astype(np.float64)
        first = np.where(meta[:, n + 21] >= 0, meta[:, n + 21] * d, np.nan)
        sites = _losses.term_sites(terms)
        if len(sites) == 1 and len(terms) > 1:  # (one line called in a loop: a decoder's steps)
            what = "%s, each a mean of its own: one divides by %s, the other%s by %s" % (
                sites[0], _listed(first), " %d" % (len(terms) - 1) if len(terms) > 2 else "",
                _listed(d - first))
        else:
            others = _losses.term_sites(terms[1:])
            what = "%s divides by %s, the other term%s (%s) by %s" % (
                terms[0][0] if terms else "the first", _listed(first),
                "s" if len(terms) > 2 else "", ", ".join(others) or "?", _listed(d - first))
        warnings.warn(
            "sfb.torch: at step %d the loss's terms average over counts that are not in "
            "proportion from rank to rank: %s. One weight per rank (opt.set_samples) gives one "
            "process's mean of one of them only: divide each term's sum by its count over all "
            "ranks (sfb.torch.allreduce of the counts, op=\"sum\") and multiply the loss by "
            "sfb.torch.size(), with opt.set_samples(1) on every rank. Terms alike, as many as "
            "each rank's data gives and averaged (a meta-batch's tasks, each a mean over its own "
            "targets): opt.set_samples(their number) weighs them as one process" %
            (self.clock, what),
            stacklevel=_env._user_stacklevel())

    def _tell_factors(self, meta, chose):
        """_tell_unequal where the ranks' mean losses enter the loss
        multiplied by numbers that differ from rank to rank (ce *
        ce.detach(), a batch accuracy, task weights from each rank's own
        losses) and so weigh the ranks otherwise than one process's mean
        over the union: their divisors over those numbers not in proportion
        to the reduction's weights. A weight per rank in proportion to its
        samples is the program's (one process's mean): no warning. True
        where it warned (rank 0) or would have; None where rank 0 reads the
        loss's root in the next step first (its _tell_mixing: none this
        step); False where the numbers are alike or in proportion."""
        n = self.n_params
        has = meta[:, n + 16] > 0
        e = meta[has, n + 30].astype(np.float64)
        if len(e) < 2 or np.allclose(e, e[0], rtol=1e-5, atol=0.0):
            return False
        d, w = meta[has, n + 15].astype(np.float64) / e, meta[has, n].astype(np.float64)
        if np.allclose(w * d.sum(), d * w.sum(), rtol=1e-5, atol=0.0):
            return False
        # (a function of the mean, not linear, sqrt(mse): its gradient is such
        # a number, and _tell_mixing says why, from rank 0's reading of the
        # loss's root: where this step's was not read, the next step's is)
        if self.job.rank == 0 and not self.told_mixing and not self.read_step:
            self.read_next = True
            return None
        self.told_unequal = True
        if self.job.rank == 0 and "mixing" not in self.step_read:
            site, terms = self.losses[3] or "given to backward()", self.losses[4]
            if len(terms) > 1:  # (the terms' numbers apart are not known here)
                site = "given to backward() multiplies its means %s each" % ", ".join(
                    t[0] for t in terms)
                said = "numbers without gradient that differ from rank to rank"
            else:
                site = ("%s multiplies its mean" % site if site.startswith("given to") else
                        "given to backward() multiplies its mean %s" % site)
                said = "a number without gradient that differs from rank to rank (%s)" % _listed(
                    np.where(has, meta[:, n + 30], np.nan))
            warnings.warn(
                "sfb.torch: at step %d the loss %s by "
                "%s, computed from "
                "each rank's own minibatch (its loss, its accuracy, task weights from its own "
                "losses) or drawn by each rank (mixup's lambda), where one process computes or "
                "draws it once for the union of the ranks' minibatches: .grad is not one "
                "process's. Compute it from every rank's values (sfb.torch.allreduce of what it "
                "comes from), or draw it alike on every rank (a generator seeded alike, "
                "sfb.torch.broadcast_object): the same number on every rank%s" %
                (self.clock, site, said,
                 "" if chose else "; a weight per rank on purpose in proportion to its "
                 "samples (n_r / mean n) is one process's mean, and is not warned of"),
                stacklevel=_env._user_stacklevel())
        return True

    def _tell_loss_counts(self, meta, chose):
        """_tell_unequal where the losses' divisors are known (each over the
        number it is multiplied by: _tell_factors)."""
        n = self.n_params
        d, w = meta[:, n + 15].astype(np.float64), meta[:, n].astype(np.float64)
        dropped = (d != meta[:, n + 16]).any()
        folded = d / np.where(meta[:, n + 30] != 0, meta[:, n + 30], 1.0)
        if np.allclose(w * folded.sum(), folded * w.sum(), rtol=1e-5, atol=0.0) or (
                chose and not dropped):
            return
        self.told_unequal = True
        if self.job.rank != 0:
            return
        weights = _listed(w, lambda q, v: _num(v))
        _, _, how, site, terms, _ = self.losses
        if len(terms) > 1:
            site = "%s and %d more term%s" % (site, len(terms) - 1, "s" if len(terms) > 2 else "")
        if how == _losses.BY_HAND:
            warnings.warn(
                "sfb.torch: at step %d the ranks' losses average over different counts: the "
                "loss %s divides by %s (a mean by hand), while the reduction weighs the ranks "
                "%s%s, so .grad is not one process's mean over all %s. Call opt.set_samples(n) "
                "before backward() with what this rank's loss divides by (its samples for a "
                "mean over them; int(mask.sum()) for (loss * mask).sum() / mask.sum() or "
                "loss[mask].mean()). A divisor that only follows such a count (a running "
                "average of each rank's counts: detectron2's EMA loss normalizer) has none to "
                "give: one process's follows the union's counts, so keep it over "
                "sfb.torch.allreduce(count, op=\"sum\") and multiply the loss by "
                "sfb.torch.size()" %
                (self.clock, site, _listed(d), weights,
                 "" if chose else " (no rank called set_samples)", _num(d.sum())),
                stacklevel=_env._user_stacklevel())
            return
        warnings.warn(
            "sfb.torch: at step %d the ranks' losses average over different counts: a mean "
            "%s divides by%s %s of %s targets%s, while the reduction "
            "weighs the ranks %s%s, so .grad is not one process's mean over all %s. Call "
            "opt.set_samples(n) before backward() with the count this rank's loss divides by: "
            "its targets (those not ignore_index: int((target != ignore_index).sum()); with "
            "class weights their sum over them)%s" %
            (self.clock, site or "loss",
             " (the targets it keeps: %s)" % how if how else "",
             _listed(d), _num(float(meta[:, n + 16].sum())),
             " (those it drops too)" if how else "", weights,
             "" if chose else " (no rank called set_samples)", _num(d.sum()),
             "" if dropped else "; set_samples(1) on every rank keeps DDP's rule"),
            stacklevel=_env._user_stacklevel())

    def _measure(self, meta, end, was_training):
        """The step's time and samples for the next meta row; sync="auto":
        the measured choice's next move (the same on every rank)."""
        self.step_ms = (end - self.last_end) * 1e3 if self.last_end is not None else 0.0
        self.last_end = end
        self.step_samples = 0
        if self.trials is None:
            return
        n = self.n_params
        # (the step after a bound's growth paid for it: not a measure)
        to = self.trials.observe(self.clock, float(meta[:, n + 5].max()),
                                 float(meta[:, n + 6].max()), was_training and
                                 self.all_training and self.grown_at != self.clock - 2)
        if to is not None:
            self.job.replan(self.clock, to)

    def present_of(self, p, present):
        """Some rank gave p a gradient in this clock (the meta matrix)."""
        return bool(present[self.param_index[id(p)]])

    def kept_grad(self, p):
        """p's dense .grad tensor, kept across steps (handed out as p.grad
        when it has none)."""
        keep = self.kept.get(id(p))
        if keep is None:
            keep = self.kept[id(p)] = torch.empty(p.shape, dtype=torch.float32)
        self.handed[id(p)] = keep
        return keep

    def set_grad(self, p, src, inv, replace=False):
        """p.grad = inv * src (its sum of every rank's), added to a .grad
        already there (not zeroed since: as one process accumulates; a tied
        weight's other use), or in its place (replace: src summed the .grad
        every rank had, a fused slot's)."""
        if replace and p.grad is not None:
            torch.mul(src, float(inv), out=p.grad)
            self.handed[id(p)] = p.grad
        elif p.grad is None:
            keep = self.kept_grad(p)
            torch.mul(src, float(inv), out=keep)
            p.grad = keep
        elif p.grad.is_sparse:
            p.grad = p.grad + src * float(inv)
            self.handed[id(p)] = p.grad
        else:
            p.grad.add_(src, alpha=float(inv))
            self.handed[id(p)] = p.grad

    def _check_loss_settings(self, meta, states):
        """The training ranks whose step read the settings of as many losses
        (_losses.crc: class weights, ignore_index, label_smoothing) must
        have read the same ones: one process has one loss. Else fail on
        every rank, naming the losses and which ranks have which."""
        n, me = self.n_params, self.job.rank
        if self.state != _TRAINING or not meta[me, n + 24]:
            return
        alike = [q for q in range(self.job.world) if states[q] == _TRAINING and
                 meta[q, n + 24] == meta[me, n + 24]]
        cols = [n + 25, n + 26, n + 31, n + 32, n + 33, n + 34]  # (settings_crc's fields)
        crcs = {q: tuple(meta[q, cols]) for q in alike}
        if len(set(crcs.values())) < 2:
            return
        groups = {}
        for q in alike:
            groups.setdefault(crcs[q], []).append(q)
        sides = sorted(groups.values())
        ranks = lambda g: "rank%s %s" % ("s" if len(g) > 1 else "", ", ".join(map(str, g)))
        sites = [at for at, _, c in self.losses[4] if c]
        where = ("on %s than on %s" % (ranks(sides[1]), ranks(sides[0])) if len(sides) == 2
                 else "from rank to rank (alike: %s)" % "; ".join(ranks(g) for g in sides))
        fields = [what for k, what in enumerate(_losses.SETTINGS)
                  if len({crcs[q][2 * k:2 * k + 2] for q in alike}) > 1]
        raise _sfb.MismatchError(
            -(4096 + 9), "sfb.torch: at step %d the ranks' losses differ: %s %s other %s %s. "
            "One process has one loss: give every rank the same%s" % (
                self.clock, " and ".join(sites), "has" if len(sites) == 1 else "have",
                " and ".join(fields), where,
                " (class weights counted over the whole dataset; weights from each "
                "minibatch's label counts: count over every rank's, "
                "sft.allreduce(counts, op=\"sum\"), as one process counts the union's)"
                if fields[:1] == [_losses.SETTINGS[0]] else
                " (an ignore_index from each rank's own sequence length, a span's "
                "positions: one number, and the padded positions' logits masked, "
                "masked_fill(pad, -1e4), as the rank's padding enters its softmax)"
                if _losses.SETTINGS[1] in fields else ""),
            rank=sides[1][0] if sides[0][0] == me else sides[0][0])

    def _check_stepped(self, meta, states):
        """Several optimizers: every training rank stepped the same ones in
        the same order (as many steps in all is not enough: one rank's
        value-function steps would pair with another's policy steps)."""
        job, n = self.job, self.n_params
        for q in range(job.world):
            if states[q] == _TRAINING and self.state == _TRAINING and \
                    meta[q, n + 43] != meta[job.rank, n + 43]:
                def named(k):
                    k = int(k) - 1
                    return "optimizer %d of the job (%s)" % (k, type(self.opts[k]).__name__) \
                        if 0 <= k < len(self.opts) else "none yet"
                raise _sfb.MismatchError(
                    -(4096 + 9), "sfb.torch: at step %d the ranks stepped other optimizers: "
                    "rank %d last stepped %s, rank %d %s, after as many steps in all "
                    "(every rank must step the job's optimizers alike, in the same order: a "
                    "phase one rank ends early on its own numbers, PPO's early stop on its own "
                    "KL, pairs its next backward() with the others'; decide it on every "
                    "rank's values: sfb.torch.allreduce)" % (
                        self.clock, job.rank, named(meta[job.rank, n + 44]), q,
                        named(meta[q, n + 44])), rank=q)

    def _check_meta(self, meta):
        """Every rank in this clock: the same state (or joined), the same
        optimizer steps and hyperparameters; else fail naming both."""
        job, n = self.job, self.n_params
        states = [int(meta[q, n + 1]) for q in range(job.world)]
        leaving = [q for q, s in enumerate(states) if s == _LEAVING]
        if leaving and len(leaving) < job.world:
            others = [q for q, s in enumerate(states) if s != _LEAVING]
            q = leaving[0] if self.state != _LEAVING else others[0]
            raise _sfb.PeerError(
                -(4096 + 5), "sfb.torch: at step %d rank%s %s called shutdown() while rank%s %s "
                "%s still training or joined (%s)" %
                (self.clock, "s" if len(leaving) > 1 else "", ", ".join(map(str, leaving)),
                 "s" if len(others) > 1 else "", ", ".join(map(str, others)),
                 "were" if len(others) > 1 else "was", _JOIN_HINT), rank=q)
        self._check_loads(meta, states)
        # every rank leaving (shutdown() after the loop): the steps taken too
        # (a rank that skipped the last step), not settings a scheduler may
        # have moved after it
        done = len(leaving) == job.world
        for col, what in ((n + 2, "optimizer steps taken"), (n + 3, "optimizer settings"),
                          (n + 4, "optimizer settings")):
            for q in range(job.world):  # among the ranks training (a joined one lags)
                if meta[q, col] != meta[job.rank, col] and (
                        states[q] == _TRAINING and self.state == _TRAINING or
                        done and col == n + 2):
                    mine, theirs = meta[job.rank, col], meta[q, col]
                    if col != n + 2:
                        self._name_hyper(states, q)
                        mine = int(meta[job.rank, n + 3]) | int(meta[job.rank, n + 4]) << 16
                        theirs = int(meta[q, n + 3]) | int(meta[q, n + 4]) << 16
                        mine, theirs = "crc32 %08x" % mine, "crc32 %08x" % theirs
                    else:
                        mine, theirs = int(mine), int(theirs)
                    raise _sfb.MismatchError(
                        -(4096 + 9), "sfb.torch: at step %d the ranks' %s differ: rank %d has "
                        "%s, rank %d has %s (every rank must step the optimizer and its "
                        "schedulers alike%s)" % (
                            self.clock, what, job.rank, mine, q, theirs,
                            "" if col != n + 2 else
                            ("; with %d DistributedOptimizers, every one of them on every rank: "
                             "one whose parameters got no gradient (a task's head, its task "
                             "not in this rank's share) changes nothing when stepped" %
                             len(self.opts) if len(self.opts) > 1 else "") +
                            ", after as many backward passes: each backward() is a reduction "
                            "of every rank's, so micro-batches accumulated between steps "
                            "must be as many on every rank, backward_passes_per_step=k; a "
                            "backward() on some ranks only (an evaluation's input gradient "
                            "on rank 0) pairs with the others' training pass: "
                            "torch.autograd.grad(loss, x) there reduces nothing"),
                        rank=q)
        self._check_stepped(meta, states)
        for q in range(job.world):
            if states[q] == _TRAINING and self.state == _TRAINING and \
                    (meta[q, n + 8:n + 10] != meta[job.rank, n + 8:n + 10]).any():
                self._name_frozen(states)
                raise _sfb.MismatchError(
                    -(4096 + 9), "sfb.torch: at step %d the ranks' frozen parameters "
                    "(requires_grad) differ: rank %d's and rank %d's (every rank must freeze "
                    "and unfreeze the same parameters at the same step)" %
                    (self.clock, job.rank, q), rank=q)
        self._check_loss_settings(meta, states)
        for q in range(job.world):
            if states[q] == _TRAINING and self.state == _TRAINING and \
                    (meta[q, n + 17:n + 19] != meta[job.rank, n + 17:n + 19]).any():
                texts = None
                if all(s == _TRAINING for s in states):  # (every rank is here)
                    texts = _allgather_text(job, _modes.eval_text(self.mode_modules,
                                                                  self.mode_ran))
                why, on, off = _modes.mismatch(self.mode_modules, texts, self.clock)
                if why is None:  # (they differ in modules no rank ran: an aux head's)
                    break
                raise _sfb.MismatchError(-(4096 + 9), "sfb.torch: " + why,
                                         rank=q if on is None else
                                         off[0] if job.rank in on else on[0])

    def _check_loads(self, meta, states):
        """An optimizer state loaded after the first step (a run going back
        to a checkpoint): every rank training loaded one, the same."""
        n, P = self.n_params, self.job.world
        training = [q for q in range(P) if states[q] == _TRAINING]
        loads = [q for q in training if int(meta[q, n + 12]) & LOADED_OPTIMIZER]
        if not loads or self.state != _TRAINING:
            return

        def crc(q):
            return int(meta[q, n + 13]) | int(meta[q, n + 14]) << 16
        apart = [q for q in training
                 if not int(meta[q, n + 12]) & LOADED_OPTIMIZER or crc(q) != crc(loads[0])]
        if apart:
            q = apart[0]
            raise _sfb.MismatchError(
                -(4096 + 9), "sfb.torch: before step %d rank %d loaded an optimizer state "
                "(load_state_dict: crc32 %08x) and rank %d %s: every rank must load the same "
                "checkpoint, the model's and the optimizer's" % (
                    self.clock, loads[0], crc(loads[0]), q,
                    "another (crc32 %08x)" % crc(q) if int(meta[q, n + 12]) & LOADED_OPTIMIZER
                    else "did not load one"),
                rank=q)

    def _name_frozen(self, states):
        """The parameters' requires_grad differ between ranks: where every
        rank trains (every rank is here) they exchange their frozen ones and
        fail naming the first that differs and where; else returns."""
        job = self.job
        if any(s != _TRAINING for s in states):
            return
        texts = _allgather_text(job, "\n".join(n for n, p in self.params if not p.requires_grad))
        apart = _replicas.first_apart([n for n, _ in self.params], texts)
        if apart:
            n, on, off = apart
            raise _sfb.MismatchError(
                -(4096 + 9), "sfb.torch: at step %d the ranks' frozen parameters differ: "
                "%s is frozen (requires_grad False) on %s and trains on %s; one process "
                "freezes a parameter for every sample (every rank must freeze and unfreeze "
                "the same parameters at the same step: a decision from a metric needs the "
                "metric of every rank, sfb.torch.allreduce(metric), first)" %
                (self.clock, n, _replicas._ranks(on), _replicas._ranks(off)),
                rank=off[0] if job.rank in on else on[0], param=n)

    def _name_hyper(self, states, q):
        """The hyperparameters' checksums differ (rank q's from this one's):
        where every rank trains, so that every rank is here, they compare the
        values themselves and fail naming the first that differs and its
        values (job.agree's verdict); else returns (the checksums are said)."""
        if any(s != _TRAINING for s in states):
            return
        try:
            self.job.agree("".join(_hyper_lines(self.opts)[:120]))  # (agree's 128 keys)
        except _sfb.MismatchError as e:
            why = str(e)
            why = why[why.find("between ranks: ") + 15:] if "between ranks: " in why else why
            why = why.split(" (every worker of a job")[0]
            raise _sfb.MismatchError(
                -(4096 + 9), "sfb.torch: at step %d the ranks' optimizer settings differ: %s "
                "(every rank must step the optimizer and its schedulers alike; a scheduler "
                "stepped on a metric, as ReduceLROnPlateau on a validation loss, needs the "
                "metric over every rank's data: its sum and count summed over the ranks, "
                "sfb.torch.allreduce(torch.tensor([total, n]), op=\"sum\"), then total / n)" %
                (self.clock, why),
                rank=q) from None

    def synchronize(self):
        """Staleness 0: reduces now if this step has gradients not reduced
        yet (after backward() they are: a no-op). Staleness > 0: publishes."""
        if threading.get_ident() != self.thread:
            raise _sfb.UsageError("sfb.torch: step() from another thread than the one that "
                                  "made the DistributedOptimizer")
        if self.additive:
            return self._publish_additive()
        if self.synced:
            return
        if not self.grads:
            raise _sfb.UsageError(("sfb.torch: step() without backward(): no gradient since "
                                   "step %d" % (self.steps - 1) if self.steps else
                                   "sfb.torch: step() without backward(): no gradient yet") +
                                  (self._by_hand() or (
                                      "" if self.steps else
                                      " (an optimizer whose step() runs forward and backward "
                                      "itself, GSAM's: wrap the base optimizer it steps, whose "
                                      "step() comes after those passes)")))
        self._check_dense_grads()
        for slot in self.linears:
            slot.commit()
        self.reduce()

    def _apart_at_start(self):
        """The end of the first step's refusal where the ranks' parameters
        differ (collective: every rank failed that agreement): the first
        that differs, and what to do (a rank that failed first aborts the
        job with its text, which this one's allgather raises)."""
        advice = ": call sfb.torch.broadcast_parameters(model.state_dict()) before training"
        named = list(self.model.named_parameters())
        mine = _replicas.crcs(named)
        rows = [np.frombuffer(b, np.uint32) for b in self.job.allgather(mine.tobytes())]
        if any(len(r) != len(mine) for r in rows):
            return advice
        apart = np.stack(rows) != rows[0]  # (rank, parameter)
        which = np.flatnonzero(apart.any(axis=0))
        if not len(which):
            return advice
        name, q = named[which[0]][0], int(np.flatnonzero(apart[:, which[0]])[0])
        return ("; the first that differs: %s (rank 0 and rank %d differ)%s; where it was "
                "called, the first forward changed %s on some ranks (a parameter updated from "
                "each rank's own data, an EMA codebook: update it from every rank's data, by "
                "sfb.torch.allreduce, alike on every rank)" % (name, q, advice, name))

    def _by_hand(self):
        """What step() without backward() adds where a parameter's .grad was
        set by the program (torch.func's per-sample gradients, DP-SGD by
        hand): "" where none was."""
        name = next((self.names.get(id(p), "a parameter") for o in self.opts
                     for g in o.param_groups for p in g["params"]
                     if p.grad is not None and self.handed.get(id(p)) is not p.grad), None)
        if name is None:
            return ""
        return (" (%s's .grad was set otherwise: sfb.torch reduces the gradients backward() "
                "forms. Give backward() a loss that forms them: DP-SGD's per-sample clipping "
                "is each sample's loss times its clip factor, detached; a gradient the program "
                "computed by torch.autograd.grad from this rank's data (DARTS's unrolled "
                "step) is this rank's own: sfb.torch.allreduce it first, then (p * g.detach())"
                ".sum() given to backward() forms it)" % name)

    def closure(self, closure):
        """step(closure): the closure wrapped so that each call is one
        reduction and returns the ranks' weighted mean of its loss (the
        same bits on every rank: a line search decides alike)."""
        U = _sfb.UsageError
        if self.additive or self.elastic or self.passes_per_step != 1 or len(self.opts) > 1:
            raise U("sfb.torch: step(closure) needs staleness=0, backward_passes_per_step=1, "
                    "one DistributedOptimizer in the job and no elastic job (%s here)" %
                    ("staleness %d" % self.staleness if self.additive else
                     "an elastic job" if self.elastic else
                     "backward_passes_per_step %d" % self.passes_per_step
                     if self.passes_per_step != 1 else "%d optimizers" % len(self.opts)))

        def reduced():
            clock = self.clock
            with torch.enable_grad():
                loss = closure()
            if self.clock != clock + 1:
                raise U("sfb.torch: step(closure): the closure %s: each call must compute the "
                        "loss and call backward() on it once (the ranks' gradients are reduced "
                        "then) and return it" % ("called backward() %d times" %
                                                 (self.clock - clock)
                                                 if self.clock > clock else
                                                 "did not call backward()"))
            return self._mean_loss(loss)
        return reduced

    def _mean_loss(self, loss):
        """The ranks' mean of the loss each returned from its closure,
        weighted as the last reduction weighed their gradients (collective:
        every rank of the reduction is training)."""
        meta = self.last_meta
        states = meta[:, self.n_params + 1]
        if (states != _TRAINING).any():
            raise _sfb.UsageError(
                "sfb.torch: step(closure) while rank %d %s: every rank runs each call of the "
                "closure (join() gives the ranks out of data no closure to run)" %
                (int(np.argmax(states != _TRAINING)),
                 "has joined" if _JOINED in states else "leaves"))
        try:
            value = None if loss is None else float(loss)
        except (TypeError, ValueError, RuntimeError):
            raise _sfb.UsageError("sfb.torch: step(closure): the closure returned %s, not a loss "
                                  "(a number or a one-element tensor)" % type(loss).__name__)
        mine = np.array([0.0 if value is None else value, 1.0 if value is None else 0.0])
        parts = [np.frombuffer(b, np.float64) for b in self.job.allgather(mine.tobytes())]
        if any((q[1] != 0) != (value is None) for q in parts):
            raise _sfb.MismatchError(-(4096 + 9), "sfb.torch: step(closure): the closure "
                                     "returned a loss on some ranks and None on others")
        if value is None:
            return None
        total = num = 0.0
        for q, part in enumerate(parts):  # rank order: the same bits on every rank
            w = float(meta[q, self.n_params])
            if w > 0:  # (a rank of no samples: its mean loss is NaN)
                total += w
                num += w * part[0]
        mean = num / total if total > 0 else value
        return torch.tensor(mean, dtype=loss.dtype) if torch.is_tensor(loss) else mean

    def _publish_additive(self):
        if self.synced:
            return
        if not self.grads:
            raise _sfb.UsageError("sfb.torch: step() without backward(): no gradient yet")
        self._check_dense_grads()
        for _, p in self._dense_now():
            v = self.versions.get(id(p))
            now = (id(p.grad), p.grad._version) if p.grad is not None else None
            if v != now and (v is not None or now is not None):
                raise _sfb.UsageError(
                    "sfb.torch: %s's .grad changed between backward() and step() (clipping, "
                    "scaling?): at staleness %d every rank's update is applied as it comes, "
                    ".grad holds this rank's own gradient only, and a change to it would not "
                    "be the same on every rank. Use staleness=0, where .grad holds every "
                    "rank's mean after backward()" % (self.names[id(p)], self.staleness),
                    param=self.names[id(p)])
        self._publish_all()
        self.synced = True

    def check_held(self, opt):
        """step(): parameters put in opt's param_groups by hand after the
        wrapping (params.append(p), a group dict appended: add_param_group's
        refusal passed by) would train on each rank's own gradient, their
        replicas parting: refused, naming them."""
        n = (len(opt.param_groups), sum(len(g["params"]) for g in opt.param_groups))
        if self.held_counts.get(id(opt)) == n:
            return
        new = [p for g in opt.param_groups for p in g["params"] if id(p) not in self.held_ids]
        if not new:
            self.held_counts[id(opt)] = n
            return
        shown = ", ".join(self.names.get(id(p)) or "one of shape %s" % (tuple(p.shape),)
                          for p in new[:3])
        raise _sfb.UsageError(
            "sfb.torch: %s's param_groups hold %d parameter%s added after it was wrapped (%s%s: "
            "param_groups[i][\"params\"].append, a group appended by hand): sfb synchronizes "
            "the parameters the optimizer held when it was wrapped, and these would train on "
            "each rank's own gradient; give every parameter to the optimizer before wrapping "
            "it (one that must not train yet frozen with requires_grad_(False), or in a group "
            "whose lr is 0 until it does), or end the job (sft.shutdown()) and wrap a new "
            "optimizer in the next" % (type(opt).__name__, len(new), "" if len(new) == 1 else "s",
                                       shown, ", ..." if len(new) > 3 else ""))

    def end_step(self, opt=None):
        """After the optimizer's step (opt's): the next step."""
        self.step_tasks = []
        if len(self.opts) > 1 and opt is not None:
            k = next((i for i, o in enumerate(self.opts) if o is opt), -1) + 1
            self.stepped_opts = ((self.stepped_opts[0] * 31 + k) % 16777213, float(k))
        if self.additive:
            for slot in self.linears:
                slot.weight.grad = None
                if slot.bias is not None:
                    slot.bias.grad = None
                slot.reset()
                slot.token.grad = None
            for _, p in self.dense:
                p.grad = None
            for b in self.buckets:
                b.published = False
            self.clock += 1
            self.job.wait(self.clock)
            self.passes = 0
        elif self.all_training and self.attached:
            # every rank stepped alike: the replicas are the same bits
            self.replicas.after_step(self)
        if not self.additive:
            # a .grad the program put in place of ours after backward()
            # (gradient surgery: p.grad = p.grad * c) is the one the next
            # reduction adds into, as one process's backward would
            self.stepped_grads = {id(p): weakref.ref(p.grad) for slot in self.linears
                                  for p in (slot.weight, slot.bias)
                                  if p is not None and p.grad is not None}
        if len(self.opts) > 1 and not self.additive:
            # the other optimizers may step on the same reduction (.grad):
            # the step ends when the next backward pass begins (new_pass)
            self.stepped_clock = True
        else:
            self.synced = False
            self.grads = False
        self.steps += 1
        self.stepped = (self.clock, self.extra)
        self._keep_bn()

    def join_loop(self):
        """This rank is out of data: until every rank is, it takes part in
        each reduction with nothing (weight 0). Then, if ranks joined at
        different steps, every rank takes the parameters, buffers and
        optimizer state of the rank that trained last, so that the replicas
        are the job's again (whatever that rank did to its gradients)."""
        if self.additive:
            raise _sfb.UsageError("sfb.torch: join() needs staleness=0")
        if self.elastic:
            raise _sfb.UsageError("sfb.torch: join() in an elastic job: sfb.torch.elastic."
                                  "Batches gives every rank its share of every step instead")
        if self.passes or self.in_step:
            raise _sfb.UsageError("sfb.torch: join(): the block ended inside a step (backward() "
                                  "without step()); end each step before leaving the block")
        if not self.attached:
            raise _sfb.UsageError("sfb.torch: join(): this rank took no step; every rank must "
                                  "take at least one step before it joins")
        self.state = _JOINED
        joined_at = self.clock
        try:
            while True:
                try:
                    meta = self.reduce()
                except (_sfb.PeerError, _sfb.MismatchError) as e:
                    if "made different calls" not in str(e):
                        raise
                    raise type(e)(e.code, "%s; rank %d ran out of data before step %d and "
                                  "joined: inside opt.join() a rank that joined takes part "
                                  "in the training steps' reductions only, so a collective of "
                                  "the program's there (sft.allreduce() of a metric, "
                                  "barrier()) waits for it: call such collectives after the "
                                  "join block" % (e, self.job.rank, joined_at),
                                  e.rank) from None
                self.synced = False
                self._drop_grads()
                if all(int(meta[q, self.n_params + 1]) == _JOINED for q in range(self.job.world)):
                    self.extra += 1  # no rank trained in it: not a step
                    break
        finally:
            self.state = _TRAINING
        if self.uneven:
            self._adopt(self.last_trainer)
            self.uneven = False

    @property
    def in_step(self):
        """Gradients reduced that no optimizer has stepped on yet."""
        return self.synced and not self.stepped_clock

    def new_pass(self):
        """A backward pass begins (its first gradient): after an optimizer's
        step on the last reduction, a new step (several optimizers)."""
        if self.stepped_clock:
            self.synced = self.grads = self.stepped_clock = False
        try:
            self._check_held()
        except _sfb.UsageError as e:
            self.fail_in_backward(e)
        self.user_hooks.pass_begins()

    def _check_held(self):
        """The parameters of the job are float32 CPU tensors of the shapes
        they had when it was made: model.double(), .to(), a .data of another
        dtype or shape since would train on float32 gradients or the old
        layout (a float64 model on float32 sums, silently), refused."""
        f32 = torch.float32
        for n, p, shape in self.held:
            if p.dtype != f32 or p.shape != shape or p.is_cuda:
                now = "%s %s%s" % ("x".join(map(str, p.shape)) or "scalar",
                                   str(p.dtype).replace("torch.", ""),
                                   " on %s" % p.device if p.is_cuda else "")
                raise _sfb.UsageError(
                    "sfb.torch: parameter %s is %s at step %d (%s float32 when its "
                    "DistributedOptimizer was made): sfb synchronizes float32 CPU parameters of "
                    "the shapes they had then (model.double(), .to(), .data replaced since). "
                    "Change a model before wrapping its optimizer, or end the job "
                    "(sft.shutdown()) and start another (sft.init(), a new "
                    "DistributedOptimizer) for the changed model" %
                    (n, now, self.clock, "x".join(map(str, shape)) or "scalar"), param=n)

    def _drop_grads(self):
        for _, p in self.params:
            p.grad = None

    def _bn_buffers(self):
        mods = {id(m): m for m, _ in self.batchnorms.values()}
        return [b for m in mods.values()
                for b in (m.running_mean, m.running_var, m.num_batches_tracked) if b is not None]

    def _keep_bn(self):
        """An elastic job: the BatchNorm running statistics as they are now
        (after a step, or adopted), for drop_step."""
        if self.elastic:
            self.bn_kept = [b.detach().clone() for b in self._bn_buffers()]

    def _adopt(self, root, extra=None):
        """Every rank takes root's parameters, buffers, optimizer state and
        step count (collective); returns root's `extra` (picklable)."""
        with self.renorms.silenced():
            broadcast_parameters(self.model.state_dict(), root_rank=root)
        self._keep_bn()
        bases = [super(type(o), o) for o in self.opts]  # the wrapped classes', without the clock
        state = broadcast_object(([b.state_dict() for b in bases], self.steps, self.stepped,
                                  self.most_samples, extra, self.stepped_opts), root_rank=root)
        if self.job.rank != root:
            for b, st in zip(bases, state[0]):
                b.load_state_dict(st)
            self.steps, self.stepped, self.most_samples = state[1], state[2], state[3]
            self.stepped_opts = state[5]
        return state[4]

    def state_of(self, p):
        """p's state in the optimizer that holds it ({} before its first step)."""
        for o in self.opts:
            if p in o.state:
                return o.state[p]
        return {}

    def drop_step(self):
        """An elastic job's world changes: the step in flight is nobody's
        (its captures, gradients and reduction dropped), the job's matrices
        go (attached again, for the new world, at the next reduction), the
        clock is the last step's."""
        self.passes, self.synced, self.grads, self.weight = 0, False, False, None
        self.losses, self.pass_losses, self.padded = _NO_LOSSES, [], _padding.NONE
        self.loss_heads = frozenset()
        self.step_read, self.read_step = {}, False
        self.stepped_clock = False
        self.pass_hit = self.cb_queued = False
        self.state, self.dense_into, self.tl_end_fwd = _TRAINING, [], None
        for slot in self.linears:
            slot.reset()
            slot.token.grad = None
        self.fused_ids.clear()
        for _, p in self.model_params:  # (the buckets are planned again at the attach)
            p.grad = None
        if self.bn_kept is not None:  # the step's forward counted its batch: undone
            with torch.no_grad():
                for b, kept in zip(self._bn_buffers(), self.bn_kept):
                    b.copy_(kept)
        self.user_hooks.restore()
        self.attached, self.trials, self.last_end = False, None, None
        self.all_training, self.step_ms, self.step_samples = True, 0.0, 0
        self.clock, self.extra = self.stepped

    def finish(self):
        if not self.attached:
            self.job.finish(-1)
            return
        if self.additive:
            self.job.finish(self.clock - 1)
            return
        # (a step reduced and not taken is over: a loop may skip a step it
        # dislikes; a rank that skipped alone fails on the steps taken below)
        if self.passes:
            raise _sfb.UsageError("sfb.torch: shutdown() inside a step (%d of its %d backward "
                                  "passes done)" % (self.passes, self.passes_per_step))
        # a last clock in which every rank says it leaves: a rank still
        # training learns of it now, not after a timeout
        self.state = _LEAVING
        self.reduce()
        self.extra += 1
        self.replicas.at_finish(self)
        self.job.finish(self.clock - 1)


class _DistributedOptimizer:
    """Methods of the optimizer class DistributedOptimizer derives (its
    _sfb_base: the optimizer's own class)."""

    def add_param_group(self, param_group):
        """Refused (sfb.UsageError) while its job lives: sfb synchronizes
        the parameters the optimizer held when it was wrapped, and a
        parameter added later would train on this rank's gradient alone,
        its replicas parting. Once that job ended (shutdown()), the
        optimizer's own, to be wrapped again in the next (PGGAN's growing
        between phases)."""
        if _env._optimizer is not self._sfb:
            return type(self)._sfb_base.add_param_group(self, param_group)
        raise _sfb.UsageError(
            "sfb.torch: add_param_group after DistributedOptimizer was made: sfb synchronizes "
            "the parameters the optimizer held when it was wrapped, and one added now would "
            "train on each rank's own gradient; give every parameter to the optimizer before "
            "wrapping it (one that must not train yet frozen with requires_grad_(False), or in "
            "a group whose lr is 0 until it does)")

    @_abort_on_error
    def synchronize(self):
        """At staleness 0 the gradients are reduced when backward() returns
        (.grad holds every rank's mean): this is a no-op then, and reduces
        now a step whose backward did not (Horovod's habit: before clipping).
        At staleness > 0 it publishes this rank's update. Collective.

        Raises sfb.UsageError without a backward() since the last step or
        from another thread, sfb.MismatchError / sfb.PeerError as step()."""
        self._sfb.synchronize()

    def __reduce_ex__(self, protocol):
        """Pickled and copied as the optimizer's own class (torch.save of the
        optimizer, copy.deepcopy): the copy is a plain optimizer with this
        one's groups and state, outside the job."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("_sfb", "step")}
        return object.__new__, (type(self)._sfb_base,), state

    def skip_synchronize(self):
        """Horovod's context for the step() after synchronize() and clipping
        (`with opt.skip_synchronize(): opt.step()`): step() never reduces a
        step twice here, so it changes nothing, and Horovod's loop runs as
        written."""
        import contextlib
        return contextlib.nullcontext()

    @_abort_on_error
    def step(self, closure=None):
        """Steps the wrapped optimizer on every rank's mean gradient (staleness
        0; reducing first if backward() did not), or publishes this rank's
        update and takes the SSP gate (staleness > 0). Returns what the
        wrapped step returns (None). Collective.

        closure (LBFGS's, or any optimizer's): each call runs the
        closure's forward and backward(), a reduction of its own (.grad the
        ranks' mean), and returns the ranks' mean of the loss it returned
        (weighted as the gradient), so a line search or a stopping test
        decides as one process on the union: the same on every rank.

        Raises sfb.UsageError for a step without backward(), a closure
        that does not call backward() once or returns no number, a
        Linear weight used outside its layer, a layer with more samples than
        max_samples, or (staleness > 0) a .grad changed since backward();
        sfb.MismatchError when the ranks disagree (first step: shapes,
        parameters, clock, optimizer state; later: the optimizer's steps or
        hyperparameters); sfb.PeerError when a rank died, went silent,
        aborted or left."""
        s = self._sfb
        s.check_held(self)
        if closure is not None:
            closure = s.closure(closure)
        try:
            if closure is None:
                s.synchronize()
        except _sfb.PeerError as e:
            _raise_hinted(e)
        loss = None
        if not s.additive:
            t0 = time.time()
            base = type(self)._sfb_base
            loss = base.step(self) if closure is None else base.step(self, closure)
            s.span("step", t0)
        s.end_step(self)
        return loss

    def set_samples(self, n):
        """This rank's weight in the next reduction: its sample count, for a
        mean-reduced loss over minibatches of unequal sizes (any count,
        zero included): .grad becomes sum_r n_r g_r / sum_r n_r, one
        process's gradient on the union. Default: every training rank 1.

        n: a finite number >= 0, for the next reduction only. Raises
        sfb.UsageError for anything else."""
        if isinstance(n, bool) or not isinstance(n, (int, float)) or not n >= 0 or \
                not np.isfinite(n):
            raise _sfb.UsageError("set_samples: %r: expected a finite number >= 0" % (n,))
        self._sfb.weight = n

    def join(self):
        """A context manager around the training loop (DDP's join, Horovod's
        hvd.join()): a rank whose data runs out first leaves the block and
        takes part in the others' steps with nothing until every rank has
        left it; each such step is one process's on the union of the ranks
        still training. Every rank must enter it.

        Usage: `with opt.join(): for x, y in my_shard: ...`. Needs staleness
        0 and a step taken before leaving the block. Raises sfb.UsageError
        otherwise or when the block ends inside a step (backward() without
        step()); sfb.PeerError when a rank fails meanwhile."""
        import contextlib
        s = self._sfb

        @contextlib.contextmanager
        def joined():
            s.in_join = True
            try:
                yield
                try:
                    s.join_loop()
                except BaseException as e:
                    s.job.abort("%s: %s" % (type(e).__name__, e))
                    raise
            finally:
                s.in_join = False
        return joined()

    def state_dict(self):
        """The wrapped optimizer's state_dict with the job's clock under "sfb"."""
        d = type(self)._sfb_base.state_dict(self)
        d["sfb"] = {"clock": self.clock, "staleness": self._sfb.staleness}
        return d

    def load_state_dict(self, state_dict):
        """The optimizer's state and, before the first step, the job's clock:
        training resumes at the checkpoint's step. Every rank loads the same
        checkpoint (a rank that did not fails the first step on every rank,
        sfb.MismatchError naming both clocks). After the first step (a run
        going back to its best checkpoint) the job's clock goes on, and the
        next step checks that every rank loaded the same state (and holds
        the same parameters): sfb.MismatchError naming the ranks otherwise.
        Raises sfb.UsageError after the first step at staleness > 0."""
        state_dict = dict(state_dict)
        info = state_dict.pop("sfb", None)
        s = self._sfb
        if s.attached:
            if s.additive:
                raise _sfb.UsageError(
                    "sfb.torch: load_state_dict after the first step at staleness %d (each "
                    "rank's updates still on their way); load the checkpoint before training, "
                    "or use staleness=0" % s.staleness)
            type(self)._sfb_base.load_state_dict(self, state_dict)
            s.loaded |= LOADED_OPTIMIZER
            return
        type(self)._sfb_base.load_state_dict(self, state_dict)
        if info is not None:
            self._sfb.clock = int(info["clock"])
            self._sfb.stepped = (self._sfb.clock, self._sfb.extra)

    @property
    def plan(self):
        """One line per matrix: the parameters, the engine and why (after the
        first step)."""
        s = self._sfb
        return s._describe(s.job) if s.attached else \
            "(not attached yet: the plan is made at the first step)"

    @property
    def clock(self):
        """The job's clock: gradient reductions done (one per step; a resumed
        run's count from its checkpoint), not counting join()'s last and
        shutdown()'s, in which no rank trained."""
        return self._sfb.clock - self._sfb.extra


def DistributedOptimizer(optimizer, model, sync="auto", staleness=0, backward_passes_per_step=1,
                         max_samples=None, overlap=True, check_every=100, factor_dtype="f32",
                         bucket_cap_mb=4, dense_dtype="f32", trial_steps=10, **attach_args):
    """Wraps a torch.optim optimizer so that each step applies the mean of
    every rank's gradients (staleness 0: .grad holds it when backward()
    returns, as under DDP), or every rank's updates within the SSP bound
    (staleness > 0, plain SGD only). Returns the optimizer itself, its class
    now one deriving from its own: schedulers work on it, and a name still
    bound to it is the same object.

    model: the module whose parameters the optimizer holds (or one that
      several DistributedOptimizers share, each holding a part: SparseAdam
      over the tables beside Adam over the rest); its nn.Linear layers are
      synchronized by their sufficient factors, the rest densely. Tensors
      the optimizer holds outside it (a loss's parameters) are
      synchronized too, named optimizer.param_groups[g][i].
    sync: "auto" (per Linear the engine the cost model predicts faster,
      measured where the two predictions are close: see trial_steps), "sfb"
      (factors) or "fms" (full matrices through sharded servers).
    trial_steps: sync="auto" at staleness 0: where a layer's two engines'
      predicted costs are within 4x, the job times this many steps with the
      layer (and the layers of its shape) under each engine, in alternating
      windows after a few warm-up steps, and keeps the faster, again when the samples per step
      change by more than a quarter; opt.plan shows the predictions and the
      measured step times (0: the cost model's plan, unmeasured). Every
      rank must pass the same.
    backward_passes_per_step: backward passes whose gradients add up before
      one reduction (gradient accumulation; .grad is this rank's until the
      last).
    max_samples: the most samples (rows of a layer's input, over the calls
      and passes of one step) any Linear sees in a step; default: the first
      step's largest over the ranks.
    overlap: a layer's factors, and each bucket of dense gradients, leave
      during the backward pass as soon as backward has produced them (True),
      or all at its end.
    bucket_cap_mb: the most MiB of dense gradients in one bucket (DDP's
      bucket_cap_mb): the parameters that go densely are grouped, in
      backward order, into buckets of about this size, each one of the
      job's matrices; a parameter larger than it is a bucket alone. Every
      rank must pass the same.
    check_every: at staleness 0, every this many steps the ranks compare a
      checksum of every parameter and optimizer state tensor (the same bits
      on every rank) and repair one that differs from the majority's (0:
      never).
    factor_dtype: "f32" (default) or "bf16": the factors of the layers
      synchronized by factors travel in bfloat16, half the bytes, rounded to
      nearest even; every rank, this one included, applies the rounded
      factors, accumulating in float32, so the ranks stay identical (the
      plan says "bf16 factors" for those layers; dense gradients and FMS
      layers stay float32 unless dense_dtype says). Every rank must pass
      the same.
    dense_dtype: "f32" (default) or "bf16": the dense gradients, and the
      layers sync="auto" or "fms" sends through the sharded servers, travel
      in bfloat16 (half the bytes; Horovod's Compression.fp16): each rank's
      gradient rounded, summed in float32, the sum rounded, every rank
      applying that rounded sum (the ranks stay identical; .grad is the
      rounded mean, not one process's). Every rank must pass the same.
    Further keyword arguments go to sfb.Job.attach (topology, degree,
    link_gbps, latency_us, priority, ...).

    Several per job (a model each, its own optimizer: a GAN's generator and
    discriminator) share the job's clock: each backward pass reduces every
    parameter that got a gradient, each optimizer's step() steps its own.

    Returns the optimizer itself (its class now deriving from its own).
    Raises sfb.UsageError for another one of the job made after
    the first forward with gradients, with other settings, over a
    parameter of one, at staleness > 0 or in an elastic job; for arguments
    out of range, a parameter that is not float32 or not on the CPU, one
    that needs a gradient but is not in the optimizer, staleness > 0 with
    an optimizer that is not plain
    SGD, or a step replaced on the optimizer object (other than by a
    learning-rate scheduler's counter)."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        inner = next((v for v in vars(optimizer).values()
                      if isinstance(v, torch.optim.Optimizer)), None) \
            if hasattr(optimizer, "__dict__") else None
        raise _sfb.UsageError(
            "DistributedOptimizer: a %s is not a torch.optim.Optimizer%s" % (
                type(optimizer).__name__,
                " (it wraps a %s: wrap that one and this around it, %s(sfb.torch."
                "DistributedOptimizer(opt, model=...)), as for apex's LARC)" % (
                    type(inner).__name__, type(optimizer).__name__) if inner is not None else
                ""))
    if not isinstance(model, torch.nn.Module):
        raise _sfb.UsageError("DistributedOptimizer: model=%r is not a torch.nn.Module" %
                              (model,))
    patched = optimizer.__dict__.get("step")
    if patched is not None and not _scheduler_step(patched):
        raise _sfb.UsageError("DistributedOptimizer: this optimizer's step was replaced on the "
                              "object (%r), which would step around sfb: wrap the optimizer "
                              "before patching its step" % (patched,))
    args = (sync, staleness, backward_passes_per_step, max_samples, overlap, attach_args,
            check_every, factor_dtype, bucket_cap_mb, dense_dtype, trial_steps)
    model = _with_loose(optimizer, model)
    old = _env._optimizer
    if old is None:
        state = _Sync([optimizer], model, *args)
    else:
        state = _another(old, optimizer, model, args)
    _env._optimizer = state
    _in_place(optimizer, state)
    return optimizer


def _in_place(optimizer, state):
    """The optimizer itself becomes the DistributedOptimizer (its class one
    deriving from its own): a name still bound to it steps, loads and
    schedules the same object, where a copy would have parted from it
    silently (a checkpoint loaded into the original after wrapping)."""
    base = getattr(type(optimizer), "_sfb_base", type(optimizer))  # (a job's before)
    counted = optimizer.__dict__.get("step")
    methods = {k: v for k, v in _DistributedOptimizer.__dict__.items()
               if k not in ("__dict__", "__weakref__")}
    methods["_sfb_base"] = base
    cls = type(base.__name__, (base,), methods)
    optimizer.__class__ = cls
    optimizer._sfb = state
    if counted is not None:
        # a learning-rate scheduler made before wrapping counts the steps
        # through the object's own step (torch 1's with_counter, torch 2's
        # patch_track_step_called), which calls the class it was made for:
        # count this class's steps instead, as either does
        ref = weakref.ref(optimizer)

        def step(*args, **kwargs):
            opt = ref()
            opt._step_count = getattr(opt, "_step_count", 0) + 1
            opt._opt_called = True
            return cls.step(opt, *args, **kwargs)
        step._with_counter = step._wrapped_by_lr_sched = True
        optimizer.step = step


def _scheduler_step(step):
    """A step a learning-rate scheduler put on the optimizer object."""
    return getattr(step, "_with_counter", False) or getattr(step, "_wrapped_by_lr_sched", False)


def _another(old, optimizer, model, args):
    """A job's next DistributedOptimizer (a GAN's generator and
    discriminator, an encoder's and a decoder's): one _Sync for all of them
    (one clock, one reduction of every parameter at the end of backward),
    made anew over their models before the first forward. Refused where
    that would not be one process's training."""
    U = _sfb.UsageError
    if old.attached or old.grads or old.passes or old.graphs:
        raise U("sfb.torch: a DistributedOptimizer made after the first forward with gradients "
                "or backward() (the job has one already, whose layers that graph holds): make "
                "every optimizer's DistributedOptimizer before training; for a new phase with "
                "a new optimizer (fine-tuning after a warm-up), end this one's job with "
                "sfb.torch.shutdown() and start the next with init() (the parameters are "
                "kept), or train both phases with one optimizer, its parameters frozen "
                "(requires_grad_(False)) until they train")
    new = _settings(*args)
    diff = sorted(k for k in set(new) | set(old.settings) if new.get(k) != old.settings.get(k))
    if diff:
        raise U("sfb.torch: this DistributedOptimizer's %s differ%s from the job's first one "
                "(%s): every DistributedOptimizer of a job shares its steps, and takes the same "
                "settings" % (", ".join(diff), "s" if len(diff) == 1 else "",
                              ", ".join("%s=%r" % (k, old.settings.get(k)) for k in diff)))
    if old.staleness != 0:
        raise U("sfb.torch: several DistributedOptimizers need staleness=0 (at staleness %d "
                "each rank's updates are applied as they come, one optimizer's)" %
                old.staleness)
    if old.elastic:
        raise U("sfb.torch: an elastic job trains one DistributedOptimizer (sfb.torch.elastic."
                "State adopts one): give the optimizer a param group per model instead")
    have = {id(p) for o in old.opts for g in o.param_groups for p in g["params"]}
    for g in optimizer.param_groups:
        for p in g["params"]:
            if id(p) in have:
                name = old.names.get(id(p)) or next(
                    (n for n, q in model.named_parameters() if q is p), "a parameter")
                raise U("sfb.torch: %s is in two DistributedOptimizers' optimizers: each "
                        "parameter belongs to one of them" % name, param=name)
    members = _members(old.model)
    for m in _members(model):
        if not any(m is q for q in members):
            members = members + [m]
    joined = members[0] if len(members) == 1 else _Models(members)
    state = _Sync(old.opts + [optimizer], joined, *args)
    old.release()  # (its hooks; it had nothing else)
    _intercept(state)
    for o in old.opts:
        o._sfb = state
    return state

