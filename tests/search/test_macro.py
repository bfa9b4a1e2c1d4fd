"""NAS-Bench-Macro: the bundled space against the benchmark, the lookup, and the bench."""

import importlib.util
import json
import random

import pytest

from fbnas.arch.definition import build_model
from fbnas.arch.space import load_space
from fbnas.errors import FbnasError
from fbnas.machine import cpu_model
from tests.conftest import REPO, bench_on_path

bench_on_path()
from groundtruth import (Truth, all_keys, judge, key_of, latency_quantile,  # noqa: E402
                         load_truth, ops_of, pareto_front)

BENCH = REPO.parent / "shared" / "data" / "nas-bench-macro"


def require_benchmark() -> dict:
    """The benchmark file's entries, or a failure saying where it was looked for."""
    path = BENCH / "nas-bench-macro_cifar10.json"
    if not path.is_file():
        pytest.fail(f"this test needs NAS-Bench-Macro at {BENCH} (the repository's "
                    "../shared/data/nas-bench-macro)", pytrace=False)
    return json.loads(path.read_text())


def test_bundled_space_has_the_benchmarks_parameter_counts():
    raw = require_benchmark()
    space = load_space("nasbench_macro")
    keys = ["11111221", "02012100", "00000000", "22222222", "00011110"]
    keys += random.Random(0).sample(sorted(raw), 20)
    for key in keys:
        model = build_model(space.definition(ops_of(key)))
        assert sum(p.numel() for p in model.parameters()) == raw[key]["params"], key


def test_keys_encode_both_ways_and_look_up_the_benchmark():
    assert key_of(["k5_e6", "skip", "k3_e3"]) == "201"
    assert ops_of("201") == ["k5_e6", "skip", "k3_e3"]
    for key in ("00000000", "21111200", "12012012"):
        assert key_of(ops_of(key)) == key
    truth = load_truth(BENCH)
    assert truth["11111221"] == pytest.approx(92.303, abs=1e-3)
    assert truth["00000000"] == pytest.approx(45.4, abs=0.1)
    with pytest.raises(FbnasError, match="not a NAS-Bench-Macro candidate"):
        key_of(["k3_e1"])
    with pytest.raises(FbnasError, match="digits 0, 1 and 2"):
        ops_of("0132")


def test_networks_one_skip_apart_in_order_are_one_network_in_the_benchmark():
    """same_network joins keys that differ only in where an identity skip sits within a run
    of equal-shape layers; the benchmark trained those once (each class has one accuracy),
    and the 6,561 keys are 3,969 networks: 9 x 21 x 21 over the three stages."""
    from fbnas.search.window import same_network

    raw = require_benchmark()
    space = load_space("nasbench_macro")
    classes: dict = {}
    for key, entry in raw.items():
        classes.setdefault(same_network(space, ops_of(key)), set()).add(entry["mean_acc"])
    assert len(classes) == 3969
    assert all(len(accuracies) == 1 for accuracies in classes.values())
    same = same_network(space, ops_of("22211101"))
    assert same == same_network(space, ops_of("22211110"))
    assert same != same_network(space, ops_of("22211011"))  # the transition layer holds
    assert same_network(space, ops_of("10000000")) != same_network(space, ops_of("01000000"))


def test_the_checks_networks_are_distinct_networks():
    """top_in_window on the bundled table lists k networks of which no two are the same
    network, the first still ops_in_window's, even where theta favours skip at every layer."""
    from fbnas.latency.lut import load_lut
    from fbnas.search.window import ops_in_window, same_network, top_in_window

    space = load_space("nasbench_macro")
    lut = load_lut(REPO / "lookup_tables" / "nasbench_macro_ort.json")
    budget = 2069.0  # µs: the bench's budget at the 60th percentile of the space
    for probs in ([[0.2, 0.5, 0.3]] * 8, [[0.5, 0.3, 0.2]] * 8):
        got = top_in_window(lut, space, probs, budget, 0.9, 8)
        assert got[0] == ops_in_window(lut, space, probs, budget, 0.9)
        assert len(got) == 8 and all(lut.predict(o) <= budget for o in got)
        assert len({same_network(space, o) for o in got}) == 8


def test_a_file_that_is_not_the_benchmark_is_refused(tmp_path):
    (tmp_path / "b.json").write_text(json.dumps({"01": {"mean_acc": 50.0}}))
    with pytest.raises(FbnasError, match="holds 1 networks"):
        load_truth(tmp_path / "b.json")
    (tmp_path / "c.json").write_text("[1, 2]")
    with pytest.raises(FbnasError, match="not a NAS-Bench-Macro file"):
        load_truth(tmp_path / "c.json")
    with pytest.raises(FbnasError, match="does not exist"):
        load_truth(tmp_path / "missing")


def tiny_truth() -> tuple[Truth, dict]:
    """Nine 2-layer networks: accuracy and latency made up so the answers are known."""
    acc = {"00": 50, "01": 70, "02": 80, "10": 75, "11": 85, "12": 88, "20": 86, "21": 90,
           "22": 92}
    lat = {"00": 1, "01": 2, "02": 4, "10": 2, "11": 3, "12": 5, "20": 4, "21": 5, "22": 8}
    return Truth({k: float(v) for k, v in acc.items()}), {k: float(v) for k, v in lat.items()}


def test_percentile_oracle_and_near_budget_mean():
    truth, lat = tiny_truth()
    v = judge(truth, lat, 4.0, "02")  # within 4: 00 01 02 10 11 20
    assert v.within == 6 and v.oracle == "20" and v.oracle_accuracy == 86
    assert v.percentile == pytest.approx(100 * 4 / 6)  # beats or ties 00 01 02 10
    assert v.gap == pytest.approx(6)
    assert v.near_mean == pytest.approx(83)  # latency >= 3.6: 02 and 20
    assert judge(truth, lat, 4.0, "20").percentile == 100
    assert pareto_front(truth, lat) == ["00", "10", "11", "20", "21", "22"]
    assert latency_quantile(lat, 0.5) == 4.0
    with pytest.raises(FbnasError, match="no network is within"):
        judge(truth, lat, 0.5, "00")
    assert len(all_keys(2)) == 9


def test_report_counts_the_networks_a_search_could_beat_its_control_with(capsys):
    """report's headroom table: within each budget, the networks more accurate than the
    control's, those by more than the benchmark's seed spread, and how the searches did."""
    truth, lat = tiny_truth()
    truth.accuracy["12"] = 90.1  # 0.1 above 21, inside the seed spread
    rows = [{"budget_ms": 0.005, "control": "21", "accuracy": a, "control_accuracy": 90.0}
            for a in (90.1, 90.0, 88.0)]
    rows.append({"budget_ms": 0.004, "control": "20", "accuracy": 86.0,
                 "control_accuracy": 86.0})
    bench()  # bench/ on the path, as the bench's own imports need it
    from macro_report import headroom

    headroom(rows, truth, lat)
    lines = capsys.readouterr().out.splitlines()
    # within 4: 20 is the best of six, so nothing can beat it
    assert lines[2] == "| 0.004 | 20 (86.00) | 6 | 0 | 0 | 0 / 1 / 0 |"
    # within 5: 00 01 02 10 11 12 20 21; only 12 is above 21, by 0.1
    assert lines[3] == "| 0.005 | 21 (90.00) | 8 | 1 | 0 | 1 / 1 / 1 |"


class MacsTable:
    """A table stand-in: a network's MACs, 10 million per digit sum of its key."""

    def raw_sum(self, ops, metric):
        assert metric == "macs"
        return 1e7 * sum(int(c) for c in key_of(ops))


def test_report_by_budget_sums_each_budgets_searches_and_says_where(capsys):
    """report --by-budget: one line per budget (oracle, median and worst found network, gap,
    percentile, each distinct control, wins/ties/losses), then when and on which CPU model the
    rows were searched, so that a pasted table carries where it was measured."""
    def row(budget, acc, control_acc, control="21", **more):
        return {"budget_ms": budget, "oracle": "22", "oracle_accuracy": 92.0,
                "accuracy": acc, "gap": 92.0 - acc, "percentile": acc, "control": control,
                "control_accuracy": control_acc, **more}

    rows = [row(1.0, 91.0, 90.0, date="2026-11-29", cpu="AMD EPYC"),
            row(1.0, 90.0, 90.0, date="2026-12-04", cpu="AMD EPYC"),
            row(1.0, 89.0, 90.5, control="12", date="2026-12-02"),
            row(2.0, 92.0, 91.0)]
    bench()
    from macro_report import by_budget, provenance

    by_budget(rows)
    provenance(rows)
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == ("| 1 | 3 | 22 (92.00) | 90.00 (89.00) | 2.00 | 90.0 | 21 (90.00), "
                        "12 (90.50) | 1 / 1 / 1 |")
    assert lines[3] == "| 2 | 1 | 22 (92.00) | 92.00 (92.00) | 0.00 | 92.0 | 21 (91.00) | 1 / 0 / 0 |"
    assert lines[4] == ("searched 2026-11-29 to 2026-12-04; CPU model (searches): AMD EPYC (2), "
                        "not recorded (2)")


def test_report_decides_a_recorded_check_again_by_the_macs_rule():
    """report --rerank-by: a row's recorded one-shot checks decided again by another rule,
    judged by lookup, beside the row; rows without recorded checks are left out."""
    truth, lat = tiny_truth()
    # MACs (MacsTable): 11 2e7, 12 3e7, 10 1e7, 20 2e7
    row = {"recipe": "r", "budget_ms": 0.005, "rerank_by": "top1", "found": "11",
           "found_candidates": [["11", 45.0, 1.0], ["12", 44.9, 1.0], ["10", 44.8, 1.0]],
           "control": "11", "control_candidates": [["11", 40.0, 1.0], ["20", 39.0, 1.0]]}
    b = bench()
    again = b.redecided(row, "top1_and_macs", truth, MacsTable(), lat, no_naswot)
    assert again["recipe"] == "r, re-decided by top1_and_macs"
    # rank sums 11: 3 + 2, 12: 2 + 3, 10: 1 + 1; a tie goes to the better top-1
    assert again["found"] == "11" and again["accuracy"] == 85
    row["found_candidates"] = [["10", 45.0, 1.0], ["12", 44.9, 1.0], ["11", 44.8, 1.0]]
    again = b.redecided(row, "top1_and_macs", truth, MacsTable(), lat, no_naswot)
    # 10: 3 + 1, 12: 2 + 3, 11: 1 + 2: near-equal one-shot scores, the one with more MACs
    assert again["found"] == "12" and again["accuracy"] == 88
    assert again["gap"] == pytest.approx(judge(truth, lat, 5.0, "12").gap)
    # control: 11 and 20 have equal MACs (1.5 each), so its better top-1 stays
    assert again["control"] == "11" and again["control_accuracy"] == 85
    assert b.redecided(row, "top1", truth, MacsTable(), lat, no_naswot) is None  # its own rule
    del row["found_candidates"]
    assert b.redecided(row, "top1_and_macs", truth, MacsTable(), lat, no_naswot) is None


def test_a_row_that_keeps_log_probabilities_is_re_decided_by_a_rule_weighing_theta():
    truth, lat = tiny_truth()
    row = {"recipe": "r", "budget_ms": 0.005, "rerank_by": "naswot", "found": "11",
           "found_candidates": [["11", None, None, 3.0, -1.0], ["12", None, None, 2.9, -1.1],
                                ["10", None, None, 1.0, -4.0]],
           "control": "11", "control_candidates": []}
    b = bench()
    # the NASWOT scores the check recorded: none computed afresh
    again = b.redecided(row, "naswot_and_theta", truth, MacsTable(), lat, no_naswot)
    assert again["recipe"] == "r, re-decided by naswot_and_theta" and again["found"] == "11"
    # the same NASWOT scores with theta's log-probabilities swapped: a quarter of theta's
    # z-score turns a near-tie
    row["found_candidates"][0][4], row["found_candidates"][1][4] = -3.9, -1.0
    again = b.redecided(row, "naswot_and_theta", truth, MacsTable(), lat, no_naswot)
    assert again["found"] == "12"
    # a row saved without log-probabilities cannot be re-decided by such a rule
    row["found_candidates"] = [c[:4] for c in row["found_candidates"]]
    assert b.redecided(row, "naswot_and_theta", truth, MacsTable(), lat, no_naswot) is None


def test_a_re_decided_row_is_named_as_the_recipe_of_its_rule_and_keeps_fbnas_picks_pick():
    """A row decided again by another rule is what the recipe deciding by that rule would
    have found (the training does not depend on the rule), so it takes that recipe's name;
    its pick stays fbnas pick's unless the rule is one fbnas pick decides by."""
    truth, lat = tiny_truth()
    # "10" has one skip layer, "11" and "12" none
    found = [["10", 50.0, 1.0, 3.0, -1.0], ["11", 40.0, 1.0, 2.0, -1.0],
             ["12", 49.0, 1.0, 1.0, -1.0]]
    picked = [["10", None, None, 3.0, -1.0], ["11", None, None, 2.0, -1.0],
              ["12", None, None, 1.0, -1.0]]
    recipe = "8 epochs, check by naswot_and_theta_then_one_shot of 256"
    row = {"recipe": recipe, "budget_ms": 0.005, "rerank_by": "naswot_and_theta_then_one_shot",
           "found": "10", "found_candidates": found, "control": "10", "control_candidates": [],
           "pick_key": "10", "pick_candidates": picked}
    b = bench()
    again = b.redecided(row, "naswot_and_theta_deepest_then_one_shot", truth, MacsTable(), lat,
                        no_naswot)
    # 11 and 12 compete: 12's one-shot lead outweighs 11's NASWOT lead; the pick stays
    assert again["found"] == "12" and again["pick_key"] == "10"
    assert again["recipe"] == "8 epochs, check by naswot_and_theta_deepest_then_one_shot of 256"
    assert again["redecided_from"] == recipe
    # a rule fbnas pick decides by decides the pick too: of 11 and 12 the better NASWOT
    again = b.redecided(row, "naswot_and_theta_deepest", truth, MacsTable(), lat, no_naswot)
    assert again["pick_key"] == "11" and again["recipe"].endswith(
        "check by naswot_and_theta_deepest of 256")
    # a recipe not named after its check is named as re-decided
    assert b.redecided(dict(row, recipe="r"), "naswot_and_top1", truth, MacsTable(), lat,
                       no_naswot)["recipe"] == "r, re-decided by naswot_and_top1"


def no_naswot(keys):
    raise AssertionError("a rule that does not use NASWOT computed it")


def test_report_decides_a_recorded_check_again_by_naswot():
    """report --rerank-by naswot: NASWOT scores come from the keys, so any recorded check can
    be decided again by them; a check recorded without one-shot scores (a NASWOT search's)
    cannot be decided by a rule that needs them."""
    truth, lat = tiny_truth()
    made_up = {"11": 300.0, "12": 310.0, "10": 305.0, "20": 320.0}
    row = {"recipe": "r", "budget_ms": 0.005, "rerank_by": "top1", "found": "11",
           "found_candidates": [["11", 45.0, 1.0], ["12", 44.9, 1.0], ["10", 44.8, 1.0]],
           "control": "11", "control_candidates": [["11", 40.0, 1.0], ["20", 39.0, 1.0]]}
    b = bench()
    again = b.redecided(row, "naswot", truth, MacsTable(), lat,
                        lambda keys: [made_up[k] for k in keys])
    assert again["found"] == "12" and again["control"] == "20"
    assert again["recipe"] == "r, re-decided by naswot"
    row = dict(row, rerank_by="naswot",
               found_candidates=[["11", None, None, 300.0], ["12", None, None, 310.0]])
    assert b.redecided(row, "top1", truth, MacsTable(), lat, no_naswot) is None


def bench():
    spec = importlib.util.spec_from_file_location("bench_macro", REPO / "bench" / "bench_macro.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_rows_recipe_names_what_decides_the_search():
    """Rows of two settings never share a recipe name: the weights-only epochs, shared
    weights, how the transition layers step, theta steps, the last epoch's theta steps,
    theta's rate and its last-epoch rate, and the budget's penalty show in it where they
    differ from the default."""
    from fbnas.config import load_config

    def recipe(*sets):  # the recipe of the rows before the long check became the bundled one
        return bench().recipe_of(load_config(REPO / "configs" / "macro.yaml", [
            "search.rerank=8", "search.rerank_by=naswot", *sets]))

    def earlier(*sets):  # the recipes before the 4-epoch warm-up, which keep their rows' names
        return recipe("search.warmup_epochs=2", "search.final_theta_steps=12",
                      "search.shared_weights=false", *sets)

    assert recipe() == \
        "8 epochs, 4 weights-only, shared weights, reinforce theta steps (16 a weight step in " \
        "the last epoch) (theta lr falling to 0 over the last epoch), check by naswot"
    assert bench().recipe_of(load_config(REPO / "configs" / "macro.yaml")) == \
        "8 epochs, 4 weights-only, shared weights, reinforce theta steps (16 a weight step in " \
        "the last epoch) (theta lr falling to 0 over the last epoch), check by " \
        "naswot_and_theta_early_deepest_then_one_shot of 256"
    # the check: another rule, or another number of networks checked
    assert recipe("search.rerank_by=naswot_and_theta", "search.rerank=256").endswith(
        "(theta lr falling to 0 over the last epoch), check by naswot_and_theta of 256")
    assert bench().recipe_of(load_config(REPO / "configs" / "macro.yaml"), by="naswot_and_theta",
                             k=256).endswith("check by naswot_and_theta of 256")
    # how the transition layers run a weight step
    assert recipe("search.soft_transitions=false") == \
        "8 epochs, 4 weights-only, shared weights, hard transition layers, reinforce theta " \
        "steps (16 a weight step in the last epoch) (theta lr falling to 0 over the last " \
        "epoch), check by naswot"
    assert recipe("search.transition_paths=2").startswith(
        "8 epochs, 4 weights-only, shared weights, 2 paths at transition layers, reinforce")
    # the recipe before shared weights keeps its rows' name
    assert recipe("search.shared_weights=false") == \
        "8 epochs, 4 weights-only, reinforce theta steps (16 a weight step in the last epoch) " \
        "(theta lr falling to 0 over the last epoch), check by naswot"
    assert earlier() == \
        "8 epochs, reinforce theta steps (12 a weight step in the last epoch) (theta lr " \
        "falling to 0 over the last epoch), check by naswot"
    # the recipe before the anneal keeps its rows' name: a rate equal to lr is no anneal
    assert earlier("search.final_theta_steps=4", "optim.theta.final_lr=0.05") == \
        "8 epochs, reinforce theta steps (4 a weight step in the last epoch), check by naswot"
    assert earlier("search.final_theta_steps=0", "optim.theta.final_lr=0.05") == \
        "8 epochs, reinforce theta steps, check by naswot"
    assert earlier("search.final_theta_steps=0", "search.theta_steps=3",
                   "optim.theta.final_lr=0.05") == \
        "8 epochs, reinforce theta steps (3 a weight step), check by naswot"
    assert earlier("search.final_theta_steps=0") == \
        "8 epochs, reinforce theta steps (theta lr falling to 0 over the last epoch), check " \
        "by naswot"
    # a slower theta is a recipe of its own, though its steps and anneal are the bundled ones
    assert earlier("optim.theta.lr=0.025", "search.final_theta_steps=24") == \
        "8 epochs, reinforce theta steps (theta lr 0.025) (24 a weight step in the last " \
        "epoch) (theta lr falling to 0 over the last epoch), check by naswot"
    # and so is a warm-up of another length
    assert recipe("search.warmup_epochs=3") == \
        "8 epochs, 3 weights-only, shared weights, reinforce theta steps (16 a weight step in " \
        "the last epoch) (theta lr falling to 0 over the last epoch), check by naswot"
    # so is how the budget is held: a multiplier, or another weight of the absolute penalty
    anneal = "(12 a weight step in the last epoch) (theta lr falling to 0 over the last epoch)"
    assert earlier("loss.target_penalty=multiplier") == \
        f"8 epochs, reinforce theta steps {anneal} (multiplier penalty, lr 0.1), check by naswot"
    assert earlier("loss.target_weight=0.3") == \
        f"8 epochs, reinforce theta steps {anneal} (penalty weight 0.3), check by naswot"


CUT_SPACE = """
name: macro_cut
input: {channels: 3, resolution: 32}
stem: {channels: 8, kernel: 3, stride: 1}
stages:
  - {channels: 16, blocks: 2, stride: 2}
candidates: [skip, k3_e3, k5_e6]
head: {channels: 32, classes: 10}
"""


@pytest.mark.slow
def test_bench_macro_end_to_end_on_a_two_layer_cut(tmp_path, cifar_subset, capsys):
    from fbnas.io import write_json
    from fbnas.latency.lut import profile_space

    space_file = tmp_path / "cut.yaml"
    space_file.write_text(CUT_SPACE)
    table = tmp_path / "cut.json"
    write_json(table, profile_space(load_space(space_file), rounds=2, extra_rounds=2,
                                    block_time=0.001))
    truth, _ = tiny_truth()
    truth_file = tmp_path / "truth.json"
    truth_file.write_text(json.dumps({k: {"mean_acc": v} for k, v in truth.accuracy.items()}))
    config = tmp_path / "cut_config.yaml"
    config.write_text(f"""
space: {space_file}
lut: {table}
data: {{dir: {cifar_subset}, batch_size: 32, limit: 640}}
search: {{epochs: 2, warmup_epochs: 1, mode: hard, recalibrate_images: 64}}
loss: {{form: target, target_ms: 1.0}}
optim: {{theta: {{lr: 0.1}}}}
""")
    results = tmp_path / "macro.jsonl"
    b = bench()
    common = ["--config", str(config), "--truth", str(truth_file), "--results", str(results)]
    b.main(["search", *common, "--quantiles", "0.5", "--seeds", "0", "--threads", "1",
            "--out", str(tmp_path / "runs"), "--rank", "5"])
    row = json.loads(results.read_text())
    assert row["quantile"] == 0.5 and row["seed"] == 0 and len(row["found"]) == 2
    assert row["rerank_by"] == "top1"  # the search's own rule, recorded with its checks
    # no --recipe: named from the config, its theta rate (not the bundled 0.05) included
    assert row["recipe"] == "2 epochs, 1 weights-only, relaxed theta steps (theta lr 0.1), " \
        "check by top1"
    assert row["found_ms"] <= row["budget_ms"] and row["control_ms"] <= row["budget_ms"]
    assert row["cpu"] == cpu_model() and row["jobs"] == 1  # where the minutes were spent
    # the whole search, set-up and scores included, takes longer than its epochs' training
    assert row["wall_minutes"] > row["search_minutes"] > 0
    assert row["accuracy"] == truth[row["found"]]
    assert row["gap"] == pytest.approx(row["oracle_accuracy"] - row["accuracy"])
    assert 0 < row["percentile"] <= 100 and row["within"] >= 1
    assert row["rank"]["random"]["networks"] == 5
    # one-shot figures on the val split the check sees, and on val and test pooled
    assert set(row["rank"]["random"]) == {"networks", "one_shot", "one_shot_ce", "one_shot_all",
                                          "one_shot_ce_all", "latency", "macs", "naswot"}
    assert all(-1 <= v <= 1 for k, v in row["rank"]["random"].items() if k != "networks")
    # each network the one-shot check scored, for the search and its control: key, top-1, CE,
    # (no NASWOT score) and its log-probability, most probable first
    for scored, pick in ((row["found_candidates"], row["found"]),
                         (row["control_candidates"], row["control"])):
        assert all(len(key) == 2 and 0 <= top1 <= 100 and ce > 0 and nw is None and lp <= 0
                   for key, top1, ce, nw, lp in scored)
        assert [c[4] for c in scored] == sorted((c[4] for c in scored), reverse=True)
        assert not scored or pick == max(scored, key=lambda c: c[1])[0]
    # 9 networks: too few spend 90 to 100% of the budget for a rank correlation
    assert "near_budget" not in row["rank"] or row["rank"]["near_budget"]["networks"] >= 3
    out = capsys.readouterr().out
    assert "Kendall tau" in out and ", NASWOT " in out and row["found"] in out
    # one BN re-estimation serves both splits: each split scores as it does re-estimated alone
    run = next(p for p in (tmp_path / "runs").iterdir() if p.is_dir())
    search = b.finished_search(run)
    path = search.net.path_of([l.candidates[0] for l in search.net.layers])
    loaders = [search.val_loader, search.test_loader]
    together = search.evaluate_on(loaders, path=path)
    assert together == [search.evaluate(loader, path=path) for loader in loaders]
    assert together[0]["images"] > 0 and together[1]["images"] > 0
    # finetune: the check's networks scored and decided again after training on them alone;
    # with no training, exactly what the search's check recorded and decided
    tuned = tmp_path / "finetune.jsonl"
    b.main(["finetune", str(run), *common, "--finetune-epochs", "0", "0.5", "--threads", "1",
            "--finetune-results", str(tuned)])
    zero, half = (json.loads(line) for line in tuned.read_text().splitlines())
    assert zero["keys"] == half["keys"] == [c[0] for c in row["found_candidates"]]
    assert "training" not in zero  # trained as --config trains: no training of its own
    assert zero["after"] == zero["before"] == [c[1:3] for c in row["found_candidates"]]
    assert zero["found_after"] == zero["found_before"] == row["found"]
    assert zero["gap_after"] == zero["gap_before"] == row["gap"]
    # the search's rule (top1) has no fewest-skip filter: unfiltered, the same decision
    assert zero["unfiltered_before"] == zero["unfiltered_after"] == row["found"]
    assert zero["gap_unfiltered_before"] == row["gap"]
    assert half["before"] == zero["before"] and half["after"] != half["before"]
    assert half["finetune_seconds"] > 0 and half["truth"] == [truth[k] for k in half["keys"]]
    # a copy of the weights per skip count, each from the search's own: untrained, the same
    b.main(["finetune", str(run), *common, "--finetune-epochs", "0", "--finetune-split",
            "--threads", "1", "--finetune-results", str(tuned)])
    split = json.loads(tuned.read_text().splitlines()[-1])
    assert split["finetune_split"] == "skip" and split["after"] == zero["before"]
    b.main(["report", *common, "--protocol", "finetune", "--finetune-results", str(tuned)])
    out = capsys.readouterr().out
    assert "| 0 epochs at lr 0.01 | 1 |" in out and "| 0.5 epochs at lr 0.01 | 1 |" in out
    assert "| 0 epochs at lr 0.01, a copy per skip count | 1 |" in out
    untrained = next(line for line in out.splitlines() if line.startswith("| 0 epochs"))
    assert untrained.endswith("| 0 / 1 / 0 |")  # the same decision
    with pytest.raises(SystemExit, match="no rows in .* of seeds --seeds names"):
        b.main(["report", *common, "--protocol", "finetune", "--finetune-results", str(tuned),
                "--seeds", str(row["seed"] + 1)])
    png = tmp_path / "macro.png"
    b.main(["report", *common, "--png", str(png), "--naswot-window"])
    assert png.stat().st_size > 0
    out = capsys.readouterr().out
    assert "1 searches, gap median" in out
    # beside the control, its most probable network undecided by the check (where the
    # control's check listed any: the timed cut's window may hold one network alone)
    if row["control_candidates"]:
        plain = row["accuracy"] > truth[row["control_candidates"][0][0]]
        assert f"its most probable network (no check) {int(plain)}/1" in out
    else:
        assert "(no check)" not in out
    # the training-free search of each budget's window, and NASWOT's ranking of the space
    assert "best NASWOT, 90-100%" in out and "over 9 random networks: NASWOT" in out
    # --seeds compares recipes on the same seeds: a row of another seed is left out
    other = {**row, "seed": 7, "recipe": "seed seven"}
    with results.open("a") as f:
        f.write(json.dumps(other) + "\n")
    b.main(["report", *common, "--seeds", "7"])
    out = capsys.readouterr().out
    assert "| seed seven |" in out and f"| {row['recipe']} |" not in out
    assert "1 searches, gap median" in out
    # --cpu keeps the rows searched on one CPU model (the same seed searches otherwise there)
    with results.open("a") as f:
        f.write(json.dumps({**row, "cpu": "Other CPU 9000", "recipe": "elsewhere"}) + "\n")
    b.main(["report", *common, "--cpu", "other cpu"])
    out = capsys.readouterr().out
    assert "| elsewhere |" in out and "1 searches, gap median" in out
    assert "check by top1 |" not in out  # this machine's row
    # --recipe keeps one recipe's rows, as the README's table and picture show them
    b.main(["report", *common, "--recipe", "seed seven"])
    out = capsys.readouterr().out
    assert "| seed seven |" in out and "| elsewhere |" not in out
    assert "1 searches, gap median" in out
    # a search whose check decides by NASWOT records the scores and no one-shot figures
    b.main(["search", *common, "--quantiles", "0.5", "--seeds", "1", "--threads", "1",
            "--out", str(tmp_path / "runs"), "--set", "search.rerank_by=naswot"])
    row = json.loads(results.read_text().splitlines()[-1])
    assert row["rerank_by"] == "naswot" and row["recipe"].endswith("check by naswot")
    for scored, pick in ((row["found_candidates"], row["found"]),
                         (row["control_candidates"], row["control"])):
        assert all(top1 is None and ce is None for _, top1, ce, _, _ in scored)
        assert not scored or pick == max(scored, key=lambda c: c[3])[0]
    # score --alternatives yes decides the finished search again with each layer's
    # alternatives checked too: the same networks first, and the recipe says so
    naswot_run = sorted((tmp_path / "runs").glob("*s1"))[-1]
    b.main(["score", str(naswot_run), *common, "--alternatives", "yes"])
    again = json.loads(results.read_text().splitlines()[-1])
    assert again["recipe"].endswith("check by naswot with per-layer alternatives")
    before = [c[0] for c in row["found_candidates"]]
    checked = [c[0] for c in again["found_candidates"]] or [again["found"]]  # [] if one
    assert checked[:len(before)] == before
    # a training-free pick is the cost-only control decided by the same check: the same theta
    # steps from the latency term alone, the same list, the same NASWOT scores
    # (no floor, so that more than one of the 9 networks is listed)
    b.main(["score", str(naswot_run), *common, "--rerank", "4", "--rerank-by",
            "naswot_and_theta", "--floor", "0"])
    b.main(["pick", *common, "--quantiles", "0.5", "--seeds", "1", "--rerank", "4", "--set",
            "loss.target_floor=0"])
    rescored, picked = (json.loads(line) for line in results.read_text().splitlines()[-2:])
    assert picked["recipe"] == "training-free pick, check by naswot_and_theta of 4"
    assert picked["found"] == picked["control"] == rescored["control"]
    assert picked["accuracy"] == truth[picked["found"]] and picked["budget_ms"] == \
        rescored["budget_ms"]
    assert len(picked["found_candidates"]) == 4
    assert [c[0] for c in picked["found_candidates"]] == [
        c[0] for c in rescored["control_candidates"]]
    # a check that shortlists: the search (Search.rerank) and its control (the bench) score
    # every listed network by NASWOT and at most the shortlist's 8 one-shot (the cut has 8
    # different networks, all within its largest budget with no floor; the shortlist's cut
    # is test_oneshot_check's)
    b.main(["search", *common, "--quantiles", "1.0", "--seeds", "2", "--threads", "1",
            "--out", str(tmp_path / "runs"), "--set", "search.rerank=16", "--set",
            "search.rerank_by=naswot_and_theta_then_top1", "--set", "loss.target_floor=0"])
    row = json.loads(results.read_text().splitlines()[-1])
    assert row["recipe"].endswith("check by naswot_and_theta_then_top1 of 16")
    for scored, pick in ((row["found_candidates"], row["found"]),
                         (row["control_candidates"], row["control"])):
        assert len(scored) >= 2 and all(c[3] is not None for c in scored)
        shot = [c for c in scored if c[1] is not None]
        assert len(shot) == min(8, len(scored)) and pick in [c[0] for c in shot]


def paired_row(recipe, budget, seed, accuracy, control, oracle=93.0):
    return {"recipe": recipe, "budget_ms": budget, "seed": seed, "found": f"k{accuracy}",
            "accuracy": accuracy, "gap": round(oracle - accuracy, 6), "percentile": 99.0,
            "oracle_accuracy": oracle, "control_accuracy": control}


def test_report_paired_compares_two_recipes_search_by_search(tmp_path, capsys):
    """report --paired A B: rows paired by budget and seed (a recipe's later row where it has
    two: the rerun replaces the first), B's wins counted against A in points of true top-1,
    and each recipe's wins, ties and losses against its control budget by budget; rows
    without a partner are left out."""
    b = bench()  # puts bench/ on the path, as running the script does
    from macro_paired import pairs, report_paired

    rows = [paired_row("A", 1.0, 0, 91.0, 90.0),
            paired_row("A", 1.0, 0, 92.0, 90.0),  # the rerun: this one is paired
            paired_row("B", 1.0, 0, 92.5, 92.5),
            paired_row("A", 2.0, 0, 92.0, 92.5),
            paired_row("B", 2.0, 0, 92.0, 92.5),
            paired_row("A", 2.0, 1, 92.4, 92.0),
            paired_row("B", 2.0, 1, 92.1, 92.0),
            paired_row("B", 3.0, 0, 90.0, 91.0)]  # no A at 3 ms: unpaired
    both = pairs(rows, "A", "B")
    assert [(x["budget_ms"], x["seed"], x["accuracy"]) for x, _ in both] == \
        [(1.0, 0, 92.0), (2.0, 0, 92.0), (2.0, 1, 92.4)]
    lines = []
    report_paired(rows, "A", "B", echo=lines.append)
    out = "\n".join(lines)
    assert "3 pairs" in out
    assert "B against A: better in 1, same in 1, worse in 1; mean +0.07 points" in out
    assert "A: gap median 1.00," in out and "against its control 2 won, 0 tied, 1 lost" in out
    assert "B: gap median 0.90," in out and "against its control 1 won, 1 tied, 1 lost" in out
    # by budget: at 2 ms A won once and lost once, B tied once and won once
    assert "| 1 | 1 | +0.50 | 1/0/0 | 0/1/0 |" in out
    assert "| 2 | 2 | -0.15 | 1/0/1 | 1/0/1 |" in out
    with pytest.raises(SystemExit, match="no rows of recipe 'C'"):
        report_paired(rows, "A", "C", echo=lines.append)
    with pytest.raises(SystemExit, match="share no budget and seed"):
        report_paired([paired_row("A", 1.0, 0, 91.0, 90.0), paired_row("B", 1.0, 1, 91.0, 90.0)],
                      "A", "B", echo=lines.append)
    # from the command line: --seeds keeps its rows first, so seed 1's pair is left out
    results = tmp_path / "macro.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    b.main(["report", "--results", str(results), "--paired", "A", "B", "--seeds", "0"])
    assert "2 pairs" in capsys.readouterr().out
