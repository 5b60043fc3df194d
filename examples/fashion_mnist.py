"""Fashion-MNIST for the Python examples: the IDX files of the Debian package
dataset-fashion-mnist (/usr/share/datasets/fashion-mnist), or of
SFB_FASHION_MNIST_DIR, gzip or plain."""

import gzip
import os

import numpy as np

DEFAULT_DIR = os.environ.get("SFB_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def read_idx(path):
    """An IDX file (gzip or plain) as a numpy array of its shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise SystemExit("%s: not an unsigned-byte IDX file" % path)
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise SystemExit("%s: %d bytes of data for shape %s" % (path, data.size, dims))
    return data.reshape(dims)


def find(directory, stem):
    for name in (stem, stem + ".gz"):
        p = os.path.join(directory, name)
        if os.path.exists(p):
            return p
    raise SystemExit("%s: no %s[.gz] (set SFB_FASHION_MNIST_DIR or install the Debian package "
                     "dataset-fashion-mnist)" % (directory, stem))


def raw(directory, split):
    """Images (n x 28 x 28 uint8) and labels (n uint8) of "train" or "t10k"."""
    x = read_idx(find(directory, split + "-images-idx3-ubyte"))
    y = read_idx(find(directory, split + "-labels-idx1-ubyte"))
    if len(x) != len(y):
        raise SystemExit("%s: %d %s images, %d labels" % (directory, len(x), split, len(y)))
    return x, y
