"""bench_macro.py finetune's table (macro_finetune.py): before against after, search by search."""

import math

from tests.search.test_macro import bench

bench()  # bench/ on the path, as the bench's own imports need it
import macro_finetune  # noqa: E402


def row(epochs, before, after, tau_before=0.2, tau_after=0.4):
    return {"finetune_epochs": epochs, "finetune_lr": 0.01, "gap_before": before,
            "gap_after": after, "tau_before": tau_before, "tau_after": tau_after,
            "tau_ce_before": 0.1, "tau_ce_after": float("nan")}


def test_each_setting_gets_its_taus_gaps_and_paired_count():
    rows = [row(1, 0.5, 0.1), row(1, 0.2, 0.25), row(1, 0.0, 0.6, tau_after=math.nan),
            row(2, 0.3, 0.3)]
    table = macro_finetune.finetune_table(rows).splitlines()
    assert table[0].startswith("| fine-tuning | searches | tau top-1 before, after |")
    # better by more than the seed spread (0.14) once, within it once, worse once; a tau
    # that is undefined (a shortlist of equal scores) is left out of the mean
    assert table[2] == ("| 1 epochs at lr 0.01 | 3 | 0.20, 0.40 | 0.10, nan | "
                        "0.20 / 0.23 / 0.50 | 0.25 / 0.32 / 0.60 | 1 / 1 / 1 |")
    assert table[3].startswith("| 2 epochs at lr 0.01 | 1 |") and table[3].endswith("0 / 1 / 0 |")


def test_skip_bias_centres_each_figure_on_its_shortlist_by_skip_count():
    # a two-layer shortlist: "12" has no skip, "02" and "10" one each
    r = {"keys": ["12", "02", "10"], "truth": [91.0, 90.0, 92.0],
         "before": [[50.0, 1.0], [44.0, 1.2], [44.0, 1.2]],
         "after": [[47.0, 1.0], [46.0, 1.1], [48.0, 1.0]]}
    table = macro_finetune.skip_bias([r]).splitlines()
    # truth's mean 91, one-shot's 46 before and 47 after: the deeper network gains 4 points
    # one-shot before for 0 true points, none after
    assert table[2] == "| 0 | 1 | +0.00 | +4.00 | +0.00 |"
    assert table[3] == "| 1 | 2 | +0.00 | -2.00 | +0.00 |"


def test_a_split_setting_is_its_own_line_and_older_rows_read_as_unsplit():
    rows = [row(1, 0.3, 0.3), {**row(1, 0.3, 0.1), "finetune_split": "skip"}]
    table = macro_finetune.finetune_table(rows).splitlines()
    assert table[2].startswith("| 1 epochs at lr 0.01 | 1 |")
    assert table[3].startswith("| 1 epochs at lr 0.01, a copy per skip count | 1 |")
    assert table[3].endswith("| 1 / 0 / 0 |")


def test_weights_trained_otherwise_are_their_own_line_named_by_their_training():
    rows = [row(0, 0.3, 0.3), {**row(0, 0.6, 0.6), "training": "sandwich every 4"}]
    table = macro_finetune.finetune_table(rows).splitlines()
    assert table[2].startswith("| 0 epochs at lr 0.01 | 1 | 0.20, 0.40 | 0.10, nan | 0.30 ")
    assert table[3].startswith("| 0 epochs at lr 0.01 (sandwich every 4) | 1 | 0.20, 0.40 | "
                               "0.10, nan | 0.60 ")


def test_unfiltered_decision_is_read_from_the_row_or_decided_again_from_its_sweep_row():
    rule = "naswot_and_theta_deepest_then_one_shot"
    # two layers: "12" and "11" have no skip, "02" and "10" one; "02" leads one-shot and
    # NASWOT, so without the fewest-skip filter it is kept, with it "12"
    twin = {"oracle_accuracy": 93.0, "found_candidates": [
        ["12", 50.0, 1.0, 10.0, -1.0], ["02", 55.0, 0.9, 12.0, -1.5],
        ["10", 40.0, 1.3, 8.0, -2.0], ["11", 45.0, 1.1, 9.0, -2.5]]}
    row = {"rule": rule, "seed": 1, "budget_ms": 1.0, "finetune_epochs": 1.0,
           "finetune_lr": 0.01, "keys": ["12", "02", "10", "11"],
           "truth": [92.0, 92.8, 90.0, 91.0],
           "before": [[50.0, 1.0], [55.0, 0.9], [40.0, 1.3], [45.0, 1.1]],
           # after fine-tuning "02" falls behind and "11" rises over "12"
           "after": [[50.0, 1.0], [30.0, 1.5], [40.0, 1.3], [80.0, 0.8]],
           "found_before": "12", "found_after": "11", "gap_before": 1.0, "gap_after": 2.0}
    assert macro_finetune.unfiltered_gaps(row, twin) == (0.2, 2.0)
    assert macro_finetune.unfiltered_gaps(row, None) is None
    # a twin that does not give the row's own filtered decision is another search's
    assert macro_finetune.unfiltered_gaps({**row, "found_before": "11"}, twin) is None
    # recorded figures come first
    recorded = {**row, "gap_unfiltered_before": 0.5, "gap_unfiltered_after": 0.4}
    assert macro_finetune.unfiltered_gaps(recorded, None) == (0.5, 0.4)
    table = macro_finetune.unfiltered_table([row], {(1, 1.0): twin}).splitlines()
    # filtered, unfiltered, then the one-shot top-1 alone ("02" before, "11" after)
    assert table[2] == ("| 1 epochs at lr 0.01 | 1 | 1.00 / 1.00 / 1.00 | 2.00 / 2.00 / 2.00 | "
                        "0.20 / 0.20 / 0.20 | 2.00 / 2.00 / 2.00 | 0.20 / 0.20 / 0.20 | "
                        "2.00 / 2.00 / 2.00 |")
    # the one-shot top-1 alone keeps its best whatever NASWOT says; the oracle is the row's
    # own (the filtered decision's truth, 92.0, plus its gap, 1.0)
    alone = {**row, "before": [[50.0, 1.0], [40.0, 1.0], [60.0, 1.0], [45.0, 1.0]]}
    assert macro_finetune.one_shot_alone_gaps(alone) == (3.0, 2.0)
    # rules without the filter have nothing to add
    assert macro_finetune.unfiltered_table([{**row, "rule": "top1"}], {(1, 1.0): twin}) is None


def test_layer_bias_recovers_each_layers_effect_within_shortlists():
    # two layers; true top-1 is additive: skip costs 1.0 at layer 1 and 0.5 at layer 2,
    # k5_e6 adds 0.3 and 0.2; one-shot before rewards the skip at layer 2 instead
    keys = ["11", "01", "21", "10", "12", "22"]

    def score(key, skip2):
        effects = {("0", 0): -1.0, ("0", 1): skip2, ("2", 0): 0.3, ("2", 1): 0.2}
        return 90.0 + sum(effects.get((c, i), 0.0) for i, c in enumerate(key))

    truth = [score(k, -0.5) for k in keys]
    row = {"keys": keys, "truth": truth, "before": [[score(k, 2.0), 1.0] for k in keys],
           "after": [[t, 1.0] for t in truth]}
    # a second shortlist, all 0.7 points higher: centred away
    other = {**row, "truth": [t + 0.7 for t in truth]}
    table = macro_finetune.layer_bias([row, other]).splitlines()
    assert table[0] == ("| layer | skip for k3_e3: truth, one-shot before, after | "
                        "k5_e6 for k3_e3: truth, one-shot before, after |")
    assert table[2] == "| 1 | -1.00, -1.00, -1.00 | +0.30, +0.30, +0.30 |"
    assert table[3] == "| 2 | -0.50, +2.00, -0.50 | +0.20, +0.20, +0.20 |"
    # a layer no shortlist varies has no effect to report
    fixed = {"keys": ["11", "12"], "truth": [90.0, 90.2], "before": [[40.0, 1.0], [41.0, 1.0]],
             "after": [[40.0, 1.0], [41.0, 1.0]]}
    table = macro_finetune.layer_bias([fixed]).splitlines()
    assert table[2] == "| 1 | - | - |" and table[3] == "| 2 | - | +0.20, +1.00, +1.00 |"
