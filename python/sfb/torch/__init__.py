"""sfb.torch — PyTorch models trained by sufficient factor broadcasting.

Every `nn.Linear` of a model is synchronized by its sufficient factors (the
output gradients and the inputs of the layer, the bias as a column of ones),
every other parameter (convolutions, norms, embeddings) by a dense engine,
after the conventions of Horovod and BlueFog:

    import sfb.torch as sft
    sft.init()                               # sfb launch, mpirun/srun (PMIx), SFB_* or torchrun env
    sft.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                   model=model, sync="auto")
    with opt.join():                         # shards of unequal length: exact all the same
        for x, y in loader:                  # each rank its own shard
            opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    print(opt.plan)                          # one line per matrix: engine and why
    sft.shutdown()                           # every update applied everywhere

How (docs/torch.md, docs/design.md): at staleness 0 the job's replicas are
gradient buffers, one per Linear (out x in+1) and one for all dense
parameters, applied in rank order on every rank; at the end of each
backward pass every rank's contributions are summed and `.grad` becomes
their mean (as under DDP), and the wrapped optimizer steps on it,
identically on every rank. A layer's factors leave during the backward pass,
as soon as the pass is done with it. With staleness > 0 the replicas are the
parameters themselves and updates are added as they come (stale synchronous
parallel): exact only for plain SGD, which is checked.

The package: _env (the job, the launchers' environment), _collectives
(broadcasts, allreduce, allgather, allgather_object, barrier), _capture (a Linear's factors,
the ends of backward passes), _grad_hooks (the user's gradient hooks, run
on the reduced gradient), _replicas (replica and buffer checks), _optimizer
(the reduction, DistributedOptimizer), elastic (a job that outlives its ranks and takes new
ones in: run, State, Batches).
"""
from sfb import Error, MismatchError, PeerError, UsageError
from ._collectives import allgather, allgather_object, allreduce, barrier, broadcast_object, \
    broadcast_optimizer_state, broadcast_parameters
from ._env import _need  # noqa: F401 (the tests' and the bench's way to the job)
from ._env import init, is_initialized, local_rank, local_size, rank, shutdown, size, stats
from ._optimizer import DistributedOptimizer
from . import elastic

__all__ = ["init", "rank", "size", "local_rank", "local_size", "shutdown", "is_initialized",
           "stats", "broadcast_parameters", "broadcast_object", "broadcast_optimizer_state",
           "allreduce", "allgather", "allgather_object", "barrier", "DistributedOptimizer", "elastic", "Error",
           "UsageError", "MismatchError", "PeerError"]
