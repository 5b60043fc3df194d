#!/usr/bin/python3
"""A numpy reference for `sfb run --model mlp` (docs/models.md, "mlp").

Trains a 784 -> H -> 10 ReLU network with a softmax output on Fashion-MNIST
by plain minibatch SGD on the mean cross-entropy (constant step, no momentum,
no weight decay) and prints the test accuracy after each epoch. The data are
read as src/data reads them: the IDX files of the Debian package
dataset-fashion-mnist (/usr/share/datasets/fashion-mnist, or --data-dir),
pixels scaled to [0, 1], the training set in a fresh random order each epoch.
The initialisation is sfb's scheme (He-normal weights N(0, 2/in) for the
hidden layer, N(0, 1/in) for the output, zero biases) drawn from numpy's
generator, so the numbers match sfb's in distribution, not bit for bit.

Run with Debian's python3 (it has numpy):
  /usr/bin/python3 scripts/mlp_reference.py [--epochs 10] [--batch 32] [--lr 0.05]
"""
import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        sys.exit(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find(data_dir, stem):
    for name in (stem, stem + ".gz"):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            return path
    sys.exit(f"fashion-mnist: {stem} not found in {data_dir}; install the Debian package "
             "dataset-fashion-mnist")


def load(data_dir, split):
    x = read_idx(find(data_dir, f"{split}-images-idx3-ubyte"))
    y = read_idx(find(data_dir, f"{split}-labels-idx1-ubyte"))
    return x.reshape(len(x), -1).astype(np.float32) / np.float32(255.0), y.astype(np.int64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    xtr, ytr = load(a.data_dir, "train")
    xte, yte = load(a.data_dir, "t10k")
    rng = np.random.default_rng(a.seed)
    d, h, k = xtr.shape[1], a.hidden, 10
    w0 = (rng.standard_normal((h, d)) * np.sqrt(2.0 / d)).astype(np.float32)
    b0 = np.zeros(h, np.float32)
    w1 = (rng.standard_normal((k, h)) * np.sqrt(1.0 / h)).astype(np.float32)
    b1 = np.zeros(k, np.float32)
    lr = np.float32(a.lr)

    def evaluate():
        z = np.maximum(xte @ w0.T + b0, 0) @ w1.T + b1
        z = z - z.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        return (z.argmax(axis=1) == yte).mean(), -logp[np.arange(len(yte)), yte].mean()

    print(f"mlp_reference: {d}->{h}->{k} ReLU, softmax, plain SGD, batch {a.batch}, "
          f"step {a.lr}, {a.epochs} epochs, seed {a.seed}", flush=True)
    t0 = time.time()
    for epoch in range(1, a.epochs + 1):
        order = rng.permutation(len(xtr))
        for s in range(0, len(order) - a.batch + 1, a.batch):
            i = order[s:s + a.batch]
            x, y = xtr[i], ytr[i]
            a1 = np.maximum(x @ w0.T + b0, 0)
            z = a1 @ w1.T + b1
            p = np.exp(z - z.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            p[np.arange(len(y)), y] -= 1           # delta of the output layer
            d1 = (p @ w1) * (a1 > 0)               # delta of the hidden layer
            g = lr / np.float32(len(y))
            w1 -= g * (p.T @ a1)
            b1 -= g * p.sum(axis=0)
            w0 -= g * (d1.T @ x)
            b0 -= g * d1.sum(axis=0)
        acc, loss = evaluate()
        print(f"epoch {epoch}: test accuracy {100 * acc:.2f}%, test loss {loss:.4f} "
              f"({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
