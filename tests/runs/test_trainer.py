"""The epoch loop every run shares, on a one-block network and a folder of 60 tiny images:
optimizer steps, the schedule, evaluation, checkpoints, stopping and exact resumption."""

import json

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from fbnas.errors import FbnasError
from fbnas.runs.checkpoint import load_checkpoint
from fbnas.runs.retrain import run_retrain
from fbnas.runs.schedule import cosine_factor
from tests.runs.conftest import CLASSES, TEST_PER_CLASS, TRAIN_PER_CLASS, tiny_retrain

# 60 images: 6 held out for validation, the other 54 in batches of 8 (the last 6 dropped)
TRAIN = TRAIN_PER_CLASS * len(CLASSES) - 6
STEPS = TRAIN // 8


def quiet(msg):
    pass


def counted_steps(fn):
    """What ``fn()`` returns, and how many optimizer steps it took."""
    steps = []
    handle = register_optimizer_step_pre_hook(lambda opt, args, kwargs: steps.append(1))
    try:
        return fn(), len(steps)
    finally:
        handle.remove()


def same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def same_optimizer(a: dict, b: dict) -> None:
    assert a["param_groups"] == b["param_groups"]
    for i in a["state"]:
        for k, v in a["state"][i].items():
            assert torch.equal(v, b["state"][i][k]) if torch.is_tensor(v) else v == b["state"][i][k]


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, image_folder, tiny_arch):
    """Two epochs in one go (shared by the tests that compare against it)."""
    out = tmp_path_factory.mktemp("full") / "run"
    # dropout draws from the global generator, which a resume must restore mid-epoch
    cfg = tiny_retrain(image_folder, tiny_arch, "retrain.dropout=0.3")
    result, steps = counted_steps(lambda: run_retrain(cfg, out, echo=quiet))
    return cfg, out, result, steps


def test_each_epoch_steps_once_per_batch_and_follows_the_schedule(full_run):
    cfg, out, result, steps = full_run
    assert steps == 2 * STEPS
    assert result["epochs_done"] == 2 and not result["stopped"]
    ck = load_checkpoint(out / "checkpoints" / "last.pt")
    assert (ck["epoch"], ck["position"], ck["global_step"]) == (2, 0, 2 * STEPS)
    assert ck["scheduler"]["last_epoch"] == 2 * STEPS
    ow = cfg.optim.weights
    factor = cosine_factor(STEPS, 2, max(ow.warmup_epochs, cfg.retrain.warmup_epochs),
                           ow.min_lr / ow.lr)
    lr = ck["optimizers"]["weights"]["param_groups"][0]["lr"]
    assert lr == pytest.approx(ow.lr * factor(2 * STEPS))


def test_every_epoch_is_evaluated_recorded_and_logged(full_run):
    _, out, result, _ = full_run
    hist = result["history"]
    assert [r["epoch"] for r in hist] == [1, 2]
    for r in hist:
        assert r["processes"] == 1 and r["weights_loss"] > 0
        # three classes: top-3 is every image
        assert 0 <= r["val_top1"] <= 100 and r["val_top3"] == 100.0 and r["val_ce"] > 0
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics == hist
    epoch_lines = [l for l in (out / "train.log").read_text().splitlines() if "[weights]" in l]
    assert len(epoch_lines) == 2 and " epoch 2/2 [weights] | weights loss " in epoch_lines[1]
    assert "val top1" in epoch_lines[0]
    # the test set is scored once, at the end, over every test image
    assert result["test"]["images"] == TEST_PER_CLASS * len(CLASSES)


def test_a_run_stopped_after_an_epoch_resumes_to_the_same_weights(full_run, tmp_path):
    cfg, full, result, _ = full_run
    first = run_retrain(cfg, tmp_path / "split", stop_after=1, echo=quiet)
    assert first["stopped"] and first["epochs_done"] == 1
    assert load_checkpoint(tmp_path / "split")["epoch"] == 1
    rest, steps = counted_steps(lambda: run_retrain(cfg, tmp_path / "split", resume=True,
                                                    echo=quiet))
    assert steps == STEPS and rest["epochs_done"] == 2
    a, b = load_checkpoint(full), load_checkpoint(tmp_path / "split")
    same_weights(a["model"], b["model"])
    same_optimizer(a["optimizers"]["weights"], b["optimizers"]["weights"])
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in result["history"]]
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in rest["history"]] == strip


def test_ctrl_c_mid_epoch_saves_the_position_and_resumes_exactly(full_run, tmp_path,
                                                                  monkeypatch, ctrl_c_after):
    cfg, full, result, _ = full_run

    ctrl_c_after(3)
    stopped = run_retrain(cfg, tmp_path / "split", echo=quiet)
    assert stopped["stopped"] and stopped["epochs_done"] == 0
    mid = load_checkpoint(tmp_path / "split")
    assert (mid["epoch"], mid["position"], mid["global_step"]) == (0, 3, 3)
    assert mid["epoch_stats"]["weights"]["items"] == 3
    monkeypatch.undo()
    run_retrain(cfg, tmp_path / "split", resume=True, echo=quiet)
    a, b = load_checkpoint(full), load_checkpoint(tmp_path / "split")
    assert b["global_step"] == 2 * STEPS
    same_weights(a["model"], b["model"])
    # the interrupted epoch's record covers its steps before the interrupt too
    for key in ("weights_loss", "weights_ce", "val_top1", "val_ce"):
        assert b["history"][0][key] == pytest.approx(a["history"][0][key], rel=1e-6), key


def test_a_finished_run_resumed_does_nothing(full_run, tmp_path):
    import shutil

    cfg, full, _, _ = full_run
    shutil.copytree(full, tmp_path / "again")
    (tmp_path / "again" / ".lock").unlink(missing_ok=True)
    before = load_checkpoint(tmp_path / "again")
    result, steps = counted_steps(lambda: run_retrain(cfg, tmp_path / "again", resume=True,
                                                      echo=quiet))
    assert steps == 0 and result["epochs_done"] == 2 and not result["stopped"]
    same_weights(before["model"], load_checkpoint(tmp_path / "again")["model"])
    assert "already finished all 2 epochs" in (tmp_path / "again" / "train.log").read_text()


def test_a_loss_that_is_not_finite_stops_with_the_step_and_the_fix(retrain_config, tmp_path):
    cfg = retrain_config("optim.weights.lr=1e30", "retrain.clip_grad_norm=0",
                         "retrain.warmup_epochs=0")
    with pytest.raises(FbnasError, match=r"the loss is not finite at epoch 1, step \d+ "
                                         r"\(weights phase\)\. Lower optim.weights.lr and "
                                         r"start again") as e:
        run_retrain(cfg, tmp_path / "run", echo=quiet)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "run" / "checkpoints" / "last.pt").exists()


def test_resume_refuses_training_data_of_another_size(tmp_path):
    """An image skipped (data.skip_bad) since the stop would shift the splits and batch
    orders without a word; the resume says so instead and leaves the checkpoint alone."""
    import shutil

    from tests.runs.conftest import TINY_NET, write_folder

    folder = tmp_path / "images"
    write_folder(folder / "train", TRAIN_PER_CLASS, seed=0)
    shutil.copytree(folder / "train", folder / "test")
    arch = tmp_path / "dot.json"
    arch.write_text(json.dumps(TINY_NET))
    cfg = tiny_retrain(folder, arch, "data.skip_bad=true")
    run_retrain(cfg, tmp_path / "run", stop_after=1, echo=quiet)
    (folder / "train" / "red" / "0.png").write_bytes(b"not an image")
    with pytest.raises(FbnasError, match=f"now has {TRAIN_PER_CLASS * 3 - 1} images, the run "
                                         f"started with {TRAIN_PER_CLASS * 3} .*--force$"):
        run_retrain(cfg, tmp_path / "run", resume=True, echo=quiet)
    assert load_checkpoint(tmp_path / "run")["epoch"] == 1


def test_resume_refuses_the_checkpoint_of_another_run(image_folder, tiny_arch, tmp_path):
    """A last.pt of another run on the same data (another seed) copied over this run's
    resumed silently as that run, rewriting config.yaml and metrics.jsonl and mixing both in
    train.log; the resume refuses it and leaves every file as it was."""
    import shutil

    from fbnas.runs.run_config import run_config

    for seed in (0, 1):
        cfg = tiny_retrain(image_folder, tiny_arch, f"run.seed={seed}", "retrain.epochs=3")
        run_retrain(cfg, tmp_path / f"seed{seed}", stop_after=1, echo=quiet)
    mine, theirs = tmp_path / "seed0", tmp_path / "seed1"
    assert (mine / "run_id").read_text() != (theirs / "run_id").read_text()
    shutil.copyfile(theirs / "checkpoints" / "last.pt", mine / "checkpoints" / "last.pt")
    before = {p.name: p.read_bytes() for p in mine.iterdir() if p.is_file()}
    cfg = run_config(None, mine, resume=True)  # what fbnas retrain --resume builds
    with pytest.raises(FbnasError, match=r"last.pt is not this run's checkpoint: it was "
                                         r"written by run [0-9a-f]+ \(seed 1, this run's 0\).*"
                                         r"put back this run's checkpoint, or start over "
                                         r"with --force$") as e:
        run_retrain(cfg, mine, resume=True, echo=quiet)
    assert "\n" not in str(e.value)
    assert {p.name: p.read_bytes() for p in mine.iterdir() if p.is_file()} == before
    # its own checkpoint resumes, and a run folder from before run ids resumes unchecked
    shutil.copyfile(theirs / "checkpoints" / "last.pt", tmp_path / "theirs.pt")
    (theirs / "run_id").unlink()
    assert run_retrain(run_config(None, theirs, resume=True), theirs, resume=True,
                       echo=quiet)["epochs_done"] == 3
    assert load_checkpoint(theirs)["run_id"] == (theirs / "run_id").read_text().strip()
