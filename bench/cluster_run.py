"""Runs one command per worker on the emulated cluster (scripts/netns-cluster
--exec) and collects what each worker printed as "RESULT {json}"; the
benches' shared measures (the BLAS kernels, the host's CPU jiffies) and
FMS's chunk grid for their byte formulas."""
import json
import os
import subprocess
import sys


def blas_kernels():
    """Has every worker of the benchmark, sfb's and its rival's alike, run the
    OpenBLAS kernels `sfb launch` gives its ranks (where OpenBLAS falls back
    to its generic ones, those the processor runs: sfb.blas_kernels). Call
    before the first run; returns the line for the report."""
    import sfb
    running, better = sfb.blas_kernels()
    if better:
        os.environ["OPENBLAS_CORETYPE"] = better
        return "OpenBLAS kernels: %s, every worker (OpenBLAS's own choice: %s)" % (better, running)
    return "OpenBLAS kernels: %s, every worker" % (os.environ.get("OPENBLAS_CORETYPE") or running)


def tcp_cc(choice=None):
    """The TCP congestion control of the emulated hosts: choice (the benches'
    --tcp-cc) is set in SFB_NETNS_TCP_CC, which scripts/netns-cluster sets in
    every namespace; without either they run what the host gives a new
    namespace (its own setting). Returns the line for the report (on links
    that are not shaped, BBR's pacing without the fq qdisc took 2.5 x cubic's
    time for a 64 MiB all-reduce, both engines alike)."""
    if choice:
        os.environ["SFB_NETNS_TCP_CC"] = choice
    cc = os.environ.get("SFB_NETNS_TCP_CC")
    if cc:
        return "TCP congestion control: %s in every emulated host" % cc
    try:
        with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
            cc = f.read().strip()
    except OSError:
        cc = "unknown"
    return "TCP congestion control: %s in every emulated host (the host's; --tcp-cc sets one)" % cc


def cores_per_host(choice=None):
    """The CPUs of each emulated host: choice (the benches' --cores-per-host)
    is set in SFB_NETNS_CORES, which has scripts/netns-cluster bind rank r's
    worker to CPUs r*C .. r*C+C-1 (a host with cores of its own, as on a real
    cluster); without either every worker runs on every CPU. Returns C (0:
    shared) and the line for the report."""
    if choice is not None:
        os.environ["SFB_NETNS_CORES"] = str(choice)
    c = int(os.environ.get("SFB_NETNS_CORES") or 0)
    if c > 0:
        return c, "each emulated host on %d CPU%s of its own (taskset)" % (c, "s" if c > 1 else "")
    return 0, "every emulated host on every CPU (--cores-per-host gives each its own)"


# glibc keeps the memory a large tensor freed instead of unmapping it or
# trimming its heap: on a VM where a fresh page's fault costs ~15 us, whether
# the next step's tensors fault their pages anew moved a CPU-bound run's speed
# by ~10 % from one run to the next. mmap_max=0: every block from the heap,
# those past the mmap threshold's 32 MiB cap too (the 20-stream Transformer's
# four 56 MB logits tensors, otherwise mapped and faulted in anew every step:
# 2.4 x the step's time, both engines alike)
STEADY_HEAP = ("glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824:"
               "glibc.malloc.mmap_max=0")


def steady_heap(plain):
    """Has every worker of the benchmark, both engines alike, keep freed
    tensor memory (GLIBC_TUNABLES=STEADY_HEAP) unless plain or the caller's
    environment sets GLIBC_TUNABLES. Call before the first run; returns the
    line for the report."""
    if os.environ.get("GLIBC_TUNABLES"):
        return "glibc malloc, every worker: GLIBC_TUNABLES=%s (the caller's)" % (
            os.environ["GLIBC_TUNABLES"])
    if plain:
        return "glibc malloc, every worker: its defaults"
    os.environ["GLIBC_TUNABLES"] = STEADY_HEAP
    return ("glibc malloc, every worker: every block from the heap, freed memory kept "
            "(GLIBC_TUNABLES=%s; --plain-malloc: glibc's defaults)" % STEADY_HEAP)


DAMON = "/sys/kernel/mm/damon/admin/kdamonds"


def _damon_states(root):
    """{kdamond directory: its state ("on", "off")}; {} without DAMON."""
    out = {}
    try:
        names = sorted(n for n in os.listdir(root) if n.isdigit())
    except OSError:
        return out
    for n in names:
        try:
            with open(os.path.join(root, n, "state")) as f:
                out[os.path.join(root, n)] = f.read().strip()
        except OSError:
            pass
    return out


def _damon_set(kdamond, state):
    with open(os.path.join(kdamond, "state"), "w") as f:
        f.write(state)


def damon(pause, root=DAMON):
    """The kernel's DAMON monitors (a VM's memory reclaim: with a pageout
    scheme on, the same tensor operations ran slower in some workers, on
    the AVX-512 EPYC VM SGD's pass over a 20000 x 200 tensor 10 x, most
    often in sfb.torch's; docs/performance.md). With pause, those running
    are turned off until this process exits (an exception, SIGTERM and
    SIGINT included), then on again. Returns the line for the report."""
    states = _damon_states(root)
    running = [k for k, v in states.items() if v == "on"]
    if not running:
        return "DAMON (kernel memory monitor): %s" % ("off" if states else "not in this kernel")
    if not pause:
        return ("DAMON (kernel memory monitor): on, %d kdamond%s (its pageout slows the workers "
                "whose memory it meets; --pause-damon)" % (len(running),
                                                           "s" if len(running) > 1 else ""))
    import atexit
    import signal
    paused = []

    def resume():
        for k in paused:
            try:
                _damon_set(k, "on")
            except OSError as e:
                print("bench: DAMON %s could not be turned on again: %s" % (k, e),
                      file=sys.stderr)
        del paused[:]
    atexit.register(resume)
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    for k in running:
        try:
            _damon_set(k, "off")
            paused.append(k)
        except OSError as e:
            sys.exit("bench: --pause-damon: %s: %s" % (k, e))
    return ("DAMON (kernel memory monitor): paused for the run (%d kdamond%s; on again at "
            "its end)" % (len(paused), "s" if len(paused) > 1 else ""))


def fms_chunk_rows(K, D, P, chunk_bytes=4 << 20):
    """The rows of FMS's message, sfb/fms.c's sfb__fms_chunk_rows: up to
    chunk_bytes of float32 rows, at least 4 chunks to the largest of the P
    blocks while they stay above a quarter of it, the block split evenly,
    at least one row (for the benches' byte formulas)."""
    most = max(1, chunk_bytes // (4 * max(D, 1)))
    least = max(1, most // 4)
    block = -(-K // max(P, 1))
    rows = max(min(most, -(-block // 4)), least)
    n = max(1, -(-block // rows))
    return max(1, -(-block // n))


def host_jiffies():
    """(busy, total) jiffies of all CPUs from /proc/stat; (0, 0) where absent."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return sum(v[:8]) - idle, sum(v[:8])


def run_workers(cmd, out, n, what):
    """cmd: the netns-cluster command line (its --out-dir is out). Returns
    the n workers' RESULT objects; exits naming `what` when the cluster
    failed or a worker printed none."""
    p = subprocess.run(cmd, capture_output=True, text=True)
    results = []
    for r in range(n):
        try:
            with open(os.path.join(out, "worker.%d.log" % r)) as f:
                results += [json.loads(l[7:]) for l in f if l.startswith("RESULT ")]
        except OSError:
            pass
    if p.returncode != 0 or len(results) != n:
        sys.exit("%s failed (exit %d):\n%s%s" % (what, p.returncode, p.stdout[-3000:],
                                                  p.stderr[-3000:]))
    return results


def in_rounds(engines, repeats, run, key, also=()):
    """run(engine, round) for every engine once a round, `repeats` rounds,
    every other round in reverse order (a drift of the machine's speed falls
    on all alike; round 0: a single run). Returns each engine's row of its
    median round by `key`, with every round's `key` in "runs" (round order)
    and each key K of `also` in "runs_K"."""
    runs = {e: [] for e in engines}
    for rnd in range(repeats):
        for e in (engines if rnd % 2 == 0 else engines[::-1]):
            runs[e].append(run(e, rnd + 1 if repeats > 1 else 0))
    rows = []
    for e in engines:
        got = sorted(runs[e], key=lambda r: r[key])
        row = dict(got[(len(got) - 1) // 2])
        row["runs"] = [r[key] for r in runs[e]]
        for k in also:
            row["runs_" + k] = [r.get(k) for r in runs[e]]
        rows.append(row)
    return rows


def round_ratios(num, den, key, runs="runs"):
    """num's over den's `key`, round by round (in_rounds' "runs", or another
    list of the rows' rounds; one run: the rows' own): (median, lowest,
    highest)."""
    xs = sorted(x / y for x, y in zip(num.get(runs, [num[key]]), den.get(runs, [den[key]])))
    mid = len(xs) // 2
    return (xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2), xs[0], xs[-1]
