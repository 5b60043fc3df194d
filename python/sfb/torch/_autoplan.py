"""sync="auto" that measures (docs/torch.md, "The plan"): the cost model
chooses each layer's engine at the first step from its predictions; where
a layer's two predictions are within 4x of each other, the prediction alone
may be wrong on this machine and this link, so the job measures. After a
few warm-up steps, group by group (layers of one shape and kind together,
the largest predicted cost first), it runs the group's engine flipped, as it
was, as it was, flipped, in four windows of `trial_steps` / 2 counted steps
(Job.replan at a step boundary; a machine whose speed drifts steadily slows
both alike), and a flip that made the median step faster by more than the
measurement can tell apart stays, one that did not goes back. Two kinds of
noise bound what it can tell apart: the steps' own (twice the standard
error of the two medians' difference, from the spread of the steps within
their windows) and the windows' (a machine shared with other work runs a
whole window slow or fast): the windows' medians fitted by least squares
as a level, a steady drift and the flip's gain, the gain must stand out of
the residuals (a one-sided 95 % t test). Four windows leave one degree of
freedom, where only a clean gain stands out; a gain the steps show but the
windows cannot confirm is measured again, four more windows in the same
order, and judged on all eight (five degrees of freedom). A layer whose
engines differ by less than that keeps the cost model's choice, which saw
its bytes. (The trainer's `--trial-clocks` decides by the same rule in C,
src/train/trial_stats.c; test/unit/test_trial_stats.c checks the two
reach the same numbers on the same windows.) When the samples per step move
by more than a quarter for `trial_steps` steps in a row (a new batch size),
it measures again.

Every rank decides alike without a message of its own: the inputs are the
clock's meta matrix (each rank's last step time and samples, the same bits
on every rank), so every rank replans at the same clock to the same
engines. A step's time is the slowest rank's, from the end of one
reduction to the end of the next; a trial's is the median of its steps
(an evaluation pass between two steps is one outlier among them); the
first step under new engines (it pays the replan) is not counted."""
import math
import re

_PRED = re.compile(r"sfb ([0-9.e+-]+) ms, fms ([0-9.e+-]+) ms")


def predictions(plan_text):
    """{matrix index: (sfb ms, fms ms)} of the cost model's plan lines."""
    out = {}
    for line in plan_text.splitlines():
        parts = line.split()
        m = _PRED.search(line)
        if len(parts) > 1 and parts[0] == "matrix" and parts[1].isdigit() and m:
            out[int(parts[1])] = (float(m.group(1)), float(m.group(2)))
    return out


def _median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


# the windows of a trial: flipped, as it was, as it was, flipped (a steady
# drift cancels), once or twice
_ORDER = (True, False, False, True)
# one-sided 95 % quantiles of Student's t by degrees of freedom
_T95 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015}


def _window_gain(windows, at):
    """(gain, its bound from the windows' noise): the windows' medians (at:
    the mean clock of each; flipped as _ORDER says) fitted by least squares
    as a level, a steady drift and the flipped windows' difference; the
    gain is minus that difference (positive: the flip faster), the bound
    its standard error times the t quantile of the fit's residual degrees
    of freedom (0 where the medians lie on the fit: a steady drift and a
    clean gain)."""
    y = [_median(w) for w in windows]
    f = [1.0 if _ORDER[i % 4] else 0.0 for i in range(len(windows))]
    t0 = sum(at) / len(at)
    x = [[1.0, a - t0, fi] for a, fi in zip(at, f)]
    # the normal equations (3 x 3), by Cramer's rule in plain Python, not
    # numpy.linalg: every rank must reach the same bits from the same inputs,
    # whatever BLAS and CPU each rank's host has (a choice near the bound
    # made apart on two ranks would replan them to different engines)
    xtx = [[sum(r[i] * r[j] for r in x) for j in range(3)] for i in range(3)]
    xty = [sum(r[i] * yi for r, yi in zip(x, y)) for i in range(3)]

    def det(m):
        return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) -
                m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
                m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))
    d = det(xtx)
    if abs(d) < 1e-12:
        return 0.0, float("inf")
    beta = []
    for k in range(3):
        m = [row[:] for row in xtx]
        for i in range(3):
            m[i][k] = xty[i]
        beta.append(det(m) / d)
    rss = sum((yi - sum(b * xi for b, xi in zip(beta, r))) ** 2 for r, yi in zip(x, y))
    # (X'X)^-1 [2][2]: the cofactor over the determinant
    inv22 = (xtx[0][0] * xtx[1][1] - xtx[0][1] * xtx[1][0]) / d
    dof = len(windows) - 3
    return -beta[2], _T95[dof] * math.sqrt(max(rss, 0.0) / dof * max(inv22, 0.0))


def _clear_gain(windows):
    """How much faster the flipped steps' median must be than the base
    steps' to count: twice the standard error of the difference of the two
    medians, 1.253 sigma / sqrt(n) each, sigma from the steps' median
    absolute deviation from their window's median (robust to an evaluation
    pass among them; a drift of the machine between windows is not noise)."""
    nb = sum(len(w) for i, w in enumerate(windows) if not _ORDER[i % 4])
    nf = sum(len(w) for i, w in enumerate(windows) if _ORDER[i % 4])
    if not nb or not nf:
        return 0.0
    sigma = 1.4826 * _median([abs(x - _median(w)) for w in windows for x in w])
    return 2 * 1.253 * sigma * math.sqrt(1.0 / nb + 1.0 / nf)


class Trials:
    """The measured choice of one job (a state machine fed once a clock)."""

    WARM = 3          # steps after the attach not measured (first-touch costs)
    CLOSE = 4.0       # predictions within this factor are measured
    MAX_GROUPS = 4    # the costliest groups only: each trial costs steps

    def __init__(self, trial_steps, slots, engines, plan_text, every=False):
        """slots: the Linear slots (.index, .rows, .cols, .kind); engines:
        the job's engine per matrix now; every: measure every group whatever
        its predictions say (tests)."""
        self.steps = trial_steps
        self.pred = predictions(plan_text)
        self.engines = list(engines)
        groups = {}
        for s in slots:
            p = self.pred.get(s.index)
            if p and (every or min(p) > 0 and max(p) <= self.CLOSE * min(p)):
                groups.setdefault((s.rows, s.cols, s.kind), []).append(s.index)
        order = sorted(groups.values(), key=lambda g: -sum(min(self.pred[i]) for i in g))
        self.groups = order[:self.MAX_GROUPS] if trial_steps > 0 else []
        self.measured = {}      # matrix index -> {engine: median ms a step}
        self.untold = set()     # matrix indices whose faster median was within the noise
        self.stage = "warm" if self.groups else "off"
        self.attach_clock = None
        self.ran = {}           # clock -> the engines it ran under (a tuple)
        self.base = None        # the plan the group on trial is flipped from
        self.group = 0          # the group on trial
        self.counted = 0        # steps counted in the window
        self._clear_windows()   # windows, at, samples (and window, nwin)
        self.at_samples = None  # samples per step the trials ran at
        self.moved = 0          # steps in a row whose samples are not at_samples'
        self.replans = 0

    def observe(self, clock, step_ms, samples, valid):
        """After clock's reduction: step_ms, the slowest rank's time of the
        step before (clock - 1); samples, the most of any rank in clock;
        valid, every rank trained in both. Returns the engines to replan to
        (a list) or None."""
        if self.stage == "off":
            return None
        if self.attach_clock is None:
            self.attach_clock = clock
        now = tuple(self.engines)
        self.ran[clock] = now
        self.ran.pop(clock - 3, None)
        if self.stage == "warm":
            if clock - self.attach_clock < self.WARM:
                return None
            self.stage, self.base = "trial", list(self.engines)
            return self._to(self._flipped())
        if self.stage == "done":
            return self._watch(samples, valid)
        # a step counts when it ran under the engines now and was not the
        # first under them (that one paid the replan)
        if valid and self.ran.get(clock - 1) == now and self.ran.get(clock - 2) == now:
            self.windows[self.window].append(step_ms)
            self.at[self.window].append(clock)
            self.samples.append(samples)
            self.counted += 1
        if self.counted < (self.steps + 1) // 2:
            return None
        self.counted, self.window = 0, self.window + 1
        if self.window < self.nwin:
            return self._to(self._flipped() if _ORDER[self.window % 4] else self.base)
        return self._decide()

    def _clear_windows(self):
        """A group's trial from its first window."""
        self.windows = [[] for _ in range(8)]  # the trial's step times, per window
        self.at = [[] for _ in range(8)]       # and their clocks
        self.samples = []                      # and the samples per step meanwhile
        self.window = 0  # the window on now: flipped where _ORDER says
        self.nwin = 4    # of 4, or 8 when measured again

    def _flipped(self):
        out = list(self.base)
        for i in self.groups[self.group]:
            out[i] = "fms" if out[i] == "sfb" else "sfb"
        return out

    def _decide(self):
        w = self.windows[:self.nwin]
        base_ms = _median([x for i, v in enumerate(w) if not _ORDER[i % 4] for x in v])
        flip_ms = _median([x for i, v in enumerate(w) if _ORDER[i % 4] for x in v])
        steps_say = flip_ms < base_ms - _clear_gain(w)
        gain, bound = _window_gain(w, [sum(c) / len(c) for c in self.at[:self.nwin]])
        if steps_say and gain <= bound and self.nwin == 4:
            # the steps say faster, the windows cannot tell: four more windows
            self.nwin = 8
            return self._to(self._flipped())  # (window 4 flipped, as 3 was)
        flipped = self._flipped()
        for i in self.groups[self.group]:
            self.measured[i] = {self.base[i]: base_ms, flipped[i]: flip_ms}
        if steps_say and gain > bound:
            self.base = flipped
        elif flip_ms < base_ms:  # faster by its median, but not beyond the noise
            self.untold.update(self.groups[self.group])
        self.at_samples = _median(self.samples)
        self._clear_windows()
        self.group += 1
        if self.group < len(self.groups):
            return self._to(self._flipped())
        self.stage = "done"
        return self._to(self.base)

    def _to(self, engines):
        if engines == self.engines:
            return None
        self.engines = list(engines)
        self.replans += 1
        return list(engines)

    def _watch(self, samples, valid):
        """Done: measure again once the samples per step have moved."""
        if not valid or self.at_samples is None:
            return None
        r = samples / self.at_samples if self.at_samples else 1.0
        self.moved = self.moved + 1 if r > 1.25 or r < 0.8 else 0
        if self.moved < self.steps:
            return None
        self.moved, self.stage, self.group, self.window, self.counted = 0, "trial", 0, 0, 0
        self.base, self.measured, self.untold = list(self.engines), {}, set()
        return self._to(self._flipped())

    def describe(self, index):
        """The plan's words on matrix index ("" when it is not measured)."""
        if not any(index in g for g in self.groups):
            return ""
        got = self.measured.get(index, {})
        if len(got) < 2:
            trying = self.base is not None and self.engines[index] != self.base[index]
            return "; measuring both engines, %d steps each%s" % (
                self.steps, " (trying %s now, %s before)" % (self.engines[index], self.base[index])
                if trying else "")
        return "; measured a step: %s%s" % (", ".join(
            "%.4g ms by %s" % (got[e], e) for e in sorted(got, key=got.get)),
            "; within the noise, kept" if index in self.untold else "")
