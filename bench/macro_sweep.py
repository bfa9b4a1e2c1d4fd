"""The sweep: a recipe judged at budgets and seeds it was not chosen on.

``bench_macro.py sweep`` runs it, ``bench_macro.py report --protocol sweep`` reads it.

Why: the bundled recipe was chosen over many searches at nine fixed budgets and fixed seeds
(the other rows of ``bench/results/macro.jsonl``), so its figures there are optimistic: a
setting that happened to suit those budgets and seeds was kept. A sweep is run after the
choice, at every 5th percentile of the space's predicted latencies from the 5th to the 95th,
each budget with seeds drawn afresh for the invocation (never a seed a row of the results
already holds), so nothing about it could have been tuned to. Beside each search its row
records, at the same budget and seed, what needs no training: ``fbnas pick``'s network, the
network with the most MACs in the window the search's final check considers (predicted
latency between ``loss.target_floor`` times the budget and the budget; fbnas/search/window.py),
and 20 random networks of that window. The report says how far each is from the oracle.
"""

from __future__ import annotations

import json
import random
import secrets
import statistics
from pathlib import Path
from typing import Callable

import numpy as np

from groundtruth import depth_figures_of, ops_of  # bench/, beside this file
from macro_report import SEED_STD, tau

#: the sweep's budgets: every 5th percentile of the space's predicted latencies, 5th to 95th
SWEEP_QUANTILES = tuple(round(0.05 * i, 2) for i in range(1, 20))
#: random networks of the window recorded beside each search
RANDOM_NETWORKS = 20
#: seeds are drawn from this range: above every hand-picked seed the other rows use
SEED_RANGE = (1000, 1_000_000)


def sweep_quantiles(asked: list[float] | None) -> list[float]:
    """The sweep's quantiles: all of SWEEP_QUANTILES, or the part ``asked`` (--quantiles), which
    must lie on its grid so that partial sweeps add up to the whole one."""
    if not asked:
        return list(SWEEP_QUANTILES)
    off = [q for q in asked if round(q, 2) not in SWEEP_QUANTILES or abs(q - round(q, 2)) > 1e-9]
    if off:
        raise SystemExit(f"sweep: --quantiles {' '.join(f'{q:g}' for q in off)} are not sweep "
                         "budgets; pick among 0.05, 0.1, ..., 0.95 (every 5th percentile)")
    return sorted({round(q, 2) for q in asked})


def recorded_seeds(results: Path) -> set[int]:
    """Every seed a row of ``results`` holds (none where the file does not exist yet)."""
    if not results.is_file():
        return set()
    return {json.loads(line)["seed"] for line in results.read_text().splitlines()
            if line.strip()}


def draw_seeds(n: int, taken: set[int], draw: Callable[[], int] | None = None) -> list[int]:
    """``n`` distinct seeds, none of them in ``taken``: drawn from the operating system's
    randomness (``secrets``), so that no invocation repeats another's, and drawn again where a
    draw is a seed already used. ``draw`` replaces the source (a test's)."""
    lo, hi = SEED_RANGE
    draw = draw or (lambda: lo + secrets.randbelow(hi - lo))
    seeds: list[int] = []
    while len(seeds) < n:
        seed = draw()
        if seed not in taken and seed not in seeds:
            seeds.append(seed)
    return seeds


def sweep_plan(budgets: list[tuple[float, float]], per_budget: int,
               taken: set[int]) -> list[tuple[float, float, int]]:
    """(quantile, budget ms, seed) of each search, each budget with ``per_budget`` seeds of its
    own, freshly drawn; the first seed of every budget comes before any budget's second, so
    that a sweep stopped halfway has searched every budget."""
    seeds = draw_seeds(len(budgets) * per_budget, taken)
    return [(q, b, seeds[i * per_budget + j]) for j in range(per_budget)
            for i, (q, b) in enumerate(budgets)]


def window_keys(lat: dict[str, float], budget_us: float, floor: float) -> list[str]:
    """The networks the final check considers at ``budget_us``: predicted latency from
    ``floor`` times the budget to the budget, or, where none reaches the floor, every network
    within the budget (as ops_in_window falls back). Sorted, so that a seeded sample of it is
    the same on every machine."""
    inside = sorted(k for k, v in lat.items() if v <= budget_us)
    return [k for k in inside if lat[k] >= floor * budget_us] or inside


def beside(row: dict, lut, lat: dict[str, float]) -> dict:
    """What a sweep row records beside its search, at the search's budget and window: the
    window's bounds (ms), its network with the most MACs (the table's raw MAC counts), and
    RANDOM_NETWORKS random networks of it, sampled with the row's seed."""
    budget_us = row["budget_ms"] * 1000
    keys = window_keys(lat, budget_us, row["floor"])
    reached = any(lat[k] >= row["floor"] * budget_us for k in keys)
    lo = row["floor"] * row["budget_ms"] if reached else 0.0
    return {"window_ms": [round(lo, 4), row["budget_ms"]],
            "max_macs_key": max(keys, key=lambda k: lut.raw_sum(ops_of(k), "macs")),
            "random_keys": random.Random(row["seed"]).sample(keys, min(RANDOM_NETWORKS,
                                                                       len(keys)))}


def figures(row: dict, truth) -> dict[str, float]:
    """A sweep row's gaps to the oracle (points of true top-1): the found network's, the
    pick's, the most-MACs network's and the window's median random network's."""
    oracle = row["oracle_accuracy"]
    return {"found": oracle - row["accuracy"], "pick": oracle - truth[row["pick_key"]],
            "max_macs": oracle - truth[row["max_macs_key"]],
            "random": oracle - statistics.median(truth[k] for k in row["random_keys"])}


def spread(gaps: list[float]) -> str:
    """Median, mean, 90th percentile (linear between ranks) and worst of ``gaps`` (the mean
    as the searches against the picks are weighed: by how much, not only how often)."""
    return (f"median {statistics.median(gaps):.2f}, mean {statistics.mean(gaps):.2f}, "
            f"90th percentile {float(np.percentile(gaps, 90)):.2f}, worst {max(gaps):.2f}")


def against_pick(rows: list[dict], truth) -> tuple[int, int, int]:
    """(wins, ties, losses) of each search against the pick at its budget and seed, by true
    top-1; a difference within SEED_STD (the benchmark's own seed spread) is a tie."""
    diff = [round(r["accuracy"] - truth[r["pick_key"]], 6) for r in rows]
    wins = sum(d > SEED_STD for d in diff)
    ties = sum(abs(d) <= SEED_STD for d in diff)
    return wins, ties, len(diff) - wins - ties


def shortlist_taus(rows: list[dict], truth) -> dict[str, float]:
    """Within each check's one-shot shortlist (the networks a row's check scored one-shot,
    as ``naswot_and_theta_then_one_shot`` does), the mean Kendall tau against the truth of
    each figure the check recorded and of the decision's own weighted score; {} where no
    row's rule is a weighted one scored one-shot. Why: the shortlist holds the networks the
    training-free score already rates best, so there the decision must rank by what the
    trained weights add. Under a DEEPEST rule the decision ranks by depth first (only the
    fewest-skip networks compete), then by its weighted score; depth's own tau shows too."""
    from fbnas.check_rules import DEEPEST_RULES, FIGURE_NAMES, WEIGHTED_RULES
    from fbnas.search.oneshot_check import depth_first, weighted_score

    taus: dict[str, list[float]] = {}
    for r in rows:
        rule = r.get("rerank_by")
        listed = [c for c in r.get("found_candidates") or [] if c[1] is not None]
        if ("top1" not in WEIGHTED_RULES.get(rule, {}) or len(listed) < 2
                or any(len(c) < 5 for c in listed)):
            continue
        figures = {"top1": [c[1] for c in listed], "naswot": [c[3] for c in listed],
                   "theta": [c[4] for c in listed]}
        values = {FIGURE_NAMES[f]: v for f, v in figures.items()}
        values["the decision"] = list(weighted_score(rule, figures))
        if rule in DEEPEST_RULES:
            depth = DEEPEST_RULES[rule]
            values[FIGURE_NAMES[depth]] = depth_figures_of([c[0] for c in listed])[depth]
            values["the decision"] = depth_first(values[FIGURE_NAMES[depth]],
                                                 values["the decision"])
        true = [truth[c[0]] for c in listed]
        for name, v in values.items():
            taus.setdefault(name, []).append(tau(v, true))
    return {name: float(np.nanmean(t)) for name, t in taus.items()}


def shortlist_ceilings(rows: list[dict], truth) -> dict[str, list[float]]:
    """The gaps to the oracle of the best each check could have kept, over the rows whose
    check scored a shortlist one-shot: the best network of the shortlist, and the best of its
    fewest-skip networks (the only ones a DEEPEST rule lets compete; skips counted as the
    row's rule counts them, all layers under any other rule). Why: they split a
    search's gap into what the shortlist lost (no better network in it) and what the
    decision lost (a better one in it, not kept), so a change aims at the part that costs;
    {} where no row scored a shortlist."""
    from fbnas.check_rules import DEEPEST_RULES

    out: dict[str, list[float]] = {}
    for r in rows:
        keys = [c[0] for c in r.get("found_candidates") or [] if c[1] is not None]
        if not keys or len(keys) == len(r["found_candidates"]):
            continue
        deep = depth_figures_of(keys)[DEEPEST_RULES.get(r.get("rerank_by"), "depth")]
        fewest = [k for k, d in zip(keys, deep) if d == max(deep)]
        out.setdefault("the shortlist's best", []).append(
            r["oracle_accuracy"] - max(truth[k] for k in keys))
        out.setdefault("its best of the fewest skip", []).append(
            r["oracle_accuracy"] - max(truth[k] for k in fewest))
    return out


def report_sweep(rows: list[dict], truth, echo: Callable[[str], None] = print) -> None:
    """For each recipe among the sweep ``rows``: per budget the gaps to the oracle of the
    found networks, the picks, the most-MACs network and the window's median random network;
    then over the sweep the found networks' and the picks' median, 90th percentile and worst
    gap, the searches against the picks, and how many found networks beat the window's median
    random network and the near-budget mean (groundtruth.judge's, in each row)."""
    for name in dict.fromkeys(r["recipe"] for r in rows):
        mine = [r for r in rows if r["recipe"] == name]
        echo(name)
        echo("| budget ms (quantile) | searches | oracle (top-1 %) | found gap, median (worst) "
             "| pick gap, median (worst) | most MACs in the window: gap | median random "
             "network of the window: gap |")
        echo("|---|---|---|---|---|---|---|")
        for b in sorted({r["budget_ms"] for r in mine}):
            here = [r for r in mine if r["budget_ms"] == b]
            f = [figures(r, truth) for r in here]
            q = here[0].get("quantile")
            echo(f"| {b:g}{'' if q is None else f' ({q:g})'} | {len(here)} | "
                 f"{here[0]['oracle']} ({here[0]['oracle_accuracy']:.2f}) | "
                 + " | ".join(f"{statistics.median(x[w] for x in f):.2f} "
                              f"({max(x[w] for x in f):.2f})" for w in ("found", "pick"))
                 + " | " + " | ".join(f"{statistics.median(x[w] for x in f):.2f}"
                                      for w in ("max_macs", "random")) + " |")
        f = [figures(r, truth) for r in mine]
        n, budgets = len(mine), len({r["budget_ms"] for r in mine})
        wins, ties, losses = against_pick(mine, truth)
        above_random = sum(x["found"] < x["random"] for x in f)
        above_near = sum(r["accuracy"] > r["near_mean"] for r in mine)
        redone = sum("redecided_from" in r for r in mine)
        echo(f"{n} searches at {budgets} budgets; found gap {spread([x['found'] for x in f])}; "
             f"pick gap {spread([x['pick'] for x in f])}; against the pick {wins} won, {ties} "
             f"tied (within {SEED_STD} points, the benchmark's seed spread), {losses} lost; "
             f"above the window's median random network {above_random}/{n}, above the "
             f"near-budget mean {above_near}/{n}" + (
                 f"; {redone} of the {n} decided by this check afterwards, from what their "
                 f"checks recorded (report --rerank-by)" if redone else ""))
        taus = shortlist_taus(mine, truth)
        if taus:
            echo("within each check's one-shot shortlist, mean Kendall tau against the "
                 "truth: " + ", ".join(f"{k} {v:.2f}" for k, v in taus.items()))
        ceilings = shortlist_ceilings(mine, truth)
        if ceilings:
            echo("what each check could have kept, gap to the oracle: " + "; ".join(
                f"{k} {spread(v)}" for k, v in ceilings.items()))
