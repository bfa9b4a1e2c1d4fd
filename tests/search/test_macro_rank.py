"""bench_macro.py rank's figures (macro_rank.py): the window it samples, Kendall tau and the
cost of deciding by each figure, and the table report --protocol rank prints."""

import math

from tests.search.test_macro import bench

bench()  # bench/ on the path, as the bench's own imports need it
import macro_rank  # noqa: E402


def test_the_sample_comes_from_the_window_alone_and_repeats_for_a_seed():
    lat = {f"{i:03d}": float(i) for i in range(1, 201)}
    keys = macro_rank.window_keys(lat, 100.0, 0.9, 5, seed=3)
    assert len(keys) == 5 == len(set(keys)) and all(90 <= lat[k] <= 100 for k in keys)
    assert keys == macro_rank.window_keys(lat, 100.0, 0.9, 5, seed=3)
    assert len(macro_rank.window_keys(lat, 100.0, 0.9, 50, seed=3)) == 11  # all it holds


def test_each_figure_gets_its_tau_and_the_cost_of_deciding_by_it():
    true = [93.0, 92.0, 91.0, 90.0]
    figures = {"naswot": [4.0, 3.0, 2.0, 1.0],  # the truth's order
               "theta": [1.0, 2.0, 3.0, 4.0],  # the reverse: picks the worst
               "depth": [0.0, 0.0, 0.0, 0.0]}  # says nothing: tau undefined, first kept
    r = macro_rank.band_ranking(true, figures)
    assert r["networks"] == 4
    assert r["tau"]["naswot"] == 1.0 and r["tau"]["theta"] == -1.0
    assert math.isnan(r["tau"]["depth"]) and r["best_gap"]["depth"] == 0.0
    assert r["best_gap"]["naswot"] == 0.0 and r["best_gap"]["theta"] == 3.0
    # the search's own check, a weighted sum of z-scores, is among the combinations
    assert r["tau"]["naswot_and_theta"] == 1.0  # naswot's weight is four times theta's
    assert r["tau"]["naswot_and_depth"] == 1.0
    assert "one_shot_and_naswot" not in r["tau"]  # its parts are not all measured


def test_the_recipes_check_ranks_by_depth_first_then_its_weighted_sum():
    # the deepest network (one skip fewer) comes first whatever its scores; among the rest
    # the sum of one-shot, NASWOT and a quarter of theta orders
    true = [93.0, 92.0, 91.0, 90.0]
    figures = {"one_shot": [1.0, 4.0, 3.0, 2.0], "naswot": [1.0, 4.0, 3.0, 2.0],
               "theta": [0.0, 0.0, 0.0, 0.0], "depth": [7.0, 6.0, 6.0, 6.0]}
    r = macro_rank.band_ranking(true, figures)
    assert r["tau"]["depth_then_one_shot_and_naswot_and_theta"] == 1.0
    assert r["tau"]["one_shot_and_naswot_and_theta"] == 0.0  # the deepest ranked last
    assert r["best_gap"]["depth_then_one_shot_and_naswot_and_theta"] == 0.0


def test_report_averages_each_figure_and_splits_by_budget():
    rows = [{"quantile": q, "networks": 40, "tau": {"naswot": t, "macs": 0.1},
             "best_gap": {"naswot": g, "macs": 1.0}}
            for q, t, g in ((0.1, 0.2, 0.5), (0.5, 0.4, 0.3), (0.9, 0.6, 0.1))]
    table = macro_rank.rank_table(rows).splitlines()
    assert table[0].startswith("| figure | mean tau | mean best gap | tau, tight (1) |")
    assert table[2] == "| naswot | 0.400 | 0.300 | 0.200 | 0.400 | 0.600 |"  # best tau first
    assert table[3] == "| macs | 0.100 | 1.000 | 0.100 | 0.100 | 0.100 |"
    assert table[-1] == "3 searches, 40 networks of each window"
