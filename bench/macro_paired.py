"""Two recipes of bench_macro.py compared search by search (``report --paired A B``).

Why paired: the gap to the oracle varies more between budgets (0.0 to 1.5 points) than
between good recipes, so two recipes' medians over different budgets and seeds can rank
them either way. A search's seed and budget fix its data order and initial weights; where
both recipes searched (or, for a check decided again by ``score``, decided) with the same
seed at the same budget, the difference of their two gaps is a like-for-like comparison,
and the count of pairs each one wins says more than either median.

A recipe with two rows at one budget and seed (the same search run twice, or run and scored
again) is paired by its later row in the results file: a rerun replaces the earlier row,
and a row decided again by ``score`` was appended after the search it re-decides.

Each recipe's control is its search's own theta steps under the cross-entropy held constant,
decided by the same check (for a check that weighs NASWOT by theta over 256 networks, that
is ``fbnas pick``); the per-budget counts say where a recipe's trained theta helps its check
and where the latency term alone does as well.
"""

from __future__ import annotations

import statistics


def latest(rows: list[dict], recipe: str) -> dict[tuple[float, int], dict]:
    """The recipe's rows by (budget ms, seed); the later row where there are two."""
    return {(r["budget_ms"], r["seed"]): r for r in rows if r["recipe"] == recipe}


def pairs(rows: list[dict], a: str, b: str) -> list[tuple[dict, dict]]:
    """(row of a, row of b) for each budget and seed both recipes have, by budget, seed."""
    first, second = latest(rows, a), latest(rows, b)
    return [(first[k], second[k]) for k in sorted(first.keys() & second.keys())]


def against_control(mine: list[dict]) -> tuple[int, int, int]:
    """(wins, ties, losses) of the found networks against their controls, by true top-1."""
    wins = sum(r["accuracy"] > r["control_accuracy"] for r in mine)
    ties = sum(r["accuracy"] == r["control_accuracy"] for r in mine)
    return wins, ties, len(mine) - wins - ties


def describe(name: str, mine: list[dict]) -> str:
    """One recipe's figures over the paired searches (its own rows, paired budgets only)."""
    gaps = [r["gap"] for r in mine]
    control_gaps = [r["oracle_accuracy"] - r["control_accuracy"] for r in mine]
    wins, ties, losses = against_control(mine)
    return (f"{name}: gap median {statistics.median(gaps):.2f}, mean "
            f"{statistics.mean(gaps):.2f}, worst {max(gaps):.2f}; median percentile "
            f"{statistics.median(r['percentile'] for r in mine):.1f}; mean true top-1 "
            f"{statistics.mean(r['accuracy'] for r in mine):.2f}%; against its control "
            f"{wins} won, {ties} tied, {losses} lost (the control's gap median "
            f"{statistics.median(control_gaps):.2f}, mean {statistics.mean(control_gaps):.2f})")


def report_paired(rows: list[dict], a: str, b: str, echo=print) -> list[tuple[dict, dict]]:
    """Print the comparison of recipes ``a`` and ``b`` over their paired searches: each
    pair's found networks and gaps, both recipes' figures on the pairs, how often ``b``
    found the better network (in points of true top-1), and, budget by budget, each recipe
    against its control. Returns the pairs."""
    for name in (a, b):
        if not any(r["recipe"] == name for r in rows):
            raise SystemExit(f"report --paired: no rows of recipe {name!r} in the results "
                             "(as kept by --seeds and --cpu); copy the name from the table")
    both = pairs(rows, a, b)
    if not both:
        raise SystemExit("report --paired: the two recipes share no budget and seed; search "
                         "the second at the first's --quantiles and --seeds")
    echo(f"A = {a}\nB = {b}")
    echo("| budget ms | seed | A found (top-1 %) | A gap | B found (top-1 %) | B gap | "
         "B - A (points) |")
    echo("|---|---|---|---|---|---|---|")
    for x, y in both:
        echo(f"| {x['budget_ms']:g} | {x['seed']} | {x['found']} ({x['accuracy']:.2f}) | "
             f"{x['gap']:.2f} | {y['found']} ({y['accuracy']:.2f}) | {y['gap']:.2f} | "
             f"{y['accuracy'] - x['accuracy']:+.2f} |")
    echo(f"{len(both)} pairs (the later row where a recipe has two at a budget and seed)")
    echo(describe("A", [x for x, _ in both]))
    echo(describe("B", [y for _, y in both]))
    diff = [y["accuracy"] - x["accuracy"] for x, y in both]
    echo(f"B against A: better in {sum(d > 0 for d in diff)}, same in "
         f"{sum(d == 0 for d in diff)}, worse in {sum(d < 0 for d in diff)}; mean "
         f"{statistics.mean(diff):+.2f} points")
    echo("| budget ms | pairs | B - A mean | A against its control (won/tied/lost) | "
         "B against its control |")
    echo("|---|---|---|---|---|")
    for budget in sorted({x["budget_ms"] for x, _ in both}):
        here = [(x, y) for x, y in both if x["budget_ms"] == budget]
        gain = statistics.mean(y["accuracy"] - x["accuracy"] for x, y in here)
        echo(f"| {budget:g} | {len(here)} | {gain:+.2f} | "
             f"{'/'.join(map(str, against_control([x for x, _ in here])))} | "
             f"{'/'.join(map(str, against_control([y for _, y in here])))} |")
    return both
