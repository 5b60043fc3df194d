"""Replica checks (docs/torch.md, "Replica checks"): at staleness 0 every
rank holds the same bits of every parameter and optimizer state tensor after
each step. Every check_every steps the ranks compare a CRC-32 of each such
tensor; one that differs on a minority of ranks is named and copied there
from the lowest rank of the majority, and training goes on; without a
majority every rank fails naming both sides. The parameters and the models'
persistent buffers are compared after steps 1, 4 and 32 too: a parameter or
a buffer that differs then (the program changed it on some ranks, or from
each rank's own data) fails every rank, naming it, as does a tensor that
differs at a check after it was repaired at an earlier one, and in
shutdown() once more (after the last step).
SFB_DEBUG_FLIP=RANK:STEP
[:TENSOR[:ELEMENT[:BIT]]] flips one bit of one tensor of one rank before the
check of a step (tests of the repair)."""
import os
import sys
import zlib

import numpy as np
import torch

import sfb as _sfb

from . import _env


def _ranks(rs):
    return "rank%s %s" % ("s" if len(rs) > 1 else "", ", ".join(map(str, rs)))


def first_apart(names, texts):
    """(name, ranks whose text lists it, the others) for the first of names
    that some ranks' texts (every rank's, lines of names) list and some do
    not, or None."""
    have = [set(t.split("\n")) for t in texts]
    for n in names:
        on = [q for q, h in enumerate(have) if n in h]
        if 0 < len(on) < len(have):
            return n, on, [q for q in range(len(have)) if q not in on]
    return None


# the steps after which the models' persistent buffers are compared too
# (and at every check): early, where a buffer each rank updates from its own
# minibatch parts first. A check after step k runs in the next reduction,
# once its bookkeeping showed every rank took k steps (a check run right
# after a step would leave a rank that skipped that step in another
# collective than the others)
BUFFER_STEPS = (1, 4, 32)
# a floating buffer whose bits differ between ranks passes where every
# element is within this share of its magnitude of rank 0's (rounding: another
# BLAS kernel or thread count on another host)
BUFFER_RTOL = 1e-5


def crcs(items):
    """A CRC-32 of each (name, tensor)'s bytes, as uint32s (what the
    replicas compare): read in place, any dtype (a frozen bfloat16 base
    model's too)."""
    return np.array([zlib.crc32(_env.memory(t)) for _, t in items], np.uint32)


def buffers(model):
    """(name, tensor) of the model's persistent buffers (its state_dict's: a
    non-persistent buffer is a cache), each once."""
    out, seen = [], set()
    for mname, m in model.named_modules():
        for bname, b in m._buffers.items():
            if b is None or bname in m._non_persistent_buffers_set or id(b) in seen or \
                    b.layout != torch.strided:
                continue
            seen.add(id(b))
            out.append(((mname + "." if mname else "") + bname, b))
    return out


def _far(job, t):
    """Collective: the ranks whose t (of one shape and dtype on every rank)
    is not within rounding of rank 0's."""
    ref = _env.memory(t).copy()
    job.broadcast(0, ref)
    far = not _close(t.detach(), torch.frombuffer(ref, dtype=t.dtype).reshape(t.shape)
                     if ref.size else t.detach())
    return [q for q, f in enumerate(job.allgather(bytes([far]))) if f[0]]


def _close(x, x0):
    """x within rounding of x0 (same shape and dtype)."""
    if not (x.is_floating_point() or x.is_complex()):
        return torch.equal(x, x0)
    if x.is_complex():
        x, x0 = torch.view_as_real(x), torch.view_as_real(x0)
    a, b = x.to(torch.float64), x0.to(torch.float64)
    fin = b[torch.isfinite(b)].abs()
    scale = 1e-3 * float(fin.max()) if fin.numel() else 0.0
    ok = ((a - b).abs() <= BUFFER_RTOL * (a.abs() + b.abs() + scale)) | (a == b) | \
        (torch.isnan(a) & torch.isnan(b))
    return bool(ok.all())


def check_buffers(sync, step, unit="step"):
    """Collective (staleness 0): every persistent buffer of the models the
    same on every rank (the same bits, or within rounding of rank 0's where
    the bits differ); else sfb.MismatchError on every rank, naming the first
    that differs. sfb.torch keeps parameters, optimizer state and
    BatchNorm's statistics alike; a buffer the model updates from each
    rank's own minibatch would part the replicas' forwards, silently."""
    items = buffers(sync.model)
    job = sync.job
    mine = np.array([[zlib.crc32(repr((tuple(t.shape), str(t.dtype))).encode()),
                      zlib.crc32(_env.memory(t))] for _, t in items], np.uint32).reshape(-1, 2)
    # (an allgather takes one length on every rank: the counts first)
    sizes = [int(np.frombuffer(b, np.uint64)[0])
             for b in job.allgather(np.array([len(items)], np.uint64).tobytes())]
    if len(set(sizes)) > 1:
        q = next(r for r in range(job.world) if sizes[r] != sizes[0])
        raise _sfb.MismatchError(
            -(4096 + 9), "sfb.torch: after %s %d rank 0's models have %d persistent "
            "buffers and rank %d's %d: a buffer registered on some ranks only" %
            (unit, step, sizes[0], q, sizes[q]), rank=q)
    rows = np.stack([np.frombuffer(b, np.uint32).reshape(-1, 2)
                     for b in job.allgather(mine.tobytes())])
    for i, (name, t) in enumerate(items):
        col = rows[:, i, :]
        if (col == col[0]).all():
            continue
        other = [r for r in range(job.world) if col[r, 0] != col[0, 0]]
        if other:
            what = "its shape or dtype (here %s %s)" % (
                tuple(t.shape), str(t.dtype).replace("torch.", ""))
        else:  # the same shape: rank 0's values, each rank's within rounding of them?
            other = _far(job, t)
            if not other:
                continue  # rounding
            what = "its values"
        same = [r for r in range(job.world) if r not in other]
        raise _sfb.MismatchError(
            -(4096 + 9), "sfb.torch: buffer %s differs between ranks after %s %d (%s, on %s "
            "from %s's): the model updates it from each rank's own data (a running statistic "
            "kept in forward?), where one process would update it from the whole minibatch, "
            "or the ranks started from different buffers. sfb.torch keeps the parameters, "
            "their optimizer state and BatchNorm's statistics the same on every rank, not "
            "other buffers: compute its update from every rank's data (sfb.torch.allreduce; "
            "rows from every rank, a queue of keys or negatives one process fills with the "
            "whole minibatch's, MoCo's: sfb.torch.allgather), broadcast the model's "
            "state_dict() at the start, or register with persistent=False (not compared) a "
            "buffer the model only records, never uses, or one that is each rank's own by "
            "design and read through the ranks' collectives (SwAV's queue of this rank's "
            "embeddings, fed to a Sinkhorn all-reduced over the ranks)" %
            (name, unit, step, what, _ranks(other), _ranks(same)), rank=other[0], param=name)


def _outside_grads(sync):
    """The parameters outside the job with a gradient (a loss's own
    parameter no optimizer holds, whose .grad a clip over every parameter
    reads), as the first steps found them (note_foreign): "that are in the
    loss ... (2x8, 4)", or None."""
    by = {}
    for v, where in getattr(sync, "foreign", {}).values():
        if v.grad is not None:
            by.setdefault(where, []).append("x".join(map(str, v.shape)) or "one number")
    return "; ".join("that %s (%s%s)" % (where, ", ".join(shapes[:3]),
                                         ", ..." if len(shapes) > 3 else "")
                     for where, shapes in by.items()) or None


def check_unheld(sync, step, unit="step", frozen=False):
    """Collective: the model's parameters that need a gradient and the job
    does not hold (a module replaced or added after wrapping, stepped by an
    optimizer of the program's own), the same names on every rank and the
    same values (within rounding of rank 0's: a LoRA merged into its frozen
    base for rank 0's validation and out again), or refused, naming them:
    each rank would train its own copy of them.
    frozen: the frozen ones too (prototypes or a codebook kept as a
    parameter without gradient, refreshed by hand from each rank's own
    data), where the buffers are first compared and at the end only (a
    LoRA's base model: its bytes read three times and once)."""
    held = set(id(p) for _, p in sync.params)
    items = [(n, p) for n, p in sync.model.named_parameters()
             if (p.requires_grad or frozen) and id(p) not in held]
    names = "\n".join("%s %s" % (n, tuple(p.shape)) for n, p in items)
    job = sync.job
    mine = crcs(items)
    every = np.stack([np.frombuffer(b, np.uint32) for b in job.allgather(np.array(
        [zlib.crc32(names.encode()), zlib.crc32(mine.tobytes())], np.uint32).tobytes())])
    apart = [q for q in range(len(every)) if every[q][0] != every[0][0]]
    if not apart and (every[:, 1] == every[0, 1]).all():
        return
    shown = ", ".join(n for n, _ in items[:4]) + (", ..." if len(items) > 4 else "")
    if not apart:  # (the same parameters: which differ, within rounding of rank 0's?)
        each = np.stack([np.frombuffer(b, np.uint32) for b in job.allgather(mine.tobytes())])
        named = []
        for i, (name, t) in enumerate(items):
            if len(named) > 4 or (each[:, i] == each[0, i]).all():
                continue
            ranks = _far(job, t)
            if ranks:  # (a LoRA merged into its frozen base and out again on one rank: rounding)
                named.append(name)
                apart = sorted(set(apart) | set(ranks))
        if not apart:
            return
        shown = ", ".join(named[:4]) + (", ..." if len(named) > 4 else "")
    raise _sfb.MismatchError(
        -(4096 + 9), "sfb.torch: the model's parameters that the DistributedOptimizer does not "
        "hold (%s on rank %d) differ between ranks after %s %d (%s from rank 0): a module "
        "replaced or added after wrapping, stepped by an optimizer of the program's own, "
        "trains on each rank's own gradients, where one process trains one copy. Build the "
        "model whole before wrapping its optimizer (a head to come, there from the start), "
        "or call sfb.torch.shutdown() and wrap the new model's optimizer in a new job; a "
        "frozen parameter the program updates from each rank's own data (prototypes, a "
        "codebook) must be updated from every rank's (sfb.torch.allreduce)" % (
            shown or "none", sync.job.rank, unit, step, _ranks(apart)),
        rank=apart[0], param=shown.split(", ")[0] if items else None)


class Checks:
    def __init__(self, every):
        if not isinstance(every, int) or isinstance(every, bool) or every < 0:
            raise _sfb.UsageError("DistributedOptimizer: check_every %r: expected an integer "
                                  ">= 0 (0: never)" % (every,))
        self.every, self.checks, self.repaired = every, 0, 0
        self.fixed = set()  # the tensors repaired: a second difference is refused
        self.due = None  # the step whose checks the next reduction runs
        self.flip = None
        v = os.environ.get("SFB_DEBUG_FLIP", "")
        if v:
            try:
                f = [int(x) for x in v.split(":")]
                if not 2 <= len(f) <= 5 or min(f) < 0 or (len(f) == 5 and f[4] > 31):
                    raise ValueError
            except ValueError:
                raise _sfb.UsageError("SFB_DEBUG_FLIP=%s: expected RANK:STEP[:TENSOR[:ELEMENT"
                                      "[:BIT]]] (bit 0..31)" % v) from None
            self.flip = (f + [0, 0, 30][len(f) - 2:])[:5]

    def tensors(self, sync):
        """(name, tensor) of every parameter the optimizer holds and its state."""
        out = [(n, p) for n, p in sync.params]
        for n, p in sync.params:
            for k, v in sorted(sync.state_of(p).items()):
                if torch.is_tensor(v) and v.dim() > 0:
                    out.append(("%s (optimizer %s)" % (n, k), v))
        return out

    def after_step(self, sync):
        """After the optimizer's step (staleness 0, every rank training): the
        flip; the checks of this step are due at the next reduction."""
        step = sync.steps + 1  # steps taken, this one included
        if self.flip and self.flip[0] == sync.job.rank and self.flip[1] == step:
            self._flip(self.tensors(sync), step)
        if step in BUFFER_STEPS or (self.every and step % self.every == 0):
            self.due = step

    def at_reduction(self, sync, run):
        """In a reduction, once every rank's bookkeeping showed the same
        steps taken (collective where run: every rank training, so every
        rank has the same step due): the checks of the step due."""
        step, self.due = self.due, None
        if step is None or not run:
            return
        self._run(sync, step, "step")

    def at_finish(self, sync):
        """shutdown()'s last reduction, every rank leaving with it
        (collective): the parameters and buffers compared once more, so a
        change on some ranks after the last check (a reset from each rank's
        own data at step 6 of 20) does not end the job parted in silence;
        keyed on the reductions where the wrapped optimizer never stepped (an
        update written by hand, SAM's own steps)."""
        n, unit = (sync.steps, "step") if sync.steps else (sync.clock, "reduction")
        if sync.job.world < 2 or not n:
            return
        if self.every:
            self.check(sync, n, list(sync.params), repair=False, unit=unit)
            check_unheld(sync, n, unit, frozen=True)
        check_buffers(sync, n, unit)

    def without_steps(self, sync, reductions):
        """A reduction of a job whose wrapped optimizer has not stepped yet
        (SAM's first_step/second_step step a base optimizer of their own;
        LBFGS's first step): the checks keyed on the reductions instead
        (collective: every rank training, none stepped)."""
        if reductions in BUFFER_STEPS or (self.every and reductions % self.every == 0):
            self._run(sync, reductions, "reduction")

    def _run(self, sync, n, unit):
        if self.every and n % self.every == 0:
            self.check(sync, n, self.tensors(sync), unit=unit)
            check_unheld(sync, n, unit, frozen=n in BUFFER_STEPS)
        elif self.every:  # (BUFFER_STEPS: the parameters too, where a program parts them first)
            self.check(sync, n, list(sync.params), repair=False, unit=unit)
            check_unheld(sync, n, unit, frozen=True)
        check_buffers(sync, n, unit)

    def _flip(self, items, step):
        _, _, which, elem, bit = self.flip
        if which >= len(items) or elem >= items[which][1].numel():
            raise _sfb.UsageError("SFB_DEBUG_FLIP: tensor %d element %d: out of range" %
                                  (which, elem))
        name, t = items[which]
        with torch.no_grad():
            a = _env.memory(t).view(np.uint32)
            a[elem] ^= np.uint32(1 << bit)
        print("sfb.torch: SFB_DEBUG_FLIP: step %d, %s element %d: bit %d flipped" %
              (step, name, elem, bit), file=sys.stderr, flush=True)

    def check(self, sync, step, items, repair=True, unit="step"):
        """Collective: the CRC of each tensor on every rank; a minority's
        copied from the majority (repair), else refused: after the first
        steps a difference is the program's (code run on some ranks only,
        a change from each rank's own data), not a flipped bit."""
        job = sync.job
        mine = crcs(items)
        all_ = np.stack([np.frombuffer(b, np.uint32) for b in job.allgather(mine.tobytes())])
        self.checks += repair  # (replica_checks: the check_every ones)
        P = job.world
        for i, (name, t) in enumerate(items):
            col = all_[:, i]
            counts = [(col == col[r]).sum() for r in range(P)]
            root = int(np.argmax(counts))  # the first rank of the largest group
            if counts[root] == P:
                continue
            side = [r for r in range(P) if col[r] == col[root]]
            other = [r for r in range(P) if col[r] != col[root]]
            if not repair or name in self.fixed:  # (at the first steps, or again: the program's)
                kinds = len(set(int(c) for c in col))
                outside = _outside_grads(sync)
                why = ("parameters outside the job %s have gradients of each rank's own, "
                       "never reduced, and clip_grad_norm_ over them (or an optimizer that is "
                       "not wrapped) scales or steps each rank apart: add them to a wrapped "
                       "optimizer, or freeze them (requires_grad_(False)). Otherwise: " % outside
                       if outside else "") + (
                       "sfb.torch gives every rank the same "
                       "gradients, so the program changed it on some ranks only (code under `if "
                       "rank == 0:`, a change computed from each rank's own data or random "
                       "numbers), or the ranks started apart%s. Change parameters alike on every "
                       "rank (from every rank's data: sfb.torch.allreduce)" % (
                           "; it was repaired at an earlier check already" if repair else ""))
                raise _sfb.MismatchError(
                    -(4096 + 9), "sfb.torch: %s differs between ranks after %s %d "
                    "(%s: one value; %s: %s): %s" %
                    (name, unit, step, _ranks(side), _ranks(other),
                     "another" if kinds == 2 else "%d others, each its own" % (kinds - 1)
                     if kinds == len(other) + 1 else "%d others" % (kinds - 1), why),
                    rank=other[0], param=name)
            if 2 * counts[root] <= P:
                raise _sfb.PeerError(
                    -(4096 + 5), "sfb.torch: replica check, step %d: %s differs between ranks "
                    "with no majority to repair it from (%s: one replica; %s: another)" %
                    (step, name, _ranks(side), _ranks(other)), rank=other[0])
            got = _env.memory(t).copy()
            job.broadcast(root, got)
            if job.rank in other:
                k = t.element_size()
                diff = np.flatnonzero((_env.memory(t) != got)
                                      .reshape(-1, k).any(1))
                with torch.no_grad():
                    t.copy_(torch.from_numpy(got).view(t.dtype).view(t.shape))
                print("sfb.torch: replica check, step %d: %s of this rank (rank %d) differed "
                      "from the majority's in %d element%s from element %d: repaired from rank %d"
                      % (step, name, job.rank, diff.size, "" if diff.size == 1 else "s",
                         diff[0] if diff.size else -1, root), file=sys.stderr, flush=True)
            elif job.rank == 0:
                print("sfb.torch: replica check, step %d: %s differs on %s from the %d "
                      "others: repaired from rank %d" % (step, name, _ranks(other), counts[root],
                                                        root),
                      file=sys.stderr, flush=True)
            self.repaired += len(other)
            self.fixed.add(name)
