"""sfb.torch in one process (a job of one worker): what bad use gets, what
the optimizer wrapper keeps of the optimizer, that one worker's training
equals plain PyTorch's."""
import collections
import copy
import os
import sys
import unittest
import warnings

try:
    import numpy as np
    import torch
    import torch.nn as nn
except ImportError:
    print("skipped: no torch (install python3-torch)", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "python"))
import sfb.torch as sft  # noqa: E402


def net(dtype=torch.float32):
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3, bias=False)).to(dtype)


def _saved(obj):
    import io
    f = io.BytesIO()
    torch.save(obj, f)
    f.seek(0)
    return f


def data():
    g = torch.Generator().manual_seed(5)
    return torch.randn(32, 6, generator=g), torch.randint(0, 3, (32,), generator=g)


def _noise_of(module, x):  # (test_modules_whose_mode_matters: a function given the module)
    return x + 1 if module.training else x


def _plain_of(module, x):
    return x


class TorchOneWorker(unittest.TestCase):
    def setUp(self):
        sft.init(world=1)  # a job per test: one DistributedOptimizer per job

    def tearDown(self):
        try:
            sft.shutdown()
        except Exception:
            pass  # a test that failed its job on purpose

    def assertRaisesNaming(self, exc, words, fn, *a, **k):
        with self.assertRaises(exc) as cm:
            fn(*a, **k)
        for w in words:
            self.assertIn(w, str(cm.exception))

    def assertTrainsAsOne(self, m, opt, ref, ref_opt, loss, steps, tol):
        """steps of loss(model) on m by opt and on ref by the plain ref_opt:
        every tensor of m's state within tol (relative to its largest
        element, at least 1 for the buffers) of ref's."""
        for _ in range(steps):
            for o, model in ((opt, m), (ref_opt, ref)):
                o.zero_grad()
                loss(model).backward()
                o.step()
        for (n, p), (_, q) in zip(m.state_dict().items(), ref.state_dict().items()):
            scale = float(q.float().abs().max()) if q.is_floating_point() else 1.0
            self.assertLessEqual(float((p.float() - q.float()).abs().max()),
                                 tol * (scale if n in dict(m.named_parameters()) else
                                        max(1.0, scale)), n)

    def test_rank_size(self):
        self.assertEqual((sft.rank(), sft.size(), sft.local_size()), (0, 1, 1))
        obj = {"a": 1}
        self.assertIs(sft.allgather_object(obj)[0], obj)

    def test_second_derivative_through_batchnorm_refused(self):
        """A gradient with a graph through a BatchNorm in training mode (an
        input-gradient penalty, MAML's inner loop) is refused naming the
        layer and the cause (it failed with torch's "differentiate twice a
        function marked with @once_differentiable", naming neither); a
        first derivative through it (create_graph=False) runs."""
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Tanh(), nn.Linear(6, 1))
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        x = torch.randn(8, 4, requires_grad=True)
        gx, = torch.autograd.grad(m(x).sum(), x)  # (first order: fine)
        self.assertEqual(gx.shape, x.shape)
        self.assertRaisesNaming(sft.UsageError, ["BatchNorm1d 1", "create_graph=True", "eval()"],
                                torch.autograd.grad, m(x).sum(), x, create_graph=True)
        del opt

    def test_hooks_drawing_random_numbers_warned(self):
        """Gradient hooks on two parameters drawing from torch's generator
        (gradient noise) run in the forward's order at the reduction, where
        one process runs them in backward's: each gets other draws than one
        process's (1.52 off in a probe), warned once; hooks that draw
        nothing, or one parameter's hook that draws, are not warned of."""
        for draws in ((0, 2), (0,), ()):
            m = net()
            opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
            for i in (0, 2):
                m[i].weight.register_hook(
                    (lambda g: g + 0.01 * torch.randn_like(g)) if i in draws else
                    (lambda g: g * 0.5))
            with warnings.catch_warnings(record=True) as got:
                warnings.simplefilter("always")
                for _ in range(2):
                    opt.zero_grad()
                    m(torch.randn(5, 6)).pow(2).mean().backward()
                    opt.step()
            said = [str(w.message) for w in got if "drew random numbers" in str(w.message)]
            self.assertEqual(len(said), 1 if len(draws) > 1 else 0, (draws, said))
            if said:
                self.assertIn("hooks of 2 parameters", said[0])
            sft.shutdown()
            sft.init(world=1)

    def test_hooks_watched_for_draws_in_the_first_reductions_only(self):
        """The generator's state (5 KB) is read around the hooks in the
        first DRAWS_WATCHED reductions only (before and after them): a hook
        is the same code every step, and the copies would cost every
        step."""
        from sfb.torch import _grad_hooks
        reads, get, counts = [0], torch.random.get_rng_state, {}

        def counted():
            reads[0] += 1
            return get()
        torch.random.get_rng_state = counted
        try:
            for hooked in (False, True):
                m = net()
                opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
                if hooked:
                    m[0].weight.register_hook(lambda g: g * 0.5)
                before = reads[0]
                for _ in range(_grad_hooks.DRAWS_WATCHED + 8):
                    opt.zero_grad()
                    m(torch.randn(5, 6)).pow(2).mean().backward()
                    opt.step()
                counts[hooked] = reads[0] - before
                sft.shutdown()
                sft.init(world=1)
        finally:
            torch.random.get_rng_state = get
        self.assertEqual(counts[True] - counts[False], 2 * _grad_hooks.DRAWS_WATCHED, counts)

    def test_float64_model_refused(self):
        m = net(torch.float64)
        self.assertRaisesNaming(ValueError, ["0.weight", "float64"], sft.DistributedOptimizer,
                                torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        m = net()  # (a complex weight: model.float() would not make it real)
        m[0].weight = nn.Parameter(torch.randn(8, 6, dtype=torch.complex64))
        self.assertRaisesNaming(ValueError, ["0.weight", "complex64", "view_as_complex"],
                                sft.DistributedOptimizer,
                                torch.optim.SGD(m.parameters(), lr=0.1), model=m)

    def test_model_changed_after_wrapping_refused(self):
        # a float64 model would train on float32 sums, a parameter of
        # another shape on the old layout: refused at the next backward
        x, y = data()
        for change, words in ((lambda m: m.double(), ["0.weight", "8x6 float64", "step 1"]),
                              (lambda m: setattr(m[2].weight, "data", torch.zeros(4, 8)),
                               ["2.weight", "4x8 float32", "3x8 float32 when"])):
            m = net()
            opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
            nn.functional.cross_entropy(m(x), y).backward()
            opt.step()
            opt.zero_grad()
            change(m)
            out = m(x.to(m[0].weight.dtype))
            self.assertRaisesNaming(ValueError, words, out.sum().backward)
            sft.shutdown()
            sft.init(world=1)

    def test_lazy_module(self):
        # a lazy module's parameters have no shape before the first forward:
        # refused naming them (torch's "Can't access the shape of an
        # uninitialized parameter" before); after one forward, trains
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch 1.13: "a new feature under development"
            m = nn.Sequential(nn.LazyLinear(8), nn.ReLU(), nn.Linear(8, 3), nn.LazyBatchNorm1d())
        for call, where in ((lambda: sft.broadcast_parameters(m.state_dict()), "broadcast_parameters"),
                            (lambda: sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                                              model=m), "DistributedOptimizer")):
            self.assertRaisesNaming(ValueError, [where + ": 0.weight is not initialized",
                                                 "run one forward"], call)
        x, y = data()
        m(x)
        ref = copy.deepcopy(m)
        sft.broadcast_parameters(m.state_dict())
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        for model, o in ((m, opt), (ref, ref_opt)):
            for _ in range(3):
                o.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                o.step()
        for a, b in zip(m.parameters(), ref.parameters()):
            self.assertTrue(torch.allclose(a, b, rtol=1e-5, atol=1e-6))
        self.assertIn("0 (8x6+bias)", opt.plan)

    def test_script_module_refused(self):
        # TorchScript runs no Python forward: refused saying so (torch's own
        # "register_forward_pre_hook is not supported" before); a scripted
        # part inside a Python module trains as one process (densely)
        m = torch.jit.script(net())
        self.assertRaisesNaming(ValueError, ["model is a TorchScript module", "script it after"],
                                sft.DistributedOptimizer, torch.optim.SGD(m.parameters(), lr=0.1),
                                model=m)
        outer = nn.Sequential(torch.jit.script(net()), nn.Linear(3, 2))
        ref = nn.Sequential(torch.jit.script(net()), nn.Linear(3, 2))  # (no deepcopy of jit)
        ref.load_state_dict(outer.state_dict())
        opt = sft.DistributedOptimizer(torch.optim.SGD(outer.parameters(), lr=0.1), model=outer)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        x, y = data()
        # (unoptimized: Debian 13's torch 2.6 hangs in the backward of a
        # scripted Linear's optimized graph, from its third run, without sfb)
        with torch.jit.optimized_execution(False):
            for model, o in ((outer, opt), (ref, ref_opt)):
                for _ in range(3):
                    o.zero_grad()
                    nn.functional.cross_entropy(model(x), y % 2).backward()
                    o.step()
        for a, b in zip(outer.parameters(), ref.parameters()):
            self.assertTrue(torch.allclose(a, b, rtol=1e-5, atol=1e-6))
        self.assertIn("dense", opt.plan)

    def test_pruning(self):
        # pruned since the first step: the weight (orig * mask) gets a dense
        # gradient sfb cannot add to its factors, refused saying how;
        # pruned (identity) before it: dense from the start, pruned further
        # at any step as one process does
        # (its bias pruned since: the layer's call, a bias not a leaf, no F.linear
        # of its weight and bias: refused saying how too)
        import torch.nn.utils.prune as prune
        x, y = data()
        for what in ("weight", "bias"):
            m = net()
            opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
            nn.functional.cross_entropy(m(x), y).backward()
            opt.step()
            opt.zero_grad()
            prune.l1_unstructured(m[0], what, amount=0.5)
            loss = nn.functional.cross_entropy(m(x), y)
            self.assertRaisesNaming(ValueError, ["0.%s is pruned" % what,
                                                 "prune.identity(module, '%s')" % what],
                                    loss.backward)
            sft.shutdown()
            sft.init(world=1)
        m, ref = net(), net()
        for q in (m, ref):
            prune.identity(q[0], "weight")
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                       model=m)
        ropt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        for t in range(5):
            if t == 2:
                for q in (m, ref):
                    prune.l1_unstructured(q[0], "weight", amount=0.5)
            for q, o in ((m, opt), (ref, ropt)):
                o.zero_grad()
                nn.functional.cross_entropy(q(x), y).backward()
                o.step()
        self.assertIn("0.weight_orig", opt.plan)
        self.assertEqual(int((m[0].weight == 0).sum()), 24)
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            self.assertLess(float((p - q).abs().max()), 1e-6, n)

    def test_step_closure(self):
        # each call one reduction, the loss returned as the ranks' mean (one
        # rank: its own); a closure without backward(), with two, returning
        # no number, or where a call cannot be a reduction of its own: refused
        x, y = data()
        m = net()
        opt = sft.DistributedOptimizer(torch.optim.LBFGS(m.parameters(), max_iter=3), model=m)

        def closure(backwards=1, ret=None):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(m(x), y)
            for _ in range(backwards):
                loss.backward(retain_graph=True)
            return loss if ret is None else ret
        clock = opt.clock
        first = float(nn.functional.cross_entropy(m(x), y))
        loss = opt.step(closure)
        self.assertIsInstance(loss, torch.Tensor)
        self.assertEqual(float(loss), first)
        self.assertEqual(opt.clock, clock + 3)  # (LBFGS: max_iter calls here)
        for kw, words in (({"backwards": 0}, ["did not call backward()"]),
                          ({"backwards": 2}, ["called backward() 2 times"]),
                          ({"ret": (1, 2)}, ["returned tuple, not a loss"])):
            self.assertRaisesNaming(ValueError, ["step(closure)"] + words, opt.step,
                                    lambda: closure(**kw))
            sft.shutdown()
            sft.init(world=1)
            m = net()
            opt = sft.DistributedOptimizer(torch.optim.LBFGS(m.parameters()), model=m)
        sft.shutdown()
        sft.init(world=1)
        m = net()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m,
                                       backward_passes_per_step=2)
        self.assertRaisesNaming(ValueError, ["step(closure) needs", "backward_passes_per_step 2"],
                                opt.step, closure)

    def test_allgather_one_rank(self):
        # one rank: its own rows, their gradient passed through; a tensor
        # of no dimension refused
        t = torch.arange(6.0).view(3, 2).requires_grad_(True)
        out = sft.allgather(t)
        self.assertTrue(torch.equal(out, t.detach()))
        (out * torch.tensor([1.0, 2.0])).sum().backward()
        self.assertTrue(torch.equal(t.grad, torch.tensor([[1.0, 2.0]] * 3)))
        self.assertRaisesNaming(ValueError, ["allgather", "at least one dimension"],
                                sft.allgather, torch.tensor(1.0))

    def test_reductions_without_a_step_warn(self):
        # SAM's first_step/second_step step a base optimizer of their own:
        # the DistributedOptimizer's step() never runs, nor the checks that
        # follow it; said once, at the 32nd reduction
        x, y = data()

        def warned(stepping):
            """The warnings of 40 steps (their messages at the 31st too)."""
            m = net()
            opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                for t in range(40):
                    opt.zero_grad()
                    nn.functional.cross_entropy(m(x), y).backward()
                    if stepping:
                        opt.step()
                    if t == 30:
                        self.assertEqual(seen, [])
            if not stepping:
                opt.step()
            sft.shutdown()
            sft.init(world=1)
            return seen
        seen = warned(False)
        said = [str(w.message) for w in seen if "no step()" in str(w.message)]
        self.assertEqual(len(said), 1, said)
        self.assertIn("32 gradient reductions", said[0])
        self.assertEqual(seen[0].filename, __file__)  # (the user's line)
        self.assertEqual([str(w.message) for w in warned(True)], [])

    def test_parameter_unknown_to_the_optimizer(self):
        # refused at the first forward with gradients (another optimizer
        # over the same model, wrapped next, may hold it)
        m = net()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m[0].parameters(), lr=0.1), model=m)
        with torch.no_grad():
            m(torch.ones(2, 6))  # (no gradients: not yet)
        self.assertRaisesNaming(ValueError, ["2.weight", "no optimizer of the job holds it"],
                                m, torch.ones(2, 6))
        sft.shutdown()
        sft.init(world=1)
        # held by a second DistributedOptimizer over the same model: trains
        m = net()
        opts = [sft.DistributedOptimizer(torch.optim.SGD(part.parameters(), lr=0.1), model=m)
                for part in (m[0], m[2])]
        m(torch.ones(2, 6)).sum().backward()
        self.assertTrue(all(p.grad is not None for p in m.parameters()))
        for o in opts:
            o.step()
        del opt
        sft.shutdown()
        sft.init(world=1)
        # tensors the optimizer holds outside the model (a loss's layer, a
        # plain leaf): synchronized, named by their place in the optimizer
        # (they were refused: "not a parameter of the model")
        other, leaf = nn.Linear(2, 2), torch.zeros(3, requires_grad=True)
        m, ref = net(), net()
        ref_other, ref_leaf = copy.deepcopy(other), leaf.detach().clone().requires_grad_(True)
        opt = sft.DistributedOptimizer(torch.optim.SGD(
            list(m.parameters()) + list(other.parameters()) + [leaf], lr=0.1), model=m)
        ref_opt = torch.optim.SGD(list(ref.parameters()) + list(ref_other.parameters()) +
                                  [ref_leaf], lr=0.1)
        x, y = data()
        for model, o, lin, lf in ((m, opt, other, leaf), (ref, ref_opt, ref_other, ref_leaf)):
            for _ in range(3):
                o.zero_grad()
                z = model(x)
                (nn.functional.cross_entropy(lin(z[:, :2]), y % 2) + (lf * z.mean()).sum() ** 2
                 ).backward()
                o.step()
        for a, b in zip(list(m.parameters()) + list(other.parameters()) + [leaf],
                        list(ref.parameters()) + list(ref_other.parameters()) + [ref_leaf]):
            self.assertTrue(torch.allclose(a, b, rtol=1e-5, atol=1e-6))
        for words in ("Sequential.0 (8x6+bias)", "optimizer.param_groups[0][3] (2x2+bias)",
                      "optimizer.param_groups[0][5]"):
            self.assertIn(words, opt.plan)

    def test_staleness_needs_plain_sgd(self):
        m = net()
        for opt, why in ((torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), "momentum"),
                         (torch.optim.Adam(m.parameters()), "Adam")):
            self.assertRaisesNaming(ValueError, ["staleness 2", why], sft.DistributedOptimizer,
                                    opt, model=m, staleness=2)

    def test_bad_arguments(self):
        m = net()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for kw, word in (({"sync": "dense"}, "sync"), ({"staleness": -2}, "staleness"),
                         ({"backward_passes_per_step": 0}, "backward_passes_per_step"),
                         ({"max_samples": 0}, "max_samples"),
                         ({"bucket_cap_mb": 0}, "bucket_cap_mb"),
                         ({"bucket_cap_mb": float("nan")}, "bucket_cap_mb"),
                         ({"factor_dtype": "f16"}, "factor_dtype"),
                         ({"overlap": "no"}, "overlap 'no': expected True or False")):
            self.assertRaisesNaming(ValueError, [word], sft.DistributedOptimizer, opt, model=m,
                                    **kw)
        # an optimizer wrapper that is no Optimizer (apex's LARC, whose repr is
        # its inner SGD's): named, and told to go around the DistributedOptimizer
        class LARC:
            def __init__(self, inner):
                self.optim = inner

            def __repr__(self):
                return repr(self.optim)
        self.assertRaisesNaming(sft.UsageError, ["a LARC is not a torch.optim.Optimizer",
                                                 "it wraps a SGD", "LARC(sfb.torch."],
                                sft.DistributedOptimizer, LARC(opt), model=m)
        # a keyword neither its own nor Job.attach's: at once (it failed at the
        # first step, in Job.attach); attach's values at the first step
        self.assertRaisesNaming(TypeError, ["unexpected keyword argument 'nonsense'",
                                            "link_gbps"],
                                sft.DistributedOptimizer, opt, model=m, nonsense=3)
        for call, where in ((sft.broadcast_parameters, "broadcast_parameters"),
                            (sft.broadcast_object, "broadcast_object")):
            self.assertRaisesNaming(ValueError, [where + ": root_rank 5: expected a rank, 0 to 0"],
                                    call, m.state_dict(), root_rank=5)
        self.assertRaisesNaming(ValueError, ["broadcast_optimizer_state: root_rank -1"],
                                sft.broadcast_optimizer_state, opt, root_rank=-1)
        opt = sft.DistributedOptimizer(opt, model=m, link_gbps=-1.0)
        self.assertRaisesNaming(ValueError, ["link_gbps -1: expected a bandwidth"],
                                m(torch.ones(2, 6)).sum().backward)

    def test_step_without_backward(self):
        m = net()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        self.assertRaisesNaming(RuntimeError, ["step() without backward()"], opt.step)
        try:
            opt.step()
        except RuntimeError as e:
            self.assertNotIn(".grad was set otherwise", str(e))
            # (GSAM's step() runs its own passes: wrap its base optimizer)
            self.assertIn("wrap the base optimizer it steps", str(e))
        # (gradients made by hand, DP-SGD's per-sample ones from torch.func: named)
        first = next(m.parameters())
        first.grad = torch.ones_like(first)
        self.assertRaisesNaming(RuntimeError, ["step() without backward(): no gradient yet (",
                                               "'s .grad was set otherwise",
                                               "each sample's loss times its clip factor"],
                                opt.step)

    def test_backward_creating_a_graph_is_refused(self):
        """backward(create_graph=True) over the model's parameters is refused
        (.grad gets the reduced gradient, without a graph: a penalty on
        p.grad would differentiate nothing, silently or with torch's "does
        not require grad"); with inputs= naming an input only (R1's
        penalty) it is torch's: the input's gradient has its graph."""
        m = net()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        x = torch.ones(2, 6, requires_grad=True)
        for call in (lambda: m(x).sum().backward(create_graph=True),
                     lambda: m(x).sum().backward(None, False, True),
                     lambda: torch.autograd.backward([m(x).sum()], create_graph=True)):
            self.assertRaisesNaming(RuntimeError, ["backward(create_graph=True)",
                                                   "a penalty on p.grad",
                                                   "inputs=[x]) for an input's gradient"],
                                    call)
        m(x).pow(2).sum().backward(create_graph=True, inputs=[x])
        self.assertIsNotNone(x.grad.grad_fn)
        self.assertTrue(all(p.grad is None for p in m.parameters()))
        opt.zero_grad()

    def test_one_worker_is_plain_pytorch(self):
        """Linear layers through their factors, with momentum and weight decay
        and two backward passes a step: the parameters of plain PyTorch."""
        x, y = data()
        m, ref = net(), net()
        opt = sft.DistributedOptimizer(
            torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01), model=m,
            backward_passes_per_step=2)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
        self.assertIsInstance(opt, torch.optim.SGD)
        for _ in range(10):
            for o, model in ((opt, m), (ref_opt, ref)):
                o.zero_grad()
                for h in (slice(0, 16), slice(16, 32)):
                    nn.functional.cross_entropy(model(x[h]), y[h]).backward()
                o.step()
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            self.assertLess(float((p - q).abs().max()), 1e-5 * float(q.abs().max()), n)
        self.assertEqual(opt.clock, 10)
        self.assertIn("0 (8x6+bias): ", opt.plan)
        self.assertIn("2 (3x8): ", opt.plan)

    def test_factors_whatever_torch_calls_a_leaf_hook_with(self):
        """torch 2 runs a parameter's hooks with None where a function gave it
        no gradient (the weight and bias of a layer sfb carries by factors,
        every backward pass): no dense gradient, the layers stay on factors
        (they went densely, every one of them, on torch 2 before)."""
        x, y = data()
        m, ref = net(), net()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)

        def as_torch_2(grad):  # (inside backward, before the parameters' turn)
            for p in m.parameters():
                for h in list((getattr(p, "_backward_hooks", None) or {}).values()):
                    h(None)
        for _ in range(3):
            for o, model in ((opt, m), (ref_opt, ref)):
                o.zero_grad()
                out = model(x)
                if model is m:
                    out.register_hook(as_torch_2)
                nn.functional.cross_entropy(out, y).backward()
                o.step()
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            self.assertLess(float((p - q).abs().max()), 1e-5 * float(q.abs().max()), n)
        self.assertIn("0 (8x6+bias): sfb", opt.plan)
        self.assertIn("2 (3x8): sfb", opt.plan)

    @unittest.skipUnless(hasattr(torch, "compile"), "torch 2's torch.compile")
    def test_compiled_model_is_plain_pytorch(self):
        """torch.compile (the eager backend: no compiler needed) on a model
        whose layers go by factors: plain PyTorch's parameters."""
        x, y = data()
        m, ref = net(), net()
        cm = torch.compile(m, backend="eager")
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                       model=m)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            for _ in range(4):
                for o, model in ((opt, cm), (ref_opt, ref)):
                    o.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    o.step()
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            self.assertLess(float((p - q).abs().max()), 1e-5 * float(q.abs().max()), n)
        self.assertIn("0 (8x6+bias): sfb", opt.plan)
        # the factor functions' backward stays eager without a word
        self.assertEqual([str(w.message)[:80] for w in said if "Graph break" in str(w.message)],
                         [])

    @unittest.skipUnless(hasattr(torch, "compile"), "torch 2's torch.compile")
    def test_compiled_loss_is_counted(self):
        """A loss computed inside a compiled function (aot_eager: no
        compiler needed) still gives the pass what its mean divides by,
        and dynamo says nothing of sfb's bookkeeping."""
        import torch._dynamo  # noqa: F401 (loaded before wrapping, as a compiling program has)
        m = net()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        seen = []
        sft._env._optimizer.loss_counted = lambda *a: seen.append(a[:3])
        x, y = data()
        y = y.clone()
        y[::3] = -100

        @torch.compile(backend="aot_eager")
        def loss_of(x, y):
            out = m(x)
            return nn.functional.cross_entropy(out, y) + nn.functional.mse_loss(out, out * 0.5)

        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            for _ in range(2):
                opt.zero_grad()
                loss_of(x, y).backward()
                opt.step()
        kept = float((y != -100).sum())
        self.assertEqual(sorted(seen), sorted(
            [(kept, len(y), "ignore_index=-100"), (float(y.numel() * 3), y.numel() * 3, "")] * 2))
        self.assertEqual([str(w.message)[:80] for w in said if "Graph break" in str(w.message)],
                         [])

    def test_weight_used_outside_its_layer(self):
        """Layer 0's weight also used without its bias from the first step:
        that layer goes densely, as one process trains it; first used so in
        a later step: refused naming the layer and the step."""
        m = net()
        ref = copy.deepcopy(m)
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        x, y = data()
        for _ in range(3):
            for o, model in ((opt, m), (ref_opt, ref)):
                o.zero_grad()
                out = model(x) + nn.functional.linear(x, model[0].weight).sum()  # tied
                nn.functional.cross_entropy(out, y).backward()
                o.step()
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            self.assertLess(float((p - q).abs().max()), 1e-5 * float(q.abs().max()), n)
        self.assertIn("0 (8x6+bias): dense (a dense gradient besides its factors", opt.plan)
        self.assertIn("2 (3x8): ", opt.plan)
        self.assertNotIn("2 (3x8): dense", opt.plan)
        opt.zero_grad()
        out = m(x) + nn.functional.linear(torch.ones(1, 3), m[2].weight.t()).sum()  # from now on
        self.assertRaisesNaming(sft.UsageError, ["2 received a dense gradient after the job's "
                                                 "first backward() (3 reductions done",
                                                 "use it so there, with weight 0"],
                                nn.functional.cross_entropy(out, y).backward)

    def test_two_optimizers_are_plain_pytorch(self):
        """A DistributedOptimizer per model (an encoder's SGD with momentum,
        a decoder's Adam), both stepped after one backward(), then one of
        them alone: plain PyTorch's parameters; the plan names each model's
        layers by its class."""
        class Encoder(nn.Sequential):
            pass
        x, y = data()
        torch.manual_seed(4)
        enc, dec = Encoder(nn.Linear(6, 8), nn.Tanh()), nn.Sequential(nn.Linear(8, 3))
        ref_enc, ref_dec = copy.deepcopy(enc), copy.deepcopy(dec)

        def make(e, d):
            return (torch.optim.SGD(e.parameters(), lr=0.1, momentum=0.9),
                    torch.optim.Adam(d.parameters(), lr=0.01))
        oe, od = make(enc, dec)
        oe = sft.DistributedOptimizer(oe, model=enc)
        with torch.no_grad():  # (a forward without gradients: no graph holds the layers)
            dec(enc(x))
        od = sft.DistributedOptimizer(od, model=dec)
        self.assertIsInstance(oe, torch.optim.SGD)
        self.assertIsInstance(od, torch.optim.Adam)
        ro = make(ref_enc, ref_dec)
        for t in range(6):
            for (e, d), (a, b) in (((enc, dec), (oe, od)), ((ref_enc, ref_dec), ro)):
                a.zero_grad()
                b.zero_grad()
                nn.functional.cross_entropy(d(e(x)), y).backward()
                a.step()
                if t % 2 == 0:  # the decoder every other step only
                    b.step()
        for m, ref in ((enc, ref_enc), (dec, ref_dec)):
            for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
                self.assertLess(float((p - q).abs().max()), 1e-5 * float(q.abs().max()), n)
        self.assertEqual(oe.clock, 6)
        self.assertEqual(od.clock, 6)
        self.assertIn("Encoder.0 (8x6+bias): ", oe.plan)
        self.assertIn("Sequential.0 (3x8+bias): ", od.plan)

    def test_another_optimizer_refused_where_it_cannot_share_the_steps(self):
        """A second DistributedOptimizer with other settings, over a
        parameter of the first, at staleness > 0, or after the first
        backward(): refused, saying why."""
        g, d = net(), net()
        o = sft.DistributedOptimizer(torch.optim.SGD(g.parameters(), lr=0.1), model=g)
        self.assertRaisesNaming(sft.UsageError, ["sync differs from the job's first",
                                                 "sync='auto'", "the same settings"],
                                sft.DistributedOptimizer,
                                torch.optim.SGD(d.parameters(), lr=0.1), model=d, sync="fms")
        self.assertRaisesNaming(sft.UsageError, ["0.weight is in two DistributedOptimizers"],
                                sft.DistributedOptimizer,
                                torch.optim.SGD(g[0].parameters(), lr=0.1), model=g)
        x, y = data()
        out = g(x)
        self.assertRaisesNaming(sft.UsageError, ["after the first forward with gradients"],
                                sft.DistributedOptimizer,
                                torch.optim.SGD(d.parameters(), lr=0.1), model=d)
        nn.functional.cross_entropy(out, y).backward()
        self.assertRaisesNaming(sft.UsageError, ["or backward()"],
                                sft.DistributedOptimizer,
                                torch.optim.SGD(d.parameters(), lr=0.1), model=d)
        o.step()
        sft.shutdown()
        sft.init(world=1)
        sft.DistributedOptimizer(torch.optim.SGD(g.parameters(), lr=0.1), model=g, staleness=1)
        self.assertRaisesNaming(sft.UsageError, ["staleness=0"], sft.DistributedOptimizer,
                                torch.optim.SGD(d.parameters(), lr=0.1), model=d, staleness=1)

    def test_every_public_name_has_a_docstring(self):
        """The package's public functions and the optimizer's methods say what
        they do (and what they raise, where they can fail)."""
        m = net()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        names = [(n, getattr(sft, n)) for n in sft.__all__ if n != "elastic"]
        names += [("elastic." + n, getattr(sft.elastic, n)) for n in sft.elastic.__all__]
        names += [("opt." + n, getattr(type(opt), n)) for n in
                  ("step", "synchronize", "set_samples", "join", "state_dict",
                   "load_state_dict", "plan", "clock")]
        for n, o in names:
            if isinstance(o, type) and issubclass(o, Exception):
                continue
            doc = o.__doc__ or ""
            self.assertGreater(len(doc), 40, n)
            if n not in ("is_initialized", "opt.state_dict", "opt.plan", "opt.clock"):
                self.assertIn("Raises", doc, n)

    def test_functional_linear_is_torch_s_again_after_shutdown(self):
        """F.linear on a user's parameter goes by factors (one worker: the
        same parameters as plain PyTorch), and shutdown gives torch its own
        F.linear back."""
        torch_linear = nn.functional.linear

        class User(nn.Module):
            def __init__(self):
                super().__init__()
                torch.manual_seed(4)
                self.w = nn.Parameter(torch.randn(3, 6))
                self.b = nn.Parameter(torch.zeros(3))
                self.w2 = nn.Parameter(torch.randn(3, 3))

            def forward(self, x):
                h = torch.tanh(nn.functional.linear(x, self.w, self.b))
                return nn.functional.linear(h, self.w2)

        x, y = data()
        m, ref = User(), User()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                       model=m, sync="sfb")
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        self.assertIsNot(nn.functional.linear, torch_linear)
        for _ in range(5):
            for o, model in ((opt, m), (ref_opt, ref)):
                o.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                o.step()
        self.assertIn("w (3x6+bias): sfb", opt.plan)
        self.assertIn("w2 (3x3): sfb", opt.plan)
        # a slice of a weight that goes by factors is a dense gradient: refused
        opt.zero_grad()
        out = m(x) + nn.functional.linear(x[:, :3], m.w[:, :3]).sum()
        self.assertRaisesNaming(sft.UsageError, ["w received a dense gradient", "slice"],
                                nn.functional.cross_entropy(out, y).backward)
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            self.assertLess(float((p - q).abs().max()), 1e-6 * float(q.abs().max()), n)
        sft.shutdown()  # (the error ended the job: it only leaves, adding no error of its own)
        self.assertIs(nn.functional.linear, torch_linear)  # given back

    def assertPlainSteps(self, make, loss, what, lr=0.1):
        """Three SGD steps of make()'s model through a DistributedOptimizer,
        loss(model) each, are plain PyTorch's (a new job after)."""
        torch.manual_seed(4)
        m = make()
        ref = copy.deepcopy(m)
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=lr), model=m)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=lr)
        for _ in range(3):
            for model, o in ((m, opt), (ref, ref_opt)):
                o.zero_grad()
                loss(model).backward()
                o.step()
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            self.assertLess(float((p - q).abs().max()), 1e-6, "%s %s" % (what, n))
        sft.shutdown()
        sft.init(world=1)

    def test_allreduce_sizes_and_in_place(self):
        """allreduce takes tensors up to 1 MiB of their own bytes (a 400 x 400
        float32 cross-correlation: it counted them in float64 and refused),
        refuses more naming the shape and allgather; its float64 result
        with gradient may be changed in place (no view)."""
        c = torch.full((400, 400), 0.5)
        self.assertTrue(torch.equal(sft.allreduce(c, op="sum"), c))
        with self.assertRaises(sft.UsageError) as got:
            sft.allreduce(torch.zeros(600, 600), op="sum")
        self.assertIn("600x600 tensor of 1440000 bytes", str(got.exception))
        self.assertIn("sfb.torch.allgather", str(got.exception))
        t = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
        out = sft.allreduce(t * 3, op="sum")
        out.mul_(2)
        out.sum().backward()
        self.assertEqual(t.grad.tolist(), [6.0, 6.0])

    def test_linear_output_changed_in_place(self):
        """A Linear's output over (B, T, D) tokens changed in place (torch
        gives a contiguous 3-D input with a bias addmm's result viewed):
        nn.ReLU(inplace=True), a residual added by +=, a class masked by
        assignment; three SGD steps are plain PyTorch's (it failed: a view
        returned by a custom Function changed in place)."""
        x, y = torch.randn(3, 4, 6), torch.randint(0, 5, (12,))

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc, self.act, self.fc2, self.out = nn.Linear(6, 6), \
                    nn.ReLU(inplace=True), nn.Linear(6, 6), nn.Linear(6, 5)

            def forward(self, x):
                h = self.fc2(self.act(self.fc(x)))
                h += x
                logits = self.out(h)
                logits[..., 0] = -1e4
                return logits.reshape(-1, 5)
        self.assertPlainSteps(Block, lambda m: nn.functional.cross_entropy(m(x), y), "in place")

    def test_embedding_bag_of_every_mode(self):
        """nn.EmbeddingBag's modes through sfb's rows (max mode, which torch
        looks up densely only, too), with offsets and an empty bag: three
        SGD steps are plain PyTorch's."""
        ids, offsets = torch.tensor([1, 5, 5, 7, 2, 11, 1]), torch.tensor([0, 3, 3, 5])
        y = torch.tensor([0, 2, 1, 1])
        for mode in ("sum", "mean", "max"):
            self.assertPlainSteps(
                lambda: nn.ModuleDict({"bag": nn.EmbeddingBag(12, 4, mode=mode),
                                       "fc": nn.Linear(4, 3)}),
                lambda m: nn.functional.cross_entropy(m["fc"](m["bag"](ids, offsets)), y),
                mode, lr=0.5)

    def test_functorch_over_the_model(self):
        """functorch's transforms over the model (a Jacobian penalty by
        vmap(jacrev(model)), vmap(model) in the forward) from the first step:
        inside them the layers are torch's (no autograd.Function there) and
        go densely; three SGD steps are plain PyTorch's."""
        try:
            from functorch import jacrev, vmap
        except ImportError:
            from torch.func import jacrev, vmap
        x, y = torch.randn(5, 6), torch.tensor([0, 2, 1, 1, 0])
        penalty = {"jacrev": lambda m: vmap(jacrev(lambda xi: m(xi[None])[0]))(x),
                   "vmap": lambda m: vmap(lambda xi: m(xi[None]))(x)}
        for kind, J in penalty.items():
            self.assertPlainSteps(
                lambda: nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Unflatten(1, (1, 8)),
                                      nn.Conv1d(1, 2, 3), nn.Flatten(), nn.Linear(12, 3)),
                lambda m: nn.functional.cross_entropy(m(x), y) + 0.1 * J(m).pow(2).mean(),
                kind)
        # a BatchNorm in training mode under vmap over tasks (functorch's MAML
        # example): each task normalized by its own statistics, torch's (it
        # failed: sfb.torch's gathering autograd.Function inside vmap)
        tasks, labels = torch.randn(3, 5, 6), torch.randint(0, 3, (3, 5))
        self.assertPlainSteps(
            lambda: nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8, track_running_stats=False),
                                  nn.Tanh(), nn.Linear(8, 3)),
            lambda m: nn.functional.cross_entropy(vmap(m)(tasks).reshape(-1, 3),
                                                  labels.reshape(-1)), "batchnorm in vmap")

    def test_param_group_added_between_jobs(self):
        """add_param_group on a DistributedOptimizer: refused while its job
        lives, the optimizer's own once shutdown() ended it (PGGAN's
        growing: a block and its group added, then wrapped in the next
        job), and that job trains the new group (it stayed refused)."""
        m, block = net(), nn.Linear(3, 3)
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        self.assertRaisesNaming(sft.UsageError, ["add_param_group"], opt.add_param_group,
                                {"params": list(block.parameters())})
        sft.shutdown()
        sft.init(world=1)
        opt.add_param_group({"params": list(block.parameters()), "lr": 0.5})
        self.assertEqual(len(opt.param_groups), 2)
        grown = nn.Sequential(m, block)
        opt = sft.DistributedOptimizer(opt, model=grown)
        before = block.weight.detach().clone()
        grown(torch.randn(4, 6)).sum().backward()
        opt.step()
        self.assertFalse(torch.equal(before, block.weight))
        sft.shutdown()
        sft.init(world=1)

    def test_scripted_batchnorm_refused(self):
        """A BatchNorm in training mode inside a scripted or traced part of
        an eager model (it normalized by each rank's own statistics there, in
        silence): refused at the first forward, naming it; in eval() the
        part trains."""
        for script in (torch.jit.script, lambda b: torch.jit.trace(b, torch.randn(3, 4))):
            block = script(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)))
            m = nn.Sequential(nn.Linear(3, 4), block, nn.Linear(4, 2))
            opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
            self.assertRaisesNaming(sft.UsageError, ["BatchNorm1d 1.1", "TorchScript"], m,
                                    torch.randn(5, 3))
            sft.shutdown()
            sft.init(world=1)
            m[1].eval()
            opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
            m(torch.randn(5, 3)).sum().backward()
            opt.step()
            sft.shutdown()
            sft.init(world=1)

    def test_embedding_frequency_scaling_refused(self):
        """scale_grad_by_freq divides by counts over the minibatch, which no
        rank sees whole: refused naming the table and the reason."""
        m = nn.Sequential(nn.Embedding(10, 4, scale_grad_by_freq=True), nn.Flatten(),
                          nn.Linear(8, 3))
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        tok = torch.randint(0, 10, (5, 2))
        self.assertRaisesNaming(sft.UsageError, ["0.weight", "scale_grad_by_freq"], m, tok)
        del opt

    def test_modules_whose_mode_matters(self):
        """The modules whose train()/eval() the ranks must share: dropouts
        with p > 0, RReLU, a recurrent stack's and attention's dropout, and
        a module of the program's own whose forward reads self.training; not
        torch's others (a transformer layer's fast path, a Linear), nor a
        dropout that drops nothing; and torch's random modules' rates; not a
        module that ran on no rank."""
        from sfb.torch import _modes

        class Noisy(nn.Module):
            def forward(self, x):
                return x + 1 if self.training else x

        class Plain(nn.Module):
            def forward(self, x):
                return x

        # .training read where forward only names it: a method, a property, a
        # base class's forward through super(), a module-level function given
        # the module, a comprehension, a function written inside forward
        class ByMethod(nn.Module):
            def noise(self, x):
                return x + 1 if self.training else x

            def forward(self, x):
                return self.noise(x)

        class ByProperty(nn.Module):
            @property
            def drops(self):
                return self.training

            def forward(self, x):
                return x * 2 if self.drops else x

        class BySuper(Noisy):
            def forward(self, x):
                return super().forward(x) * 3

        class ByComprehension(nn.Module):
            def forward(self, xs):
                return [x + 1 for x in xs if self.training]

        class Inner(nn.Module):
            def forward(self, x):
                def f(t):
                    return t + 1 if self.training else t
                return f(x)

        class ByFunction(nn.Module):
            def forward(self, x):
                return _noise_of(self, x)

        class PlainHelpers(nn.Module):  # (helpers that never read it)
            def scale(self, x):
                return x * 2

            def forward(self, x):
                return [self.scale(t) for t in x] + [_plain_of(self, x)]

        class OwnLinear(nn.Linear):  # (torch's forward: not read through)
            pass

        yes = [nn.Dropout(0.1), nn.Dropout2d(0.5), nn.AlphaDropout(0.2), nn.RReLU(),
               nn.LSTM(4, 4, num_layers=2, dropout=0.1), nn.MultiheadAttention(4, 2, dropout=0.1),
               Noisy(), ByMethod(), ByProperty(), BySuper(), ByComprehension(), Inner(),
               ByFunction()]
        no = [nn.Dropout(0.0), nn.LSTM(4, 4, dropout=0.0), nn.LSTM(4, 4, num_layers=2),
              nn.MultiheadAttention(4, 2), nn.Linear(2, 2), Plain(), nn.BatchNorm1d(3),
              nn.TransformerEncoderLayer(4, 2, dropout=0.0), PlainHelpers(), OwnLinear(2, 2)]
        self.assertEqual([type(m).__name__ for m in yes if not _modes.matters(m)], [])
        self.assertEqual([type(m).__name__ for m in no if _modes.matters(m)], [])
        layer = nn.TransformerEncoderLayer(4, 2, dropout=0.1)
        self.assertEqual([n for n, _ in _modes.of(layer)],
                         ["self_attn", "dropout", "dropout1", "dropout2"])
        before = _modes.crc(_modes.of(layer))
        train_text = _modes.eval_text(_modes.of(layer))
        layer.dropout1.eval()
        self.assertNotEqual(_modes.crc(_modes.of(layer)), before)
        self.assertIn("dropout1 (Dropout) is in eval() on ranks 0, 2 and in train() on rank 1",
                      _modes.mismatch(_modes.of(layer), [_modes.eval_text(_modes.of(layer)),
                                                         train_text,
                                                         _modes.eval_text(_modes.of(layer))],
                                      7)[0])
        # a rate changed on some ranks: in the checksum, named with each side's
        layer.dropout1.train()
        layer.dropout2.p = 0.25
        self.assertNotEqual(_modes.crc(_modes.of(layer)), before)
        self.assertIn("at step 3 the ranks' modules differ: dropout2 (Dropout) has p=0.25 on "
                      "ranks 0, 2 and p=0.1 on rank 1; one process has one rate",
                      _modes.mismatch(_modes.of(layer), [_modes.eval_text(_modes.of(layer)),
                                                         train_text,
                                                         _modes.eval_text(_modes.of(layer))],
                                      3)[0])
        # a module that ran on no rank since the last reduction: let be; one
        # that ran on some rank: refused
        layer.dropout2.p = 0.1
        mods = _modes.of(layer)
        ran = {id(m) for _, m in mods if m is not layer.dropout1}
        layer.dropout1.eval()
        apart = _modes.eval_text(mods, ran)
        layer.dropout1.train()
        together = _modes.eval_text(mods, ran)
        self.assertEqual(_modes.mismatch(mods, [apart, together], 4), (None, None, None))
        self.assertIn("dropout1 (Dropout) is in eval() on rank 0 and in train() on rank 1",
                      _modes.mismatch(mods, [apart, _modes.eval_text(mods, ran | {
                          id(layer.dropout1)})], 4)[0])
        # a dropout that drops nothing: its mode left out, its rate kept (raised later)
        m = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.0))
        mods = _modes.of(m)
        self.assertEqual([n for n, _ in mods], ["1"])
        before = _modes.crc(mods)
        m[1].eval()
        self.assertEqual(_modes.crc(mods), before)
        self.assertEqual(_modes.drawing(mods), [])
        m[1].p = 0.5
        self.assertNotEqual(_modes.crc(mods), before)

    def test_gradient_not_finite_where_torch_s_is_not(self):
        """A gradient that is not finite (an inf input) reaches .grad as not
        finite where plain PyTorch's is, per parameter (the job failed: the
        library publishes finite numbers only): a layer whose input holds an
        inf and whose output the loss ignores has a weight gradient of NaN
        (0 x inf) and a bias gradient of 0; a dense parameter's too."""
        def make():
            torch.manual_seed(4)
            return nn.ModuleDict({"a": nn.Linear(4, 3), "b": nn.Linear(4, 3),
                                  "n": nn.LayerNorm(3)})

        def loss(m, x, z, keep):
            out = torch.where(keep, m["a"](x), m["n"](m["b"](z)))
            return nn.functional.mse_loss(out, torch.zeros_like(out))

        g = torch.Generator().manual_seed(6)
        x, z = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g)
        x[2, 1] = float("inf")
        keep = torch.zeros(5, 3, dtype=torch.bool)
        finite = []
        for wrapped in (False, True):
            m = make()
            if wrapped:
                opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
            loss(m, x, z, keep).backward()
            finite.append({n: bool(torch.isfinite(p.grad).all()) for n, p in m.named_parameters()})
            if wrapped:
                self.assertEqual(float(m["a"].bias.grad.abs().sum()), 0.0)
                del opt
        self.assertEqual(finite[1], finite[0])
        self.assertEqual(sorted(n for n, ok in finite[0].items() if not ok), ["a.weight"])
        # the LayerNorm's (a dense parameter): an inf through it
        z[0, 0] = float("inf")
        sft.shutdown()
        sft.init(world=1)
        m = make()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        loss(m, x, z, keep).backward()
        self.assertFalse(bool(torch.isfinite(m["n"].weight.grad).all()))
        del opt

    @unittest.skipUnless(hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"),
                         "torch.amp.GradScaler on CPU: torch 2.3 on")
    def test_grad_scaler_skips_as_plain_pytorch(self):
        """torch.amp.GradScaler("cpu") under float16 autocast, a loss past
        float16's range at step 3: the scaler skips that step and halves
        its scale as in plain PyTorch (the job failed there: the library
        refused to publish the inf)."""
        x, y = data()
        runs = []
        for wrapped in (False, True):
            m = net()
            opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
            if wrapped:
                opt = sft.DistributedOptimizer(opt, model=m)
            scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12, growth_interval=2)
            scales = []
            for t in range(6):
                opt.zero_grad()
                with torch.autocast("cpu", dtype=torch.float16):
                    loss = nn.functional.cross_entropy(m(x), y) * (1e30 if t == 3 else 1.0)
                scaler.scale(loss).backward()
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
                scaler.step(opt)
                scaler.update()
                scales.append(scaler.get_scale())
            runs.append((scales, [p.detach().clone() for p in m.parameters()]))
        self.assertEqual(runs[1][0], runs[0][0])
        self.assertLess(runs[0][0][3], runs[0][0][2])  # (the step skipped: the scale halved)
        for p, q in zip(runs[1][1], runs[0][1]):
            self.assertTrue(torch.allclose(p, q, rtol=1e-2, atol=1e-3))

    def test_mean_losses_count_their_kept_targets(self):
        """F.cross_entropy's and F.nll_loss's means over class indices divide
        by the targets they keep (ignore_index), weighed by class, over
        probabilities by the samples, the element-wise losses' by their
        elements (kl_div's batchmean by the rows): a call whose output
        reaches backward() gives the pass that count, the loss's name and
        the user's line; sums, a reduction by hand, forwards without a
        backward and torch.autograd.grad give nothing; shutdown gives torch
        its functions back."""
        from sfb.torch import _losses
        t = torch.tensor([[1, -100, 2], [0, 3, -100]])
        w = torch.tensor([1.0, 2.0, 3.0, 4.0])
        self.assertEqual(_losses.count(t, None, -100), (4.0, 6, "ignore_index=-100"))
        self.assertEqual(_losses.count(t, w, -100), (10.0, 6, "ignore_index=-100, weight="))
        self.assertEqual(_losses.count(torch.tensor([1, 2]), None, -100), (2.0, 2, ""))
        torch_ce, torch_nll = nn.functional.cross_entropy, nn.functional.nll_loss
        torch_mse = nn.functional.mse_loss
        torch.manual_seed(3)
        m = nn.Linear(4, 4)
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        seen = []
        sft._env._optimizer.loss_counted = lambda *a: seen.append(a)
        x, y = torch.randn(6, 4), torch.tensor([1, -100, 2, 0, 3, -100])
        F = nn.functional
        for loss, want in (
                (lambda: F.cross_entropy(m(x), y), (4.0, 6, "ignore_index=-100")),
                (lambda: nn.CrossEntropyLoss(weight=w, label_smoothing=0.1)(m(x), y),
                 (10.0, 6, "ignore_index=-100, weight=")),
                (lambda: F.nll_loss(F.log_softmax(m(x), 1), y.clamp(min=0), ignore_index=0) / 2,
                 (3.0, 6, "ignore_index=0")),
                (lambda: F.cross_entropy(m(x), y, reduction="sum"), None),
                (lambda: F.nll_loss(F.log_softmax(m(x), 1), y.clamp(min=0), size_average=False),
                 None),
                (lambda: F.cross_entropy(m(x), torch.softmax(x, 1)), (6.0, 6, "")),
                (lambda: nn.MSELoss()(m(x), x), (24.0, 24, "")),
                (lambda: F.mse_loss(m(x), x[:1]), (24.0, 24, "")),  # (broadcast)
                (lambda: F.l1_loss(m(x), x, reduction="sum"), None),
                (lambda: nn.KLDivLoss(reduction="batchmean")(F.log_softmax(m(x), 1),
                                                            torch.softmax(x, 1)), (6.0, 6, "")),
                (lambda: F.binary_cross_entropy_with_logits(m(x), torch.sigmoid(x)),
                 (24.0, 24, "")),
                (lambda: F.smooth_l1_loss(m(x), x, reduction="none").mean(), None)):
            del seen[:]
            opt.zero_grad()
            loss().backward()
            opt.step()
            self.assertEqual([a[:3] for a in seen], [want] if want else [], want)
            if want:
                self.assertRegex(seen[0][3], r"^[a-z_]+ \(test_torch\.py:[0-9]+\)$")
        del seen[:]
        F.cross_entropy(m(x), y)  # (a forward with gradients and no backward)
        with torch.no_grad():
            F.cross_entropy(m(x), y)
        xg = x.clone().requires_grad_()
        torch.autograd.grad(F.cross_entropy(m(xg), y), xg)
        self.assertEqual(seen, [])
        sft.shutdown()
        self.assertIs(nn.functional.cross_entropy, torch_ce)
        self.assertIs(nn.functional.nll_loss, torch_nll)
        self.assertIs(nn.functional.mse_loss, torch_mse)

    def test_a_term_summed_beside_a_mean_is_found(self):
        """A term summed over the samples beside others in what backward()
        gets (a mean plus a KL term's .sum(), a loss with reduction="sum",
        an activations' L1 penalty, through a frozen layer, a convolution,
        an embedding, a softmax over the classes) is named where the world
        is larger than one; not where it is multiplied by the world or by
        0, divided by a value, a sum over the weights or over a minibatch
        statistic, the loss's only term, or the world one."""
        from sfb.torch import _losses
        g = torch.Generator().manual_seed(6)
        torch.manual_seed(6)
        lin, frozen = nn.Linear(3, 4), nn.Linear(4, 4).requires_grad_(False)
        conv, emb = nn.Conv1d(2, 3, 3), nn.Embedding(10, 4)
        hyper0, hyper, code = nn.Linear(3, 4), nn.Linear(4, 12), nn.Parameter(torch.randn(2, 3))
        x, y = torch.randn(5, 3, generator=g), torch.tensor([0, 1, 2, 3, 1])
        t = torch.rand(5, 4, generator=g)
        out = lin(x)
        ce = nn.functional.cross_entropy(out, y)
        mu, lv = out[:, :2], out[:, 2:]
        kld = -0.5 * torch.sum(1 + lv - mu.pow(2) - lv.exp())
        c = out - out.mean(0)
        p = out.softmax(1)
        summed = ".sum()"
        P = 4
        for loss, want in (
                (ce + out.pow(2).sum(), summed),
                (ce + 0.1 * kld, summed),
                (nn.functional.mse_loss(out, t) - nn.functional.binary_cross_entropy(
                    torch.sigmoid(out), t, reduction="sum"),
                 'binary_cross_entropy(reduction="sum")'),
                (ce + nn.functional.cross_entropy(out, y, reduction="sum"),
                 'cross_entropy(reduction="sum")'),
                (ce + frozen(out).abs().sum(), summed),
                (ce + conv(torch.randn(5, 2, 6, generator=g)).sum(), summed),
                (ce + emb(torch.tensor([1, 2, 2])).sum(), summed),
                (ce + (p * p.log()).sum(), summed),
                (ce + 1e-2 * (out.norm() ** 2 + emb(torch.tensor([1, 2])).norm(2).pow(2)),
                 "a squared norm (.norm() ** 2)"),
                (-out.sum() * P + out.norm() ** 2, "a squared norm (.norm() ** 2)"),
                (ce + out.norm(dim=0).pow(2).sum(), summed),
                (ce + out.norm(dim=1).pow(2).mean(), None),
                (ce + 1e-2 * out.norm() ** 2 / 5, None),
                (ce + 0.1 * kld * P, None),
                (ce + kld / 5, None),
                (ce + 0 * out.sum(), None),
                (ce + sum(q.pow(2).sum() for q in lin.parameters()), None),
                # (a penalty on a hypernetwork's generated weights: no sample in it)
                (ce + hyper(torch.tanh(hyper0(code))).pow(2).sum(), None),
                (ce + hyper(torch.tanh(hyper0(x))).pow(2).sum(), summed),
                (ce + (c.t() @ c).pow(2).sum(), None),
                (ce + out.softmax(0).sum(), None),
                (kld, None),
                (ce, None)):
            self.assertEqual(_losses.summed_term(loss, None, P), want, loss.grad_fn)
        self.assertIsNone(_losses.summed_term(ce + kld, None, 1))
        self.assertIsNone(_losses.summed_term([ce, kld], None, P))

    def test_a_python_sum_over_the_samples_is_found(self):
        """A Python sum of losses from forwards of their own, each of one
        sample (a per-sample loop, actor-critic's per-step policy and value
        losses of 1-D states) or each a mean over one row of the same
        targets (MAML's tasks), is a sum over the samples: the number of
        forwards, and whether
        it is multiplied by the world (one process's sum); not where the
        terms are averaged or divided by a count, share a forward (a decoder's steps through its hidden state,
        one forward's outputs picked), take targets that are tensors of
        their own or columns, or the world is one."""
        from sfb.torch import _losses
        g = torch.Generator().manual_seed(7)
        torch.manual_seed(7)
        lin, cell = nn.Linear(3, 4), nn.GRUCell(3, 4)
        x, y = torch.randn(6, 3, generator=g), torch.tensor([0, 1, 2, 3, 1, 0])
        t = torch.randn(6, 4, generator=g)
        ce, mse = nn.functional.cross_entropy, nn.functional.mse_loss
        xq, yq = torch.randn(3, 5, 3, generator=g), torch.randint(0, 4, (3, 5), generator=g)
        P, n = 4, len(y)
        per = [ce(lin(x[i:i + 1]), y[i:i + 1]) for i in range(n)]
        one = [ce(lin(x[i]), y[i]) for i in range(n)]
        out = lin(x)
        h, steps = torch.zeros(1, 4), []
        for i in range(n):  # (a decoder's steps: each through the one before)
            h = cell(x[i:i + 1], h)
            steps.append(ce(h, y[i:i + 1]))
        # (actor-critic's: a policy and a value from one forward of a state
        # each step, 1-D, the returns numbers without gradient)
        trunk, pol, val = nn.Linear(3, 4), nn.Linear(4, 2), nn.Linear(4, 1)
        R = torch.randn(n, generator=g)
        policy, value = [], []
        for i in range(n):
            h1 = torch.tanh(trunk(x[i]))
            probs = torch.softmax(pol(h1), -1)
            policy.append(-torch.distributions.Categorical(probs).log_prob(y[i] % 2) * R[i])
            value.append(nn.functional.smooth_l1_loss(val(h1), torch.tensor([float(R[i])])))
        for loss, want in (
                (torch.stack(policy).sum() + torch.stack(value).sum(), n),
                (torch.stack(policy).sum(), n),
                (sum(value), n),
                (torch.stack(policy).mean(), None),
                (sum(per), n),
                (sum(one), n),
                (torch.stack(per).sum(), n),
                (0.5 * sum(per), n),
                (sum(mse(lin(x[i]), t[i]) for i in range(n)), n),
                (sum(ce(lin(xq[i]), yq[i]) for i in range(3)), 3),  # (MAML's tasks)
                (sum(2.0 * q for q in per), n),
                (sum(per) / n, None),
                (torch.stack(per).mean(), None),
                (sum(q / n for q in per), None),
                (sum(steps), None),
                (sum(ce(out[i:i + 1], y[i:i + 1]) for i in range(n)), None),
                (sum(ce(lin(x[:3]), yq[:, i]) for i in range(2)), None),  # (columns)
                (ce(lin(x[:1]), y[:1]) + ce(lin(x[:1]), y[:1]), None),
                # (a batch of one: a discriminator on a real and a fake sample,
                # WGAN-GP's three unlike terms)
                (nn.functional.binary_cross_entropy_with_logits(lin(x[0]), t[0]) +
                 nn.functional.binary_cross_entropy_with_logits(lin(x[1]), t[1] * 0), None),
                (lin(x[0]).mean() - lin(x[1]).mean() + (lin(x[2]).norm() - 1) ** 2, None),
                (sum(ce(lin(x[i:i + 1]), y[i:i + 1].clone()) for i in range(n)), n),
                (per[0], None)):
            self.assertEqual(_losses.picked_sum(loss, None, P), want and (want, False),
                             loss.grad_fn)
        self.assertEqual(_losses.picked_sum(sum(per) * P, None, P), (n, True))
        self.assertEqual(_losses.picked_sum(P * (torch.stack(policy).sum() + sum(value)), None, P),
                         (n, True))
        self.assertEqual(_losses.picked_sum(P * torch.stack(one).sum(), None, P), (n, True))
        self.assertIsNone(_losses.picked_sum(sum(per), None, 1))

    def test_a_tensor_normalized_over_the_samples_is_found(self):
        """A tensor without gradient in the loss with mean 0 and standard
        deviation 1 over the rank's samples (PPO's advantages normalized
        per minibatch, a product's or a quotient's side; an element-wise
        loss's target standardized per batch, each column), or weights
        summing to 1 over them (w / w.sum(), a softmax: a weighted mean, not
        read as a sum), is named; not a raw one, one normalized over a
        union this is a share of, one of three samples, one under a layer
        (the model's input), a one-hot choice, or where the world is one."""
        from sfb.torch import _losses
        F = nn.functional
        g = torch.Generator().manual_seed(8)
        torch.manual_seed(8)
        lin = nn.Linear(3, 4)
        x, y = torch.randn(8, 3, generator=g), torch.tensor([0, 1, 2, 3, 1, 0, 2, 2])
        norm = lambda a: (a - a.mean(0)) / (a.std(0) + 1e-8)  # noqa: E731
        raw = torch.randn(8, generator=g) * 3 + 1
        union = norm(torch.randn(32, generator=g))[8:16]
        t = torch.randn(8, 2, generator=g) * 5
        out = lin(x)
        logp = F.log_softmax(out, 1).gather(1, y[:, None]).squeeze(1)
        ratio = (logp - logp.detach()).exp()
        fac, tgt = ("a factor", _losses._STANDARDIZED), ("a target", _losses._STANDARDIZED)
        wts = ("a factor", _losses._WEIGHTS)
        w = raw.abs() / raw.abs().sum()
        each = F.cross_entropy(out, y, reduction="none")
        for loss, want in (
                (-(logp * norm(raw)).mean(), fac),
                (-torch.min(ratio * norm(raw), ratio.clamp(0.8, 1.2) * norm(raw)).mean(), fac),
                (-(norm(raw) * logp).mean(), fac),
                ((logp / norm(raw).exp()).mean(), None),
                (F.mse_loss(out[:, :2], norm(t)), tgt),
                (F.smooth_l1_loss(out[:, 0], norm(raw)), tgt),
                (-(logp * raw).mean(), None),
                (-(logp * union).mean(), None),
                (-(logp[:3] * norm(raw[:3])).mean(), None),
                (F.cross_entropy(lin(norm(x)), y), None),
                (F.mse_loss(out[:, :2], t), None),
                ((each * w).sum(), wts),
                ((each * (raw.softmax(0))).sum(), wts),
                ((each * F.one_hot(torch.tensor(2), 8)).sum(), None),  # (one sample chosen)
                ((each * raw.abs() / raw.abs().sum()).sum(), None),  # (divided by a value)
                ((each * w * 8).sum(), wts),
                # (an MoE's fractions beside a mean over the samples: no sample weights)
                (8 * (F.one_hot(out.argmax(1), 4).float().mean(0) * out.softmax(1).mean(0)).sum(),
                 None)):
            self.assertEqual(_losses.standardized(loss, None, 4), want, loss.grad_fn)
        # (a weighted mean: no sum over the samples)
        self.assertIsNone(_losses.of_root((each * w).sum(), None, 4))
        self.assertEqual(_losses.of_root(each.sum(), None, 4)[2], _losses.SUMMED)
        self.assertIsNone(_losses.standardized(-(logp * norm(raw)).mean(), None, 1))

    def test_masks_drawn_by_functions_are_noted(self):
        """While a DistributedOptimizer lives, F.dropout and its kin in
        training and bernoulli of more than one number from torch's
        generator note the user's line (the same-seed warning names them)
        and draw what torch draws; a weight's dropout, evaluation, one
        number, a generator of the program's: nothing; shutdown gives torch
        its functions back."""
        from sfb.torch import _capture, _modes
        F = nn.functional
        torch_fns = (F.dropout, F.alpha_dropout, torch.bernoulli, torch.Tensor.bernoulli_)
        m = nn.Linear(4, 4)
        sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        drew = _capture._active.drew
        x = torch.rand(3, 4)
        for fn, noted in ((lambda: F.dropout(x, 0.5, False), None),
                          (lambda: F.dropout(m.weight, 0.5), None),
                          (lambda: F.alpha_dropout(x, 0.5), None),  # (training=False)
                          (lambda: torch.empty(1).bernoulli_(0.5), None),
                          (lambda: x.clone().bernoulli_(0.5, generator=torch.Generator()), None),
                          (lambda: F.dropout(x, p=0.0), None),
                          (lambda: F.dropout(x, 0.5), "F.dropout"),
                          (lambda: F.dropout2d(x[None, None], training=True), "F.dropout2d"),
                          (lambda: F.alpha_dropout(x, 0.5, True), "F.alpha_dropout"),
                          (lambda: torch.bernoulli(x), "torch.bernoulli"),
                          (lambda: x.bernoulli(), "bernoulli"),
                          (lambda: torch.empty(3, 1).bernoulli_(0.8), "bernoulli_")):
            drew.clear()
            line = "test_torch.py:%d" % fn.__code__.co_firstlineno
            torch.manual_seed(5)
            got = fn()
            self.assertEqual(drew, {line: noted} if noted else {}, line)
            torch.manual_seed(5)
            _modes.intercept(None)  # (torch's own: the same draw)
            try:
                self.assertTrue(torch.equal(fn(), got), line)
            finally:
                _modes.intercept(_capture._active)
        sft.shutdown()
        self.assertEqual((F.dropout, F.alpha_dropout, torch.bernoulli, torch.Tensor.bernoulli_),
                         torch_fns)

    def test_a_count_summed_over_the_ranks_is_found(self):
        """A loss divided by a count sfb.torch.allreduce(op="sum") returned
        (fairseq's sum over the tokens over every rank's tokens) is read
        with the count and the allreduce's line; times a multiple of the
        world, by another count, a penalty on the weights: nothing."""
        from sfb.torch import _losses
        g = torch.Generator().manual_seed(7)
        lin = nn.Linear(3, 4)
        x, y = torch.randn(5, 3, generator=g), torch.tensor([0, 1, 2, 3, 1])
        out = lin(x)
        lp = out.log_softmax(1)
        P = 2
        saved = dict(_losses.SHARED_SUMS)
        try:
            _losses.SHARED_SUMS.clear()
            nll = nn.functional.nll_loss(lp, y, reduction="sum")
            self.assertIsNone(_losses.shared_divisor(nll / 9.0, None, P))
            _losses.note_shared_sums([9.0, 0.0, float("nan")], "train.py:12")
            self.assertEqual(dict(_losses.SHARED_SUMS), {9.0: "train.py:12"})
            count = torch.tensor(9.0)
            penalty = sum(q.pow(2).sum() for q in lin.parameters())
            for loss, want in (
                    (nll / count, (9.0, "train.py:12")),
                    (-(lp.gather(1, y[:, None])).sum() / 9.0 / 2, (9.0, "train.py:12")),
                    (0.5 * nll / count + penalty, (9.0, "train.py:12")),
                    (nll / count * P, None),
                    (nll * 2 * P / count, None),
                    (nll / 8.0, None),
                    (penalty / count, None),
                    (nll / count * 0.5 + nll / 8.0, (9.0, "train.py:12"))):
                self.assertEqual(_losses.shared_divisor(loss, None, P), want, loss.grad_fn)
            self.assertIsNone(_losses.shared_divisor(nll / count, None, 1))
            for v in range(40):  # (the newest 32 kept)
                _losses.note_shared_sums([float(v + 100)], "x.py:1")
            self.assertEqual(len(_losses.SHARED_SUMS), 32)
            self.assertNotIn(9.0, _losses.SHARED_SUMS)
            self.assertIsNone(_losses.shared_divisor(nll / count, None, P))
        finally:
            _losses.SHARED_SUMS.clear()
            _losses.SHARED_SUMS.update(saved)

    def test_a_loss_that_pairs_the_samples_is_found(self):
        """A product of two tensors computed from the minibatch above the
        model's layers (an in-batch similarity, a covariance over the
        samples, through a BatchNorm too as Barlow Twins' cross-correlation,
        torch.cdist, small or large, torch.einsum) and a division by a sum over
        the samples (a batch's Dice) are named where the world is larger
        than one; not where a side is gathered from every rank
        (sfb.torch.allgather), has no gradient (a queue of negatives, a
        mask's count) or is a weight (a normalized classifier's), nor for a
        per-sample Dice's mean or attention inside the model, below a
        layer."""
        from sfb.torch import _batchnorm, _collectives, _losses
        g = torch.Generator().manual_seed(7)
        torch.manual_seed(7)
        lin, head = nn.Linear(3, 4), nn.Linear(4, 2)
        x = torch.randn(30, 3, generator=g)
        z = nn.functional.normalize(lin(x), dim=1)
        y = torch.arange(30)
        queue = torch.randn(4, 8, generator=g)
        w = nn.Parameter(torch.randn(6, 4))
        Gather = type(_collectives._AllGather.__name__, (torch.autograd.Function,), {
            "forward": staticmethod(lambda ctx, t: t.clone()),  # (named as allgather's)
            "backward": staticmethod(lambda ctx, grad: grad)})
        self.assertEqual(type(Gather.apply(z).grad_fn).__name__, _losses._GATHER)
        Z = Gather.apply(z)
        q, k = lin(x).view(30, 1, 4), lin(x).view(30, 1, 4)
        att = torch.softmax(q @ k.transpose(1, 2), -1) @ k  # (per sample: bmm)
        p, t = torch.sigmoid(lin(x)), (torch.rand(30, 4, generator=g) > 0.5).float()
        mask = (torch.rand(30, 4, generator=g) > 0.3).float()
        bn = nn.BatchNorm1d(4, affine=False)
        SyncBN = type(_batchnorm._SyncBatchNorm.__name__, (torch.autograd.Function,), {
            "forward": staticmethod(lambda ctx, t: t.clone()),  # (named as sfb.torch's)
            "backward": staticmethod(lambda ctx, grad: grad)})
        z1, z2 = bn(lin(x)), SyncBN.apply(bn(lin(x + 1)))
        self.assertIn(type(z2.grad_fn).__name__, _losses._ROWWISE)
        c = z1.t() @ z2 / 30
        twins = (torch.diagonal(c) - 1).pow(2).sum() + 0.005 * c.pow(2).sum()  # (Barlow Twins)
        mm = "torch.mm: an in-batch similarity or a covariance over the samples"
        cdist = "torch.cdist: distances between the samples"
        bmm = ("torch.einsum or torch.bmm of one matrix product: an in-batch similarity or a "
               "covariance over the samples")
        ep = z.view(6, 5, 4)  # (episodes of 5: the samples are the episodes)
        pairs = ("a %s of every pair of samples, broadcast (z[:, None] against z[None]): a "
                 "kernel or distance over the minibatch").__mod__
        ratio = "a division by a sum over the samples: a batch's Dice or F1"
        for loss, want in (
                (nn.functional.cross_entropy(z @ z.t() / 0.1, y), mm),
                (nn.functional.cross_entropy(z @ z.T, y) + z.pow(2).mean(), mm),
                ((z.t() @ z).pow(2).sum(), mm),
                (twins, mm),  # (through BatchNorm: the union's statistics under sfb.torch)
                (torch.cdist(z[:5], z[5:10]).mean(), cdist),
                (torch.cdist(z, z).mean(), cdist),  # (by a matrix product: 26+ rows)
                (nn.functional.cross_entropy(torch.einsum("nc,mc->nm", z, z) / 0.1, y), bmm),
                (torch.einsum("nc,nd->cd", z, z).pow(2).sum(), bmm),  # (a covariance)
                ((torch.einsum("nc,nc->n", z, z) - 1).pow(2).mean(), None),  # (per sample)
                # (a Gram matrix of one sample's features, a minibatch of one: per
                # sample, as fast_neural_style's at a batch of 1 a rank)
                ((lambda f: (f.bmm(f.transpose(1, 2)) - 1).pow(2).mean())(
                    lin(x[:1]).view(1, 2, 2, 1).flatten(2)), None),
                ((lambda f: (f.bmm(f.transpose(1, 2)) - 1).pow(2).mean())(
                    lin(x[:2]).view(2, 2, 2, 1).flatten(2)), None),
                ((lambda f: f.bmm(f.transpose(1, 2)).pow(2).mean())(lin(x[:6]).unsqueeze(0)),
                 bmm),
                (1 - (2 * (p * t).sum() + 1) / (p.sum() + t.sum() + 1), ratio),  # (a batch's Dice)
                (1 - ((2 * (p * t).sum(1) + 1) / (p.sum(1) + t.sum(1) + 1)).mean(), None),
                ((p * mask).sum() / mask.sum(), None),
                (p.sum() / Gather.apply(p).sum(), None),
                (nn.functional.cross_entropy(z @ Z.t(), y), None),
                (nn.functional.cross_entropy(z @ queue, y % 8), None),
                (nn.functional.cross_entropy(z @ nn.functional.normalize(w, dim=1).t(), y % 6),
                 None),
                (nn.functional.cross_entropy(head(att.view(30, 4)), y % 2), None),
                (nn.functional.cross_entropy(head(z), y % 2), None),
                # (every pair by broadcasting: an MMD kernel, a pairwise distance; a
                # side without gradient, or the samples kept on the first dimension
                # of both: per sample)
                (((z.unsqueeze(1) - z.unsqueeze(0)) ** 2).sum(2).mean(), pairs("difference")),
                (torch.exp(-((z[:, None] - z[None]) ** 2).sum(-1)).mean(), pairs("difference")),
                ((z.unsqueeze(0) * z.unsqueeze(1)).sum(-1).mean(), pairs("product")),
                (((z.unsqueeze(1) - queue.t().unsqueeze(0)) ** 2).mean(), None),
                (((z.unsqueeze(1) - z.unsqueeze(1)) ** 2).mean(), None),
                # (within one sample, chosen by z[i] or z[i:i + 1]: its own elements,
                # a per-image Lovasz's sort, an episode's distances; several: not)
                (sum(z[i:i + 1].flatten().sort(descending=True)[0].cumsum(0).mean()
                     for i in range(3)), None),
                (sum(torch.cdist(ep[i], ep[i]).mean() for i in range(3)), None),
                (z[:2].flatten().sort()[0].cumsum(0).mean(),
                 "a sort over the samples"),
                (torch.cdist(z[:5], z[:5]).mean(), cdist)):
            self.assertEqual(_losses.mixing(loss, None, 4), want, loss.grad_fn)
        self.assertIsNone(_losses.mixing((z @ z.t()).sum(), None, 1))

    def test_a_head_whose_weight_is_computed_from_parameters_is_a_layer(self):
        """A product whose weight is computed from parameters alone is a layer
        of the model, as F.linear over a parameter is: a cosine head's
        F.normalize(W) (ArcFace, proxies), weight_norm, spectral_norm, x @ W
        with W in x out, LoRA's W + B @ A, nn.Bilinear. A sum over the
        samples above it is read (before, the walk stopped at the product:
        sums and batch statistics above such heads went unwarned), and a
        product with a side computed from the samples (prototypes from a
        layer's outputs) stays one of samples."""
        from sfb.torch import _losses
        F = nn.functional
        g = torch.Generator().manual_seed(3)
        x, y = torch.randn(6, 4, generator=g), torch.randint(0, 3, (6,), generator=g)
        body = nn.Linear(4, 4)
        W, A, B = (nn.Parameter(torch.randn(*s, generator=g)) for s in ((3, 4), (2, 4), (3, 2)))
        wn = nn.utils.weight_norm(nn.Linear(4, 3))
        sn = nn.utils.parametrizations.spectral_norm(nn.Linear(4, 3))
        bil = nn.Bilinear(4, 4, 3)
        summed = (0.0, 0, _losses.SUMMED, None)
        for head in (lambda z: F.linear(F.normalize(z), F.normalize(W)),
                     lambda z: F.normalize(z) @ F.normalize(W).t(),
                     lambda z: z @ W.t().contiguous() + 1.0,
                     lambda z: F.linear(z, W + B @ A), wn, sn, lambda z: bil(z, z)):
            out = head(torch.tanh(body(x)))
            loss = -F.log_softmax(out, 1).gather(1, y[:, None]).sum()
            self.assertEqual(_losses.of_root(loss, None, 4), summed, out.grad_fn)
            pm = out.softmax(1).mean(0)
            self.assertIsNotNone(_losses.mixing(F.cross_entropy(out, y) + (pm * pm.log()).sum(),
                                                None, 4), out.grad_fn)
        z = body(x)
        proto = torch.stack([z[y == c].mean(0) for c in range(3)])  # (from the samples)
        self.assertIsNotNone(_losses.mixing(F.cross_entropy(z @ proto.t(), y), None, 4))

    def test_a_statistic_over_the_samples_in_the_loss_is_found(self):
        """A statistic over the samples that is no mean of per-sample terms
        (a variance, a maximum, topk, a norm, a softmax across them) and a
        function that is not linear of a sum or mean over them (the root
        of a mean loss, a batch entropy, a product of two means, a clamp
        of the mean loss, centring by the batch mean) are named above the
        model's layers; a mean loss scaled, added to others, divided by a
        weight's function (learned loss weights) or clamped per sample, a
        focal loss's per-sample terms, per-sample norms and softmaxes, a
        statistic under a layer (pooling before a head) or of gathered
        rows are not."""
        from sfb.torch import _collectives, _losses
        F = nn.functional
        torch.manual_seed(7)
        lin, head = nn.Linear(3, 4), nn.Linear(4, 2)
        x, y = torch.randn(30, 3), torch.randint(0, 4, (30,))
        out, zero = lin(x), torch.zeros(30, 4)
        sig = nn.Parameter(torch.ones(()))
        p = out.softmax(1)
        pm = p.mean(0)
        each = F.cross_entropy(out, y, reduction="none")
        Gather = type(_collectives._AllGather.__name__, (torch.autograd.Function,), {
            "forward": staticmethod(lambda ctx, t: t.clone()),
            "backward": staticmethod(lambda ctx, grad: grad)})
        pg = Gather.apply(p).mean(0)
        fn = ": a function of a batch statistic"
        for loss, want in (
                (torch.sqrt(F.mse_loss(out, zero)), "torch.sqrt of mse_loss's mean" + fn),
                (F.cross_entropy(out, y) + (pm * pm.log()).sum(),
                 "a product of a mean over the samples" + fn),
                (-out.var(0).mean(), "a variance over the samples"),
                (F.relu(1 - torch.sqrt(out.var(dim=0) + 1e-4)).mean(),
                 "a variance over the samples"),
                (each.topk(5)[0].mean(), "topk (hard-example mining) over the samples"),
                (each.max(), "a maximum over the samples"),
                ((1 - torch.exp(-F.cross_entropy(out, y))) ** 2 * F.cross_entropy(out, y),
                 "a product of cross_entropy's mean" + fn),
                (out.mean(0).pow(2).sum(), "a power of a mean over the samples" + fn),
                (F.softmax(out.view(3, 10, 4), -1).mean(0).pow(2).sum(),  # (-1 of 3 dimensions)
                 "a power of a mean over the samples" + fn),
                (F.softmax(out.view(3, 10, 4), -3).pow(2).mean(), "a softmax over the samples"),
                ((F.normalize(out, dim=0) ** 2).mean(), "a norm over the samples"),
                (((out - out.mean(0)) ** 2).mean(), "a power of a mean over the samples" + fn),
                (F.cross_entropy(out, y).clamp(max=5.0), "torch.clamp of cross_entropy's mean" + fn),
                (out.softmax(0)[:, 0].mean(), "a softmax over the samples"),
                # (scores (N, 1) squeezed: a ListNet over the minibatch; one
                # sample's classes: none)
                (-F.log_softmax(head(out)[:, :1].squeeze(1), 0)[0],
                 "a log_softmax over the samples"),
                (-F.log_softmax(head(out)[:, 1:].view(-1), 0).mean(),
                 "a log_softmax over the samples"),
                (-F.log_softmax(head(out[0]), 0)[1], None),
                # (scores (N, 1) made one row: view(1, -1), unsqueeze(0) of
                # them squeezed; one sample's row of classes, .t(): none)
                (-F.log_softmax(head(out)[:, :1].view(1, -1), 1)[0, 0],
                 "a log_softmax over the samples"),
                (-F.log_softmax(head(out)[:, :1].t(), -1).mean(), None),  # (a (T, 1) made (1, T))
                (F.softmax(head(out)[:, :1].squeeze(1).unsqueeze(0), 1).pow(2).sum(),
                 "a softmax over the samples"),
                (-F.log_softmax(head(out)[:, :1].squeeze(1).reshape(1, -1), dim=-1)[0, 1],
                 "a log_softmax over the samples"),
                (-F.log_softmax(head(out[:1]), 1)[0, 1], None),
                (-F.log_softmax(head(out[0]).view(1, -1), 1)[0, 1], None),
                (-F.log_softmax(head(out[0]).unsqueeze(0), 1)[0, 1], None),
                (-F.log_softmax(head(out)[:2].view(1, -1), 1).mean(), None),  # (2 x 2)
                ((out - y[:, None]).norm(), "a norm over the samples"),
                (-F.cosine_similarity(out, out.roll(1, 0)).mean(),
                 "torch.roll along the samples: each sample paired with another of the "
                 "minibatch, as a negative from the next row or manifold mixup do"),
                (F.cross_entropy(0.7 * out + 0.3 * out.flip(0), y),
                 "torch.flip along the samples: each sample paired with another of the "
                 "minibatch, as a negative from the next row or manifold mixup do"),
                (F.cross_entropy(out.roll(1, 1) + out.flip(1), y), None),
                ((out.norm(2).pow(2) / 30).sqrt(),
                 "torch.sqrt of a squared norm over the samples" + fn),
                (out.norm(p=2, dim=0).norm(), "a norm over the samples"),
                (F.cross_entropy(out, y) + 1e-2 * (out.norm(2).pow(2) + lin(x[:7]).norm() ** 2 +
                                                   torch.linalg.vector_norm(out) ** 2) / 30, None),
                (F.mse_loss(out, zero), None),
                (((1 - torch.exp(-each)) ** 2 * each).mean(), None),
                (F.cross_entropy(out, y) / (2 * sig ** 2) + torch.log(sig), None),
                (out.mean(0).sum(), None),
                (F.cross_entropy(F.normalize(out, dim=1) * 10, y), None),
                (F.cross_entropy(out, y, label_smoothing=0.1), None),
                (F.cross_entropy(out, y) * torch.tensor(1024.0) / 4, None),
                (F.cross_entropy(out, y) + 0.1 * (out ** 2).mean(), None),
                (F.kl_div(out.log_softmax(1), p.detach(), reduction="batchmean") * 4, None),
                (F.l1_loss(out, zero), None),
                (out.logsumexp(1).mean() + out.max(1)[0].mean() + each.clamp(max=2).mean(),
                 None),
                (-F.log_softmax(lin(x[0]), dim=0)[1], None),  # (one sample's classes)
                (F.cross_entropy(head(out.mean(0, keepdim=True).expand(30, 4)), y % 2), None),
                (torch.nan_to_num(F.cross_entropy(out, y)), None),
                (F.cross_entropy(out, y) + (pg * pg.log()).sum(), None)):
            self.assertEqual(_losses.mixing(loss, None, 4), want, loss.grad_fn)
        self.assertIsNone(_losses.mixing(torch.sqrt(F.mse_loss(out, zero)), None, 1))

    def test_a_statistic_times_a_tensor_without_gradient_is_read(self):
        """A sum or mean over the samples multiplied (or divided), above the
        model's layers, by a tensor of several elements without gradient
        (an MoE's fraction of the tokens each expert took) is read with
        that tensor's CRC-32, which the ranks compare; not a scalar (a
        loss scale, a rank's weight), nor a product below the mean (per
        sample), nor a statistic of gathered rows, of the weights or one
        that mixes the samples anyway (mixing's)."""
        import zlib
        from sfb.torch import _collectives, _losses
        torch.manual_seed(7)
        router = nn.Linear(3, 4)
        probs = router(torch.randn(30, 3)).softmax(1)
        f = nn.functional.one_hot(probs.argmax(1), 4).float().mean(0)  # (no gradient)
        crc = zlib.crc32(f.numpy().tobytes())
        Gather = type(_collectives._AllGather.__name__, (torch.autograd.Function,), {
            "forward": staticmethod(lambda ctx, t: t.clone()),
            "backward": staticmethod(lambda ctx, grad: grad)})
        ce = nn.functional.cross_entropy(probs, torch.arange(30) % 4)
        mean = "a mean over the samples"
        for loss, want in (
                (ce + 0.01 * 4 * (f * probs.mean(0).unsqueeze(0)).sum(), (mean, crc)),
                ((probs.mean(0) / f.clamp(min=0.1)).sum(),
                 (mean, zlib.crc32(f.clamp(min=0.1).numpy().tobytes()))),
                ((f * probs.sum(0)).sum(), ("a sum over the samples", crc)),
                ((probs.mean(0) * f.sum()).sum(), None),
                ((probs * f).mean(), None),
                ((f * Gather.apply(probs).mean(0)).sum(), None),
                ((f * router.weight.mean(1)).sum(), None),
                ((f * probs.var(0)).sum(), None),
                (ce, None)):
            self.assertEqual(_losses.detached(loss, None, 4), want, loss.grad_fn)
        self.assertIsNone(_losses.detached((f * probs.mean(0)).sum(), None, 1))

    def test_losses_read_from_what_backward_gets(self):
        """What backward() gets is read where the calls sfb.torch watches do
        not see the loss: torch's own mean cross_entropy or nll_loss (imported
        by name before wrapping) by the weight of the targets it keeps; a
        mean written by hand by the value it is divided by (a tensor or a
        number, through further divisions and a scale's product, left out)
        or a .mean()'s elements. A sum over the samples (reduction="sum",
        .sum(), their sums) is told apart where the world is larger than one,
        and where each term is multiplied by the world's size. A division
        by something with a gradient, a mean plus a sum, several roots and
        given gradients count nothing. In a pass the count goes to the step's losses, its site the
        backward() call, unless a mean loss sfb.torch watches reached the
        pass (its own site); a pass that reaches none of the job's
        parameters counts nothing."""
        import re
        from sfb.torch import _losses
        hand = lambda n: (n, n, _losses.BY_HAND, None)
        g = torch.Generator().manual_seed(5)
        x = torch.randn(4, 3, generator=g).requires_grad_()
        mask = torch.tensor([[1.0, 0, 1], [0, 0, 1], [1, 1, 1], [0, 1, 0]])
        kept = int(mask.sum())
        scale = torch.tensor([1024.0])
        y = torch.tensor([1, -100, 2, 0])
        w = torch.tensor([1.0, 2.0, 4.0])
        ce, nll = _losses._torch_cross_entropy, _losses._torch_nll_loss
        seq = x.view(2, 2, 3).transpose(1, 2)  # (classes second: a sequence's)
        for loss, want in (
                ((x * mask).sum() / mask.sum(), hand(kept)),
                (-x[mask.bool()].mean(), hand(kept)),  # (a sign at the root)
                ((x * mask).sum() / kept, hand(kept)),
                (x[mask.bool()].mean(), hand(kept)),
                (x.mean(), hand(12)),
                (x.mean() / 4, hand(48)),
                (scale * ((x * mask).sum() / mask.sum() / 2), hand(2 * kept)),
                (0.5 * x.mean(), hand(12)),
                (ce(x, y, reduction="none").mean(), hand(4)),
                (ce(x, y, reduction="sum") / 3, hand(3)),
                (ce(x, y), (3.0, 4, "ignore_index=-100", "cross_entropy")),
                (ce(x, y, weight=w) / 2, (7.0, 4, "ignore_index=-100, weight=", "cross_entropy")),
                (ce(seq, y.view(2, 2)), (3.0, 4, "ignore_index=-100", "cross_entropy")),
                (nll(x, y.clamp(min=0), ignore_index=0), (2.0, 4, "ignore_index=0", "nll_loss")),
                (nll(x, y.clamp(min=0)), (4.0, 4, "", "nll_loss")),
                (ce(x, y, label_smoothing=0.1), None),  # (two terms: the watched call's)
                (x.sum(), None),
                (x.sum() * 2, None),
                (x.sum() / x.sum().detach().requires_grad_(), None),
                (x.mean() + x.sum() / 3, None),
                (x.sum() * x.mean(), None),
                (x.mean(dim=(0, 1)), hand(12)),  # (every dimension named: the whole's)
                (x.mean(dim=0).sum(), None)):
            self.assertEqual(_losses.of_root(loss, None), want, loss.grad_fn)
        # sums over the samples: one process's is P times the ranks' mean
        t, P = torch.rand(4, 3, generator=g), 4
        summed, times = (0.0, 0, _losses.SUMMED, None), (0.0, 0, _losses.SUMMED_TIMES_WORLD, None)
        h = nn.Linear(3, 3)(x.detach())  # (a layer's output: what a .sum() over samples sums)
        routed = h.clone()  # (a head some samples take: index_put, masked_fill, where)
        routed[x[:, 0] > 0] = nn.Linear(3, 3)(x.detach()[x[:, 0] > 0])
        routed = torch.where(x.detach() > 1, routed, routed.masked_fill(x.detach() < -1, 0))
        vae = nn.functional.binary_cross_entropy(torch.sigmoid(h), t, reduction="sum") + (
            -0.5 * torch.sum(1 + h[:, 1] - h[:, 0].pow(2) - h[:, 1].exp()))  # (PyTorch's VAE)
        for loss, want in (
                (vae, summed), (vae * P, times), (vae * 2, summed), (-h.sum(), summed),
                (ce(x, y, reduction="sum"), summed), (scale * ce(x, y, reduction="sum"), summed),
                (nn.functional.mse_loss(x, t, reduction="sum") * P + h.sum() * P, times),
                # (one sum times P, another not: summed_term names the other)
                (nn.functional.mse_loss(x, t, reduction="sum") * P + h.sum(), None),
                (nn.functional.mse_loss(x, t), (12.0, 12, "", "mse_loss")),
                (h.mean() + h.sum(), None), (h.norm(), None), (h.sum() * h.sum(), None),
                # (sums of a mean over the samples, and over the weights: none)
                (routed.pow(2).sum(), summed),
                (ce(h, y % 3, reduction="none").sum(), summed),  # (per-sample terms, summed)
                # (label smoothing's two terms, each times a number: torch's MulBackward1)
                (ce(h, y % 3, label_smoothing=0.1, reduction="sum"), summed),
                (ce(h, y % 3, label_smoothing=0.1, reduction="sum") * P, times),
                (-nn.functional.log_softmax(h.view(2, 2, 3), -1)[..., 0].sum(), summed),
                (h.mean(0).sum(), None), ((h - t).pow(2).mean(0).sum() * 2, None),
                # (summed losses stacked, then summed or averaged: a sum; means
                # stacked and averaged: a mean by hand over them, as before)
                (torch.stack([ce(h, y % 3, reduction="sum"), h.pow(2).sum()]).sum(), summed),
                (torch.stack([ce(h, y % 3, reduction="sum"), h.pow(2).sum()]).mean(), summed),
                (torch.stack([ce(h, y % 3, reduction="sum"), h.pow(2).sum()]).sum() * P, times),
                (torch.stack([ce(h, y % 3), ce(h, y % 3)]).mean(), hand(2)),
                (sum(p.pow(2).sum() for p in (x, t)), None),
                # (operations along the classes keep the samples apart: word2vec's
                # logsigmoid, Categorical.log_prob's gather, a logsumexp per row;
                # along the samples they do not)
                (-nn.functional.logsigmoid(h).sum(), summed), (torch.log1p(h.exp()).sum(), summed),
                (-h.log_softmax(1).gather(1, (y % 3)[:, None]).sum(), summed),
                (h.logsumexp(1).sum(), summed), (h.max(dim=1)[0].sum(), summed),
                (h.norm(dim=1).sum(), summed), (h.cos().sum() + h.sin().sum(), summed),
                (torch.bmm(h[:, None, :], h[:, :, None]).sum(), summed),
                (h.logsumexp(0).sum(), None), (h.max(dim=0)[0].sum(), None),
                (h.gather(0, torch.zeros(1, 3, dtype=torch.long)).sum(), None)):
            self.assertEqual(_losses.of_root(loss, None, P), want, loss.grad_fn)
        self.assertIsNone(_losses.of_root(h.sum(), None, 1))
        # a loss of one element (divided by a count kept as torch.as_tensor([n]))
        # summed or averaged at the root: the same number, read as the scalar's
        per = ce(h, y % 3, reduction="none")
        for root in (lambda l: l.sum(), lambda l: l.mean()):
            self.assertEqual(_losses.of_root(root(per.sum() / torch.as_tensor([5.0])), None, P),
                             (5.0, 5.0, _losses.BY_HAND, None))
        self.assertEqual(_losses.of_root((per.sum() / torch.as_tensor([5.0])).sum() * P, None, P),
                         _losses.of_root(per.sum() / 5.0 * P, None, P))
        self.assertEqual(_losses.of_root((per.sum() / 5.0).mean(), None, P),  # (0-dim's mean)
                         (5.0, 5.0, _losses.BY_HAND, None))
        # torch's losses of one node each (their reduction saved), ctc_loss's per-sample
        # node: sums over the samples too; its mean a mean by hand over the samples
        F = nn.functional
        lp = h.log_softmax(1)[:, None]  # ((T, N, C) = (4, 1, 3))
        ctc = lambda red: F.ctc_loss(lp.expand(4, 2, 3), torch.tensor([[1], [2]]), [4, 4],
                                     [1, 1], reduction=red)
        for loss, want in (
                (F.multi_margin_loss(h, y % 3, reduction="sum"), summed),
                (F.multi_margin_loss(h, y % 3, reduction="none").sum() * P, times),
                (F.soft_margin_loss(h, t.sign(), reduction="sum"), summed),
                (F.soft_margin_loss(h, t.sign(), reduction="none").sum(), summed),
                (F.multilabel_margin_loss(h, torch.tensor([[0, -1, 0]] * 4), reduction="sum"),
                 summed),
                (ctc("sum"), summed), (ctc("none").sum(), summed), (ctc("mean"), hand(2)),
                # (element-wise functions: a pinball loss's maximum, xlogy, erf, log cosh)
                (torch.maximum(0.3 * (h - t), -0.7 * (h - t)).sum(), summed),
                (torch.xlogy(t, h.sigmoid()).sum(), summed), ((h - t).erf().pow(2).sum(), summed),
                ((h - t).cosh().log().sum(), summed),
                (F.glu(torch.cat([h, h], 1), 1).sum(), summed),
                (F.glu(torch.cat([h, h], 0), 0).sum(), None)):
            self.assertEqual(_losses.of_root(loss, None, P), want, loss.grad_fn)
        # several terms of torch's own losses, each times a number: the numbers
        # on each term's way from the root (terms_of_root)
        mse = _losses._torch_elementwise["mse_loss"]
        read_ce = (3.0, 4, "ignore_index=-100", "cross_entropy")
        read_mse = (12.0, 12, "", "mse_loss")
        for loss, want in (
                (0.25 * ce(x, y) + mse(x, t) * 0.75, [read_ce + (0.25,), read_mse + (0.75,)]),
                (ce(x, y) / 4 - 2 * mse(x, t), [read_ce + (0.25,), read_mse + (-2.0,)]),
                (scale * (ce(x, y) + mse(x, t)), [read_ce + (1024.0,), read_mse + (1024.0,)]),
                (-(ce(x, y) + ce(x, y) * 3) + 1.0, [read_ce + (-1.0,), read_ce + (-3.0,)]),
                (ce(x, y) + 1.0, None),  # (one term: of_root's)
                (ce(x, y) + x.mean(), [read_ce + (1.0,)]),  # (x no layer's: a penalty)
                (ce(x, y) + mse(x, t) * mse(x, t).detach().requires_grad_(), None),
                # (label smoothing's: its NLL term times 1 - 0.1, its smoothing term's mean
                # of x, no layer's output, a penalty)
                (ce(x, y) + ce(x, y, label_smoothing=0.1), [read_ce + (1.0,), read_ce + (0.9,)]),
                # (a hybrid CTC/attention loss: ctc_loss's mean over the utterances a term)
                (0.3 * ctc("mean") + 0.7 * ce(x, y), [(2.0, 2.0, _losses.BY_HAND, None, 0.3),
                                                      read_ce + (0.7,)]),
                # (a Dice per sample, a mean over its pixels, then over the samples)
                (ce(x, y) + h.sigmoid().mean(-1).mean(), [read_ce + (1.0,),
                                                          (4.0, 4.0, _losses.BY_HAND, None, 1.0)])):
            self.assertEqual(_losses.terms_of_root(loss, None), want, loss.grad_fn)
        # means by hand beside them (FixMatch's), penalties on the weights, the
        # calls _losses watches (marked: their hooks count them)
        lin = nn.Linear(3, 3)
        z, m = lin(x.detach()), torch.tensor([1.0, 0.0, 1.0, 0.0])
        penalty = 1e-3 * sum(p.pow(2).sum() for p in lin.parameters())
        watched = ce(z, y % 3)
        watched.grad_fn.metadata[_losses.WATCHED] = True
        read_z = (4.0, 4, "", "cross_entropy")
        hand2, hand12 = (2.0, 2.0, _losses.BY_HAND, None, 1.0), (12.0, 12.0, _losses.BY_HAND,
                                                                 None, 1.0)
        for loss, want in (
                (ce(z, y % 3) + (ce(z, y % 3, reduction="none") * m).sum() / m.sum(),
                 [read_z + (1.0,), hand2]),
                (z.pow(2).mean() + penalty, [hand12]),
                (watched + z.pow(2).mean(), [hand12]),
                # (a torch loss summed and divided by a number: a mean by hand, Mean
                # Teacher's consistency term)
                (watched + F.mse_loss(z, z.detach() * 0.5, reduction="sum") / 12, [hand12]),
                (watched + 0.5 * F.cross_entropy(z, y % 3, reduction="sum") / 4,
                 [(4.0, 4.0, _losses.BY_HAND, None, 0.5)]),
                (watched + F.mse_loss(z, z.detach() * 0.5, reduction="sum"), None),  # (summed)
                (watched + penalty, None),  # (nothing to read here: the hook's)
                (ce(z, y % 3) + z.sum(), None),  # (a sum beside: summed_term's)
                (z.pow(2).mean(), None)):  # (one term: of_root's)
            self.assertEqual(_losses.terms_of_root(loss, None), want, loss.grad_fn)
        self.assertIsNone(_losses.terms_of_root([ce(x, y) + mse(x, t)] * 2, None))
        # a step's terms: the same call's passes sum, another call is a term of its own
        S7 = (7, 8, 9)
        terms = _losses.add_term(_losses.add_term(_losses.add_term((), "a", 3.0, S7), "b", 1.0),
                                 "a", 5.0, S7)
        self.assertEqual(terms, (("a", 8.0, S7), ("b", 1.0, 0)))
        self.assertEqual(_losses.shares(terms), (8.0 / 9, (8.0 / 9) ** 2 + (1.0 / 9) ** 2))
        self.assertEqual(_losses.shares((("a", 16.0, S7), ("b", 2.0, 0))), _losses.shares(terms))
        self.assertEqual(_losses.shares((("a", 8.0, S7),)), (-1.0, 0.0))
        # one line's calls in a pass (a decoder's loss += ce(...) per step): a term each
        site, given = "cross_entropy (f.py:21)", "given to backward() at f.py:9"
        calls = [site] + [_losses.call_term(site, k) for k in (2, 3)]
        self.assertEqual(calls[1:], ["cross_entropy (f.py:21, call 2)",
                                     "cross_entropy (f.py:21, call 3)"])
        self.assertEqual(_losses.call_term(given, 2), given + " (call 2)")
        self.assertEqual(_losses.term_sites([(c,) for c in calls + [given, given + " (call 2)"]]),
                         [site + " (3 calls a pass)", given + " (2 calls a pass)"])
        self.assertEqual(_losses.term_sites([(site,), ("mse_loss (f.py:30)",)]),
                         [site, "mse_loss (f.py:30)"])
        # their settings, field by field: the class weights' bytes and dtype,
        # ignore_index, label_smoothing
        self.assertEqual(_losses.settings_crc(terms)[0], 1)
        self.assertEqual(len(_losses.settings_crc(terms)[1]), len(_losses.SETTINGS))
        w3 = torch.tensor([1.0, 2.0, 4.0])
        base = _losses.crc(w3, -100, 0.0)
        apart = lambda a, b: [k for k in range(3) if a[k] != b[k]]
        for weight, ignore_index, smoothing, field in (
                (None, -100, 0.0, 0), (w3.double(), -100, 0.0, 0), (w3 * 2, -100, 0.0, 0),
                (w3.bfloat16(), -100, 0.0, 0), (w3, 0, 0.0, 1), (w3, -100, 0.1, 2)):
            other = _losses.crc(weight, ignore_index, smoothing)
            self.assertEqual(apart(other, base), [field], other)
            self.assertEqual(apart(_losses.settings_crc((("a", 1.0, other),))[1],
                                   _losses.settings_crc((("a", 1.0, base),))[1]), [field])
        self.assertEqual(_losses.crc(w3.clone(), -100, 0.0), base)
        self.assertNotIn(0, base + _losses.crc(None))
        self.assertEqual(_losses.of_root([x.mean()], [None]), hand(12))
        self.assertIsNone(_losses.of_root([x.mean(), x.mean()], None))
        self.assertIsNone(_losses.of_root(x.mean(0), None))
        self.assertIsNone(_losses.of_root(x.mean(), torch.tensor(1.0)))

        torch.manual_seed(3)
        m = nn.Linear(3, 5)
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m,
                                       backward_passes_per_step=2)
        s = sft._env._optimizer
        for loss, want, site in (
                (lambda: (m(x.detach()) * mask[:, :1]).sum() / mask[:, :1].sum(),
                 (2.0, 2.0, _losses.BY_HAND), "given to backward() at test_torch.py:%d"),
                (lambda: ce(m(x.detach()), y), (3.0, 4, "ignore_index=-100"),
                 "cross_entropy (given to backward() at test_torch.py:%d)"),
                (lambda: nn.functional.cross_entropy(m(x.detach()), y) / 2,
                 (3.0, 4, "ignore_index=-100"), r"cross_entropy \(test_torch\.py:[0-9]+\)"),
                (lambda: (m(x.detach()) ** 2).sum(), (0.0, 0, ""), "")):
            opt.zero_grad()
            line = sys._getframe().f_lineno + 1
            loss().backward()
            self.assertEqual(s.losses[:3], want)
            self.assertRegex(s.losses[3], "^%s$" % (re.escape(site % line) if "%d" in site
                                                     else site))
            (x.mean() / 7).backward()  # (no parameter of the job's: counts nothing)
            self.assertEqual(s.losses[:3], want)
            m(x.detach()).sum().backward()  # (the step's second pass: reduced)
            opt.step()
        sft.shutdown()

    def test_the_head_a_loss_reads_tells_a_loop_over_tasks_apart(self):
        """_losses.head(): the layer whose output a loss reads, through
        log-probabilities, views, selections and a temperature; none past
        two branches or a concatenation. heads_of_root() reads the heads of
        torch's losses added at the root (from 0.0 too, which of_root now
        reads as the loss); sites_crc() and term_sites() hold them."""
        from sfb.torch import _losses
        torch.manual_seed(3)
        net = nn.ModuleDict({"trunk": nn.Linear(6, 8), "heads": nn.ModuleList(
            nn.Linear(8, 5) for _ in range(2)), "emb": nn.Embedding(5, 8)})
        names = {id(p): n for n, p in net.named_parameters()}
        x, y, t = torch.randn(4, 6), torch.tensor([0, 1, 4, 2]), torch.randn(4)
        f = torch.tanh(net["trunk"](x))
        h0, h1 = net["heads"][0], net["heads"][1]
        ce, mse = torch.nn.functional.cross_entropy, torch.nn.functional.mse_loss
        mask = y > 0
        for loss, want in (
                (ce(h1(f), y), "heads.1"),
                (ce(h0(f).view(-1, 5)[mask], y[mask]), "heads.0"),
                (ce(h0(f) / 2.0, y), "heads.0"),
                (mse(h1(f)[:, 0], t), "heads.1"),
                (ce(torch.nn.functional.linear(f, net["emb"].weight), y), "emb"),  # (tied)
                (ce(h0(f) + h1(f), y), None),  # (two branches)
                (ce(torch.cat([h0(f)]), y), None),
                (ce(f[:, :5], y), None)):  # (the trunk's, through tanh: no head's rows)
            self.assertEqual(_losses.head(names, loss.grad_fn), want, loss.grad_fn)
        loss = 0.0 + ce(h0(f), y)
        self.assertEqual(_losses.of_root(loss, None, 2), (4.0, 4, "", "cross_entropy"))
        self.assertEqual(_losses.of_root(1.0 - ce(h0(f), y), None, 2),
                         (4.0, 4, "", "cross_entropy"))
        self.assertIsNone(_losses.of_root(loss + ce(h1(f), y), None, 2))
        self.assertEqual(_losses.heads_of_root(names, loss + ce(h1(f), y) * 0.5, None),
                         {("cross_entropy", "heads.0"), ("cross_entropy", "heads.1")})
        terms = (("cross_entropy (f.py:21)", 4.0, 0),)
        at = lambda *hs: {("cross_entropy (f.py:21)", h) for h in hs}
        self.assertEqual(_losses.sites_crc(terms, at("heads.0")),
                         _losses.sites_crc(terms, at("heads.0")))
        self.assertNotEqual(_losses.sites_crc(terms, at("heads.0")),
                            _losses.sites_crc(terms, at("heads.1")))
        self.assertNotEqual(_losses.sites_crc(terms, at("heads.0")), _losses.sites_crc(terms))
        self.assertEqual(_losses.term_sites(terms + (("cross_entropy (f.py:21, call 2)",),),
                                            at("heads.1", "heads.0")),
                         ["cross_entropy (f.py:21) (2 calls a pass) through heads.0, heads.1"])

    def test_autograd_grad_inside_a_hook_adds_nothing(self):
        """torch.autograd.grad called inside the backward pass (a gradient
        hook: a deep-equilibrium layer's implicit backward, which runs the
        layer again on a detached fixed point) hands its gradients back
        and adds nothing to the layer's weight (its factors were committed
        with the outer pass's: the weight's gradient was off)."""
        torch.manual_seed(1)
        m = nn.ModuleDict({"inp": nn.Linear(5, 16), "W": nn.Linear(16, 16),
                           "head": nn.Linear(16, 3)})
        ref = copy.deepcopy(m)
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        g = torch.Generator().manual_seed(5)
        x, y = torch.randn(32, 5, generator=g), torch.randint(0, 3, (32,), generator=g)

        def loss(model):
            h = model["inp"](x)
            with torch.no_grad():
                z = torch.tanh(model["W"](h))
            z = torch.tanh(model["W"](z) + h)
            z0 = z.detach().requires_grad_()
            f0 = model["W"](z0)
            z.register_hook(lambda grad: torch.autograd.grad(f0, z0, grad, retain_graph=True)[0]
                            * 0.5 + grad)
            return nn.functional.cross_entropy(model["head"](z), y)
        self.assertTrainsAsOne(m, opt, ref, torch.optim.SGD(ref.parameters(), lr=0.1), loss, 3,
                               1e-5)

    def test_a_gradient_given_by_hand_is_read_as_its_loss(self):
        """backward(t, g) with g one number in every element is read as the
        loss with that backward: ones a sum (times the number), 1/len a
        mean; a g that weighs the elements apart, one with a gradient, of
        another size, several roots: as given (nothing read). The gradient
        the reading's backward gives is the given one's."""
        from sfb.torch import _losses
        lin = nn.Linear(3, 4)
        x = torch.randn(5, 3, generator=torch.Generator().manual_seed(8))
        each = lin(x).pow(2).sum(1)
        P = 2
        read = {}
        for g, want_node, want_read in (
                (torch.ones(5), "SumBackward0", (0.0, 0, _losses.SUMMED, None)),
                ([torch.full((5,), 0.5)], "MulBackward0", (0.0, 0, _losses.SUMMED, None)),
                (torch.full((5,), 1 / 5), "MeanBackward0", (5.0, 5, _losses.BY_HAND, None)),
                (torch.full((5,), float(P)), "MulBackward0",
                 (0.0, 0, _losses.SUMMED_TIMES_WORLD, None))):
            loss, given = _losses.given_as_loss([each], g)
            self.assertIsNone(given)
            self.assertEqual(type(loss.grad_fn).__name__, want_node)
            self.assertEqual(_losses.of_root(loss, None, P), want_read)
            read[want_node] = loss
            grads = torch.autograd.grad(loss, lin.weight, retain_graph=True)[0]
            g = g[0] if isinstance(g, list) else g
            self.assertTrue(torch.equal(
                grads, torch.autograd.grad(each, lin.weight, g, retain_graph=True)[0]))
        scalar = each.mean()
        self.assertIs(_losses.given_as_loss(scalar, torch.tensor(1.0))[0], scalar)
        loss, given = _losses.given_as_loss(scalar, torch.tensor(3.0))
        self.assertEqual((type(loss.grad_fn).__name__, given), ("MulBackward0", None))
        for t, g in ((each, torch.arange(5.0)), (each, torch.ones(5, requires_grad=True)),
                     (each, torch.ones(4)), ([each, each], [torch.ones(5)] * 2),
                     (each, None), (each.detach(), torch.ones(5)),
                     (each, torch.ones(5, dtype=torch.long)),
                     (each, torch.full((5,), float("inf")))):
            got = _losses.given_as_loss(t, g)
            self.assertTrue(got[0] is t and got[1] is g, (t, g))

    def test_layers_that_depend_on_the_padding_are_watched(self):
        """A bidirectional recurrent layer on unpacked sequences, a recurrent
        layer's final state (h_n, c_n) on them and attention without a mask
        give the step their sequence length (the longest) and kind when
        their output's gradient is formed in a backward pass; a forward
        without backward, one sequence, packed sequences, a forward RNN's
        outputs, attention with a key_padding_mask or a causal attn_mask
        give nothing; shutdown gives torch its attention back."""
        import torch.nn.utils.rnn as R
        torch_mha = nn.functional.multi_head_attention_forward
        torch.manual_seed(4)
        lstm = nn.LSTM(3, 4, bidirectional=True)  # (sequence first)
        gru = nn.GRU(3, 4, batch_first=True, bidirectional=True)
        fwd = nn.GRU(3, 4, batch_first=True)
        packed = nn.GRU(3, 4, batch_first=True, bidirectional=True)  # (densely: torch's operator)
        att = nn.MultiheadAttention(4, 2, batch_first=True)
        m = nn.ModuleList([lstm, gru, fwd, packed, att])
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m,
                                       backward_passes_per_step=2)
        s = sft._env._optimizer
        x = torch.randn(2, 7, 3)  # (batch first: 7 steps)
        pad = torch.zeros(2, 7, dtype=torch.bool)
        causal = torch.triu(torch.ones(7, 7, dtype=torch.bool), 1)
        h = torch.randn(2, 7, 4)
        for run, want in (
                (lambda: lstm(x.transpose(0, 1))[0], (7, ("a bidirectional LSTM",))),
                (lambda: gru(x)[0], (7, ("a bidirectional GRU",))),
                (lambda: gru(x[0])[0], (0, ())),  # (unbatched: one sequence, not padded)
                (lambda: gru(x[:1])[0], (0, ())),
                (lambda: fwd(x)[1], (7, ("a GRU's final state",))),
                (lambda: lstm(x.transpose(0, 1))[1][1], (7, ("an LSTM's final state",))),
                (lambda: att(h, h, h)[0],
                 (7, ("attention without a key_padding_mask",))),
                (lambda: att(h[:1], h[:1], h[:1])[0], (0, ())),
                (lambda: fwd(x)[0], (0, ())),
                (lambda: att(h, h, h, key_padding_mask=pad)[0], (0, ())),
                (lambda: att(h, h, h, attn_mask=causal)[0], (0, ()))):
            opt.zero_grad()
            (run().sum() + R.pad_packed_sequence(packed(R.pack_padded_sequence(
                x, torch.tensor([7, 4]), batch_first=True))[0], batch_first=True)[0].sum()
             ).backward()
            self.assertEqual(s.padded, want)
            gru(x[:, :5])  # (a forward without backward: nothing)
            self.assertEqual(s.padded, want)
            lstm(x.transpose(0, 1)[:3])[0].sum().backward()  # (the step's second pass)
            opt.step()
            self.assertEqual(s.padded, (0, ()))
        self.assertIsNot(nn.functional.multi_head_attention_forward, torch_mha)
        sft.shutdown()
        self.assertIs(nn.functional.multi_head_attention_forward, torch_mha)

    def test_packed_sequences_go_densely(self):
        """An LSTM on a PackedSequence runs torch's own operator: its matrices
        go densely (the plan says so) and train as plain PyTorch's; an
        unpacked one goes by factors; shutdown gives torch its operators
        back."""
        import torch.nn.utils.rnn as R
        rnn_vf, emb = torch.nn.modules.rnn._VF, nn.functional.embedding

        class Packed(nn.Module):
            def __init__(self, packed):
                super().__init__()
                torch.manual_seed(6)
                self.packed = packed
                self.emb = nn.Embedding(12, 4)
                self.rnn = nn.LSTM(4, 5, batch_first=True)
                self.head = nn.Linear(5, 3)

            def forward(self, tok, lengths):
                e = self.emb(tok)
                if self.packed:
                    e = R.pack_padded_sequence(e, lengths, batch_first=True,
                                               enforce_sorted=False)
                _, (h, _) = self.rnn(e)
                return self.head(h[-1])

        g = torch.Generator().manual_seed(8)
        tok = torch.randint(0, 12, (6, 7), generator=g)
        lengths = torch.tensor([7, 3, 5, 7, 2, 6])
        y = torch.randint(0, 3, (6,), generator=g)
        for packed in (True, False):
            if not sft.is_initialized():
                sft.init(world=1)
            m, ref = Packed(packed), Packed(packed)
            opt = sft.DistributedOptimizer(torch.optim.Adam(m.parameters(), lr=0.01), model=m)
            ref_opt = torch.optim.Adam(ref.parameters(), lr=0.01)
            for _ in range(5):
                for o, model in ((opt, m), (ref_opt, ref)):
                    o.zero_grad()
                    nn.functional.cross_entropy(model(tok, lengths), y).backward()
                    o.step()
            for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
                self.assertLess(float((p - q).abs().max()), 1e-5 * float(q.abs().max()), n)
            self.assertIn("emb.weight (12x4, sparse rows): ", opt.plan)
            if packed:
                self.assertIn("dense (4 tensors, 220 values: rnn.weight_ih_l0, rnn.weight_hh_l0",
                              opt.plan)
            else:
                self.assertIn("rnn.weight_hh_l0 (20x5+bias): ", opt.plan)
                self.assertNotIn("dense", opt.plan)
            sft.shutdown()
            self.assertIs(torch.nn.modules.rnn._VF, rnn_vf)
            self.assertIs(nn.functional.embedding, emb)

    def test_sparse_table_at_staleness(self):
        """At staleness > 0 a table goes densely (its sparse .grad made
        dense): one worker trains as plain SGD does."""
        def model():
            torch.manual_seed(9)
            return nn.Sequential(nn.Embedding(10, 4, sparse=True), nn.Flatten(), nn.Linear(8, 3))
        m, ref = model(), model()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m,
                                       staleness=1)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(2)
        tok, y = torch.randint(0, 10, (8, 2), generator=g), torch.randint(0, 3, (8,), generator=g)
        for _ in range(4):
            for o, mod in ((opt, m), (ref_opt, ref)):
                o.zero_grad()
                nn.functional.cross_entropy(mod(tok), y).backward()
                o.step()
        sft.shutdown()
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            self.assertLess(float((p - q).abs().max()), 1e-6 * float(q.abs().max()), n)
        self.assertIn("dense (1 tensors, 40 values: 0.weight): fms", opt.plan)

    def test_dense_buckets_leave_during_backward(self):
        """The parameters that go densely leave in buckets (backward order,
        bucket_cap_mb each) as soon as backward has accumulated their
        gradients: the last layer's bucket first, then the first layer's,
        both before backward reaches the input; training equals plain
        PyTorch's."""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                torch.manual_seed(4)
                self.fc1, self.g1 = nn.Linear(6, 8), nn.Parameter(torch.rand(8) + 0.5)
                self.fc2, self.g2 = nn.Linear(8, 8), nn.Parameter(torch.rand(8) + 0.5)
                self.head = nn.Linear(8, 3)

            def forward(self, x):
                h = torch.tanh(self.fc1(x)) * self.g1
                return self.head(torch.tanh(self.fc2(h)) * self.g2)

        x, y = data()
        x = x[:, :6]
        m, ref = Net(), Net()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                       model=m, bucket_cap_mb=1e-6)  # a bucket per tensor
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        job, events = opt._sfb.job, []
        publish = job.publish_dense
        job.publish_dense = lambda clock, i, *a: (events.append(("publish", clock, i)),
                                                 publish(clock, i, *a))
        for step in range(5):
            for o, model in ((opt, m), (ref_opt, ref)):
                o.zero_grad()
                xi = x.clone().requires_grad_()  # its gradient: the end of backward
                if o is opt:
                    xi.register_hook(lambda g, step=step: events.append(("input", step)))
                nn.functional.cross_entropy(model(xi), y).backward()
                o.step()
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            self.assertLess(float((p - q).abs().max()), 1e-5 * float(q.abs().max()), n)
        self.assertIn("dense (2 tensors, 16 values: g1, g2): fms (dense gradients, 2 buckets, "
                      "each leaving once backward has filled it)", opt.plan)
        g2, g1 = [b.index for b in opt._sfb.buckets]  # backward order
        # (the first step's reduction attaches the matrices, after backward)
        self.assertLess(events.index(("input", 0)), events.index(("publish", 0, g2)), events)
        for step in range(1, 5):  # g2's gradient is in first, then g1's, then the input's
            self.assertLess(events.index(("publish", step, g2)),
                            events.index(("publish", step, g1)), events)
            self.assertLess(events.index(("publish", step, g1)), events.index(("input", step)),
                            events)

    def test_convolutions_by_factors_where_they_pay(self):
        """A convolution with few output positions goes by factors (as plain
        PyTorch trains it); one with many, or padding="same", or groups,
        densely, the plan saying why."""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                torch.manual_seed(2)
                self.many = nn.Conv2d(3, 4, 3, padding=1)        # 8 x 8 positions
                self.same = nn.Conv1d(4, 4, 3, padding="same")
                self.grouped = nn.Conv1d(4, 8, 3, groups=2)
                self.few = nn.Conv2d(4, 32, 8)                    # 1 position
                self.head = nn.Linear(32, 3)

            def forward(self, x):
                h = torch.tanh(self.many(x))                      # 4 x 8 x 8
                h = torch.tanh(self.same(h.flatten(2)))          # 4 x 64
                h = torch.tanh(self.grouped(h))                  # 8 x 62
                h = h[:, :, :16].reshape(-1, 4, 2, 16).mean(2)   # 4 x 16
                h = torch.tanh(self.few(torch.cat([h, h, h, h], 2).view(-1, 4, 8, 8)))
                return self.head(h.flatten(1))

        g = torch.Generator().manual_seed(4)
        x, y = torch.randn(6, 3, 8, 8, generator=g), torch.randint(0, 3, (6,), generator=g)
        m, ref = Net(), Net()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                       model=m, sync="sfb")
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        for _ in range(5):
            for o, model in ((opt, m), (ref_opt, ref)):
                o.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                o.step()
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            self.assertLess(float((p - q).abs().max()), 1e-5 * float(q.abs().max()), n)
        self.assertIn("few.weight (32x256+bias, conv 8x8): sfb", opt.plan)
        self.assertIn("many.weight (4x27, conv 3x3): dense (factors of 384 samples", opt.plan)
        self.assertIn("same.weight (4x12, conv 3): dense (factors are for groups=1 and numeric "
                      "padding; this has padding='same')", opt.plan)
        self.assertIn("grouped.weight (8x6, conv 3): dense (factors are for groups=1 and "
                      "numeric padding; this has groups=2)", opt.plan)
        self.assertIn("dense (6 tensors", opt.plan)

    def test_convolution_by_factors_on_unbatched_samples(self):
        """A convolution by factors called on unbatched samples, one at a
        time (torch >= 1.11's (C, L) and (C, H, W): images of different
        sizes), trains as plain PyTorch does (it crashed in backward)."""
        torch.manual_seed(3)
        m = nn.ModuleDict({"c1": nn.Conv1d(16, 16, 3), "c2": nn.Conv2d(16, 16, 2),
                           "head": nn.Linear(32, 3)})
        ref = copy.deepcopy(m)
        g = torch.Generator().manual_seed(5)
        xs = [torch.randn(16, 3 + i % 2, generator=g) for i in range(4)]
        ims = [torch.randn(16, 2, 2 + i % 2, generator=g) for i in range(4)]
        y = torch.tensor([0, 1, 2, 1])
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m,
                                       sync="sfb")

        def loss(model):
            h = torch.stack([torch.cat([model["c1"](a).mean(1), model["c2"](b).mean((1, 2))])
                             for a, b in zip(xs, ims)])
            return nn.functional.cross_entropy(model["head"](h), y)
        self.assertTrainsAsOne(m, opt, ref, torch.optim.SGD(ref.parameters(), lr=0.1), loss, 3,
                               1e-5)
        self.assertIn("c1.weight (16x48+bias, conv 3): sfb", opt.plan)
        self.assertIn("c2.weight (16x64+bias, conv 2x2): sfb", opt.plan)

    def test_batchnorm_on_an_empty_minibatch(self):
        """A training-mode BatchNorm called on no rows at all (a deep block
        no sample reached: a dynamic-depth network) gives an empty output
        and leaves its statistics as they were, as torch's own does (it was
        refused as fewer than 2 values); on one value it is refused, as
        torch refuses it."""
        torch.manual_seed(4)
        m = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Linear(8, 3))
        ref = copy.deepcopy(m)
        x, y = data()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)

        def loss(model):
            deep = model[1](model[0](x[:0]))
            self.assertEqual(tuple(deep.shape), (0, 8))
            return nn.functional.cross_entropy(model(x), y) + deep.sum()
        self.assertTrainsAsOne(m, opt, ref, torch.optim.SGD(ref.parameters(), lr=0.1), loss, 3,
                               1e-5)
        with self.assertRaises(ValueError):
            m[1](m[0](x[:1]))

    def test_optimizer_with_a_state_dict_of_its_own(self):
        """An optimizer class whose state_dict() has no "state" (Lookahead as
        lonePatient's and Ranger's write it: "fast_state", "slow_state")
        trains as plain PyTorch (the state's checksum crashed on it)."""
        class Lookahead(torch.optim.Optimizer):
            def __init__(self, base, k=2, alpha=0.5):  # (no Optimizer.__init__: its own)
                self.base, self.k, self.alpha = base, k, alpha
                self.param_groups, self.state, self.defaults = base.param_groups, {}, {}
                self.steps = 0
                # (torch 2's step wrapper reads its hooks)
                self._optimizer_step_pre_hooks = collections.OrderedDict()
                self._optimizer_step_post_hooks = collections.OrderedDict()

            def step(self, closure=None):
                self.base.step()
                self.steps += 1
                for g in self.param_groups:
                    for p in g["params"]:
                        slow = self.state.setdefault(p, {"slow": p.detach().clone()})["slow"]
                        if self.steps % self.k == 0:
                            slow.add_(p.detach() - slow, alpha=self.alpha)
                            p.data.copy_(slow)

            def state_dict(self):
                return {"fast_state": self.base.state_dict(), "param_groups": self.param_groups,
                        "slow_state": {id(p): s for p, s in self.state.items()}}
        x, y = data()
        m, ref = net(), net()
        opt = sft.DistributedOptimizer(Lookahead(torch.optim.Adam(m.parameters(), lr=0.01)),
                                       model=m)
        self.assertTrainsAsOne(m, opt, ref, Lookahead(torch.optim.Adam(ref.parameters(), lr=0.01)),
                               lambda model: nn.functional.cross_entropy(model(x), y), 5, 1e-6)

    def test_errors_are_typed(self):
        """Every error is an sfb.Error subclass naming the parameter."""
        m = net(torch.float64)
        with self.assertRaises(sft.UsageError) as cm:
            sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        self.assertIsInstance(cm.exception, sft.Error)
        self.assertEqual(cm.exception.param, "0.weight")
        m = net()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        for bad in (-1, float("nan"), "3", True):
            self.assertRaisesNaming(sft.UsageError, ["set_samples"], opt.set_samples, bad)

    def test_grad_is_reduced_when_backward_returns(self):
        """After backward() .grad holds the reduced gradient (one worker: its
        own, exactly as plain PyTorch's), a layer unused this step has none,
        and clipping then stepping equals plain PyTorch."""
        x, y = data()
        m, ref = net(), net()
        opt = sft.DistributedOptimizer(torch.optim.Adam(m.parameters(), lr=0.01), model=m)
        ref_opt = torch.optim.Adam(ref.parameters(), lr=0.01)
        for t in range(6):
            for o, model in ((opt, m), (ref_opt, ref)):
                o.zero_grad(set_to_none=True)
                out = model[1](model[0](x)) if t % 2 else model(x)  # layer 2 unused on odd steps
                (out.sum() if t % 2 else nn.functional.cross_entropy(out, y)).backward()
                nn.utils.clip_grad_norm_(model.parameters(), 0.1)
                o.step()
            self.assertEqual(m[2].weight.grad is None, bool(t % 2))
            for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
                self.assertLess(float((p - q).abs().max()), 1e-6 * float(q.abs().max()), n)

    def test_shutdown_after_a_step_not_taken(self):
        """A step reduced and not taken (a loop skipping a step it dislikes)
        is over: shutdown() then ends the job; one with fewer backward
        passes than backward_passes_per_step is refused, saying so."""
        x, y = data()
        m = net()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        nn.functional.cross_entropy(m(x), y).backward()
        opt.zero_grad()
        sft.shutdown()
        sft.init(world=1)
        m = net()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m,
                                       backward_passes_per_step=2)
        for k in range(3):  # a step, then the first pass of the next
            nn.functional.cross_entropy(m(x), y).backward()
            if k == 1:
                opt.step()
        self.assertRaisesNaming(ValueError, ["inside a step (1 of its 2 backward passes"],
                                sft.shutdown)

    def test_scheduler_and_state_dict(self):
        m = net()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                       model=m)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        x, y = data()
        for _ in range(3):
            opt.zero_grad()
            nn.functional.cross_entropy(m(x), y).backward()
            opt.step()
            sched.step()
        self.assertAlmostEqual(opt.param_groups[0]["lr"], 0.1 * 0.5 ** 3)
        sd = opt.state_dict()
        self.assertEqual(sd["sfb"]["clock"], 3)
        self.assertEqual(len(sd["state"]), 3)  # momentum of every parameter
        # loaded again mid-run (back to a checkpoint): its state, the job's clock goes on
        again = copy.deepcopy(sd)
        again["param_groups"][0]["lr"] = 0.3
        again["sfb"]["clock"] = 1
        opt.load_state_dict(again)
        self.assertEqual(opt.param_groups[0]["lr"], 0.3)
        self.assertEqual(opt.clock, 3)
        opt.zero_grad()
        nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
        self.assertEqual(opt.clock, 4)
        sft.shutdown()
        sft.init(world=1)  # at staleness 1 (updates on their way): refused after the first step
        m = net()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m,
                                       staleness=1)
        opt.zero_grad()
        nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
        self.assertRaisesNaming(ValueError, ["after the first step at staleness 1"],
                                opt.load_state_dict, opt.state_dict())
        # the model's too (a part's alike), before anything is loaded
        before = copy.deepcopy(m.state_dict())
        for part in (m, m[0]):
            zeros = {k: torch.zeros_like(v) for k, v in part.state_dict().items()}
            self.assertRaisesNaming(ValueError, ["model's load_state_dict after the first step "
                                                 "at staleness 1"], part.load_state_dict, zeros)
        for k, v in m.state_dict().items():
            self.assertTrue(torch.equal(v, before[k]), k)

    def test_ema_copies_of_the_model(self):
        """An EMA of the model by copy.deepcopy after wrapping (timm's
        ModelEmaV2) and torch's AveragedModel: copies train as one process's
        do, and a load into a copy is no load of the model's, at staleness 1
        too (a copy's hooks are the model's: the deep copy used to fail,
        pickling the job)."""
        x, y = data()
        for staleness in (0, 1):
            m, ref = net(), net()
            opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m,
                                           staleness=staleness)
            ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
            emas = [(copy.deepcopy(m), copy.deepcopy(ref)),
                    (torch.optim.swa_utils.AveragedModel(m),
                     torch.optim.swa_utils.AveragedModel(ref))]
            for _ in range(3):
                for model, o in ((m, opt), (ref, ref_opt)):
                    o.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    o.step()
                for (e, re), (src, rsrc) in zip(emas, ((m, ref), (m, ref))):
                    if isinstance(e, torch.optim.swa_utils.AveragedModel):
                        e.update_parameters(src)
                        re.update_parameters(rsrc)
                    else:
                        with torch.no_grad():
                            for a, b, c, d in zip(e.parameters(), src.parameters(),
                                                  re.parameters(), rsrc.parameters()):
                                a.mul_(0.9).add_(b, alpha=0.1)
                                c.mul_(0.9).add_(d, alpha=0.1)
                with torch.no_grad():  # (the EMA evaluated)
                    self.assertTrue(torch.allclose(emas[0][0](x), emas[0][1](x), atol=1e-6))
            for e, re in emas:
                for a, b in zip(e.parameters(), re.parameters()):
                    self.assertTrue(torch.allclose(a, b, rtol=1e-5, atol=1e-6))
            emas[0][0].load_state_dict(m.state_dict())  # (no load of the model's)
            sft.shutdown()
            sft.init(world=1)

    def test_whole_model_saved(self):
        """torch.save(model) mid-run (the whole module, not its state_dict)
        pickles as in one process — sfb puts no hook on the user's modules
        (its forward pre-hooks failed it: "Can't pickle local object") —
        and the loaded copy is a plain model; at shutdown torch's global
        hooks and Module.load_state_dict are torch's again."""
        m = net()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        x, y = data()
        for _ in range(2):
            opt.zero_grad()
            nn.functional.cross_entropy(m(x), y).backward()
            opt.step()
        mm = torch.nn.modules.module
        self.assertEqual(len(mm._global_forward_pre_hooks), 1)
        for mod in m.modules():
            self.assertEqual((len(mod._forward_pre_hooks), len(mod._forward_hooks)), (0, 0))
        copied = torch.load(_saved(m), weights_only=False) if "weights_only" in \
            torch.load.__code__.co_varnames else torch.load(_saved(m))
        for a, b in zip(copied.parameters(), m.parameters()):
            self.assertTrue(torch.equal(a, b))
        nn.functional.cross_entropy(copied(x), y).backward()  # (torch's alone)
        self.assertTrue(all(p.grad is not None for p in copied.parameters()))
        sft.shutdown()
        self.assertEqual((len(mm._global_forward_pre_hooks), len(mm._global_forward_hooks)),
                         (0, 0))
        self.assertIs(nn.Module.load_state_dict, sft._capture._torch_load_state_dict)
        sft.init(world=1)

    def test_the_optimizer_itself_is_wrapped(self):
        """A name still bound to the optimizer after wrapping is the same
        object: a checkpoint loaded into it, a scheduler made before
        wrapping and its step all act on the job's optimizer."""
        m = net()
        optimizer = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        sd = copy.deepcopy(optimizer.state_dict())
        sd["param_groups"][0]["lr"] = 0.4
        opt = sft.DistributedOptimizer(optimizer, model=m)
        self.assertIs(opt, optimizer)
        self.assertIsInstance(opt, torch.optim.SGD)
        optimizer.load_state_dict(sd)  # (through the name of the unwrapped one)
        self.assertEqual(opt.param_groups[0]["lr"], 0.4)
        x, y = data()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (torch warns of a scheduler stepped first)
            for _ in range(2):
                optimizer.zero_grad()
                nn.functional.cross_entropy(m(x), y).backward()
                optimizer.step()
                sched.step()
        self.assertEqual(opt.clock, 2)
        self.assertAlmostEqual(opt.param_groups[0]["lr"], 0.1)
        # plain optimizers (a whole object: torch 2.6 loads one with weights_only=False only)
        for copied in (copy.deepcopy(opt), torch.load(_saved(opt), weights_only=False)):
            self.assertIs(type(copied), torch.optim.SGD)
            self.assertEqual(copied.param_groups[0]["lr"], opt.param_groups[0]["lr"])
            self.assertEqual(len(copied.state_dict()["state"]), len(opt.state_dict()["state"]))
        sft.shutdown()
        sft.init(world=1)  # the same optimizer in the next job
        self.assertIs(sft.DistributedOptimizer(optimizer, model=m), optimizer)
        optimizer.zero_grad()
        nn.functional.cross_entropy(m(x), y).backward()
        optimizer.step()
        self.assertEqual(optimizer.clock, 1)
        sft.shutdown()
        sft.init(world=1)
        other = torch.optim.SGD(m.parameters(), lr=0.1)
        other.step = lambda closure=None: None
        self.assertRaisesNaming(ValueError, ["step was replaced"], sft.DistributedOptimizer,
                                other, model=m)

    def test_gradient_hooks(self):
        """A hook on a parameter runs on its reduced gradient, as one process
        runs it (a Linear's by factors is never a tensor of its own); where
        the reduction is not one pass's gradient it is refused."""
        m, ref = net(), net()
        for q in (m, ref):
            q[0].weight.register_hook(lambda g: g.clamp(-0.01, 0.01))
            q[2].weight.register_hook(lambda g: g * 3)
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        x, y = data()
        for o, q in ((opt, m), (ref_opt, ref)):
            for _ in range(3):
                o.zero_grad()
                nn.functional.cross_entropy(q(x), y).backward()
                o.step()
        for p, r in zip(m.parameters(), ref.parameters()):
            self.assertLess(float((p - r).abs().max()), 1e-6)
        self.assertEqual(len(m[0].weight._backward_hooks), 2)  # (sfb's own and the clamp: back)
        sft.shutdown()
        sft.init(world=1)
        m = net()
        m[2].weight.register_hook(lambda g: g * 3)
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m,
                                       backward_passes_per_step=2)
        self.assertRaisesNaming(ValueError, ["2.weight has a gradient hook",
                                             "backward_passes_per_step=2"], m, x)

    def test_autograd_grad_takes_a_generator(self):
        """torch.autograd.grad with respect to model.parameters() of a part
        that goes densely (a generator, read once): torch's gradients."""
        torch.manual_seed(4)
        m = nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.Linear(8, 3))
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        x, y = data()
        loss = nn.functional.cross_entropy(m(x), y)
        got = torch.autograd.grad(loss, m[1].parameters(), retain_graph=True)
        want = torch.autograd.grad(loss, list(m[1].parameters()))
        self.assertEqual(len(got), 2)
        for a, b in zip(got, want):
            self.assertTrue(torch.equal(a, b))
        del opt

    def test_autograd_grad_is_no_pass(self):
        """torch.autograd.grad with respect to parameters that go densely (a
        LayerNorm's), mid-run, through sfb's wrapper and through torch's own
        function (imported before the DistributedOptimizer): torch's
        gradients, and no pass of a step — torch 2 runs a leaf's hooks in
        autograd.grad too, and sfb took that for a backward pass, reducing
        in the middle of it (a MAML step went wrong by 40 %)."""
        torch.manual_seed(4)
        m = nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.Linear(8, 3))
        ref = copy.deepcopy(m)
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        x, y = data()
        for t in range(4):
            for model, o, grad in ((m, opt, torch.autograd.grad if t % 2 else
                                    sft._capture._torch_autograd_grad),
                                   (ref, ref_opt, sft._capture._torch_autograd_grad)):
                o.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                g = grad(loss, list(model[1].parameters()), retain_graph=True)
                loss.backward()
                o.step()
                if model is m:
                    mine = g
            for a, b in zip(mine, g):  # (the input gradients of sfb's F.linear round apart)
                self.assertTrue(torch.allclose(a, b, rtol=1e-5, atol=1e-6))
            self.assertEqual(opt.clock, t + 1)
        for a, b in zip(m.parameters(), ref.parameters()):
            self.assertTrue(torch.allclose(a, b, rtol=1e-5, atol=1e-6))

    def test_samples_beyond_the_first_step(self):
        """Steps of more samples than the first (longer sequences) train as
        torch does, the job's bound raised with headroom; at staleness 1
        refused, naming max_samples."""
        m = net()
        ref = copy.deepcopy(m)
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        x, y = data()

        def step(model, o, rows):
            o.zero_grad()
            nn.functional.cross_entropy(model(x[:rows]), y[:rows]).backward()
            o.step()
        bounds = []
        for rows in (8, 9, 32, 12):
            step(m, opt, rows)
            step(ref, ref_opt, rows)
            bounds.append(sft._env._optimizer.max_s)
        self.assertEqual(bounds, [8, 12, 32, 32])  # (9 > 8: 8 and half again)
        for a, b in zip(m.parameters(), ref.parameters()):
            self.assertTrue(torch.allclose(a, b, rtol=1e-5, atol=1e-6))
        sft.shutdown()
        sft.init(world=1)
        m = net()
        opt = sft.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), model=m,
                                       staleness=1)
        step(m, opt, 8)
        self.assertRaisesNaming(ValueError, ["9 samples", "at staleness 1",
                                             "max_samples=, at least 9"], step, m, opt, 9)


class BufferComparison(unittest.TestCase):
    """What the replica checks take for a persistent buffer whose bits differ
    between ranks: rounding passes, a difference anywhere does not."""

    def test_close(self):
        from sfb.torch._replicas import _close, buffers
        g = torch.Generator().manual_seed(1)
        a = torch.randn(200000, generator=g)
        self.assertTrue(_close(a, a.clone()))
        self.assertTrue(_close(a * (1 + 1.2e-7), a))  # rounding
        b = a.clone()
        b[12345] += 1e-3  # one element of 200,000
        self.assertFalse(_close(b, a))
        c = a.clone()
        c[[5, 6]] = c[[6, 5]]  # two swapped
        self.assertFalse(_close(c, a))
        n = torch.tensor([float("nan"), float("inf"), 0.0])
        self.assertTrue(_close(n, n.clone()))
        self.assertFalse(_close(torch.tensor([1.0, 2.0]), torch.tensor([1.0, float("nan")])))
        self.assertFalse(_close(torch.tensor(5), torch.tensor(6)))  # integers: exactly
        self.assertTrue(_close(torch.ones(3, dtype=torch.bfloat16),
                               torch.ones(3, dtype=torch.bfloat16)))
        self.assertTrue(_close(torch.zeros(0), torch.zeros(0)))
        m = nn.BatchNorm1d(3)
        m.register_buffer("cache", torch.zeros(2), persistent=False)
        self.assertEqual([n for n, _ in buffers(nn.Sequential(m, m))],
                         ["0.running_mean", "0.running_var", "0.num_batches_tracked"])


class RenormExchange(unittest.TestCase):
    """The rows another rank's max_norm lookups changed, as they arrive:
    parsed back as sent, and bytes that do not hold together, ids outside
    the table, rows of another width or a setting torch refuses fail
    naming the rank, never an index error or a crash."""

    @staticmethod
    def blob(name=b"emb", once=(1, 5), twice=(7,), width=4, setting=(1.0, 2.0)):
        return b"".join([np.array([len(name), len(once), len(twice), width], np.int64).tobytes(),
                         np.array(setting, np.float64).tobytes(), name,
                         np.array(once, np.int64).tobytes(), np.array(twice, np.int64).tobytes(),
                         np.ones((len(twice), width), np.float32).tobytes()])

    def test_parse_and_check(self):
        from sfb.torch._renorm import _check, _parse
        w = torch.zeros(10, 4)
        got = _parse(self.blob() + self.blob(b"bag", (), (0, 9)), 1)
        self.assertEqual(sorted(got), ["bag", "emb"])
        self.assertEqual(got["emb"][0], (1.0, 2.0))
        self.assertEqual(got["emb"][1].tolist(), [1, 5])
        self.assertEqual(got["bag"][2].tolist(), [0, 9])
        self.assertEqual(got["bag"][3].shape, (2, 4))
        for part in got.values():
            _check("emb", w, 1, part)
        for bad in (self.blob()[:-3], self.blob()[:20], self.blob(once=(1,))[:40] + b"x" * 9):
            with self.assertRaises(sft.MismatchError) as e:
                _parse(bad, 2)
            self.assertIn("rank 2's renormalized rows (max_norm) are malformed", str(e.exception))
            self.assertEqual(e.exception.rank, 2)
        for kw, words in ((dict(once=(10,)), "ids outside its 10 rows"),
                          (dict(twice=(-1,)), "ids outside its 10 rows"),
                          (dict(width=3), "rows 3 wide, not 4"),
                          (dict(setting=(float("nan"), 2.0)), "max_norm nan")):
            with self.assertRaises(sft.MismatchError) as e:
                _check("emb", w, 3, _parse(self.blob(**kw), 3)["emb"])
            self.assertIn("rank 3 renormalized rows of emb (max_norm) with " + words,
                          str(e.exception))


class OverflowExchange(unittest.TestCase):
    """A step's updates past the job's bound as another rank sends them:
    added as its GEMM would add them (dense, factors, a table's rows), and
    bytes that do not hold together fail naming the rank, never an index
    error, a crash or a NaN in a replica."""

    class Slot:
        def __init__(self, kind, rows, cols):
            self.kind, self.rows, self.cols, self.name = kind, rows, cols, "s%dx%d" % (rows, cols)
            self.buf = np.zeros((rows, cols), np.float32)

    def test_forms(self):
        from sfb.torch._overflow import Overflow, _add
        g = np.random.default_rng(1)
        slots = [self.Slot("linear", 3, 4), self.Slot("linear", 30, 40), self.Slot("rows", 5, 9)]
        b0, c0 = g.standard_normal((9, 3), np.float32), g.standard_normal((9, 4), np.float32)
        b1, c1 = g.standard_normal((2, 30), np.float32), g.standard_normal((2, 40), np.float32)
        b2 = g.standard_normal((3, 5), np.float32)
        col = np.array([7, 0, 3], np.uint32)
        o = Overflow()
        o.keep(0, slots[0], b0, c0, 0.5, 7)   # dense (9 samples of a 3 x 4)
        o.keep(1, slots[1], b1, c1, 2.0, 7)   # factors (2 samples of a 30 x 40)
        o.keep(2, slots[2], b2, (np.arange(4, dtype=np.uint32), col, np.ones(3, np.float32)),
               0.25, 7)
        data = b"".join(o.kept)
        _add(1, data, slots)
        want2 = np.zeros((5, 9), np.float32)
        want2[:, col] = 0.25 * b2.T
        for slot, want in zip(slots, (0.5 * b0.T @ c0, 2.0 * b1.T @ c1, want2)):
            self.assertTrue(np.allclose(slot.buf, want, rtol=1e-6, atol=1e-6), slot.name)
        self.assertEqual(len(data), 3 * 32 + 3 * 4 * 4 + 2 * 70 * 4 + 3 * 6 * 4)
        with self.assertRaises(sft.Error) as e:  # (nothing kept: not finite)
            o.keep(0, slots[0], b0 * np.float32("nan"), c0, 1.0, 7)
        self.assertIn("clock 7: a non-finite gradient", str(e.exception))

    def test_malformed(self):
        from sfb.torch._overflow import Overflow, _add
        slots = [self.Slot("linear", 3, 4), self.Slot("rows", 5, 9)]
        o = Overflow()
        o.keep(0, slots[0], np.ones((1, 3), np.float32), np.ones((1, 4), np.float32), 1.0, 0)
        good = o.kept[0]
        head = np.frombuffer(good[:32], np.int64)[:3].tolist()

        def forged(k=head[0], form=head[1], s=head[2], scale=1.0, body=good[32:]):
            return np.array([k, form, s], np.int64).tobytes() + \
                np.array([scale], np.float64).tobytes() + body
        nan = np.full(7, np.nan, np.float32).tobytes()
        rows = np.ones((1, 5), np.float32).tobytes() + np.array([9], np.uint32).tobytes()
        for data, words in ((good[:20], "20 bytes left, a header takes 32"),
                            (forged(k=2), "layer 2 of 2"), (forged(k=-1), "layer -1 of 2"),
                            (forged(form=7), "form 7"), (forged(k=1), "form 1"),
                            (forged(s=0), "0 samples"), (forged(body=good[32:-4]), "24 bytes left"),
                            (forged(scale=float("inf")), "s3x4"), (forged(body=nan), "non-finite"),
                            (forged(k=1, form=2, s=1, body=rows), "row id 9 of a table of 9")):
            for slot in slots:
                slot.buf.fill(0)
            with self.assertRaises(sft.MismatchError) as e:
                _add(2, data, slots)
            self.assertIn("rank 2's updates of a step with more samples than the job's bound "
                          "are malformed", str(e.exception))
            self.assertIn(words, str(e.exception))
            self.assertEqual(e.exception.rank, 2)
            self.assertTrue(all(np.isfinite(slot.buf).all() for slot in slots))


class MeasuredPlan(unittest.TestCase):
    """sync="auto"'s measured choice (sfb/torch/_autoplan.py), fed step
    times as the meta matrix would: which layers it measures, which engine
    it keeps, and when it measures again."""

    class Slot:
        def __init__(self, index, rows, cols, kind="linear"):
            self.index, self.rows, self.cols, self.kind = index, rows, cols, kind

    PLAN = ("matrix 0 64x33: sfb 10 ms, fms 30 ms per clock -> sfb\n"
            "matrix 1 64x33: sfb 12 ms, fms 30 ms per clock -> sfb\n"
            "matrix 2 8x5: sfb 0.1 ms, fms 9 ms per clock -> sfb\n"
            "matrix 3 128x65: sfb 50 ms, fms 40 ms per clock -> fms\n"
            "matrix 4 3x3: sfb (forced)\n")

    def trials(self, steps=4):
        from sfb.torch import _autoplan
        slots = [self.Slot(0, 64, 33), self.Slot(1, 64, 33), self.Slot(2, 8, 5),
                 self.Slot(3, 128, 65)]
        return _autoplan.Trials(steps, slots, ["sfb", "sfb", "sfb", "fms", "sfb"], self.PLAN)

    def run_steps(self, t, clock, step_ms, n, samples=32, valid=True):
        """n clocks from `clock`; step_ms(engines) the time of a step under
        them, but the first step after a replan pays for it (1e9 ms).
        Returns the next clock and the replans made."""
        moves = []
        for c in range(clock, clock + n):
            ran = t.ran.get(c - 1, tuple(t.engines))
            first = c - 2 in t.ran and t.ran[c - 2] != ran
            to = t.observe(c, 1e9 if first else step_ms(ran), samples, valid)
            if to is not None:
                moves.append((c, to))
        return clock + n, moves

    def test_groups(self):
        t = self.trials()
        # within 4x: (0, 1) share a shape, 3 alone, the costlier first; 2
        # (90x apart) and the forced 4 are not measured
        self.assertEqual(t.groups, [[3], [0, 1]])
        self.assertEqual(self.trials(0).groups, [])
        self.assertEqual(self.trials(0).stage, "off")

    def test_keeps_the_faster(self):
        t = self.trials()
        # fms for the 64x33 pair is 20 % faster; sfb for matrix 3 is slower
        def ms(e):
            return 100.0 - (20 if e[0] == "fms" else 0) + (15 if e[3] == "sfb" else 0)
        # mid-trial, the plan says which engine runs while measuring
        clock, moves = self.run_steps(t, 0, ms, 3)
        self.assertEqual(t.describe(3), "; measuring both engines, 4 steps each")
        clock, more = self.run_steps(t, clock, ms, 3)
        self.assertEqual(t.engines[3], "sfb")
        self.assertEqual(t.describe(3), "; measuring both engines, 4 steps each "
                                        "(trying sfb now, fms before)")
        clock, rest = self.run_steps(t, clock, ms, 74)
        moves += more + rest
        self.assertEqual(t.stage, "done")
        self.assertEqual(t.engines, ["fms", "fms", "sfb", "fms", "sfb"])
        self.assertEqual(t.measured[3], {"fms": 100.0, "sfb": 115.0})
        self.assertEqual(t.measured[0], {"sfb": 100.0, "fms": 80.0})
        self.assertIn("80 ms by fms, 100 ms by sfb", t.describe(1))
        self.assertEqual(t.describe(2), "")
        # each group runs four windows (flipped, as it was, as it was,
        # flipped), then the faster stays: matrix 3 flipped, back, flipped,
        # then back with the pair's flip in one move; the pair back and
        # flipped again, kept as it is
        flips = [[i for i in range(5) if a[i] != b[i]]
                 for a, b in zip([["sfb", "sfb", "sfb", "fms", "sfb"]] + [m for _, m in moves],
                                 [m for _, m in moves])]
        self.assertEqual(flips, [[3]] * 3 + [[0, 1, 3]] + [[0, 1]] * 2)

    def test_noise_keeps_the_models_choice(self):
        """Steps that vary by about 10 % from one to the next: where an
        engine makes a 2 ms difference, below what the measured steps can
        tell apart, the cost model's choice stays (a flip kept on a lucky
        median of noisy steps is a coin toss); a gain of 40 ms is kept."""
        jitter = [2.0, 3.0, -9.0, -2.0, 6.0, 5.0, 2.0, -1.0, 5.0, 1.0, 8.0, -4.0]
        for gain, kept in ((2.0, "fms"), (40.0, "sfb")):
            t = self.trials(steps=8)
            clock = 0
            while t.stage != "done" and clock < 300:
                ran = t.ran.get(clock - 1, tuple(t.engines))
                ms = 100.0 + jitter[clock % len(jitter)] - (gain if ran[3] == "sfb" else 0)
                t.observe(clock, ms, 32, True)
                clock += 1
            self.assertEqual(t.stage, "done")
            self.assertEqual(t.engines[3], kept, "gain %g ms: %r" % (gain, t.measured[3]))
            if gain < 10:  # the lucky median: faster, but within the noise
                self.assertLess(t.measured[3]["sfb"], t.measured[3]["fms"])

    def test_a_slow_window_is_not_a_gain(self):
        """A machine shared with other work runs a whole window slow: here
        the first window of matrix 3 as it was (fms) runs 60 ms a step
        slower, while the engines make no difference. The steps' medians
        then say sfb is ~30 ms faster, more than their spread explains; the
        windows cannot confirm it, the trial measures four more windows,
        which do not, and the cost model's choice stays. A real 150 ms gain
        under the same slow window is confirmed by the four more windows
        and kept."""
        jitter = [2.0, 3.0, -9.0, -2.0, 6.0, 5.0, 2.0, -1.0, 5.0, 1.0, 8.0, -4.0]
        for gain, kept in ((0.0, "fms"), (150.0, "sfb")):
            t = self.trials(steps=8)
            clock, windows = 0, 0
            while t.stage != "done" and clock < 400:
                ran = t.ran.get(clock - 1, tuple(t.engines))
                slow = t.stage == "trial" and t.group == 0 and t.window == 1
                ms = (100.0 + jitter[clock % len(jitter)] + (60 if slow else 0) -
                      (gain if ran[3] == "sfb" else 0))
                if t.group == 0:
                    windows = max(windows, t.window + 1)
                t.observe(clock, ms, 32, True)
                clock += 1
            self.assertEqual(t.stage, "done")
            self.assertEqual(t.engines[3], kept, "gain %g ms: %r" % (gain, t.measured[3]))
            self.assertEqual(windows, 8)  # measured again: 8 windows, not 4

    def test_outliers_and_invalid_steps(self):
        t = self.trials()
        calls = [0]

        def ms(e):  # every 4th step an evaluation pass: 10x
            calls[0] += 1
            return (1000.0 if calls[0] % 4 == 0 else 100.0) + (5 if e[3] == "sfb" else 0)
        self.run_steps(t, 0, ms, 80)
        self.assertEqual(t.measured[3], {"fms": 100.0, "sfb": 105.0})
        t2 = self.trials()
        _, moves = self.run_steps(t2, 0, lambda e: 1.0, 80, valid=False)  # a rank joined
        self.assertEqual(len(moves), 1)  # the first window's engines; nothing counted since
        self.assertEqual((t2.stage, t2.window, t2.measured), ("trial", 0, {}))

    def test_a_drifting_machine(self):
        """The machine gets faster by 2 ms a step while matrix 3 by sfb is
        5 ms faster: measured in windows flipped, as it was, as it was,
        flipped, the drift falls on both alike and the flip is kept
        (flipped, as it was, flipped, as it was would charge the flip the
        drift and keep fms)."""
        t = self.trials(steps=6)
        clock = 0
        while t.stage != "done" and clock < 200:
            ran = t.ran.get(clock - 1, tuple(t.engines))
            t.observe(clock, 500.0 - 2 * clock - (5 if ran[3] == "sfb" else 0), 32, True)
            clock += 1
        self.assertEqual(t.engines[3], "sfb")
        self.assertLess(t.measured[3]["sfb"], t.measured[3]["fms"])

    def test_measures_again_when_the_batch_changes(self):
        t = self.trials()
        clock, _ = self.run_steps(t, 0, lambda e: 100.0 - (20 if e[0] == "fms" else 0), 60)
        self.assertEqual(t.engines[0], "fms")
        clock, moves = self.run_steps(t, clock, lambda e: 50.0, 3, samples=128)
        self.assertEqual((t.stage, moves), ("done", []))  # not yet: 3 steps of 4
        clock, _ = self.run_steps(t, clock, lambda e: 50.0, 1, samples=128)
        self.assertEqual(t.stage, "trial")
        # at batch 128, sfb wins for the pair: the plan goes back
        clock, _ = self.run_steps(t, clock, lambda e: 50.0 + (20 if e[0] == "fms" else 0), 60,
                                  samples=128)
        self.assertEqual((t.stage, t.engines[:2]), ("done", ["sfb", "sfb"]))


class ElasticOneWorker(unittest.TestCase):
    """elastic.run and State in a job of one worker (not elastic): the
    training function runs once, as plain torch would, on Batches' steps."""

    def setUp(self):
        sft.init(world=1)

    def tearDown(self):
        sft.shutdown()

    def test_run_is_plain_training_here(self):
        x, y = data()
        ref = net()
        ropt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        b = sft.elastic.Batches(32, 8, epochs=2, seed=2)
        for t in range(len(b)):
            ropt.zero_grad()
            nn.functional.cross_entropy(ref(x[b.batch(t)]), y[b.batch(t)]).backward()
            ropt.step()
        model = net()
        opt = sft.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                       model=model)
        state = sft.elastic.State(model, opt, seen=0)
        with self.assertRaises(AttributeError):
            state.model = model
        with self.assertRaises(sft.UsageError):
            sft.elastic.run(lambda s: None)(model)

        @sft.elastic.run
        def train(state, tag):
            for idx in b.shard(state.optimizer):
                opt.zero_grad()
                nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
                opt.step()
                state.seen += len(idx)
            return tag

        self.assertEqual(train(state, "done"), "done")
        self.assertEqual((state.seen, opt.clock, state.resets), (64, 8, 0))
        for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
            self.assertLess(float((p - q).abs().max()), 1e-5 * float(q.abs().max()), n)
        self.assertEqual(len(b.shard(opt)), 0)  # every step taken


class Installed(unittest.TestCase):
    def test_every_module_installed(self):
        """python/meson.build installs every module of the package (one
        left out imports here from the source tree and fails installed)."""
        here = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "python")
        with open(os.path.join(here, "meson.build")) as f:
            listed = f.read()
        pkg = os.path.join(here, "sfb", "torch")
        missing = [n for n in sorted(os.listdir(pkg))
                   if n.endswith(".py") and "'sfb/torch/%s'" % n not in listed]
        self.assertEqual(missing, [])


class InheritedRank(unittest.TestCase):
    def test_child_of_a_rank_refused(self):
        """A process that inherits the environment torchrun gave a rank that
        joined (a spawned DataLoader worker running the script's top level
        again) is refused by init(), naming both processes; with no rank
        joined from it, the same environment joins (a job of one)."""
        import subprocess
        here = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "python")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SFB_RANK", "PMIX_"))}
        env.update(PYTHONPATH=here, RANK="0", WORLD_SIZE="1", SFB_RANK_PID=str(os.getpid()))
        code = "import sfb.torch as sft; sft.init(); print('rank', sft.rank()); sft.shutdown()"
        for pid, fails in ((str(os.getpid()), True), (None, False)):
            if pid is None:
                del env["SFB_RANK_PID"]
            child = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, timeout=60)
            if fails:
                self.assertNotEqual(child.returncode, 0)
                self.assertIn("sfb.torch.init: this process (pid ", child.stderr)
                self.assertIn("inherited the launcher's environment of rank 0 from process %d"
                              % os.getpid(), child.stderr)
            else:
                self.assertEqual((child.returncode, child.stdout), (0, "rank 0\n"), child.stderr)


class ElasticBatches(unittest.TestCase):
    """sfb.torch.elastic.Batches: step t the same global batch at any world,
    its shares a partition of it."""

    def test_shares_partition_the_batch_at_any_world(self):
        b = sft.elastic.Batches(103, 10, epochs=3, seed=4)
        self.assertEqual((b.steps_per_epoch, len(b)), (11, 33))
        for t in (0, 5, 10, 11, 32):
            whole = b.batch(t).tolist()
            self.assertEqual(len(whole), 3 if t % 11 == 10 else 10)
            for world in (1, 2, 3, 4, 7, 10):
                parts = [b.share(t, r, world).tolist() for r in range(world)]
                self.assertEqual(sum(parts, []), whole)
                self.assertLessEqual(max(map(len, parts)) - min(map(len, parts)), 1)

    def test_epochs_are_permutations_of_their_own(self):
        b = sft.elastic.Batches(50, 8, epochs=2, seed=1)
        e0 = sum((b.batch(t).tolist() for t in range(7)), [])
        e1 = sum((b.batch(t).tolist() for t in range(7, 14)), [])
        self.assertEqual((sorted(e0), sorted(e1)), (list(range(50)), list(range(50))))
        self.assertNotEqual(e0, e1)
        again = sft.elastic.Batches(50, 8, epochs=2, seed=1)
        self.assertEqual(again.batch(9).tolist(), b.batch(9).tolist())  # any order of asking
        self.assertEqual(sft.elastic.Batches(50, 8, shuffle=False).batch(1).tolist(),
                         list(range(8, 16)))

    def test_drop_last_and_bad_arguments(self):
        b = sft.elastic.Batches(50, 8, drop_last=True)
        self.assertEqual((len(b), b.epoch(5), len(b.batch(5))), (6, 0, 8))
        for bad in ({"n": 0, "batch_size": 1}, {"n": 5, "batch_size": 1.5},
                    {"n": 5, "batch_size": 2, "epochs": True},
                    {"n": 5, "batch_size": 6, "drop_last": True}):
            with self.assertRaises(sft.UsageError):
                sft.elastic.Batches(**bad)
        with self.assertRaises(sft.UsageError):
            b.batch(6)


if __name__ == "__main__":
    unittest.main()
