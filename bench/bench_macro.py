"""Search quality against ground truth: NAS-Bench-Macro, every network's accuracy looked up.

search: for each budget (the --quantiles of the space's predicted latencies under the
table, or --target-ms) and each --seeds value, run one search of ``nasbench_macro``, take
the most probable network within the budget (what ``fbnas sample --hard`` returns) and the
cost-only control's (the same theta steps with the cross-entropy held constant, see
fbnas.search.latency_prior), look both up, and append one JSON line per search to
--results: the found key, true accuracy, percentile among all networks within the budget,
the oracle (best network within it) and the gap to it, the mean of the networks that fill
90 to 100% of it, the control's key and accuracy, search minutes (the epochs' training, and
the whole search as its user waits for it, with the CPU model and --jobs they were spent
on), and how decided theta is.
With --rank N it also scores N random networks on the search's supernet weights (BN
re-estimated for each) and prints Kendall tau of that one-shot accuracy (on the val split
the search's check sees, and on val and test pooled, three times the images), of predicted
latency, of MACs and of NASWOT against the true accuracy.

score: the same rows for search run directories made elsewhere (``fbnas train --target-ms``
on ``nasbench_macro``), with the share of the space within their budget as the quantile.

pick: the same rows for training-free picks (``fbnas pick``: the latency term's prior, then
NASWOT over its --rerank most probable networks, default 256, by --rerank-by, default
naswot_and_theta) at each budget and seed; a pick is the cost-only control decided by its own
check, so its row's control is the pick itself. Minutes, not hours: nothing is trained.

sweep (macro_sweep.py): the recipe judged after it was chosen: a search at every 5th
percentile of the latencies (5th to 95th) with --seeds-per-budget seeds drawn afresh, each row
(protocol "sweep") also holding fbnas pick's network, the window's most-MACs network and 20
random networks of the window; ``report --protocol sweep`` prints its tables.

rank (macro_rank.py): for finished searches (run directories), how well each figure ranks
random networks of the search's window against the truth: Kendall tau and the cost of
deciding by it, of the one-shot top-1 on its weights, NASWOT, MACs, theta, depth and
combinations; rows to --rank-results; ``report --protocol rank`` prints their means.

finetune (macro_finetune.py): for finished searches, their check's shortlist scored and
decided again after --finetune-epochs of training the shared weights on it alone; rows to
--finetune-results; ``report --protocol finetune`` prints before against after, with and
without the fewest-skip filter.

report (macro_report.py): the table of --results (with --by-budget, one line per budget
instead of one per search), a summary per recipe with when and on which CPU model it was
searched, what rules that need no search (most MACs within the budget, slowest within it;
with --naswot-window the best NASWOT score among the networks that spend 90 to 100% of it)
score at its budgets, how many networks within each budget are more accurate than its
control (the headroom a search has to beat it), and one picture: every network of the space as a grey point (true accuracy against predicted latency), the
Pareto front, the budgets, found networks and controls. The same seed searches differently
on another CPU model, so --cpu keeps the rows of one; --recipe keeps one recipe's rows;
--since keeps the sweeps started after a recipe was chosen; --rerank-by adds each recorded
check decided again by another rule, named as the recipe deciding by it (so that a recipe's
report takes in the searches of an earlier check, decided by its own);
--paired A B compares two recipes search by search instead (macro_paired.py).

    python bench/bench_macro.py search --quantiles 0.2 0.4 0.6 0.8 --seeds 0 1 2
    python bench/bench_macro.py search --target-ms 1.8 --seeds 0 --rank 50
    python bench/bench_macro.py pick --quantiles 0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9
    python bench/bench_macro.py sweep --jobs 2 --seeds-per-budget 2
    python bench/bench_macro.py rank runs/bench-macro/*ms-s* --rank 40
    python bench/bench_macro.py finetune runs/bench-macro/*ms-s*/ --finetune-epochs 1 2
    python bench/bench_macro.py report --png bench/results/macro.png
    python bench/bench_macro.py report --paired "RECIPE A" "RECIPE B" --seeds 26 27 28
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import time
from pathlib import Path

from fbnas.arch.space import load_space
from fbnas.check_rules import PICK_RULES
from fbnas.config import load_config
from fbnas.latency.lut import load_lut
from fbnas.machine import cpu_identity, cpu_model
from fbnas.runs.checkpoint import load_checkpoint
from fbnas.search.checkpoint import load_search_checkpoint
from fbnas.search.latency_prior import latency_prior
from fbnas.search.naswot import data_images, score_architectures
from fbnas.search.oneshot_check import (RULES, checked_networks, choose, depth_figures,
                                        log_probabilities, needs, shortlist)
from fbnas.search.run import run_search

sys.path.insert(0, str(Path(__file__).parent))
from bench_budget import theta_steps_taken  # noqa: E402
from bench_common import log_to, per_epoch  # noqa: E402
from groundtruth import (all_keys, depth_figures_of, judge, key_of,  # noqa: E402
                         latency_quantile, load_truth, ops_of)
from macro_finetune import (finetune_table, measure, setting_name, setting_of,  # noqa: E402
                            layer_bias, skip_bias, unfiltered_table)
from macro_paired import report_paired  # noqa: E402
from macro_rank import band_ranking, rank_table, window_keys  # noqa: E402
from macro_report import (by_budget, draw, headroom, print_table, provenance,  # noqa: E402
                          simple_rules, summary, tau)
from macro_sweep import (beside, recorded_seeds, report_sweep, sweep_plan,  # noqa: E402
                         sweep_quantiles)

TRUTH = "../shared/data/nas-bench-macro"
#: search's and pick's budgets where --quantiles names none (sweep has its own)
DEFAULT_QUANTILES = (0.2, 0.4, 0.6, 0.8)


def space_latencies(lut, layers: int) -> dict[str, float]:
    """Every network of the space by key, with its calibrated predicted latency (us)."""
    return {k: lut.predict(ops_of(k)) for k in all_keys(layers)}


def budgets(args, lat: dict[str, float]) -> list[tuple[float | None, float]]:
    """(quantile or None, budget in ms, rounded to the microsecond) for each budget asked."""
    if args.target_ms:
        return [(None, t) for t in args.target_ms]
    return [(q, round(latency_quantile(lat, q) / 1000, 3))
            for q in args.quantiles or DEFAULT_QUANTILES]


def finished_search(run_dir: Path):
    """The Search of the finished run in ``run_dir``, on its last weights and theta, on the
    CPU."""
    import torch

    from fbnas.config import from_saved
    from fbnas.runs.dist import init_from_env
    from fbnas.runs.rundir import RunPaths
    from fbnas.search.run import Search

    paths = RunPaths(run_dir)
    ckpt = load_checkpoint(paths.last, "search")
    return Search(from_saved(ckpt["config"]), paths, init_from_env("cpu"), torch.device("cpu"),
                  ckpt)


def one_shot(run_dir: Path, keys: list[str], test: bool = False) -> list[dict]:
    """Val top-1 and cross-entropy of each network ``keys`` names on the supernet weights of
    the finished search in ``run_dir``, BN statistics re-estimated for each
    (Search.evaluate_on). With ``test``, also ``top1_all`` and ``ce_all``: the same over the
    val and test splits pooled (1,525 images on the subset against 508), under the same
    re-estimation; only a measurement of the ranking may use them: a search never sees the
    test split."""
    trainer = finished_search(run_dir)
    pooled = test and trainer.test_loader is not None
    loaders = [trainer.val_loader] + ([trainer.test_loader] if pooled else [])
    out = []
    for k in keys:
        figures = trainer.evaluate_on(loaders, path=trainer.net.path_of(ops_of(k)))
        val = figures[0]
        if pooled:
            t = figures[1]
            n = val["images"] + t["images"]
            val.update({f"{f}_all": (val[f] * val["images"] + t[f] * t["images"]) / n
                        for f in ("top1", "ce")})
        out.append(val)
    return out


class Naswot:
    """NASWOT scores by key (fbnas/search/naswot.py), on the images a search of ``cfg``
    scores its networks on, each network scored once."""

    def __init__(self, cfg, space):
        self.cfg, self.space, self.images, self.known = cfg, space, None, {}

    def __call__(self, keys: list[str]) -> list[float]:
        todo = [k for k in dict.fromkeys(keys) if k not in self.known]
        if todo:
            if self.images is None:
                from fbnas.runs.loaders import open_dataset

                self.images = data_images(self.cfg, open_dataset(self.cfg, self.space.resolution))
            self.known.update(zip(todo, score_architectures(
                self.space, [ops_of(k) for k in todo], self.images)))
        return [self.known[k] for k in keys]


def rank_correlations(args, run_dir: Path, truth, lut, budget_us: float, lat,
                      naswot: Naswot) -> dict:
    """Kendall tau against the true accuracy, over ``args.rank`` random networks of the space
    and over 30 random ones that spend 90 to 100% of the budget (where the search decides):
    of their one-shot accuracy, and for comparison of their predicted latency, their MACs and
    their training-free NASWOT score."""
    sets = {"random": random.Random(args.rank_seed).sample(sorted(lat), args.rank)}
    near = sorted(k for k, v in lat.items() if 0.9 * budget_us <= v <= budget_us)
    if len(near) >= 3:  # a rank correlation of fewer networks says nothing
        sets["near_budget"] = random.Random(args.rank_seed + 1).sample(near, min(30, len(near)))
    shot = one_shot(run_dir, [k for keys in sets.values() for k in keys], test=True)
    out = {}
    for name, keys in sets.items():
        mine, shot = shot[:len(keys)], shot[len(keys):]
        true = [truth[k] for k in keys]
        macs = [lut.raw_sum(ops_of(k), "macs") for k in keys]
        out[name] = {"networks": len(keys), **{
            what: round(tau(v, true), 3) for what, v in
            (("one_shot", [m["top1"] for m in mine]), ("one_shot_ce", [-m["ce"] for m in mine]),
             *((("one_shot_all", [m["top1_all"] for m in mine]),
                ("one_shot_ce_all", [-m["ce_all"] for m in mine])) if "top1_all" in mine[0]
               else ()),
             ("latency", [lat[k] for k in keys]), ("macs", macs), ("naswot", naswot(keys)))}}
    return out


def search_one(args, truth, lut, space, lat, naswot, quantile, budget_ms: float,
               seed: int) -> dict:
    out = Path(args.out) / f"{budget_ms:g}ms-s{seed}"
    sets = ["loss.form=target", f"loss.target_ms={budget_ms}", f"run.seed={seed}",
            f"run.threads={args.threads}", "run.progress=false", *args.set]
    cfg = load_config(args.config, sets)
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    run_search(cfg, out, force=True, echo=log_to(out.parent / f"{out.name}.log"))
    # the whole search as its user waits for it: set-up, epochs, their val scores, the last
    # epoch's check and the test pass (search_minutes counts the epochs' training alone)
    wall = round((time.monotonic() - started) / 60, 2)
    row = score_run(args, out, truth, lut, space, lat, naswot)
    # where the search minutes were spent: this CPU, with --jobs searches side by side
    return {"quantile": quantile, **row, "wall_minutes": wall, "cpu": cpu_model(),
            "cpu_id": cpu_identity(), "jobs": args.jobs}


def score_run(args, out: Path, truth, lut, space, lat, naswot: Naswot) -> dict:
    """The row of the finished budget search in ``out``: its found network and its cost-only
    control, looked up (and, with --rank, the one-shot ranking on its weights)."""
    ck, raw = load_search_checkpoint(out), load_checkpoint(out)
    cfg = ck.config
    if ck.budget is None:
        raise SystemExit(f"{out} is not a search under a latency budget (loss.form target)")
    hist = raw["history"]
    budget_us = ck.budget.us
    floor = cfg.loss.target_floor if args.floor is None else args.floor
    k = cfg.search.rerank if args.rerank is None else args.rerank
    by = cfg.search.rerank_by if args.rerank_by is None else args.rerank_by
    alt = (cfg.search.rerank_alternatives if args.alternatives is None
           else args.alternatives == "yes")
    control_probs = latency_prior(cfg, space, lut, theta_steps_taken(raw))
    own_rule = (args.floor is None and args.rerank is None and args.alternatives is None
                and by == cfg.search.rerank_by)
    if ck.decision is not None and own_rule:
        found = ck.decision  # the search's own one-shot check
        found_scored = [scored_entry(c["ops"], c.get("val_top1"), c.get("val_ce"),
                                     c.get("naswot"), c.get("log_prob"))
                        for c in raw["decision"]["candidates"]]
    else:
        found, found_scored = decide(out, lut, space, ck.probs, budget_us, floor, k, by, naswot,
                                     alt)
    # the control decides as the search does: its k most probable networks, scored one-shot
    # on the search's weights where k > 1, so that only theta differs
    control, control_scored = decide(out, lut, space, control_probs, budget_us, floor, k, by,
                                     naswot, alt)
    v, c = (judge(truth, lat, budget_us, key_of(ops)) for ops in (found, control))
    row = {
        "budget_ms": ck.budget.ms, "floor": floor, "rerank": k if k > 1 else 0, "rerank_by": by,
        "seed": cfg.run.seed, "config": args.config, "sets": args.set,
        "recipe": args.recipe or recipe_of(cfg, alt, by, k),
        "found": key_of(found), "found_ms": round(lut.predict(found) / 1000, 4),
        "accuracy": round(v.accuracy, 3), "percentile": round(v.percentile, 1),
        "oracle": v.oracle, "oracle_accuracy": round(v.oracle_accuracy, 3),
        "gap": round(v.gap, 3), "near_mean": round(v.near_mean, 3), "within": v.within,
        "control": key_of(control), "control_ms": round(lut.predict(control) / 1000, 4),
        "control_accuracy": round(c.accuracy, 3), "control_percentile": round(c.percentile, 1),
        "search_minutes": round(sum(r["seconds"] for r in hist) / 60, 2),
        "theta_decided": round(hist[-1].get("theta_decided", float("nan")), 3),
        "argmax_stable": hist[-1].get("argmax_stable"),
        "supernet_val_top1": per_epoch(hist, "val_top1"),
        "found_val_top1": per_epoch(hist, "found_val_top1"),
        "lut_cpu": lut.data["environment"].get("cpu"), "date": time.strftime("%Y-%m-%d"),
        # each checked network, most probable first: key, val top-1, val CE (None where the
        # rule needs no one-shot pass), the NASWOT score (None where the rule did not use
        # it) and the log-probability under theta (scored_entry)
        "found_candidates": found_scored, "control_candidates": control_scored,
    }
    if args.rank:
        row["rank"] = rank_correlations(args, out, truth, lut, budget_us, lat, naswot)
    return row


#: theta's rate in every row named by recipe_of before it named the rate (configs/demo.yaml's,
#: which configs/macro.yaml inherits); another rate is named, so that those rows keep their names
UNNAMED_THETA_LR = 0.05
#: the weights-only epochs of every row recipe_of named before it named them (macro.yaml's 2)
UNNAMED_WARMUP_EPOCHS = 2
#: the networks checked in every row recipe_of named before it named how many
UNNAMED_RERANK = 8


def recipe_of(cfg, alternatives: bool = False, by: str | None = None,
              k: int | None = None) -> str:
    """A row's recipe where --recipe names none: what decides the search, read from its own
    config, so that rows of two settings never share a name when a config file changes
    (rows written before this say "default": 5 epochs, relaxed theta steps)."""
    s = cfg.search
    warmup = cfg.warmup_epochs
    epochs = f"{s.epochs} epochs" + (f", {warmup} weights-only"
                                     if warmup != UNNAMED_WARMUP_EPOCHS else "")
    if s.shared_weights:
        epochs += ", shared weights"
    if s.sandwich_every:
        epochs += ", sandwich" + (f" every {s.sandwich_every}" if s.sandwich_every > 1 else "")
    if s.mode == "hard" and not s.soft_transitions:
        epochs += ", hard transition layers"
    elif s.mode == "hard" and s.transition_paths:
        epochs += f", {s.transition_paths} paths at transition layers"
    steps = f" ({s.theta_steps} a weight step)" if s.theta_steps > 1 else ""
    if cfg.optim.theta.lr != UNNAMED_THETA_LR:
        steps += f" (theta lr {cfg.optim.theta.lr:g})"
    if s.final_theta_steps and s.final_theta_steps != s.theta_steps:
        steps += f" ({s.final_theta_steps} a weight step in the last epoch)"
    final_lr = cfg.optim.theta.final_lr
    if final_lr is not None and final_lr != cfg.optim.theta.lr:
        steps += f" (theta lr falling to {final_lr:g} over the last epoch)"
    lo = cfg.loss
    if lo.target_penalty == "multiplier":
        steps += f" (multiplier penalty, lr {lo.multiplier_lr:g})"
    elif lo.target_weight != 1.0:
        steps += f" (penalty weight {lo.target_weight:g})"
    by = s.rerank_by if by is None else by
    k = s.rerank if k is None else k
    check = f"check by {by}" + (f" of {k}" if k != UNNAMED_RERANK else "")
    check += " with per-layer alternatives" if alternatives else ""
    return f"{epochs}, {s.theta_estimator} theta steps{steps}, {check}"


def decide(run_dir: Path, lut, space, probs, budget_us: float, floor: float, k: int,
           by: str, naswot: Naswot, alternatives: bool = False) -> tuple[list[str], list[list]]:
    """The network a search with theta ``probs`` returns: the most probable within the
    window, or with ``k`` > 1 the best by rule ``by`` (search.rerank_by) of the ``k`` most
    probable (and, with ``alternatives``, each layer's alternatives: checked_networks), scored
    as Search.rerank scores them (one-shot on ``run_dir``'s weights where the rule needs it);
    and each checked network's record (scored_entry)."""
    options = checked_networks(lut, space, probs, budget_us, floor, k, alternatives)
    if len(options) == 1:
        return options[0], []
    keys = [key_of(ops) for ops in options]
    nw = naswot(keys) if needs(by, "naswot") else [None] * len(keys)
    figures = {"naswot": nw, "macs": [lut.raw_sum(ops, "macs") for ops in options],
               "theta": log_probabilities(space, probs, options),
               **depth_figures(space, options)}
    shot = [{}] * len(keys)
    if needs(by, "top1"):  # every network, or a shortlist rule's few, as Search.rerank does
        todo = shortlist(by, len(keys), **figures)
        for i, m in zip(todo, one_shot(run_dir, [keys[i] for i in todo])):
            shot[i] = m
    best = choose(by, top1=[m.get("top1") for m in shot], **figures)
    return options[best], [scored_entry(ops, m.get("top1"), m.get("ce"), v, lp)
                           for ops, m, v, lp in zip(options, shot, nw, figures["theta"])]


def redecided(row: dict, by: str, truth, lut, lat, naswot: Naswot) -> dict | None:
    """``row`` as its search and control would have decided by rule ``by`` from the networks
    their checks recorded (no search rerun; NASWOT scores are computed from the keys); None
    for rows saved before checks were recorded, or whose checks lack the one-shot score the
    rule needs, and for rules that weigh theta where the row does not keep each network's
    log-probability (rows before 2026-12-06: re-decide the run with ``score --rerank-by``). A
    check of one network (the window held no other) decides the same by any rule.

    The copy is named as the recipe that decides by ``by`` (the training does not depend on
    the rule, so it is what that recipe would have found) and keeps the name it had in
    ``redecided_from``. A sweep row's pick is decided again where ``by`` is a rule fbnas pick
    decides by and the row keeps the pick's check (``pick_candidates``); otherwise it stays
    fbnas pick's, as a user running the recipe would compare it."""
    old = row.get("rerank_by", "top1")
    if old == by or "found_candidates" not in row:
        return None
    checks = [row.get(f"{who}_candidates") or [] for who in ("found", "control")]
    if needs(by, "theta") and any(len(c) < 5 for checked in checks for c in checked):
        return None
    name, n = re.subn(rf"check by {re.escape(old)}(?= of \d+$|$)", f"check by {by}",
                      row["recipe"])
    out = dict(row, recipe=name if n else f"{row['recipe']}, re-decided by {by}",
               rerank_by=by, redecided_from=row["recipe"])
    for (who, prefix), checked in zip((("found", ""), ("control", "control_")), checks):
        if not checked:
            continue
        key = recheck(checked, by, lut, naswot)
        if key is None:
            return None
        v = judge(truth, lat, row["budget_ms"] * 1000, key)
        out.update({who: key, f"{who}_ms": round(lat[key] / 1000, 4),
                    f"{prefix}accuracy": round(v.accuracy, 3),
                    f"{prefix}percentile": round(v.percentile, 1)})
        if who == "found":
            out["gap"] = round(v.gap, 3)
    if by in PICK_RULES and row.get("pick_candidates"):
        out["pick_key"] = recheck(row["pick_candidates"], by, lut, naswot)
    return out


def recheck(checked: list[list], by: str, lut, naswot: Naswot) -> str | None:
    """The key rule ``by`` keeps among the networks a check recorded (scored_entry's lists);
    None where a network the rule scores one-shot has no one-shot top-1 recorded."""
    keys = [c[0] for c in checked]
    scores = None
    if needs(by, "naswot"):
        # the NASWOT scores the check recorded, where it did: the same as computed afresh
        # (a fixed initialisation and images), without a forward pass a network
        scores = [c[3] if len(c) > 3 else None for c in checked]
        scores = scores if None not in scores else naswot(keys)
    figures = {"macs": [lut.raw_sum(ops_of(k), "macs") for k in keys], "naswot": scores,
               "theta": [c[4] if len(c) > 4 else None for c in checked],
               **depth_figures_of(keys)}
    if needs(by, "top1") and any(checked[i][1] is None
                                 for i in shortlist(by, len(keys), **figures)):
        return None
    return keys[choose(by, top1=[c[1] for c in checked], **figures)]


def scored_entry(ops: list[str], top1: float | None, ce: float | None,
                 naswot: float | None = None, log_prob: float | None = None) -> list:
    """A row's record of one network a check scored: [key, val top-1, val CE] (None where
    not measured), its NASWOT score where the check computed one, and its log-probability
    under theta where given (so that a rule weighing theta can re-decide the row)."""
    entry = [key_of(ops), None if top1 is None else round(top1, 2),
             None if ce is None else round(ce, 4)]
    if log_prob is not None:
        return [*entry, None if naswot is None else round(naswot, 3), round(log_prob, 4)]
    return entry if naswot is None else [*entry, round(naswot, 3)]


def setting(args) -> tuple:
    """(space, table, truth, every network's predicted latency) of --config and --truth."""
    cfg = load_config(args.config, args.set)
    space = load_space(cfg.space)
    lut = load_lut(cfg.lut, space)
    truth = load_truth(args.truth, len(space.layers))
    return space, lut, truth, space_latencies(lut, len(space.layers)), Naswot(cfg, space)


def search(args) -> None:
    space, lut, truth, lat, naswot = setting(args)
    todo = [(q, b, seed) for q, b in budgets(args, lat) for seed in args.seeds or [0, 1, 2]]
    run_all(args, search_one, todo, truth, lut, space, lat, naswot)


def run_all(args, one, todo: list[tuple], *shared) -> None:
    """``one(args, *shared, *t)`` for each ``t`` of ``todo``, --jobs at a time (side by side,
    each with its share of --threads), each row appended as soon as its search finishes: a
    run stopped halfway keeps the rows it made."""
    if args.jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        args.threads = max(1, args.threads // args.jobs)
        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as ex:
            futures = [ex.submit(one, args, *shared, *t) for t in todo]
            append_rows(args, (f.result() for f in as_completed(futures)))
    else:
        append_rows(args, (one(args, *shared, *t) for t in todo))


def sweep_one(args, truth, lut, space, lat, naswot, quantile, budget_ms: float, seed: int,
              started: str) -> dict:
    """One search of the sweep (search_one) and, at its budget and seed, fbnas pick's network
    and the networks its check scored (pick_one; so that a pick can be re-decided by another
    rule, as a search can), the window's most-MACs network and random networks
    (macro_sweep.beside)."""
    row = search_one(args, truth, lut, space, lat, naswot, quantile, budget_ms, seed)
    picked = pick_one(args, truth, lut, space, lat, naswot, quantile, budget_ms, seed)
    return {**row, "protocol": "sweep", "sweep_started": started, "pick_key": picked["found"],
            "pick_minutes": picked["wall_minutes"],
            "pick_candidates": picked["found_candidates"], **beside(row, lut, lat)}


def sweep(args) -> None:
    """The sweep (macro_sweep.py): a search at each budget of the sweep's quantiles with
    --seeds-per-budget fresh seeds, each row recording the rules that need no training."""
    if args.target_ms or args.seeds:
        raise SystemExit("sweep: budgets are the sweep's quantiles and seeds are drawn afresh; "
                         "drop --target-ms and --seeds (narrow it with --quantiles)")
    if args.seeds_per_budget < 1:
        raise SystemExit("sweep: --seeds-per-budget must be at least 1")
    args.quantiles = sweep_quantiles(args.quantiles)
    space, lut, truth, lat, naswot = setting(args)
    todo = sweep_plan(budgets(args, lat), args.seeds_per_budget,
                      recorded_seeds(Path(args.results)))
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    print(f"sweep: {len(todo)} searches, seeds {' '.join(str(t[2]) for t in todo)}", flush=True)
    run_all(args, sweep_one, [(*t, started) for t in todo], truth, lut, space, lat, naswot)


def pick_one(args, truth, lut, space, lat, naswot, quantile, budget_ms: float,
             seed: int) -> dict:
    """The row of one training-free pick (fbnas pick) at ``budget_ms``, looked up. It is
    the cost-only control decided by its own check, so the row's control is the pick
    itself."""
    from fbnas.search.pick import DEFAULT_NETWORKS, pick

    sets = ["loss.form=target", f"loss.target_ms={budget_ms}", f"run.seed={seed}", *args.set]
    cfg = load_config(args.config, sets)
    # fbnas pick's own defaults unless --rerank and --rerank-by say otherwise
    k, by = args.rerank or DEFAULT_NETWORKS, args.rerank_by or PICK_RULES[0]
    started = time.monotonic()
    found = pick(cfg, k, by, echo=lambda line: None,
                 scorer=lambda options: naswot([key_of(ops) for ops in options]))
    minutes = round((time.monotonic() - started) / 60, 2)
    key = key_of(found["ops"])
    v = judge(truth, lat, found["budget"].us, key)
    ms = round(lut.predict(found["ops"]) / 1000, 4)
    return {
        "quantile": quantile, "budget_ms": budget_ms, "floor": cfg.loss.target_floor,
        "rerank": k, "rerank_by": by, "seed": seed, "config": args.config, "sets": args.set,
        "recipe": args.recipe or f"training-free pick, check by {by} of {k}",
        "found": key, "found_ms": ms, "accuracy": round(v.accuracy, 3),
        "percentile": round(v.percentile, 1), "oracle": v.oracle,
        "oracle_accuracy": round(v.oracle_accuracy, 3), "gap": round(v.gap, 3),
        "near_mean": round(v.near_mean, 3), "within": v.within,
        "control": key, "control_ms": ms, "control_accuracy": round(v.accuracy, 3),
        "control_percentile": round(v.percentile, 1),
        "search_minutes": minutes, "wall_minutes": minutes,
        "theta_decided": round(float(sum(p.max() for p in found["probs"]) / len(found["probs"])),
                               3),
        "argmax_stable": None, "theta_steps": found["theta_steps"],
        "lut_cpu": lut.data["environment"].get("cpu"), "date": time.strftime("%Y-%m-%d"),
        "cpu": cpu_model(), "cpu_id": cpu_identity(), "jobs": 1,
        "found_candidates": [scored_entry(c["ops"], None, None, c["naswot"], c["log_prob"])
                             for c in found["candidates"]],
    }


def picks(args) -> None:
    """Rows for training-free picks at each budget and seed (no search, no training)."""
    import torch

    space, lut, truth, lat, naswot = setting(args)
    torch.set_num_threads(args.threads)
    append_rows(args, (pick_one(args, truth, lut, space, lat, naswot, q, b, seed)
                       for q, b in budgets(args, lat) for seed in args.seeds or [0, 1, 2]))


def score(args) -> None:
    """Rows for searches run elsewhere (fbnas train --target-ms on nasbench_macro), at
    --threads, each appended as it is scored: a long re-decision stopped halfway keeps the
    rows it made."""
    import torch

    space, lut, truth, lat, naswot = setting(args)
    torch.set_num_threads(args.threads)

    def scored(run: str) -> dict:
        row = score_run(args, Path(run), truth, lut, space, lat, naswot)
        share = sum(v <= row["budget_ms"] * 1000 for v in lat.values()) / len(lat)
        return {"quantile": round(share, 3), **row}

    append_rows(args, (scored(run) for run in args.runs))


def append_rows(args, rows) -> None:
    """Append each row to --results as it comes, and print it."""
    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    for row in rows:
        with open(results, "a") as f:
            f.write(json.dumps(row) + "\n")
        print_table([row])
        for name, r in row.get("rank", {}).items():
            print(f"  Kendall tau against the truth, {r['networks']} {name.replace('_', '-')} "
                  f"networks: one-shot accuracy {r['one_shot']:.3f}, one-shot CE "
                  f"{r.get('one_shot_ce', float('nan')):.3f} (on val and test "
                  f"{r.get('one_shot_all', float('nan')):.3f} and "
                  f"{r.get('one_shot_ce_all', float('nan')):.3f}), predicted latency "
                  f"{r['latency']:.3f}, MACs {r['macs']:.3f}, NASWOT "
                  f"{r.get('naswot', float('nan')):.3f}", flush=True)
    print(f"appended to {results}")


def rank(args) -> None:
    """macro_rank.py: for each finished search of ``args.runs``, Kendall tau and best gap of
    each figure over --rank (default 40) random networks of its window, one row each."""
    if not args.runs:
        raise SystemExit("rank: name the finished search run directories to measure")
    space, lut, truth, lat, naswot = setting(args)
    results = Path(args.rank_results)
    results.parent.mkdir(parents=True, exist_ok=True)
    for run in map(Path, args.runs):
        ck = load_search_checkpoint(run)
        if ck.budget is None:
            raise SystemExit(f"rank: {run} is not a search under a latency budget")
        floor = ck.config.loss.target_floor
        keys = window_keys(lat, ck.budget.us, floor, args.rank or 40, args.rank_seed)
        if len(keys) < 3:  # a rank correlation of fewer networks says nothing
            print(f"{run}: {len(keys)} networks in its window, nothing to rank")
            continue
        shot, ops = one_shot(run, keys, test=True), [ops_of(k) for k in keys]
        figures = {"one_shot": [m["top1"] for m in shot], "naswot": naswot(keys),
                   "macs": [lut.raw_sum(o, "macs") for o in ops],
                   "theta": log_probabilities(space, ck.probs, ops),
                   "depth": [-o.count("skip") for o in ops]}
        if "top1_all" in shot[0]:
            figures["one_shot_all"] = [m["top1_all"] for m in shot]
        within = sum(1 for v in lat.values() if v <= ck.budget.us) / len(lat)
        row = {"protocol": "rank", "run": str(run), "budget_ms": ck.budget.ms,
               "quantile": round(within, 3), "floor": floor, "seed": ck.config.run.seed,
               "recipe": recipe_of(ck.config, ck.config.search.rerank_alternatives),
               "rank_seed": args.rank_seed,
               "lut_cpu": lut.data["environment"].get("cpu"), "cpu": cpu_model(),
               "date": time.strftime("%Y-%m-%d"), "keys": keys,
               **band_ranking([truth[k] for k in keys], figures)}
        with open(results, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"{run}: {row['networks']} networks, tau " + ", ".join(
            f"{k} {v:.2f}" for k, v in row["tau"].items()), flush=True)


def finetune(args) -> None:
    """macro_finetune.py: for each finished search of ``args.runs``, its check's shortlist
    scored and decided again after fine-tuning the shared weights on it, one row each."""
    import torch

    if not args.runs:
        raise SystemExit("finetune: name the finished search run directories to measure")
    _, _, truth, lat, _ = setting(args)
    torch.set_num_threads(args.threads)
    base = recipe_of(load_config(args.config, args.set)).split(", ")
    results = Path(args.finetune_results)
    results.parent.mkdir(parents=True, exist_ok=True)
    for run in map(Path, args.runs):
        if not (run / "checkpoints").is_dir():
            raise SystemExit(f"finetune: {run} holds no search checkpoints; name a finished "
                             "search's run directory (runs/bench-macro/<budget>ms-s<seed>)")
        search = finished_search(run)  # measure restores its weights after each setting
        for epochs in args.finetune_epochs:
            row = measure(search, truth, lat, epochs, args.finetune_lr, args.finetune_split)
            if row is None:
                print(f"{run}: its check scored no network one-shot, nothing to fine-tune")
                break
            row.update(run=str(run), cpu=cpu_model(), date=time.strftime("%Y-%m-%d"))
            # how its weights were trained, where not as --config and --set train them
            own = [p for p in recipe_of(search.cfg).split(", ") if p not in base]
            if own:
                row["training"] = ", ".join(own)
            with open(results, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{run}, {epochs:g} epochs: tau {row['tau_before']:.2f} -> "
                  f"{row['tau_after']:.2f}, gap {row['gap_before']:.2f} -> "
                  f"{row['gap_after']:.2f}, without the fewest-skip filter "
                  f"{row['gap_unfiltered_before']:.2f} -> {row['gap_unfiltered_after']:.2f} "
                  f"({row['finetune_seconds']:.0f} s)", flush=True)


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def report(args) -> None:
    if args.protocol == "rank":  # macro_rank.py's rows, in a file of their own
        rows = [r for r in read_rows(Path(args.rank_results))
                if args.recipe is None or r["recipe"] == args.recipe]
        if not rows:
            raise SystemExit(f"report --protocol rank: no rows in {args.rank_results}; run "
                             "bench_macro.py rank first")
        print(rank_table(rows))
        return
    if args.protocol == "finetune":  # macro_finetune.py's rows, in a file of their own
        path = Path(args.finetune_results)
        rows = read_rows(path) if path.is_file() else []
        if args.seeds is not None:  # the same searches under two trainings, side by side
            rows = [r for r in rows if r["seed"] in args.seeds]
        if not rows:
            raise SystemExit(f"report --protocol finetune: no rows in {path}"
                             + (" of seeds --seeds names" if args.seeds else "")
                             + "; run bench_macro.py finetune first")
        print(finetune_table(rows))
        sweeps = read_rows(Path(args.results)) if Path(args.results).is_file() else []
        twins = {(r["seed"], r["budget_ms"]): r for r in sweeps if r.get("protocol") == "sweep"}
        unfiltered = unfiltered_table(rows, twins)
        if unfiltered:
            print("\nwithout the fewest-skip filter (the same searches):")
            print(unfiltered)
        for tuning in sorted({setting_of(r) for r in rows}):
            print(f"\nby skip layers, {setting_name(tuning)} (each less its shortlist's "
                  "mean):")
            print(skip_bias([r for r in rows if setting_of(r) == tuning]))
            print(f"\nby layer, {setting_name(tuning)} (each less its shortlist's mean):")
            print(layer_bias([r for r in rows if setting_of(r) == tuning]))
        return
    rows = read_rows(Path(args.results))
    if args.seeds is not None:
        rows = [r for r in rows if r["seed"] in args.seeds]
    if args.cpu is not None:  # seeds give other searches on another CPU model: compare alike
        rows = [r for r in rows if args.cpu.lower() in (r.get("cpu") or "").lower()]
    # the sweep's rows (--protocol sweep) apart from those the recipes were chosen on
    rows = [r for r in rows if r.get("protocol") == args.protocol]
    if args.since is not None:  # the sweeps run after a recipe was chosen
        rows = [r for r in rows if (r.get("sweep_started") or r.get("date") or "") >= args.since]
    if args.paired:  # two recipes, search by search: macro_paired.py
        report_paired(rows, *args.paired)
        return
    _, lut, truth, lat, naswot = setting(args)
    if args.rerank_by:  # each recorded check decided again by the other rule, beside it
        rows += [r for r in (redecided(r, args.rerank_by, truth, lut, lat, naswot)
                             for r in rows) if r]
    if args.recipe is not None:  # one recipe's rows (and their re-decided copies) alone
        rows = [r for r in rows if args.recipe in (r["recipe"], r.get("redecided_from"))]
    if args.protocol == "sweep":
        if not rows:
            raise SystemExit("report --protocol sweep: no sweep rows (as kept by --recipe, "
                             "--seeds and --cpu); run bench_macro.py sweep first")
        report_sweep(rows, truth)
        provenance(rows)
        if args.png:  # the sweep's found networks and controls over every network
            draw(rows, truth, lat, Path(args.png))
        return
    order = list(dict.fromkeys(r["recipe"] for r in rows))
    rows.sort(key=lambda r: (order.index(r["recipe"]), r["budget_ms"], r["seed"]))
    if args.by_budget:  # the short form: one line per budget, then the summary
        by_budget(rows)
        summary(rows, truth)
        provenance(rows)
        if args.png:
            draw(rows, truth, lat, Path(args.png))
        return
    print_table(rows)
    summary(rows, truth)
    provenance(rows)
    simple_rules(rows, truth, lut, lat, naswot if args.naswot_window else None)
    headroom(rows, truth, lat)
    if args.png:
        draw(rows, truth, lat, Path(args.png))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["search", "score", "pick", "sweep", "rank", "finetune",
                                     "report"])
    ap.add_argument("runs", nargs="*", help="score, rank: finished search run directories")
    ap.add_argument("--config", default="configs/macro.yaml")
    ap.add_argument("--set", action="append", default=[], help="extra config key=value")
    ap.add_argument("--recipe", default=None, help="search: a name for the settings --set "
                    "makes (default: named from the config settings that decide the search); "
                    "report: keep only the rows of this recipe")
    ap.add_argument("--quantiles", type=float, nargs="+", default=None,
                    help="budgets at these quantiles of the space's predicted latencies "
                         "(default 0.2 0.4 0.6 0.8; sweep: 0.05 to 0.95 by 0.05, or a part)")
    ap.add_argument("--seeds-per-budget", type=int, default=2,
                    help="sweep: searches at each budget, each with a freshly drawn seed")
    ap.add_argument("--protocol", choices=["sweep", "rank", "finetune"], default=None,
                    help="report: the sweep's rows and tables (default: the other rows, "
                         "those the recipes were chosen on)")
    ap.add_argument("--target-ms", type=float, nargs="+", default=None,
                    help="budgets in ms, instead of --quantiles")
    ap.add_argument("--seeds", type=int, nargs="+", default=None,
                    help="search: the search seeds (default 0 1 2); report: only these seeds' "
                         "rows, so that recipes are compared on the same seeds")
    ap.add_argument("--since", default=None, metavar="ISO_TIME",
                    help="report: only rows of sweeps started (or searches dated) at or after "
                         "this time, e.g. 2026-12-06T16:13: the sweeps run after a recipe was "
                         "chosen")
    ap.add_argument("--cpu", default=None,
                    help="report: only rows searched on a CPU whose model name contains this "
                         "(rows record it since 2026-11-27)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=1, help="searches at a time (threads split)")
    ap.add_argument("--rank", type=int, default=0,
                    help="search, score: score this many random networks one-shot (Kendall "
                         "tau); rank: networks of each window (default 40)")
    ap.add_argument("--rank-seed", type=int, default=0)
    ap.add_argument("--rerank", type=int, default=None,
                    help="decide by the one-shot check of this many networks instead of the "
                         "search's search.rerank (0: the most probable)")
    ap.add_argument("--rerank-by", choices=RULES, default=None,
                    help="decide by this search.rerank_by instead of the search's; report: "
                         "add each recorded check decided again by it (rules that weigh theta: "
                         "rows from 2026-12-06 on, which keep each network's log-probability)")
    ap.add_argument("--alternatives", choices=["yes", "no"], default=None,
                    help="score: check each layer's alternatives too "
                         "(search.rerank_alternatives), or not, whatever the search did")
    ap.add_argument("--floor", type=float, default=None,
                    help="decide with this loss.target_floor instead of the search's")
    ap.add_argument("--truth", default=TRUTH, help="NAS-Bench-Macro folder or file")
    ap.add_argument("--out", default="runs/bench-macro")
    ap.add_argument("--results", default="bench/results/macro.jsonl")
    ap.add_argument("--rank-results", default="bench/results/macro_rank.jsonl",
                    help="rank: where its rows go; report --protocol rank reads them")
    ap.add_argument("--finetune-epochs", type=float, nargs="+", default=[1.0],
                    help="finetune: epochs of the weight split to train the shortlist on "
                         "(each a row, from the search's own weights)")
    ap.add_argument("--finetune-lr", type=float, default=0.01,
                    help="finetune: the SGD learning rate of that training")
    ap.add_argument("--finetune-split", action="store_true",
                    help="finetune: a copy of the weights per number of skip layers in the "
                         "shortlist, each fine-tuned on its networks apart")
    ap.add_argument("--finetune-results", default="bench/results/macro_finetune.jsonl",
                    help="finetune: where its rows go; report --protocol finetune reads them")
    ap.add_argument("--png", default=None, help="report: where to draw the picture")
    ap.add_argument("--paired", nargs=2, metavar=("A", "B"), default=None,
                    help="report: compare recipes A and B search by search, paired by budget "
                         "and seed (macro_paired.py), instead of the table")
    ap.add_argument("--by-budget", action="store_true",
                    help="report: one line per budget over the kept rows (median and worst "
                         "found network, gap, control) instead of one per search, then the "
                         "summary (and the picture with --png); no rules or headroom")
    ap.add_argument("--naswot-window", action="store_true",
                    help="report: also score every network spending 90 to 100%% of each budget "
                         "by NASWOT and look the best one up (a search with no training)")
    args = ap.parse_args(argv)
    {"search": search, "score": score, "pick": picks, "sweep": sweep, "rank": rank,
     "finetune": finetune, "report": report}[args.mode](args)


if __name__ == "__main__":
    main()
