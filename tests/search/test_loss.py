import math

import pytest
import torch

from fbnas.errors import FbnasError
from fbnas.search.loss import multiplier_step, paper_loss, target_loss


def test_paper_loss_matches_hand_value():
    ce, lat = torch.tensor(2.0), torch.tensor(5000.0)  # microseconds
    loss, factor = paper_loss(ce, lat, alpha=0.2, beta=0.6)
    expected = 2.0 * 0.2 * math.log(5000.0) ** 0.6
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    # beta is the exponent of the logarithm, not of LAT inside it
    assert float(loss) != pytest.approx(2.0 * 0.2 * math.log(5000.0 ** 0.6))
    assert float(factor) == pytest.approx(0.2 * math.log(5000.0) ** 0.6, rel=1e-6)


def test_paper_loss_per_sample_and_gradient_sign():
    lat = torch.tensor([2000.0, 8000.0], requires_grad=True)
    loss, _ = paper_loss(torch.tensor([1.0, 1.0]), lat)
    loss.sum().backward()
    assert (lat.grad > 0).all()  # a slower network always costs more
    assert loss[1] > loss[0]


@pytest.mark.parametrize("bad", [1.0, 0.5, 0.0, -3.0])
def test_paper_loss_refuses_non_positive_log(bad):
    with pytest.raises(FbnasError, match="log"):
        paper_loss(torch.tensor(1.0), torch.tensor(bad))


def test_target_loss_spends_the_budget():
    """The penalty is |LAT/T - 1|: under the budget latency is pushed up, above it down, with
    the same strength, and at the budget there is no penalty."""
    ce = torch.tensor(1.5)
    at, p_at = target_loss(ce, torch.tensor(5000.0), target_us=5000.0, weight=0.2)
    assert float(at) == pytest.approx(1.5) and float(p_at) == 0.0
    under, p_under = target_loss(ce, torch.tensor(4000.0), target_us=5000.0, weight=0.2)
    over, p_over = target_loss(ce, torch.tensor(6000.0), target_us=5000.0, weight=0.2)
    assert float(p_under) == pytest.approx(0.2 * 0.2) == pytest.approx(float(p_over))
    assert float(over) == pytest.approx(1.5 + 0.04)
    grads = []
    for v in (4000.0, 6000.0):
        lat = torch.tensor(v, requires_grad=True)
        target_loss(ce, lat, 5000.0, weight=0.2)[0].backward()
        grads.append(float(lat.grad))
    assert grads[0] == pytest.approx(-0.2 / 5000.0) and grads[1] == pytest.approx(0.2 / 5000.0)


def test_multiplier_penalty_pushes_one_way_and_follows_the_budget_error():
    """lam * (LAT/T - 1): the push on latency is lam / T on both sides of the budget (it does
    not flip with the sign of the error, as the absolute value does), and lam rises while the
    returned network is over the budget and falls while it is under."""
    ce = torch.tensor(1.5)
    grads = []
    for v in (4000.0, 6000.0):
        lat = torch.tensor(v, requires_grad=True)
        loss, penalty = target_loss(ce, lat, 5000.0, multiplier=0.5)
        loss.backward()
        grads.append(float(lat.grad))
        assert float(penalty.detach()) == pytest.approx(0.5 * (v / 5000.0 - 1.0))
    assert grads == [pytest.approx(0.5 / 5000.0)] * 2
    assert multiplier_step(0.5, 6000.0, 5000.0, lr=0.1) == pytest.approx(0.52)
    assert multiplier_step(0.5, 4000.0, 5000.0, lr=0.1) == pytest.approx(0.48)
    assert multiplier_step(0.5, 5000.0, 5000.0, lr=0.1) == 0.5
    assert multiplier_step(0.0, 4000.0, 5000.0, lr=0.1) < 0  # below: latency is pushed up


def _search_step_grads(lut_data, sets: list[str], phase: str, seed: int = 1
                       ) -> tuple[list, list]:
    """Gradients of one search micro-batch of ``phase`` through Search.forward_loss."""
    from fbnas.arch.space import load_space
    from fbnas.config import Budget, load_config
    from fbnas.latency.lut import LUT
    from fbnas.runs.dist import DistInfo
    from fbnas.search.run import Search, build_supernet

    cfg = load_config(None, ["space=tiny", "search.mode=hard", *sets])
    search = Search.__new__(Search)  # the step alone: no data, run directory or optimizers
    search.cfg, search.info, search.budget = cfg, DistInfo(), Budget.of(cfg)
    search.find_unused_parameters = True
    torch.manual_seed(0)
    search.net = search.model = build_supernet(cfg, load_space("tiny"), LUT(lut_data))
    for layer in search.net.layers:  # an undecided but not uniform theta
        layer.theta.data.normal_(0, 0.5)
    x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
    torch.manual_seed(seed)  # the same Gumbel draw for every setting
    loss, *_ = search.forward_loss(x, y, epoch=2, phase=phase)
    loss.backward()
    grads = lambda ps: [None if p.grad is None else p.grad.clone() for p in ps]  # noqa: E731
    return grads(search.net.weight_parameters()), grads(search.net.theta_parameters())


@pytest.mark.parametrize("sets_a,sets_b", [
    (["loss.beta=0.3"], ["loss.beta=1.2"]),
    (["loss.form=target", "loss.target_ms=0.05"], ["loss.form=target", "loss.target_ms=50"]),
])
def test_trade_off_knobs_move_theta_only(tiny_lut_data, sets_a, sets_b):
    """No knob of the trade-off changes the weights' gradients (their effective learning
    rate); each changes theta's."""
    wa, _ = _search_step_grads(tiny_lut_data, sets_a, "weights")
    wb, _ = _search_step_grads(tiny_lut_data, sets_b, "weights")
    assert any(g is not None and float(g.abs().max()) > 0 for g in wa)
    for ga, gb in zip(wa, wb):
        assert (ga is None and gb is None) or torch.equal(ga, gb)
    _, ta = _search_step_grads(tiny_lut_data, sets_a, "theta")
    _, tb = _search_step_grads(tiny_lut_data, sets_b, "theta")
    assert not all(torch.allclose(a, b, rtol=1e-3, atol=0) for a, b in zip(ta, tb))


def test_softmax_relaxation_takes_the_noise_out_of_theta_steps_only(tiny_lut_data):
    """search.theta_relaxation=softmax (the default): a theta step's gradient is the same
    whatever the Gumbel draw, while the weight steps still sample a path per batch."""
    soft = ["search.theta_relaxation=softmax", "loss.form=target", "loss.target_ms=0.05",
            "loss.target_penalty=multiplier"]
    _, t1 = _search_step_grads(tiny_lut_data, soft, "theta", seed=1)
    _, t2 = _search_step_grads(tiny_lut_data, soft, "theta", seed=2)
    assert all(torch.equal(a, b) for a, b in zip(t1, t2))
    assert any(float(g.abs().max()) > 0 for g in t1)
    gumbel = ["search.theta_relaxation=gumbel"]
    _, g1 = _search_step_grads(tiny_lut_data, gumbel, "theta", seed=1)
    _, g2 = _search_step_grads(tiny_lut_data, gumbel, "theta", seed=2)
    assert not all(torch.equal(a, b) for a, b in zip(g1, g2))
    w1, _ = _search_step_grads(tiny_lut_data, soft, "weights", seed=1)
    w2, _ = _search_step_grads(tiny_lut_data, soft, "weights", seed=2)
    assert not all((a is None and b is None) or (a is not None and b is not None and
                                                  torch.equal(a, b)) for a, b in zip(w1, w2))


def test_budget_penalty_takes_its_sign_from_the_argmax_network(tiny_lut_data):
    """With loss.target_on=argmax the penalty's value is the argmax network's (the one
    `sample --hard` returns) and its gradient is the Gumbel sample's; target_on=sample
    charges the sample itself."""
    from fbnas.arch.space import load_space
    from fbnas.config import load_config
    from fbnas.latency.lut import LUT
    from fbnas.search.run import build_supernet, penalised_cost

    cfg = load_config(None, ["space=tiny", "loss.form=target", "loss.target_ms=1"])
    assert cfg.loss.target_on == "argmax"
    torch.manual_seed(0)
    net = build_supernet(cfg, load_space("tiny"), LUT(tiny_lut_data))
    for layer in net.layers:
        layer.theta.data.normal_(0, 0.5)

    def charged(config):
        torch.manual_seed(3)
        total = torch.tensor(net.fixed_cost)
        for layer in net.layers:
            w, _ = layer.weights("hard", 1.0, None)
            total = total + (w * layer.cost).sum()
        sampled = net.cal_a * total + net.cal_b
        cost = penalised_cost(config, net, sampled)
        for p in net.theta_parameters():
            p.grad = None
        cost.backward()
        return float(sampled.detach()), float(cost.detach()), [p.grad.clone() for p in net.theta_parameters()]

    sampled, on_argmax, g_argmax = charged(cfg)
    assert on_argmax == pytest.approx(net.cost_of(net.argmax_ops()), rel=1e-6)
    sample_cfg = load_config(None, ["space=tiny", "loss.form=target", "loss.target_ms=1",
                                    "loss.target_on=sample"])
    sampled_again, on_sample, g_sample = charged(sample_cfg)
    assert on_sample == sampled == sampled_again
    assert all(torch.equal(a, b) for a, b in zip(g_argmax, g_sample))
    # the paper's loss has no budget and always charges the sample
    paper = load_config(None, ["space=tiny"])
    assert charged(paper)[1] == sampled


def test_runs_saved_before_target_on_resume_as_they_ran():
    from fbnas.config import from_saved, load_config

    saved = load_config(None, ["loss.form=target", "loss.target_ms=1"]).to_dict()
    del saved["loss"]["target_on"]
    assert from_saved(saved).loss.target_on == "sample"


def test_searches_saved_before_theta_relaxation_resume_with_gumbel_theta_steps():
    from fbnas.config import from_saved, load_config

    assert load_config(None, []).search.theta_relaxation == "softmax"
    saved = load_config(None, []).to_dict()
    del saved["search"]["theta_relaxation"]
    assert from_saved(saved).search.theta_relaxation == "gumbel"
