"""The library functions behind the small commands, called without the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from fbnas.errors import FbnasError, UsageError
from fbnas.io import write_json
from fbnas.latency.fidelity import calibrate_table_file
from fbnas.latency.lut import show_table
from fbnas.latency.arch_reports import summary_text
from fbnas.data.class_subset import write_class_subset
from fbnas.runs.dist import leave_if_child
from fbnas.runs.run_config import run_config
from fbnas.search.sample_file import sample_to_file


def test_run_config_takes_typed_options_and_leaves_out_those_not_given(tmp_path):
    cfg = run_config("tiny", tmp_path / "run", overrides=("run.seed=3",), download=True,
                     options={"data.dir": "2024", "run.seed": 3, "search.epochs": None})
    assert cfg.data.dir == "2024" and cfg.data.download is True
    assert cfg.run.seed == 3  # --set may repeat a named option's value
    with pytest.raises(UsageError, match="--set 'run.seed=4' contradicts --seed"):
        run_config("tiny", tmp_path / "run", overrides=("run.seed=4",), options={"run.seed": 3})
    assert cfg.search.epochs == 2  # the file's, as the option was not given
    with pytest.raises(UsageError, match="pick one"):
        run_config("tiny", tmp_path / "run", resume=True, force=True)


def test_write_class_subset_writes_the_seeded_draw_and_links(tmp_path):
    root = tmp_path / "imagenet"
    for c in ("a", "b", "c", "d"):
        (root / "train" / c).mkdir(parents=True)
    lines = []
    names = write_class_subset(root, 2, 1, tmp_path / "list.txt", link=tmp_path / "sub",
                               echo=lines.append)
    assert names == write_class_subset(root, 2, 1, tmp_path / "again.txt", echo=lines.append)
    assert (tmp_path / "list.txt").read_text().splitlines()[1:] == names
    assert sorted(p.name for p in (tmp_path / "sub" / "train").iterdir()) == names
    assert lines[0] == f"wrote {tmp_path / 'list.txt'}: 2 classes of {root}, seed 1"
    with pytest.raises(UsageError, match="already exists"):
        write_class_subset(root, 2, 1, tmp_path / "x.txt", link=tmp_path / "sub")


def test_show_table_returns_the_summary(tiny_lut_file):
    text = show_table(tiny_lut_file, "tiny")
    assert "fastest non-skip" in text
    with pytest.raises(FbnasError):
        show_table(tiny_lut_file, "fbnet_cifar")


def test_calibrate_table_file_refuses_before_timing(tiny_lut_file):
    with pytest.raises(FbnasError, match="must be smaller"):
        calibrate_table_file(tiny_lut_file, networks=5, fit=5)


def test_summary_text_of_a_bundled_network():
    assert "fbnet_a" in summary_text(Path("fbnet_a"))


def test_sample_to_file_refuses_contradicting_settings_before_reading(tmp_path):
    with pytest.raises(UsageError, match="--hard gives one"):
        sample_to_file(tmp_path / "none", hard=True, num=2)
    with pytest.raises(UsageError, match="add --hard"):
        sample_to_file(tmp_path / "none", target_ms=1.0)


def test_leave_if_child_returns_outside_torchrun(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    leave_if_child()
    monkeypatch.setenv("WORLD_SIZE", "1")
    leave_if_child()


def test_export_command_refuses_contradicting_options_before_reading(tmp_path):
    from fbnas.runs.deploy import export_command

    arch, out = tmp_path / "none.json", tmp_path / "m.onnx"
    with pytest.raises(UsageError, match="--random-weights"):
        export_command(arch, None, out, "onnx", weights=None, random_weights=False)
    with pytest.raises(UsageError, match="use --format onnx"):
        export_command(arch, None, out, "pt2", None, True, precision="int8", data_dir="d")
    with pytest.raises(UsageError, match="give --data-dir"):
        export_command(arch, None, out, "onnx", None, True, precision="int8")
    # an int8 option given without int8, even at its default value
    with pytest.raises(UsageError, match="^--calibration-images calibrates int8"):
        export_command(arch, None, out, "onnx", None, True, calibration_images=256)
    assert not out.exists()


def test_retrain_command_needs_an_architecture_unless_it_resumes(tmp_path):
    from fbnas.runs.retrain import retrain_command

    with pytest.raises(UsageError, match="give ARCH"):
        retrain_command(None, "tiny", tmp_path / "run", False, False, (), False, {})
    assert not (tmp_path / "run").exists()


def test_relaunch_rebuilds_the_command_line_and_refuses_inside_torchrun(monkeypatch):
    from fbnas.runs import dist

    started = []
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(dist, "launch", lambda n, args, threads: started.append((n, args)) or 0)
    options = [("--config", "tiny"), ("--epochs", 2), ("--resume", True), ("--force", False),
               ("--set", ("a=1", "b=2")), ("--seed", None), ("--device", ())]
    assert dist.relaunch("train", options, 2) == 0
    assert started == [(2, ["train", "--config", "tiny", "--epochs", "2", "--resume",
                            "--set", "a=1", "--set", "b=2"])]
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UsageError, match="inside torchrun leave it out"):
        dist.relaunch("train", options, 2)
