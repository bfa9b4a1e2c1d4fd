"""A real 2-process search on CPU (gloo): ranks stay identical, rank 0 writes a complete run."""

import os
import socket
import subprocess
import sys

import pytest
import torch

from conftest import CIFAR_SUBSET, REPO
from fbnas.search import RANK_STATE_ENV, load_checkpoint

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(),
                                reason="torch built without torch.distributed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train_args(out, lut, *extra):
    return ["train", "--config", "configs/tiny.yaml", "--data-dir", str(CIFAR_SUBSET),
            "--lut", str(lut), "--out", str(out), "--set", "data.limit=400",
            "--set", "data.batch_size=32", "--set", "run.progress=false",
            "--set", "run.threads=1", *extra]


def _run(cmd):
    env = dict(os.environ, OMP_NUM_THREADS="1", **{RANK_STATE_ENV: "1"})
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)


def _assert_ranks_identical(out):
    states = [torch.load(out / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert [s["rank"] for s in states] == [0, 1] and states[0]["world_size"] == 2
    a, b = (s["model"] for s in states)
    assert list(a) == list(b)
    for key in a:  # weights, BN buffers and batch counters, bit for bit
        assert torch.equal(a[key], b[key]), key
    for ta, tb in zip(states[0]["theta"], states[1]["theta"]):
        assert torch.equal(ta, tb)
    assert any(t.abs().sum() > 0 for t in states[0]["theta"])  # theta did train
    return states[0]


def _assert_run_dir_complete(out, rank0, epochs):
    assert (out / "config.yaml").is_file()
    log = (out / "train.log").read_text()
    assert "2 process(es)" in log and "32 per process (64 per step)" in log
    assert f"epoch {epochs}/{epochs}" in log
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    ckpt = load_checkpoint(out / "checkpoints" / "last.pt")  # weights_only=True inside
    assert ckpt["epoch"] == epochs and ckpt["world_size"] == 2
    for key, value in rank0["model"].items():
        assert torch.equal(ckpt["model"][key], value), key


def test_torchrun_soft_search_keeps_ranks_identical(tmp_path, tiny_lut_file):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_port", str(_free_port()), "-m", "fbnas",
           *_train_args(out, tiny_lut_file, "--mode", "soft")]
    r = _run(cmd)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("done: 2 epochs") == 1  # only rank 0 talks
    rank0 = _assert_ranks_identical(out)
    _assert_run_dir_complete(out, rank0, epochs=2)


def test_nproc_hard_search_then_resume_under_torchrun(tmp_path, tiny_lut_file):
    out = tmp_path / "run"
    r = _run([sys.executable, "-m", "fbnas",
              *_train_args(out, tiny_lut_file, "--mode", "hard", "--nproc", "2")])
    assert r.returncode == 0, r.stdout + r.stderr
    _assert_ranks_identical(out)
    r = _run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
              "--master_port", str(_free_port()), "-m", "fbnas", "train", "--out", str(out),
              "--resume", "--set", "search.epochs=3"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resuming at epoch 3" in r.stdout
    rank0 = _assert_ranks_identical(out)
    _assert_run_dir_complete(out, rank0, epochs=3)


def test_nproc_reports_errors_once_with_their_exit_code(tmp_path, tiny_lut_file):
    out = tmp_path / "run"
    out.mkdir()
    (out / "other.txt").write_text("not a run")
    r = _run([sys.executable, "-m", "fbnas", *_train_args(out, tiny_lut_file, "--nproc", "2")])
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        f"error: run directory {out} is not empty; pass --resume to continue the run in it "
        "or --force to start over"]
    r = _run([sys.executable, "-m", "fbnas",
              *_train_args(tmp_path / "new", tiny_lut_file, "--nproc", "2",
                           "--set", "optim.weights.lr=1.0e+30")])
    assert r.returncode == 1, r.stdout + r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "loss is not finite" in errors[0], r.stderr
    assert "Traceback" not in r.stderr
