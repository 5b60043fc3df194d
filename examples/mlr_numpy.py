#!/usr/bin/env python3
"""Multinomial logistic regression on Fashion-MNIST in numpy, synchronized by
SFB through the Python job API (python/sfb). Start P workers with

    sfb launch -n 4 -- python3 examples/mlr_numpy.py

Each worker reads its shard of the training set (rows rank, rank+P, ... of a
seeded permutation), and every clock publishes the sufficient factors of its
minibatch: for A (10 x 785, the last column the bias) and samples x_i with
labels y_i the gradient step is  A += scale * B^T C  with  b_i = p_i - e_{y_i}
(softmax probabilities minus the one-hot label) and c_i = [x_i; 1], scale =
-lr / (batch * P): one step per global minibatch, as `sfb run` takes it
(lr decays from --lr to 0 along a cosine over the run).

At the end every worker drains, the replicas are gathered and compared, and
rank 0 prints one result line:

    result test_accuracy=0.8443 max_abs_diff=1.12e-05 max_abs_param=2.972 world=4 clocks=7496 ...

max_abs_diff is the largest difference between any worker's final replica and
rank 0's (float sums in another order are the only source of difference: every
replica holds the same updates after the drain).

The IDX files come from SFB_FASHION_MNIST_DIR, else the Debian package
dataset-fashion-mnist (/usr/share/datasets/fashion-mnist).
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "python"))
import sfb  # noqa: E402
from fashion_mnist import DEFAULT_DIR, raw  # noqa: E402


def load(directory, split, pick=None):
    """Images (scaled to [0, 1], a constant 1 appended) and labels of the rows
    pick(n) selects of the n (default all): converted after the selection, so
    a shard costs its share."""
    x, y = raw(directory, split)
    n = len(y)
    if pick is not None:
        rows = pick(n)
        x, y = x[rows], y[rows]
    out = np.ones((len(x), x[0].size + 1), np.float32)
    np.multiply(x.reshape(len(x), -1), np.float32(1 / 255.0), out=out[:, :-1])
    return out, y.astype(np.int64), n


def factors(A, x, y):
    """b = softmax(x A^T) - onehot(y), and the minibatch's summed loss."""
    z = x @ A.T
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    rows = np.arange(len(y))
    loss = -np.log(np.maximum(p[rows, y], 1e-30)).sum()
    p[rows, y] -= 1.0
    return p.astype(np.float32, copy=False), float(loss)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--batch", type=int, default=16, help="samples per worker per clock")
    ap.add_argument("--lr", type=float, default=0.25,
                    help="initial step, decayed to 0 along a cosine over the run")
    ap.add_argument("--staleness", type=int, default=0, help="SSP bound (0: BSP, -1: async)")
    ap.add_argument("--engine", default="sfb", help="sfb or fms")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data-dir", default=DEFAULT_DIR)
    args = ap.parse_args()

    with sfb.Job() as job:
        rank, world = job.rank, job.world
        X, Y, n = load(args.data_dir, "train",
                       lambda n: np.random.default_rng(args.seed).permutation(n)[rank::world])
        per_worker = n // world  # every shard yields the same clocks per epoch
        cpe = per_worker // args.batch
        A = np.zeros((10, X.shape[1]), np.float32)
        job.attach([A], max_s=args.batch, engine=args.engine, staleness=args.staleness)
        job.agree("epochs=%d\nbatch=%d\nlr=%r\nseed=%d\n" %
                  (args.epochs, args.batch, args.lr, args.seed))
        rng = np.random.default_rng([args.seed, rank])
        total, t0, loss_sum = args.epochs * cpe, time.time(), 0.0
        for t in range(total):
            if t % cpe == 0:
                order = rng.permutation(len(X))[:per_worker]
            A, = job.wait(t)
            idx = order[(t % cpe) * args.batch:(t % cpe + 1) * args.batch]
            x = X[idx]
            b, loss = factors(A, x, Y[idx])
            loss_sum += loss
            lr = args.lr * 0.5 * (1.0 + np.cos(np.pi * t / total))
            if t == total - 1:
                job.set_last_clock(t)  # peers learn the end from this clock's frames
            job.publish(t, [(b, x, -lr / (args.batch * world))])
            if rank == 0 and (t + 1) % cpe == 0:
                print("epoch %d: train loss %.4f (%.1f s)" %
                      ((t + 1) // cpe, loss_sum / (cpe * args.batch), time.time() - t0),
                      flush=True)
                loss_sum = 0.0
        # every replica holds every update: compare them before the end
        job.drain(total - 1)
        replicas = job.allgather(A.tobytes())
        job.finish(total - 1)
        diff = max(float(np.abs(np.frombuffer(r, np.float32) - A.ravel()).max())
                   for r in replicas)
        if rank == 0:
            Xt, Yt, _ = load(args.data_dir, "t10k")
            acc = float(((Xt @ A.T).argmax(axis=1) == Yt).mean())
            print("result test_accuracy=%.4f max_abs_diff=%.3g max_abs_param=%.4g world=%d "
                  "clocks=%d wall=%.1f" % (acc, diff, float(np.abs(A).max()), world, total,
                                           time.time() - t0), flush=True)


if __name__ == "__main__":
    main()
