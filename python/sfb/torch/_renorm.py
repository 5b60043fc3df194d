"""max_norm: a lookup renormalizes the looked-up rows of its table in place,
in the forward (torch.embedding_renorm_), before anything reads them. One
process on the whole minibatch renormalizes every row of its ids; a rank,
only the rows of its own share's. Left alone, the replicas would part (and
one process's model be lost) from the first step.

Every lookup with max_norm on a table a DistributedOptimizer holds is done
here, as torch does it, and the rows it changed (their bits) are noted. At
the next reduction every rank counts them in its meta row; when any rank
changed rows, the ranks exchange them and every rank renormalizes the rows
another rank changed, with torch's own kernel on the same bits (every rank
had them at the step's start), so the replicas stay identical and one
process's. A row a rank changed twice in the window (two lookups: passes,
a validation forward) travels as its bits, the lowest such rank's winning.

A table also read whole in the window (a tied decoder's F.linear, a dense
use that carries it densely) read the other ranks' rows before they were
renormalized, where one process reads them after: refused, naming it.
(docs/torch.md, "What is exact": embeddings)"""
import contextlib
import warnings
import weakref

import numpy as np
import torch

import sfb as _sfb

from . import _env
from ._collectives import allgather_bytes


class _Table:
    def __init__(self, weight, name, max_norm, norm_type):
        self.weight, self.name = weight, name
        self.setting = (float(max_norm), float(norm_type))
        self.clear()

    def clear(self):
        self.mine = []      # ids this rank's lookups renormalized in the window
        self.changed = []   # of those, the ids whose rows changed, per lookup
        self.n_changed = 0
        self.read_whole = None  # how this rank read the table whole in the window
        self.trained = False    # a lookup with gradients in the window


class Renorms:
    """The max_norm tables of a _Sync (one per job)."""

    def __init__(self, sync):
        self.sync = sync
        self.tables = {}    # id(weight) -> _Table
        self.hooked = False  # the model's state_dict() watched (saved_early)
        self.told = False
        self.quiet = False   # (sfb's own state_dict(): an elastic rejoin's)

    def renorm(self, weight, input, max_norm, norm_type):
        """A lookup's renormalization, torch's, done and noted here: False
        when it is not ours (one rank, a table no optimizer holds: torch's
        own lookup does it)."""
        s = self.sync
        if s.job.world == 1 or id(weight) not in s.group_of:
            return False
        name = s.names.get(id(weight), "an embedding")
        if s.additive:
            raise _sfb.UsageError(
                "sfb.torch: %s is looked up with max_norm at staleness %d: each rank's forward "
                "renormalizes its own ids' rows in place, where one process renormalizes the "
                "whole minibatch's, and at staleness > 0 the ranks meet at no step to renormalize "
                "each other's (use staleness=0, or max_norm=None)" % (name, s.staleness),
                param=name)
        t = self.tables.get(id(weight))
        if t is None:
            t = self.tables[id(weight)] = _Table(weight, name, max_norm, norm_type)
            self._watch_saves()
        elif t.setting != (float(max_norm), float(norm_type)):
            raise _sfb.UsageError(
                "sfb.torch: %s is looked up with max_norm=%g, norm_type=%g and with max_norm=%g, "
                "norm_type=%g: sfb renormalizes another rank's rows by one setting a table (use "
                "one)" % ((name,) + t.setting + (float(max_norm), float(norm_type))), param=name)
        ids = torch.unique(input.detach().reshape(-1))
        w = weight.detach()
        before = w.index_select(0, ids)
        with torch.no_grad():
            torch.embedding_renorm_(weight, ids, max_norm, norm_type)
        changed = ids[(w.index_select(0, ids) != before).any(dim=1)]
        t.mine.append(ids)
        if changed.numel():
            t.changed.append(changed)
            t.n_changed += changed.numel()
        t.trained |= torch.is_grad_enabled() and weight.requires_grad
        return True

    def _watch_saves(self):
        """The model's state_dict() (a checkpoint) warns while rows renormalized
        in the window are only this rank's (saved_early)."""
        from ._optimizer import _members
        if self.hooked or self.sync.model is None:
            return
        self.hooked = True
        me = weakref.ref(self)
        for model in _members(self.sync.model):
            model._register_state_dict_hook(
                lambda module, state, prefix, meta: me() and me().saved_early())

    def saved_early(self):
        """The model's state_dict() was taken: where this rank looked rows up
        since the last reduction (a validation forward after the step), each
        rank has renormalized its own ids' rows and the others' come at the
        next step or shutdown(), so the state is not one process's. Warns
        once (every rank that saves)."""
        from . import _capture
        if self.told or self.quiet or _capture._active is not self.sync:
            return None
        looked = [t.name for t in self.tables.values() if t.mine]
        if looked:
            self.told = True
            warnings.warn(
                "sfb.torch: the model's state_dict() was taken after %s %s looked up with "
                "max_norm since the last step (a validation forward?): each rank has "
                "renormalized the rows of its own ids, and the others' rows come at the next "
                "step() or at shutdown(), so this state is not one process's; take it after "
                "the next step() or after sfb.torch.shutdown()" % (
                    " and ".join(looked), "were" if len(looked) > 1 else "was"),
                stacklevel=_env._user_stacklevel())
        return None

    @contextlib.contextmanager
    def silenced(self):
        """sfb's own state_dict() (not a checkpoint of the program's)."""
        self.quiet = True
        try:
            yield
        finally:
            self.quiet = False

    def read(self, weight, how):
        """weight is read whole (F.linear) in this window."""
        t = self.tables.get(id(weight))
        if t is not None and t.read_whole is None:
            t.read_whole = how

    def pending(self):
        """Rows this rank changed since the last exchange (its meta row's count)."""
        return sum(t.n_changed for t in self.tables.values())

    def at_reduction(self, step, exchange):
        """Every reduction, every rank; exchange (a collective): the meta rows
        counted changed rows, or the first reduction. Then the window's
        notes are cleared."""
        if exchange:
            self._exchange(step)
        for t in self.tables.values():
            t.clear()

    def _exchange(self, step):
        """Every rank's changed rows, then this rank's replica of them made
        the job's."""
        s = self.sync
        parts = [_parse(p, q) for q, p in enumerate(allgather_bytes(s.job, self._encode()))]
        names = dict(s.params)
        for name in sorted(set(n for p in parts for n in p)):
            weight = names.get(name)
            if weight is None:
                raise _sfb.MismatchError(-(4096 + 9), "sfb.torch: another rank renormalized "
                                         "rows of %s (max_norm), which this rank's model does "
                                         "not have" % name)
            theirs = [p.get(name) for p in parts]
            for q, part in enumerate(theirs):
                if part is not None:
                    _check(name, weight, q, part)
            self._apply(step, weight, name, theirs)

    def _encode(self):
        out = []
        for t in self.tables.values():
            if not t.n_changed:
                continue
            ids, counts = torch.unique(torch.cat(t.changed), return_counts=True)
            once, twice = ids[counts == 1], ids[counts > 1]
            rows = t.weight.detach().index_select(0, twice).numpy()
            name = t.name.encode()
            out += [np.array([len(name), once.numel(), twice.numel(), rows.shape[1]],
                             np.int64).tobytes(), np.array(t.setting, np.float64).tobytes(),
                    name, once.numpy().astype(np.int64).tobytes(),
                    twice.numpy().astype(np.int64).tobytes(),
                    np.ascontiguousarray(rows, np.float32).tobytes()]
        return b"".join(out)

    def _apply(self, step, weight, name, theirs):
        """theirs: per rank (setting, once ids, twice ids, twice rows) or None."""
        s = self.sync
        setting = next(p[0] for p in theirs if p is not None)
        t = self.tables.get(id(weight))
        mine = torch.unique(torch.cat(t.mine)) if t is not None and t.mine else \
            torch.zeros(0, dtype=torch.int64)
        once = np.unique(np.concatenate([p[1] for p in theirs if p is not None]))
        bits = {}
        for p in theirs:  # the lowest rank's bits of a row it changed twice
            if p is not None:
                for i, row in zip(p[2].tolist(), p[3]):
                    bits.setdefault(i, row)
        twice = np.array(sorted(bits), np.int64)
        every = np.union1d(once, twice)
        foreign = np.setdiff1d(every, mine.numpy().astype(np.int64), assume_unique=True)
        whole = t and (t.read_whole or t.trained and id(weight) not in s.rows_of and
                       "carried densely: its gradient is not only its lookups' rows")
        if foreign.size and whole:
            raise _sfb.UsageError(
                "sfb.torch: at step %d %s, looked up with max_norm=%g, is also read whole (%s), "
                "and the other ranks' lookups renormalized %d of its rows this rank's did not: "
                "one process renormalizes the rows of the whole minibatch's ids before anything "
                "reads the table, this rank read them before (untie the table from that use, "
                "or drop max_norm)" % (step, name, setting[0], whole, foreign.size),
                param=name)
        with torch.no_grad():
            redo = np.setdiff1d(np.intersect1d(once, foreign, assume_unique=True), twice,
                                assume_unique=True)
            if redo.size:
                torch.embedding_renorm_(weight, torch.from_numpy(redo), setting[0], setting[1])
            if twice.size:
                weight.index_copy_(0, torch.from_numpy(twice),
                                   torch.from_numpy(np.stack([bits[i] for i in twice.tolist()])))


def _parse(data, q):
    """{name: (setting, once ids, twice ids, twice rows)} of rank q's blob
    (each part checked: the bytes come from another process)."""
    out, o = {}, 0
    try:
        while o < len(data):
            ln, n1, n2, d = np.frombuffer(data, np.int64, 4, o).tolist()
            o += 32
            if min(ln, n1, n2, d) < 0 or o + 16 + ln + 8 * (n1 + n2) + 4 * n2 * d > len(data):
                raise ValueError("lengths %d, %d, %d, %d past its end" % (ln, n1, n2, d))
            setting = tuple(np.frombuffer(data, np.float64, 2, o).tolist())
            o += 16
            name = data[o:o + ln].decode()
            o += ln
            once = np.frombuffer(data, np.int64, n1, o)
            o += 8 * n1
            twice = np.frombuffer(data, np.int64, n2, o)
            o += 8 * n2
            rows = np.frombuffer(data, np.float32, n2 * d, o).reshape(n2, d)
            o += 4 * n2 * d
            out[name] = (setting, once, twice, rows)
    except (ValueError, UnicodeDecodeError) as e:
        raise _sfb.MismatchError(-(4096 + 9), "sfb.torch: rank %d's renormalized rows (max_norm) "
                                 "are malformed at byte %d of %d: %s" % (q, o, len(data), e),
                                 rank=q) from None
    return out


def _check(name, weight, q, part):
    """Rank q's rows of weight: ids within the table, a row's width, a
    setting torch accepts; else sfb.MismatchError naming them."""
    (max_norm, norm_type), once, twice, rows = part
    V, D = weight.shape
    bad = [i for i in (once, twice) if i.size and (i.min() < 0 or i.max() >= V)]
    why = ("ids outside its %d rows" % V if bad else
           "rows %d wide, not %d" % (rows.shape[1], D) if twice.size and rows.shape[1] != D else
           "max_norm %r, norm_type %r" % (max_norm, norm_type)
           if not (np.isfinite(max_norm) and max_norm >= 0 and np.isfinite(norm_type) and
                   norm_type > 0) else None)
    if why:
        raise _sfb.MismatchError(-(4096 + 9), "sfb.torch: rank %d renormalized rows of %s "
                                 "(max_norm) with %s" % (q, name, why), rank=q)
