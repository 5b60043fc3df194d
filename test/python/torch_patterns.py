"""sfb.torch on the patterns of real training loops, against one process on
the global minibatches (run under `sfb launch -n P`). Each argument is a
case, "MODE [options]", run in order, each in a job of its own; each prints
"ok MODE ..." on success, else the script exits non-zero.

exact: every rank trains through sfb.torch on its share of each global
  batch and, alongside, a reference copy with the plain optimizer on the
  whole global batch (the union of the ranks' shares, in rank order), doing
  the same things in the same order. The patterns, any mix:
    --freeze    requires_grad_(False) on a middle Linear and the LayerNorm
                at step 6, on the first layer at step 12, the middle Linear
                unfrozen at step 18
    --unused    a Linear no rank uses from step 5 on
    --route     a head only the samples with x[:, 0] > 1.2 go through: used
                by some ranks, all or none in a step; F.linear on the model's
                own parameters, which rank 2 does not use in the first step
                (the ranks agree on the union of the weights met there)
    --validate  between steps, eval() + no_grad forwards, and forwards with
                gradients that get no backward
    --clip      clip_grad_norm_ right after backward() (the norms must match
                one process's too)
    --hvd       with --clip, as Horovod's loop writes it: opt.synchronize(),
                clip, then step() inside opt.skip_synchronize()
    --hooks     gradient hooks (Tensor.register_hook) on parameters by factors
                and dense ones: a scale on fc1's weight, clamps on head's bias
                and on the LayerNorm's weight, a watcher recording head's
                weight's gradient norm (it must see one process's), a scale
                on fc3's weight removed by its handle at step 10, one on the
                LayerNorm's bias removed between step 14's forward and
                backward(), and one on it and one on fc3's bias registered
                there at step 16
    --uneven    per-rank sample counts that differ every step, zero
                included, weighted by opt.set_samples(n)
    --join      rank r has 2r batches fewer, inside opt.join()
    --no-zero   model.zero_grad(set_to_none=False) instead of opt.zero_grad(),
                the zeroed .grads there from a backward before wrapping
    --surgery   gradient surgery as PCGrad's code writes it: after backward()
                (and the clipping), every .grad replaced by a new tensor
                (p.grad = p.grad * 0.5), the one the step then takes and
                the next zero_grad(set_to_none=False) zeroes in place
    --buckets   every dense tensor a bucket of its own (bucket_cap_mb tiny):
                each leaves during backward once its gradient is in (or at
                the pass's end: frozen, unused, joined)
    --dense-bf16  dense gradients and FMS layers in bfloat16 (dense_dtype,
                with --sync fms every Linear too): the replicas stay
                bit-identical, the values near one process's (--tol)
    --checkpoint  fc2 under torch.utils.checkpoint (its forward run again
                inside backward), reentrant and not in turn; the norm and
                fc2 used outside the segment too
    --autocast  the forward under torch.autocast("cpu", bfloat16), the
                linear layers computing in bfloat16: one process's weight
                gradient is the bf16 GEMM's result, sfb's the float32 sum of
                the same bf16 products, so the values are near one
                process's (--tol), the replicas bit-identical
    --penalty   an L2 penalty on every weight matrix in the loss (their
                dense gradients besides the factors: every Linear goes
                densely, the plan saying why)
    --gradpen   a gradient penalty: the input gradient's squared norm in the
                loss, through torch.autograd.grad(create_graph=True) (double
                backward through every Linear: dense gradients)
    --transposed  fc1's weight used transposed too, to reconstruct the input
                (a tied autoencoder's decoder)
    --batchnorm a BatchNorm1d in training mode after fc2's tanh: normalized by the
                global minibatch's statistics, as one process (its running
                statistics compared too)
    --parametrize  weights computed from parameters (torch.nn.utils.
                parametrizations): fc2's spectral norm, whose every
                training-mode evaluation of fc2.weight runs a power iteration
                on its buffers (sfb must not evaluate it: wrapping once did),
                and an orthogonal extra; their parameters go densely
  After every step every rank's parameters must be bit-identical to rank
  0's; at the end each tensor must agree with one process's within --tol
  (||p - q|| / ||q||).
nojoin: rank 1 runs out of batches two steps early and calls shutdown():
  every rank must fail at once with sfb.PeerError naming join().
settings: max_samples, then check_every, otherwise on rank 1: every rank
  fails at the first step with sfb.MismatchError naming it and both values.
acthooks: a clamp on an activation's gradient (Tensor.register_hook) and a
  module's backward hook clamping: rank 0 warns once naming each (not one
  process's); clamped at P times the bound: one process's.
raised: rank 1 raises its own exception mid-step inside `try: ... finally:
  sft.shutdown()`: the others must fail within 4 s with sfb.PeerError naming
  rank 1 and that exception (not join()); shutdown() in `except
  StopIteration:` on every rank ends the job without error.
loadstate: rank 0 alone loads an optimizer checkpoint of clock 8: every rank
  must fail at the first step with sfb.MismatchError naming both clocks.
samhand: SAM stepped by first_step and second_step (the wrapped optimizer's
  step() never runs) must train as one process, and a parameter changed on
  rank 1 alone must be refused after the 32nd reduction, naming it.
rollback: every rank loads the model's and the optimizer's state of step 10
  at step 16 (a run going back to its best checkpoint) and halves the
  learning rate: must train as one process doing the same; then rank 0
  alone loading an optimizer state, rank 1 alone loading the model's
  beside everyone's optimizer state, and rank 1 alone loading the model's
  (no optimizer state anywhere), must fail the next step on every rank
  with sfb.MismatchError naming the ranks (the parameter).
staleclip: staleness 1, a .grad clipped between backward() and step(): every
  rank's step must raise sfb.UsageError saying why (or sfb.PeerError carrying
  a peer's, where that ended the job before this rank's step).
addgroup: add_param_group after two steps: every rank must raise
  sfb.UsageError saying why, the groups unchanged, and go on training.
batchnorm: an InstanceNorm1d's training-mode forward that keeps running
  statistics must raise sfb.UsageError naming the layer on every rank, the
  running statistics untouched, and so must a BatchNorm's inside
  opt.join() and at staleness 1; in eval() the InstanceNorm1d, and a BatchNorm2d after a
  convolution in training mode, a BatchNorm1d without running statistics
  and an InstanceNorm1d without them, must train as one process does on
  uneven shares (opt.set_samples), running statistics included; SWA's
  update_bn on every rank must give one process's statistics, on rank 0
  alone fail every rank saying what to do.
latedense: a penalty on the weights added at step 3 must raise sfb.UsageError
  naming the layer and the step on every rank (or sfb.PeerError carrying a
  peer's, where that ended the job first); the same penalty from the
  first step, with weight 0 until step 3, must train as one process does.
gan: a generator and a discriminator under one DistributedOptimizer (a param
  group each), a discriminator step then a generator step with the
  discriminator frozen, must train as one process does.
dcgan: PyTorch's DCGAN loop as written, a DistributedOptimizer each for the
  generator and the discriminator (their own Adam settings): the
  discriminator's step takes two backward passes (real, then the detached
  fakes), the generator's one through the discriminator (whose gradients
  it fills and nobody steps on); must train as one process does.
foreign: the DCGAN loop with the generator's optimizer left unwrapped (its
  parameters outside the job, trained on each rank's own gradients): must
  be refused on every rank at the job's 5th reduction, saying to wrap it.
seq2seq: an encoder and a decoder, a DistributedOptimizer each (SGD with
  momentum, Adam), one backward() then both steps, the gradients clipped per
  model in between, a learning-rate scheduler on one; must train as one
  process does; a third optimizer over a parameter of the first must be
  refused, and so must one made after the first backward().
phases: fine-tuning in two phases (the head alone by SGD, the rest frozen;
  then every layer by Adam): a DistributedOptimizer made after training
  began must be refused saying shutdown() and init(); a new job for the
  second phase must train as one process does.
buffers: an input normalizer keeping a running mean in a buffer, updated in
  forward from the rank's own minibatch, must be refused on every rank with
  sfb.MismatchError naming the buffer after the first step; updated from
  every rank's data (sft.allreduce), must train as one process does, a
  non-persistent buffer recording each rank's own last batch beside it and
  a persistent one whose bits differ by rounding from rank to rank; a
  buffer registered on rank 1 only must be refused naming the counts.
schedules: rank 0 alone steps a StepLR (stepped beside its logging), then
  rank 1 alone skips step() at the 4th step (a replica check's), then rank
  1 alone freezes fc2 at step 2, then rank 1 alone skips the last step:
  every rank must fail with sfb.MismatchError naming lr of param group 0
  and both values, the steps taken, fc2.weight and the ranks, the steps
  taken at shutdown() (or sfb.PeerError carrying another rank's);
  ReduceLROnPlateau stepped on sft.allreduce of each rank's validation
  loss must train as one process (its lr lowered at least once), the last
  step skipped on every rank before shutdown().
maxnorm: nn.Embedding / nn.EmbeddingBag with max_norm, each rank looking
  up its own ids (and validating on its own shard without gradients), must
  train as one process with the replicas bit-identical (--uneven --join too);
  a tied decoder reading the table whole, and staleness 1, must be refused.
unequal: minibatches of unequal sizes without opt.set_samples must warn
  once on rank 0, naming the step and the counts; not with set_samples. A
  loss that sums over the samples beside a mean, or is a statistic over
  each rank's own samples (the root of a mean loss, a batch entropy, topk,
  a norm, an MoE's balance on each rank's fractions), or divides a sum by a
  count summed over the ranks, must warn and differ from one process; over
  gathered rows or averaged fractions, or times sft.size(), be exact.
contrastive: CLIP's loss over sft.allgather's rows must train as one
  process; over each rank's own rows, warn and differ; Barlow Twins'
  cross-correlation of batch-normalized embeddings likewise.
gather: sft.allgather_object of objects of every size (one over 1 MiB, an
  allgather's most) must give every rank each rank's object in rank order.
varlen: sequences padded per minibatch to its longest (dynamic padding), an
  embedding and a Linear at every position, the longest sequence growing
  from step to step past the job's first bound (each rank its own, some
  ranks past it and others not): must train as one process on the global
  minibatches, the bound raised a few times; at staleness 1 a step past it
  must be refused naming max_samples.
moe: a mixture of experts, each sample routed to the expert its router
  rates highest (the experts' sample counts differing from rank to rank and
  step to step, some experts unused on some ranks): must train as one
  process, and with equal minibatches without the unequal-minibatches
  warning (the router and the head see the same counts).
maml: MAML's outer loop, each rank its own tasks, the inner step through
  torch.autograd.grad(create_graph=True) with respect to the parameters
  from the first step: must train as one process on every rank's tasks, the
  plan saying those layers go densely and why.
losshead: the optimizer holds tensors outside the model (a loss module's
  Linear classifier and temperature, a plain leaf of multi-task weights):
  must train as one process, the plan naming them by their place in the
  optimizer.
finetune: Hugging Face's fine-tuning loop on a small BERT-like model (AdamW
  with parameter groups, warmup, two micro-batches a step padded per rank,
  clipping, evaluations, the best state reloaded on every rank): must train
  as one process on the global batches (the keys' bias aside: rounding).
tokens: a mean cross_entropy over the tokens a padded minibatch keeps
  (ignore_index, every layer the same count on every rank): without
  set_samples rank 0 alone must warn once, naming each rank's count (and
  where the loss takes the kept positions only, a masked model's, where
  the program calls torch's cross_entropy imported by name before
  wrapping, and for a masked mean written by hand, (loss * mask).sum() /
  mask.sum() and loss[mask].mean()); where a second term averages over
  the sequences (BERT's), naming both terms' counts; with set_samples(the
  count) it must train as one process (label smoothing; nn.NLLLoss with
  class weights, set_samples their sum; two micro-batches, each pass's
  summed loss divided by the step's count; the mean by hand, divided by
  the count as a number under a scale; each term's sum divided by its
  count over all ranks, times P, set_samples(1)); class weights counted
  from each rank's own targets must be refused on every rank, naming the
  loss.
padding: sequences padded per rank to their own longest (the lengths
  differ), one process's to the global one: into a bidirectional GRU and
  into attention without a key_padding_mask, rank 0 alone must warn once
  naming each rank's length and the layer (and the run must indeed differ
  from one process's), and a GRU's final state the same; into a GRU on
  packed sequences it must train as one process, unwarned.
autogradw: after the first step, torch.autograd.grad with respect to the
  parameters (and backward(inputs=) naming one) must raise
  sfb.UsageError naming the first Linear weight on every rank; with respect
  to the input it must equal one process's; backward() training goes on."""
import argparse
import contextlib
import copy
import hashlib
import math
import os
import re
import shlex
import shutil
import sys
import tempfile
import time

try:
    import torch
    import torch.nn as nn
    import torch.utils.checkpoint
except ImportError:
    print("skipped: no torch (install python3-torch)", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "python"))
import sfb  # noqa: E402
import sfb.torch as sft  # noqa: E402
from torch.nn.functional import cross_entropy as ce_by_name  # noqa: E402 (torch's, kept by name)
from torch.nn.functional import mse_loss as mse_by_name  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("mode", choices=["exact", "nojoin", "raised", "acthooks", "settings", "calls",
                                 "closurejoin", "rankedit", "samhand", "loadstate",
                                 "rollback", "staleclip", "addgroup",
                                 "batchnorm", "autogradw", "latedense", "gan", "dcgan",
                                 "seq2seq", "foreign", "earlystop", "phases", "buffers", "gather",
                                 "schedules", "maxnorm", "unequal", "contrastive", "varlen",
                                 "moe", "maml", "losshead", "finetune", "tokens",
                                 "modes", "nonfinite", "padding"])
ap.add_argument("--opt", default="adam", choices=["sgd", "momentum", "adam", "adamw", "lbfgs", "sam"])
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--batch", type=int, default=4, help="samples per rank and step")
ap.add_argument("--tol", type=float, default=1e-5)
ap.add_argument("--sync", default="auto")
for flag in ("freeze", "unused", "route", "validate", "clip", "uneven", "join", "no-zero",
             "buckets", "dense-bf16", "autocast", "checkpoint", "penalty", "gradpen",
             "transposed", "batchnorm", "parametrize", "hvd", "hooks", "closure", "surgery"):
    ap.add_argument("--" + flag, action="store_true")
args = None
RANK = [None]
PENALTY = [1e-3]  # --penalty's weight


class Net(nn.Module):
    """Smooth activations: a ReLU turns a float32 rounding difference into a
    jump when a unit crosses zero, and this test compares to rounding."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 24)
        self.norm = nn.LayerNorm(24)
        self.fc2 = nn.Linear(24, 24)
        self.extra = nn.Linear(24, 24)
        self.fc3 = nn.Linear(24, 16)
        self.head = nn.Linear(16, 5)
        self.alt_w = nn.Parameter(torch.randn(5, 16) / 4)
        self.alt_b = nn.Parameter(torch.zeros(5))
        self.bn = nn.BatchNorm1d(24)
        if args.parametrize:
            nn.utils.parametrizations.spectral_norm(self.fc2)
            nn.utils.parametrizations.orthogonal(self.extra)

    def forward(self, x, step):
        # (torch 1.13's layer_norm refuses a bfloat16 input under CPU autocast)
        h = torch.tanh(self.fc1(x)).float()
        if args.transposed:  # fc1's weight transposed: a dense use, as a tied decoder's
            self.recon = nn.functional.linear(h, self.fc1.weight.t())
        h = self.norm(h)
        if args.checkpoint:  # recomputed in backward: fc2's factors come from the recompute;
            # the norm and fc2 used outside the segment too (a reentrant one's inner pass
            # gives them a gradient of its own, after the outer pass gave theirs)
            h = torch.utils.checkpoint.checkpoint(
                lambda t: torch.tanh(self.fc2(self.norm(t))), h, use_reentrant=step % 2 == 0)
            h = h + 0.5 * torch.tanh(self.fc2(h))
        elif args.batchnorm:  # (after the tanh: a bias right before it has no gradient)
            h = self.bn(torch.tanh(self.fc2(h)))
        else:
            h = torch.tanh(self.fc2(h))
        if not args.unused or step < 5:
            h = h + torch.tanh(self.extra(h))
        h = torch.tanh(self.fc3(h))
        if not args.route:
            return self.head(h)
        route = x[:, 0] > 1.2
        out = self.head(h)
        if bool(route.any()):  # the samples of the routed head: maybe none here
            out = out.clone()
            out[route] = nn.functional.linear(h[route], self.alt_w, self.alt_b)
        return out


class SAM(torch.optim.Optimizer):
    """Sharpness-aware minimization as its authors' code writes it
    (github.com/davda54/sam): a step ascends to the worst point within rho,
    takes the gradient there, and steps the base optimizer from the start
    point; step(closure) after a backward() of its own."""

    def __init__(self, params, rho=0.05, **kwargs):
        super().__init__(params, dict(rho=rho, **kwargs))
        self.base_optimizer = torch.optim.SGD(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups

    @torch.no_grad()
    def step(self, closure):
        self.first_step()
        with torch.enable_grad():
            closure()
        self.second_step()

    @torch.no_grad()
    def first_step(self):
        """To the worst point within rho (after a backward): step()'s first
        half, or the authors' other way, called by the loop."""
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        scale = self.param_groups[0]["rho"] / (torch.norm(torch.stack(
            [q.norm() for q in grads])) + 1e-12)
        for p in (p for g in self.param_groups for p in g["params"] if p.grad is not None):
            self.state[p]["old_p"] = p.detach().clone()
            p.add_(p.grad * scale)
        self.zero_grad()

    @torch.no_grad()
    def second_step(self):
        """Back to the start, the base optimizer's step (after a backward);
        the loop zeroes the gradients."""
        for p in (p for g in self.param_groups for p in g["params"] if "old_p" in self.state[p]):
            p.copy_(self.state[p].pop("old_p"))
        self.base_optimizer.step()


def make_opt(params):
    if args.opt == "adam":
        return torch.optim.Adam(params, lr=0.01)
    if args.opt == "adamw":
        return torch.optim.AdamW(params, lr=0.01, weight_decay=0.05)
    if args.opt == "momentum":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3)
    if args.opt == "sam":  # (step(closure) only: --closure)
        return SAM(params, lr=0.05, momentum=0.9)
    if args.opt == "lbfgs":  # (step(closure) only: --closure; lr 0.2's line search
        # flips a branch on rounding alone: torch_patterns.sh)
        return torch.optim.LBFGS(params, lr=1.0, max_iter=3, history_size=4,
                                 line_search_fn="strong_wolfe")
    return torch.optim.SGD(params, lr=0.1)


def data(n=4096):
    g = torch.Generator().manual_seed(11)
    x = torch.randn(n, 10, generator=g)
    y = (x @ torch.randn(10, 5, generator=g)).argmax(1)
    return x, y


def counts(step, P):
    """Samples of each rank at `step`."""
    if not args.uneven:
        return [args.batch] * P
    c = [(step * 7 + q * 3) % (2 * args.batch) for q in range(P)]  # zeros among them
    if args.mode == "batchnorm":  # (torch's InstanceNorm fails on an empty batch)
        c = [n + 1 for n in c]
    if sum(c) == 0:
        c[0] = 1
    return c


def shard(x, y, step, q, P):
    """Rank q's rows of global batch `step` (the global batch: every rank's
    in rank order)."""
    c = counts(step, P)
    lo = (step * 37) % (len(x) - sum(c) - 1) + sum(c[:q])
    return x[lo:lo + c[q]], y[lo:lo + c[q]]


def steps_of(q):
    return args.steps - (2 * q if args.join else 0)


def apply_schedule(model, step):
    if not args.freeze:
        return
    if step == 6:
        model.fc2.requires_grad_(False)
        model.norm.requires_grad_(False)
    if step == 12:
        model.fc1.requires_grad_(False)
    if step == 18:
        model.fc2.requires_grad_(True)


HOOKED = {}  # --hooks: per model, head's gradient norms its watcher saw, fc3's hook's handle


def hook_schedule(model, step):
    if not args.hooks:
        return
    rec = HOOKED.get(id(model))
    if rec is None:
        rec = HOOKED[id(model)] = {"norms": []}
        model.fc1.weight.register_hook(lambda g: g * 2)
        model.head.bias.register_hook(lambda g: g.clamp(-0.01, 0.01))
        model.norm.weight.register_hook(lambda g: g.clamp(-0.02, 0.02))
        model.head.weight.register_hook(lambda g: rec["norms"].append(float(g.norm())))
        rec["handle"] = model.fc3.weight.register_hook(lambda g: g * 0.5)
        rec["late"] = model.norm.bias.register_hook(lambda g: g * 3)
    if step == 10:
        rec["handle"].remove()


def one_process(ref, ref_opt, x, y, t, P):
    """Step t of one process on the global minibatch (every rank's share)."""
    parts = [shard(x, y, t, q, P) for q in range(P)]
    return one_step(ref, ref_opt, torch.cat([a for a, _ in parts]),
                    torch.cat([b for _, b in parts]), t, False)


def near_one_process(model, ref):
    """rel_diff(model, ref) within --tol, else fail."""
    worst, where = rel_diff(model, ref)
    if worst > args.tol:
        fail("%s differs from one process's by %.3g (relative)" % (where, worst))
    return worst, where


def validate(model, x, step):
    if not args.validate:
        return
    if step % 3 == 0:
        model.eval()
        with torch.no_grad():
            model(x[:64], step)
        model.train()
    if step % 5 == 2:
        model(x[64:80], step).sum()  # a forward with gradients, never backward


def one_step(model, opt, xb, yb, step, sfb_side):
    """What a training loop does in one step, the same for sfb and one process."""
    apply_schedule(model, step)
    hook_schedule(model, step)
    norms = []  # clip_grad_norm_'s, per backward (--closure: per call)

    def closure():
        CALLS[sfb_side] += 1
        if args.no_zero:
            model.zero_grad(set_to_none=False)
        else:
            opt.zero_grad()
        if sfb_side and args.uneven:
            opt.set_samples(len(xb))
        x = xb.clone().requires_grad_(True) if args.gradpen else xb
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
            out = model(x, step)
        if args.hooks and step == 14:  # a handle removed between the forward and backward()
            HOOKED[id(model)]["late"].remove()
        if args.hooks and step == 16:  # hooks registered there, on a bias by factors and a dense one
            for p, f in ((model.fc3.bias, 0.5), (model.norm.bias, 2.0)):
                if p.requires_grad:  # (--freeze: the LayerNorm is frozen then)
                    p.register_hook(lambda g, f=f: g * f)
        loss = nn.functional.cross_entropy(out.float(), yb)
        if args.penalty:
            loss = loss + PENALTY[0] * sum(p.pow(2).sum() for p in model.parameters()
                                           if p.dim() == 2)
        if args.transposed and len(x):
            loss = loss + 0.1 * nn.functional.mse_loss(model.recon, x)
        if args.gradpen and len(x):
            g, = torch.autograd.grad(out.float().sum(), x, create_graph=True)
            loss = loss + 0.01 * g.pow(2).sum(1).mean()
        loss.backward()
        if args.clip and not (sfb_side and args.hvd):
            norms.append(float(nn.utils.clip_grad_norm_(model.parameters(), 0.05)))
        if args.surgery:
            for p in model.parameters():
                if p.grad is not None:
                    p.grad = p.grad * 0.5
        return loss

    if args.closure:  # (LBFGS's way: the loss it returns is the ranks' mean on every rank)
        if args.opt == "sam":  # (SAM: a backward, then step(closure), which returns None)
            closure()
            opt.step(closure)
        else:
            LOSSES[sfb_side].append(float(opt.step(closure)))
        return norms[0] if norms else None
    closure()
    if sfb_side and args.hvd:  # clipping as Horovod's loop writes it
        opt.synchronize()
        if args.clip:
            norms.append(float(nn.utils.clip_grad_norm_(model.parameters(), 0.05)))
    with opt.skip_synchronize() if sfb_side and args.hvd else contextlib.nullcontext():
        opt.step()
    return norms[0] if norms else None


LOSSES = {True: [], False: []}  # --closure: what step(closure) returned, sfb's and one process's
CALLS = {True: 0, False: 0}  # the backward passes (the calls of the closure) on each side


# The reference's global batch, as the ranks' rows (reference() sets it per
# step): _Bf16Products computes its bfloat16 GEMMs on each rank's rows, as
# the ranks do. A bfloat16 GEMM's rows are not the same numbers whatever the
# rows around them: on CPUs with AVX512_BF16, torch 1.13's oneDNN kernels
# round a 32-row product differently from the same rows in 8-row pieces.
SHARD_ROWS = []


def _by_shard(fn, t, *rest):
    """fn(t, *rest) over the rows of each rank's shard, concatenated (all of
    t at once when its rows are not the global batch's: a validation)."""
    if sum(SHARD_ROWS) != t.shape[0] or len(SHARD_ROWS) < 2:
        return fn(t, *rest)
    return torch.cat([fn(part, *rest) for part in torch.split(t, SHARD_ROWS)])


class _Bf16Products(torch.autograd.Function):
    """Linear as autocast computes it on each rank's rows (bfloat16 input,
    weight and bias; the input's gradient a bfloat16 GEMM), its weight's and
    bias's gradients the float32 sums of those bfloat16 numbers' products:
    what sfb.torch's factors add up over the ranks. One process under
    autocast rounds that sum to bfloat16; this reference does not, so
    sfb.torch must agree with it within float32 rounding."""

    @staticmethod
    def forward(ctx, x, w, b):
        xl, wl = x.bfloat16(), w.bfloat16()
        ctx.save_for_backward(xl, wl)
        ctx.has_b = b is not None
        with torch.autocast("cpu", enabled=False):
            return _by_shard(torch._C._nn.linear, xl, wl,
                             b.bfloat16() if b is not None else None)

    @staticmethod
    def backward(ctx, go):
        xl, wl = ctx.saved_tensors
        g = go.reshape(-1, wl.shape[0]).float()
        gw = g.t().matmul(xl.reshape(-1, wl.shape[1]).float())
        return (_by_shard(torch.matmul, go, wl).float(), gw, g.sum(0) if ctx.has_b else None)


def products_linear(x, w, b=None):
    return _Bf16Products.apply(x, w, b)


def fail(msg):
    print("FAIL rank %s: %s" % (RANK[0], msg), flush=True)
    sys.exit(1)


def digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.digest()


def same(job, model, when):
    mine = digest(model)
    differ = [q for q, d in enumerate(job.allgather(mine)) if d != mine]
    if differ:
        fail("%s the parameters of ranks %s differ from this rank's bits" % (when, differ))


def setup():
    return setup_model(Net)


def setup_model(make):
    sft.init(peer_timeout_s=5)
    RANK[0] = sft.rank()
    torch.manual_seed(7)
    model = make()
    sft.broadcast_parameters(model.state_dict(), root_rank=0)
    return model


def beside_one_process(model, **kw):
    """model's DistributedOptimizer (make_opt's, sync=args.sync, kw) and one
    process's reference: a copy of model with the plain optimizer. Returns
    (opt, ref, ref_opt, job)."""
    ref = copy.deepcopy(model)
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model, sync=args.sync,
                                   **kw)
    return opt, ref, make_opt(ref.parameters()), sft._need()


def sgd_beside_one_process():
    """setup()'s model and plain SGD (lr 0.05: a gradient 1/P or P times
    one process's shows) wrapped, beside one process's copy and its own:
    (model, opt, ref, ref_opt)."""
    model = setup()
    ref = copy.deepcopy(model)
    opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), model=model)
    return model, opt, ref, torch.optim.SGD(ref.parameters(), lr=0.05)


def unequal_said(w):
    """Whether warning w says the ranks' gradients are weighed otherwise
    than one process's mean over the union (or their minibatches padded
    apart feed a layer that depends on the padding)."""
    return any(k in str(w.message) for k in (
        "minibatches differ", "losses average over different counts", "is a sum over the samples",
        "average over counts that are not in proportion", "padded to different lengths",
        "adds a term summed over the samples", "combines the samples of this rank's",
        "without gradient that differ", "a count summed over the ranks",
        "each give one task's mean loss",
        "the world's size: .grad already holds", "called set_samples(0) while",
        "forwards, one sample each",
        "without gradient normalized over this rank's minibatch",
        "the ranks' losses are made of different terms"))


@contextlib.contextmanager
def no_unequal_warning():
    """The block's warnings recorded; failing if one says the ranks'
    minibatches differ."""
    import warnings
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        yield
    said = [str(w.message) for w in said if unequal_said(w)]
    if said:
        fail("warned of unequal minibatches: %s" % said)


def exact():
    HOOKED.clear()
    for side in (True, False):
        LOSSES[side], CALLS[side] = [], 0
    model = setup()
    P, r = sft.size(), sft.rank()
    x, y = data()
    ref = copy.deepcopy(model)
    for m in (model, ref) if args.no_zero else ():
        # a backward before wrapping (a check, an LR finder): zeroed .grads left
        nn.functional.cross_entropy(m(x[:8], 0), y[:8]).backward()
        m.zero_grad(set_to_none=False)
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model, sync=args.sync,
                                   max_samples=2 * args.batch if args.uneven else None,
                                   bucket_cap_mb=1e-6 if args.buckets else 4,
                                   dense_dtype="bf16" if args.dense_bf16 else "f32")
    ref_opt = make_opt(ref.parameters())
    job = sft._need()
    norms, ref_norms = [], []
    # (a BatchNorm in training mode is refused inside join(), as DDP's Join
    # refuses SyncBatchNorm: the run without join() then)
    with contextlib.nullcontext() if args.batchnorm and not args.join else opt.join():
        for t in range(steps_of(r)):
            validate(model, x, t)
            xb, yb = shard(x, y, t, r, P)
            norms.append(one_step(model, opt, xb, yb, t, True))
            if not args.join:  # (a collective: the joined ranks are in the join loop)
                same(job, model, "after step %d" % t)
    same(job, model, "at the end")
    sft.shutdown()
    clock = opt.clock
    autocast_ref = copy.deepcopy(ref) if args.autocast else None
    torch_linear = nn.functional.linear
    if args.autocast:  # the reference sfb.torch must match: see _Bf16Products
        nn.functional.linear = products_linear
    try:
        ref_norms = reference(ref, ref_opt, x, y, P)
    finally:
        nn.functional.linear = torch_linear
    worst, where = rel_diff(model, ref)
    if worst > args.tol:
        fail("%s differs from one process's by %.3g (relative)" % (where, worst))
    if args.autocast:  # and one process under torch's own autocast, within bf16 rounding
        reference(autocast_ref, make_opt(autocast_ref.parameters()), x, y, P)
        loose, at = rel_diff(model, autocast_ref)
        if loose > 0.05:
            fail("%s differs from one autocast process's by %.3g (relative)" % (at, loose))
    if args.clip:
        mine = norms[:len(ref_norms)]
        bad = [t for t, (a, b) in enumerate(zip(mine, ref_norms)) if abs(a - b) > 1e-5 * abs(b)]
        if bad:
            fail("clip_grad_norm_ at step %d saw %.7g, one process %.7g" %
                 (bad[0], mine[bad[0]], ref_norms[bad[0]]))
    if args.closure:  # (this rank's steps: with --join, the first of the reference's)
        mine, theirs = LOSSES[True], LOSSES[False]
        bad = [t for t, (a, b) in enumerate(zip(mine, theirs)) if abs(a - b) > args.tol * abs(b)]
        if len(mine) != (0 if args.opt == "sam" else steps_of(r)) or bad:
            fail("step(closure) returned at step %d %s, one process %s" % (bad[0], mine[bad[0]:][:3],
                                                                 theirs[bad[0]:][:3])
                 if bad else "%d losses from %d steps" % (len(mine), steps_of(r)))
    # (step(closure): a reduction per call, as many as one process's calls)
    if clock != (CALLS[False] if args.closure else args.steps) or \
            (args.closure and CALLS[True] != clock):
        fail("the job's clock is %d after %d steps (%d calls of the closure, one process %d)" %
             (clock, args.steps, CALLS[True], CALLS[False]))
    if args.hooks:  # (the steps this rank took: with --join, the first of the reference's)
        mine, ref_norms = HOOKED[id(model)]["norms"], HOOKED[id(ref)]["norms"]
        bad = [t for t, (a, b) in enumerate(zip(mine, ref_norms)) if abs(a - b) > 1e-5 * b]
        if not mine or len(mine) > len(ref_norms) or bad:
            fail("head's gradient watcher saw %s, one process's %s" % (mine[:3], ref_norms[:3]))
    if args.route and not (args.penalty or args.gradpen) and "alt_w (5x16+bias): " not in opt.plan:
        fail("the routed head is not a matrix of its own:\n%s" % opt.plan)
    layers = ["fc1 (24x10+bias)"] if args.transposed else []
    if args.penalty or args.gradpen:  # (alt_w: a layer where F.linear met it)
        layers = ["%s (%dx%d+bias)" % (n, m.out_features, m.in_features)
                  for n, m in model.named_modules() if isinstance(m, nn.Linear)]
        layers += ["alt_w (5x16+bias)"] if args.route else []
    missed = [n for n in layers if n + ": dense (a dense gradient besides its factors in the "
              "first step" not in opt.plan]
    if missed:
        fail("the plan does not say %s goes densely for its dense use:\n%s" %
             (missed[0], opt.plan))
    dense = [line for line in opt.plan.splitlines() if line.startswith("dense (")]
    if args.dense_bf16 and not (dense and "(dense gradients in bf16, " in dense[0] and
                                (args.sync != "fms" or "fms (bf16 rows; " in opt.plan)):
        fail("the plan does not say bf16:\n%s" % opt.plan)
    if args.buckets and not (dense and "(dense gradients%s, %s buckets, each leaving once "
                             "backward has filled it)" % (" in bf16" if args.dense_bf16 else "",
                                                          dense[0].split()[1].lstrip("("))
                             in dense[0]):
        fail("not a bucket per dense tensor:\n%s" % opt.plan)
    print("ok exact %s: %d steps bit-identical on %d ranks, max relative difference %.3g (%s)" %
          (" ".join(sys.argv_case), args.steps, P, worst, where), flush=True)


def reference(ref, ref_opt, x, y, P):
    """One process on the union of the ranks still training, step by step;
    clip_grad_norm_'s norms."""
    norms = []
    for t in range(args.steps):
        live = [q for q in range(P) if steps_of(q) > t]
        parts = [shard(x, y, t, q, P) for q in live]
        SHARD_ROWS[:] = [len(a) for a, _ in parts]
        validate(ref, x, t)
        norms.append(one_step(ref, ref_opt, torch.cat([a for a, _ in parts]),
                              torch.cat([b for _, b in parts]), t, False))
    return norms


def rel_diff(model, ref, skip=None):
    """The largest ||p - q|| / ||q|| over the tensors (the floating-point
    persistent buffers too: running statistics), and which; skip: a
    predicate on names left out."""
    worst, where = 0.0, ""
    pairs = [(a, b) for a, b in zip(model.named_parameters(), ref.named_parameters())
             if skip is None or not skip(a[0])]
    kept = model.state_dict()  # (a non-persistent buffer is a record, not compared)
    pairs += [(a, b) for a, b in zip(model.named_buffers(), ref.named_buffers())
              if a[1].is_floating_point() and a[0] in kept]
    for (name, p), (_, q) in pairs:
        d = float((p.detach().double() - q.detach().double()).norm() /
                  max(float(q.detach().double().norm()), 1e-30))
        if d > worst:
            worst, where = d, name
    return worst, where


def short_rank_fails(name, steps, joined, expect):
    """Rank 1 two steps short of the others (inside opt.join() where joined):
    every rank's error, within 4 s, must pass expect (else its words)."""
    model = setup()
    P, r = sft.size(), sft.rank()
    x, y = data()
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
    t0 = time.monotonic()
    try:
        with opt.join() if joined else contextlib.nullcontext():
            for t in range(steps - (2 if r == 1 else 0)):
                xb, yb = shard(x, y, t, r, P)
                one_step(model, opt, xb, yb, t, True)
        sft.shutdown()
    except sfb.Error as e:
        took = time.monotonic() - t0
        wrong = expect(e)
        if wrong:
            fail("expected %s, got %s: %s" % (wrong, type(e).__name__, e))
        if took > 4:
            fail("the error took %.1f s" % took)
        print("ok %s: %s: %s" % (name, type(e).__name__, e), flush=True)
        closed()
        return
    fail("no error")


def nojoin():
    short_rank_fails("nojoin", args.steps, False, lambda e: None if (
        isinstance(e, sfb.PeerError) and "join()" in str(e) and "rank" in str(e)) else
        "a PeerError naming the rank and join()")


def raised():
    """Rank 1's own exception between backward() and step() at step 3,
    with shutdown() in a `finally:` around the loop (PyTorch's examples'
    habit): every other rank fails within 4 s with sfb.PeerError naming
    rank 1 and its exception (not a shutdown() to put in join()), rank 1's
    exception goes on. Then every rank's data ending in StopIteration,
    shutdown() in the `except StopIteration:` block: the job ends as it
    should, with no error."""
    model = setup()
    P, r = sft.size(), sft.rank()
    x, y = data()
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
    t0 = time.monotonic()
    try:
        try:
            for t in range(args.steps):
                xb, yb = shard(x, y, t, r, P)
                opt.zero_grad()
                nn.functional.cross_entropy(model(xb, t), yb).backward()
                if r == 1 and t == 3:
                    raise ValueError("boom at step 3 of rank 1")
                opt.step()
        finally:
            sft.shutdown()
        fail("no error")
    except (sfb.Error, ValueError) as e:
        took = time.monotonic() - t0
        want = (ValueError, "boom at step 3 of rank 1") if r == 1 else (
            sfb.PeerError, "rank 1 aborted the job: ValueError: boom at step 3 of rank 1")
        if not isinstance(e, want[0]) or want[1] not in str(e) or "join()" in str(e):
            fail("expected %s naming %r, got %s: %s" % (want[0].__name__, want[1],
                                                      type(e).__name__, e))
        if took > 4:
            fail("the error took %.1f s" % took)
        said = "%s: %s" % (type(e).__name__, e)
    model = setup()
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
    batches = iter([shard(x, y, t, r, P) for t in range(4)])
    t = 0
    while True:
        try:
            xb, yb = next(batches)
        except StopIteration:
            sft.shutdown()  # (every rank's data ends here: no error)
            break
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb, t), yb).backward()
        opt.step()
        t += 1
    print("ok raised: %s; shutdown() in `except StopIteration:` on every rank ended the job" %
          said, flush=True)


def settings():
    """max_samples given otherwise on rank 1 (the layers' factor rows, from
    which sync="auto" picks the engines), then check_every (the replica
    checks' collectives): every rank fails at the first step with
    sfb.MismatchError naming the setting and both values, within 4 s (not
    frames refused until the stall timeout, nor calls said to differ)."""
    for name, mine, theirs in (("max_samples", 100, 4), ("check_every", 100, 5)):
        model = setup()
        P, r = sft.size(), sft.rank()
        x, y = data()
        opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model, sync="auto",
                                       **{name: theirs if r == 1 else mine})
        t0 = time.monotonic()
        try:
            for t in range(3):
                one_step(model, opt, *shard(x, y, t, r, P), t, True)
            fail("%s: no error" % name)
        except sfb.Error as e:
            if not isinstance(e, sfb.MismatchError) or name not in str(e) or \
                    "rank 1 has \"%d\"" % theirs not in str(e):
                fail("expected a MismatchError naming %s, got %s: %s" %
                     (name, type(e).__name__, e))
            if time.monotonic() - t0 > 4:
                fail("the error took %.1f s" % (time.monotonic() - t0))
            said = str(e)
        closed()
    print("ok settings: %s" % said, flush=True)


def acthooks():
    """Hooks on the gradients of what the model computed: Graves' clipping
    of a hidden layer's gradient by Tensor.register_hook(clamp), and a
    module's full backward hook clamping its input's gradient. Each rank's
    mean loss is over its own rows, so those gradients are P times one
    process's: rank 0 warns once, naming the hook, and the model is not
    one process's (the warning is not false); clamped at P times the bound
    (what the warning says one process's clamp does), one process's."""
    import warnings

    class Clipped(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2, self.fc3 = nn.Linear(10, 24), nn.Linear(24, 24), nn.Linear(24, 5)

        def forward(self, x, bound=None):
            h = torch.tanh(self.fc1(x))
            if bound is not None:  # (Graves' clipping of a hidden layer's gradient)
                h.register_hook(lambda g: g.clamp(-bound, bound))
            return self.fc3(torch.tanh(self.fc2(h)))

    for kind in ("tensor", "module", "tensor_scaled"):
        model = setup_model(Clipped)
        P, r = sft.size(), sft.rank()
        x, y = data()
        ref = copy.deepcopy(model)
        c = 0.002
        handles = []
        for m, scale in ((model, P if kind.endswith("scaled") else 1), (ref, 1)):
            if kind == "module":
                handles.append(m.fc2.register_full_backward_hook(
                    lambda mod, gin, gout, b=c * scale: (gin[0].clamp(-b, b),)))
        opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5), model=model)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            for t in range(4):
                for mine, m, o in ((True, model, opt), (False, ref, ref_opt)):
                    xb, yb = shard(x, y, t, r, P) if mine else (
                        torch.cat([shard(x, y, t, q, P)[0] for q in range(P)]),
                        torch.cat([shard(x, y, t, q, P)[1] for q in range(P)]))
                    b = c * (P if mine and kind.endswith("scaled") else 1)
                    o.zero_grad()
                    out = m(xb, None if kind == "module" else b)
                    nn.functional.cross_entropy(out, yb).backward()
                    o.step()
        sft.shutdown()
        worst, where = rel_diff(model, ref)
        if kind.endswith("scaled") and worst > args.tol:
            fail("a clamp at P times the bound: %s differs from one process's by %.3g" %
                 (where, worst))
        if not kind.endswith("scaled") and worst < 100 * args.tol:
            fail("a %s hook's clamp: %s within %.3g of one process's (no difference to warn "
                 "of)" % (kind, where, worst))
        said = [str(w.message) for w in got if "runs on this rank's gradient" in str(w.message)]
        want = "the backward hook of module fc2" if kind == "module" else \
            "a gradient hook on a tensor computed at torch_patterns.py:"
        if len(said) != (0 if r else 1) or said and (
                want not in said[0] or "%d times one process's" % P not in said[0]):
            fail("a %s hook: warned %r, expected one naming %r" % (kind, said, want))
    print("ok acthooks: rank 0 warned once of a clamp on an activation's gradient and of a "
          "module's backward hook (each not one process's); clamped at P times the bound, "
          "within %.3g of one process" % worst, flush=True)


def closurejoin():
    """step(closure) inside join(): the ranks out of data run no closure, and
    its loss is every rank's: refused at once on every rank, naming the rank
    that joined."""
    args.closure = True
    short_rank_fails("closurejoin", args.steps, True, lambda e: None if (
        "step(closure) while rank 1 has joined" in str(e)) else
        "step(closure) refused naming rank 1")


def rankedit():
    """A parameter changed on rank 1 only (code under `if rank == 1:`): the
    ranks' gradients are the same, their parameters part. Refused after
    step 4 naming it and the ranks; after the first steps a minority's copy
    is repaired from the majority's once (a flipped bit), refused when it
    differs again. Changed after step 6 of 8 (after the checks of the first
    steps): refused by shutdown()."""
    P, r = None, None
    for edits, every, steps, want in (
            ((2,), 100, 50, "fc2.weight differs between ranks after step 4 "
             "(ranks 0, 2, 3: one value; rank 1: another)"),
            ((36, 42), 5, 50, "fc2.weight differs between ranks after step 45 "
             "(ranks 0, 2, 3: one value; rank 1: another)"),
            ((6,), 100, 8, "fc2.weight differs between ranks after step 8 "
             "(ranks 0, 2, 3: one value; rank 1: another)")):
        model = setup()
        P, r = sft.size(), sft.rank()
        x, y = data()
        opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model,
                                       check_every=every)
        try:
            for t in range(steps):
                xb, yb = shard(x, y, t, r, P)
                one_step(model, opt, xb, yb, t, True)
                if t + 1 in edits and r == 1:
                    with torch.no_grad():
                        model.fc2.weight.mul_(0.5)
            sft.shutdown()
            fail("no error")
        except sfb.MismatchError as e:
            if want not in str(e) or e.param != "fc2.weight" or \
                    (every == 5) != ("repaired at an earlier check" in str(e)):
                fail("expected %r, got %s" % (want, e))
        closed()
    apart_at_start()
    print("ok rankedit: a parameter changed on rank 1 refused after step 4; repaired at step "
          "40, refused when it differed again; changed after step 6 of 8, refused by "
          "shutdown(); parted before the first step, refused naming it", flush=True)


class Codebook(nn.Module):
    """A VQ codebook kept as a Parameter without gradient, moved in the
    forward toward this rank's own inputs (an EMA of its data)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 5)
        self.cb = nn.Parameter(torch.zeros(3, 10), requires_grad=False)

    def forward(self, x):
        with torch.no_grad():
            self.cb.mul_(0.9).add_(0.1 * x[:3])
        return self.fc(x + self.cb.mean(0))


def apart_at_start():
    """Parameters that differ at the first step: a model made without
    broadcast_parameters (each rank's seed), and a Parameter without
    gradient changed in the first forward from each rank's own data. Every
    rank fails naming the first that differs, broadcast_parameters and the
    first forward."""
    x, y = data()
    for kind, first in (("unbroadcast", "alt_w"), ("codebook", "cb")):
        sft.init(peer_timeout_s=5)
        P, r = sft.size(), sft.rank()
        torch.manual_seed(100 + r)
        if kind == "codebook":
            torch.manual_seed(7)
            model = Codebook()
            sft.broadcast_parameters(model.state_dict())
        else:
            model = Net()
        opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
        xb, yb = shard(x, y, 0, r, P)
        try:
            opt.zero_grad()
            out = model(xb) if kind == "codebook" else model(xb, 0)
            nn.functional.cross_entropy(out, yb).backward()
            opt.step()
            fail("%s: parameters apart at the first step went on" % kind)
        except (sfb.MismatchError, sfb.PeerError) as e:  # (a peer's refusal, first)
            want = "the first that differs: %s (rank 0 and rank 1 differ): call " \
                "sfb.torch.broadcast_parameters(model.state_dict()) before training; where it " \
                "was called, the first forward changed %s on some ranks" % (first, first)
            if "the ranks start from different parameters" not in str(e) or want not in str(e):
                fail("%s: expected %r, got %s" % (kind, want, e))
        closed()


def samhand():
    """SAM stepped by its first_step and second_step (never step()): exact,
    and the replica checks follow the reductions; a parameter changed on
    rank 1 alone is refused at the 32nd, and one changed after it in
    shutdown()."""
    import warnings
    for edit in (None, 3, 17):
        model = setup()
        P, r = sft.size(), sft.rank()
        ref = copy.deepcopy(model)
        x, y = data()
        opt = sft.DistributedOptimizer(SAM(model.parameters(), lr=0.05, momentum=0.9),
                                       model=model)
        ref_opt = SAM(ref.parameters(), lr=0.05, momentum=0.9)
        job = sft._need()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (rank 0: no step() in 32 reductions)
                for t in range(20):
                    for m, o, (xb, yb) in ((model, opt, shard(x, y, t, r, P)),
                                           (ref, ref_opt, (torch.cat([shard(x, y, t, q, P)[0]
                                                                      for q in range(P)]),
                                                           torch.cat([shard(x, y, t, q, P)[1]
                                                                      for q in range(P)])))):
                        nn.functional.cross_entropy(m(xb, t), yb).backward()
                        o.first_step()
                        nn.functional.cross_entropy(m(xb, t), yb).backward()
                        o.second_step()
                        o.zero_grad()
                    if t == edit and r == 1:
                        with torch.no_grad():
                            model.fc2.weight.mul_(0.5)
            if edit == 3:
                fail("a parameter changed on rank 1 alone went on")
            if edit is None:
                same(job, model, "after 20 steps")
                worst, where = near_one_process(model, ref)
            sft.shutdown()  # (the parameters compared once more: after reduction 41)
            if edit:
                fail("a parameter changed on rank 1 alone after reduction 32 ended the job")
        except (sfb.MismatchError, sfb.PeerError) as e:  # (a peer's refusal, first)
            want = "fc2.weight differs between ranks after reduction %d (ranks 0, 2, 3: one " \
                "value" % (32 if edit == 3 else 41)
            if not edit or want not in str(e):
                fail("expected %r, got %s" % (want, e))
        closed()
    print("ok samhand: 20 steps within %.3g of one process (%s); a parameter changed on rank 1 "
          "refused after reduction 32, one changed after it in shutdown()" % (worst, where),
          flush=True)


def loadstate():
    model = setup()
    x, y = data()
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
    if sft.rank() == 0:
        sd = opt.state_dict()
        sd["sfb"]["clock"] = 8
        opt.load_state_dict(sd)
    t0 = time.monotonic()
    try:
        xb, yb = shard(x, y, 0, sft.rank(), sft.size())
        one_step(model, opt, xb, yb, 0, True)
    except sfb.Error as e:
        if not isinstance(e, sfb.MismatchError) or '"8"' not in str(e) or '"0"' not in str(e) \
                or "clock" not in str(e):
            fail("expected a MismatchError naming both clocks, got %s: %s" %
                 (type(e).__name__, e))
        if time.monotonic() - t0 > 4:
            fail("the error took %.1f s" % (time.monotonic() - t0))
        closed()
        worst = opaque_state()
        print("ok loadstate: %s; objects in param groups and state within %.3g of one "
              "process" % (e, worst), flush=True)
        return
    fail("no error")


class Projected(torch.optim.SGD):
    """SGD whose param group holds a function (VICReg's LARS filters) and
    whose state holds an object per parameter (GaLore's projector), both
    with the default repr: an address, another on every rank."""

    class Projector:
        def __init__(self, p):
            self.rank = min(p.shape)

    def __init__(self, params, lr):
        super().__init__(params, lr=lr)
        for g in self.param_groups:
            g["exclude"] = lambda p: p.dim() == 1

    @torch.no_grad()
    def step(self, closure=None):
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is not None and "projector" not in self.state[p]:
                    self.state[p]["projector"] = Projected.Projector(p)
        return super().step(closure)


def opaque_state():
    """Projected trains as one process's, and is not refused (its hyper-
    parameters and state were compared by repr, addresses and all: "the
    ranks' optimizers differ" at the first step); returns the worst
    difference."""
    model = setup()
    P, r = sft.size(), sft.rank()
    x, y = data()
    ref = copy.deepcopy(model)
    opt = sft.DistributedOptimizer(Projected(model.parameters(), 0.05), model=model)
    ref_opt = Projected(ref.parameters(), 0.05)
    for t in range(5):
        one_step(model, opt, *shard(x, y, t, r, P), t, True)
        one_process(ref, ref_opt, x, y, t, P)
    sft.shutdown()
    worst, where = rel_diff(model, ref)
    if worst > args.tol:
        fail("objects in param groups and state: %s differs from one process's by %.3g" %
             (where, worst))
    return worst


def rollback():
    """Back to step 10's checkpoint at step 16, the learning rate halved, on
    every rank and in one process; then loads on some ranks only."""
    model = setup()
    P, r = sft.size(), sft.rank()
    x, y = data()
    opt, ref, ref_opt, job = beside_one_process(model)
    for t in range(args.steps):
        if t == 10:
            kept = [copy.deepcopy(o.state_dict()) for o in (model, opt, ref, ref_opt)]
        if t == 16:
            for o, sd in zip((model, opt, ref, ref_opt), kept):
                o.load_state_dict(sd)
            for o in (opt, ref_opt):
                for g in o.param_groups:
                    g["lr"] *= 0.5
        one_step(model, opt, *shard(x, y, t, r, P), t, True)
        same(job, model, "after step %d" % t)
        one_process(ref, ref_opt, x, y, t, P)
    worst, where = near_one_process(model, ref)
    said = []
    for loads, want in (({0: "opt"}, ["rank 0 loaded an optimizer state", "and rank 1 did not "
                                      "load one", "every rank must load the same checkpoint"]),
                        ({q: "opt" for q in range(P)} | {1: "both"},
                         ["fc1.weight differs between ranks after step 2", "on some ranks"]),
                        ({1: "model"},  # (a model's load alone, not at a check's step)
                         ["fc1.weight differs between ranks after step 2", "on some ranks"])):
        if said:  # (a new job: the first refusal ended the last)
            closed()
            model = setup()
            opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model,
                                           sync=args.sync)
        try:
            for t in range(4):
                if t == 0:
                    kept = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()))
                if t == 2 and r in loads:
                    if loads[r] in ("both", "model"):
                        model.load_state_dict(kept[0])
                    if loads[r] in ("both", "opt"):
                        opt.load_state_dict(kept[1])
                one_step(model, opt, *shard(x, y, t, r, P), t, True)
            fail("loads %s went on" % loads)
        except (sfb.MismatchError, sfb.PeerError) as e:  # (a peer's refusal, first)
            if not all(w in str(e) for w in want):
                fail("expected an error saying %s, got %s" % (want, e))
            said.append(str(e).split("sfb.torch: ")[1][:50])
    closed()
    print("ok %s: back to step 10 at step 16 within %.3g of one process (%s); loads on some "
          "ranks refused (%s)" % (" ".join(sys.argv_case), worst, where, "; ".join(said)),
          flush=True)


def staleclip():
    # A rank's own step refuses the clipped .grad; a rank whose step has not
    # come yet when the first refusal ends the job (still in setup's
    # broadcast, or in backward) gets the PeerError that carries it.
    try:
        model = setup()
        x, y = data()
        opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       model=model, staleness=1)
        xb, yb = shard(x, y, 0, sft.rank(), sft.size())
        nn.functional.cross_entropy(model(xb, 0), yb).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
        opt.step()
    except (sfb.UsageError, sfb.PeerError) as e:
        if ".grad changed between backward() and step()" not in str(e) or \
                (isinstance(e, sfb.UsageError) and e.param is None):
            fail("the error does not say why or name the parameter: %s" % e)
        print("ok staleclip: %s" % e, flush=True)
        closed()
        return
    fail("no error")


def frozen_refresh():
    """Prototypes kept as a parameter without gradient, in no optimizer,
    refreshed by hand after steps 2 and 3: from every rank's rows (their
    mean over sft.allreduce) nothing is said; from each rank's own, the
    check after step 4 refuses it on every rank, naming it (not the frozen
    base beside it, the same on every rank). Changed on rank 0 alone by a
    round trip that leaves it within rounding (a LoRA merged into its base
    for rank 0's validation and out again): nothing said."""
    for union in (True, False, "rounding"):
        model = setup()
        model.protos = nn.Parameter(torch.randn(5, 5), requires_grad=False)
        # (a frozen base in bfloat16, compared too: its bytes read as they are)
        model.base = nn.Parameter(torch.ones(3, dtype=torch.bfloat16), requires_grad=False)
        x, y = data()
        opt = sft.DistributedOptimizer(make_opt(
            [p for p in model.parameters() if p.requires_grad]), model=model)
        P, r = sft.size(), sft.rank()
        try:
            for t in range(6):
                xb, yb = shard(x, y, t, r, P)
                opt.zero_grad()
                out = model(xb, t)
                nn.functional.cross_entropy(out - 0.1 * out.detach() @ model.protos, yb).backward()
                opt.step()
                if t in (2, 3) and union == "rounding" and r == 0:
                    with torch.no_grad():
                        was = model.protos.clone()
                        merged = out.detach()[:1].expand(5, 5) * 3.3
                        model.protos.add_(merged).sub_(merged)
                        if torch.equal(was, model.protos):
                            fail("the round trip left the prototypes' bits as they were")
                elif t in (2, 3) and union != "rounding":
                    with torch.no_grad():
                        mean = out.detach().mean(0)
                        model.protos.add_(sft.allreduce(mean) if union else mean)
            sft.shutdown()
            if not union:
                fail("prototypes refreshed from each rank's own rows went on")
        except (sfb.MismatchError, sfb.PeerError) as e:
            if union or "does not hold (protos on rank" not in str(e) or \
                    "step 4" not in str(e):
                fail("prototypes refreshed (over the union: %s): %s" % (union, e))
        closed()


def addgroup():
    """add_param_group on the DistributedOptimizer after two steps: refused
    on every rank, saying why, nothing changed (the replicas as they were).
    A head then replaced, stepped by a plain optimizer of its own (each
    rank's copy on its own gradients): refused by the checks; so
    are prototypes kept as a frozen parameter, refreshed from each rank's
    own rows, after step 4 (frozen_refresh)."""
    frozen_refresh()
    appended()
    model = setup()
    x, y = data()
    head = nn.Linear(5, 5)
    sft.broadcast_parameters(head.state_dict(), root_rank=0)
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
    job = sft._need()
    for t in range(2):
        xb, yb = shard(x, y, t, sft.rank(), sft.size())
        one_step(model, opt, xb, yb, t, True)
    groups = len(opt.param_groups)
    try:
        opt.add_param_group({"params": list(head.parameters()), "lr": 0.01})
    except sfb.UsageError as e:
        if "add_param_group" not in str(e) or "requires_grad_(False)" not in str(e):
            fail("the error does not say why or what to do instead: %s" % e)
        if len(opt.param_groups) != groups:
            fail("the group was added anyway")
        xb, yb = shard(x, y, 2, sft.rank(), sft.size())
        one_step(model, opt, xb, yb, 2, True)  # training goes on
        same(job, model, "after the refusal and a step")
        # a head replaced after wrapping, stepped by a plain optimizer: each
        # rank trains its own copy; shutdown()'s checks refuse it, naming it
        torch.manual_seed(5)
        model.head = nn.Linear(16, 5)
        plain = torch.optim.SGD(model.head.parameters(), lr=0.1)
        try:  # (the check after step 4, or shutdown()'s)
            for t in range(3, 5):
                xb, yb = shard(x, y, t, sft.rank(), sft.size())
                plain.zero_grad()
                one_step(model, opt, xb, yb, t, True)
                plain.step()
            sft.shutdown()
            fail("a head replaced after wrapping and trained apart passed shutdown()")
        except (sfb.MismatchError, sfb.PeerError) as e2:
            if "does not hold (head.weight, head.bias on rank" not in str(e2):
                fail("the error does not name the replaced head: %s" % e2)
        closed()
        print("ok addgroup: %s; a head replaced after wrapping refused, frozen "
              "prototypes refreshed from each rank's rows after step 4" % e, flush=True)
        return
    fail("no error")


def appended():
    """Kendall's uncertainty weights joining the optimizer after a warm-up
    by hand, opt.param_groups[0]["params"].append(log_vars), or as a group
    dict appended (add_param_group's refusal passed by): refused at the next
    step() on every rank, naming the parameter and what to do, the model
    as it was (they trained on each rank's own gradient, 2.5 off, silent)."""
    x, y = data()
    for how in ("append", "group"):
        model = setup()
        opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
        log_vars = nn.Parameter(torch.zeros(5))
        try:
            for t in range(4):
                if t == 2 and how == "append":
                    opt.param_groups[0]["params"].append(log_vars)
                elif t == 2:
                    opt.param_groups.append(dict(opt.param_groups[0], params=[log_vars]))
                xb, yb = shard(x, y, t, sft.rank(), sft.size())
                opt.zero_grad()
                loss = nn.functional.cross_entropy(model(xb, t), yb, reduction="none")
                (loss.mean() * torch.exp(-log_vars).mean() + log_vars.mean()).backward()
                before = [p.detach().clone() for p in model.parameters()]
                opt.step()
            fail("a parameter appended to param_groups by hand (%s) was not refused" % how)
        except (sfb.UsageError, sfb.PeerError) as e:
            # (this rank's refusal, or a peer's that ended the job first)
            if t != 2 or "1 parameter added after it was wrapped (one of shape (5,)" not in \
                    str(e) or "requires_grad_(False)" not in str(e):
                fail("the refusal (%s, step %d) does not name it or say what to do: %s" % (
                    how, t, e))
            if isinstance(e, sfb.UsageError) and any(
                    not torch.equal(a, b) for a, b in zip(before, model.parameters())):
                fail("the refused step changed the model (%s)" % how)
        closed()


def batchnorm():
    """InstanceNorm1d with running statistics in training mode: refused on
    every rank, naming it, its buffers untouched; a BatchNorm inside
    opt.join(): refused. In eval() the InstanceNorm1d, with a BatchNorm2d
    after a convolution and a BatchNorm1d without running statistics in
    training mode, trains as one process on uneven shares."""
    sft.init(peer_timeout_s=5)
    RANK[0] = sft.rank()
    torch.manual_seed(7)
    model = nn.Sequential(nn.Unflatten(1, (1, 2, 5)), nn.Conv2d(1, 3, 2), nn.BatchNorm2d(3),
                          nn.Tanh(), nn.Flatten(), nn.Linear(12, 16),
                          nn.BatchNorm1d(16, track_running_stats=False),
                          nn.Unflatten(1, (2, 8)),
                          nn.InstanceNorm1d(2, affine=True, track_running_stats=True),
                          nn.Tanh(), nn.InstanceNorm1d(2, affine=True), nn.Flatten(),
                          nn.Linear(16, 5))
    with torch.no_grad():  # running statistics one process would have learnt
        model[8].running_mean.uniform_(-0.5, 0.5)
        model[8].running_var.uniform_(0.5, 2.0)
    sft.broadcast_parameters(model.state_dict(), root_rank=0)
    ref = copy.deepcopy(model)
    x, y = data()
    P, r = sft.size(), sft.rank()
    xb, yb = shard(x, y, 0, r, P)
    whys = []
    before = [b.clone() for b in model.buffers()]

    def refused(what, run, words, param):
        """run() must raise naming words (UsageError: .param too; or the
        PeerError of a rank whose refusal ended the job first)."""
        try:
            run()
        except (sfb.UsageError, sfb.PeerError) as e:
            if any(w not in str(e) for w in words) or \
                    (isinstance(e, sfb.UsageError) and e.param != param):
                fail("the error does not name the layer or say what to do: %s" % e)
            whys.append(str(e).split(":")[1].strip()[:40])
            return
        fail("%s was not refused" % what)

    def untouched(buffers, was):
        if any(not torch.equal(a, b) for a, b in zip(was, buffers)):
            fail("the refused forward changed the running statistics")

    sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model,
                             staleness=1)
    # at staleness 1 the ranks would wait for each other in every forward
    refused("a training-mode BatchNorm2d at staleness 1", lambda: model(xb),
            ["BatchNorm2d 2", "staleness=0"], "2")
    untouched(model.buffers(), before)
    closed()
    sft.init(peer_timeout_s=5)
    opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   model=model)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    refused("an InstanceNorm1d keeping running statistics", lambda: model(xb),
            ["InstanceNorm1d 8", "track_running_stats=False"], "8")
    untouched(model[8].buffers(), before[-3:])
    with torch.no_grad():  # (the BatchNorm2d before it gathered and counted: as it was)
        for a, b in zip(model.buffers(), before):
            a.copy_(b)
    model[8].eval()
    ref[8].eval()

    def in_join():
        with opt.join():
            model(xb)
    refused("a BatchNorm inside join()", in_join, ["BatchNorm2d 2", "join()"], "2")
    untouched(model.buffers(), before)
    closed()
    # a job of its own (the refusal inside join() ended that one)
    sft.init(peer_timeout_s=5)
    opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   model=model, max_samples=2 * args.batch + 1)
    job = sft._need()
    args.uneven = True
    for t in range(args.steps):
        xb, yb = shard(x, y, t, r, P)
        opt.zero_grad()
        opt.set_samples(len(xb))
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    same(job, model, "after the steps")
    sft.shutdown()  # (then one process: its F.batch_norm torch's own again)
    for t in range(args.steps):
        parts = [shard(x, y, t, q, P) for q in range(P)]
        ref_opt.zero_grad()
        nn.functional.cross_entropy(ref(torch.cat([a for a, _ in parts])),
                                    torch.cat([b for _, b in parts])).backward()
        ref_opt.step()
    worst, where = rel_diff(model, ref)
    if worst > args.tol:
        fail("%s differs from one process's by %.3g (relative)" % (where, worst))
    # At step 1 rank 0 runs the BatchNorm2d in eval() (the others wait for
    # its statistics while it gathers the BatchNorm1d's), then, with a model
    # whose BatchNorm keeps running statistics, leaves eval() on after
    # validating (it gathers nothing: the others wait while it reduces),
    # then validates in train() (one forward more: its training forward
    # meets the others' backward).
    # Every rank must fail at once (before: all waited out the bootstrap
    # timeout) with sfb.MismatchError naming where each was.
    small = nn.Sequential(nn.Linear(10, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 5))
    other = copy.deepcopy(small)  # (small's buffers part below)

    def validate_in_train(net, xb):
        with torch.no_grad():
            net(xb[:3])

    for net, leave, words in (
            (model, lambda: model[2].eval(), ["rank 0 was at BatchNorm1d 6's forward",
                                              "BatchNorm2d 2's forward statistics at step 1"]),
            (small, lambda: small.eval(), ["step 1's reduction", "rank 0 ran fewer",
                                           "model.eval() left on"]),
            # (a validation on rank 0 without model.eval(): one forward more there)
            (other, lambda: validate_in_train(other, xb), [
                "BatchNorm1d 1's forward statistics at step 1",
                "BatchNorm1d 1's backward statistics at step 1",
                "a validation on rank 0, runs in model.eval()"])):
        sft.init(peer_timeout_s=5, bootstrap_timeout_s=120)
        opt = sft.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), model=net,
                                       max_samples=2 * args.batch + 1)
        t0 = time.monotonic()
        try:
            for t in range(3):
                xb, yb = shard(x, y, t, r, P)
                net.train()
                model[8].eval()  # (its refusal above)
                if t == 1 and r == 0:
                    leave()
                opt.zero_grad()
                nn.functional.cross_entropy(net(xb), yb).backward()
                opt.step()
        except sfb.MismatchError as e:
            took = time.monotonic() - t0
            if t != 1 or took > 60 or any(w not in str(e) for w in words):
                fail("a rank left in eval(): step %d, %.1f s, %s" % (t, took, e))
            whys.append(words[0])
        else:
            fail("a rank left in eval() was not caught")
        closed()
    # Rank 0 calls shutdown() after one step while the others train on: every
    # rank must fail at once with sfb.PeerError saying rank 0 left.
    sft.init(peer_timeout_s=5, bootstrap_timeout_s=120)
    # (rank 0's BatchNorm1d counted one batch fewer above, in eval(): the
    # replicas' buffers parted, which the first step's check would refuse)
    sft.broadcast_parameters(small.state_dict(), root_rank=0)
    opt = sft.DistributedOptimizer(torch.optim.SGD(small.parameters(), lr=0.1), model=small,
                                   max_samples=2 * args.batch + 1)
    small.train()
    t0 = time.monotonic()
    try:
        for t in range(3):
            if t == 1 and r == 0:
                sft.shutdown()
                break
            xb, yb = shard(x, y, t, r, P)
            opt.zero_grad()
            nn.functional.cross_entropy(small(xb), yb).backward()
            opt.step()
    except sfb.PeerError as e:
        took = time.monotonic() - t0
        if t != 1 or took > 60 or "rank 0 called shutdown()" not in str(e):
            fail("a rank that left: step %d, %.1f s, %s" % (t, took, e))
        whys.append("rank 0 left: at once")
    else:
        fail("a rank that left was not caught")
    closed()
    swa = swa_batchnorm()
    ghost_batchnorm()
    folded = folded_batchnorm()
    print("ok batchnorm: refused (%s); the rest in training mode %d uneven steps within %.3g "
          "of one process; SWA's update_bn on every rank within %.3g of one process's, on "
          "rank 0 alone refused with what to do; ghost batch normalization warned; batch_norm "
          "over a weight and over samples folded into channels within %.3g" % (
              "; ".join(whys), args.steps, worst, swa, folded), flush=True)


class FoldedNorm(nn.Module):
    """F.batch_norm in training mode over one row: timm's StdConv2d (its
    weight standardized) and MUNIT's AdaIN (an instance normalization of
    x.view(1, b * c, h, w), its affine from a style code)."""

    def __init__(self):
        super().__init__()
        self.conv, self.style, self.head = nn.Conv2d(2, 3, 3, padding=1, bias=False), \
            nn.Linear(4, 6), nn.Linear(3 * 4 * 4, 5)

    def forward(self, x):
        b = x.shape[0]
        w = nn.functional.batch_norm(self.conv.weight.reshape(1, 3, -1), None, None,
                                     training=True, momentum=0.0, eps=1e-6)
        w = w.reshape_as(self.conv.weight)
        f = nn.functional.conv2d(x.view(b, 2, 4, 4), w, None, padding=1)
        gamma, beta = self.style(x[:, :4]).view(b, 2, 3).unbind(1)
        f = nn.functional.batch_norm(f.reshape(1, b * 3, 4, 4), torch.zeros(b * 3),
                                     torch.ones(b * 3), gamma.reshape(-1), beta.reshape(-1),
                                     True, 0.1, 1e-5).view(b, 3, 4, 4)
        return self.head(torch.relu(f).flatten(1))


def folded_batchnorm():
    """F.batch_norm in training mode over a weight (StdConv2d) or over a
    batch viewed as one row of b * c channels (AdaIN): no samples to
    gather, each rank's own is one process's (they were gathered: chunk i
    of every rank normalized together, 0.02 off, silent; a validation on
    rank 0 alone was refused). Uneven shards, rank 0 validating alone in
    eval(): within --tol of one process. Returns the difference."""
    x, y = data()
    x = x.repeat(1, 4)[:, :32]  # (32 features: 2 x 4 x 4)
    model = setup_model(FoldedNorm)
    ref = copy.deepcopy(model)
    P, r = sft.size(), sft.rank()
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
    for t in range(args.steps):
        xb, yb = shard(x, y, t, r, P)
        opt.zero_grad()
        opt.set_samples(len(xb))
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
        if r == 0 and t % 3 == 0:  # (rank 0 validates alone)
            model.eval()
            with torch.no_grad():
                model(x[:8])
            model.train()
    closed()
    ref_opt = make_opt(ref.parameters())
    for t in range(args.steps):
        parts = [shard(x, y, t, q, P) for q in range(P)]
        ref_opt.zero_grad()
        nn.functional.cross_entropy(ref(torch.cat([a for a, _ in parts])),
                        torch.cat([b for _, b in parts])).backward()
        ref_opt.step()
    return near_one_process(model, ref)[0]


class GhostNorm(nn.Module):
    """TabNet's ghost batch normalization: a BatchNorm1d over virtual
    batches, chunks of the minibatch's rows (ghost), or over the whole;
    ghost None: over the whole input first as well (TabNet's initial_bn, its
    minibatches slices of one tensor)."""

    def __init__(self, ghost):
        super().__init__()
        self.fc, self.bn, self.head, self.ghost = nn.Linear(10, 8), nn.BatchNorm1d(8), \
            nn.Linear(8, 5), ghost
        self.first = nn.BatchNorm1d(10) if ghost is None else None

    def forward(self, x):
        h = self.fc(self.first(x) if self.first is not None else x)
        h = torch.cat([self.bn(c) for c in h.chunk(self.ghost)]) if self.ghost else self.bn(h)
        return self.head(torch.tanh(h))


def ghost_batchnorm():
    """A BatchNorm over chunks of each rank's rows in turn: rank 0 warns
    once, naming it (sfb.torch gathers chunk i of every rank, one process
    normalizes chunks of the global minibatch); so over one chunk of them
    all (x.chunk(1): TabNet's when a rank's share is no larger than a
    virtual batch); over the whole minibatch: nothing said, also where the
    minibatches are slices of one tensor (whose other slices the layer took
    in earlier steps)."""
    import warnings
    x, y = data()
    uneven, args.uneven = args.uneven, False  # (every rank its 2 chunks)
    for ghost in (2, 1, 0, None):
        torch.manual_seed(3)
        net = GhostNorm(ghost)
        sft.init(peer_timeout_s=5)
        r = sft.rank()
        sft.broadcast_parameters(net.state_dict(), root_rank=0)
        opt = sft.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), model=net)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            for t in range(3):
                xb, yb = shard(x, y, t, sft.rank(), sft.size())
                opt.zero_grad()
                nn.functional.cross_entropy(net(xb), yb).backward()
                opt.step()
        closed()
        said = [str(w.message) for w in got if "ghost batch normalization" in str(w.message)]
        want = 1 if ghost and r == 0 else 0
        if len(said) != want or said and not said[0].startswith(
                "sfb.torch: BatchNorm1d bn normalizes chunks of one tensor's rows in turn"):
            fail("ghost batch normalization (%s): warned %r" % (ghost, said))
    args.uneven = uneven


def swa_batchnorm():
    """SWA's update_bn (an AveragedModel's BatchNorm, outside the job's
    models) on every rank, each on its share of the data: the running
    statistics of their union, one process's update_bn on the whole
    loader. On rank 0 alone: it waits for the others' statistics, and
    every rank fails at once saying to run it everywhere or after
    shutdown(). Returns the worst relative difference."""
    from torch.optim.swa_utils import AveragedModel, update_bn
    x, y = data()
    worst = 0.0
    for everywhere in (True, False):
        small = setup_model(lambda: nn.Sequential(nn.Linear(10, 16), nn.BatchNorm1d(16),
                                                  nn.Tanh(), nn.Linear(16, 5)))
        P, r = sft.size(), sft.rank()
        opt = sft.DistributedOptimizer(torch.optim.SGD(small.parameters(), lr=0.1), model=small)
        swa = AveragedModel(small)
        for t in range(3):
            xb, yb = shard(x, y, t, r, P)
            opt.zero_grad()
            nn.functional.cross_entropy(small(xb), yb).backward()
            opt.step()
            swa.update_parameters(small)
        one = copy.deepcopy(swa)
        loader = [shard(x, y, t, r, P)[0] for t in range(3, 6)]
        try:
            if everywhere or r == 0:
                update_bn(loader, swa)
            sft.shutdown()
        except sfb.PeerError as e:
            if everywhere or "update_bn" not in str(e) or "after sft.shutdown()" not in str(e) \
                    or "outside the job's models" not in str(e):
                fail("SWA's update_bn on %s: %s" % ("every rank" if everywhere else "rank 0", e))
            closed()
            continue
        if not everywhere:
            fail("SWA's update_bn on rank 0 alone: not refused")
        # (one process: torch's own F.batch_norm again, every rank's rows a batch)
        update_bn([torch.cat([shard(x, y, t, q, P)[0] for q in range(P)]) for t in range(3, 6)],
                  one)
        worst, where = rel_diff(swa, one)
        if worst > args.tol:
            fail("SWA's update_bn: %s differs from one process's by %.3g" % (where, worst))
    return worst


def autogradw():
    """torch.autograd.grad with respect to the model's parameters: refused on
    every rank naming the first Linear weight (sfb never forms its
    gradient); with respect to the input it is torch's, equal to a plain
    copy's; training by backward() goes on."""
    model = setup()
    x, y = data()
    plain = copy.deepcopy(model)
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
    job = sft._need()
    xb, yb = shard(x, y, 0, sft.rank(), sft.size())
    one_step(model, opt, xb, yb, 0, True)  # (in the first step it would go densely: maml)
    xb, yb = shard(x, y, 1, sft.rank(), sft.size())
    try:
        loss = nn.functional.cross_entropy(model(xb, 1), yb)
        torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
        fail("torch.autograd.grad with respect to the weights was not refused")
    except sfb.UsageError as e:
        if "fc1.weight after the job's first backward() (1 reduction done)" not in str(e) or \
                "before the job's first backward()" not in str(e) or e.param != "fc1.weight":
            fail("the error does not name the weight or say what to do: %s" % e)
        why = str(e)
    try:  # backward restricted to some parameters: refused too
        nn.functional.cross_entropy(model(xb, 1), yb).backward(inputs=[model.head.weight])
        fail("backward(inputs=[head.weight]) was not refused")
    except sfb.UsageError as e:
        if "backward(inputs=...) with head.weight among the inputs" not in str(e) or \
                e.param != "head.weight":
            fail("the error does not name the weight: %s" % e)
    xi = xb.clone().requires_grad_(True)
    gx = torch.autograd.grad(nn.functional.cross_entropy(model(xi, 1), yb), xi)[0]
    xk = xb.clone().requires_grad_(True)  # (inputs= naming no parameter: torch's)
    nn.functional.cross_entropy(model(xk, 1), yb).backward(inputs=[xk])
    xj = xb.clone().requires_grad_(True)
    after = Net()  # (a plain model of the first step's parameters)
    after.load_state_dict(model.state_dict())
    want = torch.autograd.grad(nn.functional.cross_entropy(after(xj, 1), yb), xj)[0]
    if not torch.allclose(gx, want, rtol=1e-5, atol=1e-7) or \
            not torch.allclose(xk.grad, want, rtol=1e-5, atol=1e-7):
        fail("the input's gradient differs from one process's")
    for t in range(1, 3):  # (the captures of the passes above were dropped)
        xb, yb = shard(x, y, t, sft.rank(), sft.size())
        one_step(model, opt, xb, yb, t, True)
    same(job, model, "after the steps")
    P = sft.size()
    sft.shutdown()
    args.steps = 3
    reference(plain, make_opt(plain.parameters()), x, y, P)
    worst, where = rel_diff(model, plain)
    if worst > args.tol:
        fail("%s differs from one process's by %.3g (relative)" % (where, worst))
    print("ok autogradw: %s" % why, flush=True)


def latedense():
    """A penalty on the weights from step 3 on (lazy regularization): their
    factors of step 3 leave without it, so it is refused on every rank at
    that step, naming the first Linear and saying what to do; the same run
    with the penalty's weight 0 until then trains as one process does. A
    reentrant checkpoint first used after the first step, over layers used
    outside its segment too, is refused at its first step, saying why."""
    model = setup()
    x, y = data()
    ref = copy.deepcopy(model)
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
    P, r = sft.size(), sft.rank()
    try:
        for t in range(5):
            args.penalty = t >= 3
            xb, yb = shard(x, y, t, r, P)
            one_step(model, opt, xb, yb, t, True)
        fail("a penalty first added at step 3 was not refused")
    except (sfb.UsageError, sfb.PeerError) as e:
        # this rank's refusal, or a peer's that ended the job first (a rank
        # still draining step 2 when another refused step 3: its ABORT
        # carries the reason's first 800 characters)
        own = isinstance(e, sfb.UsageError)
        if "fc1 received a dense gradient after the job's first backward() (3 reductions " \
                "done" not in str(e) or (own and (e.param != "fc1" or "use it so there, with "
                                                  "weight 0 if need be" not in str(e))):
            fail("the error does not name the layer and step or say what to do: %s" % e)
        why = str(e) if own else str(e).split("UsageError: ", 1)[-1]
    closed()
    # the same from the first step, with weight 0 until step 3
    model = setup()
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
    job = sft._need()
    args.penalty, steps = True, 6
    for t in range(steps):
        PENALTY[0] = 0.0 if t < 3 else 1e-3
        xb, yb = shard(x, y, t, r, P)
        one_step(model, opt, xb, yb, t, True)
    same(job, model, "at the end")
    sft.shutdown()
    ref_opt = make_opt(ref.parameters())
    for t in range(steps):
        PENALTY[0] = 0.0 if t < 3 else 1e-3
        parts = [shard(x, y, t, q, P) for q in range(P)]
        one_step(ref, ref_opt, torch.cat([a for a, _ in parts]),
                 torch.cat([b for _, b in parts]), t, False)
    PENALTY[0] = 1e-3
    worst, where = rel_diff(model, ref)
    if worst > args.tol:
        fail("%s differs from one process's by %.3g (relative)" % (where, worst))
    # a reentrant checkpoint first used at step 4 (its inner backward pass gives
    # the norm and fc2, used inside its segment and outside, a second gradient
    # after the outer pass's had left): refused at that step on every rank
    args.penalty = False
    model = setup()
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
    try:
        for t in range(6):
            args.checkpoint = t >= 3  # (reentrant at even steps: from step 4)
            xb, yb = shard(x, y, t, r, P)
            one_step(model, opt, xb, yb, t, True)
        fail("a reentrant checkpoint first used at step 4 was not refused")
    except (sfb.UsageError, sfb.PeerError) as e:
        if "received a gradient in the backward pass of step 4 after its gradient of that " \
                "step had left: a parameter used inside a reentrant checkpoint's segment" \
                not in str(e):
            fail("the error does not say the reentrant checkpoint's cause: %s" % e)
    finally:
        args.checkpoint = False
    closed()
    print("ok latedense: %s; from the first step with weight 0: %d steps within %.3g of one "
          "process; a reentrant checkpoint from step 4 refused" % (why, steps, worst),
          flush=True)


def gan():
    """A GAN as sfb.torch trains one: a generator and a discriminator in one
    module, one DistributedOptimizer over both (a param group each, their
    own Adam settings); each iteration a discriminator step (the fakes
    detached), then a generator step with the discriminator frozen
    (requires_grad_(False)): two steps of the job, each one process's on
    the global minibatches (parameters and Adam's state within --tol)."""
    sft.init(peer_timeout_s=5)
    RANK[0] = sft.rank()
    P, r = sft.size(), sft.rank()
    torch.manual_seed(7)
    gan = nn.ModuleDict({"G": nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 10)),
                         "D": nn.Sequential(nn.Linear(10, 16), nn.LeakyReLU(0.2),
                                            nn.Linear(16, 1))})
    sft.broadcast_parameters(gan.state_dict(), root_rank=0)
    ref = copy.deepcopy(gan)

    def make(m):
        return torch.optim.Adam([{"params": m["G"].parameters(), "lr": 2e-3},
                                 {"params": m["D"].parameters(), "lr": 1e-3,
                                  "betas": (0.5, 0.999)}])
    opt = sft.DistributedOptimizer(make(gan), model=gan)
    x, _ = data()
    g = torch.Generator().manual_seed(3)
    z = torch.randn(len(x), 4, generator=g)
    bce = nn.functional.binary_cross_entropy_with_logits

    def iteration(m, o, real, noise):
        o.zero_grad()  # the discriminator: real against detached fakes
        fake = m["G"](noise).detach()
        out = m["D"](torch.cat([real, fake]))
        bce(out, torch.cat([torch.ones(len(real), 1), torch.zeros(len(fake), 1)])).backward()
        o.step()
        o.zero_grad()  # the generator, through the frozen discriminator
        m["D"].requires_grad_(False)
        bce(m["D"](m["G"](noise)), torch.ones(len(noise), 1)).backward()
        o.step()
        m["D"].requires_grad_(True)

    for t in range(args.steps):
        xb, _ = shard(x, x, t, r, P)
        zb, _ = shard(z, z, t, r, P)
        iteration(gan, opt, xb, zb)
    same(sft._need(), gan, "at the end")
    clock = opt.clock
    sft.shutdown()
    ref_opt = make(ref)
    for t in range(args.steps):
        iteration(ref, ref_opt, torch.cat([shard(x, x, t, q, P)[0] for q in range(P)]),
                  torch.cat([shard(z, z, t, q, P)[0] for q in range(P)]))
    worst, where = rel_diff(gan, ref)
    if worst > args.tol:
        fail("%s differs from one process's by %.3g (relative)" % (where, worst))
    if clock != 2 * args.steps:
        fail("the job's clock is %d after %d iterations of two steps" % (clock, args.steps))
    print("ok gan: %d iterations (discriminator, generator) within %.3g of one process" %
          (args.steps, worst), flush=True)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 10))

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(10, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))

    def forward(self, x):
        return self.main(x)


def gan_setup():
    """A job, a generator and a discriminator (the same on every rank), the
    data and the noise."""
    sft.init(peer_timeout_s=5)
    RANK[0] = sft.rank()
    torch.manual_seed(7)
    G, D = Generator(), Discriminator()
    for m in (G, D):
        sft.broadcast_parameters(m.state_dict(), root_rank=0)
    x, _ = data()
    return G, D, x, torch.randn(len(x), 4, generator=torch.Generator().manual_seed(3))


def dcgan_iteration(G, D, oD, oG, real, noise):
    """PyTorch's DCGAN loop: the discriminator on real images, then on the
    detached fakes, its step; the generator through it, its step."""
    bce = nn.functional.binary_cross_entropy_with_logits
    D.zero_grad()
    bce(D(real), torch.ones(len(real), 1)).backward()
    fake = G(noise)
    bce(D(fake.detach()), torch.zeros(len(fake), 1)).backward()
    oD.step()
    G.zero_grad()
    bce(D(fake), torch.ones(len(fake), 1)).backward()
    oG.step()


def foreign():
    """The DCGAN loop with only the discriminator's optimizer wrapped (the
    generator's parameters feed the wrapped model), then with only the
    generator's (the discriminator's are in the generator's loss, past
    the wrapped model: before, its replicas parted in silence)."""
    for unwrapped in ("generator", "discriminator"):
        G, D, x, z = gan_setup()
        P, r = sft.size(), sft.rank()
        if unwrapped == "generator":
            oD = sft.DistributedOptimizer(torch.optim.Adam(D.parameters(), lr=1e-3), model=D)
            oG = torch.optim.Adam(G.parameters(), lr=2e-3)  # (not wrapped: the mistake)
            want = "parameters outside the job (4: 10x16, 16x4, 16, 10) feed Discriminator's " \
                "forward"
        else:
            oD = torch.optim.Adam(D.parameters(), lr=1e-3)
            oG = sft.DistributedOptimizer(torch.optim.Adam(G.parameters(), lr=2e-3), model=G)
            want = "parameters outside the job (4: 16x10, 1x16, 16, 1) are in the loss " \
                "given to backward() past the job's models"
        try:
            for t in range(args.steps):
                dcgan_iteration(G, D, oD, oG, shard(x, x, t, r, P)[0], shard(z, z, t, r, P)[0])
            fail("the %s's unwrapped optimizer was not refused" % unwrapped)
        except (sfb.UsageError, sfb.PeerError) as e:
            # this rank's refusal, or a peer's that ended the job first
            own = isinstance(e, sfb.UsageError)
            if want not in str(e) or "at step 4" not in str(e) or \
                    (own and "Wrap that optimizer too" not in str(e)):
                fail("the refusal does not name what and when, or say what to do: %s" % e)
        closed()
    # Reptile: each rank's inner loop on a copy of the wrapped model, stepped
    # by a plain optimizer, the meta-gradient given to backward() by a
    # surrogate: the copies are each rank's own, and their passes reach none
    # of the job's parameters: not refused (it was, at step 4)
    G, D, x, z = gan_setup()
    P, r = sft.size(), sft.rank()
    opt = sft.DistributedOptimizer(torch.optim.SGD(D.parameters(), lr=0.1), model=D)
    for t in range(6):
        fast = copy.deepcopy(D)
        inner = torch.optim.SGD(fast.parameters(), lr=0.1)
        for _ in range(2):
            inner.zero_grad()
            fast(shard(x, x, t, r, P)[0]).pow(2).mean().backward()
            inner.step()
        opt.zero_grad()
        sum((p * (p - q).detach()).sum() for p, q in zip(D.parameters(), fast.parameters())
            ).backward()
        opt.step()
    closed()
    clipped_outside()
    print("ok foreign: refused at step 4 (an unwrapped generator, an unwrapped discriminator); "
          "Reptile's copies of the model not; a loss's own parameter no optimizer holds, "
          "clipped with the model's, named when the replicas part", flush=True)


def clipped_outside():
    """AWD-LSTM's split softmax after its switch to ASGD(model.parameters()):
    the loss's own parameter, which no optimizer holds, gets each rank's own
    gradient, and clip_grad_norm_ over the model's and its parameters scales
    each rank's step apart. The replica check refuses, naming the parameter
    outside the job (it blamed code under `if rank == 0:`)."""
    x, y = data()
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 5))
    tail = nn.Parameter(torch.randn(2, 5) * 0.1)  # (the criterion's tail vectors)
    sft.init(peer_timeout_s=5)
    P, r = sft.size(), sft.rank()
    sft.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5), model=model)
    try:
        for t in range(args.steps):
            xb, yb = shard(x, y, t, r, P)
            out = model(xb)
            opt.zero_grad()
            nn.functional.cross_entropy(torch.cat([out, out @ tail.t()], 1), yb).backward()
            nn.utils.clip_grad_norm_(list(model.parameters()) + [tail], 0.05)
            opt.step()
        fail("a clip over a parameter outside the job was not refused")
    except (sfb.MismatchError, sfb.PeerError) as e:
        if isinstance(e, sfb.MismatchError) and (
                "parameters outside the job that are in the loss given to backward() past the "
                "job's models" not in str(e) or "(2x5) have gradients of each rank's own" not
                in str(e)):
            fail("the refusal does not name the parameter outside the job: %s" % e)
    closed()


def earlystop():
    """Spinning Up's PPO: a policy and a value function, a DistributedOptimizer
    each, the policy's phase ended early by each rank's own KL (rank 0
    stops after one step at iteration 1, the others take three), then two
    value steps. As many steps in all, so rank 0's value backward() pairs
    with the others' policy one: refused at the next reduction on every rank,
    naming the optimizers each stepped last (it was found only by the
    replica checks, later, blaming code under `if rank == 0:`)."""
    sft.init(peer_timeout_s=5)
    RANK[0] = sft.rank()
    torch.manual_seed(5)
    pi, v = nn.Linear(10, 5), nn.Linear(10, 1)
    for m in (pi, v):
        sft.broadcast_parameters(m.state_dict(), root_rank=0)
    popt = sft.DistributedOptimizer(torch.optim.Adam(pi.parameters(), lr=1e-3), model=pi)
    vopt = sft.DistributedOptimizer(torch.optim.SGD(v.parameters(), lr=1e-2), model=v)
    x, y = data()
    P, r = sft.size(), sft.rank()
    at = None
    try:
        for it in range(3):
            xb, yb = shard(x, y, it, r, P)
            for k in range(1 if it == 1 and r == 0 else 3):  # (the KL's early stop)
                popt.zero_grad()
                nn.functional.cross_entropy(pi(xb), yb).backward()
                popt.step()
            for k in range(2):
                vopt.zero_grad()
                at = (it, k)
                (v(xb).squeeze(1) - yb.float()).pow(2).mean().backward()
                vopt.step()
        fail("ranks stepping other optimizers were not refused")
    except (sfb.MismatchError, sfb.PeerError) as e:
        own = isinstance(e, sfb.MismatchError)
        if own and ("stepped other optimizers" not in str(e) or "at step 7" not in str(e) or
                    "optimizer 0 of the job (Adam)" not in str(e) or
                    "optimizer 1 of the job (SGD)" not in str(e)):
            fail("the refusal does not name the optimizers and the step: %s" % e)
        if r == 0 and at != (1, 1):  # (the reduction after rank 0's first value step)
            fail("refused at %s, not rank 0's second value backward() of iteration 1" % (at,))
    closed()
    print("ok earlystop: ranks stepping other optimizers refused at the reduction", flush=True)


def dcgan():
    """Two DistributedOptimizers as PyTorch's DCGAN example steps them."""
    G, D, x, z = gan_setup()
    P, r = sft.size(), sft.rank()
    refG, refD = copy.deepcopy(G), copy.deepcopy(D)

    def make(G, D):
        return (torch.optim.Adam(D.parameters(), lr=1e-3, betas=(0.5, 0.999)),
                torch.optim.Adam(G.parameters(), lr=2e-3, betas=(0.5, 0.999)))
    oD, oG = make(G, D)
    # (replica checks every 4 optimizer steps: both optimizers' states)
    oD = sft.DistributedOptimizer(oD, model=D, sync="sfb", check_every=4)
    oG = sft.DistributedOptimizer(oG, model=G, sync="sfb", check_every=4)
    for t in range(args.steps):
        dcgan_iteration(G, D, oD, oG, shard(x, x, t, r, P)[0], shard(z, z, t, r, P)[0])
        for m in (G, D):
            same(sft._need(), m, "after iteration %d" % t)
    plan, clock = oG.plan, oG.clock
    sft.shutdown()
    rD, rG = make(refG, refD)
    for t in range(args.steps):
        dcgan_iteration(refG, refD, rD, rG, torch.cat([shard(x, x, t, q, P)[0] for q in range(P)]),
                  torch.cat([shard(z, z, t, q, P)[0] for q in range(P)]))
    worst = max(rel_diff(m, ref) for m, ref in ((G, refG), (D, refD)))
    if worst[0] > args.tol:
        fail("%s differs from one process's by %.3g (relative)" % (worst[1], worst[0]))
    for name in ("Discriminator.main.0 (16x10+bias): sfb", "Generator.main.2 (10x16+bias): sfb"):
        if name not in plan:
            fail("the plan lacks %r:\n%s" % (name, plan))
    if clock != 3 * args.steps:  # three backward passes an iteration: a reduction each
        fail("the job's clock is %d after %d iterations of three backward passes" %
             (clock, args.steps))
    print("ok dcgan: %d iterations (discriminator: 2 backward passes, generator: 1) within "
          "%.3g of one process" % (args.steps, worst[0]), flush=True)


def seq2seq():
    """An encoder's and a decoder's DistributedOptimizers stepped after one
    backward(); the refusals of a third."""
    sft.init(peer_timeout_s=5)
    RANK[0] = sft.rank()
    P, r = sft.size(), sft.rank()
    torch.manual_seed(9)
    enc = nn.Sequential(nn.Linear(10, 12), nn.Tanh())
    dec = nn.Sequential(nn.Linear(12, 12), nn.ReLU(), nn.Linear(12, 5))
    for m in (enc, dec):
        sft.broadcast_parameters(m.state_dict(), root_rank=0)
    refs = copy.deepcopy(enc), copy.deepcopy(dec)

    def make(enc, dec):
        return (torch.optim.SGD(enc.parameters(), lr=0.05, momentum=0.9),
                torch.optim.Adam(dec.parameters(), lr=1e-2))
    oe, od = make(enc, dec)
    oe = sft.DistributedOptimizer(oe, model=enc)
    try:
        sft.DistributedOptimizer(torch.optim.SGD(enc[0].parameters(), lr=1), model=enc)
        fail("a third optimizer over the encoder's parameters was not refused")
    except sfb.UsageError as e:
        if "0.weight is in two DistributedOptimizers" not in str(e):
            fail("the refusal does not name the parameter: %s" % e)
    od = sft.DistributedOptimizer(od, model=dec)
    sched = torch.optim.lr_scheduler.StepLR(od, step_size=5, gamma=0.5)
    x, y = data()

    def one(enc, dec, oe, od, sched, xb, yb):
        oe.zero_grad()
        od.zero_grad()
        nn.functional.cross_entropy(dec(enc(xb)), yb).backward()
        nn.utils.clip_grad_norm_(enc.parameters(), 0.5)
        nn.utils.clip_grad_norm_(dec.parameters(), 0.5)
        oe.step()
        od.step()
        sched.step()

    def check_late(t):
        if t == 0:
            try:
                sft.DistributedOptimizer(torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=1),
                                         model=nn.Linear(2, 2))
                fail("an optimizer made after the first backward() was not refused")
            except sfb.UsageError as e:
                if "or backward()" not in str(e):
                    fail("the late optimizer's refusal does not say why: %s" % e)
        if not args.join:  # (collective: not while a rank has joined)
            for m in (enc, dec):
                same(sft._need(), m, "after step %d" % t)

    with od.join() if args.join else contextlib.nullcontext():
        for t in range(steps_of(r)):
            xb, yb = shard(x, y, t, r, P)
            one(enc, dec, oe, od, sched, xb, yb)
            check_late(t)
    for m in (enc, dec):
        same(sft._need(), m, "at the end")
    clock = od.clock
    sft.shutdown()
    re_, rd_ = refs
    roe, rod = make(re_, rd_)
    rsched = torch.optim.lr_scheduler.StepLR(rod, step_size=5, gamma=0.5)
    for t in range(args.steps):
        live = [q for q in range(P) if steps_of(q) > t]
        parts = [shard(x, y, t, q, P) for q in live]
        one(re_, rd_, roe, rod, rsched, torch.cat([a for a, _ in parts]),
            torch.cat([b for _, b in parts]))
    worst = max(rel_diff(m, ref) for m, ref in ((enc, re_), (dec, rd_)))
    if worst[0] > args.tol:
        fail("%s differs from one process's by %.3g (relative)" % (worst[1], worst[0]))
    if clock != args.steps:
        fail("the job's clock is %d after %d steps" % (clock, args.steps))
    print("ok %s: %d steps of two optimizers on one backward()%s within %.3g of one "
          "process" % (" ".join(sys.argv_case), args.steps,
                       ", ranks joining early" if args.join else "", worst[0]), flush=True)


def phases():
    """Fine-tuning in two phases as torchvision's tutorial writes it: the
    head alone (everything else frozen) with SGD, then every layer with a
    new optimizer (Adam). A DistributedOptimizer made once training has
    begun is refused, saying what to do; shutdown() and init() start a new
    job for the new phase, and the two phases train as one process does."""
    model = setup()
    P, r = sft.size(), sft.rank()
    x, y = data()
    ref = copy.deepcopy(model)
    for m in (model, ref):
        m.requires_grad_(False)
        m.head.requires_grad_(True)
    opt = sft.DistributedOptimizer(torch.optim.SGD(model.head.parameters(), lr=0.1),
                                   model=model)
    ref_opt = torch.optim.SGD(ref.head.parameters(), lr=0.1)
    job = sft._need()
    half = args.steps // 2
    for t in range(half):
        one_step(model, opt, *shard(x, y, t, r, P), t, True)
        same(job, model, "after step %d" % t)
    for m in (model, ref):
        m.requires_grad_(True)
    try:
        sft.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01), model=model)
        fail("a DistributedOptimizer made after training began was not refused")
    except sfb.UsageError as e:
        if "shutdown()" not in str(e) or "init()" not in str(e):
            fail("the refusal does not say how to start a new phase: %s" % e)
    sft.shutdown()
    sft.init(peer_timeout_s=5)
    opt = sft.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01), model=model)
    job = sft._need()
    for t in range(half, args.steps):
        one_step(model, opt, *shard(x, y, t, r, P), t, True)
        same(job, model, "after step %d" % t)
    sft.shutdown()
    for t in range(args.steps):
        if t == half:
            ref_opt = torch.optim.Adam(ref.parameters(), lr=0.01)
        one_process(ref, ref_opt, x, y, t, P)
    worst, _ = near_one_process(model, ref)
    print("ok phases: %d steps of the head by SGD, %d of every layer by Adam in a new job, "
          "within %.3g of one process" % (half, args.steps - half, worst), flush=True)


class RunningNorm(nn.Module):
    """Subtracts the running mean of the inputs seen in training (an RL
    observation normalizer). world_sum: the sum over the ranks of a
    tensor (sft.allreduce), or None: this rank's data alone."""

    def __init__(self, d, world_sum=None):
        super().__init__()
        self.world_sum = world_sum
        self.register_buffer("mean", torch.zeros(d))
        self.register_buffer("count", torch.zeros(()))
        self.register_buffer("last", torch.zeros(d), persistent=False)  # (a record)
        self.register_buffer("scale", torch.ones(d))

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                stats = torch.cat([x.sum(0), torch.tensor([float(len(x))])])
                if self.world_sum is not None:
                    stats = self.world_sum(stats)
                n = stats[-1]
                self.mean.mul_(self.count / (self.count + n)).add_(stats[:-1] / (self.count + n))
                self.count.add_(n)
                self.last.copy_(x.mean(0))
        return x - self.mean


class NormNet(nn.Module):
    def __init__(self, world_sum):
        super().__init__()
        self.norm = RunningNorm(10, world_sum)
        self.fc1, self.fc2 = nn.Linear(10, 24), nn.Linear(24, 5)

    def forward(self, x, step):
        return self.fc2(torch.tanh(self.fc1(self.norm(x))))


def buffers():
    for shared in (False, True):
        setup()
        P, r = sft.size(), sft.rank()
        x, y = data()
        x = x + 1
        torch.manual_seed(3)
        model = NormNet((lambda t: sft.allreduce(t, op="sum")) if shared else None)
        ref = copy.deepcopy(model)
        ref.norm.world_sum = None
        with torch.no_grad():  # other bits on each rank, within rounding: not refused
            model.norm.scale.mul_(1 + r * 1.2e-7)
        opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
        ref_opt = make_opt(ref.parameters())
        job = sft._need()
        try:
            for t in range(args.steps):
                one_step(model, opt, *shard(x, y, t, r, P), t, True)
                same(job, model, "after step %d" % t)
        except sfb.MismatchError as e:
            if shared:
                fail("refused with every rank's data: %s" % e)
            if "buffer norm.mean differs between ranks after step 1" not in str(e) or \
                    e.param != "norm.mean" or "allreduce" not in str(e):
                fail("the error does not name the buffer, the step and what to do: %s" % e)
            closed()
            continue
        if not shared:
            fail("a buffer updated from each rank's own data was not refused")
        sft.shutdown()
        for t in range(args.steps):
            one_process(ref, ref_opt, x, y, t, P)
        worst, where = near_one_process(model, ref)
    # a buffer registered on rank 1 only: refused at step 1, naming the counts
    setup()
    P, r = sft.size(), sft.rank()
    model = NormNet(lambda t: sft.allreduce(t, op="sum"))
    if r == 1:
        model.fc1.register_buffer("extra", torch.zeros(3))
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
    try:  # (step 1's checks run in the next reduction)
        for t in range(2):
            one_step(model, opt, *shard(x, y, t, r, P), t, True)
        fail("a buffer registered on one rank only was not refused")
    except sfb.MismatchError as e:
        if "rank 0's models have 3 persistent buffers and rank 1's 4" not in str(e):
            fail("the error does not name the counts: %s" % e)
    closed()
    grown = growing_buffers()
    sparse = sparse_tensors()
    print("ok buffers: refused at step 1 where each rank updates one from its own data, and "
          "one on rank 1 only; updated from every rank's, %d steps within %.3g of one process "
          "(%s); buffers that start empty and grow in forward: %s; a sparse adjacency buffer "
          "broadcast and sparse minibatches through a Linear within %.3g" %
          (args.steps, worst, where, grown, sparse), flush=True)


class SparseGraph(nn.Module):
    """A GCN's normalized adjacency as a sparse buffer, over a Linear fed
    sparse rows (TF-IDF features)."""

    def __init__(self, n):
        super().__init__()
        self.lin, self.head = nn.Linear(10, 8), nn.Linear(8, 5)
        self.register_buffer("adj", ((torch.eye(n) + torch.eye(n).roll(1, 0)) / 2).to_sparse())

    def forward(self, x):
        return self.head(torch.tanh(torch.sparse.mm(self.adj, self.lin(x))))


def sparse_tensors():
    """A model with a sparse buffer that differs on each rank before
    sft.broadcast_parameters(model.state_dict()) (it failed reading the
    sparse tensor's bytes): root's on every rank after; a Linear fed each
    rank's sparse rows (it failed in backward): within --tol of one
    process. Returns the difference."""
    x, y = data()
    x = x * (x > 0.5)  # (sparse rows)
    sft.init(peer_timeout_s=5)
    P, r = sft.size(), sft.rank()
    n = 6 * P
    torch.manual_seed(3)
    model = SparseGraph(n)
    ref = copy.deepcopy(model)
    with torch.no_grad():
        model.adj.copy_((model.adj * (1 + r)).coalesce())  # (each rank's own before)
    sft.broadcast_parameters(model.state_dict(), root_rank=0)
    if not torch.equal(model.adj.to_dense(), ref.adj.to_dense()):
        fail("the sparse buffer is not rank 0's after broadcast_parameters")
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
    ref_opt = make_opt(ref.parameters())
    for t in range(args.steps):
        rows = x[n * t:n * (t + 1)]  # (every rank the graph's nodes, its share of the losses)
        mine = slice(6 * r, 6 * (r + 1))
        opt.zero_grad()
        nn.functional.cross_entropy(model(rows.to_sparse())[mine],
                                    y[n * t:n * (t + 1)][mine]).backward()
        opt.step()
        ref_opt.zero_grad()
        nn.functional.cross_entropy(ref(rows), y[n * t:n * (t + 1)]).backward()
        ref_opt.step()
    closed()
    return near_one_process(model, ref)[0]


class Observed(nn.Module):
    """A per-channel quantization observer watching a layer's weight (QAT's
    weight observer): its min_val and max_val start empty and are resized
    at its first forward."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(10, 24), nn.Linear(24, 5)
        self.wobs = torch.ao.quantization.PerChannelMinMaxObserver(ch_axis=0)

    def forward(self, x, step=0):
        self.wobs(self.fc1.weight.detach())
        return self.fc2(torch.tanh(self.fc1(x)))


def growing_buffers():
    """Observed's empty buffers through broadcast_parameters and the buffer
    checks (after steps 1 and 4, at shutdown()): they grow at the first
    forward as in one process, alike on every rank (torch 1.13's .numpy()
    had marked their storage never to be resized: the observer failed in
    forward, "Trying to resize storage that is not resizable"). Returns
    their values' worst difference from one process's."""
    model = setup_model(Observed)
    P, r = sft.size(), sft.rank()
    x, y = data()
    ref = copy.deepcopy(model)
    opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for t in range(6):
        lo = 8 * P * t
        for m, o, rows in ((model, opt, slice(lo + 8 * r, lo + 8 * r + 8)),
                           (ref, ref_opt, slice(lo, lo + 8 * P))):
            o.zero_grad()
            nn.functional.cross_entropy(m(x[rows]), y[rows]).backward()
            o.step()
    sft.shutdown()
    worst, where = rel_diff(model, ref)
    if worst > args.tol or model.wobs.min_val.shape != (24,):
        fail("buffers grown in forward: %s differs from one process's by %.3g (min_val %s)" %
             (where, worst, tuple(model.wobs.min_val.shape)))
    return "within %.3g" % worst


def schedules():
    """Learning-rate schedules. Rank 0 alone steps a StepLR (a scheduler
    stepped beside rank 0's logging), and rank 1 alone skips a step (its
    own loss spiked), or runs a micro-batch more before a step: every rank
    fails at the next step with sfb.MismatchError naming lr and both
    values, or the steps taken (and the backward passes).
    ReduceLROnPlateau stepped on the union's mean of the ranks' validation
    losses (each rank's sum and count, summed over the ranks: its shard's size
    differs from rank to rank) trains as one process does."""
    for bad in ("steplr", "skip", "freeze", "skiplast", "micro"):
        model = setup()
        P, r = sft.size(), sft.rank()
        x, y = data()
        opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        try:
            for t in range(8):
                xb, yb = shard(x, y, t, r, P)
                if bad == "freeze" and t == 2 and r == 1:  # (its own metric said so)
                    model.fc2.requires_grad_(False)
                if r == 1 and (bad == "skip" and t == 3 or bad == "skiplast" and t == 7):
                    opt.zero_grad()  # (its loss spiked: no step)
                    nn.functional.cross_entropy(model(xb, t), yb).backward()
                    continue
                if r == 1 and bad == "micro" and t == 2:  # (a micro-batch more: a token budget)
                    nn.functional.cross_entropy(model(xb, t), yb).backward()
                one_step(model, opt, xb, yb, t, True)
                if bad != "steplr" or r == 0:
                    sched.step()
            sft.shutdown()  # (the last step skipped on rank 1: its steps compared here)
            fail("%s: not refused" % bad)
        except (sfb.MismatchError, sfb.PeerError) as e:
            # (each rank finds it in the step's bookkeeping; one told first
            # by another's abort carries that one's MismatchError)
            if isinstance(e, sfb.PeerError) and "aborted the job: MismatchError: " not in str(e):
                fail("%s: not the ranks' mismatch: %s" % (bad, e))
            want = {"skip": "at step 4 the ranks' optimizer steps taken differ",
                    "micro": "at step 3 the ranks' optimizer steps taken differ",
                    "skiplast": "at step 8 the ranks' optimizer steps taken differ",
                    "steplr": "the ranks' optimizer settings differ: lr of param group 0: rank 0 "
                              "has \"%r\", rank 1 has \"%r\"" % (opt.defaults["lr"] / 2,
                                                                 opt.defaults["lr"]),
                    "freeze": "at step 2 the ranks' frozen parameters differ: fc2.weight is "
                              "frozen (requires_grad False) on rank 1 and trains on ranks %s" %
                              ", ".join(str(q) for q in range(P) if q != 1)}[bad]
            if want not in str(e) or (bad in ("steplr", "freeze") and "allreduce" not in str(e)) \
                    or (bad == "micro" and "after as many backward passes" not in str(e)):
                fail("%s: the error does not say %s: %s" % (bad, want, e))
        closed()
    model = setup()
    P, r = sft.size(), sft.rank()
    x, y = data()
    vx, vy = x[-64 * P:], y[-64 * P:]
    ref = copy.deepcopy(model)
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
    ref_opt = make_opt(ref.parameters())
    plateau = [torch.optim.lr_scheduler.ReduceLROnPlateau(o, factor=0.5, patience=0, threshold=0.01)
               for o in (opt, ref_opt)]

    def val_loss(m, q):  # rank q's validation shard (48 or 64 rows): its sum and count
        n = 48 + 16 * (q % 2)
        with torch.no_grad():
            return torch.tensor([float(nn.functional.cross_entropy(
                m(vx[q::P][:n], 0), vy[q::P][:n], reduction="sum")), float(n)])
    job = sft._need()
    metrics = []
    for t in range(args.steps):
        xb, yb = shard(x, y, t, r, P)
        if t == args.steps - 1:  # the last step skipped on every rank, shutdown() after it
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb, t), yb).backward()
            break
        one_step(model, opt, xb, yb, t, True)
        total = sft.allreduce(val_loss(model, r), op="sum")  # (the union's mean)
        metrics.append(float(total[0] / total[1]))
        plateau[0].step(metrics[-1])
        same(job, model, "after step %d" % t)
    sft.shutdown()
    lrs = []
    for t in range(args.steps - 1):
        one_process(ref, ref_opt, x, y, t, P)
        # one process's mean validation loss, within rounding of the ranks'; its
        # scheduler steps on theirs (a rounding difference must not move a
        # decision at the threshold: the schedule is compared, not re-decided)
        total = sum(val_loss(ref, q) for q in range(P))
        mean = float(total[0] / total[1])
        if abs(mean - metrics[t]) > 1e-5 * abs(mean):
            fail("the ranks' mean validation loss after step %d is %.7g, one process's %.7g" %
                 (t, metrics[t], mean))
        plateau[1].step(metrics[t])
        lrs.append(ref_opt.param_groups[0]["lr"])
    worst, _ = near_one_process(model, ref)
    if opt.param_groups[0]["lr"] != lrs[-1] or lrs[-1] >= opt.defaults["lr"]:
        fail("lr %g after ReduceLROnPlateau, one process's %g (from %g)" %
             (opt.param_groups[0]["lr"], lrs[-1], opt.defaults["lr"]))
    print("ok schedules: a StepLR on rank 0 alone, a step skipped (the 4th, the last), a "
          "layer frozen and a micro-batch more on rank 1 refused, naming lr, the steps, the "
          "layer, the backward passes; ReduceLROnPlateau on "
          "the union's mean validation loss (uneven shards: sums and counts), the last step "
          "skipped everywhere, within %.3g of "
          "one process (lr %g -> %g)" % (worst, opt.defaults["lr"], lrs[-1]), flush=True)


class TextNet(nn.Module):
    """Token ids -> 5 classes through two max_norm tables (a lookup and a
    bag of the same ids); tied: the decoder is the first table (F.linear)."""
    VOCAB = 64

    def __init__(self, tied=False):
        super().__init__()
        self.emb = nn.Embedding(self.VOCAB, 12, max_norm=1.0)
        self.bag = nn.EmbeddingBag(self.VOCAB, 12, mode="sum", max_norm=2.0)
        self.fc = nn.Linear(12, 12)
        self.head = nn.Linear(12, 5)
        self.tied = tied

    def forward(self, ids, step=0):
        h = torch.tanh(self.fc(self.emb(ids).mean(1) + 0.2 * self.bag(ids)))
        if self.tied:
            return nn.functional.linear(h, self.emb.weight)[:, :5]
        return self.head(h)


def maxnorm():
    """nn.Embedding(max_norm=...): every lookup renormalizes its rows in
    place, each rank's its own ids', one process's every rank's. Each rank
    trains on its own ids and validates on its own shard every third step
    (a forward without gradients: rows changed twice in one step): the
    replicas bit-identical after every step, one process's within rounding.
    A tied decoder that reads the table whole before the other ranks' rows
    are renormalized: refused, naming it."""
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, TextNet.VOCAB, (4096, 6), generator=g)
    y = (ids[:, 0] + 2 * ids[:, 1]) % 5
    model = setup_model(TextNet)
    P, r = sft.size(), sft.rank()
    vx = ids[-16 * P:]
    opt, ref, ref_opt, job = beside_one_process(
        model, max_samples=2 * args.batch * 6 if args.uneven else None)

    def step(m, o, xb, yb, t, sfb_side):
        if t % 3 == 1:  # each rank its own validation shard (one process: all of them)
            m.eval()
            with torch.no_grad():
                m(vx[r::P] if sfb_side else torch.cat([vx[q::P] for q in live(t)]))
            m.train()
        o.zero_grad()
        if sfb_side and args.uneven:
            o.set_samples(len(xb))
        nn.functional.cross_entropy(m(xb), yb).backward()
        o.step()

    def live(t):
        return [q for q in range(P) if steps_of(q) > t]
    with opt.join() if args.join else contextlib.nullcontext():
        for t in range(steps_of(r)):
            step(model, opt, *shard(ids, y, t, r, P), t, True)
            if not args.join:
                same(job, model, "after step %d" % t)
    same(job, model, "at the end")
    sft.shutdown()
    for t in range(args.steps):
        parts = [shard(ids, y, t, q, P) for q in live(t)]
        step(ref, ref_opt, torch.cat([a for a, _ in parts]), torch.cat([b for _, b in parts]),
             t, False)
    worst, where = near_one_process(model, ref)
    model = setup_model(lambda: TextNet(tied=True))
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
    try:
        for t in range(3):
            step(model, opt, *shard(ids, y, t, r, P), t, True)
        fail("a tied max_norm table whose rows the ranks renormalized apart was not refused")
    except (sfb.UsageError, sfb.PeerError) as e:
        want = ("emb.weight, looked up with max_norm=1, is also read whole (F.linear on it: a "
                "tied decoder), and the other ranks' lookups renormalized")
        if want not in str(e):
            fail("the error does not say %s: %s" % (want, e))
    closed()
    model = setup_model(TextNet)  # staleness > 0: no step where the ranks could meet
    opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model,
                                   staleness=1)
    try:
        model(ids[:4])
        fail("a max_norm lookup at staleness 1 was not refused")
    except sfb.UsageError as e:
        if "emb.weight is looked up with max_norm at staleness 1" not in str(e) or \
                e.param != "emb.weight":
            fail("the error does not name the table and the staleness: %s" % e)
    closed()
    early_save(ids, y)
    print("ok %s: each rank's rows renormalized on every rank, %d steps bit-identical, "
          "within %.3g of one process (%s); a tied decoder and staleness 1 refused; a "
          "state_dict() after a validation forward warned of" %
          (" ".join(sys.argv_case), args.steps, worst, where), flush=True)


def early_save(ids, y):
    """A checkpoint (model.state_dict()) taken after a validation forward
    that followed the last step: each rank has renormalized its own ids'
    rows (rank q's: row 32 + q, which training never looked up), the
    others' come at shutdown(), so the state is not the job's: every rank
    warns once, naming the tables, and its state differs from the one after
    shutdown(); one taken right after a step: nothing said."""
    import warnings
    model = setup_model(TextNet)
    P, r = sft.size(), sft.rank()
    opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        for t in range(2):
            rows = slice(8 * P * t + 8 * r, 8 * P * t + 8 * r + 8)
            opt.zero_grad()
            nn.functional.cross_entropy(model(ids[rows] % 32), y[rows]).backward()
            opt.step()
        model.state_dict()
        said_after_step = [str(w.message) for w in got]
        with torch.no_grad():  # (validation: each rank its own shard)
            model(torch.full((2, 6), 32 + r))
        early = {k: v.clone() for k, v in model.state_dict().items()}
        model.state_dict()  # (said once)
    sft.shutdown()
    said = [str(w.message) for w in got if "state_dict() was taken" in str(w.message)]
    if said_after_step or len(said) != 1 or \
            "taken after emb.weight and bag.weight were looked up" not in said[0]:
        fail("a state_dict() after a validation forward: warned %r (after the step: %r)" %
             (said, said_after_step))
    if all(torch.equal(early[k], v) for k, v in model.state_dict().items()):
        fail("a state_dict() after a validation forward is the one after shutdown() (no "
             "difference to warn of)")


class OwnMean(torch.autograd.Function):
    """A mean of the program's own: what backward() gets is not read."""

    @staticmethod
    def forward(ctx, t):
        ctx.shape = t.shape
        return t.mean()

    @staticmethod
    def backward(ctx, g):
        return g.expand(ctx.shape) / math.prod(ctx.shape)


def unequal():
    """Minibatches of unequal sizes without opt.set_samples: each rank
    weighs 1 (DDP's rule), not one process's mean over the union: rank 0
    warns once, naming the step and the ranks' counts, by what the mean
    cross_entropy or mse_loss divided by, for a mean written by hand (and
    two added, or over every dimension named) the elements it took, and for
    a loss sfb.torch cannot read (a mean by an autograd.Function of the
    program's own) by the layers' counts; with set_samples
    (here 1 on every rank: DDP's rule, chosen) nothing is said. A loss
    summed over the samples is P times what the ranks' mean gives from the
    first step on: rank 0 says so at step 0; multiplied by sft.size() it
    trains as one process's sum at any sizes, and nothing is said. A
    gradient given to backward() by hand, one number in every element, is
    read as that loss: a sum's (times a number) warned of as a sum, a
    mean's (1/len) as a mean by hand. A sum divided by a running average
    of the union's counts (detectron2's EMA loss normalizer over
    sft.allreduce's sum, the warning's advice), times sft.size(), is one
    process's, and nothing is said."""
    import warnings
    for loss in ("ce", "mse", "hand", "sum", "two", "dims", "own", "sumP", "given", "givenmean",
                 "ema"):
        per = {"two": 10, "givenmean": 1}.get(loss, 5)  # (elements a sample in what the loss divides by)
        for explicit in (False, True):
            model = setup()
            P, r = sft.size(), sft.rank()
            x, y = data()
            make = make_opt if loss not in ("sumP", "ema") else (  # (SGD: a gradient P times off shows)
                lambda params: torch.optim.SGD(params, lr=0.01))
            ref = copy.deepcopy(model)
            ref_opt = make(ref.parameters())
            opt = sft.DistributedOptimizer(make(model.parameters()), model=model, max_samples=8)
            norm = ref_norm = 20.0  # (ema: the running normalizers, sfb's and one process's)
            with warnings.catch_warnings(record=True) as got:
                warnings.simplefilter("always")
                for t in range(4):
                    n = 4 if t < 2 else 4 + (r % 2)  # (from step 2 on, ranks 1 and 3 take 5)
                    opt.zero_grad()
                    if explicit:
                        opt.set_samples(1)
                    out = model(x[:n], t)
                    if loss == "ce":
                        nn.functional.cross_entropy(out, y[:n]).backward()
                    elif loss == "mse":
                        nn.functional.mse_loss(out, nn.functional.one_hot(y[:n], 5).float()
                                               ).backward()
                    elif loss == "hand":  # (a mean written by hand: its elements)
                        hand_line = sys._getframe().f_lineno + 1
                        ((out - nn.functional.one_hot(y[:n], 5)) ** 2).mean().backward()
                    elif loss == "sum":  # (summed over the samples, scaled by hand)
                        hand_line = sys._getframe().f_lineno + 1
                        (((out - nn.functional.one_hot(y[:n], 5)) ** 2).sum() * 0.05).backward()
                    elif loss in ("given", "givenmean"):  # (per-sample losses, a gradient given)
                        each = ((out - nn.functional.one_hot(y[:n], 5)) ** 2).sum(1)
                        hand_line = sys._getframe().f_lineno + 1
                        each.backward(torch.full_like(each, 0.05 if loss == "given" else 1 / n))
                    elif loss == "sumP":  # (P times the sum: the ranks' mean is one process's)
                        (((out - nn.functional.one_hot(y[:n], 5)) ** 2).sum() * 0.05 *
                         sft.size()).backward()
                        every = [4 if t < 2 else 4 + (q % 2) for q in range(P)]
                        xs = torch.cat([x[:k] for k in every])
                        ys = torch.cat([y[:k] for k in every])
                        ref_opt.zero_grad()
                        ((ref(xs, t) - nn.functional.one_hot(ys, 5)) ** 2).sum().mul(
                            0.05).backward()
                        ref_opt.step()
                    elif loss == "ema":  # (a sum over a running average of the union's counts)
                        every = [4 if t < 2 else 4 + (q % 2) for q in range(P)]
                        count = float(sft.allreduce(torch.tensor(float(n)), op="sum"))
                        if count != sum(every):
                            fail("ema: allreduce's sum of the counts %g, not %d" % (count,
                                                                                    sum(every)))
                        norm = 0.9 * norm + 0.1 * count
                        (((out - nn.functional.one_hot(y[:n], 5)) ** 2).sum() / norm *
                         sft.size()).backward()
                        xs = torch.cat([x[:k] for k in every])
                        ys = torch.cat([y[:k] for k in every])
                        ref_norm = 0.9 * ref_norm + 0.1 * len(xs)
                        ref_opt.zero_grad()
                        ((ref(xs, t) - nn.functional.one_hot(ys, 5)) ** 2).sum().div(
                            ref_norm).backward()
                        ref_opt.step()
                    elif loss == "two":  # (two means by hand added: each its elements)
                        d = out - nn.functional.one_hot(y[:n], 5)
                        hand_line = sys._getframe().f_lineno + 1
                        ((d ** 2).mean() + d.abs().mean()).backward()
                    elif loss == "dims":  # (a mean over every dimension named: its elements)
                        d = out - nn.functional.one_hot(y[:n], 5)
                        hand_line = sys._getframe().f_lineno + 1
                        torch.mean(d ** 2, dim=(0, 1)).backward()
                    else:  # (a mean by a Function of the program's own: unread, the
                        d = out - nn.functional.one_hot(y[:n], 5)  # layers' counts stand in)
                        OwnMean.apply(d ** 2).backward()
                    opt.step()
            if loss in ("sumP", "ema"):
                near_one_process(model, ref)
            sft.shutdown()
            said = [str(w.message) for w in got if unequal_said(w)]
            where = [os.path.basename(w.filename) for w in got if unequal_said(w)]
            if where and where != ["torch_patterns.py"]:  # (the user's line, not sfb's or torch's)
                fail("the warning points at %s (%s: %r)" % (where, loss, said))
            counts = ", ".join("rank %d %d" % (q, 4 + q % 2) for q in range(P))
            want = [] if explicit or r or loss in ("sumP", "ema") else [
                "sfb.torch: at step 2 the ranks' losses average over different counts: a mean "
                "%s (torch_patterns.py:" % {"ce": "cross_entropy", "mse": "mse_loss"}[loss]
                if loss in ("ce", "mse") else
                "sfb.torch: at step 2 the ranks' losses average over different counts: the loss "
                "given to backward() at torch_patterns.py:%d%s divides by %s (a mean by hand), "
                "while the reduction weighs the ranks %s (no rank called set_samples), so .grad "
                "is not one process's mean over all %d. Call opt.set_samples(n)" % (
                    hand_line, " and 1 more term" if loss == "two" else "",
                    ", ".join("rank %d %d" % (q, (4 + q % 2) * per) for q in range(P)),
                    ", ".join(["1"] * P), sum(4 + q % 2 for q in range(P)) * per)
                if loss in ("hand", "two", "givenmean", "dims") else
                "sfb.torch: at step 0 the loss given to backward() at torch_patterns.py:%d is a "
                "sum over the samples (reduction=\"sum\", .sum()): one process's gradient of a "
                "sum over the union of the ranks' minibatches is the sum of the ranks' "
                "gradients, %d times the mean that .grad holds (DDP's rule). Multiply the loss "
                "by sfb.torch.size()" % (hand_line, P)
                if loss in ("sum", "given") else
                "sfb.torch: at step 2 the ranks' minibatches differ in size (the most samples "
                "one of their layers took: %s) and no rank called opt.set_samples(n)" % counts]
            if len(said) != len(want) or any(not a.startswith(b) for a, b in zip(said, want)):
                fail("%s: warned %r, expected %r" % (loss, said, want))
            if want and loss == "hand" and \
                    'keep it over sfb.torch.allreduce(count, op="sum")' not in said[0]:
                fail("hand: the warning does not say what a running normalizer needs: %r" % said)
            if want and loss in ("ce", "mse") and (
                    ") divides by %s of %d targets, while the reduction weighs the ranks %s (no "
                    "rank called set_samples)" % (
                        ", ".join("rank %d %d" % (q, (4 + q % 2) * (5 if loss == "mse" else 1))
                                  for q in range(P)),
                        sum(4 + q % 2 for q in range(P)) * (5 if loss == "mse" else 1),
                        ", ".join(["1"] * P))) not in said[0]:
                fail("the warning does not name the counts and the weights: %r" % said)
    mixed_sums()
    python_sums()
    task_terms()
    task_loop()
    accum_edit()
    sparse_accum()
    shared_counts()
    dropped_rank()
    statistics = batch_statistics()
    factors()
    micro_means()
    item_means()
    grad_scaled_passes()
    task_passes()
    print("ok unequal: rank 0 warned once at step 2 naming the counts (the loss's, a mean "
          "by hand's, a mean given to backward()'s, the layers'), at step 0 of a sum (and a "
          "sum's gradient given to backward()), of a sum beside a mean, of a Python sum over "
          "the samples, of tasks' terms apart (by line or by head), of .grad clipped between a step's passes, of a "
          "statistic over the samples, of an MoE's fractions, of a mean times a number each "
          "rank computed from its own minibatch, of a sum over a count summed over the ranks, of a mean times the world's size, of set_samples(0) beside a count, "
          "of advantages, targets and weights normalized over the rank's minibatch; "
          "not with set_samples, nor for P times the sum (or that count), nor for a statistic over the gathered samples or of the averaged fractions, "
          "nor for such a number averaged over the ranks or a weight per rank in proportion "
          "to its samples (within %.3g of one process)" % statistics,
          flush=True)


def micro_means():
    """backward_passes_per_step=2, each pass a mean over this rank's part of
    a micro-batch, the parts of unequal sizes that differ by rank (3 then
    5 rows on even ranks, 5 then 3 on odd): the step's counts are equal,
    but each pass's are not in proportion from rank to rank, so no weight
    per rank gives one process's mean of each micro-batch. Rank 0 warns
    once, naming the passes' counts, and the model is not one process's."""
    import warnings
    model = setup()
    P, r = sft.size(), sft.rank()
    x, y = data()
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model,
                                   backward_passes_per_step=2)
    parts = [(3, 5) if q % 2 == 0 else (5, 3) for q in range(P)]
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        for t in range(4):
            lo = 64 * t
            for mine, m, o in ((True, model, opt), (False, ref, ref_opt)):
                o.zero_grad()
                for k in range(2):  # (micro-batch k: every rank's part, in rank order)
                    first = lo + 8 * P * k
                    a = first + sum(parts[q][k] for q in range(r)) if mine else first
                    b = a + (parts[r][k] if mine else 8 * P)
                    (nn.functional.cross_entropy(m(x[a:b], t), y[a:b]) / 2).backward()
                o.step()
    sft.shutdown()
    worst, where = rel_diff(model, ref)
    if worst < 100 * args.tol:
        fail("micro-batch means: %s within %.3g of one process's (no difference to warn of)" %
             (where, worst))
    said = [str(w.message) for w in got if unequal_said(w)]
    want = "sfb.torch: at step 0 the loss's terms average over counts that are not in " \
        "proportion from rank to rank: cross_entropy ("
    if len(said) != (0 if r else 1) or said and (not said[0].startswith(want) or
                                                 "pass 1 divides by rank 0 3, rank 1 5" not in
                                                 said[0]):
        fail("micro-batch means: warned %r, expected %r" % (said, want))


def grad_scaled_passes():
    """backward_passes_per_step = P, the world's size, each micro-batch's
    mean loss given to backward() undivided and .grad scaled by 1/P after
    the step's passes (learn2learn's meta-batch, p.grad *= 1 / tasks): one
    process's mean over the union, and silent (it was warned of as a mean
    times the world's size)."""
    import warnings
    model = setup()
    P, r = sft.size(), sft.rank()
    x, y = data()
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model,
                                   backward_passes_per_step=P)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        for t in range(3):
            lo = 4 * P * P * t
            opt.zero_grad()
            for j in range(P):
                a = lo + (r * P + j) * 4
                nn.functional.cross_entropy(model(x[a:a + 4], t), y[a:a + 4]).backward()
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.mul_(1.0 / P)
            opt.step()
            ref_opt.zero_grad()
            nn.functional.cross_entropy(ref(x[lo:lo + 4 * P * P], t),
                                        y[lo:lo + 4 * P * P]).backward()
            ref_opt.step()
    exact_and_silent(model, ref, got, "micro-batch means undivided, .grad scaled after the "
                     "passes")


def task_passes():
    """higher's MAML loop: a backward() per task of a meta-batch, each the
    task's mean query loss (y_qry[i], a row of the tasks' targets), summed
    into .grad; each rank its two tasks, the default backward_passes_per_step
    (a reduction a pass) and backward_passes_per_step=2. One process's sum
    over every task is P times what the ranks' mean gives: rank 0 warns
    naming the line, and the model is not one process's (it was silent,
    1.1 off); each task's loss divided by the tasks (a mean): one
    process's, silent."""
    import warnings
    x, y = data()
    for passes, mean in ((1, False), (2, False), (1, True)):
        model = setup()
        P, r = sft.size(), sft.rank()
        ref = copy.deepcopy(model)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
        opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                       model=model, backward_passes_per_step=passes)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            for t in range(3):
                # (tasks, queries): a meta-batch's tensors, as a loader gives them
                xq = x[40 * P * t:40 * P * (t + 1)].view(2 * P, 20, 10).clone()
                yq = y[40 * P * t:40 * P * (t + 1)].view(2 * P, 20).clone()
                for mine, m, o in ((True, model, opt), (False, ref, ref_opt)):
                    o.zero_grad()
                    own = range(2 * r, 2 * r + 2) if mine else range(2 * P)
                    for i in own:
                        line = sys._getframe().f_lineno + 2
                        loss = nn.functional.cross_entropy(m(xq[i], t), yq[i])
                        (loss / len(own) if mean else loss).backward()
                    o.step()
        if mean:
            exact_and_silent(model, ref, got, "a task's mean per backward(), divided")
            continue
        sft.shutdown()
        worst, where = rel_diff(model, ref)
        if worst < 100 * args.tol:
            fail("tasks summed over backward() passes: %s within %.3g of one process's (no "
                 "difference to warn of)" % (where, worst))
        said = [str(w.message) for w in got if unequal_said(w)]
        want = [] if r else ["sfb.torch: at step %d the backward() passes of one optimizer "
                             "step (at torch_patterns.py:%d) each give one task's mean loss"
                             % (1 if passes == 1 else 0, line)]
        if len(said) != len(want) or any(not a.startswith(b) for a, b in zip(said, want)):
            fail("tasks summed over backward() passes (%d a step): warned %r, expected %r" % (
                passes, said, want))


def exact_and_silent(model, ref, got, what):
    """The job's end: model within --tol of one process's ref, and no
    warning of the ranks' weights among those got."""
    sft.shutdown()
    near_one_process(model, ref)
    said = [str(w.message) for w in got if unequal_said(w)]
    if said:
        fail("%s: warned %r" % (what, said))


def item_means():
    """torchvision's RetinaNet loss: one forward over the rank's images,
    each image's mean loss over its own rows (a Python loop, one line),
    averaged over the rank's images (two each), and set_samples(its
    images): one process's mean over every image, and silent (the terms'
    counts, each image's rows, are in proportion on no two ranks: it was
    warned of though set_samples said what to weigh)."""
    import warnings
    model, opt, ref, ref_opt = sgd_beside_one_process()
    P, r = sft.size(), sft.rank()
    x, y = data()
    g = torch.Generator().manual_seed(9)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        for t in range(4):
            rows = torch.randint(2, 7, (2 * P,), generator=g).tolist()  # (each image's)
            first = [sum(rows[:i]) + 15 * P * t for i in range(2 * P)]
            for mine, m, o in ((True, model, opt), (False, ref, ref_opt)):
                own = range(2 * r, 2 * r + 2) if mine else range(2 * P)
                o.zero_grad()
                at = [first[i] for i in own]
                out = m(torch.cat([x[a:a + rows[i]] for a, i in zip(at, own)]), t)
                terms, o_ = [], 0
                for i in own:
                    terms.append(nn.functional.cross_entropy(
                        out[o_:o_ + rows[i]], y[first[i]:first[i] + rows[i]]))
                    o_ += rows[i]
                if mine:
                    o.set_samples(len(terms))
                (sum(terms) / len(terms)).backward()
                o.step()
    exact_and_silent(model, ref, got, "per-image means averaged, set_samples(images)")


def factors():
    """A mean loss multiplied by a number without gradient that each rank
    computes from its own minibatch: its loss (ce * ce.detach()), its
    accuracy (a Python float), two task losses weighted from this rank's
    own previous losses (dynamic weight average; also with torch's losses
    imported by name before the wrapping), and mixup's lambda drawn
    by each rank, and FixMatch's mean by hand over each rank's confident
    samples beside the supervised mean: each weighs the ranks otherwise than
    one process's mean over the union. Rank 0 warns once
    (naming the numbers where there is one term), and the model is not one
    process's (the warning is not false). The number averaged over the
    ranks first (sfb.torch.allreduce), and a weight per rank in proportion
    to its samples on minibatches of unequal sizes (n_r / mean n, no
    set_samples): one process's, no warning."""
    import warnings

    def ce(*a):  # (looked up at the call, as F.cross_entropy(...) is: sfb.torch's)
        return nn.functional.cross_entropy(*a)

    def mse(*a):
        return nn.functional.mse_loss(*a)

    def acc(out, y):
        return float((out.argmax(1) == y).float().mean())

    def confident(y, mine):  # (rank r's first r + 1 samples; half of one process's)
        return (torch.arange(len(y)) < (1 + sft.rank() if mine else len(y) // 2)).float()

    def lam_of(mine):
        return 0.2 + 0.6 * sft.rank() / max(1, sft.size() - 1) if mine else 0.5

    # kind: the loss from (out, y, samples, previous task losses, sfb side)
    kinds = {
        "detached": lambda out, y, n, prev, mine: ce(out, y) * ce(out, y).detach(),
        "accuracy": lambda out, y, n, prev, mine: ce(out, y) * (1.5 - acc(out, y)),
        "tasks": lambda out, y, n, prev, mine: (
            ce(out, y) * prev[0] + mse(out, nn.functional.one_hot(y, 5).float()) * prev[1]),
        # (the same with torch's losses imported by name before the wrapping:
        # read from what backward() gets)
        "tasks_by_name": lambda out, y, n, prev, mine: (
            ce_by_name(out, y) * prev[0] +
            mse_by_name(out, nn.functional.one_hot(y, 5).float()) * prev[1]),
        # (FixMatch's: a mean by hand over each rank's confident samples beside
        # the supervised mean: terms whose counts are not in proportion)
        "fixmatch": lambda out, y, n, prev, mine: ce(out, y) + (
            nn.functional.cross_entropy(out, y.flip(0), reduction="none") * confident(y, mine)
        ).sum() / confident(y, mine).sum(),
        # (mixup's lambda drawn on each rank; one process draws one)
        "mixup": lambda out, y, n, prev, mine: (
            lam_of(mine) * ce(out, y) + (1 - lam_of(mine)) * ce(out, y.flip(0))),
        "averaged": lambda out, y, n, prev, mine: ce(out, y) * (
            sft.allreduce(ce(out, y).detach()) if mine else ce(out, y).detach()),
        "weighted": lambda out, y, n, prev, mine: ce(out, y) * (n[0] / n[1] if mine else 1.0)}
    for kind, loss_of in kinds.items():
        model, opt, ref, ref_opt = sgd_beside_one_process()
        P, r = sft.size(), sft.rank()
        x, y = data()
        prev = {True: [1.0, 1.0], False: [1.0, 1.0]}
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            for t in range(4):
                # (equal minibatches but for "weighted": 3 to 6 samples a rank)
                counts = [3 + (t + q) % 4 if kind == "weighted" else 4 for q in range(P)]
                lo = 40 * t
                for mine, m, o in ((True, model, opt), (False, ref, ref_opt)):
                    a = lo + (sum(counts[:r]) if mine else 0)
                    b = a + (counts[r] if mine else sum(counts))
                    o.zero_grad()
                    out = m(x[a:b], t)
                    loss = loss_of(out, y[a:b], (counts[r], sum(counts) / P), prev[mine], mine)
                    loss.backward()
                    o.step()
                    with torch.no_grad():  # (the next step's task weights: these losses')
                        ls = [float(ce(out, y[a:b])), float(mse(out, nn.functional.one_hot(
                            y[a:b], 5).float()))]
                        prev[mine] = [2 * v / sum(ls) for v in ls]
        sft.shutdown()
        worst, where = rel_diff(model, ref)
        warned = kind in ("detached", "accuracy", "tasks", "tasks_by_name", "mixup", "fixmatch")
        if not warned and worst > args.tol:
            fail("a mean times %s: %s differs from one process's by %.3g" % (kind, where, worst))
        if warned and worst < 100 * args.tol:
            fail("a mean times %s: %s within %.3g of one process's (no difference to warn of)" %
                 (kind, where, worst))
        said = [str(w.message) for w in got if unequal_said(w)]
        # (its mean cross_entropy, or its means ... each; the numbers where one)
        want = [] if RANK[0] or not warned else [(
            "sfb.torch: at step 0 the loss's terms average over counts that are not in "
            "proportion from rank to rank: cross_entropy (", "the other term (given to "
            "backward() at torch_patterns.py:")] if kind == "fixmatch" else [(
            "sfb.torch: at step %d the loss given to backward() multiplies its mean" % (
                1 if kind.startswith("tasks") else 0),
            "each by numbers without gradient that differ from rank to rank"
            if kind.startswith("tasks") or kind == "mixup" else  # (mixup: one line's two calls)
            "by a number without gradient that differs from rank to rank (rank 0 ")]
        if len(said) != len(want) or any(not a.startswith(b) or c not in a
                                         for a, (b, c) in zip(said, want)):
            fail("a mean times %s: warned %r, expected %r" % (kind, said, want))
        # (the warning says how to draw alike: mixup's lambda is no statistic)
        if kind == "mixup" and said and not ("drawn by each rank (mixup's lambda)" in said[0] and
                                             "broadcast_object" in said[0]):
            fail("mixup: the warning does not say how to draw lambda alike: %r" % said[0])


def python_sums():
    """A loss summed in Python over the samples, one forward each
    (sum(ce(model(x[i:i + 1]), y[i:i + 1]) for i in ...)), rank r taking
    3 + r % 2 samples: the ranks' mean holds 1/P of one process's gradient
    of that sum over the union. Rank 0 warns at step 0 naming the line and
    the number of terms, and the model is not one process's; the sum
    multiplied by sft.size() is one process's at these unequal sizes, and
    nothing is said; set_samples(1) on every rank (DDP's rule chosen):
    nothing said. The same for actor-critic's losses (ac, acP): one forward
    of a 1-D state (a tensor of its own) each step, its policy term and its
    value loss stacked and summed. Not for a rollout's loss summed over its
    steps, each step's forward a batch of the rank's envs (one env a rank:
    a batch of one) and its term a mean over them ("rollout"), nor for a
    deep ensemble's members' means over the same rows, one a rank
    ("ensemble"): one process's, nothing said."""
    import warnings

    def loss_of(m, x, y, t, kind):
        if kind == "ensemble":  # (each member's mean over the same rows)
            return sum(nn.functional.cross_entropy(member(x), y) for member in m)
        if kind == "rollout":  # (each step's states a tensor of their own, as an env's)
            return sum(-(nn.functional.log_softmax(m(x * (1 + 0.1 * s), t), -1).gather(
                1, (y[:, None] + s) % 5).squeeze(1) * (0.5 + 0.25 * s)).mean() for s in range(4))
        if kind in ("ac", "acP"):  # (1-D states, returns as numbers without gradient)
            terms = []
            for i in range(len(x)):
                out, r = m(x[i].clone(), t), 0.5 + (int(y[i]) % 3) * 0.25
                terms.append(-nn.functional.log_softmax(out, -1)[y[i]] * r +
                             nn.functional.smooth_l1_loss(out[:1], torch.tensor([r])))
            return torch.stack(terms).sum()
        return sum(nn.functional.cross_entropy(m(x[i:i + 1], t), y[i:i + 1])
                   for i in range(len(x)))
    for kind in ("sum", "sumP", "chosen", "ac", "acP", "rollout", "ensemble"):
        if kind == "ensemble":  # (a deep ensemble's members, each on the rank's one sample)
            model = setup_model(lambda: nn.ModuleList(nn.Sequential(
                nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 5)) for _ in range(3)))
            ref = copy.deepcopy(model)
            opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                           model=model)
            ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
        else:
            model, opt, ref, ref_opt = sgd_beside_one_process()
        P, r = sft.size(), sft.rank()
        x, y = data()
        every = [3 + q % 2 for q in range(P)] if kind not in ("rollout", "ensemble") else [1] * P
        n = every[r]
        lo = r if kind in ("rollout", "ensemble") else 0  # (one env a rank, the union's r-th)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            for t in range(3):
                opt.zero_grad()
                if kind == "chosen":
                    opt.set_samples(1)
                loss = loss_of(model, x[lo:lo + n], y[lo:lo + n], t, kind)
                line = sys._getframe().f_lineno + 1
                (loss * P if kind in ("sumP", "acP") else loss).backward()
                opt.step()
                xs = torch.cat([x[:k] for k in every])
                ys = torch.cat([y[:k] for k in every])
                if kind in ("rollout", "ensemble"):
                    xs, ys = x[:P], y[:P]
                ref_opt.zero_grad()
                loss_of(ref, xs, ys, t, kind).backward()
                ref_opt.step()
        sft.shutdown()
        worst, where = rel_diff(model, ref)
        if kind in ("sumP", "acP", "rollout", "ensemble") and worst > args.tol:
            fail("a Python sum times size() (%s): %s differs from one process's by %.3g" %
                 (kind, where, worst))
        if kind in ("sum", "ac") and worst < 100 * args.tol:
            fail("a Python sum: %s within %.3g of one process's (no difference to warn of)" %
                 (where, worst))
        said = [str(w.message) for w in got if unequal_said(w)]
        want = [] if r or kind not in ("sum", "ac") else [
            "sfb.torch: at step 0 the loss given to backward() at torch_patterns.py:%d sums the "
            "losses of %d forwards, one sample each" % (line, n)]
        if len(said) != len(want) or any(not a.startswith(b) for a, b in zip(said, want)):
            fail("a Python sum (%s): warned %r, expected %r" % (kind, said, want))


def sparse_accum():
    """A sparse=True Embedding with backward_passes_per_step=2, each pass
    this rank's share of a micro-batch: one process's two micro-batches
    (the check of .grad between a step's passes compared the sparse .grad
    with torch.equal, which torch has not for sparse tensors: every rank
    failed at the second pass), and nothing is said."""
    import warnings
    sft.init(peer_timeout_s=5)
    P, r = sft.size(), sft.rank()
    torch.manual_seed(1)
    model = nn.Sequential(nn.Embedding(20, 4, sparse=True), nn.Flatten(), nn.Linear(8, 1))
    sft.broadcast_parameters(model.state_dict(), root_rank=0)
    ref = copy.deepcopy(model)
    opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model,
                                   backward_passes_per_step=2)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(3)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        for _ in range(3):
            batches = [(torch.randint(0, 20, (4 * P, 2), generator=g),
                        torch.randn(4 * P, 1, generator=g)) for _ in range(2)]
            for m, o, mine in ((model, opt, True), (ref, ref_opt, False)):
                o.zero_grad()
                for x, y in batches:
                    rows = slice(4 * r, 4 * r + 4) if mine else slice(None)
                    (nn.functional.mse_loss(m(x[rows]), y[rows]) / 2).backward()
                o.step()
    sft.shutdown()
    worst, where = rel_diff(model, ref)
    if worst > args.tol:
        fail("sparse embedding over two passes: %s differs from one process's by %.3g" %
             (where, worst))
    said = [str(w.message) for w in got if "sfb.torch" in str(w.message)]
    if said:
        fail("sparse embedding over two passes: warned %r" % said)


def accum_edit():
    """backward_passes_per_step=2, .grad clipped after each micro-batch's
    backward() (clip_grad_value_: a common misplacement): before the
    step's last pass .grad holds this rank's own sum (the layers by factors
    nothing yet), so rank 0 warns once naming a parameter, and the model is
    not one process's; clipped after the last pass only: one process's,
    and nothing is said."""
    import warnings
    for every in (True, False):
        model = setup()
        P, r = sft.size(), sft.rank()
        x, y = data()
        ref = copy.deepcopy(model)
        opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                       model=model, backward_passes_per_step=2)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            for t in range(3):
                for m, o, mine in ((model, opt, True), (ref, ref_opt, False)):
                    o.zero_grad()
                    for k in range(2):
                        lo = 16 * P * t + 8 * P * k
                        rows = slice(lo + 8 * r, lo + 8 * r + 8) if mine else slice(lo, lo + 8 * P)
                        # (one process's micro-batch is the union's: its mean over them)
                        nn.functional.cross_entropy(m(x[rows], t), y[rows]).backward()
                        if every or k == 1:
                            nn.utils.clip_grad_value_(m.parameters(), 0.01)
                    o.step()
        sft.shutdown()
        worst, where = rel_diff(model, ref)
        if not every and worst > args.tol:
            fail("accumulation, clipped after the last pass: %s differs from one process's by "
                 "%.3g" % (where, worst))
        if every and worst < 100 * args.tol:
            fail("accumulation, clipped after each pass: %s within %.3g of one process's (no "
                 "difference to warn of)" % (where, worst))
        said = [str(w.message) for w in got if "changed between two backward() passes" in
                str(w.message)]
        if len(said) != (1 if every and not r else 0) or said and \
                "backward_passes_per_step=2" not in said[0]:
            fail("accumulation (clipped after each pass: %s): warned %r" % (every, said))


def task_terms():
    """A multi-task loss, each task's mean where the rank's share holds
    that task (even ranks: task a only; odd ranks: a and b): one process
    adds each task's mean over the union, the ranks' mean weighs b at half.
    Rank 0 warns at step 0 that the ranks' losses are made of different
    terms, naming its own and the ranks apart, and the model is not one
    process's; each term's sum over its count summed over the ranks, times
    sft.size(), with set_samples(1) (the warning's advice): one process's,
    and nothing is said."""
    import warnings
    for fixed in (False, True):
        model, opt, ref, ref_opt = sgd_beside_one_process()
        P, r = sft.size(), sft.rank()
        x, y = data()
        ce, mse = nn.functional.cross_entropy, nn.functional.mse_loss
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            for t in range(3):
                lo = 8 * P * t
                opt.zero_grad()
                xa, ya = x[lo + 4 * r:lo + 4 * r + 4], y[lo + 4 * r:lo + 4 * r + 4]
                xb = x[lo + 4 * P + 4 * r:lo + 4 * P + 4 * r + 4][:4 * (r % 2)]
                if fixed:
                    na = sft.allreduce(torch.tensor(float(len(xa))), op="sum")
                    nb = sft.allreduce(torch.tensor(float(len(xb))), op="sum")
                    loss = ce(model(xa, t), ya, reduction="sum") / na
                    if len(xb):
                        loss = loss + mse(model(xb, t)[:, 0], xb[:, 1], reduction="sum") / nb
                    loss = loss * P
                    opt.set_samples(1)
                else:
                    line = sys._getframe().f_lineno + 1
                    loss = ce(model(xa, t), ya)
                    if len(xb):
                        loss = loss + mse(model(xb, t)[:, 0], xb[:, 1])
                loss.backward()
                opt.step()
                ua = torch.cat([x[lo + 4 * q:lo + 4 * q + 4] for q in range(P)])
                va = torch.cat([y[lo + 4 * q:lo + 4 * q + 4] for q in range(P)])
                ub = torch.cat([x[lo + 4 * P + 4 * q:lo + 4 * P + 4 * q + 4][:4 * (q % 2)]
                                for q in range(P)])
                ref_opt.zero_grad()
                (ce(ref(ua, t), va) + mse(ref(ub, t)[:, 0], ub[:, 1])).backward()
                ref_opt.step()
        sft.shutdown()
        worst, where = rel_diff(model, ref)
        if fixed and worst > args.tol:
            fail("task terms, fixed: %s differs from one process's by %.3g" % (where, worst))
        if not fixed and worst < 100 * args.tol:
            fail("task terms: %s within %.3g of one process's (no difference to warn of)" %
                 (where, worst))
        said = [str(w.message) for w in got if unequal_said(w)]
        want = [] if r or fixed else [
            "sfb.torch: at step 0 the ranks' losses are made of different terms: rank 0's of "
            "cross_entropy (torch_patterns.py:%d) through head, ranks %s of others" % (
                line, ", ".join(str(q) for q in range(1, P, 2)))]
        if len(said) != len(want) or any(not a.startswith(b) for a, b in zip(said, want)):
            fail("task terms (%s): warned %r, expected %r" % (fixed, said, want))


class TaskNet(nn.Module):
    """A trunk and a head per task."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(10, 24)
        self.heads = nn.ModuleList(nn.Linear(24, 5) for _ in range(2))

    def forward(self, x, k):
        return self.heads[k](torch.tanh(self.trunk(x)))


def task_loop():
    """task_terms with the tasks' terms made by one line in a loop over the
    tasks the rank's share holds, each through its task's head: even ranks
    hold task 0, odd ranks task 1 ("apart": the loss summed from 0.0, with
    torch's cross_entropy imported by name, read from the loss backward()
    got; "watched": F.cross_entropy, which sfb.torch watches), every rank
    both ("both"). The line is one site, so only the head each call went
    through tells the ranks' terms apart: apart, rank 0 warns at step 0
    naming the head and the model is not one process's; each term's sum
    over its count summed over the ranks, times sft.size(), with
    set_samples(1) ("fixed"), and both tasks on every rank with equal
    counts ("both"): one process's, and nothing is said."""
    import warnings
    for variant in ("apart", "watched", "fixed", "both"):
        model = setup_model(TaskNet)
        ref = copy.deepcopy(model)
        opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), model=model)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
        ce = nn.functional.cross_entropy if variant == "watched" else ce_by_name
        apart = variant in ("apart", "watched")
        P, r = sft.size(), sft.rank()
        x, y = data()

        def share(lo, q, k):  # (rank q's samples of task k at offset lo, or None)
            if apart and q % 2 != k:
                return None
            at = lo + 4 * P * k + 4 * q
            return x[at:at + 4], y[at:at + 4]

        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            for t in range(3):
                lo = 8 * P * t
                opt.zero_grad()
                loss = 0.0
                if variant == "fixed":  # (each task's count over the ranks)
                    n = sft.allreduce(torch.tensor([float(len(share(lo, r, k)[0])) if share(
                        lo, r, k) else 0.0 for k in range(2)]), op="sum")
                    opt.set_samples(1)
                for k in range(2):
                    mine = share(lo, r, k)
                    if mine is None:
                        continue
                    if variant == "fixed":
                        line = sys._getframe().f_lineno + 1
                        loss = loss + ce(model(mine[0], k), mine[1], reduction="sum") / n[k] * P
                    else:
                        line = sys._getframe().f_lineno + 1
                        loss = loss + ce(model(mine[0], k), mine[1])
                loss.backward()
                opt.step()
                ref_opt.zero_grad()
                total = 0.0
                for k in range(2):
                    parts = [share(lo, q, k) for q in range(P)]
                    parts = [s for s in parts if s is not None]
                    total = total + ce(ref(torch.cat([s[0] for s in parts]), k),
                                       torch.cat([s[1] for s in parts]))
                total.backward()
                ref_opt.step()
        sft.shutdown()
        worst, where = rel_diff(model, ref)
        if not apart and worst > args.tol:
            fail("task loop (%s): %s differs from one process's by %.3g" % (variant, where, worst))
        if apart and worst < 100 * args.tol:
            fail("task loop (%s): %s within %.3g of one process's (no difference to warn of)" %
                 (variant, where, worst))
        said = [str(w.message) for w in got if unequal_said(w)]
        site = "torch_patterns.py:%d" % line if variant == "watched" else \
            "given to backward() at torch_patterns.py:%d" % (line + 1)
        want = [] if r or not apart else [
            "sfb.torch: at step 0 the ranks' losses are made of different terms: rank 0's of "
            "cross_entropy (%s) through heads.0, rank%s %s of others" % (
                site, "s" if P > 3 else "", ", ".join(str(q) for q in range(1, P, 2)))]
        if len(said) != len(want) or any(not a.startswith(b) for a, b in zip(said, want)):
            fail("task loop (%s): warned %r, expected %r" % (variant, said, want))


def mixed_sums():
    """A mean loss plus a term summed over the samples (a VAE's KL term's
    .sum(), an L1 penalty on the activations), every minibatch of one size:
    the ranks' mean holds 1/P of one process's gradient of the sum. Rank 0
    warns at step 0 naming the backward() line and the term, and the model
    is not one process's (so the warning is not false); the term multiplied
    by P, divided by the samples (a mean), a sum over the weights (a
    penalty) or over a minibatch statistic, and set_samples(1) (DDP's rule
    chosen): no sum said (the statistic, a covariance over the samples, is
    warned of as a loss that pairs them), and the first three are one
    process's."""
    import warnings
    P = [None]
    act = lambda out: out.pow(2).sum()                 # noqa: E731 (over the samples)

    def stat(out):                                     # (over the features of a mean)
        c = out - out.mean(0)
        return (c.t() @ c).pow(2).sum()

    # kind: (the term on a rank of n samples, one process's on all P * n)
    kinds = {"sum": (lambda m, out, n: act(out), None),
             # (per-sample penalties summed along the samples' dimension: torch.sum(.., 0))
             "sum0": (lambda m, out, n: torch.sum(out.pow(2).sum(1), 0), None),
             "sumP": (lambda m, out, n: act(out) * P[0], lambda m, out, n: act(out)),
             "mean": (lambda m, out, n: act(out) / n, None),
             "weights": (lambda m, out, n: sum(p.pow(2).sum() for p in m.parameters()), None),
             "stat": (lambda m, out, n: stat(out), None),
             "chosen": (lambda m, out, n: act(out), None)}
    exact = ("sumP", "mean", "weights")
    for kind, (term, one) in kinds.items():
        model = setup()
        P[0] = sft.size()
        x, y = data()
        ref = copy.deepcopy(model)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.01)  # (a 1/P term shows)
        opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                       model=model, max_samples=8)
        n = 4
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            for t in range(4):
                opt.zero_grad()
                if kind == "chosen":
                    opt.set_samples(1)
                out = model(x[:n], t)
                line = sys._getframe().f_lineno + 1
                (nn.functional.cross_entropy(out, y[:n]) + 1e-3 * term(model, out, n)).backward()
                opt.step()
                xs, ys = torch.cat([x[:n]] * P[0]), torch.cat([y[:n]] * P[0])  # (every rank's)
                ref_opt.zero_grad()
                out = ref(xs, t)
                (nn.functional.cross_entropy(out, ys) + 1e-3 * (one or term)(ref, out, n * P[0])
                 ).backward()
                ref_opt.step()
        sft.shutdown()
        worst, where = rel_diff(model, ref)
        if kind in exact and worst > args.tol:
            fail("a mean plus %s: %s differs from one process's by %.3g" % (kind, where, worst))
        if kind in ("sum", "sum0") and worst < 100 * args.tol:
            fail("a mean plus a sum: %s within %.3g of one process's (no difference to warn "
                 "of)" % (where, worst))
        said = [str(w.message) for w in got if unequal_said(w)]
        want = [] if RANK[0] or kind not in ("sum", "sum0", "stat") else [
            "sfb.torch: at step 0 the loss given to backward() at torch_patterns.py:%d adds a "
            "term summed over the samples (.sum()) to the others: one process's gradient of "
            "that sum over the union of the ranks' minibatches is the sum of the ranks' "
            "gradients of it, %d times what .grad holds" % (line, P[0])] if kind != "stat" else [
            # (no sum over the samples: a covariance over them, which pairs them)
            "sfb.torch: at step 0 the loss given to backward() at torch_patterns.py:%d "
            "combines the samples of this rank's minibatch (torch.mm: " % line]
        if len(said) != len(want) or any(not a.startswith(b) for a, b in zip(said, want)):
            fail("a mean plus %s: warned %r, expected %r" % (kind, said, want))


def shared_counts():
    """fairseq's loss: a sum over this rank's kept tokens divided by the
    tokens kept on every rank (sfb.torch.allreduce(op="sum")), the ranks'
    counts unequal: each rank's loss is its share of one process's mean,
    whose gradient is the ranks' sum, P times their mean. Rank 0 warns at
    step 0 naming the backward() line, the count and the allreduce's line,
    and the model is not one process's (the warning is not false); the loss
    multiplied by sfb.torch.size(), or divided by the ranks' mean count
    (op="mean"): one process's, nothing said. A mean over this rank's own
    targets multiplied by sfb.torch.size() ("meanP", the ranks' counts
    alike) is P times one process's (whose size() is 1): warned at step 0
    on rank 0."""
    import warnings
    for kind in ("sum", "sumP", "mean", "meanP", "meansP"):
        model, opt, ref, ref_opt = sgd_beside_one_process()
        P, r = sft.size(), sft.rank()
        x, y = data()

        def kept(q):  # (rank q's targets, those past its first 2 + q % 2 ignored)
            return torch.where(torch.arange(4) < 2 + q % 2, y[:4], torch.tensor(-100))
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            for t in range(4):
                opt.zero_grad()
                out = model(x[:4], t)
                ntok = (kept(r) != -100).sum().float()
                at = sys._getframe().f_lineno + 1
                total = sft.allreduce(ntok, op="mean" if kind == "mean" else "sum")
                line = sys._getframe().f_lineno + 1
                loss = nn.functional.nll_loss(out.log_softmax(1), kept(r), reduction="sum") / total
                if kind in ("meanP", "meansP"):  # (meansP: a mean of two means, DINO's)
                    loss = nn.functional.nll_loss(out.log_softmax(1), y[:4]) if kind == "meanP" \
                        else (nn.functional.nll_loss(out.log_softmax(1), y[:4]) +
                              nn.functional.mse_loss(out, torch.zeros_like(out))) / 2
                mean_at = line + 2
                bw = sys._getframe().f_lineno + 1
                (loss * P if kind in ("sumP", "meanP", "meansP") else loss).backward()
                opt.step()
                ys = torch.cat([y[:4] if kind in ("meanP", "meansP") else kept(q)
                                for q in range(P)])
                ref_opt.zero_grad()
                out = ref(torch.cat([x[:4]] * P), t)
                one = nn.functional.nll_loss(out.log_softmax(1), ys)
                (one if kind != "meansP" else (one + nn.functional.mse_loss(
                    out, torch.zeros_like(out))) / 2).backward()
                ref_opt.step()
        sft.shutdown()
        worst, where = rel_diff(model, ref)
        if kind in ("sumP", "mean") and worst > args.tol:
            fail("a shared count (%s): %s differs from one process's by %.3g" % (kind, where, worst))
        if kind in ("sum", "meanP", "meansP") and worst < 100 * args.tol:
            fail("a shared count: %s within %.3g of one process's (no difference to warn of)" %
                 (where, worst))
        said = [str(w.message) for w in got if unequal_said(w)]
        want = [] if r or kind not in ("sum", "ac") else [
            "sfb.torch: at step 0 the loss given to backward() at torch_patterns.py:%d divides by "
            "%d, a count summed over the ranks (sfb.torch.allreduce(op=\"sum\") at "
            "torch_patterns.py:%d): each rank's loss is its share of one process's mean over the "
            "union of the ranks' minibatches, whose gradient is the sum of the ranks' gradients, "
            "%d times the mean" % (bw, sum(2 + q % 2 for q in range(P)), at, P)]
        if kind in ("meanP", "meansP"):
            want = [] if r else [
                "sfb.torch: at step 0 the loss given to backward() is a mean (nll_loss "
                "(torch_patterns.py:%d), over this rank's own targets) multiplied by %d, "
                "the world's size" % (mean_at, P)] if kind == "meanP" else [] if r else [
                # (a mean of two means: the warning names one of them)
                "sfb.torch: at step 0 the loss given to backward() is a mean (mse_loss "
                "(torch_patterns.py:%d), over this rank's own targets) multiplied by %d, "
                "the world's size" % (mean_at + 2, P)]
        if len(said) != len(want) or any(not a.startswith(b) for a, b in zip(said, want)):
            fail("a shared count (%s): warned %r, expected %r" % (kind, said, want))


def dropped_rank():
    """RetinaNet's normalization: a loss summed over every sample (the
    negatives' too) divided by this rank's positives, num_pos.clamp(min=1),
    odd ranks without positives. With set_samples(num_pos) (the mean-by-hand
    warning's advice where the counts differ) those ranks' gradients are
    left out, where one process keeps their terms: rank 0 warns at step 0
    naming them, and the model is not one process's. The count summed over
    the ranks and the loss multiplied by sfb.torch.size(): one process's,
    nothing said."""
    import warnings
    for kind in ("set_samples", "shared"):
        model, opt, ref, ref_opt = sgd_beside_one_process()
        P, r = sft.size(), sft.rank()
        x, y = data()

        def positives(q):  # (rank q's samples counted positive: none on odd ranks)
            return torch.arange(4) < (0 if q % 2 else 2 + q % 3)

        def loss_of(out, ys, pos, npos):
            nll = nn.functional.nll_loss(out.log_softmax(1), ys, reduction="none")
            return (nll * torch.where(pos, 1.0, 0.25)).sum() / npos

        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            for t in range(3):
                opt.zero_grad()
                npos = positives(r).sum().float()
                if kind == "shared":
                    loss = loss_of(model(x[:4], t), y[:4], positives(r),
                                   sft.allreduce(npos, op="sum").clamp(min=1)) * P
                else:
                    opt.set_samples(int(npos))
                    loss = loss_of(model(x[:4], t), y[:4], positives(r), npos.clamp(min=1))
                loss.backward()
                opt.step()
                ref_opt.zero_grad()
                pos = torch.cat([positives(q) for q in range(P)])
                loss_of(ref(torch.cat([x[:4]] * P), t), torch.cat([y[:4]] * P), pos,
                        pos.sum().float().clamp(min=1)).backward()
                ref_opt.step()
        sft.shutdown()
        worst, where = rel_diff(model, ref)
        if kind == "shared" and worst > args.tol:
            fail("a count over the ranks: %s differs from one process's by %.3g" % (where, worst))
        if kind == "set_samples" and worst < 100 * args.tol:
            fail("set_samples(0): %s within %.3g of one process's (no difference to warn of)" %
                 (where, worst))
        said = [str(w.message) for w in got if unequal_said(w)]
        odd = [q for q in range(P) if q % 2]
        want = [] if r or kind == "shared" else [
            "sfb.torch: at step 0 rank%s %s called set_samples(0) while %s loss divides by %s: " % (
                "s" if len(odd) > 1 else "", ", ".join(map(str, odd)),
                "their" if len(odd) > 1 else "its", ", ".join("1 (rank %d)" % q for q in odd))]
        if len(said) != len(want) or any(not a.startswith(b) for a, b in zip(said, want)):
            fail("set_samples(0) (%s): warned %r, expected %r" % (kind, said, want))


def batch_statistics():
    """A loss that is a function of a statistic over each rank's own
    samples, every minibatch of one size: the square root of a mean squared
    error, a batch entropy (the log of the mean prediction), the hardest
    samples' losses (topk), a norm over the whole minibatch, an MoE's
    load-balancing loss (the mean router probability per expert times the
    fraction of the samples each expert took, without gradient), PPO's
    advantages, regression targets or per-sample weights normalized over
    the rank's minibatch (without gradient; over the union by
    sft.allreduce's moments or sum: one process's, nothing said). Rank 0
    warns naming the backward() line and the statistic (at step 0, the
    MoE's at the first step whose fractions differ from rank to rank), and
    the model is not one process's on the union (the warning is not
    false); the entropy of the mean over every rank's predictions
    (sft.allgather, or each rank's mean averaged by sft.allreduce, whose
    gradient reaches every rank's predictions) and the fractions averaged over the ranks
    (sft.allreduce) are one process's, and nothing is said. Returns how
    near those models are to one process's, the largest."""
    import warnings
    ce = nn.functional.cross_entropy

    def entropy(p):                                    # (of the mean prediction)
        m = p.mean(0)
        return (m * m.log()).sum()

    def balance(out, f):                               # (5 experts: Switch's, Mixtral's)
        return 5 * (f * out.softmax(1).mean(0)).sum()

    def fractions(out):                                # (each expert's, without gradient)
        return nn.functional.one_hot(out.argmax(1), 5).float().mean(0)

    def whitened(out):                                 # (W-MSE's: by a 1x1 convolution)
        z = out[:, :2] - out[:, :2].mean(0)
        w = torch.linalg.cholesky(z.t() @ z / (len(z) - 1) + 0.1 * torch.eye(2)).inverse()
        return nn.functional.conv2d(z[:, :, None, None], w[:, :, None, None])[:, :, 0, 0]

    def normalized(a, dist, union):                    # (to mean 0, std 1: PPO's advantages)
        if dist and union:                             # (the union's moments, as one process's)
            k = sft.allreduce(torch.tensor(float(len(a))), op="sum")
            m = sft.allreduce(a.sum(), op="sum") / k
            return (a - m) / (sft.allreduce(((a - m) ** 2).sum(), op="sum") / (k - 1)).sqrt()
        return (a - a.mean()) / a.std()

    def policy(out, y, dist, union):                   # (a baseline from the model's values)
        adv = normalized(out.detach()[:, 0] + y, dist, union)
        return -(out.log_softmax(1).gather(1, y[:, None]).squeeze(1) * adv).mean()

    def weighted(out, y, dist, union):                 # (weights from the model's confidence)
        w = out.detach().softmax(1).max(1)[0]
        if dist and union:                             # (over the union's sum: times size())
            return (ce(out, y, reduction="none") * w / sft.allreduce(w.sum(), op="sum")
                    ).sum() * sft.size()
        return (ce(out, y, reduction="none") * (w / w.sum())).sum()

    # kind: (the loss of out, y, over ranks (dist) or one process, what rank 0 says)
    normal = "has a %s without gradient normalized over this rank's minibatch (%s over its " \
        "samples"
    mixes = "combines the samples of this rank's minibatch (%s), so it is no mean of per-sample"
    kinds = {"rmse": (lambda out, y, dist: nn.functional.mse_loss(
                 out, nn.functional.one_hot(y, 5).float()).sqrt(),
                 mixes % "torch.sqrt of mse_loss's mean: a function of a batch statistic"),
             "entropy": (lambda out, y, dist: ce(out, y) + 0.5 * entropy(out.softmax(1)),
                         mixes % "a product of a mean over the samples: a function of a batch "
                         "statistic"),
             "gathered": (lambda out, y, dist: ce(out, y) + 0.5 * entropy(
                 sft.allgather(out.softmax(1)) if dist else out.softmax(1)), None),
             # (the mean prediction averaged over the ranks by sft.allreduce, whose
             # gradient reaches every rank's predictions)
             "reduced": (lambda out, y, dist: ce(out, y) + 0.5 * entropy(
                 sft.allreduce(out.softmax(1).mean(0))[None] if dist else out.softmax(1)), None),
             "topk": (lambda out, y, dist: ce(out, y, reduction="none").topk(2)[0].mean(),
                      mixes % "topk (hard-example mining) over the samples"),
             "norm": (lambda out, y, dist: (out - nn.functional.one_hot(y, 5)).norm(),
                      mixes % "a norm over the samples"),
             # (the same through resampling each sample's own positions: logits
             # upsampled to the labels' size, pooled)
             "topk_up": (lambda out, y, dist: ce(nn.functional.interpolate(
                 out[:, None], scale_factor=2, mode="linear", align_corners=False)[:, 0, ::2],
                 y, reduction="none").topk(2)[0].mean(),
                 mixes % "topk (hard-example mining) over the samples"),
             # (SimCSE's in-batch similarity, cosine_similarity by broadcasting: its
             # division by the norms between the pairs and the lifted samples)
             "cosine": (lambda out, y, dist: ce(nn.functional.cosine_similarity(
                 out[:, None], out[None], -1) / 0.5, torch.arange(len(out))),
                 mixes % "a product of every pair of samples, broadcast (z[:, None] against "
                 "z[None]): a kernel or distance over the minibatch"),
             # (a Cox model's partial likelihood: each sample's risk set, those after
             # it in time, summed by a cumulative logsumexp over the samples)
             "cox": (lambda out, y, dist: -(out[:, 0] - torch.logcumsumexp(out[:, 0], 0))
                     .mean(), mixes % "a cumulative logsumexp over the samples"),
             # (the same by a logsumexp over a masked (N, N) matrix of the scores
             # lifted to its second dimension)
             "risk": (lambda out, y, dist: (lambda s: -(s - torch.logsumexp(
                 s[None].expand(len(s), -1).masked_fill(
                     torch.ones(len(s), len(s)).tril(-1) > 0, float("-inf")), 1)).mean())(
                 out[:, 0]), mixes % "a logsumexp over the samples"),
             "norm_pool": (lambda out, y, dist: (nn.functional.max_pool1d(
                 out[:, None], 1)[:, 0] - nn.functional.one_hot(y, 5)).norm(),
                 mixes % "a norm over the samples"),
             # (the rank's embeddings whitened by its own covariance, the whitening
             # matrix a convolution's weight: no layer of the model)
             "whiten": (lambda out, y, dist: nn.functional.mse_loss(
                 whitened(out), nn.functional.one_hot(y, 5)[:, :2].float()),
                 mixes % "torch.mm: an in-batch similarity or a covariance over the samples"),
             "moe": (lambda out, y, dist: ce(out, y) + 0.5 * balance(out, fractions(out)),
                     "multiplies a mean over the samples by a tensor without gradient that "
                     "differs from rank to rank"),
             "advantages": (lambda out, y, dist: policy(out, y, dist, False),
                            normal % ("factor", "mean 0 and standard deviation 1")),
             "advantages_union": (lambda out, y, dist: policy(out, y, dist, True), None),
             "targets": (lambda out, y, dist: nn.functional.mse_loss(
                 out[:, 0], normalized(y + out.detach()[:, 1], dist, False)),
                 normal % ("target", "mean 0 and standard deviation 1")),
             # (L2RW's per-sample weights, w / w.sum(): a weighted mean, no sum)
             "weights": (lambda out, y, dist: weighted(out, y, dist, False),
                         normal % ("factor", "weights summing to 1")),
             "weights_union": (lambda out, y, dist: weighted(out, y, dist, True), None),
             "moe_mean": (lambda out, y, dist: ce(out, y) + 0.5 * balance(
                 out, sft.allreduce(fractions(out)) if dist else fractions(out)), None),
             # (from step 10 on: the loss is read at the first 8 steps, then every 16th,
             # and at the step after one whose mean losses' gradients differed from
             # rank to rank: step 11)
             "late": (lambda out, y, dist: nn.functional.mse_loss(
                 out, nn.functional.one_hot(y, 5).float()).sqrt(),
                 mixes % "torch.sqrt of mse_loss's mean: a function of a batch statistic")}
    best = 0.0
    for kind, (loss, what) in kinds.items():
        model = setup()
        P, r = sft.size(), sft.rank()
        x, y = data()
        opt, ref, ref_opt, job = beside_one_process(model)
        n = 4
        start, steps = (10, 17) if kind == "late" else (0, 4)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            for t in range(steps):
                use = loss if t >= start else lambda out, y, dist: ce(out, y)
                lo = 4 * n * P * t
                opt.zero_grad()
                mine = slice(lo + r * n, lo + (r + 1) * n)
                line = sys._getframe().f_lineno + 1
                use(model(x[mine], t), y[mine], True).backward()
                opt.step()
                ref_opt.zero_grad()
                use(ref(x[lo:lo + n * P], t), y[lo:lo + n * P], False).backward()
                ref_opt.step()
        sft.shutdown()
        worst, where = rel_diff(model, ref)
        if what is None and worst > args.tol:
            fail("%s: %s differs from one process's by %.3g" % (kind, where, worst))
        if what is None:
            best = max(best, worst)
        if what is not None and worst < 100 * args.tol:
            fail("%s: %s within %.3g of one process's (no difference to warn of)" %
                 (kind, where, worst))
        said = [str(w.message) for w in got if unequal_said(w)]
        want = "the loss given to backward() at torch_patterns.py:%d %s" % (line, what)
        at = "sfb.torch: at step %d " % (11 if kind == "late" else 0)
        if len(said) != (0 if r or what is None else 1) or said and (
                not said[0].startswith("sfb.torch: at step ") or want not in said[0] or
                kind != "moe" and not said[0].startswith(at)):
            fail("a statistic (%s): warned %r, expected %r" % (kind, said, want))
    return best


def gather():
    sft.init(peer_timeout_s=5)
    P, r = sft.size(), sft.rank()
    mine = {"rank": r, "preds": list(range(r + 1)), "blob": bytes([r]) * (r * 700000)}
    got = sft.allgather_object(mine)
    want = [{"rank": q, "preds": list(range(q + 1)), "blob": bytes([q]) * (q * 700000)}
            for q in range(P)]
    if got != want or got[r] is not mine:
        fail("allgather_object gave %r" % [(g["rank"], len(g["blob"])) for g in got])
    # sft.barrier: rank 0 writes a file late, then meets the others, who read it
    path = sft.broadcast_object(tempfile.mkdtemp() if r == 0 else None) + "/ready"
    if r == 0:
        time.sleep(0.3)
        with open(path, "w") as f:
            f.write("ready")
    sft.barrier()
    if not os.path.exists(path):
        fail("past the barrier before rank 0 wrote %s" % path)
    sft.barrier()  # (every rank has read it)
    if r == 0:
        shutil.rmtree(os.path.dirname(path))
    # sft.allreduce sums element by element: every rank passes one shape
    s = sft.allreduce(torch.arange(6.0).view(2, 3) * (r + 1), op="sum")
    if not torch.equal(s, torch.arange(6.0).view(2, 3) * (P * (P + 1) // 2)):
        fail("allreduce gave %s" % s)
    try:
        sft.allreduce(torch.zeros(3, 2) if r == 1 else torch.zeros(2, 3))
        fail("allreduce of a (3, 2) on rank 1 and (2, 3) elsewhere was not refused")
    except sfb.MismatchError as e:
        if "shape (2, 3), rank 1 (3, 2)" not in str(e):
            fail("the refusal does not name both shapes: %s" % e)
    closed()
    print("ok gather: %d objects in rank order, %d bytes at most; a barrier held; allreduce of "
          "other shapes refused" % (P, max(len(g["blob"]) for g in got)), flush=True)


def calls():
    """sfb.torch's collectives made at different points: each named as the
    program called it, not as the job's calls it makes (an allgather_object
    is broadcasts, an allreduce allgathers). Rank 0 in barrier() where the
    others are in allgather_object(): every rank's MismatchError names both.
    Then, in a new job, rank 0 in allreduce() (under `if rank == 0:`) while
    the others step: their step fails at once naming rank 0's allreduce(),
    with no advice about join() (nobody ran out of data). Then rank 0 in
    allreduce() where the others' forward gathers a BatchNorm's statistics:
    named so on every rank. Then an allreduce() of a metric in every step
    inside opt.join(), the last rank out of data first: every rank's error
    says it joined, and to call such collectives after the block."""
    model = setup_model(lambda: nn.Linear(10, 5))
    P, r = sft.size(), sft.rank()
    x, y = data()
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)

    def step(t):
        opt.zero_grad()
        mine = slice(t * P * 4 + r * 4, t * P * 4 + r * 4 + 4)
        nn.functional.cross_entropy(model(x[mine]), y[mine]).backward()
        opt.step()

    step(0)
    want = "rank 1 is in allgather_object() where rank 0 is in barrier()"
    try:
        sft.barrier() if r == 0 else sft.allgather_object(r)
        fail("barrier() against allgather_object() returned")
    except sfb.MismatchError as e:
        if want not in str(e):
            fail("expected %r, got %s" % (want, e))
    closed()
    model = setup_model(lambda: nn.Linear(10, 5))
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
    step(0)
    try:
        if r == 0:
            sft.allreduce(torch.ones(2))
        step(1)
        step(2)
        fail("allreduce() on rank 0 alone returned")
    except sfb.PeerError as e:
        said = "rank 0 is in allreduce()" in str(e) and "join()" not in str(e)
        if not (said if r else "aborted the job" in str(e)):
            fail("rank %d: %s" % (r, e))
    closed()
    # sfb.torch's own collectives are named too: a BatchNorm's statistics in a
    # forward where rank 0 computes a metric by allreduce() (early stopping
    # decided on rank 0 alone)
    model = setup_model(lambda: nn.Sequential(nn.Linear(10, 8), nn.BatchNorm1d(8),
                                              nn.Linear(8, 5)))
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
    step(0)
    want = "rank 1 is in a training step where rank 0 is in allreduce()"
    try:
        sft.allreduce(torch.ones(1)) if r == 0 else step(1)
        fail("allreduce() against a BatchNorm's forward returned")
    except sfb.Error as e:
        if want not in str(e):
            fail("rank %d: expected %r, got %s" % (r, want, e))
    closed()
    # an allreduce() of a metric inside opt.join(), each step: the last rank
    # (out of data first) joined, the others' allreduce() waits for it
    model = setup_model(lambda: nn.Linear(10, 5))
    opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
    last = P - 1
    try:
        with opt.join():
            for t in range(2 if r == last else 4):
                step(t)
                sft.allreduce(torch.ones(1))
        fail("allreduce() inside join() after rank %d joined returned" % last)
    except sfb.PeerError as e:
        want = "rank %d ran out of data before step 2 and joined" % last
        if want not in str(e) or "after the join block" not in str(e):
            fail("rank %d: expected %r, got %s" % (r, want, e))
    closed()
    print("ok calls: barrier() against allgather_object() named; rank 0's allreduce() named "
          "to the ranks waiting for its step, and against a BatchNorm's statistics; an "
          "allreduce() inside join() after a rank joined said so", flush=True)


class Clip(nn.Module):
    """Two encoders whose embeddings meet in CLIP's loss."""

    def __init__(self):
        super().__init__()
        self.img = nn.Sequential(nn.Linear(10, 24), nn.Tanh(), nn.Linear(24, 8))
        self.txt = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 8))
        self.scale = nn.Parameter(torch.tensor(1.5))

    def forward(self, a, b):
        return (nn.functional.normalize(self.img(a), dim=1),
                nn.functional.normalize(self.txt(b), dim=1))


def clip_loss(model, zi, zt, Zi, Zt, lo):
    """CLIP's symmetric loss of these rows (from row lo of the global batch)
    against every row of Zi, Zt."""
    labels = torch.arange(lo, lo + len(zi))
    s = model.scale.exp()
    return (nn.functional.cross_entropy(s * zi @ Zt.t(), labels) +
            nn.functional.cross_entropy(s * zt @ Zi.t(), labels)) / 2


def contrastive():
    """A contrastive loss over the global batch: each rank's rows against
    every rank's embeddings, gathered by sft.allgather (differentiable):
    one process's on the union; a rank whose embeddings are wider is
    refused, naming it. Then CLIP's loss over each rank's own rows
    (local_negatives) and Barlow Twins' (barlow_twins)."""
    model = setup_model(Clip)
    P, r = sft.size(), sft.rank()
    x, _ = data()
    g = torch.Generator().manual_seed(3)
    pairs = torch.tanh(x[:, :6] + 0.3 * torch.randn(len(x), 6, generator=g))
    opt, ref, ref_opt, job = beside_one_process(
        model, max_samples=2 * args.batch if args.uneven else None)
    for t in range(args.steps):
        c = counts(t, P)
        lo = (t * 37) % (len(x) - sum(c) - 1)
        opt.zero_grad()
        mine = slice(lo + sum(c[:r]), lo + sum(c[:r + 1]))
        if args.uneven:
            opt.set_samples(c[r])
        zi, zt = model(x[mine], pairs[mine])
        Zi, Zt = sft.allgather(zi), sft.allgather(zt)
        if Zi.shape != (sum(c), 8):
            fail("allgather gave %s rows from counts %s" % (tuple(Zi.shape), c))
        with no_unequal_warning():
            clip_loss(model, zi, zt, Zi, Zt, sum(c[:r])).backward()
            opt.step()
        same(job, model, "after step %d" % t)
        ref_opt.zero_grad()  # one process: the whole global batch
        whole = slice(lo, lo + sum(c))
        zi, zt = ref(x[whole], pairs[whole])
        clip_loss(ref, zi, zt, zi, zt, 0).backward()
        ref_opt.step()
    worst, where = near_one_process(model, ref)
    try:
        sft.allgather(torch.zeros(2, 9 if r == 1 else 8))
        fail("a rank's wider rows gathered")
    except sfb.MismatchError as e:
        if "rank 1 float32 9" not in str(e) or e.rank != 1:
            fail("expected a MismatchError naming rank 1's rows, got %s" % e)
    closed()
    local_negatives(x, pairs)
    twins = barlow_twins(x)
    print("ok %s: %d steps bit-identical on %d ranks, within %.3g of one process (%s); wider "
          "rows on rank 1 refused; each rank's own negatives warned; Barlow Twins over the "
          "gathered rows and summed by sft.allreduce within %.3g, over each rank's own warned" % (
              " ".join(sys.argv_case), args.steps, P, worst, where, twins), flush=True)


class Twins(nn.Module):
    """Barlow Twins' encoder: a projector whose embeddings a BatchNorm
    (without affine) standardizes over the minibatch (its last Linear
    without bias, as the paper's: the BatchNorm would take it out)."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(10, 24), nn.Tanh(), nn.Linear(24, 8, bias=False))
        self.bn = nn.BatchNorm1d(8, affine=False)

    def forward(self, a):
        return self.bn(self.enc(a))


def barlow_twins(x):
    """Barlow Twins: the cross-correlation of two views' batch-normalized
    embeddings over the minibatch, its diagonal pulled to 1 and the rest
    to 0. Over the rows gathered from every rank (sft.allgather) it is one
    process's on the union, and nothing is said; so is each rank's share of
    it summed by sft.allreduce (differentiable), as the authors' code does
    with torch.distributed's all_reduce; over each rank's own rows
    rank 0 warns at step 0 naming the backward() line and the product, and
    the model is not one process's. Returns how near the gathered run is
    to one process's."""
    import warnings
    g = torch.Generator().manual_seed(5)
    views = [x + 0.2 * torch.randn(x.shape, generator=g) for _ in range(2)]

    def loss(z1, z2, n=None):
        c = z1.t() @ z2 / (n or len(z1))
        if n:  # (this rank's share of the global batch's, summed over the ranks)
            c = sft.allreduce(c, op="sum")
        on = (torch.diagonal(c) - 1).pow(2).sum()
        return on + 0.05 * (c - torch.diag(torch.diagonal(c))).pow(2).sum()
    near = 0.0
    for how in ("gathered", "reduced", "own rows"):
        gathered = how != "own rows"
        model = setup_model(Twins)
        P, r = sft.size(), sft.rank()
        opt, ref, ref_opt, job = beside_one_process(model)
        n = args.batch
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            for t in range(6):
                lo = 4 * n * P * t
                opt.zero_grad()
                z1, z2 = (model(v[lo + r * n:lo + (r + 1) * n]) for v in views)
                if how == "gathered":
                    z1, z2 = sft.allgather(z1), sft.allgather(z2)
                line = sys._getframe().f_lineno + 1
                loss(z1, z2, n * P if how == "reduced" else None).backward()
                opt.step()
        closed()  # (then one process: its F.batch_norm torch's own again)
        for t in range(6):
            lo = 4 * n * P * t
            ref_opt.zero_grad()
            loss(*(ref(v[lo:lo + n * P]) for v in views)).backward()
            ref_opt.step()
        worst, where = rel_diff(model, ref)
        if gathered and worst > args.tol:
            fail("Barlow Twins %s: %s differs from one process's by %.3g" % (how, where, worst))
        if not gathered and worst < 100 * args.tol:
            fail("Barlow Twins over each rank's rows: %s within %.3g of one process's (no "
                 "difference to warn of)" % (where, worst))
        near = max(worst, near) if gathered else near
        said = [str(w.message) for w in got if unequal_said(w)]
        want = [] if r or gathered else [
            "sfb.torch: at step 0 the loss given to backward() at torch_patterns.py:%d combines "
            "the samples of this rank's minibatch (torch.mm: an in-batch similarity or a "
            "covariance over the samples)" % line]
        if len(said) != len(want) or any(not a.startswith(b) for a, b in zip(said, want)):
            fail("Barlow Twins (%s): warned %r, expected %r" % (how, said, want))
    return near


def local_negatives(x, pairs):
    """CLIP's loss over each rank's own rows only (no allgather): each rank
    pairs its samples with its own, one process with the union's. Rank 0
    warns at step 0 naming the backward() line and the product; the model
    is not one process's (the warning is not false)."""
    import warnings
    model = setup_model(Clip)
    P, r = sft.size(), sft.rank()
    opt, ref, ref_opt, job = beside_one_process(model)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        for t in range(6):
            lo, n = 8 * t * P, args.batch
            opt.zero_grad()
            zi, zt = model(x[lo + r * n:lo + (r + 1) * n], pairs[lo + r * n:lo + (r + 1) * n])
            line = sys._getframe().f_lineno + 1
            clip_loss(model, zi, zt, zi, zt, 0).backward()
            opt.step()
            ref_opt.zero_grad()
            zi, zt = ref(x[lo:lo + n * P], pairs[lo:lo + n * P])
            clip_loss(ref, zi, zt, zi, zt, 0).backward()
            ref_opt.step()
    closed()
    worst, where = rel_diff(model, ref)
    if worst < 100 * args.tol:
        fail("local negatives: %s within %.3g of one process's (no difference to warn of)" %
             (where, worst))
    said = [str(w.message) for w in got if unequal_said(w)]
    want = [] if r else [
        "sfb.torch: at step 0 the loss given to backward() at torch_patterns.py:%d combines "
        "the samples of this rank's minibatch (torch.mm: an in-batch similarity" % line]
    if len(said) != len(want) or any(not a.startswith(b) for a, b in zip(said, want)):
        fail("local negatives: warned %r, expected %r" % (said, want))


class SeqNet(nn.Module):
    """Token sequences -> 5 classes: a table, a Linear at every position (its
    samples: minibatch x longest sequence), self-attention masking the
    padding (no bias: a key's bias has no gradient but rounding, which Adam
    magnifies as it would between any two summation orders), a masked mean,
    a head."""
    VOCAB = 50

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(self.VOCAB, 12)
        self.tok = nn.Linear(12, 20)
        self.att = nn.MultiheadAttention(20, 2, bias=False, batch_first=True)
        self.head = nn.Linear(20, 5)

    def forward(self, ids, mask):
        h = torch.tanh(self.tok(self.emb(ids)))
        if len(ids):  # (torch 2.6's attention fails on an empty minibatch with a mask)
            h = h + self.att(h, h, h, key_padding_mask=~mask, need_weights=False)[0]
        m = mask.unsqueeze(-1).to(h.dtype)
        return self.head((h * m).sum(1) / m.sum(1).clamp(min=1))


def sequences(t, q, P):
    """Rank q's sequences of step t (None: the global minibatch, every
    rank's in rank order), padded to their longest (id 0, masked): lengths
    up to 2 + t (16 at most), labels from the ids."""
    c = counts(t, P)
    lo, n = (sum(c[:q]), c[q]) if q is not None else (0, sum(c))
    first = 64 * t + lo
    lens = [1 + ((first + i) * 5 + t) % (2 + min(t, 14)) for i in range(n)]
    ids = torch.zeros(n, max(lens + [1]), dtype=torch.long)
    for i, k in enumerate(lens):
        ids[i, :k] = (torch.arange(k) * 7 + (first + i) * 3) % (SeqNet.VOCAB - 1) + 1
    return ids, ids != 0, (ids[:, 0] + torch.tensor(lens, dtype=torch.long)) % 5


def varlen():
    """Dynamic padding: each rank's minibatch padded to its own longest, one
    process's to the global one, the masked mean the same. The samples of a
    Linear at every position (and the lookups) grow past the job's first
    bound: the steps past it exact, the bound raised; staleness 1 refused."""
    model = setup_model(SeqNet)
    P, r = sft.size(), sft.rank()
    opt, ref, ref_opt, job = beside_one_process(model)
    bounds = []
    # (equal minibatches of sequences, padded apart: the head saw equal counts)
    with no_unequal_warning():
        for t in range(args.steps):
            ids, mask, y = sequences(t, r, P)
            opt.zero_grad()
            if args.uneven:
                opt.set_samples(len(ids))
            nn.functional.cross_entropy(model(ids, mask), y).backward()
            opt.step()
            same(job, model, "after step %d" % t)
            if not bounds or sft._env._optimizer.max_s != bounds[-1]:
                bounds.append(sft._env._optimizer.max_s)
            ids, mask, y = sequences(t, None, P)
            ref_opt.zero_grad()
            nn.functional.cross_entropy(ref(ids, mask), y).backward()
            ref_opt.step()
    worst, where = near_one_process(model, ref)
    if len(bounds) < 3:
        fail("the job's bound went %s: the test meant it to grow twice or more" % bounds)
    closed()
    model = setup_model(SeqNet)  # staleness 1: the updates are applied as they come
    opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model,
                                   staleness=1)
    try:
        for t in range(args.steps):
            ids, mask, y = sequences(t, r, P)
            opt.zero_grad()
            nn.functional.cross_entropy(model(ids, mask), y).backward()
            opt.step()
        fail("a step past the job's bound at staleness 1 was not refused")
    except sfb.PeerError:
        pass  # (a peer's refusal ended the job first)
    except sfb.UsageError as e:
        if "at staleness 1" not in str(e) or "max_samples=, at least" not in str(e):
            fail("the error does not say staleness 1 and max_samples: %s" % e)
    closed()
    print("ok %s: %d steps bit-identical on %d ranks, within %.3g of one process (%s), the "
          "bound %s; past it at staleness 1 refused" % (
              " ".join(sys.argv_case), args.steps, P, worst, where,
              " -> ".join(map(str, bounds))), flush=True)


class PadNet(nn.Module):
    """Token sequences -> 5 classes through a layer whose outputs depend on
    the padding unless told where it is: a bidirectional GRU on the padded
    minibatch ("bigru") or on its packed sequences ("packed"), attention
    without a key_padding_mask ("nomask"), a BatchNorm over the positions
    ("bn": its statistics count the padded ones), then a masked mean and a
    head; or a GRU's final state on the padded minibatch and a head
    ("final")."""

    def __init__(self, how):
        super().__init__()
        self.how = how
        self.emb = nn.Embedding(SeqNet.VOCAB, 12)
        if how == "nomask":
            self.att = nn.MultiheadAttention(12, 2, bias=False, batch_first=True)
        elif how == "final":
            self.rnn = nn.GRU(12, 12, batch_first=True)
        elif how == "bn":
            self.bn = nn.BatchNorm1d(12)
        else:
            self.rnn = nn.GRU(12, 6, batch_first=True, bidirectional=True)
        self.head = nn.Linear(12, 5)

    def forward(self, ids, mask):
        h = self.emb(ids)
        if self.how == "final":  # (the state after the padding)
            return self.head(self.rnn(h)[1][-1])
        if self.how == "nomask":
            h = h + self.att(h, h, h, need_weights=False)[0]
        elif self.how == "bn":  # (over (N, C, T): every position, the padded ones too)
            h = self.bn(h.transpose(1, 2)).transpose(1, 2)
        elif self.how == "packed":
            lens = mask.sum(1).clamp(min=1)
            h = nn.utils.rnn.pack_padded_sequence(h, lens, batch_first=True,
                                                  enforce_sorted=False)
            h = nn.utils.rnn.pad_packed_sequence(self.rnn(h)[0], batch_first=True,
                                                 total_length=ids.shape[1])[0]
        else:
            h = self.rnn(h)[0]
        m = mask.unsqueeze(-1).to(h.dtype)
        return self.head((h * m).sum(1) / m.sum(1).clamp(min=1))


def padding():
    """Each rank's minibatch padded to its own longest (the lengths differ
    from rank to rank), one process's to the global one. A bidirectional
    GRU on the padded sequences, attention without a key_padding_mask and a
    GRU's final state depend on the padding, as do a BatchNorm's statistics
    over the positions: rank 0 alone warns once, naming each rank's length
    and the layer; the GRU on packed sequences
    trains as one process, without the warning (and SeqNet's masked
    attention: varlen). A convolution that rank 0's short first batch
    makes cheaper by factors and the others' densely goes densely on every
    rank, one process's, its plan line saying the ranks judged it apart."""
    import warnings
    for how in ("bigru", "nomask", "final", "bn", "packed"):
        model = setup_model(lambda: PadNet(how))
        P, r = sft.size(), sft.rank()
        opt, ref, ref_opt, job = beside_one_process(model)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            for t in range(args.steps if how == "packed" else 3):
                ids, mask, y = sequences(t + 6, r, P)
                opt.zero_grad()
                nn.functional.cross_entropy(model(ids, mask), y).backward()
                opt.step()
                same(job, model, "%s: after step %d" % (how, t))
                ids, mask, y = sequences(t + 6, None, P)
                ref_opt.zero_grad()
                nn.functional.cross_entropy(ref(ids, mask), y).backward()
                ref_opt.step()
        said = [str(w.message) for w in got if "padded to different lengths" in str(w.message)]
        if how == "packed":
            if said:
                fail("packed: warned %r" % said)
            worst, where = near_one_process(model, ref)
            print("ok padding packed: %d steps within %.3g of one process (%s)" % (
                args.steps, worst, where), flush=True)
        else:
            lens = [sequences(6, q, P)[0].shape[1] for q in range(P)]
            if len(set(lens)) < 2:
                fail("the ranks' minibatches are padded alike: %s" % lens)
            want = ("sfb.torch: at step 0 the ranks' sequences are padded to different lengths "
                    "(%s) and %s ran on them" % (
                        ", ".join("rank %d %d" % (q, k) for q, k in enumerate(lens)),
                        {"bigru": "a bidirectional GRU", "final": "a GRU's final state",
                         "nomask": "attention without a key_padding_mask",
                         "bn": "a BatchNorm over positions"}[how]))
            if r == 0 and (len(said) != 1 or not said[0].startswith(want) or
                           "one process, padding the union to %d" % max(lens) not in said[0]):
                fail("%s: warned %r, expected one warning starting %r" % (how, said, want))
            if r != 0 and said:
                fail("rank %d warned: %r" % (r, said))
            worst, where = rel_diff(model, ref)
            if worst <= args.tol:  # (what the warning says: not one process's)
                fail("%s: within %.3g of one process (%s), yet warned" % (how, worst, where))
        closed()
    # a convolution judged apart by the ranks' first batches (rank 0's one short
    # sequence makes its factors cheaper than the dense bytes, the others' not):
    # densely on every rank from the first step, one process's, the plan says why
    class ConvNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(16, 32, 3, padding=1)
            self.head = nn.Linear(32, 5)

        def forward(self, x):
            return self.head(torch.tanh(self.conv(x)).mean(2))

    def batch(t, q):
        g = torch.Generator().manual_seed(100 * t + q)
        n, T = (1, 5) if q == 0 else (8, 40)
        return torch.randn(n, 16, T, generator=g), torch.randint(0, 5, (n,), generator=g)
    model = setup_model(ConvNet)
    P, r = sft.size(), sft.rank()
    opt, ref, ref_opt, job = beside_one_process(model)
    for t in range(4):
        x, y = batch(t, r)
        opt.zero_grad()
        opt.set_samples(len(x))
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        parts = [batch(t, q) for q in range(P)]
        n = sum(len(a) for a, _ in parts)
        ref_opt.zero_grad()
        sum(nn.functional.cross_entropy(ref(a), b) * len(a) / n for a, b in parts).backward()
        ref_opt.step()
    worst, where = near_one_process(model, ref)
    line = [x for x in opt.plan.splitlines() if x.startswith("conv.weight")]
    if not line or "dense (judged apart by the ranks' first batches" not in line[0]:
        fail("the plan does not say the ranks judged the convolution apart:\n%s" % opt.plan)
    closed()
    print("ok padding: rank 0 warned once naming each rank's length (a bidirectional GRU, "
          "attention without a mask, a GRU's final state, a BatchNorm over positions); "
          "packed, one process's; a convolution judged apart by the first batches, one "
          "process's (within %.3g, %s), the plan saying so" % (worst, where), flush=True)


class MoE(nn.Module):
    """A router sends each sample to one of four experts (top-1, scaled by
    its gate), as a sparse mixture-of-experts layer does. Its
    load-balancing loss over the minibatch (Switch's, Mixtral's: E times
    the sum over the experts of the fraction of the samples each took,
    without gradient, times its mean gate) is kept in self.aux; counts
    turns this minibatch's samples per expert into the union's (summed
    over the ranks)."""
    E = 4

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(10, 12)
        self.router = nn.Linear(12, self.E)
        self.experts = nn.ModuleList([nn.Sequential(nn.Linear(12, 16), nn.Tanh(),
                                                    nn.Linear(16, 12)) for _ in range(self.E)])
        self.head = nn.Linear(12, 5)

    def forward(self, x, counts=lambda c: c):
        h = torch.tanh(self.inp(x))
        gates = self.router(h).softmax(-1)
        top = gates.argmax(-1)
        c = counts(nn.functional.one_hot(top, self.E).float().sum(0))
        self.aux = self.E * (c / c.sum() * gates.mean(0)).sum()
        out = torch.zeros_like(h)
        for e in range(self.E):
            idx = (top == e).nonzero().flatten()
            if len(idx):
                out = out.index_add(0, idx, self.experts[e](h[idx]) * gates[idx, e:e + 1])
        return self.head(h + out)


def moe():
    """Routed experts against one process on the global minibatches, with
    their load-balancing loss over the union's fractions (the ranks' counts
    summed by sft.allreduce): no warning."""
    model = setup_model(MoE)
    P, r = sft.size(), sft.rank()
    x, y = data()
    opt, ref, ref_opt, job = beside_one_process(model)
    union = lambda c: sft.allreduce(c, op="sum")      # noqa: E731 (every rank's samples)
    with no_unequal_warning():
        for t in range(args.steps):
            xb, yb = shard(x, y, t, r, P)
            opt.zero_grad()
            if args.uneven:
                opt.set_samples(len(xb))
            out = model(xb, union)
            (nn.functional.cross_entropy(out, yb) + 0.1 * model.aux).backward()
            opt.step()
            same(job, model, "after step %d" % t)
            parts = [shard(x, y, t, q, P) for q in range(P)]
            ref_opt.zero_grad()
            out = ref(torch.cat([a for a, _ in parts]))
            (nn.functional.cross_entropy(out, torch.cat([b for _, b in parts])) +
             0.1 * ref.aux).backward()
            ref_opt.step()
    worst, where = near_one_process(model, ref)
    closed()
    print("ok %s: %d steps bit-identical on %d ranks, within %.3g of one process (%s), no "
          "warning" % (" ".join(sys.argv_case), args.steps, P, worst, where), flush=True)


class Learner(nn.Module):
    """A regression net for MAML: a 1-D convolution over the input's 40
    values as 4 channels of 10 (one output position a sample: by factors
    where no autograd.grad asks for it) and two Linears."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 32, 10)
        self.fc = nn.Linear(32, 16)
        self.out = nn.Linear(16, 1)

    def forward(self, x):
        h = torch.tanh(self.conv(x.view(-1, 4, 10))).flatten(1)
        return self.out(torch.tanh(self.fc(h)))


def maml_loss(model, tasks):
    """MAML's meta-loss over tasks (support x, y, query x, y): one inner
    step of SGD on each task's support set from the model's parameters,
    through torch.autograd.grad(create_graph=True) with respect to them,
    and the query loss at the adapted weights (torch.func's
    functional_call), averaged over the tasks."""
    try:
        from torch.func import functional_call
    except ImportError:  # torch 1.13
        from torch.nn.utils.stateless import functional_call
    params = dict(model.named_parameters())
    total = 0
    for xs, ys, xq, yq in tasks:
        inner = nn.functional.mse_loss(functional_call(model, params, (xs,)), ys)
        grads = torch.autograd.grad(inner, list(params.values()), create_graph=True)
        fast = {n: p - 0.1 * g for (n, p), g in zip(params.items(), grads)}
        total = total + nn.functional.mse_loss(functional_call(model, fast, (xq,)), yq)
    return total / max(len(tasks), 1)


def maml():
    """MAML's outer step, each rank its own tasks: the meta-gradient one
    process takes over every rank's tasks. --uneven: rank q takes 1 + q % 3
    tasks and calls set_samples with their number: one process's, and no
    warning (the terms' warning was false: each task's mean loss weighs
    alike in the reduction)."""
    model = setup_model(Learner)
    P, r = sft.size(), sft.rank()
    opt, ref, ref_opt, job = beside_one_process(model)
    g = torch.Generator().manual_seed(13)
    mine = [1 + q % 3 if args.uneven else 2 for q in range(P)]
    with no_unequal_warning():
        for t in range(args.steps):
            tasks = []
            for _ in range(sum(mine)):  # a task: y = a·sin(x₀ + b) on its own a and b
                a, b = torch.rand(2, generator=g) * 3
                xs, xq = torch.randn(5, 40, generator=g), torch.randn(5, 40, generator=g)
                tasks.append((xs, a * torch.sin(xs[:, :1] + b), xq,
                              a * torch.sin(xq[:, :1] + b)))
            opt.zero_grad()
            if args.uneven:
                opt.set_samples(mine[r])
            maml_loss(model, tasks[sum(mine[:r]):sum(mine[:r + 1])]).backward()
            opt.step()
            same(job, model, "after step %d" % t)
            ref_opt.zero_grad()
            maml_loss(ref, tasks).backward()
            ref_opt.step()
    worst, where = near_one_process(model, ref)
    plan = opt.plan
    closed()
    if plan.count("torch.autograd.grad with respect to it") != 3:
        fail("the plan does not say the conv and Linear layers go densely and why:\n%s" % plan)
    print("ok %s: %d steps bit-identical on %d ranks, within %.3g of one process (%s)" %
          (" ".join(sys.argv_case), args.steps, P, worst, where), flush=True)


class Criterion(nn.Module):
    """A loss with parameters of its own, outside the model: a classifier
    (F.linear: by factors), a learnable temperature."""

    def __init__(self):
        super().__init__()
        self.cls = nn.Linear(12, 5)
        self.temp = nn.Parameter(torch.tensor(1.5))

    def forward(self, z, y):
        return nn.functional.cross_entropy(self.cls(z) * self.temp, y)


def losshead_loss(model, crit, logv, x, y):
    """Two tasks weighted by learned uncertainties (Kendall et al.): the
    classification, and a reconstruction of the input from the features'
    first 10."""
    z = model(x)
    if not len(x):  # (no sample: a weight of 0, set_samples)
        return (crit(z, y) * 0).nan_to_num() + z.sum() + logv.sum() * 0
    a, b = crit(z, y), nn.functional.mse_loss(z[:, :10], x)
    return torch.exp(-logv[0]) * a + logv[0] + torch.exp(-logv[1]) * b + logv[1]


def losshead():
    """The optimizer holds tensors outside the model (a loss's classifier and
    temperature, a plain leaf of task weights): one process's training."""
    model = setup_model(lambda: nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 12)))
    crit, logv = Criterion(), torch.zeros(2, requires_grad=True)
    sft.broadcast_parameters(list(crit.parameters()))
    ref, rcrit, rlogv = copy.deepcopy(model), copy.deepcopy(crit), logv.detach().clone()
    rlogv.requires_grad_(True)
    P, r = sft.size(), sft.rank()
    x, y = data()

    def make(m, c, lv):
        return make_opt([{"params": list(m.parameters())},
                         {"params": list(c.parameters()) + [lv], "weight_decay": 0.0}])
    opt = sft.DistributedOptimizer(make(model, crit, logv), model=model, sync=args.sync)
    ref_opt = make(ref, rcrit, rlogv)
    job = sft._need()
    for t in range(args.steps):
        xb, yb = shard(x, y, t, r, P)
        opt.zero_grad()
        if args.uneven:
            opt.set_samples(len(xb))
        losshead_loss(model, crit, logv, xb, yb).backward()
        opt.step()
        same(job, nn.ModuleList([model, crit]), "after step %d" % t)
        parts = [shard(x, y, t, q, P) for q in range(P)]
        ref_opt.zero_grad()
        losshead_loss(ref, rcrit, rlogv, torch.cat([a for a, _ in parts]),
                      torch.cat([b for _, b in parts])).backward()
        ref_opt.step()
    worst, where = near_one_process(nn.ModuleList([model, crit, nn.ParameterList([logv])]),
                                    nn.ModuleList([ref, rcrit, nn.ParameterList([rlogv])]))
    plan = opt.plan
    closed()
    # (the temperature, the classifier's weight and bias: a layer, the leaf)
    for name in ("optimizer.param_groups[1][0]", "optimizer.param_groups[1][1] (5x12+bias)",
                 "optimizer.param_groups[1][3]"):
        if name not in plan:
            fail("the plan does not name %s:\n%s" % (name, plan))
    print("ok %s: %d steps bit-identical on %d ranks, within %.3g of one process (%s)" %
          (" ".join(sys.argv_case), args.steps, P, worst, where), flush=True)


class Bert(nn.Module):
    """A small BERT-like classifier: word, position and token-type
    embeddings, a LayerNorm, a TransformerEncoder masking the padding, a
    pooler and a classifier."""
    V, D, L = 50, 32, 24

    def __init__(self):
        super().__init__()
        V, D, L = self.V, self.D, self.L
        self.word = nn.Embedding(V, D, padding_idx=0)
        self.pos, self.typ = nn.Embedding(L, D), nn.Embedding(2, D)
        self.ln = nn.LayerNorm(D)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(
            D, 4, 64, dropout=0.0, batch_first=True, activation="gelu"), 2)
        self.pool, self.cls = nn.Linear(D, D), nn.Linear(D, 3)

    def forward(self, ids, types, mask):
        pos = torch.arange(ids.shape[1]).expand_as(ids)
        h = self.ln(self.word(ids) + self.pos(pos) + self.typ(types))
        h = self.enc(h, src_key_padding_mask=~mask)
        return self.cls(torch.tanh(self.pool(h[:, 0])))


def bert_batch(g, n):
    """n sequences of 3 to 23 tokens (padding 0), their token types and
    mask, padded to their longest, and labels."""
    lens = torch.randint(3, Bert.L, (n,), generator=g)
    T = int(lens.max())
    ids = torch.randint(1, Bert.V, (n, T), generator=g)
    mask = torch.arange(T)[None] < lens[:, None]
    ids[~mask] = 0
    types = (torch.arange(T) >= T // 2).long().expand(n, T).clone()
    return ids, types, mask, ids[:, 1] % 3


LOAD_ANY = {"weights_only": False} if "weights_only" in torch.load.__code__.co_varnames else {}


def saved(obj):
    """torch.save(obj) into memory, ready to be read back."""
    import io
    f = io.BytesIO()
    torch.save(obj, f)
    f.seek(0)
    return f


def finetune():
    """Hugging Face's fine-tuning loop as its examples write it, against one
    process on the global batches: AdamW without decay for biases and
    norms, linear warmup and decay (LambdaLR), two micro-batches a step
    (each rank its own, padded to its own longest), clipping at 1.0, an
    evaluation every 4 steps (eval(), no_grad: torch's fast path over
    nested tensors), the best model saved whole (torch.save(model)), and its
    state reloaded on every rank at the end for one more step."""
    model = setup_model(Bert)
    P, r = sft.size(), sft.rank()

    def groups(m):
        flat = [n.endswith("bias") or n.startswith("ln") or ".norm" in n
                for n, _ in m.named_parameters()]
        ps = [p for _, p in m.named_parameters()]
        return [{"params": [p for p, f in zip(ps, flat) if not f], "weight_decay": 0.01},
                {"params": [p for p, f in zip(ps, flat) if f], "weight_decay": 0.0}]
    ref = copy.deepcopy(model)
    opt = sft.DistributedOptimizer(torch.optim.AdamW(groups(model), lr=1e-3), model=model,
                                   sync=args.sync, backward_passes_per_step=2)
    ref_opt = torch.optim.AdamW(groups(ref), lr=1e-3)
    scheds = [torch.optim.lr_scheduler.LambdaLR(
        o, lambda t: min(1.0, (t + 1) / 4) * max(0.0, 1 - t / (2 * args.steps)))
        for o in (opt, ref_opt)]
    g = torch.Generator().manual_seed(3)
    val = [bert_batch(g, 8) for _ in range(2)]
    job, best, best_loss = sft._need(), None, float("inf")

    def pad(t, T, v):
        return nn.functional.pad(t, (0, T - t.shape[1]), value=v)
    for t in range(args.steps):
        for _ in range(2):
            parts = [bert_batch(g, 2 + (q + t) % 3) for q in range(P)]
            ids, types, mask, y = parts[r]
            opt.set_samples(len(y))
            (nn.functional.cross_entropy(model(ids, types, mask), y) / 2).backward()
            T = max(q[0].shape[1] for q in parts)
            glob = [torch.cat([pad(q[k], T, v) for q in parts]) for k, v in ((0, 0), (1, 1),
                                                                              (2, False))]
            (nn.functional.cross_entropy(ref(*glob), torch.cat([q[3] for q in parts])) /
             2).backward()
        for m, o, sc in ((model, opt, scheds[0]), (ref, ref_opt, scheds[1])):
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            o.step()
            o.zero_grad()
            sc.step()
        same(job, model, "after step %d" % t)
        if t % 4 == 3:
            model.eval()
            with torch.no_grad():
                loss = sum(float(nn.functional.cross_entropy(model(*b[:3]), b[3])) for b in val)
            model.train()
            if loss < best_loss:  # (the whole module saved, as many scripts do: it
                best_loss = loss      # failed, "Can't pickle local object", on sfb's hooks)
                best = [saved(m) for m in (model, ref)]
    for m, f in zip((model, ref), best):
        m.load_state_dict(torch.load(f, **LOAD_ANY).state_dict())
    ids, types, mask, y = bert_batch(g, 4)  # (every rank the same: one process's too)
    for m, o in ((model, opt), (ref, ref_opt)):
        for _ in range(2):
            (nn.functional.cross_entropy(m(ids, types, mask), y) / 2).backward()
        o.step()
        o.zero_grad()
    same(job, model, "after the best state's step")
    closed()
    # (the keys' part of in_proj_bias has a gradient of rounding only, which
    # AdamW divides by its own root: it moves by noise in one process too,
    # and changes no output; docs/torch.md, "What is exact")
    worst, where = rel_diff(model, ref, skip=lambda n: n.endswith("in_proj_bias"))
    if worst > args.tol:
        fail("%s differs from one process's by %.3g (relative)" % (where, worst))
    print("ok %s: %d steps of 2 micro-batches bit-identical on %d ranks, the best state "
          "reloaded, within %.3g of one process (%s)" %
          (" ".join(sys.argv_case), args.steps, P, worst, where), flush=True)


class TokNet(nn.Module):
    """A language model's shape: a table, a Linear at every position, a
    head over the vocabulary at every position (logits: minibatch x length
    x vocabulary)."""
    VOCAB = 30

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(self.VOCAB, 12)
        self.tok = nn.Linear(12, 16)
        self.head = nn.Linear(16, self.VOCAB)

    def forward(self, ids):
        return self.head(torch.tanh(self.tok(self.emb(ids))))


def token_batch(t, q, P, L=8):
    """Rank q's sequences of step t (None: every rank's, in rank order),
    padded to L (id 0; padding="max_length"): the ids and the next-token
    labels, -100 at the padding (Hugging Face's). Every rank holds
    args.batch sequences of 1 to L tokens, so every layer takes the same
    count everywhere, and the ranks keep different numbers of targets."""
    lo, n = (q * args.batch, args.batch) if q is not None else (0, P * args.batch)
    ids = torch.zeros(n, L, dtype=torch.long)
    labels = torch.full((n, L), -100, dtype=torch.long)
    for i in range(n):
        k = 1 + ((lo + i) * 5 + t * 3 + (lo + i) // 3) % L
        seq = (torch.arange(k + 1) * (3 + i % 4) + lo + i + t) % (TokNet.VOCAB - 1) + 1
        ids[i, :k], labels[i, :k] = seq[:k], seq[1:]
    return ids, labels


def tokens():
    """A mean cross_entropy over the tokens a padded minibatch keeps
    (ignore_index), as language models train: each rank divides by its own
    count, one process by the global one. Without set_samples rank 0 warns
    once, naming the counts (the layers' counts are equal: the minibatches'
    warning cannot see it); with set_samples(the count) the run is one
    process's: cross_entropy with label smoothing, then nn.NLLLoss with
    class weights (set_samples: their sum over the kept targets), then two
    micro-batches a step, each pass's summed loss divided by the step's
    count (Hugging Face's num_items_in_batch); so too with one micro-batch
    on odd ranks (synchronize() after it) and the sums over the union's
    count times sft.size(), without set_samples: nothing is said. The same warning where the
    loss takes the kept positions themselves (a masked language model's)."""
    import warnings
    w = torch.linspace(0.5, 2.0, TokNet.VOCAB)

    def loss_of(model, ids, labels, kind):
        out = model(ids)
        logits = out.flatten(0, 1)
        if kind == "steps":  # (a decoder's loss += ce(...) per position: a mean each)
            loss = 0
            for i in range(3):
                loss = loss + nn.functional.cross_entropy(out[:, i], labels[:, i])
            return loss
        if kind == "stepsfix":  # (each position's sum over its count on every rank)
            counts = sft.allreduce((labels[:, :3] != -100).sum(0).float(), op="sum")
            return sft.size() * sum(nn.functional.cross_entropy(
                out[:, i], labels[:, i], reduction="sum") / counts[i] for i in range(3))
        if kind in ("terms", "termsfix"):  # (BERT's: the kept tokens', then the sequences')
            seq = (ids[:, 0] % 5).clamp(min=0)
            if kind == "terms":
                return (nn.functional.cross_entropy(logits, labels.flatten()) +
                        nn.functional.cross_entropy(out[:, 0], seq))
            # (each term's sum over its count on every rank: P times the ranks' mean)
            counts = sft.allreduce(torch.tensor([float((labels != -100).sum()),
                                                 float(len(ids))]), op="sum")
            return sft.size() * (
                nn.functional.cross_entropy(logits, labels.flatten(), reduction="sum") /
                counts[0] + nn.functional.cross_entropy(out[:, 0], seq, reduction="sum") /
                counts[1])
        if kind == "nll":
            return nn.NLLLoss(weight=w)(torch.log_softmax(logits, -1), labels.flatten())
        if kind == "select":  # (the positions a masked language model predicts)
            keep = labels.flatten() != -100
            return nn.functional.cross_entropy(logits[keep], labels.flatten()[keep])
        if kind == "byname":  # (torch's own, imported by name before wrapping)
            return ce_by_name(logits, labels.flatten())
        if kind in ("hand", "handmean", "handset", "handterms"):  # (a masked mean by hand)
            each = nn.functional.cross_entropy(logits, labels.flatten().clamp(min=0),
                                               reduction="none")
            keep = labels.flatten() != -100
            if kind == "handterms":  # (two means by hand, over every position and the kept)
                return 0.1 * each.mean() + (each * keep).sum() / keep.sum()
            if kind == "handmean":
                return each[keep].mean()
            if kind == "handset":  # (by the count as a number, under a scaler's scale)
                return ((each * keep).sum() / int(keep.sum())) * torch.tensor([1.0])
            return (each * keep).sum() / keep.sum()
        return nn.functional.cross_entropy(logits, labels.flatten(), ignore_index=-100,
                                           label_smoothing=0.1 if kind == "smooth" else 0.0)

    warned = ("plain", "select", "byname", "hand", "handmean", "terms", "steps", "handterms")
    for kind in warned + ("smooth", "nll", "micro", "microuneven", "handset", "termsfix",
                          "stepsfix"):
        model = setup_model(TokNet)
        P, r = sft.size(), sft.rank()
        opt, ref, ref_opt, job = beside_one_process(
            model, backward_passes_per_step=2 if kind.startswith("micro") else 1)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            for t in range(args.steps if kind not in warned else 3):
                ids, labels = token_batch(t, r, P)
                opt.zero_grad()
                keep = labels != -100
                if kind in ("smooth", "handset"):
                    opt.set_samples(int(keep.sum()))
                elif kind in ("termsfix", "stepsfix"):
                    opt.set_samples(1)
                elif kind == "nll":
                    opt.set_samples(float(w[labels[keep]].sum()))
                if kind == "micro":
                    count = int(keep.sum())
                    opt.set_samples(count)
                    for half in (slice(0, args.batch // 2), slice(args.batch // 2, None)):
                        (nn.functional.cross_entropy(model(ids[half]).flatten(0, 1),
                                                     labels[half].flatten(), reduction="sum")
                         / count).backward()
                elif kind == "microuneven":  # (HF's: micro-batches as many as a rank's data)
                    parts = [slice(0, None)] if r % 2 else [
                        slice(0, args.batch // 2), slice(args.batch // 2, None)]
                    count = float(sft.allreduce(keep.sum().float(), op="sum"))
                    for part in parts:
                        (nn.functional.cross_entropy(model(ids[part]).flatten(0, 1),
                                                     labels[part].flatten(), reduction="sum")
                         / count * P).backward()
                    if len(parts) < 2:
                        opt.synchronize()
                else:
                    back_line = sys._getframe().f_lineno + 1
                    loss_of(model, ids, labels, kind).backward()
                opt.step()
                same(job, model, "%s: after step %d" % (kind, t))
                ids, labels = token_batch(t, None, P)
                ref_opt.zero_grad()
                loss_of(ref, ids, labels, {"termsfix": "terms", "stepsfix": "steps"}.get(
                    kind, kind)).backward()
                ref_opt.step()
        said = [str(x.message) for x in got if unequal_said(x)]
        if kind in warned:
            kept = [int((token_batch(0, q, P)[1] != -100).sum()) for q in range(P)]
            if len(set(kept)) < 2:
                fail("the ranks keep the same number of targets: %s" % kept)
            want = ("sfb.torch: at step 0 the ranks' losses average over different counts: a "
                    "mean cross_entropy (torch_patterns.py:")
            each = (") divides by%s %s of %d targets%s, while the reduction weighs the ranks "
                    "%s (no rank called set_samples)" % (
                        " (the targets it keeps: ignore_index=-100)" if kind != "select" else "",
                        ", ".join("rank %d %d" % (q, k) for q, k in enumerate(kept)),
                        8 * P * args.batch if kind != "select" else sum(kept),
                        " (those it drops too)" if kind != "select" else "",
                        ", ".join(["1"] * P)))
            if kind == "byname":
                want = want.replace("(torch_patterns.py:", "(given to backward() at "
                                    "torch_patterns.py:%d" % back_line)
            if kind in ("hand", "handmean"):
                want = ("sfb.torch: at step 0 the ranks' losses average over different counts: "
                        "the loss given to backward() at torch_patterns.py:%d divides by %s (a "
                        "mean by hand), while the reduction weighs the ranks %s (no rank called "
                        "set_samples), so .grad is not one process's mean over all %d" % (
                            back_line, ", ".join("rank %d %d" % (q, k) for q, k in enumerate(kept)),
                            ", ".join(["1"] * P), sum(kept)))
                each = ""
            if kind == "terms":  # (the terms in either order: the order backward() met them)
                want = ("sfb.torch: at step 0 the loss's terms average over counts that are not "
                        "in proportion from rank to rank: cross_entropy (torch_patterns.py:")
                tok, seqs = (", ".join("rank %d %d" % (q, k) for q, k in enumerate(v))
                             for v in (kept, [args.batch] * P))
                each = ""
                if r == 0 and said and not any(
                        (") divides by %s, the other term (cross_entropy (torch_patterns.py:" % a
                         in said[0] and ")) by %s. One weight per rank" % b in said[0])
                        for a, b in ((tok, seqs), (seqs, tok))):
                    fail("the warning does not name both terms' counts: %r" % said)
            if kind == "handterms":  # (the root's terms, each a mean by hand)
                want = ("sfb.torch: at step 0 the loss's terms average over counts that are not "
                        "in proportion from rank to rank: given to backward() at "
                        "torch_patterns.py:%d (2 terms a pass), each a mean of its own: one "
                        "divides by " % back_line)
                each = ""
            if kind == "steps":  # (one line called per position: each call a term)
                want = ("sfb.torch: at step 0 the loss's terms average over counts that are not "
                        "in proportion from rank to rank: cross_entropy (torch_patterns.py:")
                each = ""
                if r == 0 and said and not re.search(
                        r"\(torch_patterns\.py:\d+\) \(3 calls a pass\), each a mean of its "
                        r"own: one divides by rank 0 \d+, .*, the other 2 by rank 0 \d+",
                        said[0]):
                    fail("the warning does not name the calls of one line: %r" % said)
            if r == 0 and (len(said) != 1 or not said[0].startswith(want) or each not in said[0]):
                fail("warned %r, expected one warning starting %r, with %r" % (said, want, each))
            if r != 0 and said:
                fail("rank %d warned: %r" % (r, said))
        else:
            if said:
                fail("%s: warned with set_samples: %r" % (kind, said))
            worst, where = near_one_process(model, ref)
            print("ok tokens %s: %d steps within %.3g of one process (%s)" % (
                kind, args.steps, worst, where), flush=True)
        closed()
    # class weights counted from each rank's own shard, an ignore_index of
    # rank 1's own: one process has one loss, and the refusal names the setting
    for setting in ("class weights (weight=, pos_weight=)", "ignore_index"):
        model = setup_model(TokNet)
        P, r = sft.size(), sft.rank()
        opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
        try:
            for t in range(3):
                ids, labels = token_batch(t, r, P)
                keep = labels != -100
                if t == 0:
                    mine = torch.bincount(labels[keep], minlength=TokNet.VOCAB).float() + 1
                    wr = mine.sum() / mine  # (inverse frequencies, of this rank's targets)
                if setting == "ignore_index":
                    wr, ignored = None, 0 if r == 1 else -100
                    labels = labels.clamp(min=0)  # (no -100 left: rank 1 ignores token 0)
                    opt.set_samples(int((labels != ignored).sum()))
                else:
                    ignored = -100
                    opt.set_samples(float(wr[labels[keep]].sum()))
                opt.zero_grad()
                line = sys._getframe().f_lineno + 1
                loss = nn.functional.nll_loss(torch.log_softmax(model(ids).flatten(0, 1), -1),
                                              labels.flatten(), weight=wr, ignore_index=ignored)
                loss.backward()
                opt.step()
            fail("losses of each rank's own settings went on (%s)" % setting)
        except (sfb.MismatchError, sfb.PeerError) as e:  # (a peer's refusal, first)
            alike = ("from rank to rank (alike: %s)" % "; ".join("rank %d" % q for q in range(P))
                     if setting != "ignore_index" else "on rank 1 than on ranks %s" %
                     ", ".join(str(q) for q in range(P) if q != 1))
            want = ("the ranks' losses differ: nll_loss (torch_patterns.py:%d) has other %s "
                    "%s. One process has one loss" % (line, setting, alike))
            if want not in str(e):
                fail("expected %r, got %s" % (want, e))
        closed()
    print("ok tokens: rank 0 warned once naming each rank's kept targets (ignored, selected, "
          "torch's imported by name, a masked mean by hand, a second term over the sequences); "
          "with set_samples one process's (label smoothing, class weights, micro-batches, a "
          "masked mean by hand, each term over its count on every rank); class weights and an "
          "ignore_index of each rank's own refused, naming the setting", flush=True)


class Shrink(nn.Module):
    """A module of the program's own whose forward differs by mode (halves
    its input in training), reading self.training in a method its forward
    calls: sfb.torch must find it by the code's names."""

    def factor(self):
        return 0.5 if self.training else 1.0

    def forward(self, x):
        return x * self.factor()


class ModeNet(nn.Module):
    def __init__(self, drop):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(10, 24), nn.Linear(24, 5)
        self.shrink = Shrink()
        self.drop0 = nn.Dropout(0.0)  # (its mode changes nothing)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        return self.fc2(self.drop(self.drop0(self.shrink(torch.tanh(self.fc1(x))))))


class HandDrawNet(nn.Module):
    """Masks drawn by functions in forward (kind): "locked", one per sample
    by bernoulli_ (timm's drop_path, AWD-LSTM's locked dropout);
    "functional", F.dropout; "batch", draws for the whole minibatch
    (LayerDrop's one number, a weight's dropout); "rows", a mask over fc2's
    rows by bernoulli_ (AWD-LSTM's embedded_dropout): one process's alike."""
    def __init__(self, kind):
        super().__init__()
        self.fc1, self.fc2, self.kind = nn.Linear(10, 24), nn.Linear(24, 5), kind

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        if self.kind == "rows" and self.training:  # (5 rows: no multiple of a minibatch of 4)
            w = self.fc2.weight
            HAND_LINE[0] = sys._getframe().f_lineno + 1
            m = w.new_empty(w.shape[0], 1).bernoulli_(0.8).expand_as(w) / 0.8
            return nn.functional.linear(h, m * w, self.fc2.bias)
        if self.kind == "locked" and self.training:
            HAND_LINE[0] = sys._getframe().f_lineno + 1
            h = h * h.new_empty(h.shape[0], 1).bernoulli_(0.8) / 0.8
        if self.kind == "functional":
            HAND_LINE[0] = sys._getframe().f_lineno + 1
            h = nn.functional.dropout(h, 0.3, self.training)
        if self.kind == "batch":
            if self.training and torch.rand(()) < 0.25:  # (the layer dropped)
                h = torch.zeros_like(h)
            w = nn.functional.dropout(self.fc2.weight, 0.2, self.training)
            return nn.functional.linear(h, w, self.fc2.bias)
        return self.fc2(h)


HAND_LINE = [0]


def hand_draws():
    """Masks drawn by functions, every rank's generator seeded alike: rank
    0 warns at step 0 that the ranks drew the same masks, naming the
    function and the line (bernoulli_ a sample, F.dropout); not for draws
    for the whole minibatch (one process's alike), nor seeded apart. A mask
    over a layer's rows by bernoulli_ (not the samples'): one seed is one
    process's (nothing said), seeded apart warned of. A model every rank
    runs whole on the same rows: one seed everywhere is one process's
    (nothing said), seeded apart is warned of."""
    import warnings
    x, y = data()
    for kind, seeded in (("locked", False), ("functional", False), ("batch", False),
                         ("locked", True), ("rows", False), ("rows", True)):
        setup()
        P, r = sft.size(), sft.rank()
        model = HandDrawNet(kind)
        sft.broadcast_parameters(model.state_dict())
        ref = copy.deepcopy(model)
        torch.manual_seed(100 + (r if seeded else 0))
        opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            for t in range(3):
                xb, yb = shard(x, y, t, r, P)
                opt.zero_grad()
                nn.functional.cross_entropy(model(xb), yb).backward()
                opt.step()
        sft.shutdown()
        draws = [str(w.message) for w in said if "drew the same masks" in str(w.message) or
                 "drew masks for the same tensors" in str(w.message)]
        name = {"locked": "bernoulli_", "functional": "F.dropout"}.get(kind)
        want = ["sfb.torch: at step 0 every rank's torch random generator was in the same "
                "state, so %s at torch_patterns.py:%d drew the same masks for each rank's "
                "share of the minibatch, where one process draws for every sample apart: seed "
                "each rank apart" % (name, HAND_LINE[0])] if name and not seeded and r == 0 else []
        if kind == "rows" and seeded and r == 0:
            want = ["sfb.torch: at step 0 bernoulli_ at torch_patterns.py:%d drew masks for the "
                    "same tensors on every rank" % HAND_LINE[0]]
        if len(draws) != len(want) or any(not a.startswith(b) for a, b in zip(draws, want)):
            fail("masks drawn by functions (%s%s): warned %r, expected %r" % (
                kind, ", seeded apart" if seeded else "", draws, want))
        if kind == "rows" and not seeded:  # (one seed: one process's masks, one a step)
            seeded_one_process(model, ref, 100, x, y, P)
    # a model every rank runs whole (a full-graph network: the same rows through
    # its dropout on every rank, each rank's loss over its share of them): one
    # seed everywhere draws one process's masks, exact, nothing said; seeded
    # apart, each rank drops other elements: warned
    for seeded in (False, True):
        setup()
        P, r = sft.size(), sft.rank()
        torch.manual_seed(3)
        model = nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Dropout(0.5), nn.Linear(16, 5))
        sft.broadcast_parameters(model.state_dict())
        ref = copy.deepcopy(model)
        torch.manual_seed(200 + (r if seeded else 0))
        opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            for t in range(3):
                parts = [shard(x, y, t, q, P) for q in range(P)]
                xa, ya = torch.cat([a for a, _ in parts]), torch.cat([b for _, b in parts])
                lo = sum(len(a) for a, _ in parts[:r])
                opt.zero_grad()
                opt.set_samples(len(parts[r][0]))
                out = model(xa)[lo:lo + len(parts[r][0])]
                nn.functional.cross_entropy(out, ya[lo:lo + len(out)]).backward()
                opt.step()
        sft.shutdown()
        told = [str(w.message) for w in said if "drew masks for the same tensors" in str(w.message)
                or "drew the same masks" in str(w.message)]
        want = ["sfb.torch: at step 0 2 (Dropout) drew masks for the same tensors on every rank "
                "(a model every rank runs whole"] if seeded and r == 0 else []
        if len(told) != len(want) or any(not a.startswith(b) for a, b in zip(told, want)):
            fail("a model run whole on every rank (%s): warned %r, expected %r" % (
                "seeded apart" if seeded else "one seed", told, want))
        if not seeded:
            seeded_one_process(model, ref, 200, x, y, P)


def seeded_one_process(model, ref, seed, x, y, P):
    """ref trained as one process on the first 3 global minibatches, its
    generator seeded with seed, then model within --tol of it."""
    torch.manual_seed(seed)
    ref_opt = make_opt(ref.parameters())
    for t in range(3):
        parts = [shard(x, y, t, q, P) for q in range(P)]
        ref_opt.zero_grad()
        nn.functional.cross_entropy(ref(torch.cat([a for a, _ in parts])),
                                    torch.cat([b for _, b in parts])).backward()
        ref_opt.step()
    near_one_process(model, ref)


def modes():
    """Modules whose forward differs by mode (train() or eval()). Rank 0
    alone validates every 4 steps, in eval() then train() again (once with
    gradients on), and leaves a Dropout(p=0) in eval() from step 6 and a
    head used only to validate (its own Dropout(0.2)) from step 9: exact,
    not refused. Rank 1 alone leaving the model in eval() after validating
    (before step 7) runs Shrink as no process does: refused at step 7,
    naming the module and the ranks; a Dropout(0.3) put in eval() on ranks 0
    and 2 likewise, and its p halved on rank 2 alone at step 5 (a schedule
    stepped there). That Dropout, every rank's generator seeded alike: rank
    0 warns at step 0 that the ranks drew the same masks, naming it and not
    a Dropout the model holds and never calls; seeded apart (seed + rank),
    no warning."""
    import warnings
    x, y = data()
    worst = None
    for case in ("exact", "shrink", "drop", "rate", "seeded"):
        setup()
        P, r = sft.size(), sft.rank()
        torch.manual_seed(5)
        model = ModeNet(0.3 if case in ("drop", "rate", "seeded") else 0.0)
        if case == "exact":  # a head used only to validate, with a dropout of its own
            model.aux = nn.Sequential(nn.Dropout(0.2), nn.Linear(24, 5))
        if case == "drop":  # (a dropout the model holds and never calls: it draws nothing)
            model.spare = nn.Dropout(0.5)
        if case in ("seeded", "rate", "exact"):
            torch.manual_seed(100 + r)
        ref = copy.deepcopy(model)
        opt = sft.DistributedOptimizer(make_opt(model.parameters()), model=model)
        ref_opt = make_opt(ref.parameters())
        job = sft._need()
        lossf = nn.functional.cross_entropy
        want = {"shrink": (7, "shrink (Shrink) is in eval() on rank 1 and in train() on ranks "
                           "0, 2, 3"),
                "drop": (3, "drop (Dropout) is in eval() on ranks 0, 2 and in train() on ranks "
                         "1, 3"),
                "rate": (5, "differ: drop (Dropout) has p=0.3 on ranks 0, 1, 3 and p=0.15 on "
                         "rank 2")}.get(case)
        steps = {"exact": args.steps, "seeded": 3}.get(case, 10)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            try:
                for t in range(steps):
                    if case == "exact" and r == 0 and t % 4 == 1:
                        model.eval()
                        with torch.no_grad() if t % 8 == 1 else contextlib.nullcontext():
                            model(x[:64])
                        model.train()
                    if case == "exact" and r == 0 and t == 6:
                        model.drop0.eval()
                    if case == "exact" and r == 0 and t == 9:  # (left in eval(): no rank
                        model.aux.eval()                      # trains through it)
                        with torch.no_grad():
                            model.aux(torch.tanh(model.fc1(x[:64])))
                    if case == "rate" and t == want[0] and r == 2:  # (its schedule alone)
                        model.drop.p /= 2
                    elif case in ("shrink", "drop") and t == want[0] and \
                            r in ((1,) if case == "shrink" else (0, 2)):
                        # a validation here, model.train() forgotten (the dropout's
                        # alone: a model.eval() would name Shrink first)
                        (model if case == "shrink" else model.drop).eval()
                    xb, yb = shard(x, y, t, r, P)
                    opt.zero_grad()
                    lossf(model(xb), yb).backward()
                    opt.step()
                    same(job, model, "after step %d" % t)
                if want:
                    fail("%s: the ranks' modes differed, not refused" % case)
            except sfb.MismatchError as e:
                told = ("at step %d the ranks' modules %s" % (want[0], want[1]) if case == "rate"
                        else "at step %d the ranks' modules run in different modes: %s" % want
                        if want else None)
                if not want or told not in str(e) or \
                        ("one process has one rate" if case == "rate" else "model.train()") \
                        not in str(e):
                    fail("%s: %s" % (case, e))
                closed()
        draws = [str(w.message) for w in said if "drew the same masks" in str(w.message)]
        if draws != (["sfb.torch: at step 0 every rank's torch random generator was in the "
                      "same state, so drop (Dropout) drew the same masks for each rank's share "
                      "of the minibatch, where one process draws for every sample apart: seed "
                      "each rank apart once the model is built and broadcast, "
                      "torch.manual_seed(seed + sfb.torch.rank())"]
                     if case == "drop" and r == 0 else []):
            fail("%s: the warnings of the same draws: %s" % (case, draws))
        if case != "exact":
            closed()
            continue
        sft.shutdown()
        for t in range(args.steps):
            parts = [shard(x, y, t, q, P) for q in range(P)]
            ref_opt.zero_grad()
            lossf(ref(torch.cat([a for a, _ in parts])), torch.cat([b for _, b in parts])).backward()
            ref_opt.step()
        worst, where = near_one_process(model, ref)
    hand_draws()
    print("ok modes: rank 0's validations in eval(), a Dropout(p=0) and a head used only to "
          "validate left in eval(): %d steps "
          "within %.3g of one process; a module of the program's own and a Dropout left in "
          "eval() on some ranks, and a Dropout's p halved on one, refused, naming them; the "
          "same dropout masks on every rank warned, drawn by modules or by functions" %
          (args.steps, worst), flush=True)

class BlowNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(10, 24), nn.LayerNorm(24), nn.Linear(24, 5)

    def forward(self, x):
        return self.fc2(torch.tanh(self.norm(self.fc1(x))))


def scaled_step(model, opt, x, y, scaler):
    """A step under a loss scale kept as torch.amp.GradScaler keeps it
    (torch 1.13's is CUDA's alone): the scaled loss's gradient, not finite
    -> no step, the scale halved; else unscaled, clipped, stepped, the scale
    doubled after 4 good steps. Returns whether it stepped."""
    opt.zero_grad()
    (nn.functional.cross_entropy(model(x), y) * scaler["scale"]).backward()
    if not all(bool(torch.isfinite(p.grad).all()) for p in model.parameters()):
        scaler["scale"] /= 2
        scaler["good"] = 0
        return False
    for p in model.parameters():
        p.grad.div_(scaler["scale"])
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if not torch.isfinite(norm):
        raise AssertionError("a finite gradient's norm is not")
    opt.step()
    scaler["good"] += 1
    if scaler["good"] == 4:
        scaler["scale"] *= 2
        scaler["good"] = 0
    return True


def nonfinite():
    """A minibatch that makes the gradient not finite (an inf input on rank
    2 at step 7 and on rank 0 at step 12, as a corrupt sample or a loss
    past its range would): one process's gradient is not finite there and
    a loss scale kept as GradScaler keeps it skips the step. sfb.torch must
    give every rank a .grad that is not finite there (the library refuses
    to publish an inf: the job failed), so that every rank skips as one
    process does: exact, the same steps skipped, the same scale."""
    model = setup_model(BlowNet)
    P, r = sft.size(), sft.rank()
    x, y = data()
    x = x.clone()
    outliers = {7: 2, 12: 0}
    for t, q in outliers.items():
        lo = shard(x, y, t, q, P)[0]
        lo[1, 3] = float("inf")  # (a view of x: one process's batch has it too)
    opt, ref, ref_opt, job = beside_one_process(model)
    mine, theirs = {"scale": 2.0 ** 10, "good": 0}, {"scale": 2.0 ** 10, "good": 0}
    skipped, ref_skipped = [], []
    for t in range(args.steps):
        if not scaled_step(model, opt, *shard(x, y, t, r, P), mine):
            skipped.append(t)
        same(job, model, "after step %d" % t)
    sft.shutdown()
    for t in range(args.steps):
        parts = [shard(x, y, t, q, P) for q in range(P)]
        if not scaled_step(ref, ref_opt, torch.cat([a for a, _ in parts]),
                           torch.cat([b for _, b in parts]), theirs):
            ref_skipped.append(t)
    if skipped != ref_skipped or skipped != sorted(outliers) or mine != theirs:
        fail("skipped steps %s, scale %s; one process %s, %s" % (skipped, mine, ref_skipped,
                                                                 theirs))
    worst, where = near_one_process(model, ref)
    # at staleness 1 an update is added to the replicas as it comes: one
    # that is not finite is refused on its rank, the others told
    model = setup_model(BlowNet)
    opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model,
                                   staleness=1)
    try:
        for t in range(10):
            opt.zero_grad()
            nn.functional.cross_entropy(model(shard(x, y, 7 if t == 2 else t, r, P)[0]),
                                        shard(x, y, t, r, P)[1][:4]).backward()
            opt.step()
        fail("an update that is not finite at staleness 1 was not refused")
    except sfb.Error as e:
        want = ("'s update at step 2 holds a number that is not finite on this rank: at "
                "staleness 1" if r == 2 else "rank 2")
        if want not in str(e) or (r == 2) != isinstance(e, sfb.UsageError):
            fail("staleness 1: %s: %s" % (type(e).__name__, e))
    closed()
    print("ok nonfinite: steps %s skipped as one process skips them (the scale %g), %d steps "
          "within %.3g of one process (%s); refused at staleness 1" % (
              skipped, mine["scale"], args.steps, worst, where), flush=True)


def closed():
    try:
        sft.shutdown()
    except Exception:
        pass


def main():
    global args
    for text in sys.argv[1:]:
        args = ap.parse_args(shlex.split(text))
        sys.argv_case = shlex.split(text)
        {"exact": exact, "nojoin": nojoin, "closurejoin": closurejoin, "rankedit": rankedit,
         "loadstate": loadstate, "rollback": rollback, "samhand": samhand,
         "staleclip": staleclip, "addgroup": addgroup, "batchnorm": batchnorm,
         "autogradw": autogradw, "latedense": latedense, "gan": gan, "dcgan": dcgan,
         "seq2seq": seq2seq, "foreign": foreign, "earlystop": earlystop, "phases": phases, "buffers": buffers,
         "gather": gather, "schedules": schedules, "maxnorm": maxnorm,
         "unequal": unequal, "contrastive": contrastive, "varlen": varlen,
         "moe": moe, "maml": maml, "losshead": losshead, "finetune": finetune,
         "tokens": tokens, "modes": modes, "nonfinite": nonfinite,
         "padding": padding, "raised": raised, "acthooks": acthooks,
         "settings": settings, "calls": calls}[args.mode]()


main()
