import math

import pytest
import torch

from fbnas.errors import FbnasError
from fbnas.loss import paper_loss, target_loss


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


def test_target_loss_flat_under_budget_and_grows_above():
    ce = torch.tensor(1.5)
    under, f_under = target_loss(ce, torch.tensor(4000.0), target_us=5000.0, exponent=2.0)
    assert float(under) == pytest.approx(1.5) and float(f_under) == 1.0
    over, f_over = target_loss(ce, torch.tensor(6000.0), target_us=5000.0, exponent=2.0)
    assert float(f_over) == pytest.approx(1.2 ** 2)
    assert float(over) == pytest.approx(1.5 * 1.44)
    lat = torch.tensor(6000.0, requires_grad=True)
    target_loss(ce, lat, 5000.0)[0].backward()
    assert float(lat.grad) == pytest.approx(1.5 * 2 * 1.2 / 5000.0)
