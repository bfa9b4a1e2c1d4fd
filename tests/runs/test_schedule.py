"""The weights' learning-rate multiplier per optimizer step: warm-up, cosine, floor."""

import math

import pytest

from fbnas.runs.schedule import cosine_factor


def test_warm_up_rises_linearly_to_the_full_rate():
    f = cosine_factor(steps_per_epoch=10, epochs=3, warmup_epochs=1, floor=0.1)
    assert [f(s) for s in range(10)] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert f(10) == 1.0  # the cosine starts at its top right after the warm-up


def test_cosine_passes_half_way_and_ends_on_the_floor():
    f = cosine_factor(steps_per_epoch=10, epochs=3, warmup_epochs=1, floor=0.1)
    assert f(20) == pytest.approx(0.1 + 0.9 * 0.5)  # half of the 20 cosine steps
    assert f(15) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4)))
    assert f(30) == pytest.approx(0.1) and f(1000) == pytest.approx(0.1)  # stays there
    values = [f(s) for s in range(10, 31)]
    assert all(a >= b for a, b in zip(values, values[1:]))  # never rises again


def test_no_warm_up_starts_at_the_full_rate():
    f = cosine_factor(steps_per_epoch=4, epochs=2, warmup_epochs=0, floor=0.0)
    assert f(0) == 1.0
    assert f(4) == pytest.approx(0.5) and f(8) == pytest.approx(0.0)


def test_fractional_warm_up_rounds_to_whole_steps():
    # 0.3 of an epoch of 10 steps: 3 warm-up steps
    f = cosine_factor(steps_per_epoch=10, epochs=2, warmup_epochs=0.3, floor=0.0)
    assert [f(s) for s in range(4)] == pytest.approx([1 / 3, 2 / 3, 1.0, 1.0])
