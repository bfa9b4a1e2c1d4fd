import json

import pytest

from fbnas.arch.space import load_space
from fbnas.errors import FbnasError
from fbnas.latency.fidelity import calibrate_lut, errors, random_archs
from fbnas.latency.lut import LUT, SCHEMA, load_lut


def test_profile_covers_every_layer_and_candidate_once(tiny_lut_data):
    space = load_space("tiny")
    lut = LUT(tiny_lut_data)
    lut.check_space(space)
    keys = {k for layer in tiny_lut_data["layers"] for k in layer["candidates"].values()}
    # identical (op, shape) keys are shared, and every entry is used by a layer or is fixed
    assert keys | set(tiny_lut_data["fixed"].values()) == set(tiny_lut_data["entries"])
    for e in tiny_lut_data["entries"].values():
        assert e["median"] > 0 and e["iqr"] >= 0 and e["min"] > 0 and e["runs"] >= 1
    by_op = {e["op"]: e for e in tiny_lut_data["entries"].values() if e["kind"] == "op"}
    assert by_op["k3_e3"]["macs"] > by_op["k3_e1"]["macs"] > 0
    assert tiny_lut_data["environment"]["threads"] == 1
    assert tiny_lut_data["protocol"]["unit"] == "us"
    assert tiny_lut_data["schema"] == SCHEMA


def test_round_trip_and_predict(tiny_lut_file):
    space = load_space("tiny")
    lut = load_lut(tiny_lut_file, space)
    ops = [l.candidates[0] for l in space.layers]
    assert lut.predict(ops) == pytest.approx(lut.raw_sum(ops))
    lut.data["calibration"] = {"a": 2.0, "b": 10.0}
    assert lut.predict(ops) == pytest.approx(2 * lut.raw_sum(ops) + 10)
    assert lut.raw_sum(ops, "params") > 0


def test_truncated_file_is_one_line_error(tiny_lut_file):
    text = tiny_lut_file.read_text()
    tiny_lut_file.write_text(text[: len(text) // 2])
    with pytest.raises(FbnasError, match="not valid JSON"):
        load_lut(tiny_lut_file)


def test_missing_entry_and_bad_numbers_refused(tiny_lut_file, tiny_lut_data):
    data = json.loads(json.dumps(tiny_lut_data))
    key = data["layers"][0]["candidates"]["k3_e1"]
    data["entries"][key]["median"] = float("nan")
    with pytest.raises(FbnasError, match="bad median"):
        LUT(data)
    del data["entries"][key]
    with pytest.raises(FbnasError, match="missing entry"):
        LUT(data)


def test_mismatched_space_refused(tiny_lut_file):
    with pytest.raises(FbnasError, match="profiled for space tiny"):
        load_lut(tiny_lut_file, load_space("fbnet_cifar"))


def test_wrong_schema_refused(tiny_lut_data):
    with pytest.raises(FbnasError, match="schema"):
        LUT({**tiny_lut_data, "schema": "other/9"})


def test_error_figures_by_hand():
    import numpy as np

    e = errors(np.array([110.0, 90.0, 300.0]), np.array([100.0, 95.0, 200.0]))
    assert e["bias_pct"] == pytest.approx((10 - 500 / 95 + 50) / 3)
    assert e["mape_pct"] == pytest.approx((10 + 500 / 95 + 50) / 3)
    assert e["within10_pct"] == pytest.approx(200 / 3)
    assert e["kendall_tau"] == pytest.approx(1.0)


def test_calibration_fits_and_reports(tiny_lut_data):
    report = calibrate_lut(LUT(tiny_lut_data), networks=6, fit=3, rounds=2, block_time=0.002)
    cal = report.calibration()
    assert cal["networks_fit"] == 3 and cal["networks_test"] == 3
    assert set(cal["report"]) >= {"noise_floor", "calibrated_table_test", "flops_calibrated_test"}
    assert (report.measured > 0).all()
    LUT({**tiny_lut_data, "calibration": cal})  # a stored calibration validates


def test_fit_networks_span_skip_shares_and_test_networks_are_uniform():
    lut = load_lut_from_space("fbnet_cifar")
    archs = random_archs(lut, 60, seed=0, spread=20)
    skips = [sum(op == "skip" for op in a) for a in archs]
    assert skips[0] == 0 and skips[19] >= 12  # none at first, about 80% of 22 at the end
    assert sum(skips[:10]) < sum(skips[10:20])
    # uniform draws: about 1 in 9 layers is skip
    assert 0.05 < sum(skips[20:]) / (40 * 22) < 0.2
    assert archs == random_archs(lut, 60, seed=0, spread=20)


def load_lut_from_space(name):
    """A table for a bundled space with made-up latencies (no timing): for sampling tests."""
    from fbnas.latency.lut import fixed_entries, layer_entries

    space = load_space(name)
    entries, layers = {}, []
    for layer in space.layers:
        cand = layer_entries(layer, 1)
        for spec in cand.values():
            entries[spec.key] = {**spec.fields(), "median": 1.0, "iqr": 0.0, "min": 1.0,
                                 "runs": 1, "macs": 1, "params": 0}
        layers.append({"index": layer.index, "c_in": layer.c_in, "c_out": layer.c_out,
                       "stride": layer.stride, "h": layer.h, "w": layer.w,
                       "candidates": {op: s.key for op, s in cand.items()}})
    fixed = fixed_entries(space, 1)
    for spec in fixed.values():
        entries[spec.key] = {**spec.fields(), "median": 1.0, "iqr": 0.0, "min": 1.0, "runs": 1,
                             "macs": 1, "params": 0}
    return LUT({"schema": SCHEMA, "space": {"name": name, "hash": space.hash,
                                            "definition": space.raw},
                "environment": {"threads": 1}, "protocol": {"batch": 1}, "entries": entries,
                "fixed": {k: s.key for k, s in fixed.items()}, "layers": layers})


def test_a_calibration_line_that_predicts_no_time_falls_back_to_a_scale(tiny_lut_data):
    """Three noisy networks once tilted the line below zero at the fastest network; a
    table refuses to store that, so the fit keeps the scale alone."""
    import numpy as np

    from fbnas.latency.fidelity import FidelityReport

    lut = LUT(tiny_lut_data)
    fastest = lut.fixed_cost() + sum(min(c) for c in lut.layer_costs())
    raw = np.array([2.0, 2.2, 2.4, 3.0, 3.5, 4.0]) * fastest
    measured = np.array([0.2, 1.0, 1.8, 3.0, 3.5, 4.0]) * fastest  # steep: b far below 0
    report = FidelityReport(lut, [[]] * 6, 3, measured, measured, measured, raw, raw, raw)
    report.compute()
    cal = report.calibration()
    assert report.proportional and cal["b"] == 0.0 and cal["a"] > 0 and "scale only" in cal["fit"]
    LUT({**tiny_lut_data, "calibration": cal})  # and the table takes it
    steady = FidelityReport(lut, [[]] * 6, 3, raw * 1.1 + 1, raw, raw, raw, raw, raw)
    steady.compute()
    assert not steady.proportional and "fit" not in steady.calibration()
