import math

from fbnas.runs.health import check_blow_up, check_not_learning

LN10 = math.log(10)


def test_chance_level_ce_for_two_epochs_warns_and_names_a_fix():
    history = [{"weights_ce": LN10 + 0.02}, {"weights_ce": LN10 - 0.01}]
    msg = check_not_learning(history, 10)
    assert msg and "not learning" in msg and "optim.weights.lr" in msg
    # one epoch is not enough to judge, and a CE clearly below chance is learning
    assert check_not_learning(history[:1], 10) is None
    assert check_not_learning([{"weights_ce": 2.0}, {"weights_ce": 1.8}], 10) is None
    # scored epochs at chance confirm it; a val top-1 well above chance is learning
    at_chance = [{**r, "val_top1": 11.0} for r in history]
    assert check_not_learning(at_chance, 10) == msg
    spiked = [{"weights_ce": 3.38, "val_top1": 23.8}, {"weights_ce": 2.46, "val_top1": 28.7}]
    assert check_not_learning(spiked, 10) is None
    # epochs a search did not score say nothing yet; one scored at chance among them does
    skipped = [{**r, "val_skipped": True} for r in history]
    assert check_not_learning(skipped, 10) is None
    assert check_not_learning([skipped[0], at_chance[1]], 10) == msg


def test_blow_up_warns_only_far_above_chance():
    assert "diverging" in check_blow_up({"weights_ce": 10.4}, 10)
    assert check_blow_up({"weights_ce": 2.5}, 10) is None
    assert check_blow_up({"epoch": 1}, 10) is None  # a retrain-free record without CE
