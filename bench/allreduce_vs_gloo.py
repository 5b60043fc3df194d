#!/usr/bin/env python3
"""sfb's dense path against gloo's all-reduce on the same tensors, in one run.

The dense path is what sfb.torch does with every gradient that does not go
by factors or sparse rows, and what `--sync fms` does with a matrix: the
FMS engine (sfb/fms.c), a direct reduce-scatter + all-gather through the
sharded servers in chunks of up to 4 MiB. Here one dense float32 matrix of N
numbers (the shape sfb.torch gives its dense parameters) is summed over the
P workers with Job.publish_dense + Job.drain, as sfb.torch's reduction does,
and the same N numbers with torch.distributed.all_reduce on gloo (what DDP
runs). Both on the emulated cluster (scripts/netns-cluster: one network
namespace per worker, shaped links, tcp), per link rate and size:

  ms          the median over --reps timed operations (after --warmup)
  x gloo      gloo's ms / sfb's ms: >= 1 where sfb is at least as fast
  CPU ms      the CPU time of all workers per operation (every thread's,
              the kernel's work in their system calls included; the
              namespaces' softirq work falls on whoever it interrupts): on
              a machine with fewer cores than workers, the time is this
              shared out
  MB/worker   sfb's data bytes one worker sent per operation (job stats),
              against the all-reduce bound 2 (P-1)/P x 4N bytes

--engines sfb (or gloo) runs one alone, to profile it (no ratio then);
--repeats N runs both N times per cell, alternating which goes first, and
reports medians and the range of the rounds' ratios.

as a table (stdout, OUT/allreduce_vs_gloo.md) and JSON. Needs root (network
namespaces) and python3-torch (exits 77 without them).

  bench/allreduce_vs_gloo.py                    # 256 KiB, 4, 16, 64 MiB at 1 and 10 Gbit/s
  bench/allreduce_vs_gloo.py --rates 1gbit --sizes 4194304 --min-ratio 0.9
  bench/allreduce_vs_gloo.py --smoke            # one small size, a few operations
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)
from cluster_run import (blas_kernels, cores_per_host, in_rounds, round_ratios,  # noqa: E402
                         run_workers, tcp_cc)


def dense_shape(n):
    """sfb.torch's dense matrix of n numbers (python/sfb/torch/_optimizer.py)."""
    cols = max(1, min(4096, -(-n // 64)))
    return -(-n // cols), cols


def worker(a):
    import numpy as np
    rank, world = int(os.environ["SFB_RANK"]), int(os.environ["SFB_WORLD_SIZE"])
    n, total = a.size, a.warmup + a.reps
    times = []
    out = {"engine": a.engine, "rank": rank, "world": world, "size": n}
    if a.engine == "sfb":
        import sfb
        job = sfb.Job()
        rows, cols = dense_shape(n)
        replica = np.zeros((rows, cols), np.float32)
        job.attach([replica], max_s=1, engine="fms", ordered=True)
        delta = np.random.default_rng(rank).random((rows, cols), np.float32)
        staged = 0.0  # CPU time writing the tensor into the job's buffer (not the operation's)
        for c in range(total):
            job.wait(c)
            if c == a.warmup:
                cpu0 = time.process_time()
            src = delta
            if a.sfb_publish == "buffer":  # the tensor where sfb sends it from (as gloo's
                w0 = time.thread_time()    # is in the tensor it reduces in place)
                src = job.dense_buffer(0)
                src[...] = delta
                staged += time.thread_time() - w0 if c >= a.warmup else 0.0
            t = time.perf_counter()
            job.publish_dense(c, 0, src, 1.0)
            job.drain(c)
            times.append(time.perf_counter() - t)
        cpu = time.process_time() - cpu0 - staged
        job.finish(total - 1)
        out["data_bytes_per_op"] = job.stats()["data_bytes"] / total
        # every replica holds the same sum: its checksum, for the driver
        out["crc"] = int(np.frombuffer(replica.tobytes(), np.uint32).sum(dtype=np.uint64))
        job.close()
    else:
        import torch
        import torch.distributed as dist
        port = int(os.environ["SFB_RENDEZVOUS"].rsplit(":", 1)[1]) + 1
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")
        dist.init_process_group("gloo", init_method="tcp://10.77.0.1:%d" % port, rank=rank,
                                world_size=world)
        x = torch.rand(n, generator=torch.Generator().manual_seed(rank))
        for c in range(total):
            if c == a.warmup:
                cpu0 = time.process_time()
            t = time.perf_counter()
            dist.all_reduce(x)
            times.append(time.perf_counter() - t)
        cpu = time.process_time() - cpu0
        dist.barrier()
        dist.destroy_process_group()
    out["ms"] = 1e3 * statistics.median(times[a.warmup:])
    out["cpu_ms"] = 1e3 * cpu / a.reps  # this process's CPU time per operation, every thread's
    print("RESULT " + json.dumps(out), flush=True)


def warmup_ops(a, size):
    """The untimed operations before the timed ones. An engine's first
    operations fault in its buffers' pages (sfb posts 32 receive buffers of
    256 KiB, each touched the first time a frame lands in it; gloo has its
    own): the default warms up over 64 MiB of tensor, 3 to 64 operations,
    so that small tensors are timed as a training job's later steps see
    them."""
    if a.warmup is not None:
        return a.warmup
    return max(3, min(64, -(-(64 << 20) // (4 * size))))


def run_one(a, rate, size, engine, rnd=0):
    out = os.path.join(a.out, "%s-%s-%d%s" % (engine, rate, size, "-%d" % rnd if rnd else ""))
    os.makedirs(out, exist_ok=True)
    cmd = [a.cluster, "-n", str(a.n), "--rate", rate, "--out-dir", out,
           "--timeout", str(a.timeout), "--exec", "--", sys.executable, os.path.realpath(__file__),
           "--worker", "--engine", engine, "--size", str(size), "--reps", str(a.reps),
           "--sfb-publish", a.sfb_publish,
           "--warmup", str(warmup_ops(a, size))]
    results = run_workers(cmd, out, a.n, "allreduce_vs_gloo: %s at %s, %d numbers" %
                          (engine, rate, size))
    if engine == "sfb" and len({r["crc"] for r in results}) != 1:
        sys.exit("allreduce_vs_gloo: sfb's replicas differ after %d numbers at %s" % (size, rate))
    row = {"engine": engine, "rate": rate, "size": size,
           "ms": max(r["ms"] for r in results),  # the slowest worker's median
           "cpu_ms": sum(r["cpu_ms"] for r in results)}  # every worker's CPU time per operation
    if engine == "sfb":
        row["data_bytes_per_op"] = sum(r["data_bytes_per_op"] for r in results) / a.n
    print("  %s %s %d numbers: %.2f ms, %.2f ms of CPU time (all workers)" %
          (engine, rate, size, row["ms"], row["cpu_ms"]), flush=True)
    return row


def report(a, rows):
    lines = ["| link | numbers | MiB | sfb ms | gloo ms | x gloo | sfb CPU ms | gloo CPU ms | "
             "sfb MB/worker | bound MB |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    ratios = {}
    for rate, size in dict.fromkeys((r["rate"], r["size"]) for r in rows):
        s, g = ({x["engine"]: x for x in rows if x["rate"] == rate and x["size"] == size}.get(e)
                for e in ("sfb", "gloo"))
        ms = ["%.2f" % x["ms"] if x else "-" for x in (s, g)]
        x = "-"
        if s and g:  # the median of the rounds' ratios (each round's two runs side by side)
            ratios[(rate, size)], lo, hi = round_ratios(g, s, "ms")
            x = "**%.2f**" % ratios[(rate, size)] + (" (%.2f-%.2f)" % (lo, hi) if hi > lo else "")
        bound = 2.0 * (a.n - 1) / a.n * 4 * size
        cpu = ["%.1f" % x["cpu_ms"] if x else "-" for x in (s, g)]
        lines.append("| %s | %d | %.2f | %s | %s | %s | %s | %s | %s | %.3f |" % (
            rate, size, 4 * size / 2**20, ms[0], ms[1], x, cpu[0], cpu[1],
            "%.3f" % (s["data_bytes_per_op"] / 1e6) if s else "-", bound / 1e6))
    load = os.getloadavg()
    ops = sorted({warmup_ops(a, r["size"]) for r in rows})
    warm = ("%d" % a.warmup if a.warmup is not None else "a warm-up of 64 MiB of tensor "
            "(%s operations)" % "-".join(map(str, sorted({ops[0], ops[-1]}))))
    head = ("%d emulated hosts, median of %d operations after %s; load average %.1f %.1f %.1f; %s" %
            (a.n, a.reps, warm, *load, a.blas))
    if a.repeats > 1:
        head += ("\n%d rounds, each engine once a round: ms is an engine's median round, x gloo "
                 "the median of the rounds' ratios (their range in brackets)" % a.repeats)
    text = head + "\n\n" + "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(a.out, "allreduce_vs_gloo.md"), "w") as f:
        f.write(text)
    with open(os.path.join(a.out, "allreduce_vs_gloo.json"), "w") as f:
        json.dump({"settings": vars(a), "load": load, "rows": rows}, f, indent=1)
    return ratios


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--engine", default="sfb", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="65536,1048576,4194304,16781312",
                    help="float32 numbers per operation, comma separated")
    ap.add_argument("--rates", default="1gbit,10gbit", help="link rates (tc units)")
    ap.add_argument("--engines", default="sfb,gloo",
                    help="which to run (one alone: to profile it; no ratio then)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="rounds of both engines per cell (alternating order): medians and "
                         "ranges, for a machine whose speed moves from run to run")
    ap.add_argument("-n", type=int, default=4, help="workers (emulated hosts)")
    ap.add_argument("--reps", type=int, default=20, help="timed operations")
    ap.add_argument("--warmup", type=int, default=None,
                    help="untimed operations first (default: 64 MiB of tensor, 3 to 64 "
                         "operations: both engines' buffers and pages are in use by then)")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--min-ratio", type=float, default=0,
                    help="fail where sfb takes longer than gloo / this")
    ap.add_argument("--out", default="bench-out/allreduce_vs_gloo")
    ap.add_argument("--cluster", default=os.path.join(ROOT, "scripts", "netns-cluster"))
    ap.add_argument("--tcp-cc", help="TCP congestion control of the emulated hosts (default: "
                    "$SFB_NETNS_TCP_CC, else the host's; scripts/netns-cluster --tcp-cc)")
    ap.add_argument("--sfb-publish", choices=("buffer", "copy"), default="buffer",
                    help="buffer (default): each operation's tensor is in the job's buffer "
                         "(Job.dense_buffer, sent from there, as gloo reduces its tensor in "
                         "place; writing it there is not timed); copy: publish_dense copies it")
    ap.add_argument("--cores-per-host", type=int, metavar="C",
                    help="bind each emulated host's worker to C CPUs of its own (default: "
                         "$SFB_NETNS_CORES, else 0: all share every CPU; scripts/netns-cluster)")
    ap.add_argument("--smoke", action="store_true", help="one small size at 1 Gbit/s, 4 operations")
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    if a.smoke:
        a.sizes, a.rates, a.reps, a.warmup, a.n = "20000", "1gbit", 4, 1, 2
    if os.geteuid() != 0:
        print("allreduce_vs_gloo: skipped (needs root for network namespaces)")
        sys.exit(77)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("allreduce_vs_gloo: skipped (no python3-torch)")
        sys.exit(77)
    os.makedirs(a.out, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    a.blas = "%s; %s; %s" % (blas_kernels(), tcp_cc(a.tcp_cc), cores_per_host(a.cores_per_host)[1])
    rows = []
    engines = a.engines.split(",")
    for rate in a.rates.split(","):
        for size in (int(s) for s in a.sizes.split(",")):
            rows += in_rounds(engines, a.repeats,
                              lambda e, rnd: run_one(a, rate, size, e, rnd), "ms")
    ratios = report(a, rows)
    bad = []
    for r in (r for r in rows if r["engine"] == "sfb"):
        bound = 2.0 * (a.n - 1) / a.n * 4 * r["size"]
        # the bound plus a header per chunk message (sfb/fms.c)
        if not bound <= r["data_bytes_per_op"] <= bound * 1.01 + 64 * 2 * (a.n - 1) * 8:
            bad.append("%s, %d numbers: %.0f bytes a worker, the bound is %.0f" %
                       (r["rate"], r["size"], r["data_bytes_per_op"], bound))
        x = ratios.get((r["rate"], r["size"]))
        if a.min_ratio and x is not None and x < a.min_ratio:
            bad.append("%s, %d numbers: sfb %.2fx gloo, below %.2fx" %
                       (r["rate"], r["size"], x, a.min_ratio))
    if bad:
        sys.exit("allreduce_vs_gloo: " + "; ".join(bad))


if __name__ == "__main__":
    main()
