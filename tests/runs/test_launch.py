"""Starting a run: the device, the run directory's checks, and a refused run leaving nothing."""

import json

import pytest
import torch

from fbnas.errors import FbnasError
from fbnas.runs import launch as launch_mod
from fbnas.runs.dist import DistInfo
from fbnas.runs.launch import launch, pick_device
from fbnas.runs.retrain import Retrain
from tests.runs.conftest import TINY_NET


@pytest.fixture(autouse=True)
def keep_threads():
    """launch sets torch's thread count from run.threads: put it back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_the_device_follows_the_request_and_what_is_there(monkeypatch):
    monkeypatch.setattr(launch_mod.torch.cuda, "is_available", lambda: False)
    assert pick_device("cpu", DistInfo()) == torch.device("cpu")
    assert pick_device("auto", DistInfo()) == torch.device("cpu")
    with pytest.raises(FbnasError, match="^--device cuda was asked for but no CUDA device is "
                                         "available; use --device cpu$"):
        pick_device("cuda", DistInfo())
    monkeypatch.setattr(launch_mod.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(launch_mod.torch.cuda, "device_count", lambda: 2)
    # each process of a node takes the GPU of its local rank
    assert pick_device("auto", DistInfo(rank=3, world_size=4, local_rank=1)) == \
        torch.device("cuda", 1)
    assert pick_device("cpu", DistInfo()) == torch.device("cpu")
    # a third process on a 2-GPU machine has none: NCCL refuses two processes on one GPU
    with pytest.raises(FbnasError, match="^process 2 has no GPU of its own: this machine has 2 "
                                         "CUDA devices and the run started 3 processes; use "
                                         "--nproc 2 or --device cpu$"):
        pick_device("cuda", DistInfo(rank=2, world_size=3, local_rank=2))


def test_a_run_writes_its_files_and_echoes_its_lines(retrain_config, tmp_path):
    lines = []
    out = tmp_path / "run"
    result = launch(Retrain, retrain_config("retrain.epochs=1"), out, resume=False,
                    force=False, stop_after=None, echo=lines.append)
    assert result["rank"] == 0 and result["epochs_done"] == 1
    assert (out / "config.yaml").is_file() and (out / "checkpoints" / "last.pt").is_file()
    log = (out / "train.log").read_text()
    assert any("epoch 1/1" in line for line in lines) and "epoch 1/1" in log
    assert lines[0].startswith("retrain dot: 1 blocks")


def test_a_used_folder_needs_resume_or_force(retrain_config, tmp_path):
    cfg = retrain_config("retrain.epochs=1")
    out = tmp_path / "run"
    launch(Retrain, cfg, out, False, False, None)
    with pytest.raises(FbnasError, match="is not empty; pass --resume to continue the run in "
                                         "it or --force to start over"):
        launch(Retrain, cfg, out, False, False, None)
    (out / "stale.txt").write_text("from before")
    again = launch(Retrain, cfg, out, resume=False, force=True, stop_after=None)
    assert again["epochs_done"] == 1 and len((out / "metrics.jsonl").read_text().splitlines()) == 1
    with pytest.raises(FbnasError, match="^nothing to resume: .*last.pt does not exist; start "
                                         "the run without --resume$"):
        launch(Retrain, cfg, tmp_path / "empty", True, False, None)
    (tmp_path / "stopped").mkdir()  # stopped before its first checkpoint: files, no last.pt
    (tmp_path / "stopped" / "config.yaml").write_text("{}\n")
    with pytest.raises(FbnasError, match="before its first checkpoint.*--force$"):
        launch(Retrain, cfg, tmp_path / "stopped", True, False, None)


def test_a_run_refused_at_set_up_leaves_no_folder(retrain_config, tmp_path):
    arch = tmp_path / "ten.json"
    arch.write_text(json.dumps({**TINY_NET, "head": {"channels": 16, "classes": 10}}))
    out = tmp_path / "new" / "run"
    with pytest.raises(FbnasError, match="the data has 3 classes but the network's head has 10"):
        launch(Retrain, retrain_config(f"retrain.arch={arch}"), out, False, False, None)
    assert not (tmp_path / "new").exists()
    # the lock went with it: the same folder runs now
    assert launch(Retrain, retrain_config("retrain.epochs=1"), out, False, False,
                  None)["epochs_done"] == 1


def test_a_run_resumes_from_another_folder_with_relative_paths(image_folder, tiny_arch,
                                                                tmp_path, monkeypatch):
    """data.dir and retrain.arch typed relative to where the run started: a resume from
    another working directory reads the same data and trains the same network, and ends as
    an uninterrupted run does."""
    import shutil

    from fbnas.runs.checkpoint import load_checkpoint
    from fbnas.runs.run_config import run_config
    from tests.runs.conftest import tiny_retrain

    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    (here / "images").symlink_to(image_folder)
    shutil.copy(tiny_arch, here / "dot.json")
    monkeypatch.chdir(here)
    cfg = tiny_retrain("images", "dot.json")
    launch(Retrain, cfg, tmp_path / "whole", False, False, None)
    cfg = tiny_retrain("images", "dot.json")
    launch(Retrain, cfg, tmp_path / "split", False, False, stop_after=1)
    monkeypatch.chdir(elsewhere)
    saved = load_checkpoint(tmp_path / "split/checkpoints/last.pt")["config"]
    assert saved["data"]["dir"] == str(here / "images")  # saved absolute
    again = launch(Retrain, run_config(None, tmp_path / "split", resume=True),
                   tmp_path / "split", True, False, None)
    assert again["epochs_done"] == 2
    a = load_checkpoint(tmp_path / "whole/checkpoints/last.pt")["model"]
    b = load_checkpoint(tmp_path / "split/checkpoints/last.pt")["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
