"""Replica checks (docs/torch.md, "Replica checks"): at staleness 0 every
rank holds the same bits of every parameter and optimizer state tensor after
each step. Every check_every steps the ranks compare a CRC-32 of each such
tensor; one that differs on a minority of ranks is named and copied there
from the lowest rank of the majority, and training goes on; without a
majority every rank fails naming both sides. SFB_DEBUG_FLIP=RANK:STEP
[:TENSOR[:ELEMENT[:BIT]]] flips one bit of one tensor of one rank before the
check of a step (tests of the repair)."""
import os
import sys
import zlib

import numpy as np
import torch

import sfb as _sfb


def _ranks(rs):
    return "rank%s %s" % ("s" if len(rs) > 1 else "", ", ".join(map(str, rs)))


class Checks:
    def __init__(self, every):
        if not isinstance(every, int) or isinstance(every, bool) or every < 0:
            raise _sfb.UsageError("DistributedOptimizer: check_every %r: expected an integer "
                                  ">= 0 (0: never)" % (every,))
        self.every, self.checks, self.repaired = every, 0, 0
        self.flip = None
        v = os.environ.get("SFB_DEBUG_FLIP", "")
        if v:
            try:
                f = [int(x) for x in v.split(":")]
                if not 2 <= len(f) <= 5 or min(f) < 0 or (len(f) == 5 and f[4] > 31):
                    raise ValueError
            except ValueError:
                raise _sfb.UsageError("SFB_DEBUG_FLIP=%s: expected RANK:STEP[:TENSOR[:ELEMENT"
                                      "[:BIT]]] (bit 0..31)" % v) from None
            self.flip = (f + [0, 0, 30][len(f) - 2:])[:5]

    def tensors(self, sync):
        """(name, tensor) of every parameter the optimizer holds and its state."""
        out = [(n, p) for n, p in sync.params]
        for n, p in sync.params:
            for k, v in sorted(sync.state_of(p).items()):
                if torch.is_tensor(v) and v.dim() > 0:
                    out.append(("%s (optimizer %s)" % (n, k), v))
        return out

    def after_step(self, sync):
        """After the optimizer's step (staleness 0): the flip, the check."""
        step = sync.steps + 1  # steps taken, this one included
        items = None
        if self.flip and self.flip[0] == sync.job.rank and self.flip[1] == step:
            items = self.tensors(sync)
            self._flip(items, step)
        if self.every and step % self.every == 0:
            self.check(sync, step, items or self.tensors(sync))

    def _flip(self, items, step):
        _, _, which, elem, bit = self.flip
        if which >= len(items) or elem >= items[which][1].numel():
            raise _sfb.UsageError("SFB_DEBUG_FLIP: tensor %d element %d: out of range" %
                                  (which, elem))
        name, t = items[which]
        with torch.no_grad():
            a = t.detach().view(-1).numpy().view(np.uint32)
            a[elem] ^= np.uint32(1 << bit)
        print("sfb.torch: SFB_DEBUG_FLIP: step %d, %s element %d: bit %d flipped" %
              (step, name, elem, bit), file=sys.stderr, flush=True)

    def check(self, sync, step, items):
        job = sync.job
        mine = np.array([zlib.crc32(t.detach().contiguous().numpy().tobytes())
                         for _, t in items], np.uint32)
        all_ = np.stack([np.frombuffer(b, np.uint32) for b in job.allgather(mine.tobytes())])
        self.checks += 1
        P = job.world
        for i, (name, t) in enumerate(items):
            col = all_[:, i]
            counts = [(col == col[r]).sum() for r in range(P)]
            root = int(np.argmax(counts))  # the first rank of the largest group
            if counts[root] == P:
                continue
            side = [r for r in range(P) if col[r] == col[root]]
            other = [r for r in range(P) if col[r] != col[root]]
            if 2 * counts[root] <= P:
                raise _sfb.PeerError(
                    -(4096 + 5), "sfb.torch: replica check, step %d: %s differs between ranks "
                    "with no majority to repair it from (%s: one replica; %s: another)" %
                    (step, name, _ranks(side), _ranks(other)), rank=other[0])
            got = np.ascontiguousarray(t.detach().numpy()).copy()
            job.broadcast(root, got)
            if job.rank in other:
                a = t.detach().numpy()
                diff = np.flatnonzero(a.reshape(-1).view(np.uint32) !=
                                      got.reshape(-1).view(np.uint32))
                with torch.no_grad():
                    t.copy_(torch.from_numpy(got))
                print("sfb.torch: replica check, step %d: %s of this rank (rank %d) differed "
                      "from the majority's in %d element%s from element %d: repaired from rank %d"
                      % (step, name, job.rank, diff.size, "" if diff.size == 1 else "s",
                         diff[0] if diff.size else -1, root), file=sys.stderr, flush=True)
            elif job.rank == 0:
                print("sfb.torch: replica check, step %d: %s differs on %s from the %d "
                      "others: repaired from rank %d" % (step, name, _ranks(other), counts[root],
                                                        root),
                      file=sys.stderr, flush=True)
            self.repaired += len(other)
