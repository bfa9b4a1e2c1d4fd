"""A 2-process gloo search on the CPU, launched the way a user launches it."""

import subprocess
import sys

import pytest

from fbnas.runs.checkpoint import load_checkpoint
from tests.conftest import CIFAR_SUBSET, REPO

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("cifar_subset")]


def fbnas(*args, timeout=300):
    r = subprocess.run([sys.executable, "-m", "fbnas", *map(str, args)], cwd=REPO,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # no torch warnings for the user to read (DDP's about gradient strides once printed
    # five lines a process)
    assert "UserWarning" not in r.stderr, r.stderr[-3000:]
    return r.stdout


def test_two_process_search_keeps_ranks_identical_and_resumes(tmp_path):
    run = tmp_path / "ddp"
    out = fbnas("train", "--config", "configs/tiny.yaml", "--data-dir", CIFAR_SUBSET, "--out", run,
                "--nproc", 2, "--set", "data.limit=600", "--set", "data.batch_size=32",
                "--set", "search.warmup_epochs=0", "--epochs", 1)
    assert "2 process(es)" in out
    assert out.count("done: 1 epochs") == 1  # only rank 0 reports
    assert (run / "config.yaml").is_file() and (run / "train.log").is_file()
    assert list((run / "tensorboard").iterdir())
    ckpt = load_checkpoint(run)  # weights_only=True
    assert ckpt["world_size"] == 2
    # every epoch compares a digest of all weights, theta and BN buffers across the ranks
    assert [h["ranks_identical"] for h in ckpt["history"]] == [True]
    assert any(float(t.abs().max()) > 0 for t in ckpt["theta"])
    # the held-out and test images are split across ranks without repeats
    assert "on 1017 images" in out

    out = fbnas("train", "--out", run, "--resume", "--epochs", 2, "--mode", "hard", "--nproc", 2)
    assert "resuming at epoch 2" in out
    ckpt = load_checkpoint(run)
    assert [h["ranks_identical"] for h in ckpt["history"]] == [True, True]


def test_the_sandwich_rule_is_refused_under_ddp_in_one_line(tmp_path):
    """Its biggest network's forward would be a second one before DDP's backward."""
    r = subprocess.run([sys.executable, "-m", "fbnas", "train", "--config", "configs/tiny.yaml",
                        "--data-dir", str(CIFAR_SUBSET), "--out", str(tmp_path / "ddp"),
                        "--nproc", "2", "--mode", "hard", "--set", "search.sandwich_every=1",
                        "--epochs", "1"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "search.sandwich_every trains two networks a weight step" in r.stdout + r.stderr
    assert not (tmp_path / "ddp" / "checkpoints").exists()
