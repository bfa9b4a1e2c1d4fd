import pytest
import torch
import torch.nn.functional as F

from fbnas.arch.space import load_space
from fbnas.latency.lut import LUT
from fbnas.search.supernet import MixedOp, Supernet, gumbel_softmax


@pytest.fixture
def supernet(tiny_lut_data):
    torch.manual_seed(0)
    # the wiring of the paper's supernet: every candidate computes something from the start
    # (residual bodies otherwise start at zero and get gradients only after a step) and hard
    # mode runs one candidate in every layer
    return Supernet(load_space("tiny"), LUT(tiny_lut_data), zero_init_residual=False,
                    soft_transitions=False)


def test_candidates_start_interchangeable(tiny_lut_data):
    """Residual candidates start as the identity; transition layers mix in hard mode."""
    torch.manual_seed(0)
    net = Supernet(load_space("tiny"), LUT(tiny_lut_data)).eval()
    x = torch.randn(2, 8, 16, 16)
    residual = [m for m in net.layers if not m.transition]
    assert residual, "the tiny space has a residual layer"
    layer = residual[0]
    for op, name in zip(layer.ops, layer.candidates):
        if name != "skip" and op.residual:
            assert torch.equal(op(x), x), name
    transitions = [m for m in net.layers if m.transition]
    assert transitions and all(m.soft_transition for m in transitions)
    w, idx = transitions[0].weights("hard", 5.0, None)
    assert idx is None and w.dim() == 1 and float(w.detach().min()) > 0  # every candidate mixed
    w, idx = residual[0].weights("hard", 5.0, None)
    assert idx is not None  # one candidate runs
    # argmax evaluation of a transition weights the candidates by softmax(theta)
    w, idx = transitions[0].weights("argmax", 1.0, None)
    assert idx is None and torch.allclose(w, F.softmax(transitions[0].theta, -1))
    # the last BN scale of a zero-initialised body still gets a gradient
    net.train()
    logits, _ = net(torch.randn(4, 3, 32, 32), tau=5.0, mode="soft")
    logits.sum().backward()
    op = next(op for op in layer.ops if getattr(op, "residual", False))
    assert op.body[-1][1].weight.grad.abs().sum() > 0


@pytest.mark.parametrize("impl", ["loop", "fast"])
def test_transition_paths_mix_a_sampled_few(tiny_lut_data, impl):
    """With search.transition_paths K a hard step mixes K candidates of a transition layer,
    drawn without replacement from softmax(theta); only those run and get gradients."""
    torch.manual_seed(0)
    net = Supernet(load_space("tiny"), LUT(tiny_lut_data), impl=impl, transition_paths=2)
    at, layer = next((i, m) for i, m in enumerate(net.layers) if m.transition)
    n = len(layer.candidates)
    for _ in range(20):
        w, idx = layer.weights("hard", 5.0, None)
        assert isinstance(idx, tuple) and len(idx) == 2
        w = w.detach()
        assert torch.count_nonzero(w) == 2 and abs(float(w.sum()) - 1.0) < 1e-6
        assert all(float(w[i]) > 0 for i in idx)
    # the same output as mixing every candidate with those weights (zero elsewhere)
    x = torch.randn(2, net.space.layers[at].c_in, 16, 16)
    layer.eval()
    assert torch.allclose(layer(x, w, idx), MixedOp.forward(layer, x, w, None), atol=1e-6)
    # a weight step trains the drawn candidates only
    layer.train()
    layer.zero_grad()
    layer(x, w, idx).sum().backward()
    trained = [i for i, op in enumerate(layer.ops)
               if any(p.grad is not None and p.grad.abs().sum() > 0 for p in op.parameters())]
    assert trained and trained == [i for i in idx if list(layer.ops[i].parameters())]
    # a candidate theta strongly prefers is drawn every time; the rest share the second place
    with torch.no_grad():
        layer.theta.copy_(torch.tensor([8.0] + [0.0] * (n - 1)))
    seen = set()
    for _ in range(200):
        _, idx = layer.weights("hard", 1.0, None)
        assert 0 in idx
        seen.update(idx)
    assert seen == set(range(n))
    # per-image draws, evaluation and the other layers are as without the option
    assert layer.weights("hard", 5.0, 4)[1] is None
    assert layer.weights("argmax", 1.0, None)[1] is None
    plain = next(m for m in net.layers if not m.transition)
    assert isinstance(plain.weights("hard", 5.0, None)[1], torch.Tensor)


@pytest.mark.parametrize("mode,per_sample", [("soft", False), ("hard", False), ("soft", True),
                                             ("hard", True)])
def test_every_candidate_and_theta_gets_gradients(supernet, mode, per_sample):
    x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
    seen = {id(p): False for p in supernet.parameters()}
    # hard mode runs one candidate per layer and step: over a few steps every one must train
    steps = 1 if mode == "soft" else 60
    torch.manual_seed(1)
    for _ in range(steps):
        supernet.zero_grad()
        logits, cost = supernet(x, tau=5.0, mode=mode, per_sample=per_sample)
        assert logits.shape == (8, 10)
        assert cost.shape == ((8,) if per_sample else ())
        loss = (F.cross_entropy(logits, y, reduction="none") * torch.log(cost)).mean()
        loss.backward()
        for p in supernet.parameters():
            if p.grad is not None and p.grad.abs().sum() > 0:
                seen[id(p)] = True
        for theta in supernet.theta_parameters():
            assert theta.grad is not None and (theta.grad != 0).all()
        if all(seen.values()):  # every candidate has trained: more steps add nothing
            break
    missing = [n for n, p in supernet.named_parameters() if not seen[id(p)]]
    assert not missing, missing


def test_gumbel_noise_sign_and_straight_through():
    torch.manual_seed(0)
    theta = torch.tensor([2.0, 0.0, -2.0])
    draws = torch.stack([gumbel_softmax(theta, 1.0, hard=True)[1] for _ in range(4000)])
    freq = torch.bincount(draws, minlength=3).float() / 4000
    # with -log(-log U) noise, argmax(theta + g) follows softmax(theta) exactly
    assert torch.allclose(freq, F.softmax(theta, 0), atol=0.03)
    w, idx = gumbel_softmax(theta.requires_grad_(), 1.0, hard=True)
    w = w.detach()
    assert float(w.sum()) == pytest.approx(1.0) and float(w[idx]) == pytest.approx(1.0)


def test_one_draw_weights_both_outputs_and_cost(supernet):
    """The cost must come from the same Gumbel sample that chose the ops (not a second draw)."""
    torch.manual_seed(3)
    x = torch.randn(2, 3, 32, 32)
    drawn = []
    for layer in supernet.layers:
        orig = layer.weights

        def spy(mode, tau, samples, orig=orig, layer=layer):
            w, idx = orig(mode, tau, samples)
            drawn.append((layer, w.detach(), idx))
            return w, idx

        layer.weights = spy
    for _ in range(5):
        drawn.clear()
        _, cost = supernet(x, tau=1.0, mode="hard")
        # one op where a layer ran one; the drawn mixing weights on (soft) transition layers
        expected = supernet.fixed_cost + sum(
            float(layer.cost[int(idx)]) if idx is not None else float((w * layer.cost).sum())
            for layer, w, idx in drawn)
        expected = supernet.cal_a * expected + supernet.cal_b
        assert float(cost.detach()) == pytest.approx(expected, rel=1e-5)
        assert any(idx is not None for _, _, idx in drawn)


def test_deterministic_eval_modes(supernet):
    supernet.eval()
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        a, ca = supernet(x, mode="argmax")
        b, cb = supernet(x, mode="argmax")
        s1, _ = supernet(x, mode="softmax")
        s2, _ = supernet(x, mode="softmax")
    assert torch.equal(a, b) and torch.equal(s1, s2)
    assert float(ca) == pytest.approx(supernet.cost_of(supernet.argmax_ops()))


def test_theta_separate_from_weights(supernet):
    theta = {id(p) for p in supernet.theta_parameters()}
    weights = {id(p) for p in supernet.weight_parameters()}
    assert theta and weights and not theta & weights
    assert theta | weights == {id(p) for p in supernet.parameters()}
    assert len(theta) == len(load_space("tiny").layers)


@pytest.mark.parametrize("per_sample", [False, True])
def test_theta_gradient_of_all_candidates(supernet, per_sample):
    """Hard mode with ``all_candidates``: the same sampled path's output (per batch; per image
    the candidates see the whole batch's BN statistics), but the CE gradient reaches the
    theta of every candidate, which the sampled candidate alone cannot give."""
    supernet.train()
    residual = [i for i, m in enumerate(supernet.layers) if not m.transition]
    # the tiny space's residual layers feed a transition (conv + BN), which undoes any scale
    # of its input: the sampled candidate's own straight-through term is then exactly zero
    assert residual and all(supernet.layers[i + 1].transition for i in residual)
    x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
    grads, outs = {}, {}
    for every in (False, True):
        torch.manual_seed(3)
        supernet.zero_grad()
        logits, _ = supernet(x, tau=2.0, mode="hard", per_sample=per_sample,
                             all_candidates=every)
        F.cross_entropy(logits, y).backward()
        outs[every] = logits.detach()
        grads[every] = [supernet.layers[i].theta.grad.clone() for i in residual]
    for g_sampled, g_all in zip(grads[False], grads[True]):
        assert float(g_all.abs().min()) > 0
        if not per_sample:
            assert float(g_sampled.abs().max()) < 1e-3 * float(g_all.abs().max())
    if not per_sample:
        assert torch.allclose(outs[False], outs[True], atol=1e-5)


def test_theta_weight_decay_does_not_cap_theta(tiny_lut_data):
    """theta's gradients are about 1e-4 per entry; its weight decay must not hold it near 0.

    As an L2 term added to the gradient (Adam's weight_decay), a decay of 5e-4 stops theta at
    |gradient| / decay = 0.2 however long the search sees the same preference."""
    from fbnas.config import load_config
    from fbnas.search.run import Search

    search = Search.__new__(Search)  # only the optimizers are needed, not a run
    search.cfg = load_config(None, ["space=tiny"])
    search.net = Supernet(load_space("tiny"), LUT(tiny_lut_data))
    opt = search.build_optimizers()["theta"]
    theta = search.net.layers[0].theta
    for _ in range(100):
        for t in search.net.theta_parameters():
            t.grad = torch.zeros_like(t)
        theta.grad[0] = -1e-4  # the same small preference at every step
        opt.step()
    lr = search.cfg.optim.theta.lr
    assert search.cfg.optim.theta.weight_decay > 0
    assert float(theta[0].detach()) > 0.8 * 100 * lr


def test_theta_gradient_matches_finite_differences(tiny_lut_data):
    """d loss / d theta by autograd equals central finite differences in float64 (zero-init
    residuals, soft mode, one Gumbel sample per batch, the same noise in every evaluation).

    The loss is only piecewise smooth: a step that moves a ReLU pre-activation across zero
    changes the slope inside the difference quotient (at h = 1e-4 this seed has such steps and
    the quotient is off by ~5e-4 of the largest gradient). The nearest kink is ~1.6e-5 away in
    theta, so the step stays well inside one smooth piece; the test checks that no ReLU
    input changes sign between theta - h and theta + h, which would invalidate the check."""
    from torch import nn

    from fbnas.search.loss import paper_loss

    torch.manual_seed(0)
    net = Supernet(load_space("tiny"), LUT(tiny_lut_data), impl="loop",
                   zero_init_residual=True).double().train()
    torch.manual_seed(100)
    x = torch.randn(8, 3, 32, 32, dtype=torch.float64)
    y = torch.randint(0, 10, (8,))

    def loss():
        torch.manual_seed(123)  # the same Gumbel noise in every evaluation
        logits, cost = net(x, tau=1.7, mode="soft", per_sample=False)
        return paper_loss(F.cross_entropy(logits, y), cost)[0]

    signs = []
    for m in net.modules():
        if isinstance(m, nn.ReLU):
            m.register_forward_pre_hook(lambda m, inp: signs.append(inp[0] > 0))

    loss().backward()
    auto = torch.cat([t.grad for t in net.theta_parameters()])
    h, fd = 1e-6, []
    with torch.no_grad():
        for theta in net.theta_parameters():
            for i in range(theta.numel()):
                theta[i] += h
                signs.clear()
                up = float(loss())
                signs_up = list(signs)
                theta[i] -= 2 * h
                signs.clear()
                down = float(loss())
                theta[i] += h
                assert all(torch.equal(a, b) for a, b in zip(signs_up, signs)), \
                    "the step crosses a ReLU kink; finite differences do not apply"
                fd.append((up - down) / (2 * h))
    fd = torch.tensor(fd, dtype=torch.float64)
    scale = float(auto.abs().max())
    assert scale > 0
    assert float((fd - auto).abs().max()) < 1e-6 * scale
