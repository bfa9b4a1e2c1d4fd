"""Sampling architectures, the architecture file, build_model, latency, summary, export."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import fbnas
from fbnas.arch.definition import SCHEMA, select
from fbnas.arch.model import Network
from fbnas.arch.space import load_space
from fbnas.cli import main
from fbnas.errors import FbnasError
from fbnas.io import file_hash, read_json, write_json
from fbnas.latency.lut import LUT, load_lut
from fbnas.search.checkpoint import load_search_checkpoint
from fbnas.search.sampling import draw_ops

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def space():
    return load_space("tiny")


@pytest.fixture(scope="module")
def lut_data(tiny_lut_data):
    """The session's table of the tiny space (profiled once for every test module)."""
    return tiny_lut_data


@pytest.fixture
def lut_path(tmp_path, lut_data):
    p = tmp_path / "tiny_lut.json"
    write_json(p, lut_data)
    return p


def peaked_theta(space, picks):
    """theta whose argmax at layer i is candidate ``picks[i]``."""
    theta = []
    for layer, pick in zip(space.layers, picks):
        t = torch.zeros(len(layer.candidates))
        t[layer.candidates.index(pick)] = 2.0
        theta.append(t)
    return theta


HARD = ["k3_e3", "k5_e1", "skip", "k3_e1_g2"]


def make_run(tmp_path, space, lut_path, theta=None, name="search", **overrides):
    """A run folder whose checkpoints/last.pt follows the search checkpoint contract."""
    run = tmp_path / name
    (run / "checkpoints").mkdir(parents=True)
    ck = {"format": "fbnas.checkpoint/1", "kind": "search", "epoch": 7, "config": {},
          "space": space.raw, "space_hash": space.hash, "lut_path": str(lut_path),
          "lut_hash": file_hash(lut_path) if Path(lut_path).exists() else "0" * 16,
          "theta": theta if theta is not None else peaked_theta(space, HARD),
          "model": {"w": torch.zeros(1)}}
    ck.update(overrides)
    torch.save(ck, run / "checkpoints" / "last.pt")
    return run


def cli(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result


def assert_user_error(result, *fragments):
    """Non-zero exit, one 'error:' line naming the problem, no traceback."""
    assert result.exit_code != 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    err = result.stderr.strip()
    assert err.startswith("error: "), err
    assert "\n" not in err, err
    assert "Traceback" not in result.output
    for f in fragments:
        assert f in err, err


# --------------------------------------------------------------------------- sample


def test_hard_sample_writes_self_describing_definition(tmp_path, space, lut_path):
    run = make_run(tmp_path, space, lut_path)
    res = cli("sample", run, "--hard")
    assert res.exit_code == 0, res.output
    data = read_json(run / "arch.json", "arch")
    assert data["schema"] == SCHEMA
    e = data["architectures"]["search_hard"]
    assert [b["op"] for b in e["blocks"]] == HARD
    assert e["input"] == {"channels": 3, "resolution": 32}
    assert [(b["c_in"], b["c_out"], b["stride"]) for b in e["blocks"]] == \
        [(l.c_in, l.c_out, l.stride) for l in space.layers]
    lut = load_lut(lut_path)
    assert e["predicted"]["latency_us"] == pytest.approx(lut.predict(HARD), abs=1e-2)
    assert e["predicted"]["calibrated"] is False
    assert e["predicted"]["macs"] == lut.raw_sum(HARD, "macs")
    assert e["predicted"]["params"] == lut.raw_sum(HARD, "params")
    assert e["space"] == {"name": "tiny", "hash": space.hash}
    assert e["source"]["checkpoint_hash"] == file_hash(run / "checkpoints" / "last.pt")
    assert e["source"]["lut_hash"] == file_hash(lut_path) == e["source"]["search_lut_hash"]
    assert e["source"]["epoch"] == 7
    for layer, probs, op in zip(space.layers, e["theta_softmax"], HARD):
        assert list(probs) == list(layer.candidates)
        assert sum(probs.values()) == pytest.approx(1.0, abs=1e-5)
        assert max(probs, key=probs.get) == op
    assert e["probability"] == pytest.approx(
        math.prod(p[op] for p, op in zip(e["theta_softmax"], HARD)), rel=1e-4)
    # the per-stage table: every op, the prediction and where it went
    for op in HARD:
        assert op in res.stdout
    assert "predicted latency" in res.stdout and "wrote search_hard" in res.stdout


def test_sample_refuses_existing_name_unless_force(tmp_path, space, lut_path):
    run = make_run(tmp_path, space, lut_path)
    out = tmp_path / "archs.json"
    assert cli("sample", run, "--hard", "--out", out).exit_code == 0
    before = out.read_bytes()
    assert_user_error(cli("sample", run, "--hard", "--out", out), "search_hard", "--force")
    assert out.read_bytes() == before
    assert cli("sample", run, "--hard", "--out", out, "--name", "other").exit_code == 0
    assert cli("sample", run, "--hard", "--out", out, "--force").exit_code == 0
    assert set(read_json(out, "arch")["architectures"]) == {"search_hard", "other"}


def test_soft_samples_are_seeded_distinct_and_ranked(tmp_path, space, lut_path):
    theta = [torch.randn(len(l.candidates), generator=torch.Generator().manual_seed(i))
             for i, l in enumerate(space.layers)]
    run = make_run(tmp_path, space, lut_path, theta=theta)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    res = cli("sample", run, "--num", 6, "--seed", 1, "--out", a)
    assert res.exit_code == 0, res.output
    assert cli("sample", run, "--num", 6, "--seed", 1, "--out", b).exit_code == 0
    ea = read_json(a, "arch")["architectures"]
    eb = read_json(b, "arch")["architectures"]
    assert {n: [x["op"] for x in e["blocks"]] for n, e in ea.items()} == \
        {n: [x["op"] for x in e["blocks"]] for n, e in eb.items()}
    ops = [tuple(x["op"] for x in e["blocks"]) for e in ea.values()]
    assert len(set(ops)) == len(ops)
    assert sum(e["sampling"]["times_drawn"] for e in ea.values()) == 6
    assert all(n.startswith("search_seed1_") for n in ea)
    # printed fastest first, each with its probability under theta
    ranked = [l.split()[1] for l in res.stdout.splitlines()
              if len(l.split()) > 1 and l.split()[1] in ea]
    assert ranked == sorted(ea, key=lambda n: ea[n]["predicted"]["latency_us"])
    ck = load_search_checkpoint(run)
    for e in ea.values():
        ops = [x["op"] for x in e["blocks"]]
        p = math.prod(float(pr[l.candidates.index(op)])
                      for l, pr, op in zip(space.layers, ck.probs, ops))
        assert e["probability"] == pytest.approx(p, rel=1e-6)


def test_draws_follow_softmax_theta(space):
    probs = [np.array([0.7, 0.1, 0.1, 0.05, 0.05])] * len(space.layers)
    draws = draw_ops(space, probs, 4000, seed=0)
    share = np.mean([d[0] == space.layers[0].candidates[0] for d in draws])
    assert share == pytest.approx(0.7, abs=0.03)
    assert draws[:5] == draw_ops(space, probs, 5, seed=0)


def test_calibrated_table_and_changed_hash_warn(tmp_path, space, lut_path):
    run = make_run(tmp_path, space, lut_path)
    data = read_json(lut_path, "lut")
    data["calibration"] = {"a": 1.2, "b": 30.0}
    write_json(lut_path, data)
    res = cli("sample", run, "--hard")
    assert res.exit_code == 0, res.output
    assert "warning:" in res.stderr and "calibrated" in res.stderr
    e = read_json(run / "arch.json", "arch")["architectures"]["search_hard"]
    raw = LUT(data).raw_sum(HARD)
    assert e["predicted"]["calibrated"] is True
    assert e["predicted"]["latency_us"] == pytest.approx(1.2 * raw + 30.0, abs=1e-2)
    assert e["source"]["lut_hash"] != e["source"]["search_lut_hash"]
    res = cli("latency", run / "arch.json", "--rounds", 1, "--block-time", 0.005)
    assert res.exit_code == 0, res.output
    assert "calibrated" in res.stdout and "table sum" in res.stdout


def test_missing_table_needs_lut_option(tmp_path, space, lut_path):
    run = make_run(tmp_path, space, tmp_path / "gone.json")
    assert_user_error(cli("sample", run, "--hard"), "gone.json", "--lut")
    assert cli("sample", run, "--hard", "--lut", lut_path).exit_code == 0


def test_sample_bad_inputs(tmp_path, space, lut_path, lut_data):
    assert_user_error(cli("sample", tmp_path / "nope"), "does not exist")
    other = dict(lut_data, space=dict(lut_data["space"], hash="f" * 16))
    write_json(tmp_path / "other.json", other)
    run = make_run(tmp_path, space, lut_path)
    assert_user_error(cli("sample", run, "--hard", "--lut", tmp_path / "other.json"),
                      "profiled for space")
    short = make_run(tmp_path, space, lut_path, name="short",
                     theta=peaked_theta(space, HARD)[:2])
    assert_user_error(cli("sample", short, "--hard"), "theta has 2 layers")
    model_ck = make_run(tmp_path, space, lut_path, name="model", kind="model")
    assert_user_error(cli("sample", model_ck, "--hard"), "not a search checkpoint")
    (tmp_path / "junk.pt").write_bytes(b"PK\x03\x04 truncated")
    assert_user_error(cli("sample", tmp_path / "junk.pt"), "cannot load checkpoint")
    res = cli("sample", run, "--hard", "--num", 3)
    assert res.exit_code == 2 and "--hard" in res.stderr
    assert_user_error(cli("sample", run, "--hard", "--name", "bad name"), "bad name")
    (tmp_path / "notes.json").write_text("[]")
    assert_user_error(cli("sample", run, "--hard", "--out", tmp_path / "notes.json"),
                      "not an fbnas architecture file")
    assert (tmp_path / "notes.json").read_text() == "[]"


# --------------------------------------------------------------------------- build_model


@pytest.fixture
def arch_file(tmp_path, space, lut_path):
    run = make_run(tmp_path, space, lut_path)
    assert cli("sample", run, "--hard").exit_code == 0
    return run / "arch.json"


def test_build_model_round_trip(tmp_path, space, lut_path, arch_file):
    model = fbnas.build_model(arch_file)
    assert isinstance(model, Network)
    model.eval()
    with torch.inference_mode():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    e = read_json(arch_file, "arch")["architectures"]["search_hard"]
    assert sum(p.numel() for p in model.parameters()) == e["predicted"]["params"]
    # a file dict and a bare definition build the same network
    assert isinstance(fbnas.build_model(read_json(arch_file, "arch")), Network)
    assert isinstance(fbnas.build_model(e, "search_hard"), Network)
    run = tmp_path / "search"
    assert cli("sample", run, "--num", 2, "--seed", 0).exit_code == 0
    names = list(read_json(arch_file, "arch")["architectures"])
    with pytest.raises(FbnasError, match="search_hard"):
        fbnas.build_model(arch_file)
    assert fbnas.build_model(arch_file, names[-1]).definition["name"] == names[-1]


def test_import_fbnas_is_lazy():
    code = "import sys, fbnas; print('torch' in sys.modules, 'build_model' in fbnas.__all__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
    from fbnas.arch.definition import build_model
    assert fbnas.build_model is build_model


def _entry(arch_file):
    return read_json(arch_file, "arch")["architectures"]["search_hard"]


def _write_one(path, entry):
    write_json(path, {"schema": SCHEMA, "architectures": {"x": entry}})
    return path


@pytest.mark.parametrize("command", ["summary", "latency", "export"])
def test_bad_definition_files_are_one_line_errors(tmp_path, arch_file, command):
    extra = {"export": ["--random-weights", "--format", "pt2", "--out", tmp_path / "m.pt2"],
             "latency": ["--rounds", 1, "--block-time", 0.001]}.get(command, [])

    def run(path, *more):
        return cli(command, path, *more, *extra)

    text = arch_file.read_text()
    (tmp_path / "trunc.json").write_text(text[: len(text) // 2])
    assert_user_error(run(tmp_path / "trunc.json"), "not valid JSON")
    assert_user_error(run(tmp_path / "missing.json"), "does not exist")
    (tmp_path / "list.json").write_text("[1, 2]")
    assert_user_error(run(tmp_path / "list.json"), "JSON object")
    (tmp_path / "other.json").write_text('{"weights": 1}')
    assert_user_error(run(tmp_path / "other.json"), "schema")
    e = _entry(arch_file)
    bad_op = json.loads(json.dumps(e))
    bad_op["blocks"][1]["op"] = "k4_e9"
    assert_user_error(run(_write_one(tmp_path / "op.json", bad_op)), "k4_e9", "blocks[1]")
    chain = json.loads(json.dumps(e))
    chain["blocks"][2]["c_in"] = 12
    assert_user_error(run(_write_one(tmp_path / "chain.json", chain)), "blocks[2].c_in")
    assert_user_error(run(arch_file, "--name", "absent"), "absent", "search_hard")
    write_json(tmp_path / "schema.json", {"schema": "other/9", "architectures": {"x": e}})
    assert_user_error(run(tmp_path / "schema.json"), "other/9")


@pytest.mark.slow  # exports and times the network through ONNX Runtime (about 5 s)
def test_plain_hand_written_definition_works(tmp_path, space):
    defn = space.definition(["k3_e1", "skip", "k5_e1", "k3_e3"], "hand")
    write_json(tmp_path / "hand.json", defn)
    name, d = select(tmp_path / "hand.json")
    assert name == "hand" and [b["op"] for b in d["blocks"]] == ["k3_e1", "skip", "k5_e1", "k3_e3"]
    res = cli("summary", tmp_path / "hand.json")
    assert res.exit_code == 0, res.output
    assert "no lookup table" in res.stdout
    res = cli("latency", tmp_path / "hand.json", "--rounds", 1, "--block-time", 0.005)
    assert res.exit_code == 0, res.output
    assert "measured" in res.stdout and "no lookup table" in res.stdout


# --------------------------------------------------------------------------- summary, latency


def test_summary_per_layer_table(arch_file, lut_path):
    res = cli("summary", arch_file)
    assert res.exit_code == 0, res.output
    lut = load_lut(lut_path)
    e = _entry(arch_file)
    rows = {l.split()[0]: l for l in res.stdout.splitlines() if l.split()}
    assert {"stem", "0", "1", "2", "3", "head", "total"} <= set(rows)
    assert "1x8x16x16" in rows["stem"] and "1x16x8x8" in rows["1"] and "1x10" in rows["head"]
    assert f"{e['predicted']['params']:,}" in rows["total"]
    assert f"{lut.raw_sum(HARD):.1f}" in rows["total"]
    key = lut.data["layers"][0]["candidates"][HARD[0]]
    assert f"{lut.entry(key)['median']:.1f}" in rows["0"]
    from fbnas.latency.measure import layer_stats
    assert sum(s.macs for s in layer_stats(e)) == lut.raw_sum(HARD, "macs")


def test_latency_measured_vs_predicted(arch_file, lut_path):
    res = cli("latency", arch_file, "--rounds", 1, "--block-time", 0.005)
    assert res.exit_code == 0, res.output
    lines = {l.split()[0]: l for l in res.stdout.splitlines() if l.split()}
    measured = float(lines["measured"].split()[1])
    predicted = float(lines["predicted"].split()[1])
    assert measured > 0
    assert predicted == pytest.approx(load_lut(lut_path).predict(HARD), abs=0.1)
    err = float(lines["predicted"].rsplit("error", 1)[1].strip().rstrip("%"))
    assert err == pytest.approx(100 * (predicted - measured) / measured, abs=0.2)
    assert_user_error(cli("latency", arch_file, "--batch", 4, "--rounds", 1),
                      "batch 1", "--batch 4")


def test_latency_refuses_table_of_another_space(tmp_path, arch_file, lut_data):
    other = dict(lut_data, space=dict(lut_data["space"], hash="f" * 16))
    write_json(tmp_path / "other.json", other)
    assert_user_error(cli("latency", arch_file, "--lut", tmp_path / "other.json"),
                      "space tiny", "--lut")


# --------------------------------------------------------------------------- export


def trained_like(model):
    """Non-trivial weights and BN statistics, so eager and exported outputs are informative."""
    g = torch.Generator().manual_seed(3)
    state = {k: (torch.rand(v.shape, generator=g) + 0.5 if "running_var" in k else
                 torch.randn(v.shape, generator=g) * 0.3) if v.is_floating_point() else v
             for k, v in model.state_dict().items()}
    model.load_state_dict(state)
    return state


@pytest.mark.slow  # a torch.export round trip (about 4 s)
def test_export_pt2_matches_eager(tmp_path, arch_file):
    e = _entry(arch_file)
    model = Network(e).eval()
    state = trained_like(model)
    ckpt = tmp_path / "model.pt"
    torch.save({"format": "fbnas.checkpoint/1", "kind": "model", "definition": e,
                "model": state}, ckpt)
    out = tmp_path / "m.pt2"
    res = cli("export", arch_file, "--weights", ckpt, "--format", "pt2", "--out", out)
    assert res.exit_code == 0, res.output
    loaded = torch.export.load(str(out)).module()
    for batch in (1, 5):
        x = torch.randn(batch, 3, 32, 32)
        with torch.inference_mode():
            torch.testing.assert_close(loaded(x), model(x), rtol=1e-4, atol=1e-5)
    assert_user_error(cli("export", arch_file, "--weights", ckpt, "--format", "pt2",
                          "--out", out), "--force")
    # a plain state_dict of the network is accepted too
    torch.save(state, tmp_path / "state.pt")
    res = cli("export", arch_file, "--weights", tmp_path / "state.pt", "--format", "pt2",
              "--out", out, "--force")
    assert res.exit_code == 0, res.output


def test_export_refuses_mismatched_weights(tmp_path, arch_file, space):
    e = _entry(arch_file)
    out = ["--format", "pt2", "--out", tmp_path / "m.pt2"]
    foreign = json.loads(json.dumps(e))
    foreign["space"]["hash"] = "a" * 16
    torch.save({"format": "fbnas.checkpoint/1", "kind": "model", "definition": foreign,
                "model": Network(e).state_dict()}, tmp_path / "foreign.pt")
    assert_user_error(cli("export", arch_file, "--weights", tmp_path / "foreign.pt", *out),
                      "space")
    other = space.definition(["k3_e1", "k5_e1", "skip", "k3_e1_g2"], "other")
    torch.save({"format": "fbnas.checkpoint/1", "kind": "model", "definition": other,
                "model": Network(other).state_dict()}, tmp_path / "other.pt")
    assert_user_error(cli("export", arch_file, "--weights", tmp_path / "other.pt", *out),
                      "block 0 is k3_e1")
    torch.save(Network(other).state_dict(), tmp_path / "other_state.pt")
    assert_user_error(cli("export", arch_file, "--weights", tmp_path / "other_state.pt", *out),
                      "do not fit")
    search = arch_file.parent / "checkpoints" / "last.pt"
    assert_user_error(cli("export", arch_file, "--weights", search, *out), "--random-weights")
    res = cli("export", arch_file, *out)
    assert res.exit_code == 2 and "--random-weights" in res.stderr
    assert_user_error(cli("export", arch_file, "--random-weights", "--format", "pt2",
                          "--out", tmp_path / "m.zip"), ".pt2")
    assert not (tmp_path / "m.pt2").exists()


def test_onnx_without_its_packages_names_the_install(tmp_path, arch_file, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # makes `import onnx` fail
    res = cli("export", arch_file, "--random-weights", "--format", "onnx",
              "--out", tmp_path / "m.onnx")
    assert_user_error(res, "pip install -e .")
    assert not (tmp_path / "m.onnx").exists()


def test_every_command_help_has_an_example():
    for cmd in ("sample", "latency", "summary", "export"):
        res = cli(cmd, "--help")
        assert res.exit_code == 0 and "Example" in res.output, cmd


def test_zero_init_residual_starts_every_residual_block_as_the_identity(space):
    """Network.zero_init_residual (retrain.zero_init_residual, on by default): residual
    blocks pass their input through unchanged at the start; blocks that change the shape
    keep their initialisation."""
    net = Network(space.definition([l.candidates[0] for l in space.layers], "first"))
    net.zero_init_residual()
    net.eval()
    x = net.stem(torch.randn(2, *net.input_shape()[1:]))
    residual = 0
    for block in net.blocks:
        y = block(x)
        if getattr(block, "residual", False):
            residual += 1
            assert torch.equal(y, x)
        x = y
    assert residual > 0


def test_head_pools_in_training_as_in_evaluation_and_keeps_the_gradient_format():
    """Head's training pool (a sum and a division) gives AdaptiveAvgPool2d's values bit for
    bit, and its gradient reaches the head's conv in the channels_last format the network
    trains in (AdaptiveAvgPool2d's was NCHW, which made the ReLU backward mix formats)."""
    from fbnas.arch.model import Head

    torch.manual_seed(0)
    head = Head(8, 16, 10).to(memory_format=torch.channels_last)
    x = torch.randn(4, 8, 3, 3).contiguous(memory_format=torch.channels_last)
    feats = head.conv(x)
    trained = head.fc(feats.sum((2, 3)).div(9))
    assert torch.equal(trained, head.fc(torch.nn.AdaptiveAvgPool2d(1)(feats).flatten(1)))
    assert torch.equal(head.train()(x), trained)
    grads = []

    def keep_output_grad(module, inputs, out):
        out.register_hook(grads.append)

    head.conv.register_forward_hook(keep_output_grad)
    head(x).sum().backward()
    assert grads[0].stride(1) == 1  # channels innermost: channels_last, or a broadcast of it


def test_retrains_saved_before_zero_init_resume_as_they_ran():
    from fbnas.config import from_saved, load_config

    assert load_config(None, []).retrain.zero_init_residual
    saved = load_config(None, []).to_dict()
    del saved["retrain"]["zero_init_residual"]
    assert from_saved(saved).retrain.zero_init_residual is False


def test_retrains_saved_before_channels_last_resume_in_nchw():
    from fbnas.config import from_saved, load_config

    assert load_config(None, []).retrain.memory_format == "channels_last"
    saved = load_config(None, []).to_dict()
    del saved["retrain"]["memory_format"]
    assert from_saved(saved).retrain.memory_format == "contiguous"
