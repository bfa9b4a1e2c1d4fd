"""How well each figure ranks the networks a budget search decides among (bench_macro.py rank).

A search under budget B keeps one network of those that spend ``floor`` B to B (the window),
so what matters is how well a figure orders that window, not the whole space: there, depth
and width trade against each other and latency says nothing. For random networks of the
window of each finished search given, ``rank`` measures against the true accuracy:

- Kendall tau of each figure (FIGURES): the one-shot top-1 on the search's weights (BN
  statistics re-estimated for each network; on the val split the check sees, and on val and
  test pooled), NASWOT, MACs, theta's log-probability, depth (minus the ``skip`` layers),
  weighted sums of their z-scores (COMBINED), and depth first, then such a sum (DEEPEST, the
  budget recipe's check);
- and what deciding by it costs: the true accuracy of the sample's best network minus that
  of the one the figure ranks first ("best gap", 0 when it finds the best of the sample).

One row per search in --rank-results (bench/results/macro_rank.jsonl); ``report --protocol
rank`` averages them per figure, over all budgets and per budget.
"""

from __future__ import annotations

import math
import random

from fbnas.check_rules import WEIGHTED_RULES
from fbnas.search.oneshot_check import depth_first, z_scores

#: the figures each row measures, larger meaning better for each
BASE = ("one_shot", "one_shot_all", "naswot", "macs", "theta", "depth")
#: combinations: name -> {figure: weight} of a weighted sum of z-scores (within the sample);
#: the weighted check rules first (fbnas.check_rules.WEIGHTED_RULES: naswot_and_theta, the
#: default)
COMBINED = {**WEIGHTED_RULES,
            "one_shot_and_naswot": {"one_shot": 1.0, "naswot": 1.0},
            "one_shot_and_naswot_and_theta": {"one_shot": 1.0, "naswot": 1.0, "theta": 0.25},
            "naswot_and_depth": {"naswot": 1.0, "depth": 1.0}}
#: orderings by depth first, then by a combination: the budget recipe's check
#: (naswot_and_theta_deepest_then_one_shot) lets only the fewest-skip networks compete
DEEPEST = {"depth_then_one_shot_and_naswot_and_theta": "one_shot_and_naswot_and_theta"}
FIGURES = BASE + tuple(COMBINED) + tuple(DEEPEST)


def window_keys(lat: dict[str, float], budget_us: float, floor: float, n: int,
                seed: int) -> list[str]:
    """``n`` random keys (all where fewer) of the networks whose predicted latency lies within
    [floor * budget, budget], in a fixed order for a seed."""
    keys = sorted(k for k, v in lat.items() if floor * budget_us <= v <= budget_us)
    return random.Random(seed).sample(keys, min(n, len(keys)))


def with_combined(figures: dict[str, list[float]]) -> dict[str, list[float]]:
    """``figures`` and each COMBINED sum of them (those whose parts are all present)."""
    out = dict(figures)
    for name, weights in COMBINED.items():
        if all(f in figures for f in weights):
            score = sum(w * z_scores(figures[f]) for f, w in weights.items())
            out[name] = [float(x) for x in score]
    for name, then in DEEPEST.items():
        if "depth" in out and then in out:
            out[name] = depth_first(out["depth"], out[then])
    return out


def band_ranking(true: list[float], figures: dict[str, list[float]]) -> dict:
    """Kendall tau of each figure against ``true`` and its best gap (the sample's best true
    accuracy minus that of the figure's first; ties in the figure to the first listed)."""
    from macro_report import tau

    best = max(true)
    out = {"networks": len(true), "tau": {}, "best_gap": {}}
    for name, values in with_combined(figures).items():
        out["tau"][name] = round(tau(values, true), 3)
        first = max(range(len(values)), key=lambda i: (values[i], -i))
        out["best_gap"][name] = round(best - true[first], 3)
    return out


def _mean(values: list[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else float("nan")


def rank_table(rows: list[dict]) -> str:
    """Markdown: per figure, the mean Kendall tau and mean best gap over ``rows``, and the
    mean tau at the tight budgets (quantile below 0.35), the middle ones and the loose ones
    (above 0.65), where the window's networks differ in different ways."""
    parts = {"tight": lambda q: q < 0.35, "middle": lambda q: 0.35 <= q <= 0.65,
             "loose": lambda q: q > 0.65}
    counts = {p: sum(1 for r in rows if f(r["quantile"])) for p, f in parts.items()}
    head = ("| figure | mean tau | mean best gap | "
            + " | ".join(f"tau, {p} ({counts[p]})" for p in parts) + " |")
    out = [head, "|---" + "|---:" * (2 + len(parts)) + "|"]
    names = [f for f in FIGURES if any(f in r["tau"] for r in rows)]
    for f in sorted(names, key=lambda f: -_mean([r["tau"].get(f, math.nan) for r in rows])):
        cells = [_mean([r["tau"].get(f, math.nan) for r in rows]),
                 _mean([r["best_gap"].get(f, math.nan) for r in rows])]
        cells += [_mean([r["tau"].get(f, math.nan) for r in rows if fn(r["quantile"])])
                  for fn in parts.values()]
        out.append(f"| {f} | " + " | ".join("-" if math.isnan(c) else f"{c:.3f}"
                                             for c in cells) + " |")
    networks = sorted({r["networks"] for r in rows})
    return "\n".join(out + ["", f"{len(rows)} searches, {'/'.join(map(str, networks))} "
                                "networks of each window"])
