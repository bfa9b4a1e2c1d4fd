"""Tables for another device: the bundle (fbnas profile --bundle), its runner (run.py, no fbnas
and no torch), and the import of the runner's results (fbnas profile --from-results).

One tiny bundle is written and timed for the whole run (tests/latency/conftest.py: exporting
its 22 entries takes most of the time), so the tests that use it are marked slow; the runner's statistics against
fbnas's own, the argument checks and the refusals before any export are fast.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import shutil
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import fbnas
from fbnas.arch.space import load_space
from fbnas.cli import main
from fbnas.io import write_json
from fbnas.latency import device_runner as runner
from fbnas.latency.bundle import (ENTRY_CALIBRATION_SAMPLES, NETWORK_CALIBRATION_IMAGES,
                                  calibration_archs, runner_source)
from fbnas.latency.fidelity import random_archs
from fbnas.latency.lut import LUT, contenders, load_lut, table_layout
from fbnas.latency.timing import Timings, drift_correct
from fbnas.machine import cpu_identity
from tests.arch.test_arch import assert_user_error

RUN = ["--rounds", "3", "--extra-time", "0", "--block-time", "0.001"]
ENV = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
#: runs a bundle's run.py with torch and fbnas unimportable, as on a device without them
NO_FBNAS = ("import runpy, sys; sys.modules['torch'] = None; sys.modules['fbnas'] = None; "
            "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def run_py(bundle: Path, *args, cwd: Path, without_fbnas: bool = False):
    """``python BUNDLE/run.py ARGS`` with this interpreter, from ``cwd``."""
    script = [sys.executable, bundle / "run.py"]
    if without_fbnas:
        script = [sys.executable, "-c", NO_FBNAS, bundle / "run.py"]
    return subprocess.run([str(a) for a in [*script, *args]], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=600)


def assert_one_line_error(proc, *fragments):
    assert proc.returncode != 0, proc.stdout + proc.stderr
    err = proc.stderr.strip().splitlines()
    assert err and err[-1].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not any(line.startswith("error") for line in err[:-1]), proc.stderr
    for f in fragments:
        assert f in err[-1], err[-1]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- the runner alone

def _blocks(rng, n_items, rounds, unit_size):
    """Blocks as measure_rounds records them: units visited in random order, drift in time."""
    items, visits, rounds_of = [], [], []
    units = [list(range(i, min(i + unit_size, n_items))) for i in range(0, n_items, unit_size)]
    visit = 0
    for r in range(rounds):
        for u in rng.permutation(len(units)):
            for i in rng.permutation(units[u]):
                items.append(int(i))
                visits.append(visit)
                rounds_of.append(r)
            visit += 1
    level = rng.uniform(1e-5, 1e-3, n_items)
    drift = np.exp(0.1 * np.sin(np.arange(len(items)) / 17.0))
    times = level[items] * drift * np.exp(rng.normal(0, 0.03, len(items)))
    times[rng.integers(0, len(items), 5)] *= 3  # a few blocks hit by interruptions
    return np.array(items), times, np.array(visits), np.array(rounds_of)


@pytest.mark.parametrize("n_items,rounds,unit_size,seed", [
    (22, 5, 5, 0), (7, 40, 1, 1), (30, 3, 6, 2), (2, 2, 2, 3), (3, 1, 1, 4), (110, 4, 9, 5)])
def test_runner_drift_correction_is_fbnas_drift_correction(n_items, rounds, unit_size, seed):
    rng = np.random.default_rng(seed)
    items, times, visits, _ = _blocks(rng, n_items, rounds, unit_size)
    for v in (visits, None):
        ours = runner.drift_correct(items, times, v)
        theirs = drift_correct(items, times, v)
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=0)
    if rounds > 1:  # the corrections do something: the drift is removed, not passed through
        assert not np.allclose(runner.drift_correct(items, times, visits), times, rtol=1e-3)


def test_runner_drift_correction_edge_cases_follow_fbnas():
    for items, times, visits in [
        ([0, 0, 0], [1.0, 2.0, 3.0], None),                  # one item: nothing to correct
        ([0, 1], [1.0, 2.0], None),                          # too few blocks
        ([0, 1, 0, 1], [1.0, 2.0, 1.5, 2.5], [0, 0, 0, 0]),  # one visit: no neighbours
        ([0, 1, 2, 0, 1, 2], [1, 2, 3, 1.1, 2.2, 3.3], [0, 0, 1, 1, 2, 2]),
    ]:
        np.testing.assert_allclose(runner.drift_correct(items, times, visits, neighbours=2),
                                   drift_correct(items, times, visits, neighbours=2),
                                   rtol=1e-12)


def test_runner_summaries_and_halves_are_fbnas_timings():
    rng = np.random.default_rng(7)
    items, times, visits, rounds = _blocks(rng, 12, 6, 4)
    keys = [f"k{i}" for i in range(12)]
    calls = {k: 10 + i for i, k in enumerate(keys)}
    blocks = runner.Blocks(keys, calls)
    for i, r, v, t in zip(items, rounds, visits, times):
        blocks.add(int(i), int(r), int(v), float(t))
    ours = blocks.summaries(halves={"k3"})
    t = Timings(keys=keys, calls=calls, block_keys=[keys[i] for i in items],
                block_rounds=list(rounds), block_times=list(times), block_visits=list(visits))
    theirs = t.summaries()
    corrected = t.corrected()
    for k in keys:
        for field in ("median", "iqr", "min", "raw_median"):
            assert math.isclose(ours[k][field], theirs[k][field], rel_tol=1e-12), (k, field)
        assert ours[k]["runs"] == theirs[k]["runs"]
        assert ours[k]["calls_per_run"] == theirs[k]["calls_per_run"]
    for parity, name in ((0, "median_even_rounds"), (1, "median_odd_rounds")):
        want = float(np.median(t.blocks("k3", parity, corrected))) * 1e6
        assert math.isclose(ours["k3"][name], want, rel_tol=1e-12)
    assert blocks.rounds_run == t.rounds_run


def test_runner_blocks_make_the_calls_fbnas_profiles_timer_makes():
    """fbnas profile times a block with torch.utils.benchmark.Timer.timeit, which makes
    untimed calls first; the runner must make as many (a whole network's first, cold call
    in a 2-call block would otherwise weigh half the block)."""
    from torch.utils import benchmark

    for calls in (1, 2, 7, 250, 1000):
        counted = []
        runner.time_block(lambda out, feeds: counted.append(1), {}, calls)
        theirs = []
        benchmark.Timer(stmt="fn()", globals={"fn": lambda: theirs.append(1)}).timeit(calls)
        assert len(counted) == len(theirs) > calls, calls


def test_runner_refines_the_units_fbnas_profile_refines(tiny_lut_data):
    from fbnas.latency.lut import EntrySpec, profile_units

    specs = {k: EntrySpec(k, **{f: e[f] for f in ("kind", "op", "c_in", "c_out", "stride", "h",
                                                   "w", "batch")})
             for k, e in tiny_lut_data["entries"].items()}
    units = profile_units(specs)
    rng = np.random.default_rng(0)
    for _ in range(20):
        stats = {k: {"median": float(rng.uniform(10, 11)), "iqr": float(rng.uniform(0, 1.5)),
                     "runs": int(rng.integers(3, 80))} for k in specs}
        fields = {k: {"kind": s.kind, "op": s.op} for k, s in specs.items()}
        assert runner.contenders(units, fields, stats, 0.03, 0.10) == \
            contenders(units, specs, stats, 0.03, 0.10)


def test_runner_needs_only_the_standard_library_numpy_and_onnxruntime():
    source = Path(runner.__file__).read_text()
    tree = ast.parse(source)
    top = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            top.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "no relative imports: run.py is copied alone"
            top.add(node.module.split(".")[0])
    assert top - set(sys.stdlib_module_names) == {"numpy", "onnxruntime"}, top
    # the copy a bundle gets is this file, read through the package's resources
    assert runner_source() == Path(runner.__file__).read_bytes()


def test_bundle_draws_the_networks_fbnas_calibrate_draws(tiny_lut_data):
    space = load_space("tiny")
    lut = LUT(tiny_lut_data)
    for n, fit, seed in ((50, 20, 0), (5, 2, 3), (12, 4, 1)):
        assert calibration_archs(space, n, fit, seed) == random_archs(lut, n, seed, spread=fit)
    specs, layers, fixed = table_layout(space, 1)
    assert list(specs) == list(tiny_lut_data["entries"])
    assert layers == tiny_lut_data["layers"] and fixed == tiny_lut_data["fixed"]


def test_an_unusable_calibration_is_named_not_stored(tiny_lut_data):
    from fbnas.latency.device import calibration_problem

    lut = LUT(tiny_lut_data)
    fastest = lut.fixed_cost() + sum(min(c) for c in lut.layer_costs())
    assert calibration_problem(lut, 1.0, 0.0) is None
    assert calibration_problem(lut, 0.8, -0.5 * fastest) is None
    assert "slope of -0.5" in calibration_problem(lut, -0.5, 10.0)
    assert "fastest network" in calibration_problem(lut, 1.0, -1.01 * fastest)
    assert calibration_problem(lut, float("nan"), 0.0) is not None


# ----------------------------------------------------------------------------- refused at once

def test_bundle_options_that_do_not_apply_are_refused(tmp_path):
    b = tmp_path / "b"
    assert_user_error(cli("profile", "--space", "tiny", "--bundle", b, "--threads", 2),
                      "--threads", "run.py")
    assert_user_error(cli("profile", "--space", "tiny", "--bundle", b, "--out", "t.json"),
                      "--out")
    assert_user_error(cli("profile", "--space", "tiny", "--bundle", b, "--data-dir", tmp_path),
                      "--precision int8")
    assert_user_error(cli("profile", "--space", "tiny", "--bundle", b, "--from-results",
                          tmp_path / "r.json"), "pick one")
    assert_user_error(cli("profile", "--space", "tiny", "--precision", "int8", "--out",
                          tmp_path / "t.json"), "--precision", "without --bundle")
    assert_user_error(cli("profile", "--space", "tiny", "--from-results", tmp_path / "r.json"),
                      "--out")
    assert_user_error(cli("profile", "--space", "tiny"), "--out", "--bundle")
    assert not b.exists()


def test_int8_bundle_without_images_asks_for_data_dir(tmp_path):
    b = tmp_path / "b"
    assert_user_error(cli("profile", "--space", "tiny", "--bundle", b, "--precision", "int8"),
                      "--data-dir")
    assert not b.exists() and list(tmp_path.iterdir()) == []


def test_existing_bundle_folder_is_refused_without_force(tmp_path):
    b = tmp_path / "b"
    b.mkdir()
    (b / "mine.txt").write_text("keep")
    assert_user_error(cli("profile", "--space", "tiny", "--bundle", b), str(b), "--force")
    assert (b / "mine.txt").read_text() == "keep" and sorted(p.name for p in tmp_path.iterdir()) \
        == ["b"]
    f = tmp_path / "file"
    f.write_text("x")
    assert_user_error(cli("profile", "--space", "tiny", "--bundle", f), "is a file")


def test_missing_results_file_is_one_line_error(tmp_path):
    assert_user_error(cli("profile", "--space", "tiny", "--from-results", tmp_path / "r.json",
                          "--out", tmp_path / "t.json"), "does not exist")
    bad = tmp_path / "bad.json"
    write_json(bad, {"schema": "fbnas.lut/2"})
    assert_user_error(cli("profile", "--space", "tiny", "--from-results", bad,
                          "--out", tmp_path / "t.json"), "run.py")


# ----------------------------------------------------------------------------- end to end

@pytest.mark.slow
def test_parallel_export_writes_the_files_one_process_writes(bundle):
    """Each file is seeded by its own kind and index, so --jobs changes nothing in the bundle:
    the first and last entry and network, exported here in this one process, hash as the
    2-job bundle's do."""
    from fbnas.latency.bundle import _export_all, networks_fit

    manifest = json.loads((bundle / "manifest.json").read_text())
    space, seed, batch = load_space("tiny"), manifest["seed"], manifest["batch"]
    keys = list(table_layout(space, batch)[0])
    archs = calibration_archs(space, 5, networks_fit(5), seed)
    tasks = [("entry", i, keys[i]) for i in (0, len(keys) - 1)]
    tasks += [("network", i, archs[i]) for i in (0, len(archs) - 1)]
    models = _export_all(space, batch, seed, tasks, None, None, jobs=1)
    for kind, i, what in tasks:
        expected = (manifest["entries"][what] if kind == "entry"
                    else manifest["networks"][f"net{i}"])["sha256"]
        assert hashlib.sha256(models[kind, i]).hexdigest() == expected, (kind, i)


@pytest.mark.slow
def test_bundle_holds_every_entry_and_network_with_their_hashes(bundle, tiny_lut_data):
    import onnxruntime as ort

    space = load_space("tiny")
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["schema"] == "fbnas.bundle/1" and m["fbnas"] == fbnas.__version__
    assert m["space"]["name"] == "tiny" and m["space"]["hash"] == space.hash
    assert m["precision"] == "fp32" and m["batch"] == 1 and m["quantization"] is None
    assert isinstance(m["opset"], int) and m["opset"] >= 17
    assert list(m["entries"]) == list(tiny_lut_data["entries"])  # profile's entries, its order
    assert m["layers"] == tiny_lut_data["layers"] and m["fixed"] == tiny_lut_data["fixed"]
    assert m["calibration"] == {**m["calibration"], "networks": 5, "fit": 2, "seed": 0}
    assert [n["ops"] for n in m["networks"].values()] == calibration_archs(space, 5, 2, 0)
    files = [*m["entries"].values(), *m["networks"].values()]
    for item in files:
        path = bundle / item["file"]
        assert sha(path) == item["sha256"] and path.stat().st_size == item["bytes"]
    assert sha(bundle / "run.py") == m["runner"]["sha256"]
    assert (bundle / "run.py").read_bytes() == runner_source()
    on_disk = {str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file()}
    assert on_disk == {i["file"] for i in files} | {"run.py", "manifest.json", "README.txt"}
    # every file runs in onnxruntime at its recorded input, to the entry's output shape
    for key, e in m["entries"].items():
        sess = ort.InferenceSession(str(bundle / e["file"]), providers=["CPUExecutionProvider"])
        (y,) = sess.run(None, {"input": np.zeros(e["input"], np.float32)})
        if e["kind"] == "head":
            assert y.shape == (1, space.num_classes)
        else:
            size = -(-e["h"] // e["stride"])
            assert y.shape == (1, e["c_out"], size, size), key
    net = m["networks"]["net0"]
    sess = ort.InferenceSession(str(bundle / net["file"]), providers=["CPUExecutionProvider"])
    assert sess.get_outputs()[0].name == "logits"  # as fbnas export --format onnx names it
    assert json.loads(sess.get_modelmeta().custom_metadata_map["fbnas.definition"])["blocks"]


@pytest.mark.slow
def test_bundle_entry_is_the_onnxruntime_runtimes_export(bundle):
    """The same graph (op by op) as the onnxruntime runtime exports for the entry."""
    import onnx
    import torch

    from fbnas.arch.export import example_like, onnx_program

    space = load_space("tiny")
    m = json.loads((bundle / "manifest.json").read_text())
    specs, _, _ = table_layout(space, 1)
    for key in (next(iter(specs)), m["fixed"]["head"]):
        torch.manual_seed(1)
        mine = onnx_program(specs[key].build(space), example_like(specs[key].input())).model_proto
        theirs = onnx.load(str(bundle / m["entries"][key]["file"]))
        assert [n.op_type for n in theirs.graph.node] == [n.op_type for n in mine.graph.node]
        assert [o.version for o in theirs.opset_import] == [o.version for o in mine.opset_import]


@pytest.mark.slow
def test_results_record_the_device_and_every_timing(results, bundle):
    r = json.loads(results.read_text())
    m = json.loads((bundle / "manifest.json").read_text())
    assert r["schema"] == "fbnas.device-results/1" and r["manifest"] == m
    assert r["manifest_sha256"] == sha(bundle / "manifest.json")
    dev = r["device"]
    import onnxruntime as ort

    assert dev["onnxruntime"] == ort.__version__ and dev["provider"] == "CPUExecutionProvider"
    assert dev["intra_op_threads"] == 1 and dev["cpu"] and dev["machine"] and dev["system"]
    assert dev["logical_cpus"] >= 1 and "CPUExecutionProvider" in dev["provider_options"]
    assert set(r["entries"]) == set(m["entries"]) == set(r["retimed"])
    assert set(r["networks"]) == set(m["networks"])
    assert all(e["runs"] == 3 and e["median"] > 0 for e in r["entries"].values())
    assert r["protocol"]["rounds"] == 3 and r["protocol"]["block_time_s"] == 0.001


@pytest.mark.slow
def test_results_make_a_table_every_command_uses(table, results, tiny_lut_data, tmp_path):
    space = load_space("tiny")
    lut = load_lut(table, space)
    d = lut.data
    assert d["schema"] == "fbnas.lut/2" and lut.runtime == "onnxruntime"
    r = json.loads(results.read_text())
    assert d["environment"]["cpu"] == r["device"]["cpu"]
    assert d["environment"]["device_record"] == r["device"]
    assert d["protocol"]["runtime_settings"]["provider"] == "CPUExecutionProvider"
    assert d["protocol"]["runtime_settings"]["onnxruntime"] == r["device"]["onnxruntime"]
    for key, e in d["entries"].items():
        assert e["median"] == r["entries"][key]["median"]
        # multiply-adds and parameters counted here, as fbnas profile counts them
        assert (e["macs"], e["params"]) == (tiny_lut_data["entries"][key]["macs"],
                                            tiny_lut_data["entries"][key]["params"])
    cal = d["calibration"]
    assert cal["networks_fit"] == 2 and cal["networks_test"] == 3
    assert cal["runtime"] == "onnxruntime" and set(cal["report"]) == {
        "noise_floor", "raw_table_all", "retimed_table_all", "raw_table_test",
        "calibrated_table_test", "flops_calibrated_test"}
    res = cli("show-lut", table, "--space", "tiny")
    assert res.exit_code == 0 and "onnxruntime" in res.stdout and "calibration:" in res.stdout

    arch = tmp_path / "hand.json"
    write_json(arch, space.definition(["k3_e1", "skip", "k5_e1", "k3_e3"], "hand"))
    # measured on this machine: fbnas latency times against it as against its own tables
    res = cli("latency", arch, "--lut", table, "--rounds", 3, "--block-time", 0.001)
    assert res.exit_code == 0, res.output
    assert "measured" in res.stdout and "not measured" not in res.stdout
    # a table of another device: the prediction only, and why
    other = json.loads(table.read_text())
    other["environment"]["device_record"]["cpu"] = "ARM Cortex-A76"
    other["environment"]["device_record"]["machine"] = "aarch64"
    other_path = tmp_path / "arm.json"
    write_json(other_path, other)
    res = cli("latency", arch, "--lut", other_path)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    pred = load_lut(other_path).predict(["k3_e1", "skip", "k5_e1", "k3_e3"])
    assert lines[1].startswith("predicted") and f"{pred:.1f} us" in lines[1]
    assert lines[-1].startswith("not measured:") and "ARM Cortex-A76" in lines[-1]
    assert "cannot time" in lines[-1] and not any(ln.startswith("measured") for ln in lines)
    # a device that names its CPU as this machine does but is another model of it
    same_name = json.loads(table.read_text())
    rec = same_name["environment"]["device_record"]
    assert rec["cpu_id"] == same_name["environment"]["cpu_id"] == cpu_identity()
    rec["cpu_id"] = dict(rec["cpu_id"], model="another", isa=["avx2"])
    write_json(tmp_path / "twin.json", same_name)
    res = cli("latency", arch, "--lut", tmp_path / "twin.json")
    assert res.exit_code == 0, res.output
    last = res.stdout.splitlines()[-1]
    assert last.startswith("not measured:") and "another device of this machine's CPU" in last
    assert "model another, avx2; this one" in last
    res = cli("latency", arch, "--lut", other_path, "--batch", 4)
    assert_user_error(res, "batch 1", "--batch")
    # calibrate times networks here, so it refuses a table whose networks were timed there
    before = other_path.read_bytes()
    res = cli("calibrate", other_path, "--networks", 4, "--fit", 2, "--force")
    assert_user_error(res, "bundle's run.py", "--from-results")
    assert other_path.read_bytes() == before


@pytest.mark.slow
def test_runner_refuses_a_tampered_or_missing_file(bundle, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(bundle, copy)
    m = json.loads((copy / "manifest.json").read_text())
    victim = copy / m["entries"][next(iter(m["entries"]))]["file"]
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    proc = run_py(copy, "--out", "r.json", *RUN, cwd=tmp_path)
    assert_one_line_error(proc, victim.name, "does not match the manifest", "copy the bundle")
    assert not (tmp_path / "r.json").exists()
    victim.unlink()
    proc = run_py(copy, "--out", "r.json", *RUN, cwd=tmp_path)
    assert_one_line_error(proc, victim.name, "missing")
    (copy / "manifest.json").write_text("{")
    assert_one_line_error(run_py(copy, "--out", "r.json", cwd=tmp_path), "manifest.json",
                          "not valid JSON")


@pytest.mark.slow
def test_runner_unknown_provider_lists_the_available_ones(bundle, tmp_path):
    import onnxruntime as ort

    proc = run_py(bundle, "--out", "r.json", "--provider", "NoSuchExecutionProvider", *RUN,
                  cwd=tmp_path)
    assert_one_line_error(proc, "NoSuchExecutionProvider", "available:",
                          *ort.get_available_providers())
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_runner_does_not_overwrite_results_without_force(bundle, tmp_path):
    (tmp_path / "r.json").write_text("mine")
    proc = run_py(bundle, "--out", "r.json", *RUN, cwd=tmp_path)
    assert_one_line_error(proc, "r.json", "--force")
    assert (tmp_path / "r.json").read_text() == "mine"
    assert_one_line_error(run_py(bundle, "--out", "r.json", "--threads", 0, cwd=tmp_path),
                          "--threads")


def _edited(results: Path, tmp_path: Path, edit) -> Path:
    r = json.loads(results.read_text())
    edit(r)
    out = tmp_path / "edited.json"
    out.write_text(json.dumps(r, indent=1))
    return out


def _import(path, tmp_path, space="tiny"):
    return cli("profile", "--space", space, "--from-results", path, "--out",
               tmp_path / "t.json")


@pytest.mark.slow
def test_import_refuses_results_of_another_space(results, tmp_path):
    res = _import(results, tmp_path, space="fbnet_cifar")
    assert_user_error(res, "space tiny", "not for fbnet_cifar", "--space tiny")
    assert not (tmp_path / "t.json").exists()


@pytest.mark.slow
def test_import_refuses_a_missing_entry_or_network(results, tmp_path):
    key = next(iter(json.loads(results.read_text())["entries"]))
    res = _import(_edited(results, tmp_path, lambda r: r["entries"].pop(key)), tmp_path)
    assert_user_error(res, f"lacks entry {key}", "incomplete run")
    res = _import(_edited(results, tmp_path, lambda r: r["networks"].pop("net3")), tmp_path)
    assert_user_error(res, "lacks network net3")

    def drop_blocks(r):  # the runner stopped before timing the last network
        rec = r["blocks"]["networks_and_entries"]
        gone = rec["keys"].index("net4")
        keep = [i for i, item in enumerate(rec["item"]) if item != gone]
        for field in ("item", "round", "visit", "seconds"):
            rec[field] = [rec[field][i] for i in keep]

    res = _import(_edited(results, tmp_path, drop_blocks), tmp_path)
    assert_user_error(res, "net4", "no timed block")
    assert not (tmp_path / "t.json").exists()


@pytest.mark.slow
def test_import_refuses_wrong_hashes(results, tmp_path):
    r = json.loads(results.read_text())
    rel = r["manifest"]["networks"]["net1"]["file"]
    res = _import(_edited(results, tmp_path, lambda r: r["files"].__setitem__(rel, "0" * 64)),
                  tmp_path)
    assert_user_error(res, rel, "manifest lists")

    def edit_manifest(r):
        r["manifest"]["entries"][next(iter(r["manifest"]["entries"]))]["sha256"] = "0" * 64

    assert_user_error(_import(_edited(results, tmp_path, edit_manifest), tmp_path),
                      "manifest", "differs")

    def edit_median(r):
        r["entries"][next(iter(r["entries"]))]["median"] *= 0.5

    assert_user_error(_import(_edited(results, tmp_path, edit_median), tmp_path),
                      "does not follow from its timed blocks")
    assert not (tmp_path / "t.json").exists()


@pytest.mark.slow
def test_import_refuses_an_edited_cpu_identity(results, tmp_path):
    def isa_number(r):
        r["device"]["cpu_id"]["isa"] = ["avx2", 512]

    assert_user_error(_import(_edited(results, tmp_path, isa_number), tmp_path),
                      "device.cpu_id.isa", "non-text flag")

    def model_number(r):
        r["device"]["cpu_id"]["model"] = 17

    assert_user_error(_import(_edited(results, tmp_path, model_number), tmp_path),
                      "device.cpu_id.model", "not a string")
    assert not (tmp_path / "t.json").exists()


@pytest.mark.slow
def test_import_does_not_overwrite_a_table_without_force(results, table, tmp_path):
    before = table.read_text()
    assert_user_error(cli("profile", "--space", "tiny", "--from-results", results, "--out",
                          table), "--force")
    assert table.read_text() == before


MICRO_SPACE = """
name: micro
input: {channels: 3, resolution: 32}
stem: {channels: 8, kernel: 3, stride: 2}
stages:
  - {channels: 8, blocks: 1, stride: 1}
candidates: [k3_e1, skip]
head: {channels: 16, classes: 10}
"""


@pytest.mark.slow
def test_int8_bundle_quantizes_entries_on_noise_and_networks_on_images(tmp_path, monkeypatch,
                                                                        cifar_subset):
    """--precision int8 hands every file to fbnas.arch.quantize.quantize_int8: entries with
    random normal activations of their input shape, networks with training images. A stand-in
    quantizer records the calls (and returns the model unchanged)."""
    calls = []

    def quantize_int8(model: bytes, calibration: list) -> bytes:
        assert isinstance(model, bytes)
        calls.append([np.asarray(c) for c in calibration])
        return model

    monkeypatch.setitem(sys.modules, "fbnas.arch.quantize",
                        types.SimpleNamespace(quantize_int8=quantize_int8))
    space_file = tmp_path / "micro.yaml"
    space_file.write_text(MICRO_SPACE)
    out = tmp_path / "b8"
    res = cli("profile", "--space", space_file, "--bundle", out, "--precision", "int8",
              "--networks", 5, "--data-dir", cifar_subset, "--jobs", 1)  # the stand-in is here
    assert res.exit_code == 0, res.output
    m = json.loads((out / "manifest.json").read_text())
    assert m["precision"] == "int8" and "kernels" in m["quantization"]["entries"]
    assert str(cifar_subset) in m["quantization"]["networks"]
    entries, nets = calls[:len(m["entries"])], calls[len(m["entries"]):]
    assert len(nets) == 5
    for calib, e in zip(entries, m["entries"].values()):
        assert len(calib) == ENTRY_CALIBRATION_SAMPLES
        assert all(c.shape == tuple(e["input"]) and c.dtype == np.float32 for c in calib)
    all_noise = np.concatenate([c.ravel() for c in entries[0]])
    assert abs(all_noise.mean()) < 0.1 and abs(all_noise.std() - 1) < 0.1
    for calib in nets:
        images = np.concatenate(calib)
        assert images.shape == (NETWORK_CALIBRATION_IMAGES, 3, 32, 32)
        assert images.dtype == np.float32 and images.std() > 0.5  # normalised pixels
        assert len({c.tobytes() for c in calib}) > 1
    np.testing.assert_array_equal(np.concatenate(nets[0]), np.concatenate(nets[-1]))


@pytest.mark.slow
def test_int8_bundle_end_to_end(tmp_path, cifar_subset):
    """fbnas.arch.quantize itself: QDQ files, timed by run.py, imported as an int8 table that
    fbnas latency predicts with but does not time against."""
    import onnx

    space_file = tmp_path / "micro.yaml"
    space_file.write_text(MICRO_SPACE)
    out = tmp_path / "b8"
    res = cli("profile", "--space", space_file, "--bundle", out, "--precision", "int8",
              "--networks", 5, "--data-dir", cifar_subset, "--jobs", 1)  # the stand-in is here
    assert res.exit_code == 0, res.output
    assert "int8" in res.stdout
    m = json.loads((out / "manifest.json").read_text())
    assert m["quantization"]["settings"]["format"] == "QDQ"
    for item in [m["entries"][m["layers"][0]["candidates"]["k3_e1"]], m["networks"]["net0"]]:
        ops = {n.op_type for n in onnx.load(str(out / item["file"])).graph.node}
        assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops, ops
    proc = run_py(out, "--out", "r.json", *RUN, cwd=tmp_path, without_fbnas=True)
    assert proc.returncode == 0, proc.stderr
    table = tmp_path / "t8.json"
    res = cli("profile", "--space", space_file, "--from-results", tmp_path / "r.json",
              "--out", table)
    assert res.exit_code == 0, res.output
    lut = load_lut(table, load_space(space_file))
    assert lut.data["protocol"]["precision"] == "int8" and lut.data["protocol"]["dtype"] == "int8"
    assert lut.data["protocol"]["runtime_settings"]["quantization"] == m["quantization"]
    arch = tmp_path / "m.json"
    write_json(arch, load_space(space_file).definition(["k3_e1"], "m"))
    res = cli("latency", arch, "--lut", table)
    assert res.exit_code == 0, res.output
    assert "int8" in res.stdout.splitlines()[-1] and "not measured" in res.stdout


@pytest.mark.slow
def test_runner_ships_in_the_wheel(tmp_path):
    from tests.whole.test_wheel import build_wheel

    names = zipfile.ZipFile(build_wheel(tmp_path)).namelist()
    assert "fbnas/latency/device_runner.py" in names and "fbnas/latency/bundle.py" in names


class _Input:
    def __init__(self, shape):
        self.name, self.shape = "input", shape


class _Session:
    def __init__(self, *shapes):
        self.shapes = shapes

    def get_inputs(self):
        return [_Input(s) for s in self.shapes]


def test_runner_refuses_an_input_shape_its_model_does_not_take():
    """A manifest saying 999x999 where the ONNX file takes 32x32 ended in onnxruntime's
    traceback mid-timing; the runner checks every item before timing any."""
    item = {"file": "entries/e0.onnx", "input": [1, 3, 999, 999]}
    with pytest.raises(runner.RunnerError, match=r"gives e0 the input 1x3x999x999 but its "
                                                 r"ONNX file entries/e0.onnx takes 1x3x32x32 "
                                                 r".*copy the bundle again"):
        runner.check_input(_Session([1, 3, 32, 32]), item, "e0")
    with pytest.raises(runner.RunnerError, match="takes 1x3x32"):
        runner.check_input(_Session([1, 3, 32]), item, "e0")
    with pytest.raises(runner.RunnerError, match="takes 2 inputs"):
        runner.check_input(_Session([1], [1]), item, "e0")
    runner.check_input(_Session([1, 3, 999, 999]), item, "e0")
    runner.check_input(_Session(["batch", 3, None, 999]), item, "e0")  # symbolic: any size


@pytest.mark.slow
def test_runner_refuses_a_manifest_input_its_onnx_file_does_not_take(bundle, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(bundle, copy)
    m = json.loads((copy / "manifest.json").read_text())
    key = next(iter(m["entries"]))
    m["entries"][key]["input"] = [1, 3, 999, 999]
    (copy / "manifest.json").write_text(json.dumps(m))
    proc = run_py(copy, "--out", "r.json", *RUN, cwd=tmp_path)
    assert_one_line_error(proc, key, "1x3x999x999", "copy the bundle again")
    assert not (tmp_path / "r.json").exists()


def test_runner_errors_cut_a_huge_value():
    """An edited manifest's megabyte string is shown cut, with its length."""
    manifest = {"schema": runner.BUNDLE_SCHEMA, "space": {"name": "s"}, "runner": {},
                "protocol": {f: 2 for f in runner._PROTOCOL_FIELDS}, "entries": {"e": {}},
                "networks": {"n": {}}, "units": [], "precision": "fp32", "batch": 1}
    manifest["protocol"].update(block_time_s=0.001, rel_iqr=0.1, tie_margin="m" * 10**6)
    manifest["entries"]["e"] = {"file": "e.onnx", "sha256": "0", "input": [1], "kind": "k",
                                "op": "o"}
    manifest["networks"]["n"] = {"file": "n.onnx", "sha256": "0", "input": [1]}
    with pytest.raises(runner.RunnerError, match=r"protocol.tie_margin is 'mmm+'\.\.\. "
                                                 r"\(1000000 characters\)") as e:
        runner.check_manifest(manifest, "manifest.json")
    assert len(str(e.value)) < 300
