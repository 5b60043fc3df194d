"""The job of this process and the launchers' environment: init, rank,
size, shutdown, stats."""
import ctypes
import os
import socket
import sys
import time

import numpy as np
import torch

import sfb as _sfb

_job = None          # the process's sfb.Job
_local_size = 1      # ranks on this host
_local_rank = 0      # this rank's index among them
_optimizer = None    # the job's DistributedOptimizers' _Sync (one for all of them)
_final_stats = None  # the last job's counters at its end (stats())
_failed = False      # this rank told the job's peers it failed (_tell_peers)
_join_text = ""      # an elastic job's settings a joiner must share (init())
_runs = 0            # elastic.run calls entered (collectives may run after the first)


class WorldChanged(_sfb.Error):
    """An elastic job's world changes at this step (processes wait to join):
    raised out of backward() or step() on every rank at the same step, and
    caught by sfb.torch.elastic.run, which takes them in and runs the
    training function again. (A rank's death comes as sfb.PeerError, which
    run catches the same way.)"""

    def __init__(self, message):
        super().__init__(-(4096 + 5), message)  # -SFB_EPEER


def _wall():
    return time.time()


clock = _wall  # the timeline's clock in the factor functions' backward


def keep_backward_eager():
    """torch.compile (torch 2) traces the factor functions' backward too and
    stops at their timeline clock (time.time, a builtin dynamo cannot
    trace) with a "Graph break" warning; stopping there is right, for that
    backward hands the job its factors, a side effect no compiled graph may
    replay. Where the program has loaded dynamo (it compiled something),
    the clock becomes a function dynamo leaves out without the warning.
    Not before: importing dynamo takes a second."""
    global clock
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None and clock is _wall:
        clock = dynamo.disable(_wall)
    if dynamo is not None:
        from . import _losses
        _losses.keep_eager(dynamo)  # (the losses' bookkeeping likewise)


_inside = {}  # co_filename: whether it is sfb's or torch's (_user_frame)


def _user_frame(depth=2):
    """The first frame outside sfb and torch above the caller's caller (the
    user's line: a reduction runs inside torch's backward(), called from
    it), and its stack level from the caller (warnings.warn's stacklevel);
    (None, 2) where there is none."""
    f, level = sys._getframe(depth), 2
    while f is not None and _is_inside(f.f_code.co_filename):
        f, level = f.f_back, level + 1
    return (f, level) if f is not None else (None, 2)


def _is_inside(filename):
    inside = _inside.get(filename)
    if inside is None:
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        skip = (here + os.sep, os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)
        inside = _inside[filename] = os.path.abspath(filename).startswith(skip)
    return inside


def _user_stacklevel():
    """warnings.warn's stacklevel naming the user's line (_user_frame)."""
    return _user_frame(3)[1]


def unviewed(t):
    """t, or where it is a view a detached alias of the same memory: what a
    custom autograd.Function returns, which the program may change in place
    (torch refuses that for a view: torch's 3-D linear with a bias is
    addmm's result viewed; ReLU(inplace=True), out += x)."""
    return t.detach() if t._base is not None else t


def memory(t):
    """The bytes of t (any dtype: bfloat16 too) as a uint8 array over its
    memory (a contiguous copy's where t is not contiguous), which keeps it
    alive. Not t.numpy(): torch 1.13 marks a storage .numpy() has seen as
    never to be resized, and a buffer that starts empty and grows on first
    use (a per-channel quantization observer's min_val) would fail in the
    program's next forward."""
    t = t.detach().contiguous()
    n = t.numel() * t.element_size()
    if n == 0:
        return np.empty(0, np.uint8)
    buf = (ctypes.c_ubyte * n).from_address(t.data_ptr())
    buf.tensor = t
    return np.frombuffer(buf, np.uint8)


def _user_line():
    """The user's file:line that called into sfb or torch ("" if none)."""
    f = _user_frame(3)[0]
    return "%s:%d" % (os.path.basename(f.f_code.co_filename), f.f_lineno) if f else ""


def _log(msg):
    """A line on stderr, as the library's own (sfb launch prefixes the rank)."""
    print(msg, file=sys.stderr, flush=True)


def _resettable(e):
    """An elastic job's world change (a rank lost, processes waiting to
    join): elastic.run goes on, the peers are not told to abort."""
    j = _job
    return j is not None and j.elastic and (
        isinstance(e, WorldChanged) or (isinstance(e, _sfb.Error) and j.lost() >= 0))


def _tell_peers(e):
    """A failure the peers learn at once (they stop naming this rank),
    unless it is an elastic job's world change."""
    global _failed
    if _job is not None and not _resettable(e):
        _job.abort("%s: %s" % (type(e).__name__, e))
        _failed = True


def init(timeline=None, **job_args):
    """Joins the job (collective): under `sfb launch`, mpirun/srun (PMIx),
    the SFB_* environment, torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT,
    or alone. timeline: a path ("%r": the rank) where each rank writes its
    training timeline (as SFB_TIMELINE=FILE: Chrome trace-event JSON, the
    job's waits, publishes, applies and frames, and sfb.torch's forward per
    layer, backward, reduce and step; `sfb timeline FILE...` merges and
    accounts them). Keyword arguments go to sfb.Job (rank, world, rendezvous,
    provider, peer_timeout_s, ...). Unless OMP_NUM_THREADS is set, torch's
    and OpenBLAS's threads are this process's share of the CPUs it may use
    among the ranks of its host. Its threads are left where the OS or the
    launcher puts them (cpu_bind="none"; sfb.Job's "auto" binds each rank to
    one CPU where a host runs more ranks than CPUs, and a bound pair whose
    ranks wait for a peer leaves its CPU idle while another CPU's pair
    computes; cpu_bind="cpu" or "auto" asks for it). Calling it again is a
    no-op.
    Returns None. Raises sfb.UsageError for bad arguments or a torchrun
    environment without MASTER_ADDR/MASTER_PORT, sfb.MismatchError when the
    ranks' settings differ, sfb.PeerError when a rank does not join in time
    (the bootstrap timeout), sfb.Error for the fabric's failures."""
    global _job, _join_text
    if _job is not None:
        return
    launched = "world" not in job_args  # the launcher's environment (torchrun's too)
    if launched:
        _sfb.inherited_rank("sfb.torch.init")
    args = {"cpu_bind": "none"}
    args.update(job_args)
    if timeline is not None:
        if not isinstance(timeline, str) or not timeline:
            raise _sfb.UsageError("init: timeline %r: expected a file path" % (timeline,))
        os.environ["SFB_TIMELINE"] = timeline  # read by the job's open
    # an elastic job's joiner must run the same program (sfb launch
    # --respawn starts the same command line)
    args.setdefault("join_text", "sfb.torch\nargv=%r\n" % (sys.argv,))
    job = _sfb.Job(**args)
    if launched:
        _sfb.joined_rank()
    _join_text = args["join_text"]
    if job.joined() is None:  # (a joiner learns its host's ranks in elastic.run)
        _place(job)
    _job = job


def _place(job):
    """This rank's place among the ranks of its host (collective), and its
    threads' share of the host's CPUs."""
    global _local_size, _local_rank
    host = socket.gethostname().encode()[:63].ljust(64, b"\0")
    hosts = job.allgather(host) if job.world > 1 else [host]
    _local_size = sum(h == host for h in hosts)
    _local_rank = sum(h == host for h in hosts[:job.rank])
    if "OMP_NUM_THREADS" not in os.environ:
        share = max(1, len(os.sched_getaffinity(0)) // _local_size)
        torch.set_num_threads(share)
        # OpenBLAS (libsfb's reconstruction, and torch's matmuls where it
        # calls BLAS) keeps its own pool, by default a thread per core in
        # every process: busy-waiting threads of P processes on one host
        _sfb.library().sfb_set_blas_threads(share)


def is_initialized():
    """Whether init() joined a job that shutdown() has not left yet."""
    return _job is not None


def _need():
    if _job is None:
        raise _sfb.UsageError("sfb.torch: call sfb.torch.init() first")
    return _job


def rank():
    """This process's rank, 0 .. size() - 1. Raises sfb.UsageError before
    init()."""
    return _need().rank


def size():
    """The job's ranks. Raises sfb.UsageError before init()."""
    return _need().world


def local_size():
    """Ranks of this job on this host. Raises sfb.UsageError before init()."""
    _need()
    return _local_size


def local_rank():
    """This rank's index among the ranks of its host, 0 .. local_size() - 1,
    in rank order. Raises sfb.UsageError before init()."""
    _need()
    return _local_rank


def shutdown():
    """The orderly end (collective): every update applied on every rank, the
    replicas identical; then the job is left and the model's layers are as
    they were (their parameters kept). Call it on every rank after the last
    step; without it, peers see this rank leave. A no-op without a job.

    Raises sfb.PeerError when another rank was still training (at staleness
    0: it names the ranks and suggests join()) or failed; sfb.MismatchError
    when the ranks took different numbers of optimizer steps; sfb.UsageError
    inside a step (backward_passes_per_step > 1: fewer passes than that
    since the last reduction). A step reduced and not taken (a loop that
    skips a step it dislikes) is over. After sfb.torch raised an error that
    ended the job on this rank (the peers were told), it only leaves: the
    error was the answer (a `finally: shutdown()` adds none of its own).
    Called while an exception of the program's own is raised or handled
    (a `finally:` or `except:` block; not sfb's, an iterator's end or
    sys.exit(0)), it ends the job as sfb's errors do: the peers fail at
    once naming this rank and that exception, and it goes on being raised."""
    global _job, _optimizer, _final_stats, _failed
    if _job is None:
        return
    own = _unwinding()
    if own is not None and not _failed:
        _tell_peers(own)
    try:
        if _optimizer is not None and not _failed:
            _optimizer.finish()
        elif not _failed:
            _job.finish(-1)
        _final_stats = stats()
    except BaseException as e:  # the peers learn why (they may not have seen it yet)
        _tell_peers(e)
        raise
    finally:
        if _optimizer is not None:
            _optimizer.release()  # the model's layers as they were, its parameters kept
        _job.close()
        _job, _optimizer, _failed = None, None, False


def _unwinding():
    """The exception this process is raising or handling (shutdown() in a
    `finally:` or an `except:` block) where it is the program's own failure:
    None for none, sfb's (the peers were told), the end of an iterator, a
    generator closed, sys.exit(0)."""
    e = sys.exc_info()[1]
    if e is None or isinstance(e, (_sfb.Error, StopIteration, StopAsyncIteration,
                                   GeneratorExit)):
        return None
    if isinstance(e, SystemExit) and e.code in (None, 0):
        return None
    return e


def stats():
    """The job's counters as a dict (bytes and messages sent and received,
    the engines' data messages and bytes, ...: sfb.Job.stats; and
    replica_checks, replicas_repaired: the DistributedOptimizer's replica
    checks and the tensors they repaired on any rank); after
    shutdown, those at the end of the last job (every update sent). Raises
    sfb.UsageError when no job ever ran."""
    if _job is not None:
        st = _job.stats()
        if _optimizer is not None:
            st["replica_checks"] = _optimizer.replicas.checks
            st["replicas_repaired"] = _optimizer.replicas.repaired
        return st
    if _final_stats is None:
        raise _sfb.UsageError("sfb.torch: call sfb.torch.init() first")
    return dict(_final_stats)


def _abort_on_error(fn):
    """Runs fn; on an exception tells the peers this rank failed (so they
    stop at once naming it, rather than waiting for its heartbeat to end)."""
    def wrapped(*a, **k):
        try:
            return fn(*a, **k)
        except BaseException as e:
            _tell_peers(e)
            raise
    wrapped.__name__, wrapped.__doc__ = fn.__name__, fn.__doc__
    return wrapped


_JOIN_HINT = ("if a rank's data ran out before the others', wrap every rank's training loop "
              "in `with opt.join():`; if a rank stopped on a rule of its own (early stopping "
              "on its own loss or reward), decide on every rank's: "
              "`sfb.torch.allreduce(loss)`, as one process stops on the union's")


def _raise_hinted(e):
    """Raises e, or, when a rank died or went silent during training (it may
    have run out of data), a PeerError that says so (not for an abort, nor
    for a rank in a collective call the others did not make)."""
    msg = str(e)
    if not isinstance(e, _sfb.PeerError) or "join()" in msg or "aborted the job" in msg or \
            "made different calls" in msg:
        raise e
    raise _sfb.PeerError(e.code, "%s (%s)" % (msg, _JOIN_HINT), e.rank, e.param) from None
