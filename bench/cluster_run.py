"""Runs one command per worker on the emulated cluster (scripts/netns-cluster
--exec) and collects what each worker printed as "RESULT {json}"."""
import json
import os
import subprocess
import sys


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
