"""Elastic training (docs/torch.md, "Elastic training"): a job that outlives
its ranks and takes new ones in, with no restart and no roll back.

    import sfb.torch as sft
    sft.init()                                   # sfb launch -n 4 --elastic [--respawn 2]
    opt = sft.DistributedOptimizer(torch.optim.Adam(model.parameters()), model=model)
    data = sft.elastic.Batches(len(train_x), batch_size=256, epochs=3)   # global batches
    state = sft.elastic.State(model, opt, best=0.0)

    @sft.elastic.run
    def train(state):
        for idx in data.shard(state.optimizer):  # this rank's share of each step, from now on
            opt.zero_grad()
            loss_fn(model(train_x[idx]), train_y[idx]).backward()
            opt.step()

    train(state)
    sft.shutdown()

When a rank dies (or its host's link goes down), the survivors' step fails
with sfb.PeerError naming it; `run` re-forms the job without it, every rank
takes the model, optimizer state and State attributes of the most advanced
survivor (the one that finished the most steps: a step is in every replica
or in none), and calls the training function again. A process started later
into the job (sfb launch --respawn restarts a dead one; or by hand:
SFB_JOINING=1 with the job's SFB_JOIN and SFB_JOB_KEY) is taken in at the
next step: that step is dropped on every rank and done again by the grown
job. Batches makes the data follow: step t is the same global minibatch
whoever is left, split among the ranks there are, each rank's gradient
weighted by its share, so the run equals one process's on the same global
minibatches, deaths and joins included.
"""
import functools

import numpy as np
import torch

import sfb as _sfb

from . import _env
from ._env import WorldChanged

__all__ = ["run", "State", "Batches", "WorldChanged"]


def _sync_of(opt):
    s = getattr(opt, "_sfb", None)
    if s is None:
        raise _sfb.UsageError("sfb.torch.elastic: %r is not a DistributedOptimizer" % (opt,))
    return s


class State:
    """What an elastic job's ranks agree on after its world changes: the
    model (parameters and buffers), the DistributedOptimizer (its state and
    step count) and any keyword attributes (read and set as state.NAME:
    values are pickled; an object with state_dict/load_state_dict, such as
    an LR scheduler, goes by its state_dict). At every (re)start of
    elastic.run every rank takes them from the rank that finished the most
    steps (rank 0 at the first start).

    Raises sfb.UsageError for a model that is not an nn.Module or an
    optimizer that is not a DistributedOptimizer."""

    def __init__(self, model, optimizer, **attrs):
        if not isinstance(model, torch.nn.Module):
            raise _sfb.UsageError("elastic.State: model=%r is not a torch.nn.Module" % (model,))
        sync = _sync_of(optimizer)
        if sync.model is not model:
            raise _sfb.UsageError("elastic.State: the optimizer was made for another model")
        object.__setattr__(self, "_fixed", {"model": model, "optimizer": optimizer})
        object.__setattr__(self, "_attrs", dict(attrs))
        object.__setattr__(self, "_callbacks", [])
        object.__setattr__(self, "resets", 0)

    def __getattr__(self, name):
        fixed = object.__getattribute__(self, "_fixed")
        if name in fixed:
            return fixed[name]
        attrs = object.__getattribute__(self, "_attrs")
        if name in attrs:
            return attrs[name]
        raise AttributeError("elastic.State has no attribute %r" % name)

    def __setattr__(self, name, value):
        if name in self._fixed or name == "resets":
            raise AttributeError("elastic.State.%s is fixed" % name)
        self._attrs[name] = value

    def register_reset_callbacks(self, callbacks):
        """Callables run (no arguments) on every rank after each change of
        the job's world, before the training function runs again (e.g. to
        rebuild what depends on sfb.torch.size())."""
        for cb in callbacks:
            if not callable(cb):
                raise _sfb.UsageError("register_reset_callbacks: %r is not callable" % (cb,))
            self._callbacks.append(cb)

    def _payload(self):
        return {k: (True, v.state_dict()) if _stateful(v) else (False, v)
                for k, v in self._attrs.items()}

    def _take(self, payload):
        for k, (stateful, v) in payload.items():
            if stateful and k in self._attrs and _stateful(self._attrs[k]):
                self._attrs[k].load_state_dict(v)
            else:
                self._attrs[k] = v

    def _sync(self, fresh, changed):
        """Collective over the job's ranks: every rank the state of the one
        that finished the most steps (fresh: this process joined and holds
        nothing yet; changed: the world did, so each rank's place on its
        host is found again, as init() found it at the start)."""
        job = _env._need()
        sync = _sync_of(self.optimizer)
        if fresh or changed:
            _env._place(job)
        mine = np.array([-1 if fresh else sync.steps], np.int64).tobytes()
        steps = [int(np.frombuffer(b, np.int64)[0]) for b in job.allgather(mine)] \
            if job.world > 1 else [sync.steps]
        source = steps.index(max(steps))  # the lowest rank of the most advanced
        payload = sync._adopt(source, self._payload())
        if job.rank != source:
            self._take(payload)
        sync.clock, sync.extra = sync.stepped
        return source


def _stateful(v):
    return hasattr(v, "state_dict") and hasattr(v, "load_state_dict") and \
        not isinstance(v, type)


def _change(job, sync, e):
    """The job's world changes after e (a rank lost, processes waiting to
    join): re-formed; False when e is no such change."""
    if not job.elastic or not isinstance(e, _sfb.Error):
        return False
    lost = job.lost()
    if lost < 0 and not isinstance(e, WorldChanged):
        return False
    sync.drop_step()
    if lost >= 0:
        old = job.world
        job.shrink()
        _env._log("sfb.torch: rank %d of %d died at step %d: going on with %d ranks "
                  "(this one now rank %d)" % (lost, old, sync.clock, job.world, job.rank))
    else:
        n = job.grow(sync.clock, _env._join_text, 0)
        _env._log("sfb.torch: step %d: %d process%s joined: %d ranks (this one rank %d)" %
                  (sync.clock, n, "es" if n != 1 else "", job.world, job.rank))
    return True


def run(fn):
    """Decorates the training function `fn(state, ...)` of an elastic job:
    calling it brings every rank to one state (State), runs fn, and when
    the job's world changes inside it (a rank died, processes wait to
    join) re-forms the job, brings every rank to the most advanced state,
    runs the State's reset callbacks and calls fn again; its return value
    is fn's. fn must pick its work up from the state (Batches.shard does,
    from the optimizer's step). In a job that is not elastic it just calls
    fn (after the same first broadcast of rank 0's state).

    Raises what fn raises otherwise (the peers told), sfb.UsageError when
    the first argument is not a State."""
    @functools.wraps(fn)
    def wrapper(state, *args, **kwargs):
        if not isinstance(state, State):
            raise _sfb.UsageError("elastic.run: %s's first argument must be an "
                                  "sfb.torch.elastic.State, not %r" % (fn.__name__, state))
        job = _env._need()
        sync = _sync_of(state.optimizer)
        fresh = job.joined() is not None and _env._runs == 0
        first = not sync.attached  # (a later call with nothing changed: as it is)
        changed = False
        _env._runs += 1
        while True:
            try:
                if first or changed:
                    state._sync(fresh, changed)
                    fresh = False
                if changed:
                    object.__setattr__(state, "resets", state.resets + 1)
                    for cb in state._callbacks:
                        cb()
                first = changed = False
                sync.in_run = True
                try:
                    return fn(state, *args, **kwargs)
                finally:
                    sync.in_run = False
            except BaseException as e:
                if not _change(job, sync, e):
                    _env._tell_peers(e)
                    raise
                changed = True
    return wrapper


class Batches:
    """The global minibatches of `epochs` passes over n samples (each pass
    a permutation drawn from seed and the epoch when shuffle, else in
    order; the last batch of a pass smaller unless drop_last), and each
    rank's share of a step's batch under the job's current world: rank r of
    P takes positions [r*B//P, (r+1)*B//P) of a batch of B. Step t is the
    same global batch whatever the world, so an elastic run is one
    process's on the same batches.

    n, batch_size, epochs: integers >= 1. Raises sfb.UsageError otherwise."""

    def __init__(self, n, batch_size, epochs=1, shuffle=True, seed=0, drop_last=False):
        for what, v in (("n", n), ("batch_size", batch_size), ("epochs", epochs)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise _sfb.UsageError("elastic.Batches: %s %r: expected an integer >= 1" %
                                      (what, v))
        if drop_last and batch_size > n:
            raise _sfb.UsageError("elastic.Batches: batch_size %d > n %d with drop_last: no "
                                  "batch" % (batch_size, n))
        self.n, self.batch_size, self.epochs = n, batch_size, epochs
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.steps_per_epoch = n // batch_size if drop_last else -(-n // batch_size)
        self._perm = (None, None)

    def __len__(self):
        """Steps in all."""
        return self.steps_per_epoch * self.epochs

    def epoch(self, step):
        """The epoch (from 0) step `step` belongs to."""
        return step // self.steps_per_epoch

    def batch(self, step):
        """Step `step`'s global batch: a LongTensor of sample indices."""
        if not 0 <= step < len(self):
            raise _sfb.UsageError("elastic.Batches: step %d out of 0..%d" % (step, len(self) - 1))
        e, j = divmod(step, self.steps_per_epoch)
        if self._perm[0] != e:
            if self.shuffle:
                g = torch.Generator()
                g.manual_seed(self.seed * 1000003 + e)
                self._perm = (e, torch.randperm(self.n, generator=g))
            else:
                self._perm = (e, torch.arange(self.n))
        return self._perm[1][j * self.batch_size:(j + 1) * self.batch_size]

    def share(self, step, rank=None, world=None):
        """This rank's (or `rank` of `world`'s) part of step `step`'s batch."""
        if rank is None:
            rank, world = _env.rank(), _env.size()
        b = self.batch(step)
        return b[rank * len(b) // world:(rank + 1) * len(b) // world]

    def shard(self, optimizer):
        """This rank's share of each step from the optimizer's step
        (optimizer.clock) to the last, as index tensors; before yielding
        one, the optimizer's weight in that step's reduction is set to its
        size (set_samples), so that a mean-reduced loss gives one process's
        gradient on the whole batch however it is split. An iterable with
        len() (a DataLoader's batch_sampler)."""
        return _Shard(self, optimizer)


class _Shard:
    def __init__(self, batches, optimizer):
        _sync_of(optimizer)
        self.batches, self.opt = batches, optimizer

    def __len__(self):
        return max(0, len(self.batches) - self.opt.clock)

    def __iter__(self):
        while self.opt.clock < len(self.batches):
            step = self.opt.clock
            idx = self.batches.share(step)
            self.opt.set_samples(len(idx))
            yield idx
            if self.opt.clock == step:
                raise _sfb.UsageError("elastic.Batches: step %d's share was not stepped "
                                      "(opt.step() once per share)" % step)
