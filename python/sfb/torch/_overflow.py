"""Steps with more samples than the job's bound: a longer sequence, a
larger minibatch than the first step's (or max_samples).

The job's max_s bounds the samples of one published factor pair, and every
rank checks the frames it receives against it, so a layer's factors of
more samples cannot travel in the clock's frames. The rank keeps that
layer's update and publishes one sample of zeros for it; the meta row
carries the step's most samples, so after the clock's reduction every rank
knows, and every rank takes every rank's kept updates, in rank order, by one
allgather of the bootstrap, and adds them to the layer's sum before the
gradients are read (the same bytes on every rank: the replicas stay equal).
Then the bound grows (Job.set_max_s, collective) to the step's most with
half again of headroom, so a sequence length that creeps up costs a few
such steps, not one each. Staleness > 0 applies the frames as they come
(no reduction to add to): refused there, naming max_samples."""
import numpy as np

import sfb as _sfb

HEADROOM = 1.5
# the meta row holds the step's samples in float32: exact below 2**24
MOST = (1 << 24) - 1

_DENSE, _FACTORS, _ROWS = 0, 1, 2   # a kept update's form on the wire
_HEAD = np.dtype([("slot", "<i8"), ("form", "<i8"), ("s", "<i8"), ("scale", "<f8")])


def _pack(k, slot, b, c, scale, clock):
    """One kept update's bytes: the slot's position, its form, then the
    smaller of the factors and the dense update (a table's: its rows)."""
    s = b.shape[0]
    if not (np.isfinite(b).all() and np.isfinite(c[2] if slot.kind == "rows" else c).all()):
        raise _sfb.Error(-34, "sfb.torch: %s: clock %d: a non-finite gradient (a factor must "  # ERANGE
                         "hold finite numbers only: nothing was published)" % (slot.name, clock))
    head = np.zeros(1, _HEAD)
    if slot.kind == "rows":
        _, col, _ = c
        head[0] = (k, _ROWS, s, scale)
        return head.tobytes() + b.astype(np.float32).tobytes() + col.astype("<u4").tobytes()
    if s * (slot.rows + slot.cols) < slot.rows * slot.cols:
        head[0] = (k, _FACTORS, s, scale)
        return head.tobytes() + b.tobytes() + c.tobytes()
    head[0] = (k, _DENSE, s, 1.0)
    g = np.float32(scale) * (b.T @ c)  # (formed here once: every rank adds its bytes)
    return head.tobytes() + np.ascontiguousarray(g, np.float32).tobytes()


class Overflow:
    """This rank's kept updates of the clock, and their exchange."""

    def __init__(self):
        self.kept = []  # (slot, its bytes)

    def keep(self, k, slot, b, c, scale, clock):
        """Slot (the k-th of the optimizer's) had more samples than the bound
        this clock: its update (scale * b.T @ c) waits for the reduction."""
        self.kept.append(_pack(k, slot, b, c, scale, clock))

    def exchange(self, job, slots, allgather_bytes):
        """Every rank's kept updates of the clock added to their slots' sums
        (slot.buf), rank by rank in rank order (collective)."""
        mine, self.kept = b"".join(self.kept), []
        for q, data in enumerate(allgather_bytes(job, mine)):
            _add(q, data, slots)


def _add(q, data, slots):
    """Rank q's kept updates (untrusted bytes: every length and index
    checked, an error naming rank q otherwise)."""
    def bad(why):
        return _sfb.MismatchError(-(4096 + 9), "sfb.torch: rank %d's updates of a step with "
                                  "more samples than the job's bound are malformed: %s" %
                                  (q, why), rank=q)
    at = 0
    while at < len(data):
        if len(data) - at < _HEAD.itemsize:
            raise bad("%d bytes left, a header takes %d" % (len(data) - at, _HEAD.itemsize))
        k, form, s, scale = np.frombuffer(data, _HEAD, 1, at)[0].tolist()
        at += _HEAD.itemsize
        if not 0 <= k < len(slots):
            raise bad("layer %d of %d" % (k, len(slots)))
        slot = slots[k]
        rows, cols = slot.rows, slot.cols
        want = {_DENSE: rows * cols * 4, _FACTORS: s * (rows + cols) * 4,
                _ROWS: s * (rows + 1) * 4}.get(form)
        if want is None or (form == _ROWS) != (slot.kind == "rows") or not 1 <= s <= MOST \
                or len(data) - at < want or not np.isfinite(scale):
            raise bad("%s: form %d, %d samples, %d bytes left" % (slot.name, form, s,
                                                                  len(data) - at))
        if not np.isfinite(np.frombuffer(data, np.float32, want // 4 - (s if form == _ROWS else 0),
                                         at)).all():
            raise bad("%s: a non-finite number" % slot.name)
        if form == _DENSE:
            slot.buf += np.frombuffer(data, np.float32, rows * cols, at).reshape(rows, cols)
        elif form == _FACTORS:
            b = np.frombuffer(data, np.float32, s * rows, at).reshape(s, rows)
            c = np.frombuffer(data, np.float32, s * cols, at + s * rows * 4).reshape(s, cols)
            slot.buf += np.float32(scale) * (b.T @ c)
        else:
            b = np.frombuffer(data, np.float32, s * rows, at).reshape(s, rows)
            col = np.frombuffer(data, "<u4", s, at + s * rows * 4)
            if col.max() >= cols:
                raise bad("%s: row id %d of a table of %d" % (slot.name, col.max(), cols))
            np.add.at(slot.buf, (slice(None), col.astype(np.intp)), (np.float32(scale) * b).T)
        at += want
