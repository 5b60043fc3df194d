"""sfb.torch across the ranks of a job (run under `sfb launch -n P`). Each
argument is a case, "MODE [options]", run in order in a job of its own; each
prints "ok MODE ..." on success, else the script exits non-zero. Modes:

exact: every rank trains a model through sfb.torch on its share of each
  global batch, and alongside it a reference copy with the plain optimizer
  on the whole global batch (what one process would do); after --steps the
  parameters must agree within float32 rounding (max |a - b| / max |b| per
  tensor <= --tol). --model: "kinds" (Linear with and without bias, a layer
  called twice, 3-D inputs, embedding, conv, norm: the dense engine),
  "mlp12" (12 Linear layers, sync auto, the plan checked), "deep" (128
  Linear layers: 256 parameter tensors), "attn" (nn.TransformerEncoder:
  MultiheadAttention's fused in_proj_weight and out_proj, which it calls
  through F.linear; a user module calling F.linear on its own parameters,
  one weight twice in a forward: every one by factors, the plan checked),
  "seq2seq" (nn.Transformer, encoder and decoder: cross-attention splits
  in_proj_weight into row ranges, each by factors into the one matrix),
  "lm" (an embedding tied to the decoder: sparse rows and factors into one
  .grad; padding_idx, max_norm, EmbeddingBag), "sparse" (sparse=True tables
  and a head: SGD, or SparseAdam over the tables, which updates exactly
  the rows touched, beside Adam over the head, two DistributedOptimizers
  over one model), "lstm"
  (a 2-layer LSTM language model with tied weights), "recur" (bidirectional
  GRU, RNN without bias, GRUCell and LSTMCell), "conv" (1-D and 2-D
  convolutions whose factors pay, and one whose factors do not: dense, the
  plan saying why): each matrix of its own in the plan, the tables as
  sparse rows.
ckpt: trains --steps steps from scratch or --resume FILE, saving model and
  optimizer to --save FILE and the parameters to --out FILE (rank 0).
ssp: plain SGD at --staleness; after the last step every replica (drained)
  must agree, and the loss must have fallen.
shapes: rank 1 builds a wider layer: every rank must fail at the first step
  naming the layer.
init: rank 1 starts from other parameters and skips broadcast_parameters:
  every rank must fail naming broadcast_parameters.
kill: rank --victim exits abruptly in step 5: every other rank must fail
  naming it.
flip: as exact, with --check-every and --debug-flip RANK:STEP:... (the
  optimizer is built under SFB_DEBUG_FLIP=that): one bit of one rank's
  tensor flipped before a check, one repair, then every rank ends as one
  process would.
lowp: as exact with --factor-dtype (bf16): the ranks must end bit-identical
  (a checksum of every parameter compared), the loss over the data set
  within --tol (relative) of one float32 process's, the parameters apart
  from it by more than float32 rounding (the factors were rounded), and the
  plan must say "bf16 factors" for every layer by factors."""
import argparse
import copy
import os
import sys

import numpy as np

try:
    import torch
    import torch.nn as nn
except ImportError:
    print("skipped: no torch (install python3-torch)", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "python"))
import sfb  # noqa: E402
import sfb.torch as sft  # noqa: E402
from sfb.torch import _autoplan  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("mode", choices=["exact", "ckpt", "ssp", "shapes", "init", "kill", "flip",
                                 "lowp", "place"])
ap.add_argument("--model", default="kinds", choices=["kinds", "mlp12", "deep", "mlp", "attn",
                                                     "seq2seq", "lm", "sparse", "lstm", "recur",
                                                     "conv"])
ap.add_argument("--opt", default="sgd", choices=["sgd", "momentum", "adam", "sparseadam"])
ap.add_argument("--sync", default="auto")
ap.add_argument("--cpu-bind", default=None, choices=["auto", "none", "cpu"])
ap.add_argument("--steps", type=int, default=50)
ap.add_argument("--passes", type=int, default=1, help="backward_passes_per_step")
ap.add_argument("--global-batch", type=int, default=16)
ap.add_argument("--staleness", type=int, default=0)
ap.add_argument("--tol", type=float, default=1e-5)
ap.add_argument("--except", dest="skip", default=None,
                help="tensors whose name holds this are not compared (see torch.sh)")
ap.add_argument("--overlap", type=int, default=1)
ap.add_argument("--victim", type=int, default=2)
ap.add_argument("--check-every", type=int, default=100)
ap.add_argument("--debug-flip", default="", help="flip: SFB_DEBUG_FLIP for this case's optimizer")
ap.add_argument("--factor-dtype", default="f32", choices=["f32", "bf16"])
ap.add_argument("--autocast", action="store_true",
                help="forwards under torch.autocast(\"cpu\", bfloat16), in both trainings")
ap.add_argument("--trial-steps", type=int, default=None,
                help="sync auto measures every layer's two engines, this many steps each")
ap.add_argument("--penalty", action="store_true",
                help="an L2 penalty on every weight in the loss (dense gradients besides factors)")
ap.add_argument("--save")
ap.add_argument("--resume")
ap.add_argument("--out")
args = None  # the case being run (main)

SEQ, VOCAB, CLASSES = 6, 20, 5


class Kinds(nn.Module):
    """Every kind of layer sfb.torch meets: factors for the Linear ones
    (a 3-D input, no bias, one called twice), dense for the rest. Smooth
    activations: a ReLU turns a float32 rounding difference into a jump when
    a unit crosses zero (a 1e-7 perturbation moved norm.bias by 6.7e-4 after
    50 steps on another CPU), and this test compares to rounding."""

    def __init__(self, wide=0):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 8)
        self.conv = nn.Conv1d(8, 8, 3, padding=1)
        self.norm = nn.LayerNorm(8)
        self.fc1 = nn.Linear(8, 32 + wide)
        self.shared = nn.Linear(32 + wide, 32 + wide)
        self.nobias = nn.Linear(32 + wide, 16, bias=False)
        self.head = nn.Linear(16, CLASSES)

    def forward(self, tok):
        h = self.emb(tok)
        h = self.conv(h.transpose(1, 2)).transpose(1, 2)
        h = torch.tanh(self.fc1(self.norm(h)))         # B x T x 32: samples B*T
        h = torch.tanh(self.shared(torch.tanh(self.shared(h))))  # called twice
        return self.head(torch.tanh(self.nobias(h)).mean(1))


class Mix(nn.Module):
    """A user's layer: F.linear on its own parameters, one weight twice."""

    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.randn(d, d) / d ** 0.5)
        self.b = nn.Parameter(torch.zeros(d))

    def forward(self, h):
        h = torch.tanh(nn.functional.linear(h, self.w, self.b))
        return torch.tanh(nn.functional.linear(h, self.w, self.b))


class Attn(nn.Module):
    """A small transformer encoder (GELU, no dropout: smooth, deterministic)."""

    def __init__(self, d=16):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        layer = nn.TransformerEncoderLayer(d, 2, dim_feedforward=32, dropout=0.0,
                                           activation="gelu", batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.mix = Mix(d)
        self.head = nn.Linear(d, CLASSES)

    def forward(self, tok):
        return self.head(self.mix(self.enc(self.emb(tok))).mean(1))


class Seq2Seq(nn.Module):
    """nn.Transformer: the decoder's cross-attention projects the memory with
    rows E.. of in_proj_weight and the target with rows ..E."""

    def __init__(self, d=16):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        self.tr = nn.Transformer(d, 2, num_encoder_layers=1, num_decoder_layers=1,
                                 dim_feedforward=32, dropout=0.0, activation="gelu",
                                 batch_first=True)
        self.head = nn.Linear(d, CLASSES)

    def forward(self, tok):
        e = self.emb(tok)
        return self.head(self.tr(e, e[:, :3]).mean(1))


class TiedLM(nn.Module):
    """A next-token model whose embedding is its decoder's weight (tied: the
    lookups' sparse rows and the decoder's factors into one .grad), with
    padding_idx, a max_norm table and an EmbeddingBag of the context."""

    def __init__(self, d=16):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d, padding_idx=0)
        self.pos = nn.Embedding(SEQ, d, max_norm=1.0)
        self.bag = nn.EmbeddingBag(VOCAB, d, mode="mean")
        self.mid = nn.Linear(d, d)
        self.dec = nn.Linear(d, VOCAB)
        self.dec.weight = self.emb.weight

    def forward(self, tok):
        B, T = tok.shape
        h = self.emb(tok) + self.pos(torch.arange(T)).unsqueeze(0) + self.bag(tok).unsqueeze(1)
        return self.dec(torch.tanh(self.mid(h)))  # B x T x VOCAB


class Sparse(nn.Module):
    """Tables with sparse=True (SparseAdam takes nothing else: --opt
    sparseadam gives the head an Adam of its own): a padding_idx, a bag of
    weighted ids."""

    def __init__(self, d=8):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d, padding_idx=3, sparse=True)
        self.bag = nn.EmbeddingBag(VOCAB, d, mode="sum", sparse=True)
        self.head = nn.Linear(d, CLASSES)

    def forward(self, tok):
        w = (tok.float() + 1) / VOCAB  # per-sample weights from the ids
        h = self.emb(tok).mean(1) + self.bag(tok, per_sample_weights=w)
        return self.head(torch.tanh(h))


class LSTMLM(nn.Module):
    """A word-level LSTM language model, its embedding tied to the decoder."""

    def __init__(self, d=16):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        self.rnn = nn.LSTM(d, d, num_layers=2, batch_first=True)
        self.dec = nn.Linear(d, VOCAB)
        self.dec.weight = self.emb.weight

    def forward(self, tok):
        out, _ = self.rnn(self.emb(tok))
        return self.dec(out)


class Recur(nn.Module):
    """A bidirectional GRU (sequence first), a tanh RNN and a GRUCell and an
    LSTMCell stepped by hand."""

    def __init__(self, d=8, h=12):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        self.gru = nn.GRU(d, h, bidirectional=True)
        self.rnn = nn.RNN(2 * h, h, bias=False)
        self.cell = nn.GRUCell(h, h)
        self.lcell = nn.LSTMCell(h, h)
        self.head = nn.Linear(h, CLASSES)

    def forward(self, tok):
        x = self.emb(tok).transpose(0, 1)  # T x B x d
        x, _ = self.gru(x)
        x, _ = self.rnn(x)
        h = torch.zeros(x.shape[1], x.shape[2])
        c = torch.zeros_like(h)
        for t in range(x.shape[0]):
            h = self.cell(x[t], h)
            h, c = self.lcell(h, (h, c))
        return self.head(h)


class Convs(nn.Module):
    """Convolutions whose factors pay (few output positions, wide channels:
    1-D and 2-D, one without bias) and one whose factors do not (dense)."""

    def __init__(self):
        super().__init__()
        self.small = nn.Conv1d(8, 8, 3, padding=1)        # 5 positions a sample: dense
        self.wide1 = nn.Conv1d(8, 48, 5)                  # 1 position: factors
        self.wide2 = nn.Conv2d(12, 64, 3, padding=1, bias=False)  # 2 x 2: factors
        self.head = nn.Linear(64, CLASSES)

    def forward(self, x):
        h = torch.tanh(self.small(x.view(-1, 8, 5)))
        h = torch.tanh(self.wide1(h)).view(-1, 12, 2, 2)
        return self.head(torch.tanh(self.wide2(h)).mean((2, 3)))


def mlp(widths):
    layers = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(a, b), nn.Tanh()]
    return nn.Sequential(*layers[:-1])


def model_and_data(seed=7):
    torch.manual_seed(seed)
    if args.model == "kinds":
        m = Kinds(wide=8 if args.mode == "shapes" and sft.rank() == 1 else 0)
        x = torch.randint(0, VOCAB, (4096, SEQ))
    elif args.model in ("attn", "seq2seq", "lm", "sparse", "lstm", "recur"):
        m = {"attn": Attn, "seq2seq": Seq2Seq, "lm": TiedLM, "sparse": Sparse, "lstm": LSTMLM,
             "recur": Recur}[args.model]()
        x = torch.randint(0, VOCAB, (4096, SEQ))
    elif args.model == "conv":
        m = Convs()
        x = torch.randn(4096, 40)
    elif args.model == "mlp12":
        m = mlp([20] + [48] * 11 + [CLASSES])
        x = torch.randn(4096, 20)
    elif args.model == "deep":
        m = mlp([20] + [12] * 127 + [CLASSES])  # 128 Linear layers, 256 tensors
        x = torch.randn(4096, 20)
    else:
        m = mlp([20, 64, 64, CLASSES])
        x = torch.randn(4096, 20)
    if args.model in ("lm", "lstm"):  # the next token (the last position: the first)
        y = torch.roll(x, -1, 1)
    elif x.dtype == torch.float32:  # a teacher: labels a model can learn
        y = (x @ torch.randn(x.shape[1], CLASSES)).argmax(1)
    else:
        y = (x[:, 0] + x[:, -1]) % CLASSES
    return m, x, y


def make_opts(model):
    """The model's optimizers: one, or with --opt sparseadam SparseAdam over
    the sparse tables beside Adam over the rest (as a recommender writes it:
    two DistributedOptimizers over one model)."""
    if args.opt != "sparseadam":
        return [make_opt(model.parameters())]
    tables = {id(p) for m in model.modules()
              if isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and m.sparse
              for p in m.parameters()}
    rest = [p for p in model.parameters() if id(p) not in tables]
    return [torch.optim.SparseAdam([p for p in model.parameters() if id(p) in tables], lr=0.01)
            ] + ([torch.optim.Adam(rest, lr=0.01)] if rest else [])


def make_opt(params):
    if args.opt == "adam":
        return torch.optim.Adam(params, lr=0.01)
    if args.opt == "momentum":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-4)
    return torch.optim.SGD(params, lr=0.1)


def batch(x, y, step, part, parts):
    """Rows of global batch `step` that share `part` of `parts` takes."""
    g = args.global_batch
    lo = (step * g) % (len(x) - g + 1)
    n = g // parts
    return x[lo + part * n:lo + (part + 1) * n], y[lo + part * n:lo + (part + 1) * n]


def rel_diff(a, b):
    """The largest relative difference ||p - q|| / ||q|| over the tensors."""
    worst, where = 0.0, ""
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        if args.skip and args.skip in n:
            continue
        p, q = p.detach().double(), q.detach().double()
        d = float((p - q).norm() / max(float(q.norm()), 1e-30))
        if d > worst:
            worst, where = d, n
    return worst, where


def ce(out, y):
    """Cross-entropy of logits (B x C, or B x T x C for a next-token model)."""
    return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def forward(model, xb):
    """The model's output, under autocast with --autocast (the loss in float32)."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
        out = model(xb)
    return out.float()


def autocast_ops(model, x):
    """Under autocast each recurrent layer computes as torch's operator
    does (its matrix products in bfloat16; 1.13's LSTM and GRU return
    float32, the tanh RNN bfloat16): the recurrence sfb.torch writes with
    F.linear (gradients on) against torch's operator (no_grad) on the
    inputs each layer sees, in dtype and value (the same operations in the
    same order: float32 rounding at most)."""
    seen = []
    hooks = [m.register_forward_pre_hook(lambda m, inp: seen.append((m, inp)))
             for m in model.modules() if isinstance(m, (nn.RNNBase, nn.RNNCellBase))]
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        model(x)
    for h in hooks:
        h.remove()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for m, inp in seen:
            with torch.no_grad():
                want = m(*inp)
            got = m(*inp)
            want, got = (o[0] if isinstance(o, tuple) else o for o in (want, got))
            d = float((got.detach().double() - want.double()).norm() /
                      max(float(want.double().norm()), 1e-30))
            if got.dtype != want.dtype or d > 1e-5:
                fail("under autocast %s computes in %s (%.3g from torch's), torch's operator "
                     "in %s" % (type(m).__name__, got.dtype, d, want.dtype))


def penalty(model):
    """--penalty: an L2 penalty on every weight matrix (and table, and
    convolution) in the loss: dense gradients besides the factors."""
    if not args.penalty:
        return 0.0
    return 1e-3 * sum(p.pow(2).sum() for p in model.parameters() if p.dim() >= 2)


def full_loss(model, x, y):
    with torch.no_grad():
        return float(ce(model(x), y))


def train(model, opt, x, y, steps, start=0):
    loss_fn = ce
    P, r, k = sft.size(), sft.rank(), args.passes
    first = full_loss(model, x, y)
    for t in range(start, steps):
        for o in [opt] + EXTRA:
            o.zero_grad()
        for j in range(k):  # k passes: rank r's share of each k-th of the global batch
            xb, yb = batch(x, y, t, j * P + r, k * P)
            loss = loss_fn(forward(model, xb), yb) + penalty(model)
            loss.backward()
        for o in [opt] + EXTRA:
            o.step()
    return first, full_loss(model, x, y)


def reference(model, x, y, steps):
    loss_fn = ce
    opts = make_opts(model)
    full_loss(model, x, y)  # as train() does (a max_norm table renormalizes in a forward)
    for t in range(steps):
        for o in opts:
            o.zero_grad()
        for j in range(args.passes):
            xb, yb = batch(x, y, t, j, args.passes)
            (loss_fn(forward(model, xb), yb) + penalty(model)).backward()
        for o in opts:
            o.step()
    full_loss(model, x, y)  # as train() ends (a max_norm table's rows renormalized)


RANK = [None]
EXTRA = []  # the model's other DistributedOptimizers (--opt sparseadam: the dense parts')


def fail(msg):
    print("FAIL rank %s: %s" % (RANK[0], msg), flush=True)
    sys.exit(1)


def closed():
    """Leaves a job that failed on purpose (the next case makes a new one)."""
    try:
        sft.shutdown()
    except Exception:
        pass


def place():
    """sfb.torch leaves its threads where the launcher put them (more ranks
    on the host than CPUs, where sfb.Job's cpu_bind="auto" binds); asked
    with cpu_bind="cpu", each rank is bound to one CPU."""
    before = os.sched_getaffinity(0)
    sft.init(peer_timeout_s=3, **({} if args.cpu_bind is None else {"cpu_bind": args.cpu_bind}))
    RANK[0] = sft.rank()
    after = os.sched_getaffinity(0)
    sft.shutdown()
    if args.cpu_bind is None and after != before:
        fail("sft.init() bound the process: CPUs %s, were %s" % (sorted(after), sorted(before)))
    if args.cpu_bind == "cpu" and len(after) != 1:
        fail("sft.init(cpu_bind=\"cpu\"): CPUs %s, expected one" % sorted(after))
    print("ok place %s: CPUs %s of %s" % (args.cpu_bind, sorted(after), sorted(before)),
          flush=True)


def case():
    if args.mode == "place":
        return place()
    sft.init(peer_timeout_s=3)
    P, r = sft.size(), sft.rank()
    RANK[0] = r
    model, x, y = model_and_data()
    if args.mode == "init" and r == 1:
        with torch.no_grad():
            next(model.parameters()).add_(1.0)
    elif args.mode not in ("init", "shapes"):  # those two skip it: the first step must tell
        sft.broadcast_parameters(model.state_dict(), root_rank=0)
    ref = copy.deepcopy(model)
    if args.mode == "flip":  # (read as the optimizer is built: this case's only)
        os.environ["SFB_DEBUG_FLIP"] = args.debug_flip
    try:
        opts = [sft.DistributedOptimizer(o, model=model, sync=args.sync,
                                         staleness=args.staleness,
                                         backward_passes_per_step=args.passes,
                                         overlap=bool(args.overlap),
                                         check_every=args.check_every,
                                         factor_dtype=args.factor_dtype,
                                         **({} if args.trial_steps is None else
                                            {"trial_steps": args.trial_steps}))
                for o in make_opts(model)]
        opt, EXTRA[:] = opts[0], opts[1:]
    finally:
        os.environ.pop("SFB_DEBUG_FLIP", None)
    if args.trial_steps:
        opt._sfb.trial_all = True  # whatever the predictions: replans mid-run
    if args.mode in ("shapes", "init"):
        try:
            train(model, opt, x, y, 1)
        except sfb.Error as e:
            want = "fc1" if args.mode == "shapes" else "broadcast_parameters"
            if want not in str(e):
                fail("the error does not name %s: %s" % (want, e))
            if not isinstance(e, sfb.MismatchError):
                fail("expected an sfb.MismatchError, got %s" % type(e).__name__)
            print("ok %s: %s" % (args.mode, e), flush=True)
            return closed()
        fail("no error")
    if args.mode == "kill":
        try:
            for t in range(20):
                if t == 5 and r == args.victim:
                    os._exit(0)  # gone without a word: the peers must notice
                train(model, opt, x, y, t + 1, start=t)
        except sfb.Error as e:
            if "rank %d" % args.victim not in str(e):
                fail("the error does not name rank %d: %s" % (args.victim, e))
            if not isinstance(e, sfb.PeerError) or e.rank != args.victim or "join()" not in str(e):
                fail("expected an sfb.PeerError of rank %d suggesting join(), got %s (rank %s)" %
                     (args.victim, type(e).__name__, e.rank))
            print("ok kill: %s" % e, flush=True)
            return closed()
        fail("no error")
    if args.mode == "ckpt":
        start = 0
        if args.resume:
            state = torch.load(args.resume)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            start = opt.clock
        train(model, opt, x, y, args.steps, start=start)
        sft.shutdown()
        if r == 0:
            if args.save:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()},
                           args.save)
            if args.out:
                torch.save(model.state_dict(), args.out)
        print("ok ckpt: clock %d" % opt.clock, flush=True)
        return
    if args.autocast:
        autocast_ops(model, x[:4])
    first, last = train(model, opt, x, y, args.steps)
    if r == 0 and args.model not in ("kinds", "deep", "mlp"):
        print("plan:\n" + opt.plan, flush=True)
    if args.mode == "ssp":
        s = opt._sfb
        s.job.drain(s.clock - 1)
        s.job.barrier()
        mine = np.array([float(p.detach().double().sum()) for p in model.parameters()])
        everyone = [np.frombuffer(b, np.float64) for b in s.job.allgather(mine.tobytes())]
        worst = max(float(np.abs(e - mine).max() / max(np.abs(mine).max(), 1e-12))
                    for e in everyone)
        sft.shutdown()
        if worst > args.tol:
            fail("replicas differ by %.3g after the drain" % worst)
        if not last < 0.95 * first:
            fail("the loss over the data set %.4f -> %.4f did not fall by 5 %%" % (first, last))
        print("ok ssp: replicas agree to %.2g, loss %.4f -> %.4f" % (worst, first, last),
              flush=True)
        return
    if args.mode == "lowp":
        import zlib
        s = opt._sfb
        crc = 0
        for p in model.parameters():
            crc = zlib.crc32(p.detach().contiguous().numpy().tobytes(), crc)
        crcs = [int(np.frombuffer(b, np.uint32)[0])
                for b in s.job.allgather(np.array([crc], np.uint32).tobytes())]
        sft.shutdown()
        if len(set(crcs)) != 1:
            fail("the ranks' parameters differ: checksums %s" % ["%08x" % c for c in crcs])
        reference(ref, x, y, args.steps)
        want = full_loss(ref, x, y)
        worst, where = rel_diff(model, ref)
        if not abs(last - want) <= args.tol * want:
            fail("loss %.6f, one float32 process's %.6f: beyond %g relative" %
                 (last, want, args.tol))
        if worst <= 1e-5:
            fail("the parameters equal one float32 process's (%.3g): were the factors rounded?"
                 % worst)
        lines = [line for line in opt.plan.splitlines() if line.split(": ")[1].startswith("sfb")]
        if not lines or any("bf16 factors" not in line for line in lines):
            fail("the plan does not say bf16 factors for every layer by factors:\n" + opt.plan)
        print("ok lowp %s: %d ranks identical (%08x), loss %.6f vs float32 %.6f, parameters "
              "%.3g apart (%s)" % (args.factor_dtype, P, crc, last, want, worst, where),
              flush=True)
        return
    st = sft.stats()
    sft.shutdown()
    if args.mode == "flip":  # (--debug-flip: one tensor of one rank)
        # (a step's checks run in the next reduction: the last step's in
        # shutdown's, after the stats)
        want = (args.steps // args.check_every, 1)
        got = (st["replica_checks"], st["replicas_repaired"])
        if got != (want[0] - (args.steps % args.check_every == 0), want[1]) or \
                opt._sfb.replicas.checks != want[0]:
            fail("replica checks, repairs: %s (%d after shutdown), expected %s" %
                 (got, opt._sfb.replicas.checks, want))
    reference(ref, x, y, args.steps)
    worst, where = rel_diff(model, ref)
    if worst > args.tol:
        fail("%s differs from one process's by %.3g (relative)" % (where, worst))
    if args.model == "mlp12" and len(opt.plan.splitlines()) != 12:
        fail("the plan has %d lines, not one per matrix:\n%s" %
             (len(opt.plan.splitlines()), opt.plan))
    if args.trial_steps:  # every layer measured both ways, the faster kept (or,
        for line in opt.plan.splitlines():  # within the noise, the cost model's choice)
            untold = line.endswith("; within the noise, kept)")
            got = line.split("measured a step: ")[-1].rstrip(")").split("; ")[0].split(", ")
            if "measured a step: " not in line or len(got) != 2:
                fail("the plan does not show both engines' measured steps:\n" + opt.plan)
            pred = _autoplan._PRED.search(line)  # the cost model's two predictions
            kept = line.split(": ")[1].split()[0]
            if not untold and kept != got[0].split(" by ")[1]:
                fail("a layer kept the slower engine:\n" + opt.plan)
            # (two predictions equal as printed, 3 digits: either may be the model's choice)
            if untold and (not pred or float(pred.group(1)) != float(pred.group(2)) and
                           kept != ("sfb" if float(pred.group(1)) < float(pred.group(2))
                                    else "fms")):
                fail("a layer within the noise left the cost model's choice:\n" + opt.plan)
        if opt._sfb.trials.replans < 2:
            fail("%d replans: the trials did not run" % opt._sfb.trials.replans)
    if args.penalty:  # every weight also used densely in the first step: all densely
        lines = opt.plan.splitlines()
        if not lines or any(": dense (" not in line and not line.startswith("dense (")
                            for line in lines):
            fail("a matrix with a penalty did not go densely:\n" + opt.plan)
    elif args.model in ("attn", "seq2seq", "lm", "sparse", "lstm", "recur", "conv"):
        engines = ("sfb", "fms")
        if args.model == "lm":  # tied: the decoder's factors and the lookups' rows
            want = ["dec", "emb.weight (%dx16, sparse rows)" % VOCAB, "pos.weight", "bag.weight"]
        elif args.model == "sparse":
            want = ["emb.weight (%dx8, sparse rows)" % VOCAB, "bag.weight"]
        elif args.model == "lstm":
            want = ["dec", "emb.weight"] + ["rnn.weight_%s_l%d" % (k, i) for i in range(2)
                                            for k in ("ih", "hh")]
        elif args.model == "conv":
            want = ["wide1.weight (48x40+bias, conv 5)", "wide2.weight (64x108, conv 3x3)",
                    "small.weight (8x24, conv 3): dense (factors of 20 samples"]
            engines = ("sfb", "fms", "dense")
        elif args.model == "recur":
            want = ["gru.weight_%s_l0%s" % (k, r) for k in ("ih", "hh") for r in ("", "_reverse")]
            want += ["rnn.weight_ih_l0", "rnn.weight_hh_l0", "cell.weight_ih", "cell.weight_hh",
                     "lcell.weight_ih", "lcell.weight_hh", "head", "emb.weight"]
        elif args.model == "attn":
            want = ["enc.layers.%d.%s" % (i, n) for i in range(2) for n in
                    ("self_attn.in_proj_weight", "self_attn.out_proj", "linear1", "linear2")]
            want += ["mix.w", "head"]
        else:
            want = ["tr.encoder.layers.0.self_attn.in_proj_weight",
                    "tr.decoder.layers.0.self_attn.in_proj_weight",
                    "tr.decoder.layers.0.multihead_attn.in_proj_weight",
                    "tr.decoder.layers.0.multihead_attn.out_proj", "head"]
        lines = opt.plan.splitlines()
        engines = ("sfb",) if args.sync == "sfb" else engines
        for w in want:  # a matrix of its own (not in the dense one), by factors if forced
            if not any(line.startswith(w if w[-1] in ")s" else w + " (") and
                       line.split(": ")[1].split()[0] in engines
                       for line in lines):
                fail("the plan has no matrix %s (by %s):\n%s" % (w, "/".join(engines),
                                                                  opt.plan))
    if args.sync == "fms" and args.model in ("lstm", "recur"):
        # every recurrent matrix goes by FMS: torch's fused operator formed
        # their dense gradients (not the recurrence written with F.linear)
        rec = [line for line in opt.plan.splitlines() if ".weight_" in line]
        if len(rec) != (4 if args.model == "lstm" else 10) or \
                any("dense gradient of torch's fused operator" not in line for line in rec):
            fail("the recurrent matrices did not run torch's fused operator:\n" + opt.plan)
    print("ok %s %s %s: max relative difference %.3g (%s)" %
          (args.mode, args.model, args.opt, worst, where), flush=True)  # (exact or flip)


def main():
    """Each argument is one case ("exact --opt adam"), run in order, each in a
    job of its own (import torch costs seconds: one process runs them all)."""
    global args
    import shlex
    for text in sys.argv[1:]:
        args = ap.parse_args(shlex.split(text))
        case()


main()
