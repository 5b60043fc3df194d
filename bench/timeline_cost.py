#!/usr/bin/env python3
"""What recording the training timeline costs sfb.torch, from its parts: the
events a step of a real run recorded (one rank's timeline file) times what
each kind costs, measured here in one process, against that run's step.

A run's samples/s with and without the timeline cannot show a cost of a
few percent on a machine whose runs spread by more (±15 % on a shared
2-core VM); the parts can. Three kinds of event:

  forward span   a leaf module's forward: its two hooks (a forward pre-hook
                 and a forward hook; a module with hooks takes torch's
                 slower call path) and the span they record. Measured as
                 the forward time of 32 small Linear layers with the
                 timeline's hooks against the same without them, rounds
                 alternated, the median difference per layer.
  other span     sfb.torch's own (backward per layer, the pass, reduce,
                 step): time.time() and Job.timeline_span, timed in a loop.
  engine event   the engine's (publish, apply, wait, send, recv ...),
                 recorded in C inside calls the step makes anyway; counted
                 at a span's cost from Python (ctypes included), which is
                 more than they cost: the estimate is an upper bound.

The step is the run's own: the mean interval between its "step" spans.

Usage: bench/timeline_cost.py [--quick] TIMELINE.json...   (e.g. a torch_vs_ddp.py
sfb-timeline run's timeline.0.json; torch_vs_ddp.py's report runs this on
rank 0's file). Needs python3-torch and libsfb (SFB_LIB, as the benches
set it). Prints one line per file; --json FILE also writes the numbers."""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))


def counts(path):
    """Events a step of one rank's timeline: (forward spans, other spans of
    sfb.torch, engine events, steps, mean step ms)."""
    try:
        with open(path) as f:
            ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
        user = [e for e in ev if e["tid"] == 2]
        steps = sorted(e["ts"] + e["dur"] for e in user if e["name"] == "step")
        fwd = sum(1 for e in user if e["name"].startswith("forward "))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise SystemExit("timeline_cost: %s: not a timeline sfb wrote (%s)" % (path, e))
    if len(steps) < 2:
        raise SystemExit("timeline_cost: %s: %d step spans, need 2 or more (a sfb.torch run "
                         "with its timeline on)" % (path, len(steps)))
    n = len(steps)
    return fwd / n, (len(user) - fwd) / n, (len(ev) - len(user)) / n, n, \
        (steps[-1] - steps[0]) / (n - 1) / 1e3


def measure(rounds, passes, k):
    """(a forward span's cost, a span's cost), microseconds, in this process
    (one worker, its timeline to a temporary file): rounds of passes forwards
    each way, k spans."""
    import torch
    import sfb.torch as sft
    tmp = tempfile.mkdtemp(prefix="timeline_cost.")
    for var in ("SFB_RENDEZVOUS", "SFB_JOB_KEY"):  # one worker of its own, whatever launched this
        os.environ.pop(var, None)
    os.environ.update(SFB_RANK="0", SFB_WORLD_SIZE="1")
    try:
        sft.init(timeline=os.path.join(tmp, "t.%r.json"))
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(32)])
        opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model)
        st = opt._sfb  # sfb.torch's state: its timeline's modules and spans
        if not st.timeline or not st.tl_labels:
            raise SystemExit("timeline_cost: sfb.torch recorded no timeline here")
        spans = len(st.tl_labels)  # a span per module (torch's global hooks find them)
        x = torch.randn(4, 8)

        def timeline(on):  # (the global forward hook goes with it)
            st.timeline = on
            if on:
                st._timeline_hooks(model)
            else:
                st.tl_labels.clear()
            sft._capture._intercept(st)

        def per_pass():
            with torch.no_grad():
                t = time.perf_counter()
                for _ in range(passes):
                    model(x)
                return (time.perf_counter() - t) / passes
        diffs = []
        for _ in range(rounds):
            on = per_pass()
            timeline(False)
            off = per_pass()
            timeline(True)
            diffs.append((on - off) / spans)
        t = time.perf_counter()
        for _ in range(k):
            st.span("backward probe", time.time())
        span = (time.perf_counter() - t) / k
        sft.shutdown()
        return max(statistics.median(diffs), 0.0) * 1e6, span * 1e6
    finally:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", metavar="TIMELINE.json")
    ap.add_argument("--json", help="also write the numbers here")
    ap.add_argument("--quick", action="store_true",
                    help="fewer rounds and passes (a smoke test: the numbers rougher)")
    a = ap.parse_args()
    rows = [(p,) + counts(p) for p in a.files]  # (bad files fail before the measuring)
    fwd_us, span_us = measure(*((3, 100, 5000) if a.quick else (7, 300, 20000)))
    out = []
    for path, fwd, other, engine, n, step_ms in rows:
        ms = (fwd * fwd_us + (other + engine) * span_us) / 1e3
        out.append({"file": path, "steps": n, "step_ms": step_ms, "forward_spans": fwd,
                    "other_spans": other, "engine_events": engine, "forward_span_us": fwd_us,
                    "span_us": span_us, "cost_ms": ms, "share": ms / step_ms})
        print("%s: %.1f events a step (%.1f forward spans, %.1f other spans of sfb.torch, %.1f "
              "of the engine) cost at most %.3g ms of its %.4g ms step: **%.2f %%** (a forward "
              "span %.2f us with its hooks, a span %.2f us; %d steps)" % (
                  os.path.basename(path), fwd + other + engine, fwd, other, engine, ms, step_ms,
                  100 * ms / step_ms, fwd_us, span_us, n), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
