#!/usr/bin/env python3
"""sfb.torch against PyTorch's DistributedDataParallel (gloo) on the emulated
cluster (scripts/netns-cluster: one network namespace per worker, shaped
links, tcp), in one run: the same model, per-worker batch, steps, seed, data
(Fashion-MNIST for the MLP and the CNN; the words of Debian's fortunes for
the language models of examples/torch_word_lm.py: "lstm", its embedding
tied to the decoder, and "transformer") and links for both. Per model and
engine it reports

  samples/s        all workers, over the timed steps (after --warmup steps,
                   and for sfb.torch's sync="auto" after its trials of both
                   engines: the steps before are in the JSON's
                   untimed_steps); a language model's samples are its
                   words (streams x bptt)
  bytes/step       data bytes one worker sent per step over the timed
                   steps: sfb's own count (job stats) and, for both, the
                   namespace's eth0 tx bytes; the count against the
                   formula is checked over every step (the job's stats at
                   its end, warm-up and trials included: every update sent)
  formula          what the engines' formulas say a worker sends per step:
                   sfb: per Linear by factors (P-1) x (header + the codec's
                   encoding of s x (rows + cols)), per matrix through the
                   sharded servers 2 (P-1)/P rows x cols floats + headers;
                   DDP (ring allreduce): 2 (P-1)/P x parameters x 4 bytes
  to_target_s      seconds until rank 0's training loss (mean of the last 10
                   steps) first fell to --target-loss
  test accuracy    rank 0's model on the Fashion-MNIST test set after the
                   last step (the image models; the language models' last
                   losses are in the loss column)
  CPU ms/sample    every worker's CPU time (user + system, all its threads)
                   over the timed steps, per sample: where the workers share
                   cores, a CPU-bound step's speed follows it, and it moves
                   less from run to run than samples/s (each run's line
                   gives it too, with the workers' minor page faults per
                   sample: a fresh tensor's pages cost ~15 us each on some
                   VMs, and its CPU over its forward's: the forward is
                   the same work under every engine, so the ratio of two
                   engines' is their CPU-bound speed net of the machine's
                   drift, printed under the table)
  idle             the machine's idle share of its CPU time over rank 0's
                   timed steps (/proc/stat, every core): near 0 where the
                   step is CPU-bound, more where every worker waits at once;
                   a thread that spins or yields while it waits counts as
                   busy (on the 2-core VM two idle-priority loops beside the
                   workers got 28-43 % of a CPU's speed where this said < 2 %)
  peak RSS         the largest worker process's peak resident memory (its
                   data, torch and the engine's buffers), MB

Engines (--engines): sfb (sfb.torch, factors leave during backward),
sfb-serial (all at step()), sfb-bf16 (factor_dtype="bf16": the factors in
bfloat16, half the bytes, every rank applying the rounded ones),
sfb-bf16all (dense_dtype="bf16" too: the dense gradients and the layers
FMS carries in bfloat16 as well), sfb-timeline (sfb.torch recording its
training timeline, SFB_TIMELINE: one file a rank in the run's directory;
the report gives its samples/s over sfb's, round by round, and what its
events cost by their parts' measured costs, bench/timeline_cost.py on rank
0's file: a cost of 2 % is below what runs of one engine spread by), ddp,
and DDP with a compression hook (bench/ddp_hooks.py): ddp-fp16 (torch's
fp16_compress_hook) and ddp-powersgd (PowerSGD rank 4, error feedback, warm
start).
--factor-dtype bf16 adds sfb-bf16 next to sfb, so one run reports both
precisions' speed and accuracy side by side.

and the ratios sfb/DDP, as a table (stdout and OUT/torch_vs_ddp.md), JSON
(OUT/torch_vs_ddp.json) and a figure of loss against time
(OUT/torch_vs_ddp.png). Needs root (namespaces) and python3-torch.

  bench/torch_vs_ddp.py                       # MLP and CNN, 4 hosts, 1 Gbit/s
  bench/torch_vs_ddp.py --models lstm,transformer --batch 5   # the language models
  bench/torch_vs_ddp.py --factor-dtype bf16   # sfb.torch with f32 and with bf16 factors
  bench/torch_vs_ddp.py --smoke               # tiny shapes, loopback-free check
  bench/torch_vs_ddp.py --sweep --models mlp --engines sfb,ddp   # batches x links
  bench/torch_vs_ddp.py --models transformer --batch 20 --repeats 3   # 3 rounds: medians

--repeats N runs every engine N times, in rounds (every other one in reverse
order), and reports each engine's median round and the median of the
rounds' ratios to DDP with their range: one run's ratio moves by about
+-10 % on a machine whose cores are shared.

Every worker, both engines alike, takes every block from the heap and keeps
the memory its large tensors free (GLIBC_TUNABLES: no block mapped on its own,
mmap_max=0; no heap trim) unless --plain-malloc or the caller
sets GLIBC_TUNABLES: with glibc's defaults, whether a step's fresh tensors
fault their pages anew changes from run to run, and where a page fault costs
~15 us (a VM) that moved a CPU-bound run by ~10 % (the Transformer at 5
streams: 4.9 to 11.4 page faults a sample, 0.95 to 1.07 ms of CPU, in two
runs of sfb.torch alike); blocks past 32 MiB (the 20-stream Transformer's
logits) glibc maps anew every step without mmap_max=0 (2.4 x the step's time).

The report says whether the kernel's DAMON monitors ran (a VM's memory
reclaim: its pageout scheme slowed the workers whose memory it met, on this
VM SGD's pass over a 20000 x 200 tensor 10 x in some runs); --pause-damon
turns them off for the run and on again at its end.

--sweep runs every model and engine at each per-worker batch of --batches
and each link rate of --rates ("none": unshaped), and writes the ratio of
each engine to DDP per cell (OUT/sweep.md, OUT/sweep.json), each cell's
own table in OUT/BATCH-RATE/.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)
from cluster_run import (blas_kernels, cores_per_host, damon, fms_chunk_rows,  # noqa: E402
                         host_jiffies, in_rounds, round_ratios, run_workers, steady_heap, tcp_cc)

HDR, SF_PREFIX = 64, 8  # src/wire/wire.h SFB_WIRE_HDR_SIZE, sfb/codec.h SFB_SF_PREFIX
FACTORS_PREFIX = 8  # src/wire/wire.h SFB_WIRE_FACTORS_PREFIX
ENGINE_NAMES = {"sfb": "sfb.torch", "sfb-serial": "sfb.torch, no overlap",
                "sfb-bf16": "sfb.torch, bf16 factors",
                "sfb-bf16all": "sfb.torch, bf16 factors and dense",
                "sfb-timeline": "sfb.torch, timeline on", "ddp": "DDP (gloo)",
                "ddp-fp16": "DDP + fp16", "ddp-powersgd": "DDP + PowerSGD rank 4"}
DDP_HOOKS = {"ddp-fp16": "fp16", "ddp-powersgd": "powersgd"}


LMS = ("lstm", "transformer")


def models(name, hidden, a=None, vocab=None):
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    if name in LMS:
        from torch_word_lm import LSTMLM, TransformerLM
        cls = LSTMLM if name == "lstm" else TransformerLM
        return cls(vocab, a.dim, 2, 0.0), None
    if name == "cnn":
        from torch_cnn import cnn
        return cnn(hidden), (1, 28, 28)
    from torch_mlp import mlp
    return mlp(hidden), (784,)


def thread_cpu():
    """This process's CPU seconds by thread, (user, system) each: the main
    thread as "main", sfb's by their names (sfb-loop, sfb-watch), every other
    thread (torch's, gloo's) as "other"."""
    tick, out = os.sysconf("SC_CLK_TCK"), {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/stat" % tid) as f:
                st = f.read()
        except OSError:  # the thread ended
            continue
        name = st[st.index("(") + 1:st.rindex(")")]
        f = st[st.rindex(")") + 2:].split()
        key = "main" if int(tid) == os.getpid() else name if name.startswith("sfb-") else "other"
        u, s = out.get(key, (0.0, 0.0))
        out[key] = (u + int(f[11]) / tick, s + int(f[12]) / tick)
    return out


def tx_bytes(iface="eth0"):
    with open("/proc/net/dev") as f:
        for line in f:
            if line.strip().startswith(iface + ":"):
                return int(line.split(":")[1].split()[8])
    return 0


class Formula:
    """What sfb's engines send, by their formulas, for the factors this
    worker published (wraps the job's publish calls)."""

    def __init__(self, job):
        self.job, self.bytes, self.fms_of = job, 0, {}
        P = job.world
        one, dense = job.publish_one, job.publish_dense

        import numpy

        def publish_one(clock, m, b, c, scale=1.0):
            s, rows, cols = b.shape[0], b.shape[1], job.matrices[m].shape[1]
            if job.engines[m] != "sfb":  # (the sum's bytes: the factors' own do not count)
                self.bytes += self.fms(rows, cols, m, s if not isinstance(c, tuple) else 0)
                return one(clock, m, b, c, scale)
            csr_given = isinstance(c, tuple)  # (row_ptr, col, val): sent as CSR
            nnz = len(c[1]) if csr_given else int(numpy.count_nonzero(c))
            # numbers of 4 bytes, or 2 in bfloat16 (a payload padded to a
            # multiple of 4); c as CSR only when that is under 3/4 of the
            # dense payload (sfb/codec.c, sfb__sf_choose)
            e = 2 if job.factor_dtypes[m] == "bf16" else 4
            dense = words(SF_PREFIX + e * s * rows + e * s * cols)
            csr = words(SF_PREFIX + e * s * rows + 4 * (s + 1) + (4 + e) * nnz)
            payload = csr if csr_given or csr < dense - dense // 4 else dense
            self.bytes += (P - 1) * (HDR + payload)
            return one(clock, m, b, c, scale)

        def publish_dense(clock, m, delta, scale=1.0):
            self.bytes += self.fms(*delta.shape, m)
            return dense(clock, m, delta, scale)
        job.publish_one, job.publish_dense = publish_one, publish_dense

    def fms(self, K, D, m, s=0):
        """Pushes of the other owners' row blocks, and the own block's sum to
        every other worker, each block as its chunks of float32 rows
        (fms_chunk_rows; a header each), in float32 or bfloat16 (dense_dtype:
        each chunk's payload padded to 4 bytes); an ordered job's factors of
        s samples (dense c, float32 rows) pushed instead of a block's rows
        where they are fewer bytes, one message (sfb/fms.c). Kept per shape,
        dtype and samples: the count runs inside the timed steps, and its
        Python is not sfb's."""
        e = 2 if self.job.dense_dtypes[m] == "bf16" else 4
        s = s if self.job.ordered and e == 4 and os.environ.get("SFB_FMS_FACTORS") != "0" else 0
        got = self.fms_of.get((K, D, e, s))
        if got is None:
            got = self.fms_of[(K, D, e, s)] = self.fms_bytes(K, D, e, s)
        return got

    def fms_bytes(self, K, D, e, s):
        P, r = self.job.world, self.job.rank
        step = fms_chunk_rows(K, D, P)
        start = [K * b // P for b in range(P + 1)]

        def block(b):
            rows = [min(step, start[b + 1] - s) for s in range(start[b], start[b + 1], step)]
            return sum(HDR + words(e * k * D) for k in rows)

        def push(b):
            kb = start[b + 1] - start[b]
            factors = FACTORS_PREFIX + 4 * s * (kb + D)
            return HDR + factors if s and kb and factors < 4 * kb * D else block(b)
        return sum(push(b) for b in range(P) if b != r) + (P - 1) * block(r)


def timeline_cost(out, quick):
    """bench/timeline_cost.py on rank 0's timeline: what its events cost by
    their parts' measured costs, against the run's step (a dict)."""
    path = os.path.join(out, "timeline-cost.json")
    subprocess.run([sys.executable, os.path.join(HERE, "timeline_cost.py"), "--json", path] +
                   (["--quick"] if quick else []) + [os.path.join(out, "timeline.0.json")],
                   check=True)
    with open(path) as f:
        return json.load(f)[0]


def words(n):
    """n bytes rounded up to whole 4-byte words."""
    return (n + 3) // 4 * 4


def image_task(a, rank, world):
    """(model, batch(t) -> (x, y), samples per worker and step): Fashion-MNIST."""
    import numpy as np
    import torch
    from fashion_mnist import DEFAULT_DIR, raw
    torch.manual_seed(a.seed)
    model, shape = models(a.model, [int(h) for h in a.hidden.split(",")])
    x, y = raw(a.data_dir or DEFAULT_DIR, "train")
    X = torch.from_numpy(x.reshape((len(x),) + shape).astype(np.float32) / 255.0)
    Y = torch.from_numpy(y.astype(np.int64))
    G = a.batch * world
    perm = torch.from_numpy(np.random.default_rng(a.seed).permutation(len(X)))

    def batch(t):
        i = (t * G) % (len(X) - G)
        idx = perm[i + rank * a.batch:i + (rank + 1) * a.batch]
        return X[idx], Y[idx]

    def accuracy(net):
        """The fraction of the test set the model classifies right."""
        xt, yt = raw(a.data_dir or DEFAULT_DIR, "t10k")
        xt = torch.from_numpy(xt.reshape((len(xt),) + shape).astype(np.float32) / 255.0)
        yt = torch.from_numpy(yt.astype(np.int64))
        right = 0
        with torch.no_grad():
            for i in range(0, len(xt), 1000):
                right += int((net(xt[i:i + 1000]).argmax(1) == yt[i:i + 1000]).sum())
        return right / len(xt)
    model.accuracy = accuracy
    return model, batch, a.batch


def lm_task(a, rank, world):
    """A word language model on the fortunes: --batch streams per worker of
    --bptt words a step (no state carried between steps: both engines alike)."""
    import torch
    from torch_word_lm import CORPUS, read_corpus, streams, vocabulary
    words = read_corpus(a.corpus or CORPUS)
    vocab = vocabulary(words, a.vocab)
    ids = [vocab.get(w, 0) for w in words]
    data = streams(ids, a.batch * world)[:, rank * a.batch:(rank + 1) * a.batch]
    torch.manual_seed(a.seed)
    model, _ = models(a.model, None, a, len(vocab))
    V = len(vocab)

    class Flat(torch.nn.Module):  # logits as (words x V), the targets flat
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x, None)[0].reshape(-1, V)

    def batch(t):
        lo = (t * a.bptt) % (len(data) - a.bptt - 1)
        return data[lo:lo + a.bptt], data[lo + 1:lo + 1 + a.bptt].reshape(-1)
    return Flat(model), batch, a.batch * a.bptt


def worker(a):
    import torch
    import torch.nn as nn
    rank, world = int(os.environ["SFB_RANK"]), int(os.environ["SFB_WORLD_SIZE"])
    model, batch, per = (lm_task if a.model in LMS else image_task)(a, rank, world)
    G = per * world
    params = sum(p.numel() for p in model.parameters())
    if a.engine == "sfb":
        import sfb.torch as sft
        sft.init(timeline=a.timeline)
        formula = Formula(sft._need())  # every publish, from the first step on
        sft.broadcast_parameters(model.state_dict())
        opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9),
                                       model=model, sync=a.sync, overlap=not a.no_overlap,
                                       factor_dtype=a.factor_dtype, dense_dtype=a.dense_dtype,
                                       trial_steps=a.trial_steps)
        net = model
    else:
        import torch.distributed as dist
        port = int(os.environ["SFB_RENDEZVOUS"].rsplit(":", 1)[1]) + 1
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")
        dist.init_process_group("gloo", init_method="tcp://10.77.0.1:%d" % port, rank=rank,
                                world_size=world)
        net = nn.parallel.DistributedDataParallel(model)
        if a.ddp_hook:
            import ddp_hooks
            ddp_hooks.register(net, a.ddp_hook, world)
        opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    curve, t0, t, start = [], None, 0, None
    fwd = [0.0, 0.0]  # timed steps' forward: wall, this thread's CPU

    def settled():  # sync="auto"'s trials (both engines of close layers) are over
        trials = getattr(opt, "_sfb", None) and opt._sfb.trials
        return not trials or trials.stage in ("off", "done") or t >= a.warmup + 400
    while start is None or t < start + a.steps:
        if start is None and t >= a.warmup and settled():  # timed from here
            tx0, t0, start, cpu0, host0 = (tx_bytes(), time.time(), t, time.process_time(),
                                           host_jiffies())
            faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            threads0 = thread_cpu()
            if a.engine == "sfb":  # the timed steps' own bytes (sync="auto"'s trials
                sent0 = (sft.stats()["data_bytes"], formula.bytes)  # sent more)
        x, y = batch(t)
        opt.zero_grad()
        f0, fc0 = time.perf_counter(), time.thread_time()
        loss = loss_fn(net(x), y)
        if t0 is not None:  # the forward: the same work in every engine
            fwd[0] += time.perf_counter() - f0
            fwd[1] += time.thread_time() - fc0
        loss.backward()
        opt.step()
        if t0 is not None:
            curve.append((time.time() - t0, loss.item()))
        t += 1
    # every thread's CPU time (user + system); the whole host's jiffies (every
    # namespace's workers, the kernel's network work)
    wall, cpu, host = time.time() - t0, time.process_time() - cpu0, host_jiffies()
    busy, total = host[0] - host0[0], host[1] - host0[1]
    tx = tx_bytes() - tx0
    threads = {k: [(v[i] - threads0.get(k, (0.0, 0.0))[i]) / a.steps for i in (0, 1)]
               for k, v in thread_cpu().items()}
    out = {"engine": a.engine, "model": a.model, "rank": rank, "world": world, "steps": a.steps,
           "batch": a.batch, "params": params, "wall_s": wall,
           "samples_per_s": a.steps * G / wall, "tx_bytes_per_step": tx / a.steps,
           "curve": curve, "untimed_steps": start, "samples_per_step": G,
           "cpu_s_per_step": cpu / a.steps,
           "thread_cpu_s_per_step": threads,  # {name: [user, system]}
           "forward_s_per_step": fwd[0] / a.steps, "forward_cpu_s_per_step": fwd[1] / a.steps,
           "faults_per_step": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0) /
           a.steps,
           "machine_idle": (total - busy) / total if total > 0 else None,
           # the process's peak resident memory (Linux: KiB), data and torch included
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    accuracy = getattr(model, "accuracy", None)  # (an image model's; the replicas are
    if rank == 0 and accuracy:                   # every rank's: rank 0's stands for all)
        out["test_accuracy"] = accuracy(model)
    if a.engine == "sfb":
        sft.shutdown()
        # bytes over the whole run, warm-up included: the counters after the
        # job's end hold every update sent (mid-run, some may still queue)
        steps = t
        sent = sft.stats()["data_bytes"]
        out["data_bytes_per_step"] = sent / steps
        out["formula_bytes_per_step"] = formula.bytes / steps
        # over the timed steps alone (what the table shows beside eth0's): the
        # updates of the step before the first still leaving count here
        out["timed_data_bytes_per_step"] = (sent - sent0[0]) / a.steps
        out["timed_formula_bytes_per_step"] = (formula.bytes - sent0[1]) / a.steps
        out["plan"] = opt.plan
    else:
        out["formula_bytes_per_step"] = 2.0 * (world - 1) / world * params * 4
        if a.ddp_hook:
            import ddp_hooks
            out["formula_bytes_per_step"] = ddp_hooks.formula_bytes(model.parameters(),
                                                                    a.ddp_hook, world)
        dist.barrier()
        dist.destroy_process_group()
    print("RESULT " + json.dumps(out), flush=True)


def target_of(a, model):
    return a.target_lm_loss if model in LMS else a.target_loss


def lr_of(a, model):
    return a.lm_lr if model in LMS else a.lr


def to_target(curve, target, window=10):
    for i in range(window, len(curve) + 1):
        if sum(l for _, l in curve[i - window:i]) / window <= target:
            return curve[i - 1][0]
    return None


def run_one(a, model, engine, rnd=0):
    out = os.path.join(a.out, "%s-%s%s" % (model, engine, "-%d" % rnd if rnd else ""))
    os.makedirs(out, exist_ok=True)
    cmd = [a.cluster, "-n", str(a.n), "--rate", a.rate, "--out-dir", out,
           "--timeout", str(a.timeout), "--exec", "--", sys.executable, os.path.realpath(__file__),
           "--worker", "--engine", engine.split("-")[0], "--model", model, "--hidden", a.hidden,
           "--batch", str(a.batch), "--steps", str(a.steps), "--warmup", str(a.warmup),
           "--trial-steps", str(a.trial_steps),
           "--lr", str(lr_of(a, model)), "--seed", str(a.seed), "--sync", a.sync,
           "--vocab", str(a.vocab), "--dim", str(a.dim), "--bptt", str(a.bptt),
           "--factor-dtype", "bf16" if engine in ("sfb-bf16", "sfb-bf16all") else "f32",
           "--dense-dtype", "bf16" if engine == "sfb-bf16all" else "f32"]
    if engine in DDP_HOOKS:
        cmd += ["--ddp-hook", DDP_HOOKS[engine]]
    if a.corpus:
        cmd += ["--corpus", a.corpus]
    if a.no_overlap or engine == "sfb-serial":
        cmd.append("--no-overlap")
    if engine == "sfb-timeline":
        cmd += ["--timeline", os.path.join(out, "timeline.%r.json")]
    if a.data_dir:
        cmd += ["--data-dir", a.data_dir]
    t = time.time()
    results = run_workers(cmd, out, a.n, "torch_vs_ddp: %s %s" % (model, engine))
    r0 = min(results, key=lambda r: r["rank"])
    row = {k: r0[k] for k in ("model", "world", "steps", "batch", "params", "samples_per_s",
                              "curve", "untimed_steps")}
    row["engine"] = engine
    row["wall_s"] = max(r["wall_s"] for r in results)
    row["peak_rss_mb"] = max(r["peak_rss_mb"] for r in results)  # the largest worker's
    # every worker's CPU (user + system, all threads) per sample trained: on cores
    # the workers share, what a CPU-bound step's speed follows
    row["cpu_ms_per_sample"] = (sum(r["cpu_s_per_step"] for r in results) * 1e3 /
                                r0["samples_per_step"])
    row["faults_per_sample"] = (sum(r["faults_per_step"] for r in results) /
                                r0["samples_per_step"])
    # the step's CPU over its forward's (main thread): the forward is the same
    # work under every engine, so what the machine's speed does to both cancels
    fwd = sum(r["forward_cpu_s_per_step"] for r in results)
    row["cpu_per_forward"] = sum(r["cpu_s_per_step"] for r in results) / fwd if fwd > 0 else None
    # by thread, every worker's, ms a sample: user + system (main: forward, backward,
    # sfb.torch's passes; sfb-loop: sfb's network thread; other: torch's, gloo's)
    threads = {}
    for r in results:
        for k, v in r.get("thread_cpu_s_per_step", {}).items():
            threads[k] = threads.get(k, 0.0) + sum(v) * 1e3 / r0["samples_per_step"]
    row["thread_cpu_ms_per_sample"] = threads
    row["machine_idle"] = r0["machine_idle"]  # (one machine: rank 0's window stands for all)
    row["samples_per_s"] = min(r["samples_per_s"] for r in results)
    for k in ("tx_bytes_per_step", "data_bytes_per_step", "formula_bytes_per_step",
              "timed_data_bytes_per_step", "timed_formula_bytes_per_step"):
        if k in r0:
            row[k] = sum(r[k] for r in results) / len(results)
    row["to_target_s"] = to_target(r0["curve"], target_of(a, model))
    row["plan"] = r0.get("plan", "")
    if engine == "sfb-timeline":  # (written at the job's close, after the timed steps)
        got = [f for f in os.listdir(out) if f.startswith("timeline.") and f.endswith(".json")]
        if len(got) != a.n:
            raise SystemExit("torch_vs_ddp: %s: %d timeline files in %s, not %d" %
                             (model, len(got), out, a.n))
        row["timeline_cost"] = timeline_cost(out, a.smoke)
    row["test_accuracy"] = r0.get("test_accuracy")
    print("  %s %s: %.1f samples/s, %.0f KB/step (formula %.0f KB), test accuracy %s, peak RSS "
          "%.0f MB, CPU %.3g ms and %.3g page faults a sample, CPU %.3g x the forward's, %.0f s "
          "in all" % (
              model, engine, row["samples_per_s"],
              row.get("timed_data_bytes_per_step", row["tx_bytes_per_step"]) / 1e3,
              row.get("timed_formula_bytes_per_step", row["formula_bytes_per_step"]) / 1e3,
              pct(row["test_accuracy"]),
              row["peak_rss_mb"], row["cpu_ms_per_sample"], row["faults_per_sample"],
              row["cpu_per_forward"] or float("nan"), time.time() - t), flush=True)
    if threads:
        print("    CPU ms a sample by thread: " + ", ".join(
            "%s %.3g" % kv for kv in sorted(threads.items(), key=lambda kv: -kv[1])), flush=True)
    return row


def warm_run(a, model, engine):
    """One short run whose numbers are dropped, before the first counted one:
    on a machine that sat idle the first run is slower (on the AVX-512 EPYC
    VM of docs/performance.md 15-40 %, three first runs of three; that VM
    runs DAMON's pageout, which reclaims what sits idle), and it would fall
    on the first engine of the first round alone."""
    if a.no_warm_run:
        return
    w = argparse.Namespace(**vars(a))
    w.steps, w.warmup, w.trial_steps = min(a.steps, 6), 1, 0
    w.out = os.path.join(a.out, "warm-up")
    print("torch_vs_ddp: a warm-up run (%s, %s, %d steps; not counted)" % (model, engine, w.steps),
          flush=True)
    run_one(w, model, engine)


def run_rounds(a, model, engines):
    """Every engine of one model, --repeats rounds (cluster_run.in_rounds):
    one row per engine, its median round by samples/s."""
    return in_rounds(engines, a.repeats, lambda e, rnd: run_one(a, model, e, rnd),
                     "samples_per_s", also=("cpu_per_forward",))


def ratio_of(r, ddp):
    """r's samples/s over DDP's: the median of the rounds' ratios and their
    range (cluster_run.round_ratios); no DDP row: NaNs."""
    nan = float("nan")
    return round_ratios(r, ddp, "samples_per_s") if ddp else (nan, nan, nan)


def pct(x):
    return "%.2f %%" % (100 * x) if x is not None else "-"


def report(a, rows, load=None):
    lines = ["| model | engine | samples/s | x DDP | sent KB/step (count) | eth0 tx KB/step | "
             "formula KB/step | count/formula, whole run | loss, last 10 steps | s to loss %s | "
             "test accuracy | CPU ms/sample | idle | peak RSS MB |" % (
                 "%.2f" % a.target_loss if not any(r["model"] in LMS for r in rows) else
                 "%.2f (LM %.2f)" % (a.target_loss, a.target_lm_loss)),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ratios = {}
    for r in rows:
        ddp = next((d for d in rows if d["model"] == r["model"] and d["engine"] == "ddp"), None)
        x, lo, hi = ratio_of(r, ddp)
        ratios[(r["model"], r["engine"])] = x
        count = r.get("data_bytes_per_step")
        timed = r.get("timed_data_bytes_per_step", count)
        last = [l for _, l in r["curve"][-10:]]
        lines.append("| %s |" % " | ".join(str(v) for v in (
            r["model"], ENGINE_NAMES[r["engine"]], "%.1f" % r["samples_per_s"],
            "%.2f" % x + (" (%.2f-%.2f)" % (lo, hi) if hi > lo else ""),
            "%.0f" % (timed / 1e3) if count else "",
            "%.0f" % (r["tx_bytes_per_step"] / 1e3),
            "%.0f" % (r.get("timed_formula_bytes_per_step", r["formula_bytes_per_step"]) / 1e3),
            "%.4f" % (count / r["formula_bytes_per_step"]) if count else "",
            "%.4f" % (sum(last) / max(len(last), 1)),
            "%.1f" % r["to_target_s"] if r["to_target_s"] is not None else "not reached",
            pct(r.get("test_accuracy")),
            "%.3g" % r["cpu_ms_per_sample"] if "cpu_ms_per_sample" in r else "-",
            pct(r.get("machine_idle")),
            "%.0f" % r["peak_rss_mb"] if "peak_rss_mb" in r else "-")))
    load = load or os.getloadavg()
    head = ("%d emulated hosts at %s, %d samples per worker per step, %d timed steps after %d; "
            "load average %.1f %.1f %.1f" % (a.n, a.rate, a.batch, a.steps, a.warmup, *load))
    if getattr(a, "repeats", 1) > 1:
        head += ("\n%d rounds, each engine once a round: samples/s is an engine's median round, "
                 "x DDP the median of the rounds' ratios (their range in brackets)" % a.repeats)
    if getattr(a, "blas", None):
        head += "\n" + a.blas
    trials = [r["untimed_steps"] for r in rows if r.get("untimed_steps", 0) > a.warmup]
    if trials:
        head += ("\nsfb.torch timed after its sync=\"auto\" trials of both engines: %d to %d "
                 "untimed steps" % (min(trials), max(trials)))
    if any(r["model"] in LMS for r in rows):
        head += ("\nlanguage models: %d streams of %d words per worker per step (the samples), "
                 "vocabulary %d, width %d, 2 layers, SGD lr %g with momentum 0.9" %
                 (a.batch, a.bptt, a.vocab, a.dim, a.lm_lr))
    text = head + "\n\n" + "\n".join(lines) + "\n"
    for r in rows:  # CPU-bound speed, net of the machine's drift
        ddp = next((d for d in rows if d["model"] == r["model"] and d["engine"] == "ddp"), None)
        rounds = ddp and (r.get("runs_cpu_per_forward", [r.get("cpu_per_forward")]) +
                          ddp.get("runs_cpu_per_forward", [ddp.get("cpu_per_forward")]))
        if r["engine"] != "ddp" and ddp and all(rounds):  # (a run without a forward's time: none)
            x, lo, hi = round_ratios(ddp, r, "cpu_per_forward", "runs_cpu_per_forward")
            r["x_ddp_work"] = x
            text += ("\n%s, %s: CPU a step %.3g x its forward's, DDP's %.3g x: **%.2f x** DDP's "
                     "speed counted in forwards%s (the same work in both engines: where the step "
                     "is CPU-bound, the ratio net of this machine's drift)\n" % (
                         r["model"], ENGINE_NAMES[r["engine"]], r["cpu_per_forward"],
                         ddp["cpu_per_forward"], x,
                         " (rounds %.2f-%.2f)" % (lo, hi) if hi > lo else ""))
    for r in rows:  # the yardstick: time to the target against DDP + PowerSGD's
        p = next((d for d in rows if d["model"] == r["model"] and d["engine"] == "ddp-powersgd"),
                 None)
        if r["engine"].startswith("sfb") and p:
            a_s, p_s = r["to_target_s"], p["to_target_s"]
            text += "\n%s, %s: time to loss %.2f %s\n" % (
                r["model"], ENGINE_NAMES[r["engine"]], target_of(a, r["model"]),
                "%.1f s against DDP + PowerSGD's %.1f s: **%.2f x**" % (a_s, p_s, p_s / a_s)
                if a_s and p_s else "%s s against DDP + PowerSGD's %s s" % (a_s, p_s))
    for r in rows:  # what recording the timeline costs, round by round
        base = next((d for d in rows if d["model"] == r["model"] and d["engine"] == "sfb"), None)
        if r["engine"] == "sfb-timeline" and base:
            x, lo, hi = round_ratios(r, base, "samples_per_s")
            ratios[(r["model"], "timeline")] = x
            c = r["timeline_cost"]
            text += ("\n%s: the timeline on, **%.3f x** sfb.torch's samples/s without it%s; "
                     "CPU %.3g against %.3g ms a sample, peak RSS %.0f against %.0f MB; its "
                     "%.0f events a step, by their parts' costs (bench/timeline_cost.py), at "
                     "most %.3g ms of rank 0's %.4g ms step: **%.2f %%**\n" % (
                         r["model"], x, " (rounds %.3f-%.3f)" % (lo, hi) if hi > lo else "",
                         r["cpu_ms_per_sample"], base["cpu_ms_per_sample"], r["peak_rss_mb"],
                         base["peak_rss_mb"], c["forward_spans"] + c["other_spans"] +
                         c["engine_events"], c["cost_ms"], c["step_ms"], 100 * c["share"]))
    for r in rows:
        if r["plan"]:
            text += "\nplan of sfb.torch, %s:\n    %s\n" % (r["model"],
                                                         r["plan"].replace("\n", "\n    "))
    print(text)
    with open(os.path.join(a.out, "torch_vs_ddp.md"), "w") as f:
        f.write(text)
    with open(os.path.join(a.out, "torch_vs_ddp.json"), "w") as f:
        json.dump({"settings": vars(a), "load": load, "rows": rows}, f, indent=1)
    try:
        import pngplot
        engines = list(dict.fromkeys(r["engine"] for r in rows))
        panels = []
        legend = [(ENGINE_NAMES[e].upper(), i, False) for i, e in enumerate(engines)]
        for model in sorted({r["model"] for r in rows}):
            series = [(ENGINE_NAMES[r["engine"]].upper(), engines.index(r["engine"]),
                       [(t, l) for t, l in r["curve"] if t > 0], False)
                      for r in rows if r["model"] == model]
            panels.append(("%s: LOSS - SECONDS" % model.upper(), series, "SECONDS"))
        pngplot.figure(os.path.join(a.out, "torch_vs_ddp.png"), panels, legend, cols=2,
                       title="SFB.TORCH VS DDP, %d HOSTS, %s" % (a.n, a.rate.upper()))
    except Exception as e:  # the figure is a convenience; the table is the result
        print("torch_vs_ddp: no figure (%s)" % e, file=sys.stderr)
    return ratios


def cell_text(c):
    """A sweep cell: x DDP, with the rounds' range when there were several."""
    if c is None:
        return "nan"
    lo, hi = c.get("x_ddp_range", [c["x_ddp"]] * 2)
    return "%.2f" % c["x_ddp"] + (" (%.2f-%.2f)" % (lo, hi) if hi > lo else "")


def sweep(a):
    """Every batch x rate cell, each engine against DDP; the sweep's table."""
    cells, top = [], a.out
    a.batch, a.rate = int(a.batches.split(",")[0]), a.rates.split(",")[0]
    warm_run(a, a.models.split(",")[0], a.engines.split(",")[0])
    for batch in (int(b) for b in a.batches.split(",")):
        for rate in a.rates.split(","):
            a.batch, a.rate, a.out = batch, rate, os.path.join(top, "%d-%s" % (batch, rate))
            os.makedirs(a.out, exist_ok=True)
            rows = [r for m in a.models.split(",") for r in run_rounds(a, m, a.engines.split(","))]
            ratios = report(a, rows)
            for (model, engine), x in ratios.items():
                if engine != "ddp":
                    r = next(r for r in rows if r["model"] == model and r["engine"] == engine)
                    ddp = next((d for d in rows if d["model"] == model and d["engine"] == "ddp"),
                               None)
                    _, lo, hi = ratio_of(r, ddp)
                    cells.append({"model": model, "engine": engine, "batch": batch,
                                  "rate": rate, "x_ddp": x, "x_ddp_range": [lo, hi],
                                  "samples_per_s": r["samples_per_s"],
                                  "to_target_s": r["to_target_s"],
                                  "cpu_ms_per_sample": r.get("cpu_ms_per_sample"),
                                  "ddp_cpu_ms_per_sample": ddp and ddp.get("cpu_ms_per_sample"),
                                  "cpu_per_forward": r.get("cpu_per_forward"),
                                  "x_ddp_work": r.get("x_ddp_work"),
                                  "ddp_cpu_per_forward": ddp and ddp.get("cpu_per_forward"),
                                  "peak_rss_mb": r.get("peak_rss_mb"),
                                  "ddp_peak_rss_mb": ddp and ddp.get("peak_rss_mb")})
    a.out = top
    load = os.getloadavg()
    lines = ["%d emulated hosts; x DDP's samples/s per per-worker batch and link%s; load "
             "average %.1f %.1f %.1f; %s" % (
                 a.n, " (the median of %d rounds' ratios, their range in brackets)" % a.repeats
                 if a.repeats > 1 else "", *load, a.blas), "",
             "| model | engine | batch | " + " | ".join(a.rates.split(",")) + " |",
             "|---|---|---|" + "---|" * len(a.rates.split(","))]
    for model in a.models.split(","):
        for engine in (e for e in a.engines.split(",") if e != "ddp"):
            for batch in (int(b) for b in a.batches.split(",")):
                got = [next((c for c in cells if (c["model"], c["engine"], c["batch"],
                                                   c["rate"]) == (model, engine, batch, r)),
                            None) for r in a.rates.split(",")]
                lines.append("| %s | %s | %d | %s |" % (model, ENGINE_NAMES[engine], batch,
                                                       " | ".join(cell_text(c) for c in got)))
    lines += ["", "x DDP counted in forwards (the step's CPU over its forward's, DDP's over the "
              "engine's: the speed where the step is CPU-bound, net of the machine's drift; "
              "where the link binds, samples/s is the measure)", "",
              "| model | engine | batch | " + " | ".join(a.rates.split(",")) + " |",
              "|---|---|---|" + "---|" * len(a.rates.split(","))]
    for model in a.models.split(","):
        for engine in (e for e in a.engines.split(",") if e != "ddp"):
            for batch in (int(b) for b in a.batches.split(",")):
                got = [next((c.get("x_ddp_work") for c in cells if (
                    c["model"], c["engine"], c["batch"], c["rate"]) == (model, engine, batch, r)),
                            None) for r in a.rates.split(",")]
                lines.append("| %s | %s | %d | %s |" % (
                    model, ENGINE_NAMES[engine], batch,
                    " | ".join("%.2f" % x if x else "-" for x in got)))
    if "ddp-powersgd" in a.engines.split(","):
        lines += ["", "time to loss %g (LM %g): DDP + PowerSGD's seconds / the engine's "
                  "(- : not reached in the steps run)" % (a.target_loss, a.target_lm_loss), "",
                  "| model | engine | batch | " + " | ".join(a.rates.split(",")) + " |",
                  "|---|---|---|" + "---|" * len(a.rates.split(","))]
        for model in a.models.split(","):
            for engine in (e for e in a.engines.split(",") if e.startswith("sfb")):
                for batch in (int(b) for b in a.batches.split(",")):
                    xs = []
                    for rate in a.rates.split(","):
                        got = {c["engine"]: c["to_target_s"] for c in cells
                               if (c["model"], c["batch"], c["rate"]) == (model, batch, rate)}
                        mine, theirs = got.get(engine), got.get("ddp-powersgd")
                        xs.append("%.2f" % (theirs / mine) if mine and theirs else "-")
                    lines.append("| %s | %s | %d | %s |" % (model, ENGINE_NAMES[engine], batch,
                                                           " | ".join(xs)))
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(top, "sweep.md"), "w") as f:
        f.write(text)
    sweep_figure(a, cells, os.path.join(top, "sweep.png"))
    with open(os.path.join(top, "sweep.json"), "w") as f:
        json.dump({"settings": vars(a), "load": load, "cells": cells}, f, indent=1)


def sweep_figure(a, cells, path):
    """A panel per model and link: each engine's x DDP against the batch."""
    try:
        import pngplot
        engines = [e for e in a.engines.split(",") if e != "ddp"]
        legend = [(ENGINE_NAMES[e].upper(), i, False) for i, e in enumerate(engines)]
        legend.append(("DDP = 1", len(engines), True))
        batches = [int(b) for b in a.batches.split(",")]
        panels = []
        for model in a.models.split(","):
            for rate in a.rates.split(","):
                series = [(ENGINE_NAMES[e].upper(), i,
                           [(c["batch"], c["x_ddp"]) for c in cells
                            if (c["model"], c["engine"], c["rate"]) == (model, e, rate)], False)
                          for i, e in enumerate(engines)]
                series.append(("DDP", len(engines), [(b, 1.0) for b in batches], True))
                panels.append(("%s, %s: X DDP" % (model.upper(), rate.upper()), series,
                               "SAMPLES PER WORKER PER STEP"))
        pngplot.figure(path, panels, legend, cols=len(a.rates.split(",")),
                       title="SAMPLES/S AGAINST DDP, %d HOSTS" % a.n)
    except Exception as e:  # the figure is a convenience; the table is the result
        print("torch_vs_ddp: no sweep figure (%s)" % e, file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--engine", default="sfb", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="mlp", help=argparse.SUPPRESS)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--hidden", default="4096,4096", help="hidden widths of the MLP / CNN head")
    ap.add_argument("-n", type=int, default=4, help="workers (emulated hosts)")
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--batch", type=int, default=8, help="samples per worker per step")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=1,
                    help="rounds of every engine (alternating order): medians and ranges, "
                         "for a machine whose speed moves from run to run")
    ap.add_argument("--trial-steps", type=int, default=10,
                    help="sfb.torch's trial_steps (sync auto: steps timed under each engine of "
                    "a layer whose predictions are close; 0: the cost model's plan)")
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sync", default="auto")
    ap.add_argument("--engines", default="sfb,sfb-serial,ddp",
                    help="sfb (factors leave during backward), sfb-serial (all at step()), "
                         "sfb-bf16 (factors in bfloat16), sfb-bf16all (factors and dense "
                         "gradients in bfloat16), sfb-timeline (sfb recording its timeline), "
                         "ddp, ddp-fp16, ddp-powersgd (DDP with that compression hook)")
    ap.add_argument("--factor-dtype", default="f32", choices=["f32", "bf16"],
                    help="bf16: sfb.torch with bfloat16 factors too (engine sfb-bf16, next to "
                         "sfb: speed and accuracy side by side)")
    ap.add_argument("--dense-dtype", default="f32", choices=["f32", "bf16"],
                    help=argparse.SUPPRESS)  # (a worker's: engine sfb-bf16all)
    ap.add_argument("--ddp-hook", choices=["fp16", "powersgd"],
                    help=argparse.SUPPRESS)  # (a worker's: engines ddp-fp16, ddp-powersgd)
    ap.add_argument("--timeline", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--no-overlap", action="store_true",
                    help="sfb.torch sends every layer's factors at step(), not during backward")
    ap.add_argument("--target-loss", type=float, default=1.5)
    ap.add_argument("--target-lm-loss", type=float, default=6.5,
                    help="the language models' target loss")
    ap.add_argument("--vocab", type=int, default=20000, help="language models: words kept")
    ap.add_argument("--dim", type=int, default=200, help="language models: width")
    ap.add_argument("--bptt", type=int, default=35, help="language models: words per stream")
    ap.add_argument("--lm-lr", type=float, default=0.1, help="language models' learning rate")
    ap.add_argument("--corpus", help="language models: text directory (default: fortunes)")
    ap.add_argument("--from-json", metavar="FILE",
                    help="no runs: the table and figure again from a run's torch_vs_ddp.json "
                         "(e.g. with another --target-loss)")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--data-dir")
    ap.add_argument("--out", default="bench-out/torch_vs_ddp")
    ap.add_argument("--cluster", default=os.path.join(ROOT, "scripts", "netns-cluster"))
    ap.add_argument("--tcp-cc", help="TCP congestion control of the emulated hosts (default: "
                    "$SFB_NETNS_TCP_CC, else the host's; scripts/netns-cluster --tcp-cc)")
    ap.add_argument("--cores-per-host", type=int, metavar="C",
                    help="bind each emulated host's worker to C CPUs of its own, torch's and "
                         "OpenBLAS's threads C (default: $SFB_NETNS_CORES, else 0: all share "
                         "every CPU; scripts/netns-cluster)")
    ap.add_argument("--smoke-lm", action="store_true",
                    help="with --smoke: the LSTM language model too (needs fortunes)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny shapes and few steps: that it runs and reports (CI)")
    ap.add_argument("--no-warm-run", action="store_true",
                    help="no untimed warm-up run before the first counted one (--smoke: none)")
    ap.add_argument("--plain-malloc", action="store_true",
                    help="glibc's malloc defaults in every worker (default: both engines' "
                         "workers keep freed tensor memory, GLIBC_TUNABLES: where a page fault "
                         "is dear, whether a step's tensors fault anew moves a run by ~10 %%)")
    ap.add_argument("--pause-damon", action="store_true",
                    help="turn the kernel's DAMON monitors off for the run, on again at its "
                         "end (a VM's memory reclaim: its pageout slows the workers whose "
                         "memory it meets; the report says whether it ran)")
    ap.add_argument("--sweep", action="store_true",
                    help="every --batches x --rates cell: a table of the ratios to DDP")
    ap.add_argument("--batches", default="8,32,128,512", help="--sweep: per-worker batches")
    ap.add_argument("--rates", default="1gbit,10gbit,none",
                    help="--sweep: link rates (tc units; none: unshaped)")
    ap.add_argument("--min-mlp", type=float, default=0, help="fail below this sfb/DDP ratio")
    ap.add_argument("--min-cnn", type=float, default=0, help="fail below this sfb/DDP ratio")
    ap.add_argument("--min-lstm", type=float, default=0, help="fail below this sfb/DDP ratio")
    ap.add_argument("--min-transformer", type=float, default=0,
                    help="fail below this sfb/DDP ratio")
    ap.add_argument("--min-timeline", type=float, default=0,
                    help="fail where sfb-timeline's samples/s fall below this share of sfb's "
                         "(0.98: the timeline may cost 2 %%)")
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    unknown = [e for e in a.engines.split(",") if e not in ENGINE_NAMES]
    if unknown:
        ap.error("--engines: no engine %s (there are %s)" % (", ".join(unknown),
                                                             ", ".join(ENGINE_NAMES)))
    if a.from_json:
        with open(a.from_json) as f:
            saved = json.load(f)
        target, out = a.target_loss, a.out
        a = argparse.Namespace(**{**vars(ap.parse_args([])), **saved["settings"]})
        a.target_loss, a.out = target, out
        for r in saved["rows"]:
            r["to_target_s"] = to_target(r["curve"], target_of(a, r["model"]))
        os.makedirs(a.out, exist_ok=True)
        report(a, saved["rows"], saved["load"])
        return
    if a.repeats < 1:
        ap.error("--repeats %d: at least 1" % a.repeats)
    if a.smoke:  # (sfb-bf16 too with --factor-dtype bf16)
        a.hidden, a.steps, a.warmup, a.n, a.models = "64", 6, 2, 2, "mlp"
        a.engines = "sfb,sfb-timeline,ddp"
        a.trial_steps, a.no_warm_run = 1, True
        if a.smoke_lm and (os.path.isdir("/usr/share/games/fortunes") or a.corpus):
            a.models, a.vocab, a.dim, a.bptt = "mlp,lstm", 500, 16, 5  # a table's rows too
    if a.factor_dtype == "bf16" and "sfb-bf16" not in a.engines.split(","):
        e = a.engines.split(",")
        e.insert(e.index("sfb") + 1 if "sfb" in e else 0, "sfb-bf16")
        a.engines = ",".join(e)
    if os.geteuid() != 0:
        print("torch_vs_ddp: skipped (needs root for network namespaces)")
        sys.exit(77)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch_vs_ddp: skipped (no python3-torch)")
        sys.exit(77)
    os.makedirs(a.out, exist_ok=True)
    # every worker of this one host its share of the CPUs, in torch and in
    # OpenBLAS alike (both engines: sfb.torch.init does the same by itself)
    cores, cores_line = cores_per_host(a.cores_per_host)
    share = str(cores or max(1, len(os.sched_getaffinity(0)) // a.n))
    os.environ.setdefault("OMP_NUM_THREADS", share)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", share)
    a.blas = "\n".join((blas_kernels(), steady_heap(a.plain_malloc), damon(a.pause_damon),
                        tcp_cc(a.tcp_cc), cores_line))
    if a.sweep:
        return sweep(a)
    warm_run(a, a.models.split(",")[0], a.engines.split(",")[0])
    rows = []
    for model in a.models.split(","):
        rows += run_rounds(a, model, a.engines.split(","))
    ratios = report(a, rows)
    bad = []
    for model, floor in (("mlp", a.min_mlp), ("cnn", a.min_cnn), ("lstm", a.min_lstm),
                         ("transformer", a.min_transformer)):
        if floor and ratios.get((model, "sfb"), 0) < floor:
            bad.append("%s: sfb.torch %.2fx DDP, below %.1fx" % (model, ratios[(model, "sfb")],
                                                                 floor))
    for (model, what), x in ratios.items():
        if what == "timeline" and a.min_timeline and not x >= a.min_timeline:
            bad.append("%s: the timeline on, %.3fx sfb.torch's samples/s, below %.3fx" %
                       (model, x, a.min_timeline))
    for r in rows:
        c = r.get("data_bytes_per_step")
        if c and abs(c / r["formula_bytes_per_step"] - 1) > 0.02:
            bad.append("%s: %.0f bytes a step, the formula says %.0f (beyond 2 %%)" %
                       (r["model"], c, r["formula_bytes_per_step"]))
    if bad:
        sys.exit("torch_vs_ddp: " + "; ".join(bad))


if __name__ == "__main__":
    main()
