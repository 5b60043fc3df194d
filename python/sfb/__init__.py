"""sfb — the job API of libsfb for Python (ctypes over include/sfb/job.h).

One process is one worker of a job that keeps numpy matrices identical on
every worker (up to the SSP bound) by broadcasting sufficient factors:

    import numpy as np, sfb
    with sfb.Job() as job:                 # rank/world from `sfb launch`, PMIx or explicit
        A = np.zeros((10, 785), np.float32)
        job.attach([A], max_s=8)           # A is now the job's replica
        for t in range(T):
            A, = job.wait(t)               # peers' updates through t-s-1 are in A
            b, c = ...                     # this clock's factors: dA = scale * b.T @ c
            job.publish(t, [(b, c, scale)])  # or per matrix, in any order:
                                           # job.publish_one(t, m, b, c, scale)
        job.finish(T - 1)                  # every replica ends identical

The library is found as $SFB_LIB (`sfb launch` sets it for its ranks),
else the libsfb installed with this module (pip install, meson install),
else a build tree beside the source tree (../../build/libsfb.so), else as
libsfb.so.0 on the loader's path. Errors raise sfb.Error with the
library's message ("rank 2: ...").
"""

import contextlib
import ctypes
import ctypes.util
import math
import operator
import os

import numpy as np

__all__ = ["Error", "UsageError", "MismatchError", "PeerError", "Job", "library", "blas_kernels"]

SETTINGS_VERSION = 2
MAX_MATRICES = 65536  # SFB_JOB_MAX_MATRICES
_FLT_MAX = 3.4028234663852886e38

_c_float_p = ctypes.POINTER(ctypes.c_float)
_c_u32_p = ctypes.POINTER(ctypes.c_uint32)


class _Settings(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint32),
        ("rank", ctypes.c_uint32),
        ("world", ctypes.c_uint32),
        ("rendezvous", ctypes.c_char_p),
        ("job_key", ctypes.c_char_p),
        ("provider", ctypes.c_char_p),
        ("progress", ctypes.c_char_p),
        ("heartbeat_s", ctypes.c_double),
        ("peer_timeout_s", ctypes.c_double),
        ("bootstrap_timeout_s", ctypes.c_double),
        ("bandwidth", ctypes.c_double),
        ("stall_timeout_s", ctypes.c_double),
        ("cpu_bind", ctypes.c_char_p),
        ("join_text", ctypes.c_char_p),
        ("elastic", ctypes.c_uint32),
        ("reserved", ctypes.c_uint8 * 28),
    ]


class _Matrix(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_uint32), ("cols", ctypes.c_uint32), ("data", _c_float_p)]


class _Attach(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint32),
        ("n", ctypes.c_uint32),
        ("mats", ctypes.POINTER(_Matrix)),
        ("max_s", ctypes.c_uint32),
        ("engine", ctypes.c_char_p),
        ("staleness", ctypes.c_int64),
        ("apply_early", ctypes.c_int),
        ("topology", ctypes.c_char_p),
        ("degree", ctypes.c_uint32),
        ("flush_clock", ctypes.c_int),
        ("start_clock", ctypes.c_int64),
        ("link_gbps", ctypes.c_double),
        ("latency_us", ctypes.c_double),
        ("sf_bytes", _c_u32_p),
        ("priority", ctypes.c_char_p),
        ("ordered", ctypes.c_int),
        ("reattach", ctypes.c_uint32),
        ("sf_nnz", _c_u32_p),
        ("factor_dtype", ctypes.c_char_p),
        ("dense_dtype", ctypes.c_char_p),
        ("reserved", ctypes.c_uint8 * (128 - 16 - 5 * ctypes.sizeof(ctypes.c_void_p) - 8)),
    ]


class _SF(ctypes.Structure):
    _fields_ = [
        ("rows", ctypes.c_uint32),
        ("cols", ctypes.c_uint32),
        ("s", ctypes.c_uint32),
        ("matrix", ctypes.c_uint32),
        ("origin", ctypes.c_uint32),
        ("clock", ctypes.c_int64),
        ("scale", ctypes.c_float),
        ("sparse_c", ctypes.c_int),
        ("b", ctypes.c_void_p),  # float * (addresses: cheaper to set per call)
        ("c", ctypes.c_void_p),
        ("c_row_ptr", _c_u32_p),
        ("c_col", _c_u32_p),
        ("c_val", _c_float_p),
        ("b_cap", ctypes.c_size_t),
        ("c_cap", ctypes.c_size_t),
        ("rp_cap", ctypes.c_size_t),
        ("nz_cap", ctypes.c_size_t),
    ]


class _Clock(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint32),  # sizeof, set before each call (_sized)
        ("wait_s", ctypes.c_double),
        ("apply_s", ctypes.c_double),
        ("staleness", ctypes.c_int64),
        ("applied", ctypes.c_uint64),
        ("applied_early", ctypes.c_uint64),
        ("min_applied", ctypes.c_int64),
        ("budget_wait_s", ctypes.c_double),
    ]


class _Stats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32)] + [  # sizeof, set before each call (_sized)
        (name, ctypes.c_uint64)
        for name in ("bytes_sent", "bytes_recv", "msgs_sent", "msgs_recv", "data_msgs",
                     "data_bytes", "rejected_frames", "queued_bytes")
    ] + [("budget_held_s", ctypes.c_double), ("publish_wait_s", ctypes.c_double)]


def _sized(cls):
    """A result structure the library fills: its leading size set (the
    library writes the fields that fit in it, docs/api.md)."""
    st = cls()
    st.size = ctypes.sizeof(cls)
    return st


def _fields(st):
    """A filled result structure as a dict, its size left out."""
    return {k: getattr(st, k) for k, _ in type(st)._fields_ if k != "size"}


# The C layout of each structure (sizeof), checked by test python_sfb
# (test/unit/job_layout.c prints the C side).
LAYOUT = {"sfb_job_settings": _Settings, "sfb_matrix": _Matrix, "sfb_job_attach": _Attach,
          "sfb_sf": _SF, "sfb_job_clock": _Clock, "sfb_job_stats": _Stats}


class Error(RuntimeError):
    """A failed sfb call: .code is the negative code, str() the message;
    .rank is the rank the error is about (None: this one or none), .param
    the parameter or layer (sfb.torch; None: none)."""

    def __init__(self, code, message, rank=None, param=None):
        super().__init__(message)
        self.code = code
        self.rank = rank
        self.param = param


class UsageError(Error, ValueError):
    """Bad use of the API (an argument, a call out of order, a model or an
    optimizer sfb cannot synchronize exactly): fix the calling code."""

    def __init__(self, message, rank=None, param=None, code=-(4096 + 6)):  # -SFB_EUSAGE
        super().__init__(code, message, rank, param)


class MismatchError(Error):
    """The ranks disagree (settings, shapes, parameters, clock, optimizer
    state): the message names both ranks' values."""


class PeerError(Error):
    """Another rank failed, left, aborted or went silent: .rank names it."""


# error codes (include/sfb/common.h): which class raises them
_CLASS_OF = {-(4096 + 2): MismatchError, -(4096 + 9): MismatchError,  # ESHAPE, ECONFIG
             -(4096 + 5): PeerError, -(4096 + 10): PeerError,  # EPEER, EABORT
             -(4096 + 6): UsageError}  # EUSAGE


def _error(code, message):
    """The sfb.Error subclass for a library code, .rank from "rank N" in
    the message."""
    import re
    m = re.search(r"\brank (\d+)", message)
    rank = int(m.group(1)) if m else None
    cls = _CLASS_OF.get(code, Error)
    if cls is UsageError:
        return UsageError(message, rank=rank, code=code)
    return cls(code, message, rank)


def _find_library():
    """libsfb's path: $SFB_LIB (sfb launch and sfb run set it to the libsfb
    they run on), else the one installed with this module (beside it from a
    wheel, pip install; in the install's libdir from meson install), else a
    build tree beside this source tree, else the loader's search (ldconfig's
    cache)."""
    env = os.environ.get("SFB_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    cand = os.path.join(here, "libsfb.so.0")
    if os.path.exists(cand):
        return cand
    try:
        from . import _installed  # only in an installed copy
        libdir = os.path.join(here, "..", os.path.relpath(_installed.LIBDIR, _installed.PYDIR))
        cand = os.path.normpath(os.path.join(libdir, "libsfb.so.0"))
        if os.path.exists(cand):
            return cand
    except ImportError:
        pass
    for build in ("build", "build-release"):
        cand = os.path.join(here, "..", "..", build, "libsfb.so")
        if os.path.exists(cand):
            return os.path.normpath(cand)
    return ctypes.util.find_library("sfb") or "libsfb.so.0"


_lib = None


def __getattr__(name):
    """sfb.__version__: the loaded libsfb's version (sfb_version())."""
    if name == "__version__":
        return library().sfb_version().decode()
    raise AttributeError("module 'sfb' has no attribute %r" % name)


def blas_kernels():
    """(running, better): the OpenBLAS kernel set this process runs (e.g.
    "Prescott", "SkylakeX"), and the OPENBLAS_CORETYPE value a new process
    should get, or None (sfb_blas_better_core: OpenBLAS fell back to its
    generic kernels on a processor it does not know; `sfb run` and `sfb
    launch` start their ranks with it)."""
    lib = library()
    better = lib.sfb_blas_better_core()
    return lib.sfb_blas_core().decode(), better.decode() if better else None


def library():
    """The loaded libsfb (ctypes.CDLL), its prototypes declared."""
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(_find_library())
    P = ctypes.POINTER
    vp = ctypes.c_void_p
    protos = {
        "sfb_error_message": (ctypes.c_char_p, [ctypes.c_int]),
        "sfb_job_default_settings": (None, [P(_Settings)]),
        "sfb_job_open": (ctypes.c_int, [P(vp), P(_Settings)]),
        "sfb_job_rank": (ctypes.c_uint32, [vp]),
        "sfb_job_world": (ctypes.c_uint32, [vp]),
        "sfb_job_default_attach": (None, [P(_Attach)]),
        "sfb_job_attach": (ctypes.c_int, [vp, P(_Attach)]),
        "sfb_job_engine": (ctypes.c_char_p, [vp, ctypes.c_uint32]),
        "sfb_job_plan": (ctypes.c_char_p, [vp]),
        "sfb_version": (ctypes.c_char_p, []),
        "sfb_blas_core": (ctypes.c_char_p, []),
        "sfb_blas_better_core": (ctypes.c_char_p, []),
        "sfb_job_timeline_on": (ctypes.c_int, [vp]),
        "sfb_job_timeline_span": (None, [vp, ctypes.c_char_p, ctypes.c_double, ctypes.c_double,
                                         ctypes.c_int64]),
        "sfb_job_wait": (ctypes.c_int, [vp, ctypes.c_int64, P(_Clock)]),
        "sfb_job_publish": (ctypes.c_int, [vp, ctypes.c_int64, P(_SF), ctypes.c_uint32]),
        "sfb_job_publish_one": (ctypes.c_int, [vp, ctypes.c_int64, ctypes.c_uint32, P(_SF)]),
        "sfb_job_publish_dense": (ctypes.c_int, [vp, ctypes.c_int64, ctypes.c_uint32,
                                                 ctypes.c_float, vp]),
        "sfb_job_dense_buffer": (ctypes.c_int, [vp, ctypes.c_uint32, P(P(ctypes.c_float))]),
        "sfb_job_broadcast": (ctypes.c_int, [vp, ctypes.c_uint32, vp, ctypes.c_size_t]),
        "sfb_job_drain": (ctypes.c_int, [vp, ctypes.c_int64, P(_Clock)]),
        "sfb_job_barrier": (ctypes.c_int, [vp]),
        "sfb_job_allgather": (ctypes.c_int, [vp, vp, ctypes.c_size_t, vp]),
        "sfb_job_agree": (ctypes.c_int, [vp, ctypes.c_char_p]),
        "sfb_job_name_calls": (ctypes.c_int, [vp, ctypes.c_char_p]),
        "sfb_job_finish": (ctypes.c_int, [vp, ctypes.c_int64]),
        "sfb_job_set_last_clock": (ctypes.c_int, [vp, ctypes.c_int64]),
        "sfb_job_replan": (ctypes.c_int, [vp, ctypes.c_int64, ctypes.c_char_p]),
        "sfb_job_set_max_s": (ctypes.c_int, [vp, ctypes.c_int64, ctypes.c_uint32]),
        "sfb_job_lost": (ctypes.c_int, [vp]),
        "sfb_job_grow": (ctypes.c_int, [vp, ctypes.c_int64, ctypes.c_char_p, ctypes.c_uint64,
                                        ctypes.POINTER(ctypes.c_uint32)]),
        "sfb_job_joined": (ctypes.c_int, [vp, ctypes.POINTER(ctypes.c_int64),
                                          ctypes.POINTER(ctypes.c_uint32),
                                          ctypes.POINTER(ctypes.c_uint64)]),
        "sfb_job_shrink": (ctypes.c_int, [vp, ctypes.POINTER(ctypes.c_int64),
                                          ctypes.POINTER(ctypes.c_uint32)]),
        "sfb_job_join_poll": (ctypes.c_int, [vp, ctypes.c_char_p,
                                             ctypes.POINTER(ctypes.c_uint32)]),
        "sfb_job_abort": (None, [vp, ctypes.c_char_p]),
        "sfb_job_stats": (ctypes.c_int, [vp, P(_Stats)]),
        "sfb_job_close": (None, [P(vp)]),
    }
    for name, (res, args) in protos.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    _lib = lib
    return lib


def _check(code):
    if code:
        raise _error(code, library().sfb_error_message(code).decode("utf-8", "replace"))


def _enc(s):
    return None if s is None else str(s).encode()


_U32 = (1 << 32) - 1
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def _int(what, v, lo, hi):
    """v as an int in lo..hi, else ValueError naming `what`: ctypes would
    wrap it silently (2**64 becomes clock 0, -1 becomes 4294967295)."""
    try:
        i = operator.index(v)
    except TypeError:
        raise UsageError("%s: expected an integer, got %r" % (what, v)) from None
    if not lo <= i <= hi:
        raise UsageError("%s: %d is out of range %d..%d" % (what, i, lo, hi))
    return i


def _clock(what, v, lo=_I64_MIN):
    return _int(what, v, lo, _I64_MAX)


def _scale(scale, clock, m, fn):
    """scale as a float; a finite one beyond float32 would become an
    infinity in ctypes: ValueError. NaN and infinities go on to the library,
    which refuses them (sfb.Error) as it refuses them in the arrays."""
    scale = float(scale)
    if abs(scale) > _FLT_MAX and math.isfinite(scale):
        raise UsageError("%s: the scale of matrix %d at clock %d is %r, beyond float32" %
                         (fn, m, clock, scale))
    return scale


def _f32(a, what):
    """a as a C-contiguous float32 array (copied only when it is not one)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if a.ndim != 2:
        raise UsageError("%s: expected a 2-D array, got %d-D" % (what, a.ndim))
    return a


# The pid of the process that joined a job as the rank the launcher's
# environment names (SFB_RANK, PMIX_RANK, torchrun's RANK): a process that
# inherits that environment from it is not that rank.
_RANK_PID = "SFB_RANK_PID"


def _rank_env():
    return next((os.environ[k] for k in ("SFB_RANK", "PMIX_RANK", "RANK") if k in os.environ),
                None)


def inherited_rank(where):
    """UsageError where this process inherited a launcher's rank environment
    from a process that joined the job with it: a child (multiprocessing's
    spawn or forkserver, a DataLoader worker, a subprocess) running the
    script's top level again would join as that rank a second time."""
    pid, rank = os.environ.get(_RANK_PID), _rank_env()
    if not pid or pid == str(os.getpid()) or rank is None:
        return
    raise UsageError(
        "%s: this process (pid %d) inherited the launcher's environment of rank %s from "
        "process %s, which joined the job as that rank: a child process (multiprocessing's "
        "spawn or forkserver, a DataLoader worker, a subprocess) cannot join it again. Put "
        "the training under `if __name__ == \"__main__\":` (spawned children import the main "
        "module); a program of its own started from a rank needs an environment without "
        "SFB_RANK (PMIX_RANK, RANK)" % (where, os.getpid(), rank, pid))


def joined_rank():
    """Marks this process as the one that joined as its environment's rank."""
    if _rank_env() is not None:
        os.environ[_RANK_PID] = str(os.getpid())


def _describe(a):
    if isinstance(a, np.ndarray):
        return "%s %s%s" % (a.dtype, a.shape, "" if a.flags.c_contiguous else " (not contiguous)")
    return type(a).__name__


class Job:
    """One worker of a job. Joins at construction (collective: returns once
    every rank joined); rank, world and rendezvous come from the arguments
    (world > 0), else from `sfb launch` / the SFB_* environment or PMIx.
    Call methods from one thread."""

    def __init__(self, rank=None, world=None, rendezvous=None, job_key=None, provider=None,
                 progress=None, peer_timeout_s=None, bootstrap_timeout_s=None, bandwidth=0.0,
                 stall_timeout_s=None, cpu_bind=None, elastic=None, join_text=None):
        lib = library()
        s = _Settings()
        lib.sfb_job_default_settings(ctypes.byref(s))
        launched = world is None or world == 0  # from the launcher's environment
        if not launched:
            s.world = _int("Job: world", world, 1, _U32)
            s.rank = _int("Job: rank", 0 if rank is None else rank, 0, _U32)
        else:
            inherited_rank("sfb.Job")
        self._keep = [_enc(rendezvous), _enc(job_key), _enc(provider), _enc(progress),
                      _enc(cpu_bind), _enc(join_text)]
        s.rendezvous, s.job_key = self._keep[0], self._keep[1]
        s.provider = self._keep[2]
        if progress is not None:
            s.progress = self._keep[3]
        if cpu_bind is not None:
            s.cpu_bind = self._keep[4]  # "auto", "none", "cpu"
        if peer_timeout_s is not None:
            s.peer_timeout_s = peer_timeout_s
        if bootstrap_timeout_s is not None:
            s.bootstrap_timeout_s = bootstrap_timeout_s
        if stall_timeout_s is not None:
            s.stall_timeout_s = stall_timeout_s
        s.bandwidth = bandwidth  # egress budget of data messages, bytes/s (0: none)
        if elastic is None:  # sfb launch --elastic's
            elastic = os.environ.get("SFB_ELASTIC", "") == "1"
        s.elastic = 1 if elastic else 0  # a rank's death: lost() names it, shrink() goes on
        s.join_text = self._keep[5]  # a joiner's settings text (SFB_JOINING=1)
        self._h = ctypes.c_void_p()
        _check(lib.sfb_job_open(ctypes.byref(self._h), ctypes.byref(s)))
        if launched:
            joined_rank()
        self.rank = lib.sfb_job_rank(self._h)
        self.world = lib.sfb_job_world(self._h)
        self.elastic = bool(elastic)
        self.matrices = []
        self.last_wait = None
        self._sfs = None
        self._staged = {}  # m: dense_buffer(m)'s array, until a publish takes it
        self._call_name = None  # calls_named's, inside its with

    def _handle(self):
        if not self._h:
            raise Error(-22, "sfb.Job: the job is closed")
        return self._h

    def attach(self, matrices, max_s, engine="sfb", staleness=0, apply_early=None,
               topology=None, degree=0, start_clock=0, link_gbps=0.0, latency_us=0.0,
               priority=None, sf_bytes=None, ordered=False, sf_nnz=None, factor_dtype=None,
               dense_dtype=None, reattach=False):
        """Makes `matrices` (2-D float32 C-contiguous numpy arrays, updated in
        place from now on; keep them alive) the job's replicas. max_s: the
        most samples of one published factor. engine: "sfb", "fms", one per
        matrix ("sfb,fms"), or "auto" (per matrix the engine the cost model
        predicts faster; link_gbps/latency_us replace the link probe).
        Any number of matrices (up to MAX_MATRICES); engine "auto,fms,..."
        mixes forced and chosen ones. sf_bytes: None, or per matrix the SF
        frame's bytes the cost model weighs (0: dense factors of max_s).
        sf_nnz: None, or per matrix the non-zeros of a CSR c of max_s
        samples (0: dense c): the cost model charges that matrix the sparse
        pass (rows x nnz multiply-adds), not the dense GEMM.
        priority: "fifo" (default), "magnitude" or "relative": what SFB sends
        first when factors queue behind the job's bandwidth budget.
        ordered: every replica applies a clock's updates of a matrix
        together once all ranks' have come, in rank order, its own among
        them (not at publish): replicas that start equal stay bit-identical.
        factor_dtype: the precision SFB's factors travel in, "f32" (None,
        default) or "bf16" (half the bytes: b and c rounded to the nearest
        bfloat16, which every replica, this rank's included, applies in
        float32), for every matrix, or one per matrix (a list, or "bf16,f32");
        a matrix FMS carries ignores it. `factor_dtypes` lists each matrix's.
        dense_dtype: the precision FMS's rows travel in (the pushes and the
        owners' sums), "f32" (None, default) or "bf16" (half the bytes: each
        rank's update rounded, summed in float32, the sum rounded, and every
        replica applies that rounded sum), for every matrix or one per
        matrix; a matrix SFB carries ignores it.
        reattach: an elastic job's matrices that are not the job's state
        (a step's gradient buffers): shrink() and grow() detach them and
        every rank attaches again after (any engine and staleness); by
        default they are kept (engine "sfb", staleness 0).
        Collective. Afterwards `engines` lists each matrix's engine and
        `plan` the cost model's lines ("" unless auto)."""
        mats = list(matrices)
        if not 1 <= len(mats) <= MAX_MATRICES:
            raise UsageError("attach: matrices: 1 to %d, got %d" % (MAX_MATRICES, len(mats)))
        for i, m in enumerate(mats):
            if not (isinstance(m, np.ndarray) and m.dtype == np.float32 and m.ndim == 2
                    and m.flags.c_contiguous and m.flags.writeable):
                raise UsageError("attach: matrix %d must be a writable C-contiguous 2-D "
                                 "float32 numpy array" % i)
        cm = (_Matrix * len(mats))()
        for i, m in enumerate(mats):
            cm[i].rows, cm[i].cols = m.shape
            cm[i].data = m.ctypes.data_as(_c_float_p)
        a = _Attach()
        library().sfb_job_default_attach(ctypes.byref(a))
        a.n, a.mats, a.max_s = len(mats), cm, _int("attach: max_s", max_s, 1, _U32)
        if factor_dtype is None:
            factor_dtype = "f32"
        if not isinstance(factor_dtype, str):
            factor_dtype = ",".join(factor_dtype)
        if dense_dtype is None:
            dense_dtype = "f32"
        if not isinstance(dense_dtype, str):
            dense_dtype = ",".join(dense_dtype)
        self._attach_keep = [_enc(engine), _enc(topology), cm, _enc(priority),
                             _enc(factor_dtype), _enc(dense_dtype)]
        a.factor_dtype = self._attach_keep[4]
        a.dense_dtype = self._attach_keep[5]
        a.engine, a.topology = self._attach_keep[0], self._attach_keep[1]
        a.priority = self._attach_keep[3]
        a.staleness = _clock("attach: staleness", staleness, -1)
        a.apply_early = -1 if apply_early is None else int(bool(apply_early))
        a.degree = _int("attach: degree", degree, 0, _U32)
        a.start_clock = _clock("attach: start_clock", start_clock, 0)
        a.link_gbps, a.latency_us = link_gbps, latency_us
        a.ordered = int(bool(ordered))
        a.reattach = int(bool(reattach))
        for field, values in (("sf_bytes", sf_bytes), ("sf_nnz", sf_nnz)):
            if values is None:
                continue
            values = list(values)
            if len(values) != len(mats):
                raise UsageError("attach: %s: %d entries for %d matrices" %
                                 (field, len(values), len(mats)))
            arr = (ctypes.c_uint32 * len(mats))(
                *[_int("attach: %s[%d]" % (field, i), v, 0, _U32) for i, v in enumerate(values)])
            self._attach_keep.append(arr)
            setattr(a, field, arr)
        _check(library().sfb_job_attach(self._handle(), ctypes.byref(a)))
        self.matrices = mats
        self.engines = [library().sfb_job_engine(self._h, i).decode() for i in range(len(mats))]
        dtypes = factor_dtype.split(",")  # checked by the library: 1 or one per matrix
        self.factor_dtypes = dtypes * len(mats) if len(dtypes) == 1 else dtypes
        dtypes = dense_dtype.split(",")
        self.dense_dtypes = dtypes * len(mats) if len(dtypes) == 1 else dtypes
        self.ordered = bool(ordered)
        self.plan = library().sfb_job_plan(self._h).decode()
        self._sfs = (_SF * len(mats))()
        # publish_one / publish_dense per layer and step: bound once
        self._shapes = [m.shape for m in mats]
        self._sf_refs = [ctypes.byref(self._sfs[i]) for i in range(len(mats))]
        self._publish_one = library().sfb_job_publish_one
        self._publish_dense = library().sfb_job_publish_dense

    def wait(self, clock):
        """The SSP gate of `clock` (in order: wait(t), publish(t), wait(t+1),
        ...): returns the replicas (the attached arrays themselves, every
        peer's updates through clock - staleness - 1 applied). What the wait did (wait_s, apply_s, applied, staleness,
        min_applied, ...) is left in self.last_wait."""
        acct = _sized(_Clock)
        clock = _clock("wait: clock", clock)
        _check(library().sfb_job_wait(self._handle(), clock, ctypes.byref(acct)))
        self.last_wait = _fields(acct)
        return self.matrices

    def publish(self, clock, factors):
        """This worker's factors of `clock`, one (b, c, scale) per matrix:
        b is s x rows, c is s x cols (float32, row-major), and the update is
        scale * b.T @ c. Sent to the peers and applied here at once."""
        clock = _clock("publish: clock", clock)
        factors = list(factors)
        if len(factors) != len(self.matrices):
            raise UsageError("publish: %d factors for %d matrices" %
                             (len(factors), len(self.matrices)))
        keep = []
        for m, (b, c, scale) in enumerate(factors):
            keep += self._fill(self._sfs[m], clock, m, b, c, scale, "publish")
        _check(library().sfb_job_publish(self._handle(), clock, self._sfs, len(factors)))

    def _fill(self, sf, clock, m, b, c, scale, fn):
        """sf describes (b, c, scale); returns the arrays it points into
        (the caller keeps them alive through the call). c is an s x cols
        array, or CSR: a tuple (row_ptr, col, val) of s + 1 offsets, and the
        columns (strictly increasing in each row, below the matrix's cols)
        and values of its non-zeros."""
        b = _f32(b, fn + ": b")
        sf.rows, sf.s = b.shape[1], b.shape[0]
        sf.scale = _scale(scale, clock, m, fn)
        sf.b, sf.b_cap = b.ctypes.data, b.size
        if isinstance(c, tuple):
            return [b] + self._fill_csr(sf, m, c, fn)
        c = _f32(c, fn + ": c")
        if b.shape[0] != c.shape[0]:
            raise UsageError("%s: b has %d rows (samples), c has %d" %
                             (fn, b.shape[0], c.shape[0]))
        sf.cols, sf.sparse_c = c.shape[1], 0
        sf.c, sf.c_cap = c.ctypes.data, c.size
        return [b, c]

    def _fill_csr(self, sf, m, c, fn):
        """sf's c is the CSR (row_ptr, col, val), checked whole (the library
        trusts its structure)."""
        if len(c) != 3:
            raise UsageError("%s: a CSR c is (row_ptr, col, val), got %d arrays" % (fn, len(c)))
        rp = np.ascontiguousarray(c[0], dtype=np.uint32)
        col = np.ascontiguousarray(c[1], dtype=np.uint32)
        val = np.ascontiguousarray(c[2], dtype=np.float32)
        cols = self._shapes[m][1]
        s = sf.s
        bad = None
        if rp.ndim != 1 or rp.shape[0] != s + 1:
            bad = "row_ptr has %s entries, b has %d samples (expected %d)" % (
                rp.shape, s, s + 1)
        elif col.ndim != 1 or val.ndim != 1 or col.shape != val.shape:
            bad = "col %s and val %s must be 1-D and as long" % (col.shape, val.shape)
        elif rp[0] != 0 or rp[-1] != col.shape[0] or np.any(rp[1:] < rp[:-1]):
            bad = "row_ptr must rise from 0 to the %d non-zeros" % col.shape[0]
        elif col.size and int(col.max()) >= cols:
            bad = "column %d is outside matrix %d's %d columns" % (int(col.max()), m, cols)
        elif col.size > 1:
            # strictly increasing within each row: a drop only where a row starts
            step = np.ones(col.size, bool)
            step[rp[1:-1][rp[1:-1] < col.size]] = False
            down = np.flatnonzero((col[1:] <= col[:-1]) & step[1:])
            if down.size:
                bad = "columns must increase strictly in each row (non-zero %d)" % (down[0] + 1)
        if bad:
            raise UsageError("%s: matrix %d: CSR c: %s" % (fn, m, bad))
        sf.cols, sf.sparse_c = cols, 1
        sf.c_row_ptr = rp.ctypes.data_as(_c_u32_p)
        sf.c_col = col.ctypes.data_as(_c_u32_p)
        sf.c_val = val.ctypes.data_as(_c_float_p)
        sf.rp_cap, sf.nz_cap = rp.size, col.size
        return [rp, col, val]

    def publish_one(self, clock, m, b, c, scale):
        """Matrix m's factors of `clock` alone: scale * b.T @ c (b is s x rows,
        c is s x cols, float32, or CSR (row_ptr, col, val) as sparse rows
        travel: an embedding's one-hot c), sent to the peers within this call and
        applied here. Every matrix once a clock, in any order, by this or
        publish_dense; the clock is complete with its last matrix (then the
        next wait may come)."""
        clock = _clock("publish_one: clock", clock)
        m = self._matrix("publish_one", m, " of clock %d" % clock)
        keep = self._fill(self._sfs[m], clock, m, b, c, scale, "publish_one")
        _check(self._publish_one(self._handle(), clock, m, self._sf_refs[m]))
        del keep

    def publish_dense(self, clock, m, delta, scale=1.0):
        """Matrix m's update of `clock` dense: scale * delta, delta a float32
        C-contiguous array of the matrix's shape (copied, unless it is
        dense_buffer(m)'s array: then sent from there). Only for a matrix
        whose engine is "fms" (sfb.Error otherwise); counts as its publish of
        the clock, as publish_one."""
        clock = _clock("publish_dense: clock", clock)
        m = self._matrix("publish_dense", m, " of clock %d" % clock)
        if not (isinstance(delta, np.ndarray) and delta.dtype == np.float32
                and delta.flags.c_contiguous and delta.shape == self._shapes[m]):
            raise UsageError("publish_dense: delta: expected a C-contiguous float32 array of "
                             "shape %s (matrix %d), got %s" %
                             (self._shapes[m], m, _describe(delta)))
        scale = _scale(scale, clock, m, "publish_dense")
        _check(self._publish_dense(self._handle(), clock, m, scale, delta.ctypes.data))
        staged = self._staged.get(m)
        if staged is not None and staged.ctypes.data == delta.ctypes.data:
            self._retire(m)  # (the job's memory now)

    def _matrix(self, fn, m, when=""):
        """fn's matrix index m, an attached matrix's (UsageError naming it)."""
        m = _int(fn + ": m", m, 0, _U32)
        if m >= len(self._sfs if self._sfs is not None else ()):
            raise UsageError("%s: m: matrix %d%s, the job has %d" %
                             (fn, m, when, len(self.matrices)))
        return m

    def dense_buffer(self, m):
        """A float32 array of matrix m's shape in the job's own memory (its
        contents unspecified) for the next dense update: fill it and pass it
        to publish_dense, which then sends it from there instead of copying
        it (float32 rows, scale 1), as an in-place all-reduce does. The same
        array until a publish_dense of m succeeds; after it the memory is the
        job's again and the array read-only (ask for the next clock's), as
        after a replan, a world change or close. Only for a matrix whose
        engine is "fms" (sfb.Error otherwise)."""
        m = self._matrix("dense_buffer", m)
        ptr = ctypes.POINTER(ctypes.c_float)()
        _check(library().sfb_job_dense_buffer(self._handle(), m, ctypes.byref(ptr)))
        got = ctypes.cast(ptr, ctypes.c_void_p).value
        have = self._staged.get(m)
        if have is None or have.ctypes.data != got:
            have = self._staged[m] = np.ctypeslib.as_array(ptr, shape=self._shapes[m])
        return have

    def _retire(self, m=None):
        """dense_buffer's arrays the job took back (m: that one; None: all)
        made read-only: a write into memory the job sends from, or has
        handed to another use, fails loudly instead of changing an update."""
        for k in list(self._staged) if m is None else [m]:
            arr = self._staged.pop(k, None)
            if arr is not None:
                arr.flags.writeable = False

    def broadcast(self, root, data):
        """Collective (before attach too): root's bytes of `data` land in
        `data` on every rank, in place, and it is returned. data: a writable
        C-contiguous numpy array (no copy) or a bytearray, of the same size
        on every rank (a rank with another size fails every rank with
        sfb.Error naming it). Any size (a model's parameters)."""
        root = _int("broadcast: root", root, 0, _U32)
        if isinstance(data, np.ndarray):
            if not (data.flags.c_contiguous and data.flags.writeable):
                raise UsageError("broadcast: data: expected a writable C-contiguous array")
            ptr, n = data.ctypes.data, data.nbytes
        elif isinstance(data, bytearray):
            n = len(data)
            ptr = ctypes.addressof((ctypes.c_char * n).from_buffer(data)) if n else None
        else:
            raise UsageError("broadcast: data: expected a numpy array or a bytearray, got %s" %
                             type(data).__name__)
        _check(library().sfb_job_broadcast(self._handle(), root, ptr, n))
        return data

    def drain(self, last):
        """Applies every peer update of clocks <= last."""
        _check(library().sfb_job_drain(self._handle(), _clock("drain: last", last), None))

    def replan(self, last, engine):
        """From clock last + 1 on, `engine` carries the matrices ("sfb",
        "fms", or one per matrix: a list or "sfb,fms,..."): every update
        through `last` is applied everywhere first, then the engines
        change; the replicas and clocks carry on. Collective: every rank
        the same last (the last clock published) and engine, before the
        next wait. Afterwards `engines` lists each matrix's engine."""
        if not isinstance(engine, str):
            engine = ",".join(engine)
        self._retire()  # (a replan takes dense_buffer's back)
        _check(library().sfb_job_replan(self._handle(), _clock("replan: last", last, -1),
                                        _enc(engine)))
        self.engines = [library().sfb_job_engine(self._h, i).decode()
                        for i in range(len(self.matrices))]

    def set_max_s(self, last, max_s):
        """From clock last + 1 on, factors of up to max_s samples (at least
        the job's bound now; a longer sequence than the job was attached
        for): every rank then checks the frames it receives against it.
        Collective: every rank the same last (the last clock published)
        and max_s, before the next wait."""
        _check(library().sfb_job_set_max_s(self._handle(), _clock("set_max_s: last", last, -1),
                                           _int("set_max_s: max_s", max_s, 1, _U32)))

    def lost(self):
        """An elastic job (Job(elastic=True)): the rank whose death failed the
        last call (sfb.PeerError), else -1."""
        return library().sfb_job_lost(self._handle())

    def shrink(self):
        """An elastic job, after a call failed and lost() named a dead rank:
        goes on with the survivors, renumbered (rank and world change),
        every replica the most advanced survivor's (the matrices are
        overwritten in place). Returns (next, source): the clock to wait for
        next, and the (new) rank whose replicas every rank now holds.
        With matrices attached with reattach=True (or none), it only
        re-forms the job: they are detached, (-1, 0) is returned; attach
        again. Collective over the survivors (include/sfb/job.h:
        sfb_job_shrink)."""
        nxt, src = ctypes.c_int64(), ctypes.c_uint32()
        self._retire()
        _check(library().sfb_job_shrink(self._handle(), ctypes.byref(nxt), ctypes.byref(src)))
        self.rank = library().sfb_job_rank(self._h)
        self.world = library().sfb_job_world(self._h)
        self._detached()
        return nxt.value, src.value

    def _detached(self):
        if library().sfb_job_engine(self._h, 0) is None:  # (reattach: nothing kept)
            self.matrices, self._sfs = [], None

    def join_poll(self, text=""):
        """An elastic job, not collective: on rank 0 the processes waiting
        to join now whose settings text equals `text` are taken in, kept for
        the next grow(); returns how many are kept (0 on other ranks)."""
        n = ctypes.c_uint32()
        _check(library().sfb_job_join_poll(self._handle(), _enc(text), ctypes.byref(n)))
        return n.value

    def grow(self, clock, text="", value=0):
        """An elastic job, every rank after wait(clock) and before publishing
        it: takes in the processes waiting to join whose settings text
        equals `text` (refusing the others, which are told why). Returns how
        many joined; then `world` grew, the joiners hold this job's
        matrices, and `clock` counts as waited for (publish it next).
        `value` goes to the joiners (joined()). With matrices attached with
        reattach=True (or none) a grow detaches them (joiners or not) and
        may come at any point: every rank, the joiners too, attaches again."""
        n = ctypes.c_uint32()
        self._retire()
        _check(library().sfb_job_grow(self._handle(), _clock("grow: clock", clock), _enc(text),
                                      int(value), ctypes.byref(n)))
        self.world = library().sfb_job_world(self._h)
        self._detached()
        return n.value

    def joined(self):
        """In a process that joined a running elastic job (SFB_JOINING=1):
        (clock, max_s, value): attach with start_clock=clock and that max_s
        (the attach receives the job's matrices), then wait(clock). None
        for a process that started with the job."""
        c, m, v = ctypes.c_int64(), ctypes.c_uint32(), ctypes.c_uint64()
        if not library().sfb_job_joined(self._handle(), ctypes.byref(c), ctypes.byref(m),
                                        ctypes.byref(v)):
            return None
        return c.value, m.value, v.value

    def timeline_on(self):
        """True when this job records a training timeline (SFB_TIMELINE)."""
        return bool(library().sfb_job_timeline_on(self._handle()))

    def timeline_span(self, name, t0_us, t1_us, clock=-1):
        """A span of the caller's own on the timeline's user track, from
        t0_us to t1_us (time.time() * 1e6), belonging to job clock `clock`;
        a no-op when the timeline is off."""
        library().sfb_job_timeline_span(self._handle(), _enc(str(name)), float(t0_us),
                                        float(t1_us), int(clock))

    def barrier(self):
        _check(library().sfb_job_barrier(self._handle()))

    def allgather(self, data):
        """Every rank's `data` (bytes of one length on every rank), in rank order.
        Like every collective call of the job (barrier, broadcast, agree,
        replan), every rank makes it at the same point: a rank in another
        call there fails every rank with sfb.MismatchError naming both."""
        data = bytes(data)
        out = ctypes.create_string_buffer(len(data) * self.world)
        _check(library().sfb_job_allgather(self._handle(), data, len(data), out))
        return [out.raw[i * len(data):(i + 1) * len(data)] for i in range(self.world)]

    def agree(self, text):
        """Raises sfb.Error on every rank unless all passed the same
        "key=value\\n" text (the message names the differing keys)."""
        _check(library().sfb_job_agree(self._handle(), _enc(text)))

    @contextlib.contextmanager
    def calls_named(self, name):
        """Inside the with, the job's collective calls carry `name` (1 to 31
        bytes) in place of their own, where ranks made different calls: a
        library above the job names its own collectives so ("rank 1 is in
        allreduce() where rank 0 is in barrier()"). Nested, the outer name
        stays."""
        if self._call_name is not None:
            yield
            return
        _check(library().sfb_job_name_calls(self._handle(), _enc(name)))
        self._call_name = name
        try:
            yield
        finally:
            self._call_name = None
            if self._h:
                library().sfb_job_name_calls(self._h, None)

    def set_last_clock(self, last):
        """Optional, before publishing clock `last`: no clock follows it. Peers
        learn it from that clock's frames, and finish says goodbye only to the
        peers this rank exchanged frames with."""
        _check(library().sfb_job_set_last_clock(self._handle(), _clock("set_last_clock: last", last)))

    def finish(self, last):
        """The orderly end after clock `last`: every replica ends identical."""
        _check(library().sfb_job_finish(self._handle(), _clock("finish: last", last)))

    def abort(self, reason=None):
        if self._h:
            library().sfb_job_abort(self._h, _enc(reason))

    def stats(self):
        st = _sized(_Stats)
        _check(library().sfb_job_stats(self._handle(), ctypes.byref(st)))
        return _fields(st)

    def close(self):
        self._retire()
        if self._h:
            library().sfb_job_close(ctypes.byref(self._h))
            self._h = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.abort("%s: %s" % (exc_type.__name__, exc))
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
