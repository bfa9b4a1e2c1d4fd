import numpy as np
import pytest

from fbnas.latency.lut import EntrySpec, contenders
from fbnas.latency.timing import drift_correct, measure_rounds


def _synthetic(n=6000, items=40, seed=0):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, items, n)
    level = rng.uniform(100, 400, items)
    # a machine whose speed wanders by +-25% and has short busy spells
    drift = 0.25 * np.sin(np.arange(n) / 250) + 0.3 * (rng.random(n // 50).repeat(50) < 0.05)
    times = level[idx] * np.exp(drift + 0.03 * rng.standard_normal(n))
    return idx, times, level


def _levels(idx, times, items):
    return np.array([np.median(times[idx == i]) for i in range(items)])


def test_drift_correction_recovers_item_times_a_wandering_machine_hides():
    idx, times, level = _synthetic()
    raw = _levels(idx, times, 40)
    corrected = _levels(idx, drift_correct(idx, times), 40)
    # judge relative times (the overall speed is the run's own): spread of log ratios
    raw_err = np.std(np.log(raw / level))
    corr_err = np.std(np.log(corrected / level))
    assert corr_err < 0.01 < raw_err
    assert corr_err < raw_err / 4


def test_blocks_of_one_visit_share_one_correction():
    idx, times, _ = _synthetic(n=3000)
    visits = np.arange(idx.size) // 3
    corrected = drift_correct(idx, times, visits)
    factor = times / corrected
    assert np.allclose(factor.reshape(-1, 3), factor.reshape(-1, 3)[:, :1])
    assert not np.allclose(factor, factor[0])


def test_a_single_item_is_left_alone():
    times = np.array([1.0, 2.0, 1.5, 1.2])
    assert np.allclose(drift_correct(np.zeros(4, dtype=int), times), times)


def test_rounds_time_units_back_to_back_and_refine_picks_extra_rounds():
    calls = {k: 0 for k in "abcde"}

    def fn(k):
        def call():
            calls[k] += 1
        return call

    asked = []

    def refine(stats):
        asked.append(sorted(stats))
        return [["a", "b"]] if len(asked) < 3 else []

    t = measure_rounds({k: fn(k) for k in calls}, threads=1, units=[["a", "b"], ["c", "d", "e"]],
                       rounds=4, block_time=0.0005, refine=refine, extra_rounds=5, refine_every=1)
    assert t.rounds_run == 6  # 4 regular, 2 refined, then refine asked for nothing
    for r in range(4):
        seq = [k for k, rr in zip(t.block_keys, t.block_rounds) if rr == r]
        assert sorted(seq) == list("abcde")
        pos = {k: i for i, k in enumerate(seq)}
        assert abs(pos["a"] - pos["b"]) == 1  # a unit's items run one after the other
        assert max(pos[k] for k in "cde") - min(pos[k] for k in "cde") == 2
    assert {k for k, r in zip(t.block_keys, t.block_rounds) if r >= 4} == {"a", "b"}
    stats = t.summaries()
    assert stats["a"]["runs"] == 6 and stats["c"]["runs"] == 4
    assert all(s["median"] > 0 and s["iqr"] >= 0 for s in stats.values())
    with pytest.raises(ValueError, match="exactly once"):
        measure_rounds({"a": fn("a")}, threads=1, units=[["a", "a"]], rounds=1)


def test_contenders_are_near_ties_for_fastest_and_noisy_entries():
    def spec(op):
        return EntrySpec(op, "op", op, 8, 8, 1, 4, 4, 1)

    specs = {op: spec(op) for op in ("k3_e1", "k5_e1", "k3_e6", "skip")}
    stats = {"k3_e1": {"median": 100.0, "iqr": 2.0}, "k5_e1": {"median": 102.0, "iqr": 2.0},
             "k3_e6": {"median": 200.0, "iqr": 4.0}, "skip": {"median": 1.0, "iqr": 0.05}}
    units = [list(specs)]
    for s in stats.values():
        s["runs"] = 100
    # 2% apart with a standard error of the difference near 0.3%: not settled at 3% margin
    # unless the noise says it is
    assert contenders(units, specs, stats, margin=0.03, rel_iqr=0.1) == []
    stats["k5_e1"]["median"] = 100.5
    assert contenders(units, specs, stats, margin=0.03, rel_iqr=0.1) == [["k3_e1", "k5_e1"]]
    assert contenders(units, specs, stats, margin=0.004, rel_iqr=0.1) == []
    stats["k5_e1"]["median"] = 102.0
    stats["k3_e1"]["iqr"] = stats["k5_e1"]["iqr"] = 10.0  # now 2% is within the noise
    assert contenders(units, specs, stats, margin=0.03, rel_iqr=0.1) == [["k3_e1", "k5_e1"]]
    assert contenders(units, specs, stats, margin=0.01, rel_iqr=0.1) == []
    stats["k3_e1"]["iqr"] = stats["k5_e1"]["iqr"] = 2.0
    stats["k3_e6"]["iqr"] = 50.0
    assert contenders(units, specs, stats, margin=0.01, rel_iqr=0.1) == [["k3_e6"]]
