import pytest
import torch
import torch.nn.functional as F

from fbnas.lut import LUT
from fbnas.space import load_space
from fbnas.supernet import Supernet, gumbel_softmax


@pytest.fixture
def supernet(tiny_lut_data):
    torch.manual_seed(0)
    return Supernet(load_space("tiny"), LUT(tiny_lut_data))


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
    chosen = []
    for layer in supernet.layers:
        orig = layer.weights

        def spy(mode, tau, samples, orig=orig, layer=layer):
            w, idx = orig(mode, tau, samples)
            chosen.append(layer.candidates[int(idx)])
            return w, idx

        layer.weights = spy
    for _ in range(5):
        chosen.clear()
        _, cost = supernet(x, tau=1.0, mode="hard")
        assert float(cost.detach()) == pytest.approx(supernet.cost_of(chosen), rel=1e-5)


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
