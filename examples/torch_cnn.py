#!/usr/bin/env python3
"""A LeNet-style CNN with a wide fully connected head on Fashion-MNIST,
trained by sfb.torch: the convolutions go through the dense engine, the head
(1024 -> 4096 -> 4096 -> 10) by sufficient factors where the cost model
says so. Start P workers with

    sfb launch -n 4 -- python3 examples/torch_cnn.py

Options and output as examples/torch_mlp.py (the same training loop);
--hidden sets the head's widths.
"""

import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from torch_mlp import arguments, train  # noqa: E402


def cnn(hidden):
    """28x28 -> conv 5x5 (32) -> pool -> conv 5x5 (64) -> pool -> conv 3x3
    stride 2 (64): 64 x 4 x 4 = 1024 features -> the head."""
    layers = [nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
              nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
              nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten()]
    width = 64 * 4 * 4
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, 10))


def main():
    args = arguments(__doc__.split("\n\n")[0], hidden="4096,4096", epochs=3, lr=0.02).parse_args()
    torch.manual_seed(args.seed)
    train(cnn([int(h) for h in args.hidden.split(",") if h]), args, image_shape=(1, 28, 28))


if __name__ == "__main__":
    main()
