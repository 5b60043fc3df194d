#!/usr/bin/env python3
"""The Fashion-MNIST MLP of torch_mlp.py as an elastic job: it goes on when a
worker dies, and takes restarted (or new) workers in, with no restart and no
roll back. Start it with

    sfb launch -n 4 --elastic --respawn 2 -- python3 examples/torch_elastic.py

and kill a worker (kill -9 PID): the others go on from the most advanced
state any of them holds, and the launcher restarts it into the running job.
Step t is the same global minibatch of --global-batch samples whoever is
left (sfb.torch.elastic.Batches), so the run is one process's on the same
batches, deaths and joins included. Rank 0 prints a line every 100 steps,
one per epoch, and

    result test_accuracy=0.8712 train_loss=0.3391 world=4 steps=1874 resets=2 ...
"""

import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "python"))
import sfb.torch as sft  # noqa: E402
from fashion_mnist import raw  # noqa: E402
from torch_mlp import arguments, evaluate, mlp, optimizer  # noqa: E402


def main():
    args = arguments(__doc__.split("\n\n")[0]).parse_args()
    if args.staleness or args.resume or args.checkpoint:
        raise SystemExit("torch_elastic.py: --staleness, --resume and --checkpoint are "
                         "torch_mlp.py's (an elastic job runs at staleness 0)")
    # the data first: a process joining later is taken in at init(), and the
    # job waits for it to reach elastic.run
    x, y = raw(args.data_dir, "train")
    X = torch.from_numpy(x.reshape(len(x), 784).astype(np.float32) / 255.0)
    Y = torch.from_numpy(y.astype(np.int64))
    sft.init()
    torch.manual_seed(args.seed)
    model = mlp([int(h) for h in args.hidden.split(",") if h])
    data = sft.elastic.Batches(len(X), args.global_batch, epochs=args.epochs, seed=args.seed,
                               drop_last=True)
    total = min(len(data), args.steps) if args.steps else len(data)
    opt = sft.DistributedOptimizer(optimizer(args, model.parameters()), model=model,
                                   sync=args.sync)
    sched = torch.optim.lr_scheduler.LambdaLR(   # the cosine of torch_mlp.py
        opt, lambda t: 0.5 * (1 + math.cos(math.pi * min(t, total) / total)))
    # what every rank takes from the most advanced one when the world changes
    state = sft.elastic.State(model, opt, sched=sched, loss_sum=0.0, loss_n=0, last_loss=0.0)
    state.register_reset_callbacks([lambda: sft.rank() == 0 and print(
        "the job has %d workers from step %d" % (sft.size(), opt.clock), flush=True)])
    loss_fn = nn.CrossEntropyLoss()

    @sft.elastic.run
    def train(state):
        for idx in data.shard(opt):
            if opt.clock >= total:
                break
            opt.zero_grad()
            loss = loss_fn(model(X[idx]), Y[idx])
            loss.backward()
            opt.step()
            state.sched.step()
            state.loss_sum += loss.item() * len(idx) / args.global_batch * sft.size()
            state.loss_n += 1
            if opt.clock % 100 == 0 and sft.rank() == 0:
                print("step %d/%d: loss %.4f (%d workers, %.1f s)" % (
                    opt.clock, total, loss.item(), sft.size(), time.time() - t0), flush=True)
            if opt.clock % data.steps_per_epoch == 0 or opt.clock == total:
                mean = sft.allreduce(torch.tensor(state.loss_sum / state.loss_n)).item()
                if sft.rank() == 0:
                    print("epoch %.2f: train loss %.4f (%d workers, %.1f s)" %
                          (opt.clock / data.steps_per_epoch, mean, sft.size(),
                           time.time() - t0), flush=True)
                state.loss_sum, state.loss_n, state.last_loss = 0.0, 0, mean

    t0 = time.time()
    train(state)
    wall = time.time() - t0
    acc = evaluate(model, args, (784,))
    if sft.rank() == 0:
        print("result test_accuracy=%.4f train_loss=%.4f world=%d steps=%d resets=%d wall=%.1f" %
              (acc, state.last_loss, sft.size(), opt.clock, state.resets, wall), flush=True)
    sft.shutdown()


if __name__ == "__main__":
    main()
