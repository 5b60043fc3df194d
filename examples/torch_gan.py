#!/usr/bin/env python3
"""A GAN on Fashion-MNIST as PyTorch's DCGAN example trains one — a
generator and a discriminator, an optimizer each — trained by sfb.torch.
Start P workers with

    sfb launch -n 4 -- python3 examples/torch_gan.py

Each optimizer is wrapped in its own DistributedOptimizer: the job's
optimizers share its steps, every backward() reduces the gradients it gave
(the discriminator's two, real images then detached fakes, before its
step; the generator's one, through the discriminator), and each step()
steps its own model. Every step takes one global minibatch of
--global-batch images and as many noise vectors; rank r computes its 1/P
share of both (the same samples at any P: -n 4 follows -n 1 up to float
rounding).

Rank 0 prints the plan (one line per matrix, named by its model's class), a
line every --log-every steps (its own share's means), and one result line
(the last step's, over the global minibatch):

    result d_loss=1.2071 g_loss=0.8935 d_real=0.5527 d_fake=0.4458 world=4 steps=500 ...

(d_real, d_fake: the discriminator's mean output on real and fake images.)
"""

import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "python"))
import sfb.torch as sft  # noqa: E402
from fashion_mnist import DEFAULT_DIR, raw  # noqa: E402


class Generator(nn.Module):
    def __init__(self, latent, hidden):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(),
                                  nn.Linear(hidden, hidden), nn.ReLU(),
                                  nn.Linear(hidden, 784), nn.Tanh())

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(784, hidden), nn.LeakyReLU(0.2),
                                  nn.Linear(hidden, hidden), nn.LeakyReLU(0.2),
                                  nn.Linear(hidden, 1))

    def forward(self, x):
        return self.main(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--global-batch", type=int, default=64,
                    help="images per step over all workers (a multiple of the workers)")
    ap.add_argument("--latent", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--sync", choices=["auto", "sfb", "fms"], default="auto")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--data-dir", default=DEFAULT_DIR)
    args = ap.parse_args()

    sft.init()
    rank, world = sft.rank(), sft.size()
    if args.global_batch % world:
        raise SystemExit("--global-batch %d is not a multiple of the %d workers" %
                         (args.global_batch, world))
    per = args.global_batch // world
    x, _ = raw(args.data_dir, "train")
    X = torch.from_numpy(x.reshape(len(x), 784).astype(np.float32) / 127.5 - 1.0)
    perm = torch.from_numpy(np.random.default_rng(args.seed).permutation(len(X)))

    torch.manual_seed(args.seed)
    G, D = Generator(args.latent, args.hidden), Discriminator(args.hidden)
    for m in (G, D):
        sft.broadcast_parameters(m.state_dict(), root_rank=0)
    # an optimizer per model, each wrapped (every DistributedOptimizer of a
    # job takes the same settings and is made before the first backward)
    optD = sft.DistributedOptimizer(
        torch.optim.Adam(D.parameters(), lr=args.lr, betas=(0.5, 0.999)), model=D, sync=args.sync)
    optG = sft.DistributedOptimizer(
        torch.optim.Adam(G.parameters(), lr=args.lr, betas=(0.5, 0.999)), model=G, sync=args.sync)
    bce = nn.BCEWithLogitsLoss()
    ones, zeros = torch.ones(per, 1), torch.zeros(per, 1)
    noise = torch.Generator()

    t0, sums = time.time(), np.zeros(4)
    for step in range(args.steps):
        i = (step * args.global_batch) % (len(X) - args.global_batch)
        real = X[perm[i + rank * per:i + (rank + 1) * per]]
        noise.manual_seed(args.seed * 1000003 + step)  # the step's global noise batch
        z = torch.randn(args.global_batch, args.latent, generator=noise)[rank * per:(rank + 1) * per]

        D.zero_grad()  # the discriminator: real images, then the detached fakes
        out_real = D(real)
        err_real = bce(out_real, ones)
        err_real.backward()
        fake = G(z)
        out_fake = D(fake.detach())
        err_fake = bce(out_fake, zeros)
        err_fake.backward()
        optD.step()

        G.zero_grad()  # the generator, through the discriminator
        err_g = bce(D(fake), ones)
        err_g.backward()
        optG.step()

        if step == 0 and rank == 0:
            print("plan:\n  " + optG.plan.replace("\n", "\n  "), flush=True)
        with torch.no_grad():
            sums += [float(err_real + err_fake), float(err_g),
                     float(torch.sigmoid(out_real).mean()), float(torch.sigmoid(out_fake).mean())]
        if rank == 0 and (step + 1) % args.log_every == 0:
            m = sums / args.log_every
            print("step %d: d_loss %.4f g_loss %.4f d_real %.3f d_fake %.3f" %
                  (step + 1, m[0], m[1], m[2], m[3]), flush=True)
            sums[:] = 0
    wall = time.time() - t0
    # the last step's losses over the global minibatch (each rank's share weighs 1/P)
    with torch.no_grad():
        last = sft.allreduce(torch.stack([err_real + err_fake, err_g,
                                          torch.sigmoid(out_real).mean(),
                                          torch.sigmoid(out_fake).mean()]).double())
    sft.shutdown()
    if rank == 0:
        print("result d_loss=%.4f g_loss=%.4f d_real=%.4f d_fake=%.4f world=%d steps=%d "
              "images_per_s=%.0f wall=%.1f" % (last[0], last[1], last[2], last[3], world,
                                               args.steps, args.steps * args.global_batch / wall,
                                               wall), flush=True)


if __name__ == "__main__":
    main()
