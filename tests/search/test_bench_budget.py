"""The budget benchmark's verdict and report, from a results file it appends to."""

import importlib.util
import json

import pytest

from tests.conftest import REPO


def bench():
    spec = importlib.util.spec_from_file_location("bench_budget",
                                                  REPO / "bench" / "bench_budget.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def common():
    """The helpers bench_budget.py shares with bench_quality.py (it put bench/ on the path)."""
    bench()
    import bench_common

    return bench_common


def row(target, found, control, randoms):
    ops = ["skip", "k3_e1"]
    return {"target_ms": target, "retrain_epochs": 5, "supernet_val_top1": [30.0],
            "found_val_top1": [20.0],
            "found": {"ops": ops, "predicted_ms": 0.95 * target, "measured_ms": target,
                      "top1": found},
            "control": {"ops": ops, "predicted_ms": 0.9 * target, "top1": control},
            "random": [{"ops": ops, "predicted_ms": target, "top1": [r]} for r in randoms]}


def test_verdict_needs_more_than_the_seed_spread():
    b = bench()
    v = b.verdict(row(1.0, [40.0, 42.0], [37.0, 37.0], [30.0, 35.0, 41.5, 45.0]))
    assert v["found"] == 41.0 and v["beats_control"] and v["beaten"] == 2
    assert v["random_median"] == pytest.approx(38.25)
    close = b.verdict(row(1.0, [40.0, 42.0], [40.0, 40.5], []))
    assert not close["beats_control"]  # 0.75 apart, seeds 1.0 apart


def test_verdict_weighs_the_pick_and_means_each_randoms_seeds():
    """A row with fbnas pick's network: the found one beats it only beyond both spreads of
    seeds; a random network retrained with two seeds counts by its mean."""
    b = bench()
    r = row(1.0, [40.0, 42.0], [37.0, 37.0], [])
    r["random"] = [{"ops": [], "predicted_ms": 1.0, "top1": [38.0, 44.0]},
                   {"ops": [], "predicted_ms": 1.0, "top1": [30.0, 32.0]}]
    r["pick"] = {"ops": [], "predicted_ms": 0.97, "top1": [39.0, 41.0]}
    v = b.verdict(r)
    assert v["pick"] == 40.0 and not v["beats_pick"] and v["beaten"] == 1  # 41 > 31, not > 41
    assert b.verdict({**r, "pick": {**r["pick"], "top1": [38.0, 38.5]}})["beats_pick"]
    assert b.verdict(row(1.0, [40.0], [37.0], []))["pick"] != b.verdict(r)["pick"]  # NaN


def test_recipe_names_what_differs_from_the_old_defaults():
    b = bench()
    old = row(1.0, [40.0], [37.0], [])  # rows written before the lr was recorded: 0.1
    new = {**old, "loss": {"target_on": "argmax", "target_weight": 1.0}, "weights_lr": 0.05}
    assert b.recipe(old) == "LAT of sample, w 0.2, unit-init retrains"
    assert b.recipe(new) == "LAT of argmax, w 1, unit-init retrains, weights lr 0.05"
    newer = {**new, "loss": {"target_on": "argmax", "target_weight": 1.0,
                             "target_penalty": "multiplier", "multiplier_lr": 0.2},
             "theta_relaxation": "softmax", "retrain_zero_init": True}
    assert b.recipe(newer) == ("LAT of argmax, multiplier lr 0.2, theta steps softmax, "
                               "weights lr 0.05")
    paced = {**newer, "loss": {**newer["loss"], "multiplier_pace": "theta"}}
    assert b.recipe(paced) == ("LAT of argmax, multiplier lr 0.2 at theta's pace, theta steps "
                               "softmax, weights lr 0.05")
    clipped = {**newer, "retrain_clip": 2.0}
    assert b.recipe(clipped) == ("LAT of argmax, multiplier lr 0.2, theta steps softmax, "
                                 "retrains clipped at 2, weights lr 0.05")
    floored = {**clipped, "floor": 0.9}
    assert b.recipe(floored).endswith("retrains clipped at 2, floor 0.9, weights lr 0.05")
    sampled = {**floored, "theta_estimator": "reinforce", "search_epochs": 8,
               "rerank_by": "top1_and_macs", "trained_on": "NVIDIA H100 80GB HBM3"}
    assert b.recipe(sampled) == (
        "LAT of argmax, multiplier lr 0.2, theta steps softmax, reinforce theta steps, 8 search "
        "epochs, one-shot check by top1_and_macs, retrains clipped at 2, floor 0.9, weights lr "
        "0.05 (on NVIDIA H100 80GB HBM3)")
    assert b.recipe({**floored, "theta_estimator": "relaxed", "rerank_by": "top1",
                     "trained_on": "cpu"}) == b.recipe(floored)


def test_report_prints_every_budget_and_draws(tmp_path, capsys):
    results = tmp_path / "budget.jsonl"
    results.write_text("".join(json.dumps(row(t, [40.0, 41.0], [35.0, 35.5], [33.0, 38.0]))
                               + "\n" for t in (2.0, 0.6)))
    png = tmp_path / "budget.png"
    b = bench()
    b.report(type("Args", (), {"results": str(results), "png": str(png)}))
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("| 0.6") or
             line.startswith("| 2 ")]
    assert [line.split()[1] for line in lines] == ["0.6", "2"]  # sorted by budget
    assert "control: yes" in out and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| not run |" in out  # rows from before the pick was recorded


def test_report_prints_the_pick_and_skips_unscored_epochs(tmp_path, capsys):
    r = row(1.0, [40.0, 41.0], [35.0, 35.5], [33.0, 38.0])
    r["pick"] = {"ops": ["skip"], "predicted_ms": 0.95, "top1": [38.0, 39.0]}
    r["supernet_val_top1"] = [None, 28.5, None]  # search.evaluate_every left epoch 3 unscored
    results = tmp_path / "budget.jsonl"
    results.write_text(json.dumps(r) + "\n")
    bench().report(type("Args", (), {"results": str(results), "png": str(tmp_path / "b.png")}))
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("| 1 "))
    assert "| 38.50 +- 0.50 |" in line and "control: yes; pick: yes; 2/2 random" in line
    assert "| 28.50 |" in line


def test_report_keeps_one_recipe_and_says_when_it_was_measured(tmp_path, capsys):
    """report --recipe: that recipe's rows alone, its name once above the table instead of a
    column, and the days the rows were measured on; an unknown name is refused in one line."""
    old = {**row(1.0, [40.0], [37.0], []), "date": "2026-11-23"}
    new = {**old, "loss": {"target_on": "argmax", "target_weight": 1.0}, "weights_lr": 0.05,
           "date": "2026-11-25", "lut_cpu": "AMD EPYC"}
    results = tmp_path / "budget.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in (old, new, {**new, "target_ms": 2.0})))
    b = bench()
    name = b.recipe(new)
    b.report(type("Args", (), {"results": str(results), "png": None, "recipe": name}))
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"recipe: {name}"
    assert out[1].startswith("| budget ms | found ms") and name not in "".join(out[1:])
    assert [line.split()[1] for line in out if line.startswith("| 1 ") or
            line.startswith("| 2 ")] == ["1", "2"]
    assert out[-1] == "measured 2026-11-25 to 2026-11-25; trained on cpu; table's CPU AMD EPYC"
    with pytest.raises(SystemExit, match="no rows of recipe 'nothing'"):
        b.report(type("Args", (), {"results": str(results), "png": None, "recipe": "nothing"}))


@pytest.mark.slow  # spawns processes that retrain on the CIFAR-10 subset
def test_parallel_retrains_equal_one_at_a_time(tmp_path, monkeypatch):
    """--jobs 2 retrains in spawned processes; each run is seeded alone, so the figures are
    those of retraining one network after another."""
    import argparse
    import sys

    from fbnas.arch.space import load_space
    from tests.conftest import CIFAR_SUBSET

    monkeypatch.syspath_prepend(str(REPO / "bench"))  # spawned children import it by name
    sys.modules.pop("bench_common", None)
    import bench_common

    space = load_space("tiny")
    todo = [([l.candidates[0] for l in space.layers], "first", 0),
            ([l.candidates[-1] for l in space.layers], "last", 1)]
    args = argparse.Namespace(config=None, retrain_epochs=1, threads=1, jobs=1, resume=False, set=[
        f"data.dir={CIFAR_SUBSET}", "data.limit=200", "data.batch_size=32", "run.device=cpu"])
    one = bench_common.retrain_many(args, space, todo, tmp_path / "one")
    args.jobs = 2
    two = bench_common.retrain_many(args, space, todo, tmp_path / "two")
    assert one == two and len(one) == 2
    assert (tmp_path / "two" / "retrain" / "last_seed1").is_dir()


def test_resumed_retrains_equal_uninterrupted_ones(tmp_path, monkeypatch):
    """--resume continues a row's retrains where an interruption left them, with the figures
    of a run that was never stopped; a finished retrain is only tested again."""
    import argparse

    from fbnas.arch.space import load_space
    from tests.conftest import CIFAR_SUBSET

    b = common()
    space = load_space("tiny")
    todo = [([l.candidates[0] for l in space.layers], "first", 0)]
    args = argparse.Namespace(config=None, retrain_epochs=2, threads=1, jobs=1, resume=False,
                              set=[f"data.dir={CIFAR_SUBSET}", "data.limit=200",
                                   "data.batch_size=32", "run.device=cpu"])
    straight = b.retrain_many(args, space, todo, tmp_path / "straight")
    real = b.run_retrain
    monkeypatch.setattr(b, "run_retrain", lambda *a, **k: {**real(*a, **k, stop_after=1),
                                                           "test": {"top1": -1.0}})
    assert b.retrain_many(args, space, todo, tmp_path / "cut") == [{"top1": -1.0}]
    metrics = tmp_path / "cut" / "retrain" / "first_seed0" / "metrics.jsonl"
    first = metrics.read_text()
    monkeypatch.setattr(b, "run_retrain", real)
    args.resume = True
    assert b.retrain_many(args, space, todo, tmp_path / "cut") == straight
    # epoch 1 is the cut run's own record (its timing too), epoch 2 was resumed
    assert metrics.read_text().startswith(first) and len(metrics.read_text().splitlines()) == 2
    assert b.retrain_many(args, space, todo, tmp_path / "cut") == straight  # finished: tested


def test_longer_retrains_a_rows_found_network_and_control(tmp_path, capsys):
    """longer mode retrains the newest row at a budget again, found and control with every
    seed, and prints the new figures beside the row's; a budget with no row is refused."""
    import argparse

    from tests.conftest import CIFAR_SUBSET

    b = bench()
    sets = ["space=tiny", f"data.dir={CIFAR_SUBSET}", "data.limit=200", "data.batch_size=32",
            "run.device=cpu"]
    old, new = row(0.05, [10.0], [10.0], []), row(0.05, [20.0, 21.0], [19.0, 18.5], [])
    new["control"]["ops"] = ["skip"] * 4
    for r, ops in ((old, ["skip"] * 4), (new, ["k3_e1", "skip", "k3_e1", "skip"])):
        r.update(config=None, sets=sets)
        r["found"]["ops"] = ops
    results = tmp_path / "budget.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in (old, new)))
    args = argparse.Namespace(results=str(results), target_ms=0.05, retrain_epochs=1,
                              seeds=[0, 1], threads=1, jobs=1, resume=False, set=[],
                              out=str(tmp_path / "out"))
    b.longer(args)
    out = capsys.readouterr().out
    assert "1 retrain epochs" in out
    found = next(line for line in out.splitlines() if line.strip().startswith("found"))
    assert "(seeds [0, 1])" in found and found.endswith("5 epochs: 20.00, 21.00")
    assert sorted(p.name for p in (tmp_path / "out" / "retrain").iterdir()) == [
        "control_seed0", "control_seed1", "found_seed0", "found_seed1"]
    args.target_ms = 0.7
    with pytest.raises(SystemExit, match="no row at 0.7 ms: run budget mode first"):
        b.longer(args)


def test_random_matching_draws_as_many_networks_as_asked(tiny_lut_data, tmp_path):
    """--randoms N retrains N networks of the found one's latency; --randoms 0 none (it once
    drew every match of 200,000 tries)."""
    from fbnas.arch.space import load_space
    from fbnas.io import write_json
    from fbnas.latency.lut import load_lut

    write_json(tmp_path / "tiny.json", tiny_lut_data)
    lut = load_lut(tmp_path / "tiny.json", load_space("tiny"))
    middle = lut.predict([c[0] for c in lut.layer_candidates()])
    drawn = common().random_matching(lut, middle, 3, tol=0.5, seed=0, tries=20_000)
    assert len(drawn) == 3 and len({tuple(d) for d in drawn}) == 3
    assert all(abs(lut.predict(d) / middle - 1) <= 0.5 for d in drawn)
    assert common().random_matching(lut, middle, 0, tol=0.5, seed=0, tries=20_000) == []


def test_random_between_stays_in_the_band(tiny_lut_data, tmp_path):
    """Random networks within a budget's band [floor * B, B]: what the check chooses from."""
    from fbnas.arch.space import load_space
    from fbnas.io import write_json
    from fbnas.latency.lut import load_lut

    write_json(tmp_path / "tiny.json", tiny_lut_data)
    lut = load_lut(tmp_path / "tiny.json", load_space("tiny"))
    middle = lut.predict([c[0] for c in lut.layer_candidates()])
    drawn = common().random_between(lut, 0.7 * middle, middle, 4, seed=1, tries=20_000)
    assert len({tuple(d) for d in drawn}) == len(drawn) >= 2
    assert all(0.7 * middle <= lut.predict(d) <= middle for d in drawn)


@pytest.mark.slow  # a search, a pick and seven one-epoch retrains on the CIFAR-10 subset
def test_budget_row_holds_the_pick_and_band_randoms_with_every_seed(tmp_path, capsys):
    """budget mode on the bundled budget recipe: found, control, fbnas pick's network and
    random networks within the band [floor * B, B], each retrained with every seed."""
    import argparse

    from tests.conftest import CIFAR_SUBSET

    b = bench()
    results = tmp_path / "budget.jsonl"
    args = argparse.Namespace(
        config="budget", out=str(tmp_path / "out"), search_epochs=2, retrain_epochs=1,
        randoms=2, tol=0.1, seeds=[0, 1], seed=0, threads=1, jobs=1, search_seed=0,
        set=["space=tiny", "lut=lookup_tables/tiny_ort.json", f"data.dir={CIFAR_SUBSET}",
             "data.limit=400", "data.batch_size=32", "run.device=cpu"],
        reuse_search=False, resume=False, target_ms=0.03, results=str(results), time_rounds=2)
    b.budget(args)
    r = json.loads(results.read_text())
    assert r["rerank_by"] == "naswot_and_theta_deepest_then_one_shot" and r["random_band"] == "budget"
    # what repeats the row: the search's seed and the retrains' seeds, in the order of top1
    assert r["search_seed"] == 0 and r["seeds"] == [0, 1]
    for net in [r["found"], r["control"], r["pick"], *r["random"]]:
        assert len(net["top1"]) == 2 and 0.9 * 0.03 <= net["predicted_ms"] <= 0.03
    assert "pick top-1 %" in capsys.readouterr().out
    # what the check compared, and whether its fewest-skip filter chose: in the row, and
    # printed again from the run folder by check mode
    c = r["check"]
    assert c["checked"] == sum(c["skips_checked"].values()) > 1
    assert 1 <= sum(c["skips_scored"].values()) <= 16
    assert set(c["skips_scored"]) <= set(c["skips_checked"])
    assert isinstance(c["depth_filter_moved"], bool)
    assert 0 <= c["top1_scored"][0] <= c["top1_scored"][1] <= 100
    b.check(argparse.Namespace(target_ms=0.03, out=args.out))
    printed = capsys.readouterr().out.splitlines()
    assert json.loads(printed[0]) == c
    assert printed[1].startswith(f"0.03 ms (search seed 0): the check compared {c['checked']} ")


def test_check_mode_names_the_folder_it_needs(tmp_path):
    import argparse

    with pytest.raises(SystemExit, match="no search checkpoint .* --out"):
        bench().check(argparse.Namespace(target_ms=1.0, out=str(tmp_path)))
    with pytest.raises(SystemExit, match="needs --out"):
        bench().check(argparse.Namespace(target_ms=None, out=None))


def test_report_says_what_each_rows_check_compared(tmp_path, capsys):
    import argparse

    b = bench()
    checked = row(1.8, [60.0], [58.0], [61.0])
    checked.update(search_seed=7, check={"checked": 64, "skips_checked": {"3": 47, "4": 17},
                                         "skips_scored": {"3": 16}, "top1_scored": [17.91, 19.49],
                                         "depth_filter_moved": False})
    results = tmp_path / "budget.jsonl"
    results.write_text("\n".join(json.dumps(r) for r in [row(1.0, [50.0], [49.0], []), checked]))
    b.report(argparse.Namespace(results=str(results), png=None, recipe=None))
    out = capsys.readouterr().out.splitlines()
    # two rows of one budget are told apart by their search seed where it was recorded
    assert any(l.startswith("| 1.8 (seed 7) |") for l in out)
    assert any(l.startswith("| 1 |") for l in out)
    lines = [l for l in out if "the check compared" in l]
    assert lines == ["1.8 ms (search seed 7): the check compared 64 networks (47 with 3 skip, "
                     "17 with 4 skip), scored 16 one-shot (16 with 3 skip, top-1 17.91 to 19.49); "
                     "the fewest-skip filter changed nothing"]
