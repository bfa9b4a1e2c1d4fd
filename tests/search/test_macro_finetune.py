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
