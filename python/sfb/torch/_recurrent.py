"""Recurrent layers by factors: nn.LSTM, nn.GRU and nn.RNN (and their
cells) multiply their input and hidden matrices inside one fused operator
(torch._VF), whose backward forms each weight's gradient where sfb cannot
see it. While a DistributedOptimizer lives, torch.nn.modules.rnn calls the
operators here instead: the same recurrences written with F.linear, whose
captures (_capture) carry every matrix by factors. The input matrix is one
F.linear over the whole sequence; the hidden one is one call per time step,
so each step's factors hold one column per sample and time step (S = B·T).
A layer whose every matrix goes by FMS this clock (the plan's choice) runs
torch's fused operator: sfb publishes the dense gradients it forms
(_Sync.fused), and the recurrence costs what it costs in one process.

Not written here, so left to torch's operator (and its dense gradients):
packed sequences (PackedSequence), proj_size > 0, weights sfb does not
train (frozen, or under no_grad: evaluation runs the fused operator)."""
import torch
import torch.nn.functional as F

from . import _padding

_rnn_module = torch.nn.modules.rnn
_torch_vf = _rnn_module._VF
_NAMES = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN", "rnn_relu": "RNN"}


def _pairs(weights, has_bias):
    """The (weight, bias) of each matrix of an operator's flat weights
    (w_ih, w_hh[, b_ih, b_hh] per layer and direction)."""
    per = 4 if has_bias else 2
    return [(weights[k + j], weights[k + j + 2] if has_bias else None)
            for k in range(0, len(weights), per) for j in (0, 1)]


def _ours(pairs):
    """The recurrence goes through F.linear: a DistributedOptimizer lives,
    gradients are on, it trains one of these weights, and one of them goes
    by factors this clock (else torch's operator: its dense gradients are
    either sfb's to publish, or not sfb's at all)."""
    from . import _capture
    s = _capture._active
    return s is not None and torch.is_grad_enabled() and \
        any(w.requires_grad and id(w) in s.group_of and id(w) not in s.dense_why
            for w, _ in pairs) and not s.fused(pairs)


def _lstm_cell(x_proj, h, c, w_hh, b_hh):
    g = x_proj + F.linear(h, w_hh, b_hh)
    i, f, gg, o = g.chunk(4, 1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
    return torch.sigmoid(o) * torch.tanh(c), c


def _gru_cell(x_proj, h, w_hh, b_hh):
    gh = F.linear(h, w_hh, b_hh)
    ir, iz, i_n = x_proj.chunk(3, 1)
    hr, hz, h_n = gh.chunk(3, 1)
    r = torch.sigmoid(ir + hr)
    z = torch.sigmoid(iz + hz)
    n = torch.tanh(i_n + r * h_n)
    return (h - n) * z + n  # torch's own form of (1 - z)·n + z·h: the same roundings


def _rnn_cell(x_proj, h, w_hh, b_hh, relu):
    a = x_proj + F.linear(h, w_hh, b_hh)
    return torch.relu(a) if relu else torch.tanh(a)


def _direction(mode, x, h, c, w, has_bias):
    """One layer, one direction over x (T x B x I): the outputs (T x B x H)
    and the last h (and c)."""
    w_ih, w_hh = w[0], w[1]
    b_ih, b_hh = (w[2], w[3]) if has_bias else (None, None)
    xp = F.linear(x, w_ih, b_ih)  # every time step at once
    outs = []
    for t in range(x.shape[0]):
        if mode == "lstm":
            h, c = _lstm_cell(xp[t], h, c, w_hh, b_hh)
        elif mode == "gru":
            h = _gru_cell(xp[t], h, w_hh, b_hh)
        else:
            h = _rnn_cell(xp[t], h, w_hh, b_hh, mode == "rnn_relu")
        outs.append(h)
    return torch.stack(outs), h, c


def _run(mode, input, hx, weights, has_bias, num_layers, dropout, train, bidirectional,
         batch_first):
    """The whole stack, as _VF's operator computes it."""
    dirs = 2 if bidirectional else 1
    per = 4 if has_bias else 2
    x = input.transpose(0, 1) if batch_first else input
    h0, c0 = hx if mode == "lstm" else (hx, None)
    hs, cs = [], []
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            k = layer * dirs + d
            w = weights[k * per:(k + 1) * per]
            seq = x if d == 0 else x.flip(0)
            out, h, c = _direction(mode, seq, h0[k], c0[k] if c0 is not None else None, w,
                                   has_bias)
            outs.append(out if d == 0 else out.flip(0))
            hs.append(h)
            cs.append(c)
        x = outs[0] if dirs == 1 else torch.cat(outs, 2)
        if dropout and train and layer < num_layers - 1:
            x = F.dropout(x, dropout, True)
    out = x.transpose(0, 1) if batch_first else x
    if mode == "lstm":
        return out, torch.stack(hs), torch.stack(cs)
    return out, torch.stack(hs)


class _VF:
    """torch._VF as torch.nn.modules.rnn sees it while a DistributedOptimizer
    lives: the recurrent operators on weights sfb trains run here, the rest
    (and everything else of _VF) is torch's."""

    def __getattr__(self, name):
        return getattr(_torch_vf, name)

    @staticmethod
    def _layer(mode, args, torch_op):
        # unpacked: (input, hx, weights, bias, layers, dropout, train, bidir,
        # batch_first); packed: (data, batch_sizes, hx, weights, ...): its
        # weights come after hx (a tuple for the LSTM, a tensor otherwise)
        packed = len(args) != 9 or (torch.is_tensor(args[1]) if mode == "lstm"
                                    else torch.is_tensor(args[2]))
        if packed:
            return torch_op(*args)
        weights, has_bias, layers, bidir = args[2], args[3], args[4], args[7]
        if len(weights) == layers * (2 if bidir else 1) * (4 if has_bias else 2) and \
                _ours(_pairs(weights, has_bias)):
            out = _run(mode, *args)
        else:
            out = torch_op(*args)
        x, name = args[0], _NAMES[mode]
        steps = x.shape[1 if args[8] and x.dim() == 3 else 0]
        batch = 1 if x.dim() < 3 else x.shape[0 if args[8] else 1]
        if bidir:  # (its backward direction starts in the padding)
            _padding.watch(out[0], "a bidirectional %s" % name, steps, batch)
        for state in out[1:]:  # (the state after the padding: h_n, an LSTM's c_n)
            _padding.watch(state, "%s %s's final state" % (
                "an" if name in ("LSTM", "RNN") else "a", name), steps, batch)
        return out

    def lstm(self, *args):
        return self._layer("lstm", args, _torch_vf.lstm)

    def gru(self, *args):
        return self._layer("gru", args, _torch_vf.gru)

    def rnn_tanh(self, *args):
        return self._layer("rnn_tanh", args, _torch_vf.rnn_tanh)

    def rnn_relu(self, *args):
        return self._layer("rnn_relu", args, _torch_vf.rnn_relu)

    @staticmethod
    def lstm_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
        if not _ours([(w_ih, b_ih), (w_hh, b_hh)]):
            return _torch_vf.lstm_cell(input, hx, w_ih, w_hh, b_ih, b_hh)
        return _lstm_cell(F.linear(input, w_ih, b_ih), hx[0], hx[1], w_hh, b_hh)

    @staticmethod
    def gru_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
        if not _ours([(w_ih, b_ih), (w_hh, b_hh)]):
            return _torch_vf.gru_cell(input, hx, w_ih, w_hh, b_ih, b_hh)
        return _gru_cell(F.linear(input, w_ih, b_ih), hx, w_hh, b_hh)

    @staticmethod
    def rnn_tanh_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
        if not _ours([(w_ih, b_ih), (w_hh, b_hh)]):
            return _torch_vf.rnn_tanh_cell(input, hx, w_ih, w_hh, b_ih, b_hh)
        return _rnn_cell(F.linear(input, w_ih, b_ih), hx, w_hh, b_hh, False)

    @staticmethod
    def rnn_relu_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
        if not _ours([(w_ih, b_ih), (w_hh, b_hh)]):
            return _torch_vf.rnn_relu_cell(input, hx, w_ih, w_hh, b_ih, b_hh)
        return _rnn_cell(F.linear(input, w_ih, b_ih), hx, w_hh, b_hh, True)


_vf = _VF()


def intercept(on):
    """torch.nn.modules.rnn's operators come here (on) or are torch's."""
    _rnn_module._VF = _vf if on else _torch_vf
