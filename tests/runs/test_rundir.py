"""The run directory and the run's logging, without training: what train checks before it
sets up, what it leaves behind when refused, and how sample and latency find a run's table."""

import json
import logging
import shutil

import pytest
import torch
from click.testing import CliRunner

from fbnas.arch.space import load_space
from fbnas.cli import main
from fbnas.config import load_config
from fbnas.errors import FbnasError
from fbnas.io import file_hash
from fbnas.runs.logs import LOGGER, run_log
from fbnas.runs.rundir import RunPaths, append_metrics, check_run_dir, write_metrics


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_check_run_dir_changes_nothing_on_disk(tmp_path):
    out = tmp_path / "a" / "b" / "run"
    assert check_run_dir(out, resume=False, force=False) == RunPaths(out)
    assert not (tmp_path / "a").exists()
    out.mkdir(parents=True)
    (out / "x").write_text("keep")
    with pytest.raises(FbnasError, match="--resume .*--force"):
        check_run_dir(out, resume=False, force=False)
    check_run_dir(out, resume=False, force=True)
    assert (out / "x").read_text() == "keep"  # cleared only once set-up has succeeded
    with pytest.raises(FbnasError, match="nothing to resume"):
        check_run_dir(out, resume=True, force=False)


def test_metrics_follow_the_history(tmp_path):
    paths = RunPaths(tmp_path)
    history = [{"epoch": 1, "val_top1": 10.5}, {"epoch": 2, "val_top1": 12.0}]
    write_metrics(paths, history)
    append_metrics(paths, {"epoch": 3, "val_top1": 13.0})
    lines = paths.metrics.read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2, 3]
    write_metrics(paths, history[:1])  # a resume from epoch 1 drops the later lines
    assert [json.loads(line) for line in paths.metrics.read_text().splitlines()] == history[:1]


def test_run_log_holds_lines_until_the_file_opens(tmp_path):
    echoed = []
    with run_log(echoed.append) as log:
        LOGGER.info("set-up line")
        log.open(tmp_path / "train.log")
        logging.getLogger("fbnas.runs.trainer").info("epoch line")
        logging.getLogger("fbnas.runs.trainer").warning("warning: a warning")
    LOGGER.info("after the run")
    lines = (tmp_path / "train.log").read_text().splitlines()
    assert [line[20:] for line in lines] == ["set-up line", "epoch line", "warning: a warning"]
    assert lines[0][4] == "-" and lines[0][19] == " "  # "YYYY-mm-dd HH:MM:SS " stamps
    assert echoed == ["set-up line", "epoch line", "warning: a warning"]
    assert not LOGGER.handlers and LOGGER.level == logging.NOTSET


def test_a_user_can_silence_the_fbnas_logger(tmp_path):
    LOGGER.setLevel(logging.WARNING)
    try:
        echoed = []
        with run_log(echoed.append) as log:
            log.open(tmp_path / "train.log")
            LOGGER.info("epoch line")
            LOGGER.warning("warning: kept")
        assert echoed == ["warning: kept"]
    finally:
        LOGGER.setLevel(logging.NOTSET)


def train_args(tmp_path, lut, *extra):
    return ["train", "--space", "tiny", "--lut", lut, "--data-dir", tmp_path / "no-data",
            "--out", tmp_path / "runs" / "run", "--threads", 1, *extra]


@pytest.mark.parametrize("bad,message", [
    ({"lut": "missing.json"}, "fbnas profile"),  # refused while loading the table
    ({}, "no-data"),  # refused while loading the data, after the table
])
def test_refused_train_leaves_no_run_directory(tmp_path, tiny_lut_file, bad, message):
    lut = tmp_path / bad.get("lut", tiny_lut_file)
    r = cli(*train_args(tmp_path, lut))
    assert r.exit_code == 1 and message in r.output and "Traceback" not in r.output
    assert not (tmp_path / "runs").exists()


def test_epochs_below_weights_only_epochs_name_the_fix(tmp_path, tiny_lut_file):
    r = cli(*train_args(tmp_path, tiny_lut_file, "--epochs", 5, "--set",
                        "search.warmup_epochs=9"))
    assert r.exit_code != 0 and "Traceback" not in r.output
    err = r.output.strip()
    assert len(err.splitlines()) == 1 and "search.warmup_epochs (9)" in err
    fix = err.split("--set ")[1].split()[0]
    assert fix == "search.warmup_epochs=0"
    cfg = load_config(None, ["space=tiny", "search.epochs=5", "search.warmup_epochs=9", fix])
    assert cfg.warmup_epochs == 0
    assert not (tmp_path / "runs").exists()
    # the bundled config's 9 weights-only epochs (of 90) against --epochs 8
    r = cli("train", "--config", "fbnet_cifar", "--epochs", 8, "--out", tmp_path / "x")
    assert r.exit_code != 0 and "--set search.warmup_epochs=1" in r.output


def fake_search_run(tmp_path, lut_file):
    """A run folder as fbnas train leaves it (checkpoint and table copy), without training."""
    space = load_space("tiny")
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    theta = [torch.zeros(len(layer.candidates)) for layer in space.layers]
    torch.save({"format": "fbnas.checkpoint/1", "kind": "search", "epoch": 2, "config": {},
                "space": space.raw, "space_hash": space.hash, "lut_path": str(lut_file),
                "lut_hash": file_hash(lut_file), "theta": theta, "model": {}},
               run / "checkpoints" / "last.pt")
    shutil.copyfile(lut_file, run / "lut.json")
    return run


def test_sample_and_latency_use_the_runs_table_copy(tmp_path, tiny_lut_file, monkeypatch):
    run = fake_search_run(tmp_path, tiny_lut_file)
    tiny_lut_file.unlink()
    r = cli("sample", run, "--hard")
    assert r.exit_code == 0, r.output
    entry = json.loads((run / "arch.json").read_text())["architectures"]["run_hard"]
    assert entry["source"]["lut"] == str(run / "lut.json")
    assert entry["source"]["lut_hash"] == entry["source"]["search_lut_hash"]
    # the run directory moved: summary still finds the table next to arch.json
    moved = tmp_path / "moved"
    run.rename(moved)
    r = cli("summary", moved / "arch.json")
    assert r.exit_code == 0, r.output
    assert "total" in r.output and "does not exist" not in r.output


def test_runs_from_before_shared_weights_resume_with_independent_weights(tmp_path):
    """A checkpoint's config without search.shared_weights was written when every candidate
    had its own weights; resuming it must build that supernet, not the current default."""
    from fbnas.runs.checkpoint import CHECKPOINT_FORMAT, save_checkpoint
    from fbnas.runs.rundir import resume_config

    cfg = load_config(None, ["space=tiny", "search.shared_weights=true"]).to_dict()
    paths = RunPaths(tmp_path)
    paths.last.parent.mkdir(parents=True)
    save_checkpoint({"format": CHECKPOINT_FORMAT, "kind": "search", "config": cfg}, paths.last)
    assert resume_config(tmp_path)["search"]["shared_weights"] is True
    del cfg["search"]["shared_weights"]
    save_checkpoint({"format": CHECKPOINT_FORMAT, "kind": "search", "config": cfg}, paths.last)
    assert resume_config(tmp_path)["search"]["shared_weights"] is False


def test_a_run_directory_name_too_long_leaves_no_folders(tmp_path):
    from fbnas.runs.rundir import RunLock, RunPaths

    out = tmp_path / "new" / "sub" / ("y" * 300)
    with pytest.raises(FbnasError, match="cannot use .* as the run directory: .*pick another "
                                         "--out"):
        RunLock(RunPaths(out))
    assert not (tmp_path / "new").exists()
