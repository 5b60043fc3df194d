"""sfb.torch's elastic training (sfb.torch.elastic) against one process.

  torch_elastic.py ref OUT.npz
      one process, plain torch: the global minibatches of Batches in order
  torch_elastic.py elastic OUT.npz        (under sfb launch -n P --elastic)
      the same program under sfb.torch.elastic.run; TORCH_ELASTIC_DIE=R:STEP:WHERE
      [,...] makes the process that started as rank R SIGKILL itself at step
      STEP (WHERE: "fwd" before the forward pass, "bwd" inside backward, after
      the output layer's factors left); a restarted copy (SFB_JOINING=1) does
      not. TORCH_ELASTIC_WAIT=W: while the job has fewer than W ranks, each
      step sleeps 1 s first (time for a restarted copy to start and join);
      TORCH_ELASTIC_JOINER_DELAY=S: a restarted copy sleeps S s before it
      asks to join.
      Every process prints "torch_elastic rank R of W was F resets K steps S crc C";
      rank 0 writes the parameters to OUT.npz.
  torch_elastic.py compare REF.npz OUT.npz
      fails unless every parameter agrees within 1e-5 (relative, per tensor)
  torch_elastic.py refusals               (under sfb launch -n 2 --elastic)
      what an elastic job refuses, with the reason

The model (two Linear layers by factors, a LayerNorm densely, a BatchNorm1d
in training mode, Adam) and the data are seeded: every process builds the
same."""
import os
import signal
import sys
import time
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import numpy as np  # noqa: E402
import torch  # noqa: E402

N, DIM, CLASSES, BATCH, EPOCHS = 600, 20, 5, 48, 2


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(DIM, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.l2 = torch.nn.Linear(32, CLASSES)
        self.bn = torch.nn.BatchNorm1d(32)
        self.die_in_backward = False

    def forward(self, x):
        h = self.bn(torch.tanh(self.norm(self.l1(x))))
        if self.die_in_backward:  # after l2's backward: its factors have left
            h.register_hook(lambda g: os.kill(os.getpid(), signal.SIGKILL))
        return self.l2(h)


def data():
    g = torch.Generator()
    g.manual_seed(7)
    x = torch.randn(N, DIM, generator=g)
    w = torch.randn(DIM, CLASSES, generator=g)
    return x, (x @ w).argmax(1)


def build():
    torch.manual_seed(0)
    model = Net()
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def save(path, model):
    d = {n: p.detach().numpy() for n, p in model.named_parameters()}
    # and the BatchNorm's running statistics (a dropped step's forward must
    # not count in them)
    d.update({n: b.detach().numpy().astype(np.float64) for n, b in model.named_buffers()})
    np.savez(path, **d)


def ref(out):
    import sfb.torch as sft
    x, y = data()
    model, opt = build()
    batches = sft.elastic.Batches(N, BATCH, epochs=EPOCHS, seed=3)
    for t in range(len(batches)):
        idx = batches.batch(t)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    save(out, model)


def elastic(out):
    import sfb.torch as sft
    if os.environ.get("SFB_JOINING") == "1":  # a restarted copy starts this much later
        time.sleep(float(os.environ.get("TORCH_ELASTIC_JOINER_DELAY", "0")))
    sft.init()
    started_as = -1 if os.environ.get("SFB_JOINING") == "1" else sft.rank()
    deaths = {}  # step -> where, for this process (TORCH_ELASTIC_DIE=R:STEP:WHERE[,...])
    for d in filter(None, os.environ.get("TORCH_ELASTIC_DIE", "").split(",")):
        r, step, where = d.split(":")
        if int(r) == started_as:
            deaths[int(step)] = where
    wait_for = int(os.environ.get("TORCH_ELASTIC_WAIT", "0"))
    x, y = data()
    model, inner = build()
    opt = sft.DistributedOptimizer(inner, model=model, trial_steps=0)
    batches = sft.elastic.Batches(N, BATCH, epochs=EPOCHS, seed=3)
    state = sft.elastic.State(model, opt, losses=[])
    worlds = []
    state.register_reset_callbacks([lambda: worlds.append(sft.size())])

    @sft.elastic.run
    def train(state):
        for idx in batches.shard(state.optimizer):
            if sft.size() < wait_for:  # a joiner's start takes seconds; steps, ms
                time.sleep(1.0)
            where = deaths.get(opt.clock)
            if where == "fwd":
                os.kill(os.getpid(), signal.SIGKILL)
            model.die_in_backward = where == "bwd"
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            state.losses = state.losses + [float(loss)]
        return opt.clock

    steps = train(state)
    crc = 0
    for _, p in model.named_parameters():
        crc = zlib.crc32(p.detach().numpy().tobytes(), crc)
    print("torch_elastic rank %d of %d was %d resets %d steps %d crc %08x worlds %s" %
          (sft.rank(), sft.size(), started_as, state.resets, steps, crc, worlds), flush=True)
    if sft.rank() == 0:
        save(out, model)
    sft.shutdown()


def compare(a, b):
    ra, rb = np.load(a), np.load(b)
    assert sorted(ra.files) == sorted(rb.files), (ra.files, rb.files)
    worst = 0.0
    for k in ra.files:
        d = np.linalg.norm(ra[k] - rb[k]) / max(np.linalg.norm(ra[k]), 1e-30)
        worst = max(worst, d)
    print("torch_elastic compare: worst relative difference %.3g over %d tensors" %
          (worst, len(ra.files)))
    if not worst <= 1e-5:
        sys.exit("torch_elastic compare: FAILED: %.3g > 1e-5" % worst)


def refusals():
    import sfb
    import sfb.torch as sft
    sft.init()
    model, inner = build()

    def refused(fn, words):
        try:
            fn()
        except sfb.UsageError as e:
            assert all(w in str(e) for w in words), (words, str(e))
            return
        raise AssertionError("not refused: %s" % (words,))

    refused(lambda: sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             model=model, staleness=1), ["staleness 0"])
    refused(lambda: sft.broadcast_parameters(model.state_dict()), ["before", "elastic.run"])
    opt = sft.DistributedOptimizer(inner, model=model)
    x, y = data()
    refused(lambda: torch.nn.functional.cross_entropy(model(x[:8]), y[:8]).backward(),
            ["inside sfb.torch.elastic.run"])
    state = sft.elastic.State(model, opt)
    refused(lambda: sft.elastic.run(lambda s: None)(model), ["elastic.State"])
    refused(lambda: sft.elastic.Batches(10, 0), ["batch_size"])

    @sft.elastic.run
    def train(state):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[:8]), y[:8]).backward()
        opt.step()
        refused(lambda: opt.join().__enter__() or opt._sfb.join_loop(), ["elastic job"])
        return sft.allreduce(torch.tensor([1.0]), op="sum")

    total = train(state)
    assert float(total[0]) == sft.size(), total
    print("torch_elastic refusals ok rank %d" % sft.rank(), flush=True)
    sft.shutdown()


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "ref" and len(sys.argv) == 3:
        ref(sys.argv[2])
    elif mode == "elastic" and len(sys.argv) == 3:
        elastic(sys.argv[2])
    elif mode == "compare" and len(sys.argv) == 4:
        compare(sys.argv[2], sys.argv[3])
    elif mode == "refusals":
        refusals()
    else:
        sys.exit(__doc__)
