import json
import logging
import math

import pytest
import torch
from click.testing import CliRunner

from fbnas.arch.space import SearchSpace
from fbnas.cli import main
from fbnas.config import load_config
from fbnas.errors import FbnasError
from fbnas.latency.lut import load_lut
from fbnas.runs.checkpoint import load_checkpoint
from fbnas.search.oneshot_check import choose
from fbnas.search.run import run_search
from tests.conftest import CIFAR_SUBSET

# every test here searches (or starts to) on the CIFAR-10 subset
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("cifar_subset")]


def small_config(lut_file, **extra):
    sets = [f"lut={lut_file}", "space=tiny", f"data.dir={CIFAR_SUBSET}", "data.limit=400",
            "data.batch_size=32", "data.eval_batch_size=200", "search.epochs=2",
            "search.warmup_epochs=0", "run.threads=1", "run.progress=false", "run.device=cpu"]
    sets += [f"{k}={v}" for k, v in extra.items()]
    return load_config(None, sets)


def quiet(msg):
    pass


def same_state(a, b):
    assert a["epoch"] == b["epoch"]
    assert a.get("multiplier") == b.get("multiplier")
    for ta, tb in zip(a["theta"], b["theta"]):
        assert torch.equal(ta, tb)
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k


def test_run_directory_and_checkpoint_contents(tmp_path, tiny_lut_file):
    out = tmp_path / "run"
    result = run_search(small_config(tiny_lut_file), out, echo=quiet)
    assert result["epochs_done"] == 2 and not result["stopped"]
    assert (out / "config.yaml").is_file() and (out / "train.log").is_file()
    assert any((out / "tensorboard").glob("events.out.tfevents.*"))
    ckpt = load_checkpoint(out / "checkpoints" / "last.pt")  # weights_only=True inside
    for key in ("model", "theta", "optimizers", "scheduler", "config", "space", "lut_hash",
                "history", "epoch", "position"):
        assert key in ckpt, key
    assert set(ckpt["optimizers"]) == {"weights", "theta"}
    assert len(ckpt["theta"]) == 4 and ckpt["epoch"] == 2
    assert any(float(t.abs().max()) > 0 for t in ckpt["theta"])  # theta trained
    hist = ckpt["history"]
    assert "val_top1" in hist[-1] and "val_top5" in hist[-1] and "theta_loss" in hist[-1]
    assert "test" in result and 0 <= result["test"]["top1"] <= 100
    # the log shows one line per epoch
    assert sum("epoch " in line and "/2 [" in line for line in (out / "train.log").open()) == 2


def test_warmup_epochs_leave_theta_untouched(tmp_path, tiny_lut_file):
    cfg = small_config(tiny_lut_file, **{"search.epochs": 1, "search.warmup_epochs": 1})
    run_search(cfg, tmp_path / "run", echo=quiet)
    ckpt = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")
    assert all(float(t.abs().max()) == 0 for t in ckpt["theta"])


def test_resume_matches_uninterrupted_run(tmp_path, tiny_lut_file):
    cfg = small_config(tiny_lut_file)
    run_search(cfg, tmp_path / "full", echo=quiet)
    first = run_search(cfg, tmp_path / "split", stop_after=1, echo=quiet)
    assert first["stopped"] and first["epochs_done"] == 1
    run_search(cfg, tmp_path / "split", resume=True, echo=quiet)
    same_state(load_checkpoint(tmp_path / "full/checkpoints/last.pt"),
               load_checkpoint(tmp_path / "split/checkpoints/last.pt"))


def test_ctrl_c_saves_mid_epoch_and_resume_is_exact(tmp_path, tiny_lut_file, monkeypatch,
                                                    ctrl_c_after):
    cfg = small_config(tiny_lut_file, **{"search.epochs": 1})
    run_search(cfg, tmp_path / "full", echo=quiet)

    ctrl_c_after(4)
    stopped = run_search(cfg, tmp_path / "split", echo=quiet)
    assert stopped["stopped"]
    ckpt = load_checkpoint(tmp_path / "split/checkpoints/last.pt")
    assert ckpt["epoch"] == 0 and ckpt["position"] == 4
    monkeypatch.undo()
    run_search(cfg, tmp_path / "split", resume=True, echo=quiet)
    same_state(load_checkpoint(tmp_path / "full/checkpoints/last.pt"),
               load_checkpoint(tmp_path / "split/checkpoints/last.pt"))
    # the interrupted epoch's losses cover its steps before the interrupt too
    full, split = ([json.loads(line) for line in (tmp_path / d / "metrics.jsonl").open()]
                   for d in ("full", "split"))
    assert len(full) == len(split) == 1
    for key in ("weights_loss", "weights_ce", "theta_loss", "theta_ce"):
        assert split[0][key] == pytest.approx(full[0][key], rel=1e-6), key


def test_budget_multiplier_moves_with_the_error_and_resumes_exactly(
        tmp_path, tiny_lut_file, tiny_lut_data, monkeypatch, ctrl_c_after):
    """Under loss.target_penalty=multiplier the multiplier follows the argmax network's
    latency error after every theta step, is recorded per epoch, and a run stopped by Ctrl-C
    after a theta step resumes to the same multiplier, theta and weights."""
    budget = round(1.2 * _fastest_ms(tiny_lut_data), 6)
    cfg = small_config(tiny_lut_file, **{
        "loss.form": "target", "loss.target_ms": budget, "loss.target_penalty": "multiplier",
        "loss.multiplier_lr": 0.5, "search.theta_relaxation": "softmax", "search.mode": "hard"})
    full = run_search(cfg, tmp_path / "full", echo=quiet)
    hist = full["history"]
    assert all("multiplier" in r for r in hist) and hist[-1]["multiplier"] != 0.0
    # the first theta step starts at multiplier 0 and moves it by lr * (argmax / T - 1)
    assert "(multiplier " in (tmp_path / "full" / "train.log").read_text()

    ctrl_c_after(10)  # 9 weight batches, then 2 theta batches: after a theta step
    assert run_search(cfg, tmp_path / "split", echo=quiet)["stopped"]
    mid = load_checkpoint(tmp_path / "split/checkpoints/last.pt")
    assert mid["position"] == 10 and mid["multiplier"] != 0.0
    monkeypatch.undo()
    run_search(cfg, tmp_path / "split", resume=True, echo=quiet)
    same_state(load_checkpoint(tmp_path / "full/checkpoints/last.pt"),
               load_checkpoint(tmp_path / "split/checkpoints/last.pt"))


@pytest.mark.parametrize("baseline", ["moving_average", "leave_one_out"])
def test_reinforce_theta_steps_with_uniform_paths_train_theta_and_resume_exactly(
        tmp_path, tiny_lut_file, tiny_lut_data, monkeypatch, ctrl_c_after, baseline):
    """search.theta_estimator=reinforce moves theta from sampled networks' rewards against a
    moving-average baseline or each other (leave one out); the moving average is checkpointed, so a Ctrl-C after a theta step
    resumes to the same theta and weights, and every theta epoch records how long its argmax
    held."""
    budget = round(1.5 * _fastest_ms(tiny_lut_data), 6)
    cfg = small_config(tiny_lut_file, **{
        "loss.form": "target", "loss.target_ms": budget, "search.mode": "hard",
        "search.theta_estimator": "reinforce", "search.theta_paths": 2,
        "search.reinforce_baseline": baseline, "optim.theta.lr": 0.1})
    full = run_search(cfg, tmp_path / "full", echo=quiet)
    ckpt = load_checkpoint(tmp_path / "full/checkpoints/last.pt")
    assert any(float(t.abs().max()) > 0 for t in ckpt["theta"])
    assert isinstance(ckpt["reward_baseline"], float)
    assert all(0 <= r["argmax_stable"] <= 1 for r in full["history"])
    # the printed theta loss is the sampled networks' search loss: CE plus the penalty
    assert all(r["theta_loss"] >= r["theta_ce"] for r in full["history"])

    ctrl_c_after(10)  # 9 weight batches, then 1 of 2 theta batches
    assert run_search(cfg, tmp_path / "split", echo=quiet)["stopped"]
    mid = load_checkpoint(tmp_path / "split/checkpoints/last.pt")
    assert mid["position"] == 10 and mid["reward_baseline"] is not None
    monkeypatch.undo()
    run_search(cfg, tmp_path / "split", resume=True, echo=quiet)
    split = load_checkpoint(tmp_path / "split/checkpoints/last.pt")
    same_state(ckpt, split)
    assert split["reward_baseline"] == ckpt["reward_baseline"]
    assert [r["argmax_stable"] for r in split["history"]] == [
        r["argmax_stable"] for r in full["history"]]


def test_several_reinforce_theta_steps_per_weight_step_resume_exactly(
        tmp_path, tiny_lut_file, monkeypatch, ctrl_c_after):
    """search.theta_steps=2 runs two REINFORCE theta steps (each on its own theta batch)
    after every weight step, and search.final_theta_steps=3 three in the last epoch: five
    halves of the default's theta steps over two epochs; a Ctrl-C between two theta steps of
    the last epoch resumes to the same theta and weights."""
    sets = {"search.mode": "hard", "search.alternation": "step",
            "search.theta_estimator": "reinforce", "optim.theta.lr": 0.1}

    def theta_steps(out):
        state = load_checkpoint(out / "checkpoints/last.pt")["optimizers"]["theta"]["state"]
        return int(float(next(iter(state.values()))["step"]))

    run_search(small_config(tiny_lut_file, **sets), tmp_path / "one", echo=quiet)
    n = theta_steps(tmp_path / "one") // 2  # weight steps an epoch
    cfg = small_config(tiny_lut_file, **sets,
                       **{"search.theta_steps": 2, "search.final_theta_steps": 3})
    run_search(cfg, tmp_path / "full", echo=quiet)
    assert theta_steps(tmp_path / "full") == 2 * n + 3 * n > 0
    # the first epoch has 3n batches, so batch 3n + 2 is in the last: a weight step, then
    # the first of its three theta steps
    ctrl_c_after(3 * n + 2)
    assert run_search(cfg, tmp_path / "split", echo=quiet)["stopped"]
    mid = load_checkpoint(tmp_path / "split/checkpoints/last.pt")
    assert mid["epoch"] == 1 and mid["position"] == 3 * n + 2
    monkeypatch.undo()
    run_search(cfg, tmp_path / "split", resume=True, echo=quiet)
    same_state(load_checkpoint(tmp_path / "full/checkpoints/last.pt"),
               load_checkpoint(tmp_path / "split/checkpoints/last.pt"))


def test_skipped_evaluations_change_nothing_the_search_decides(tmp_path, tiny_lut_file):
    """search.evaluate_every=2 over 3 epochs scores epochs 2 and 3 only (the last always),
    and the search trains and decides exactly as when every epoch is scored: evaluation
    draws no random numbers and leaves the weights and BN statistics as it found them."""
    sets = {"search.epochs": 3, "search.mode": "hard", "search.alternation": "step",
            "search.theta_estimator": "reinforce", "optim.theta.lr": 0.1}
    every = run_search(small_config(tiny_lut_file, **sets), tmp_path / "every", echo=quiet)
    some = run_search(small_config(tiny_lut_file, **sets, **{"search.evaluate_every": 2}),
                      tmp_path / "some", echo=quiet)
    a = load_checkpoint(tmp_path / "every/checkpoints/last.pt")
    b = load_checkpoint(tmp_path / "some/checkpoints/last.pt")
    same_state(a, b)
    assert every["found_ops"] == some["found_ops"]
    scored = [["val_top1" in r, "found_val_top1" in r] for r in b["history"]]
    assert scored == [[False, False], [True, True], [True, True]]
    assert all("val_top1" in r for r in a["history"])
    for ra, rb in zip(a["history"][1:], b["history"][1:]):
        assert ra["val_top1"] == rb["val_top1"]


def test_theta_rate_falls_over_the_last_epoch_only_and_resumes_exactly(
        tmp_path, tiny_lut_file, monkeypatch, ctrl_c_after):
    """optim.theta.final_lr: theta's rate stays optim.theta.lr until the last epoch, then
    falls along a cosine to final_lr by its last step; a final_lr equal to the rate changes
    nothing, and a Ctrl-C in the middle of the fall resumes to the same theta and weights."""
    sets = {"search.mode": "hard", "search.alternation": "step",
            "search.theta_estimator": "reinforce", "optim.theta.lr": 0.1}

    def theta_lr(out):
        return load_checkpoint(out / "checkpoints/last.pt")["optimizers"]["theta"][
            "param_groups"][0]["lr"]

    run_search(small_config(tiny_lut_file, **sets), tmp_path / "flat", echo=quiet)
    run_search(small_config(tiny_lut_file, **sets, **{"optim.theta.final_lr": 0.1}),
               tmp_path / "same", echo=quiet)
    same_state(load_checkpoint(tmp_path / "flat/checkpoints/last.pt"),
               load_checkpoint(tmp_path / "same/checkpoints/last.pt"))
    cfg = small_config(tiny_lut_file, **sets, **{"optim.theta.final_lr": 0.0})
    run_search(cfg, tmp_path / "full", echo=quiet)
    assert 0 < theta_lr(tmp_path / "full") < 0.01
    full = load_checkpoint(tmp_path / "full/checkpoints/last.pt")
    flat = load_checkpoint(tmp_path / "flat/checkpoints/last.pt")
    assert any(not torch.equal(a, b) for a, b in zip(full["theta"], flat["theta"]))
    run_search(cfg, tmp_path / "split", stop_after=1, echo=quiet)
    assert theta_lr(tmp_path / "split") == 0.1  # the first epoch at the constant rate
    # each epoch alternates n weight and n theta steps; Ctrl-C a quarter into the last
    n = int(float(next(iter(full["optimizers"]["theta"]["state"].values()))["step"])) // 2
    ctrl_c_after(2 * (n // 4) + 1)
    assert run_search(cfg, tmp_path / "split", resume=True, echo=quiet)["stopped"]
    mid = load_checkpoint(tmp_path / "split/checkpoints/last.pt")
    assert (mid["epoch"], mid["position"]) == (1, 2 * (n // 4) + 1) and n >= 4
    monkeypatch.undo()
    run_search(cfg, tmp_path / "split", resume=True, echo=quiet)
    same_state(full, load_checkpoint(tmp_path / "split/checkpoints/last.pt"))


def test_sampled_transition_paths_train_and_resume_exactly(
        tmp_path, tiny_lut_file, monkeypatch, ctrl_c_after):
    """search.transition_paths=2: hard weight steps mix two drawn candidates of each
    transition layer; the draw comes from the checkpointed generator, so a Ctrl-C mid-epoch
    resumes to the same theta and weights."""
    cfg = small_config(tiny_lut_file, **{"search.mode": "hard", "search.transition_paths": 2})
    run_search(cfg, tmp_path / "full", echo=quiet)
    ckpt = load_checkpoint(tmp_path / "full/checkpoints/last.pt")
    assert any(float(t.abs().max()) > 0 for t in ckpt["theta"])
    ctrl_c_after(5)
    assert run_search(cfg, tmp_path / "split", echo=quiet)["stopped"]
    monkeypatch.undo()
    run_search(cfg, tmp_path / "split", resume=True, echo=quiet)
    same_state(ckpt, load_checkpoint(tmp_path / "split/checkpoints/last.pt"))


def test_non_finite_loss_stops_and_keeps_checkpoint(tmp_path, tiny_lut_file):
    out = tmp_path / "run"
    run_search(small_config(tiny_lut_file, **{"search.epochs": 2}), out, stop_after=1,
               echo=quiet)
    before = (out / "checkpoints/last.pt").read_bytes()
    cfg = small_config(tiny_lut_file, **{"optim.weights.lr": 1e30})
    with pytest.raises(FbnasError, match=r"epoch 2, step \d+ .*intact"):
        run_search(cfg, out, resume=True, echo=quiet)
    assert (out / "checkpoints/last.pt").read_bytes() == before


def test_cli_refuses_reuse_and_mismatched_resume(tmp_path, tiny_lut_file, tiny_lut_data):
    out = tmp_path / "run"
    base = ["train", "--space", "tiny", "--lut", str(tiny_lut_file), "--data-dir",
            str(CIFAR_SUBSET), "--out", str(out), "--epochs", "1", "--threads", "1",
            "--set", "data.limit=300", "--set", "data.batch_size=32", "--set",
            "run.progress=false"]
    r = CliRunner().invoke(main, base)
    assert r.exit_code == 0, r.output
    assert "fbnas sample" in r.output
    r = CliRunner().invoke(main, base)
    assert r.exit_code == 1 and "--resume" in r.output and "--force" in r.output
    r = CliRunner().invoke(main, base + ["--resume", "--space", "fbnet_cifar"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    other = tmp_path / "other.json"
    other.write_text(tiny_lut_file.read_text().replace('"block_time_s"', '"block_time_s" ', 1))
    r = CliRunner().invoke(main, base + ["--resume", "--lut", str(other)])
    assert r.exit_code == 1 and "differs" in r.output


@pytest.mark.parametrize("args,message", [
    (["--data-dir", "/nonexistent/dir"], "/nonexistent/dir"),
    (["--lut", "/nonexistent/lut.json"], "fbnas profile"),
    (["--set", "search.mode=medium"], "search.mode"),
])
def test_cli_bad_inputs(tmp_path, tiny_lut_file, args, message):
    base = ["train", "--space", "tiny", "--lut", str(tiny_lut_file), "--data-dir",
            str(CIFAR_SUBSET), "--out", str(tmp_path / "run"), "--epochs", "1"]
    r = CliRunner().invoke(main, base + args)
    assert r.exit_code in (1, 2) and message in r.output and "Traceback" not in r.output


def test_cli_out_under_a_file_is_one_line_error(tmp_path, tiny_lut_file):
    (tmp_path / "file").write_text("x")
    r = CliRunner().invoke(main, ["train", "--space", "tiny", "--lut", str(tiny_lut_file),
                                  "--data-dir", str(CIFAR_SUBSET), "--out",
                                  str(tmp_path / "file" / "run"), "--epochs", "1"])
    assert r.exit_code == 1 and "pick another --out" in r.output
    assert "Traceback" not in r.output


def test_resume_from_checkpoint_without_theta_is_one_line_error(tmp_path, tiny_lut_file):
    out = tmp_path / "run"
    cfg = small_config(tiny_lut_file, **{"search.epochs": 2})
    run_search(cfg, out, stop_after=1, echo=quiet)
    path = out / "checkpoints" / "last.pt"
    ckpt = torch.load(path, weights_only=True)
    ckpt["model"] = {k: v for k, v in ckpt["model"].items() if not k.endswith("theta")}
    torch.save(ckpt, path)
    with pytest.raises(FbnasError, match="cannot resume .*--force"):
        run_search(cfg, out, resume=True, echo=quiet)


def test_resume_after_calibrating_the_original_table_is_exact(tmp_path, tiny_lut_file):
    cfg = small_config(tiny_lut_file)
    run_search(cfg, tmp_path / "full", echo=quiet)
    split = tmp_path / "split"
    run_search(cfg, split, stop_after=1, echo=quiet)
    assert (split / "lut.json").read_bytes() == tiny_lut_file.read_bytes()
    r = CliRunner().invoke(main, ["calibrate", str(tiny_lut_file), "--networks", "5", "--fit",
                                  "3", "--rounds", "2", "--block-time", "0.001"])
    assert r.exit_code == 0, r.output
    assert "calibration" in json.loads(tiny_lut_file.read_text())  # the original changed
    r = CliRunner().invoke(main, ["train", "--out", str(split), "--resume"])
    assert r.exit_code == 0, r.output
    assert "resuming at epoch 2" in r.output
    same_state(load_checkpoint(tmp_path / "full/checkpoints/last.pt"),
               load_checkpoint(split / "checkpoints/last.pt"))


def test_metrics_have_one_line_per_epoch_after_resumes(tmp_path, tiny_lut_file, caplog):
    cfg = small_config(tiny_lut_file)
    out = tmp_path / "run"
    run_search(cfg, out, stop_after=1)
    first = (out / "checkpoints/last.pt").read_bytes()
    with caplog.at_level(logging.INFO, logger="fbnas"):
        run_search(cfg, out, resume=True)  # the lines go to the fbnas logger
    assert any(m.startswith("epoch 2/2 [") for m in caplog.messages)
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
    # back to the epoch-1 checkpoint, as if the newest had been lost: epoch 2 runs again
    (out / "checkpoints/last.pt").write_bytes(first)
    run_search(cfg, out, resume=True)
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2]
    assert metrics == load_checkpoint(out)["history"]
    epoch_lines = [line for line in (out / "train.log").open() if " epoch 2/2 [" in line]
    assert f"val top1 {metrics[1]['val_top1']:.2f}%" in epoch_lines[-1]


def test_resuming_a_finished_run_says_so(tmp_path, tiny_lut_file):
    out = tmp_path / "run"
    run_search(small_config(tiny_lut_file, **{"search.epochs": 1}), out, echo=quiet)
    r = CliRunner().invoke(main, ["train", "--out", str(out), "--resume"])
    assert r.exit_code == 0, r.output
    assert f"run {out} already finished all 1 epochs; nothing to resume" in r.output
    assert "resuming at epoch" not in r.output and "test set" in r.output
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1


def _fastest_ms(lut_data) -> float:
    from fbnas.latency.lut import LUT

    lut = LUT(lut_data)
    names, costs = lut.layer_candidates(), lut.layer_costs()
    return lut.predict([n[c.index(min(c))] for n, c in zip(names, costs)]) / 1000


def test_budget_far_below_the_start_trains_and_lands(tmp_path, tiny_lut_file, tiny_lut_data):
    """A budget near the fastest network, far below the initial expected latency: the weights
    train on the cross-entropy alone (no divergence), and the found network is within it."""
    budget = round(1.05 * _fastest_ms(tiny_lut_data), 6)
    cfg = small_config(tiny_lut_file, **{"loss.form": "target", "loss.target_ms": budget,
                                         "search.mode": "hard", "search.epochs": 3})
    result = run_search(cfg, tmp_path / "run", echo=quiet)
    hist = result["history"]
    assert hist[0]["cost_expected"] > 1.3 * budget * 1000  # far above the budget at the start
    for r in hist:
        assert r["weights_loss"] == pytest.approx(r["weights_ce"])  # CE alone trains weights
        assert r["weights_ce"] < 2.5  # ln 10 = 2.30: learning or at chance, not diverging
        assert r["budget_ms"] == budget and 0 <= r["found_val_top1"] <= 100
        assert r["found_cost"] <= budget * 1000 * (1 + 1e-9)
    assert result["found_cost"] <= budget * 1000 * (1 + 1e-9)
    log = (tmp_path / "run" / "train.log").read_text()
    assert "supernet val top1" in log and "found net" in log and "diverging" not in log


def test_cli_budget_below_the_fastest_network_is_one_line_error(tmp_path, tiny_lut_file,
                                                                 tiny_lut_data):
    r = CliRunner().invoke(main, ["train", "--space", "tiny", "--lut", str(tiny_lut_file),
                                  "--data-dir", str(CIFAR_SUBSET), "--out",
                                  str(tmp_path / "run"), "--epochs", "1", "--target-ms",
                                  str(0.5 * _fastest_ms(tiny_lut_data))])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert f"{_fastest_ms(tiny_lut_data):.3f}" in r.output
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_budget_search_ends_with_a_one_shot_check_of_its_most_probable_networks(
        tmp_path, tiny_lut_file, tiny_lut_data):
    """search.rerank: after the last epoch the most probable networks within the budget are
    scored one-shot and the best is the found network, recorded in the checkpoint (what
    fbnas sample --hard returns) and the epoch's line; 0 keeps the most probable one."""
    budget = round(2.5 * _fastest_ms(tiny_lut_data), 6)
    # floor 0: the window is everything under the budget, whatever the rough timings of the
    # table profiled for the test put in its top 10%
    sets = {"loss.form": "target", "loss.target_ms": budget, "search.mode": "hard",
            "loss.target_floor": 0}
    result = run_search(small_config(tiny_lut_file, **sets, **{"search.rerank": 3}),
                        tmp_path / "check", echo=quiet)
    ckpt = load_checkpoint(tmp_path / "check/checkpoints/last.pt")
    d = ckpt["decision"]
    assert 2 <= len(d["candidates"]) <= 3
    scores = [c["val_top1"] for c in d["candidates"]]
    assert all(c["val_ce"] > 0 for c in d["candidates"])  # recorded for other decision rules
    assert d["ops"] == d["candidates"][d["rank"]]["ops"] and scores[d["rank"]] == max(scores)
    assert result["found_ops"] == d["ops"]
    first, last = result["history"]
    assert "rerank_moved" not in first and last["rerank_moved"] == d["rank"]
    assert last["rerank_scored"] == len(d["candidates"])  # those the window held, up to 3
    assert last["found_val_top1"] == max(scores)
    assert (f"best one-shot of {len(d['candidates'])} checked, theta's most probable: "
            f"#{d['rank'] + 1}"
            in (tmp_path / "check/train.log").read_text())
    lut = load_lut(tiny_lut_file)
    assert [c["macs"] for c in d["candidates"]] == [lut.raw_sum(c["ops"], "macs")
                                                    for c in d["candidates"]]
    run_search(small_config(tiny_lut_file, **sets, **{"search.rerank": 0}), tmp_path / "plain",
               echo=quiet)
    assert load_checkpoint(tmp_path / "plain/checkpoints/last.pt")["decision"] is None
    # search.rerank_by: top1_and_macs keeps the best sum of the two ranks among the same kind
    # of check, and the epoch line says what it weighed
    run_search(small_config(tiny_lut_file, **sets, **{"search.rerank": 3,
                                                     "search.rerank_by": "top1_and_macs"}),
               tmp_path / "macs", echo=quiet)
    d = load_checkpoint(tmp_path / "macs/checkpoints/last.pt")["decision"]
    c = d["candidates"]
    assert d["rank"] == choose("top1_and_macs", top1=[x["val_top1"] for x in c],
                               macs=[x["macs"] for x in c])
    assert (f"best one-shot and MACs of {len(c)} checked, theta's most probable"
            in (tmp_path / "macs/train.log").read_text())
    # search.rerank_by: naswot scores fresh copies instead, with no one-shot pass per network
    # (only the kept one's val top-1 is measured for the log), the same on a second run
    naswot = small_config(tiny_lut_file, **sets, **{"search.rerank": 3,
                                                    "search.rerank_by": "naswot"})
    result = run_search(naswot, tmp_path / "nw", echo=quiet)
    d = load_checkpoint(tmp_path / "nw/checkpoints/last.pt")["decision"]
    c = d["candidates"]
    assert len(c) == 3 and all("val_top1" not in x for x in c)
    assert d["rank"] == max(range(3), key=lambda i: (c[i]["naswot"], -i))
    assert result["found_ops"] == d["ops"] and "found_val_top1" in result["history"][-1]
    assert "best NASWOT of " in (tmp_path / "nw/train.log").read_text()
    run_search(naswot, tmp_path / "nw2", echo=quiet)
    again = load_checkpoint(tmp_path / "nw2/checkpoints/last.pt")["decision"]["candidates"]
    assert [x["naswot"] for x in again] == [x["naswot"] for x in c]
    # naswot_and_top1 scores the same list both ways and keeps the best sum of the two ranks
    run_search(small_config(tiny_lut_file, **sets, **{"search.rerank": 3,
                                                     "search.rerank_by": "naswot_and_top1"}),
               tmp_path / "both", echo=quiet)
    d = load_checkpoint(tmp_path / "both/checkpoints/last.pt")["decision"]
    both = d["candidates"]
    assert [x["naswot"] for x in both] == [x["naswot"] for x in c]
    assert d["rank"] == choose("naswot_and_top1", naswot=[x["naswot"] for x in both],
                               top1=[x["val_top1"] for x in both])
    assert "best NASWOT and one-shot of " in (tmp_path / "both/train.log").read_text()
    # naswot_and_theta weighs the same NASWOT scores with each network's log-probability
    # under the search's theta, recorded beside them
    run_search(small_config(tiny_lut_file, **sets, **{"search.rerank": 3,
                                                     "search.rerank_by": "naswot_and_theta"}),
               tmp_path / "prior", echo=quiet)
    ckpt = load_checkpoint(tmp_path / "prior/checkpoints/last.pt")
    d, probs = ckpt["decision"], [torch.softmax(t, 0).tolist() for t in ckpt["theta"]]
    prior = d["candidates"]
    assert [x["naswot"] for x in prior] == [x["naswot"] for x in c]
    layers = SearchSpace.from_dict(ckpt["space"]).layers
    for x in prior:
        picks = [layer.candidates.index(op) for layer, op in zip(layers, x["ops"])]
        assert x["log_prob"] == pytest.approx(sum(math.log(p[i]) for p, i in zip(probs, picks)))
    assert [x["log_prob"] for x in prior] == sorted((x["log_prob"] for x in prior), reverse=True)
    assert d["rank"] == choose("naswot_and_theta", naswot=[x["naswot"] for x in prior],
                               theta=[x["log_prob"] for x in prior])
    assert "best NASWOT and theta of " in (tmp_path / "prior/train.log").read_text()
    # search.rerank_alternatives: the same 3 first, then each layer's alternatives
    run_search(small_config(tiny_lut_file, **sets, **{
        "search.rerank": 3, "search.rerank_by": "naswot", "search.rerank_alternatives": True}),
        tmp_path / "alt", echo=quiet)
    d = load_checkpoint(tmp_path / "alt/checkpoints/last.pt")["decision"]
    assert [x["ops"] for x in d["candidates"][:3]] == [x["ops"] for x in c]
    assert d["rank"] == max(range(len(d["candidates"])),
                            key=lambda i: (d["candidates"][i]["naswot"], -i))
    assert (f"best NASWOT of {len(d['candidates'])} checked, theta's most probable and "
            "per-layer alternatives") in (
        tmp_path / "alt/train.log").read_text()


def test_a_check_list_too_long_to_find_is_refused_before_training(tmp_path, tiny_lut_file,
                                                                  tiny_lut_data):
    """A NASWOT check may list up to 1024 networks, but listing them takes memory that grows
    with the space's candidates and layers: the search refuses, naming the longest list that
    fits, before it trains anything."""
    budget = round(2.5 * _fastest_ms(tiny_lut_data), 6)
    cfg = small_config(tiny_lut_file, **{"loss.form": "target", "loss.target_ms": budget,
                                         "search.rerank": 1024, "search.rerank_by": "naswot"})
    with pytest.raises(FbnasError, match=r"search.rerank 1024: .* GiB of memory; use "
                                         r"search.rerank \d+ or fewer"):
        run_search(cfg, tmp_path / "run", echo=quiet)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_search_on_a_space_file_resumes_from_another_folder(tmp_path, tiny_lut_file,
                                                               monkeypatch):
    """The run directory holds what it needs: the space a relative path named is taken from
    the checkpoint and the relative data folder is saved absolute, so the run resumes from
    anywhere, and ends as an uninterrupted one."""
    import shutil

    from fbnas.arch.space import bundled_spaces

    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    shutil.copy(bundled_spaces()["tiny"], here / "mine.yaml")
    (here / "data").symlink_to(CIFAR_SUBSET)
    monkeypatch.chdir(here)
    cfg = small_config(tiny_lut_file, space="mine.yaml", **{"data.limit": 200,
                                                             "data.dir": "data"})
    run_search(cfg, tmp_path / "whole", echo=quiet)
    run_search(cfg, tmp_path / "split", stop_after=1, echo=quiet)
    monkeypatch.chdir(elsewhere)
    r = CliRunner().invoke(main, ["train", "--out", str(tmp_path / "split"), "--resume"])
    assert r.exit_code == 0, r.output
    same_state(load_checkpoint(tmp_path / "whole/checkpoints/last.pt"),
               load_checkpoint(tmp_path / "split/checkpoints/last.pt"))


def test_sandwich_trains_the_biggest_network_every_nth_weight_step(tmp_path, tiny_lut_file,
                                                                    monkeypatch):
    """search.sandwich_every: N: every Nth weight step runs the drawn network and, with
    gradients, the network of each layer's costliest candidate; other weight steps, theta
    steps and evaluation run no such network."""
    from fbnas.search.supernet import Supernet

    forward, paths = Supernet.forward, []

    def recording(self, x, *args, path=None, **kw):
        if self.training and torch.is_grad_enabled():
            paths.append(path)
        return forward(self, x, *args, path=path, **kw)

    monkeypatch.setattr(Supernet, "forward", recording)
    sets = {"search.epochs": 1, "search.warmup_epochs": 1, "search.mode": "hard",
            "data.limit": 256}
    run_search(small_config(tiny_lut_file, **sets), tmp_path / "plain", echo=quiet)
    assert paths and all(p is None for p in paths)  # one drawn network a step
    steps = len(paths)
    costs = load_lut(tiny_lut_file).layer_costs()
    biggest = [max(range(len(c)), key=c.__getitem__) for c in costs]
    for every in (1, 2):
        paths[:] = []
        cfg = small_config(tiny_lut_file, **sets, **{"search.sandwich_every": every})
        run_search(cfg, tmp_path / f"every{every}", echo=quiet)
        want = []
        for step in range(steps):
            want += [None, biggest] if step % every == 0 else [None]
        assert paths == want, every
