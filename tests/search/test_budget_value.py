"""The latency budget is one value, built from a config (a new run's, or a saved run's as
this version reads it) and checked where it is built."""

import dataclasses
import math

import pytest
import torch

from fbnas.arch.space import load_space
from fbnas.config import Budget, from_saved, load_config
from fbnas.errors import UsageError
from fbnas.runs.checkpoint import CHECKPOINT_FORMAT, save_checkpoint
from fbnas.search.checkpoint import load_search_checkpoint


def test_a_budget_config_gives_one_value_in_microseconds():
    cfg = load_config(None, ["loss.form=target", "loss.target_ms=1.1",
                             "loss.target_floor=0.8"])
    budget = Budget.of(cfg)
    assert budget == Budget(1.1, 0.8)
    assert budget.ms == 1.1  # as written: what the epoch record and the log show
    assert budget.us == 1.1 * 1000.0 and budget.floor == 0.8


def test_no_budget_without_the_target_form():
    assert Budget.of(load_config(None, [])) is None
    assert Budget.of(load_config(None, ["loss.target_ms=2"])) is None


@pytest.mark.parametrize("ms", [0, -1.0, math.inf, math.nan, None, True])
def test_a_budget_that_is_not_a_positive_number_is_refused(ms):
    # none at all is asked for by the option that gives it
    with pytest.raises(UsageError, match="positive number of ms|give --target-ms MS"):
        Budget(ms)


@pytest.mark.parametrize("floor", [-0.1, 1.0, math.nan])
def test_a_floor_outside_zero_to_one_is_refused(floor):
    with pytest.raises(UsageError, match="loss.target_floor must be in"):
        Budget(1.0, floor)


def test_the_config_refuses_a_bad_budget_through_the_same_check():
    with pytest.raises(UsageError, match="positive number of ms"):
        load_config(None, ["loss.form=target", "loss.target_ms=-2"])
    with pytest.raises(UsageError, match="loss.target_ms"):
        load_config(None, ["loss.form=target"])
    with pytest.raises(UsageError, match="loss.target_floor must be in"):
        load_config(None, ["loss.target_floor=1.5"])


def test_another_floor_keeps_the_budget():
    budget = dataclasses.replace(Budget(0.6, 0.9), floor=0.0)
    assert budget.us == 600.0 and budget.floor == 0.0


def saved_config(**loss) -> dict:
    """A search config as a run saved before loss.target_floor existed."""
    values = load_config(None, ["space=tiny"]).to_dict()
    del values["loss"]["target_floor"]
    values["loss"].update(loss)
    return values


def test_a_saved_run_gets_its_budget_through_the_config_migration():
    budget = Budget.of(from_saved(saved_config(form="target", target_ms=0.6)))
    # such a run returned the most probable network under its budget, however far under
    assert budget == Budget(0.6, 0.0) and budget.us == 600.0


def test_a_search_checkpoint_carries_the_budget_of_its_migrated_config(tmp_path):
    space = load_space("tiny")
    path = tmp_path / "last.pt"
    base = {"format": CHECKPOINT_FORMAT, "kind": "search", "epoch": 1, "model": {},
            "space": space.raw, "space_hash": space.hash,
            "theta": [torch.zeros(len(layer.candidates)) for layer in space.layers]}
    save_checkpoint({**base, "config": saved_config(form="target", target_ms=0.6)}, path)
    ck = load_search_checkpoint(path)
    assert ck.budget == Budget(0.6, 0.0) and ck.floor == 0.0
    save_checkpoint({**base, "config": saved_config(target_floor=0.5)}, path)
    ck = load_search_checkpoint(path)
    assert ck.budget is None and ck.floor == 0.5  # the floor of a budget given when sampling
