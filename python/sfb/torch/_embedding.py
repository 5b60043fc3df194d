"""Sparse rows: an embedding table's gradient touches only the rows of the
step's ids. F.embedding and F.embedding_bag on a weight sfb carries hand
the touched rows with their ids to sfb, never the whole table.

A table of V rows and D columns is the job's matrix (D + 1) x V, held
transposed: one touched row with id i is one sample whose b is the row's
gradient (and a 1 in the last place) and whose c is one-hot at column i, a
CSR c with one non-zero. The engine applies it by its sparse pass, a
scatter-add, and the extra row counts who touched each id (the weights of
the ranks that did), so the reduction knows the union of the touched rows
without reading the table. (docs/torch.md, "What is exact": sparse rows)"""
import numpy as np
import torch
import torch.nn.functional as F

import sfb as _sfb

from . import _env

_torch_embedding = F.embedding
_torch_embedding_bag = F.embedding_bag


class _Rows:
    """One embedding weight (V x D) that F.embedding or F.embedding_bag
    looks up: one matrix of the job, (D + 1) x V. name: the parameter's."""

    kind = "rows"
    bias = None
    of_module = False
    dense = was_dense = False  # (a _Linear's fused gradient: never a table's)

    def __init__(self, sync, name, weight, index):
        self.sync, self.name, self.index = sync, name, index
        self.weight = weight
        self.vocab, self.dim = weight.shape
        self.rows, self.cols = self.dim + 1, self.vocab  # the job's matrix
        self.sparse = False    # a use asked for a sparse .grad (sparse=True)
        self.buf = None
        self.bbuf = None       # b, kept across steps
        self.token = torch.zeros(1, requires_grad=True)
        self.hook = self.token.register_hook(lambda grad: self.sync.layer_done(self))
        self.reset()

    def reset(self):
        self.pending = []      # (ids, rows, lookups) of the pass in progress
        self.caps = []
        self.used_w = self.used_b = False
        self.counted = 0       # the step's lookups, published
        self.published = False

    @property
    def label(self):
        return "%s (%dx%d, sparse rows)" % (self.name, self.vocab, self.dim)

    def samples(self):
        """The step's lookups: at most as many rows leave (the bound max_s
        must hold for any step)."""
        return sum(n for _, _, n in self.caps)

    def commit(self):
        if self.pending:
            self.used_w = True
        self.caps += self.pending
        self.pending = []

    def factors(self):
        """(b, c): b s x (D + 1) float32, c the CSR one-hot (row_ptr, col,
        val) of the s distinct ids the step touched, in increasing order."""
        caps = [c for c in self.caps if c[0].numel()]  # (an empty minibatch's lookup: none)
        if not caps:
            return self.nothing()
        if len(caps) == 1:
            ids, rows, _ = caps[0]
        else:
            ids, rows = _merge(torch.cat([i for i, _, _ in caps]),
                               torch.cat([r for _, r, _ in caps]), self.dim)
        s = ids.shape[0]
        if self.bbuf is None or self.bbuf.shape[0] < s:
            self.bbuf = torch.empty((max(s, 1), self.rows), dtype=torch.float32)
        b = self.bbuf[:s]
        b[:, :self.dim].copy_(rows)
        b[:, self.dim].fill_(1.0)
        col = ids.numpy().astype(np.uint32)
        return b.numpy(), (np.arange(s + 1, dtype=np.uint32), col, np.ones(s, np.float32))

    def nothing(self):
        """(b, c) of one sample of zeros touching no row: a clock that adds
        nothing."""
        return (np.zeros((1, self.rows), np.float32),
                (np.array([0, 0], np.uint32), np.zeros(0, np.uint32), np.zeros(0, np.float32)))

    def local_grads(self):
        """[(the table, this rank's dense gradient of the step's rows)], or []."""
        caps = self.caps + self.pending
        if not caps:
            return []
        g = torch.zeros(self.weight.shape, dtype=torch.float32)
        for ids, rows, _ in caps:
            g.index_add_(0, ids, rows)
        return [(self.weight, g)]

    def grads(self, present, inv):
        """The weight's .grad from this clock's sum (every rank's rows, in
        rank order), then the touched columns of the replica zeroed."""
        if not self.sync.present_of(self.weight, present):
            return
        buf = self.buf
        touched = np.flatnonzero(buf[self.dim])
        idx = torch.from_numpy(touched)
        rows = torch.from_numpy(buf[:self.dim, touched].T) * float(inv)
        p = self.weight
        if p.grad is not None and not p.grad.is_sparse:
            p.grad.index_add_(0, idx, rows)
        elif p.grad is not None or self.sparse:
            g = torch.sparse_coo_tensor(idx.unsqueeze(0), rows, p.shape)._coalesced_(True)
            p.grad = g if p.grad is None else p.grad + g
            self.sync.handed[id(p)] = p.grad
        else:
            keep = self.sync.kept_grad(p)
            keep.zero_()
            keep.index_add_(0, idx, rows)
            p.grad = keep
        buf[:, touched] = 0


def _merge(ids, rows, dim):
    """Distinct ids in increasing order, each with the sum of its rows."""
    uniq, inverse = torch.unique(ids, sorted=True, return_inverse=True)
    out = torch.zeros((uniq.shape[0], dim), dtype=torch.float32)
    out.index_add_(0, inverse, rows)
    return uniq, out


class _RowsFactors(torch.autograd.Function):
    """A lookup whose backward hands the touched rows' gradient to sfb, with
    their ids; the weight gets no dense gradient here. `lookup(weight)`
    recomputes the lookup on a leaf sharing the weight's storage, as a
    sparse one, so torch's own backward says which rows (padding_idx
    left out, EmbeddingBag's modes and per-sample weights honoured; its max
    mode's dense gradient is taken at the rows of ids)."""

    @staticmethod
    def forward(ctx, weight, psw, token, slot, lookup, n, ids=None):
        ctx.slot, ctx.lookup, ctx.n, ctx.ids = slot, lookup, n, ids
        ctx.save_for_backward(weight, psw)
        return lookup(weight, psw, False)

    @staticmethod
    def backward(ctx, go):
        t0 = _env.clock()
        weight, psw = ctx.saved_tensors
        slot = ctx.slot
        want_psw = psw is not None and ctx.needs_input_grad[1]
        with torch.enable_grad():
            w = weight.detach().requires_grad_(True)
            q = psw.detach().requires_grad_(want_psw) if psw is not None else None
            out = ctx.lookup(w, q, True)
            got = torch.autograd.grad(out, [w, q] if want_psw else [w], go)
        g = got[0]
        if not g.is_sparse:  # (EmbeddingBag's max mode, which torch looks up densely only:
            rows = torch.unique(ctx.ids)  # the rows of the ids looked up)
            g = torch.sparse_coo_tensor(rows[None], g[rows], g.shape)
        g = g.coalesce()
        if ctx.needs_input_grad[0]:
            slot.sync.take_rows(slot, g.indices()[0], g.values(), ctx.n)
        if slot.sync.timeline:
            slot.sync.span("backward " + slot.name, t0)
        return None, got[1] if want_psw else None, torch.zeros(1), None, None, None, None


def _refuse_freq(weight, sync):
    raise _sfb.UsageError(
        "sfb.torch: %s is looked up with scale_grad_by_freq=True: its gradient divides by "
        "how often each id occurs in the minibatch, and each rank sees only its share, so "
        "the ranks' sum would differ from one process's on the whole minibatch (set "
        "scale_grad_by_freq=False)" % sync.names.get(id(weight), "an embedding"),
        param=sync.names.get(id(weight)))


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """torch.nn.functional.embedding while a DistributedOptimizer lives."""
    from . import _capture
    s = _capture._active
    slot = s.rows_for(weight) if s is not None and torch.is_grad_enabled() and \
        not _capture.transformed() else None
    if slot is not None and scale_grad_by_freq:
        _refuse_freq(weight, s)
    max_norm = _renorm(s, slot, weight, input, max_norm, norm_type)
    if slot is None:
        return _torch_embedding(input, weight, padding_idx, max_norm, norm_type,
                                scale_grad_by_freq, sparse)
    slot.sparse |= bool(sparse)

    def lookup(w, psw, sp):
        return _torch_embedding(input, w, padding_idx, None, norm_type, False, sp)

    return _RowsFactors.apply(weight, None, slot.token, slot, lookup, input.numel())


def _renorm(s, slot, weight, input, max_norm, norm_type):
    """max_norm's renormalization of the looked-up rows, before the lookup,
    as torch does it (_renorm.py: noted for the other ranks where a
    DistributedOptimizer holds the table); returns the max_norm left for
    torch's lookup (None once done)."""
    if max_norm is None:
        return None
    if s is not None and s.renorms.renorm(weight, input, max_norm, norm_type):
        return None
    if slot is None:
        return max_norm
    with torch.no_grad():  # (one rank: torch's renormalization, then the lookup)
        _torch_embedding(input, weight, None, max_norm, norm_type)
    return None


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False,
                  mode="mean", sparse=False, per_sample_weights=None, include_last_offset=False,
                  padding_idx=None):
    """torch.nn.functional.embedding_bag while a DistributedOptimizer lives."""
    from . import _capture
    s = _capture._active
    slot = s.rows_for(weight) if s is not None and torch.is_grad_enabled() and \
        not _capture.transformed() else None
    if slot is not None and scale_grad_by_freq:
        _refuse_freq(weight, s)
    max_norm = _renorm(s, slot, weight, input, max_norm, norm_type)
    if slot is None:
        return _torch_embedding_bag(input, weight, offsets, max_norm, norm_type,
                                    scale_grad_by_freq, mode, sparse, per_sample_weights,
                                    include_last_offset, padding_idx)
    slot.sparse |= bool(sparse)

    def lookup(w, psw, sp):  # (max mode has no sparse gradient: _RowsFactors takes its rows)
        return _torch_embedding_bag(input, w, offsets, None, norm_type, False, mode,
                                    sp and mode != "max", psw, include_last_offset, padding_idx)

    return _RowsFactors.apply(weight, per_sample_weights, slot.token, slot, lookup,
                              input.numel(), input if mode == "max" else None)
