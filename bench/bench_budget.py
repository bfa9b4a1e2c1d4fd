"""Latency budgets: does the search beat cheaper ways to the same latency?

budget: one search under a latency budget (--target-ms), and the network it finds (the
search's check's decision) against three cheaper ways to the same latency: random networks
within the budget's band (predicted latency between loss.target_floor times the budget and
the budget; +-TOL of the found one's where the floor is 0), a cost-only control (the same
search with theta moved by the latency term alone, no cross-entropy: the control replays the
search's theta steps without training them) and ``fbnas pick``'s network (that prior checked
by NASWOT and theta, no training). Every network is retrained with every --seeds value, the
same budget of epochs each. The found network is also timed (the table's runtime). One
invocation per budget appends one JSON line to --results; ``report`` draws the table and the
picture from that file, and ``longer`` retrains a row's found network and control again for
more epochs; ``report --recipe NAME`` keeps one recipe's rows; ``check`` prints what the
search in --out compared in its check (the row's ``check`` key: the networks' ``skip``
counts, and whether the fewest-skip filter changed the decision).
``--jobs J`` retrains J networks at a time, each in its own process with --threads / J
threads (budget and longer modes).

    python bench/bench_budget.py budget --target-ms 1.0 --results bench/results/budget.jsonl
    python bench/bench_budget.py budget --config configs/fbnet_budget.yaml --target-ms 1.8 \
        --retrain-epochs 15 --randoms 4 --jobs 2
    python bench/bench_budget.py longer --target-ms 3.0 --retrain-epochs 15 --seeds 0
    python bench/bench_budget.py report --results bench/results/budget.jsonl --png budget.png

budget reads the search settings from --config (default configs/demo.yaml) and prints what
it measured; nothing is cached between runs (--out is replaced) unless --reuse-search.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from fbnas.config import Budget, load_config
from fbnas.latency.lut import load_lut
from fbnas.runs.checkpoint import LAST, load_checkpoint
from fbnas.search.checkpoint import load_search_checkpoint
from fbnas.search.latency_prior import latency_prior

sys.path.insert(0, str(Path(__file__).parent))
from bench_common import (common_options, fmt_ops, parse, per_epoch,  # noqa: E402
                          random_between, random_matching, retrain_many, search,
                          search_config, trained_on)


def theta_steps_taken(raw: dict) -> int:
    """How many theta steps the search in checkpoint ``raw`` took (Adam counts them)."""
    state = raw["optimizers"]["theta"]["state"]
    return int(float(next(iter(state.values()))["step"])) if state else 0


def budget(args) -> None:
    import torch

    from fbnas.latency.measure import measure_latency
    from fbnas.search.window import ops_in_window

    if args.target_ms is None:
        raise SystemExit("budget mode needs --target-ms")
    out = Path(args.out or f"runs/bench-budget/{args.target_ms:g}ms")
    sets = ["loss.form=target", f"loss.target_ms={args.target_ms}"]
    args.set = [*args.set, *sets]  # retrains load the config too: a budget config needs one
    if not (args.reuse_search and (out / "search" / LAST).is_file()):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        search(args, out / "search", sets)
    elif not args.resume:
        shutil.rmtree(out / "retrain", ignore_errors=True)
    ck = load_search_checkpoint(out / "search")
    raw = load_checkpoint(out / "search")
    hist = raw["history"]
    cfg = search_config(args, sets)
    lut = load_lut(raw["config"]["lut"], ck.space)
    budget = Budget(args.target_ms, ck.floor)
    # what fbnas sample --hard returns: the search's one-shot pick where it made one. The
    # control keeps the most probable rule (scoring it one-shot on these weights is what
    # bench_macro.py does; here the retrains judge)
    found = ck.decision or ops_in_window(lut, ck.space, ck.probs, budget.us, budget.floor)
    control_probs = latency_prior(cfg, ck.space, lut, theta_steps_taken(raw))
    control = ops_in_window(lut, ck.space, control_probs, budget.us, budget.floor)
    lat = lut.predict(found)
    picked = pick_at_budget(cfg)
    if budget.floor:  # the band the search's check chooses from
        randoms = random_between(lut, budget.floor * budget.us, budget.us, args.randoms,
                                 args.seed)
    else:
        randoms = random_matching(lut, lat, args.randoms, args.tol, args.seed)
    print(f"budget {args.target_ms:g} ms: search {len(hist)} epochs in "
          f"{sum(r['seconds'] for r in hist) / 60:.1f} min", flush=True)
    print(f"  supernet val top-1 per epoch {per_epoch(hist, 'val_top1')}")
    print(f"  found net val top-1 per epoch (supernet weights) "
          f"{per_epoch(hist, 'found_val_top1')}")
    print(f"  found:   {fmt_ops(found)} ({lat / 1000:.3f} ms, {found.count('skip')} skip)")
    for name, ops in (("control", control), ("pick", picked)):
        print(f"  {name + ':':8} {fmt_ops(ops)} ({lut.predict(ops) / 1000:.3f} ms, "
              f"{ops.count('skip')} skip)", flush=True)
    defn = ck.space.definition(found, "found")
    measured, retimed = measure_latency(defn, lut.threads, lut.batch, rounds=args.time_rounds,
                                        lut=lut, ops=found, runtime=lut.runtime)
    speed = retimed / lut.raw_sum(found)
    t0 = time.monotonic()
    space = ck.space

    # every network with every seed: a mean of seeds for each, the randoms' too
    named = [(found, "found"), (control, "control"), (picked, "pick")]
    named += [(r, f"random{i}") for i, r in enumerate(randoms)]
    todo = [(ops, name, s) for ops, name in named for s in args.seeds]
    done = iter(r["top1"] for r in retrain_many(args, space, todo, out))
    found_top1, control_top1, pick_top1 = ([next(done) for _ in args.seeds] for _ in range(3))
    row = {
        "target_ms": args.target_ms, "config": args.config, "sets": args.set,
        "loss": {"target_on": cfg.loss.target_on, "target_weight": cfg.loss.target_weight,
                 "target_penalty": cfg.loss.target_penalty,
                 "multiplier_lr": cfg.loss.multiplier_lr},
        "theta_relaxation": cfg.search.theta_relaxation, "floor": budget.floor,
        "theta_estimator": cfg.search.theta_estimator, "rerank_by": cfg.search.rerank_by,
        "retrain_zero_init": cfg.retrain.zero_init_residual,
        "retrain_clip": cfg.retrain.clip_grad_norm,
        "weights_lr": cfg.optim.weights.lr,
        "search_epochs": len(hist), "retrain_epochs": args.retrain_epochs,
        "search_seed": args.search_seed, "seeds": args.seeds,
        "search_minutes": round(sum(r["seconds"] for r in hist) / 60, 2),
        "supernet_val_top1": per_epoch(hist, "val_top1"),
        "found_val_top1": per_epoch(hist, "found_val_top1"),
        "theta_decided": round(hist[-1].get("theta_decided", float("nan")), 3),
        "check": check_record(raw, cfg.search.rerank_by),
        "lut_cpu": lut.data["environment"].get("cpu"),
        "found": {"ops": found, "predicted_ms": round(lat / 1000, 4),
                  "measured_ms": round(measured["median"] / 1000, 4),
                  "predicted_now_ms": round(lat * speed / 1000, 4),
                  "top1": found_top1},
        "control": {"ops": control, "predicted_ms": round(lut.predict(control) / 1000, 4),
                    "top1": control_top1},
        "pick": {"ops": picked, "predicted_ms": round(lut.predict(picked) / 1000, 4),
                 "top1": pick_top1},
        "random": [{"ops": r, "predicted_ms": round(lut.predict(r) / 1000, 4),
                    "top1": [next(done) for _ in args.seeds]} for r in randoms],
        "random_band": "budget" if budget.floor else f"found +-{args.tol:g}",
        "retrain_minutes": round((time.monotonic() - t0) / 60, 2),
        "trained_on": trained_on(cfg), "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }
    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    with open(results, "a") as f:
        f.write(json.dumps(row) + "\n")
    print_report([row])
    print(f"appended to {results}")


def check_record(raw: dict, rule: str) -> dict | None:
    """What the search's check compared, from its checkpoint ``raw``: how many networks it
    checked and scored one-shot, how many ``skip`` layers they had ({count: networks}), the
    lowest and highest one-shot val top-1 among those scored (a spread within the val
    split's sampling noise decides nothing), and whether rule ``rule``'s fewest-skip filter
    changed the decision (None for a rule without one). None where the search made no
    check. Why: a row that beats or loses to random networks with more ``skip`` layers must
    say whether the filter chose that."""
    from collections import Counter

    from fbnas.search.oneshot_check import depth_filter_moved
    from fbnas.search.run import Search

    decision = raw.get("decision")
    if not decision or not decision.get("candidates"):
        return None
    checked, layers = decision["candidates"], len(decision["ops"])

    def skips(nets: list[dict]) -> dict:
        return {str(k): n for k, n in sorted(Counter(layers - c["depth"] for c in nets).items())}

    figures = Search.check_figures(rule, checked)
    scored = [c for c in checked if c.get("val_top1") is not None]
    return {"checked": len(checked), "skips_checked": skips(checked),
            "skips_scored": skips(scored),
            "top1_scored": [round(f(c["val_top1"] for c in scored), 2) for f in (min, max)]
            if scored else None,
            "depth_filter_moved": depth_filter_moved(rule, **figures)}


def check_line(row: dict) -> str | None:
    """One line on what a row's check compared (rows from before it was recorded: None)."""
    c = row.get("check")
    if not c:
        return None

    def counts(d: dict) -> str:
        return ", ".join(f"{n} with {k} skip" for k, n in d.items())

    moved = {None: "", True: "; the fewest-skip filter changed the decision",
             False: "; the fewest-skip filter changed nothing"}[c["depth_filter_moved"]]
    top1 = c.get("top1_scored")
    spread = f", top-1 {top1[0]:.2f} to {top1[1]:.2f}" if top1 else ""
    return (f"{row['target_ms']:g} ms (search seed {row.get('search_seed', '?')}): the check "
            f"compared {c['checked']} networks ({counts(c['skips_checked'])}), scored "
            f"{sum(c['skips_scored'].values())} one-shot ({counts(c['skips_scored'])}{spread})"
            f"{moved}")


def check(args) -> None:
    """Print what the check of the search in --out (default: --target-ms's budget folder)
    compared (check_record), as JSON for a row's ``check`` key and as the report's line."""
    if args.out is None and args.target_ms is None:
        raise SystemExit("check mode needs --out (a budget run's folder) or --target-ms")
    out = Path(args.out or f"runs/bench-budget/{args.target_ms:g}ms")
    if not (out / "search" / LAST).is_file():
        raise SystemExit(f"check: no search checkpoint in {out / 'search'}; name the budget "
                         "run's folder with --out")
    raw = load_checkpoint(out / "search")
    record = check_record(raw, raw["config"]["search"]["rerank_by"])
    if record is None:
        raise SystemExit(f"check: the search in {out / 'search'} made no check to report")
    print(json.dumps(record))
    cfg = raw["config"]
    print(check_line({"target_ms": cfg["loss"]["target_ms"], "search_seed": cfg["run"]["seed"],
                      "check": record}))


def pick_at_budget(cfg) -> list[str]:
    """``fbnas pick``'s network for the search's config and budget: the latency term's
    prior, then its ``search.rerank`` most probable networks within the budget decided by
    NASWOT and the prior (what the search's check would keep without a supernet)."""
    from fbnas.search.pick import DEFAULT_NETWORKS, pick

    return pick(cfg, cfg.search.rerank or DEFAULT_NETWORKS, echo=lambda line: None)["ops"]


def recipe(row: dict) -> str:
    """The budget loss a row was searched with. Rows from before the record named a part
    used what was the default then: the sampled network's latency with weight 0.2, the
    absolute penalty (or a multiplier moved at a fixed pace), Gumbel theta steps, the
    weights' lr 0.1, and retrained networks whose residual blocks started at unit scale and
    whose gradients were not clipped."""
    lo = row.get("loss", {"target_on": "sample", "target_weight": 0.2})
    lr = row.get("weights_lr", 0.1)
    if lo.get("target_penalty", "absolute") == "multiplier":
        text = f"LAT of {lo['target_on']}, multiplier lr {lo['multiplier_lr']:g}"
        text += " at theta's pace" if lo.get("multiplier_pace", "fixed") == "theta" else ""
    else:
        text = f"LAT of {lo['target_on']}, w {lo['target_weight']:g}"
    if row.get("theta_relaxation", "gumbel") != "gumbel":
        text += f", theta steps {row['theta_relaxation']}"
    if not row.get("retrain_zero_init", False):
        text += ", unit-init retrains"
    if row.get("theta_estimator", "relaxed") != "relaxed":
        text += f", {row['theta_estimator']} theta steps, {row['search_epochs']} search epochs"
    if row.get("rerank_by", "top1") != "top1":
        text += f", one-shot check by {row['rerank_by']}"
    if row.get("retrain_clip", 0.0):
        text += f", retrains clipped at {row['retrain_clip']:g}"
    if row.get("floor"):
        text += f", floor {row['floor']:g}"
    text += f", weights lr {lr:g}" if lr != 0.1 else ""
    return text + (f" (on {row['trained_on']})" if row.get("trained_on", "cpu") != "cpu" else "")


def verdict(row: dict) -> dict:
    """The found network's mean top-1 against the control, fbnas pick's network (rows from
    before it was recorded have none: NaN) and the random ones. It beats the control or the
    pick by more than the larger spread of seeds of the two."""
    import statistics as st

    def mean_sd(top1: list[float]) -> tuple[float, float]:
        return st.mean(top1), st.pstdev(top1) if len(top1) > 1 else 0.0

    (f, f_sd), (c, c_sd) = mean_sd(row["found"]["top1"]), mean_sd(row["control"]["top1"])
    p, p_sd = mean_sd(row["pick"]["top1"]) if "pick" in row else (float("nan"), 0.0)
    rand = [st.mean(r["top1"]) for r in row["random"]]
    return {"found": f, "found_sd": f_sd, "control": c, "control_sd": c_sd,
            "beats_control": f - c > max(f_sd, c_sd), "pick": p, "pick_sd": p_sd,
            "beats_pick": f - p > max(f_sd, p_sd),
            "random_median": st.median(rand) if rand else float("nan"),
            "beaten": sum(f > v for v in rand), "randoms": len(rand)}


def print_report(rows: list[dict], with_recipe: bool = True) -> None:
    """The table of ``rows``; without the loss column where they are one recipe's
    (``with_recipe`` false: report --recipe prints the name once above it)."""
    loss = "loss | " if with_recipe else ""
    print(f"| budget ms | {loss}found ms (predicted / measured) | skip | found top-1 % | control "
          "ms | control top-1 % | pick top-1 % | random top-1 % (median, n) | found beats | "
          "supernet val top-1 (last) | found net val top-1 (last) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if with_recipe else ""))
    for row in sorted(rows, key=lambda r: (recipe(r), r["target_ms"])):
        v, fd, ct = verdict(row), row["found"], row["control"]
        randoms, beaten = "none (0)", "no random networks"  # --randoms 0
        if v["randoms"]:
            randoms = f"{v['random_median']:.2f} ({v['randoms']})"
            beaten = (f"{v['beaten']}/{v['randoms']} random "
                      f"({100 * v['beaten'] / v['randoms']:.0f}th pct)")
        picked, beats = "not run", ""  # rows from before the pick was recorded
        if "pick" in row:
            picked = f"{v['pick']:.2f} +- {v['pick_sd']:.2f}"
            beats = f"pick: {'yes' if v['beats_pick'] else 'no'}; "
        name = f"{recipe(row)} | " if with_recipe else ""
        # the search's seed where the row records it: one budget may have several rows
        seed = f" (seed {row['search_seed']})" if "search_seed" in row else ""
        print(f"| {row['target_ms']:g}{seed} | {name}{fd['predicted_ms']:.3f} / "
              f"{fd['measured_ms']:.3f} "
              f"| {fd['ops'].count('skip')}/{len(fd['ops'])} | {v['found']:.2f} +- "
              f"{v['found_sd']:.2f} | {ct['predicted_ms']:.3f} | {v['control']:.2f} +- "
              f"{v['control_sd']:.2f} | {picked} | {randoms} | control: "
              f"{'yes' if v['beats_control'] else 'no'}; {beats}{beaten} | "
              f"{last_scored(row['supernet_val_top1']):.2f} | "
              f"{last_scored(row['found_val_top1']):.2f} |")


def last_scored(per_epoch_top1: list) -> float:
    """The last epoch's score that was measured (search.evaluate_every leaves others null)."""
    return next((t for t in reversed(per_epoch_top1) if t is not None), float("nan"))


def draw(rows: list[dict], png: Path) -> None:
    """Retrained test top-1 against predicted latency: found networks joined by a line (one
    line per recipe, the three newest), the newest recipe's controls as crosses and random
    networks as grey points (older rows retrained them differently, so they are not
    comparable with it)."""
    import statistics as st
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # the three newest recipes, the newest first (drawn solid, the others dashed); older
    # ones stay in the file and the report's table
    recipes = list(dict.fromkeys(recipe(row) for row in reversed(rows)))[:3]
    rows = [row for row in rows if recipe(row) in recipes]
    rows = sorted(rows, key=lambda r: r["target_ms"])
    newest = [row for row in rows if recipe(row) == recipes[0]]
    fig, ax = plt.subplots(figsize=(7, 6), dpi=120)
    rx = [r["predicted_ms"] for row in newest for r in row["random"]]
    ry = [st.mean(r["top1"]) for row in newest for r in row["random"]]
    ax.scatter(rx, ry, color="0.6", s=18, label="random, within the band (newest recipe)")
    ax.scatter([row["control"]["predicted_ms"] for row in newest],
               [st.mean(row["control"]["top1"]) for row in newest], marker="x", color="tab:red",
               label="cost-only control (newest recipe)")
    picked = [row for row in newest if "pick" in row]
    if picked:
        ax.scatter([row["pick"]["predicted_ms"] for row in picked],
                   [st.mean(row["pick"]["top1"]) for row in picked], marker="^",
                   color="tab:green", label="fbnas pick, no training (newest recipe)")
    for i, name in enumerate(recipes):
        mine = [row for row in rows if recipe(row) == name]
        ax.plot([row["found"]["predicted_ms"] for row in mine],
                [st.mean(row["found"]["top1"]) for row in mine], "o-" if i == 0 else "s--",
                color=("tab:blue", "tab:cyan", "tab:purple")[i],
                label=textwrap.fill(f"found by the search ({name})", 90))
    for ms in sorted({row["target_ms"] for row in rows}):
        ax.axvline(ms, color="tab:blue", alpha=0.15, lw=4)
    ax.set_xlabel("predicted latency (ms; shaded: the budgets)")
    ax.set_ylabel("retrained test top-1 (%)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=8)  # below the axes
    epochs = sorted({row["retrain_epochs"] for row in rows})
    ax.set_title(f"fbnas budget search on the CIFAR-10 subset ({'/'.join(map(str, epochs))} "
                 "retrain epochs)", fontsize=9)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    print(f"wrote {png}")


def read_rows(results: Path) -> list[dict]:
    """The rows of a budget results file, oldest first."""
    return [json.loads(l) for l in results.read_text().splitlines() if l.strip()]


def newest_row(results: Path, target_ms: float) -> dict:
    """The last row of ``results`` searched under ``target_ms`` (the newest recipe's)."""
    mine = [r for r in read_rows(results) if r["target_ms"] == target_ms]
    if not mine:
        raise SystemExit(f"{results} has no row at {target_ms:g} ms: run budget mode first")
    return mine[-1]


def longer(args) -> None:
    """Retrain a budget row's found network and control again, for --retrain-epochs with
    every --seeds value: does the row's ranking, measured on short retrains, last when the
    networks train longer? The row's config and sets apply, and today's retrain defaults,
    so compare with a row of the current recipe."""
    from fbnas.arch.space import load_space

    if args.target_ms is None:
        raise SystemExit("longer mode needs --target-ms (the row to retrain)")
    row = newest_row(Path(args.results), args.target_ms)
    args.config, args.set = row["config"], [*row["sets"], *args.set]
    space = load_space(load_config(args.config, args.set).space)
    out = Path(args.out or f"runs/bench-budget/{args.target_ms:g}ms-{args.retrain_epochs}ep")
    if not args.resume:
        shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    names = ("found", "control")
    todo = [(row[n]["ops"], n, s) for n in names for s in args.seeds]
    t0 = time.monotonic()
    done = iter(r["top1"] for r in retrain_many(args, space, todo, out))
    print(f"budget {args.target_ms:g} ms ({recipe(row)}), {args.retrain_epochs} retrain epochs, "
          f"{(time.monotonic() - t0) / 60:.1f} min")
    for n in names:
        top1 = [next(done) for _ in args.seeds]
        print(f"  {n:8} {row[n]['predicted_ms']:.3f} ms: test top-1 "
              f"{', '.join(f'{t:.2f}' for t in top1)} (seeds {args.seeds}); "
              f"{row['retrain_epochs']} epochs: {', '.join(f'{t:.2f}' for t in row[n]['top1'])}")


def report(args) -> None:
    rows = read_rows(Path(args.results))
    keep = getattr(args, "recipe", None)
    if keep:  # one recipe's rows alone, as the README's table and picture show them
        rows = [row for row in rows if recipe(row) == keep]
        if not rows:
            raise SystemExit(f"report --recipe: no rows of recipe {keep!r} in {args.results}; "
                             "copy the name from the loss column of the full report")
        print(f"recipe: {keep}")
    print_report(rows, with_recipe=not keep)
    for line in filter(None, map(check_line, rows)):
        print(line)
    dates = sorted(row["date"] for row in rows if row.get("date"))
    if dates:  # where a pasted table was measured
        places = ", ".join(dict.fromkeys(row.get("trained_on", "cpu") for row in rows))
        print(f"measured {dates[0]} to {dates[-1]}; trained on {places}; table's CPU "
              + ", ".join(dict.fromkeys(str(row.get("lut_cpu")) for row in rows)))
    if args.png:
        draw(rows, Path(args.png))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["budget", "longer", "report", "check"])
    common_options(ap)
    ap.add_argument("--target-ms", type=float, default=None,
                    help="budget: the latency budget; longer: the row to retrain")
    ap.add_argument("--results", default="bench/results/budget.jsonl",
                    help="budget/longer/report: the results file (one JSON line per budget)")
    ap.add_argument("--png", default=None, help="report: where to draw the picture")
    ap.add_argument("--recipe", default=None,
                    help="report: keep only the rows of this recipe (the table's loss column)")
    ap.add_argument("--time-rounds", type=int, default=20,
                    help="budget: timing rounds of the found network")
    args = parse(ap)
    {"budget": budget, "longer": longer, "report": report, "check": check}[args.mode](args)


if __name__ == "__main__":
    main()
