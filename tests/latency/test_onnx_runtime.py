"""Tables timed in ONNX Runtime: the runtime recorded, mismatches refused, exports that run.

One tiny table is profiled through the CLI for the whole module: exporting its 22 entries
takes most of this file's time, so the tests that use it are marked slow.
"""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
import torch
from click.testing import CliRunner

import fbnas
from fbnas.arch.space import load_space
from fbnas.cli import main
from fbnas.errors import FbnasError
from fbnas.io import read_json, write_json
from fbnas.latency.lut import LUT, load_lut, save_lut
from fbnas.latency.runtimes import Eager, make_runtime, session
from fbnas.machine import cpu_identity, cpu_model, describe_cpu
from tests.arch.test_arch import HARD, assert_user_error, make_run, trained_like


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def ort_table(tmp_path_factory):
    """(path, CLI result) of `fbnas profile --space tiny --runtime onnxruntime`, few rounds."""
    out = tmp_path_factory.mktemp("ort") / "tiny_ort.json"
    res = cli("profile", "--space", "tiny", "--runtime", "onnxruntime", "--out", out,
              "--rounds", 2, "--extra-time", 0, "--block-time", 0.001)
    assert res.exit_code == 0, res.output
    return out, res


@pytest.fixture
def hand_arch(tmp_path):
    path = tmp_path / "hand.json"
    write_json(path, load_space("tiny").definition(["k3_e1", "skip", "k5_e1", "k3_e3"], "hand"))
    return path


@pytest.mark.slow
def test_profile_tiny_in_onnxruntime_end_to_end(ort_table):
    path, res = ort_table
    assert "onnxruntime" in res.stdout and "fastest non-skip" in res.stdout
    lut = load_lut(path, load_space("tiny"))
    prot, env = lut.data["protocol"], lut.data["environment"]
    assert prot["runtime"] == "onnxruntime" and env["threads"] == 1 and env["cpu"]
    s = prot["runtime_settings"]
    assert s["onnxruntime"] == ort.__version__
    assert s["intra_op_threads"] == 1 and s["inter_op_threads"] == 1
    assert s["graph_optimization_level"] == "ORT_ENABLE_ALL"
    assert isinstance(s["opset"], int) and s["opset"] >= 17
    assert all(e["median"] > 0 for e in lut.data["entries"].values())


@pytest.mark.slow
def test_runtime_table_round_trip(ort_table, tmp_path):
    path, _ = ort_table
    lut = load_lut(path)
    assert lut.runtime == "onnxruntime" and lut.check_runtime(None) == "onnxruntime"
    copy = tmp_path / "copy.json"
    save_lut(lut.data, copy)
    again = load_lut(copy, load_space("tiny"))
    assert again.runtime == "onnxruntime" and again.data == lut.data
    shown = cli("show-lut", copy).stdout
    assert "onnxruntime" in shown
    # the CPU as recorded: its name, then what tells it from others of that name
    assert f"on {cpu_model()} ({describe_cpu(cpu_identity())}; " in shown


@pytest.mark.slow
def test_runtime_mismatch_is_one_line_error(ort_table, tiny_lut_file, hand_arch):
    path, _ = ort_table
    before = path.read_text()
    assert_user_error(cli("calibrate", path, "--runtime", "eager", "--networks", 5, "--fit", 3),
                      "runtime onnxruntime", "--runtime onnxruntime")
    assert path.read_text() == before
    assert_user_error(cli("latency", hand_arch, "--lut", tiny_lut_file, "--runtime",
                          "onnxruntime", "--rounds", 1), "runtime eager", "--runtime eager")


def test_tables_without_a_runtime_are_eager(tiny_lut_data):
    data = json.loads(json.dumps(tiny_lut_data))
    data["protocol"].pop("runtime")
    lut = LUT(data)
    assert lut.runtime == "eager" and lut.check_runtime("eager") == "eager"
    with pytest.raises(FbnasError, match="--runtime eager"):
        lut.check_runtime("onnxruntime")
    data["protocol"]["runtime"] = "tvm"
    with pytest.raises(FbnasError, match="re-run fbnas profile"):
        LUT(data)
    assert isinstance(make_runtime("eager"), Eager)
    with pytest.raises(FbnasError, match="eager, onnxruntime"):
        make_runtime("tvm")


@pytest.mark.slow
def test_latency_in_onnxruntime_against_its_table(ort_table, hand_arch):
    path, _ = ort_table
    res = cli("latency", hand_arch, "--lut", path, "--rounds", 2, "--block-time", 0.001)
    assert res.exit_code == 0, res.output
    lines = {l.split()[0]: l for l in res.stdout.splitlines() if l.split()}
    assert "runtime onnxruntime" in lines["architecture"]
    assert float(lines["measured"].split()[1]) > 0
    assert float(lines["predicted"].split()[1]) == pytest.approx(
        load_lut(path).predict(["k3_e1", "skip", "k5_e1", "k3_e3"]), abs=0.1)
    assert "now" in lines


@pytest.mark.slow
def test_exported_onnx_of_a_sampled_architecture_runs_like_eager(ort_table, tmp_path):
    path, _ = ort_table
    run = make_run(tmp_path, load_space("tiny"), path)
    assert cli("sample", run, "--hard").exit_code == 0
    arch = run / "arch.json"
    model = fbnas.build_model(arch).eval()
    torch.save(trained_like(model), tmp_path / "state.pt")  # BN statistics worth folding
    out = tmp_path / "m.onnx"
    res = cli("export", arch, "--weights", tmp_path / "state.pt", "--format", "onnx",
              "--out", out)
    assert res.exit_code == 0, res.output
    sess = session(out.read_bytes(), threads=1)  # the session settings tables are timed with
    for batch in (1, 3):
        x = torch.randn(batch, 3, 32, 32)
        got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
        with torch.inference_mode():
            want = model(x).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    assert [b["op"] for b in json.loads(meta["fbnas.definition"])["blocks"]] == HARD


@pytest.mark.slow
def test_table_from_another_machine_warns(ort_table, tmp_path):
    path, _ = ort_table
    data = read_json(path, "lookup table")
    data["environment"]["cpu"] = "Some Other CPU 9000"
    other = tmp_path / "other.json"
    write_json(other, data)
    res = cli("show-lut", other)
    assert res.exit_code == 0
    warning = [l for l in res.stderr.splitlines() if "another machine" in l]
    assert len(warning) == 1 and "Some Other CPU 9000" in warning[0]
    run = make_run(tmp_path, load_space("tiny"), other)
    res = cli("sample", run, "--hard")
    assert res.exit_code == 0 and "another machine" in res.stderr
