#!/usr/bin/env python3
"""Scale-out: how sfb behaves as the worker count P grows, measured next to
what `sfb topo` predicts, on one host (shm) and on the emulated cluster
(scripts/netns-cluster: one network namespace per worker, shaped links, tcp).

For every (where, P, topology) it runs MLR on synth: and reports

  clock_ms     per clock: median over ranks and clocks (first 10 % skipped)
               of the clock period, wall(c) - wall(c-1)
  mean_ms      the mean clock period over every clock, none skipped: with
               clock_ms it shows a slow start (shm full P2P at large P
               warms up over tens of clocks; docs/performance.md)
  exch_ms      per-clock exchange: the same median of
               period - compute_s - apply_s (what the simulator predicts:
               from publishing to holding every origin's update)
  pred_ms      `sfb topo` time for the same P, topology, flush mode and
               frame size, with the links calibrated by
               scripts/calibrate-links on the same transport (shm on this
               host; tcp between two namespaces at --rate) and every
               worker sharing this host's cores (--host-cores): the larger
               of the network and the host-CPU time
  launch_s     start of `sfb run` / netns-cluster (namespaces included) to
               the first clock (min t_begin), or the summary's launch_s
  teardown_s   last clock (max t_publish) to the exit of everything, or the
               summary's teardown_s
  msgs, bytes  data messages and bytes per clock over all ranks (summary's
               data_msgs / data_bytes), and `sfb topo`'s prediction
  rss_mb       peak RSS of the largest worker: the summary's peak_rss_bytes
               where present, else the job's ru_maxrss (RUSAGE_CHILDREN of
               a wrapper process: the largest process of its tree)
  spread_ms    how far out of phase the ranks run: per clock, the latest
               minus the earliest rank's start of compute (t_begin), the
               median over clocks (the first 10 % skipped)
  pss_mb       the job's memory on the host: the sum over workers of the
               summary's pss_bytes (proportional set size at the end of
               training: shared shm regions and data maps counted once)
  cpu_busy     the host's CPUs busy while the job ran (/proc/stat, all of
               it: the workers and, on the emulated cluster, the kernel's
               links), a fraction of all cores; near 1 the emulation is
               short of CPU and its times are not the network's alone

Outputs in --out: scale.csv, scale.md (one table), scale.png (one figure).
--sim-check instead runs the simulator check of docs/topology.md: P = 16 on
the emulated cluster, full / halton / halton-classic x two frame sizes x
flush eager / clock, predicted against measured exchange time and the error
(simcheck.md, simcheck.csv).

Usage: bench/scale.py [--sfb PATH] [--out DIR] [--smoke] [--local-nodes LIST]
         [--cluster-nodes LIST] [--topology LIST] [--rate R] [--egress fair|fifo] [--clocks C]
         [--no-local] [--no-cluster] [--sim-check]
The cluster part needs root and network namespaces; without them it is
skipped with a message (exit 0).
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import pngplot  # noqa: E402
from cluster_run import host_jiffies  # noqa: E402

K = 10


def die(msg):
    raise SystemExit(f"scale: {msg}")


def load_metrics(d, P):
    clocks, summary = [], []
    for r in range(P):
        path = os.path.join(d, f"metrics.{r}.jsonl")
        rows, summ = [], None
        try:
            with open(path) as f:
                for n, line in enumerate(f, 1):
                    try:
                        x = json.loads(line)
                    except json.JSONDecodeError as e:
                        die(f"{path}:{n}: not JSON: {e}")
                    if x.get("event") == "summary":
                        summ = x
                    elif "event" not in x and "clock" in x:
                        rows.append(x)
        except OSError as e:
            die(f"cannot read {path}: {e}")
        if not rows or summ is None:
            die(f"{path}: no clocks or no summary")
        rows.sort(key=lambda x: x["clock"])
        clocks.append(rows)
        summary.append(summ)
    return clocks, summary


def measure(d, P, t0, t_exit, rss_kb):
    clocks, summ = load_metrics(d, P)
    per, exch, every = [], [], []
    for rows in clocks:
        every += [b["wall"] - a["wall"] for a, b in zip(rows, rows[1:])]
        skip = max(1, len(rows) // 10)
        for a, b in zip(rows[skip:], rows[skip + 1:]):
            p = b["wall"] - a["wall"]
            per.append(p)
            exch.append(p - b["compute_s"] - b["apply_s"])
    n_clocks = summ[0]["clocks"]
    begin = {}
    for rows in clocks:
        for x in rows[max(1, len(rows) // 10):]:
            begin.setdefault(x["clock"], []).append(x["t_begin"])
    spread = [max(v) - min(v) for v in begin.values() if len(v) == P]
    m = {
        "spread_ms": 1e3 * statistics.median(spread) if spread else float("nan"),
        "clock_ms": 1e3 * statistics.median(per) if per else float("nan"),
        "mean_ms": 1e3 * statistics.fmean(every) if every else float("nan"),
        "exch_ms": 1e3 * statistics.median(exch) if exch else float("nan"),
        "msgs": sum(s["data_msgs"] for s in summ) / n_clocks,
        "bytes": sum(s["data_bytes"] for s in summ) / n_clocks,
    }
    if all("launch_s" in s for s in summ):
        m["launch_s"] = max(s["launch_s"] for s in summ)
    else:
        m["launch_s"] = min(c[0]["t_begin"] for c in clocks) - t0
    if all("teardown_s" in s for s in summ):
        m["teardown_s"] = max(s["teardown_s"] for s in summ)
    else:
        m["teardown_s"] = t_exit - max(c[-1]["t_publish"] for c in clocks)
    if all("peak_rss_bytes" in s for s in summ):
        m["rss_mb"] = max(s["peak_rss_bytes"] for s in summ) / 2 ** 20
    else:
        m["rss_mb"] = rss_kb / 1024
    pss = [s.get("pss_bytes", 0) for s in summ]
    m["pss_mb"] = sum(pss) / 2 ** 20 if all(pss) else float("nan")
    # frame bytes: the wire's 64-byte header + 8 + S(K+D) fp32 (docs/wire.md);
    # formula_bytes_per_clock = (P-1) S (K+D) 4
    if P > 1:
        m["frame_bytes"] = int(round(summ[0]["formula_bytes_per_clock"] / (P - 1))) + 72
    return m


class JobFailed(Exception):
    pass


def run_job(cmd, timeout):
    """Runs cmd; returns (t_start, t_exit, ru_maxrss KiB of the job's tree, output)."""
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-c", RSS_WRAP] + cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise JobFailed(f"ran past {timeout} s")
    t1 = time.monotonic()
    if p.returncode != 0:
        sys.stderr.write(out[-1500:])
        err = [l for l in out.splitlines() if "error" in l]
        raise JobFailed(f"exit {p.returncode}" + (f": {err[-1].strip()}" if err else ""))
    rss = 0
    for line in out.splitlines():
        if line.startswith("scale-rss-kb "):
            rss = int(line.split()[1])
    return t0, t1, rss, out


# Runs argv, prints the peak RSS (KiB) over its whole process tree, exits with its status.
RSS_WRAP = ("import resource, subprocess, sys\n"
            "rc = subprocess.call(sys.argv[1:])\n"
            "print('scale-rss-kb', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, flush=True)\n"
            "sys.exit(rc)\n")


def topo_predict(a, P, topo, frame, flush, calib):
    cmd = [a.sfb, "topo", "--json", "--nodes", str(P), "--topology", topo, "--sf-bytes", str(frame),
           "--flush", flush, "--nic", a.egress]
    if calib:
        cmd += ["--calibrate", calib, "--host-cores", str(a.host_cores)]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    if p.returncode != 0:
        die(f"{' '.join(cmd)}: {p.stderr.strip()}")
    return json.loads(p.stdout.splitlines()[0])


def calibrate(a, provider, netns_rate=None):
    path = os.path.join(a.out, f"calib-{provider}{'-' + netns_rate if netns_rate else ''}.txt")
    if netns_rate:
        cmd = [a.cluster, "-n", "2", "--rate", netns_rate, "--egress", a.egress,
               "--out-dir", os.path.join(a.out, "calib"),
               "--bench", a.bench, "--calibrate", path] + (["--quick"] if a.smoke else [])
    else:
        cmd = [os.path.join(ROOT, "scripts", "calibrate-links"), "--bench", a.bench, "--out", path, provider]
        if a.smoke:
            cmd.insert(1, "--quick")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-2000:])
        die(f"calibration failed: {' '.join(cmd)}")
    return path


def worker_args(a, P, topo, d, n, flush, staleness, out):
    return ["--model", "mlr", "--data", f"synth:k={K},d={d},n={n},seed=1", "--batch", str(a.batch),
            "--clocks", str(a.clocks), "--topology", topo] + (["--flush", flush] if topo != "full" else []) + [
            "--staleness", str(staleness), "--eval-every", "0", "-q",
            # a benchmark on a shared 2-core host must not die of a slow peer
            "--peer-timeout", "60", "--out-dir", out,
            "--model-out", os.path.join(out, "model.sfb")]


def staleness_for(a, P, topo, flush):
    if flush == "eager":
        return 0
    t = topo_predict(a, P, topo, 1000, "clock", None)
    return max(0, t["diameter"] - 1)


def one_run(a, where, P, topo, d, n, flush, calib, tag=""):
    out = os.path.join(a.out, f"{where}-{topo}-{flush}-d{d}-P{P}{tag}")
    os.makedirs(out, exist_ok=True)
    st = staleness_for(a, P, topo, flush)
    wargs = worker_args(a, P, topo, d, n, flush, st, out)
    if where == "local":
        cmd = [a.sfb, "run", "-n", str(P)] + wargs
    else:
        cmd = [a.cluster, "-n", str(P), "--rate", a.rate, "--egress", a.egress, "--sfb", a.sfb, "--timeout", "500",
               "--out-dir", out, "--"] + wargs
    nan = float("nan")
    j0 = host_jiffies()
    try:
        t0, t1, rss, _ = run_job(cmd, 600)
    except JobFailed as e:
        # one failed size must not hide the rest of the curve
        print(f"  {where:7} P={P:<4} {topo:14} {flush:5} d={d:<6} FAILED ({e}): {' '.join(cmd)}", flush=True)
        return {"where": where, "P": P, "topology": topo, "flush": flush, "d": d, "staleness": st,
                "frame_bytes": 0, "clock_ms": nan, "mean_ms": nan, "exch_ms": nan, "pred_ms": nan, "launch_s": nan,
                "teardown_s": nan, "msgs": nan, "pred_msgs": 0, "bytes": nan, "pred_bytes": 0,
                "rss_mb": nan, "pss_mb": nan, "spread_ms": nan, "cpu_busy": nan, "load": os.getloadavg()[0], "status": f"failed: {e}"}
    m = measure(out, P, t0, t1, rss)
    j1 = host_jiffies()
    m["cpu_busy"] = (j1[0] - j0[0]) / (j1[1] - j0[1]) if j1[1] > j0[1] else float("nan")
    pred = topo_predict(a, P, topo, m.get("frame_bytes", 1000), flush, calib) if P > 1 else {}
    load = os.getloadavg()[0]
    row = {"where": where, "P": P, "topology": topo, "flush": flush, "d": d, "staleness": st,
           "frame_bytes": m.get("frame_bytes", 0), **m,
           "pred_ms": 1e3 * pred.get("time_s", 0), "pred_msgs": pred.get("messages_per_clock", 0),
           "pred_bytes": pred.get("bytes_per_clock", 0), "load": load, "status": "ok"}
    print(f"  {where:7} P={P:<4} {topo:14} {flush:5} d={d:<6} clock {row['clock_ms']:8.2f} ms  "
          f"exch {row['exch_ms']:8.2f} ms  pred {row['pred_ms']:8.2f} ms  launch {row['launch_s']:6.2f} s  "
          f"rss {row['rss_mb']:6.1f} MB  load {load:.1f}", flush=True)
    return row


def have_netns():
    if os.geteuid() != 0:
        return "not root"
    name = f"sfbscale{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", name], stderr=subprocess.DEVNULL).returncode != 0:
        return "ip netns unavailable"
    subprocess.run(["ip", "netns", "del", name])
    return None


def write_csv(path, rows, cols):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def scale(a):
    rows = []
    header = (f"MLR synth:k={K},d={a.d}, batch {a.batch}, {a.clocks} clocks, s = 0, flush eager; "
              f"cluster links {a.rate} (tcp, {a.egress} egress); load average at start {os.getloadavg()[0]:.2f}")
    print(header)
    if not a.no_local:
        calib = calibrate(a, "shm")
        for P in a.local_nodes:
            for topo in a.topology:
                rows.append(one_run(a, "local", P, topo, a.d, a.n, "eager", calib))
    if not a.no_cluster:
        why = have_netns()
        if why:
            print(f"scale: skipping the emulated cluster: {why} (needs root and ip netns)")
        else:
            calib = calibrate(a, "tcp", a.rate)
            for P in a.cluster_nodes:
                for topo in a.topology:
                    rows.append(one_run(a, "cluster", P, topo, a.d, a.n, "eager", calib))
    cols = ["where", "P", "topology", "clock_ms", "mean_ms", "exch_ms", "pred_ms", "launch_s", "teardown_s",
            "msgs", "pred_msgs", "bytes", "pred_bytes", "rss_mb", "pss_mb", "frame_bytes", "cpu_busy", "load", "status"]
    write_csv(os.path.join(a.out, "scale.csv"), rows, cols)
    with open(os.path.join(a.out, "scale.md"), "w") as f:
        f.write(f"{header}\n\n| where | P | topology | clock ms | mean clock ms | exchange ms | predicted ms | launch s | "
                "teardown s | msgs/clock | predicted | MB/clock | predicted | peak RSS MB | total PSS MB | load |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            if r["status"] != "ok":
                f.write(f"| {r['where']} | {r['P']} | {r['topology']} | {r['status']} "
                        f"|||||||||||| {r['load']:.1f} |\n")
                continue
            f.write(f"| {r['where']} | {r['P']} | {r['topology']} | {r['clock_ms']:.2f} | {r['mean_ms']:.2f} | "
                    f"{r['exch_ms']:.2f} | {r['pred_ms']:.2f} | {r['launch_s']:.2f} | {r['teardown_s']:.2f} | {r['msgs']:.0f} | "
                    f"{r['pred_msgs']} | {r['bytes'] / 1e6:.3f} | {r['pred_bytes'] / 1e6:.3f} | "
                    f"{r['rss_mb']:.1f} | {r['pss_mb']:.1f} | {r['load']:.1f} |\n")
    sys.stdout.write(open(os.path.join(a.out, "scale.md")).read())
    series = sorted({(r["where"], r["topology"]) for r in rows})
    color = {s: i for i, s in enumerate(series)}

    def ser(key, pred_key=None):
        out = []
        for s in series:
            pts = [(r["P"], r[key]) for r in rows if (r["where"], r["topology"]) == s]
            out.append((f"{s[0]} {s[1]}", color[s], pts, False))
            if pred_key:
                out.append((f"{s[0]} {s[1]} predicted", color[s],
                            [(r["P"], r[pred_key]) for r in rows if (r["where"], r["topology"]) == s], True))
        return out
    panels = [("PER CLOCK MS", ser("clock_ms"), "P"),
              ("EXCHANGE MS (DASHED: SFB TOPO)", ser("exch_ms", "pred_ms"), "P"),
              ("LAUNCH S", ser("launch_s"), "P"),
              ("MSGS PER CLOCK (DASHED: SFB TOPO)", ser("msgs", "pred_msgs"), "P"),
              ("BYTES PER CLOCK (DASHED: SFB TOPO)", ser("bytes", "pred_bytes"), "P"),
              ("PEAK RSS MB PER WORKER", ser("rss_mb"), "P")]
    legend = [(f"{w} {t}", color[(w, t)], False) for w, t in series] + [("SFB TOPO PREDICTION", 0, True)]
    png = os.path.join(a.out, "scale.png")
    pngplot.figure(png, panels, legend, title=f"SFB SCALE-OUT, MLR D={a.d}, LOAD {os.getloadavg()[0]:.1f}")
    print(f"wrote {a.out}/scale.csv, scale.md, {png}")
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        print(f"scale: {len(failed)} of {len(rows)} runs failed (see the table)")
    return 1 if failed else 0


# Host CPUs busier than this during a run: the emulation is CPU-bound.
CPU_BOUND = 0.9


def sim_check(a):
    why = have_netns()
    if why:
        print(f"scale: skipping the simulator check: {why} (needs root and ip netns)")
        return 0
    calib = calibrate(a, "tcp", a.rate)
    print(open(calib).read(), end="")
    rows = []
    P = a.cluster_nodes[-1]
    for d in a.sim_d:
        n = max(200, 4 * a.batch * P)  # small n: every worker holds its data set
        for topo in a.topology:
            for flush in ("eager", "clock"):
                r = one_run(a, "cluster", P, topo, d, n, flush, calib, tag="-simcheck")
                r["error"] = (r["pred_ms"] - r["exch_ms"]) / r["exch_ms"] if r["status"] == "ok" else float("nan")
                rows.append(r)
    cols = ["P", "topology", "flush", "d", "frame_bytes", "staleness", "exch_ms", "pred_ms", "error",
            "msgs", "pred_msgs", "bytes", "pred_bytes", "clock_ms", "spread_ms", "cpu_busy", "load", "status"]
    write_csv(os.path.join(a.out, "simcheck.csv"), rows, cols)
    with open(os.path.join(a.out, "simcheck.md"), "w") as f:
        f.write(f"P = {P}, links {a.rate} (tcp, {a.egress} egress; sfb topo --nic {a.egress}), MLR synth:k={K}, batch {a.batch}, {a.clocks} clocks; "
                f"calibration: {open(calib).readline()[2:].strip()}\n\n"
                "| topology | flush | D | frame B | s | measured exchange ms | predicted ms | error | "
                "msgs/clock (pred) | MB/clock (pred) | clock ms | phase spread ms | host CPU busy | load |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            if r["status"] != "ok":
                f.write(f"| {r['topology']} | {r['flush']} | {r['d']} | | {r['staleness']} | {r['status']} "
                        f"||||||||| {r['load']:.1f} |\n")
                continue
            f.write(f"| {r['topology']} | {r['flush']} | {r['d']} | {r['frame_bytes']} | {r['staleness']} | "
                    f"{r['exch_ms']:.2f} | {r['pred_ms']:.2f} | {100 * r['error']:+.0f} % | "
                    f"{r['msgs']:.0f} ({r['pred_msgs']}) | {r['bytes'] / 1e6:.3f} ({r['pred_bytes'] / 1e6:.3f}) | "
                    f"{r['clock_ms']:.2f} | {r['spread_ms']:.1f} | {100 * r['cpu_busy']:.0f} % | {r['load']:.1f} |\n")
        busy = [r for r in rows if r["status"] == "ok" and r["cpu_busy"] > CPU_BOUND]
        if busy:
            f.write(f"\n{len(busy)} of {len(rows)} runs kept the host's {os.cpu_count()} CPUs over "
                    f"{100 * CPU_BOUND:.0f} % busy: the emulated links and the workers were short of CPU, so "
                    "those times are not the network's alone (the model assumes the CPU keeps up; "
                    "docs/topology.md). Compare on a host with more cores.\n")
    sys.stdout.write(open(os.path.join(a.out, "simcheck.md")).read())
    return 1 if any(r["status"] != "ok" for r in rows) else 0


def int_list(s):
    try:
        v = [int(x) for x in s.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}' is not a comma-separated list of integers")
    if not v or min(v) < 1:
        raise argparse.ArgumentTypeError(f"'{s}': need positive integers")
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sfb", default=os.path.join(ROOT, "build", "src", "cli", "sfb"))
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "bench_transport"),
                    help="bench_transport, for the link calibration")
    ap.add_argument("--cluster", default=os.path.join(ROOT, "scripts", "netns-cluster"))
    ap.add_argument("--out", default=os.path.join("bench-out", "scale"))
    ap.add_argument("--smoke", action="store_true", help="small P and few clocks (a test)")
    ap.add_argument("--local-nodes", type=int_list, default=[2, 4, 8, 16, 32, 64, 128])
    ap.add_argument("--cluster-nodes", type=int_list, default=[4, 8, 16])
    ap.add_argument("--topology", default="full,halton")
    ap.add_argument("--rate", default="100mbit", help="cluster link rate, tc units (default 100mbit)")
    ap.add_argument("--egress", choices=["fair", "fifo"], default="fair",
                    help="the cluster NICs' queueing (scripts/netns-cluster --egress) and the "
                         "simulator's NIC model (sfb topo --nic); default fair")
    ap.add_argument("--clocks", type=int, default=200)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--d", type=int, default=100)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--host-cores", type=int, default=os.cpu_count(),
                    help="cores all workers share, for sfb topo's CPU term (default: this host's)")
    ap.add_argument("--no-local", action="store_true")
    ap.add_argument("--no-cluster", action="store_true")
    ap.add_argument("--sim-check", action="store_true")
    ap.add_argument("--sim-d", type=int_list, default=[1000, 10000],
                    help="--sim-check feature counts D (two frame sizes)")
    a = ap.parse_args()
    if a.smoke:
        a.local_nodes, a.cluster_nodes, a.clocks, a.n = [2, 4], [4], 20, 2000
        if a.topology == "full,halton":
            a.topology = "halton"
    a.topology = a.topology.split(",")
    if a.sim_check and a.topology in (["full", "halton"], ["halton"]):
        a.topology = ["full", "halton", "halton-classic"]
    for exe in (a.sfb, a.bench, a.cluster):
        if not os.access(exe, os.X_OK):
            die(f"{exe} is not an executable (build first)")
    os.makedirs(a.out, exist_ok=True)
    return sim_check(a) if a.sim_check else scale(a)


if __name__ == "__main__":
    sys.exit(main())
