"""One writer per run directory, and nothing a killed run left half-done stays that way."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fbnas.errors import FbnasError
from fbnas.runs.rundir import RunLock, RunPaths
from fbnas.search.run import run_search
from tests.runs.test_rundir import cli, train_args
from tests.whole.test_search import quiet, small_config


def test_a_locked_run_directory_refuses_a_second_writer(tmp_path, tiny_lut_file):
    paths = RunPaths(tmp_path / "runs" / "run")
    lock = RunLock(paths)
    try:
        with pytest.raises(FbnasError, match=f"in use by another fbnas process .pid {os.getpid()}"):
            RunLock(paths)
        r = cli(*train_args(tmp_path, tiny_lut_file))  # the lock is taken before any data
        assert r.exit_code == 1 and "in use by another fbnas process" in r.output
        assert len(r.output.strip().splitlines()) == 1
        r = cli(*train_args(tmp_path, tiny_lut_file, "--resume"))
        assert r.exit_code == 1
    finally:
        lock.release()
    # unlocked, and the folders the lock made for a run that never started are gone
    assert not (tmp_path / "runs").exists()
    RunLock(paths).release()


def test_a_refused_run_keeps_a_folder_it_did_not_make(tmp_path, tiny_lut_file):
    (tmp_path / "runs" / "run").mkdir(parents=True)
    r = cli(*train_args(tmp_path, tiny_lut_file))  # refused: there is no data folder
    assert r.exit_code == 1 and "no-data" in r.output
    assert (tmp_path / "runs" / "run").is_dir()


@pytest.mark.slow
def test_two_trains_started_together_on_one_folder(tmp_path, tiny_lut_file):
    """Both used to exit 0, one result lost and every epoch twice in metrics.jsonl."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "fbnas", "train", "--space", "tiny", "--lut",
           str(tiny_lut_file), "--data-dir", str(small_config(tiny_lut_file).data.dir),
           "--out", str(out), "--threads", "1", "--epochs", "2", "--set", "data.limit=400",
           "--set", "search.warmup_epochs=0", "--set", "run.progress=false"]
    procs = [subprocess.Popen([*cmd, "--seed", str(seed)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              cwd=Path(__file__).resolve().parents[2]) for seed in (0, 1)]
    results = [(p.wait(timeout=600), p.stdout.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes[0] == 0 and codes[1] != 0, results
    loser = next(text for code, text in results if code)
    assert "in use by another fbnas process" in loser or "not empty" in loser, loser
    assert "Traceback" not in loser
    epochs = [json.loads(line)["epoch"] for line in (out / "metrics.jsonl").open()]
    assert epochs == [1, 2]


def test_resume_clears_temporaries_and_draws_the_missing_picture(tmp_path, tiny_lut_file):
    """A kill between an epoch's checkpoint and its pictures left a temporary file and a
    picture that no later epoch draws."""
    # 200 images: 4 weight batches and 1 theta batch an epoch draw the same pictures
    cfg = small_config(tiny_lut_file, **{"data.limit": 200})
    out = tmp_path / "run"
    run_search(cfg, out, stop_after=1, echo=quiet)
    pictures = out / "pictures"
    (pictures / "theta_epoch001.png").unlink()
    stale = pictures / ".theta_epoch001.png.x1y2.tmp"
    stale.write_bytes(b"half a png")
    (out / "checkpoints" / ".last.pt.a7.tmp").write_bytes(b"half a checkpoint")
    run_search(cfg, out, resume=True, echo=quiet)
    assert (pictures / "theta_epoch001.png").is_file()
    assert (pictures / "theta_epoch002.png").is_file()
    assert not list(out.rglob("*.tmp"))
