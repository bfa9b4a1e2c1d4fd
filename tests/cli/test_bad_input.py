"""Bad input a new user may give each command, and input that breaks parsers or optimizers
rather than fbnas's own checks: a one-line error naming the key or file, a non-zero exit, at
once; never a traceback, and never silently accepted."""

from __future__ import annotations

import copy
import json
import os
import pickle
import re
import time

import pytest
import torch
import yaml

from fbnas.arch.space import load_space
from fbnas.config import load_config
from fbnas.errors import FbnasError, UsageError
from fbnas.io import file_hash, read_json, write_json
from tests.arch.test_arch import HARD, assert_user_error, cli, make_run, peaked_theta

HUGE = "9" * 5000  # beyond Python's 4300-digit conversion limit


@pytest.fixture
def space():
    return load_space("tiny")


def _table(tmp_path, tiny_lut_data, name, change):
    data = copy.deepcopy(tiny_lut_data)
    change(data)
    path = tmp_path / name
    write_json(path, data)
    return path


def _arch(tmp_path, space, lut_file, name="arch.json", change=None):
    defn = space.definition(HARD, "hand")
    defn["source"] = {"lut": str(lut_file)}
    if change:
        change(defn)
    write_json(tmp_path / name, defn)
    return tmp_path / name


def _fast(started, limit=5.0):
    """Refused at once: milliseconds when idle; the limit leaves room for a loaded CI machine
    and is still far below the minutes of work (or the allocation) the check prevents."""
    assert time.monotonic() - started < limit


# --------------------------------------------------------------------------- config and space files


def test_a_key_given_twice_in_a_config_file_is_refused(tmp_path):
    """The safe loader keeps the last value silently: 500 epochs ran instead of 3."""
    path = tmp_path / "c.yaml"
    path.write_text("search:\n  epochs: 3\n  mode: hard\n  epochs: 500\n")
    with pytest.raises(FbnasError, match="'epochs' is given twice") as e:
        load_config(path)
    assert "line 4" in str(e.value) and "\n" not in str(e.value)
    # the same key in two different mappings is fine
    path.write_text("search:\n  epochs: 3\nretrain:\n  epochs: 4\n")
    assert load_config(path).search.epochs == 3


def test_a_key_given_twice_in_a_space_file_is_refused(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nname: t\n")
    assert_user_error(cli("profile", "--space", path, "--out", tmp_path / "t.json"),
                      "given twice")


@pytest.mark.parametrize("text", [f"search:\n  epochs: {HUGE}\n", "x: " + "[" * 20000 + "]" * 20000])
def test_unreadable_numbers_and_nesting_in_a_config(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(FbnasError) as e:
        load_config(path)
    assert "\n" not in str(e.value) and ("digits" in str(e.value) or "nested" in str(e.value))


def test_huge_integers_in_overrides_and_fields():
    with pytest.raises(UsageError, match="--set search.epochs"):
        load_config(None, [f"search.epochs={HUGE}"])
    with pytest.raises(UsageError, match="search.epochs is too large"):
        load_config(None, [f"search.epochs={'9' * 30}"])


@pytest.mark.parametrize("override,key", [
    ("optim.weights.momentum=-1", "optim.weights.momentum"),
    ("optim.weights.momentum=1", "optim.weights.momentum"),
    ("optim.weights.weight_decay=-1", "optim.weights.weight_decay"),
    ("optim.theta.weight_decay=-0.1", "optim.theta.weight_decay"),
    ("optim.theta.beta1=1.5", "optim.theta.beta1"),
    ("optim.theta.beta2=-0.5", "optim.theta.beta2"),
    ("optim.weights.lr=1e300", "optim.weights.lr"),
    ("optim.theta.lr=1e39", "optim.theta.lr"),
    ("optim.weights.min_lr=-1", "optim.weights.min_lr"),
])
def test_optimizer_settings_torch_would_reject_name_the_key(override, key):
    with pytest.raises(UsageError, match=key):
        load_config(None, [override])


def test_nesterov_without_momentum_names_both_fixes():
    with pytest.raises(UsageError, match="nesterov.*momentum"):
        load_config(None, ["optim.weights.nesterov=true", "optim.weights.momentum=0"])
    assert load_config(None, ["optim.weights.nesterov=true"]).optim.weights.nesterov


def test_train_refuses_these_before_any_work(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("optim:\n  theta: {beta1: 1.5}\n")
    assert_user_error(cli("train", "--config", path, "--out", tmp_path / "run"),
                      "optim.theta.beta1")
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- lookup tables


def test_table_whose_space_is_a_string(tmp_path, tiny_lut_data, space):
    bad = _table(tmp_path, tiny_lut_data, "bad.json", lambda d: d.update(space="tiny"))
    assert_user_error(cli("show-lut", bad), "bad.json", "space must be an object")
    run = make_run(tmp_path, space, bad)
    assert_user_error(cli("sample", run, "--hard"), "space must be an object")


def test_table_without_environment_is_refused_by_every_command(tmp_path, tiny_lut_data, space):
    gone = _table(tmp_path, tiny_lut_data, "gone.json", lambda d: d.pop("environment"))
    assert_user_error(cli("show-lut", gone), "'environment'")
    empty = _table(tmp_path, tiny_lut_data, "empty.json", lambda d: d.update(environment={}))
    assert_user_error(cli("show-lut", empty), "environment lacks 'threads'")
    arch = _arch(tmp_path, space, empty)
    assert_user_error(cli("summary", arch), "environment lacks 'threads'")
    assert_user_error(cli("train", "--config", "tiny", "--lut", empty, "--out", tmp_path / "run",
                          "--data-dir", tmp_path / "no-data"), "environment lacks 'threads'")
    # the machine's name is optional: a table without it shows '?'
    nocpu = _table(tmp_path, tiny_lut_data, "nocpu.json",
                   lambda d: d["environment"].pop("cpu"))
    r = cli("show-lut", nocpu)
    assert r.exit_code == 0, r.output
    assert "measured" in r.stdout and " on ? " in r.stdout


def test_show_lut_cuts_a_huge_recorded_name(tmp_path, tiny_lut_data):
    """A table may record any machine name; a 1 MB one is shown cut, with its length."""
    huge = _table(tmp_path, tiny_lut_data, "huge.json",
                  lambda d: d["environment"].update(machine="x" * 1_000_000))
    r = cli("show-lut", huge)
    assert r.exit_code == 0, r.output
    assert len(r.stdout) < 5_000 and "(1,000,0" in r.stdout and "characters)" in r.stdout


def test_string_batch_is_refused_by_every_command(tmp_path, tiny_lut_data, space):
    bad = _table(tmp_path, tiny_lut_data, "bad.json",
                 lambda d: d["protocol"].update(batch="one"))
    arch = _arch(tmp_path, space, bad)
    for args in (["show-lut", bad], ["summary", arch], ["latency", arch, "--rounds", 1],
                 ["train", "--config", "tiny", "--lut", bad, "--out", tmp_path / "run",
                  "--data-dir", tmp_path / "no-data"]):
        started = time.monotonic()
        assert_user_error(cli(*args), "protocol.batch must be a positive integer, got 'one'")
        _fast(started)


@pytest.mark.parametrize("where,change,message", [
    ("entry", lambda d: next(iter(d["entries"].values())).update(c_in="8"), ".c_in must be"),
    ("layer", lambda d: d["layers"][1].pop("stride"), "layer 1 lacks 'stride'"),
    ("fixed", lambda d: d.update(fixed=["stem", "head"]), "'fixed' must be"),
    ("definition", lambda d: d["space"]["definition"]["stem"].update(channels=0),
     "its space definition is invalid"),
])
def test_damaged_table_sections_name_the_field(tmp_path, tiny_lut_data, where, change, message):
    bad = _table(tmp_path, tiny_lut_data, f"{where}.json", change)
    assert_user_error(cli("show-lut", bad), message)


@pytest.mark.parametrize("text,what", [
    ('{"schema": ' + HUGE + '}', "digits"),
    ("[" * 100000 + "]" * 100000, "nested"),
])
def test_unreadable_numbers_and_nesting_in_a_table_or_definition(tmp_path, text, what):
    path = tmp_path / "t.json"
    path.write_text(text)
    assert_user_error(cli("show-lut", path), "t.json", what)
    assert_user_error(cli("summary", path), "t.json", what)


def _key_twice(data: dict, section: str) -> str:
    """JSON text of ``data`` whose object ``section`` gives its first key a second time, with
    another value, after the others (json.loads keeps the last one)."""
    key, value = next(iter(data[section].items()))
    text = json.dumps(data)
    other = json.dumps({key: "changed" if not isinstance(value, dict) else {**value,
                                                                            "median": 1.0}})
    at = text.index(f'"{section}": {{') + len(f'"{section}": {{')
    return text[:at] + other[1:-1] + ", " + text[at:]


def test_a_key_given_twice_in_any_json_file_is_refused(tmp_path, tiny_lut_data, space,
                                                       tiny_lut_file):
    """A table entry given twice was read silently with its last value; every JSON file
    fbnas reads (tables, device results, architecture files, manifests) is refused instead."""
    from fbnas.io import parse_json
    from fbnas.latency import device_runner as runner
    from tests.conftest import bench_on_path

    bench_on_path()
    from groundtruth import load_truth

    table = tmp_path / "t.json"
    table.write_text(_key_twice(tiny_lut_data, "entries"))
    key = next(iter(tiny_lut_data["entries"]))
    assert_user_error(cli("show-lut", table), "t.json", f"gives the key {key!r} twice",
                      "keep one")
    arch = _arch(tmp_path, space, tiny_lut_file)
    defn = read_json(arch, "arch")
    arch.write_text(_key_twice(defn, "input"))
    assert_user_error(cli("summary", arch), "arch.json", "twice")
    bench = tmp_path / "nas-bench-macro_cifar10.json"
    bench.write_text('{"00000000": {"mean_acc": 90}, "00000000": {"mean_acc": 91}}')
    with pytest.raises(FbnasError, match="nas-bench-macro_cifar10.json gives the key "
                                         "'00000000' twice"):
        load_truth(tmp_path)
    with pytest.raises(FbnasError, match=r"x gives the key 'a' twice"):
        parse_json('[{"b": {"a": 1, "a": 1}}]', "x")  # nested, and even with one value
    (tmp_path / "manifest.json").write_text('{"schema": "a", "schema": "b"}')
    with pytest.raises(runner.RunnerError, match="manifest.json gives the key 'schema' twice"):
        runner.read_manifest(str(tmp_path))


def test_a_huge_value_is_cut_in_the_error_that_echoes_it(tmp_path, tiny_lut_data):
    """A 50 MB string in a table gave a 52 MB "one-line" error."""
    big = "x" * 5_000_000

    def huge(d):
        next(iter(d["entries"].values()))["c_in"] = big
    r = cli("show-lut", _table(tmp_path, tiny_lut_data, "t.json", huge))
    assert_user_error(r, "t.json", "must be a positive integer", "(5,000,000 characters)")
    assert len(r.stderr) < 400
    r = cli("train", "--set", f"loss.form={big[:100_000]}", "--out", tmp_path / "run")
    assert r.exit_code == 2 and "(100,000 characters)" in r.output and len(r.output) < 400


def test_errors_and_warnings_are_capped_where_they_are_printed(capsys):
    """The last resort for a value echoed without errors.brief: long runs are cut with their
    length, and a line still too long keeps its start and its end, where the fix is."""
    from click.testing import CliRunner

    from fbnas.cli import main
    from fbnas.errors import MAX_LINE, brief, capped, warn_stderr

    assert brief("a" * 10) == repr("a" * 10)
    assert brief("a" * 1000).endswith("... (1,000 characters)") and len(brief("a" * 1000)) < 100
    assert brief(list(range(1000))).endswith("characters)")
    assert capped("short") == "short"
    line = capped("bad value " + "y" * 10**6 + " (edited?); pass --force")
    assert line.endswith("(1,000,000 characters) (edited?); pass --force") and len(line) < 200
    line = capped("word " * 10**5 + "pass --force")
    assert len(line) <= MAX_LINE + 60 and line.endswith("pass --force")
    assert "characters left out" in line
    warn_stderr("measured on " + "z" * 10**6)
    assert len(capsys.readouterr().err) < 200

    @main.command("fail-long")
    def fail_long():
        raise FbnasError("it is " + "q" * 10**6 + " and should not be; fix it")
    try:
        r = CliRunner().invoke(main, ["fail-long"])
    finally:
        main.commands.pop("fail-long")
    assert_user_error(r, "(1,000,000 characters) and should not be; fix it")
    r = cli("train", "--target-ms", "x" * 100_000)  # click's own refusal echoes the value
    assert r.exit_code == 2 and "characters) is not a valid float" in r.output
    assert len(r.output) < 1000


def test_a_table_of_absurd_medians_is_refused(tmp_path, tiny_lut_data):
    """1e308 us entries summed to "inf .. inf ms"."""
    def absurd(d):
        for e in d["entries"].values():
            e["median"] = 1e308
    assert_user_error(cli("show-lut", _table(tmp_path, tiny_lut_data, "t.json", absurd)),
                      "not a measurement")


def test_a_calibration_that_predicts_negative_latency_is_refused(tmp_path, tiny_lut_data):
    """sample wrote "predicted latency -1000.0 us"."""
    path = _table(tmp_path, tiny_lut_data, "t.json",
                  lambda d: d.update(calibration={"a": 1.0, "b": -1e9}))
    assert_user_error(cli("show-lut", path), "fastest network", "fbnas calibrate")


# --------------------------------------------------------------------------- size limits


@pytest.mark.parametrize("field,change", [
    ("stem.channels", lambda d: (d["stem"].update(channels=10 ** 6),
                                 d["blocks"][0].update(c_in=10 ** 6))),
    ("input.resolution", lambda d: d["input"].update(resolution=10 ** 9)),
    ("stem.kernel", lambda d: d["stem"].update(kernel=10 ** 6 + 1)),
    ("blocks[3].c_out", lambda d: d["blocks"][3].update(c_out=10 ** 6)),
])
@pytest.mark.parametrize("command", ["summary", "latency", "export"])
def test_oversized_definitions_are_refused_on_reading(tmp_path, space, tiny_lut_file, field,
                                                      change, command):
    arch = _arch(tmp_path, space, tiny_lut_file, change=change)
    extra = {"export": ["--random-weights", "--format", "pt2", "--out", tmp_path / "m.pt2"],
             "latency": ["--rounds", 1]}.get(command, [])
    started = time.monotonic()
    assert_user_error(cli(command, arch, *extra), field, "above fbnas's limit")
    _fast(started)


@pytest.mark.parametrize("change,message", [
    (lambda d: d["stem"].update(channels=10 ** 6), "stem.channels is 1000000"),
    (lambda d: d["stages"][0].update(channels=20000), "stages[0].channels is 20000"),
    (lambda d: d["input"].update(resolution=10 ** 9), "input.resolution is 1000000000"),
    (lambda d: d["stem"].update(kernel=10 ** 6 + 1), "stem.kernel is 1000001"),
    (lambda d: d["stem"].update(kernel=4), "stem.kernel must be odd"),
    (lambda d: d["stages"][0].update(blocks=10 ** 6), "above fbnas's limit of 1000"),
    (lambda d: d.update(candidates=["k33_e1"]), "kernel size 33"),
    (lambda d: d.update(candidates=["k3_e5000"]), "expands"),
    (lambda d: (d["input"].update(resolution=4096), d["stem"].update(channels=16384)),
     "feature map"),
])
def test_oversized_spaces_are_refused_on_reading(tmp_path, space, change, message):
    raw = copy.deepcopy(space.raw)
    change(raw)
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(raw))
    started = time.monotonic()
    assert_user_error(cli("profile", "--space", path, "--out", tmp_path / "t.json"), message)
    _fast(started)
    assert not (tmp_path / "t.json").exists()


# --------------------------------------------------------------------------- checkpoints


def _resumable(tmp_path, tiny_lut_file, space, theta=None):
    """A run folder whose search checkpoint passes every check up to resuming its weights."""
    cfg = load_config("tiny", [f"lut={tiny_lut_file}", f"data.dir={tmp_path / 'no-data'}"])
    theta = theta if theta is not None else peaked_theta(space, HARD)
    model = {f"layers.{i}.theta": t.clone() for i, t in enumerate(theta)}
    model["stem.0.weight"] = torch.zeros(space.stem_channels, 3, 3, 3)
    return make_run(tmp_path, space, tiny_lut_file, theta=theta, config=cfg.to_dict(),
                    model=model, lut_hash=file_hash(tiny_lut_file))


def _resume(run):
    return cli("train", "--out", run, "--resume")


def test_resume_from_checkpoint_lacking_theta(tmp_path, tiny_lut_file, space):
    run = _resumable(tmp_path, tiny_lut_file, space)
    path = run / "checkpoints" / "last.pt"
    ck = torch.load(path, weights_only=True)
    ck["model"] = {k: v for k, v in ck["model"].items() if not k.endswith("theta")}
    torch.save(ck, path)
    started = time.monotonic()
    assert_user_error(_resume(run), "cannot resume", "lack theta (0 of 4 layers", "--force")
    _fast(started)
    del ck["theta"]
    torch.save(ck, path)
    assert_user_error(_resume(run), "lacks 'theta'")


def test_resume_with_a_swapped_table_copy_names_the_fix(tmp_path, tiny_lut_file, space):
    """The run's copy of its table replaced by another: refused, and the error said no fix."""
    run = _resumable(tmp_path, tiny_lut_file, space)
    (run / "lut.json").write_text(tiny_lut_file.read_text() + "\n")
    assert_user_error(_resume(run), "cannot resume", "differs from the one the run started "
                      "with", f"put that table back as {run / 'lut.json'}",
                      "or start over with --force")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_theta_is_refused(tmp_path, tiny_lut_file, space, value):
    theta = peaked_theta(space, HARD)
    theta[2][1] = value
    run = make_run(tmp_path, space, tiny_lut_file, theta=theta)
    fix = "theta of layer 2 is not finite; the search diverged"
    assert_user_error(cli("sample", run, "--hard"), fix, "optim.theta.lr")
    assert not (run / "arch.json").exists()
    resumable = _resumable(tmp_path / "r", tiny_lut_file, space, theta=theta)
    assert_user_error(_resume(resumable), "cannot resume", fix)


def test_finished_run_with_non_finite_weights_is_not_resumed(tmp_path, tiny_lut_file, space):
    run = _resumable(tmp_path, tiny_lut_file, space)
    path = run / "checkpoints" / "last.pt"
    ck = torch.load(path, weights_only=True)
    ck["epoch"] = 99  # finished: resuming would only report
    ck["model"]["stem.0.weight"][0, 0, 0, 0] = float("nan")
    torch.save(ck, path)
    assert_user_error(_resume(run), "cannot resume", "weights are not finite", "stem.0.weight")


def test_export_refuses_non_finite_weights(tmp_path, space, tiny_lut_file):
    from fbnas.arch.model import Network

    arch = _arch(tmp_path, space, tiny_lut_file)
    state = Network(read_json(arch, "arch")).state_dict()
    state["head.fc.weight"][0, 0] = float("inf")
    torch.save(state, tmp_path / "w.pt")
    assert_user_error(cli("export", arch, "--weights", tmp_path / "w.pt", "--format", "pt2",
                          "--out", tmp_path / "m.pt2"), "head.fc.weight", "not finite")
    assert not (tmp_path / "m.pt2").exists()


class _Mkdir:
    """Unpickled, this would create a folder: harmless, and visible if it ever ran."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (os.mkdir, (self.path,))


class _Print:
    def __reduce__(self):
        return (print, ("code from the checkpoint ran",))


def test_crafted_pickle_is_refused_by_name_and_never_runs(tmp_path, space, tiny_lut_file,
                                                          capfd):
    marker = tmp_path / "ran"
    arch = _arch(tmp_path, space, tiny_lut_file)
    for payload, named in ((_Print(), "GLOBAL print"),
                           (_Mkdir(marker), f"GLOBAL {os.mkdir.__module__}.mkdir")):
        evil = tmp_path / "evil.pt"
        torch.save({"format": "fbnas.checkpoint/1", "kind": "search", "x": payload}, evil)
        raw = tmp_path / "raw.pt"
        raw.write_bytes(pickle.dumps(payload, protocol=2))
        for path in (evil, raw):
            assert_user_error(cli("sample", path), f"checkpoint {path}", named, "weights-only",
                              "ran nothing")
        assert_user_error(cli("export", arch, "--weights", evil, "--format", "pt2", "--out",
                              tmp_path / "m.pt2"), named)
    assert not marker.exists()
    out, err = capfd.readouterr()
    assert "code from the checkpoint ran" not in out + err


def test_resume_from_a_checkpoint_without_its_space(tmp_path, tiny_lut_file):
    import torch

    from fbnas.runs.checkpoint import load_checkpoint, save_checkpoint
    from fbnas.search.run import run_search
    from tests.whole.test_search import quiet, small_config

    cfg = small_config(tiny_lut_file, **{"data.limit": 200})
    run_search(cfg, tmp_path / "run", stop_after=1, echo=quiet)
    last = tmp_path / "run" / "checkpoints" / "last.pt"
    ck = load_checkpoint(last)
    del ck["space"], ck["space_hash"]
    save_checkpoint(ck, last)
    with pytest.raises(FbnasError, match="different space .not recorded") as e:
        run_search(cfg, tmp_path / "run", resume=True, echo=quiet)
    assert "\n" not in str(e.value)
    assert torch.load(last, weights_only=True)["epoch"] == 1


# --------------------------------------------------------------------------- output paths


def test_outputs_under_a_file_fail_before_any_work(tmp_path, tiny_lut_file, space, monkeypatch):
    import fbnas.latency.lut

    def no_profiling(*a, **k):
        raise AssertionError("profiled before checking --out")

    monkeypatch.setattr(fbnas.latency.lut, "profile_space", no_profiling)
    (tmp_path / "file").write_text("x")
    under = tmp_path / "file" / "sub"
    started = time.monotonic()
    assert_user_error(cli("profile", "--space", "tiny", "--out", under / "t.json"),
                      "is a file, not a folder", "pick another --out")
    _fast(started)
    run = make_run(tmp_path, space, tiny_lut_file)
    assert_user_error(cli("sample", run, "--hard", "--out", under / "a.json"),
                      "is a file, not a folder")
    arch = _arch(tmp_path, space, tiny_lut_file)
    assert_user_error(cli("export", arch, "--random-weights", "--format", "pt2", "--out",
                          under / "m.pt2"), "is a file, not a folder")


def test_unwritable_out_folder_fails_before_profiling(tmp_path, tiny_lut_file, monkeypatch):
    import tempfile

    import fbnas.latency.lut

    monkeypatch.setattr(fbnas.latency.lut, "profile_space",
                        lambda *a, **k: pytest.fail("profiled before checking --out"))
    ro = tmp_path / "ro"
    ro.mkdir()
    real = tempfile.mkstemp

    def refuse(*args, dir=None, **kwargs):  # a read-only folder, even for root
        if dir is not None and os.path.samefile(dir, ro):
            raise PermissionError(13, "Permission denied")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    assert_user_error(cli("profile", "--space", "tiny", "--out", ro / "new" / "t.json"),
                      f"folder {ro} does not accept new files (Permission denied)",
                      "make the folder writable")
    lut = ro / "t.json"
    lut.write_text(tiny_lut_file.read_text())
    assert_user_error(cli("calibrate", lut, "--networks", 5, "--fit", 3), "--dry-run")
    assert "calibration" not in json.loads(lut.read_text())


def test_an_out_path_longer_than_the_file_system_allows(tmp_path, tiny_lut_file):
    out = tmp_path / ("x" * 300) / "run"
    r = cli("train", "--space", "tiny", "--lut", tiny_lut_file, "--out", out)
    assert_user_error(r, "name too long", "--out")


# --------------------------------------------------------------------------- options


def test_negative_seed_draws_like_any_other(tmp_path, space, tiny_lut_file):
    run = make_run(tmp_path, space, tiny_lut_file)
    r = cli("sample", run, "--num", 3, "--seed", -5)
    assert r.exit_code == 0, r.output
    assert any(n.startswith("search_seed-5_") for n in
               read_json(run / "arch.json", "arch")["architectures"])


def test_huge_batch_is_a_usage_error_before_allocating(tmp_path, space, tiny_lut_file):
    started = time.monotonic()
    r = cli("profile", "--space", "tiny", "--batch", 10 ** 8, "--out", tmp_path / "t.json")
    assert r.exit_code == 2 and "--batch" in r.output and "1024" in r.output
    r = cli("latency", _arch(tmp_path, space, tiny_lut_file), "--batch", 10 ** 8)
    assert r.exit_code == 2 and "--batch" in r.output
    _fast(started)


@pytest.mark.parametrize("option,value", [("--block-time", "inf"), ("--extra-time", "nan"),
                                          ("--block-time", "nan")])
def test_profile_timing_options_must_be_finite(tmp_path, option, value):
    r = cli("profile", "--space", "tiny", "--out", tmp_path / "t.json", option, value)
    assert r.exit_code == 2 and "Traceback" not in r.output and option in r.output
    assert not (tmp_path / "t.json").exists()


def test_an_accumulate_no_epoch_reaches_is_refused(tmp_path, tiny_lut_file):
    """search.accumulate: 1000000 exited 0 without one optimizer step."""
    from fbnas.search.run import run_search
    from tests.whole.test_search import quiet, small_config

    cfg = small_config(tiny_lut_file, **{"search.accumulate": 1000000,
                                         "search.alternation": "step"})
    with pytest.raises(UsageError, match=r"search.accumulate \(1000000\) is above the \d+ "
                                         r"weight batches.*--set search.accumulate=\d+"):
        run_search(cfg, tmp_path / "run", echo=quiet)
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- data


def test_cifar_labels_that_are_not_integers_are_refused(tmp_path):
    """1.7 was read as class 1."""
    import pickle

    import numpy as np

    from fbnas.data.memory import load_dataset

    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        with open(folder / name, "wb") as f:
            pickle.dump({"data": np.zeros((3, 3072), dtype=np.uint8), "labels": [0, 1.7, 2]}, f)
    with pytest.raises(FbnasError, match="'labels' is not a list of integers"):
        load_dataset(tmp_path)


def _claiming_jpeg(path, side: int) -> None:
    """A 8x8 JPEG whose header (the SOF0 marker) claims ``side`` x ``side`` pixels."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 0, 0)).save(buf, "JPEG")
    data = bytearray(buf.getvalue())
    at = data.index(b"\xff\xc0") + 5
    data[at:at + 4] = side.to_bytes(2, "big") * 2
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("side", [13_000, 20_000])
def test_an_image_whose_header_claims_too_many_pixels_is_refused(tmp_path, side, recwarn):
    """A JPEG claiming 13000x13000 was trained on, with Pillow's raw DecompressionBombWarning
    printed once per worker (20000x20000 stopped with its error); fbnas refuses both in its
    own line naming the file and the limit, or skips them under data.skip_bad."""
    from PIL import Image

    from fbnas.data.folders import (MAX_IMAGE_PIXELS, check_header, open_image, open_rgb,
                                    scan_folder)
    from fbnas.data.memory import load_dataset, load_image_folder

    for cls in ("a", "b"):
        (tmp_path / "train" / cls).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (40, 40)).save(tmp_path / "train" / cls / f"{i}.png")
    bomb = tmp_path / "train" / "b" / "bomb.jpg"
    _claiming_jpeg(bomb, side)
    limit = f"more than the {MAX_IMAGE_PIXELS:,} (8192x8192) fbnas decodes"
    claim = rf"bomb.jpg claims .* pixels, {re.escape(limit)}.*skip_bad"
    with pytest.raises(FbnasError, match=claim):
        load_dataset(tmp_path, "folder", 32)
    data = load_image_folder(scan_folder(tmp_path, skip_bad=True), 32, skip_bad=True)
    assert len(data.train_labels) == 4 and any("bomb.jpg" in p for p, _ in data.skipped)
    assert limit in check_header(bomb)
    for opener in (open_image, open_rgb):
        with pytest.raises(ValueError, match=re.escape(limit)):
            opener(bomb)
    assert not [w for w in recwarn if issubclass(w.category, Image.DecompressionBombWarning)]
    r = cli("classes", tmp_path, "--num", 2, "--out", tmp_path / "list.txt")
    assert "Traceback" not in r.output and "DecompressionBomb" not in r.output


def test_pillows_own_lower_limit_is_refused_the_same_way(tmp_path, monkeypatch):
    """A process that lowered Pillow's limit: its warning and error become the refusal."""
    from PIL import Image

    from fbnas.data.folders import check_header

    Image.new("RGB", (60, 60)).save(tmp_path / "a.png")
    Image.new("RGB", (200, 200)).save(tmp_path / "b.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 2000)
    assert "claims 3,600 pixels, more than" in check_header(tmp_path / "a.png")  # a warning
    assert "claims 40,000 pixels, more than" in check_header(tmp_path / "b.png")  # an error


def test_classes_checks_both_targets_before_writing_anything(tmp_path, monkeypatch):
    """--link under a file failed after the class list was written; it is refused first, and a
    failure while linking removes what the links made."""
    root = tmp_path / "imagenet"
    for c in ("a", "b", "c"):
        (root / "train" / c).mkdir(parents=True)
    (tmp_path / "file").write_text("mine")
    before = sorted(p.name for p in tmp_path.iterdir())
    out = tmp_path / "list.txt"
    r = cli("classes", root, "--num", 2, "--out", out, "--link", tmp_path / "file" / "sub")
    assert_user_error(r, "file is a file, not a folder", "pick another --link")
    r = cli("classes", root, "--num", 2, "--out", tmp_path / "file" / "l.txt", "--link",
            tmp_path / "sub")
    assert_user_error(r, "is a file, not a folder", "pick another --out")
    assert sorted(p.name for p in tmp_path.iterdir()) == before

    def no_links(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(os, "symlink", no_links)
    r = cli("classes", root, "--num", 2, "--out", out, "--link", tmp_path / "new" / "sub")
    assert_user_error(r, "cannot make the class folder links", "pick another --link")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.slow  # reads the CIFAR-10 subset
def test_a_one_channel_space_on_rgb_data(tmp_path, cifar_subset):
    import yaml

    from fbnas.latency.lut import profile_space

    space = {"name": "gray", "input": {"channels": 1, "resolution": 32},
             "stem": {"channels": 8, "kernel": 3, "stride": 2},
             "stages": [{"channels": 8, "blocks": 1, "stride": 1}],
             "candidates": ["k3_e1", "skip"], "head": {"channels": 16, "classes": 10}}
    (tmp_path / "gray.yaml").write_text(yaml.safe_dump(space))
    from fbnas.arch.space import load_space

    write_json(tmp_path / "gray.json", profile_space(load_space(tmp_path / "gray.yaml"),
                                                     rounds=1, extra_rounds=0,
                                                     block_time=0.0005))
    r = cli("train", "--space", tmp_path / "gray.yaml", "--lut", tmp_path / "gray.json",
            "--data-dir", cifar_subset, "--out", tmp_path / "run", "--threads", 1)
    assert_user_error(r, "3 channels", "1-channel", "input channels: 3")
    assert not (tmp_path / "run").exists()


def test_a_file_name_too_long_is_refused_before_any_work(tmp_path):
    from fbnas.io import check_writable

    long_name = tmp_path / "new" / ("x" * 300 + ".json")
    with pytest.raises(FbnasError, match="longer than the .* bytes the file system allows; "
                                         "pick another --out"):
        check_writable(long_name)
    assert not (tmp_path / "new").exists()
    check_writable(tmp_path / "new" / ("x" * 200 + ".json"))  # within the limit: fine


def test_sample_bounds_the_number_of_draws(tmp_path):
    from click.testing import CliRunner

    from fbnas.cli import MAX_DRAWS, main

    r = CliRunner().invoke(main, ["sample", str(tmp_path), "--num", str(MAX_DRAWS + 1)])
    assert r.exit_code == 2 and f"1<=x<={MAX_DRAWS}" in r.output
    assert "Traceback" not in r.output


# --------------------------------------------------------------------------- numbers


@pytest.mark.parametrize("args", [
    ("train", "--target-ms", "1e308"),
    ("train", "--set", "loss.form=target", "--set", "loss.target_ms=1e308"),
    ("train", "--set", "loss.alpha=1e300"),
    ("profile", "--space", "tiny", "--extra-time", "1e9"),
])
def test_numbers_too_large_to_compute_with_are_refused_with_the_bound(tmp_path, args):
    """--target-ms 1e308 overflowed the budget's arithmetic (OverflowError in budget.py,
    ValueError in window.py); every float option and config key gets the one bound check."""
    started = time.monotonic()
    r = cli(*args, "--out", tmp_path / "out")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "must be at most" in r.output
    why = {"1e308": "1000 s per image", "1e300": "largest float32", "1e9": "a week"}
    assert why[args[-1].split("=")[-1]] in r.output
    _fast(started)
    assert not (tmp_path / "out").exists()


def test_a_budget_too_large_is_refused_by_sample_and_by_the_budget_itself(tmp_path, space,
                                                                         tiny_lut_file):
    from fbnas.config import MAX_BUDGET_MS, Budget

    run = make_run(tmp_path, space, tiny_lut_file)
    r = cli("sample", run, "--hard", "--target-ms", "1e308")
    assert r.exit_code == 2 and "at most 1e+06 ms" in r.output and "Traceback" not in r.output
    assert not (run / "arch.json").exists()
    with pytest.raises(UsageError, match="1000 s per image"):
        Budget(MAX_BUDGET_MS * 1.01)
    assert Budget(MAX_BUDGET_MS).us == MAX_BUDGET_MS * 1000
    r = cli("sample", run, "--hard", "--target-ms", MAX_BUDGET_MS, "--name", "any")
    assert r.exit_code == 0, r.output
