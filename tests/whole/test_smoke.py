"""The smoke search as a user runs it: separate `python -m fbnas` processes, the bundled tiny
config and table, all 5,085 images of the CIFAR-10 subset."""

import json
import subprocess
import sys

import pytest

from fbnas.runs.checkpoint import load_checkpoint
from tests.conftest import CIFAR_SUBSET, REPO

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("cifar_subset")]


def fbnas(*args):
    r = subprocess.run([sys.executable, "-m", "fbnas", *map(str, args)], cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_tiny_smoke_search_resume_and_sample(tmp_path):
    run = tmp_path / "smoke"
    out = fbnas("train", "--config", "configs/tiny.yaml", "--data-dir", CIFAR_SUBSET,
                "--out", run)
    assert "3662/915/508 images" in out and "epoch 2/2 [weights+theta]" in out
    assert (run / "config.yaml").is_file() and (run / "train.log").is_file()
    assert list((run / "tensorboard").iterdir())
    assert load_checkpoint(run)["epoch"] == 2

    out = fbnas("train", "--out", run, "--resume", "--epochs", 3)
    assert "resuming at epoch 3" in out and "epoch 3/3" in out
    assert load_checkpoint(run)["epoch"] == 3

    fbnas("sample", run, "--hard", "--name", "smoke")
    arch = json.loads((run / "arch.json").read_text())["architectures"]["smoke"]
    assert len(arch["blocks"]) == 4 and arch["predicted"]["latency_us"] > 0
    out = fbnas("latency", run / "arch.json", "--name", "smoke", "--rounds", 1,
                "--block-time", 0.02)
    assert "measured" in out
    fbnas("export", run / "arch.json", "--name", "smoke", "--random-weights", "--format", "pt2",
          "--out", tmp_path / "smoke.pt2")
    assert (tmp_path / "smoke.pt2").is_file()
