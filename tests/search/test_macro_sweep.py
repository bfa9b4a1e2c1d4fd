"""bench_macro.py sweep and report --protocol sweep: budgets, fresh seeds, rows and figures,
on a made-up 2-layer benchmark with the search and the pick replaced by fakes."""

import json
import random
from argparse import Namespace

import pytest

from tests.search.test_macro import MacsTable, bench, tiny_truth

b = bench()  # bench/ on the path, as the bench's own imports need it
from groundtruth import judge, latency_quantile  # noqa: E402
import macro_sweep  # noqa: E402


def test_sweep_budgets_lie_at_every_5th_percentile():
    lat = {f"{i:03d}": float(10 * i) for i in range(1, 201)}  # 10 to 2000 us
    qs = macro_sweep.sweep_quantiles(None)
    assert len(qs) == 19 and qs[0] == 0.05 and qs[-1] == 0.95 and qs[9] == 0.5
    got = b.budgets(Namespace(target_ms=None, quantiles=qs), lat)
    assert got == [(q, round(latency_quantile(lat, q) / 1000, 3)) for q in qs]
    assert got[9] == (0.5, 1.005)  # the median of 10..2000 us
    # --quantiles narrows it to a part of the same grid, so partial sweeps add up
    assert macro_sweep.sweep_quantiles([0.75, 0.25, 0.25]) == [0.25, 0.75]
    with pytest.raises(SystemExit, match="0.33 are not sweep budgets"):
        macro_sweep.sweep_quantiles([0.25, 0.33])


def test_seeds_are_drawn_afresh_and_never_one_already_recorded():
    draws = iter([5, 7, 7, 6, 8, 9])
    assert macro_sweep.draw_seeds(3, {5, 6}, draw=draws.__next__) == [7, 8, 9]
    taken = set(range(1000, 1100))
    first = macro_sweep.draw_seeds(38, taken)
    second = macro_sweep.draw_seeds(38, taken)
    assert len(set(first)) == 38 and not taken & set(first)
    assert first != second  # from the system's randomness, not a fixed list
    # each budget has seeds of its own; every budget's first seed before any second
    plan = macro_sweep.sweep_plan([(0.25, 1.0), (0.5, 2.0)], 2, taken)
    assert [(q, ms) for q, ms, _ in plan] == [(0.25, 1.0), (0.5, 2.0), (0.25, 1.0), (0.5, 2.0)]
    assert len({s for _, _, s in plan}) == 4


def fake_search(truth, lat, calls):
    """A stand-in for search_one: the slowest network within the budget, judged as a search's
    row is, with every field print_table shows; it fails on the call numbered ``calls[0]``."""
    def search_one(args, truth_, lut, space, lat_, naswot, quantile, budget_ms, seed):
        calls.append((budget_ms, seed))
        if len(calls) == calls[0]:
            raise KeyboardInterrupt  # the sweep stopped by hand
        found = max((k for k in lat if lat[k] <= budget_ms * 1000), key=lat.__getitem__)
        v = judge(truth, lat, budget_ms * 1000, found)
        return {"quantile": quantile, "budget_ms": budget_ms, "floor": 0.5, "seed": seed,
                "recipe": "r", "found": found, "found_ms": lat[found] / 1000,
                "accuracy": v.accuracy, "percentile": v.percentile, "oracle": v.oracle,
                "oracle_accuracy": v.oracle_accuracy, "gap": v.gap, "near_mean": v.near_mean,
                "control": found, "control_accuracy": v.accuracy, "theta_decided": 0.9,
                "argmax_stable": 1.0, "search_minutes": 0.1}
    return search_one


def test_sweep_appends_a_row_per_search_with_what_needs_no_training(tmp_path, monkeypatch):
    """Each row: the search's fields, protocol sweep, fbnas pick's network and check at the
    same budget and seed, the window's most-MACs network and 20 (here all) random networks of it seeded by
    the row's seed; a second sweep draws seeds neither sweep nor the earlier rows used, and a
    sweep stopped halfway keeps the rows it made."""
    truth, lat = tiny_truth()
    results = tmp_path / "macro.jsonl"
    results.write_text(json.dumps({"seed": 1234, "recipe": "r"}) + "\n")
    calls = [99]
    picks = []

    def pick_one(args, truth_, lut, space, lat_, naswot, quantile, budget_ms, seed):
        picks.append((budget_ms, seed))
        return {"found": "11", "wall_minutes": 0.2,
                "found_candidates": [["11", None, None, 300.0, -1.0]]}

    monkeypatch.setattr(b, "setting", lambda args: (None, MacsTable(), truth, lat, None))
    monkeypatch.setattr(b, "search_one", fake_search(truth, lat, calls))
    monkeypatch.setattr(b, "pick_one", pick_one)
    argv = ["sweep", "--results", str(results), "--quantiles", "0.5", "0.75"]
    b.main(argv)
    rows = [json.loads(line) for line in results.read_text().splitlines()[1:]]
    assert len(rows) == 4 and picks == calls[1:]  # the pick at each search's budget and seed
    # budgets: the median of the nine latencies is 4 us, the 75th percentile 5 us
    assert [r["budget_ms"] for r in rows] == [0.004, 0.005, 0.004, 0.005]
    seeds = [r["seed"] for r in rows]
    assert len(set(seeds)) == 4 and 1234 not in seeds
    for r in rows:
        assert r["protocol"] == "sweep" and r["recipe"] == "r" and r["sweep_started"]
        assert r["pick_key"] == "11" and r["pick_minutes"] == 0.2
        # the pick's check, so that report --rerank-by can decide the pick again
        assert r["pick_candidates"] == [["11", None, None, 300.0, -1.0]]
        assert r["found"] in lat and r["budget_ms"] in (0.004, 0.005)
        window = sorted(k for k, v in lat.items()
                        if 0.5 * r["budget_ms"] * 1000 <= v <= r["budget_ms"] * 1000)
        assert r["window_ms"] == [0.5 * r["budget_ms"], r["budget_ms"]]
        # MACs (MacsTable) follow the key's digit sum: the 2 to 4 us window's most are 02, 11
        # and 20 (2 each), the 2.5 to 5 us window's 12 and 21 (3); a tie goes to the first key
        assert r["max_macs_key"] == {0.004: "02", 0.005: "12"}[r["budget_ms"]]
        assert r["random_keys"] == random.Random(r["seed"]).sample(window, len(window))
    # again: fresh seeds, none that a row already holds
    b.main(argv)
    again = [json.loads(line)["seed"] for line in results.read_text().splitlines()[5:]]
    assert len(again) == 4 and not set(again) & {1234, *seeds}
    # stopped at its third search: the two finished rows are in the file
    calls[:] = [4]
    with pytest.raises(KeyboardInterrupt):
        b.main(argv)
    assert len(results.read_text().splitlines()) == 1 + 8 + 2
    with pytest.raises(SystemExit, match="drop --target-ms and --seeds"):
        b.main([*argv, "--seeds", "3"])


def sweep_row(budget, seed, found, pick, near_mean=80.0):
    """A hand-made sweep row on tiny_truth, its oracle within ``budget`` (us)."""
    truth, lat = tiny_truth()
    v = judge(truth, lat, budget, found)
    return {"recipe": "r", "protocol": "sweep", "quantile": 0.5, "budget_ms": budget / 1000,
            "seed": seed, "found": found, "found_ms": lat[found] / 1000, "control": pick,
            "control_ms": lat[pick] / 1000, "control_accuracy": truth[pick],
            "accuracy": v.accuracy, "oracle": v.oracle,
            "oracle_accuracy": v.oracle_accuracy, "gap": v.gap, "near_mean": near_mean,
            "pick_key": pick, "max_macs_key": "20", "random_keys": ["00", "01", "10"],
            "cpu": "AMD EPYC", "date": "2026-12-05"}


def test_report_sweep_figures_on_hand_made_rows(tmp_path, monkeypatch, capsys):
    """Per budget: the gaps of found, pick, most MACs and the median random network; over the
    sweep: median, 90th percentile and worst gap, wins/ties/losses against the pick with a
    difference within the benchmark's seed spread a tie, and the counts above the window's
    median random network and the near-budget mean."""
    truth, lat = tiny_truth()
    truth.accuracy["02"] = 85.9  # 0.1 under 20 (86): a tie with it
    # within 4 us the oracle is 20 (86); within 5, 21 (90); random median: 01 00 10 -> 70
    rows = [sweep_row(4.0, 1, "20", "02"),  # gap 0; pick 02 (85.9): a tie
            sweep_row(4.0, 2, "11", "20"),  # gap 1; against 86: a loss
            sweep_row(5.0, 3, "21", "12"),  # gap 0; pick 12 (88): a win
            sweep_row(5.0, 4, "01", "21", near_mean=75.0)]  # gap 20, under the random median
    lines = []
    macro_sweep.report_sweep(rows, truth, echo=lines.append)
    assert lines[0] == "r"
    assert lines[3] == "| 0.004 (0.5) | 2 | 20 (86.00) | 0.50 (1.00) | 0.05 (0.10) | 0.00 | 16.00 |"
    assert lines[4] == "| 0.005 (0.5) | 2 | 21 (90.00) | 10.00 (20.00) | 1.00 (2.00) | 4.00 | 20.00 |"
    # found gaps 0 1 0 20: median 0.5, 90th percentile 1 + 0.7 x 19 = 14.3; picks 0.1 0 2 0
    # (mean 0.525, 0.52 as printed)
    assert lines[5] == (
        "4 searches at 2 budgets; found gap median 0.50, mean 5.25, 90th percentile 14.30, "
        "worst 20.00; pick gap median 0.05, mean 0.52, 90th percentile 1.43, worst 2.00; "
        "against the pick 1 won, 1 tied (within 0.14 points, the benchmark's seed spread), 2 "
        "lost; above the window's median random network 3/4, above the near-budget mean 3/4")
    # from the command line: --protocol sweep keeps the sweep's rows, and the default report
    # leaves them out
    results = tmp_path / "macro.jsonl"
    other = dict(rows[0], protocol=None, recipe="chosen on")
    results.write_text("".join(json.dumps(r) + "\n" for r in [*rows, other]))
    monkeypatch.setattr(b, "setting", lambda args: (None, MacsTable(), truth, lat, None))
    b.main(["report", "--results", str(results), "--protocol", "sweep"])
    out = capsys.readouterr().out
    assert "4 searches at 2 budgets" in out and "AMD EPYC (4)" in out
    assert "chosen on" not in out
    # --png draws the sweep's networks over every network of the space
    png = tmp_path / "sweep.png"
    b.main(["report", "--results", str(results), "--protocol", "sweep", "--png", str(png)])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # --rerank-by adds the same searches decided by another rule from what their checks
    # recorded: the second search's check held 20 too, whose NASWOT score leads
    rows[1]["found_candidates"] = [["11", 50.0, 1.0, 1.0, -1.0], ["20", None, None, 3.0, -1.0]]
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    b.main(["report", "--results", str(results), "--protocol", "sweep", "--rerank-by",
            "naswot_and_theta"])
    out = capsys.readouterr().out.splitlines()
    assert out[out.index("r, re-decided by naswot_and_theta") + 4].startswith(
        "1 searches at 1 budgets; found gap median 0.00, mean 0.00")
    # the provenance counts the searches, not their re-decided copies
    assert "AMD EPYC (4)" in out[-1]
    # a recipe with no sweep rows says so
    with pytest.raises(SystemExit, match="no sweep rows"):
        b.main(["report", "--results", str(results), "--protocol", "sweep", "--recipe", "x"])


def test_a_recipes_sweep_report_takes_in_the_later_sweeps_decided_again_by_its_check(
        tmp_path, monkeypatch, capsys):
    """--since keeps the sweeps run after a recipe was chosen; with --rerank-by, a search
    whose recipe differs only in its check counts as the recipe deciding by that check, and
    the summary says how many were decided so afterwards."""
    truth, lat = tiny_truth()
    native = dict(sweep_row(4.0, 5, "20", "20"), recipe="e, check by naswot_and_theta of 256",
                  rerank_by="naswot_and_theta", sweep_started="2026-12-06T17:00:00")
    # a top1 check kept 11; NASWOT (the 4th figure) leads with 20, the window's oracle
    checked = [["11", 50.0, 1.0, 1.0, -1.0], ["20", 40.0, 1.0, 3.0, -1.0]]
    other = dict(sweep_row(4.0, 6, "11", "20"), recipe="e, check by top1 of 256",
                 rerank_by="top1", found_candidates=checked, control_candidates=[],
                 sweep_started="2026-12-06T17:00:00")
    earlier = dict(other, seed=7, sweep_started="2026-12-06T10:00:00")
    results = tmp_path / "macro.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in (native, other, earlier)))
    monkeypatch.setattr(b, "setting", lambda args: (None, MacsTable(), truth, lat, None))
    b.main(["report", "--results", str(results), "--protocol", "sweep", "--since",
            "2026-12-06T16:00", "--rerank-by", "naswot_and_theta", "--recipe",
            "e, check by naswot_and_theta of 256"])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "e, check by naswot_and_theta of 256" and len(out) == 6
    assert out[4].startswith("2 searches at 1 budgets; found gap median 0.00, mean 0.00")
    assert out[4].endswith("; 1 of the 2 decided by this check afterwards, from what their "
                           "checks recorded (report --rerank-by)")
    assert out[5].endswith("AMD EPYC (2)")


def test_the_shortlist_taus_say_what_the_one_shot_check_ranked_within_its_shortlist():
    """Over the networks a check scored one-shot: each recorded figure's Kendall tau and the
    decision's own weighted score's, averaged over the rows whose rule weighs one-shot."""
    truth, _ = tiny_truth()
    row = sweep_row(5.0, 1, "21", "12")
    # true order 21 (90) > 12 (88) > 11 (85) > 10 (75); the last was not shortlisted
    row["rerank_by"] = "naswot_and_theta_then_one_shot"
    row["found_candidates"] = [["11", 30.0, 1.0, 9.0, -1.0], ["12", 40.0, 1.0, 8.0, -2.0],
                               ["21", 50.0, 1.0, 7.0, -3.0], ["10", None, None, 1.0, -4.0]]
    taus = macro_sweep.shortlist_taus([row], truth)
    assert taus["one-shot"] == pytest.approx(1.0) and taus["NASWOT"] == pytest.approx(-1.0)
    assert taus["theta"] == pytest.approx(-1.0)
    # the decision: one-shot's z-scores against NASWOT's, cancelling, and a quarter of
    # theta's, reversed: the decision ranks as theta
    assert taus["the decision"] == pytest.approx(-1.0)
    # a row decided by a rule that scores nothing one-shot, or that records no
    # log-probabilities, adds nothing
    assert macro_sweep.shortlist_taus([dict(row, rerank_by="naswot_and_theta")], truth) == {}
    short = dict(row, found_candidates=[c[:4] for c in row["found_candidates"]])
    assert macro_sweep.shortlist_taus([short], truth) == {}
    # a deepest rule: 20 (one skip) leads every figure but only 21 and 12 compete, where
    # 12's lead (one-shot 45 against 50, but NASWOT and theta ahead) decides: 12, 21, 20
    # against the truth's 21, 12, 20 is one discordant pair of three
    deep = dict(row, rerank_by="naswot_and_theta_deepest_then_one_shot", found_candidates=[
        ["21", 50.0, 1.0, 7.0, -3.0], ["20", 55.0, 1.0, 9.0, -1.0], ["12", 45.0, 1.0, 8.0, -2.0]])
    taus = macro_sweep.shortlist_taus([deep], truth)
    assert taus["the decision"] == pytest.approx(1 / 3) and "depth" in taus
    plain = macro_sweep.shortlist_taus([dict(deep, rerank_by=row["rerank_by"])], truth)
    assert plain["the decision"] == pytest.approx(-1.0) and "depth" not in plain


def test_the_ceilings_split_a_gap_into_what_the_shortlist_and_the_decision_lost():
    """The best network a check scored one-shot, and the best of its fewest-skip ones, as
    gaps to the oracle; rows whose check scored no shortlist add nothing."""
    truth, _ = tiny_truth()
    row = sweep_row(5.0, 1, "12", "12")  # oracle 21 (90)
    # scored one-shot: 20 (one skip, 86) and 12 and 11 (none, 88 and 85); 21 was not
    row["found_candidates"] = [["20", 50.0, 1.0, 9.0, -1.0], ["12", 40.0, 1.0, 8.0, -2.0],
                               ["11", 45.0, 1.0, 7.0, -3.0], ["21", None, None, 1.0, -4.0]]
    out = macro_sweep.shortlist_ceilings([row], truth)
    assert out == {"the shortlist's best": [pytest.approx(2.0)],
                   "its best of the fewest skip": [pytest.approx(2.0)]}
    row["found_candidates"][2][0] = "21"  # now in the shortlist, and among the deepest
    row["found_candidates"][3][0] = "11"
    out = macro_sweep.shortlist_ceilings([row], truth)
    assert out["the shortlist's best"] == [pytest.approx(0.0)]
    everyone = dict(row, found_candidates=[c[:2] + [1.0, 1.0, 1.0] for c in [
        ["20", 1.0], ["12", 2.0]]])
    assert macro_sweep.shortlist_ceilings([everyone, dict(row, found_candidates=None)],
                                          truth) == {}
