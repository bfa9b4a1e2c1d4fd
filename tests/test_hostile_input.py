"""Inputs that break parsers or optimizers rather than fbnas's own checks: each is a
one-line error naming the key or file, never a traceback, and never silently accepted."""

from __future__ import annotations

import pytest

from fbnas.config import load_config
from fbnas.errors import FbnasError, UsageError
from fbnas.io import write_json
from tests.arch.test_arch import assert_user_error, cli

HUGE = "9" * 5000  # beyond Python's 4300-digit conversion limit


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


@pytest.mark.parametrize("text,what", [
    ('{"schema": ' + HUGE + '}', "digits"),
    ("[" * 100000 + "]" * 100000, "nested"),
])
def test_unreadable_numbers_and_nesting_in_a_table_or_definition(tmp_path, text, what):
    path = tmp_path / "t.json"
    path.write_text(text)
    assert_user_error(cli("show-lut", path), "t.json", what)
    assert_user_error(cli("summary", path), "t.json", what)


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


# --------------------------------------------------------------------------- tables


def _table(tmp_path, tiny_lut_data, change):
    import copy

    data = copy.deepcopy(tiny_lut_data)
    change(data)
    path = tmp_path / "t.json"
    write_json(path, data)
    return path


def test_a_table_of_absurd_medians_is_refused(tmp_path, tiny_lut_data):
    """1e308 us entries summed to "inf .. inf ms"."""
    def absurd(d):
        for e in d["entries"].values():
            e["median"] = 1e308
    assert_user_error(cli("show-lut", _table(tmp_path, tiny_lut_data, absurd)),
                      "not a measurement")


def test_a_calibration_that_predicts_negative_latency_is_refused(tmp_path, tiny_lut_data):
    """sample wrote "predicted latency -1000.0 us"."""
    path = _table(tmp_path, tiny_lut_data,
                  lambda d: d.update(calibration={"a": 1.0, "b": -1e9}))
    assert_user_error(cli("show-lut", path), "fastest network", "fbnas calibrate")


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


def test_an_image_too_large_to_open_safely_names_the_file(tmp_path, monkeypatch):
    """A 20000x20000 PNG stopped with Pillow's DecompressionBombError; the limit is lowered
    here so that the test need not write one."""
    from PIL import Image

    from fbnas.data.memory import load_dataset

    for cls in ("a", "b"):
        (tmp_path / "train" / cls).mkdir(parents=True)
        Image.new("RGB", (40, 40)).save(tmp_path / "train" / cls / "small.png")
    Image.new("RGB", (200, 200)).save(tmp_path / "train" / "b" / "huge.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 4000)  # errors above twice this
    with pytest.raises(FbnasError, match="huge.png has more pixels than Pillow opens safely"):
        load_dataset(tmp_path, "folder", 32)


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


# --------------------------------------------------------------------------- command line


def test_an_out_path_longer_than_the_file_system_allows(tmp_path, tiny_lut_file):
    out = tmp_path / ("x" * 300) / "run"
    r = cli("train", "--space", "tiny", "--lut", tiny_lut_file, "--out", out)
    assert_user_error(r, "name too long", "--out")


@pytest.mark.parametrize("option,value", [("--block-time", "inf"), ("--extra-time", "nan"),
                                          ("--block-time", "nan")])
def test_profile_timing_options_must_be_finite(tmp_path, option, value):
    r = cli("profile", "--space", "tiny", "--out", tmp_path / "t.json", option, value)
    assert r.exit_code == 2 and "Traceback" not in r.output and option in r.output
    assert not (tmp_path / "t.json").exists()


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
