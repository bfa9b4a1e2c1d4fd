"""What bench_macro.py's ``report`` prints and draws from the rows of --results: the table
of searches, a summary per recipe, what rules that need no search score at the same budgets,
and the picture of the whole space with the found networks and their controls.

Kept apart from the bench that writes the rows because it only reads them: a figure here
comes from ``bench/results/macro.jsonl`` and the benchmark's lookup, never from a search.
"""

from __future__ import annotations

import random
import statistics
import textwrap
from pathlib import Path

from fbnas.io import atomic_write
from groundtruth import judge, ops_of, pareto_front  # bench/, beside this file


def print_table(rows: list[dict]) -> None:
    print("| recipe | budget ms (quantile) | seed | found (ms) | true top-1 % | percentile | "
          "oracle (top-1 %) | gap | near-budget mean | control (top-1 %) | max p | "
          "argmax stable | minutes |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        q = f" ({r['quantile']:g})" if r.get("quantile") is not None else ""
        stable = r.get("argmax_stable")
        print(f"| {r['recipe']} | {r['budget_ms']:g}{q} | {r['seed']} | {r['found']} "
              f"({r['found_ms']:.3f}) | {r['accuracy']:.2f} | {r['percentile']:.1f} | "
              f"{r['oracle']} ({r['oracle_accuracy']:.2f}) | {r['gap']:.2f} | "
              f"{r['near_mean']:.2f} | {r['control']} ({r['control_accuracy']:.2f}) | "
              f"{r['theta_decided']:.2f} | {'-' if stable is None else f'{stable:.2f}'} | "
              f"{r['search_minutes']:.1f} |")


def summary(rows: list[dict], truth) -> None:
    """Per recipe: the median, mean and worst gap, the median percentile and the mean true
    accuracy; how many searches beat the control (and tie it), beat the control's most
    probable network (the cost-only theta without the check, so that what the check adds and
    what the training adds can be told apart) and the near-budget mean, and land within 10%
    under the budget; how decided theta ended (the target: largest probability
    0.8, argmax unchanged through the last epoch's final quarter); the minutes a search took;
    and the median gap of the best network each one-shot check scored (by lookup)."""
    for name in dict.fromkeys(r["recipe"] for r in rows):
        mine = [r for r in rows if r["recipe"] == name]
        n, gaps = len(mine), [r["gap"] for r in mine]
        beat_c = sum(r["accuracy"] > r["control_accuracy"] for r in mine)
        tie_c = sum(r["accuracy"] == r["control_accuracy"] for r in mine)
        beat_n = sum(r["accuracy"] > r["near_mean"] for r in mine)
        # the control undecided: the cost-only theta's most probable network in the window
        plain = [r for r in mine if r.get("control_candidates")]
        plain_acc = [truth[r["control_candidates"][0][0]] for r in plain]
        beat_p = sum(r["accuracy"] > a for r, a in zip(plain, plain_acc))
        plain_c = (f", its most probable network (no check) {beat_p}/{len(plain)} (that "
                   "network's gap median " + format(statistics.median(
                       r["oracle_accuracy"] - a for r, a in zip(plain, plain_acc)), ".2f")
                   + ")" if plain else "")
        land = sum(r["found_ms"] >= 0.9 * r["budget_ms"] for r in mine)
        decided = sum(r["theta_decided"] >= 0.8 and (r.get("argmax_stable") or 0) >= 0.25
                      for r in mine)
        p, minutes = [r["theta_decided"] for r in mine], [r["search_minutes"] for r in mine]
        # how close the best network a check scored came: what a perfect choice would give
        best = [r["oracle_accuracy"] - max(truth[c[0]] for c in r["found_candidates"])
                for r in mine if r.get("found_candidates")]
        checked = (f"; the best checked network's gap median {statistics.median(best):.2f} "
                   f"({len(best)} checks)" if best else "")
        wall = [r["wall_minutes"] for r in mine if "wall_minutes" in r]
        walls = (f" ({min(wall):.1f} to {max(wall):.1f} whole, {len(wall)} timed)"
                 if wall else "")
        print(f"{name}: {n} searches, gap median {statistics.median(gaps):.2f} points, mean "
              f"{statistics.mean(gaps):.2f}, worst {max(gaps):.2f}; median percentile "
              f"{statistics.median(r['percentile'] for r in mine):.1f}; mean true top-1 "
              f"{statistics.mean(r['accuracy'] for r in mine):.2f}%; beat the control "
              f"{beat_c}/{n} ({tie_c} ties){plain_c}, the near-budget mean {beat_n}/{n}; "
              f"within 10% under the budget {land}/{n}; max p {min(p):.2f} to {max(p):.2f}, decided "
              f"{decided}/{n}; {min(minutes):.1f} to {max(minutes):.1f} minutes training"
              f"{walls}{checked}")


def by_budget(rows: list[dict]) -> None:
    """One line per budget over all of ``rows``' searches: the oracle, the found networks'
    median and worst true top-1, the median gap and percentile, the control (each distinct
    one) and how many searches beat, tied and lost to it. The short form of the table, for
    many seeds at once."""
    print("| budget ms | searches | oracle (top-1 %) | found top-1 %, median (worst) | gap "
          "median | percentile median | control (top-1 %) | beat / tied / lost to the "
          "control |")
    print("|---|---|---|---|---|---|---|---|")
    for b in sorted({r["budget_ms"] for r in rows}):
        mine = [r for r in rows if r["budget_ms"] == b]
        acc = [r["accuracy"] for r in mine]
        controls = ", ".join(dict.fromkeys(f"{r['control']} ({r['control_accuracy']:.2f})"
                                           for r in mine))
        diff = [r["accuracy"] - r["control_accuracy"] for r in mine]
        print(f"| {b:g} | {len(mine)} | {mine[0]['oracle']} ({mine[0]['oracle_accuracy']:.2f}) "
              f"| {statistics.median(acc):.2f} ({min(acc):.2f}) | "
              f"{statistics.median(r['gap'] for r in mine):.2f} | "
              f"{statistics.median(r['percentile'] for r in mine):.1f} | {controls} | "
              f"{sum(d > 0 for d in diff)} / {sum(d == 0 for d in diff)} / "
              f"{sum(d < 0 for d in diff)} |")


def provenance(rows: list[dict]) -> None:
    """When and on which CPU models ``rows`` were searched, so that a pasted table carries
    where it was measured (rows made by ``score`` from runs searched elsewhere, and rows
    from before the record named the CPU, count as not recorded). A search decided again by
    another rule (report --rerank-by) counts once, beside its row or not."""
    shown = {(r.get("recipe"), r.get("seed"), r.get("budget_ms")) for r in rows
             if "redecided_from" not in r}
    rows = [r for r in rows if "redecided_from" not in r
            or (r["redecided_from"], r.get("seed"), r.get("budget_ms")) not in shown]
    dates = sorted(r["date"] for r in rows if r.get("date"))
    cpus: dict[str, int] = {}
    for r in rows:
        name = r.get("cpu") or "not recorded"
        cpus[name] = cpus.get(name, 0) + 1
    when = f"{dates[0]} to {dates[-1]}" if dates else "dates not recorded"
    print(f"searched {when}; CPU model (searches): "
          + ", ".join(f"{name} ({n})" for name, n in cpus.items()))


def per_layer_fit(truth, keys: list[str]) -> dict[str, float]:
    """The true accuracy's best per-layer additive fit (least squares on one indicator per
    layer and candidate, over every network): the most a decision that scores layers
    independently, as theta does, could know about this space."""
    import numpy as np

    width = max(int(c) for k in keys for c in k) + 1
    x = np.zeros((len(keys), 1 + len(keys[0]) * width))
    x[:, 0] = 1.0
    for row, k in enumerate(keys):
        for layer, c in enumerate(k):
            x[row, 1 + layer * width + int(c)] = 1.0
    w = np.linalg.lstsq(x, np.array([truth[k] for k in keys]), rcond=None)[0]
    return dict(zip(keys, (x @ w).tolist()))


def simple_rules(rows: list[dict], truth, lut, lat: dict[str, float],
                 naswot=None) -> None:
    """What rules that need no search score at each budget of ``rows``: the network with the
    most MACs within the budget, the slowest one (predicted) within it, and the best by the
    per-layer fit to the truth itself (per_layer_fit) among those spending 90 to 100% of it:
    the ceiling of any per-layer decision; with ``naswot``, also the best NASWOT score among
    those 90 to 100% networks, a training-free search of the whole window (one forward pass
    per network: half a minute per hundred networks at 1 thread; bench_macro.Naswot)."""
    macs = {k: lut.raw_sum(ops_of(k), "macs") for k in lat}
    fit = per_layer_fit(truth, sorted(lat))
    extra = (" best NASWOT, 90-100% (top-1 %, percentile) | Kendall tau over the 90-100% "
             "networks: NASWOT, MACs |" if naswot else "")
    print("| budget ms | oracle (top-1 %) | most MACs within (top-1 %, percentile) | slowest "
          "within (top-1 %, percentile) | best per-layer fit to the truth, 90-100% (top-1 %, "
          f"percentile) |{extra}")
    print("|---|---|---|---|---|" + ("---|---|" if naswot else ""))
    for b in sorted({r["budget_ms"] for r in rows}):
        inside = [k for k in lat if lat[k] <= b * 1000]
        window = [k for k in inside if lat[k] >= 0.9 * b * 1000] or inside
        picks = [max(inside, key=lambda k: macs[k]), max(inside, key=lambda k: lat[k]),
                 max(window, key=lambda k: fit[k])]
        if naswot:
            scores = dict(zip(window, naswot(window)))
            picks.append(max(window, key=scores.__getitem__))
        cells = []
        for pick in picks:
            v = judge(truth, lat, b * 1000, pick)
            cells.append(f"{pick} ({v.accuracy:.2f}, {v.percentile:.1f})")
        if naswot:
            true = [truth[k] for k in window]
            cells.append(f"{tau([scores[k] for k in window], true):.3f}, "
                         f"{tau([macs[k] for k in window], true):.3f}")
        v = judge(truth, lat, b * 1000, inside[0])  # for the oracle
        print(f"| {b:g} | {v.oracle} ({v.oracle_accuracy:.2f}) | {' | '.join(cells)} |")
    if naswot:
        keys = random.Random(0).sample(sorted(lat), min(50, len(lat)))
        true = [truth[k] for k in keys]
        print(f"Kendall tau against the truth over {len(keys)} random networks: NASWOT "
              f"{tau(naswot(keys), true):.3f}, MACs {tau([macs[k] for k in keys], true):.3f}, "
              f"predicted latency {tau([lat[k] for k in keys], true):.3f}")


#: the median over the benchmark file of each network's standard deviation over its 3 runs
SEED_STD = 0.14


def headroom(rows: list[dict], truth, lat: dict[str, float]) -> None:
    """How far above its control a search could go, budget by budget: how many networks
    within the budget are more accurate than the control's network, and how many by more
    than the benchmark's own seed spread (SEED_STD). Where none is, no search can beat the
    control; where the few that are differ from it by less than the benchmark's noise, a
    search that beats it every time would have to tell apart networks that the benchmark's
    own three runs do not."""
    print(f"| budget ms | control (top-1 %) | networks within the budget | more accurate than "
          f"the control | by more than {SEED_STD} points | searches beating / tying / losing "
          "to it |")
    print("|---|---|---|---|---|---|")
    for b in sorted({r["budget_ms"] for r in rows}):
        inside = [k for k in lat if lat[k] <= b * 1000]
        mine = [r for r in rows if r["budget_ms"] == b]
        for control in dict.fromkeys(r["control"] for r in mine):
            acc = truth[control]
            above = [truth[k] - acc for k in inside if truth[k] > acc]
            theirs = [r["accuracy"] - r["control_accuracy"] for r in mine
                      if r["control"] == control]
            print(f"| {b:g} | {control} ({acc:.2f}) | {len(inside)} | {len(above)} | "
                  f"{sum(d > SEED_STD for d in above)} | {sum(d > 0 for d in theirs)} / "
                  f"{sum(d == 0 for d in theirs)} / {sum(d < 0 for d in theirs)} |")


def tau(values, true) -> float:
    """Kendall tau; NaN where it is undefined (fewer than two networks, or a constant
    figure), as scipy returns then, without its warning."""
    from scipy.stats import kendalltau

    if len(values) < 2 or len(set(values)) < 2 or len(set(true)) < 2:
        return float("nan")
    return float(kendalltau(values, true).statistic)


def draw(rows: list[dict], truth, lat: dict[str, float], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 6), dpi=120)
    keys = sorted(lat)
    ax.scatter([lat[k] / 1000 for k in keys], [truth[k] for k in keys], s=3, color="0.75",
               label=f"all {len(keys)} networks")
    front = pareto_front(truth, lat)
    ax.plot([lat[k] / 1000 for k in front], [truth[k] for k in front], color="black", lw=1,
            label="Pareto front")
    for b in sorted({r["budget_ms"] for r in rows}):
        ax.axvline(b, color="tab:blue", alpha=0.15, lw=4)
    recipes = list(dict.fromkeys(r["recipe"] for r in rows))
    for i, name in enumerate(recipes):
        mine = [r for r in rows if r["recipe"] == name]
        ax.scatter([r["found_ms"] for r in mine], [r["accuracy"] for r in mine], s=30,
                   marker="os^D"[i % 4], color=f"C{i}", zorder=3,
                   # a recipe's name runs to a paragraph: wrapped, it stays inside the figure
                   label=textwrap.fill(f"found ({name})", 60))
    ax.scatter([r["control_ms"] for r in rows], [r["control_accuracy"] for r in rows],
               marker="x", color="tab:red", label="cost-only control", zorder=3)
    ax.set_ylim(max(80.0, min(truth[k] for k in keys)), None)
    ax.set_xlabel("predicted latency (ms; shaded: the budgets)")
    ax.set_ylabel("NAS-Bench-Macro test top-1 (%, full CIFAR-10, 50 epochs)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("fbnas searches of nasbench_macro, scored by lookup", fontsize=9)
    fig.tight_layout()
    atomic_write(png, lambda p: fig.savefig(p, format="png"))
    print(f"wrote {png}")
