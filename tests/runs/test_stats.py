"""Per-step training figures and their sums per phase over an epoch."""

import math

import pytest
import torch

from fbnas.runs.dist import DistInfo
from fbnas.runs.stats import PhaseStats, StepFigures, across_ranks


def test_step_figures_average_per_image_values_and_zero_a_missing_cost():
    step = StepFigures.of(torch.tensor(2.5), torch.tensor([1.0, 2.0, 3.0]),
                          torch.tensor([10.0, 30.0]), torch.tensor([0.5, 1.5]))
    assert step == StepFigures(2.5, 2.0, 20.0, 1.0)
    plain = StepFigures.of(torch.tensor(1.5, requires_grad=True), torch.tensor(1.5), None, None)
    assert plain == StepFigures(1.5, 1.5, 0.0, 0.0) and plain.values() == [1.5, 1.5, 0.0, 0.0]


def test_one_process_passes_finite_figures_and_refuses_others():
    info, cpu = DistInfo(), torch.device("cpu")
    step = StepFigures(1.0, 0.5, 3.0, 2.0)
    assert step.finite() and across_ranks(step, info, cpu) == step
    for bad in (math.nan, math.inf, -math.inf):
        assert not StepFigures(1.0, 0.5, bad, 2.0).finite()
        assert across_ranks(StepFigures(bad, 0.5), info, cpu) is None


def test_phase_sums_and_their_mean():
    weights, theta = PhaseStats(), PhaseStats()
    for loss, ce in ((1.0, 0.5), (3.0, 1.5), (2.0, 1.0)):
        weights.add(StepFigures(loss, ce))
    theta.add(StepFigures(4.0, 2.0, cost=100.0, factor=0.25))
    assert (weights.loss, weights.ce, weights.cost, weights.items) == (6.0, 3.0, 0.0, 3)
    assert weights.mean() == StepFigures(2.0, 1.0, 0.0, 0.0)
    assert theta.items == 1 and theta.mean() == StepFigures(4.0, 2.0, 100.0, 0.25)


def test_phase_sums_survive_a_round_trip_through_a_dict():
    """A checkpoint saved mid-epoch stores the sums as a dict; the resumed epoch adds on."""
    import dataclasses

    st = PhaseStats()
    st.add(StepFigures(1.0, 0.75, 5.0, 0.5))
    back = PhaseStats(**dataclasses.asdict(st))
    back.add(StepFigures(3.0, 1.25, 7.0, 1.5))
    assert back.mean() == pytest.approx(StepFigures(2.0, 1.0, 6.0, 1.0))
