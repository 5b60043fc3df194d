#!/usr/bin/env python3
"""A PyTorch MLP on Fashion-MNIST, trained by sfb.torch. Start P workers with

    sfb launch -n 4 -- python3 examples/torch_mlp.py

(or mpirun -n 4 / srun --mpi=pmix / torchrun --nproc_per_node 4 in place of
`sfb launch`). Every step takes one global minibatch of --global-batch
samples; rank r computes its 1/P share of it (the same samples at any P: a
run with -n 4 follows the run with -n 1 up to float rounding). Each Linear
layer is synchronized by its sufficient factors, the optimizer steps on the
mean gradient on every rank alike.

Rank 0 prints the plan (one line per matrix: its engine and why; again at
the end if sync="auto" measured and changed it), a line per epoch, and one
result line:

    result test_accuracy=0.8791 train_loss=0.3012 world=4 steps=2811 samples_per_s=5120 ...

--checkpoint PATH saves the model and the optimizer (with the job's clock)
after every epoch; --resume PATH continues such a run exactly.
"""

import argparse
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "python"))
import sfb.torch as sft  # noqa: E402
from fashion_mnist import DEFAULT_DIR, raw  # noqa: E402


def mlp(hidden):
    layers, width = [nn.Flatten()], 784
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, 10))


def arguments(description, hidden="1024,1024", epochs=2, lr=0.05):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--hidden", default=hidden, help="hidden layer widths (default %(default)s)")
    ap.add_argument("--epochs", type=int, default=epochs)
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: all)")
    ap.add_argument("--global-batch", type=int, default=64,
                    help="samples per step over all workers (a multiple of the workers)")
    ap.add_argument("--optimizer", choices=["sgd", "momentum", "adam"], default="momentum")
    ap.add_argument("--lr", type=float, default=lr,
                    help="initial learning rate, decayed to 0 along a cosine over the run")
    ap.add_argument("--sync", choices=["auto", "sfb", "fms"], default="auto")
    ap.add_argument("--staleness", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--checkpoint", help="save model and optimizer here after every epoch")
    ap.add_argument("--resume", help="continue from this checkpoint")
    ap.add_argument("--save-params", help="rank 0 writes the final parameters here (torch.save)")
    ap.add_argument("--test-samples", type=int, default=0,
                    help="score the first N test images (0: all 10 000; a quick look)")
    ap.add_argument("--data-dir", default=DEFAULT_DIR)
    return ap


def optimizer(args, params):
    if args.optimizer == "adam":
        return torch.optim.Adam(params, lr=args.lr)
    return torch.optim.SGD(params, lr=args.lr, momentum=0.9 if args.optimizer == "momentum" else 0)


def train(model, args, image_shape=(784,)):
    sft.init()
    rank, world = sft.rank(), sft.size()
    if args.global_batch % world:
        raise SystemExit("--global-batch %d is not a multiple of the %d workers" %
                         (args.global_batch, world))
    per = args.global_batch // world
    x, y = raw(args.data_dir, "train")
    X = torch.from_numpy(x.reshape((len(x),) + image_shape).astype(np.float32) / 255.0)
    Y = torch.from_numpy(y.astype(np.int64))
    steps_per_epoch = len(X) // args.global_batch

    opt = sft.DistributedOptimizer(optimizer(args, model.parameters()), model=model,
                                   sync=args.sync, staleness=args.staleness)
    if args.resume:
        state = torch.load(args.resume)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
    sft.broadcast_parameters(model.state_dict(), root_rank=0)  # every rank starts alike
    loss_fn = nn.CrossEntropyLoss()
    total = steps_per_epoch * args.epochs
    if args.steps:
        total = min(total, args.steps)
    # the learning rate falls to 0 along a cosine over the run (a scheduler
    # works on the wrapped optimizer as on any other)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: 0.5 * (1 + math.cos(math.pi * min(t, total) / total)))
    for _ in range(opt.clock):  # a resumed run: where the schedule was
        sched.step()
    t0, seen, loss_sum, loss_n, last_loss = time.time(), 0, 0.0, 0, float("nan")
    step, perm_epoch, first_plan = opt.clock, None, None
    while step < total:
        epoch, i = divmod(step, steps_per_epoch)
        if epoch != perm_epoch:  # one permutation per epoch, the same on every rank
            perm = torch.from_numpy(np.random.default_rng([args.seed, epoch]).permutation(len(X)))
            perm_epoch = epoch
        # rank r takes its share of the global batch
        lo = i * args.global_batch + rank * per
        idx = perm[lo:lo + per]
        opt.zero_grad()
        loss = loss_fn(model(X[idx]), Y[idx])
        loss.backward()
        opt.step()
        sched.step()
        step += 1
        seen += per
        loss_sum += loss.item()
        loss_n += 1
        if step == 1 and rank == 0 and not args.resume:
            print("plan:\n  " + opt.plan.replace("\n", "\n  "), flush=True)
            first_plan = opt.plan
        if step % steps_per_epoch == 0 or step == total:
            mean = sft.allreduce(torch.tensor(loss_sum / loss_n)).item()
            if rank == 0:
                print("epoch %.2f: train loss %.4f (%.1f s)" %
                      (step / steps_per_epoch, mean, time.time() - t0), flush=True)
            if args.checkpoint and rank == 0:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()},
                           args.checkpoint)
            loss_sum, loss_n, last_loss = 0.0, 0, mean
    wall = time.time() - t0
    if rank == 0 and first_plan is not None and opt.plan != first_plan:  # sync auto measured
        print("plan, as measured:\n  " + opt.plan.replace("\n", "\n  "), flush=True)
    acc = evaluate(model, args, image_shape)
    sft.shutdown()
    if rank == 0:
        if args.save_params:
            torch.save(model.state_dict(), args.save_params)
        print("result test_accuracy=%.4f train_loss=%.4f world=%d steps=%d samples_per_s=%.0f "
              "wall=%.1f" % (acc, last_loss, world, total, seen * world / max(wall, 1e-9), wall),
              flush=True)


def evaluate(model, args, image_shape):
    """Test accuracy: each rank scores its share of the test set (of its
    first --test-samples images)."""
    rank, world = sft.rank(), sft.size()
    x, y = raw(args.data_dir, "t10k")
    if args.test_samples > 0:
        x, y = x[:args.test_samples], y[:args.test_samples]
    x, y = x[rank::world], y[rank::world]
    with torch.no_grad():
        X = torch.from_numpy(x.reshape((len(x),) + image_shape).astype(np.float32) / 255.0)
        correct = sum(int((model(X[i:i + 1000]).argmax(1) ==
                           torch.from_numpy(y[i:i + 1000].astype(np.int64))).sum())
                      for i in range(0, len(X), 1000))
    counts = sft.allreduce(torch.tensor([correct, len(x)], dtype=torch.float64), op="sum")
    return float(counts[0] / counts[1])


def main():
    args = arguments(__doc__.split("\n\n")[0]).parse_args()
    torch.manual_seed(args.seed)
    hidden = [int(h) for h in args.hidden.split(",") if h]
    train(mlp(hidden), args)


if __name__ == "__main__":
    main()
