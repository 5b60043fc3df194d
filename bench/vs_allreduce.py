#!/usr/bin/env python3
"""SFB against data-parallel SGD with a dense MPI_Allreduce, in the same run.

Both train MLR on the same synth: data with the same shapes, sharding, order
and step rule (bench/allreduce_mlr.c reconstructs its SFs into a dense ΔA and
sums the P ΔAs with Open MPI's MPI_Allreduce). Both run on the emulated
cluster (scripts/netns-cluster, shaped links): sfb over the libfabric tcp
provider, the MPI ranks one per namespace, started by mpirun through an rsh
agent that enters the namespace of each host address (Open MPI tcp BTL
restricted to the cluster's subnet). If that cannot start, the MPI job runs
on loopback (unshaped) and the output says so.

Prints samples/s, bytes per clock and wait fraction of both, the SFB/allreduce
ratio, and the break-even rule S·P < 2KD/(K+D) (SFB sends S·(K+D) values to
each of P−1 peers, a ring all-reduce about 2·K·D values per worker) evaluated
for the shapes.

Usage: bench/vs_allreduce.py [--smoke] [--k K] [--d D] [--batch S] [--workers P]
         [--clocks C] [--rate R] [--out DIR] [--allreduce PATH] ...
Needs root for the namespaces (exits 77 otherwise) and mpirun.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sfb_vs_fms as common  # noqa: E402

AGENT = """#!/bin/sh
# Open MPI rsh agent for the emulated cluster: "host command..." runs the
# command in the namespace that owns the host address 10.77.0.(r+1).
while [ "${1#-}" != "$1" ]; do shift; done
host=$1; shift
r=$(( ${host##*.} - 1 ))
d="$SFB_ORTED_TMP-$r"; mkdir -p "$d"
exec ip netns exec "$SFB_NS_PREFIX-$r" env OMPI_MCA_orte_tmpdir_base="$d" sh -c "$*"
"""


def mpi_args(a, hosts):
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(a.workers),
            "--mca", "btl", "self,tcp", "--mca", "pml", "ob1"] + hosts + \
        [a.allreduce, common.synth_spec(a), str(a.batch), str(a.clocks), str(a.lr)]


def parse(out):
    for line in out.splitlines():
        if line.startswith("{") and '"samples_per_s"' in line:
            return json.loads(line)
    return None


def run_mpi_netns(a, out):
    """mpirun inside the emulated cluster; returns (result, None) or (None, why)."""
    os.makedirs(out, exist_ok=True)
    agent = os.path.join(os.path.abspath(out), "netns-agent.sh")
    with open(agent, "w") as f:
        f.write(AGENT)
    os.chmod(agent, 0o755)
    cmd = [a.cluster, "-n", str(a.workers), "--rate", a.rate, "--setup-only",
           "--out-dir", out]
    if a.delay:
        cmd += ["--delay", a.delay]
    cl = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        ns = []
        for line in cl.stdout:
            m = re.search(r"ip netns exec (\S+)", line)
            if m:
                ns.append(m.group(1))
            if "up;" in line:
                break
        if len(ns) != a.workers:
            return None, "the emulated cluster did not come up"
        prefix = ns[0].rsplit("-", 1)[0]
        tmp = f"/tmp/sfb-orted-{prefix}"
        env = dict(os.environ, SFB_NS_PREFIX=prefix, SFB_ORTED_TMP=tmp,
                   OMPI_MCA_orte_tmpdir_base=tmp + "-0")
        os.makedirs(tmp + "-0", exist_ok=True)
        hosts = ["--host", ",".join(f"10.77.0.{r + 1}" for r in range(a.workers)),
                 "--mca", "plm_rsh_agent", agent,
                 "--mca", "btl_tcp_if_include", "10.77.0.0/24",
                 "--mca", "oob_tcp_if_include", "10.77.0.0/24"]
        try:
            p = subprocess.run(["ip", "netns", "exec", ns[0]] + mpi_args(a, hosts), env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=900)
        except subprocess.TimeoutExpired:
            return None, "mpirun timed out"
        finally:
            for r in range(a.workers):
                shutil.rmtree(f"{tmp}-{r}", ignore_errors=True)
        res = parse(p.stdout)
        if p.returncode != 0 or res is None:
            return None, "mpirun in the namespaces failed:\n" + p.stdout[-1500:]
        return res, None
    finally:
        cl.send_signal(signal.SIGTERM)
        try:
            cl.wait(timeout=30)
        except subprocess.TimeoutExpired:
            cl.kill()


def run_mpi_loopback(a):
    p = subprocess.run(mpi_args(a, []), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=900)
    res = parse(p.stdout)
    if p.returncode != 0 or res is None:
        print(p.stdout[-1500:])
        return None
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common.add_common_args(ap, 30)
    ap.add_argument("--out", default="bench-out/vs_allreduce")
    ap.add_argument("--allreduce", default=os.path.join(common.ROOT, "build", "bench",
                                                         "allreduce_mlr"))
    a = ap.parse_args()
    if a.smoke:
        common.smoke_shapes(a)
    if os.geteuid() != 0:
        print("vs_allreduce: SKIP: needs root for network namespaces")
        return 77
    if not shutil.which("mpirun") or not os.access(a.allreduce, os.X_OK):
        print("vs_allreduce: SKIP: needs mpirun and " + a.allreduce)
        return 77
    sfb, rc = common.run_mode(a, "sfb")
    if sfb:  # the allreduce baseline reports whole runs: compare like with like
        sfb["samples_per_s"] = sfb["samples_per_s_whole_run"]
    if rc:
        return rc
    t0 = time.time()
    mpi, why = run_mpi_netns(a, os.path.join(a.out, "mpi-cluster"))
    where = f"emulated cluster ({a.rate} links, one rank per namespace)"
    if mpi is None:
        print(f"vs_allreduce: NOTE: {why}\nvs_allreduce: NOTE: running MPI on loopback "
              "instead (unshaped links: the comparison favours MPI)")
        where = "LOOPBACK (unshaped)"
        mpi = run_mpi_loopback(a)
        if mpi is None:
            print("vs_allreduce: the MPI run failed")
            return 1
    mpi["run_s"] = time.time() - t0
    K, D, S, P = a.k, a.d, a.batch, a.workers
    print(f"sfb vs MPI_Allreduce: MLR K={K} D={D} S={S} P={P}, {a.clocks} clocks, "
          f"links {a.rate}, s=0, {os.cpu_count()} cores; MPI on the {where}")
    print(f"{'':24}{'sfb':>14}{'allreduce':>14}{'sfb/ar':>10}")
    for name, key, fmt in (("samples/s", "samples_per_s", ".1f"),
                           ("bytes/clock/worker (1)", "bytes_per_clock", ".4g"),
                           ("wait fraction", "wait_fraction", ".3f"),
                           ("final objective", "final_objective", ".5f")):
        x, y = sfb[key], mpi[key]
        r = f"{x / y:.2f}" if key in ("samples_per_s", "bytes_per_clock") and y else ""
        print(f"{name:24}{format(x, fmt):>14}{format(y, fmt):>14}{r:>10}")
    print("(1) sfb: measured; allreduce: 2(P-1)/P·K·D·4, the ring algorithm's volume")
    ratio = sfb["samples_per_s"] / mpi["samples_per_s"]
    be = 2.0 * K * D / (K + D)
    print(f"SFB/allreduce samples/s ratio: {ratio:.2f}")
    print(f"break-even rule S·P < 2KD/(K+D): {S}·{P} = {S * P} "
          f"{'<' if S * P < be else '>='} {be:.1f}: SFB should "
          f"{'send less' if S * P < be else 'send more'} "
          f"(bytes ratio by formula {S * P * (K + D) / (2 * K * D):.3f}"
          f", measured {sfb['bytes_per_clock'] / mpi['bytes_per_clock']:.3f})")
    same = abs(sfb["final_objective"] - mpi["final_objective"]) <= \
        1e-3 * max(1.0, abs(mpi["final_objective"]))
    print(f"same objective per sample: {'yes' if same else 'NO'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"settings": vars(a), "mpi_where": where,
                       "sfb": {k: v for k, v in sfb.items() if k not in ("smooth", "clock_wall")},
                       "allreduce": mpi}, f, indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
