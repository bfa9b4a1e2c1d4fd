"""Per-step training figures, by name, and their sums per phase over an epoch."""

import math

import pytest
import torch

from fbnas.runs.dist import DistInfo
from fbnas.runs.stats import PhaseStats, across_ranks, finite, step_figures


def test_step_figures_average_per_image_values():
    step = step_figures(torch.tensor(2.5), {"ce": torch.tensor([1.0, 2.0, 3.0]),
                                            "cost": torch.tensor([10.0, 30.0])})
    assert step == {"loss": 2.5, "ce": 2.0, "cost": 20.0}
    assert list(step) == ["loss", "ce", "cost"]  # the order every process reduces in
    plain = step_figures(torch.tensor(1.5, requires_grad=True), {"ce": torch.tensor(1.5)})
    assert plain == {"loss": 1.5, "ce": 1.5}


def test_one_process_passes_finite_figures_and_refuses_others():
    info, cpu = DistInfo(), torch.device("cpu")
    step = {"loss": 1.0, "ce": 0.5, "cost": 3.0}
    assert finite(step) and across_ranks(step, info, cpu) == step
    for bad in (math.nan, math.inf, -math.inf):
        assert not finite({"loss": 1.0, "ce": 0.5, "cost": bad})
        assert across_ranks({"loss": bad, "ce": 0.5}, info, cpu) is None


def test_phase_sums_and_their_mean():
    weights, theta = PhaseStats.of(("ce",)), PhaseStats.of(("ce", "cost", "factor"))
    assert weights.sums == {"loss": 0.0, "ce": 0.0} and weights.items == 0
    for loss, ce in ((1.0, 0.5), (3.0, 1.5), (2.0, 1.0)):
        weights.add({"loss": loss, "ce": ce})
    theta.add({"loss": 4.0, "ce": 2.0, "cost": 100.0, "factor": 0.25})
    assert weights.sums == {"loss": 6.0, "ce": 3.0} and weights.items == 3
    assert weights.mean() == {"loss": 2.0, "ce": 1.0}
    assert theta.items == 1 and theta.mean() == {"loss": 4.0, "ce": 2.0, "cost": 100.0,
                                                 "factor": 0.25}


def test_phase_sums_survive_a_round_trip_through_a_checkpoint_dict():
    """A checkpoint saved mid-epoch stores the sums as a dict; the resumed epoch adds on."""
    names = ("ce", "cost")
    st = PhaseStats.of(names)
    st.add({"loss": 1.0, "ce": 0.75, "cost": 5.0})
    saved = st.to_dict()
    assert saved == {"loss": 1.0, "ce": 0.75, "cost": 5.0, "items": 1}
    back = PhaseStats.from_dict(saved, names)
    back.add({"loss": 3.0, "ce": 1.25, "cost": 7.0})
    assert back.mean() == pytest.approx({"loss": 2.0, "ce": 1.0, "cost": 6.0})


@pytest.mark.parametrize("saved, error", [
    ({"loss": 1.0, "ce": 0.5}, KeyError),                     # no items
    ({"loss": 1.0, "items": 1}, KeyError),                    # a named figure missing
    ({"loss": 1.0, "ce": 0.5, "items": True}, TypeError),     # items not a count
    ({"loss": "x", "ce": 0.5, "items": 1}, ValueError),       # a sum not a number
])
def test_damaged_checkpoint_sums_are_refused(saved, error):
    with pytest.raises(error):
        PhaseStats.from_dict(saved, ("ce",))
