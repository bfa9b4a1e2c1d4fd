"""The search's own checks: skip collapse, and the warnings a search epoch collects."""

from fbnas.runs.health import epoch_warnings
from fbnas.search.health import check_skip_collapse, search_warnings


def test_skip_collapse_warns_while_the_skip_count_grows_past_half():
    h = [{"argmax_skips": 3, "layers": 10}, {"argmax_skips": 6, "layers": 10}]
    msg = check_skip_collapse(h)
    assert msg and "6 of 10" in msg and "loss.beta" in msg and "alpha" in msg
    assert check_skip_collapse(h[:1]) is None  # 3 of 10 is no collapse
    steady = [{"argmax_skips": 6, "layers": 10}, {"argmax_skips": 6, "layers": 10}]
    assert check_skip_collapse(steady) is None  # said once, when it happened


def test_epoch_warnings_collects_every_applicable_check():
    h = [{"weights_ce": 9.0, "argmax_skips": 0, "layers": 4},
         {"weights_ce": 9.5, "argmax_skips": 4, "layers": 4}]
    found = search_warnings(h, 10)
    assert len(found) == 2 and any("diverging" in w for w in found)
    assert any("collapsing toward skip" in w for w in found)
    # a retrain has no theta: only the weights' warnings apply
    assert [w for w in epoch_warnings(h, 10)] == [w for w in found if "diverging" in w]
    assert epoch_warnings([], 10) == [] and search_warnings([], 10) == []
