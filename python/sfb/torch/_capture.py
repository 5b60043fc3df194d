"""Capture: the sufficient factors of every weight that F.linear multiplies
(nn.Linear modules, nn.MultiheadAttention's projections, F.linear in a
user's module) during backward, and the ends of backward passes (a layer's,
through its token; the pass's, through the autograd engine's callback).
_Passes is the part of the optimizer's state (optimizer._Sync) that runs
inside backward.

torch.nn.functional.linear is replaced while a DistributedOptimizer lives:
nn.Linear.forward calls it as F.linear, multi_head_attention_forward as the
module's global `linear`, so both come here; a call on a weight sfb does not
carry goes to torch's own."""
import threading
import warnings

import numpy as np
import torch
import torch.nn.functional as F

import sfb as _sfb

from ._env import _raise_hinted, _tell_peers
from . import _env, _grad_hooks


_torch_linear = F.linear  # torch's own, whatever replaces the module's name
_active = None            # the _Sync whose weights F.linear hands to _LinearFactors
# ids of the weights and biases whose gradient a torch.autograd.grad() call in
# the first step asks for (MAML's inner step): the factor functions form it
_forming = set()
_in_grad = [0]  # torch.autograd.grad() calls running (sfb's wrapper)
# _Sync.losses: (divisor, targets, how, site, terms: ((site, divisor, settings), ...), the
# divisors each over the number the loss multiplies that mean by), _losses
_NO_LOSSES = (0.0, 0, "", "", (), 0.0)
_will_execute = getattr(torch._C, "_will_engine_execute_node", None)  # (torch 2)


def _accumulating(sync, p):
    """Whether the backward pass running now adds into p.grad (backward())
    rather than handing p's gradient back (torch.autograd.grad: torch 2 runs
    a leaf's hooks there too, where torch 1.13 does not)."""
    if _in_grad[0]:
        return False
    if _will_execute is None:
        return True
    acc = sync.accumulators.get(id(p))
    if acc is None:
        from ._buckets import accumulator
        acc = sync.accumulators[id(p)] = accumulator(p)
    try:
        return _will_execute(acc)
    except RuntimeError:  # ("... but we are currently running autograd.grad()")
        return False


def forming(slot):
    """A torch.autograd.grad() call of the first step asks for the gradient
    of slot's weight or bias: its factor function forms the layer's, as
    torch's own operator does (differentiable under create_graph)."""
    return bool(_forming) and (id(slot.weight) in _forming or
                               (slot.bias is not None and id(slot.bias) in _forming))


class _Linear:
    """One weight that F.linear multiplies (and its bias): one matrix of the
    job (out x in, +1 column for the bias). name: the nn.Linear module's, or
    the weight parameter's."""

    kind = "linear"

    def __init__(self, sync, name, weight, bias, index):
        self.sync, self.name, self.index = sync, name, index
        self.weight, self.bias = weight, bias
        # (a convolution's weight: out x in x kernel, flattened as im2col's columns)
        self.rows, self.inputs = weight.shape[0], weight[0].numel()
        self.cols = self.inputs + (1 if bias is not None else 0)
        self.buf = None        # the replica (numpy rows x cols): this clock's sum
        self.cbuf = None       # c, kept across steps
        self.was_dense = False  # its last gradient was (the plan says so)
        # a leaf whose gradient arrives once per backward pass, after every
        # call of the layer in that pass gave its factors
        self.token = torch.zeros(1, requires_grad=True)
        self.hook = self.token.register_hook(self._done)
        self.reset()

    def reset(self):
        self.pending = []      # (go, x or None, weight?, bias?) of the pass in progress
        self.caps = []         # those of this step's finished passes
        self.used_w = self.used_b = False  # this step gave the weight, the bias a gradient
        self.counted = 0       # the step's samples, published
        self.published = False
        self.dense = False     # this clock torch's fused operator formed the dense gradient

    def _done(self, grad):
        self.sync.layer_done(self)

    @property
    def label(self):
        return "%s (%dx%d%s%s)" % (self.name, self.rows, self.inputs,
                                   "+bias" if self.bias is not None else "",
                                   ", conv " + "x".join(map(str, self.weight.shape[2:]))
                                   if self.weight.dim() > 2 else "")

    def samples(self):
        return sum(g.shape[0] for g, _, _, _ in self.caps)

    def commit(self):
        """The pass in progress is done with this layer: its captures count."""
        for _, _, w, b in self.pending:
            self.used_w |= w
            self.used_b |= b
        self.caps += self.pending
        self.pending = []

    def factors(self):
        """(b, c): s x rows and s x cols, float32 C-contiguous numpy. A
        frozen weight's columns of c are zeros, a frozen bias's too; no
        sample: one of zeros (adds nothing)."""
        s = self.samples()
        if s == 0:
            return self.nothing()
        b = self.caps[0][0] if len(self.caps) == 1 else torch.cat([g for g, _, _, _ in self.caps])
        if self.bias is None and len(self.caps) == 1 and self.caps[0][2]:
            c = self.caps[0][1]
        else:
            # straight into a buffer kept across steps (publish copies what
            # it sends)
            if self.cbuf is None or self.cbuf.shape[0] < s:
                self.cbuf = torch.empty((s, self.cols), dtype=torch.float32)
            c, o = self.cbuf[:s], 0
            for g, x, w, bias in self.caps:
                n = g.shape[0]
                if w:
                    c[o:o + n, :self.inputs].copy_(x)
                else:
                    c[o:o + n, :self.inputs].zero_()
                if self.bias is not None:
                    c[o:o + n, self.inputs].fill_(1.0 if bias else 0.0)
                o += n
        return b.contiguous().numpy(), c.contiguous().numpy()

    def nothing(self):
        """(b, c) of one sample of zeros: a clock that adds nothing."""
        return np.zeros((1, self.rows), np.float32), np.zeros((1, self.cols), np.float32)

    def dense_grad(self, out):
        """This rank's dense gradient of the clock (a fused slot's), the
        weight's .grad and the bias's in one rows x cols matrix, in out (the
        job's dense buffer of the slot's matrix, which it is sent from;
        zeros where .grad is None)."""
        d = torch.from_numpy(out)
        for p, part in ((self.weight, d[:, :self.inputs]), (self.bias, d[:, self.inputs:])):
            if p is None:
                continue
            if p.grad is None:
                part.zero_()
            else:
                part.copy_(p.grad.reshape(part.shape))
        return out

    def local_grads(self):
        """[(parameter, this rank's dense gradient of the step's factors)]:
        the weight's (goᵀx) and the bias's, each where a capture gave it one."""
        gw = gb = None
        for go, x, w, b in self.caps + self.pending:
            if w:
                gw = go.t().matmul(x) if gw is None else gw.addmm_(go.t(), x)
            if b:
                gb = go.sum(0) if gb is None else gb.add_(go.sum(0))
        out = []
        if gw is not None:
            out.append((self.weight, gw.reshape(self.weight.shape)))
        if gb is not None:
            out.append((self.bias, gb))
        return out

    def grads(self, present, inv):
        """The weight's and bias's .grad from this clock's sum (every rank's
        factors, in rank order), then the replica zeroed."""
        g = torch.from_numpy(self.buf)
        sync = self.sync
        if sync.present_of(self.weight, present):
            w = g[:, :self.inputs]
            sync.set_grad(self.weight, w if self.weight.dim() == 2 else
                          w.reshape(self.weight.shape), inv, self.dense)
        if self.bias is not None and sync.present_of(self.bias, present):
            sync.set_grad(self.bias, g[:, self.inputs], inv, self.dense)
        self.buf.fill(0)


try:  # torch 2.4 on: by device type (the CPU-named ones are deprecated)
    torch.get_autocast_dtype("cpu")

    def _autocast_cpu():
        return torch.is_autocast_enabled("cpu")

    def _autocast_cpu_dtype():
        return torch.get_autocast_dtype("cpu")
except (AttributeError, TypeError):
    _autocast_cpu, _autocast_cpu_dtype = torch.is_autocast_cpu_enabled, torch.get_autocast_cpu_dtype


def autocast_inputs(x, weight, bias):
    """Under torch.autocast on the CPU, a linear layer or a convolution
    computes in the autocast dtype (bfloat16): its input, weight and bias
    cast to it, as torch's own operator does there. A factor function does
    the same, and saves what it computed with: its backward then gives the
    input's gradient one process would, and the factors are the products
    that one process's weight gradient sums (widened to float32 when taken)."""
    if not _autocast_cpu() or not x.is_floating_point():
        return x, weight, bias
    dt = _autocast_cpu_dtype()
    return x.to(dt), weight.to(dt), bias.to(dt) if bias is not None else None


class _LinearFactors(torch.autograd.Function):
    """F.linear whose backward gives the input's gradient only and hands the
    layer's sufficient factors (output gradients, inputs) to sfb: the dense
    weight gradient is never formed here. The token's gradient tells the
    layer that this backward pass is done with it."""

    @staticmethod
    def forward(ctx, x, weight, bias, token, slot, r0):
        x, weight, bias = autocast_inputs(x, weight, bias)
        ctx.save_for_backward(x, weight)
        ctx.slot, ctx.r0 = slot, r0
        ctx.one = x.dim() == 1 or x.shape[0] == 1  # (one sample: _losses.picked_sum)
        return _env.unviewed(_torch_linear(x, weight, bias))

    @staticmethod
    def backward(ctx, go):
        t0 = _env.clock()
        x, weight = ctx.saved_tensors
        gx = go.matmul(weight) if ctx.needs_input_grad[0] else None
        slot = ctx.slot
        want_w, want_b = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        if forming(slot):
            go2 = go.reshape(-1, weight.shape[0])
            return (gx, go2.t().matmul(x.reshape(-1, weight.shape[1])) if want_w else None,
                    go2.sum(0) if want_b else None, None, None, None)
        go = go.detach().reshape(-1, weight.shape[0])
        if ctx.r0 is not None:  # rows r0.. of the slot's weight: the others' b are zeros
            full = go.new_zeros((go.shape[0], slot.rows))
            full[:, ctx.r0:ctx.r0 + go.shape[1]] = go
            go = full
        slot.sync.take(slot, go, x.detach().reshape(-1, slot.inputs) if want_w else None,
                       want_w, want_b)
        if slot.sync.timeline:
            slot.sync.span("backward " + slot.name, t0)
        return gx, None, None, torch.zeros(1), None, None


# (functorch's transforms, vmap and jacrev over the model, take no
# autograd.Function: inside them the layers are torch's, and their weights'
# gradients dense ones, as double backward's)
transformed = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)


def _linear(input, weight, bias=None):
    """torch.nn.functional.linear while a DistributedOptimizer lives: a weight
    sfb carries by factors (with its own bias, or a bias that needs no
    gradient) goes through _LinearFactors; anything else to torch's."""
    s = _active
    if s is not None and s.renorms.tables:
        s.renorms.read(weight, "F.linear on it: a tied decoder")
    if s is not None and torch.is_grad_enabled() and not transformed() and \
            input.layout == torch.strided:  # (a sparse minibatch, TF-IDF rows: torch's, dense)
        found = s.slot_for(weight, bias)
        if found is not None:
            slot, r0 = found
            return _LinearFactors.apply(input, weight, bias, slot.token, slot, r0)
    return _torch_linear(input, weight, bias)


_torch_autograd_grad = torch.autograd.grad


def _tensors_named(s, inputs, among):
    """inputs as a list (a generator read once, for torch too) and the name
    of the first that is in `among` (ids of parameters), or None."""
    inputs = [inputs] if torch.is_tensor(inputs) else list(inputs)
    hit = next((t for t in inputs if id(t) in among), None)
    return inputs, None if hit is None else s.names.get(id(hit), "a parameter")


def _autograd_grad(outputs, inputs, *args, **kwargs):
    """torch.autograd.grad while a DistributedOptimizer lives: a gradient
    with respect to a weight or bias sfb carries by factors or sparse rows
    is refused (sfb never forms it: torch would say the tensor was not used,
    or give None with allow_unused=True)."""
    s = _active
    asked = ()
    if s is not None:
        inputs, name = _tensors_named(s, inputs, s.covered)
        if name is not None:
            asked = set(id(t) for t in inputs if id(t) in s.covered)
            rows = next((t for t in inputs if id(t) in s.rows_of), None)
            if rows is not None:
                name = s.names.get(id(rows), "a table")
                raise _sfb.UsageError(
                    "sfb.torch: torch.autograd.grad with respect to %s: sfb carries an "
                    "embedding table's gradient as the rows of the step's ids and never "
                    "forms it in torch; use backward(), after which .grad holds every rank's "
                    "mean" % name, param=name)
            if s.attached:
                raise _sfb.UsageError(
                    "sfb.torch: torch.autograd.grad with respect to %s after the job's first "
                    "backward() (%d reduction%s done): sfb carries its gradient by factors "
                    "and never forms it in torch; use backward(), after which .grad holds "
                    "every rank's mean. A weight differentiated so before the job's first "
                    "backward() (a MAML inner step; GradNorm's gradient norms, taken before "
                    "backward() in every step) goes densely from then on, its gradients "
                    "torch's (gradients with respect to inputs and to the densely "
                    "synchronized parameters are fine)" % (
                        name, s.clock, "" if s.clock == 1 else "s"), param=name)
            # the first step: these layers go densely (the first reduction),
            # and their factor functions form the gradients asked for
            s.mixed |= asked
            asked = asked - _forming
            _forming.update(asked)
    _in_grad[0] += 1
    try:
        return _torch_autograd_grad(outputs, inputs, *args, **kwargs)
    finally:
        _in_grad[0] -= 1
        _forming.difference_update(asked)


_torch_autograd_backward = torch.autograd.backward


def _autograd_backward(*args, **kwargs):
    """torch.autograd.backward (and Tensor.backward) while a DistributedOptimizer
    lives: inputs= naming a parameter the job synchronizes is refused (a
    pass restricted to some tensors never ends sfb's step: only a full
    backward does); inputs= of other tensors (an input's gradient) is fine;
    create_graph=True without inputs= is refused (.grad gets the reduced
    gradient, without a graph)."""
    s = _active
    if len(args) > 5:  # (inputs given by position: as a keyword, torch takes either)
        args, kwargs = args[:5], dict(kwargs, inputs=args[5])
    if s is not None and kwargs.get("inputs") is not None:
        kwargs["inputs"], name = _tensors_named(s, kwargs["inputs"], s.group_of)
        if name is not None:
            raise _sfb.UsageError(
                "sfb.torch: backward(inputs=...) with %s among the inputs: sfb reduces a "
                "step's gradients at the end of a full backward pass, and one restricted to "
                "some parameters never ends it; use backward() (requires_grad_(False) on "
                "what must not get a gradient, or .grad of the rest set to None before "
                "step()): inputs= that name no parameter of the optimizer are fine" % name,
                param=name)
    if s is None:
        return _torch_autograd_backward(*args, **kwargs)
    if s.in_backward and threading.get_ident() == s.thread:  # (a reentrant checkpoint's)
        s.nested_backward()
        return _torch_autograd_backward(*args, **kwargs)
    if kwargs.get("inputs") is None and (args[3] if len(args) > 3 else
                                         kwargs.get("create_graph")):
        raise _sfb.UsageError(
            "sfb.torch: backward(create_graph=True): sfb.torch sets each parameter's .grad to "
            "the ranks' reduced gradient, which carries no graph, so a penalty on p.grad (or a "
            "Hessian-vector product through it) would differentiate nothing. A penalty on the "
            "weights' gradient is each rank's own under data parallelism (DDP's too), not one "
            "process's: torch.autograd.grad(loss, params, create_graph=True) from the first "
            "step gives each rank's; backward(create_graph=True, inputs=[x]) for an input's "
            "gradient is fine")
    roots = args[0] if args else kwargs.get("tensors")
    if s.between is not None:
        s.check_between()
    s.loss_foreign([roots] if isinstance(roots, torch.Tensor) else list(roots or ()))
    from . import _losses
    # (a gradient given by hand that is one number, a sum's or a mean's, read
    #  as that loss: _losses.given_as_loss)
    roots, given = _losses.given_as_loss(args[0] if args else kwargs.get("tensors"),
                                         args[1] if len(args) > 1 else kwargs.get("grad_tensors"))
    # (the pass's: the mean losses _losses watches take its place, _end_pass)
    read, terms = _losses.of_root(roots, given, s.job.world), None
    if read is not None:
        divisor, targets, how, name = read
        at = "given to backward() at %s" % _env._user_line()
        read = [(divisor, targets, how, "%s (%s)" % (name, at) if name else at, 0,
                 _losses.root_factor(roots, given))]
    else:  # (several terms, each multiplied by a number: those _losses does not watch,
        #     counted beside the watched ones)
        terms = _losses.terms_of_root(roots, given)
        if terms:
            at = "given to backward() at %s" % _env._user_line()
            terms = [(divisor, targets, how, "%s (%s)" % (name, at) if name else at, 0, factor)
                     for divisor, targets, how, name, factor in terms]
    s.pass_hand, s.pass_terms = read, terms or []
    if read or terms:  # (the heads its terms read: a loop over a rank's tasks, sites_crc)
        at = "given to backward() at %s" % _env._user_line()
        s.pass_heads = frozenset(("%s (%s)" % (loss, at), h)
                                 for loss, h in _losses.heads_of_root(s.names, roots, given))
    kinds = s.unread() if s.job.world > 1 else ()
    if kinds:
        s.pass_reading = True
        read = _losses.read_root(roots, given, s.job.world, kinds)
        if read:
            line = _env._user_line()
            s.pass_read = {kind: (what, line) for kind, what in read.items()}
    s.in_backward = True
    try:
        return _torch_autograd_backward(*args, **kwargs)
    finally:
        s.in_backward = False
        s.pass_hand, s.pass_terms, s.pass_read, s.pass_reading = None, [], {}, False
        s.pass_heads = frozenset()


def _equal(a, b):
    """torch.equal, for sparse tensors too (a sparse Embedding's .grad)."""
    if a.is_sparse or b.is_sparse:
        if not (a.is_sparse and b.is_sparse) or a.shape != b.shape:
            return False
        a, b = a.coalesce(), b.coalesce()
        return torch.equal(a.indices(), b.indices()) and torch.equal(a.values(), b.values())
    return torch.equal(a, b)


def _row_range(view, base):
    """The first row of base (a contiguous matrix, or vector) that view (a
    range of its rows) starts at; None when view is no such range."""
    if base.dim() != view.dim() or not base.is_contiguous() or view.dim() not in (1, 2):
        return None
    if view.dim() == 2 and (view.shape[1] != base.shape[1] or view.stride() != base.stride()):
        return None
    if view.dim() == 1 and view.stride() != (1,):
        return None
    width = base.shape[1] if base.dim() == 2 else 1
    off = view.storage_offset() - base.storage_offset()
    if off < 0 or off % width or off // width + view.shape[0] > base.shape[0]:
        return None
    return off // width


_torch_load_state_dict = torch.nn.Module.load_state_dict
_module_hooks = []  # the global module hooks while a DistributedOptimizer lives


def _load_state_dict(module, *args, **kwargs):
    """torch.nn.Module.load_state_dict while a DistributedOptimizer lives: a
    load into the job's model (or a part of it) is the job's to check."""
    if _active is not None:
        _active.module_loads(module)
    return _torch_load_state_dict(module, *args, **kwargs)


def _forward_pre(module, inputs):
    """torch's global forward pre-hook while a DistributedOptimizer lives (a
    set lookup a module call: ~0.5 µs)."""
    s = _active
    if s is not None and (id(module) in s.member_ids or id(module) in s.mode_ids or
                          id(module) in s.draw_ids or s.tl_labels):
        s.module_forward(module, inputs)


def _forward_post(module, inputs, output):
    """torch's global forward hook while a timeline is written."""
    if _active is not None:
        _active.module_forward_done(module)


def _intercept(sync):
    """F.linear's, F.embedding's, F.embedding_bag's, F.conv1d's, the
    dropouts' and bernoulli's (_modes),
    F.conv2d's, F.batch_norm's, F.instance_norm's, F.cross_entropy's,
    F.nll_loss's and the element-wise losses' (_losses),
    F.multi_head_attention_forward's (_padding), torch.autograd.grad's,
    torch.autograd.backward's, Tensor.register_hook's and
    Module.load_state_dict's calls, the recurrent layers' operators and
    every module's forward go to sync (None: torch's own again). The
    forward hooks are torch's global ones, none on the user's modules: a
    model with hooks of sfb's could not be pickled (torch.save(model)),
    and its deep copy (an EMA's) would carry them."""
    from . import _batchnorm, _conv, _embedding as e, _losses, _modes, _padding, _recurrent
    global _active
    _active = sync
    if sync is None:  # (the job's counts: none of the next job's)
        _losses.SHARED_SUMS.clear()
    for h in _module_hooks:
        h.remove()
    del _module_hooks[:]
    if sync is not None:
        mm = torch.nn.modules.module
        _module_hooks.append(mm.register_module_forward_pre_hook(_forward_pre))
        if sync.timeline:
            _module_hooks.append(mm.register_module_forward_hook(_forward_post))
    torch.nn.Module.load_state_dict = (_load_state_dict if sync is not None else
                                       _torch_load_state_dict)
    _recurrent.intercept(sync is not None)
    _modes.intercept(sync)
    F.batch_norm = _batchnorm.batch_norm if sync is not None else _batchnorm._torch_batch_norm
    F.instance_norm = (_batchnorm.instance_norm if sync is not None else
                       _batchnorm._torch_instance_norm)
    torch.autograd.grad = _autograd_grad if sync is not None else _torch_autograd_grad
    torch.autograd.backward = (_autograd_backward if sync is not None else
                               _torch_autograd_backward)
    torch.Tensor.register_hook = (_grad_hooks.register_hook if sync is not None else
                                  _grad_hooks._torch_register_hook)
    F.conv1d = _conv.conv1d if sync is not None else _conv._torch_conv1d
    F.conv2d = _conv.conv2d if sync is not None else _conv._torch_conv2d
    F.linear = _linear if sync is not None else _torch_linear
    F.embedding = e.embedding if sync is not None else e._torch_embedding
    F.embedding_bag = e.embedding_bag if sync is not None else e._torch_embedding_bag
    F.multi_head_attention_forward = (_padding.multi_head_attention_forward if sync is not None
                                      else _padding._torch_mha)
    F.cross_entropy = _losses.cross_entropy if sync is not None else _losses._torch_cross_entropy
    F.nll_loss = _losses.nll_loss if sync is not None else _losses._torch_nll_loss
    for name in _losses.ELEMENTWISE:
        setattr(F, name, _losses.REPLACED[name] if sync is not None else
                _losses._torch_elementwise[name])


# the reductions in whose steps a .grad changed between the passes of
# backward_passes_per_step is looked for (Passes.check_between: a copy of the
# dense gradients a pass)
BETWEEN_CLOCKS = 4


class _Passes:
    """What runs inside backward: the hooks, the captures, the end of a pass
    (mixed into optimizer._Sync, whose reduction it calls)."""

    def _hook_new(self):
        if not self.unhooked:
            return
        left = []
        for p in self.unhooked:
            if p.requires_grad:
                # (torch 2 runs a leaf's hooks with None where a function
                # gave it no gradient: _LinearFactors' weight and bias)
                self.hooks.append(_grad_hooks._torch_register_hook(
                    p, lambda grad, p=p: None if grad is None else self._dense_grad(p)))
            else:
                left.append(p)
        if len(left) < len(self.unhooked) and self.attached:
            self._hook_buckets()  # (unfrozen since: their buckets may leave early too)
        self.unhooked = left

    def release(self):
        _intercept(None)
        self.user_hooks.restore()
        for h in self.hooks:
            h.remove()
        for slot in self.linears:
            slot.hook.remove()

    # -- capture, during backward

    def _queue_end(self):
        if not self.cb_queued:  # (the pass's first gradient)
            self.new_pass()
            self.cb_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._end_pass)

    def nested_backward(self):
        """A backward pass run from within the one in progress, on its
        thread: torch.utils.checkpoint's reentrant form recomputes its
        segment and runs backward() on it there. It is part of the outer
        pass: the pass ends with the outer one (its callback queued there,
        not in the inner pass, which ends first), and from now on nothing
        leaves before a step's last pass ends (overlap off), for a parameter
        used inside the segment and outside it gets a gradient in each
        (a layer shared across checkpointed blocks: ALBERT's, a LayerNorm
        inside and after). One whose gradient left already in this pass (the
        checkpoint first used after the job's first step) is refused when
        the second comes (_reentrant_late)."""
        self._queue_end()
        self.overlap = False
        self.nested_pass = True

    def _reentrant_late(self, name):
        """The refusal where name got a gradient after its part of the step
        left, in a pass with a reentrant checkpoint's inner pass."""
        self.fail_in_backward(_sfb.UsageError(
            "sfb.torch: %s received a gradient in the backward pass of step %d after its "
            "gradient of that step had left: a parameter used inside a reentrant "
            "checkpoint's segment (torch.utils.checkpoint with use_reentrant=True) and "
            "outside it gets a gradient in each of the two backward passes, and this step "
            "sent it after the first. sfb.torch waits for the pass's end from the first "
            "checkpoint it sees on; use the checkpoint from the job's first step, "
            "use_reentrant=False, or DistributedOptimizer(overlap=False)" % (name, self.clock),
            param=name))

    def take_rows(self, slot, ids, rows, lookups):
        if _in_grad[0]:  # (torch.autograd.grad's: take())
            return
        slot.pending.append((ids, rows, lookups))
        self._queue_end()

    def take(self, slot, go, x, want_w, want_b):
        """A layer's factors from a backward pass, committed when the pass
        reaches the layer's token. A torch.autograd.grad() call's are none
        of sfb's (its pass reaches no token), nor of the pass it may run in
        (a hook's call: a deep-equilibrium layer's implicit backward)."""
        if _in_grad[0]:
            return
        # (float32 factors: an autocast layer's are its dtype's numbers)
        go, x = go.float(), x.float() if x is not None else None
        slot.pending.append((go, x, want_w, want_b))
        self._queue_end()

    def layer_done(self, slot):
        """The layer's token: this backward pass is done with it."""
        self.pass_hit = True
        self._queue_end()
        if slot.published and self.nested_pass:
            self._reentrant_late(slot.name)
            return
        if slot.published:
            self.fail_in_backward(_sfb.UsageError(
                "sfb.torch: %s received a gradient after its factors of step %d left (a "
                "backward pass after the last of the step's %d, before step()?)" %
                (slot.name, self.clock, self.passes_per_step), param=slot.name))
            return
        slot.commit()
        if (self.overlap and self.attached and self.passes == self.passes_per_step - 1 and
                threading.get_ident() == self.thread):
            try:
                self._publish_linear(slot)
            except BaseException as e:  # raised out of backward(): tell the peers
                self.fail_in_backward(e)

    def loss_counted(self, divisor, targets, how, site, settings=0, factor=1.0, head=None):
        """A mean loss (_losses) got its gradient in this backward pass:
        divisor what it divided by, of targets; how, what it dropped or
        weighed; site, the loss and the user's file:line; settings, its
        class weights' and options' checksum (_losses.crc; 0: none read);
        factor, the number the loss backward() got multiplies it by (its
        gradient); head, the layer it reads (_losses.head()). The step's from
        the pass's end on, if the pass reaches the job's parameters."""
        self.pass_losses.append((divisor, targets, how, site, settings, factor, head))
        if not self.losses_cb:
            self.losses_cb = True
            torch.autograd.Variable._execution_engine.queue_callback(self._losses_end)

    def check_between(self):
        """At a backward() after a pass of a step before its last: a .grad
        the program changed since that pass (clipping or scaling after each
        micro-batch) held this rank's own sum of its micro-batches (nothing
        yet of the layers by factors), where one process's holds the
        union's: rank 0 warns once (in the first BETWEEN_CLOCKS steps)."""
        was, self.between = self.between, None
        for name, p in self.model_params:
            v = was.get(id(p))
            if v is None and p.grad is None or v is not None and p.grad is not None and \
                    v[0] == id(p.grad) and _equal(v[1], p.grad):
                continue
            self.told_between = True
            if self.job.rank == 0:
                warnings.warn(
                    "sfb.torch: %s's .grad was changed between two backward() passes of one "
                    "step (backward_passes_per_step=%d: clipping or scaling after each "
                    "micro-batch?). Until the step's last pass .grad holds this rank's own sum "
                    "of its micro-batches (and nothing yet of the layers sfb carries by "
                    "factors), where one process's holds the union's: change .grad after the "
                    "step's last backward(), where it holds every rank's mean" %
                    (name, self.passes_per_step), stacklevel=_env._user_stacklevel())
            return

    def _losses_end(self):
        """(A pass that queued no _end_pass reached none of the job's
        parameters: another model's loss, none of the step's.)"""
        self.losses_cb = False
        if not self.cb_queued:
            self.pass_losses = []

    def _dense_grad(self, p):
        """A dense gradient flows into p (before it is accumulated). For a
        weight or bias sfb carries by factors that is a use its factors miss
        (a view of it, a tied weight): remembered, refused at the pass's end
        (.grad would hold it whether it was None or not). A gradient
        torch.autograd.grad hands back is none of sfb's."""
        if not _accumulating(self, p):
            return
        if id(p) in self.covered and id(p) not in self.fused_ids:
            self.dense_into.append(p)
        self.pass_hit = True
        self._queue_end()

    def fail_in_backward(self, e):
        _tell_peers(e)
        raise e

    def _end_pass(self):
        """The end of a backward pass (torch's callback): the pass counts if
        it reached a parameter; the step's last one reduces (staleness 0)."""
        self.cb_queued = self.nested_pass = False
        for slot in self.linears:
            slot.pending = []  # from a pass that reached no token: autograd.grad()
        # (the watched calls' counts; beside them the root's terms they are not
        # (terms_of_root); without them, what the root reads)
        losses = self.pass_losses + self.pass_terms if self.pass_losses else \
            self.pass_hand or self.pass_terms
        watched, self.pass_losses = len(self.pass_losses), []  # (the calls', then the root's)
        if not self.pass_hit:
            return
        for kind, said in self.pass_read.items():
            self.step_read.setdefault(kind, said)
        if "task" in self.pass_read and len(self.step_tasks) < 64:  # (each pass's: _tell_tasks)
            self.step_tasks.append(self.pass_read["task"])
        self.loss_heads = self.loss_heads | self.pass_heads
        if self.pass_reading:  # (the step's loss was read: unread)
            self.read_step, self.read_next = True, False
        from . import _losses
        calls = {}  # (a site: its calls, or the root's terms, in this pass)
        for i, (divisor, targets, how, site, settings, factor, *head) in enumerate(losses):
            d, n, was, where, terms, folded = self.losses
            # (each pass of a step's micro-batches a term of its own: means over
            # micro-batches whose counts part from rank to rank weigh them apart;
            # so is each call of one line in a pass, a decoder's loss += ce(...)
            # per time step, each step's mean over its own targets, and each term
            # read from the root, t1.mean() + t2.sum() / mask.sum())
            k = calls[site] = calls.get(site, 0) + 1
            term = site if k == 1 else _losses.call_term(site, k, i < watched)
            if self.passes_per_step != 1:
                term = "%s, pass %d" % (term, self.passes + 1)
            self.losses = (d + divisor, n + targets, was or how, where or site,
                           _losses.add_term(terms, term, divisor, settings),
                           folded + divisor / factor)
            self.loss_factors.append((how, factor, divisor))
            if head and head[0] is not None:
                self.loss_heads = self.loss_heads | {(site, head[0])}
        if self.tl_end_fwd is not None:
            self.span("backward", self.tl_end_fwd)
            self.tl_end_fwd = None
        self.pass_hit = False
        self.passes += 1
        self.grads = True
        if threading.get_ident() != self.thread:
            raise _sfb.UsageError("sfb.torch: backward() from another thread than the one that "
                                  "made the DistributedOptimizer")
        try:
            self._check_dense_grads()
            if self.passes < self.passes_per_step:
                # (checked at the next pass, in the first steps: a copy, as an edit
                # through .data, clip_grad_value_'s, leaves the version as it was)
                if not self.told_between and self.job.world > 1 and self.clock < BETWEEN_CLOCKS:
                    self.between = {id(p): (id(p.grad), p.grad.clone())
                                    for _, p in self.model_params if p.grad is not None}
                return
            self.between = None  # (the step's last pass: .grad the program's to change)
            if self.additive:
                self.versions = {id(p): (id(p.grad), p.grad._version)
                                 for _, p in self._dense_now() if p.grad is not None}
                return
            self.reduce()
        except BaseException as e:
            _tell_peers(e)
            _raise_hinted(e)

    def _dense_now(self):
        """The optimizer's parameters that go densely (as far as known before
        the first reduction)."""
        return [(n, p) for n, p in self.model_params
                if id(p) in self.group_of and id(p) not in self.covered]

    def _check_dense_grads(self):
        """A weight or bias carried by factors (or a table's rows) that got
        a dense gradient too: in the first step it goes densely from then on
        (the first reduction, _unslot_mixed); later it is refused, as its
        factors may have left already."""
        into, self.dense_into = self.dense_into, []
        for slot in self.linears:
            for p in (slot.weight, slot.bias):
                if p is None or slot.dense:
                    continue
                hit = any(q is p for q in into)
                if not self.attached:  # (a .grad left before: _unslot_mixed)
                    if hit:
                        self.mixed.add(id(p))
                elif hit or (p.grad is not None and not self._ours(p)):
                    raise _sfb.UsageError(
                        "sfb.torch: %s received a dense gradient after the job's first "
                        "backward() (%d reduction%s done; its weight or bias used other than "
                        "as F.linear's weight with its own bias or as an embedding's table: a "
                        "penalty on it, a transposed or sliced use, double backward, a "
                        "function sfb.torch does not capture) but not in that first "
                        "backward(), so sfb.torch carries it by factors, which cannot add "
                        "that gradient. One used so in the job's first backward() goes "
                        "densely (opt.plan says so): use it so there, with weight 0 if need "
                        "be (a penalty, StyleGAN's lazy R1: 0 * penalty added to the first "
                        "loss; a GAN whose discriminator steps first: in that loss)%s" %
                        (slot.name, self.clock, "" if self.clock == 1 else "s",
                         self._pruned_since(p)), param=slot.name)

    def _pruned_since(self, p):
        """The refusal's words where torch.nn.utils.prune reparametrized p
        since (p is a module's name_orig now, its weight orig * mask)."""
        for mname, m in self.model.named_modules():
            if not any(q is p for q in m._parameters.values()):
                continue
            for k in m._parameters:  # (p's, or its layer's bias: p no F.linear weight now)
                if k.endswith("_orig"):
                    return ("; %s is pruned (torch.nn.utils.prune) since: prune it before "
                            "wrapping its optimizer (prune.identity(module, %r) keeps every "
                            "value and sends it densely; prune it further at any step)" %
                            (".".join(filter(None, (mname, k[:-5]))), k[:-5]))
        return ""

    def _ours(self, p):
        """Whether p.grad is the tensor this wrapper set, or the one the
        optimizer stepped on last (one the program put there after
        backward(), kept across the step: zero_grad(set_to_none=False)
        zeroes it in place, and the next reduction adds into it)."""
        g = self.handed.get(id(p))
        if g is not None and p.grad is g:
            return True
        w = self.stepped_grads.get(id(p))
        return w is not None and p.grad is not None and w() is p.grad
