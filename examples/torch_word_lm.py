#!/usr/bin/env python3
"""A word-level language model (PyTorch's word_language_model: an LSTM with
the embedding tied to the decoder, or a Transformer encoder with a causal
mask), trained by sfb.torch on the English text of Debian's `fortunes`
package (apt-get install fortunes: 2.8 MB, about 400 thousand words). Start
P workers with

    sfb launch -n 4 -- python3 examples/torch_word_lm.py --model lstm

(or mpirun / srun --mpi=pmix / torchrun in place of `sfb launch`). The text
is one stream of word ids cut into --global-batch parallel streams; every
step takes the next --bptt words of each, and rank r the streams of its 1/P
share (the same words at any P: a run with -n 4 follows the run with -n 1 up
to float rounding and dropout's draws). The gradient is clipped right after
backward() to a global norm of --clip (under sfb.torch .grad holds every
rank's mean then, as in one process).

What goes how (rank 0 prints it as the plan): the embedding as sparse rows
(only the rows of the step's words, with their ids), the decoder, the LSTM's
input and hidden matrices and the attention's projections by their
sufficient factors, or densely where the cost model says that is cheaper.

Rank 0 prints a line per --log-every steps and one result line:

    result valid_loss=5.1234 valid_ppl=168.0 train_loss=5.0123 world=4 steps=600 tokens_per_s=5120 ...
"""

import argparse
import collections
import glob
import math
import os
import re
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "python"))
import sfb.torch as sft  # noqa: E402

CORPUS = "/usr/share/games/fortunes"
WORD = re.compile(r"[a-z0-9']+|[^\sa-z0-9']")


def read_corpus(path):
    """The corpus's words, an <eos> after each fortune (the `%` lines end
    them), in file-name order."""
    files = sorted(f for f in glob.glob(os.path.join(path, "*"))
                   if os.path.isfile(f) and not f.endswith((".dat", ".u8")))
    if not files:
        raise SystemExit("torch_word_lm: no text in %s (apt-get install fortunes, or pass "
                         "--corpus DIR with text files)" % path)
    words = []
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.strip() == "%":
                    words.append("<eos>")
                else:
                    words += WORD.findall(line.lower())
        words.append("<eos>")
    return words


def vocabulary(words, size):
    """The `size` most frequent words (ties by spelling) and <unk>."""
    counts = collections.Counter(words)
    top = sorted(counts, key=lambda w: (-counts[w], w))[:size - 1]
    return {w: i for i, w in enumerate(["<unk>"] + top)}


class LSTMLM(nn.Module):
    def __init__(self, vocab, dim, layers, dropout):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.emb = nn.Embedding(vocab, dim)
        self.rnn = nn.LSTM(dim, dim, layers, dropout=dropout)
        self.dec = nn.Linear(dim, vocab)
        self.dec.weight = self.emb.weight  # tied (Press & Wolf 2017)
        nn.init.uniform_(self.emb.weight, -0.1, 0.1)
        nn.init.zeros_(self.dec.bias)

    def forward(self, tok, state):
        out, state = self.rnn(self.drop(self.emb(tok)), state)
        return self.dec(self.drop(out)), state


class TransformerLM(nn.Module):
    def __init__(self, vocab, dim, layers, dropout, heads=4, max_len=512):
        super().__init__()
        self.dim = dim
        self.emb = nn.Embedding(vocab, dim)
        pos = torch.arange(max_len).unsqueeze(1)
        freq = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        pe = torch.zeros(max_len, 1, dim)
        pe[:, 0, 0::2] = torch.sin(pos * freq)
        pe[:, 0, 1::2] = torch.cos(pos * freq)
        self.register_buffer("pe", pe)
        self.drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.dec = nn.Linear(dim, vocab)
        nn.init.uniform_(self.emb.weight, -0.1, 0.1)

    def forward(self, tok, state):
        T = tok.shape[0]
        mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        h = self.drop(self.emb(tok) * math.sqrt(self.dim) + self.pe[:T])
        return self.dec(self.enc(h, mask)), None


def streams(ids, n):
    """ids cut into n equal streams: a (length x n) tensor (column j is stream j)."""
    length = len(ids) // n
    return torch.tensor(ids[:length * n], dtype=torch.long).view(n, length).t().contiguous()


def detach(state):
    return None if state is None else tuple(s.detach() for s in state)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["lstm", "transformer"], default="lstm")
    ap.add_argument("--corpus", default=CORPUS, help="directory of text files (%(default)s)")
    ap.add_argument("--vocab", type=int, default=20000, help="words kept, the rest <unk>")
    ap.add_argument("--dim", type=int, default=200, help="embedding and hidden width")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dropout", type=float, default=0.2)
    ap.add_argument("--bptt", type=int, default=35, help="words per stream and step")
    ap.add_argument("--global-batch", type=int, default=20,
                    help="parallel streams over all workers (a multiple of the workers)")
    ap.add_argument("--steps", type=int, default=0, help="steps (0: one pass over the text)")
    ap.add_argument("--optimizer", choices=["sgd", "adam"], default=None,
                    help="default: sgd for the LSTM, adam for the Transformer")
    ap.add_argument("--lr", type=float, default=None, help="default: 20 (sgd), 0.001 (adam)")
    ap.add_argument("--clip", type=float, default=0.25, help="gradient norm clip (0: off)")
    ap.add_argument("--sync", choices=["auto", "sfb", "fms"], default="auto")
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    sft.init()
    rank, world = sft.rank(), sft.size()
    if args.global_batch % world:
        raise SystemExit("--global-batch %d is not a multiple of the %d workers" %
                         (args.global_batch, world))
    per = args.global_batch // world
    words = read_corpus(args.corpus)
    split = len(words) * 9 // 10
    vocab = vocabulary(words[:split], args.vocab)
    ids = [vocab.get(w, 0) for w in words]
    train = streams(ids[:split], args.global_batch)[:, rank * per:(rank + 1) * per]
    valid = streams(ids[split:], args.global_batch)[:, rank * per:(rank + 1) * per]
    total = (len(train) - 1) // args.bptt
    if args.steps:
        total = min(total, args.steps)

    torch.manual_seed(args.seed)
    V = len(vocab)
    model = (LSTMLM if args.model == "lstm" else TransformerLM)(V, args.dim, args.layers,
                                                                 args.dropout)
    torch.manual_seed(args.seed + rank)  # each rank its own dropout draws
    if args.optimizer is None:  # (plain SGD at lr 20 is chaotic for the Transformer)
        args.optimizer = "sgd" if args.model == "lstm" else "adam"
    lr = args.lr if args.lr is not None else (20.0 if args.optimizer == "sgd" else 1e-3)
    inner = torch.optim.SGD(model.parameters(), lr=lr) if args.optimizer == "sgd" else \
        torch.optim.Adam(model.parameters(), lr=lr)
    opt = sft.DistributedOptimizer(inner, model=model, sync=args.sync)
    sft.broadcast_parameters(model.state_dict(), root_rank=0)
    loss_fn = nn.CrossEntropyLoss()
    if rank == 0:
        print("corpus: %d words, vocabulary %d, %d steps of %d x %d words" %
              (len(words), V, total, args.bptt, args.global_batch), flush=True)

    model.train()
    state, t0, loss_sum, loss_n, last = None, time.time(), 0.0, 0, float("nan")
    first_plan = None
    for step in range(total):
        lo = step * args.bptt
        x, y = train[lo:lo + args.bptt], train[lo + 1:lo + 1 + args.bptt]
        opt.zero_grad()
        out, state = model(x, state)
        state = detach(state)
        loss = loss_fn(out.view(-1, V), y.reshape(-1))
        loss.backward()
        if args.clip:  # .grad is every rank's mean here: the global norm
            nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        loss_sum += loss.item()
        loss_n += 1
        if step == 0 and rank == 0:
            print("plan:\n  " + opt.plan.replace("\n", "\n  "), flush=True)
            first_plan = opt.plan
        if (step + 1) % args.log_every == 0 or step + 1 == total:
            last = sft.allreduce(torch.tensor(loss_sum / loss_n)).item()
            if rank == 0:
                print("step %d: train loss %.4f (ppl %.1f, %.1f s)" %
                      (step + 1, last, math.exp(min(last, 50)), time.time() - t0), flush=True)
            loss_sum, loss_n = 0.0, 0
    wall = time.time() - t0
    if rank == 0 and first_plan is not None and opt.plan != first_plan:  # sync auto measured
        print("plan, as measured:\n  " + opt.plan.replace("\n", "\n  "), flush=True)
    vloss = evaluate(model, valid, args, V)
    sft.shutdown()
    if rank == 0:
        print("result valid_loss=%.4f valid_ppl=%.1f train_loss=%.4f world=%d steps=%d "
              "tokens_per_s=%.0f wall=%.1f" %
              (vloss, math.exp(min(vloss, 50)), last, world, total,
               total * args.bptt * args.global_batch / max(wall, 1e-9), wall), flush=True)


def evaluate(model, valid, args, V):
    """The mean loss over the held-out tenth (each rank its streams)."""
    model.eval()
    state, total, count = None, 0.0, 0
    with torch.no_grad():
        for lo in range(0, len(valid) - 1, args.bptt):
            x, y = valid[lo:lo + args.bptt], valid[lo + 1:lo + 1 + args.bptt]
            x = x[:len(y)]
            out, state = model(x, state)
            total += float(nn.functional.cross_entropy(out.view(-1, V), y.reshape(-1),
                                                       reduction="sum"))
            count += y.numel()
    both = sft.allreduce(torch.tensor([total, float(count)], dtype=torch.float64), op="sum")
    return float(both[0] / both[1])


if __name__ == "__main__":
    main()
