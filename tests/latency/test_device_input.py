"""Device results, bundle manifests and the bundle's run.py check the type and range of every
value they read: one line naming the file or argument and the fix, never a traceback."""

from __future__ import annotations

import argparse
import copy
import json

import pytest

from fbnas.latency import device_runner as runner
from fbnas.latency.bundle import PROTOCOL
from tests.arch.test_arch import assert_user_error
from tests.latency.test_bundle import RUN, _edited, _import, assert_one_line_error, run_py


def _args(**given):
    values = dict(threads=1, rounds=None, extra_time=None, block_time=None, seed=None,
                  provider_option=[])
    values.update(given)
    return argparse.Namespace(**values)


@pytest.mark.parametrize("given,fragment", [
    ({"block_time": float("inf")}, "--block-time must be a number of seconds from 0.0001 to 10"),
    ({"block_time": float("nan")}, "--block-time"),
    ({"block_time": 11.0}, "--block-time"),
    ({"extra_time": float("inf")}, "--extra-time must be a number of seconds from 0"),
    ({"extra_time": float("nan")}, "--extra-time"),
    ({"extra_time": -1.0}, "--extra-time"),
    ({"seed": -1}, "--seed must be from 0"),
    ({"seed": 2 ** 64}, "--seed must be from 0"),
    ({"threads": 0}, "--threads must be from 1"),
    ({"threads": 10 ** 6}, "--threads must be from 1"),
    ({"rounds": 1}, "--rounds must be from 2"),
    ({"rounds": 10 ** 9}, "--rounds must be from 2"),
])
def test_runner_arguments_are_finite_and_in_range(given, fragment):
    with pytest.raises(runner.RunnerError, match=fragment.replace(".", r"\.")) as e:
        runner.check_args(_args(**given), {**PROTOCOL, "seed": 0})
    assert "\n" not in str(e.value)
    settings, _ = runner.check_args(_args(block_time=10.0, extra_time=0.0, seed=0),
                                    {**PROTOCOL, "seed": 0})
    assert settings["block_time_s"] == 10.0


def _manifest() -> dict:
    item = {"file": "e.onnx", "sha256": "0" * 64, "input": [1, 3, 8, 8], "kind": "op",
            "op": "k3_e1"}
    return {"schema": runner.BUNDLE_SCHEMA, "space": {"name": "s"},
            "protocol": {**PROTOCOL, "seed": 0}, "entries": {"e": item},
            "networks": {"net0": {"file": "n.onnx", "sha256": "1" * 64, "input": [1, 3, 8, 8]}},
            "units": [["e"]], "runner": {"file": "run.py", "sha256": "2" * 64},
            "precision": "fp32", "batch": 1}


@pytest.mark.parametrize("edit,fragment", [
    (lambda m: m["protocol"].__setitem__("rounds", "many"), "protocol.rounds is 'many'"),
    (lambda m: m["protocol"].__setitem__("block_time_s", float("inf")), "protocol.block_time_s"),
    (lambda m: m["protocol"].__setitem__("extra_time_s", -1), "protocol.extra_time_s"),
    (lambda m: m["protocol"].__setitem__("seed", -1), "protocol.seed"),
    (lambda m: m["protocol"].__setitem__("tie_margin", "x"), "protocol.tie_margin"),
    (lambda m: m["protocol"].__setitem__("warmup_calls", True), "protocol.warmup_calls"),
    (lambda m: m.__setitem__("batch", "1"), "batch"),
    (lambda m: m.__setitem__("protocol", [1]), "'protocol' object"),
    (lambda m: m["entries"]["e"].__setitem__("input", [1, -3]), "entry e"),
    (lambda m: m["entries"]["e"].__setitem__("input", "1x3"), "entry e"),
    (lambda m: m["networks"]["net0"].__setitem__("file", "../../etc/passwd"), "outside the bundle"),
    (lambda m: m.__setitem__("units", "e"), "units"),
])
def test_a_manifest_of_the_wrong_types_is_refused_by_the_runner(edit, fragment):
    m = _manifest()
    runner.check_manifest(copy.deepcopy(m), "manifest.json")
    edit(m)
    with pytest.raises(runner.RunnerError, match="manifest.json") as e:
        runner.check_manifest(m, "manifest.json")
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_a_bundle_refuses_a_seed_numpy_would_refuse(tmp_path):
    from tests.latency.test_bundle import cli

    res = cli("profile", "--space", "tiny", "--bundle", tmp_path / "b", "--seed", -1)
    assert_user_error(res, "--seed must be from 0")
    assert not (tmp_path / "b").exists()


# -- results files, end to end ------------------------------------------------------------------

def _scaled(r):
    for phase in r["blocks"].values():
        phase["seconds"] = [s * 2.0 ** 1000 for s in phase["seconds"]]
    for section in ("entries", "networks", "retimed"):
        for v in r[section].values():
            for f in ("median", "iqr", "min", "raw_median"):
                v[f] *= 2.0 ** 1000


@pytest.mark.slow
@pytest.mark.parametrize("edit,fragments", [
    (lambda r: r["device"].__setitem__("intra_op_threads", "one"),
     ["'device.intra_op_threads' is 'one', not an integer"]),
    (lambda r: r["device"].__setitem__("intra_op_threads", 0), ["device.intra_op_threads"]),
    (lambda r: r["protocol"].__setitem__("rounds", "many"), ["'protocol.rounds' is 'many'"]),
    (lambda r: r["protocol"].__setitem__("network_rounds", True), ["protocol.network_rounds"]),
    (lambda r: r["protocol"].__setitem__("block_time_s", "x"), ["protocol.block_time_s"]),
    (lambda r: r["protocol"].__setitem__("extra_time_s", float("inf")),
     ["'protocol.extra_time_s' is inf"]),
    (lambda r: r["protocol"].__setitem__("drift_neighbours", "four"),
     ["protocol.drift_neighbours"]),
    (lambda r: r["protocol"].__setitem__("seed", -1), ["protocol.seed"]),
    (lambda r: r["device"].__setitem__("provider", 5), ["'device.provider' is 5, not a string"]),
    (lambda r: r["device"].pop("cpu"), ["'device.cpu' is missing"]),
    (lambda r: r.__setitem__("created", {"a": 1}), ["'created'"]),
    (lambda r: r["manifest"]["protocol"].__setitem__("tie_margin", "x"),
     ["manifest.protocol.tie_margin"]),
    (lambda r: r["blocks"]["entries"]["calls"].__setitem__(
        r["blocks"]["entries"]["keys"][0], -5), ["timed blocks of 'entries' are malformed"]),
    (lambda r: r["blocks"]["entries"]["item"].__setitem__(0, "0"), ["malformed"]),
    (_scaled, ["per call, above 1000 s", "run the bundle's run.py again"]),
])
def test_results_of_the_wrong_types_or_ranges_are_refused(results, tmp_path, edit, fragments):
    res = _import(_edited(results, tmp_path, edit), tmp_path)
    assert_user_error(res, "edited.json", *fragments)
    assert "re-run fbnas profile" not in res.stderr
    assert not (tmp_path / "t.json").exists()


@pytest.mark.slow
def test_runner_refuses_infinite_times_and_negative_seeds(bundle, tmp_path):
    for args, fragment in ((["--extra-time", "inf"], "--extra-time"),
                           (["--block-time", "inf"], "--block-time"),
                           (["--seed", "-1"], "--seed")):
        proc = run_py(bundle, "--out", "r.json", *args, cwd=tmp_path)
        assert_one_line_error(proc, fragment)
        assert not (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_results_and_the_table_are_strict_json(results, tmp_path):
    def strict(text):
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in strict JSON"))

    strict(results.read_text())
    assert _import(results, tmp_path).exit_code == 0
    strict((tmp_path / "t.json").read_text())
